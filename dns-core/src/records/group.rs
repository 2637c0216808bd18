//! [`RecordGroup`]: a group's records packed into one allocation. The publisher holds every
//! group of every source for as long as the source serves it (a record file of 100,000 names is
//! 100,000 groups), so a group costs what its records say, not a 40-byte [`SourceRecord`] per
//! record: the name of its first record (a group is mostly one pod's or one file entry's records,
//! all at one name) is held once, as a reference; each record is a tag byte and its data (an A
//! record: five bytes); a TTL, or a name other than the first (in wire form), only where a record
//! has one. Three A records of one name take 15 bytes and a 24-byte header, where a slice of
//! 40-byte records took 136 (at 100,000 names, about 10 MB).
//!
//! Records are decoded as they are read ([`RecordGroup::iter`]), which is rare: when a group
//! changes (its records go into or out of the table compiler), and when the records are saved or
//! written out. A group is compared as its bytes: equal records in equal order.

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr},
};

use triomphe::ThinArc;

use super::{RecordData, SourceRecord, Srv};
use crate::dns::WireName;

/// A tag's two low bits: the record's type.
const TYPE_MASK: u8 = 0b11;
const TYPE_A: u8 = 0;
const TYPE_AAAA: u8 = 1;
const TYPE_SRV: u8 = 2;
/// The record's own TTL follows the tag (four bytes, little-endian); without it, the zone's.
const HAS_TTL: u8 = 1 << 2;
/// The record's name follows (in wire form); without it, the record is at the group's first
/// record's name, held in the header.
const OWN_NAME: u8 = 1 << 3;

/// Records that come and go together: one pod's, one Service output's, one file entry's. A group
/// that did not change keeps its allocation from one snapshot to the next, which is how the
/// publisher tells, cheaply, what changed ([`RecordGroup::ptr_eq`]).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RecordGroup(ThinArc<Option<WireName>, u8>);

impl RecordGroup {
    /// `records`, in this order.
    pub fn new(records: &[SourceRecord]) -> Self {
        let first = records.first().map(|record| record.name.clone());
        let mut bytes = Vec::with_capacity(records.len() * 5);
        for record in records {
            encode(record, first.as_ref(), &mut bytes);
        }
        Self(ThinArc::from_header_and_slice(first, &bytes))
    }

    /// The records, decoded one by one, in the order given.
    pub fn iter(&self) -> Records<'_> {
        Records {
            first: self.0.header.header.as_ref(),
            views: self.views(),
        }
    }

    /// The records as the bytes hold them, names in wire form: read without interning a name
    /// (saving every group once a second reads them so).
    pub fn views(&self) -> Views<'_> {
        Views {
            first: self.0.header.header.as_ref().map(WireName::as_bytes),
            rest: &self.0.slice,
        }
    }

    /// How many records (walks the bytes, decodes nothing).
    pub fn len(&self) -> usize {
        let mut rest: &[u8] = &self.0.slice;
        let mut count = 0;
        while let Some(record) = split(rest) {
            rest = record.rest;
            count += 1;
        }
        count
    }

    pub fn is_empty(&self) -> bool {
        self.0.slice.is_empty()
    }

    pub fn to_vec(&self) -> Vec<SourceRecord> {
        self.iter().collect()
    }

    /// Whether both are the same allocation (a group kept from one snapshot to the next).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.0.as_ptr() == b.0.as_ptr()
    }
}

impl From<Vec<SourceRecord>> for RecordGroup {
    fn from(records: Vec<SourceRecord>) -> Self {
        Self::new(&records)
    }
}

impl From<&[SourceRecord]> for RecordGroup {
    fn from(records: &[SourceRecord]) -> Self {
        Self::new(records)
    }
}

impl<const N: usize> From<[SourceRecord; N]> for RecordGroup {
    fn from(records: [SourceRecord; N]) -> Self {
        Self::new(&records)
    }
}

impl FromIterator<SourceRecord> for RecordGroup {
    fn from_iter<I: IntoIterator<Item = SourceRecord>>(records: I) -> Self {
        Self::new(&records.into_iter().collect::<Vec<_>>())
    }
}

/// Whether the group holds exactly `records`, in this order (compared as encoded, without
/// decoding the group).
impl PartialEq<[SourceRecord]> for RecordGroup {
    fn eq(&self, records: &[SourceRecord]) -> bool {
        let first = records.first().map(|record| &record.name);
        if self.0.header.header.as_ref() != first {
            return false;
        }
        let mut bytes = Vec::with_capacity(self.0.slice.len());
        for record in records {
            encode(record, first, &mut bytes);
        }
        bytes == self.0.slice
    }
}

impl fmt::Debug for RecordGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A record as a group's bytes hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The owner name, in wire form.
    pub name: &'a [u8],
    /// Whether the owner is the group's first name (held as a reference in the header).
    first_name: bool,
    pub ttl: Option<u32>,
    pub data: DataView<'a>,
}

