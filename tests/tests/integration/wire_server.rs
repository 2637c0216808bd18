//! The userspace server's authoritative semantics, on the wire with dig and kdig (XDP off, so
//! every answer comes from userspace).

use std::net::SocketAddr;

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, records_on_lo},
    clients::{
        Reply, dig, extended_errors, kdig, tcp_exchange, udp_exchange, udp_exchange_connected,
    },
    eventually,
    netns::NetNs,
    packet::QueryBuilder,
    require_root,
};

const ZONE: &str = "zones:
  - name: prod.coreha.example
    ttl: 5
    nameservers:
      - { name: ns1, addresses: [198.18.0.53, \"2001:db8::53\"] }
    records:
      default-nginx.ingress: [198.18.200.1, 198.18.200.2, 198.18.200.3, \"2001:db8::c8:1\"]
      node-1.nodes: 198.18.200.1
      node-2.nodes: 198.18.200.2
      big: [198.18.7.1, 198.18.7.2, 198.18.7.3, 198.18.7.4, 198.18.7.5, 198.18.7.6, 198.18.7.7, 198.18.7.8,
            198.18.7.9, 198.18.7.10, 198.18.7.11, 198.18.7.12, 198.18.7.13, 198.18.7.14, 198.18.7.15, 198.18.7.16,
            198.18.7.17, 198.18.7.18, 198.18.7.19, 198.18.7.20, 198.18.7.21, 198.18.7.22, 198.18.7.23, 198.18.7.24,
            198.18.7.25, 198.18.7.26, 198.18.7.27, 198.18.7.28, 198.18.7.29, 198.18.7.30, 198.18.7.31, 198.18.7.32]
    srv:
      _https._tcp.default-nginx.ingress:
        - { port: 443, target: node-1.nodes }
        - { port: 8443, target: node-2.nodes }
      _both._tcp.default-nginx.ingress:
        - { port: 443, target: node-1.nodes }
        - { port: 8443, target: node-1.nodes }
";

const PORT: u16 = 1053;

struct Server {
    agent: Agent,
    ns: NetNs,
    _dir: TempDir,
}

fn server(tag: &str) -> Server {
    server_with(tag, &[])
}

fn server_with(tag: &str, extra: &[&str]) -> Server {
    require_root();
    let ns = NetNs::new(tag);
    let dir = TempDir::new(tag);
    let file = dir.write("records.yaml", ZONE);
    let agent = Agent::start(
        &ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    );
    Server {
        agent,
        ns,
        _dir: dir,
    }
}

impl Server {
    fn dig(&self, args: &[&str]) -> Reply {
        dig(&self.ns, "127.0.0.1", PORT, args)
    }
}

fn v4() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], PORT))
}

#[test]
fn the_apex_has_soa_and_ns_with_glue() {
    let s = server("apex");
    let soa = s.dig(&["prod.coreha.example", "SOA"]);
    assert_eq!((soa.status.as_str(), soa.answer.len()), ("NOERROR", 1));
    assert!(
        soa.answer[0]
            .data
            .starts_with("ns1.prod.coreha.example. hostmaster.prod.coreha.example. "),
        "{soa:?}"
    );
    assert!(soa.has_flag("aa") && !soa.has_flag("ra"));
    let ns = s.dig(&["prod.coreha.example", "NS"]);
    assert_eq!(ns.answer_data(), ["ns1.prod.coreha.example."]);
    let mut glue: Vec<String> = ns.additional.iter().map(|r| r.data.clone()).collect();
    glue.sort();
    assert_eq!(glue, ["198.18.0.53", "2001:db8::53"]);
}

#[test]
fn the_soa_serial_is_the_same_for_the_same_data() {
    let a = server("serial-a");
    let b = server("serial-b");
    let serial = |s: &Server| {
        s.dig(&["prod.coreha.example", "SOA"]).answer[0]
            .data
            .split_whitespace()
            .nth(2)
            .map(str::to_owned)
    };
    let serial_a = serial(&a).expect("an SOA answer from the first server");
    serial_a.parse::<u32>().expect("a serial number");
    assert_eq!(Some(serial_a), serial(&b));
}

#[test]
fn other_types_at_an_existing_name_are_nodata() {
    let s = server("nodata");
    for qtype in ["MX", "TXT", "CAA", "PTR"] {
        let reply = s.dig(&["default-nginx.ingress.prod.coreha.example", qtype]);
        assert_eq!(reply.status, "NOERROR", "{qtype}");
        assert!(reply.answer.is_empty(), "{qtype}");
        assert_eq!(reply.authority.len(), 1, "{qtype}");
        assert_eq!(reply.authority[0].rtype, "SOA");
    }
}

#[test]
fn unknown_names_are_nxdomain_with_the_soa() {
    let s = server("nxdomain");
    let reply = kdig(
        &s.ns,
        "127.0.0.1",
        PORT,
        &["nope.prod.coreha.example", "MX"],
    );
    assert_eq!(reply.status, "NXDOMAIN");
    assert!(reply.has_flag("aa"));
    assert_eq!(reply.authority[0].rtype, "SOA");
}

