//! Fleets larger than one 1232-byte answer holds. HAProxy as operators run it: the
//! configuration docs/src/clients.md gives (`accepted_payload_size 8192`, `server-template`), a
//! (fake) API server with a DaemonSet ingress on every dual-stack node, the agent with its
//! default ceiling. A truncated answer is an error for HAProxy: each slot filled here is one the
//! 1232-byte cap left empty (it filled none past 70 nodes). And knotd, at its highest ceiling,
//! as the reference for a big answer's bytes.

use std::{collections::BTreeSet, time::Duration};

use hostport_dns::sources::file;

use hostport_dns_core::table::RecordTable;
use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::{dig, udp_exchange},
    eventually,
    fake_api::{FakeApi, Kind},
    haproxy::Haproxy,
    k8s::PodSpec,
    knot::{Knot, UDP_MAX_PAYLOAD},
    netns::Link,
    netns::NetNs,
    packet::QueryBuilder,
    require_root,
};

const ZONE: &str = "prod.coreha.example";
const NAME: &str = "default-nginx.ingress.prod.coreha.example";

fn v4(i: usize) -> String {
    format!("198.18.{}.{}", 1 + i / 250, 1 + i % 250)
}

fn v6(i: usize) -> String {
    format!("2001:db8::1:{i:x}")
}

/// The ingress pod on dual-stack node `cp-i`.
fn pod(i: usize) -> serde_json::Value {
    let mut pod = PodSpec::ingress(
        &format!("nginx-{i}"),
        "ingress",
        "default-nginx",
        &format!("cp-{i}"),
        &v4(i),
    );
    pod.host_ip_v6 = Some(v6(i));
    pod.to_json()
}

/// A fake API server with the ingress on nodes `0..nodes`, and the agent serving it on the
/// link's server end (`extra`: XDP mode and the like).
fn fleet(tag: &str, nodes: usize, extra: &[&str]) -> (Link, FakeApi, Agent, TempDir) {
    require_root();
    let link = Link::new(tag);
    let api = FakeApi::start(Some(&link.server_ns));
    for i in 0..nodes {
        api.apply(Kind::Pod, pod(i));
    }
    let dir = TempDir::new(tag);
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n",
            api.url()
        ),
    );
    let mut args = vec![
        "--config",
        config.to_str().expect("UTF-8"),
        "--interface",
        link.server.ifname.as_str(),
    ];
    args.extend_from_slice(extra);
    let agent = Agent::start(&link.server_ns, &args);
    (link, api, agent, dir)
}

fn haproxy(link: &Link, name: &str, slots: usize, prefer: Option<&str>) -> Haproxy {
    Haproxy::start(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        name,
        u32::try_from(slots).expect("slots"),
        prefer,
    )
}

fn set(addresses: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    addresses.into_iter().collect()
}

/// HAProxy (the seed's configuration: `accepted_payload_size 8192`) in every mode against a
/// 250-node dual-stack fleet: A only, AAAA first and SRV (`_https._tcp.<name>`) each fill all
/// 250 slots. SRV records of 250 nodes do not fit 8192 bytes with their targets in full: the
/// agent's default sends them compressed rather than truncated (a truncated answer is an error
/// for HAProxy: it filled no slot). Returns the SRV-mode HAProxy, once full.
fn every_mode_fills_250_slots(link: &Link, agent: &Agent) -> Haproxy {
    let nodes = 250;
    let srv = haproxy(link, &format!("_https._tcp.{NAME}"), nodes, None);
    let ipv4 = haproxy(link, NAME, nodes, Some("ipv4"));
    let aaaa_first = haproxy(link, NAME, nodes, None);
    eventually("HAProxy (ipv4) to fill its 250 slots", 30, || {
        set(ipv4.backend_addresses()) == set((0..nodes).map(v4))
    });
    eventually("HAProxy (AAAA first) to fill its 250 slots", 30, || {
        set(aaaa_first.backend_addresses()) == set((0..nodes).map(v6))
    });
    eventually("HAProxy (SRV) to fill its 250 slots", 45, || {
        srv.backend_endpoints().len() == nodes
    });
    let endpoints = set(srv.backend_endpoints());
    assert!(
        endpoints.iter().all(|e| e.ends_with(":443")),
        "ports from the SRV records: {endpoints:?}"
    );
    // Each node once, by one of its addresses (from the additional section, or asked for).
    let nodes_seen: BTreeSet<usize> = endpoints
        .iter()
        .filter_map(|e| {
            (0..nodes).find(|i| *e == format!("{}:443", v4(*i)) || *e == format!("{}:443", v6(*i)))
        })
        .collect();
    assert_eq!(nodes_seen.len(), nodes, "{endpoints:?}");
    assert_eq!(agent.metric("hostport_dns_truncated", &[]), 0.0);
    assert!(
        agent.metric("hostport_dns_srv_targets_compressed", &[]) > 0.0,
        "the SRV answer went with its targets compressed"
    );
    srv
}