/// A record's data as a group's bytes hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataView<'a> {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        /// In wire form.
        target: &'a [u8],
    },
}

/// A group's records as its bytes hold them.
pub struct Views<'a> {
    first: Option<&'a [u8]>,
    rest: &'a [u8],
}

impl<'a> Iterator for Views<'a> {
    type Item = RecordView<'a>;

    fn next(&mut self) -> Option<RecordView<'a>> {
        let record = split(self.rest)?;
        // Ends here if the record cannot be read (bytes `encode` wrote always can): never a
        // later record after an unreadable one.
        self.rest = &[];
        let (name, first_name) = match record.name {
            Some(wire) => (wire, false),
            None => (self.first?, true),
        };
        let data = match record.tag & TYPE_MASK {
            TYPE_A => DataView::A(Ipv4Addr::from(<[u8; 4]>::try_from(record.data).ok()?)),
            TYPE_AAAA => DataView::Aaaa(Ipv6Addr::from(<[u8; 16]>::try_from(record.data).ok()?)),
            _ => {
                let (numbers, target) = record.data.split_first_chunk::<6>()?;
                let number = |at: usize| u16::from_le_bytes([numbers[at], numbers[at + 1]]);
                DataView::Srv {
                    priority: number(0),
                    weight: number(2),
                    port: number(4),
                    target,
                }
            }
        };
        self.rest = record.rest;
        Some(RecordView {
            name,
            first_name,
            ttl: record.ttl,
            data,
        })
    }
}

/// A group's records, decoded: the first name shared, the others interned again.
pub struct Records<'a> {
    first: Option<&'a WireName>,
    views: Views<'a>,
}

impl Iterator for Records<'_> {
    type Item = SourceRecord;

    fn next(&mut self) -> Option<SourceRecord> {
        let view = self.views.next()?;
        let decoded = decode(view, self.first);
        if decoded.is_none() {
            // Never a later record after one that cannot be read.
            self.views.rest = &[];
        }
        decoded
    }
}

/// A record from its view; `first` is the header's name.
fn decode(view: RecordView<'_>, first: Option<&WireName>) -> Option<SourceRecord> {
    let name = if view.first_name {
        first?.clone()
    } else {
        WireName::from_wire(view.name)?
    };
    let data = match view.data {
        DataView::A(a) => RecordData::A(a),
        DataView::Aaaa(a) => RecordData::Aaaa(a),
        DataView::Srv {
            priority,
            weight,
            port,
            target,
        } => RecordData::Srv(Srv {
            priority,
            weight,
            port,
            target: WireName::from_wire(target)?,
        }),
    };
    Some(SourceRecord {
        name,
        ttl: view.ttl,
        data,
    })
}

/// Appends `record` to a group's bytes; `first` is the name the header holds.
fn encode(record: &SourceRecord, first: Option<&WireName>, out: &mut Vec<u8>) {
    let own_name = first != Some(&record.name);
    let kind = match record.data {
        RecordData::A(_) => TYPE_A,
        RecordData::Aaaa(_) => TYPE_AAAA,
        RecordData::Srv(_) => TYPE_SRV,
    };
    let tag =
        kind | if record.ttl.is_some() { HAS_TTL } else { 0 } | if own_name { OWN_NAME } else { 0 };
    out.push(tag);
    if let Some(ttl) = record.ttl {
        out.extend_from_slice(&ttl.to_le_bytes());
    }
    if own_name {
        out.extend_from_slice(record.name.as_bytes());
    }
    match &record.data {
        RecordData::A(a) => out.extend_from_slice(&a.octets()),
        RecordData::Aaaa(a) => out.extend_from_slice(&a.octets()),
        RecordData::Srv(srv) => {
            for number in [srv.priority, srv.weight, srv.port] {
                out.extend_from_slice(&number.to_le_bytes());
            }
            out.extend_from_slice(srv.target.as_bytes());
        }
    }
}

/// One encoded record, split from the bytes after it.
struct Encoded<'a> {
    tag: u8,
    ttl: Option<u32>,
    /// Its own name in wire form, when it has one.
    name: Option<&'a [u8]>,
    /// The address, or the SRV's numbers and target.
    data: &'a [u8],
    rest: &'a [u8],
}

/// The first record of `bytes`; None at their end.
fn split(bytes: &[u8]) -> Option<Encoded<'_>> {
    let (&tag, mut rest) = bytes.split_first()?;
    let mut ttl = None;
    if tag & HAS_TTL != 0 {
        let (value, after) = rest.split_first_chunk::<4>()?;
        ttl = Some(u32::from_le_bytes(*value));
        rest = after;
    }
    let mut name = None;
    if tag & OWN_NAME != 0 {
        let (wire, after) = rest.split_at_checked(wire_len(rest)?)?;
        name = Some(wire);
        rest = after;
    }
    let data_len = match tag & TYPE_MASK {
        TYPE_A => 4,
        TYPE_AAAA => 16,
        _ => 6 + wire_len(rest.get(6..)?)?,
    };
    let (data, rest) = rest.split_at_checked(data_len)?;
    Some(Encoded {
        tag,
        ttl,
        name,
        data,
        rest,
    })
}