#[test]
fn names_outside_the_zones_are_refused_without_recursion() {
    let s = server("refused");
    let reply = s.dig(&["www.example.com", "A", "+recurse"]);
    assert_eq!(reply.status, "REFUSED");
    assert!(!reply.has_flag("ra") && !reply.has_flag("aa"));
}

#[test]
fn any_gets_one_rrset() {
    let s = server("any");
    let reply = s.dig(&["default-nginx.ingress.prod.coreha.example", "ANY"]);
    assert_eq!(reply.status, "NOERROR");
    let types: std::collections::BTreeSet<&str> =
        reply.answer.iter().map(|r| r.rtype.as_str()).collect();
    assert_eq!(types.len(), 1, "RFC 8482: one RRset, got {reply:?}");
}

#[test]
fn srv_answers_carry_their_targets_addresses() {
    let s = server("srv");
    let reply = s.dig(&[
        "_https._tcp.default-nginx.ingress.prod.coreha.example",
        "SRV",
    ]);
    assert_eq!(
        reply.answer_data(),
        [
            "0 1 443 node-1.nodes.prod.coreha.example.",
            "0 1 8443 node-2.nodes.prod.coreha.example."
        ]
    );
    let mut additional: Vec<(String, String)> = reply
        .additional
        .iter()
        .map(|r| (r.name.clone(), r.data.clone()))
        .collect();
    additional.sort();
    assert_eq!(
        additional,
        [
            (
                "node-1.nodes.prod.coreha.example.".into(),
                "198.18.200.1".into()
            ),
            (
                "node-2.nodes.prod.coreha.example.".into(),
                "198.18.200.2".into()
            )
        ]
    );
}

#[test]
fn served_addresses_have_ptr_records() {
    let s = server("ptr");
    let reply = s.dig(&["-x", "198.18.200.1"]);
    assert_eq!(reply.status, "NOERROR");
    assert_eq!(
        reply.answer_data(),
        [
            "default-nginx.ingress.prod.coreha.example.",
            "node-1.nodes.prod.coreha.example."
        ]
    );
    // A neighbour in the derived /24 does not exist; outside every /24 of a served address the
    // server is not authoritative.
    let neighbour = s.dig(&["-x", "198.18.200.99"]);
    assert_eq!(neighbour.status, "NXDOMAIN");
    assert!(neighbour.has_flag("aa"), "{neighbour:?}");
    assert_eq!(s.dig(&["-x", "198.18.99.99"]).status, "REFUSED");
    assert_eq!(
        s.dig(&["-x", "2001:db8::c8:1"]).answer_data(),
        ["default-nginx.ingress.prod.coreha.example."]
    );
    let soa = s.dig(&["200.18.198.in-addr.arpa", "SOA"]);
    assert_eq!(soa.answer.len(), 1, "{soa:?}");
}

/// Reverse zones as configured: a /16 (so a neighbour outside any served /24 is NXDOMAIN in it,
/// and a /24 holding addresses is an empty non-terminal), no IPv6 zone, and the node names left
/// out of the PTR records.
#[test]
fn configured_reverse_zones_and_left_out_names() {
    require_root();
    let ns = NetNs::new("revcfg");
    let dir = TempDir::new("revcfg");
    let zone_part = ZONE.strip_prefix("zones:\n").expect("a zones list");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n{zone_part}reverseZones:\n  zones: [198.18.0.0/16]\n  leaveOut: [nodes.prod.coreha.example.]\n"
        ),
    );
    let _agent = Agent::start(
        &ns,
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
        ],
    );
    let dig = |args: &[&str]| dig(&ns, "127.0.0.1", PORT, args);
    assert_eq!(
        dig(&["-x", "198.18.200.1"]).answer_data(),
        ["default-nginx.ingress.prod.coreha.example."],
        "node-1.nodes is left out"
    );
    let soa = dig(&["18.198.in-addr.arpa", "SOA"]);
    assert_eq!(
        (soa.status.as_str(), soa.answer.len()),
        ("NOERROR", 1),
        "{soa:?}"
    );
    assert_eq!(dig(&["-x", "198.18.99.99"]).status, "NXDOMAIN");
    let ent = dig(&["200.18.198.in-addr.arpa", "PTR"]);
    assert_eq!(
        (ent.status.as_str(), ent.answer.len()),
        ("NOERROR", 0),
        "{ent:?}"
    );
    assert_eq!(dig(&["-x", "2001:db8::c8:1"]).status, "REFUSED");
}

