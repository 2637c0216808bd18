//! The last versions of the table, for IXFR: a version is the whole table as it was published
//! (tables are persistent maps, so an old version costs only what changed since), with the
//! names that changed from the version before it, so that a difference is computed from those
//! names alone, never by walking the zone.
//!
//! Kept: at most a configured number of versions, and at most [`HISTORY_BYTES`] of what the old
//! versions hold apart from the newest (estimated from the names changed); a secondary whose
//! serial is older than every kept version gets the whole zone.

use std::{collections::VecDeque, sync::Arc};

use hickory_proto::rr::Name;
use rustc_hash::FxHashSet;

use super::zone_data::ServedZone;
use hostport_dns_core::{dns::WireName, table::RecordTable};

/// What the old versions may hold apart from the newest.
pub const HISTORY_BYTES: usize = 16 << 20;
/// What an old version holds per name changed after it, at most: the persistent maps copy the
/// path to each change (name → node, address → names, the address set). Measured with 100,000
/// names: 16 KB per changed name when one name changes per version, 9 KB at 10, 6 KB at 100;
/// the largest is taken, so that the estimate never falls short.
pub const BYTES_PER_CHANGED_NAME: usize = 16 << 10;

struct Version {
    table: Arc<RecordTable>,
    /// The names that differ from the version before (None: any may, e.g. a rebuilt table).
    changed: Option<Box<[WireName]>>,
}

impl Version {
    /// Names this version changed, as its weight: a rebuilt table counts every name.
    fn weight(&self) -> usize {
        self.changed
            .as_ref()
            .map_or(self.table.nodes().len(), |c| c.len())
    }
}

pub struct History {
    versions: VecDeque<Version>,
    capacity: usize,
    /// Names changed by every version but the oldest: what the older versions hold apart.
    changed_names: usize,
}

