//! `bench churn`: what changing the kernel table costs the answers. The XDP program answers
//! kxdpgun's queries on a veth while a writer changes names at a given rate (each change a new
//! address for one name, published in batches as generations), side by side with the same run
//! without changes.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    thread,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    programs::{Xdp, XdpMode},
};
use hickory_proto::rr::Name;
use hostport_dns::xdp::{hostset::HostAddresses, loader, writer::MapWriter};
use hostport_dns_common::{generation::Capacity, maps};
use hostport_dns_core::{
    records::{RecordData, SourceRecord},
    table::TableBuilder,
    zone::ZoneSpec,
};

use crate::{
    TempDir,
    bench::{load, print_table, query_file, responders::PORT, system},
    netns::Link,
};

/// CPU of the program's receive thread and of the writer: the node's agent shares the CPU that
/// answers.
const RESPONDER_CPU: usize = 0;
const GENERATOR_CPU: usize = 1;
/// Names the queries ask for (never changed).
const QUERIED_NAMES: usize = 1000;
/// Names the writer changes, round robin.
const CHANGED_NAMES: usize = 10_000;
/// A publication (one generation) at most this often.
const BATCH_INTERVAL: Duration = Duration::from_millis(20);

struct Run {
    rate: u64,
    answered_per_second: f64,
    loss: f64,
    cpu_ns_per_answer: f64,
    changes_per_second: f64,
    generations_per_second: f64,
    /// Writer time per change: compiling the table, and writing the kernel table.
    compile_us_per_change: f64,
    write_us_per_change: f64,
    /// From the start of each publication to its switch (the new table visible): p50, p99 µs.
    switch_us: (f64, f64),
}

/// The median and 99th percentile of `samples`.
fn p50_p99(mut samples: Vec<u64>) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64;
    (at(0.5), at(0.99))
}

fn record(owner: &str, address: [u8; 4]) -> SourceRecord {
    SourceRecord {
        name: hostport_dns_core::dns::WireName::from_name(
            &Name::from_ascii(owner).expect("a name"),
        ),
        ttl: None,
        data: RecordData::A(address.into()),
    }
}

fn changed_record(i: usize, version: u64) -> SourceRecord {
    record(
        &format!("c{i}.churn.bench.example."),
        [198, 19, (version % 250) as u8 + 1, (i % 250) as u8 + 1],
    )
}

pub fn run() {
    let seconds = 5;
    let offered = 1_000_000;
    let rates = [0u64, 1_000, 10_000, 100_000];
    let runs: Vec<Run> = rates
        .iter()
        .map(|rate| measure(*rate, seconds, offered))
        .collect();
    let still = runs.first().map_or(f64::NAN, |r| r.answered_per_second);
    let still_cpu = runs.first().map_or(f64::NAN, |r| r.cpu_ns_per_answer);
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                format!("{}", r.rate),
                format!("{:.0}", r.changes_per_second),
                format!("{:.0}", r.generations_per_second),
                format!("{:.0}", r.answered_per_second),
                format!("{:.1} %", r.loss * 100.0),
                format!("{:.2}", r.answered_per_second / still),
                format!("{:.0}", r.cpu_ns_per_answer),
                format!("{:.2}", r.cpu_ns_per_answer / still_cpu),
                format!("{:.1}", r.compile_us_per_change),
                format!("{:.1}", r.write_us_per_change),
                format!("{:.0} / {:.0}", r.switch_us.0, r.switch_us.1),
            ]
        })
        .collect();
    print_table(
        &format!(
            "XDP answers while the kernel table changes: kxdpgun on CPU {GENERATOR_CPU}, {offered} q/s offered for \
             {seconds} s over {QUERIED_NAMES} names; the writer changes {CHANGED_NAMES} other names round robin, \
             on CPU {RESPONDER_CPU} with the receive thread"
        ),
        &[
            "changes/s asked",
            "changes/s made",
            "generations/s",
            "answered/s",
            "loss",
            "vs no changes",
            "CPU ns/answer",
            "vs no changes",
            "compile µs/change",
            "kernel write µs/change",
            "switch p50 / p99 µs",
        ],
        &rows,
    );
    println!(
        "(CPU ns/answer: everything on CPU {RESPONDER_CPU}, the writer included, per answer. A change is a new \
         address for one name; a generation is one switch, carrying every change since the last. Switch: \
         from the start of a publication to the new table visible to the program (target p99 <= 500 µs); \
         the writer then waits out the runs still reading the generation it left and copies the index \
         buckets the change touched into it, which the kernel write column includes.)"
    );
}

