//! hostport-dns against Knot DNS: the agent serves a record file, Knot serves zone files written
//! by hand for the same data (not generated from the agent's compiled table, so a compile bug
//! shows as a difference), and a corpus of queries over UDP and TCP is compared section by
//! section. Documented differences: the SOA serial (a content hash here, Knot's counter there).
//! The reverse zones the agent derives (the /24 and /64 of its addresses, with the first zone's
//! SOA fields) are written for Knot by hand too, and compared like the rest. The corpus also
//! checks which path answered: every query the kernel's rules give to XDP must be answered by
//! XDP, and no other.

use std::{fmt::Write as _, net::SocketAddr};

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::{tcp_exchange, udp_exchange},
    knot::{Knot, UDP_MAX_PAYLOAD, comparable},
    netns::NetNs,
    packet::QueryBuilder,
    require_root,
};

/// Addresses of `edge.example`'s large sets: `many` does not fit a 512-byte answer, and both are
/// larger than the kernel answers (16).
fn many() -> Vec<String> {
    (1..=40).map(|i| format!("198.18.50.{i}")).collect()
}

fn seventeen() -> Vec<String> {
    (1..=17).map(|i| format!("198.18.52.{i}")).collect()
}

fn records() -> String {
    format!(
        "zones:
  - name: prod.coreha.example
    ttl: 5
    nameservers:
      - {{ name: ns1, addresses: [198.18.0.53] }}
    soa: {{ mname: ns1, rname: dns-admin, refresh: 7200, retry: 900, expire: 1209600, minimum: 30 }}
    records:
      default-nginx.ingress: [198.18.200.1, 198.18.200.2, 198.18.200.3, \"2001:db8::c8:1\"]
      v6.only: \"2001:db8::6\"
      node-1.nodes: 198.18.200.1
      x.deep.empty: 198.18.0.9
    srv:
      _https._tcp.default-nginx.ingress: [{{ port: 443, target: node-1.nodes }}]
  - name: edge.example
    ttl: 30
    soa: {{ minimum: 10 }}
    records:
      many: [{}]
      seventeen: [{}]
      www: 198.18.51.1
{}    srv:
      _https._tcp.pool: [{}]
      _dup._tcp.pool: [{{ port: 443, target: t1.pool }}, {{ port: 8443, target: t1.pool }}]
  - name: glue.example
    ttl: 60
    nameservers:
{}    records:
      www: 198.18.52.1
",
        many().join(", "),
        seventeen().join(", "),
        pool()
            .iter()
            .map(|(target, address)| format!("      {target}: {address}\n"))
            .collect::<String>(),
        pool()
            .iter()
            .map(|(target, _)| format!("{{ port: 443, target: {target} }}"))
            .collect::<Vec<_>>()
            .join(", "),
        glue_servers()
            .iter()
            .map(|(ns, v4, v6)| format!("      - {{ name: {ns}, addresses: [{v4}, \"{v6}\"] }}\n"))
            .collect::<String>()
    )
}

/// Fourteen name servers with two addresses each: the NS records fit 512 bytes, their glue does
/// not (the glue goes, TC stays clear).
fn glue_servers() -> Vec<(String, String, String)> {
    (1..=14)
        .map(|i| {
            (
                format!("ns{i}"),
                format!("198.18.53.{i}"),
                format!("2001:db8::35:{i}"),
            )
        })
        .collect()
}

/// Twelve SRV targets with an address each: the SRV records fit 512 bytes, their targets'
/// addresses do not all fit beside them.
fn pool() -> Vec<(String, String)> {
    (1..=12)
        .map(|i| (format!("t{i}.pool"), format!("198.18.60.{i}")))
        .collect()
}

/// The same data as Knot zone files, by hand.
fn knot_zones() -> Vec<(String, String)> {
    let prod = "$ORIGIN prod.coreha.example.
$TTL 5
@                                  SOA  ns1 dns-admin 1 7200 900 1209600 30
@                                  NS   ns1
ns1                                A    198.18.0.53
default-nginx.ingress              A    198.18.200.1
default-nginx.ingress              A    198.18.200.2
default-nginx.ingress              A    198.18.200.3
default-nginx.ingress              AAAA 2001:db8::c8:1
v6.only                            AAAA 2001:db8::6
node-1.nodes                       A    198.18.200.1
x.deep.empty                       A    198.18.0.9
_https._tcp.default-nginx.ingress  SRV  0 1 443 node-1.nodes
"
    .to_owned();
    let mut edge = "$ORIGIN edge.example.
$TTL 30
@    SOA  ns hostmaster 1 3600 600 86400 10
@    NS   ns
www  A    198.18.51.1
_dup._tcp.pool SRV 0 1 443 t1.pool
_dup._tcp.pool SRV 0 1 8443 t1.pool
"
    .to_owned();
    for (target, address) in pool() {
        let _ = writeln!(edge, "{target} A {address}");
        let _ = writeln!(edge, "_https._tcp.pool SRV 0 1 443 {target}");
    }
    for a in many() {
        let _ = writeln!(edge, "many A {a}");
    }
    for a in seventeen() {
        let _ = writeln!(edge, "seventeen A {a}");
    }
    // The reverse zones of the addresses queried, with the first zone's SOA fields and name
    // servers (prod.coreha.example. comes first in DNS order).
    let reverse = |origin: &str, ptrs: &[(&str, &str)]| {
        let mut zone = format!(
            "$ORIGIN {origin}\n$TTL 5\n@ SOA ns1.prod.coreha.example. dns-admin.prod.coreha.example. 1 7200 900 1209600 30\n@ NS ns1.prod.coreha.example.\n"
        );
        for (owner, target) in ptrs {
            let _ = writeln!(zone, "{owner} PTR {target}.prod.coreha.example.");
        }
        (origin.to_owned(), zone)
    };
    let mut glue = "$ORIGIN glue.example.
$TTL 60
@    SOA  ns1 hostmaster 1 3600 600 86400 60
www  A    198.18.52.1
"
    .to_owned();
    for (ns, v4, v6) in glue_servers() {
        let _ = writeln!(glue, "@ NS {ns}");
        let _ = writeln!(glue, "{ns} A {v4}");
        let _ = writeln!(glue, "{ns} AAAA {v6}");
    }
    vec![
        ("prod.coreha.example.".into(), prod),
        ("edge.example.".into(), edge),
        ("glue.example.".into(), glue),
        reverse(
            "200.18.198.in-addr.arpa.",
            &[
                ("1", "default-nginx.ingress"),
                ("1", "node-1.nodes"),
                ("2", "default-nginx.ingress"),
                ("3", "default-nginx.ingress"),
            ],
        ),
        reverse(
            "0.18.198.in-addr.arpa.",
            &[("9", "x.deep.empty"), ("53", "ns1")],
        ),
        reverse(
            "0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
            &[
                ("1.0.0.0.8.c.0.0.0.0.0.0.0.0.0.0", "default-nginx.ingress"),
                ("6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0", "v6.only"),
            ],
        ),
    ]
}

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
    "dns-admin.prod.coreha.example",
    "edge.example",
    "www.edge.example",
    "WWW.Edge.Example",
    "many.edge.example",
    "seventeen.edge.example",
    "nope.edge.example",
    "ns.edge.example",
    "_https._tcp.pool.edge.example",
    "_dup._tcp.pool.edge.example",
    "t1.pool.edge.example",
    "pool.edge.example",
    "www.example.com",
    "coreha.example",
    "glue.example",
    "ns3.glue.example",
    "www.glue.example",
    // The reverse zones: apexes, addresses with one and two names, a neighbour without one,
    // names below an address, an empty non-terminal of the IPv6 zone, and a network above the
    // zones (not ours).
    "200.18.198.in-addr.arpa",
    "1.200.18.198.in-addr.arpa",
    "2.200.18.198.IN-ADDR.ARPA",
    "9.200.18.198.in-addr.arpa",
    "x.1.200.18.198.in-addr.arpa",
    "53.0.18.198.in-addr.arpa",
    "9.0.18.198.in-addr.arpa",
    "0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa",
    "1.0.0.0.8.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa",
    "6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa",
    "8.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa",
    "18.198.in-addr.arpa",
];

