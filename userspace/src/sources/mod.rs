//! Where records come from. Each source publishes complete snapshots of its records; the agent
//! merges the latest snapshot of every source and compiles the table from them.

pub mod file;
pub mod file_watch;
pub mod kube;

use crate::{
    records::{RecordGroup, SourceRecord},
    zone::ZoneSpec,
};

/// Everything one source says at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Zones the source defines (the record file defines its own).
    pub zones: Vec<ZoneSpec>,
    /// The records, in the groups they change in.
    pub groups: Vec<RecordGroup>,
    /// Zones (defined by any source) whose data this source does not have yet: they answer
    /// SERVFAIL (Not Ready), never a negative answer made from a partial view.
    pub pending_zones: Vec<hickory_proto::rr::Name>,
}

impl Snapshot {
    /// A snapshot whose records form one group.
    pub fn new(zones: Vec<ZoneSpec>, records: Vec<SourceRecord>) -> Self {
        let groups = if records.is_empty() {
            Vec::new()
        } else {
            vec![records.into()]
        };
        Self {
            zones,
            groups,
            pending_zones: Vec::new(),
        }
    }

    /// Every record, group after group.
    pub fn records(&self) -> impl Iterator<Item = &SourceRecord> {
        self.groups.iter().flat_map(|group| group.iter())
    }

    pub fn record_count(&self) -> usize {
        self.groups.iter().map(|group| group.len()).sum()
    }
}
