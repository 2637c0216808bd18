//! The XDP program driven through BPF_PROG_TEST_RUN: packets in, verdict and bytes out, for every
//! rule the fast path follows. Every answer it builds is compared byte for byte with the
//! userspace server's answer to the same query; every packet it passes must come out untouched.
//!
//! One program instance and one table serve all tests; a lock runs them one at a time (the
//! program's scratch space and counters are per CPU).

use std::sync::{Mutex, MutexGuard, OnceLock};

use hostport_dns_common::{counters::Counter, limits::DEFAULT_UDP_MAX_PAYLOAD};
use hostport_dns_core::{
    answer::{Asker, respond_for},
    dns::{Query, message::Transport},
};
use hostport_dns_tests::{
    packet::{CLIENT_MAC, Frame, QueryBuilder, SERVER_MAC, parse_checked, wire},
    require_root,
    vectors::{CAPTURE_ZONE, client_queries},
    xdp::{Program, XDP_PASS, XDP_TX},
};
const SERVER_V4: &str = "198.18.0.1";
const SERVER_V6: &str = "2001:db8::1";
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_MX: u16 = 15;

/// 63 + 63 + 63 + 41-byte labels under prod.coreha.example: exactly 255 bytes in wire form.
fn longest_name() -> String {
    format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(41)
    )
}

fn zone_file() -> String {
    let many: Vec<String> = (1..=17).map(|i| format!("198.18.9.{i}")).collect();
    let eight: Vec<String> = (1..=8).map(|i| format!("198.18.8.{i}")).collect();
    let aaaa16: Vec<String> = (1..=16)
        .map(|i| format!("\"2001:db8::16:{i:x}\""))
        .collect();
    format!(
        "{CAPTURE_ZONE}      dual: [198.18.0.20, \"2001:db8::20\"]
      v6only: \"2001:db8::21\"
      one: 198.18.0.30
      eight: [{}]
      many: [{}]
      aaaa16-with-a-name-long-enough-to-pass-512: [{}]
      x.deep.ent: 198.18.0.40
      full: [{}, {}]
      {}: 198.18.0.50
  - name: other.example
    records:
      www: 198.18.1.1
  - name: odd.test
    soa: {{ mname: ns1.elsewhere.test., rname: hostmaster }}
    records:
      www: 198.18.1.2
",
        eight.join(", "),
        many.join(", "),
        aaaa16.join(", "),
        many[..16].join(", "),
        aaaa16.join(", "),
        longest_name()
    )
}

fn fixture() -> MutexGuard<'static, Program> {
    static FIXTURE: OnceLock<Mutex<Program>> = OnceLock::new();
    loaded_once(&FIXTURE, DEFAULT_UDP_MAX_PAYLOAD)
}

/// The program of `cell`, loaded with the test zones and `ceiling` on UDP answers the first
/// time (one program per ceiling for the whole binary).
fn loaded_once(
    cell: &'static OnceLock<Mutex<Program>>,
    ceiling: u16,
) -> MutexGuard<'static, Program> {
    cell.get_or_init(|| {
        require_root();
        let local = [
            SERVER_V4.parse().expect("an address"),
            SERVER_V6.parse().expect("an address"),
        ];
        Mutex::new(Program::load_with_ceiling(&zone_file(), &local, ceiling))
    })
    .lock()
    .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks on what the program did with a frame.
trait Expect {
    fn run_once(&self, frame: &[u8]) -> (u32, Vec<u8>);
    fn answered(&self, frame_spec: &Frame, dns: &[u8], counter: Counter) -> Vec<u8>;
    fn passed(&self, frame: &[u8], reason: Counter);
}

impl Expect for Program {
    fn run_once(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        let (verdict, out, _) = self.run(frame);
        (verdict, out)
    }