/// A kept version a secondary's serial names, and what changed since.
pub struct Found {
    pub table: Arc<RecordTable>,
    pub zone: ServedZone,
    /// The names that changed from this version to the newest (None: any may have).
    pub changed: Option<Vec<WireName>>,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        Self {
            versions: VecDeque::with_capacity(capacity.min(1024)),
            capacity,
            changed_names: 0,
        }
    }

    /// Keeps `table` as a version, unless no zone's serial differs from the newest version's.
    /// `changed`: the names that differ from the table published before it.
    pub fn push(&mut self, table: &Arc<RecordTable>, changed: Option<&[WireName]>) {
        if self.capacity == 0 {
            return;
        }
        let serials = |t: &RecordTable| -> Vec<(Name, u32)> {
            t.zones()
                .iter()
                .map(|z| (z.spec.apex.clone(), z.serial))
                .collect()
        };
        if let Some(last) = self.versions.back_mut()
            && serials(&last.table) == serials(table)
        {
            // Equal serials, equal content: the newest version stands for both, and what this
            // table changed is what the next one is compared across.
            if let (Some(kept), Some(more)) = (&last.changed, changed) {
                let mut names: Vec<WireName> = kept.iter().chain(more).cloned().collect();
                names.sort_unstable();
                names.dedup();
                self.changed_names += names.len() - kept.len();
                last.changed = Some(names.into());
            } else if changed.is_none() {
                last.changed = None;
            }
            last.table = table.clone();
            self.trim();
            return;
        }
        let version = Version {
            table: table.clone(),
            changed: changed.map(Into::into),
        };
        if !self.versions.is_empty() {
            self.changed_names += version.weight();
        }
        self.versions.push_back(version);
        self.trim();
    }

    /// Drops the oldest versions beyond the count or the bytes allowed; the newest stays.
    fn trim(&mut self) {
        let over = |h: &Self| {
            h.versions.len() > h.capacity
                || h.changed_names.saturating_mul(BYTES_PER_CHANGED_NAME) > HISTORY_BYTES
        };
        while self.versions.len() > 1 && over(self) {
            self.versions.pop_front();
            // The new oldest version's changes are relative to one no longer kept.
            if let Some(front) = self.versions.front() {
                self.changed_names -= front.weight().min(self.changed_names);
            }
        }
    }

    /// The newest kept version in which the zone at `apex` had `serial`.
    pub fn find(&self, apex: &Name, serial: u32) -> Option<Found> {
        let at = self.versions.iter().rposition(|version| {
            ServedZone::find(&version.table, apex).is_some_and(|zone| zone.serial() == serial)
        })?;
        let table = self.versions[at].table.clone();
        let zone = ServedZone::find(&table, apex)?;
        let mut changed = FxHashSet::default();
        for later in self.versions.iter().skip(at + 1) {
            match &later.changed {
                Some(names) => changed.extend(names.iter().cloned()),
                None => {
                    return Some(Found {
                        table,
                        zone,
                        changed: None,
                    });
                }
            }
        }
        Some(Found {
            table,
            zone,
            changed: Some(changed.into_iter().collect()),
        })
    }

    pub fn len(&self) -> usize {
        self.versions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// Names changed by the kept versions after the oldest, as the byte bound counts them.
    pub fn changed_names(&self) -> usize {
        self.changed_names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostport_dns_core::{
        records::{RecordData, SourceRecord},
        table::TableBuilder,
        zone::ZoneSpec,
    };

    fn record(i: usize, address: u32) -> SourceRecord {
        let name = Name::from_ascii(format!("n{i}.example.")).expect("a name");
        SourceRecord::new(&name, None, RecordData::A(address.into()))
    }

    /// A builder of 100 names, `n<i>.example.` at address i.
    fn builder() -> TableBuilder {
        let zone = ZoneSpec::with_defaults(Name::from_ascii("example.").expect("a name"));
        let (mut builder, _) = TableBuilder::new(&[zone]);
        let records: Vec<_> = (0..100).map(|i| record(i, i as u32)).collect();
        builder.add(&records);
        builder.finish();
        builder
    }

    fn change(builder: &mut TableBuilder, i: usize, from: u32, to: u32) -> Vec<WireName> {
        builder.remove([&record(i, from)]);
        builder.add([&record(i, to)]);
        builder.finish()
    }

    /// A history of three versions: the first, n1 moved, n2 moved (with its names known or not,
    /// as after a rebuild); and the first version's serial.
    fn three_versions(last_names_known: bool) -> (History, u32) {
        let mut builder = builder();
        let mut history = History::new(64);
        history.push(&Arc::new(builder.table().clone()), None);
        let first_serial = builder.table().zones()[0].serial;
        let changed = change(&mut builder, 1, 1, 1001);
        history.push(&Arc::new(builder.table().clone()), Some(&changed));
        let changed = change(&mut builder, 2, 2, 1002);
        let last = last_names_known.then_some(changed.as_slice());
        history.push(&Arc::new(builder.table().clone()), last);
        (history, first_serial)
    }

    #[test]
    fn the_names_changed_since_a_version_are_the_union_of_those_after_it() {
        let (history, first_serial) = three_versions(true);
        let apex = Name::from_ascii("example.").expect("a name");
        let found = history
            .find(&apex, first_serial)
            .expect("the first version");
        let mut names: Vec<String> = found
            .changed
            .expect("known")
            .iter()
            .map(ToString::to_string)
            .collect();
        names.sort();
        assert_eq!(names, ["n1.example.", "n2.example."]);
        assert_eq!(history.changed_names(), 2);
    }

    #[test]
    fn old_versions_go_when_what_they_hold_passes_the_byte_bound() {
        let mut builder = builder();
        let mut history = History::new(10_000);
        history.push(&Arc::new(builder.table().clone()), None);
        let allowed = HISTORY_BYTES / BYTES_PER_CHANGED_NAME;
        for round in 0..allowed as u32 + 50 {
            let i = round as usize % 100;
            let changed = change_to(&mut builder, i, 100_000 + round);
            history.push(&Arc::new(builder.table().clone()), Some(&changed));
        }
        assert!(
            history.changed_names() <= allowed,
            "{}",
            history.changed_names()
        );
        assert!(history.len() <= allowed + 1, "{} versions", history.len());
        assert!(history.len() > 1, "recent versions stay");
    }

    /// Moves name `i` to `to`, whatever it held.
    fn change_to(builder: &mut TableBuilder, i: usize, to: u32) -> Vec<WireName> {
        let name = Name::from_ascii(format!("n{i}.example.")).expect("a name");
        let held = builder
            .table()
            .node(&name)
            .map(|n| n.a.clone())
            .unwrap_or_default();
        for old in held {
            builder.remove([&record(i, old.into())]);
        }
        builder.add([&record(i, to)]);
        builder.finish()
    }

    #[test]
    fn a_rebuilt_table_leaves_no_known_changes_across_it() {
        let (history, first_serial) = three_versions(false);
        let apex = Name::from_ascii("example.").expect("a name");
        let found = history
            .find(&apex, first_serial)
            .expect("the first version");
        assert!(found.changed.is_none(), "a rebuild in between: compare all");
    }
}