#[test]
fn an_answer_too_big_for_udp_is_truncated_and_complete_over_tcp() {
    let s = server("tc");
    let truncated = s.dig(&["big.prod.coreha.example", "+noedns", "+ignore"]);
    assert!(truncated.has_flag("tc"), "{truncated:?}");
    assert!(truncated.answer.is_empty());
    // dig retries over TCP on TC and gets everything.
    let full = s.dig(&["big.prod.coreha.example", "+noedns"]);
    assert_eq!(full.answer.len(), 32);
    // With EDNS the 32 records fit in 1232 bytes.
    let edns = s.dig(&["big.prod.coreha.example", "+bufsize=1232", "+ignore"]);
    assert!(!edns.has_flag("tc"));
    assert_eq!(edns.answer.len(), 32);
    // Both UDP attempts without EDNS were truncated.
    assert_eq!(s.agent.metric("hostport_dns_truncated", &[]), 2.0);
}

#[test]
fn tcp_serves_several_queries_per_connection() {
    let s = server("tcp");
    let queries: Vec<Vec<u8>> = ["node-1.nodes", "node-2.nodes", "big"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            QueryBuilder {
                id: i as u16 + 1,
                ..QueryBuilder::new(&format!("{n}.prod.coreha.example"), 1)
            }
            .bytes()
        })
        .collect();
    let answers = tcp_exchange(&s.ns, v4(), queries);
    assert_eq!(answers.len(), 3);
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(
            u16::from_be_bytes([answer[0], answer[1]]),
            i as u16 + 1,
            "answers in order"
        );
        assert_eq!(answer[3] & 0x0f, 0);
    }
    assert_eq!(
        u16::from_be_bytes([answers[2][6], answers[2][7]]),
        32,
        "no truncation over TCP"
    );
    assert_eq!(
        s.agent
            .metric("hostport_dns_responses", &[("proto", "tcp")]),
        3.0
    );
}

#[test]
fn the_question_comes_back_as_asked_with_a_good_server_cookie() {
    let s = server("case");
    // dig sends a cookie by default; the answer carries it back with a server cookie.
    let out =
        s.ns.command("dig")
            .args([
                "@127.0.0.1",
                "-p",
                "1053",
                "+norec",
                "+qr",
                "+cookie",
                "DEFAULT-Nginx.Ingress.prod.coreha.example",
                "AAAA",
            ])
            .output()
            .expect("dig");
    let printed = String::from_utf8_lossy(&out.stdout);
    // +qr prints the query sent first, up to its size line: it must carry a client cookie.
    let (query, text) = printed
        .split_once(";; QUERY SIZE")
        .unwrap_or_else(|| panic!("dig printed no query:\n{printed}"));
    assert!(
        query.contains("; COOKIE: "),
        "the query carries a cookie:\n{query}"
    );
    assert!(
        text.contains(";DEFAULT-Nginx.Ingress.prod.coreha.example. IN AAAA"),
        "{text}"
    );
    let answer = text
        .lines()
        .find(|l| l.contains("2001:db8::c8:1"))
        .unwrap_or_default();
    assert!(
        answer.starts_with("DEFAULT-Nginx.Ingress.prod.coreha.example."),
        "{text}"
    );
    let cookie = text
        .lines()
        .find(|l| l.starts_with("; COOKIE: "))
        .unwrap_or_else(|| panic!("no cookie in the answer:\n{text}"));
    assert!(cookie.ends_with("(good)"), "{cookie}");
}

/// A query of five long questions (found by the fuzzer): FORMERR, and the answer still fits a
/// classic UDP message, so the echoed questions are left out rather than sent oversized.
#[test]
fn many_long_questions_get_a_formerr_that_fits_udp() {
    let s = server("questions");
    let long = QueryBuilder::new(&format!("{0}.{0}.{0}.x", "a".repeat(63)), 1).bytes();
    let question = &long[12..];
    let mut query = [&long[..4], &[0, 5], &long[6..12]].concat();
    for _ in 0..5 {
        query.extend_from_slice(question);
    }
    assert!(query.len() > 512, "the questions alone are over 512 bytes");
    let answer = udp_exchange(&s.ns, v4(), query).expect("an answer");
    assert!(
        answer.len() <= 512,
        "{} bytes over classic UDP",
        answer.len()
    );
    assert_eq!(answer[3] & 0x0f, 1, "FORMERR");
    assert_eq!(&answer[..2], &[0x42, 0x42], "the ID is kept");
}

/// A query for `name` (type A) with EDNS and these COOKIE options' contents.
fn with_cookies(name: &str, cookies: &[[u8; 8]]) -> Vec<u8> {
    cookies
        .iter()
        .fold(QueryBuilder::new(name, 1), |query, cookie| {
            query.option(10, cookie)
        })
        .bytes()
}

/// The options of the answer's OPT record (code, data), or None without one.
fn opt_options(answer: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    let message = hickory_proto::op::Message::from_vec(answer).expect("an answer that parses");
    let edns = message.edns?;
    let options = edns
        .options()
        .as_ref()
        .iter()
        .map(|(code, option)| {
            let data = match option {
                hickory_proto::rr::rdata::opt::EdnsOption::Unknown(_, data) => data.clone(),
                _ => Vec::new(),
            };
            (u16::from(*code), data)
        })
        .collect();
    Some(options)
}

