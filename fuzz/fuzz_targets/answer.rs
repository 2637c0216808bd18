//! The userspace query path, coverage-guided: any bytes in, for both transports and every
//! shape the client policy can ask for, and the answer must be a well-formed response to the
//! query: it parses, carries the query's ID and opcode with QR set, echoes a readable question,
//! fits what UDP allows, and a slip is truncated and empty. Parse → answer → parse.
#![no_main]

use std::{net::IpAddr, sync::OnceLock};

use hickory_proto::{
    op::{Message, MessageType},
    rr::Name,
};
use hostport_dns_core::{
    answer::{Asker, Shape, respond_for},
    cookies::Cookies,
    dns::{
        Query, WireName,
        message::{Transport, UdpCeiling},
    },
    identity::Identity,
    records::{RecordData, SourceRecord, Srv},
    table::RecordTable,
    zone::ZoneSpec,
};
use libfuzzer_sys::fuzz_target;

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("a valid name")
}

fn record(owner: &str, data: RecordData) -> SourceRecord {
    SourceRecord::new(&name(owner), None, data)
}

fn address(owner: &str, address: &str) -> SourceRecord {
    record(owner, address.parse::<IpAddr>().expect("an address").into())
}

/// Two zones: one with the shapes the answers take (a dual-stack name, a name past the kernel
/// entry's 16 addresses, an empty non-terminal, SRV with its target's addresses), one whose
/// SOA names a server outside it.
fn table() -> &'static RecordTable {
    static TABLE: OnceLock<RecordTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let prod = ZoneSpec::with_defaults(name("prod.coreha.example."));
        let mut odd = ZoneSpec::with_defaults(name("odd.test."));
        odd.soa.mname = name("ns1.elsewhere.test.");
        let ingress = "default-nginx.ingress.prod.coreha.example.";
        let mut records = vec![
            address(ingress, "198.18.200.1"),
            address(ingress, "198.18.200.2"),
            address(ingress, "2001:db8::5"),
            address("x.deep.ent.prod.coreha.example.", "198.18.0.40"),
            record(
                "_https._tcp.default-nginx.ingress.prod.coreha.example.",
                RecordData::Srv(Srv {
                    priority: 10,
                    weight: 5,
                    port: 443,
                    target: WireName::from_name(&name(ingress)),
                }),
            ),
            address("www.odd.test.", "198.18.1.2"),
        ];
        records.extend(
            (1..=17).map(|i| address("many.prod.coreha.example.", &format!("198.18.9.{i}"))),
        );
        RecordTable::compile(&[prod, odd], &records).0
    })
}

fn cookies() -> &'static Cookies {
    static COOKIES: OnceLock<Cookies> = OnceLock::new();
    COOKIES.get_or_init(|| Cookies::with_secrets(vec![[7; 16]]))
}

fn identity() -> &'static Identity {
    static IDENTITY: OnceLock<Identity> = OnceLock::new();
    IDENTITY.get_or_init(|| Identity::new("cp-1.fuzz".into(), true, true).expect("an identity"))
}

fuzz_target!(|query: &[u8]| {
    let client: IpAddr = "198.18.0.2".parse().expect("an address");
    let parsed_query = Message::from_vec(query).ok();
    let view = Query::read(query);
    for transport in [Transport::Udp, Transport::Tcp] {
        for shape in [Shape::Full, Shape::Slip, Shape::BadCookie, Shape::Refused] {
            let asker = Asker {
                client: Some(client),
                cookies: Some(cookies()),
                shape,
                identity: Some(identity()),
                ..Asker::ANONYMOUS
            };
            let Some(answer) = respond_for(&view, Some(table()), transport, &asker) else {
                // No answer only to what is not a query: too short for an ID, or a response.
                assert!(
                    query.len() < 12 || query[2] & 0x80 != 0,
                    "a query went unanswered"
                );
                continue;
            };
            check(
                query,
                parsed_query.as_ref(),
                &answer.bytes,
                transport,
                shape,
            );
        }
    }
});

fn check(
    query: &[u8],
    parsed_query: Option<&Message>,
    bytes: &[u8],
    transport: Transport,
    shape: Shape,
) {
    let response = Message::from_vec(bytes).expect("the answer parses");
    assert_eq!(response.metadata.message_type, MessageType::Response);
    assert_eq!(&bytes[..2], &query[..2], "the query's ID");
    assert_eq!(bytes[2] & 0x78, query[2] & 0x78, "the query's opcode");
    if transport == Transport::Udp {
        let limit = parsed_query.and_then(|q| q.edns.as_ref()).map_or(512, |e| {
            usize::from(e.max_payload().clamp(512, UdpCeiling::DEFAULT.bytes()))
        });
        assert!(
            bytes.len() <= limit.max(512),
            "{} bytes over UDP",
            bytes.len()
        );
    }
    if let Some(q) = parsed_query
        && q.queries.len() == 1
        && response.queries.len() == 1
    {
        assert_eq!(response.queries[0], q.queries[0], "the question echoed");
    }
    if shape == Shape::Slip {
        // Every slip is empty, whatever its RCODE; and truncated, unless the query was too
        // broken to echo (a bare header: FORMERR, nothing to retry over TCP for).
        assert!(
            response.answers.is_empty()
                && response.authorities.is_empty()
                && response.additionals.is_empty(),
            "a slip carries no records"
        );
        let header_only = bytes.len() == 12 && parsed_query.is_none();
        assert!(
            response.metadata.truncation || header_only,
            "a slip is truncated (TC=1)"
        );
    }
}
