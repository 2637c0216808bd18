//! The kernel table while it changes: every answer the XDP program gives equals, byte for byte,
//! the userspace server's answer from one of the tables that were current while it ran; nothing
//! is answered before the first complete table; what does not fit is left to userspace; a name
//! whose index way holds another name is passed.
//!
//! Queries run through the real program (BPF_PROG_TEST_RUN) from a thread on every CPU while a
//! writer changes the table as fast as it can. The writer reuses a generation as soon as no run
//! reads it (per-CPU reader counts), so the torture also runs with readers held inside their read
//! section (the test bed's build) and the generation left poisoned until the catch-up: a correct
//! writer waits them out, and a writer that does not wait is caught.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use aya::maps::{Map, MapData};
use hickory_proto::rr::Name;
use hostport_dns::xdp::{hostset::HostAddresses, shared::SharedArray, writer::TestHooks};
use hostport_dns_common::{
    counters::{Counter, Event},
    generation::{Capacity, slot},
    hash::name_hash,
    index::{Bucket, candidates},
    limits::INDEX_WAYS,
    maps,
};
use hostport_dns_core::{
    answer::respond,
    dns::{WireName, message::Transport},
    records::{RecordData, SourceRecord},
    table::RecordTable,
    zone::ZoneSpec,
};
use hostport_dns_tests::{
    Rng,
    bench::system,
    packet::{Frame, QueryBuilder, parse_checked, try_parse},
    require_root,
    xdp::{Program, XDP_PASS, XDP_TX, run_once},
};

const SERVER_A: &str = "198.18.0.1";
const SERVER_B: &str = "198.18.0.2";
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const RCODE_NXDOMAIN: u8 = 3;

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("a name")
}

/// The zones the writer adds and removes, and the names that may exist in each.
const ZONES: [&str; 3] = ["t0.example.", "t1.example.", "t2.example."];
const NAMES_PER_ZONE: usize = 12;

fn owner(zone: &str, i: usize) -> String {
    // Every third name sits below an empty non-terminal, which comes and goes with it.
    if i.is_multiple_of(3) {
        format!("x.e{i}.{zone}")
    } else {
        format!("n{i}.{zone}")
    }
}

/// One state of the world the writer publishes: which zones, which records, which addresses
/// are this host's.
struct State {
    table: RecordTable,
    local: BTreeSet<IpAddr>,
}

fn random_state(rng: &mut Rng) -> State {
    let mut zones = vec![ZoneSpec::with_defaults(name(ZONES[0]))];
    for apex in &ZONES[1..] {
        if rng.below(4) != 0 {
            zones.push(ZoneSpec::with_defaults(name(apex)));
        }
    }
    let mut records = Vec::new();
    for zone in &zones {
        let apex = zone.apex.to_ascii();
        for i in 0..NAMES_PER_ZONE {
            if rng.below(3) == 0 {
                continue;
            }
            let owner = WireName::from_name(&name(&owner(&apex, i)));
            // A, AAAA or both, 1 to 4 of each: positive answers, NODATA and NXDOMAIN all change.
            let kinds = rng.below(3);
            for k in 0..=rng.below(4) {
                let k = k as u8;
                let host = rng.below(200) as u8 + 1;
                if kinds != 1 {
                    records.push(SourceRecord {
                        name: owner.clone(),
                        ttl: None,
                        data: RecordData::A([198, 18, 100 + k, host].into()),
                    });
                }
                if kinds != 0 {
                    records.push(SourceRecord {
                        name: owner.clone(),
                        ttl: None,
                        data: RecordData::Aaaa(
                            format!("2001:db8::{k}:{host}").parse().expect("v6"),
                        ),
                    });
                }
            }
        }
    }
    let (table, warnings) = RecordTable::compile(&zones, &records);
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut local = BTreeSet::from([SERVER_A.parse().expect("v4")]);
    if rng.below(2) == 0 {
        local.insert(SERVER_B.parse().expect("v4"));
    }
    State { table, local }
}

