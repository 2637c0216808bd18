//! Transfers answered from a compiled table: the framing of AXFR and IXFR, the ACL, TSIG.

use std::{net::IpAddr, sync::Arc};

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query, ResponseCode},
    rr::{Name, RData, Record, RecordType, TSigner, rdata::SOA, rdata::tsig::TsigAlgorithm},
    serialize::binary::BinDecodable,
};
use ipnet::IpNet;

use super::{
    Transfers,
    config::{AllowEntry, KeyConfig, TransferConfig},
    tsig,
};
use crate::server::zone_transfers::{SignedAnswer, ZoneTransfers};
use hostport_dns_core::{
    dns::{self, message::Transport},
    records::{RecordData, SourceRecord},
    table::{RecordTable, TableBuilder},
    zone::ZoneSpec,
};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn a(n: &str, ip: &str) -> SourceRecord {
    SourceRecord::new(&name(n), None, RecordData::A(ip.parse().unwrap()))
}

/// An HMAC-SHA256 signer of the key `key` with `secret`.
fn signer(secret: &[u8], key: &str) -> TSigner {
    TSigner::new(secret.to_vec(), TsigAlgorithm::HmacSha256, name(key), 300).unwrap()
}

/// `count` names `h<i>.example.`, an address each.
fn hosts(count: usize) -> Vec<SourceRecord> {
    (0..count)
        .map(|i| {
            a(
                &format!("h{i}.example."),
                &format!("198.18.{}.{}", i / 250, i % 250),
            )
        })
        .collect()
}

fn transfers(key: bool) -> (Transfers, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let secret_file = dir.0.join("key");
    std::fs::write(&secret_file, data_encoding::BASE64.encode(SECRET)).unwrap();
    let key_name = name("transfer-key.");
    let config = TransferConfig {
        keys: vec![KeyConfig {
            name: key_name.clone(),
            algorithm: TsigAlgorithm::HmacSha256,
            secret_file,
        }],
        allow: vec![AllowEntry {
            from: "127.0.0.0/8".parse::<IpNet>().unwrap(),
            key: key.then_some(key_name),
        }],
        notify: Vec::new(),
        history: 4,
        catalog: None,
    };
    (Transfers::new(config).unwrap(), dir)
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "hpd-transfer-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A builder for `example.` holding `records`, numbered from `serial`.
fn table(builder: &mut TableBuilder, serial: u32) -> Arc<RecordTable> {
    table_and_changes(builder, serial).0
}

/// The table, and the names that changed from the one before.
fn table_and_changes(
    builder: &mut TableBuilder,
    serial: u32,
) -> (Arc<RecordTable>, Vec<hostport_dns_core::dns::WireName>) {
    let changed = builder.finish();
    builder.assign_serials(|_| serial);
    (Arc::new(builder.table().clone()), changed)
}

fn request(qtype: RecordType, client_serial: Option<u32>) -> Message {
    let mut m = Message::new(7, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(name("example."), qtype));
    if let Some(serial) = client_serial {
        let soa = SOA::new(name("ns.example."), name("h.example."), serial, 1, 1, 1, 1);
        m.add_authority(Record::from_rdata(name("example."), 0, RData::SOA(soa)));
    }
    m
}

fn ask(t: &Transfers, table: &RecordTable, query: &[u8], from: &str) -> Vec<Message> {
    let client: IpAddr = from.parse().unwrap();
    t.respond(query, Some(table), client, Transport::Tcp)
        .expect("a transfer answer")
        .iter()
        .map(|m| Message::from_bytes(m).unwrap())
        .collect()
}

fn answers(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| &m.answers)
        .map(|r| format!("{} {}", r.name, r.data))
        .collect()
}

#[test]
fn the_cheap_look_finds_transfers_only() {
    let bytes = |m: &Message| m.to_vec().unwrap();
    let asks = |bytes: &[u8]| dns::Query::read(bytes).asks_transfer();
    assert!(asks(&bytes(&request(RecordType::AXFR, None))));
    assert!(asks(&bytes(&request(RecordType::IXFR, Some(1)))));
    assert!(!asks(&bytes(&request(RecordType::SOA, None))));
    assert!(!asks(&[0u8; 12]));
}

