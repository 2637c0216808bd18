//! In-kernel cost per query: the program run once per BPF_PROG_TEST_RUN call, many times, the
//! kernel's own timing of each run collected, and the program's own time as the kernel's BPF
//! statistics account it. (With repeat > 1 the kernel would reuse a buffer the first run already
//! turned into an answer.)

use std::{
    os::fd::AsFd,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use aya::maps::MapData;
use hostport_dns::xdp::shared::SharedArray;
use hostport_dns_common::{
    generation::{Generation, NO_LEASE},
    maps,
};

use crate::{
    bench::print_table,
    packet::{Frame, QueryBuilder},
    xdp::{Program, XDP_PASS, XDP_TX},
};

const SERVER: &str = "198.18.0.1";

fn zone() -> String {
    let eight: Vec<String> = (1..=8).map(|i| format!("198.18.8.{i}")).collect();
    format!(
        "zones:
  - name: prod.coreha.example
    records:
      one: 198.18.0.1
      eight: [{}]
      {}: 198.18.0.50
",
        eight.join(", "),
        longest_label_name()
    )
}

/// Labels filling the longest name under prod.coreha.example (255 bytes in wire form).
fn longest_label_name() -> String {
    format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(41)
    )
}

struct Case {
    name: &'static str,
    frame: Vec<u8>,
    verdict: u32,
}

