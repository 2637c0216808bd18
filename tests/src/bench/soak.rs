//! `cargo xtask soak`: the agent under kxdpgun at its maximum (real names, with a flood slice of
//! missing names, other types and malformed queries mixed in) while 1,000 pod changes a minute go
//! through the fake API server. Every sampled answer must match the pods as they were at some
//! moment between shortly before the question and its answer; the final table must equal the
//! fake API's state; resident memory after warm-up may grow by at most 5 %. Prints the figures.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use hickory_proto::{op::Message, rr::RData};

use crate::{
    TempDir,
    agent::Agent,
    bench::{load, print_table, system},
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::{Link, NetNs},
    packet::QueryBuilder,
};

const ZONE: &str = "prod.coreha.example";
const PORT: u16 = 1053;
const PODS: usize = 1000;
const PODS_PER_NAME: usize = 10;
const NAMES: usize = PODS / PODS_PER_NAME;
/// Pod changes a minute.
const CHANGES_PER_MINUTE: u64 = 1000;
/// How long after a change an answer may still carry the state before it (propagation, with
/// room for a loaded two-core machine).
const PROPAGATION_SLACK: Duration = Duration::from_secs(2);
/// Memory is sampled this often; growth is measured after the warm-up (a fifth of the run).
const RSS_INTERVAL: Duration = Duration::from_secs(5);
/// The most resident memory may grow after the warm-up.
const MAX_RSS_GROWTH_PERCENT: f64 = 5.0;

fn pod_name(i: usize) -> String {
    format!("svc-{}.ingress.{ZONE}", i / PODS_PER_NAME)
}

fn pod(i: usize, host: Ipv4Addr) -> PodSpec {
    PodSpec::ingress(
        &format!("pod-{i}"),
        "ingress",
        &format!("svc-{}", i / PODS_PER_NAME),
        &format!("node-{i}"),
        &host.to_string(),
    )
}

