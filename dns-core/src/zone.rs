//! What a served zone is: its apex, TTL, SOA fields and name servers. How a zone is written
//! (the record file's `zones[]`, the configuration's) is the agent's `zone_entry`.

use std::net::IpAddr;

use hickory_proto::rr::Name;
use hostport_dns_common::limits::DEFAULT_TTL;

/// SOA timers used when the configuration does not set them (seconds; the values Knot DNS
/// uses by default, so answers compare directly).
pub const DEFAULT_REFRESH: i32 = 3600;
pub const DEFAULT_RETRY: i32 = 600;
pub const DEFAULT_EXPIRE: i32 = 86_400;

/// One zone hostport-dns is authoritative for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSpec {
    /// Lower-case, fully qualified.
    pub apex: Name,
    /// TTL of every record in the zone, the SOA included.
    pub ttl: u32,
    pub soa: SoaSpec,
    /// The apex NS records, with addresses for those inside the zone.
    pub nameservers: Vec<NameServer>,
    /// A source of the zone has not delivered yet: every query in it gets SERVFAIL (Extended DNS
    /// Error 14, Not Ready), from userspace only (the kernel table leaves it out).
    pub pending: bool,
    /// Answers rotate their A and AAAA records by the query ID (`rotateAnswers`), on both
    /// paths alike.
    pub rotate: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoaSpec {
    pub mname: Name,
    pub rname: Name,
    pub refresh: i32,
    pub retry: i32,
    pub expire: i32,
    /// Negative-caching TTL (RFC 2308).
    pub minimum: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameServer {
    pub name: Name,
    pub addresses: Vec<IpAddr>,
}

impl ZoneSpec {
    /// A zone with the defaults: TTL 5, server `ns.<apex>`, mailbox `hostmaster.<apex>`.
    pub fn with_defaults(apex: Name) -> Self {
        let mname = in_zone(&apex, "ns");
        let rname = in_zone(&apex, "hostmaster");
        Self {
            ttl: DEFAULT_TTL,
            soa: SoaSpec {
                mname: mname.clone(),
                rname,
                refresh: DEFAULT_REFRESH,
                retry: DEFAULT_RETRY,
                expire: DEFAULT_EXPIRE,
                minimum: DEFAULT_TTL,
            },
            nameservers: vec![NameServer {
                name: mname,
                addresses: Vec::new(),
            }],
            pending: false,
            rotate: false,
            apex,
        }
    }
}

/// `<label>.<apex>`; the label is a fixed ASCII word, so this cannot fail.
fn in_zone(apex: &Name, label: &str) -> Name {
    Name::from_ascii(label)
        .and_then(|l| l.append_domain(apex))
        .unwrap_or_else(|_| apex.clone())
}

/// Zones must not nest or repeat: every name has exactly one zone.
pub fn check_zones_do_not_overlap(zones: &[ZoneSpec]) -> Result<(), String> {
    for (i, a) in zones.iter().enumerate() {
        for b in &zones[i + 1..] {
            if a.apex.zone_of(&b.apex) || b.apex.zone_of(&a.apex) {
                return Err(format!(
                    "zones {} and {} overlap: zones may not nest or repeat",
                    a.apex, b.apex
                ));
            }
        }
    }
    Ok(())
}
