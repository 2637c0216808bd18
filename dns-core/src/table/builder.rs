//! The incremental compiler behind [`RecordTable`]. Records arrive and leave in groups (one pod,
//! one Service's output, one file); only the names a group touches are compiled again, so a
//! change costs the same with a hundred names or a hundred thousand. The table it keeps is
//! persistent: the copy handed to the server shares everything that did not change.
//!
//! Compiling the same records from scratch gives the same table, whatever order the groups
//! came and went in (tested below).
//!
//! Memory: a name is held as one [`WireName`] shared with the table, its reverse index and the
//! kernel table's writer; its records once, in the node the table serves (see `name_state`).

use std::{borrow::Borrow, collections::BTreeMap, net::IpAddr, sync::Arc};

use hickory_proto::rr::Name;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{
    CompileWarning, Network, Node, RecordTable, ReverseSerial, Zone, name_state::NameState, serial,
};
use crate::{
    dns::WireName,
    records::{RecordData, SourceRecord},
    zone::ZoneSpec,
};

pub struct TableBuilder {
    /// Sorted by apex; the index is the zone id.
    specs: Vec<ZoneSpec>,
    /// The zones' apexes, in wire form, by zone id.
    apexes: Vec<WireName>,
    names: FxHashMap<WireName, NameState>,
    /// Names whose node may differ from the table's since the last [`TableBuilder::finish`].
    dirty: FxHashSet<WireName>,
    /// Per zone: the wrapping sum of its names' serial parts.
    content: Vec<u64>,
    /// Per reverse zone holding PTR records (and every configured one): the wrapping sum of its
    /// addresses' parts, so that a reverse zone's digest moves only with its own PTR records.
    reverse_content: BTreeMap<Network, u64>,
    /// Addresses whose PTR records may have changed since the last [`TableBuilder::finish`]
    /// (their part before the change is already out of their zone's sum).
    touched: FxHashSet<IpAddr>,
    /// The reverse zones whose digest changed since [`TableBuilder::assign_reverse_serials`]
    /// last took them, with it.
    reverse_changed: Vec<(Network, u64)>,
    /// The catalog zone to keep of the zones served (None: no catalog).
    catalog_spec: Option<super::catalog::CatalogSpec>,
    /// The catalog changed since [`TableBuilder::assign_catalog_serial`] last numbered it.
    catalog_changed: bool,
    table: RecordTable,
}

impl TableBuilder {
    /// An empty table for `zones` (which must not overlap: the configuration validates that):
    /// their apexes, and the addresses of their name servers.
    pub fn new(zones: &[ZoneSpec]) -> (Self, Vec<CompileWarning>) {
        let mut specs = zones.to_vec();
        specs.sort_by(|a, b| a.apex.cmp(&b.apex));
        let compiled = specs
            .iter()
            .enumerate()
            .map(|(id, spec)| Zone {
                id: id as u32,
                spec: spec.clone(),
                digest: serial::zone_digest(0, spec),
                serial: serial::serial_of_digest(serial::zone_digest(0, spec)),
            })
            .collect();
        let apexes: Vec<WireName> = specs.iter().map(|s| WireName::from_name(&s.apex)).collect();
        let mut builder = Self {
            content: vec![0; specs.len()],
            reverse_content: BTreeMap::new(),
            touched: FxHashSet::default(),
            reverse_changed: Vec::new(),
            catalog_spec: None,
            catalog_changed: false,
            names: FxHashMap::default(),
            dirty: FxHashSet::default(),
            table: RecordTable {
                zones: compiled,
                ..RecordTable::default()
            },
            apexes,
            specs,
        };
        for (id, apex) in builder.apexes.iter().enumerate() {
            builder.dirty.insert(apex.clone());
            builder
                .names
                .insert(apex.clone(), NameState::new(id as u32, true));
        }
        let mut warnings = Vec::new();
        let mut glue = Vec::new();
        for spec in &builder.specs {
            for ns in spec
                .nameservers
                .iter()
                .filter(|ns| !ns.addresses.is_empty())
            {
                if !spec.apex.zone_of(&ns.name) {
                    warnings.push(CompileWarning::OutOfZoneGlue {
                        zone: spec.apex.clone(),
                        name: ns.name.clone(),
                    });
                    continue;
                }
                let name = WireName::from_name(&ns.name);
                glue.extend(ns.addresses.iter().map(|address| SourceRecord {
                    name: name.clone(),
                    ttl: None,
                    data: RecordData::from(*address),
                }));
            }
        }
        builder.add(&glue);
        (builder, warnings)
    }

