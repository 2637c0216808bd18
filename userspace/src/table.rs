//! The record table: the one source of truth both answer paths read. The userspace server answers
//! from it directly; the XDP maps are written from it (see `xdp::image`).
//!
//! [`RecordTable::compile`] is a pure function from zone specs and source records: it assigns
//! records to zones, sorts and de-duplicates every record set (every agent behind one VIP answers
//! the same bytes), adds the empty non-terminals, the apex NS records and their addresses, and
//! derives each zone's SOA serial from its content (it changes only when the data does, and
//! agents given the same data agree on it).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use hickory_proto::rr::{LowerName, Name};

use crate::{
    records::{RecordData, SourceRecord, Srv},
    zone::ZoneSpec,
};

/// A compiled zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Index in [`RecordTable::zones`]; also the XDP zone id.
    pub id: u32,
    pub spec: ZoneSpec,
    /// Content hash of the zone's records.
    pub serial: u32,
}

/// Everything at one name. A node without records is an empty non-terminal (or a bare apex).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    pub zone: u32,
    pub apex: bool,
    /// Sorted, no duplicates.
    pub a: Vec<Ipv4Addr>,
    /// Sorted, no duplicates.
    pub aaaa: Vec<Ipv6Addr>,
    /// Sorted, no duplicates.
    pub srv: Vec<Srv>,
    /// The lowest TTL its sources gave its records; the zone's when None.
    pub ttl: Option<u32>,
}

impl Node {
    /// The TTL of the node's records.
    pub fn ttl_in(&self, zone: &Zone) -> u32 {
        self.ttl.unwrap_or(zone.spec.ttl)
    }

    pub fn is_empty(&self) -> bool {
        self.a.is_empty() && self.aaaa.is_empty() && self.srv.is_empty()
    }
}

/// Something a compile dropped, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompileWarning {
    /// A record whose name is in no served zone.
    OutOfZone { name: Name },
    /// A name server address for a name outside its zone (cannot be served).
    OutOfZoneGlue { zone: Name, name: Name },
}

