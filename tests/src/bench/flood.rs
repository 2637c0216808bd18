//! `bench flood`: a spoofed-source flood (kxdpgun at its maximum, sources spread over one /26, so
//! one rate-limit prefix: a reflection attack's victim) against the responder with response rate
//! limiting on, while a legitimate HAProxy-like client (AAAA then A every 10 ms) from an exempt
//! prefix and a client with DNS cookies from the flooded prefix keep asking. Side by side: knotd
//! (XDP mode) with mod-rrl and mod-cookies on the same flood. Figures, never assertions.

use std::{
    net::{IpAddr, SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use hickory_proto::{
    op::Message,
    rr::rdata::opt::{EdnsCode, EdnsOption},
};
use hostport_dns::sources::file;
use hostport_dns_core::{answer::respond, dns::message::Transport, table::RecordTable};

use crate::{
    TempDir,
    agent::Agent,
    bench::{self, load, print_table, responders::PORT, system},
    knot::{Knot, zone_file},
    netns::{Link, NetNs, sh},
    packet::QueryBuilder,
};

const RESPONDER_CPU: usize = 0;
const GENERATOR_CPU: usize = 1;
/// The flood's spoofed sources: one /26 of the legitimate clients' /24 (one rate-limit bucket,
/// the cookie client's). The flood comes over the first veth pair (kxdpgun's), the legitimate
/// clients over a second one, so that kxdpgun's own XDP program never sees their answers.
const FLOOD_SOURCES: &str = "198.19.1.0/26";
/// The server's address on the second pair, and the legitimate clients'.
const SERVER_B: &str = "198.19.1.1";
/// The HAProxy-like client, in the exempt prefix.
const LEGIT: &str = "198.19.1.130";
const EXEMPT: &str = "198.19.1.128/26";
/// The cookie client, inside the flooded /24.
const COOKIE_CLIENT: &str = "198.19.1.66";
const RATE: u32 = 20;
const SLIP: u32 = 2;
const SECONDS: u64 = 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Responder {
    Hostport,
    /// Slip 0: every limited answer dropped, which prices a dropped flood packet.
    HostportDropping,
    Knot,
}

impl Responder {
    fn label(self) -> &'static str {
        match self {
            Responder::Hostport => "hostport-dns, XDP, RRL",
            Responder::HostportDropping => "hostport-dns, XDP, RRL, slip 0",
            Responder::Knot => "knotd, XDP mode, mod-rrl",
        }
    }
}

struct Result {
    responder: Responder,
    flood: load::Load,
    bytes_in: f64,
    bytes_out: f64,
    cpu: f64,
    /// The XDP program's own time per packet it saw (BPF statistics; hostport-dns only: knotd's
    /// program only redirects to its sockets).
    program_ns: Option<f64>,
    legit: (u64, u64),
    cookie: (u64, u64),
}

/// Interface byte counters (rx, tx) of `ifname` in `ns`.
fn byte_counters(ns: &NetNs, ifname: &str) -> (f64, f64) {
    let out = sh(ns.command("ip").args(["-s", "-j", "link", "show", ifname]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
    let stats = &json[0]["stats64"];
    (
        stats["rx"]["bytes"].as_f64().unwrap_or(f64::NAN),
        stats["tx"]["bytes"].as_f64().unwrap_or(f64::NAN),
    )
}

/// Asks `query` from `socket` and waits for the answer with its ID (up to 200 ms).
fn ask(socket: &UdpSocket, server: SocketAddr, query: &[u8], buf: &mut [u8]) -> Option<usize> {
    socket.send_to(query, server).ok()?;
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        if let Ok((n, _)) = socket.recv_from(buf)
            && n >= 2
            && buf[..2] == query[..2]
        {
            return Some(n);
        }
    }
    None
}

fn with_id(mut query: Vec<u8>, id: u16) -> Vec<u8> {
    query[..2].copy_from_slice(&id.to_be_bytes());
    query
}

/// A client thread in `ns`, bound to `source`: every 10 ms until `stop`, one `step` (which asks
/// its queries and says how many it asked and how many were answered); the totals.
fn client_thread(
    ns: &NetNs,
    source: &'static str,
    stop: Arc<AtomicBool>,
    mut step: impl FnMut(&UdpSocket, &mut [u8], u16) -> (u64, u64) + Send + 'static,
) -> thread::JoinHandle<(u64, u64)> {
    let ns = ns.name.clone();
    thread::spawn(move || {
        NetNs::enter(&ns, move || {
            let source: IpAddr = source.parse().expect("an address");
            let socket = UdpSocket::bind(SocketAddr::new(source, 0)).expect("bind");
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .ok();
            let mut buf = vec![0u8; 4096];
            let (mut asked, mut answered) = (0u64, 0u64);
            let mut id: u16 = 0;
            while !stop.load(Ordering::Relaxed) {
                id = id.wrapping_add(2);
                let (a, b) = step(&socket, &mut buf, id);
                asked += a;
                answered += b;
                thread::sleep(Duration::from_millis(10));
            }
            (asked, answered)
        })
    })
}

/// The HAProxy-like client: AAAA then A for one name every 10 ms until `stop`; (asked, answered).
fn haproxy_like(
    ns: &NetNs,
    server: SocketAddr,
    name: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(u64, u64)> {
    client_thread(ns, LEGIT, stop, move |socket, buf, id| {
        let mut answered = 0;
        for (qtype, id) in [(28u16, id), (1, id + 1)] {
            let query = with_id(
                QueryBuilder::new(&name, qtype).edns(1232, false).bytes(),
                id,
            );
            if let Some(n) = ask(socket, server, &query, buf)
                && buf[2] & 0x02 == 0
                && n > query.len()
            {
                answered += 1;
            }
        }
        (2, answered)
    })
}

/// The cookie option data of an answer.
fn cookie_of(answer: &[u8]) -> Option<Vec<u8>> {
    match Message::from_vec(answer)
        .ok()?
        .edns?
        .options()
        .get(EdnsCode::Cookie)?
    {
        EdnsOption::Unknown(_, data) => Some(data.clone()),
        _ => None,
    }
}

fn cookie_query(name: &str, cookie: &[u8], id: u16) -> Vec<u8> {
    let option = [vec![0, 10, 0, cookie.len() as u8], cookie.to_vec()].concat();
    with_id(
        QueryBuilder {
            edns: Some((1232, false, 0, option)),
            ..QueryBuilder::new(name, 1)
        }
        .bytes(),
        id,
    )
}

/// The cookie client: learns its server cookie, then asks A every 10 ms with it (renewing it
/// from every answer); (asked, answered with the records).
fn cookie_client(
    ns: &NetNs,
    server: SocketAddr,
    name: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(u64, u64)> {
    let mut cookie = vec![0x5a; 8];
    client_thread(ns, COOKIE_CLIENT, stop, move |socket, buf, id| {
        let query = cookie_query(&name, &cookie, id);
        let Some(n) = ask(socket, server, &query, buf) else {
            return (1, 0);
        };
        if let Some(fresh) = cookie_of(&buf[..n]) {
            cookie = fresh;
        }
        let ancount = u16::from_be_bytes([buf[6], buf[7]]);
        let answered = buf[3] & 0x0f == 0 && buf[2] & 0x02 == 0 && ancount > 0;
        (1, u64::from(answered))
    })
}

/// The second veth pair between the link's namespaces: the server's end (its name) holds
/// SERVER_B, the client's end the legitimate clients' addresses and a pass-through program (so
/// that native XDP_TX answers are delivered).
fn second_pair(link: &Link) -> (String, aya::Ebpf) {
    let suffix = crate::netns::unique_suffix();
    let (server_if, client_if) = (format!("fs{suffix}"), format!("fc{suffix}"));
    sh(std::process::Command::new("ip").args([
        "link",
        "add",
        &server_if,
        "netns",
        &link.server_ns.name,
        "type",
        "veth",
        "peer",
        "name",
        &client_if,
        "netns",
        &link.client_ns.name,
    ]));
    link.server_ns
        .ip(&["addr", "add", &format!("{SERVER_B}/24"), "dev", &server_if]);
    for address in [LEGIT, COOKIE_CLIENT] {
        link.client_ns
            .ip(&["addr", "add", &format!("{address}/24"), "dev", &client_if]);
    }
    for (ns, ifname) in [(&link.server_ns, &server_if), (&link.client_ns, &client_if)] {
        ns.ip(&["link", "set", ifname, "up"]);
    }
    let server_mac = crate::netns::mac_of(&link.server_ns, &server_if);
    let client_mac = crate::netns::mac_of(&link.client_ns, &client_if);
    link.client_ns.ip(&[
        "neigh",
        "replace",
        SERVER_B,
        "lladdr",
        &server_mac,
        "dev",
        &client_if,
        "nud",
        "permanent",
    ]);
    for address in [LEGIT, COOKIE_CLIENT] {
        link.server_ns.ip(&[
            "neigh",
            "replace",
            address,
            "lladdr",
            &client_mac,
            "dev",
            &server_if,
            "nud",
            "permanent",
        ]);
    }
    let pass = crate::netns::attach_pass_program(&link.client_ns, &client_if);
    (server_if, pass)
}

fn start(
    responder: Responder,
    link: &Link,
    second: &str,
    dir: &TempDir,
    records: &str,
    table: &RecordTable,
) -> (Option<Agent>, Option<Knot>, Vec<u32>) {
    let server = SocketAddr::new(link.server.ipv4.parse().expect("an address"), PORT);
    match responder {
        Responder::Hostport | Responder::HostportDropping => {
            let slip = if responder == Responder::Hostport {
                SLIP
            } else {
                0
            };
            let config = dir.write(
                "config.yaml",
                &format!(
                    "{records}clients:\n  rateLimit:\n    responsesPerSecond: {RATE}\n    slip: {slip}\n    exempt: [{EXEMPT}]\n"
                ),
            );
            let agent = Agent::start_native(
                link,
                &["--config", config.to_str().expect("UTF-8")],
                &["--udp-workers", "1", "--interface", second],
            );
            let pid = agent.pid();
            (Some(agent), None, vec![pid])
        }
        Responder::Knot => {
            let zones: Vec<(String, String)> = table
                .zones()
                .iter()
                .map(|z| (z.spec.apex.to_string(), zone_file(table, z)))
                .collect();
            let modules = format!(
                "mod-cookies:\n  - id: default\n\
                 mod-rrl:\n  - id: default\n    rate-limit: {RATE}\n    slip: {SLIP}\n    whitelist: {EXEMPT}\n"
            );
            let interfaces = format!("{}@{PORT}, {second}", link.server.ifname);
            let knot = Knot::start_with_modules(
                &link.server_ns,
                server,
                &zones,
                Some(&interfaces),
                &modules,
                &["mod-cookies/default", "mod-rrl/default"],
            );
            let pid = knot.pid();
            (None, Some(knot), vec![pid])
        }
    }
}

fn measure(responder: Responder, records: &str, table: &RecordTable, names: &[String]) -> Result {
    let link = Link::bare("flood");
    let (second, pass) = second_pair(&link);
    system::threaded_napi(&link.server_ns, &link.server.ifname);
    system::threaded_napi(&link.client_ns, &link.client.ifname);
    let dir = TempDir::new("flood");
    let (agent, knot, pids) = start(responder, &link, &second, &dir, records, table);
    for pid in pids
        .iter()
        .chain(&system::napi_threads(&link.server.ifname))
    {
        system::pin(*pid, RESPONDER_CPU);
    }
    let queries = dir.write("queries.txt", &bench::query_file(names, "A"));
    let server_b = SocketAddr::new(SERVER_B.parse().expect("an address"), PORT);
    let stop = Arc::new(AtomicBool::new(false));
    let legit = haproxy_like(&link.client_ns, server_b, names[0].clone(), stop.clone());
    let cookie = cookie_client(&link.client_ns, server_b, names[1].clone(), stop.clone());
    thread::sleep(Duration::from_millis(500));
    let program = (responder != Responder::Knot)
        .then(|| system::xdp_program_id(&link.server_ns, &link.server.ifname))
        .flatten();
    let stats = system::ProgramStats::enable();
    let program_before = program.and_then(system::program_run_stats);
    let (rx0, tx0) = byte_counters(&link.server_ns, &link.server.ifname);
    let cpu0 = system::cpu_busy_seconds(RESPONDER_CPU);
    let flood = load::kxdpgun_from(
        &link.client_ns,
        &link.client.ifname,
        link.server.ipv4,
        PORT,
        &queries,
        10_000_000,
        SECONDS,
        GENERATOR_CPU,
        Some(FLOOD_SOURCES),
    );
    let cpu = system::cpu_busy_seconds(RESPONDER_CPU) - cpu0;
    let (rx1, tx1) = byte_counters(&link.server_ns, &link.server.ifname);
    let program_ns = program_before
        .zip(program.and_then(system::program_run_stats))
        .and_then(|((t0, n0), (t1, n1))| {
            (n1 > n0).then(|| t1.saturating_sub(t0).as_nanos() as f64 / (n1 - n0) as f64)
        });
    drop(stats);
    stop.store(true, Ordering::Relaxed);
    let legit = legit.join().expect("the HAProxy-like client");
    let cookie = cookie.join().expect("the cookie client");
    drop((agent, knot, pass));
    Result {
        responder,
        flood,
        bytes_in: rx1 - rx0,
        bytes_out: tx1 - tx0,
        cpu,
        program_ns,
        legit,
        cookie,
    }
}

/// The largest answer over the query that asked for it, among the zone's names and types, for
/// a client no limit applies to (EDNS, 1232 bytes).
fn largest_amplification(table: &RecordTable, names: &[String]) -> (f64, String) {
    let mut best = (0.0, String::new());
    for name in names {
        for qtype in [1u16, 28, 33, 255, 2, 6] {
            let query = QueryBuilder::new(name, qtype).edns(1232, false).bytes();
            if let Some(answer) = respond(&query, Some(table), Transport::Udp) {
                let ratio = answer.bytes.len() as f64 / query.len() as f64;
                if ratio > best.0 {
                    best = (
                        ratio,
                        format!(
                            "{name} type {qtype}: {} / {} bytes",
                            answer.bytes.len(),
                            query.len()
                        ),
                    );
                }
            }
        }
    }
    best
}

pub fn run() {
    let (mut records, mut names) = bench::zone(1000);
    // A name with the largest set the kernel answers, the amplifier an attacker would pick.
    let sixteen: Vec<String> = (1..=16)
        .map(|i| format!("\"2001:db8::16:{i:x}\""))
        .collect();
    records.push_str(&format!("      big: [{}]\n", sixteen.join(", ")));
    names.push("big.bench.example".into());
    let snapshot = file::parse(&records, "bench zone".as_ref()).expect("a valid zone");
    let (table, _) = RecordTable::compile(&snapshot.zones, snapshot.records());
    let results: Vec<Result> = [
        Responder::Hostport,
        Responder::HostportDropping,
        Responder::Knot,
    ]
    .into_iter()
    .map(|r| measure(r, &records, &table, &names[..names.len() - 1]))
    .collect();
    let knot_cpu = results
        .iter()
        .find(|r| r.responder == Responder::Knot)
        .map(|r| r.cpu * 1e9 / r.flood.sent.max(1) as f64);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let per_packet = r.cpu * 1e9 / r.flood.sent.max(1) as f64;
            vec![
                r.responder.label().to_owned(),
                format!("{:.0}", r.flood.sent as f64 / r.flood.seconds),
                format!("{:.0}", r.flood.answered_per_second()),
                format!("{:.3}", r.bytes_out / r.bytes_in),
                format!("{per_packet:.0}"),
                knot_cpu.map_or("-".into(), |k| format!("{:.2}", per_packet / k)),
                r.program_ns.map_or("-".into(), |ns| format!("{ns:.0}")),
                format!(
                    "{}/{} ({:.1} %)",
                    r.legit.1,
                    r.legit.0,
                    r.legit.1 as f64 * 100.0 / r.legit.0.max(1) as f64
                ),
                format!(
                    "{}/{} ({:.1} %)",
                    r.cookie.1,
                    r.cookie.0,
                    r.cookie.1 as f64 * 100.0 / r.cookie.0.max(1) as f64
                ),
            ]
        })
        .collect();
    print_table(
        &format!(
            "flood: kxdpgun at its maximum for {SECONDS} s from {FLOOD_SOURCES} (spoofed, one rate-limit prefix) on CPU {GENERATOR_CPU}; \
             responder on CPU {RESPONDER_CPU}; rate limit {RATE}/s per /24, slip {SLIP}, {EXEMPT} exempt"
        ),
        &[
            "responder",
            "flood sent/s",
            "flood answered/s",
            "bytes out/in",
            "CPU ns/flood packet",
            "vs knotd",
            "XDP program ns/packet",
            "HAProxy-like (exempt)",
            "cookie client",
        ],
        &rows,
    );
    let (ratio, what) = largest_amplification(&table, &names);
    println!(
        "(bytes out/in: the server interface's bytes, flood and legitimate clients together. CPU \
         ns/flood packet: everything on the responder's CPU, the veth driver path included, per \
         flood packet; XDP program ns/packet: the program alone (BPF statistics, whose clock reads \
         add a few tens of ns). The largest answer/query ratio the zone allows an unlimited client: {ratio:.1} ({what}).)"
    );
}