#[test]
fn axfr_is_the_soa_every_record_and_the_soa() {
    let (t, _dir) = transfers(false);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(&[a("b.example.", "198.18.0.2"), a("a.example.", "198.18.0.1")]);
    let v1 = table(&mut builder, 10);
    let messages = ask(
        &t,
        &v1,
        &request(RecordType::AXFR, None).to_vec().unwrap(),
        "127.0.0.1",
    );
    let records = answers(&messages);
    assert_eq!(
        records[0],
        "example. ns.example. hostmaster.example. 10 3600 600 86400 5"
    );
    assert_eq!(records.first(), records.last());
    assert_eq!(records[1], "example. ns.example.");
    // The names in the table's order.
    let mut names = records[2..records.len() - 1].to_vec();
    names.sort();
    assert_eq!(names, ["a.example. 198.18.0.1", "b.example. 198.18.0.2"]);
    assert!(
        messages
            .iter()
            .all(|m| m.metadata.authoritative && m.metadata.response_code == ResponseCode::NoError)
    );
}

#[test]
fn ixfr_sends_the_difference_or_the_whole_zone_when_the_serial_is_too_old() {
    // Twice: with the history knowing the names that changed (as the publisher tells it), and
    // without (a rebuilt table: every name compared). Both send the same difference.
    for names_known in [true, false] {
        let (t, _dir) = transfers(false);
        let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
        builder.add(&[a("a.example.", "198.18.0.1"), a("b.example.", "198.18.0.2")]);
        t.record(&table(&mut builder, 10), None);
        builder.remove(&[a("b.example.", "198.18.0.2")]);
        builder.add(&[a("c.example.", "198.18.0.3")]);
        let (v2, changed) = table_and_changes(&mut builder, 11);
        assert_eq!(changed.len(), 2, "{changed:?}");
        t.record(&v2, names_known.then_some(changed.as_slice()));
        let ixfr = |serial| {
            let q = request(RecordType::IXFR, Some(serial)).to_vec().unwrap();
            answers(&ask(&t, &v2, &q, "127.0.0.1"))
        };
        let diff = ixfr(10);
        let soa = |s: u32| format!("example. ns.example. hostmaster.example. {s} 3600 600 86400 5");
        assert_eq!(
            diff,
            [
                soa(11),
                soa(10),
                "b.example. 198.18.0.2".to_owned(),
                soa(11),
                "c.example. 198.18.0.3".to_owned(),
                soa(11),
            ],
            "names known: {names_known}"
        );
        // Up to date: the SOA alone.
        assert_eq!(ixfr(11), [soa(11)]);
        // Older than every version kept: the whole zone, AXFR-style.
        let whole = ixfr(3);
        assert_eq!(whole.len(), 5, "{whole:?}");
        assert!(whole.contains(&"c.example. 198.18.0.3".to_owned()));
    }
}