/// The i-th pod's address after `version` changes (unique per pod and version).
fn address(i: usize, version: u32) -> Ipv4Addr {
    let n = (version as usize * PODS + i) % (1 << 17);
    Ipv4Addr::new(198, 18 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// What the fake API holds, and when each name took each set of addresses.
#[derive(Default)]
struct Model {
    hosts: Vec<Ipv4Addr>,
    /// Per name: (since, addresses), oldest first.
    history: BTreeMap<String, Vec<(Instant, BTreeSet<Ipv4Addr>)>>,
}

impl Model {
    fn set_of(&self, name_index: usize) -> BTreeSet<Ipv4Addr> {
        (name_index * PODS_PER_NAME..(name_index + 1) * PODS_PER_NAME)
            .map(|i| self.hosts[i])
            .collect()
    }

    fn record(&mut self, name_index: usize, at: Instant) {
        let set = self.set_of(name_index);
        let name = pod_name(name_index * PODS_PER_NAME);
        self.history.entry(name).or_default().push((at, set));
    }

    /// How long before `at` the last state equal to `seen` ended (zero: it is current; None: the
    /// name never had it).
    fn age_of(&self, name: &str, seen: &BTreeSet<Ipv4Addr>, at: Instant) -> Option<Duration> {
        let history = self.history.get(name)?;
        history
            .iter()
            .enumerate()
            .filter(|(_, (_, set))| set == seen)
            .map(|(k, _)| {
                history.get(k + 1).map_or(Duration::ZERO, |(next, _)| {
                    at.saturating_duration_since(*next)
                })
            })
            .min()
    }

    /// Whether `seen` was the name's set at some moment in [from, to].
    fn was_current(
        &self,
        name: &str,
        seen: &BTreeSet<Ipv4Addr>,
        from: Instant,
        to: Instant,
    ) -> bool {
        let Some(history) = self.history.get(name) else {
            return false;
        };
        history.iter().enumerate().any(|(k, (since, set))| {
            let until = history.get(k + 1).map(|(next, _)| *next);
            set == seen && *since <= to && until.is_none_or(|u| u >= from)
        })
    }
}

/// The A records of an answer.
fn addresses(answer: &[u8]) -> Option<BTreeSet<Ipv4Addr>> {
    let message = Message::from_vec(answer).ok()?;
    Some(
        message
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect(),
    )
}

/// The kxdpgun query file: the served names (A and AAAA), and a flood slice of one line in five:
/// missing names, types userspace answers, a name outside the zone.
fn query_file() -> String {
    let mut text = String::new();
    for n in 0..NAMES {
        let name = pod_name(n * PODS_PER_NAME);
        text.push_str(&format!("{name} A\n{name} AAAA\n"));
        if n % 2 == 0 {
            text.push_str(&format!("missing-{n}.ingress.{ZONE} A\n"));
            text.push_str(&format!("{name} TXT\n"));
            text.push_str(&format!("elsewhere-{n}.example A\n"));
        }
    }
    text
}

pub fn run() {
    let seconds: u64 = std::env::var("HPD_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let link = Link::bare("soak");
    let api = Arc::new(FakeApi::start(Some(&link.server_ns)));
    let model = Arc::new(Mutex::new(Model {
        hosts: (0..PODS).map(|i| address(i, 0)).collect(),
        ..Model::default()
    }));
    {
        let mut m = model.lock().expect("the model");
        for i in 0..PODS {
            api.apply(Kind::Pod, pod(i, address(i, 0)).to_json());
        }
        let now = Instant::now();
        for n in 0..NAMES {
            m.record(n, now);
        }
    }
    let dir = TempDir::new("soak");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n    srv: false\n",
            api.url()
        ),
    );
    let queries = dir.write("queries.txt", &query_file());
    // XDP native on the veth (kxdpgun's traffic) and generic on lo (the sampler's).
    let agent = Agent::start(
        &link.server_ns,
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--interface",
            &link.server.ifname,
            "--interface",
            "lo",
            "--xdp-mode",
            "auto",
        ],
    );
    eventually("the first full list", 120, || {
        agent.http_get("/readyz").0 == 200
    });
    let pid = agent.pid();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));

    let changes = Arc::new(AtomicU64::new(0));
    let changer = {
        let (stop, model, changes) = (stop.clone(), model.clone(), changes.clone());
        let api = api.clone();
        thread::spawn(move || {
            let pause = Duration::from_secs(60) / CHANGES_PER_MINUTE as u32;
            let mut version = vec![0u32; PODS];
            let mut c: usize = 0;
            while !stop.load(Ordering::Relaxed) {
                let i = (c * 7919) % PODS;
                version[i] += 1;
                let host = address(i, version[i]);
                {
                    // The new set may be served from the moment the API starts taking it: the
                    // state begins before the call (the agent can publish it before the call
                    // returns).
                    let mut m = model.lock().expect("the model");
                    m.hosts[i] = host;
                    let since = Instant::now();
                    api.apply(Kind::Pod, pod(i, host).to_json());
                    m.record(i / PODS_PER_NAME, since);
                }
                changes.fetch_add(1, Ordering::Relaxed);
                c += 1;
                thread::sleep(pause);
            }
        })
    };

    let samples = Arc::new(AtomicU64::new(0));
    let wrong = Arc::new(Mutex::new(Vec::<String>::new()));
    let sampler = {
        let (stop, model, samples, wrong) =
            (stop.clone(), model.clone(), samples.clone(), wrong.clone());
        let ns = link.server_ns.name.clone();
        thread::spawn(move || {
            NetNs::enter(&ns, move || {
                let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the sampler");
                socket
                    .set_read_timeout(Some(Duration::from_secs(1)))
                    .expect("timeout");
                let server: SocketAddr = "127.0.0.1:1053".parse().expect("an address");
                let mut buf = vec![0u8; 4096];
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let n = (k * 31) % NAMES;
                    k += 1;
                    let name = pod_name(n * PODS_PER_NAME);
                    let query = QueryBuilder::new(&name, 1).bytes();
                    let asked = Instant::now();
                    if socket.send_to(&query, server).is_err() {
                        continue;
                    }
                    let Ok((len, _)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    let answered = Instant::now();
                    let seen = addresses(&buf[..len]);
                    let model = model.lock().expect("the model");
                    let ok = seen.as_ref().is_some_and(|set| {
                        model.was_current(
                            &name,
                            set,
                            asked.checked_sub(PROPAGATION_SLACK).unwrap_or(asked),
                            answered,
                        )
                    });
                    samples.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        // A set the name once had is a late answer; one it never had is wrong.
                        let age = seen
                            .as_ref()
                            .and_then(|set| model.age_of(&name, set, asked));
                        let verdict = match age {
                            Some(age) => format!(
                                "late: its state ended {} ms before the question",
                                age.as_millis()
                            ),
                            None => "never the name's state".to_owned(),
                        };
                        wrong
                            .lock()
                            .expect("the list")
                            .push(format!("{name}: {verdict}: {seen:?}"));
                    }
                    drop(model);
                    thread::sleep(Duration::from_millis(20));
                }
            })
        })
    };

    let rss = Arc::new(Mutex::new(Vec::<(f64, f64)>::new()));
    let watcher = {
        let (stop, rss) = (stop.clone(), rss.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rss.lock()
                    .expect("the samples")
                    .push((started.elapsed().as_secs_f64(), system::rss_mib(pid)));
                thread::sleep(RSS_INTERVAL);
            }
        })
    };

    // The generator at its maximum for the whole run.
    let flood = load::kxdpgun(
        &link.client_ns,
        &link.client.ifname,
        link.server.ipv4,
        PORT,
        &queries,
        10_000_000,
        seconds,
        1,
    );
    stop.store(true, Ordering::Relaxed);
    for t in [changer, sampler, watcher] {
        t.join().expect("a soak thread");
    }

    // Quiet now: every name must come to the API's state.
    thread::sleep(PROPAGATION_SLACK);
    let final_mismatches = final_check(&link, &model.lock().expect("the model"));
    let rss = rss.lock().expect("the samples").clone();
    let warm = rss
        .iter()
        .find(|(t, _)| *t >= seconds as f64 / 5.0)
        .map_or(f64::NAN, |(_, m)| *m);
    let last = rss.last().map_or(f64::NAN, |(_, m)| *m);
    let peak = rss.iter().map(|(_, m)| *m).fold(f64::NAN, f64::max);
    let wrong = wrong.lock().expect("the list").clone();
    print_table(
        &format!(
            "soak: {seconds} s, kxdpgun at its maximum ({} names A/AAAA, a flood slice of missing names, TXT and out-of-zone names), {CHANGES_PER_MINUTE} pod changes a minute through the fake API server",
            NAMES
        ),
        &["figure", "value"],
        &[
            vec![
                "queries sent/s".into(),
                format!("{:.0}", flood.sent as f64 / flood.seconds),
            ],
            vec![
                "answered/s".into(),
                format!("{:.0}", flood.answered_per_second()),
            ],
            vec![
                "pod changes".into(),
                changes.load(Ordering::Relaxed).to_string(),
            ],
            vec![
                "sampled answers".into(),
                samples.load(Ordering::Relaxed).to_string(),
            ],
            vec![
                format!(
                    "sampled answers not matching the table of their time (within {} s)",
                    PROPAGATION_SLACK.as_secs()
                ),
                wrong.len().to_string(),
            ],
            vec![
                "of those, sets the name never had".into(),
                wrong
                    .iter()
                    .filter(|w| w.contains("never"))
                    .count()
                    .to_string(),
            ],
            vec![
                "names differing from the API at the end".into(),
                final_mismatches.to_string(),
            ],
            vec!["RSS after warm-up MiB".into(), format!("{warm:.1}")],
            vec![
                "RSS at the end MiB (peak)".into(),
                format!("{last:.1} ({peak:.1})"),
            ],
            vec![
                "RSS growth after warm-up".into(),
                format!("{:+.1} %", (last - warm) / warm * 100.0),
            ],
        ],
    );
    for w in wrong.iter().take(10) {
        println!("  wrong: {w}");
    }
    let growth = (last - warm) / warm * 100.0;
    let mut failures = Vec::new();
    if samples.load(Ordering::Relaxed) == 0 {
        failures.push("no sampled answer".to_owned());
    }
    if !wrong.is_empty() {
        failures.push(format!(
            "{} sampled answers not matching the table of their time",
            wrong.len()
        ));
    }
    if final_mismatches != 0 {
        failures.push(format!(
            "{final_mismatches} names differ from the API at the end (lost updates)"
        ));
    }
    // NaN (no sample after the warm-up) fails too.
    if growth.is_nan() || growth > MAX_RSS_GROWTH_PERCENT {
        failures.push(format!(
            "RSS grew {growth:+.1} % after warm-up ({warm:.1} to {last:.1} MiB; at most {MAX_RSS_GROWTH_PERCENT} %)"
        ));
    }
    assert!(failures.is_empty(), "soak failed: {}", failures.join("; "));
    println!("soak passed: 0 wrong answers, 0 lost updates, RSS growth {growth:+.1} %");
}

/// Names whose answer differs from the API's final state.
fn final_check(link: &Link, model: &Model) -> usize {
    let wanted: Vec<(String, BTreeSet<Ipv4Addr>)> = (0..NAMES)
        .map(|n| (pod_name(n * PODS_PER_NAME), model.set_of(n)))
        .collect();
    link.server_ns.run(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut buf = vec![0u8; 4096];
        wanted
            .iter()
            .filter(|(name, set)| {
                let query = QueryBuilder::new(name, 1).bytes();
                let sent = socket.send_to(&query, "127.0.0.1:1053");
                let got = sent
                    .ok()
                    .and_then(|_| socket.recv_from(&mut buf).ok())
                    .and_then(|(len, _)| addresses(&buf[..len]));
                got.as_ref() != Some(set)
            })
            .count()
    })
}
