//! Propagation: how fast a change in the API server reaches the wire, and what the agent's
//! memory costs, with thousands of watched pods (the fake API server, the real kube client),
//! run as the chart runs the agent: SRV records on, saved records and serials written, and a
//! zone-transfer secondary (knotd) notified of every change.
//!
//! Each change is measured twice at once: when XDP answers it (UDP, the kernel table) and when
//! userspace answers it (TCP, the server's table), from the moment the change is written to the
//! API server (the fake API server sends the watch event as it stores it). Two kinds of change:
//! a pod moving to another node, and a node tainted by the cluster autoscaler (its pods leave
//! the answers, the `nodes` rules' default) and untainted.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use crate::{
    TempDir,
    agent::Agent,
    bench::{print_table, system},
    clients::{soa_serial, udp_exchange_many},
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::{NodeSpec, PodSpec},
    netns::NetNs,
    packet::QueryBuilder,
    secondary::{Flavor, Secondary, TsigKey},
};

const ZONE: &str = "prod.coreha.example";
/// Pods per published name (a DaemonSet-like spread: several nodes per name).
const PODS_PER_NAME: usize = 10;
/// Nodes the pods run on: Kubernetes supports at most 5,000 nodes, so 100k pods share them.
const MAX_NODES: usize = 5_000;
const KEY: &str = "transfer-key";
const AGENT: &str = "127.0.0.1:1053";
const SECONDARY: &str = "127.0.0.1:5300";
/// Changes applied back to back in the burst.
const BURST: usize = 1_000;
/// How long one change may take to show before it counts as lost.
const WITHIN: Duration = Duration::from_secs(10);

