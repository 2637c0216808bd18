//! What the [`super::TableBuilder`] knows about one name: its zone, the names below it that hold
//! records, and its records with how many groups hold each.
//!
//! Memory: the records are held once, in the node the table serves. Most names hold each of
//! their records once (one pod, one file entry) and with one TTL; for those the node says
//! everything the builder needs, so the builder keeps no list of its own and, once a batch is
//! compiled, shares the very node the table holds (copied only by the next change to the name).
//! Only a name whose records are held by several groups, or carry different TTLs, keeps the
//! counted list it is compiled from. At 100,000 names of three addresses, the builder's own
//! copy took 14 MB.

use std::sync::Arc;

use super::{AddressSet, Node, RareSet};
use crate::records::RecordData;

/// A record as a counted name holds it: its data, its own TTL, and how many groups hold it.
/// Sorted by (data, TTL): the same data with several TTLs comes in a row.
type HeldRecord = (RecordData, Option<u32>, u32);

/// Records at one counted name up to which its vector grows by exactly one.
const EXACT_ROOM_UP_TO: usize = 8;

/// 24 bytes: at 100,000 names the builder's map of them takes some 4 MB. Its zone and whether
/// it is the apex are its node's (a name never changes zone).
pub(super) struct NameState {
    /// Names below it (up to its zone's apex) that hold records: while there are any, the name
    /// exists, as an empty non-terminal at least.
    pub holders_below: u32,
    /// Its node. Uncounted, it is the name's records themselves (each held once, all with the
    /// node's TTL), kept current by every change; counted, it is compiled from the list by
    /// [`NameState::settle`]. After a batch it is the table's own node.
    node: Arc<Node>,
    /// Every record with its holders, for a name the node alone cannot describe (a record held
    /// twice, records of different TTLs); None for most names. Boxed: one allocation more on
    /// the few counted names keeps every other name's state 16 bytes smaller.
    #[allow(clippy::box_collection)]
    counted: Option<Box<Vec<HeldRecord>>>,
}

impl NameState {
    pub fn new(zone: u32, apex: bool) -> Self {
        Self {
            holders_below: 0,
            node: Arc::new(Node {
                zone,
                apex,
                ..Node::default()
            }),
            counted: None,
        }
    }

    /// The zone the name is in.
    pub fn zone(&self) -> u32 {
        self.node.zone
    }

    fn holds_nothing(&self) -> bool {
        match &self.counted {
            Some(records) => records.is_empty(),
            None => self.node.is_empty(),
        }
    }

    pub fn can_go(&self) -> bool {
        self.holds_nothing() && self.holders_below == 0 && !self.node.apex
    }

    /// One more holder of the record; whether the name had no record before.
    pub fn hold(&mut self, data: &RecordData, ttl: Option<u32>) -> bool {
        let first = self.holds_nothing();
        let stays_uncounted =
            first || (ttl == self.node.ttl && position(&self.node, data).is_err());
        if self.counted.is_none() && !stays_uncounted {
            self.count();
        }
        match &mut self.counted {
            None => {
                let node = Arc::make_mut(&mut self.node);
                if first {
                    node.ttl = ttl;
                }
                insert(node, data);
            }
            Some(records) => match find(records, data, ttl) {
                Ok(at) => records[at].2 += 1,
                Err(at) => {
                    // Most names hold a few records: exact room for those, doubling past that.
                    if records.len() < EXACT_ROOM_UP_TO {
                        records.reserve_exact(1);
                    }
                    records.insert(at, (data.clone(), ttl, 1))
                }
            },
        }
        first
    }

    /// One holder less of the record; whether the name has no record left. A record not held
    /// (removed twice) changes nothing.
    pub fn release(&mut self, data: &RecordData, ttl: Option<u32>) -> Option<bool> {
        match &mut self.counted {
            None => {
                if ttl != self.node.ttl {
                    return None;
                }
                position(&self.node, data).ok()?;
                let node = Arc::make_mut(&mut self.node);
                remove(node, data);
                if node.is_empty() {
                    node.ttl = None;
                }
                Some(node.is_empty())
            }
            Some(records) => {
                let at = find(records, data, ttl).ok()?;
                records[at].2 -= 1;
                if records[at].2 == 0 {
                    records.remove(at);
                    if records.capacity() > 2 * records.len() + 4 {
                        records.shrink_to_fit();
                    }
                }
                Some(records.is_empty())
            }
        }
    }

    /// The name's node once a batch is in: compiled from the counted list (which goes once each
    /// record is held once with one TTL), its vectors without spare room. `zone_ttl` is the TTL
    /// of a record without its own.
    pub fn settle(&mut self, zone_ttl: u32) -> &Arc<Node> {
        if let Some(records) = &self.counted {
            let node = compile(self.node.zone, self.node.apex, records, zone_ttl);
            let uniform = records.iter().all(|(_, ttl, holders)| {
                *holders == 1 && Some(*ttl) == records.first().map(|r| r.1)
            });
            if uniform {
                self.counted = None;
            }
            if *self.node != node {
                self.node = Arc::new(node);
            }
        }
        if let Some(node) = Arc::get_mut(&mut self.node) {
            node.a.shrink_to_fit();
            node.aaaa.shrink_to_fit();
            node.srv.shrink_to_fit();
        }
        &self.node
    }