    /// The frame must be answered; checks the headers were turned around and returns the DNS
    /// answer, asserting it equals the userspace server's answer byte for byte.
    fn answered(&self, frame_spec: &Frame, dns: &[u8], counter: Counter) -> Vec<u8> {
        let before = self.counters.get(counter);
        let frame = frame_spec.build(dns);
        let (verdict, out) = self.run_once(&frame);
        assert_eq!(verdict, XDP_TX, "expected an answer from XDP");
        let parsed = parse_checked(&out);
        assert_eq!(parsed.dst_mac, CLIENT_MAC);
        assert_eq!(parsed.src_mac, SERVER_MAC);
        assert_eq!(parsed.vlan, frame_spec.vlan);
        assert_eq!((parsed.src, parsed.dst), (frame_spec.dst, frame_spec.src));
        assert_eq!(
            (parsed.src_port, parsed.dst_port),
            (frame_spec.dst_port, frame_spec.src_port)
        );
        assert_eq!(parsed.ttl, 64);
        let asker = Asker {
            udp_ceiling: self.udp_ceiling,
            ..Asker::ANONYMOUS
        };
        let userspace = respond_for(&Query::read(dns), Some(&self.table), Transport::Udp, &asker)
            .expect("userspace answers too");
        assert_eq!(
            hex(&parsed.dns),
            hex(&userspace.bytes),
            "XDP and userspace answers differ"
        );
        assert_eq!(
            self.counters.get(counter),
            before + 1,
            "{counter:?} counted once"
        );
        parsed.dns
    }

    /// The frame must be passed up untouched, counted under `reason`.
    fn passed(&self, frame: &[u8], reason: Counter) {
        let before = self.counters.get(reason);
        let (verdict, out) = self.run_once(frame);
        assert_eq!(verdict, XDP_PASS, "expected the packet to be passed");
        assert_eq!(hex(&out), hex(frame), "a passed packet must be untouched");
        assert_eq!(
            self.counters.get(reason),
            before + 1,
            "{reason:?} counted once"
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn a_query(name: &str) -> Vec<u8> {
    QueryBuilder::new(name, TYPE_A).bytes()
}

fn rcode(dns: &[u8]) -> u8 {
    dns[3] & 0x0f
}

fn counts(dns: &[u8]) -> [u16; 4] {
    [4, 6, 8, 10].map(|i| u16::from_be_bytes([dns[i], dns[i + 1]]))
}

#[test]
fn a_known_name_is_answered_with_xdp_tx() {
    let fx = fixture();
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("default-nginx.ingress.prod.coreha.example"),
        Counter::AnswerA,
    );
    assert_eq!(rcode(&dns), 0);
    assert_eq!(counts(&dns), [1, 3, 0, 0]);
    // QR, AA, RD copied; RA and AD clear.
    assert_eq!(u16::from_be_bytes([dns[2], dns[3]]), 0x8500);
}

#[test]
fn a_known_name_is_answered_over_ipv6() {
    let fx = fixture();
    let query = QueryBuilder::new("dual.prod.coreha.example", TYPE_AAAA).bytes();
    let dns = fx.answered(&Frame::v6(SERVER_V6), &query, Counter::AnswerAaaa);
    assert_eq!(counts(&dns), [1, 1, 0, 0]);
}

#[test]
fn a_vlan_tagged_query_is_answered_with_its_tag() {
    let fx = fixture();
    let frame = Frame {
        vlan: Some(42),
        ..Frame::v4(SERVER_V4)
    };
    fx.answered(
        &frame,
        &a_query("one.prod.coreha.example"),
        Counter::AnswerA,
    );
}

#[test]
fn the_question_comes_back_in_the_case_it_was_asked() {
    let fx = fixture();
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("Default-NGINX.ingress.PROD.coreha.example"),
        Counter::AnswerA,
    );
    let name = wire("Default-NGINX.ingress.PROD.coreha.example");
    assert_eq!(&dns[12..12 + name.len()], &name[..]);
}

#[test]
fn edns_gets_our_ceiling_and_the_do_bit_back() {
    let fx = fixture();
    let query = QueryBuilder::new("one.prod.coreha.example", TYPE_A)
        .edns(4096, true)
        .bytes();
    let dns = fx.answered(&Frame::v4(SERVER_V4), &query, Counter::AnswerA);
    let opt = &dns[dns.len() - 11..];
    // 8192 (0x2000): the default ceiling on UDP answers, whatever the client offered.
    assert_eq!(opt, &[0, 0, 41, 0x20, 0x00, 0, 0, 0x80, 0, 0, 0]);
}

#[test]
fn the_longest_possible_name_is_answered() {
    let fx = fixture();
    let name = format!("{}.prod.coreha.example", longest_name());
    assert_eq!(wire(&name).len(), 255);
    fx.answered(&Frame::v4(SERVER_V4), &a_query(&name), Counter::AnswerA);
}

#[test]
fn eight_records_are_answered() {
    let fx = fixture();
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("eight.prod.coreha.example"),
        Counter::AnswerA,
    );
    assert_eq!(counts(&dns)[1], 8);
}

