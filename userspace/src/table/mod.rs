//! The record table: the one source of truth both answer paths read. The userspace server answers
//! from it directly; the XDP maps are written from it (see `xdp::image`).
//!
//! [`RecordTable::compile`] is a pure function from zone specs and source records: it assigns
//! records to zones, sorts and de-duplicates every record set (every agent behind one VIP answers
//! the same bytes), adds the empty non-terminals, the apex NS records and their addresses, and
//! derives each zone's SOA serial from its content (it changes only when the data does, and
//! agents given the same data agree on it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::{LowerName, Name};
// Fx: these maps are rebuilt on every change and keyed by data the agent controls.
use rustc_hash::FxHashMap as HashMap;
use std::collections::hash_map::Entry;

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
    /// Address → the names holding it, sorted.
    reverse: HashMap<IpAddr, Vec<Name>>,
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

        // Lower-case name → (zone, records, the name). A hash map: a compile is on the path of
        // every change, and ordered maps of names compare case-insensitively label by label.
        let mut by_name: HashMap<LowerName, (u32, Node, Name)> = HashMap::default();
        let mut add = |name: &Name,
                       zone: Option<u32>,
                       ttl: Option<u32>,
                       data: &RecordData|
         -> Result<(), Name> {
            // The zone is looked up once per name, not once per record.
            let entry = match by_name.entry(LowerName::new(name)) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    let zone = zone
                        .or_else(|| zone_index(&sorted_zones, name))
                        .ok_or_else(|| name.clone())?;
                    let name = entry.key().into();
                    entry.insert((zone, Node::default(), name))
                }
            };
            let node = &mut entry.1;
            node.ttl = match (node.ttl, ttl) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match data {
                RecordData::A(a) => node.a.push(*a),
                RecordData::Aaaa(a) => node.aaaa.push(*a),
                RecordData::Srv(s) => node.srv.push(s.clone()),
            }
            Ok(())
        };
        for record in records {
            if let Err(name) = add(&record.name, None, record.ttl, &record.data) {
                warnings.push(CompileWarning::OutOfZone { name });
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
                    // In the zone: checked just above.
                    let _ = add(&ns.name, Some(zone as u32), None, &data);
                }
            }
        }

        // Parents before children (canonical order): the walk up to the apex below stops at the
        // first ancestor already there. The same order makes the serial deterministic.
        let mut named: Vec<(LowerName, (u32, Node, Name))> = by_name.into_iter().collect();
        named.sort_unstable_by(|a, b| a.1.2.cmp(&b.1.2));
        let mut nodes: HashMap<LowerName, Node> =
            HashMap::with_capacity_and_hasher(named.len() * 2, Default::default());
        let mut reverse: HashMap<IpAddr, Vec<Name>> = HashMap::default();
        let mut serials: Vec<Fnv1a32> = vec![Fnv1a32::default(); sorted_zones.len()];
        for (key, (zone, mut node, name)) in named {
            node.a.sort_unstable();
            node.a.dedup();
            node.aaaa.sort_unstable();
            node.aaaa.dedup();
            node.srv.sort_unstable();
            node.srv.dedup();
            let spec = sorted_zones[zone as usize];
            for address in node
                .a
                .iter()
                .map(|a| IpAddr::V4(*a))
                .chain(node.aaaa.iter().map(|a| IpAddr::V6(*a)))
            {
                reverse.entry(address).or_default().push(name.clone());
            }
            describe(&mut serials[zone as usize], &name, &node);
            let mut ancestor = name.base_name();
            while spec.apex.zone_of(&ancestor) && ancestor != spec.apex {
                let key = LowerName::new(&ancestor);
                if nodes.contains_key(&key) {
                    break;
                }
                nodes.insert(
                    key,
                    Node {
                        zone,
                        ..Node::default()
                    },
                );
                ancestor = ancestor.base_name();
            }
            node.zone = zone;
            node.apex = name == spec.apex;
            nodes.insert(key, node);
        }
        for names in reverse.values_mut() {
            names.sort_unstable();
            names.dedup();
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
                let mut serial = serials[id].clone();
                describe_spec(&mut serial, spec);
                Zone {
                    id: id as u32,
                    spec: (*spec).clone(),
                    serial: serial.finish(),
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
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&LowerName, &Node)> {
        self.nodes.iter()
    }

    /// Names that have `address` among their A or AAAA records, sorted.
    pub fn names_with_address(&self, address: &IpAddr) -> Option<&[Name]> {
        self.reverse.get(address).map(Vec::as_slice)
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

/// FNV-1a, 32 bits: a stable content hash (the same on every agent and every Rust version).
#[derive(Clone)]
struct Fnv1a32(u32);

impl Default for Fnv1a32 {
    fn default() -> Self {
        Self(0x811c_9dc5)
    }
}

impl Fnv1a32 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u32::from(*b)).wrapping_mul(0x0100_0193);
        }
    }

    fn finish(&self) -> u32 {
        self.0
    }
}

/// Feeds a node's content to its zone's serial: name, TTL, and records in order.
fn describe(serial: &mut Fnv1a32, name: &Name, node: &Node) {
    serial.write(name.to_ascii().as_bytes());
    serial.write(&node.ttl.unwrap_or(u32::MAX).to_be_bytes());
    for a in &node.a {
        serial.write(b"A");
        serial.write(&a.octets());
    }
    for a in &node.aaaa {
        serial.write(b"AAAA");
        serial.write(&a.octets());
    }
    for s in &node.srv {
        serial.write(b"SRV");
        serial.write(
            &[
                s.priority.to_be_bytes(),
                s.weight.to_be_bytes(),
                s.port.to_be_bytes(),
            ]
            .concat(),
        );
        serial.write(s.target.to_ascii().as_bytes());
    }
    serial.write(b"\n");
}

fn describe_spec(serial: &mut Fnv1a32, spec: &ZoneSpec) {
    let soa = &spec.soa;
    let text = format!(
        "SOA {} {} {} {} {} {} {} {}",
        spec.ttl, soa.mname, soa.rname, soa.refresh, soa.retry, soa.expire, soa.minimum, spec.apex
    );
    serial.write(text.as_bytes());
    for ns in &spec.nameservers {
        serial.write(format!(" NS {}", ns.name).as_bytes());
    }
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