/// The address of node `n` (unique up to 65,536 nodes).
fn node_address(n: usize) -> String {
    format!("198.18.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

/// The i-th of `pods` pods: its label value, its node and that node's address.
fn pod(i: usize, pods: usize) -> PodSpec {
    let n = i % pods.min(MAX_NODES);
    PodSpec::ingress(
        &format!("pod-{i}"),
        "ingress",
        &format!("svc-{}", i / PODS_PER_NAME),
        &format!("node-{n}"),
        &node_address(n),
    )
}

/// Pod i moved to spare node `spare` (an address no other node has).
fn moved(i: usize, pods: usize, spare: usize) -> PodSpec {
    let mut spec = pod(i, pods);
    spec.node = format!("spare-{spare}");
    spec.host_ip = format!("198.19.255.{}", spare % 250 + 1);
    spec
}

fn name_of(i: usize) -> String {
    format!("svc-{}.ingress.{ZONE}", i / PODS_PER_NAME)
}

fn octets(address: &str) -> [u8; 4] {
    address.parse::<Ipv4Addr>().expect("an address").octets()
}

struct Setup {
    agent: Agent,
    api: FakeApi,
    ns: NetNs,
    secondary: Secondary,
    _dir: TempDir,
}

/// Node `n` as the API server lists it (the autoscaler's taint on it when `leaving`).
fn node(n: usize, leaving: bool) -> NodeSpec {
    let mut node = NodeSpec::new(&format!("node-{n}"), &node_address(n));
    if leaving {
        node.taints = vec!["ToBeDeletedByClusterAutoscaler".into()];
    }
    node
}

fn setup(pods: usize) -> Setup {
    let ns = NetNs::new("prop");
    let api = FakeApi::start(Some(&ns));
    for n in 0..pods.min(MAX_NODES) {
        api.apply(Kind::Node, node(n, false).to_json());
    }
    for i in 0..pods {
        api.apply(Kind::Pod, pod(i, pods).to_json());
    }
    let dir = TempDir::new("prop");
    let key = TsigKey::test(KEY);
    dir.write("tsig-key", &key.secret);
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {api}\n\
             pods:\n  - zone: {ZONE}\n    srv: true\n\
             transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {d}/tsig-key\n  \
             allow:\n    - from: 127.0.0.1\n      key: {KEY}\n  \
             notify: [{{address: \"{SECONDARY}\", key: {KEY}}}]\n",
            api = api.url(),
            d = dir.path.display(),
        ),
    );
    let saved = dir.path.join("kubernetes-records.json");
    let serials = dir.path.join("serials.json");
    let agent = Agent::start_on_lo(
        &ns,
        &config,
        &[
            "--saved-records",
            saved.to_str().expect("UTF-8"),
            "--serials",
            serials.to_str().expect("UTF-8"),
        ],
    );
    eventually("the first full list", 600, || {
        agent.http_get("/readyz").0 == 200
    });
    let secondary = Secondary::start(
        Flavor::Knot,
        &ns,
        SECONDARY.parse().expect("an address"),
        &[AGENT.parse().expect("an address")],
        &[&format!("{ZONE}.")],
        &key,
    );
    let s = Setup {
        agent,
        api,
        ns,
        secondary,
        _dir: dir,
    };
    eventually("the secondary has the zone", 600, || {
        serial(&s.ns, AGENT).is_some() && serial(&s.ns, AGENT) == serial(&s.ns, SECONDARY)
    });
    s
}

/// The zone's SOA serial at `server`, if it answers.
fn serial(ns: &NetNs, server: &str) -> Option<u32> {
    soa_serial(ns, server, ZONE)
}

/// Asks `query` over UDP (XDP answers it) until an answer holds `wanted` and not `unwanted`;
/// when that answer came.
fn seen_over_udp(
    ns: &NetNs,
    query: Vec<u8>,
    wanted: [u8; 4],
    unwanted: Option<[u8; 4]>,
) -> Option<Instant> {
    udp_exchange_many(
        ns,
        AGENT.parse().expect("an address"),
        query,
        WITHIN,
        move |a| holds(a, wanted, unwanted),
    )
    .map(|_| Instant::now())
}

fn holds(answer: &[u8], wanted: [u8; 4], unwanted: Option<[u8; 4]>) -> bool {
    answer.windows(4).any(|w| w == wanted)
        && unwanted.is_none_or(|u| !answer.windows(4).any(|w| w == u))
}

/// The same over TCP, on one connection (userspace answers it).
fn seen_over_tcp(
    ns: &NetNs,
    query: Vec<u8>,
    wanted: [u8; 4],
    unwanted: Option<[u8; 4]>,
) -> Option<Instant> {
    let server: SocketAddr = AGENT.parse().expect("an address");
    ns.run(move || {
        let deadline = Instant::now() + WITHIN;
        let mut stream: Option<TcpStream> = None;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        while Instant::now() < deadline {
            let connection = match stream.as_mut() {
                Some(s) => s,
                None => {
                    let s = TcpStream::connect_timeout(&server, Duration::from_secs(1)).ok()?;
                    s.set_nodelay(true).ok();
                    s.set_read_timeout(Some(Duration::from_secs(1))).ok();
                    stream.insert(s)
                }
            };
            let mut len = [0u8; 2];
            let answer = connection
                .write_all(&framed)
                .and_then(|()| connection.read_exact(&mut len))
                .and_then(|()| {
                    let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
                    connection.read_exact(&mut answer).map(|()| answer)
                });
            match answer {
                Ok(answer) if holds(&answer, wanted, unwanted) => return Some(Instant::now()),
                Ok(_) => {}
                // Closed (idle, or its query limit): a new connection.
                Err(_) => stream = None,
            }
            std::thread::sleep(Duration::from_micros(250));
        }
        None
    })
}

/// When `change` (written by `write`, after the watchers are asking) shows over XDP and over
/// userspace, in milliseconds from the write (infinite: not within [`WITHIN`]).
fn both_paths_see(s: &Setup, query: Vec<u8>, wanted: [u8; 4], write: impl FnOnce()) -> (f64, f64) {
    both_paths_see_without(s, query, wanted, None, write)
}

/// [`both_paths_see`] of an answer holding `wanted` and not `unwanted`.
fn both_paths_see_without(
    s: &Setup,
    query: Vec<u8>,
    wanted: [u8; 4],
    unwanted: Option<[u8; 4]>,
    write: impl FnOnce(),
) -> (f64, f64) {
    std::thread::scope(|scope| {
        let udp_query = query.clone();
        let udp = scope.spawn(|| seen_over_udp(&s.ns, udp_query, wanted, unwanted));
        let tcp = scope.spawn(|| seen_over_tcp(&s.ns, query, wanted, unwanted));
        // The watchers are asking before the change is written.
        std::thread::sleep(Duration::from_millis(2));
        let started = Instant::now();
        write();
        let ms = |seen: Option<Instant>| {
            seen.map_or(f64::INFINITY, |t| {
                t.saturating_duration_since(started).as_secs_f64() * 1000.0
            })
        };
        (
            ms(udp.join().expect("the UDP watcher")),
            ms(tcp.join().expect("the TCP watcher")),
        )
    })
}

/// Quantiles of samples in milliseconds (lost ones count as infinite).
fn quantiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.5), at(0.99))
}