/// Every name a state can have (the writer refreshes them all: a superset of what changed).
fn every_name() -> Vec<WireName> {
    let mut names = Vec::new();
    for zone in ZONES {
        names.push(WireName::from_name(&name(zone)));
        for i in 0..NAMES_PER_ZONE {
            let full = name(&owner(zone, i));
            names.push(WireName::from_name(&full));
            names.push(WireName::from_name(&full.base_name()));
        }
    }
    names.sort();
    names.dedup();
    names
}

struct Probe {
    frame: Vec<u8>,
    dns: Vec<u8>,
    dst: IpAddr,
    qname: Name,
}

/// Queries for every name that may exist, a name below each (NXDOMAIN), the apexes and a name
/// outside every zone, of type A and AAAA, to both addresses.
fn probes() -> Vec<Probe> {
    let mut names: Vec<String> = Vec::new();
    for zone in ZONES {
        names.push(zone.to_owned());
        names.push(format!("missing.{zone}"));
        for i in 0..NAMES_PER_ZONE {
            names.push(owner(zone, i));
        }
    }
    names.push("elsewhere.test.".into());
    let mut probes = Vec::new();
    for dst in [SERVER_A, SERVER_B] {
        for qname in &names {
            for qtype in [TYPE_A, TYPE_AAAA] {
                // Mixed case: the answer repeats the question as asked.
                let asked = if qtype == TYPE_A {
                    qname.to_uppercase()
                } else {
                    qname.clone()
                };
                let dns = QueryBuilder::new(&asked, qtype).edns(1232, false).bytes();
                probes.push(Probe {
                    frame: Frame::v4(dst).build(&dns),
                    dns,
                    dst: dst.parse().expect("v4"),
                    qname: name(qname),
                });
            }
        }
    }
    probes
}

/// Per probe: the DNS answer the kernel must send, or `None` for a pass.
type Expectation = Vec<Option<Vec<u8>>>;

/// What each probe must get from the kernel in one state: the userspace answer's bytes, or a
/// pass (not this host, or no zone of the state holds the name).
fn expected(state: &State, probes: &[Probe]) -> Expectation {
    probes
        .iter()
        .map(|probe| {
            if !state.local.contains(&probe.dst) || state.table.zone_for(&probe.qname).is_none() {
                return None;
            }
            let answer =
                respond(&probe.dns, Some(&state.table), Transport::Udp).expect("userspace answers");
            Some(answer.bytes)
        })
        .collect()
}

/// The published generations' expectations, and the counters that bracket a run: a run that
/// began after `published` reached `lo` and ended before `pending` passed `hi` read one of the
/// generations `lo..=hi`.
struct History {
    expected: RwLock<Vec<Arc<Expectation>>>,
    pending: AtomicU64,
    published: AtomicU64,
    done: AtomicBool,
    /// Mismatches the readers found so far: the writer reads it to know whether a run that
    /// must catch a broken writer has.
    mismatches: AtomicU64,
}

#[derive(Default, Debug)]
struct Tally {
    runs: u64,
    answered: u64,
    passed: u64,
    /// Passes where every current generation answers: allowed only to runs that met a switch
    /// between their two reads of the active generation (the program counts those).
    unexpected_passes: u64,
    mismatches: u64,
    first_mismatch: Option<String>,
}

