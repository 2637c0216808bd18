//! The last versions of the table, for IXFR: a version is the whole table as it was published
//! (tables are persistent maps, so an old version costs only what changed since). A bounded
//! number is kept; a secondary whose serial is older than all of them gets the whole zone.

use std::{collections::VecDeque, sync::Arc};

use hickory_proto::rr::Name;

use super::zone_data::ServedZone;
use crate::table::RecordTable;

pub struct History {
    versions: VecDeque<Arc<RecordTable>>,
    capacity: usize,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        Self {
            versions: VecDeque::with_capacity(capacity.min(1024)),
            capacity,
        }
    }

    /// Keeps `table` as a version, unless no zone's serial differs from the newest version's.
    pub fn push(&mut self, table: &Arc<RecordTable>) {
        if self.capacity == 0 {
            return;
        }
        let serials = |t: &RecordTable| -> Vec<(Name, u32)> {
            t.zones()
                .iter()
                .map(|z| (z.spec.apex.clone(), z.serial))
                .collect()
        };
        if self
            .versions
            .back()
            .is_some_and(|last| serials(last) == serials(table))
        {
            return;
        }
        if self.versions.len() == self.capacity {
            self.versions.pop_front();
        }
        self.versions.push_back(table.clone());
    }

    /// The newest kept version in which the zone at `apex` had `serial`.
    pub fn find(&self, apex: &Name, serial: u32) -> Option<(Arc<RecordTable>, ServedZone)> {
        self.versions.iter().rev().find_map(|table| {
            let zone = ServedZone::find(table, apex)?;
            (zone.serial() == serial).then(|| (table.clone(), zone))
        })
    }

    pub fn len(&self) -> usize {
        self.versions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}