const A: u16 = 1;
const AAAA: u16 = 28;

/// A, AAAA, NS, SOA, MX, TXT, SRV, CAA, CNAME, PTR, ANY.
const TYPES: &[u16] = &[A, AAAA, 2, 6, 15, 16, 33, 257, 5, 12, 255];

/// EDNS of the corpus: none, version 0 with and without DO, version 1 (BADVERS).
const EDNS: &[Option<(u16, bool, u8)>] = &[
    None,
    Some((1232, false, 0)),
    Some((4096, true, 0)),
    Some((1232, false, 1)),
];

/// Whether the kernel's rules (ebpf/, docs/src/clients.md) give this UDP query to XDP: A or AAAA,
/// EDNS absent or version 0, in a zone, at a name whose sets hold at most 16 records; a negative
/// answer unless the question ends in a name the SOA names (whose compression userspace decides).
fn xdp_answers(name: &str, qtype: u16, edns: Option<(u16, bool, u8)>) -> bool {
    let name = name.to_ascii_lowercase();
    if !(qtype == A || qtype == AAAA) || edns.is_some_and(|(_, _, version)| version != 0) {
        return false;
    }
    let in_zone = name.ends_with("prod.coreha.example")
        || name.ends_with("edge.example")
        || name.ends_with("glue.example");
    let soa_names = [
        "ns1.prod.coreha.example",
        "dns-admin.prod.coreha.example",
        "ns.edge.example",
        "hostmaster.edge.example",
        "ns1.glue.example",
        "hostmaster.glue.example",
    ];
    // (name, A count, AAAA count) of every name with addresses.
    let addresses = [
        ("default-nginx.ingress.prod.coreha.example", 3, 1),
        ("v6.only.prod.coreha.example", 0, 1),
        ("node-1.nodes.prod.coreha.example", 1, 0),
        ("x.deep.empty.prod.coreha.example", 1, 0),
        ("ns1.prod.coreha.example", 1, 0),
        ("www.edge.example", 1, 0),
        ("t1.pool.edge.example", 1, 0),
        ("many.edge.example", 40, 0),
        ("seventeen.edge.example", 17, 0),
        ("ns3.glue.example", 1, 1),
        ("www.glue.example", 1, 0),
    ];
    let (a, aaaa) = addresses
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or((0, 0), |(_, a, aaaa)| (*a, *aaaa));
    // A name with a set larger than an entry holds is left to userspace whole.
    if !in_zone || a > 16 || aaaa > 16 {
        return false;
    }
    if (qtype == A && a > 0) || (qtype == AAAA && aaaa > 0) {
        return true;
    }
    !soa_names
        .iter()
        .any(|s| name == *s || name.ends_with(&format!(".{s}")))
}