/// Every mode fills every slot of a 250-node fleet with the agent's defaults and its XDP
/// program attached (it passes such sets up; userspace sends them whole), and two slots hold a
/// stable pair while the fleet does not change.
#[test]
fn haproxy_fills_every_slot_for_a_250_node_dual_stack_fleet_in_every_mode_with_xdp_on() {
    let nodes = 250;
    let (link, _api, agent, _dir) = fleet("hpfl250", nodes, &["--xdp-mode", "native"]);
    let pair = haproxy(&link, NAME, 2, None);
    every_mode_fills_250_slots(&link, &agent);
    let all_v6 = set((0..nodes).map(v6));
    eventually("HAProxy to fill its two slots", 30, || {
        pair.backend_addresses().len() == 2
    });
    // The same two for as long as the fleet is unchanged: HAProxy keeps a server whose address
    // is still answered, so no slot churns on a poll.
    let first_pair = pair.backend_addresses();
    assert!(
        first_pair.iter().all(|a| all_v6.contains(a)),
        "{first_pair:?}"
    );
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(pair.backend_addresses(), first_pair, "a slot churned");
    }
    // The answers went up from XDP (a set of 250 is larger than the kernel writes) and were sent
    // whole: none truncated.
    assert!(
        agent.metric("hostport_dns_xdp_passed", &[("reason", "large_set")]) > 0.0,
        "passed to userspace as a large set"
    );
    assert_eq!(agent.metric("hostport_dns_truncated", &[]), 0.0);
}

/// The same with XDP off: the userspace path alone.
#[test]
fn haproxy_fills_every_slot_for_a_250_node_dual_stack_fleet_in_every_mode_with_xdp_off() {
    let (link, _api, agent, _dir) = fleet("hpfls", 250, &["--xdp-mode", "off"]);
    every_mode_fills_250_slots(&link, &agent);
}

/// The raw UDP answer to `_https._tcp.<name>` SRV offering `offer` bytes.
fn srv_bytes(link: &Link, offer: u16) -> Vec<u8> {
    let query = QueryBuilder::new(&format!("_https._tcp.{NAME}"), 33)
        .edns(offer, false)
        .bytes();
    let server = format!("{}:1053", link.server.ipv4);
    udp_exchange(&link.client_ns, server.parse().expect("an address"), query).expect("an answer")
}

/// How many SRV targets (`cp-N.nodes.<zone>`) are written in full in `bytes`.
fn targets_in_full(bytes: &[u8]) -> usize {
    let suffix = b"\x05nodes\x04prod\x06coreha\x07example\x00";
    bytes.windows(suffix.len()).filter(|w| w == suffix).count()
}

