//! The table's names and zones in the form the XDP program reads them (`hostport_dns_common::
//! entry`): pure functions, tested without a kernel.
//!
//! The answers the kernel builds from these are exactly what the userspace server sends for the
//! same query: the records' bytes are summed here as the kernel writes them, and the SOA template
//! is produced by the same encoder (hickory) the server uses, so both compress the same way.

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query},
    rr::RecordType,
};
use hostport_dns_common::{
    csum::sum16,
    dns::{
        CLASS_IN, HEADER_LEN, POINTER_MARK, POINTER_TO_QUESTION, QTYPE_QCLASS_LEN, RR_FIXED_LEN,
        TYPE_A, TYPE_AAAA,
    },
    entry::{
        BigEntry, Entry, EntryClass, EntryHead, NAME_FLAG_APEX, NAME_FLAG_ROTATE, NameEntry,
        SmallEntry, SoaPatch, ZONE_FLAG_NEGATIVE_IN_USERSPACE, ZoneEntry,
    },
    generation::EntryCounts,
    hash::name_hash,
    limits::{AAAA_ADDR_LEN, MAX_SOA_GUARDS, MAX_SOA_PATCHES, MAX_SOA_RR_LEN},
};

use hostport_dns_core::{
    dns::WireName,
    table::{Node, RecordTable, Zone, render::negative_soa_record},
};

/// A name in kernel form: the entry of the size it needs, or none (userspace answers it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Built {
    Small(SmallEntry),
    Name(NameEntry),
    Big(Box<BigEntry>),
    /// More records than an entry holds.
    Pass,
}

impl Built {
    /// The kind of entry it is, if it is one.
    pub fn class(&self) -> Option<EntryClass> {
        match self {
            Built::Small(_) => Some(EntryClass::Small),
            Built::Name(_) => Some(EntryClass::Name),
            Built::Big(_) => Some(EntryClass::Big),
            Built::Pass => None,
        }
    }
}

/// The kind of entry `node`, named by `wire`, takes in the kernel table (`None`: userspace
/// answers it): what the table's size follows.
pub fn class_of(wire: &[u8], node: &Node) -> Option<EntryClass> {
    EntryClass::for_name(wire.len(), node.a.len(), node.aaaa.len())
}

/// What the names of a table need of the kernel table: entries of each kind ([`EntryClass`] as
/// index), in all and per zone id. The table's size follows the total, the zones' admission the
/// zones'; one walk over the names serves both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableNeeds {
    pub total: EntryCounts,
    pub by_zone: Vec<EntryCounts>,
}

impl TableNeeds {
    pub fn of(table: &RecordTable) -> Self {
        let mut needs = Self {
            total: [0; 3],
            by_zone: vec![[0; 3]; table.zones().len()],
        };
        for (name, node) in table.nodes() {
            if let (Some(class), Some(zone)) = (
                class_of(name.as_bytes(), node),
                needs.by_zone.get_mut(node.zone as usize),
            ) {
                zone[class as usize] += 1;
                needs.total[class as usize] += 1;
            }
        }
        needs
    }
}

/// The entry of `name` (whose wire form is `wire`), holding `node` of `zone`; its zone's answers
/// count in `counter_slot`.
pub fn build(wire: &[u8], node: &Node, zone: &Zone, counter_slot: u16) -> Built {
    let (a, aaaa) = (node.a.len(), node.aaaa.len());
    let Some(class) = class_of(wire, node) else {
        return Built::Pass;
    };
    let ttl = node.ttl_in(zone);
    let head = EntryHead {
        name_len: wire.len() as u8,
        a_count: a as u8,
        aaaa_count: aaaa as u8,
        flags: name_flags(node, zone),
        zone: zone.id as u16,
        a_csum: records_sum(TYPE_A, ttl, node.a.iter().map(|a| a.octets())),
        aaaa_csum: records_sum(TYPE_AAAA, ttl, node.aaaa.iter().map(|a| a.octets())),
        counter_slot,
        ttl: ttl.to_be_bytes(),
    };
    match class {
        EntryClass::Small => Built::Small(fill(head, wire, node)),
        EntryClass::Name => Built::Name(fill(head, wire, node)),
        EntryClass::Big => Built::Big(Box::new(fill(head, wire, node))),
    }
}

/// The `NAME_FLAG_*` bits of `node` in `zone`.
fn name_flags(node: &Node, zone: &Zone) -> u8 {
    let apex = if node.apex { NAME_FLAG_APEX } else { 0 };
    let rotate = if zone.spec.rotate {
        NAME_FLAG_ROTATE
    } else {
        0
    };
    apex | rotate
}