    /// The zones, as given.
    pub fn zone_specs(&self) -> &[ZoneSpec] {
        &self.specs
    }

    /// Adds a group of records; returns the warnings for those it dropped (outside every zone).
    pub fn add<R: Borrow<SourceRecord>>(
        &mut self,
        records: impl IntoIterator<Item = R>,
    ) -> Vec<CompileWarning> {
        let mut warnings = Vec::new();
        for record in records {
            let record = record.borrow();
            if !self.add_record(record) {
                warnings.push(CompileWarning::OutOfZone {
                    name: record.name.clone(),
                });
            }
        }
        warnings
    }

    /// Removes a group of records added before.
    pub fn remove<R: Borrow<SourceRecord>>(&mut self, records: impl IntoIterator<Item = R>) {
        for record in records {
            self.remove_record(record.borrow());
        }
    }

    fn add_record(&mut self, record: &SourceRecord) -> bool {
        let state = match self.names.get_mut(&record.name) {
            Some(state) => state,
            None => {
                let Some(zone) = self.zone_index(&record.name) else {
                    return false;
                };
                self.names
                    .entry(record.name.clone())
                    .or_insert(NameState::new(zone, false))
            }
        };
        let first = state.hold(&record.data, record.ttl);
        let zone = state.zone();
        if first {
            self.count_holder(&record.name, zone, true);
        }
        self.mark(&record.name);
        true
    }

    fn remove_record(&mut self, record: &SourceRecord) {
        // A name the builder does not know was outside every zone when it was added.
        let Some(state) = self.names.get_mut(&record.name) else {
            return;
        };
        let Some(now_empty) = state.release(&record.data, record.ttl) else {
            return;
        };
        if now_empty {
            let zone = state.zone();
            if state.can_go() {
                self.names.remove(&record.name);
            }
            self.count_holder(&record.name, zone, false);
        }
        self.mark(&record.name);
    }

    /// Notes that `name`'s node may have changed, sharing the name the builder holds.
    fn mark(&mut self, name: &WireName) {
        if !self.dirty.contains(name) {
            let held = self
                .names
                .get_key_value(name)
                .map_or_else(|| name.clone(), |(held, _)| held.clone());
            self.dirty.insert(held);
        }
    }

    /// A name gained its first record (`gained`) or lost its last: its ancestors below the
    /// apex exist while some name below them holds records.
    fn count_holder(&mut self, name: &WireName, zone: u32, gained: bool) {
        let apex = self.apexes[zone as usize].clone();
        let mut ancestor = name.parent();
        while let Some(at) = ancestor {
            if at == apex || !at.is_in(&apex) {
                break;
            }
            let state = self
                .names
                .entry(at.clone())
                .or_insert_with(|| NameState::new(zone, false));
            if gained {
                state.holders_below += 1;
            } else {
                state.holders_below = state.holders_below.saturating_sub(1);
                if state.can_go() {
                    self.names.remove(&at);
                }
            }
            ancestor = at.parent();
            self.mark(&at);
        }
    }

    fn zone_index(&self, name: &WireName) -> Option<u32> {
        self.apexes
            .iter()
            .position(|apex| name.is_in(apex))
            .map(|i| i as u32)
    }

    /// Compiles the names touched since the last call into the table. Returns the names whose
    /// node changed: created, changed or gone.
    pub fn finish(&mut self) -> Vec<WireName> {
        let mut changed = Vec::new();
        let dirty = std::mem::take(&mut self.dirty);
        for key in dirty {
            let new = self.names.get_mut(&key).map(|state| {
                let zone_ttl = self.specs.get(state.zone() as usize).map_or(0, |z| z.ttl);
                state.settle(zone_ttl).clone()
            });
            let old = self.table.nodes.get(&key).cloned();
            if old == new {
                // Changed and changed back: the table's node is shared, not an equal copy.
                if let (Some(old), Some(state)) = (&old, self.names.get_mut(&key)) {
                    state.share(old);
                }
                continue;
            }
            if let Some(old) = &old {
                self.content[old.zone as usize] =
                    self.content[old.zone as usize].wrapping_sub(serial::name_part(&key, old));
                self.table.records -= old.record_count();
            }
            if let Some(new) = &new {
                self.content[new.zone as usize] =
                    self.content[new.zone as usize].wrapping_add(serial::name_part(&key, new));
                self.table.records += new.record_count();
            }
            self.touch_addresses(old.as_deref(), new.as_deref());
            self.update_reverse(&key, old.as_deref(), new.as_deref());
            match new {
                Some(node) => self.table.nodes.insert(key.clone(), node),
                None => self.table.nodes.remove(&key),
            };
            changed.push(key);
        }
        for zone in &mut self.table.zones {
            zone.digest = serial::zone_digest(self.content[zone.id as usize], &zone.spec);
            zone.serial = serial::serial_of_digest(zone.digest);
        }
        self.settle_reverse();
        self.settle_catalog();
        changed
    }

