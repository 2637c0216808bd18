//! Where records come from. Each source publishes complete snapshots of its records; the agent
//! merges the latest snapshot of every source and compiles the table from them.

pub mod file;
pub mod kube;

use crate::{records::SourceRecord, zone::ZoneSpec};

/// Everything one source says at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Zones the source defines (the record file defines its own).
    pub zones: Vec<ZoneSpec>,
    pub records: Vec<SourceRecord>,
}
