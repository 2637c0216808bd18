//! `cargo xtask bench <xdp|userspace|propagation|kernel|churn|flood|transfer|memory>`: figures and ratios, peers side by side in one run.
//! Never assertions: these machines are noisy; read the figures.

use std::time::Duration;

use hostport_dns::sources::file;

use hostport_dns_core::table::RecordTable;
use hostport_dns_tests::{
    TempDir,
    bench::{
        self, kernel,
        load::{self, Load},
        print_table,
        responders::{self, Kind, PORT},
        system,
    },
    netns::Link,
    require_root,
};

/// CPU the responder (its processes and receive thread) is pinned to.
const RESPONDER_CPU: usize = 0;
/// CPU the load generator is pinned to.
const GENERATOR_CPU: usize = 1;

fn main() {
    require_root();
    let what = std::env::args().nth(1).unwrap_or_default();
    match what.as_str() {
        "xdp" => xdp(),
        "big-answer" => big_answer(),
        "userspace" => userspace(),
        "propagation" => bench::propagation::run(),
        "churn" => bench::churn::run(),
        "soak" => bench::soak::run(),
        "flood" => bench::flood::run(),
        "transfer" => bench::transfer::run(),
        "memory" => bench::memory::run(),
        "kernel" => {
            let runs = std::env::var("HPD_BENCH_RUNS")
                .ok()
                .and_then(|r| r.parse().ok())
                .unwrap_or(20_000);
            kernel::run(runs);
        }
        other => {
            eprintln!(
                "usage: hostport-dns-bench <xdp|big-answer|userspace|propagation|kernel|churn|soak|flood|transfer|memory> (got {other:?})"
            );
            std::process::exit(2);
        }
    }
}

struct Measured {
    load: Load,
    responder_cpu: f64,
    /// The XDP program on the server interface, if any: its own run time and run count during
    /// the load (BPF statistics).
    xdp_program: Option<(Duration, u64)>,
    /// Answers the agent's program grew at the tail (the fallback), for an agent with XDP.
    fallbacks: Option<f64>,
}

impl Measured {
    fn cpu_ns_per_answer(&self) -> f64 {
        if self.load.answered == 0 {
            f64::NAN
        } else {
            self.responder_cpu * 1e9 / self.load.answered as f64
        }
    }

    /// Nanoseconds the XDP program itself spent per packet it saw.
    fn xdp_program_ns_per_packet(&self) -> Option<f64> {
        let (time, runs) = self.xdp_program?;
        (runs > 0).then(|| time.as_nanos() as f64 / runs as f64)
    }
}

/// A row that could not be measured here, and why.
type Outcome = Result<Measured, String>;

/// Starts `kind` on a fresh link, pins it, runs `generate`, and measures the responder CPU; or
/// why that cannot be done on this machine (the responder cannot start, the generator measures
/// nothing).
fn measure(
    kind: Kind,
    records_yaml: &str,
    table: &RecordTable,
    generate: impl FnOnce(&Link) -> Result<Load, String>,
) -> Outcome {
    measure_on(Link::bare("bench"), kind, records_yaml, table, generate)
}

/// [`measure`] on `link`: a bare one for kxdpgun (which attaches its own program on the client
/// end), one with the pass-through program there for kernel-socket generators (native XDP_TX
/// on veth is delivered only to a peer with a program).
fn measure_on(
    link: Link,
    kind: Kind,
    records_yaml: &str,
    table: &RecordTable,
    generate: impl FnOnce(&Link) -> Result<Load, String>,
) -> Outcome {
    system::threaded_napi(&link.server_ns, &link.server.ifname);
    system::threaded_napi(&link.client_ns, &link.client.ifname);
    let dir = TempDir::new("bench");
    let running = responders::start(kind, &link, &dir, records_yaml, table)?;
    for pid in running
        .pids
        .iter()
        .chain(&system::napi_threads(&link.server.ifname))
    {
        system::pin(*pid, RESPONDER_CPU);
    }
    // Give the generator's own receive thread (created when it attaches) its CPU too.
    std::thread::sleep(Duration::from_millis(200));
    let program = system::xdp_program_id(&link.server_ns, &link.server.ifname);
    let stats = system::ProgramStats::enable();
    let program_before = program.and_then(system::program_run_stats);
    let before = system::cpu_busy_seconds(RESPONDER_CPU);
    let load = generate(&link)?;
    let responder_cpu = system::cpu_busy_seconds(RESPONDER_CPU) - before;
    let program_after = program.and_then(system::program_run_stats);
    drop(stats);
    let fallbacks = running.xdp_fallbacks();
    drop(running);
    let xdp_program = program_before
        .zip(program_after)
        .map(|((t0, n0), (t1, n1))| (t1.saturating_sub(t0), n1.saturating_sub(n0)));
    Ok(Measured {
        load,
        responder_cpu,
        xdp_program,
        fallbacks,
    })
}

