//! A served zone as a transfer carries it: its SOA, then every record of the zone (the apex NS
//! records, then each name's A, AAAA and SRV records in the table's order; a reverse zone's PTR
//! records in address order), and what changed between two versions of it (for IXFR).
//!
//! Records are made by the same functions the answers are made by (`table::render`), so a
//! secondary serves what this server answers. The catalog zone's are its own
//! (`table::catalog`): a member's PTR and group per zone served.

use std::{net::IpAddr, sync::Arc};

use hickory_proto::rr::{Name, RData, Record, rdata::PTR};

use hostport_dns_core::{
    dns::WireName,
    table::{
        Network, Node, RecordTable, Zone,
        catalog::Catalog,
        render::{
            addresses_a, addresses_aaaa, name_server_records, ptr_ttl, reverse_zone, soa_record,
            srv_records,
        },
    },
};

/// A zone a transfer can be asked for.
#[derive(Clone, Debug)]
pub enum ServedZone {
    Forward(Zone),
    /// A reverse zone, for this network.
    Reverse(Zone, Network),
    /// The catalog zone (RFC 9432) of the zones served.
    Catalog(Arc<Catalog>),
}

impl ServedZone {
    /// The zone whose apex is `apex` in `table` (case-insensitive), if it is served and ready.
    pub fn find(table: &RecordTable, apex: &Name) -> Option<Self> {
        if let Some(zone) = table.zones().iter().find(|z| z.spec.apex == *apex) {
            return (!zone.spec.pending).then(|| Self::Forward(zone.clone()));
        }
        if let Some(catalog) = table.catalog().filter(|c| c.apex() == apex) {
            return Some(Self::Catalog(Arc::new(catalog.clone())));
        }
        let found = table.reverse_zone_for(apex);
        let (network, query, extra) = found?;
        if extra || query != network {
            return None;
        }
        Some(Self::Reverse(reverse_zone(table, found)?, network))
    }

    /// Every zone served and ready: the forward zones, then the reverse zones.
    pub fn all(table: &RecordTable) -> Vec<Self> {
        let forward = table
            .zones()
            .iter()
            .filter(|z| !z.spec.pending)
            .map(|z| Self::Forward(z.clone()));
        let reverse = table
            .reverse_zones()
            .into_iter()
            .filter_map(|network| Self::find(table, &network.reverse_name()));
        let catalog = table
            .catalog()
            .map(|catalog| Self::Catalog(Arc::new(catalog.clone())));
        forward.chain(reverse).chain(catalog).collect()
    }

    pub fn zone(&self) -> &Zone {
        match self {
            Self::Forward(zone) | Self::Reverse(zone, _) => zone,
            Self::Catalog(catalog) => &catalog.zone,
        }
    }

    pub fn apex(&self) -> &Name {
        &self.zone().spec.apex
    }

    pub fn serial(&self) -> u32 {
        self.zone().serial
    }

    pub fn soa(&self) -> Record {
        soa_record(self.zone(), self.apex())
    }

    /// Every record of the zone but the SOA, made one name at a time as they are taken.
    pub fn records<'a>(&'a self, table: &'a RecordTable) -> Box<dyn Iterator<Item = Record> + 'a> {
        let zone = self.zone();
        let name_servers = name_server_records(zone, self.apex()).into_iter();
        match self {
            // In the table's order (the names' wire form, byte by byte): the same on every node
            // with the same names.
            Self::Forward(zone) => Box::new(
                name_servers.chain(
                    table
                        .nodes()
                        .filter(move |(_, n)| n.zone == zone.id)
                        .flat_map(move |(name, node)| node_records(&name.to_name(), node, zone)),
                ),
            ),
            Self::Reverse(zone, network) => Box::new(
                name_servers.chain(
                    table
                        .addresses_in(network)
                        .flat_map(move |address| ptr_records_at(table, address, zone)),
                ),
            ),
            // Its name server (`invalid.`) first, as the others'.
            Self::Catalog(catalog) => Box::new(catalog.records().into_iter()),
        }
    }