fn cases() -> Vec<Case> {
    let v4 = Frame::v4(SERVER);
    let query = |name: &str, qtype: u16| QueryBuilder::new(name, qtype).bytes();
    let edns = |name: &str, qtype: u16| QueryBuilder::new(name, qtype).edns(1232, false).bytes();
    let longest = format!("{}.prod.coreha.example", longest_label_name());
    vec![
        Case {
            name: "A hit, 1 record",
            frame: v4.build(&query("one.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "A hit, 1 record, EDNS",
            frame: v4.build(&edns("one.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "A hit, 8 records",
            frame: v4.build(&query("eight.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "A hit, 8 records, EDNS",
            frame: v4.build(&edns("eight.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "AAAA NODATA",
            frame: v4.build(&query("one.prod.coreha.example", 28)),
            verdict: XDP_TX,
        },
        Case {
            name: "AAAA NODATA, EDNS",
            frame: v4.build(&edns("one.prod.coreha.example", 28)),
            verdict: XDP_TX,
        },
        Case {
            name: "NXDOMAIN",
            frame: v4.build(&query("nope.ingress.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "NXDOMAIN, EDNS",
            frame: v4.build(&edns("nope.ingress.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "A hit, 255-byte name",
            frame: v4.build(&query(&longest, 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "A hit, IPv6",
            frame: Frame::v6("2001:db8::1").build(&query("one.prod.coreha.example", 1)),
            verdict: XDP_TX,
        },
        Case {
            name: "pass: other UDP port",
            frame: Frame {
                dst_port: 53,
                ..v4.clone()
            }
            .build(&query("one.prod.coreha.example", 1)),
            verdict: XDP_PASS,
        },
        Case {
            name: "pass: name not in a zone",
            frame: v4.build(&query("www.example.com", 1)),
            verdict: XDP_PASS,
        },
    ]
}

/// Median and 90th percentile of `runs` single runs, in nanoseconds, and whether every run
/// gave the expected verdict.
fn measure(program: &Program, frame: &[u8], expected: u32, runs: usize) -> (u128, u128, bool) {
    let mut times: Vec<Duration> = Vec::with_capacity(runs);
    let mut as_expected = true;
    for _ in 0..runs {
        let (verdict, _, duration) = program.run(frame);
        as_expected &= verdict == expected;
        times.push(duration);
    }
    times.sort();
    (
        times[runs / 2].as_nanos(),
        times[runs * 9 / 10].as_nanos(),
        as_expected,
    )
}

/// Alternating blocks of the leased/unleased comparison.
const LEASE_BLOCKS: usize = 10;

/// Stores `word` as the table's lease word, as the renewal program and the lease's timer do.
fn set_lease_word(program: &Program, word: u64) {
    let map = MapData::from_id(program.map_id(maps::GENERATION)).expect("open the generation map");
    let state = SharedArray::<Generation>::map(map.fd().as_fd(), 1).expect("map the generation");
    // SAFETY: an aligned u64 of the mapping, alive for this call; the program reads it.
    unsafe { AtomicU64::from_ptr(&raw mut (*state.as_ptr(0)).lease) }.store(word, Ordering::SeqCst);
}

/// The mean of the middle 80% of `sorted` (sorted ascending), in nanoseconds.
fn trimmed_mean(sorted: &[Duration]) -> f64 {
    let cut = sorted.len() / 10;
    let middle = &sorted[cut..sorted.len() - cut];
    middle.iter().map(|d| d.as_nanos() as f64).sum::<f64>() / middle.len().max(1) as f64
}

/// The A hit (one record) in figures, for the XDP benchmark's summary.
pub struct AHit {
    /// BPF_PROG_TEST_RUN's median, its set-up included.
    pub median: u128,
    /// The program alone (BPF statistics), median.
    pub own: u128,
    /// The program's own work: `own` less the pass-only program's.
    pub work: u128,
}

/// Prints the table; returns the A hit (1 record) for the summary.
pub fn run(runs: usize) -> AHit {
    let local = [
        SERVER.parse().expect("an address"),
        "2001:db8::1".parse().expect("an address"),
    ];
    let mut program = Program::load(&zone(), &local);
    let (floor, floor_own) = program.floor(&cases()[0].frame, runs);
    let mut rows = vec![vec![
        "floor: a program that only passes".to_owned(),
        floor.to_string(),
        "-".into(),
        "-".into(),
        floor_own.to_string(),
        "-".into(),
    ]];
    let mut a_hit = AHit {
        median: 0,
        own: 0,
        work: 0,
    };
    // HPD_BENCH_CASE=<part of a case name> runs only the matching cases (for a profiler).
    let only = std::env::var("HPD_BENCH_CASE").unwrap_or_default();
    for case in cases()
        .into_iter()
        .filter(|c| c.name.contains(only.as_str()))
    {
        let (median, p90, as_expected) = measure(&program, &case.frame, case.verdict, runs);
        let mut own = program.program_times(&case.frame, runs);
        own.sort();
        if case.name == "A hit, 1 record" {
            let own = own[runs / 2].as_nanos();
            a_hit = AHit {
                median,
                own,
                work: own.saturating_sub(floor_own),
            };
        }
        let name = if as_expected {
            case.name.to_owned()
        } else {
            format!("{} (UNEXPECTED VERDICT)", case.name)
        };
        rows.push(vec![
            name,
            median.to_string(),
            p90.to_string(),
            format!("{:.2}", median as f64 / 100.0),
            own[runs / 2].as_nanos().to_string(),
            own[runs / 2]
                .as_nanos()
                .saturating_sub(floor_own)
                .to_string(),
        ]);
    }
    // The same A hit with the table leased, as with a pin directory (the chart's default): the
    // run reads the lease word its timer clears (no clock read), so its own work should match
    // the unleased hit's. Measured in alternating blocks, the word switched between `NO_LEASE`
    // and a live epoch, so that drift hits both alike.
    let mut compared = None;
    if "A hit, 1 record, leased (pinned)".contains(only.as_str()) {
        let frame = &cases()[0].frame;
        let lease = program.lease(Duration::from_secs(3600));
        let (median, p90, as_expected) = measure(&program, frame, XDP_TX, runs);
        let (mut leased, mut unleased) = (Vec::new(), Vec::new());
        for _ in 0..LEASE_BLOCKS {
            set_lease_word(&program, NO_LEASE);
            unleased.extend(program.program_times(frame, runs / LEASE_BLOCKS));
            lease.renew();
            leased.extend(program.program_times(frame, runs / LEASE_BLOCKS));
        }
        drop(lease);
        leased.sort();
        unleased.sort();
        compared = Some((trimmed_mean(&leased), trimmed_mean(&unleased)));
        let own = leased[leased.len() / 2].as_nanos();
        let name = "A hit, 1 record, leased (pinned)";
        rows.push(vec![
            if as_expected {
                name.to_owned()
            } else {
                format!("{name} (UNEXPECTED VERDICT)")
            },
            median.to_string(),
            p90.to_string(),
            format!("{:.2}", median as f64 / 100.0),
            own.to_string(),
            own.saturating_sub(floor_own).to_string(),
        ]);
    }
    print_table(
        &format!(
            "In-kernel cost per query, BPF_PROG_TEST_RUN, {runs} single runs each (target: the program's own work on an A hit <= 60 ns)"
        ),
        &[
            "case",
            "median ns",
            "p90 ns",
            "median / 100 ns",
            "program alone, median ns",
            "minus floor",
        ],
        &rows,
    );
    println!(
        "(median and p90: BPF_PROG_TEST_RUN's own timing of one run, its set-up included. Program \
         alone: the same runs as the kernel's BPF statistics account them, clock reads included; \
         minus floor: less the floor's, i.e. the program's own work.)"
    );
    // The medians move in the statistics clock's steps (10-20 ns): the ratio is taken from the
    // means of the middle 80% of the alternating blocks' runs, less the floor's median.
    if let Some((leased, unleased_mean)) = compared
        && unleased_mean > floor_own as f64
    {
        let floor = floor_own as f64;
        println!(
            "A hit's own work (trimmed means less the floor): {:.1} ns leased, {:.1} ns not leased: {:.3}x (target <= 1.02x)",
            leased - floor,
            unleased_mean - floor,
            (leased - floor) / (unleased_mean - floor)
        );
    }
    a_hit
}
