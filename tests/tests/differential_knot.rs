//! hostport-dns against Knot DNS serving the same zone (a zone file generated from the same
//! record table): a corpus of queries, every answer compared section by section. Documented
//! differences: the SOA serial (a content hash here, Knot's counter there) and reverse (PTR)
//! answers, which Knot does not serve without a reverse zone.

use std::net::SocketAddr;

use hostport_dns::{sources::file, table::RecordTable};
use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::udp_exchange,
    knot::{Knot, comparable},
    netns::NetNs,
    packet::QueryBuilder,
    require_root,
};

const ZONE: &str = "zones:
  - name: prod.coreha.example
    ttl: 5
    nameservers:
      - { name: ns1, addresses: [198.18.0.53] }
    records:
      default-nginx.ingress: [198.18.200.1, 198.18.200.2, 198.18.200.3, \"2001:db8::c8:1\"]
      v6.only: \"2001:db8::6\"
      node-1.nodes: 198.18.200.1
      x.deep.empty: 198.18.0.9
    srv:
      _https._tcp.default-nginx.ingress: [{ port: 443, target: node-1.nodes }]
";

const NAMES: &[&str] = &[
    "prod.coreha.example",
    "PROD.Coreha.example",
    "default-nginx.ingress.prod.coreha.example",
    "Default-NGINX.ingress.prod.coreha.example",
    "ingress.prod.coreha.example",
    "deep.empty.prod.coreha.example",
    "empty.prod.coreha.example",
    "v6.only.prod.coreha.example",
    "ns1.prod.coreha.example",
    "node-1.nodes.prod.coreha.example",
    "_https._tcp.default-nginx.ingress.prod.coreha.example",
    "nope.prod.coreha.example",
    "a.b.nope.prod.coreha.example",
    "x.ns1.prod.coreha.example",
    "www.example.com",
    "coreha.example",
];

/// A, AAAA, NS, SOA, MX, TXT, SRV, CAA, CNAME, ANY.
const TYPES: &[u16] = &[1, 28, 2, 6, 15, 16, 33, 257, 5, 255];

#[test]
fn answers_match_knot_for_the_whole_corpus() {
    require_root();
    let ns = NetNs::new("diff");
    let dir = TempDir::new("diff");
    let records = dir.write("records.yaml", ZONE);
    let snapshot = file::parse(ZONE, "zone".as_ref()).expect("valid zone");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let knot_addr: SocketAddr = "127.0.0.1:5300".parse().expect("an address");
    let ours: SocketAddr = "127.0.0.1:1053".parse().expect("an address");
    let _knot = Knot::start(&ns, knot_addr, &table);
    let _agent = Agent::start(
        &ns,
        &[
            "--records",
            records.to_str().expect("UTF-8"),
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
        ],
    );

    let mut compared = 0;
    let mut differences = Vec::new();
    for name in NAMES {
        for qtype in TYPES {
            for edns in [None, Some((1232, false)), Some((4096, true))] {
                let mut query = QueryBuilder::new(name, *qtype);
                if let Some((payload, dnssec_ok)) = edns {
                    query = query.edns(payload, dnssec_ok);
                }
                let bytes = query.bytes();
                let knot = udp_exchange(&ns, knot_addr, bytes.clone()).expect("Knot answers");
                let mine = udp_exchange(&ns, ours, bytes).expect("hostport-dns answers");
                let (knot, mine) = (comparable(&knot), comparable(&mine));
                if knot != mine {
                    differences.push(format!(
                        "{name} type {qtype} edns {edns:?}:\n  knot: {knot:?}\n  ours: {mine:?}"
                    ));
                }
                compared += 1;
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {compared} answers differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