#[test]
fn a_name_without_the_type_is_nodata_with_the_soa() {
    let fx = fixture();
    let query = QueryBuilder::new("one.prod.coreha.example", TYPE_AAAA).bytes();
    let dns = fx.answered(&Frame::v4(SERVER_V4), &query, Counter::NodataAaaa);
    assert_eq!(rcode(&dns), 0);
    assert_eq!(counts(&dns), [1, 0, 1, 0]);
}

#[test]
fn an_empty_non_terminal_is_nodata() {
    let fx = fixture();
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("deep.ent.prod.coreha.example"),
        Counter::NodataA,
    );
    assert_eq!((rcode(&dns), counts(&dns)), (0, [1, 0, 1, 0]));
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("ingress.prod.coreha.example"),
        Counter::NodataA,
    );
    assert_eq!((rcode(&dns), counts(&dns)), (0, [1, 0, 1, 0]));
}

#[test]
fn the_apex_without_addresses_is_nodata() {
    let fx = fixture();
    fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("prod.coreha.example"),
        Counter::NodataA,
    );
}

#[test]
fn an_unknown_name_in_a_zone_is_nxdomain_with_the_soa() {
    let fx = fixture();
    let dns = fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("nope.ingress.PROD.coreha.example"),
        Counter::NxdomainA,
    );
    assert_eq!((rcode(&dns), counts(&dns)), (3, [1, 0, 1, 0]));
    let query = QueryBuilder::new("a.b.c.other.example", TYPE_AAAA)
        .edns(1232, false)
        .bytes();
    fx.answered(&Frame::v6(SERVER_V6), &query, Counter::NxdomainAaaa);
}

fn carries_cookie(message: &hickory_proto::op::Message) -> bool {
    message.edns.as_ref().is_some_and(|e| {
        e.options()
            .get(hickory_proto::rr::rdata::opt::EdnsCode::Cookie)
            .is_some()
    })
}

/// The program loaded with Knot's default ceiling on UDP answers (1232), which Knot had when the
/// captures' answers were recorded: its OPT record advertises that ceiling, as Knot's do.
fn knot_ceiling_fixture() -> MutexGuard<'static, Program> {
    static FIXTURE: OnceLock<Mutex<Program>> = OnceLock::new();
    loaded_once(&FIXTURE, KNOT_CAPTURE_CEILING)
}

/// Knot's default `udp-max-payload`, in force when the captures' answers were recorded.
const KNOT_CAPTURE_CEILING: u16 = 1232;

#[test]
fn real_client_queries_get_knots_answers() {
    let fx = knot_ceiling_fixture();
    let userspace_asker = Asker {
        udp_ceiling: fx.udp_ceiling,
        ..Asker::ANONYMOUS
    };
    for capture in client_queries() {
        let question = hickory_proto::op::Message::from_vec(&capture.query)
            .unwrap_or_else(|e| panic!("{}: the capture does not parse: {e}", capture.client));
        let is_aaaa = u16::from(question.queries[0].query_type()) == TYPE_AAAA;
        // What kind of answer Knot gave; a query captured without an answer asks for addresses
        // the zone has.
        let counter = match &capture.knot_answer {
            Some(knot) => Counter::answer(is_aaaa, counts(knot)[1] > 0, rcode(knot) == 3),
            None => Counter::answer(is_aaaa, true, false),
        };
        let base = if capture.over_ipv6() {
            Frame::v6(SERVER_V6)
        } else {
            Frame::v4(SERVER_V4)
        };
        let frame = Frame {
            udp_checksum: !capture.client.contains("kxdpgun"),
            ..base
        };
        if carries_cookie(&question) {
            // dig sends a client cookie: userspace answers it (with the server cookie).
            fx.passed(&frame.build(&capture.query), Counter::PassCookie);
            let userspace = respond_for(
                &Query::read(&capture.query),
                Some(&fx.table),
                Transport::Udp,
                &userspace_asker,
            )
            .expect("userspace answers");
            if let Some(knot) = &capture.knot_answer {
                assert_eq!(
                    hex(&without_serial(&userspace.bytes)),
                    hex(&without_serial(knot)),
                    "{}: Knot answers differently",
                    capture.client
                );
            }
            continue;
        }
        let dns = fx.answered(&frame, &capture.query, counter);
        if let Some(knot) = &capture.knot_answer {
            assert_eq!(
                hex(&without_serial(&dns)),
                hex(&without_serial(knot)),
                "{}: Knot answers differently",
                capture.client
            );
        }
    }
}

