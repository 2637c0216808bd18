//! What the publisher holds of each source: its zones, its pending zones and its current record
//! groups by key, and how updates change them. Pure: applying a batch of updates says which
//! groups differ from what the table compiler holds, and whether the zones changed; nothing
//! here walks more than the groups an update names (a whole-state update names them all).

use std::collections::BTreeMap;

use hickory_proto::rr::Name;
use rustc_hash::FxHashMap;

use hostport_dns_core::{records::RecordGroup, zone::ZoneSpec};

use crate::sources::{Delta, GroupKey, Groups, Snapshot};

/// One source's current state.
#[derive(Clone, Default)]
pub struct SourceState {
    pub zones: Vec<ZoneSpec>,
    pub pending: Vec<Name>,
    pub groups: Groups,
    /// Records in `groups`.
    pub records: usize,
}

/// A group some update of a batch touched, as the table compiler holds it (before the batch).
pub type Touched = FxHashMap<(&'static str, GroupKey), Option<RecordGroup>>;

/// Every source's state, and what a batch of updates changed.
#[derive(Default)]
pub struct Held {
    sources: BTreeMap<&'static str, SourceState>,
}

/// What applying updates changed.
#[derive(Default)]
pub struct Changes {
    /// Groups whose records may differ from the compiler's, with the compiler's version.
    pub touched: Touched,
    /// Some source's zones or pending zones changed: the table is compiled anew.
    pub zones: bool,
}

impl Held {
    /// Whether `source` has delivered anything.
    pub fn has(&self, source: &str) -> bool {
        self.sources.contains_key(source)
    }

    pub fn source(&self, source: &str) -> Option<&SourceState> {
        self.sources.get(source)
    }

    /// Every source's state.
    pub fn sources(&self) -> impl Iterator<Item = (&'static str, &SourceState)> {
        self.sources.iter().map(|(name, state)| (*name, state))
    }

    /// Every zone of every source, sorted by apex, each marked pending if any source says so.
    pub fn zones(&self) -> Vec<ZoneSpec> {
        let pending: std::collections::BTreeSet<&Name> =
            self.sources.values().flat_map(|s| &s.pending).collect();
        let mut zones: Vec<ZoneSpec> = self
            .sources
            .values()
            .flat_map(|s| s.zones.iter().cloned())
            .map(|mut zone| {
                zone.pending = pending.contains(&zone.apex);
                zone
            })
            .collect();
        zones.sort_by(|a, b| a.apex.cmp(&b.apex));
        zones
    }

    /// Applies `delta` from `source`, noting in `changes` the groups it touched (with their
    /// version before the first touch of the batch) and whether zones changed. A group replaced
    /// by one with the same records keeps its old version: nothing to compile.
    pub fn apply(&mut self, source: &'static str, delta: Delta, changes: &mut Changes) {
        let state = self.sources.entry(source).or_default();
        match delta {
            Delta::Whole(Snapshot {
                zones,
                groups,
                pending_zones,
            }) => {
                if zones != state.zones || pending_zones != state.pending {
                    changes.zones = true;
                    state.zones = zones;
                    state.pending = pending_zones;
                }
                let mut fresh: FxHashMap<GroupKey, RecordGroup> = groups.into_iter().collect();
                let gone: Vec<GroupKey> = state
                    .groups
                    .keys()
                    .filter(|key| !fresh.contains_key(*key))
                    .cloned()
                    .collect();
                for key in gone {
                    replace(state, source, key, None, changes);
                }
                for (key, group) in fresh.drain() {
                    replace(state, source, key, Some(group), changes);
                }
            }
            Delta::Groups {
                changes: groups,
                pending_zones,
            } => {
                if let Some(pending) = pending_zones
                    && pending != state.pending
                {
                    changes.zones = true;
                    state.pending = pending;
                }
                for (key, group) in groups {
                    replace(state, source, key, group, changes);
                }
            }
        }
    }
}

/// Puts `group` (or nothing) at `key`, noting the version it replaces the first time the batch
/// touches the key.
fn replace(
    state: &mut SourceState,
    source: &'static str,
    key: GroupKey,
    group: Option<RecordGroup>,
    changes: &mut Changes,
) {
    let old = state.groups.get(&key);
    let same = match (old, &group) {
        (Some(old), Some(new)) => RecordGroup::ptr_eq(old, new) || old == new,
        (None, None) => true,
        _ => false,
    };
    if same {
        return;
    }
    changes
        .touched
        .entry((source, key.clone()))
        .or_insert_with(|| old.cloned());
    state.records -= old.map_or(0, |old| old.len());
    state.records += group.as_ref().map_or(0, |group| group.len());
    match group {
        Some(group) => state.groups.insert(key, group),
        None => state.groups.remove(&key),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostport_dns_core::records::{RecordData, SourceRecord};

    fn group(ip: &str) -> RecordGroup {
        vec![SourceRecord {
            name: hostport_dns_core::dns::WireName::from_name(
                &Name::from_ascii("x.example.").unwrap(),
            ),
            ttl: None,
            data: RecordData::A(ip.parse().unwrap()),
        }]
        .into()
    }

    fn key(k: &str) -> GroupKey {
        GroupKey::from(k)
    }

    #[test]
    fn a_whole_state_touches_only_what_differs() {
        let mut held = Held::default();
        let mut changes = Changes::default();
        let snapshot = |groups: Vec<(GroupKey, RecordGroup)>| {
            Delta::Whole(Snapshot {
                groups,
                ..Snapshot::default()
            })
        };
        held.apply(
            "file",
            snapshot(vec![
                (key("a"), group("198.18.0.1")),
                (key("b"), group("198.18.0.2")),
            ]),
            &mut changes,
        );
        assert_eq!(changes.touched.len(), 2);
        let mut changes = Changes::default();
        // Same records in new allocations, one changed, one gone, one new.
        held.apply(
            "file",
            snapshot(vec![
                (key("a"), group("198.18.0.1")),
                (key("c"), group("198.18.0.3")),
            ]),
            &mut changes,
        );
        let mut touched: Vec<String> = changes.touched.keys().map(|(_, k)| k.to_string()).collect();
        touched.sort();
        assert_eq!(touched, ["b", "c"]);
        assert!(changes.touched[&("file", key("b"))].is_some(), "b was held");
        assert!(changes.touched[&("file", key("c"))].is_none(), "c is new");
        assert!(!changes.zones);
    }

    #[test]
    fn the_first_version_a_batch_touched_is_the_one_remembered() {
        let mut held = Held::default();
        let mut changes = Changes::default();
        let first = group("198.18.0.1");
        held.apply(
            "kubernetes",
            Delta::Groups {
                changes: vec![(key("p"), Some(first.clone()))],
                pending_zones: None,
            },
            &mut Changes::default(),
        );
        for ip in ["198.18.0.2", "198.18.0.3"] {
            held.apply(
                "kubernetes",
                Delta::Groups {
                    changes: vec![(key("p"), Some(group(ip)))],
                    pending_zones: None,
                },
                &mut changes,
            );
        }
        let before = changes.touched[&("kubernetes", key("p"))].clone();
        assert!(before.is_some_and(|b| RecordGroup::ptr_eq(&b, &first)));
        let now = &held.source("kubernetes").unwrap().groups[&key("p")];
        assert_eq!(*now, group("198.18.0.3"));
    }
}
