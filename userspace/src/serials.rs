//! Zone serials a secondary can follow (RFC 1982 arithmetic): they increase on every change of a
//! zone's content, never go back across restarts, and are equal on every node that saw the same
//! Kubernetes history.
//!
//! The scheme:
//! - A zone keeps its serial while its content (a digest of its records and SOA fields) stays
//!   the same.
//! - When the content changes, the serial becomes twice the Kubernetes *revision* behind the
//!   change (the `resourceVersion` of the event, etcd's revision: one counter for the whole
//!   cluster, the same on every node), an even number; or, if that is not greater, the next odd
//!   number above the previous serial. Even serials name what a revision explains, odd ones what
//!   it does not (a record-file or configuration change, events applied in another order): a
//!   change counted up on one node never takes the serial another node gives a revision.
//! - A source that (re)lists learns the collection's revision, which is at least that of every
//!   event any node has seen before: a node that restarts or relists never gives a serial below
//!   another node's for older content.
//! - Serials and contents are kept in a state file, so that a restart with unchanged content
//!   keeps the serial (the same as the other nodes'), and one with changed content goes up.
//! - Without Kubernetes (configuration and record file only), a zone starts at a serial made
//!   from its content (equal on nodes given the same file) and counts up by one per change.
//! - Each reverse zone is a zone of its own here (its apex, the digest of its PTR records): its
//!   serial moves only when its own PTR records do, so a pod change NOTIFYs the forward zone and
//!   the one reverse zone its address is in, not every reverse zone.
//!
//! What holds on one node: one serial names one content of a zone (a zone's serial changes
//! exactly when its digest does), and the serial never goes below one the node offered before,
//! restarts included (the state file is written after the records it describes, see
//! `persist.rs`). Across nodes: an even serial is a revision's, the same content on every node
//! given the same configuration and record file; an odd one is a node's own step, and may name
//! other content on another node.

use std::{collections::BTreeMap, path::Path};

use anyhow::Context;
use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize};
use tracing::warn;

/// The state file's format: a file of another version is not read. Format 1 had one serial for
/// all reverse zones (`reverse`); it is read, and that serial becomes the floor of every reverse
/// zone first numbered on its own, so that none goes below what format 1 offered.
const FORMAT: u32 = 2;
/// The format before reverse zones were numbered one by one.
const FORMAT_SHARED_REVERSE: u32 = 1;

/// Whether `a` is greater than `b` in serial number arithmetic (RFC 1982 §3.2, SERIAL_BITS 32).
pub fn serial_gt(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// A Kubernetes revision as a serial: twice its low 31 bits, an even number (odd serials are left
/// to changes no revision explains). Revisions grow by far less than 2^30 between two changes of
/// a zone, so the serial grows with them in RFC 1982 arithmetic.
pub fn serial_of_revision(revision: u64) -> u32 {
    (revision as u32).wrapping_mul(2)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    serial: u32,
    content: u64,
}

/// What the state file holds: a copy of the serials' state, written by the persister
/// (the persister, `persist.rs`) off the publication path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    format: u32,
    /// The highest Kubernetes revision seen.
    #[serde(default)]
    revision: Option<u64>,
    /// Format 1: the one serial of every reverse zone; since: the floor of a reverse zone not
    /// in `zones` yet (what format 1 may have offered for it).
    #[serde(default)]
    reverse: Option<u32>,
    /// Forward and reverse zones, by apex.
    zones: BTreeMap<String, Kept>,
}

/// Assigns serials and remembers them; [`Serials::take_changes`] hands what changed to be kept
/// across restarts.
pub struct Serials {
    zones: BTreeMap<Name, Kept>,
    /// The highest Kubernetes revision behind the data; None without Kubernetes.
    revision: Option<u64>,
    /// Serials follow Kubernetes revisions: a zone numbered before any revision is known starts
    /// at 1, which the first revision supersedes (a serial from its content could be "above"
    /// every revision in RFC 1982 terms, and leave the zone counting by one for good).
    follows_revisions: bool,
    /// What a reverse zone numbered for the first time starts above (the shared reverse serial
    /// of a format 1 file): it may have been offered under that serial before.
    reverse_floor: Option<u32>,
    changed: bool,
}

impl Serials {
    /// Serials from nothing.
    pub fn new() -> Self {
        Self {
            zones: BTreeMap::new(),
            revision: None,
            follows_revisions: false,
            reverse_floor: None,
            changed: false,
        }
    }

    /// Serials as kept in `file` (a file that is missing or cannot be read is reported and
    /// ignored: the serials start again from the data).
    pub fn load(file: &Path) -> Self {
        let mut serials = Self::new();
        match load(file) {
            Ok(Some(state)) => {
                serials.revision = state.revision;
                serials.reverse_floor = state.reverse;
                serials.zones = state
                    .zones
                    .into_iter()
                    .filter_map(|(apex, kept)| Some((Name::from_ascii(&apex).ok()?, kept)))
                    .collect();
            }
            Ok(None) => {}
            Err(err) => {
                warn!(file = %file.display(), err = format!("{err:#}"), "cannot read the zone serials; they start again from the data")
            }
        }
        serials
    }

