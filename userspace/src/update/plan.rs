//! The UPDATE messages (RFC 2136) that take a primary from what hostport-dns last wrote to what
//! it serves now: a pure function of (before, after) per name, unit-tested without a network.
//!
//! Per name and type (A, AAAA), with `before` what was last written there (or not known):
//! - not known (at start, on becoming the writer, after a failed exchange or a failed
//!   prerequisite): "delete the RRset" (§2.5.2) and add every record: idempotent, whatever the
//!   primary holds; no prerequisite.
//! - known: a prerequisite that the primary holds exactly that — "RRset exists (value
//!   dependent)" (§2.4.2) with the records last written, or "RRset does not exist" (§2.4.3) when
//!   nothing was — then only the records gone (deleted one by one, §2.5.4) and those added. A
//!   changed TTL replaces the RRset (RFC 2181 §5.2: one TTL per RRset). Another writer's change
//!   makes the prerequisite fail (NXRRSET, YXRRSET): the names of that message are then sent as
//!   not known.
//!
//! Prerequisites of one message are all or nothing (§3.2): a message carries few names
//! ([`MAX_NAMES`]), so that one name changed elsewhere sends few names again.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query},
    rr::{
        DNSClass, Name, RData, Record, RecordType,
        rdata::{A, AAAA},
    },
};

/// Names per UPDATE message, at most.
pub const MAX_NAMES: usize = 32;
/// Records (prerequisites and updates) per message, at most: well within a TCP message.
pub const MAX_RECORDS: usize = 1000;

/// A name's addresses, as written or to be written (sorted, no duplicates); none: the name has
/// no A or AAAA records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rrsets {
    /// The TTL of both RRsets (0 when both are empty).
    pub ttl: u32,
    pub a: Vec<Ipv4Addr>,
    pub aaaa: Vec<Ipv6Addr>,
}

impl Rrsets {
    pub fn is_empty(&self) -> bool {
        self.a.is_empty() && self.aaaa.is_empty()
    }
}

/// What one name's part of an UPDATE is: its prerequisites and its updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameUpdate {
    /// The name in the target zone.
    pub name: Name,
    pub prerequisites: Vec<Record>,
    pub updates: Vec<Record>,
}

/// The update taking `name` from `before` (None: not known) to `after`; None: nothing to do.
pub fn name_update(name: &Name, before: Option<&Rrsets>, after: &Rrsets) -> Option<NameUpdate> {
    let mut update = NameUpdate {
        name: name.clone(),
        prerequisites: Vec::new(),
        updates: Vec::new(),
    };
    let ttl = |r: &Rrsets| r.ttl;
    rrset(
        &mut update,
        before.map(|b| (b.a.as_slice(), ttl(b))),
        (&after.a, after.ttl),
        RecordType::A,
        |a| RData::A(A(*a)),
    );
    rrset(
        &mut update,
        before.map(|b| (b.aaaa.as_slice(), ttl(b))),
        (&after.aaaa, after.ttl),
        RecordType::AAAA,
        |a| RData::AAAA(AAAA(*a)),
    );
    (!update.updates.is_empty()).then_some(update)
}