/// The answering program of a loaded object.
fn answering(ebpf: &aya::Ebpf) -> &aya::programs::Xdp {
    ebpf.program(hostport_dns_common::maps::PROGRAM)
        .expect("the program")
        .try_into()
        .expect("XDP")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs every probe over and over until the writer is done, checking each result against the
/// generations that were current while it ran.
fn read_while_changing(
    programs: &[&aya::programs::Xdp],
    answering: &AtomicUsize,
    probes: &[Probe],
    history: &History,
) -> Tally {
    let mut tally = Tally::default();
    while !history.done.load(Ordering::SeqCst) {
        for (i, probe) in probes.iter().enumerate() {
            let lo = history.published.load(Ordering::SeqCst);
            // Which program answers, read after `lo` as a packet meets the program on the link
            // after whatever was published before it arrived: a program replaced since keeps the
            // table it had, which was current at `lo` or later.
            let program = programs[answering.load(Ordering::SeqCst)];
            let (verdict, out, _) = run_once(program, &probe.frame);
            let hi = history.pending.load(Ordering::SeqCst);
            let candidates: Vec<Option<Vec<u8>>> = {
                let expected = history.expected.read().unwrap_or_else(|e| e.into_inner());
                (lo..=hi)
                    .filter_map(|g| expected.get(g as usize).map(|e| e[i].clone()))
                    .collect()
            };
            tally.runs += 1;
            let fine = match verdict {
                XDP_TX => {
                    tally.answered += 1;
                    // A broken writer can make the kernel send garbage: a mismatch, not a panic.
                    try_parse(&out).is_ok_and(|parsed| {
                        candidates
                            .iter()
                            .any(|c| c.as_deref() == Some(parsed.dns.as_slice()))
                    })
                }
                XDP_PASS => {
                    tally.passed += 1;
                    if out == probe.frame && candidates.iter().all(Option::is_some) {
                        tally.unexpected_passes += 1;
                        true
                    } else {
                        out == probe.frame && candidates.iter().any(Option::is_none)
                    }
                }
                other => panic!("verdict {other}"),
            };
            if !fine {
                tally.mismatches += 1;
                history.mismatches.fetch_add(1, Ordering::Relaxed);
                tally.first_mismatch.get_or_insert_with(|| {
                    format!(
                        "probe {i} ({} to {}), generations {lo}..={hi}, verdict {verdict}: {}",
                        probe.qname,
                        probe.dst,
                        hex(&out)
                    )
                });
            }
        }
    }
    tally
}

/// What one torture run saw.
struct Tortured {
    runs: u64,
    answered: u64,
    passed: u64,
    mismatches: u64,
    first_mismatch: Option<String>,
    unexpected_passes: u64,
    /// Runs that passed because the active generation changed between their two reads of it.
    races: u64,
    generations: u64,
    zone_switches: u64,
    local_switches: u64,
    /// Publications whose wait for readers saw one still inside.
    waits_past_readers: u64,
    /// Times the table moved to a program with maps of another size.
    resizes: u64,
    /// Publications that placed names a change found no free entry for.
    follow_ups: u64,
}

/// Capacities the torture's table moves between, as the agent's does when the names served
/// grow and shrink: a program of each, loaded up front, its maps written whole before it answers.
const SIZES: [Capacity; 3] = [
    Capacity::for_names(1024),
    Capacity::for_names(1536),
    Capacity::for_names(2048),
];

/// Capacities that hold the torture's names as a rule (at most 51: three zones of an apex, twelve names
/// and four empty non-terminals) but not twice over: a change of most names finds no free entry
/// for some of them, which pass until a follow-up publication places them.
const TIGHT: [Capacity; 2] = [Capacity::of([34, 26, 4]), Capacity::of([40, 28, 6])];

/// Publications between two moves to another size.
const RESIZE_EVERY: u64 = 97;

/// How long a torture run may go on past its seconds to do what its test asserts: a loaded
/// machine publishes fewer generations a second, so the run counts work, not time.
const OVERTIME: Duration = Duration::from_secs(180);

/// What a torture run has done so far, for its test's `enough`.
struct Progress {
    generations: u64,
    resizes: u64,
    zone_switches: u64,
    local_switches: u64,
    follow_ups: u64,
    mismatches: u64,
}

impl Progress {
    /// Enough for [`assert_sound`]: every kind of change made, and the table moved twice.
    fn covers_every_change(&self) -> bool {
        self.generations > 2 * RESIZE_EVERY
            && self.resizes >= 2
            && self.zone_switches > 0
            && self.local_switches > 0
    }
}

/// Runs the writer against a reader on every CPU for `seconds`, and then for as long as
/// `enough` says it has not done what its test asserts (at most [`OVERTIME`] more): a program
/// loaded from `object` whose runs stay `hold` spin iterations in their read section, a writer
/// with `hooks`, the table moving between the capacities `sizes`.
fn torture(
    object: &[u8],
    hold: u32,
    hooks: TestHooks,
    seconds: u64,
    sizes: &[Capacity],
    enough: fn(&Progress) -> bool,
) -> Tortured {
    let probes = probes();
    let names = every_name();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let first = random_state(&mut rng);
    let local: Vec<IpAddr> = first.local.iter().copied().collect();
    // Small tables: a writer that poisons whole generations does not take long.
    let mut programs: Vec<Program> = sizes
        .iter()
        .map(|capacity| {
            let mut program = Program::holding_readers(object, &local, *capacity, hold);
            program.writer.set_test_hooks(hooks);
            program
        })
        .collect();
    programs[0]
        .writer
        .write_table(&first.table)
        .expect("the first table");
    let history = History {
        expected: RwLock::new(vec![Arc::new(expected(&first, &probes))]),
        pending: AtomicU64::new(0),
        published: AtomicU64::new(0),
        done: AtomicBool::new(false),
        mismatches: AtomicU64::new(0),
    };
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let last_call = deadline + OVERTIME;
    let max_generations = 4000u64;
    let (mut xdps, mut writers, mut counters) = (Vec::new(), Vec::new(), Vec::new());
    for program in programs.iter_mut() {
        xdps.push(answering(&program.ebpf));
        writers.push(&mut program.writer);
        counters.push(&program.counters);
    }
    let active = AtomicUsize::new(0);
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    thread::scope(|scope| {
        let readers: Vec<_> = (0..cpus)
            .map(|cpu| {
                let (probes, history, xdps, active) = (&probes, &history, &xdps, &active);
                scope.spawn(move || {
                    system::pin_current_thread(cpu);
                    read_while_changing(xdps, active, probes, history)
                })
            })
            .collect();
        let mut current = first;
        let (mut generation, mut zone_switches, mut local_switches, mut waits_past_readers) =
            (0u64, 0u64, 0u64, 0u64);
        let (mut resizes, mut follow_ups) = (0u64, 0u64);
        let mut next_resize = RESIZE_EVERY;
        while generation < max_generations {
            let now = Instant::now();
            let progress = Progress {
                generations: generation,
                resizes,
                zone_switches,
                local_switches,
                follow_ups,
                mismatches: history.mismatches.load(Ordering::Relaxed),
            };
            if now >= last_call || (now >= deadline && enough(&progress)) {
                break;
            }
            // Now and then, the table moves to another size: the next program's maps get the
            // current table whole, then it answers in place of the one answering (which keeps
            // its table, never written again while it is not the one answering).
            if generation >= next_resize {
                next_resize += RESIZE_EVERY;
                let next = (resizes as usize + 1) % writers.len();
                let writer = &mut writers[next];
                writer
                    .write_host(HostAddresses::answering(current.local.iter().copied()))
                    .expect("the addresses");
                writer.write_table(&current.table).expect("a whole table");
                active.store(next, Ordering::SeqCst);
                resizes += 1;
            }
            let writer = &mut writers[active.load(Ordering::SeqCst)];
            let mut next = random_state(&mut rng);
            // Half the steps change only the records or only the addresses.
            let change = rng.below(4);
            if change == 0 {
                next.local = current.local.clone();
            }
            let table_changed = change != 1;
            if !table_changed {
                next.table = current.table.clone();
            }
            let zones_changed = next.table.zones().len() != current.table.zones().len()
                || next
                    .table
                    .zones()
                    .iter()
                    .zip(current.table.zones())
                    .any(|(a, b)| a.spec.apex != b.spec.apex);
            let local_changed = next.local != current.local;
            // Records and addresses are separate generations: one switch each.
            let mut steps = Vec::new();
            if local_changed {
                let state = State {
                    table: current.table.clone(),
                    local: next.local.clone(),
                };
                steps.push((state, true));
            }
            if table_changed {
                let state = State {
                    table: next.table.clone(),
                    local: next.local.clone(),
                };
                steps.push((state, false));
            }
            for (state, addresses_only) in steps {
                let expectation = Arc::new(expected(&state, &probes));
                generation += 1;
                history
                    .expected
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(expectation);
                history.pending.store(generation, Ordering::SeqCst);
                let stats = if addresses_only {
                    writer
                        .write_host(HostAddresses::answering(state.local.iter().copied()))
                        .map(|switched| switched.expect("new addresses switch generations"))
                } else {
                    writer.write_names(&state.table, &names)
                }
                .expect("a publication");
                if stats.waited == Some(hostport_dns::xdp::writer::Waited::GracePeriod) {
                    waits_past_readers += 1;
                }
                follow_ups += stats.follow_ups as u64;
                history.published.store(generation, Ordering::SeqCst);
            }
            zone_switches += u64::from(zones_changed);
            local_switches += u64::from(local_changed);
            current = next;
        }
        history.done.store(true, Ordering::SeqCst);
        let tallies: Vec<Tally> = readers
            .into_iter()
            .map(|r| r.join().expect("a reader"))
            .collect();
        let sum = |f: fn(&Tally) -> u64| tallies.iter().map(f).sum::<u64>();
        let tortured = Tortured {
            runs: sum(|t| t.runs),
            answered: sum(|t| t.answered),
            passed: sum(|t| t.passed),
            mismatches: sum(|t| t.mismatches),
            first_mismatch: tallies.iter().find_map(|t| t.first_mismatch.clone()),
            unexpected_passes: sum(|t| t.unexpected_passes),
            races: counters
                .iter()
                .map(|c| c.event(Event::GenerationRace))
                .sum(),
            generations: generation,
            zone_switches,
            local_switches,
            waits_past_readers,
            resizes,
            follow_ups,
        };
        println!(
            "torture (hold {hold}, {hooks:?}): {} queries on {cpus} CPUs ({} answered, {} passed), \
             {} generations ({} with other zones, {} with other addresses, {} waits fell back to \
             a grace period, {} moves to another size, {} follow-ups), {} mismatches, {} passes for a \
             switch between two reads of the active generation ({} counted by the program)",
            tortured.runs,
            tortured.answered,
            tortured.passed,
            tortured.generations,
            tortured.zone_switches,
            tortured.local_switches,
            tortured.waits_past_readers,
            tortured.resizes,
            tortured.follow_ups,
            tortured.mismatches,
            tortured.unexpected_passes,
            tortured.races
        );
        tortured
    })
}

/// The checks every torture run that must be right makes.
fn assert_sound(tortured: &Tortured) {
    assert!(
        tortured.generations > 50,
        "the writer made too few generations"
    );
    assert!(
        tortured.answered > 0 && tortured.passed > 0,
        "both verdicts were exercised"
    );
    assert!(tortured.zone_switches > 0 && tortured.local_switches > 0);
    assert!(tortured.resizes > 0, "the table changed size");
    assert_eq!(
        tortured.mismatches, 0,
        "first mismatch: {:?}",
        tortured.first_mismatch
    );
    assert!(
        tortured.unexpected_passes <= tortured.races,
        "{} passes where an answer was due, {} runs met a switch",
        tortured.unexpected_passes,
        tortured.races
    );
}

#[test]
fn every_answer_while_the_table_changes_is_the_answer_of_a_current_generation() {
    require_root();
    let tortured = torture(
        hostport_dns::EBPF_OBJECT,
        0,
        TestHooks::default(),
        6,
        &SIZES,
        Progress::covers_every_change,
    );
    assert_sound(&tortured);
}

/// Spin iterations the test bed's program stays in its read section: tens of microseconds, so
/// that runs are inside a generation when the writer switches away from it.
const HOLD: u32 = 16_384;

/// How long a poisoned generation stays poisoned before the catch-up repairs it.
const POISON: Duration = Duration::from_micros(300);

/// A writer that poisons what it leaves until the catch-up, and waits for readers.
const POISONING: TestHooks = TestHooks {
    poison: Some(POISON),
    skip_wait: false,
};

#[test]
fn the_writer_waits_out_runs_held_in_the_generation_it_left() {
    require_root();
    let tortured = torture(
        hostport_dns::TESTBED_OBJECT,
        HOLD,
        POISONING,
        4,
        &SIZES,
        Progress::covers_every_change,
    );
    assert_sound(&tortured);
}

/// Entries are written copy-on-write, into slots no index refers to: with room for the names
/// but not twice over, a change of most of them runs out of free slots. The names it could not
/// place pass (userspace answers them) until a follow-up publication places them in the slots
/// the catch-up freed; with runs held in the generation left and what it freed poisoned until
/// the catch-up, no answer is ever wrong. (That the follow-up places them all is
/// `a_change_of_every_name_of_a_full_table_is_placed_before_the_publication_returns`.)
#[test]
fn changes_larger_than_the_free_entries_are_followed_up_and_never_answer_wrong() {
    require_root();
    let tortured = torture(
        hostport_dns::TESTBED_OBJECT,
        HOLD,
        POISONING,
        4,
        &TIGHT,
        |p| p.covers_every_change() && p.follow_ups > 0,
    );
    assert!(tortured.generations > 50, "too few generations");
    assert!(tortured.resizes > 0 && tortured.zone_switches > 0);
    assert!(tortured.follow_ups > 0, "no change ran out of free entries");
    assert!(tortured.answered > 0);
    assert_eq!(
        tortured.mismatches, 0,
        "first mismatch: {:?}",
        tortured.first_mismatch
    );
}

#[test]
fn a_writer_that_does_not_wait_for_readers_is_caught() {
    require_root();
    let hooks = TestHooks {
        poison: Some(POISON),
        skip_wait: true,
    };
    // Enough once a mismatch is seen: a sound run of the same length would have none.
    let tortured = torture(hostport_dns::TESTBED_OBJECT, HOLD, hooks, 4, &SIZES, |p| {
        p.mismatches > 0
    });
    assert!(
        tortured.mismatches > 0,
        "a writer that rewrites what runs still read must be caught ({} generations)",
        tortured.generations
    );
}

/// 100k names under one zone.
fn big_table(names: usize) -> RecordTable {
    let zone = ZoneSpec::with_defaults(name("big.example."));
    let records: Vec<SourceRecord> = (0..names)
        .map(|i| {
            SourceRecord::new(
                &name(&format!("h{i}.big.example.")),
                None,
                RecordData::A([198, 18, (i >> 8) as u8 % 250 + 1, i as u8].into()),
            )
        })
        .collect();
    RecordTable::compile(&[zone], &records).0
}

#[test]
fn no_name_of_the_first_table_is_nxdomain_while_it_is_written() {
    require_root();
    let table = big_table(100_000);
    let mut program = Program::unwritten(&[SERVER_A.parse().expect("v4")], Capacity::DEFAULT);
    let frames: Vec<Vec<u8>> = (0..200)
        .map(|i| {
            let dns = QueryBuilder::new(&format!("h{}.big.example", i * 499), TYPE_A).bytes();
            Frame::v4(SERVER_A).build(&dns)
        })
        .collect();
    let done = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let Program { ebpf, writer, .. } = &mut program;
    let xdp = answering(ebpf);
    let (passed, answered, nxdomain) = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let (mut passed, mut answered, mut nxdomain) = (0u64, 0u64, 0u64);
            loop {
                let finished = done.load(Ordering::SeqCst);
                for (i, frame) in frames.iter().enumerate() {
                    if i == 1 {
                        started.store(true, Ordering::SeqCst);
                    }
                    let (verdict, out, _) = run_once(xdp, frame);
                    if verdict == XDP_TX {
                        answered += 1;
                        let dns = parse_checked(&out).dns;
                        if dns[3] & 0x0f == RCODE_NXDOMAIN {
                            nxdomain += 1;
                        }
                    } else {
                        passed += 1;
                    }
                }
                if finished {
                    return (passed, answered, nxdomain);
                }
            }
        });
        // Let the reader see the empty table first (a loaded machine may start it late).
        while !started.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1));
        }
        writer.write_table(&table).expect("write 100k names");
        done.store(true, Ordering::SeqCst);
        reader.join().expect("the reader")
    });
    println!("first fill: {passed} passed, {answered} answered, {nxdomain} NXDOMAIN");
    assert!(passed > 0, "queries ran before the table was complete");
    assert!(answered >= frames.len() as u64, "queries ran after it");
    assert_eq!(nxdomain, 0);
    assert!(program.counters.get(Counter::PassNoTable) >= passed);
}