    /// Serials follow Kubernetes revisions (a Kubernetes source is configured).
    pub fn follow_revisions(&mut self) {
        self.follows_revisions = true;
    }

    /// A source says the data now stands at Kubernetes revision `revision`.
    pub fn note_revision(&mut self, revision: u64) {
        if self.revision.is_none_or(|r| revision > r) {
            self.revision = Some(revision);
            self.changed = true;
        }
    }

    /// The serial of the zone at `apex` (forward or reverse) whose content is now `content`.
    pub fn serial_for(&mut self, apex: &Name, content: u64) -> u32 {
        let candidate = self.revision.map(serial_of_revision);
        let serial = match self.zones.get(apex) {
            Some(kept) if kept.content == content => return kept.serial,
            Some(kept) => self.above(candidate, kept.serial),
            None => match self.reverse_floor.filter(|_| is_reverse(apex)) {
                Some(floor) => self.above(candidate, floor),
                None => match candidate {
                    Some(c) => c,
                    None if self.follows_revisions => 1,
                    None => (content ^ (content >> 32)) as u32,
                },
            },
        };
        self.zones.insert(apex.clone(), Kept { serial, content });
        self.changed = true;
        serial
    }

    /// The state to keep, if anything changed since the last call.
    pub fn take_changes(&mut self) -> Option<StateFile> {
        if !std::mem::take(&mut self.changed) {
            return None;
        }
        Some(StateFile {
            format: FORMAT,
            revision: self.revision,
            reverse: self.reverse_floor,
            zones: self
                .zones
                .iter()
                .map(|(apex, kept)| (apex.to_ascii(), *kept))
                .collect(),
        })
    }
}

impl Serials {
    /// The serial after `before`: the revision's if it is greater; else, following revisions, the
    /// next odd serial (an even one may be another node's serial of a revision, for other
    /// content); without Kubernetes, one more.
    fn above(&self, candidate: Option<u32>, before: u32) -> u32 {
        match candidate {
            Some(c) if serial_gt(c, before) => c,
            _ if self.follows_revisions || self.revision.is_some() => next_odd(before),
            _ => before.wrapping_add(1),
        }
    }
}

/// The smallest odd serial greater than `before`.
fn next_odd(before: u32) -> u32 {
    before.wrapping_add(1) | 1
}

/// Whether `apex` is a reverse zone's (under in-addr.arpa or ip6.arpa).
fn is_reverse(apex: &Name) -> bool {
    let text = apex.to_ascii().to_ascii_lowercase();
    text.ends_with("in-addr.arpa.") || text.ends_with("ip6.arpa.")
}

impl Default for Serials {
    fn default() -> Self {
        Self::new()
    }
}

fn load(path: &Path) -> anyhow::Result<Option<StateFile>> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).context("cannot read the file"),
    };
    let state: StateFile = serde_json::from_slice(&text).context("not a serials file")?;
    if state.format != FORMAT && state.format != FORMAT_SHARED_REVERSE {
        anyhow::bail!(
            "format {} (this agent reads {FORMAT_SHARED_REVERSE} and {FORMAT})",
            state.format
        );
    }
    Ok(Some(state))
}

