//! Zone content digests: they change only when the zone's data does, and agents given the same
//! data agree on them, whatever order the data arrived in. The agent numbers zones from them
//! (the agent's `serials`); a table compiled alone takes its serials from them.
//!
//! Each name contributes a stable 64-bit hash of its records; a zone's content is the wrapping
//! sum of those, so a change to one name updates the sum without visiting the others.

use super::Node;
use crate::dns::WireName;
use crate::zone::ZoneSpec;

/// FNV-1a, 64 bits: a stable hash (the same on every agent and every Rust version).
struct Fnv1a64(u64);

impl Fnv1a64 {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// What a name adds to its zone's content sum: its name, TTL and records in order. Names
/// without records (apexes, empty non-terminals) add nothing: they follow from the others.
pub fn name_part(name: &WireName, node: &Node) -> u64 {
    if node.is_empty() {
        return 0;
    }
    let mut h = Fnv1a64::new();
    write_text(&mut h, name);
    h.write(&node.ttl.unwrap_or(u32::MAX).to_be_bytes());
    for a in &node.a {
        h.write(b"A");
        h.write(&a.octets());
    }
    for a in &node.aaaa {
        h.write(b"AAAA");
        h.write(&a.octets());
    }
    for s in &node.srv {
        h.write(b"SRV");
        h.write(&s.priority.to_be_bytes());
        h.write(&s.weight.to_be_bytes());
        h.write(&s.port.to_be_bytes());
        write_text(&mut h, &s.target);
    }
    h.0
}

/// A stable 64-bit hash of `bytes` (FNV-1a): the same on every agent and every Rust version.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.write(bytes);
    h.0
}

/// A name's presentation form, with the final dot, as hashed since the first serials: the
/// labels of the table's names are letters, digits, `-` and `_`, which need no escapes.
fn write_text(h: &mut Fnv1a64, name: &WireName) {
    if name.is_root() {
        h.write(b".");
    }
    for label in name.labels() {
        h.write(label);
        h.write(b".");
    }
}

/// The digest of a zone whose names sum to `content`: the names and the SOA and NS fields.
pub fn zone_digest(content: u64, spec: &ZoneSpec) -> u64 {
    let mut h = Fnv1a64::new();
    h.write(&content.to_be_bytes());
    let soa = &spec.soa;
    let text = format!(
        "SOA {} {} {} {} {} {} {} {}",
        spec.ttl, soa.mname, soa.rname, soa.refresh, soa.retry, soa.expire, soa.minimum, spec.apex
    );
    h.write(text.as_bytes());
    for ns in &spec.nameservers {
        h.write(format!(" NS {}", ns.name).as_bytes());
    }
    h.0
}

/// What an address's PTR records add to its reverse zone's sum: the address, the TTL and the
/// names, in order.
pub fn address_part(
    address: &std::net::IpAddr,
    names: &[hickory_proto::rr::Name],
    ttl: u32,
) -> u64 {
    let mut h = Fnv1a64::new();
    match address {
        std::net::IpAddr::V4(a) => h.write(&a.octets()),
        std::net::IpAddr::V6(a) => h.write(&a.octets()),
    }
    h.write(&ttl.to_be_bytes());
    for name in names {
        h.write(b"PTR ");
        h.write(name.to_ascii().to_ascii_lowercase().as_bytes());
    }
    h.0
}

/// The digest of the reverse zone of `network` whose addresses sum to `content`, with the SOA
/// fields and name servers of `first` (the first forward zone), which it serves.
pub fn reverse_digest(content: u64, network: &super::Network, first: &ZoneSpec) -> u64 {
    let mut h = Fnv1a64::new();
    h.write(&content.to_be_bytes());
    h.write(network.reverse_name().to_ascii().as_bytes());
    zone_digest(h.0, first)
}

/// The serial a zone takes from its digest alone.
pub fn serial_of_digest(digest: u64) -> u32 {
    (digest ^ (digest >> 32)) as u32
}