#[test]
fn the_acl_and_the_key_decide() {
    let (t, _dir) = transfers(true);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(&[a("a.example.", "198.18.0.1")]);
    let v1 = table(&mut builder, 10);
    let axfr = request(RecordType::AXFR, None);
    let rcode = |m: &[Message]| m[0].metadata.response_code;
    // Unsigned, where the ACL wants the key.
    let unsigned = ask(&t, &v1, &axfr.to_vec().unwrap(), "127.0.0.1");
    assert_eq!(rcode(&unsigned), ResponseCode::Refused);
    let good = signer(SECRET, "transfer-key.");
    let (signed, mac) = tsig::sign_request(&good, axfr.clone(), tsig::unix_now()).unwrap();
    let answered = t
        .respond(
            &signed,
            Some(&v1),
            "127.0.0.1".parse().unwrap(),
            Transport::Tcp,
        )
        .unwrap();
    assert_eq!(Message::from_bytes(&answered[0]).unwrap().answers.len(), 4);
    tsig::verify_response(&good, &answered[0], &mac, tsig::unix_now()).unwrap();
    // Signed, but from outside the ACL.
    let outside = ask(&t, &v1, &signed, "198.18.0.9");
    assert_eq!(rcode(&outside), ResponseCode::Refused);
    // A wrong secret, an unknown key, a time far off.
    let tsig_error = |m: &[Message]| m[0].signature().and_then(|s| s.data.error);
    let (bad_sig, _) = tsig::sign_request(
        &signer(b"wrong", "transfer-key."),
        axfr.clone(),
        tsig::unix_now(),
    )
    .unwrap();
    let bad_sig = ask(&t, &v1, &bad_sig, "127.0.0.1");
    assert_eq!(rcode(&bad_sig), ResponseCode::NotAuth);
    assert_eq!(tsig_error(&bad_sig), Some(tsig_error_of(16)));
    let (bad_key, _) = tsig::sign_request(
        &signer(SECRET, "other-key."),
        axfr.clone(),
        tsig::unix_now(),
    )
    .unwrap();
    let bad_key = ask(&t, &v1, &bad_key, "127.0.0.1");
    assert_eq!(rcode(&bad_key), ResponseCode::NotAuth);
    assert_eq!(tsig_error(&bad_key), Some(tsig_error_of(17)));
    let (bad_time, mac) = tsig::sign_request(&good, axfr, tsig::unix_now() - 3600).unwrap();
    let bad_time_bytes = t
        .respond(
            &bad_time,
            Some(&v1),
            "127.0.0.1".parse().unwrap(),
            Transport::Tcp,
        )
        .unwrap();
    let bad_time = Message::from_bytes(&bad_time_bytes[0]).unwrap();
    assert_eq!(bad_time.metadata.response_code, ResponseCode::NotAuth);
    assert_eq!(
        bad_time.signature().and_then(|s| s.data.error),
        Some(tsig_error_of(18))
    );
    // BADTIME is signed, over the request's MAC.
    assert!(
        good.verify_message_byte(&bad_time_bytes[0], Some(&mac), true)
            .is_ok()
    );
}

fn tsig_error_of(code: u16) -> hickory_proto::rr::rdata::tsig::TsigError {
    code.into()
}

#[test]
fn a_signed_transfer_in_several_messages_chains_its_macs() {
    let (t, _dir) = transfers(true);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(hosts(6000));
    let v1 = table(&mut builder, 10);
    let good = signer(SECRET, "transfer-key.");
    let (signed, mac) =
        tsig::sign_request(&good, request(RecordType::AXFR, None), tsig::unix_now()).unwrap();
    let messages = t
        .respond(
            &signed,
            Some(&v1),
            "127.0.0.1".parse().unwrap(),
            Transport::Tcp,
        )
        .unwrap();
    assert!(messages.len() > 1, "{} messages", messages.len());
    let mut previous = mac;
    for (i, message) in messages.iter().enumerate() {
        assert!(message.len() <= usize::from(u16::MAX));
        let (next, _, _) = good
            .verify_message_byte(message, Some(&previous), i == 0)
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        previous = next;
    }
    let total: usize = messages
        .iter()
        .map(|m| Message::from_bytes(m).unwrap().answers.len())
        .sum();
    assert_eq!(total, 6000 + 3);
}