/// The answer with the SOA serial zeroed (ours is a content hash, Knot's a counter).
fn without_serial(dns: &[u8]) -> Vec<u8> {
    let mut out = dns.to_vec();
    if counts(dns)[2] == 1 {
        // The serial is the first of the five numbers ending the SOA, itself before any OPT.
        let soa_end = if counts(dns)[3] == 1 {
            out.len() - 11
        } else {
            out.len()
        };
        out[soa_end - 20..soa_end - 16].fill(0);
    }
    out
}

#[test]
fn a_question_below_the_soa_server_name_is_left_to_userspace() {
    let fx = fixture();
    // ns.<zone> would compress against the question: userspace answers those.
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query("x.ns.prod.coreha.example")),
        Counter::PassSoaGuard,
    );
}

#[test]
fn a_zone_whose_soa_compresses_unpredictably_is_left_to_userspace() {
    let fx = fixture();
    fx.answered(
        &Frame::v4(SERVER_V4),
        &a_query("www.odd.test"),
        Counter::AnswerA,
    );
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query("nope.odd.test")),
        Counter::PassSoaInUserspace,
    );
}

#[test]
fn a_record_set_larger_than_an_entry_is_left_to_userspace() {
    let fx = fixture();
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query("many.prod.coreha.example")),
        Counter::PassLargeSet,
    );
}

#[test]
fn an_answer_larger_than_the_client_takes_is_left_to_userspace() {
    let fx = fixture();
    let name = "aaaa16-with-a-name-long-enough-to-pass-512.prod.coreha.example";
    // 12 + 66 + 4 + 16 * 28 = 530 bytes: more than 512.
    let plain = QueryBuilder::new(name, TYPE_AAAA).bytes();
    fx.passed(&Frame::v4(SERVER_V4).build(&plain), Counter::PassTooLarge);
    let edns = QueryBuilder::new(name, TYPE_AAAA).edns(1232, false).bytes();
    fx.answered(&Frame::v4(SERVER_V4), &edns, Counter::AnswerAaaa);
}

/// The most addresses one entry holds: every one of both families reaches the answer (the A
/// addresses sit after all sixteen AAAA ones in the entry).
#[test]
fn a_name_with_the_most_addresses_of_both_families_is_answered_whole() {
    let fx = fixture();
    let name = "full.prod.coreha.example";
    let a = QueryBuilder::new(name, TYPE_A).bytes();
    let answer = fx.answered(&Frame::v4(SERVER_V4), &a, Counter::AnswerA);
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 16);
    let aaaa = QueryBuilder::new(name, TYPE_AAAA).edns(1232, false).bytes();
    let answer = fx.answered(&Frame::v6(SERVER_V6), &aaaa, Counter::AnswerAaaa);
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 16);
}

#[test]
fn names_outside_the_zones_are_passed() {
    let fx = fixture();
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query("www.example.com")),
        Counter::PassNotInZone,
    );
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query("coreha.example")),
        Counter::PassNotInZone,
    );
    fx.passed(
        &Frame::v4(SERVER_V4).build(&a_query(".")),
        Counter::PassNotInZone,
    );
}

#[test]
fn other_types_and_classes_are_passed() {
    let fx = fixture();
    let mx = QueryBuilder::new("one.prod.coreha.example", TYPE_MX).bytes();
    fx.passed(
        &Frame::v4(SERVER_V4).build(&mx),
        Counter::PassUnsupportedType,
    );
    let chaos = QueryBuilder {
        qclass: 3,
        ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
    }
    .bytes();
    fx.passed(
        &Frame::v4(SERVER_V4).build(&chaos),
        Counter::PassUnsupportedType,
    );
}

#[test]
fn packets_for_other_hosts_are_passed() {
    let fx = fixture();
    let frame = Frame::v4("198.18.0.99").build(&a_query("one.prod.coreha.example"));
    fx.passed(&frame, Counter::PassNotForThisHost);
    let frame = Frame::v6("2001:db8::99").build(&a_query("one.prod.coreha.example"));
    fx.passed(&frame, Counter::PassNotForThisHost);
}

#[test]
fn other_ports_and_protocols_are_passed() {
    let fx = fixture();
    let frame = Frame {
        dst_port: 53,
        ..Frame::v4(SERVER_V4)
    }
    .build(&a_query("one.prod.coreha.example"));
    fx.passed(&frame, Counter::PassNotDns);
    let mut tcp = Frame::v4(SERVER_V4).build(&a_query("one.prod.coreha.example"));
    tcp[14 + 9] = 6;
    fx.passed(&tcp, Counter::PassNotDns);
    let mut arp = Frame::v4(SERVER_V4).build(&a_query("one.prod.coreha.example"));
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    fx.passed(&arp, Counter::PassNotIp);
}