/// Changes one pod `rounds` times, spaced apart; for each, when the change shows over XDP and
/// over userspace. Returns ((p50, p99) XDP, (p50, p99) userspace) in milliseconds.
fn spaced(s: &Setup, pods: usize, rounds: usize) -> ((f64, f64), (f64, f64)) {
    let (mut xdp, mut userspace) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let i = (round * 7919) % pods;
        let change = moved(i, pods, round);
        let query = QueryBuilder::new(&name_of(i), 1).bytes();
        let (on_xdp, on_userspace) =
            both_paths_see(s, query.clone(), octets(&change.host_ip), || {
                s.api.apply(Kind::Pod, change.to_json())
            });
        xdp.push(on_xdp);
        userspace.push(on_userspace);
        // Put it back, and wait until that is served too: each round measures one change alone.
        let back = pod(i, pods);
        s.api.apply(Kind::Pod, back.to_json());
        seen_over_udp(
            &s.ns,
            query,
            octets(&back.host_ip),
            Some(octets(&change.host_ip)),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (quantiles(xdp), quantiles(userspace))
}

/// Taints `rounds` nodes one at a time, spaced apart: for each, when the name of one pod on it
/// stops answering the node's address (another pod of the name still answered) over XDP and
/// over userspace; then untaints it and waits until it is back. Returns ((p50, p99) XDP,
/// (p50, p99) userspace) in milliseconds.
fn node_changes(s: &Setup, pods: usize, rounds: usize) -> ((f64, f64), (f64, f64)) {
    let nodes = pods.min(MAX_NODES);
    let (mut xdp, mut userspace) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // A pod whose name has another pod on another node (not the last of its name).
        let i = (round * 7919) % pods / PODS_PER_NAME * PODS_PER_NAME;
        let n = i % nodes;
        let (leaving, staying) = (
            octets(&pod(i, pods).host_ip),
            octets(&pod(i + 1, pods).host_ip),
        );
        let query = QueryBuilder::new(&name_of(i), 1).bytes();
        let (on_xdp, on_userspace) =
            both_paths_see_without(s, query.clone(), staying, Some(leaving), || {
                s.api.apply(Kind::Node, node(n, true).to_json())
            });
        xdp.push(on_xdp);
        userspace.push(on_userspace);
        s.api.apply(Kind::Node, node(n, false).to_json());
        seen_over_udp(&s.ns, query, leaving, None);
        std::thread::sleep(Duration::from_millis(5));
    }
    (quantiles(xdp), quantiles(userspace))
}