#[test]
fn two_cookie_options_get_a_formerr_over_udp_and_tcp() {
    let s = server("twocookies");
    let name = "node-1.nodes.prod.coreha.example";
    let one = with_cookies(name, &[[1; 8]]);
    let two = with_cookies(name, &[[1; 8], [2; 8]]);
    let udp_one = udp_exchange(&s.ns, v4(), one.clone()).expect("an answer");
    assert_eq!(udp_one[3] & 0x0f, 0, "one cookie: answered");
    let cookie = opt_options(&udp_one)
        .and_then(|o| o.into_iter().find(|(code, _)| *code == 10))
        .expect("one cookie: echoed with a server cookie");
    assert_eq!(&cookie.1[..8], &[1; 8]);
    let udp_two = udp_exchange(&s.ns, v4(), two.clone()).expect("an answer");
    let tcp = tcp_exchange(&s.ns, v4(), vec![one, two]);
    assert_eq!(tcp[0][3] & 0x0f, 0, "one cookie over TCP: answered");
    for (transport, answer) in [("UDP", &udp_two), ("TCP", &tcp[1])] {
        assert_eq!(answer[3] & 0x0f, 1, "{transport}: FORMERR");
        assert_eq!(&answer[..2], &[0x42, 0x42], "{transport}: the ID is kept");
        assert_eq!(answer[4..6], [0, 1], "{transport}: the question comes back");
        let options = opt_options(answer).expect("the OPT record stays");
        assert!(
            options.iter().all(|(code, _)| *code != 10),
            "{transport}: no cookie echoed: {options:?}"
        );
    }
}

#[test]
fn edns_version_1_gets_badvers() {
    let s = server("badvers");
    let reply = s.dig(&["node-1.nodes.prod.coreha.example", "+edns=1", "+noednsneg"]);
    assert_eq!(reply.status, "BADVERS");
}

#[test]
fn notify_gets_notauth_with_its_question() {
    let s = server("notify");
    let mut notify = QueryBuilder::new("prod.coreha.example", 6);
    notify.flags = 4 << 11; // opcode NOTIFY, AA clear
    let query = notify.bytes();
    let answer = udp_exchange(&s.ns, v4(), query.clone()).expect("an answer");
    assert_eq!(answer[2] >> 3 & 0x0f, 4, "opcode NOTIFY kept");
    assert_eq!(
        answer[3] & 0x0f,
        9,
        "NOTAUTH (RFC 1996: no primary is configured)"
    );
    assert_eq!(&answer[12..], &query[12..], "the question repeated");
    assert_eq!(
        s.agent
            .metric("hostport_dns_responses", &[("rcode", "NOTAUTH")]),
        1.0
    );
}

#[test]
fn transfers_get_notimp_over_udp_and_refused_over_tcp() {
    let s = server("xfr");
    for qtype in [252u16, 251] {
        let query = QueryBuilder::new("prod.coreha.example", qtype).bytes();
        let udp = udp_exchange(&s.ns, v4(), query.clone()).expect("a UDP answer");
        assert_eq!(udp[3] & 0x0f, 4, "type {qtype} over UDP: NOTIMP");
        let tcp = tcp_exchange(&s.ns, v4(), vec![query]);
        assert_eq!(tcp[0][3] & 0x0f, 5, "type {qtype} over TCP: REFUSED");
    }
}

#[test]
fn other_opcodes_get_notimp() {
    let s = server("notimp");
    let reply = s.dig(&["node-1.nodes.prod.coreha.example", "+opcode=status"]);
    assert_eq!(reply.status, "NOTIMP");
}

#[test]
fn malformed_queries_get_formerr_or_nothing_and_service_goes_on() {
    let s = server("formerr");
    let good = QueryBuilder::new("node-1.nodes.prod.coreha.example", 1).bytes();
    let cases: Vec<(&str, Vec<u8>, Option<u8>)> = vec![
        ("too short for a header", vec![0x12, 0x34, 0x01], None),
        (
            "a response",
            [&good[..2], &[0x81, 0x00], &good[4..]].concat(),
            None,
        ),
        (
            "truncated question",
            good[..good.len() - 3].to_vec(),
            Some(1),
        ),
        (
            "trailing bytes",
            [&good[..], &[0xff, 0xff]].concat(),
            Some(1),
        ),
        (
            "two questions",
            [&good[..4], &[0, 2], &good[6..], &good[12..]].concat(),
            Some(1),
        ),
        (
            "label over 63",
            [&good[..12], &[64], &[b'a'; 64], &[0, 0, 1, 0, 1]].concat(),
            Some(1),
        ),
        (
            "pointer loop",
            [&good[..12], &[0xc0, 0x0c], &[0, 1, 0, 1]].concat(),
            Some(1),
        ),
        (
            "an answer record in a query",
            [&good[..6], &[0, 1], &good[8..]].concat(),
            Some(1),
        ),
    ];
    for (what, query, rcode) in cases {
        let answer = udp_exchange(&s.ns, v4(), query.clone());
        match rcode {
            None => assert!(answer.is_none(), "{what}: no answer expected"),
            Some(rcode) => {
                let answer = answer.unwrap_or_else(|| panic!("{what}: no answer"));
                assert_eq!(answer[3] & 0x0f, rcode, "{what}");
                assert_eq!(&answer[..2], &[0x42, 0x42], "{what}: the ID is kept");
                if what == "trailing bytes" {
                    // The question parsed: it comes back, so that the client can match it.
                    assert_eq!(&answer[4..6], &[0, 1], "{what}: one question");
                    assert_eq!(&answer[12..], &query[12..query.len() - 2], "{what}");
                }
            }
        }
    }
    let answer = udp_exchange(&s.ns, v4(), good).expect("still serving");
    assert_eq!(answer[3] & 0x0f, 0);
}