fn a_record(owner: &str, address: [u8; 4]) -> SourceRecord {
    SourceRecord::new(&name(owner), None, RecordData::A(address.into()))
}

#[test]
fn zones_beyond_the_capacity_are_left_to_userspace_whole() {
    require_root();
    let zones = [
        ZoneSpec::with_defaults(name("a.example.")),
        ZoneSpec::with_defaults(name("b.example.")),
    ];
    let mut records: Vec<SourceRecord> = (0..10)
        .map(|i| a_record(&format!("h{i}.a.example."), [198, 18, 1, i]))
        .collect();
    records.extend((0..60).map(|i| a_record(&format!("h{i}.b.example."), [198, 18, 2, i])));
    let (table, _) = RecordTable::compile(&zones, &records);
    // 66 entries (64 small ones, one of each larger kind): a's 11 names fit, b's 61 do not.
    let capacity = Capacity::of([64, 1, 1]);
    let mut program =
        Program::load_table(table.clone(), &[SERVER_A.parse().expect("v4")], capacity);
    let query = |owner: &str| {
        let dns = QueryBuilder::new(owner, TYPE_A).bytes();
        let (verdict, out, _) = program.run(&Frame::v4(SERVER_A).build(&dns));
        (verdict, out, dns)
    };
    // The zone that fits is answered by XDP, as userspace would.
    for owner in ["h3.a.example", "missing.a.example"] {
        let (verdict, out, dns) = query(owner);
        assert_eq!(verdict, XDP_TX, "{owner}");
        let userspace = respond(&dns, Some(&table), Transport::Udp).expect("an answer");
        assert_eq!(hex(&parse_checked(&out).dns), hex(&userspace.bytes));
    }
    // The one that does not is passed whole: its names and its missing names alike, never an
    // NXDOMAIN from the kernel for a name that exists.
    let before = program.counters.get(Counter::PassNotInZone);
    for owner in [
        "h3.b.example",
        "h59.b.example",
        "missing.b.example",
        "b.example",
    ] {
        let (verdict, _, _) = query(owner);
        assert_eq!(verdict, XDP_PASS, "{owner}");
    }
    assert_eq!(program.counters.get(Counter::PassNotInZone), before + 4);
    let stats = program.writer.write_names(&table, &[]).expect("a write");
    assert_eq!(stats.names_left_out, 61, "b's 60 names and its apex");
    assert_eq!(stats.names_held, 11);
}