fn query(name: &str, qtype: u16, edns: Option<(u16, bool, u8)>) -> Vec<u8> {
    let mut query = QueryBuilder::new(name, qtype);
    if let Some((payload, dnssec_ok, version)) = edns {
        query.edns = Some((payload, dnssec_ok, version, Vec::new()));
    }
    query.bytes()
}

/// Odd queries whose question cannot be read: Knot drops them, hostport-dns answers a
/// header-only FORMERR with the query's ID (as BIND does), so that an operator's dig shows why.
const UNREADABLE: &[&str] = &[
    "qdcount 2",
    "a pointer loop as the question",
    "cut in the name",
];

/// Malformed and odd queries: both must answer them alike (or both not at all), except the
/// [`UNREADABLE`] ones.
fn odd_queries() -> Vec<(&'static str, Vec<u8>)> {
    let good = query("www.edge.example", A, None);
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[0xde, 0xad]);
    let mut two_questions = good.clone();
    two_questions[5] = 2;
    let mut no_question = good[..12].to_vec();
    no_question[5] = 0;
    // The same with EDNS: FORMERR keeps the OPT record (RFC 6891 §7), as Knot and BIND answer.
    let mut no_question_edns = no_question.clone();
    no_question_edns[11] = 1;
    no_question_edns.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    let mut response = good.clone();
    response[2] |= 0x80;
    let mut class_chaos = good.clone();
    let last = class_chaos.len() - 1;
    class_chaos[last] = 3;
    let mut notify = good.clone();
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    let mut axfr = good.clone();
    let at = axfr.len() - 4;
    axfr[at..at + 2].copy_from_slice(&252u16.to_be_bytes());
    let mut pointer = good[..12].to_vec();
    pointer.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
    // Counts that promise records the message does not hold: the question still parses.
    let mut answer_count = good.clone();
    answer_count[7] = 1;
    let mut additional_count = good.clone();
    additional_count[11] = 1;
    // An OPT record whose owner is not the root (RFC 6891 §6.1.2: it must be).
    let mut opt_owner = additional_count.clone();
    opt_owner.extend_from_slice(&[1, b'a', 0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    // An option whose length (8) runs past its OPT record's data (4 bytes).
    let mut option_past_opt = additional_count.clone();
    option_past_opt.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 8]);
    option_past_opt.extend_from_slice(&[0xfd, 0xe9, 0, 8, 1, 2, 3, 4]);
    // A query that carries a well-formed record in its answer or authority section.
    let record = [0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 18, 0, 1];
    let mut with_answer = answer_count.clone();
    with_answer.extend_from_slice(&record);
    let mut with_authority = good.clone();
    with_authority[9] = 1;
    with_authority.extend_from_slice(&record);
    vec![
        ("trailing bytes", trailing),
        ("qdcount 2", two_questions),
        ("no question", no_question),
        ("no question, with EDNS", no_question_edns),
        ("a response", response),
        ("class CH", class_chaos),
        ("NOTIFY", notify),
        ("AXFR over UDP", axfr),
        ("a pointer loop as the question", pointer),
        ("cut in the name", good[..20].to_vec()),
        ("an answer count without the answer", answer_count),
        ("an additional count without the record", additional_count),
        ("an OPT record with a non-root owner", opt_owner),
        ("an option running past its OPT record", option_past_opt),
        ("a query carrying an answer record", with_answer),
        ("a query carrying an authority record", with_authority),
    ]
}

