//! Hostile traffic through the XDP program (BPF_PROG_TEST_RUN, real packets through the real
//! kernel program): spoofed and martian sources, group MAC addresses, loopback destinations from
//! other interfaces, ECN, the client allow-list and response rate limiting. Frames "arrive" on a
//! veth of a namespace the test creates (the run's ingress interface), or on lo.

use std::net::IpAddr;

use hickory_proto::op::Message;
use hostport_dns::clients::{ClientsConfig, Outside, RateLimit};
use hostport_dns_common::counters::Counter;
use hostport_dns_core::{
    answer::{Asker, Shape, respond, respond_for},
    dns::{Query, message::Transport},
};
use hostport_dns_tests::{
    netns::NetNs,
    packet::{CLIENT_MAC, Frame, QueryBuilder, parse_checked},
    require_root,
    xdp::{Program, XDP_DROP, XDP_PASS, XDP_TX, repeated_runs, run_repeatedly},
};

const SERVER_V4: &str = "198.18.0.1";
const SERVER_V6: &str = "2001:db8::1";
const ZONE: &str = "zones:
  - name: prod.coreha.example
    records:
      one: [198.18.0.30, \"2001:db8::30\"]
";
const LOOPBACK_IFINDEX: u32 = 1;

fn local() -> Vec<IpAddr> {
    [SERVER_V4, SERVER_V6, "127.0.0.1", "::1"]
        .iter()
        .map(|a| a.parse().expect("an address"))
        .collect()
}

fn query() -> Vec<u8> {
    QueryBuilder::new("one.prod.coreha.example", 1).bytes()
}

fn from(src: &str, dst: &str) -> Frame {
    Frame::between(src, dst)
}

/// Runs `check` on a thread inside a fresh namespace holding a veth pair, with the index of one
/// of its ends (this kernel has no dummy devices).
fn on_a_foreign_interface(check: impl FnOnce(u32) + Send + 'static) {
    require_root();
    let ns = NetNs::new("hostile");
    ns.ip(&["link", "add", "hd0", "type", "veth", "peer", "name", "hd1"]);
    ns.ip(&["link", "set", "hd0", "up"]);
    ns.run(move || {
        // SAFETY: a NUL-terminated interface name.
        let ifindex = unsafe { libc::if_nametoindex(c"hd0".as_ptr()) };
        assert_ne!(ifindex, 0, "the interface exists");
        assert_ne!(ifindex, LOOPBACK_IFINDEX);
        check(ifindex);
    });
}

/// Asserts the verdict and the counter it was counted under.
fn expect(
    program: &Program,
    frame: &Frame,
    ifindex: u32,
    verdict: u32,
    counter: Counter,
) -> Vec<u8> {
    let before = program.counters.get(counter);
    let bytes = frame.build(&query());
    let (got, out) = program.run_on(&bytes, ifindex);
    assert_eq!(
        (got, program.counters.get(counter)),
        (verdict, before + 1),
        "{frame:?} on interface {ifindex}: expected {counter:?}"
    );
    if verdict == XDP_PASS {
        assert_eq!(out, bytes, "a passed packet is untouched");
    }
    out
}

#[test]
fn sources_that_cannot_have_sent_the_query_are_dropped_except_on_lo() {
    on_a_foreign_interface(|ifindex| {
        let program = Program::load(ZONE, &local());
        for src in ["127.0.0.1", "127.9.9.9", "0.1.2.3", SERVER_V4] {
            expect(
                &program,
                &from(src, SERVER_V4),
                ifindex,
                XDP_DROP,
                Counter::DropMartian,
            );
        }
        for src in ["::1", "::", SERVER_V6] {
            expect(
                &program,
                &from(src, SERVER_V6),
                ifindex,
                XDP_DROP,
                Counter::DropMartian,
            );
        }
        // Group sources and port 0, anywhere.
        for at in [ifindex, LOOPBACK_IFINDEX] {
            for src in ["224.0.0.1", "239.1.2.3", "255.255.255.255", "240.0.0.1"] {
                expect(
                    &program,
                    &from(src, SERVER_V4),
                    at,
                    XDP_DROP,
                    Counter::DropMartian,
                );
            }
            expect(
                &program,
                &from("ff02::1", SERVER_V6),
                at,
                XDP_DROP,
                Counter::DropMartian,
            );
            let port_zero = Frame {
                src_port: 0,
                ..Frame::v4(SERVER_V4)
            };
            expect(&program, &port_zero, at, XDP_DROP, Counter::DropMartian);
        }
        // On lo, local clients ask from loopback and from the node's own addresses.
        expect(
            &program,
            &from("127.0.0.1", "127.0.0.1"),
            LOOPBACK_IFINDEX,
            XDP_TX,
            Counter::AnswerA,
        );
        expect(
            &program,
            &from(SERVER_V4, SERVER_V4),
            LOOPBACK_IFINDEX,
            XDP_TX,
            Counter::AnswerA,
        );
        expect(
            &program,
            &from("::1", "::1"),
            LOOPBACK_IFINDEX,
            XDP_TX,
            Counter::AnswerA,
        );
        // And a real client on the foreign interface is answered.
        expect(
            &program,
            &Frame::v4(SERVER_V4),
            ifindex,
            XDP_TX,
            Counter::AnswerA,
        );
        expect(
            &program,
            &Frame::v6(SERVER_V6),
            ifindex,
            XDP_TX,
            Counter::AnswerA,
        );
    });
}

#[test]
fn frames_to_broadcast_or_multicast_macs_are_dropped() {
    on_a_foreign_interface(|ifindex| {
        let program = Program::load(ZONE, &local());
        for mac in [
            [0xff; 6],
            [0x01, 0x00, 0x5e, 0, 0, 1],
            [0x33, 0x33, 0, 0, 0, 1],
        ] {
            let frame = Frame {
                dst_mac: mac,
                ..Frame::v4(SERVER_V4)
            };
            expect(&program, &frame, ifindex, XDP_DROP, Counter::DropMartian);
        }
    });
}

#[test]
fn a_loopback_destination_is_this_host_only_on_lo() {
    on_a_foreign_interface(|ifindex| {
        let program = Program::load(ZONE, &local());
        // The stack drops these as martian destinations; XDP does not answer them.
        expect(
            &program,
            &Frame::v4("127.0.0.1"),
            ifindex,
            XDP_PASS,
            Counter::PassNotForThisHost,
        );
        expect(
            &program,
            &Frame::v6("::1"),
            ifindex,
            XDP_PASS,
            Counter::PassNotForThisHost,
        );
    });
}

#[test]
fn the_answer_does_not_copy_the_querys_ecn_bits() {
    require_root();
    let program = Program::load(ZONE, &local());
    for base in [Frame::v4(SERVER_V4), Frame::v6(SERVER_V6)] {
        // DSCP 46 (EF) with ECN CE.
        let frame = Frame {
            traffic_class: 0xb8 | 0x03,
            ..base
        };
        let out = expect(&program, &frame, LOOPBACK_IFINDEX, XDP_TX, Counter::AnswerA);
        assert_eq!(parse_checked(&out).traffic_class, 0xb8, "{frame:?}");
    }
}

#[test]
fn ipv6_udp_without_a_checksum_is_not_answered() {
    require_root();
    let program = Program::load(ZONE, &local());
    let frame = Frame {
        udp_checksum: false,
        ..Frame::v6(SERVER_V6)
    };
    expect(
        &program,
        &frame,
        LOOPBACK_IFINDEX,
        XDP_PASS,
        Counter::PassMalformed,
    );
}

fn allow_list(outside: Outside) -> ClientsConfig {
    ClientsConfig {
        allow: vec![
            "198.18.0.0/24".parse().expect("a prefix"),
            "2001:db8::/64".parse().expect("a prefix"),
        ],
        outside,
        ..ClientsConfig::default()
    }
}

#[test]
fn clients_outside_the_allow_list_are_dropped_or_left_to_userspace_to_refuse() {
    require_root();
    let dropping = Program::load_with_clients(ZONE, &local(), allow_list(Outside::Drop));
    expect(
        &dropping,
        &Frame::v4(SERVER_V4),
        LOOPBACK_IFINDEX,
        XDP_TX,
        Counter::AnswerA,
    );
    expect(
        &dropping,
        &Frame::v6(SERVER_V6),
        LOOPBACK_IFINDEX,
        XDP_TX,
        Counter::AnswerA,
    );
    expect(
        &dropping,
        &from("198.18.9.2", SERVER_V4),
        LOOPBACK_IFINDEX,
        XDP_DROP,
        Counter::DropNotAllowed,
    );
    expect(
        &dropping,
        &from("2001:db8:1::2", SERVER_V6),
        LOOPBACK_IFINDEX,
        XDP_DROP,
        Counter::DropNotAllowed,
    );
    let refusing = Program::load_with_clients(ZONE, &local(), allow_list(Outside::Refuse));
    expect(
        &refusing,
        &from("198.18.9.2", SERVER_V4),
        LOOPBACK_IFINDEX,
        XDP_PASS,
        Counter::PassNotAllowed,
    );
    expect(
        &refusing,
        &Frame::v4(SERVER_V4),
        LOOPBACK_IFINDEX,
        XDP_TX,
        Counter::AnswerA,
    );
}

#[test]
fn a_flooding_prefix_is_limited_with_slips_equal_to_userspaces_and_an_exempt_one_is_not() {
    require_root();
    let clients = ClientsConfig {
        rate_limit: RateLimit {
            responses_per_second: 5,
            negative_per_second: 5,
            errors_per_second: 5,
            slip: 2,
            exempt: vec!["198.18.7.0/24".parse().expect("a prefix")],
        },
        ..ClientsConfig::default()
    };
    let program = Program::load_with_clients(ZONE, &local(), clients);
    let slip = respond_for(
        &Query::read(&query()),
        Some(&program.table),
        Transport::Udp,
        &Asker {
            shape: Shape::Slip,
            ..Asker::ANONYMOUS
        },
    )
    .expect("a slip");
    let full = respond(&query(), Some(&program.table), Transport::Udp).expect("an answer");
    let (mut answered, mut slipped, mut dropped) = (0, 0, 0);
    for _ in 0..40 {
        let frame = from("198.18.5.9", SERVER_V4).build(&query());
        let (verdict, out) = program.run_on(&frame, LOOPBACK_IFINDEX);
        match verdict {
            XDP_TX => {
                let dns = parse_checked(&out).dns;
                if dns == full.bytes {
                    answered += 1;
                } else {
                    assert_eq!(dns, slip.bytes, "a slip is userspace's truncated answer");
                    let message = Message::from_vec(&dns).expect("a message");
                    assert!(message.metadata.truncation && message.answers.is_empty());
                    slipped += 1;
                }
            }
            XDP_DROP => dropped += 1,
            other => panic!("verdict {other}"),
        }
    }
    // One budget a second: a run across a second boundary gets two.
    assert!((5..=10).contains(&answered), "{answered} answered");
    assert!(
        slipped >= 10 && dropped >= 10,
        "{slipped} slipped, {dropped} dropped"
    );
    assert_eq!(program.counters.get(Counter::SlipRateLimited), slipped);
    assert_eq!(program.counters.get(Counter::DropRateLimited), dropped);
    // The exempt prefix and another prefix are answered every time.
    for _ in 0..40 {
        expect(
            &program,
            &from("198.18.7.9", SERVER_V4),
            LOOPBACK_IFINDEX,
            XDP_TX,
            Counter::AnswerA,
        );
    }
    let out = expect(
        &program,
        &from("198.18.6.9", SERVER_V4),
        LOOPBACK_IFINDEX,
        XDP_TX,
        Counter::AnswerA,
    );
    assert_eq!(parse_checked(&out).dst_mac, CLIENT_MAC);
}

/// Whole seconds of the clock the program's rate limiter counts by (CLOCK_MONOTONIC_COARSE).
fn coarse_second() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    now.tv_sec as u64
}