#[test]
fn clients_are_served_from_the_address_they_asked() {
    let s = server("fromaddr");
    // Second addresses of each family, added after start: the server listens on the wildcard
    // address, so only its choice of source address makes the answer come from them.
    s.ns.ip(&["addr", "add", "2001:db8:ff::53/128", "dev", "lo", "nodad"]);
    s.ns.ip(&["addr", "add", "198.18.1.53/32", "dev", "lo"]);
    let name = "default-nginx.ingress.prod.coreha.example";
    for (server, qtype) in [
        ("[::1]:1053", 28),
        ("[2001:db8:ff::53]:1053", 28),
        ("127.0.0.2:1053", 1),
        ("198.18.1.53:1053", 1),
    ] {
        let server: SocketAddr = server.parse().expect("an address");
        let answer = udp_exchange_connected(
            &s.ns,
            server,
            QueryBuilder::new(name, qtype).bytes(),
            std::time::Duration::from_secs(3),
        )
        .unwrap_or_else(|| panic!("no answer from {server} itself"));
        let ancount = u16::from_be_bytes([answer[6], answer[7]]);
        let expected = if qtype == 28 { 1 } else { 3 };
        assert_eq!(ancount, expected, "answers from {server}");
    }
}

#[test]
fn listen_and_udp_workers_choose_the_sockets() {
    require_root();
    let ns = NetNs::new("listen");
    let dir = TempDir::new("listen");
    let file = dir.write("records.yaml", ZONE);
    let _agent = Agent::start(
        &ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--listen",
            "127.0.0.1",
            "--udp-workers",
            "3",
        ],
    );
    let name = "node-1.nodes.prod.coreha.example";
    let query = QueryBuilder::new(name, 1).bytes();
    assert!(udp_exchange(&ns, v4(), query.clone()).is_some());
    let v6: SocketAddr = "[::1]:1053".parse().expect("an address");
    assert_eq!(
        udp_exchange_connected(&ns, v6, query, std::time::Duration::from_secs(1)),
        None,
        "nothing listens on ::1"
    );
    // Three UDP sockets on the one address (SO_REUSEPORT), one TCP listener.
    let sockets = |proto: &str| {
        let out = hostport_dns_tests::netns::sh(
            ns.command("ss")
                .args(["-Hln", proto, "sport", "=", ":1053"]),
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().nth(3).unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(sockets("-u"), ["127.0.0.1:1053"; 3]);
    assert_eq!(sockets("-t"), ["127.0.0.1:1053"]);
}

#[test]
fn srv_records_naming_one_target_carry_its_addresses_once() {
    let s = server("srvdup");
    let reply = s.dig(&[
        "_both._tcp.default-nginx.ingress.prod.coreha.example",
        "SRV",
    ]);
    assert_eq!(reply.answer.len(), 2, "{reply:?}");
    let additional: Vec<String> = reply
        .additional
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.rtype, r.data))
        .collect();
    assert_eq!(
        additional,
        ["node-1.nodes.prod.coreha.example. A 198.18.200.1"],
        "{reply:?}"
    );
}

#[test]
fn negative_answers_carry_the_soa_with_the_lower_of_its_ttl_and_minimum() {
    require_root();
    let ns = NetNs::new("negttl");
    let dir = TempDir::new("negttl");
    let file = dir.write(
        "records.yaml",
        "zones:\n  - name: low.example\n    ttl: 300\n    soa: { minimum: 20 }\n    records:\n      www: 198.18.3.1\n  - name: high.example\n    ttl: 15\n    soa: { minimum: 600 }\n    records:\n      www: 198.18.3.2\n",
    );
    let _agent = Agent::start(&ns, &records_on_lo(&file));
    for (zone, negative_ttl, soa_ttl) in [("low.example", 20, 300), ("high.example", 15, 15)] {
        // NXDOMAIN from XDP, NODATA from userspace (MX): both carry the negative TTL.
        for (name, qtype, status) in [
            (format!("nope.{zone}"), "A", "NXDOMAIN"),
            (format!("www.{zone}"), "MX", "NOERROR"),
        ] {
            let reply = dig(&ns, "127.0.0.1", PORT, &[&name, qtype]);
            assert_eq!(reply.status, status, "{reply:?}");
            assert_eq!(reply.authority.len(), 1, "{reply:?}");
            assert_eq!(
                reply.authority[0].ttl, negative_ttl,
                "{name} {qtype}: {reply:?}"
            );
        }
        // The SOA asked for itself keeps its own TTL.
        let soa = dig(&ns, "127.0.0.1", PORT, &[zone, "SOA"]);
        assert_eq!(soa.answer[0].ttl, soa_ttl, "{soa:?}");
    }
}