    /// What changed from this zone in `old_table` (an older version) to `new` in `table`: the
    /// records gone and the records added, the SOA aside. Only the names `changed` since are
    /// compared, when the history knows them (None: any may have).
    pub fn changes(
        &self,
        old_table: &RecordTable,
        changed: Option<&[WireName]>,
        table: &RecordTable,
        new: &ServedZone,
    ) -> (Vec<Record>, Vec<Record>) {
        let mut gone = Vec::new();
        let mut added = Vec::new();
        let mut compare = |before: Vec<Record>, after: Vec<Record>| {
            gone.extend(before.iter().filter(|r| !after.contains(r)).cloned());
            added.extend(after.iter().filter(|r| !before.contains(r)).cloned());
        };
        compare(
            name_server_records(self.zone(), self.apex()),
            name_server_records(new.zone(), new.apex()),
        );
        match (self, new) {
            (Self::Forward(old_zone), Self::Forward(zone)) => {
                let mut names: Vec<&WireName> = match changed {
                    Some(changed) => changed.iter().collect(),
                    // Any name may have changed: those of both versions, each once.
                    None => {
                        let mut all: Vec<&WireName> = table
                            .nodes()
                            .chain(old_table.nodes())
                            .filter(|(_, n)| n.zone == zone.id || n.zone == old_zone.id)
                            .map(|(name, _)| name)
                            .collect();
                        all.sort_unstable();
                        all.dedup();
                        all
                    }
                };
                // In one order on every node, whatever order the history kept them in.
                names.sort_unstable();
                for name in names {
                    let before = old_table
                        .node_wire(name.as_bytes())
                        .filter(|n| n.zone == old_zone.id);
                    let after = table
                        .node_wire(name.as_bytes())
                        .filter(|n| n.zone == zone.id);
                    // Nodes nothing changed are shared by both tables.
                    if let (Some(b), Some(a)) = (before, after)
                        && std::ptr::eq(b, a)
                    {
                        continue;
                    }
                    let owner = name.to_name();
                    compare(
                        before.map_or_else(Vec::new, |b| node_records(&owner, b, old_zone)),
                        after.map_or_else(Vec::new, |a| node_records(&owner, a, zone)),
                    );
                }
            }
            // Whole record lists: compared as sets (a reverse zone may hold many PTRs).
            (Self::Reverse(old_zone, network), Self::Reverse(zone, _)) => {
                let (g, a) = set_difference(
                    ptr_records(old_table, network, old_zone),
                    ptr_records(table, network, zone),
                );
                gone.extend(g);
                added.extend(a);
            }
            _ => {
                let (g, a) = set_difference(
                    self.records(old_table).collect(),
                    new.records(table).collect(),
                );
                gone.extend(g);
                added.extend(a);
            }
        }
        (gone, added)
    }
}

/// The records of `before` not in `after`, and those of `after` not in `before`, by their
/// wire form: n log n, however many there are.
fn set_difference(before: Vec<Record>, after: Vec<Record>) -> (Vec<Record>, Vec<Record>) {
    use hickory_proto::serialize::binary::BinEncodable;
    let keyed = |records: Vec<Record>| -> std::collections::BTreeMap<Vec<u8>, Record> {
        records
            .into_iter()
            .map(|r| (r.to_bytes().unwrap_or_default(), r))
            .collect()
    };
    let (mut before, mut after) = (keyed(before), keyed(after));
    let common: Vec<Vec<u8>> = before
        .keys()
        .filter(|k| after.contains_key(*k))
        .cloned()
        .collect();
    for key in &common {
        before.remove(key);
        after.remove(key);
    }
    (
        before.into_values().collect(),
        after.into_values().collect(),
    )
}

/// A name's A, AAAA and SRV records.
fn node_records(owner: &Name, node: &Node, zone: &Zone) -> Vec<Record> {
    let ttl = node.ttl_in(zone);
    let mut records = addresses_a(owner, node, ttl);
    records.extend(addresses_aaaa(owner, node, ttl));
    records.extend(srv_records(owner, node, ttl));
    records
}

/// The PTR records of the addresses in `network`.
fn ptr_records(table: &RecordTable, network: &Network, zone: &Zone) -> Vec<Record> {
    table
        .addresses_in(network)
        .flat_map(|address| ptr_records_at(table, address, zone))
        .collect()
}

/// The PTR records of one address: one per name holding it (none when no name is left).
fn ptr_records_at(table: &RecordTable, address: &IpAddr, zone: &Zone) -> Vec<Record> {
    let names = table.ptr_names(address);
    if names.is_empty() {
        return Vec::new();
    }
    let owner = Network::host(*address).reverse_name();
    let ttl = ptr_ttl(table, &names, zone);
    names
        .into_iter()
        .map(|n| Record::from_rdata(owner.clone(), ttl, RData::PTR(PTR(n))))
        .collect()
}