#[test]
fn a_flood_from_every_cpu_at_once_is_held_to_the_rate() {
    on_a_foreign_interface(|ifindex| {
        let rate: u32 = 2_000;
        let clients = ClientsConfig {
            rate_limit: RateLimit {
                responses_per_second: rate,
                negative_per_second: rate,
                errors_per_second: rate,
                slip: 0,
                exempt: Vec::new(),
            },
            ..ClientsConfig::default()
        };
        let program = Program::load_with_clients(ZONE, &local(), clients);
        let frame = from("198.18.5.9", SERVER_V4).build(&query());
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index.
        let md: [u32; 6] = [0, frame.len() as u32, 0, ifindex, 0, 0];
        let ctx: Vec<u8> = md.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let xdp = program.program();
        // Live frames where the kernel allows them (no system call between runs), else one plain
        // run a call: either way far more than the rate from each CPU, so the assertions below
        // hold on both paths. The probe's run, from this thread, is counted like the others.
        let first = coarse_second();
        let how = repeated_runs(xdp, &frame, &ctx);
        // Every CPU runs the program at once: the same buckets charged from several CPUs at
        // once, as a multi-queue flood charges them, across several seconds (each starts a new
        // budget, spent in a fraction of a millisecond).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        std::thread::scope(|scope| {
            for cpu in 0..cpus {
                let (frame, ctx) = (&frame, &ctx);
                scope.spawn(move || {
                    hostport_dns_tests::bench::system::pin_current_thread(cpu);
                    while std::time::Instant::now() < until {
                        run_repeatedly(xdp, frame, ctx, 2_000, how);
                    }
                });
            }
        });
        let seconds = coarse_second() - first + 1;
        let answered = program.counters.get(Counter::AnswerA);
        let dropped = program.counters.get(Counter::DropRateLimited);
        println!(
            "{answered} answered, {dropped} dropped, over {seconds} s on {cpus} CPUs ({how:?})"
        );
        assert!(dropped > answered, "the flood went far past the rate");
        // One budget a second: every answer is counted once (atomically), and a new second's
        // count starts once, whichever CPU meets it first. The one allowance: while a CPU claims
        // the empty bucket for this client (its key written just after the window), each other
        // CPU may restart that first window once (`rate.rs`: "misattributes at most one answer").
        let most = u64::from(rate) * seconds + (cpus as u64 - 1);
        assert!(
            answered <= most,
            "{answered} answered over {seconds} s at {rate}/s on {cpus} CPUs: at most {most}"
        );
    });
}