#[test]
fn refusals_carry_extended_dns_error_20_when_the_client_speaks_edns() {
    let s = server("ede");
    for (name, qclass) in [("www.example.com", 1), ("prod.coreha.example", 3)] {
        let mut query = QueryBuilder::new(name, 1).edns(1232, false);
        query.qclass = qclass;
        let answer = udp_exchange(&s.ns, v4(), query.bytes()).expect("an answer");
        assert_eq!(answer[3] & 0x0f, 5, "{name}: REFUSED");
        assert_eq!(extended_errors(&answer), [20], "{name}: Not Authoritative");
        let mut plain = QueryBuilder::new(name, 1);
        plain.qclass = qclass;
        let answer = udp_exchange(&s.ns, v4(), plain.bytes()).expect("an answer");
        assert_eq!(&answer[10..12], &[0, 0], "{name}: no OPT without EDNS");
    }
}

#[test]
fn an_edns_option_that_does_not_parse_is_ignored_not_formerr() {
    let s = server("badecs");
    let query = QueryBuilder {
        edns: Some((1232, false, 0, vec![0, 8, 0, 4, 0, 3, 0, 0])),
        ..QueryBuilder::new("node-1.nodes.prod.coreha.example", 1)
    };
    let answer = udp_exchange(&s.ns, v4(), query.bytes()).expect("an answer");
    assert_eq!(answer[3] & 0x0f, 0, "NOERROR, not FORMERR");
    assert_eq!(&answer[6..8], &[0, 1], "the address");
}

/// One TCP query, framed.
fn tcp_framed(name: &str) -> Vec<u8> {
    let query = QueryBuilder::new(name, 1).bytes();
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    framed
}