    /// Serves the derived reverse zones of `held` even without PTR records (empty: SOA and NS
    /// alone), and no others that have none. Takes effect at once: the zones whose holding
    /// changed are numbered again, and the catalog follows. True when the held zones changed.
    pub fn hold_reverse(&mut self, held: impl IntoIterator<Item = Network>) -> bool {
        let held: imbl::OrdSet<Network> = held.into_iter().collect();
        if held == self.table.held_reverse {
            return false;
        }
        let moved: Vec<Network> = held
            .clone()
            .symmetric_difference(self.table.held_reverse.clone())
            .into_iter()
            .collect();
        self.table.held_reverse = held;
        for network in moved {
            self.digest_reverse(network);
        }
        self.settle_catalog();
        true
    }

    /// Keeps a catalog zone (RFC 9432) of the zones served under `spec` (None: none), from the
    /// next [`TableBuilder::finish`] on.
    pub fn set_catalog(&mut self, spec: Option<super::catalog::CatalogSpec>) {
        self.catalog_spec = spec;
        self.settle_catalog();
    }

    /// Brings the catalog in line with the zones served: its members are the forward zones and
    /// the reverse zones (as many as there are zones, never a walk of the names). Its digest,
    /// and so its serial, moves only when a member comes or goes.
    fn settle_catalog(&mut self) {
        // A served zone that is the catalog's name or holds it (a record file edited after the
        // start, which the configuration's check did not see) wins: no catalog beside it.
        let overlaps = |spec: &super::catalog::CatalogSpec| {
            self.table
                .zones
                .iter()
                .any(|z| z.spec.apex.zone_of(&spec.apex) || spec.apex.zone_of(&z.spec.apex))
        };
        let catalog = match (&self.catalog_spec, self.table.zones.first()) {
            (Some(spec), Some(first)) if !overlaps(spec) => Some(super::catalog::Catalog::new(
                spec,
                &first.spec,
                self.table.catalog_members(),
            )),
            _ => None,
        };
        let digest = |c: Option<&super::catalog::Catalog>| c.map(|c| c.zone.digest);
        if digest(catalog.as_ref()) == digest(self.table.catalog.as_deref()) {
            return;
        }
        self.table.catalog = catalog.map(Arc::new);
        self.catalog_changed = true;
    }

    /// Numbers the catalog, if the last [`TableBuilder::finish`] changed it: `serial_for` gets
    /// its apex and digest, as the zones' do.
    pub fn assign_catalog_serial(&mut self, serial_for: impl FnOnce(&Name, u64) -> u32) {
        if !std::mem::take(&mut self.catalog_changed) {
            return;
        }
        if let Some(catalog) = self.table.catalog.as_mut() {
            let catalog = Arc::make_mut(catalog);
            catalog.zone.serial = serial_for(&catalog.zone.spec.apex, catalog.zone.digest);
        }
    }

    /// Numbers the zones: `serial_for` gets each zone (with its digest) after
    /// [`TableBuilder::finish`], which numbers them by digest alone.
    pub fn assign_serials(&mut self, mut serial_for: impl FnMut(&Zone) -> u32) {
        for zone in &mut self.table.zones {
            zone.serial = serial_for(zone);
        }
    }