/// The length of the wire-form name `bytes` start with (its root label included).
fn wire_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let len = usize::from(*bytes.get(at)?);
        at += 1 + len;
        if len == 0 {
            return Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Name;

    fn name(text: &str) -> WireName {
        WireName::from_name(&Name::from_ascii(text).unwrap())
    }

    fn record(at: &str, ttl: Option<u32>, data: RecordData) -> SourceRecord {
        SourceRecord {
            name: name(at),
            ttl,
            data,
        }
    }

    #[test]
    fn every_kind_of_record_reads_back_as_written_in_its_order() {
        let records = vec![
            record(
                "web.ns.example.",
                None,
                RecordData::A([198, 18, 0, 2].into()),
            ),
            record(
                "web.ns.example.",
                None,
                RecordData::A([198, 18, 0, 1].into()),
            ),
            record(
                "web.ns.example.",
                Some(30),
                RecordData::Aaaa("2001:db8::1".parse().unwrap()),
            ),
            record(
                "_https._tcp.web.ns.example.",
                Some(0),
                RecordData::Srv(Srv {
                    priority: 1,
                    weight: 65535,
                    port: 443,
                    target: name("node-1.nodes.example."),
                }),
            ),
            record(
                "other.example.",
                None,
                RecordData::A([198, 18, 0, 3].into()),
            ),
            record(
                "web.ns.example.",
                Some(u32::MAX),
                RecordData::A([198, 18, 0, 4].into()),
            ),
        ];
        let group = RecordGroup::from(records.clone());
        assert_eq!(group.to_vec(), records);
        let names: Vec<&[u8]> = group.views().map(|view| view.name).collect();
        let want: Vec<&[u8]> = records.iter().map(|r| r.name.as_bytes()).collect();
        assert_eq!(names, want, "views hold the same names, in wire form");
        assert!(group == *records);
        assert!(group != records[1..]);
        assert_eq!(group.len(), records.len());
        assert!(!group.is_empty());
    }

    #[test]
    fn srv_records_at_the_first_name_and_to_the_root_read_back() {
        let srv = |target: &str| {
            RecordData::Srv(Srv {
                priority: 0,
                weight: 0,
                port: 0,
                target: name(target),
            })
        };
        let records = vec![
            record("_https._tcp.web.example.", None, srv("node-1.example.")),
            record("_https._tcp.web.example.", None, srv(".")),
            record(
                "web.example.",
                None,
                RecordData::Aaaa("2001:db8::2".parse().unwrap()),
            ),
            record("_https._tcp.web.example.", Some(7), srv("node-2.example.")),
        ];
        let group = RecordGroup::from(records.clone());
        assert_eq!(group.to_vec(), records);
        assert_eq!(group.len(), group.iter().count());
    }

    #[test]
    fn a_group_differs_from_records_at_another_first_name() {
        let a = |at: &str| record(at, None, RecordData::A([198, 18, 0, 1].into()));
        let group = RecordGroup::from(vec![a("web.example."), a("api.example.")]);
        assert!(group != [a("api.example."), a("web.example.")][..]);
        assert!(group != [a("web.example.")][..]);
        assert!(group == [a("web.example."), a("api.example.")][..]);
    }

    #[test]
    fn an_empty_group_has_no_records() {
        let group = RecordGroup::from([]);
        assert!(group.is_empty());
        assert_eq!(group.len(), 0);
        assert_eq!(group.iter().count(), 0);
    }

    #[test]
    fn groups_compare_as_their_records_and_keep_their_allocation_when_cloned() {
        let records = || {
            vec![record(
                "web.example.",
                None,
                RecordData::A([198, 18, 0, 1].into()),
            )]
        };
        let (a, b) = (RecordGroup::from(records()), RecordGroup::from(records()));
        assert_eq!(a, b);
        assert!(!RecordGroup::ptr_eq(&a, &b));
        assert!(RecordGroup::ptr_eq(&a, &a.clone()));
        let other = RecordGroup::from(vec![record(
            "web.example.",
            Some(5),
            RecordData::A([198, 18, 0, 1].into()),
        )]);
        assert_ne!(a, other, "a TTL is part of the record");
    }

    #[test]
    fn one_names_few_addresses_take_a_few_bytes() {
        let group = RecordGroup::from(
            (1..=3)
                .map(|i| {
                    record(
                        "svc1.ns1.bench.example.",
                        None,
                        RecordData::A([198, 18, 0, i].into()),
                    )
                })
                .collect::<Vec<_>>(),
        );
        assert_eq!(group.0.slice.len(), 15);
    }
}