/// Negative answers (NXDOMAIN, NODATA) have a budget of their own: a kernel path that limited
/// them at the positive rate (or positive answers at the negative one) fails this.
#[test]
fn negative_answers_are_limited_at_their_own_rate_not_the_positive_one() {
    require_root();
    let (positive_rate, negative_rate) = (20u32, 3u32);
    let clients = ClientsConfig {
        rate_limit: RateLimit {
            responses_per_second: positive_rate,
            negative_per_second: negative_rate,
            errors_per_second: negative_rate,
            slip: 0,
            exempt: Vec::new(),
        },
        ..ClientsConfig::default()
    };
    let program = Program::load_with_clients(ZONE, &local(), clients);
    let nxdomain = QueryBuilder::new("missing.prod.coreha.example", 1).bytes();
    let nxdomain_aaaa = QueryBuilder::new("missing.prod.coreha.example", 28).bytes();
    let (a, aaaa) = (
        query(),
        QueryBuilder::new("one.prod.coreha.example", 28).bytes(),
    );
    let expected = |q: &[u8]| {
        respond(q, Some(&program.table), Transport::Udp)
            .expect("an answer")
            .bytes
    };
    // Interleaved from one client (A and AAAA answers, NXDOMAIN for both types): each class is
    // counted apart.
    let kinds = [
        (&a, expected(&a), true),
        (&aaaa, expected(&aaaa), true),
        (&nxdomain, expected(&nxdomain), false),
        (&nxdomain_aaaa, expected(&nxdomain_aaaa), false),
    ];
    let (mut positive, mut negative) = (0u32, 0u32);
    for _ in 0..60 {
        for (q, full, is_positive) in &kinds {
            let frame = from("198.18.5.9", SERVER_V4).build(q);
            let (verdict, out) = program.run_on(&frame, LOOPBACK_IFINDEX);
            match verdict {
                XDP_TX => {
                    assert_eq!(&parse_checked(&out).dns, full, "the full answer");
                    if *is_positive {
                        positive += 1;
                    } else {
                        negative += 1;
                    }
                }
                XDP_DROP => {}
                other => panic!("verdict {other}"),
            }
        }
    }
    // One budget a second: a run across a second boundary gets two.
    assert!(
        (positive_rate..=2 * positive_rate).contains(&positive),
        "{positive} positive answers at {positive_rate}/s"
    );
    assert!(
        (negative_rate..=2 * negative_rate).contains(&negative),
        "{negative} NXDOMAIN answers at {negative_rate}/s"
    );
}