/// Replaces the state file at `path` with `state`.
pub fn store(path: &Path, state: &StateFile) -> anyhow::Result<()> {
    crate::atomic_file::replace(path, |out| {
        serde_json::to_writer(out, state).map_err(std::io::Error::other)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apex() -> Name {
        Name::from_ascii("example.").unwrap()
    }

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(serial_gt(1, 0));
        assert!(serial_gt(0, u32::MAX));
        assert!(!serial_gt(0, 1));
        assert!(!serial_gt(5, 5));
        assert!(serial_gt(1 << 30, 0) && !serial_gt(0, 1 << 30));
    }

    #[test]
    fn the_serial_changes_only_with_the_content_and_follows_the_revision() {
        let mut s = Serials::new();
        s.note_revision(100);
        assert_eq!(s.serial_for(&apex(), 1), 200);
        s.note_revision(120);
        // The revision moved but the zone did not change.
        assert_eq!(s.serial_for(&apex(), 1), 200);
        assert_eq!(s.serial_for(&apex(), 2), 240);
        // A change the revision does not explain (another source) takes the next odd serial,
        // which no node gives a revision.
        assert_eq!(s.serial_for(&apex(), 3), 241);
        assert_eq!(s.serial_for(&apex(), 4), 243);
        s.note_revision(110);
        assert_eq!(s.serial_for(&apex(), 5), 245);
        // The next revision that is greater brings the zone back to even serials.
        s.note_revision(130);
        assert_eq!(s.serial_for(&apex(), 6), 260);
    }

    #[test]
    fn a_change_counted_up_never_takes_the_serial_of_a_revision() {
        // Node A counts two record-file changes up at revision 100; node B, down meanwhile,
        // comes back at revision 101 with the second file: the serials differ where the
        // contents do.
        let (mut a, mut b) = (Serials::new(), Serials::new());
        for s in [&mut a, &mut b] {
            s.note_revision(100);
            assert_eq!(s.serial_for(&apex(), 1), 200);
        }
        let first_edit = a.serial_for(&apex(), 2);
        let second_edit = a.serial_for(&apex(), 3);
        b.note_revision(101);
        let b_serial = b.serial_for(&apex(), 4);
        assert_eq!((first_edit, second_edit, b_serial), (201, 203, 202));
        assert!(serial_gt(b_serial, 200));
    }

    #[test]
    fn revisions_wrap_to_even_serials_that_still_grow() {
        let mut s = Serials::new();
        s.note_revision((1 << 31) - 1);
        let before = s.serial_for(&apex(), 1);
        assert_eq!(before, u32::MAX - 1);
        s.note_revision(1 << 31);
        let after = s.serial_for(&apex(), 2);
        assert_eq!(after, 0);
        assert!(serial_gt(after, before));
        assert_eq!(s.serial_for(&apex(), 3), 1);
    }

    #[test]
    fn with_kubernetes_a_zone_numbered_before_any_revision_starts_at_1() {
        let mut s = Serials::new();
        s.follow_revisions();
        assert_eq!(s.serial_for(&apex(), 0xffff_ffff_0000_0000), 1);
        // Changed again before any revision: odd.
        assert_eq!(s.serial_for(&apex(), 1), 3);
        s.note_revision(40);
        assert_eq!(s.serial_for(&apex(), 2), 80);
    }

    #[test]
    fn each_reverse_zone_moves_with_its_own_content_only() {
        let one = Name::from_ascii("0.18.198.in-addr.arpa.").unwrap();
        let two = Name::from_ascii("1.18.198.in-addr.arpa.").unwrap();
        let mut s = Serials::new();
        s.note_revision(100);
        assert_eq!(s.serial_for(&one, 1), 200);
        assert_eq!(s.serial_for(&two, 1), 200);
        s.note_revision(120);
        // Only the first zone's PTR records changed: the second keeps its serial.
        assert_eq!(s.serial_for(&one, 2), 240);
        assert_eq!(s.serial_for(&two, 1), 200);
    }

    #[test]
    fn a_format_1_file_is_read_and_no_reverse_zone_goes_below_its_shared_serial() {
        let dir = std::env::temp_dir().join(format!("hpd-serials-v1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("serials.json");
        std::fs::write(
            &file,
            br#"{"format":1,"revision":500,"reverse":503,"zones":{"example.":{"serial":500,"content":1}}}"#,
        )
        .unwrap();
        let mut s = Serials::load(&file);
        assert_eq!(s.serial_for(&apex(), 1), 500, "the forward zone is kept");
        let reverse = Name::from_ascii("0.18.198.in-addr.arpa.").unwrap();
        // Format 1 offered 503 for every reverse zone: each starts above it (here at the
        // revision's serial, 2 × 500).
        assert_eq!(s.serial_for(&reverse, 7), 1000);
        assert_eq!(s.serial_for(&reverse, 7), 1000);
        let mut no_revision = Serials::load(&file);
        no_revision.revision = None;
        no_revision.follow_revisions();
        assert_eq!(
            no_revision.serial_for(&reverse, 7),
            505,
            "the next odd serial"
        );
        s.note_revision(600);
        assert_eq!(s.serial_for(&reverse, 8), 1200);
        let kept = s.take_changes().unwrap();
        assert_eq!(kept.format, FORMAT);
        store(&file, &kept).unwrap();
        let mut again = Serials::load(&file);
        assert_eq!(again.serial_for(&reverse, 8), 1200);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_kubernetes_zones_start_from_their_content_and_count_up() {
        let mut a = Serials::new();
        let mut b = Serials::new();
        let first = a.serial_for(&apex(), 0xdead_beef_0000_0001);
        assert_eq!(first, b.serial_for(&apex(), 0xdead_beef_0000_0001));
        assert_eq!(a.serial_for(&apex(), 7), first.wrapping_add(1));
    }

    #[test]
    fn a_restart_keeps_the_serial_of_unchanged_content_and_goes_up_for_changed_content() {
        let dir = std::env::temp_dir().join(format!("hpd-serials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("serials.json");
        let mut s = Serials::load(&file);
        s.note_revision(500);
        assert_eq!(s.serial_for(&apex(), 1), 1000);
        store(&file, &s.take_changes().unwrap()).unwrap();
        assert!(s.take_changes().is_none(), "nothing changed since");
        let mut again = Serials::load(&file);
        assert_eq!(again.serial_for(&apex(), 1), 1000);
        // Changed while down, and no newer revision known yet: the next odd serial.
        assert_eq!(again.serial_for(&apex(), 2), 1001);
        std::fs::write(&file, b"not json").unwrap();
        let mut broken = Serials::load(&file);
        assert_eq!(broken.serial_for(&apex(), 2), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