    /// Numbers the reverse zones whose content the last [`TableBuilder::finish`] changed:
    /// `serial_for` gets each one's apex and digest ([`TableBuilder::finish`] numbers them by
    /// digest alone). The others keep their serials.
    pub fn assign_reverse_serials(&mut self, mut serial_for: impl FnMut(&Name, u64) -> u32) {
        for (network, digest) in std::mem::take(&mut self.reverse_changed) {
            let serial = serial_for(&network.reverse_name(), digest);
            self.table
                .reverse_serials
                .insert(network, ReverseSerial { digest, serial });
        }
    }

    /// Takes the current PTR part of every address of `old` and `new` not touched yet out of
    /// its reverse zone's sum: the first touch sees the address as it was before this batch
    /// (a name that holds the address neither before nor after cannot change its PTR records).
    fn touch_addresses(&mut self, old: Option<&Node>, new: Option<&Node>) {
        let addresses = old
            .map(Node::addresses)
            .into_iter()
            .chain(new.map(Node::addresses))
            .flatten();
        for address in addresses {
            if !self.touched.insert(address) {
                continue;
            }
            let part = self.address_part(&address);
            if let Some(network) = self.table.reverse_network_of(&address)
                && let Some(sum) = self.reverse_content.get_mut(&network)
            {
                *sum = sum.wrapping_sub(part);
            }
        }
    }

    /// Adds the touched addresses' parts as they are now, and digests the reverse zones whose
    /// sum moved; a derived zone left without PTR records is no longer numbered.
    fn settle_reverse(&mut self) {
        let mut moved: Vec<Network> = Vec::new();
        for address in std::mem::take(&mut self.touched) {
            let Some(network) = self.table.reverse_network_of(&address) else {
                continue;
            };
            let part = self.address_part(&address);
            let sum = self.reverse_content.entry(network).or_insert(0);
            *sum = sum.wrapping_add(part);
            moved.push(network);
        }
        moved.sort_unstable();
        moved.dedup();
        for network in moved {
            self.digest_reverse(network);
        }
    }

    /// Digests one reverse zone from its sum and numbers it by its digest, unless the digest
    /// is the one it has.
    fn digest_reverse(&mut self, network: Network) {
        let configured = self.table.reverse_config.zones.is_some();
        let sum = self.reverse_content.get(&network).copied().unwrap_or(0);
        if !configured && !self.table.has_ptr_in(&network) && !self.table.is_held(&network) {
            self.reverse_content.remove(&network);
            self.table.reverse_serials.remove(&network);
            return;
        }
        let Some(first) = self.table.zones.first() else {
            return;
        };
        let digest = serial::reverse_digest(sum, &network, &first.spec);
        if self
            .table
            .reverse_serials
            .get(&network)
            .is_some_and(|r| r.digest == digest)
        {
            return;
        }
        self.table.reverse_serials.insert(
            network,
            ReverseSerial {
                digest,
                serial: serial::serial_of_digest(digest),
            },
        );
        self.reverse_changed.push((network, digest));
    }

    /// What `address`'s PTR records add to its reverse zone's sum now (0: none).
    fn address_part(&self, address: &IpAddr) -> u64 {
        let names = self.table.ptr_names(address);
        if names.is_empty() {
            return 0;
        }
        let ttl = names
            .iter()
            .filter_map(|n| Some(self.table.node(n)?.ttl_in(self.table.zone_for(n)?)))
            .min()
            .unwrap_or(0);
        serial::address_part(address, &names, ttl)
    }

    /// Sums every reverse zone again (the reverse configuration changed): every configured
    /// zone is numbered, with PTR records or without.
    fn sum_reverse_again(&mut self) {
        self.reverse_content.clear();
        self.table.reverse_serials = Default::default();
        if let Some(zones) = &self.table.reverse_config.zones {
            for network in zones {
                self.reverse_content.insert(*network, 0);
            }
        }
        let addresses: Vec<IpAddr> = self.table.addresses.iter().copied().collect();
        self.touched.extend(addresses);
        let configured: Vec<Network> = self.reverse_content.keys().copied().collect();
        self.settle_reverse();
        for network in configured {
            if !self.table.reverse_serials.contains_key(&network) {
                self.digest_reverse(network);
            }
        }
    }