/// dnsperf's figures, or why there are none (no answer at all).
fn answered(load: Load, generator: &str) -> Result<Load, String> {
    if load.answered == 0 {
        Err(format!(
            "{generator} sent {} queries and got no answer",
            load.sent
        ))
    } else {
        Ok(load)
    }
}

/// The rows that could not be measured, each with its reason, under a table.
fn print_not_measured<'a>(rows: impl IntoIterator<Item = (String, &'a Outcome)>) {
    for (label, outcome) in rows {
        if let Err(reason) = outcome {
            println!("  {label}: not measured here: {reason}");
        }
    }
}

/// A figure of a measured row, "not run" for a row that could not be.
fn cell(outcome: &Outcome, figure: impl FnOnce(&Measured) -> String) -> String {
    outcome.as_ref().map_or_else(|_| "not run".into(), figure)
}

/// The load of the XDP table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Generator {
    Kxdpgun,
    Dnsperf,
}

/// dnsperf's clients when it stands in for kxdpgun: enough outstanding queries to keep the
/// responder busy from one generator CPU.
const DNSPERF_CLIENTS: u32 = 8;

impl Generator {
    fn describe(self, offered: u64) -> String {
        match self {
            Self::Kxdpgun => format!("kxdpgun, {offered} q/s offered,"),
            Self::Dnsperf => format!(
                "dnsperf over kernel UDP ({DNSPERF_CLIENTS} clients, 1000 outstanding; kxdpgun cannot run here),"
            ),
        }
    }
}

/// One row of the XDP table: `kind` under `generator`.
fn xdp_row(
    generator: Generator,
    kind: Kind,
    records: &str,
    table: &RecordTable,
    queries: &std::path::Path,
    offered: u64,
    seconds: u64,
) -> Outcome {
    match generator {
        Generator::Kxdpgun => measure(kind, records, table, |link| {
            kxdpgun_load(link, queries, offered, seconds)
        }),
        Generator::Dnsperf => measure_on(Link::new("bench"), kind, records, table, |link| {
            pin_client_napi_soon(link);
            let load = load::dnsperf_on_cpu(
                &link.client_ns,
                link.server.ipv4,
                PORT,
                queries,
                DNSPERF_CLIENTS,
                seconds,
                GENERATOR_CPU,
            );
            answered(load, "dnsperf")
        }),
    }
}

/// kxdpgun from the client end at `offered` q/s, its receive thread on the generator's CPU.
fn kxdpgun_load(
    link: &Link,
    queries: &std::path::Path,
    offered: u64,
    seconds: u64,
) -> Result<Load, String> {
    pin_client_napi_soon(link);
    load::try_kxdpgun_from(
        &link.client_ns,
        &link.client.ifname,
        link.server.ipv4,
        PORT,
        queries,
        offered,
        seconds,
        GENERATOR_CPU,
        None,
    )
}

fn pin_client_napi_soon(link: &Link) {
    let ifname = link.client.ifname.clone();
    std::thread::spawn(move || {
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(100));
            for pid in system::napi_threads(&ifname) {
                system::pin(pid, GENERATOR_CPU);
            }
        }
    });
}

