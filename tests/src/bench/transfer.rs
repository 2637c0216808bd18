//! Zone transfers: AXFR time and bytes, the IXFR after one pod change, and a pod change to a
//! knotd secondary answering it (NOTIFY, then IXFR), for zones of 1k, 10k and 100k names. The
//! peer, in the same run: knotd as the primary of the same zone (its records as hostport-dns
//! transfers them), with a second knotd as its secondary, changed through `knotc`.

use std::{
    fmt::Write as _,
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use crate::{
    TempDir,
    agent::Agent,
    bench::print_table,
    clients::{soa_serial, udp_exchange_many},
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::NetNs,
    packet::QueryBuilder,
    secondary::{Flavor, Secondary, TsigKey},
};

const ZONE: &str = "prod.coreha.example.";
const KEY: &str = "transfer-key";
const AGENT: &str = "127.0.0.1:1053";
const AGENT_SECONDARY: &str = "127.0.0.1:5300";
const KNOT_PRIMARY: &str = "127.0.0.1:5310";
const KNOT_SECONDARY: &str = "127.0.0.1:5311";
/// Changes timed per zone size and system.
const CHANGES: usize = 100;
/// AXFRs timed per zone size and system (the median is reported).
const AXFR_RUNS: usize = 5;

/// The i-th static name's address.
fn address(i: usize) -> String {
    format!("198.18.{}.{}", (i >> 8) & 0xff, i & 0xff)
}

/// What one kdig transfer took: wall time, bytes, messages.
struct Transfer {
    seconds: f64,
    bytes: u64,
    messages: u64,
}

/// Runs a kdig transfer (`AXFR` or `IXFR=<serial>`) against `server`, signed with `key`.
fn kdig_transfer(ns: &NetNs, server: &str, key: &TsigKey, kind: &str) -> (Transfer, String) {
    let addr: SocketAddr = server.parse().expect("an address");
    let started = Instant::now();
    let out = ns
        .command("kdig")
        .args([
            format!("@{}", addr.ip()),
            "-p".into(),
            addr.port().to_string(),
            "+tcp".into(),
            "+retry=0".into(),
            "+timeout=30".into(),
            "-y".into(),
            key.kdig_arg(),
            ZONE.into(),
            kind.into(),
        ])
        .output()
        .expect("run kdig");
    let seconds = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // ";; Received 1234 B (2 messages, 1003 records)"
    let received = text
        .lines()
        .find(|l| l.starts_with(";; Received"))
        .unwrap_or_default()
        .to_owned();
    let numbers: Vec<u64> = received
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let transfer = Transfer {
        seconds,
        bytes: numbers.first().copied().unwrap_or(0),
        messages: numbers.get(1).copied().unwrap_or(0),
    };
    (transfer, text)
}

fn median_axfr(ns: &NetNs, server: &str, key: &TsigKey) -> Transfer {
    let mut runs: Vec<Transfer> = (0..AXFR_RUNS)
        .map(|_| kdig_transfer(ns, server, key, "AXFR").0)
        .collect();
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    runs.swap_remove(AXFR_RUNS / 2)
}

/// The zone's serial at `server` (0 while it does not answer it).
fn serial(ns: &NetNs, server: &str) -> u32 {
    soa_serial(ns, server, ZONE).unwrap_or(0)
}

/// Waits until `server` answers `name` with `ip`; the time it took from `since`.
fn answered_after(ns: &NetNs, server: &str, name: &str, ip: &str, since: Instant) -> f64 {
    let wanted: [u8; 4] = ip
        .parse::<std::net::Ipv4Addr>()
        .expect("an address")
        .octets();
    let seen = udp_exchange_many(
        ns,
        server.parse().expect("an address"),
        QueryBuilder::new(name, 1).bytes(),
        Duration::from_secs(30),
        move |answer| answer.windows(4).any(|w| w == wanted),
    );
    seen.map_or(f64::INFINITY, |_| since.elapsed().as_secs_f64() * 1000.0)
}

fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[(samples.len() * 99 / 100).min(samples.len() - 1)],
    )
}

/// knotd as a primary of the zone text `zone`, notifying the peer secondary, changed by knotc.
struct KnotPrimary {
    child: Child,
    dir: TempDir,
    ns_name: String,
}