    /// Keeps address → names in step with one name's change.
    fn update_reverse(&mut self, name: &WireName, old: Option<&Node>, new: Option<&Node>) {
        let old = old.map(Node::addresses).unwrap_or_default();
        let new = new.map(Node::addresses).unwrap_or_default();
        for gone in old.iter().filter(|a| !new.contains(a)) {
            let Some(names) = self.table.reverse.get(gone) else {
                continue;
            };
            let rest: Vec<WireName> = names.iter().filter(|n| *n != name).cloned().collect();
            if rest.is_empty() {
                self.table.reverse.remove(gone);
                self.table.addresses.remove(gone);
            } else {
                self.table.reverse.insert(*gone, rest.into());
            }
        }
        for added in new.iter().filter(|a| !old.contains(a)) {
            let mut names: Vec<WireName> = self
                .table
                .reverse
                .get(added)
                .map(|n| n.to_vec())
                .unwrap_or_default();
            if let Err(at) = names.binary_search_by(|n| by_text(n, name)) {
                names.insert(at, name.clone());
            }
            self.table.reverse.insert(*added, names.into());
            self.table.addresses.insert(*added);
        }
    }

    /// Which reverse zones the table serves, and which names get no PTR.
    pub fn set_reverse_config(&mut self, config: Arc<super::ReverseConfig>) {
        self.table.reverse_config = config;
        self.sum_reverse_again();
    }

    /// The table as of the last [`TableBuilder::finish`].
    pub fn table(&self) -> &RecordTable {
        &self.table
    }
}

