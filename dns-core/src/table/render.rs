//! Records rendered from the table for the wire: a node's addresses and SRV records, a zone's
//! SOA and NS records (with glue), the reverse zones' SOA, and names spelled as the question
//! spells the zone. The userspace answers, the transfers and the kernel image's negative
//! answers all render through here, so the three say the same.

use hickory_proto::rr::{
    Name, RData, Record,
    rdata::{A, AAAA, NS, SOA, SRV},
};

use crate::{
    dns::WireName,
    table::{Network, Node, RecordTable, Zone},
};

/// The TTL of the PTR records naming `names`: one RRset, one TTL, the lowest of the names'.
pub fn ptr_ttl(table: &RecordTable, names: &[Name], zone: &Zone) -> u32 {
    names
        .iter()
        .filter_map(|n| Some(table.node(n)?.ttl_in(table.zone_for(n)?)))
        .min()
        .unwrap_or(zone.spec.ttl)
}

/// The reverse zone of `found` as a zone: its apex, with the SOA fields, TTL and name servers of
/// the first forward zone, and its own serial, which moves only when its content does.
pub fn reverse_zone(table: &RecordTable, found: Option<(Network, Network, bool)>) -> Option<Zone> {
    let (network, _, _) = found?;
    let first = table.zones().first()?;
    let mut spec = first.spec.clone();
    spec.apex = network.reverse_name();
    for ns in &mut spec.nameservers {
        ns.addresses.clear();
    }
    Some(Zone {
        id: u32::MAX,
        spec,
        digest: 0,
        serial: table.reverse_serial(&network),
    })
}

pub fn addresses_a(owner: &Name, node: &Node, ttl: u32) -> Vec<Record> {
    node.a
        .iter()
        .map(|a| Record::from_rdata(owner.clone(), ttl, RData::A(A(*a))))
        .collect()
}

pub fn addresses_aaaa(owner: &Name, node: &Node, ttl: u32) -> Vec<Record> {
    node.aaaa
        .iter()
        .map(|a| Record::from_rdata(owner.clone(), ttl, RData::AAAA(AAAA(*a))))
        .collect()
}

pub fn srv_records(owner: &Name, node: &Node, ttl: u32) -> Vec<Record> {
    node.srv
        .iter()
        .map(|s| {
            let srv = SRV::new(s.priority, s.weight, s.port, s.target.to_name());
            Record::from_rdata(owner.clone(), ttl, RData::SRV(srv))
        })
        .collect()
}

/// SRV targets' addresses, for the additional section: HAProxy's SRV mode reads them there.
/// One set per distinct target, however many SRV records name it.
pub fn srv_target_addresses(node: &Node, table: &RecordTable) -> Vec<Record> {
    let mut out = Vec::new();
    let mut targets: Vec<&WireName> = Vec::new();
    for srv in &node.srv {
        if targets.contains(&&srv.target) {
            continue;
        }
        targets.push(&srv.target);
        let name = srv.target.to_name();
        if let (Some(target), Some(zone)) = (
            table.node_wire(srv.target.as_bytes()),
            table.zone_for(&name),
        ) {
            out.extend(addresses_a(&name, target, target.ttl_in(zone)));
            out.extend(addresses_aaaa(&name, target, target.ttl_in(zone)));
        }
    }
    out
}

pub fn name_server_records(zone: &Zone, apex: &Name) -> Vec<Record> {
    zone.spec
        .nameservers
        .iter()
        .map(|ns| {
            Record::from_rdata(
                apex.clone(),
                zone.spec.ttl,
                RData::NS(NS(respell(&ns.name, zone, apex))),
            )
        })
        .collect()
}

/// In-zone name servers' addresses, for the additional section (glue).
pub fn name_server_addresses(zone: &Zone, table: &RecordTable, apex: &Name) -> Vec<Record> {
    let mut out = Vec::new();
    for ns in &zone.spec.nameservers {
        if let Some(node) = table.node(&ns.name) {
            let owner = respell(&ns.name, zone, apex);
            out.extend(addresses_a(&owner, node, node.ttl_in(zone)));
            out.extend(addresses_aaaa(&owner, node, node.ttl_in(zone)));
        }
    }
    out
}

/// The zone's SOA record, owned by the apex as the question spells it.
pub fn soa_record(zone: &Zone, apex: &Name) -> Record {
    let soa = &zone.spec.soa;
    let rdata = SOA::new(
        respell(&soa.mname, zone, apex),
        respell(&soa.rname, zone, apex),
        zone.serial,
        soa.refresh,
        soa.retry,
        soa.expire,
        soa.minimum,
    );
    Record::from_rdata(apex.clone(), zone.spec.ttl, RData::SOA(rdata))
}

/// The zone's SOA record as negative answers carry it: its TTL is the lower of the SOA's own
/// and its MINIMUM field, the negative-caching TTL (RFC 2308 §3).
pub fn negative_soa_record(zone: &Zone, apex: &Name) -> Record {
    let mut record = soa_record(zone, apex);
    record.ttl = zone.spec.ttl.min(zone.spec.soa.minimum);
    record
}

/// The question's last labels, those of the zone apex, in the question's spelling.
pub fn spelled_apex(qname: &Name, zone: &Zone) -> Name {
    let mut apex = qname.trim_to(zone.spec.apex.num_labels() as usize);
    apex.set_fqdn(true);
    apex
}

/// A name inside the zone, with its apex part spelled as `apex` (the question's spelling), so
/// that it compresses against the question; names outside the zone are returned unchanged.
pub fn respell(name: &Name, zone: &Zone, apex: &Name) -> Name {
    if !zone.spec.apex.zone_of(name) {
        return name.clone();
    }
    let above = name.num_labels() as usize - zone.spec.apex.num_labels() as usize;
    Name::from_labels(name.iter().take(above))
        .and_then(|prefix| prefix.append_domain(apex))
        .unwrap_or_else(|_| name.clone())
}