#[test]
fn ip_options_fragments_and_extension_headers_are_passed() {
    let fx = fixture();
    let query = a_query("one.prod.coreha.example");
    let mut fragment = Frame::v4(SERVER_V4).build(&query);
    fragment[14 + 6] = 0x20; // more fragments
    fx.passed(&fragment, Counter::PassIpOptions);
    let mut options = Frame::v4(SERVER_V4).build(&query);
    options[14] = 0x46;
    fx.passed(&options, Counter::PassIpOptions);
    let mut hop_by_hop = Frame::v6(SERVER_V6).build(&query);
    hop_by_hop[14 + 6] = 0;
    fx.passed(&hop_by_hop, Counter::PassIpOptions);
}

#[test]
fn a_frame_truncated_anywhere_is_passed_untouched() {
    let fx = fixture();
    let query = QueryBuilder::new("one.prod.coreha.example", TYPE_A)
        .edns(1232, false)
        .bytes();
    let frame = Frame::v4(SERVER_V4).build(&query);
    // BPF_PROG_TEST_RUN itself refuses frames shorter than an Ethernet header.
    for len in 14..frame.len() {
        let (verdict, out) = fx.run_once(&frame[..len]);
        assert_eq!(verdict, XDP_PASS, "truncated to {len} bytes");
        assert_eq!(out, &frame[..len]);
    }
}

#[test]
fn malformed_questions_are_passed_untouched() {
    let fx = fixture();
    let good = a_query("one.prod.coreha.example");
    let mutations: Vec<(&str, Vec<u8>)> = vec![
        (
            "compression pointer in the question",
            [&good[..12], &[0xc0, 0x0c, 0, 1, 0, 1]].concat(),
        ),
        (
            "label over 63 bytes",
            [&good[..12], &[64], &[b'a'; 64], &[0, 0, 1, 0, 1]].concat(),
        ),
        (
            "reserved label type",
            [&good[..12], &[0x41], &[b'a'; 1], &[0, 0, 1, 0, 1]].concat(),
        ),
        ("name over 255 bytes", {
            let mut m = good[..12].to_vec();
            for _ in 0..5 {
                m.push(63);
                m.extend_from_slice(&[b'a'; 63]);
            }
            m.extend_from_slice(&[0, 0, 1, 0, 1]);
            m
        }),
        (
            "name without its root",
            [&good[..good.len() - 5], &[0, 1, 0, 1]].concat(),
        ),
        ("type and class missing", good[..good.len() - 4].to_vec()),
        ("trailing bytes", [&good[..], &[0]].concat()),
        ("header only", good[..12].to_vec()),
    ];
    for (what, dns) in mutations {
        let frame = Frame::v4(SERVER_V4).build(&dns);
        let (verdict, out) = fx.run_once(&frame);
        assert_eq!(verdict, XDP_PASS, "{what}");
        assert_eq!(out, frame, "{what}");
    }
}

#[test]
fn ethernet_padding_is_not_trailing_dns_bytes() {
    let fx = fixture();
    let frame = Frame {
        trailer: vec![0; 6],
        ..Frame::v4(SERVER_V4)
    };
    fx.answered(
        &frame,
        &a_query("one.prod.coreha.example"),
        Counter::AnswerA,
    );
}

#[test]
fn headers_that_are_not_a_plain_query_are_passed() {
    let fx = fixture();
    let good = a_query("one.prod.coreha.example");
    let with = |at: usize, bytes: &[u8]| {
        let mut m = good.clone();
        m[at..at + bytes.len()].copy_from_slice(bytes);
        Frame::v4(SERVER_V4).build(&m)
    };
    fx.passed(&with(2, &[0x81, 0x00]), Counter::PassNotAQuery); // a response
    fx.passed(&with(2, &[0x10, 0x00]), Counter::PassNotAQuery); // opcode STATUS
    fx.passed(&with(4, &[0, 2]), Counter::PassNotAQuery); // two questions
    fx.passed(&with(6, &[0, 1]), Counter::PassNotAQuery); // an answer
    fx.passed(&with(8, &[0, 1]), Counter::PassNotAQuery); // an authority record
    fx.passed(&with(10, &[0, 2]), Counter::PassNotAQuery); // two additional records
}