/// The order of names at one address: DNS's canonical order (RFC 4034 §6.1), as hickory orders
/// names, so that PTR answers keep the order they always had.
fn by_text(a: &WireName, b: &WireName) -> std::cmp::Ordering {
    let a_labels: Vec<&[u8]> = a.labels().collect();
    let b_labels: Vec<&[u8]> = b.labels().collect();
    a_labels.iter().rev().cmp(b_labels.iter().rev())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hickory_proto::rr::Name;

    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn a(n: &str, ip: &str, ttl: Option<u32>) -> SourceRecord {
        SourceRecord::new(&name(n), ttl, RecordData::A(ip.parse().unwrap()))
    }

    fn zones() -> Vec<ZoneSpec> {
        let mut with_glue = ZoneSpec::with_defaults(name("b.example."));
        with_glue.nameservers[0].addresses = vec!["198.18.9.53".parse().unwrap()];
        vec![ZoneSpec::with_defaults(name("a.example.")), with_glue]
    }

    /// A small deterministic generator (xorshift): the same sequence on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn random_group(rng: &mut Rng) -> Vec<SourceRecord> {
        let labels = ["x", "y", "deep.x", "z.deep.x", "ns"];
        (0..rng.below(4))
            .map(|_| {
                let zone = ["a.example.", "b.example.", "other."][rng.below(3) as usize];
                let owner = labels[rng.below(labels.len() as u64) as usize];
                let ttl = [None, Some(30), Some(5)][rng.below(3) as usize];
                let ip = format!("198.18.{}.{}", rng.below(2), rng.below(3));
                if rng.below(4) == 0 {
                    SourceRecord {
                        name: WireName::from_name(&name(&format!("{owner}.{zone}"))),
                        ttl,
                        data: RecordData::Aaaa(
                            format!("2001:db8::{}", rng.below(3)).parse().unwrap(),
                        ),
                    }
                } else {
                    a(&format!("{owner}.{zone}"), &ip, ttl)
                }
            })
            .collect()
    }

    /// What the table's nodes must be, worked out without the builder: every record's name in
    /// its zone with its sorted, distinct addresses and lowest TTL; every name between it and
    /// the apex as an empty non-terminal; the apexes; nothing outside the zones.
    fn expected_nodes<'a>(
        zones: &[ZoneSpec],
        records: impl IntoIterator<Item = &'a SourceRecord>,
    ) -> BTreeMap<WireName, Node> {
        let mut sorted: Vec<&Name> = zones.iter().map(|z| &z.apex).collect();
        sorted.sort();
        let apexes: Vec<WireName> = sorted.iter().map(|a| WireName::from_name(a)).collect();
        let mut nodes: BTreeMap<WireName, Node> = BTreeMap::new();
        let mut held_ttls: BTreeMap<WireName, Vec<Option<u32>>> = BTreeMap::new();
        for (id, apex) in apexes.iter().enumerate() {
            let node = Node {
                zone: id as u32,
                apex: true,
                ..Node::default()
            };
            nodes.insert(apex.clone(), node);
        }
        for record in records {
            let Some(zone) = apexes.iter().position(|a| record.name.is_in(a)) else {
                continue;
            };
            let mut name = record.name.clone();
            while name.label_count() > apexes[zone].label_count() {
                nodes.entry(name.clone()).or_insert(Node {
                    zone: zone as u32,
                    ..Node::default()
                });
                name = name.parent().expect("below the apex");
            }
            let node = nodes.get_mut(&record.name).expect("inserted");
            match &record.data {
                RecordData::A(a) => node.a.push(*a),
                RecordData::Aaaa(a) => node.aaaa.push(*a),
                RecordData::Srv(s) => node.srv.push(s.clone()),
            }
            held_ttls
                .entry(record.name.clone())
                .or_default()
                .push(record.ttl);
        }
        // One TTL per name: the lowest of its records', a record without one having its
        // zone's; None (the zone's) when no record has its own.
        for (name, ttls) in held_ttls {
            let node = nodes.get_mut(&name).expect("inserted");
            let zone_ttl = zones
                .iter()
                .find(|z| z.apex == *sorted[node.zone as usize])
                .map(|z| z.ttl)
                .expect("the zone");
            if ttls.iter().any(Option::is_some) {
                node.ttl = ttls.iter().map(|t| t.unwrap_or(zone_ttl)).min();
            }
        }
        for node in nodes.values_mut() {
            node.a.sort();
            node.a.dedup();
            node.aaaa.sort();
            node.aaaa.dedup();
            node.srv.sort();
            node.srv.dedup();
        }
        nodes
    }

    /// The glue of `zones()`: b.example.'s name server address.
    fn glue() -> Vec<SourceRecord> {
        vec![a("ns.b.example.", "198.18.9.53", None)]
    }

    #[test]
    fn any_sequence_of_groups_gives_the_nodes_of_a_model_and_the_table_of_a_fresh_compile() {
        let zones = zones();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut builder, _) = TableBuilder::new(&zones);
        builder.finish();
        let mut live: Vec<Vec<SourceRecord>> = Vec::new();
        for step in 0..2000 {
            if live.is_empty() || rng.below(3) != 0 {
                let group = random_group(&mut rng);
                builder.add(&group);
                live.push(group);
            } else {
                let group = live.swap_remove(rng.below(live.len() as u64) as usize);
                builder.remove(&group);
            }
            let before = builder.table().clone();
            let mut changed = builder.finish();
            let (fresh, _) = RecordTable::compile(&zones, live.iter().flatten());
            assert_eq!(builder.table(), &fresh, "step {step}");
            let held: BTreeMap<WireName, Node> = builder
                .table()
                .nodes()
                .map(|(name, node)| (name.clone(), node.clone()))
                .collect();
            let glue = glue();
            assert_eq!(
                held,
                expected_nodes(&zones, live.iter().flatten().chain(&glue)),
                "step {step}"
            );
            // The names reported are exactly those whose node differs.
            let after = builder.table();
            let mut differ: Vec<WireName> = before
                .nodes
                .keys()
                .chain(after.nodes.keys())
                .filter(|n| before.nodes.get(*n) != after.nodes.get(*n))
                .cloned()
                .collect();
            differ.sort();
            differ.dedup();
            changed.sort();
            assert_eq!(changed, differ, "step {step}");
            assert!(builder.finish().is_empty());
        }
        for group in live.drain(..) {
            builder.remove(&group);
        }
        builder.finish();
        let (empty, _) = RecordTable::compile(&zones, Vec::<SourceRecord>::new());
        assert_eq!(builder.table(), &empty);
    }

    #[test]
    fn a_change_reports_the_name_and_the_ancestors_it_creates() {
        let (mut builder, _) = TableBuilder::new(&zones());
        builder.finish();
        builder.add(&[a("z.deep.x.a.example.", "198.18.0.1", None)]);
        let mut changed: Vec<String> = builder.finish().iter().map(|n| n.to_string()).collect();
        changed.sort();
        assert_eq!(
            changed,
            ["deep.x.a.example.", "x.a.example.", "z.deep.x.a.example."]
        );
        // Another record at the same name: only that name changed.
        builder.add(&[a("z.deep.x.a.example.", "198.18.0.2", None)]);
        let changed: Vec<String> = builder.finish().iter().map(|n| n.to_string()).collect();
        assert_eq!(changed, ["z.deep.x.a.example."]);
    }

    #[test]
    fn a_reverse_zone_is_renumbered_only_when_its_own_ptr_records_change() {
        let (mut builder, _) = TableBuilder::new(&zones());
        builder.add(&[a("x.a.example.", "198.18.0.1", None)]);
        builder.add(&[a("y.a.example.", "198.18.1.1", None)]);
        builder.finish();
        let zero = Network::new("198.18.0.0".parse().unwrap(), 24).unwrap();
        let one = Network::new("198.18.1.0".parse().unwrap(), 24).unwrap();
        let mut numbered = Vec::new();
        builder.assign_reverse_serials(|apex, _| {
            numbered.push(apex.to_string());
            7
        });
        // The name server's glue address holds one too.
        assert_eq!(
            numbered,
            [
                "0.18.198.in-addr.arpa.",
                "1.18.198.in-addr.arpa.",
                "9.18.198.in-addr.arpa."
            ]
        );
        assert_eq!(builder.table().reverse_serial(&zero), 7);
        // A name joins 198.18.0.0/24: only that zone is numbered again.
        builder.add(&[a("z.a.example.", "198.18.0.2", None)]);
        builder.finish();
        let mut numbered = Vec::new();
        builder.assign_reverse_serials(|apex, _| {
            numbered.push(apex.to_string());
            8
        });
        assert_eq!(numbered, ["0.18.198.in-addr.arpa."]);
        assert_eq!(builder.table().reverse_serial(&zero), 8);
        assert_eq!(builder.table().reverse_serial(&one), 7);
        // A TTL change of a name is a change of its PTR records' TTL.
        builder.remove(&[a("y.a.example.", "198.18.1.1", None)]);
        builder.add(&[a("y.a.example.", "198.18.1.1", Some(30))]);
        builder.finish();
        let mut numbered = Vec::new();
        builder.assign_reverse_serials(|apex, _| {
            numbered.push(apex.to_string());
            9
        });
        assert_eq!(numbered, ["1.18.198.in-addr.arpa."]);
        // The last PTR record of a derived zone goes: the zone is no longer served or numbered.
        builder.remove(&[a("y.a.example.", "198.18.1.1", Some(30))]);
        builder.finish();
        builder.assign_reverse_serials(|_, _| panic!("nothing to number"));
        assert_eq!(builder.table().reverse_serial(&one), 0);
    }

    #[test]
    fn every_node_is_held_once_shared_by_the_builder_and_the_table() {
        let (mut builder, _) = TableBuilder::new(&zones());
        builder.finish();
        // Plain names, a record held by two groups, two TTLs at one name, and a name changed
        // and changed back within one batch.
        builder.add(&[
            a("x.a.example.", "198.18.0.1", None),
            a("x.a.example.", "198.18.0.2", None),
        ]);
        builder.add(&[a("y.a.example.", "198.18.0.3", Some(5))]);
        builder.add(&[a("y.a.example.", "198.18.0.3", Some(5))]);
        builder.add(&[a("deep.x.a.example.", "198.18.0.4", Some(5))]);
        builder.add(&[a("deep.x.a.example.", "198.18.0.5", Some(30))]);
        builder.finish();
        builder.add(&[a("x.a.example.", "198.18.0.9", None)]);
        builder.remove(&[a("x.a.example.", "198.18.0.9", None)]);
        builder.remove(&[a("y.a.example.", "198.18.0.3", Some(5))]);
        builder.finish();
        let table = builder.table();
        assert_eq!(table.node(&name("y.a.example.")).unwrap().a.len(), 1);
        for (name, node) in &table.nodes {
            assert_eq!(
                Arc::strong_count(node),
                2,
                "{name}: the table's node and the builder's are one"
            );
        }
    }

    #[test]
    fn the_same_record_from_two_groups_stays_until_both_are_gone() {
        let (mut builder, _) = TableBuilder::new(&zones());
        let one = [a("x.a.example.", "198.18.0.1", None)];
        builder.add(&one);
        builder.add(&one);
        builder.remove(&one);
        builder.finish();
        let node = builder.table().node(&name("x.a.example.")).unwrap();
        assert_eq!(node.a.len(), 1);
        builder.remove(&one);
        builder.finish();
        assert!(builder.table().node(&name("x.a.example.")).is_none());
    }
}
