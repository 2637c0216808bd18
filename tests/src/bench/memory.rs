//! Memory: what the agent's memory cgroup holds serving a record file of 100 to 100k names
//! (three A records each; other counts from `HPD_BENCH_MEMORY_NAMES`, say `1000000`), the XDP
//! program on lo: the process, and the kernel memory charged to it (the BPF maps, sized by the
//! names served). knotd serving the same names, in a cgroup
//! of its own, is the peer. The chart's default memory request (from the rendered manifests) is
//! printed beside them: what a node reserves for the agent before it serves a name.

use std::time::Duration;

use crate::{
    TempDir,
    agent::{Agent, records_on_lo},
    bench::{print_table, system, zone},
    cgroup::Cgroup,
    clients::dig,
    eventually,
    knot::Knot,
    netns::NetNs,
};

/// What one responder's cgroup held.
struct Held {
    cgroup: u64,
    /// The most the cgroup held, from start to settled: the first load's peak.
    peak: u64,
    kernel: u64,
    rss: f64,
    /// Entries of every kind the agent's kernel table holds (0 for knotd).
    capacity: u32,
    /// Bytes the kernel table's maps take (the agent's `hostport_dns_xdp_table_bytes`).
    maps: u64,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The agent serving `names` names from a record file, XDP on lo, in a cgroup of its own.
fn agent(names: usize) -> Held {
    let ns = NetNs::new("mem");
    let dir = TempDir::new("mem");
    let (records, list) = zone(names);
    let file = dir.write("records.yaml", &records);
    let cgroup = Cgroup::new("mem-agent", None);
    let agent = Agent::start_in_cgroup(&ns, &cgroup, &records_on_lo(&file));
    let last = list.last().expect("names").clone();
    eventually("the last name is answered", 600, || {
        dig(&ns, "127.0.0.1", 1053, &[&last]).answer.len() == 3
    });
    // Settled: the first table written, the file's text gone.
    std::thread::sleep(Duration::from_secs(2));
    let held = Held {
        cgroup: cgroup.usage(),
        peak: cgroup.peak(),
        kernel: cgroup.kernel(),
        rss: system::rss_mib(agent.pid()),
        capacity: agent.metric("hostport_dns_xdp_table_capacity", &[]) as u32,
        maps: agent.metric("hostport_dns_xdp_table_bytes", &[]) as u64,
    };
    drop(agent);
    held
}

/// knotd serving the same names, in a cgroup of its own.
fn knotd(names: usize) -> Held {
    let ns = NetNs::new("memknot");
    let (records, list) = zone(names);
    let snapshot = hostport_dns::sources::file::parse(&records, "bench".as_ref()).expect("valid");
    let (table, _) =
        hostport_dns_core::table::RecordTable::compile(&snapshot.zones, snapshot.records());
    let cgroup = Cgroup::new("mem-knotd", None);
    let addr = "127.0.0.1:1053".parse().expect("an address");
    let server = Knot::start_in_cgroup(&ns, addr, &table, &cgroup);
    let last = list.last().expect("names").clone();
    eventually("knotd answers the last name", 600, || {
        dig(&ns, "127.0.0.1", 1053, &[&last]).answer.len() == 3
    });
    std::thread::sleep(Duration::from_secs(1));
    let held = Held {
        cgroup: cgroup.usage(),
        peak: cgroup.peak(),
        kernel: cgroup.kernel(),
        rss: system::rss_mib(server.pid()),
        capacity: 0,
        maps: 0,
    };
    drop(server);
    held
}

/// Bytes the served names need in wire form with their addresses: the floor a table of them
/// can be measured against.
fn served_bytes(names: &[String]) -> u64 {
    names
        .iter()
        .map(|name| (name.trim_end_matches('.').len() + 2 + 3 * 4) as u64)
        .sum()
}

/// The name counts measured: `HPD_BENCH_MEMORY_NAMES` (comma-separated) or 100 to 100k.
fn name_counts() -> Vec<usize> {
    let asked: Vec<usize> = std::env::var("HPD_BENCH_MEMORY_NAMES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .filter(|count| *count > 0)
        .collect();
    if asked.is_empty() {
        vec![100, 1_000, 10_000, 100_000]
    } else {
        asked
    }
}

pub fn run() {
    // A round not measured first: the page cache of the binaries (the agent's, knotd's and its
    // libraries) is charged to the cgroup that reads them first, which would add the agent's
    // 30-odd MiB of binary to the first row after a build.
    let _ = (agent(100), knotd(100));
    let mut rows = Vec::new();
    for names in name_counts() {
        let ours = agent(names);
        let peer = knotd(names);
        let maps = ours.maps;
        let served = served_bytes(&zone(names).1);
        rows.push(vec![
            names.to_string(),
            format!("{:.1}", mib(ours.cgroup)),
            format!("{:.1}", mib(ours.peak)),
            format!("{:.1}", mib(ours.kernel)),
            ours.capacity.to_string(),
            format!("{:.1}", mib(maps)),
            format!("{:.1}", maps.saturating_sub(1 << 20) as f64 / served as f64),
            format!("{:.1}", ours.rss),
            format!("{:.1}", mib(peer.cgroup)),
            format!("{:.1}", mib(peer.peak)),
            format!("{:.1}", peer.rss),
            format!("{:.2}", ours.cgroup as f64 / peer.cgroup as f64),
        ]);
    }
    print_table(
        "Memory serving a record file (3 A records a name), XDP on lo, every default: the kernel \
         table sized by the names served (targets: the agent's cgroup <= 24 MiB at 1,000 names, \
         <= 32 MiB at 10,000, <= 2.0x knotd's at 100,000; the table maps, less a 1 MiB floor, <= \
         4x the served names' wire forms and addresses)",
        &[
            "names",
            "agent cgroup MiB",
            "agent peak MiB",
            "of which kernel MiB",
            "table names",
            "table maps MiB",
            "maps less 1 MiB / served",
            "agent RSS MiB",
            "knotd cgroup MiB",
            "knotd peak MiB",
            "knotd RSS MiB",
            "agent / knotd",
        ],
        &rows,
    );
    println!(
        "(cgroup: everything charged to the responder's memory cgroup: its pages and the kernel \
         memory it caused, BPF maps included, once settled; peak: the most it held from its start, \
         the first load and the table's resizes included. Agent RSS counts the mapped maps too.)"
    );
    match chart_default_request() {
        Some(request) => println!(
            "The chart's default memory request (deploy/manifests): {request} (target <= 48 MiB)"
        ),
        None => println!("The chart's default memory request: not found in deploy/manifests"),
    }
}

/// The DaemonSet's memory request in the manifests rendered from the chart's defaults.
fn chart_default_request() -> Option<String> {
    use serde::Deserialize;
    let path = crate::workspace_root().join("deploy/manifests/hostport-dns.yaml");
    let text = std::fs::read_to_string(path).ok()?;
    let daemonset = serde_yaml_ng::Deserializer::from_str(&text)
        .filter_map(|doc| serde_yaml_ng::Value::deserialize(doc).ok())
        .find(|doc| doc["kind"] == "DaemonSet")?;
    let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
    container["resources"]["requests"]["memory"]
        .as_str()
        .map(str::to_owned)
}