fn xdp() {
    let runs = 20_000;
    let kernel_a_hit = kernel::run(runs);

    let (records, names) = bench::zone(1000);
    let snapshot = file::parse(&records, "bench zone".as_ref()).expect("a valid zone");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let dir = TempDir::new("bench-queries");
    let queries = dir.write("queries.txt", &bench::query_file(&names, "A"));
    let seconds = 5;
    let offered = 1_000_000;
    let kinds = [
        Kind::Reflector,
        Kind::HostportXdp,
        Kind::HostportUserspace,
        Kind::KnotXdp,
        Kind::KnotUdp,
        Kind::Nsd,
    ];
    // kxdpgun where it runs; where its own AF_XDP program cannot load (kernel 6.18's verifier
    // rejects Knot 3.2's), dnsperf over kernel UDP on the generator's CPU, for every row alike.
    let mut generator = Generator::Kxdpgun;
    let mut results: Vec<(Kind, Outcome)> = Vec::new();
    for kind in kinds {
        let mut measured = xdp_row(
            generator, kind, &records, &table, &queries, offered, seconds,
        );
        if generator == Generator::Kxdpgun
            && let Err(reason) = &measured
            && reason.contains("kxdpgun")
        {
            println!("kxdpgun cannot run here ({reason}): every row is loaded by dnsperf instead");
            generator = Generator::Dnsperf;
            measured = xdp_row(
                generator, kind, &records, &table, &queries, offered, seconds,
            );
        }
        results.push((kind, measured));
    }
    let find = |kind| {
        results
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, m)| m.as_ref().ok())
    };
    let knot_xdp = find(Kind::KnotXdp).map(Measured::cpu_ns_per_answer);
    let knot_udp = find(Kind::KnotUdp).map(Measured::cpu_ns_per_answer);
    let ratio = |m: &Measured, peer: Option<f64>| {
        peer.map_or("-".into(), |k| format!("{:.2}", m.cpu_ns_per_answer() / k))
    };
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(kind, m)| {
            vec![
                kind.label().to_owned(),
                cell(m, |m| format!("{:.0}", m.load.sent as f64 / seconds as f64)),
                cell(m, |m| format!("{:.0}", m.load.answered_per_second())),
                cell(m, |m| format!("{:.1} %", m.load.loss() * 100.0)),
                cell(m, |m| format!("{:.2}", m.responder_cpu)),
                cell(m, |m| format!("{:.0}", m.cpu_ns_per_answer())),
                cell(m, |m| ratio(m, knot_xdp)),
                cell(m, |m| ratio(m, knot_udp)),
                cell(m, |m| {
                    m.xdp_program_ns_per_packet()
                        .map_or("-".into(), |ns| format!("{ns:.0}"))
                }),
                cell(m, |m| m.fallbacks.map_or("-".into(), |n| format!("{n:.0}"))),
            ]
        })
        .collect();
    print_table(
        &format!(
            "{} on CPU {GENERATOR_CPU} for {seconds} s, 1000 names x 3 A; responder and its \
             receive thread on CPU {RESPONDER_CPU}; {}",
            generator.describe(offered),
            system::cpu_description()
        ),
        &[
            "responder",
            "sent/s",
            "answered/s",
            "loss",
            "CPU s",
            "CPU ns/answer",
            "vs knotd XDP",
            "vs knotd UDP",
            "XDP program ns/packet",
            "grown at tail",
        ],
        &rows,
    );
    print_not_measured(results.iter().map(|(k, m)| (k.label().to_owned(), m)));
    println!(
        "(CPU ns/answer: everything on the responder's CPU, driver work included, per answer. XDP program \
         ns/packet: the program alone, per packet it saw, from the kernel's BPF statistics, whose clock \
         reads add a few tens of ns: the reflector shows that floor. knotd's XDP program only redirects \
         to its sockets; its DNS work is in the CPU column.)"
    );
    if let (Some(ours), Some(reflector)) = (find(Kind::HostportXdp), find(Kind::Reflector)) {
        let loaded = ours.xdp_program_ns_per_packet().unwrap_or(f64::NAN);
        let against = |peer: Option<f64>, name: &str| {
            peer.map_or(format!("{name}: not measured"), |k| {
                format!("{:.2} x {name}'s", ours.cpu_ns_per_answer() / k)
            })
        };
        println!(
            "\nSummary: the program's own work on an A hit {} ns (target <= 60), {} ns alone; under load \
             {loaded:.0} ns a packet, {:.2} x its unloaded figure (target <= 1.3); CPU per answer {:.2} x \
             the reflector's (target <= 1.05), {} and {}; answered {:.1} % of what was \
             sent; {} answers grown at the tail (target 0)",
            kernel_a_hit.work,
            kernel_a_hit.own,
            loaded / kernel_a_hit.own as f64,
            ours.cpu_ns_per_answer() / reflector.cpu_ns_per_answer(),
            against(knot_xdp, "knotd XDP mode"),
            against(knot_udp, "knotd kernel UDP"),
            (1.0 - ours.load.loss()) * 100.0,
            ours.fallbacks.unwrap_or(f64::NAN)
        );
    }
    big_answer();
}

/// Answered/s, loss, CPU ns per answer, and the rate and CPU against knotd's (`knot`: answers/s
/// and ns per answer, if knotd was measured), as the userspace tables show them.
fn against_knot(m: &Outcome, knot: Option<(f64, f64)>) -> [String; 5] {
    let ratio = |f: &dyn Fn((f64, f64)) -> f64| knot.map_or("-".into(), |k| format!("{:.2}", f(k)));
    [
        cell(m, |m| format!("{:.0}", m.load.answered_per_second())),
        cell(m, |m| format!("{:.1} %", m.load.loss() * 100.0)),
        cell(m, |m| format!("{:.0}", m.cpu_ns_per_answer())),
        cell(m, |m| {
            ratio(&|(rate, _)| m.load.answered_per_second() / rate)
        }),
        cell(m, |m| ratio(&|(_, cpu)| m.cpu_ns_per_answer() / cpu)),
    ]
}