/// SRV targets go compressed only where in full they would be truncated: 250 nodes offered
/// 16384 bytes (the ceiling raised to it) get them in full (RFC 2782); offered 8192,
/// compressed, and dig and kdig read every target back. 150 nodes fit 8192 in full. 30 nodes
/// offered 1232 are truncated (a stub resolver's size), offered 1400 compressed.
#[test]
fn srv_targets_are_compressed_only_where_in_full_they_would_be_truncated() {
    let nodes = 250;
    let (link, api, agent, _dir) = fleet(
        "srvcmp",
        nodes,
        &["--xdp-mode", "off", "--udp-max-payload", "16384"],
    );
    let question = format!("_https._tcp.{NAME}");
    let expected: BTreeSet<String> = (0..nodes)
        .map(|i| format!("0 1 443 cp-{i}.nodes.{ZONE}."))
        .collect();
    // `+noadditional`: dig 9.18's YAML loses the header of a printout this long.
    let dig_srv = |server: &str| {
        let args = [
            question.as_str(),
            "SRV",
            "+bufsize=8192",
            "+ignore",
            "+noadditional",
        ];
        dig(&link.client_ns, server, 1053, &args)
    };
    eventually("the fleet's 250 SRV records", 30, || {
        let answer = dig_srv(link.server.ipv4);
        !answer.has_flag("tc") && answer.answer.len() == nodes
    });
    let compressed = || agent.metric("hostport_dns_srv_targets_compressed", &[]);
    let before = compressed();
    assert!(before > 0.0, "dig's answers at 8192 went compressed");
    let raised = srv_bytes(&link, 16384);
    assert_eq!(targets_in_full(&raised), nodes, "in full where they fit");
    assert_eq!(compressed(), before, "not counted as compressed");
    let seed = srv_bytes(&link, 8192);
    assert_eq!(compressed(), before + 1.0);
    assert!(seed.len() <= 8192, "{}", seed.len());
    assert_eq!(targets_in_full(&seed), 0, "compressed");
    for server in [link.server.ipv4, link.server.ipv6] {
        let by_dig = dig_srv(server);
        assert!(!by_dig.has_flag("tc"), "over {server}: {by_dig:?}");
        let targets: BTreeSet<String> = by_dig.answer.iter().map(|r| r.data.clone()).collect();
        assert_eq!(targets, expected, "dig over {server}");
        let by_kdig = hostport_dns_tests::clients::kdig(
            &link.client_ns,
            server,
            1053,
            &[&question, "SRV", "+bufsize=8192", "+ignore"],
        );
        assert!(!by_kdig.has_flag("tc"), "over {server}: {by_kdig:?}");
        let targets: BTreeSet<String> = by_kdig.answer.iter().map(|r| r.data.clone()).collect();
        assert_eq!(targets, expected, "kdig over {server}: {by_kdig:?}");
    }
    // A hundred nodes go: the 150 left fit 8192 in full.
    for i in 150..nodes {
        api.delete(Kind::Pod, "ingress", &format!("nginx-{i}"));
    }
    eventually("the fleet to shrink to 150", 30, || {
        let answer = dig_srv(link.server.ipv4);
        answer.answer.len() == 150
    });
    assert_eq!(
        targets_in_full(&srv_bytes(&link, 8192)),
        150,
        "in full again"
    );
    // 30 nodes: about 1,600 bytes in full, 800 compressed. Offered 1232 (what stub resolvers
    // offer; some reject compressed SRV targets), truncated, for the targets in full over TCP;
    // offered 1400, compressed.
    for i in 30..150 {
        api.delete(Kind::Pod, "ingress", &format!("nginx-{i}"));
    }
    eventually("the fleet to shrink to 30", 30, || {
        dig_srv(link.server.ipv4).answer.len() == 30
    });
    let before = compressed();
    let stub = srv_bytes(&link, 1232);
    assert_ne!(stub[2] & 0x02, 0, "TC=1");
    assert_eq!(compressed(), before, "not compressed");
    let above = srv_bytes(&link, 1400);
    assert_eq!(above[2] & 0x02, 0, "not truncated");
    assert_eq!(targets_in_full(&above), 0, "compressed");
    assert_eq!(compressed(), before + 1.0);
}

/// SRV mode with targets never compressed (`--srv-target-compression never`, RFC 2782
/// always): past what 8192 bytes hold in full (about 160 nodes here) the operator raises
/// HAProxy's `accepted_payload_size` and the agent's `--udp-max-payload` together, as
/// docs/src/clients.md says, and a 250-node fleet fills every slot; with the seed's 8192, the same
/// SRV answer is truncated.
#[test]
fn with_srv_targets_never_compressed_haproxy_fills_250_slots_with_both_sizes_raised() {
    let nodes = 250;
    let (link, _api, agent, _dir) = fleet(
        "hpfls16",
        nodes,
        &[
            "--xdp-mode",
            "native",
            "--udp-max-payload",
            "16384",
            "--srv-target-compression",
            "never",
        ],
    );
    let srv = Haproxy::start_offering(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        &format!("_https._tcp.{NAME}"),
        u32::try_from(nodes).expect("slots"),
        None,
        16384,
    );
    eventually("HAProxy (SRV, 16384) to fill its 250 slots", 45, || {
        srv.backend_endpoints().len() == nodes
    });
    assert_eq!(agent.metric("hostport_dns_truncated", &[]), 0.0);
    let seed = dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &[
            &format!("_https._tcp.{NAME}"),
            "SRV",
            "+bufsize=8192",
            "+ignore",
            "+nocookie",
        ],
    );
    assert!(seed.has_flag("tc") && seed.answer.is_empty(), "{seed:?}");
    assert_eq!(
        agent.metric("hostport_dns_srv_targets_compressed", &[]),
        0.0
    );
}