/// A change of every name of a table that fills most of its entries finds free slots for a
/// few of them: the others pass to userspace until the follow-up publication places them, in
/// the slots the change freed, before the publication returns. The kernel then answers every
/// name with its new address, as userspace does.
#[test]
fn a_change_of_every_name_of_a_full_table_is_placed_before_the_publication_returns() {
    require_root();
    let zone = ZoneSpec::with_defaults(name("f.example."));
    let table = |third: u8| {
        let records: Vec<SourceRecord> = (0..100u8)
            .map(|i| a_record(&format!("h{i}.f.example."), [198, 18, third, i]))
            .collect();
        RecordTable::compile(std::slice::from_ref(&zone), &records).0
    };
    // 101 names (the apex too) in 122 entries: 21 free.
    let capacity = Capacity::of([120, 1, 1]);
    let mut program = Program::load_table(table(5), &[SERVER_A.parse().expect("v4")], capacity);
    let next = table(6);
    let names: Vec<WireName> = next.nodes().map(|(name, _)| name.clone()).collect();
    let stats = program
        .writer
        .write_names(&next, &names)
        .expect("a publication");
    assert_eq!(stats.follow_ups, 1, "{stats:?}");
    assert_eq!(
        (stats.names_held, stats.names_left_out),
        (101, 0),
        "{stats:?}"
    );
    for i in 0..100 {
        let dns = QueryBuilder::new(&format!("h{i}.f.example"), TYPE_A).bytes();
        let (verdict, out, _) = program.run(&Frame::v4(SERVER_A).build(&dns));
        assert_eq!(verdict, XDP_TX, "h{i}");
        let userspace = respond(&dns, Some(&next), Transport::Udp).expect("an answer");
        assert_eq!(hex(&parse_checked(&out).dns), hex(&userspace.bytes), "h{i}");
    }
}