/// An entry of payload `P`: the AAAA addresses, then the A addresses, from the front; the name
/// at the back. The caller checked that they fit.
fn fill<const P: usize>(head: EntryHead, wire: &[u8], node: &Node) -> Entry<P> {
    let mut entry = Entry::<P>::EMPTY;
    entry.head = head;
    let mut at = 0;
    for address in &node.aaaa {
        entry.payload[at..at + AAAA_ADDR_LEN].copy_from_slice(&address.octets());
        at += AAAA_ADDR_LEN;
    }
    for address in &node.a {
        entry.payload[at..at + 4].copy_from_slice(&address.octets());
        at += 4;
    }
    entry.payload[P - wire.len()..].copy_from_slice(wire);
    entry
}

/// `csum::sum16` of the answer records of `addresses`, each owner a pointer to the question, as
/// the kernel writes them one after the other (every record an even number of bytes: each
/// starts at the same parity).
fn records_sum<const N: usize>(
    rtype: u16,
    ttl: u32,
    addresses: impl Iterator<Item = [u8; N]>,
) -> u16 {
    let mut fixed = [0u8; RR_FIXED_LEN + 2];
    fixed[..2].copy_from_slice(&POINTER_TO_QUESTION.to_be_bytes());
    fixed[2..4].copy_from_slice(&rtype.to_be_bytes());
    fixed[4..6].copy_from_slice(&CLASS_IN.to_be_bytes());
    fixed[6..10].copy_from_slice(&ttl.to_be_bytes());
    fixed[10..12].copy_from_slice(&(N as u16).to_be_bytes());
    let fixed = u64::from(sum16(&fixed));
    let sum = addresses.fold(0u64, |sum, address| {
        sum + fixed + u64::from(sum16(&address))
    });
    hostport_dns_common::csum::fold(sum)
}

/// The zone's entry: its SOA record as a template, encoded by hickory for a question that is the
/// apex itself, its compression pointers turned into patches relative to the question's length.
pub fn zone_entry(zone: &Zone, seed: u64, counter_slot: u32) -> ZoneEntry {
    zone_template(zone, seed, counter_slot).0
}

/// [`zone_entry`], and where the SOA serial sits in its template (when the kernel writes the
/// zone's negative answers): a change of serial alone is a patch there ([`with_serial`]), not a
/// new encoding.
pub fn zone_template(zone: &Zone, seed: u64, counter_slot: u32) -> (ZoneEntry, Option<usize>) {
    let mut entry = ZoneEntry::EMPTY;
    let mut serial_at = None;
    let apex = &zone.spec.apex;
    let apex_wire = WireName::from_name(apex);
    let apex_wire = apex_wire.as_bytes();
    entry.apex_hash = name_hash(seed, apex_wire);
    entry.apex_len = apex_wire.len() as u16;
    entry.counter_slot = counter_slot;
    match soa_template(zone, apex_wire.len()) {
        Some((template, patches, serial)) => {
            serial_at = Some(serial);
            entry.soa_rr[..template.len()].copy_from_slice(&template);
            entry.soa_len = template.len() as u16;
            entry.soa_csum = sum16(&template);
            entry.patches[..patches.len()].copy_from_slice(&patches);
            entry.patch_count = patches.len() as u16;
        }
        None => entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE,
    }
    match guards(zone, seed) {
        Some(guards) => {
            for (i, (hash, len)) in guards.iter().enumerate() {
                entry.guards[i] = *hash;
                entry.guard_lens[i] = *len;
            }
            entry.guard_count = guards.len() as u16;
        }
        None => entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE,
    }
    if shares_suffix_outside(zone) {
        entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE;
    }
    (entry, serial_at)
}

/// `entry` with the SOA serial at `serial_at` of its template set to `serial`, its checksum sum
/// made anew.
pub fn with_serial(entry: &ZoneEntry, serial_at: usize, serial: u32) -> ZoneEntry {
    let mut entry = *entry;
    let len = usize::from(entry.soa_len).min(entry.soa_rr.len());
    if serial_at + 4 <= len {
        entry.soa_rr[serial_at..serial_at + 4].copy_from_slice(&serial.to_be_bytes());
        entry.soa_csum = sum16(&entry.soa_rr[..len]);
    }
    entry
}