/// Pods joining and leaving a 300-node fleet: HAProxy (A) follows within its poll and the
/// propagation; and a 300-node answer comes whole to `dig +bufsize=8192` over UDP, on IPv4 and
/// on IPv6, fragmented on the link (MTU 1500).
#[test]
fn haproxy_follows_pods_joining_and_leaving_a_300_node_fleet() {
    let nodes = 300;
    let (link, api, _agent, _dir) = fleet("hpfl300", nodes, &["--xdp-mode", "native"]);
    let ipv4 = haproxy(&link, NAME, nodes + 10, Some("ipv4"));
    let aaaa_first = haproxy(&link, NAME, nodes, None);
    eventually("HAProxy to learn the 300 nodes", 30, || {
        ipv4.backend_addresses().len() == nodes
    });
    // AAAA first: 300 AAAA records do not fit 8192 bytes. HAProxy counts the truncated answer
    // as an error (`any_err` in `show resolvers`) and falls back to A: every slot filled, with
    // the IPv4 addresses.
    eventually("HAProxy (AAAA first) to fall back to A", 30, || {
        set(aaaa_first.backend_addresses()) == set((0..nodes).map(v4))
    });
    let resolvers = aaaa_first.command("show resolvers");
    assert!(
        resolvers
            .lines()
            .any(|l| l.trim().starts_with("any_err:") && !l.trim().ends_with(" 0")),
        "{resolvers}"
    );
    for server in [link.server.ipv4, link.server.ipv6] {
        let answer = dig(
            &link.client_ns,
            server,
            1053,
            &[NAME, "A", "+bufsize=8192", "+ignore", "+nocookie"],
        );
        assert_eq!(answer.status, "NOERROR", "over {server}");
        assert!(!answer.has_flag("tc"), "over {server}: truncated");
        assert_eq!(answer.answer.len(), nodes, "over {server}");
        assert_eq!(answer.edns_udp, Some(8192), "the ceiling advertised");
    }
    // 300 AAAA records (8,400 bytes of records) do not fit 8192: truncated, whole over TCP.
    let aaaa = dig(
        &link.client_ns,
        link.server.ipv6,
        1053,
        &[NAME, "AAAA", "+bufsize=8192", "+ignore", "+nocookie"],
    );
    assert!(aaaa.has_flag("tc") && aaaa.answer.is_empty(), "{aaaa:?}");
    // Ten pods go, ten join.
    for i in 0..10 {
        api.delete(Kind::Pod, "ingress", &format!("nginx-{i}"));
        api.apply(Kind::Pod, pod(nodes + i));
    }
    let expected = set((10..nodes + 10).map(v4));
    eventually(
        "HAProxy to follow the pods that left and joined",
        20,
        || set(ipv4.backend_addresses()) == expected,
    );
}

/// knotd as the reference for the bytes: the same fleet's zone (200 dual-stack nodes), both
/// servers at Knot's highest ceiling (4096 bytes): the A answer (3,250 bytes) is the same bytes
/// from both, over IPv4 and IPv6, and the AAAA answer (5,600 bytes of records) is truncated by
/// both alike.
#[test]
fn a_big_answer_is_the_bytes_knot_sends() {
    require_root();
    let nodes = 200;
    let addresses: Vec<String> = (0..nodes)
        .flat_map(|i| [v4(i), format!("\"{}\"", v6(i))])
        .collect();
    let records = format!(
        "zones:\n  - name: {ZONE}\n    records:\n      default-nginx.ingress: [{}]\n",
        addresses.join(", ")
    );
    let snapshot = file::parse(&records, "fleet.yaml".as_ref()).expect("the fleet");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let ns = NetNs::new("bigknot");
    let dir = TempDir::new("bigknot");
    let file = dir.write("records.yaml", &records);
    let ceiling = UDP_MAX_PAYLOAD.to_string();
    let _agent = Agent::start(
        &ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--udp-max-payload",
            &ceiling,
        ],
    );
    let knot_v4: std::net::SocketAddr = "127.0.0.1:5300".parse().expect("an address");
    let knot_v6: std::net::SocketAddr = "[::1]:5300".parse().expect("an address");
    let _knots = (
        Knot::start(&ns, knot_v4, &table),
        Knot::start(&ns, knot_v6, &table),
    );
    for (qtype, truncated) in [(1, false), (28, true)] {
        let query = QueryBuilder::new(NAME, qtype).edns(8192, false).bytes();
        for (ours, knot) in [("127.0.0.1:1053", knot_v4), ("[::1]:1053", knot_v6)] {
            let ours = udp_exchange(&ns, ours.parse().expect("an address"), query.clone())
                .expect("our answer");
            let theirs = udp_exchange(&ns, knot, query.clone()).expect("knot's answer");
            assert_eq!(ours[2] & 0x02 != 0, truncated, "type {qtype}: TC");
            assert_eq!(ours, theirs, "type {qtype}: the bytes knotd sends");
        }
    }
}
