//! Responses encoded to wire bytes, large ones with every owner compressed.
//!
//! hickory-proto compresses at most 120 names in a message (Unbound's limit against crafted
//! messages that cost CPU) and keeps at most 64 suffixes to point at. That suits what it parses;
//! it does not suit the answers this server makes from its own table for a fleet: the 121st
//! owner of a 250-address answer would be written out in full, 40 bytes where a pointer takes 2,
//! and a whole fleet would no longer fit the 8192 bytes a load balancer offers. Knot DNS
//! compresses every owner; so does this encoder, for the answers large enough to need it.
//!
//! It writes what hickory-proto would write with no limit: the header, question and OPT record
//! as hickory-proto encodes them, owners compressed against the longest suffix written before
//! (the question, the owners and SRV targets before), SRV targets in full (RFC 2782;
//! hickory-proto writes them canonically too). Small answers, and any other shape, are left to
//! hickory-proto, so that the bytes the XDP program must match never change.
//!
//! [`SrvTargets::Compressed`] writes SRV targets compressed too: the answer's last resort before
//! TC=1 (see `answer::encode`), for fleets whose SRV records do not fit otherwise.

use std::collections::HashMap;

use hickory_proto::{
    ProtoError,
    op::Message,
    rr::{RData, Record, RecordType},
    serialize::binary::BinEncodable,
};
use hostport_dns_common::dns::HEADER_LEN;

/// Records (answer and additional) from which a response is encoded here: well below the 120
/// names hickory-proto compresses and the 64 suffixes it keeps. Below it, hickory-proto's bytes
/// are the same as this encoder's.
pub const LARGE_RESPONSE_RECORDS: usize = 48;

/// Priority, weight and port, before an SRV record's target.
const SRV_FIXED_LEN: usize = 6;

/// The highest offset a compression pointer reaches (14 bits).
const MAX_POINTER_TARGET: usize = 0x3fff;

/// How SRV targets are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrvTargets {
    /// In full, as RFC 2782 says ("name compression is not to be used for this field").
    Full,
    /// Compressed like owners: a label or two and a pointer. RFC 2052 had SRV targets
    /// compressed, and RFC 3597 §4 asks receivers to decompress them still; HAProxy, dig and
    /// kdig do, some stub resolvers do not (`SrvTargetCompression::allows` says who gets them).
    Compressed,
}

/// The response's wire bytes.
pub fn to_vec(message: &Message) -> Result<Vec<u8>, ProtoError> {
    to_vec_with(message, SrvTargets::Full)
}

/// The response's wire bytes, its SRV targets written as `targets` says.
pub fn to_vec_with(message: &Message, targets: SrvTargets) -> Result<Vec<u8>, ProtoError> {
    let records = message.answers.len() + message.additionals.len();
    let large = records > LARGE_RESPONSE_RECORDS;
    let srv_to_compress = targets == SrvTargets::Compressed && has_srv(message);
    if (large || srv_to_compress) && encodable_here(message) {
        large_answer(message, targets)
    } else {
        message.to_vec()
    }
}

/// Whether [`SrvTargets::Compressed`] makes `message` any smaller: its answer section holds SRV
/// records, and it is encoded here.
pub fn can_compress_srv_targets(message: &Message) -> bool {
    has_srv(message) && encodable_here(message)
}

fn has_srv(message: &Message) -> bool {
    message
        .answers
        .iter()
        .any(|r| r.record_type() == RecordType::SRV)
}

/// An answer of address or SRV records, with one question and no authority records or
/// signature: what this encoder writes.
fn encodable_here(message: &Message) -> bool {
    message.queries.len() == 1
        && message.authorities.is_empty()
        && message.signature.is_none()
        && message
            .answers
            .iter()
            .chain(&message.additionals)
            .all(|r| rdata_bytes(r).is_some())
}