/// What a burst of changes applied back to back cost.
struct Burst {
    /// From the first change written to the last one answered by XDP and by userspace.
    xdp_ms: f64,
    userspace_ms: f64,
    /// Table publications it took.
    publications: f64,
    /// From the first change written to the secondary serving the agent's serial.
    secondary_ms: f64,
}

fn burst(s: &Setup, pods: usize) -> Burst {
    let before = s.agent.metric("hostport_dns_table_updates", &[]);
    let last = BURST - 1;
    let change = |c: usize| moved(c * PODS_PER_NAME % pods, pods, c % 250);
    let final_change = change(last);
    let mut started = Instant::now();
    let (xdp_ms, userspace_ms) = both_paths_see(
        s,
        QueryBuilder::new(&name_of(last * PODS_PER_NAME % pods), 1).bytes(),
        octets(&final_change.host_ip),
        || {
            started = Instant::now();
            for c in 0..BURST {
                s.api.apply(Kind::Pod, change(c).to_json());
            }
        },
    );
    let publications = s.agent.metric("hostport_dns_table_updates", &[]) - before;
    let mut secondary_ms = f64::INFINITY;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        // Asked again each time: one lost query to the agent must not make the wait a miss.
        let agent_serial = serial(&s.ns, AGENT);
        if agent_serial.is_some() && serial(&s.ns, SECONDARY) == agent_serial {
            secondary_ms = started.elapsed().as_secs_f64() * 1000.0;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Burst {
        xdp_ms,
        userspace_ms,
        publications,
        secondary_ms,
    }
}

pub fn run() {
    let mut rows = Vec::new();
    // 1,000 pods on 1,000 nodes; 10,000 and 100,000 on 5,000 (Kubernetes' largest).
    for (pods, rounds) in [(1_000usize, 200), (10_000, 200), (100_000, 100)] {
        let s = setup(pods);
        let memory = system::memory_mib(s.agent.pid());
        let names = s.agent.metric("hostport_dns_table_names", &[]);
        let (xdp, userspace) = spaced(&s, pods, rounds);
        let (node_xdp, node_userspace) = node_changes(&s, pods, rounds);
        let burst = burst(&s, pods);
        let _ = &s.secondary;
        rows.push(vec![
            pods.to_string(),
            format!("{names:.0}"),
            format!("{:.2} / {:.2}", xdp.0, xdp.1),
            format!("{:.2} / {:.2}", userspace.0, userspace.1),
            pods.min(MAX_NODES).to_string(),
            format!("{:.2} / {:.2}", node_xdp.0, node_xdp.1),
            format!("{:.2} / {:.2}", node_userspace.0, node_userspace.1),
            format!(
                "{:.0} / {:.0} ({:.0} tables)",
                burst.xdp_ms, burst.userspace_ms, burst.publications
            ),
            format!("{:.0}", burst.secondary_ms),
            format!("{:.1} / {:.1}", memory.anon, memory.rss),
        ]);
    }
    print_table(
        "Propagation with the chart's defaults (SRV on, saved records, serials, a knotd secondary \
         notified): a pod change written to the (fake) API server until XDP (UDP) and userspace \
         (TCP) answer it, changes spaced apart (200 rounds; 100 at 100k pods); a node tainted \
         by the cluster autoscaler until its pods leave a name on both paths (as many rounds); \
         and a burst of 1000 \
         back to back (until the last is answered, and until the secondary serves the agent's \
         serial); agent memory after the first list: anonymous (heap) and all resident. Targets: \
         p99 <= 5 ms at 100k pods, the burst visible within 100 ms, heap <= 24 MiB at 10k pods \
         and <= 64 MiB at 100k",
        &[
            "pods",
            "names",
            "XDP p50 / p99 ms",
            "userspace p50 / p99 ms",
            "nodes",
            "node XDP p50 / p99 ms",
            "node userspace p50 / p99 ms",
            "burst XDP / userspace ms",
            "burst secondary ms",
            "RssAnon / VmRSS MiB",
        ],
        &rows,
    );
}