impl std::fmt::Display for CompileWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OutOfZone { name } => write!(f, "{name} is in no served zone; record dropped"),
            Self::OutOfZoneGlue { zone, name } => {
                write!(
                    f,
                    "zone {zone}: name server {name} is outside the zone; its addresses are not served"
                )
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordTable {
    zones: Vec<Zone>,
    nodes: HashMap<LowerName, Node>,
    reverse: HashMap<IpAddr, BTreeSet<Name>>,
}

impl RecordTable {
    /// Compiles zones and records into a table. `zones` must not overlap (the configuration
    /// validates that).
    pub fn compile<'a>(
        zones: &[ZoneSpec],
        records: impl IntoIterator<Item = &'a SourceRecord>,
    ) -> (Self, Vec<CompileWarning>) {
        let mut warnings = Vec::new();
        let mut sorted_zones: Vec<&ZoneSpec> = zones.iter().collect();
        sorted_zones.sort_by(|a, b| a.apex.cmp(&b.apex));

        // name -> records, per zone index; BTree for a deterministic order.
        let mut by_name: BTreeMap<Name, (u32, Node)> = BTreeMap::new();
        let mut add = |name: &Name, zone: u32, ttl: Option<u32>, data: &RecordData| {
            let node = &mut by_name
                .entry(name.to_lowercase())
                .or_insert_with(|| (zone, Node::default()))
                .1;
            node.zone = zone;
            node.ttl = match (node.ttl, ttl) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match data {
                RecordData::A(a) => node.a.push(*a),
                RecordData::Aaaa(a) => node.aaaa.push(*a),
                RecordData::Srv(s) => node.srv.push(s.clone()),
            }
        };
        for record in records {
            match zone_index(&sorted_zones, &record.name) {
                Some(zone) => add(&record.name, zone, record.ttl, &record.data),
                None => warnings.push(CompileWarning::OutOfZone {
                    name: record.name.clone(),
                }),
            }
        }
        for (zone, spec) in sorted_zones.iter().enumerate() {
            for ns in &spec.nameservers {
                if ns.addresses.is_empty() {
                    continue;
                }
                if !spec.apex.zone_of(&ns.name) {
                    warnings.push(CompileWarning::OutOfZoneGlue {
                        zone: spec.apex.clone(),
                        name: ns.name.clone(),
                    });
                    continue;
                }
                for address in &ns.addresses {
                    let data = match address {
                        IpAddr::V4(a) => RecordData::A(*a),
                        IpAddr::V6(a) => RecordData::Aaaa(*a),
                    };
                    add(&ns.name, zone as u32, None, &data);
                }
            }
        }

        let mut nodes: HashMap<LowerName, Node> = HashMap::with_capacity(by_name.len() * 2);
        let mut reverse: HashMap<IpAddr, BTreeSet<Name>> = HashMap::new();
        let mut zone_content: Vec<Vec<u8>> = vec![Vec::new(); sorted_zones.len()];
        for (name, (zone, mut node)) in by_name {
            node.a.sort_unstable();
            node.a.dedup();
            node.aaaa.sort_unstable();
            node.aaaa.dedup();
            node.srv.sort_unstable();
            node.srv.dedup();
            let spec = sorted_zones[zone as usize];
            for a in &node.a {
                reverse
                    .entry(IpAddr::V4(*a))
                    .or_default()
                    .insert(name.clone());
            }
            for a in &node.aaaa {
                reverse
                    .entry(IpAddr::V6(*a))
                    .or_default()
                    .insert(name.clone());
            }
            describe(&mut zone_content[zone as usize], &name, &node);
            // Every ancestor up to the apex exists, as an empty non-terminal at least.
            let mut ancestor = name.base_name();
            while spec.apex.zone_of(&ancestor) && ancestor != spec.apex {
                nodes
                    .entry(LowerName::new(&ancestor))
                    .or_insert_with(|| Node {
                        zone,
                        ..Node::default()
                    });
                ancestor = ancestor.base_name();
            }
            node.zone = zone;
            node.apex = name == spec.apex;
            nodes.insert(LowerName::new(&name), node);
        }
        let zones = sorted_zones
            .iter()
            .enumerate()
            .map(|(id, spec)| {
                nodes
                    .entry(LowerName::new(&spec.apex))
                    .or_insert_with(|| Node {
                        zone: id as u32,
                        ..Node::default()
                    })
                    .apex = true;
                let mut content = zone_content[id].clone();
                describe_spec(&mut content, spec);
                Zone {
                    id: id as u32,
                    spec: (*spec).clone(),
                    serial: fnv1a32(&content),
                }
            })
            .collect();
        (
            Self {
                zones,
                nodes,
                reverse,
            },
            warnings,
        )
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The zone the name falls in, if any.
    pub fn zone_for(&self, name: &Name) -> Option<&Zone> {
        self.zones.iter().find(|z| z.spec.apex.zone_of(name))
    }

    /// The node at `name` (case-insensitive).
    pub fn node(&self, name: &Name) -> Option<&Node> {
        self.nodes.get(&LowerName::new(name))
    }

    /// Every name of every zone, empty non-terminals and apexes included.
    pub fn nodes(&self) -> impl Iterator<Item = (&LowerName, &Node)> {
        self.nodes.iter()
    }

    /// Names that have `address` among their A or AAAA records, sorted.
    pub fn names_with_address(&self, address: &IpAddr) -> Option<&BTreeSet<Name>> {
        self.reverse.get(address)
    }

    /// Number of A, AAAA and SRV records.
    pub fn record_count(&self) -> usize {
        self.nodes
            .values()
            .map(|n| n.a.len() + n.aaaa.len() + n.srv.len())
            .sum()
    }
}

/// The zone whose apex is the name or one of its ancestors.
fn zone_index(zones: &[&ZoneSpec], name: &Name) -> Option<u32> {
    zones
        .iter()
        .position(|z| z.apex.zone_of(name))
        .map(|i| i as u32)
}

/// Appends a canonical text form of a node to a zone's content (for the serial).
fn describe(out: &mut Vec<u8>, name: &Name, node: &Node) {
    use std::io::Write;
    let _ = write!(out, "{name} {:?}", node.ttl);
    for a in &node.a {
        let _ = write!(out, " A {a}");
    }
    for a in &node.aaaa {
        let _ = write!(out, " AAAA {a}");
    }
    for s in &node.srv {
        let _ = write!(
            out,
            " SRV {} {} {} {}",
            s.priority, s.weight, s.port, s.target
        );
    }
    out.push(b'\n');
}

fn describe_spec(out: &mut Vec<u8>, spec: &ZoneSpec) {
    use std::io::Write;
    let soa = &spec.soa;
    let _ = write!(
        out,
        "SOA {} {} {} {} {} {} {} {}",
        spec.ttl, soa.mname, soa.rname, soa.refresh, soa.retry, soa.expire, soa.minimum, spec.apex
    );
    for ns in &spec.nameservers {
        let _ = write!(out, " NS {}", ns.name);
    }
}

/// FNV-1a, 32 bits: a stable content hash (the same on every agent and every Rust version).
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ *b as u32).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn a(n: &str, ip: &str) -> SourceRecord {
        SourceRecord {
            name: name(n),
            ttl: None,
            data: RecordData::A(ip.parse().unwrap()),
        }
    }

    fn zone(apex: &str) -> ZoneSpec {
        ZoneSpec::with_defaults(name(apex))
    }

    #[test]
    fn record_sets_are_sorted_and_deduplicated() {
        let records = [
            a("web.ns.example.", "198.18.0.3"),
            a("web.ns.example.", "198.18.0.1"),
            a("web.ns.example.", "198.18.0.3"),
        ];
        let (table, warnings) = RecordTable::compile(&[zone("example.")], &records);
        assert!(warnings.is_empty());
        let node = table.node(&name("WEB.ns.example.")).unwrap();
        assert_eq!(
            node.a,
            vec![
                "198.18.0.1".parse::<Ipv4Addr>().unwrap(),
                "198.18.0.3".parse().unwrap()
            ]
        );
    }

    #[test]
    fn ancestors_up_to_the_apex_are_empty_non_terminals() {
        let (table, _) = RecordTable::compile(
            &[zone("example.")],
            &[a("x.ingress.example.", "198.18.0.1")],
        );
        let ent = table.node(&name("ingress.example.")).unwrap();
        assert!(ent.is_empty() && !ent.apex);
        assert!(table.node(&name("example.")).unwrap().apex);
        assert!(table.node(&name("y.ingress.example.")).is_none());
    }

    #[test]
    fn records_outside_every_zone_are_dropped_with_a_warning() {
        let (table, warnings) =
            RecordTable::compile(&[zone("example.")], &[a("x.other.", "198.18.0.1")]);
        assert!(table.node(&name("x.other.")).is_none());
        assert_eq!(
            warnings,
            vec![CompileWarning::OutOfZone {
                name: name("x.other.")
            }]
        );
    }

    #[test]
    fn the_serial_follows_the_content_and_not_the_order() {
        let z = [zone("example.")];
        let one = [a("a.example.", "198.18.0.1"), a("b.example.", "198.18.0.2")];
        let other_order = [a("b.example.", "198.18.0.2"), a("a.example.", "198.18.0.1")];
        let changed = [a("a.example.", "198.18.0.1"), a("b.example.", "198.18.0.3")];
        let serial =
            |records: &[SourceRecord]| RecordTable::compile(&z, records).0.zones()[0].serial;
        assert_eq!(serial(&one), serial(&other_order));
        assert_ne!(serial(&one), serial(&changed));
    }

    #[test]
    fn name_server_addresses_become_records_in_the_zone() {
        let mut spec = zone("example.");
        spec.nameservers[0].addresses = vec!["198.18.0.53".parse().unwrap()];
        let (table, _) = RecordTable::compile(&[spec], &[]);
        assert_eq!(
            table.node(&name("ns.example.")).unwrap().a,
            vec!["198.18.0.53".parse::<Ipv4Addr>().unwrap()]
        );
    }
}
