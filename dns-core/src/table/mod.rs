//! The record table: the one source of truth both answer paths read. The userspace server answers
//! from it directly; the agent writes the XDP maps from it (its `xdp::entries`).
//!
//! A table maps every name of every zone to its [`Node`]: record sets sorted and de-duplicated
//! (every agent behind one VIP answers the same bytes), empty non-terminals and apexes included,
//! and each zone's content digest (it changes only when the data does, and agents given the same
//! data agree on it), from which the agent numbers the zone's SOA serial. [`TableBuilder`] compiles it incrementally;
//! [`RecordTable::compile`] is the same compiler run once over all records.
//!
//! The maps are persistent (hash array mapped tries): a copy shares everything with the
//! original, so publishing a new table to the server costs nothing whatever its size.

mod builder;
pub mod catalog;
mod name_state;
pub mod render;
pub mod reverse;
mod serial;

use std::{
    borrow::Borrow,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use hickory_proto::rr::{LowerName, Name};
use rustc_hash::FxBuildHasher;

use crate::dns::WireName;

pub use builder::TableBuilder;
pub use reverse::{Network, ReverseConfig};

use crate::{
    records::{SourceRecord, Srv},
    zone::ZoneSpec,
};

/// A persistent hash map: cheap to copy, updated by copying only the path to the change.
type PersistentMap<K, V> =
    imbl::GenericHashMap<K, V, FxBuildHasher, imbl::shared_ptr::DefaultSharedPtr>;

/// A compiled zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Index in [`RecordTable::zones`]; also the XDP zone id.
    pub id: u32,
    pub spec: ZoneSpec,
    /// A digest of the zone's content: equal for equal content on every agent.
    pub digest: u64,
    /// The SOA serial: assigned by the agent (its `serials`), from the digest in a table
    /// compiled alone.
    pub serial: u32,
}

/// A node's A records, held inside the node while they are few: most names hold a few addresses
/// (one pod, a file entry of three), and a separate allocation for them took 32 bytes a name
/// more (at 100,000 names, 3 MB). Past four, on the heap like a `Vec`.
pub type AddressSet = smallvec::SmallVec<[Ipv4Addr; 4]>;

/// A node's records of a type most names do not have (AAAA, SRV): one pointer, nothing
/// allocated while empty, where an empty `Vec` takes 24 bytes in every node.
pub type RareSet<T> = thin_vec::ThinVec<T>;

/// Everything at one name. A node without records is an empty non-terminal (or a bare apex).
/// 56 bytes (with its `Arc`, 72): at 100,000 names the node is most of what the table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    pub zone: u32,
    pub apex: bool,
    /// Sorted, no duplicates; up to four inside the node.
    pub a: AddressSet,
    /// Sorted, no duplicates.
    pub aaaa: RareSet<Ipv6Addr>,
    /// Sorted, no duplicates.
    pub srv: RareSet<Srv>,
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

    /// Number of A, AAAA and SRV records.
    pub fn record_count(&self) -> usize {
        self.a.len() + self.aaaa.len() + self.srv.len()
    }

    /// Its A and AAAA addresses.
    pub fn addresses(&self) -> Vec<IpAddr> {
        let v4 = self.a.iter().map(|a| IpAddr::V4(*a));
        v4.chain(self.aaaa.iter().map(|a| IpAddr::V6(*a))).collect()
    }
}

/// Something a compile dropped, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompileWarning {
    /// A record whose name is in no served zone.
    OutOfZone { name: WireName },
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
    /// A B-tree, not a hash trie: full nodes (about 50 bytes a name at 100k names, where the
    /// trie's sparse leaves took 150), in the order of the names' wire form.
    nodes: imbl::OrdMap<WireName, Arc<Node>>,
    /// Address → the names holding it, in canonical order.
    reverse: PersistentMap<IpAddr, Arc<[WireName]>>,
    /// The addresses of `reverse`, in order: which networks hold any.
    addresses: imbl::OrdSet<IpAddr>,
    /// Which reverse zones are served, and which names get no PTR.
    reverse_config: Arc<ReverseConfig>,
    /// Number of A, AAAA and SRV records.
    records: usize,
    /// Each reverse zone's digest and serial: the zones holding PTR records, and every
    /// configured one. Numbered by digest alone until the agent numbers them.
    reverse_serials: imbl::OrdMap<Network, ReverseSerial>,
    /// The catalog zone of the zones served, when one is configured.
    catalog: Option<Arc<catalog::Catalog>>,
    /// Derived reverse zones that lost their last PTR record and are served empty while the
    /// agent holds them (the catalog's grace period): a node's restart does not make every
    /// catalog consumer delete the zone and create it again.
    held_reverse: imbl::OrdSet<Network>,
}