/// Encodes `<apex> A` with the SOA in the authority section and cuts the SOA record out; also
/// says where its serial is.
fn soa_template(zone: &Zone, apex_len: usize) -> Option<(Vec<u8>, Vec<SoaPatch>, usize)> {
    let apex = &zone.spec.apex;
    let mut message = Message::new(0, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(apex.clone(), RecordType::A));
    message.add_authority(negative_soa_record(zone, apex));
    let bytes = message.to_vec().ok()?;
    let soa_start = HEADER_LEN + apex_len + QTYPE_QCLASS_LEN;
    let mut template = bytes.get(soa_start..)?.to_vec();
    if template.len() > MAX_SOA_RR_LEN {
        return None;
    }
    let mut patches = Vec::new();
    // The owner, then the server and mailbox names at the start of the RDATA.
    let mut offset = skip_name(&template, 0, &mut patches)?;
    offset += RR_FIXED_LEN;
    offset = skip_name(&template, offset, &mut patches)?;
    let serial_at = skip_name(&template, offset, &mut patches)?;
    if patches.len() > MAX_SOA_PATCHES {
        return None;
    }
    let mut out = Vec::with_capacity(patches.len());
    for (at, target) in patches {
        let target = target as usize;
        let base = if (HEADER_LEN..HEADER_LEN + apex_len).contains(&target) {
            // Into the question (the apex or a suffix of it).
            target as i64 - apex_len as i64
        } else if target >= soa_start {
            // Into the SOA record itself, which follows the question directly.
            (target - soa_start + HEADER_LEN + QTYPE_QCLASS_LEN) as i64
        } else {
            return None;
        };
        template[at] = 0;
        template[at + 1] = 0;
        out.push(SoaPatch {
            offset: at as u16,
            base: i16::try_from(base).ok()?,
        });
    }
    Some((template, out, serial_at))
}

/// Skips the name at `offset`, recording a pointer (its offset and target) if it ends in one.
fn skip_name(bytes: &[u8], mut offset: usize, patches: &mut Vec<(usize, u16)>) -> Option<usize> {
    loop {
        let len = *bytes.get(offset)?;
        if len == 0 {
            return Some(offset + 1);
        }
        if u16::from(len) << 8 & POINTER_MARK == POINTER_MARK {
            let pointer = u16::from_be_bytes([len, *bytes.get(offset + 1)?]);
            patches.push((offset, pointer & !POINTER_MARK));
            return Some(offset + 2);
        }
        offset += 1 + len as usize;
    }
}

/// Names under the apex that, ending a question, would make the SOA compress differently:
/// every suffix, longer than the apex, of the server and mailbox names inside the zone.
fn guards(zone: &Zone, seed: u64) -> Option<Vec<(u64, u16)>> {
    let apex = &zone.spec.apex;
    let mut guards: Vec<(u64, u16)> = Vec::new();
    for name in [&zone.spec.soa.mname, &zone.spec.soa.rname] {
        if !apex.zone_of(name) {
            continue;
        }
        let mut suffix = name.to_lowercase();
        while suffix.num_labels() > apex.num_labels() {
            let wire = WireName::from_name(&suffix);
            let wire = wire.as_bytes();
            let guard = (name_hash(seed, wire), wire.len() as u16);
            if !guards.contains(&guard) {
                guards.push(guard);
            }
            suffix = suffix.base_name();
        }
    }
    (guards.len() <= MAX_SOA_GUARDS).then_some(guards)
}