impl KnotPrimary {
    fn start(ns: &NetNs, zone: &str, key: &TsigKey) -> Self {
        let dir = TempDir::new("knot-primary");
        let file = dir.write("zone", zone);
        let primary: SocketAddr = KNOT_PRIMARY.parse().expect("an address");
        let secondary: SocketAddr = KNOT_SECONDARY.parse().expect("an address");
        let d = dir.path.display();
        let conf = format!(
            "server:\n  listen: {}@{}\n  rundir: {d}\n  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n\
             log:\n  - target: stderr\n    any: warning\n\
             database:\n  storage: {d}\n\
             key:\n  - id: {KEY}\n    algorithm: hmac-sha256\n    secret: {}\n\
             remote:\n  - id: secondary\n    address: {}@{}\n    key: {KEY}\n\
             acl:\n  - id: transfer\n    address: 127.0.0.1\n    key: {KEY}\n    action: transfer\n\
             zone:\n  - domain: {ZONE}\n    file: {}\n    notify: secondary\n    acl: transfer\n    \
             journal-content: changes\n    zonefile-sync: -1\n    serial-policy: increment\n    semantic-checks: off\n",
            primary.ip(),
            primary.port(),
            key.secret,
            secondary.ip(),
            secondary.port(),
            file.display()
        );
        let conf_path = dir.write("knot.conf", &conf);
        let child = ns
            .command("knotd")
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start knotd");
        let primary = Self {
            child,
            dir,
            ns_name: ns.name.clone(),
        };
        eventually("the knotd primary serves the zone", 120, || {
            serial(ns, KNOT_PRIMARY) != 0
        });
        primary
    }

    /// Adds an A record through a knotc transaction (the serial is incremented on commit).
    fn add(&self, name: &str, ip: &str) {
        let ns = NetNs::borrowed(&self.ns_name);
        let conf = self.dir.path.join("knot.conf");
        let knotc = |args: &[&str]| {
            let out = ns
                .command("knotc")
                .arg("-c")
                .arg(&conf)
                .args(args)
                .output()
                .expect("run knotc");
            assert!(out.status.success(), "knotc {args:?}: {out:?}");
        };
        knotc(&["zone-begin", ZONE]);
        knotc(&["zone-set", ZONE, name, "5", "A", ip]);
        knotc(&["zone-commit", ZONE]);
    }
}

impl Drop for KnotPrimary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Row {
    names: usize,
    system: &'static str,
    axfr: Transfer,
    ixfr: Transfer,
    p50: f64,
    p99: f64,
}