/// A client that sends queries and never reads its answers: once the socket buffers are full the
/// server's write times out and the connection is closed, and other clients are served meanwhile.
#[test]
fn a_tcp_client_that_never_reads_loses_its_connection_after_the_write_timeout() {
    let s = server("tcpnoread");
    let flood = s.ns.run(|| {
        use std::io::Write;
        let stream = std::net::TcpStream::connect(v4()).expect("TCP connect");
        stream
            .set_write_timeout(Some(std::time::Duration::from_secs(2)))
            .ok();
        let query = tcp_framed("big.prod.coreha.example");
        let mut writer = &stream;
        let mut sent = 0usize;
        // Answers of 32 addresses (~550 bytes) to ~45-byte queries: the answers fill both
        // sockets' buffers long before the queries do.
        while sent < 200_000 && writer.write_all(&query).is_ok() {
            sent += 1;
        }
        (stream, sent)
    });
    assert!(flood.1 > 1000, "queries sent ({})", flood.1);
    eventually(
        "the write timeout closes the flooding connection",
        20,
        || {
            s.agent
                .metric("hostport_dns_tcp_closed", &[("reason", "write_timeout")])
                == 1.0
        },
    );
    let answers = tcp_exchange(
        &s.ns,
        v4(),
        vec![QueryBuilder::new("node-1.nodes.prod.coreha.example", 1).bytes()],
    );
    assert_eq!(answers.len(), 1, "another client is served");
    // The flooding client finds its connection closed once it reads what was buffered.
    let (stream, _) = flood;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok();
    let mut reader = &stream;
    let mut buf = vec![0u8; 1 << 16];
    let ended = loop {
        match std::io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(ended, "the server closed the connection");
}

/// A client at its cap of open connections gets the next one closed at once; its open ones and
/// other clients are served.
#[test]
fn connections_beyond_a_clients_cap_are_closed_at_accept() {
    let s = server_with("tcpcap", &["--tcp-max-per-client", "2"]);
    let outcome = s.ns.run(|| {
        use std::io::{Read, Write};
        let open: Vec<std::net::TcpStream> = (0..2)
            .map(|_| std::net::TcpStream::connect(v4()).expect("TCP connect"))
            .collect();
        // The first two are held (and answered), the third is closed without an answer.
        let mut answered = 0;
        for mut stream in &open {
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .ok();
            stream
                .write_all(&tcp_framed("node-1.nodes.prod.coreha.example"))
                .ok();
            let mut len = [0u8; 2];
            if stream.read_exact(&mut len).is_ok() {
                answered += 1;
            }
        }
        let mut third = std::net::TcpStream::connect(v4()).expect("TCP connect");
        third
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .ok();
        third
            .write_all(&tcp_framed("node-1.nodes.prod.coreha.example"))
            .ok();
        let mut buf = [0u8; 2];
        let third_answered = matches!(third.read(&mut buf), Ok(n) if n > 0);
        (answered, third_answered, open)
    });
    assert_eq!(
        (outcome.0, outcome.1),
        (2, false),
        "two held and answered, the third closed"
    );
    assert_eq!(
        s.agent
            .metric("hostport_dns_tcp_closed", &[("reason", "client_cap")]),
        1.0
    );
    assert_eq!(s.agent.metric("hostport_dns_tcp_connections", &[]), 2.0);
}

/// An IPv6 host holds a whole /64: its connections count together against the per-client cap,
/// whichever of its addresses they come from; another /64 is another client.
#[test]
fn ipv6_connections_count_by_their_64_against_the_clients_cap() {
    use std::net::{Ipv6Addr, SocketAddrV6};
    let s = server_with("tcpcap6", &["--tcp-max-per-client", "2"]);
    for addr in [
        "2001:db8:64:1::10",
        "2001:db8:64:1::11",
        "2001:db8:64:1::12",
        "2001:db8:64:2::10",
    ] {
        s.ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{addr}/64"),
            "dev",
            "lo",
            "nodad",
        ]);
    }
    let outcome = s.ns.run(|| {
        let server = SocketAddr::from((Ipv6Addr::LOCALHOST, PORT));
        // Three connections from three addresses of one /64, then one from another /64; each
        // asks one query and is held open.
        let from = |source: &str| {
            let source: Ipv6Addr = source.parse().expect("an address");
            let socket = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)
                .expect("a socket");
            socket
                .bind(&SocketAddrV6::new(source, 0, 0, 0).into())
                .expect("bind");
            socket.connect(&server.into()).expect("TCP connect");
            let stream: std::net::TcpStream = socket.into();
            let answered = tcp_answered(&stream);
            (stream, answered)
        };
        [
            from("2001:db8:64:1::10"),
            from("2001:db8:64:1::11"),
            from("2001:db8:64:1::12"),
            from("2001:db8:64:2::10"),
        ]
        .map(|(stream, answered)| {
            drop(stream);
            answered
        })
    });
    assert_eq!(
        outcome,
        [true, true, false, true],
        "two of one /64 answered, its third closed, another /64 answered"
    );
    assert_eq!(
        s.agent
            .metric("hostport_dns_tcp_closed", &[("reason", "client_cap")]),
        1.0
    );
}

/// Whether a query sent on `stream` is answered (false: the server closed it).
fn tcp_answered(mut stream: &std::net::TcpStream) -> bool {
    use std::io::{Read, Write};
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok();
    stream
        .write_all(&tcp_framed("node-1.nodes.prod.coreha.example"))
        .ok();
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).is_ok()
}

/// EDNS TCP keepalive (RFC 7828): asked over TCP, the answer says how long an idle connection
/// stays open (10 s, in units of 100 ms); never over UDP.
#[test]
fn tcp_keepalive_is_announced_over_tcp_when_asked() {
    use hickory_proto::{
        op::{Edns, Message, Query},
        rr::{
            Name, RecordType,
            rdata::opt::{EdnsCode, EdnsOption},
        },
    };
    let s = server("keepalive");
    let mut query = Message::query();
    query.add_query(Query::query(
        Name::from_ascii("node-1.nodes.prod.coreha.example.").expect("a name"),
        RecordType::A,
    ));
    let mut edns = Edns::new();
    edns.options_mut().insert(EdnsOption::Unknown(11, vec![]));
    query.set_edns(edns);
    let bytes = query.to_vec().expect("a query");
    let keepalive = |answer: &[u8]| {
        Message::from_vec(answer)
            .expect("an answer")
            .edns
            .and_then(|e| e.options().get(EdnsCode::Keepalive).cloned())
    };
    let tcp = tcp_exchange(&s.ns, v4(), vec![bytes.clone()]);
    assert_eq!(
        keepalive(&tcp[0]),
        Some(EdnsOption::Unknown(11, vec![0, 100]))
    );
    let udp = udp_exchange(&s.ns, v4(), bytes).expect("a UDP answer");
    assert_eq!(keepalive(&udp), None);
}