/// One RRset's prerequisites and updates, added to `update`.
fn rrset<T: PartialEq>(
    update: &mut NameUpdate,
    before: Option<(&[T], u32)>,
    (after, ttl): (&[T], u32),
    rtype: RecordType,
    data: impl Fn(&T) -> RData,
) {
    let name = &update.name;
    let record = |t: &T, ttl: u32, class: DNSClass| {
        let mut r = Record::from_rdata(name.clone(), ttl, data(t));
        r.dns_class = class;
        r
    };
    let Some((before, old_ttl)) = before else {
        update.updates.push(delete_rrset(name, rtype));
        update
            .updates
            .extend(after.iter().map(|t| record(t, ttl, DNSClass::IN)));
        return;
    };
    let ttl_changed = !before.is_empty() && !after.is_empty() && old_ttl != ttl;
    if before == after && !ttl_changed {
        return;
    }
    if before.is_empty() {
        // §2.4.3: NAME and TYPE, CLASS NONE, no data.
        let mut absent = Record::update0(name.clone(), 0, rtype);
        absent.dns_class = DNSClass::NONE;
        update.prerequisites.push(absent);
    } else {
        // §2.4.2: the whole RRset, TTL 0, CLASS of the zone.
        update
            .prerequisites
            .extend(before.iter().map(|t| record(t, 0, DNSClass::IN)));
    }
    if after.is_empty() || ttl_changed {
        update.updates.push(delete_rrset(name, rtype));
        update
            .updates
            .extend(after.iter().map(|t| record(t, ttl, DNSClass::IN)));
        return;
    }
    // §2.5.4: each record gone, TTL 0, CLASS NONE; then each record added.
    update.updates.extend(
        before
            .iter()
            .filter(|t| !after.contains(t))
            .map(|t| record(t, 0, DNSClass::NONE)),
    );
    update.updates.extend(
        after
            .iter()
            .filter(|t| !before.contains(t))
            .map(|t| record(t, ttl, DNSClass::IN)),
    );
}

/// §2.5.2: NAME and TYPE, CLASS ANY, TTL 0, no data.
fn delete_rrset(name: &Name, rtype: RecordType) -> Record {
    let mut record = Record::update0(name.clone(), 0, rtype);
    record.dns_class = DNSClass::ANY;
    record
}

/// One UPDATE message and the names it carries (their source names, in the caller's terms).
#[derive(Debug)]
pub struct Batch<K> {
    pub keys: Vec<K>,
    pub message: Message,
}

/// The updates in messages of at most [`MAX_NAMES`] names and about [`MAX_RECORDS`] records
/// (a name's records are never split), each for `zone`; `id` gives each message its ID.
pub fn batches<K>(
    zone: &Name,
    updates: Vec<(K, NameUpdate)>,
    mut id: impl FnMut() -> u16,
) -> Vec<Batch<K>> {
    let mut batches: Vec<Batch<K>> = Vec::new();
    let mut records = 0;
    for (key, update) in updates {
        let count = update.prerequisites.len() + update.updates.len();
        let full = batches.last().is_none_or(|b| {
            b.keys.len() >= MAX_NAMES || (records + count > MAX_RECORDS && !b.keys.is_empty())
        });
        if full {
            batches.push(Batch {
                keys: Vec::new(),
                message: skeleton(zone, id()),
            });
            records = 0;
        }
        let Some(batch) = batches.last_mut() else {
            continue;
        };
        records += count;
        batch.keys.push(key);
        batch.message.answers.extend(update.prerequisites);
        batch.message.authorities.extend(update.updates);
    }
    batches
}