struct Setup {
    ns: NetNs,
    agent: Agent,
    _knot: Knot,
    _dir: TempDir,
}

const KNOT: &str = "127.0.0.1:5300";
const OURS: &str = "127.0.0.1:1053";

fn setup() -> Setup {
    require_root();
    let ns = NetNs::new("diff");
    let dir = TempDir::new("diff");
    let records = dir.write("records.yaml", &records());
    let knot = Knot::start_zones(&ns, addr(KNOT), &knot_zones(), None);
    let agent = Agent::start(
        &ns,
        &[
            "--records",
            records.to_str().expect("UTF-8"),
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
            "--udp-max-payload",
            &UDP_MAX_PAYLOAD.to_string(),
        ],
    );
    Setup {
        ns,
        agent,
        _knot: knot,
        _dir: dir,
    }
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("an address")
}

fn xdp_count(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_responses", &[("path", "xdp")])
}

/// Compares one UDP exchange; returns the difference, if any, and whether XDP answered.
fn compare_udp(s: &Setup, what: &str, bytes: Vec<u8>) -> (Option<String>, bool) {
    let before = xdp_count(&s.agent);
    let mine = udp_exchange(&s.ns, addr(OURS), bytes.clone());
    let by_xdp = xdp_count(&s.agent) > before;
    let knot = udp_exchange(&s.ns, addr(KNOT), bytes);
    let difference = match (knot, mine) {
        (Some(knot), Some(mine)) => {
            let (knot, mine) = (comparable(&knot), comparable(&mine));
            (knot != mine).then(|| format!("{what}:\n  knot: {knot:?}\n  ours: {mine:?}"))
        }
        (None, None) => None,
        (knot, mine) => Some(format!(
            "{what}: knot answered {}, ours {}",
            knot.is_some(),
            mine.is_some()
        )),
    };
    (difference, by_xdp)
}