/// A name whose kind of entry is full takes the next larger kind, and is answered from it as
/// from its own (a zone whose names the entries cannot hold at all is left to userspace whole,
/// as `zones_beyond_the_capacity_are_left_to_userspace_whole` shows).
#[test]
fn names_whose_entries_are_full_take_larger_ones() {
    require_root();
    let zone = ZoneSpec::with_defaults(name("w.example."));
    let records: Vec<SourceRecord> = (0..6)
        .map(|i| a_record(&format!("h{i}.w.example."), [198, 18, 4, i]))
        .collect();
    let (table, _) = RecordTable::compile(&[zone], &records);
    // Seven names (the apex too), all of the small kind: two small entries, one name entry and
    // four big ones hold them.
    let capacity = Capacity::of([2, 1, 4]);
    let mut program =
        Program::load_table(table.clone(), &[SERVER_A.parse().expect("v4")], capacity);
    let mut answered = 0;
    let owners = (0..6)
        .map(|i| format!("h{i}.w.example"))
        .chain(["w.example".to_owned()]);
    for owner in owners {
        let dns = QueryBuilder::new(&owner, TYPE_A).bytes();
        let (verdict, out, _) = program.run(&Frame::v4(SERVER_A).build(&dns));
        assert_eq!(verdict, XDP_TX, "{owner}");
        let userspace = respond(&dns, Some(&table), Transport::Udp).expect("an answer");
        assert_eq!(
            hex(&parse_checked(&out).dns),
            hex(&userspace.bytes),
            "{owner}"
        );
        answered += 1;
    }
    assert_eq!(answered, 7);
    let stats = program.writer.write_names(&table, &[]).expect("a write");
    assert_eq!((stats.names_held, stats.names_left_out), (7, 0));
}

