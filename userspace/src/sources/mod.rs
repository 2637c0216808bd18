//! Where records come from, and what sources tell the publisher: [`Update`]s carrying a
//! [`Delta`], what changed since the source's last update. A source that knows what changed
//! (the Kubernetes watches) sends the groups it added, replaced or removed; one that rereads
//! everything (the record file, the configuration, records saved by the last run) sends its
//! whole state, and the publisher finds the difference. Either way, what reaches the table
//! compiler is only what changed.

pub mod file;
pub mod file_watch;
mod group_key;
pub mod kube;

use std::time::Instant;

use hickory_proto::rr::Name;

use hostport_dns_core::{
    dns::WireName,
    records::{RecordGroup, SourceRecord},
    zone::ZoneSpec,
};

pub use group_key::GroupKey;

/// A source's record groups by key, as the publisher holds them: a persistent map, so the
/// persister gets a copy for nothing. A B-tree, not a hash trie: its nodes are full (about 50
/// bytes a group at 100k groups, where the trie's sparse leaves took 180).
pub type Groups = imbl::OrdMap<GroupKey, RecordGroup>;

/// Everything one source says at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Zones the source defines (the record file defines its own).
    pub zones: Vec<ZoneSpec>,
    /// The records, in the groups they change in.
    pub groups: Vec<(GroupKey, RecordGroup)>,
    /// Zones (defined by any source) whose data this source does not have yet: they answer
    /// SERVFAIL (Not Ready), never a negative answer made from a partial view.
    pub pending_zones: Vec<Name>,
}

impl Snapshot {
    /// A snapshot whose records form one group per owner name (a record file, the
    /// configuration's static records): a change to one name is a change to one group.
    pub fn new(zones: Vec<ZoneSpec>, records: Vec<SourceRecord>) -> Self {
        let mut by_name: std::collections::BTreeMap<WireName, Vec<SourceRecord>> =
            Default::default();
        for record in records {
            by_name.entry(record.name.clone()).or_default().push(record);
        }
        Self {
            zones,
            groups: by_name
                .into_iter()
                .map(|(name, records)| (GroupKey::from(name), records.into()))
                .collect(),
            pending_zones: Vec::new(),
        }
    }

    /// Every record, group after group.
    pub fn records(&self) -> impl Iterator<Item = SourceRecord> + '_ {
        self.groups.iter().flat_map(|(_, group)| group.iter())
    }

    pub fn record_count(&self) -> usize {
        self.groups.iter().map(|(_, group)| group.len()).sum()
    }
}

/// What changed in one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// The source's whole state: its zones, its groups (every group it held before and does not
    /// name is gone), its pending zones.
    Whole(Snapshot),
    /// Groups added or replaced (`Some`) or gone (`None`), in order, and the zones pending when
    /// that changed.
    Groups {
        changes: Vec<(GroupKey, Option<RecordGroup>)>,
        pending_zones: Option<Vec<Name>>,
    },
}

/// One source's news.
pub struct Update {
    pub source: &'static str,
    pub delta: Delta,
    /// When the change that led to it was observed.
    pub observed: Instant,
    /// The source's whole, current state is known: false while it serves saved records or
    /// some of its zones are pending (it has not synced).
    pub complete: bool,
    /// The Kubernetes revision (resourceVersion) the source is at, when it knows it: what the
    /// zones' serials follow (see `crate::serials`).
    pub revision: Option<u64>,
}

impl Update {
    /// A whole state, complete, observed now, with no revision (the configuration, the record
    /// file).
    pub fn whole(source: &'static str, snapshot: Snapshot) -> Self {
        Self {
            source,
            delta: Delta::Whole(snapshot),
            observed: Instant::now(),
            complete: true,
            revision: None,
        }
    }
}