#[test]
fn answers_match_knot_for_the_whole_corpus_and_xdp_answers_its_share() {
    let s = setup();
    let mut compared = 0;
    let mut differences = Vec::new();
    let mut wrong_path = Vec::new();
    let mut expected_xdp = 0;
    for name in NAMES {
        for qtype in TYPES {
            for edns in EDNS {
                let what = format!("{name} type {qtype} edns {edns:?} over UDP");
                let (difference, by_xdp) = compare_udp(&s, &what, query(name, *qtype, *edns));
                differences.extend(difference);
                let expected = xdp_answers(name, *qtype, *edns);
                if by_xdp != expected {
                    wrong_path.push(format!("{what}: by XDP {by_xdp}, expected {expected}"));
                }
                expected_xdp += usize::from(expected);
                compared += 1;
            }
        }
    }
    for (what, bytes) in odd_queries() {
        if UNREADABLE.contains(&what) {
            let knot = udp_exchange(&s.ns, addr(KNOT), bytes.clone());
            let mine = udp_exchange(&s.ns, addr(OURS), bytes.clone());
            assert!(knot.is_none(), "{what}: Knot answered {knot:?}");
            let mine = mine.unwrap_or_else(|| panic!("{what}: no FORMERR"));
            assert_eq!(mine.len(), 12, "{what}: header only");
            assert_eq!((&mine[..2], mine[3] & 0x0f), (&bytes[..2], 1), "{what}");
            compared += 1;
            continue;
        }
        let (difference, by_xdp) = compare_udp(&s, what, bytes);
        differences.extend(difference);
        if by_xdp {
            wrong_path.push(format!("{what}: answered by XDP"));
        }
        compared += 1;
    }
    assert!(
        differences.is_empty(),
        "{} of {compared} answers differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert!(
        wrong_path.is_empty(),
        "{} answers came from the wrong path:\n{}",
        wrong_path.len(),
        wrong_path.join("\n")
    );
    assert!(
        expected_xdp >= 90,
        "the corpus exercises XDP ({expected_xdp})"
    );
}

#[test]
fn tcp_answers_match_knot_and_a_truncated_udp_answer_is_whole_over_tcp() {
    let s = setup();
    let mut queries = Vec::new();
    for name in NAMES {
        for qtype in [A, AAAA, 6, 255] {
            for edns in [None, Some((1232, false, 0))] {
                queries.push((
                    format!("{name} type {qtype} edns {edns:?}"),
                    query(name, qtype, edns),
                ));
            }
        }
    }
    let edns_without_question = odd_queries()
        .into_iter()
        .find(|(what, _)| *what == "no question, with EDNS")
        .map(|(_, bytes)| bytes)
        .expect("in the odd queries");
    queries.push(("no question, with EDNS".into(), edns_without_question));
    let bytes: Vec<Vec<u8>> = queries.iter().map(|(_, q)| q.clone()).collect();
    let knot = tcp_exchange(&s.ns, addr(KNOT), bytes.clone());
    let mine = tcp_exchange(&s.ns, addr(OURS), bytes);
    assert_eq!(knot.len(), queries.len(), "Knot answered every TCP query");
    assert_eq!(mine.len(), queries.len(), "we answered every TCP query");
    let differences: Vec<String> = queries
        .iter()
        .zip(knot.iter().zip(&mine))
        .filter_map(|((what, _), (knot, mine))| {
            let (knot, mine) = (comparable(knot), comparable(mine));
            (knot != mine).then(|| format!("{what} over TCP:\n  knot: {knot:?}\n  ours: {mine:?}"))
        })
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} TCP answers differ:\n{}",
        differences.len(),
        queries.len(),
        differences.join("\n")
    );
    // Forty addresses do not fit 512 bytes: truncated over UDP (both alike), whole over TCP.
    let big = query("many.edge.example", A, None);
    let (difference, _) = compare_udp(&s, "many A over UDP", big.clone());
    assert_eq!(difference, None);
    let udp = udp_exchange(&s.ns, addr(OURS), big.clone()).expect("an answer");
    assert_ne!(udp[2] & 0x02, 0, "TC set over UDP");
    let tcp = tcp_exchange(&s.ns, addr(OURS), vec![big]);
    assert_eq!(comparable(&tcp[0]).answer.len(), 40, "all forty over TCP");
}
