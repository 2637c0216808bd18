//! The userspace query path, coverage-guided: any bytes in, for both transports and every
//! shape the client policy can ask for, and the answer must be a well-formed response to the
//! query: it parses, carries the query's ID and opcode with QR set, echoes a readable question,
//! fits what UDP allows, and a slip is truncated and empty. Parse → answer → parse.
#![no_main]

use std::{net::IpAddr, sync::OnceLock};

use hickory_proto::op::{Message, MessageType};
use hostport_dns::{
    clients::cookies::Cookies,
    dns::message::{Transport, UdpCeiling},
    server::{
        answer::{Asker, Shape, respond_for},
        identity::Identity,
    },
    sources::file,
    table::RecordTable,
};
use libfuzzer_sys::fuzz_target;

const ZONES: &str = "zones:
  - name: prod.coreha.example
    records:
      default-nginx.ingress: [198.18.200.1, 198.18.200.2, \"2001:db8::5\"]
      many: [198.18.9.1, 198.18.9.2, 198.18.9.3, 198.18.9.4, 198.18.9.5, 198.18.9.6, 198.18.9.7, 198.18.9.8, 198.18.9.9, 198.18.9.10, 198.18.9.11, 198.18.9.12, 198.18.9.13, 198.18.9.14, 198.18.9.15, 198.18.9.16, 198.18.9.17]
      x.deep.ent: 198.18.0.40
    srv:
      _https._tcp.default-nginx.ingress: [{ priority: 10, weight: 5, port: 443, target: default-nginx.ingress }]
  - name: odd.test
    soa: { mname: ns1.elsewhere.test., rname: hostmaster }
    records:
      www: 198.18.1.2
";

fn table() -> &'static RecordTable {
    static TABLE: OnceLock<RecordTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let snapshot = file::parse(ZONES, "fuzz zones".as_ref()).expect("valid zones");
        RecordTable::compile(&snapshot.zones, snapshot.records()).0
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
    for transport in [Transport::Udp, Transport::Tcp] {
        for shape in [Shape::Full, Shape::Slip, Shape::BadCookie, Shape::Refused] {
            let asker = Asker {
                client: Some(client),
                cookies: Some(cookies()),
                shape,
                identity: Some(identity()),
                ..Asker::ANONYMOUS
            };
            let Some(answer) = respond_for(query, Some(table()), transport, &asker) else {
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