/// A reverse zone's content digest and serial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReverseSerial {
    pub digest: u64,
    pub serial: u32,
}

impl RecordTable {
    /// Compiles zones and records into a table in one go. `zones` must not overlap (the
    /// configuration validates that).
    pub fn compile<R: Borrow<SourceRecord>>(
        zones: &[ZoneSpec],
        records: impl IntoIterator<Item = R>,
    ) -> (Self, Vec<CompileWarning>) {
        let (mut builder, mut warnings) = TableBuilder::new(zones);
        warnings.extend(builder.add(records));
        builder.finish();
        (builder.table().clone(), warnings)
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
        let mut wire = Vec::with_capacity(name.len() + 1);
        crate::dns::wire_name::write_lower(name, &mut wire);
        self.node_wire(&wire)
    }

    /// The node at a name already in lower case.
    pub fn node_lower(&self, name: &LowerName) -> Option<&Node> {
        self.node(name.borrow())
    }

    /// The node at a name in lower-case wire form.
    pub fn node_wire(&self, wire: &[u8]) -> Option<&Node> {
        self.nodes.get(wire).map(Arc::as_ref)
    }

    /// Every name of every zone, empty non-terminals and apexes included.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&WireName, &Node)> {
        self.nodes.iter().map(|(name, node)| (name, node.as_ref()))
    }

    /// Names that have `address` among their A or AAAA records, in canonical order.
    pub fn names_with_address(&self, address: &IpAddr) -> Option<&[WireName]> {
        self.reverse.get(address).map(AsRef::as_ref)
    }

    /// The targets of `address`'s PTR records: its names, but those left out.
    pub fn ptr_names(&self, address: &IpAddr) -> Vec<Name> {
        self.names_with_address(address)
            .unwrap_or_default()
            .iter()
            .map(WireName::to_name)
            .filter(|name| self.reverse_config.serves(name))
            .collect()
    }

    /// The addresses in `network` that some name holds, in order.
    pub fn addresses_in(&self, network: &Network) -> impl Iterator<Item = &IpAddr> {
        let (first, last) = network.range();
        self.addresses.range(first..=last)
    }

    /// The reverse zones served now: the configured ones, or else the /24 and /64 networks that
    /// hold an address with a PTR record.
    pub fn reverse_zones(&self) -> Vec<Network> {
        if let Some(zones) = &self.reverse_config.zones {
            return zones.clone();
        }
        let mut networks: Vec<Network> = self
            .addresses
            .iter()
            .filter_map(|address| {
                let prefix = if address.is_ipv4() {
                    reverse::DERIVED_V4_PREFIX
                } else {
                    reverse::DERIVED_V6_PREFIX
                };
                Network::new(*address, prefix)
            })
            .collect();
        networks.dedup();
        networks.retain(|network| self.has_ptr_in(network));
        networks.extend(self.held_reverse.iter().copied());
        networks.sort_unstable();
        networks.dedup();
        networks
    }

    /// The reverse zones numbered now (those holding PTR records, the configured ones, and the
    /// held ones), in order: as many as there are zones, no walk of the addresses.
    pub fn reverse_networks(&self) -> impl Iterator<Item = &Network> {
        self.reverse_serials.keys()
    }

    /// Whether the derived reverse zone of `network` is served because it is held, empty.
    pub fn is_held(&self, network: &Network) -> bool {
        self.held_reverse.contains(network)
    }

    /// Whether the reverse zones are configured (`reverseZones.zones`), not derived.
    pub fn reverse_zones_configured(&self) -> bool {
        self.reverse_config.zones.is_some()
    }

    /// Whether any address in `network` has a PTR record.
    pub fn has_ptr_in(&self, network: &Network) -> bool {
        let (first, last) = network.range();
        self.addresses
            .range(first..=last)
            .any(|address| !self.ptr_names(address).is_empty())
    }

    /// The reverse zone `name` falls in (None: not one this server is authoritative for), the
    /// network `name` stands for, and whether labels that are no part of an address come first.
    pub fn reverse_zone_for(&self, name: &Name) -> Option<(Network, Network, bool)> {
        let (query, extra) = reverse::network_of(&name.to_lowercase())?;
        let zone = match &self.reverse_config.zones {
            Some(zones) => *zones
                .iter()
                .filter(|zone| zone.contains(&query))
                .max_by_key(|zone| zone.prefix)?,
            None => {
                let prefix = if query.address.is_ipv4() {
                    reverse::DERIVED_V4_PREFIX
                } else {
                    reverse::DERIVED_V6_PREFIX
                };
                let zone =
                    Network::new(query.address, prefix).filter(|_| query.prefix >= prefix)?;
                (self.has_ptr_in(&zone) || self.is_held(&zone)).then_some(zone)?
            }
        };
        Some((zone, query, extra))
    }

    /// Number of A, AAAA and SRV records.
    pub fn record_count(&self) -> usize {
        self.records
    }

    /// The catalog zone (RFC 9432), when one is configured and a forward zone is served.
    pub fn catalog(&self) -> Option<&catalog::Catalog> {
        self.catalog.as_deref()
    }

    /// The catalog's members now: every forward zone ready, then every reverse zone served.
    fn catalog_members(&self) -> Vec<catalog::Member> {
        let forward = self
            .zones
            .iter()
            .filter(|z| !z.spec.pending)
            .map(|z| catalog::Member {
                zone: z.spec.apex.clone(),
                group: catalog::Group::Forward,
            });
        let reverse = self.reverse_serials.keys().map(|network| catalog::Member {
            zone: network.reverse_name(),
            group: catalog::Group::Reverse,
        });
        forward.chain(reverse).collect()
    }

    /// The serial of the reverse zone of `network`: it moves only when that zone's PTR records
    /// (or the SOA fields and name servers it takes from the first forward zone) change. 0 for
    /// a zone not served.
    pub fn reverse_serial(&self, network: &Network) -> u32 {
        self.reverse_serials.get(network).map_or(0, |r| r.serial)
    }

    /// The reverse zone `address`'s PTR records belong to, if one is served for it: the
    /// configured zone holding it, or else its derived /24 or /64.
    pub fn reverse_network_of(&self, address: &IpAddr) -> Option<Network> {
        let host = Network::host(*address);
        match &self.reverse_config.zones {
            Some(zones) => zones.iter().find(|zone| zone.contains(&host)).copied(),
            None => {
                let prefix = if address.is_ipv4() {
                    reverse::DERIVED_V4_PREFIX
                } else {
                    reverse::DERIVED_V6_PREFIX
                };
                Network::new(*address, prefix)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RecordData;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    /// What every name costs, once per holder: at 100,000 names each byte here is 100 kB (the
    /// sizes the memory notes in `WireName`, `SourceRecord` and `Node` count on).
    #[test]
    fn names_records_and_nodes_stay_small() {
        assert_eq!(size_of::<WireName>(), 8);
        assert_eq!(size_of::<Option<WireName>>(), 8);
        assert_eq!(size_of::<SourceRecord>(), 40);
        assert_eq!(size_of::<Node>(), 56);
        assert_eq!(size_of::<name_state::NameState>(), 24);
        let mut node = Node::default();
        node.a.extend((1..=4).map(|i| Ipv4Addr::new(198, 18, 0, i)));
        assert!(!node.a.spilled(), "four A records inside the node");
    }

    fn a(n: &str, ip: &str) -> SourceRecord {
        SourceRecord {
            name: WireName::from_name(&name(n)),
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
            node.a.as_slice(),
            [
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
                name: WireName::from_name(&name("x.other."))
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
            table.node(&name("ns.example.")).unwrap().a.as_slice(),
            ["198.18.0.53".parse::<Ipv4Addr>().unwrap()]
        );
    }

    #[test]
    fn a_held_reverse_zone_is_served_empty_and_stays_in_the_catalog_until_let_go() {
        let (mut builder, _) = TableBuilder::new(&[zone("example.")]);
        builder.set_catalog(Some(catalog::CatalogSpec {
            apex: name("catalog.test."),
        }));
        let host = a("h.example.", "198.18.9.1");
        builder.add([&host]);
        builder.finish();
        let network = Network::new("198.18.9.1".parse().unwrap(), 24).unwrap();
        let reverse = name("9.18.198.in-addr.arpa.");
        let members = |table: &RecordTable| -> Vec<String> {
            let catalog = table.catalog().expect("a catalog");
            catalog.members.iter().map(|m| m.zone.to_ascii()).collect()
        };
        assert_eq!(
            members(builder.table()),
            ["9.18.198.in-addr.arpa.", "example."]
        );
        let full = builder.table().reverse_serial(&network);
        builder.remove([&host]);
        builder.finish();
        assert!(
            builder.table().reverse_zone_for(&reverse).is_none(),
            "emptied: gone"
        );
        assert_eq!(members(builder.table()), ["example."]);
        builder.hold_reverse([network]);
        let held = builder.table();
        assert!(
            held.reverse_zone_for(&reverse).is_some(),
            "held: served, empty"
        );
        assert_eq!(held.reverse_zones(), [network]);
        assert_ne!(held.reverse_serial(&network), full, "its content changed");
        assert_eq!(members(held), ["9.18.198.in-addr.arpa.", "example."]);
        builder.hold_reverse(Vec::new());
        assert!(
            builder.table().reverse_zone_for(&reverse).is_none(),
            "let go"
        );
        assert_eq!(members(builder.table()), ["example."]);
    }
}