#[test]
fn an_index_way_leading_to_another_name_is_passed_not_answered() {
    require_root();
    let zone = ZoneSpec::with_defaults(name("c.example."));
    let records = [
        a_record("one.c.example.", [198, 18, 3, 1]),
        a_record("two.c.example.", [198, 18, 3, 2]),
    ];
    let (table, _) = RecordTable::compile(&[zone], &records);
    let program = Program::load_table(
        table.clone(),
        &[SERVER_A.parse().expect("v4")],
        Capacity::DEFAULT,
    );
    let seed = program.writer.seed();
    let generation = program.writer.active().expect("a generation is active");
    let capacity = Capacity::DEFAULT;
    let data = MapData::from_id(program.map_id(maps::INDEX)).expect("the index");
    let Map::Array(data) = Map::Array(data) else {
        unreachable!()
    };
    let mut index: SharedArray<Bucket> =
        SharedArray::map(std::os::fd::AsFd::as_fd(data.fd()), 2 * capacity.buckets)
            .expect("the index, mapped");
    // The way of one points to two's entry: what a tag shared by two names looks like.
    let way_of = |index: &SharedArray<Bucket>, owner: &str| {
        let hash = name_hash(seed, WireName::from_name(&name(owner)).as_bytes());
        let (first, second, tag) = candidates(hash, capacity.buckets);
        [first, second]
            .into_iter()
            .flat_map(|b| (0..INDEX_WAYS).map(move |w| (b, w)))
            .find(|(b, w)| index.get(slot(generation, capacity.buckets, *b)).tags[*w] == tag)
            .expect("a way with the name's tag")
    };
    let (b1, w1) = way_of(&index, "one.c.example.");
    let (b2, w2) = way_of(&index, "two.c.example.");
    let two = index.get(slot(generation, capacity.buckets, b2)).refs[w2];
    let at = slot(generation, capacity.buckets, b1);
    let mut bucket = index.get(at);
    bucket.refs[w1] = two;
    index.set(at, &bucket);
    let run = |owner: &str| {
        let dns = QueryBuilder::new(owner, TYPE_A).bytes();
        let (verdict, out, _) = program.run(&Frame::v4(SERVER_A).build(&dns));
        (verdict, out, dns)
    };
    let before = program.counters.get(Counter::PassCollision);
    let (verdict, _, _) = run("one.c.example");
    assert_eq!(verdict, XDP_PASS);
    assert_eq!(program.counters.get(Counter::PassCollision), before + 1);
    let (verdict, out, dns) = run("two.c.example");
    assert_eq!(verdict, XDP_TX);
    let userspace = respond(&dns, Some(&table), Transport::Udp).expect("an answer");
    assert_eq!(hex(&parse_checked(&out).dns), hex(&userspace.bytes));
}