    /// Shares `node`, equal to the name's own: the table's, so that one copy is held.
    pub fn share(&mut self, node: &Arc<Node>) {
        debug_assert!(*self.node == **node);
        self.node = node.clone();
    }

    /// Starts counting: the list made from the node (each record held once, with its TTL).
    fn count(&mut self) {
        let ttl = self.node.ttl;
        let node = &*self.node;
        let records = node
            .a
            .iter()
            .map(|a| RecordData::A(*a))
            .chain(node.aaaa.iter().map(|a| RecordData::Aaaa(*a)))
            .chain(node.srv.iter().map(|s| RecordData::Srv(s.clone())))
            .map(|data| (data, ttl, 1))
            .collect();
        self.counted = Some(Box::new(records));
    }
}

/// A counted name's node: record sets sorted and without duplicates (the list's order), the
/// lowest TTL its records have (a record without its own has the zone's, `zone_ttl`): one
/// name's records are served with one TTL.
fn compile(zone: u32, apex: bool, records: &[HeldRecord], zone_ttl: u32) -> Node {
    let mut node = Node {
        zone,
        apex,
        ..Node::default()
    };
    let mut own_ttls = false;
    let mut zone_ttls = false;
    for (data, ttl, _) in records {
        match ttl {
            Some(ttl) => {
                own_ttls = true;
                node.ttl = Some(node.ttl.map_or(*ttl, |t| t.min(*ttl)));
            }
            None => zone_ttls = true,
        }
        match data {
            RecordData::A(a) if node.a.last() != Some(a) => node.a.push(*a),
            RecordData::Aaaa(a) if node.aaaa.last() != Some(a) => node.aaaa.push(*a),
            RecordData::Srv(s) if node.srv.last() != Some(s) => node.srv.push(s.clone()),
            _ => {}
        }
    }
    if own_ttls && zone_ttls {
        node.ttl = node.ttl.map(|t| t.min(zone_ttl));
    }
    node
}

fn find(records: &[HeldRecord], data: &RecordData, ttl: Option<u32>) -> Result<usize, usize> {
    records.binary_search_by(|(d, t, _)| (d, t).cmp(&(data, &ttl)))
}

/// Where `data` is in the node's sorted set of its type.
fn position(node: &Node, data: &RecordData) -> Result<usize, usize> {
    match data {
        RecordData::A(a) => node.a.binary_search(a),
        RecordData::Aaaa(a) => node.aaaa.binary_search(a),
        RecordData::Srv(s) => node.srv.binary_search(s),
    }
}

/// Adds `data` to the node's sorted set of its type (the caller knows it is not there).
fn insert(node: &mut Node, data: &RecordData) {
    match data {
        RecordData::A(a) => insert_sorted(&mut node.a, *a),
        RecordData::Aaaa(a) => insert_sorted(&mut node.aaaa, *a),
        RecordData::Srv(s) => insert_sorted(&mut node.srv, s.clone()),
    }
}

fn insert_sorted<T: Ord>(set: &mut impl SortedSet<T>, item: T) {
    if let Err(at) = set.binary_search(&item) {
        set.insert(at, item);
    }
}

/// Removes `data` from the node's sorted set of its type.
fn remove(node: &mut Node, data: &RecordData) {
    match data {
        RecordData::A(a) => remove_sorted(&mut node.a, a),
        RecordData::Aaaa(a) => remove_sorted(&mut node.aaaa, a),
        RecordData::Srv(s) => remove_sorted(&mut node.srv, s),
    }
}

fn remove_sorted<T: Ord>(set: &mut impl SortedSet<T>, item: &T) {
    if let Ok(at) = set.binary_search(item) {
        set.remove(at);
    }
}

/// The node's sets as [`insert_sorted`] and [`remove_sorted`] change them.
trait SortedSet<T>: std::ops::Deref<Target = [T]> {
    fn insert(&mut self, at: usize, item: T);
    fn remove(&mut self, at: usize);
}

impl SortedSet<std::net::Ipv4Addr> for AddressSet {
    fn insert(&mut self, at: usize, item: std::net::Ipv4Addr) {
        AddressSet::insert(self, at, item);
    }
    fn remove(&mut self, at: usize) {
        AddressSet::remove(self, at);
    }
}

impl<T> SortedSet<T> for RareSet<T> {
    fn insert(&mut self, at: usize, item: T) {
        RareSet::insert(self, at, item);
    }
    fn remove(&mut self, at: usize) {
        RareSet::remove(self, at);
    }
}
