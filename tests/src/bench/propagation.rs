//! Propagation: how fast a change in the API server reaches the wire, and what the agent's
//! memory costs, with thousands of watched pods (the fake API server, the real kube client).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::{
    TempDir,
    agent::Agent,
    bench::{print_table, system},
    clients::udp_exchange_many,
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::NetNs,
    packet::QueryBuilder,
};

const ZONE: &str = "prod.coreha.example";
/// Pods per published name (a DaemonSet-like spread: several nodes per name).
const PODS_PER_NAME: usize = 10;

/// The i-th pod: its label value and host address (unique up to 131072 pods).
fn pod(i: usize, address_offset: usize) -> PodSpec {
    let n = i + address_offset;
    let host = format!(
        "198.{}.{}.{}",
        18 + (n >> 16) % 2,
        (n >> 8) & 0xff,
        n & 0xff
    );
    PodSpec::ingress(
        &format!("pod-{i}"),
        "ingress",
        &format!("svc-{}", i / PODS_PER_NAME),
        &format!("node-{i}"),
        &host,
    )
}

struct Setup {
    agent: Agent,
    api: FakeApi,
    ns: NetNs,
    _dir: TempDir,
}

fn setup(pods: usize) -> Setup {
    let ns = NetNs::new("prop");
    let api = FakeApi::start(Some(&ns));
    for i in 0..pods {
        api.apply(Kind::Pod, pod(i, 0).to_json());
    }
    let dir = TempDir::new("prop");
    let config = dir.write(
        "agent.yaml",
        &format!("zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n    srv: false\n", api.url()),
    );
    let agent = Agent::start_on_lo(&ns, &config, &[]);
    eventually("the first full list", 600, || {
        agent.http_get("/readyz").0 == 200
    });
    Setup {
        agent,
        api,
        ns,
        _dir: dir,
    }
}

/// Changes one pod's address `rounds` times; for each, the time from the change to the first
/// answer on the wire that carries it. Returns (p50, p99) in milliseconds.
fn latencies(s: &Setup, pods: usize, rounds: usize) -> (f64, f64) {
    let server: SocketAddr = "127.0.0.1:1053".parse().expect("an address");
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let i = (round * 7919) % pods;
        let mut moved = pod(i, 0);
        moved.host_ip = format!("198.19.255.{}", round % 250 + 1);
        let name = format!("svc-{}.ingress.{ZONE}", i / PODS_PER_NAME);
        let query = QueryBuilder::new(&name, 1).bytes();
        let wanted: [u8; 4] = moved
            .host_ip
            .parse::<std::net::Ipv4Addr>()
            .expect("an address")
            .octets();
        let started = Instant::now();
        s.api.apply(Kind::Pod, moved.to_json());
        let seen = udp_exchange_many(
            &s.ns,
            server,
            query,
            Duration::from_secs(10),
            move |answer| answer.windows(4).any(|w| w == wanted),
        );
        samples.push(seen.map_or(f64::INFINITY, |_| started.elapsed().as_secs_f64() * 1000.0));
        // Put it back, and wait until that is served too: each round measures one change alone.
        s.api.apply(Kind::Pod, pod(i, 0).to_json());
        let original: [u8; 4] = pod(i, 0)
            .host_ip
            .parse::<std::net::Ipv4Addr>()
            .expect("an address")
            .octets();
        let query = QueryBuilder::new(&name, 1).bytes();
        udp_exchange_many(
            &s.ns,
            server,
            query,
            Duration::from_secs(10),
            move |answer| {
                answer.windows(4).any(|w| w == original) && !answer.windows(4).any(|w| w == wanted)
            },
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[(samples.len() * 99 / 100).min(samples.len() - 1)],
    )
}

/// Applies `changes` pod changes back to back; returns (changes/s until the last is served,
/// table publications/s).
fn update_rate(s: &Setup, changes: usize) -> (f64, f64) {
    let before = s.agent.metric("hostport_dns_table_updates", &[]);
    let started = Instant::now();
    for c in 0..changes {
        let mut moved = pod(c, 0);
        moved.host_ip = format!("198.19.254.{}", c % 250 + 1);
        s.api.apply(Kind::Pod, moved.to_json());
    }
    let name = format!("svc-{}.ingress.{ZONE}", (changes - 1) / PODS_PER_NAME);
    let wanted: [u8; 4] = format!("198.19.254.{}", (changes - 1) % 250 + 1)
        .parse::<std::net::Ipv4Addr>()
        .expect("an address")
        .octets();
    udp_exchange_many(
        &s.ns,
        "127.0.0.1:1053".parse().expect("an address"),
        QueryBuilder::new(&name, 1).bytes(),
        Duration::from_secs(60),
        move |a| a.windows(4).any(|w| w == wanted),
    );
    let seconds = started.elapsed().as_secs_f64();
    let updates = s.agent.metric("hostport_dns_table_updates", &[]) - before;
    (changes as f64 / seconds, updates / seconds)
}

/// The cumulative buckets of the kernel switch histogram: (upper bound in seconds, count).
fn switch_buckets(metrics: &str) -> Vec<(f64, f64)> {
    metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("hostport_dns_xdp_switch_seconds_bucket{le=\"")?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` of the switches between two scrapes, in µs.
fn switch_quantile_us(before: &str, after: &str, q: f64) -> f64 {
    let before = switch_buckets(before);
    let after = switch_buckets(after);
    let deltas: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before
                .iter()
                .find(|(b, _)| b == le)
                .map_or(0.0, |(_, n)| *n);
            (*le, n - was)
        })
        .collect();
    let total = deltas.last().map_or(0.0, |(_, n)| *n);
    deltas
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map_or(f64::NAN, |(le, _)| le * 1e6)
}

pub fn run() {
    let mut rows = Vec::new();
    for (pods, rounds) in [(1_000usize, 200), (10_000, 200), (100_000, 100)] {
        let s = setup(pods);
        let rss = system::rss_mib(s.agent.pid());
        let before = s.agent.metrics();
        let (p50, p99) = latencies(&s, pods, rounds);
        let after = s.agent.metrics();
        let switch = (
            switch_quantile_us(&before, &after, 0.5),
            switch_quantile_us(&before, &after, 0.99),
        );
        let (changes, updates) = update_rate(&s, 1000);
        rows.push(vec![
            pods.to_string(),
            format!("{p50:.2}"),
            format!("{p99:.2}"),
            format!("<= {:.0} / {:.0}", switch.0, switch.1),
            format!("{rss:.1}"),
            format!("{changes:.0}"),
            format!("{updates:.0}"),
        ]);
    }
    print_table(
        "Propagation: a pod change in the (fake) API server to the changed answer on the wire (200 changes, \
         100 at 100k pods), agent memory after the first list, and a burst of 1000 changes \
         (targets: p99 <= 20 ms and RSS <= 64 MiB at 10k pods; p99 <= 5 ms and RSS <= 64 MiB at 100k). \
         Kernel switch: from the start of a kernel table publication to the new table visible to XDP, \
         the bound of its histogram bucket (hostport_dns_xdp_switch_seconds; target p99 <= 500 µs)",
        &[
            "pods",
            "p50 ms",
            "p99 ms",
            "kernel switch p50 / p99 µs",
            "agent RSS MiB",
            "burst changes/s",
            "table updates/s",
        ],
        &rows,
    );
}