#[test]
fn signed_queries_get_signed_answers_and_unsigned_ones_go_the_ordinary_way() {
    let (t, _dir) = transfers(true);
    let good = signer(SECRET, "transfer-key.");
    let mut ordinary = || Some(b"ordinary".to_vec());
    let (signed, mac) =
        tsig::sign_request(&good, request(RecordType::SOA, None), tsig::unix_now()).unwrap();
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    let v1 = table(&mut builder, 10);
    let mut respond =
        || hostport_dns_core::answer::respond(&signed, Some(&v1), Transport::Udp).map(|a| a.bytes);
    let SignedAnswer::Answer(Some(answer)) =
        t.answer_signed(&dns::Query::read(&signed), &mut respond)
    else {
        panic!("a signed answer");
    };
    tsig::verify_response(&good, &answer, &mac, tsig::unix_now()).unwrap();
    assert_eq!(Message::from_bytes(&answer).unwrap().answers.len(), 1);
    let wrong = signer(b"wrong", "transfer-key.");
    let (bad, _) =
        tsig::sign_request(&wrong, request(RecordType::SOA, None), tsig::unix_now()).unwrap();
    let SignedAnswer::Answer(Some(refused)) =
        t.answer_signed(&dns::Query::read(&bad), &mut ordinary)
    else {
        panic!("an error answer");
    };
    let refused = Message::from_bytes(&refused).unwrap();
    assert_eq!(refused.metadata.response_code, ResponseCode::NotAuth);
    assert_eq!(
        refused.signature().and_then(|s| s.data.error),
        Some(tsig_error_of(16))
    );
    let unsigned = request(RecordType::SOA, None).to_vec().unwrap();
    assert!(matches!(
        t.answer_signed(&dns::Query::read(&unsigned), &mut ordinary),
        SignedAnswer::NotSigned
    ));
    // Any other signed query is answered signed too (RFC 8945 §5.3).
    let (signed_a, mac) =
        tsig::sign_request(&good, request(RecordType::A, None), tsig::unix_now()).unwrap();
    let mut respond = || {
        hostport_dns_core::answer::respond(&signed_a, Some(&v1), Transport::Udp).map(|a| a.bytes)
    };
    let SignedAnswer::Answer(Some(answer)) =
        t.answer_signed(&dns::Query::read(&signed_a), &mut respond)
    else {
        panic!("a signed answer to a signed A query");
    };
    tsig::verify_response(&good, &answer, &mac, tsig::unix_now()).unwrap();
}

#[test]
fn transfer_messages_compress_their_names() {
    let (t, _dir) = transfers(false);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(hosts(1000));
    let v1 = table(&mut builder, 10);
    let query = request(RecordType::AXFR, None).to_vec().unwrap();
    let messages = t
        .respond(
            &query,
            Some(&v1),
            "127.0.0.1".parse().unwrap(),
            Transport::Tcp,
        )
        .unwrap();
    let bytes: usize = messages.iter().map(Vec::len).sum();
    // An A record whose owner is one label and a pointer: at most 1 + 4 + 2 + 10 + 4 bytes,
    // and a header and question per message (uncompressed owners made it 27,252 bytes).
    assert!(bytes < 1000 * 21 + 1000, "{bytes} bytes for 1000 A records");
}

/// A whole zone is made message by message as they are taken: when the client is gone after
/// the first message, nothing more is made, and the messages taken are those a whole transfer
/// starts with.
#[test]
fn axfr_messages_are_made_one_at_a_time_and_stop_when_the_client_is_gone() {
    let (t, _dir) = transfers(false);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(hosts(20_000));
    let v1 = table(&mut builder, 10);
    let query = request(RecordType::AXFR, None).to_vec().unwrap();
    let client = "127.0.0.1".parse().unwrap();
    let whole = t
        .respond(&query, Some(&v1), client, Transport::Tcp)
        .unwrap();
    assert!(whole.len() > 3, "{} messages", whole.len());
    let mut made = Vec::new();
    let handled = t.stream(
        &dns::Query::read(&query),
        Some(&v1),
        client,
        Transport::Tcp,
        &mut |message| {
            made.push(message);
            made.len() < 2
        },
    );
    assert!(handled);
    assert_eq!(made, whole[..2], "two messages made, then it stopped");
}