fn measure(rate: u64, seconds: u64, offered: u64) -> Run {
    let link = Link::bare("churn");
    system::threaded_napi(&link.server_ns, &link.server.ifname);
    system::threaded_napi(&link.client_ns, &link.client.ifname);
    let (_, queried) = crate::bench::zone(QUERIED_NAMES);
    let zones = [ZoneSpec::with_defaults(
        Name::from_ascii("bench.example.").expect("a name"),
    )];
    let (mut builder, _) = TableBuilder::new(&zones);
    let fixed: Vec<SourceRecord> = (0..QUERIED_NAMES)
        .map(|i| {
            let name = format!("svc{i}.ns{}.bench.example.", i % 10);
            record(&name, [198, 18, 100 + (i / 250) as u8, (i % 250) as u8 + 1])
        })
        .collect();
    builder.add(&fixed);
    let mut current: Vec<SourceRecord> = (0..CHANGED_NAMES).map(|i| changed_record(i, 0)).collect();
    builder.add(&current);
    builder.finish();

    let ifname = link.server.ifname.clone();
    let server = link.server.ipv4;
    let mut ebpf: Ebpf = link.server_ns.run(move || {
        let mut ebpf = loader::load(PORT).expect("load the object");
        let program: &mut Xdp = ebpf
            .program_mut(maps::PROGRAM)
            .expect("the program")
            .try_into()
            .expect("an XDP program");
        program
            .attach(&ifname, XdpMode::Driver)
            .expect("attach the program");
        ebpf
    });
    let mut writer = MapWriter::new(&mut ebpf, Capacity::DEFAULT).expect("the maps");
    writer
        .write_host(HostAddresses::answering([server.parse().expect("v4")]))
        .expect("the local address");
    writer.write_table(builder.table()).expect("the table");
    for pid in system::napi_threads(&link.server.ifname) {
        system::pin(pid, RESPONDER_CPU);
    }
    let dir = TempDir::new("churn");
    let queries = dir.write("queries.txt", &query_file(&queried, "A"));
    let pin_client = link.client.ifname.clone();
    thread::spawn(move || {
        for _ in 0..20 {
            thread::sleep(Duration::from_millis(100));
            for pid in system::napi_threads(&pin_client) {
                system::pin(pid, GENERATOR_CPU);
            }
        }
    });
    thread::sleep(Duration::from_millis(200));

    let done = AtomicBool::new(false);
    let changes = AtomicU64::new(0);
    let generations = AtomicU64::new(0);
    let compile_ns = AtomicU64::new(0);
    let write_ns = AtomicU64::new(0);
    let switches = std::sync::Mutex::new(Vec::new());
    let before = system::cpu_busy_seconds(RESPONDER_CPU);
    let started = Instant::now();
    let load = thread::scope(|scope| {
        if rate > 0 {
            scope.spawn(|| {
                system::pin_current_thread(RESPONDER_CPU);
                let mut next = 0usize;
                let mut version = 0u64;
                let begin = Instant::now();
                while !done.load(Ordering::SeqCst) {
                    let tick = Instant::now();
                    // Catch up with the rate: as many changes as the time since the start asks.
                    let due = (begin.elapsed().as_secs_f64() * rate as f64) as u64;
                    let batch = due.saturating_sub(changes.load(Ordering::SeqCst));
                    let compiling = Instant::now();
                    for _ in 0..batch {
                        let i = next % CHANGED_NAMES;
                        next += 1;
                        if i == 0 {
                            version += 1;
                        }
                        let old = std::mem::replace(&mut current[i], changed_record(i, version));
                        builder.remove([&old]);
                        builder.add([&current[i]]);
                    }
                    if batch > 0 {
                        let changed = builder.finish();
                        let writing = Instant::now();
                        compile_ns
                            .fetch_add((writing - compiling).as_nanos() as u64, Ordering::SeqCst);
                        let stats = writer
                            .write_names(builder.table(), &changed)
                            .expect("write the change");
                        switches
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(stats.switch_micros);
                        write_ns.fetch_add(writing.elapsed().as_nanos() as u64, Ordering::SeqCst);
                        changes.fetch_add(batch, Ordering::SeqCst);
                        generations.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(rest) = BATCH_INTERVAL.checked_sub(tick.elapsed()) {
                        thread::sleep(rest);
                    }
                }
            });
        }
        let load = load::kxdpgun(
            &link.client_ns,
            &link.client.ifname,
            server,
            PORT,
            &queries,
            offered,
            seconds,
            GENERATOR_CPU,
        );
        done.store(true, Ordering::SeqCst);
        load
    });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = system::cpu_busy_seconds(RESPONDER_CPU) - before;
    drop(ebpf);
    Run {
        rate,
        answered_per_second: load.answered_per_second(),
        loss: load.loss(),
        cpu_ns_per_answer: if load.answered == 0 {
            f64::NAN
        } else {
            cpu * 1e9 / load.answered as f64
        },
        changes_per_second: changes.load(Ordering::SeqCst) as f64 / elapsed,
        compile_us_per_change: per_change(&compile_ns, &changes),
        write_us_per_change: per_change(&write_ns, &changes),
        generations_per_second: generations.load(Ordering::SeqCst) as f64 / elapsed,
        switch_us: p50_p99(switches.into_inner().unwrap_or_else(|e| e.into_inner())),
    }
}

fn per_change(nanos: &AtomicU64, changes: &AtomicU64) -> f64 {
    let changes = changes.load(Ordering::SeqCst);
    if changes == 0 {
        f64::NAN
    } else {
        nanos.load(Ordering::SeqCst) as f64 / 1e3 / changes as f64
    }
}