/// The ceiling on UDP answers: a client offering 8192 bytes (HAProxy's `accepted_payload_size`)
/// gets a 90-record answer whole over UDP by default; with `--udp-max-payload 1232` (DNS flag
/// day) it gets at most 1232 bytes: TC=1, whole over TCP. The OPT record advertises the
/// ceiling; a client offering less than 512 bytes is answered up to 512.
#[test]
fn udp_answers_take_what_the_client_offers_up_to_the_ceiling() {
    require_root();
    let addresses: Vec<String> = (1..=90).map(|i| format!("198.18.8.{i}")).collect();
    let thirty: Vec<String> = (1..=28).map(|i| format!("198.18.9.{i}")).collect();
    let zone = format!(
        "zones:\n  - name: prod.coreha.example\n    records:\n      huge: [{}]\n      t: [{}]\n",
        addresses.join(", "),
        thirty.join(", ")
    );
    let ns = NetNs::new("cap");
    let dir = TempDir::new("cap");
    let file = dir.write("records.yaml", &zone);
    let records = file.to_str().expect("UTF-8");
    let _default = Agent::start(&ns, &["--records", records, "--xdp-mode", "off"]);
    let _flag_day = Agent::start_with_metrics(
        &ns,
        "127.0.0.1:9392",
        &[
            "--records",
            records,
            "--xdp-mode",
            "off",
            "--port",
            "1055",
            "--udp-max-payload",
            "1232",
        ],
    );
    let ask = |port: u16, name: &str, offered: u16| {
        let query = QueryBuilder::new(name, 1).edns(offered, false).bytes();
        let answer =
            udp_exchange(&ns, SocketAddr::from(([127, 0, 0, 1], port)), query).expect("an answer");
        hickory_proto::op::Message::from_vec(&answer).map(|m| (answer.len(), m))
    };
    let (size, whole) = ask(PORT, "huge.prod.coreha.example", 8192).expect("parses");
    assert!(
        !whole.metadata.truncation && whole.answers.len() == 90,
        "{size} bytes"
    );
    assert_eq!(whole.edns.map(|e| e.max_payload()), Some(8192));

    let (size, capped) = ask(1055, "huge.prod.coreha.example", 8192).expect("parses");
    assert!(size <= 1232, "{size} bytes over UDP under a 1232 ceiling");
    assert!(capped.metadata.truncation && capped.answers.is_empty());
    assert_eq!(capped.edns.map(|e| e.max_payload()), Some(1232));
    let full = dig(
        &ns,
        "127.0.0.1",
        1055,
        &["huge.prod.coreha.example", "+tcp"],
    );
    assert_eq!(full.answer.len(), 90, "whole over TCP");

    // 28 A records take 500 bytes: they fit the 512 a client offering 100 is given.
    let (size, small_offer) = ask(PORT, "t.prod.coreha.example", 100).expect("parses");
    assert!(
        !small_offer.metadata.truncation && small_offer.answers.len() == 28 && size <= 512,
        "{size} bytes"
    );
}

/// TSIG time checks go both ways (RFC 8945 §5.2.3): a transfer request signed an hour in the
/// future gets BADTIME (NOTAUTH, nothing transferred) just as one signed an hour ago does, while
/// one signed now is answered.
#[test]
fn transfer_requests_signed_far_in_the_future_or_past_get_badtime() {
    use hickory_proto::{
        op::Message,
        rr::{Name, TSigner, rdata::tsig::TsigAlgorithm},
    };
    use hostport_dns::transfer::tsig;
    require_root();
    let ns = NetNs::new("badtime");
    let dir = TempDir::new("badtime");
    let records = dir.write("records.yaml", ZONE);
    // base64 of the key's 32 bytes.
    let key = b"hostport-dns transfer test key!!";
    dir.write("tsig-key", "aG9zdHBvcnQtZG5zIHRyYW5zZmVyIHRlc3Qga2V5ISE=");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "transfer:\n  keys:\n    - name: transfer-key\n      secretFile: {}/tsig-key\n  allow:\n    - from: 127.0.0.1\n      key: transfer-key\n",
            dir.path.display()
        ),
    );
    let _agent = Agent::start(
        &ns,
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--records",
            records.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
        ],
    );
    let signer = TSigner::new(
        key.to_vec(),
        TsigAlgorithm::HmacSha256,
        Name::from_ascii("transfer-key.").expect("a key name"),
        300,
    )
    .expect("a signer");
    let now = tsig::unix_now();
    let server = SocketAddr::from(([127, 0, 0, 1], PORT));
    let axfr_at = |time: u64| {
        let query = Message::from_vec(&QueryBuilder::new("prod.coreha.example", 252).bytes())
            .expect("the query");
        let (signed, _) = tsig::sign_request(&signer, query, time).expect("signed");
        let answers = tcp_exchange(&ns, server, vec![signed]);
        let answer = answers.first().cloned().expect("an answer");
        // (RCODE, ANCOUNT)
        (answer[3] & 0x0f, u16::from_be_bytes([answer[6], answer[7]]))
    };
    let (rcode, records) = axfr_at(now);
    assert!(
        rcode == 0 && records > 0,
        "signed now: rcode {rcode}, {records} records"
    );
    for (what, time) in [("an hour ahead", now + 3600), ("an hour ago", now - 3600)] {
        let (rcode, records) = axfr_at(time);
        assert_eq!(
            (rcode, records),
            (9, 0),
            "signed {what}: NOTAUTH (BADTIME) and nothing transferred"
        );
    }
}