/// An UPDATE for `zone`: the zone section (§2.3) and nothing else yet.
fn skeleton(zone: &Name, id: u16) -> Message {
    let mut message = Message::new(id, MessageType::Query, OpCode::Update);
    let mut section = Query::query(zone.clone(), RecordType::SOA);
    section.set_query_class(DNSClass::IN);
    message.add_query(section);
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::serialize::binary::BinDecodable;

    fn name() -> Name {
        Name::from_ascii("api.corp.example.").unwrap()
    }

    fn v4(list: &[&str], ttl: u32) -> Rrsets {
        Rrsets {
            ttl,
            a: list.iter().map(|a| a.parse().unwrap()).collect(),
            aaaa: Vec::new(),
        }
    }

    /// Records as `<class> <type> <ttl> <data>`, to compare whole sections.
    fn text(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| {
                let data = match &r.data {
                    RData::Update0(_) => "-".to_owned(),
                    other => other.to_string(),
                };
                format!("{} {} {} {data}", r.dns_class, r.record_type(), r.ttl)
            })
            .collect()
    }

    #[test]
    fn not_known_deletes_both_rrsets_and_adds_every_record_without_prerequisite() {
        let after = Rrsets {
            ttl: 30,
            a: vec!["198.18.0.1".parse().unwrap()],
            aaaa: vec!["2001:db8::1".parse().unwrap()],
        };
        let u = name_update(&name(), None, &after).unwrap();
        assert!(u.prerequisites.is_empty());
        assert_eq!(
            text(&u.updates),
            [
                "ANY A 0 -",
                "IN A 30 198.18.0.1",
                "ANY AAAA 0 -",
                "IN AAAA 30 2001:db8::1"
            ]
        );
        // A name with nothing now: both RRsets deleted.
        let gone = name_update(&name(), None, &Rrsets::default()).unwrap();
        assert_eq!(text(&gone.updates), ["ANY A 0 -", "ANY AAAA 0 -"]);
    }

    #[test]
    fn a_change_sends_only_the_difference_under_the_last_written_rrset() {
        let before = v4(&["198.18.0.1", "198.18.0.2"], 30);
        let after = v4(&["198.18.0.2", "198.18.0.3"], 30);
        let u = name_update(&name(), Some(&before), &after).unwrap();
        assert_eq!(
            text(&u.prerequisites),
            ["IN A 0 198.18.0.1", "IN A 0 198.18.0.2"]
        );
        assert_eq!(
            text(&u.updates),
            ["NONE A 0 198.18.0.1", "IN A 30 198.18.0.3"]
        );
        // AAAA untouched: neither prerequisite nor update for it.
        assert_eq!(name_update(&name(), Some(&after), &after), None);
    }

    #[test]
    fn a_new_name_requires_the_rrset_absent_and_a_gone_one_deletes_it() {
        let after = v4(&["198.18.0.1"], 30);
        let new = name_update(&name(), Some(&Rrsets::default()), &after).unwrap();
        assert_eq!(text(&new.prerequisites), ["NONE A 0 -"]);
        assert_eq!(text(&new.updates), ["IN A 30 198.18.0.1"]);
        let gone = name_update(&name(), Some(&after), &Rrsets::default()).unwrap();
        assert_eq!(text(&gone.prerequisites), ["IN A 0 198.18.0.1"]);
        assert_eq!(text(&gone.updates), ["ANY A 0 -"]);
    }

    #[test]
    fn a_changed_ttl_replaces_the_rrset() {
        let before = v4(&["198.18.0.1"], 30);
        let after = v4(&["198.18.0.1"], 60);
        let u = name_update(&name(), Some(&before), &after).unwrap();
        assert_eq!(text(&u.prerequisites), ["IN A 0 198.18.0.1"]);
        assert_eq!(text(&u.updates), ["ANY A 0 -", "IN A 60 198.18.0.1"]);
    }

    #[test]
    fn messages_hold_a_bounded_number_of_names_and_encode_as_updates() {
        let zone = Name::from_ascii("corp.example.").unwrap();
        let updates: Vec<(usize, NameUpdate)> = (0..MAX_NAMES + 5)
            .map(|i| {
                let owner = Name::from_ascii(format!("n{i}.corp.example.")).unwrap();
                (
                    i,
                    name_update(&owner, None, &v4(&["198.18.0.1"], 5)).unwrap(),
                )
            })
            .collect();
        let mut ids = 0u16;
        let batches = batches(&zone, updates, || {
            ids += 1;
            ids
        });
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].keys.len(), MAX_NAMES);
        assert_eq!(
            batches[1].keys,
            (MAX_NAMES..MAX_NAMES + 5).collect::<Vec<_>>()
        );
        let bytes = batches[1].message.to_vec().unwrap();
        let parsed = Message::from_bytes(&bytes).unwrap();
        assert_eq!(parsed.metadata.op_code, OpCode::Update);
        assert_eq!(parsed.metadata.id, 2);
        assert_eq!(parsed.queries[0].name().to_ascii(), "corp.example.");
        assert_eq!(parsed.queries[0].query_type(), RecordType::SOA);
        // Three records per name: delete A, add A, delete AAAA.
        assert_eq!(parsed.authorities.len(), 15);
        assert!(parsed.answers.is_empty());
    }
}