fn large_answer(message: &Message, targets: SrvTargets) -> Result<Vec<u8>, ProtoError> {
    // The header, the question and the OPT record, as hickory-proto writes them.
    let mut skeleton = message.clone();
    skeleton.answers.clear();
    skeleton.additionals.clear();
    let skeleton = skeleton.to_vec()?;
    let question_end = question_end(&skeleton).ok_or_else(|| ProtoError::from("no question"))?;
    let mut out = Vec::with_capacity(skeleton.len() + 32 * message.answers.len());
    out.extend_from_slice(&skeleton[..question_end]);
    let mut names = Suffixes::default();
    let question = &skeleton[HEADER_LEN..question_end - 4];
    names.remember(question, HEADER_LEN, question.len());
    for record in message.answers.iter().chain(&message.additionals) {
        let Some(rdata) = rdata_bytes(record) else {
            return message.to_vec();
        };
        names.write(&mut out, &record.name.to_bytes()?);
        out.extend_from_slice(&u16::from(record.record_type()).to_be_bytes());
        out.extend_from_slice(&u16::from(record.dns_class).to_be_bytes());
        out.extend_from_slice(&record.ttl.to_be_bytes());
        let rdlength_at = out.len();
        out.extend_from_slice(&[0, 0]);
        let rdata_at = out.len();
        if record.record_type() == RecordType::SRV {
            // Later owners (the target's addresses) point at the target, however written.
            let (fixed, target) = rdata.split_at(SRV_FIXED_LEN.min(rdata.len()));
            out.extend_from_slice(fixed);
            match targets {
                SrvTargets::Full => {
                    names.remember(target, out.len(), target.len());
                    out.extend_from_slice(target);
                }
                SrvTargets::Compressed => names.write(&mut out, target),
            }
        } else {
            out.extend_from_slice(&rdata);
        }
        let rdlength =
            u16::try_from(out.len() - rdata_at).map_err(|_| ProtoError::from("rdata"))?;
        out[rdlength_at..rdata_at].copy_from_slice(&rdlength.to_be_bytes());
    }
    out.extend_from_slice(&skeleton[question_end..]);
    let count = |n: usize| u16::try_from(n).map_err(|_| ProtoError::from("too many records"));
    let answers = count(message.answers.len())?;
    let additionals = count(message.additionals.len() + usize::from(message.edns.is_some()))?;
    out[6..8].copy_from_slice(&answers.to_be_bytes());
    out[10..12].copy_from_slice(&additionals.to_be_bytes());
    Ok(out)
}

/// The data of an A, AAAA or SRV record as written (an SRV target in full), or None for other
/// types.
fn rdata_bytes(record: &Record) -> Option<Vec<u8>> {
    match (&record.data, record.record_type()) {
        (RData::A(a), RecordType::A) => Some(a.0.octets().to_vec()),
        (RData::AAAA(aaaa), RecordType::AAAA) => Some(aaaa.0.octets().to_vec()),
        (RData::SRV(srv), RecordType::SRV) => {
            let mut data = Vec::with_capacity(6 + 32);
            data.extend_from_slice(&srv.priority.to_be_bytes());
            data.extend_from_slice(&srv.weight.to_be_bytes());
            data.extend_from_slice(&srv.port.to_be_bytes());
            data.extend_from_slice(&srv.target.to_bytes().ok()?);
            Some(data)
        }
        _ => None,
    }
}

/// Where the one question of an encoded message ends.
fn question_end(message: &[u8]) -> Option<usize> {
    let mut at = HEADER_LEN;
    loop {
        let len = usize::from(*message.get(at)?);
        if len == 0 {
            return Some(at + 1 + 4).filter(|end| *end <= message.len());
        }
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
    }
}

/// The names written so far, by every suffix of theirs: where it starts in the message.
#[derive(Default)]
struct Suffixes {
    at: HashMap<Vec<u8>, usize>,
}

impl Suffixes {
    /// `wire` (an uncompressed name) was written at `offset`, in full up to `written` (a
    /// pointer after): each suffix starting there can be pointed at.
    fn remember(&mut self, wire: &[u8], offset: usize, written: usize) {
        for start in label_starts(wire).into_iter().filter(|s| *s < written) {
            let target = offset + start;
            if target <= MAX_POINTER_TARGET {
                self.at.entry(wire[start..].to_vec()).or_insert(target);
            }
        }
    }

    /// Writes `wire` (an uncompressed name) at the end of `out`: its labels up to the longest
    /// suffix written before, then a pointer to it.
    fn write(&mut self, out: &mut Vec<u8>, wire: &[u8]) {
        let offset = out.len();
        for start in label_starts(wire) {
            if let Some(&target) = self.at.get(&wire[start..]) {
                out.extend_from_slice(&wire[..start]);
                out.extend_from_slice(&(0xc000 | target as u16).to_be_bytes());
                self.remember(wire, offset, start);
                return;
            }
        }
        out.extend_from_slice(wire);
        self.remember(wire, offset, wire.len());
    }
}