/// What a secondary is known to hold: the serial of its IXFR request, the zone's once a
/// transfer went in full; nothing for a refused client, nor for a transfer cut short.
#[test]
fn the_serial_each_secondary_holds_is_followed() {
    let (t, _dir) = transfers(false);
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.add(hosts(20_000));
    let v1 = table(&mut builder, 10);
    t.record(&v1, None);
    let held = |from: &str| {
        let from: IpAddr = from.parse().unwrap();
        t.stats
            .secondaries
            .snapshot()
            .into_iter()
            .find(|(zone, a, _)| zone == "example." && *a == from)
            .map(|(_, _, held)| held.serial)
    };
    let axfr = request(RecordType::AXFR, None).to_vec().unwrap();
    ask(&t, &v1, &axfr, "127.0.0.1");
    assert_eq!(held("127.0.0.1"), Some(10));
    // Outside the ACL: not followed.
    ask(&t, &v1, &axfr, "198.18.0.9");
    assert_eq!(held("198.18.0.9"), None);
    // Cut short: it holds nothing new.
    let client = "127.0.0.2".parse().unwrap();
    t.stream(
        &dns::Query::read(&axfr),
        Some(&v1),
        client,
        Transport::Tcp,
        &mut |_| false,
    );
    assert_eq!(held("127.0.0.2"), None);
    // An IXFR from an old serial the history does not know: the whole zone, then it holds 10.
    let ixfr = |serial| request(RecordType::IXFR, Some(serial)).to_vec().unwrap();
    ask(&t, &v1, &ixfr(3), "127.0.0.3");
    assert_eq!(held("127.0.0.3"), Some(10));
    // An IXFR cut short leaves the serial it asked from.
    t.stream(
        &dns::Query::read(&ixfr(4)),
        Some(&v1),
        client,
        Transport::Tcp,
        &mut |_| false,
    );
    assert_eq!(held("127.0.0.2"), Some(4));
    // A newer serial (another node's): what it says it holds.
    ask(&t, &v1, &ixfr(12), "127.0.0.1");
    assert_eq!(held("127.0.0.1"), Some(12));
}

/// The catalog zone is transferred as any zone: AXFR lists every member, and an IXFR from the
/// version before a new reverse zone carries that member's two records alone.
#[test]
fn the_catalog_is_transferred_whole_and_by_difference() {
    use hostport_dns_core::table::catalog::CatalogSpec;
    let (t, _dir) = transfers(false);
    let catalog = name("catalog.test.");
    let (mut builder, _) = TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
    builder.set_catalog(Some(CatalogSpec {
        apex: catalog.clone(),
    }));
    builder.add(hosts(1));
    let number = |builder: &mut TableBuilder, serial: u32| {
        let changed = builder.finish();
        builder.assign_serials(|_| serial);
        builder.assign_catalog_serial(|_, _| serial);
        (Arc::new(builder.table().clone()), changed)
    };
    let (old, _) = number(&mut builder, 10);
    t.record(&old, None);
    builder.add(&[a("far.example.", "198.18.9.1")]);
    let (new, changed) = number(&mut builder, 11);
    t.record(&new, Some(&changed));
    let ask_catalog = |qtype: RecordType, serial: Option<u32>| {
        let mut m = Message::new(9, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(catalog.clone(), qtype));
        if let Some(serial) = serial {
            let soa = SOA::new(name("ns.example."), name("h.example."), serial, 1, 1, 1, 1);
            m.add_authority(Record::from_rdata(catalog.clone(), 0, RData::SOA(soa)));
        }
        answers(&ask(&t, &new, &m.to_vec().unwrap(), "127.0.0.1"))
    };
    let whole = ask_catalog(RecordType::AXFR, None);
    for member in [
        "example.",
        "0.18.198.in-addr.arpa.",
        "9.18.198.in-addr.arpa.",
    ] {
        assert!(
            whole.iter().any(|r| r.ends_with(&format!(" {member}"))),
            "{member} in {whole:?}"
        );
    }
    assert!(whole.iter().any(|r| r.starts_with("version.catalog.test.")));
    let difference = ask_catalog(RecordType::IXFR, Some(10));
    // The new SOA, the old SOA, nothing gone, the new SOA, the member's PTR and group, the SOA.
    assert_eq!(difference.len(), 6, "{difference:?}");
    let added = &difference[3..5];
    assert!(
        added.iter().any(|r| r.ends_with(" 9.18.198.in-addr.arpa."))
            && added.iter().any(|r| r.starts_with("group.")),
        "{difference:?}"
    );
}