/// Whether a server or mailbox name outside the zone shares a label suffix with the apex: the
/// encoder would point it into the question only when the question spells that suffix the same,
/// so the template would depend on the question.
fn shares_suffix_outside(zone: &Zone) -> bool {
    let apex = &zone.spec.apex;
    [&zone.spec.soa.mname, &zone.spec.soa.rname]
        .into_iter()
        .any(|name| {
            !apex.zone_of(name)
                && name.num_labels() > 0
                && apex.num_labels() > 0
                && name.trim_to(1) == apex.trim_to(1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Name;
    use hostport_dns_common::limits::{MAX_XDP_A_RECORDS, SMALL_PAYLOAD_LEN};
    use hostport_dns_core::{
        records::{RecordData, SourceRecord},
        table::RecordTable,
        zone::ZoneSpec,
    };

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn a(owner: &str, ip: &str) -> SourceRecord {
        SourceRecord::new(
            &name(owner),
            None,
            RecordData::from(ip.parse::<std::net::IpAddr>().unwrap()),
        )
    }

    fn built(records: &[SourceRecord], owner: &str) -> Built {
        let (table, _) =
            RecordTable::compile(&[ZoneSpec::with_defaults(name("example."))], records);
        let wire = WireName::from_name(&name(owner));
        let node = table.node_wire(wire.as_bytes()).unwrap();
        build(wire.as_bytes(), node, &table.zones()[0], 3)
    }

    #[test]
    fn names_sit_at_the_back_and_addresses_at_the_front() {
        let Built::Small(entry) = built(
            &[
                a("web.example.", "198.18.0.1"),
                a("web.example.", "2001:db8::1"),
            ],
            "WEB.example.",
        ) else {
            panic!("a small entry");
        };
        let wire = b"\x03web\x07example\x00";
        assert_eq!(entry.name(), wire);
        assert_eq!(entry.head.name_len as usize, wire.len());
        assert_eq!((entry.head.a_count, entry.head.aaaa_count), (1, 1));
        assert_eq!(&entry.payload[..2], &[0x20, 0x01], "the AAAA address first");
        assert_eq!(
            &entry.payload[16..20],
            &[198, 18, 0, 1],
            "then the A address"
        );
        assert_eq!(entry.head.ttl, 5u32.to_be_bytes());
        assert_eq!(entry.head.counter_slot, 3);
        // The sum covers the records as the kernel writes them.
        let rr = [0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 198, 18, 0, 1];
        assert_eq!(entry.head.a_csum, sum16(&rr));
        let aaaa: Vec<u8> = [0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 5, 0, 16]
            .into_iter()
            .chain(
                "2001:db8::1"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets(),
            )
            .collect();
        assert_eq!(entry.head.aaaa_csum, sum16(&aaaa));
        assert!(
            entry.payload[20..SMALL_PAYLOAD_LEN - wire.len()]
                .iter()
                .all(|b| *b == 0)
        );
    }

    #[test]
    fn long_names_and_large_sets_take_larger_entries_and_larger_ones_pass() {
        let fleet: Vec<_> = (1..=16)
            .map(|i| a("fleet.example.", &format!("198.18.0.{i}")))
            .collect();
        assert!(matches!(built(&fleet, "fleet.example."), Built::Name(_)));
        // 152 bytes in wire form: more than a name entry holds with one address.
        let long = format!(
            "{}.{}.{}.example.",
            "x".repeat(60),
            "y".repeat(60),
            "z".repeat(20)
        );
        assert!(matches!(
            built(&[a(&long, "198.18.0.1")], &long),
            Built::Big(_)
        ));
        let nine_v6: Vec<_> = (1..=9)
            .map(|i| a("v6.example.", &format!("2001:db8::{i}")))
            .collect();
        assert!(matches!(built(&nine_v6, "v6.example."), Built::Big(_)));
        let too_many: Vec<_> = (0..=MAX_XDP_A_RECORDS)
            .map(|i| a("big.example.", &format!("198.18.1.{i}")))
            .collect();
        assert_eq!(built(&too_many, "big.example."), Built::Pass);
    }

    #[test]
    fn the_default_soa_points_into_the_question_twice() {
        let (table, _) = RecordTable::compile(
            &[ZoneSpec::with_defaults(name("prod.coreha.example."))],
            &[],
        );
        let zone = zone_entry(&table.zones()[0], 7, 1);
        assert_eq!(zone.flags, 0);
        // Owner, ns.<apex>, hostmaster.<apex>: three pointers to the apex in the question.
        assert_eq!(zone.patch_count, 3);
        let apex_len = zone.apex_len as i16;
        for patch in &zone.patches[..3] {
            assert_eq!(patch.base, HEADER_LEN as i16 - apex_len);
        }
        // ns.<apex> and hostmaster.<apex> guard questions ending in them.
        assert_eq!(zone.guard_count, 2);
        assert_eq!(zone.counter_slot, 1);
    }

    #[test]
    fn a_new_serial_is_a_patch_of_the_template() {
        let (table, _) = RecordTable::compile(
            &[ZoneSpec::with_defaults(name("prod.coreha.example."))],
            &[],
        );
        let zone = table.zones()[0].clone();
        let (entry, serial_at) = zone_template(&zone, 7, 1);
        let mut changed = zone.clone();
        changed.serial = zone.serial.wrapping_add(12345);
        let patched = with_serial(
            &entry,
            serial_at.expect("the kernel writes it"),
            changed.serial,
        );
        assert_eq!(patched, zone_entry(&changed, 7, 1));
    }

    #[test]
    fn a_server_name_sharing_the_top_label_sends_negative_answers_up() {
        let mut spec = ZoneSpec::with_defaults(name("prod.coreha.example."));
        spec.soa.mname = name("ns1.other.example.");
        let (table, _) = RecordTable::compile(&[spec], &[]);
        assert_ne!(
            zone_entry(&table.zones()[0], 7, 0).flags & ZONE_FLAG_NEGATIVE_IN_USERSPACE,
            0
        );
    }
}