/// Where each label of `wire` starts (not the root's).
fn label_starts(wire: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(&len) = wire.get(at) {
        if len == 0 || len & 0xc0 != 0 {
            break;
        }
        starts.push(at);
        at += 1 + usize::from(len);
    }
    starts
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use hickory_proto::{
        op::{Edns, MessageType, OpCode, Query},
        rr::{
            Name,
            rdata::{A, AAAA, SRV},
        },
    };

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("a name")
    }

    fn message(qtype: RecordType, qname: &Name) -> Message {
        let mut m = Message::new(7, MessageType::Response, OpCode::Query);
        m.metadata.authoritative = true;
        m.add_query(Query::query(qname.clone(), qtype));
        m.set_edns(Edns::new());
        m
    }

    fn srv_answer(qname: &Name, targets: usize) -> Message {
        let mut m = message(RecordType::SRV, qname);
        for i in 0..targets {
            let target = name(&format!("cp-{i}.nodes.Prod.example."));
            let srv = SRV::new(0, 1, 443, target.clone());
            m.add_answer(Record::from_rdata(qname.clone(), 5, RData::SRV(srv)));
            let a = A(Ipv4Addr::new(198, 18, 1, i as u8));
            m.add_additional(Record::from_rdata(target.clone(), 5, RData::A(a)));
            let aaaa = AAAA(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16));
            m.add_additional(Record::from_rdata(target, 5, RData::AAAA(aaaa)));
        }
        m
    }

    #[test]
    fn below_hickorys_limits_the_bytes_are_hickorys() {
        // 10 targets: 30 records, 31 names compressed, 45 suffixes kept (of 64).
        let qname = name("_https._tcp.ing.Prod.example.");
        let small = srv_answer(&qname, 10);
        assert_eq!(
            large_answer(&small, SrvTargets::Full).expect("encoded"),
            small.to_vec().expect("encoded by hickory")
        );
    }

    #[test]
    fn every_owner_of_a_large_answer_is_compressed_and_it_reads_back_whole() {
        let qname = name("Default-NGINX.ingress.prod.example.");
        let mut m = message(RecordType::AAAA, &qname);
        for i in 0..250u16 {
            let aaaa = AAAA(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, i));
            m.add_answer(Record::from_rdata(qname.clone(), 5, RData::AAAA(aaaa)));
        }
        let bytes = to_vec(&m).expect("encoded");
        // Header, question, 250 records of 28 bytes, the OPT record.
        let question = 12 + qname.to_bytes().expect("wire").len() + 4;
        assert_eq!(bytes.len(), question + 250 * 28 + 11);
        assert!(
            m.to_vec().expect("hickory").len() > bytes.len(),
            "hickory writes owners past its 120th in full"
        );
        let read = Message::from_vec(&bytes).expect("it parses");
        assert_eq!(read.answers, m.answers);
        assert_eq!(read.queries, m.queries);
        assert_eq!(read.edns.map(|e| e.max_payload()), Some(512));

        let srv = srv_answer(&name("_https._tcp.ing.Prod.example."), 250);
        let bytes = to_vec(&srv).expect("encoded");
        let read = Message::from_vec(&bytes).expect("it parses");
        assert_eq!(read.answers, srv.answers);
        assert_eq!(read.additionals, srv.additionals);
        assert!(bytes.len() < srv.to_vec().expect("hickory").len());

        // Targets compressed: the same records read back, each target a label and a pointer.
        let compressed = to_vec_with(&srv, SrvTargets::Compressed).expect("encoded");
        let read = Message::from_vec(&compressed).expect("it parses");
        assert_eq!(read.answers, srv.answers);
        assert_eq!(read.additionals, srv.additionals);
        let shorter_by = bytes.len() - compressed.len();
        // `cp-N` stays; `nodes.Prod.example` (20 bytes with the root) becomes a pointer (2), in
        // all but the first target, which points at the question's `Prod.example` instead.
        assert_eq!(shorter_by, 249 * (20 - 2) + (14 - 2), "{shorter_by}");
    }

    #[test]
    fn a_small_answer_with_srv_targets_to_compress_is_encoded_here() {
        let srv = srv_answer(&name("_https._tcp.ing.Prod.example."), 3);
        let full = to_vec(&srv).expect("encoded");
        assert_eq!(
            full,
            srv.to_vec().expect("hickory"),
            "in full: hickory's bytes"
        );
        let compressed = to_vec_with(&srv, SrvTargets::Compressed).expect("encoded");
        assert!(compressed.len() < full.len());
        let read = Message::from_vec(&compressed).expect("it parses");
        assert_eq!(read.answers, srv.answers);
        assert_eq!(read.additionals, srv.additionals);
    }
}