#[test]
fn edns_other_than_a_clean_version_0_is_passed() {
    let fx = fixture();
    let version1 = QueryBuilder {
        edns: Some((1232, false, 1, Vec::new())),
        ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
    };
    fx.passed(
        &Frame::v4(SERVER_V4).build(&version1.bytes()),
        Counter::PassEdnsVersion,
    );
    // Padding (12) claiming 9 bytes where 3 follow.
    let bad_option = QueryBuilder {
        edns: Some((1232, false, 0, vec![0, 12, 0, 9, 1, 2, 3])),
        ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
    };
    fx.passed(
        &Frame::v4(SERVER_V4).build(&bad_option.bytes()),
        Counter::PassMalformed,
    );
    let mut not_opt = QueryBuilder::new("one.prod.coreha.example", TYPE_A)
        .edns(1232, false)
        .bytes();
    let at = not_opt.len() - 10;
    not_opt[at] = 250; // TSIG instead of OPT
    fx.passed(
        &Frame::v4(SERVER_V4).build(&not_opt),
        Counter::PassNotAQuery,
    );
}

#[test]
fn a_query_asking_for_the_nsid_is_left_to_userspace() {
    let fx = fixture();
    // Userspace tells the identity, or not, in one place: an NSID request alone, or after
    // another option, goes up (and a plain query of the same name is answered).
    for options in [vec![0, 3, 0, 0], vec![0, 12, 0, 2, 0, 0, 0, 3, 0, 0]] {
        let nsid = QueryBuilder {
            edns: Some((1232, false, 0, options)),
            ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
        };
        fx.passed(
            &Frame::v4(SERVER_V4).build(&nsid.bytes()),
            Counter::PassNsid,
        );
    }
    let plain = QueryBuilder {
        edns: Some((1232, false, 0, Vec::new())),
        ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
    };
    fx.answered(&Frame::v4(SERVER_V4), &plain.bytes(), Counter::AnswerA);
}

#[test]
fn a_query_with_a_cookie_is_left_to_userspace() {
    let fx = fixture();
    // Userspace makes and checks the server cookie: a client cookie, well formed or not, and
    // after any other option, goes up.
    for options in [
        vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8],
        vec![0, 10, 0, 3, 1, 2, 3],
        vec![0, 12, 0, 2, 0, 0, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8],
    ] {
        let cookie = QueryBuilder {
            edns: Some((1232, false, 0, options)),
            ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
        };
        fx.passed(
            &Frame::v4(SERVER_V4).build(&cookie.bytes()),
            Counter::PassCookie,
        );
    }
}

#[test]
fn an_option_whose_content_is_bad_is_ignored_by_both_paths() {
    let fx = fixture();
    // A client subnet of address family 3 (none such): well framed, meaningless.
    let bad_subnet = QueryBuilder {
        edns: Some((1232, false, 0, vec![0, 8, 0, 4, 0, 3, 0, 0])),
        ..QueryBuilder::new("one.prod.coreha.example", TYPE_A)
    };
    assert!(
        hickory_proto::op::Message::from_vec(&bad_subnet.bytes()).is_err(),
        "hickory rejects the option as it stands"
    );
    // answered() also asserts userspace gives the same bytes.
    let dns = fx.answered(&Frame::v4(SERVER_V4), &bad_subnet.bytes(), Counter::AnswerA);
    assert_eq!(&dns[dns.len() - 2..], &[0, 0], "no options in our OPT");
}

#[test]
fn the_agents_object_holds_only_the_answering_program_and_the_lease_renewal() {
    require_root();
    let agent = aya::Ebpf::load(hostport_dns::EBPF_OBJECT).expect("the agent's object");
    let mut programs: Vec<&str> = agent.programs().map(|(name, _)| name).collect();
    programs.sort();
    assert_eq!(
        programs,
        [
            hostport_dns_common::maps::RENEW_PROGRAM,
            hostport_dns_common::maps::PROGRAM,
        ]
    );
    let testbed = aya::Ebpf::load(hostport_dns::TESTBED_OBJECT).expect("the test bed's object");
    let mut programs: Vec<&str> = testbed.programs().map(|(name, _)| name).collect();
    programs.sort();
    assert_eq!(
        programs,
        [
            hostport_dns_common::maps::PASS_PROGRAM,
            hostport_dns_common::maps::REFLECT_PROGRAM,
            hostport_dns_common::maps::RENEW_PROGRAM,
            hostport_dns_common::maps::PROGRAM,
        ]
    );
}