/// knotd's answers/s and CPU ns per answer, from the measured rows.
fn knot_figures(rows: &[(Kind, Outcome)]) -> Option<(f64, f64)> {
    rows.iter()
        .find(|(k, _)| *k == Kind::KnotUdp)
        .and_then(|(_, m)| m.as_ref().ok())
        .map(|m| (m.load.answered_per_second(), m.cpu_ns_per_answer()))
}

/// Nodes of the big answer's fleet.
const BIG_FLEET: usize = 150;

/// One name with the A records of a 150-node fleet (2,450 bytes of answer), answered by the
/// agent (XDP attached: it passes the set up; userspace sends it from its cache) and by knotd
/// (kernel UDP, `udp-max-payload 8192`), under dnsperf with EDNS.
fn big_answer() {
    let addresses: Vec<String> = (0..BIG_FLEET)
        .map(|i| format!("198.18.{}.{}", 1 + i / 250, 1 + i % 250))
        .collect();
    let records = format!(
        "zones:\n  - name: bench.example\n    records:\n      fleet: [{}]\n",
        addresses.join(", ")
    );
    let snapshot = file::parse(&records, "big answer".as_ref()).expect("a valid zone");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let dir = TempDir::new("bench-big");
    let queries = dir.write("queries.txt", "fleet.bench.example A\n");
    let seconds = 5;
    let measured: Vec<(Kind, Outcome)> = [Kind::HostportXdp, Kind::KnotUdp]
        .into_iter()
        .map(|kind| {
            let m = measure(kind, &records, &table, |link| {
                let load =
                    load::dnsperf_edns(&link.client_ns, link.server.ipv4, PORT, &queries, seconds);
                answered(load, "dnsperf")
            });
            (kind, m)
        })
        .collect();
    let knot = knot_figures(&measured);
    let rows: Vec<Vec<String>> = measured
        .iter()
        .map(|(kind, m)| {
            let mut row = vec![kind.label().to_owned()];
            row.extend(against_knot(m, knot));
            row
        })
        .collect();
    print_table(
        &format!(
            "Big answer: one name of {BIG_FLEET} A records (2,450 bytes), dnsperf -e (EDNS, 4096 offered), \
             {seconds} s; responder on CPU {RESPONDER_CPU}"
        ),
        &[
            "responder",
            "answered/s",
            "loss",
            "CPU ns/answer",
            "rate vs knotd",
            "CPU vs knotd",
        ],
        &rows,
    );
    print_not_measured(measured.iter().map(|(k, m)| (k.label().to_owned(), m)));
}

fn userspace() {
    let (records, names) = bench::zone(1000);
    let snapshot = file::parse(&records, "bench zone".as_ref()).expect("a valid zone");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let dir = TempDir::new("bench-queries");
    let queries = dir.write("queries.txt", &bench::query_file(&names, "A"));
    let seconds = 5;
    let kinds = [Kind::HostportUserspace, Kind::KnotUdp, Kind::Nsd];
    let mut rows = Vec::new();
    let mut not_measured = Vec::new();
    for (generator, mode, clients) in [
        ("dnsperf UDP", "udp", 1u32),
        ("dnsperf TCP, 100 connections", "tcp", 100),
        ("kxdpgun UDP", "xdp", 0),
    ] {
        let measured: Vec<(Kind, Outcome)> = kinds
            .into_iter()
            .map(|kind| {
                let m = measure(kind, &records, &table, |link| {
                    if mode == "xdp" {
                        kxdpgun_load(link, &queries, 1_000_000, seconds)
                    } else {
                        let load = load::dnsperf(
                            &link.client_ns,
                            link.server.ipv4,
                            PORT,
                            &queries,
                            mode,
                            clients,
                            seconds,
                        );
                        answered(load, "dnsperf")
                    }
                });
                (kind, m)
            })
            .collect();
        let knot = knot_figures(&measured);
        for (kind, m) in measured {
            let mut row = vec![generator.to_owned(), kind.label().to_owned()];
            row.extend(against_knot(&m, knot));
            rows.push(row);
            not_measured.push((format!("{generator}, {}", kind.label()), m));
        }
    }
    print_table(
        &format!(
            "Userspace servers, {seconds} s per run, 1000 names x 3 A; responder on CPU {RESPONDER_CPU}; {}",
            system::cpu_description()
        ),
        &[
            "load",
            "responder",
            "answered/s",
            "loss",
            "CPU ns/answer",
            "rate vs knotd",
            "CPU vs knotd",
        ],
        &rows,
    );
    print_not_measured(not_measured.iter().map(|(label, m)| (label.clone(), m)));
}