/// One zone size: hostport-dns (static names in its configuration, pods for the changes) with
/// a knotd secondary, then the knotd primary and secondary peer.
fn measure(names: usize) -> Vec<Row> {
    let ns = NetNs::new("bench-xfr");
    let api = FakeApi::start(Some(&ns));
    let dir = TempDir::new("bench-xfr");
    let key = TsigKey::test(KEY);
    dir.write("tsig-key", &key.secret);
    let mut config = format!("zones:\n  - name: {ZONE}\n    ttl: 5\n    records:\n",);
    for i in 0..names {
        let _ = writeln!(config, "      h{i}: {}", address(i));
    }
    let _ = write!(
        config,
        "kubernetes:\n  apiServer: {api}\npods:\n  - zone: {ZONE}\n    srv: false\n\
         reverseZones:\n  zones: []\n\
         transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {d}/tsig-key\n  \
         allow:\n    - from: 127.0.0.1\n      key: {KEY}\n  \
         notify: [{{address: \"{AGENT_SECONDARY}\", key: {KEY}}}]\n",
        api = api.url(),
        d = dir.path.display(),
    );
    let config = dir.write("agent.yaml", &config);
    let agent = Agent::start(
        &ns,
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--serials",
            dir.path.join("serials.json").to_str().expect("UTF-8"),
        ],
    );
    eventually("the agent's first table", 600, || {
        agent.http_get("/readyz").0 == 200
    });
    let secondary = Secondary::start(
        Flavor::Knot,
        &ns,
        AGENT_SECONDARY.parse().expect("an address"),
        &[AGENT.parse().expect("an address")],
        &[ZONE],
        &key,
    );
    let agent_serial = serial(&ns, AGENT);
    eventually("the secondary has the zone", 300, || {
        serial(&ns, AGENT_SECONDARY) == agent_serial
    });
    let axfr = median_axfr(&ns, AGENT, &key);
    let (_, zone_text) = kdig_transfer(&ns, AGENT, &key, "AXFR");
    // One pod change, then the IXFR from the serial before it.
    let before = serial(&ns, AGENT);
    let pod = |i: usize| {
        PodSpec::ingress(
            &format!("bench-{i}"),
            "ingress",
            &format!("new-{i}"),
            &format!("node-{i}"),
            &format!("198.19.{}.{}", i / 250, i % 250 + 1),
        )
    };
    api.apply(Kind::Pod, pod(0).to_json());
    eventually("the agent's serial changes", 30, || {
        serial(&ns, AGENT) != before
    });
    let (ixfr, _) = kdig_transfer(&ns, AGENT, &key, &format!("IXFR={before}"));
    let mut samples = Vec::with_capacity(CHANGES);
    for i in 1..=CHANGES {
        let spec = pod(i);
        let name = format!("new-{i}.ingress.{ZONE}");
        let started = Instant::now();
        api.apply(Kind::Pod, spec.to_json());
        samples.push(answered_after(
            &ns,
            AGENT_SECONDARY,
            &name,
            &spec.host_ip,
            started,
        ));
    }
    let (p50, p99) = percentiles(samples);
    let ours = Row {
        names,
        system: "hostport-dns -> knotd",
        axfr,
        ixfr,
        p50,
        p99,
    };
    drop(secondary);
    drop(agent);

    // The peer: the same records in knotd, from the AXFR text.
    let zone: String = zone_text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.contains("TSIG") && !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let primary = KnotPrimary::start(&ns, &zone, &key);
    let peer_secondary = Secondary::start(
        Flavor::Knot,
        &ns,
        KNOT_SECONDARY.parse().expect("an address"),
        &[KNOT_PRIMARY.parse().expect("an address")],
        &[ZONE],
        &key,
    );
    let primary_serial = serial(&ns, KNOT_PRIMARY);
    eventually("the peer secondary has the zone", 300, || {
        serial(&ns, KNOT_SECONDARY) == primary_serial
    });
    let peer_axfr = median_axfr(&ns, KNOT_PRIMARY, &key);
    let before = serial(&ns, KNOT_PRIMARY);
    primary.add(&format!("new-0.ingress.{ZONE}"), "198.19.0.1");
    let (peer_ixfr, _) = kdig_transfer(&ns, KNOT_PRIMARY, &key, &format!("IXFR={before}"));
    let mut samples = Vec::with_capacity(CHANGES);
    for i in 1..=CHANGES {
        let name = format!("new-{i}.ingress.{ZONE}");
        let ip = format!("198.19.{}.{}", i / 250, i % 250 + 1);
        let started = Instant::now();
        primary.add(&name, &ip);
        samples.push(answered_after(&ns, KNOT_SECONDARY, &name, &ip, started));
    }
    let (p50, p99) = percentiles(samples);
    drop(peer_secondary);
    vec![
        ours,
        Row {
            names,
            system: "knotd -> knotd",
            axfr: peer_axfr,
            ixfr: peer_ixfr,
            p50,
            p99,
        },
    ]
}

pub fn run() {
    let mut rows = Vec::new();
    for names in [1_000usize, 10_000, 100_000] {
        let measured = measure(names);
        let peer_p99 = measured[1].p99;
        let peer_axfr = measured[1].axfr.seconds;
        for row in measured {
            rows.push(vec![
                row.names.to_string(),
                row.system.to_owned(),
                format!("{:.1}", row.axfr.seconds * 1000.0),
                format!("{:.2}", row.axfr.seconds / peer_axfr),
                row.axfr.bytes.to_string(),
                row.axfr.messages.to_string(),
                row.ixfr.bytes.to_string(),
                format!("{:.2}", row.p50),
                format!("{:.2}", row.p99),
                format!("{:.2}", row.p99 / peer_p99),
            ]);
        }
    }
    print_table(
        "Transfers: AXFR (median of 5, kdig wall time, TSIG-signed), the IXFR after one change, and \
         a change to the secondary answering it (NOTIFY then IXFR; 100 changes; hostport-dns: a pod \
         in the fake API server; knotd: a knotc transaction). Target: p99 <= 1000 ms, IXFR bytes \
         proportional to the change",
        &[
            "names",
            "system",
            "AXFR ms",
            "vs knotd",
            "AXFR bytes",
            "messages",
            "IXFR bytes",
            "change->secondary p50 ms",
            "p99 ms",
            "p99 vs knotd",
        ],
        &rows,
    );
}
