//! Restarts and upgrades without a lost query: with --pin-dir, the program and its maps outlive
//! the agent, the kernel keeps answering while no agent runs, and the next agent adopts them.

use std::{
    thread,
    time::{Duration, Instant},
};

use hostport_dns_tests::{
    BpfFs, TempDir,
    agent::{Agent, binary},
    clients::dig,
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::{Link, NetNs, sh},
    packet::QueryBuilder,
    require_root,
};
use serde::Deserialize;

/// How long a checker waits for an answer before it counts the query lost: a dropped query is
/// never answered, so a wait longer than a loaded machine's slowest answer loses nothing of
/// what the tests assert (answers arriving late are skipped by their ID).
const LOST_AFTER: Duration = Duration::from_secs(5);

const RECORDS: &str = "zones:\n  - name: prod.coreha.example\n    records:\n      web: [198.18.7.1, 198.18.7.2]\n      api: 198.18.7.10\n      old: 198.18.7.20\n";

/// What a pinned-restart test starts from: a link, a bpffs mount with a pin directory, and a
/// record file holding `records`.
struct PinnedBed {
    link: Link,
    bpffs: BpfFs,
    dir: TempDir,
    pin_dir: String,
    records: String,
}

impl PinnedBed {
    fn new(tag: &str, records: &str) -> Self {
        let link = Link::new(tag);
        let bpffs = BpfFs::mount();
        let pin_dir = bpffs.pin_dir().to_str().expect("UTF-8").to_owned();
        let dir = TempDir::new(tag);
        let records = dir
            .write("records.yaml", records)
            .to_str()
            .expect("UTF-8")
            .to_owned();
        Self {
            link,
            bpffs,
            dir,
            pin_dir,
            records,
        }
    }
}

fn start(link: &Link, records: &str, pin_dir: &str) -> Agent {
    Agent::start_native(link, &["--records", records], &["--pin-dir", pin_dir])
}

/// dnsperf from the client namespace at a bounded rate, running until [`Load::stop`].
struct Load {
    /// None once stopped.
    child: Option<std::process::Child>,
}

impl Load {
    fn start(link: &Link, dir: &TempDir) -> Self {
        Self::start_with(
            link,
            dir,
            "queries.txt",
            "web.prod.coreha.example A\napi.prod.coreha.example A\nweb.prod.coreha.example AAAA\n",
            &["-Q", "2000"],
        )
    }

    /// dnsperf sending the `queries` (its data file's lines) with `extra` options.
    fn start_with(link: &Link, dir: &TempDir, file: &str, queries: &str, extra: &[&str]) -> Self {
        let queries = dir.write(file, queries);
        let child = link
            .client_ns
            .command("dnsperf")
            .args(["-s", link.server.ipv4, "-p", "1053", "-d"])
            .arg(&queries)
            // Longer than any test: the load ends when the test says so.
            .args(["-l", "300", "-t", "2"])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start dnsperf");
        Self { child: Some(child) }
    }

    /// Stops the load (SIGINT: dnsperf prints its totals, counting the queries still in flight
    /// as interrupted, not lost) and returns (sent, lost).
    fn stop(self) -> (u64, u64) {
        let (sent, lost, _) = self.stop_with_codes();
        (sent, lost)
    }

    /// [`Load::stop`], and the response codes other than NOERROR that came back, as dnsperf
    /// prints them.
    fn stop_with_codes(mut self) -> (u64, u64, String) {
        let child = self.child.take().expect("stopped once");
        // SAFETY: a plain kill(2) of our own child, which has not been waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().expect("dnsperf's output");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let number = |label: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(label))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {label:?} in dnsperf's output:\n{text}"))
        };
        let codes = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Response codes:"))
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|code| !code.is_empty() && !code.starts_with("NOERROR"))
            .collect::<Vec<_>>()
            .join(", ");
        (number("Queries sent:"), number("Queries lost:"), codes)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The restart tests one at a time: each measures a swap under load, which a second test's
/// agents starting on the same two cores would blur.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn uninstall(link: &Link, pin_dir: &str) {
    sh(link
        .server_ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["uninstall", "--pin-dir", pin_dir]));
}

fn xdp_program_id(link: &Link) -> Option<u32> {
    hostport_dns_tests::bench::system::xdp_program_id(&link.server_ns, &link.server.ifname)
}

#[test]
fn kill_9_and_restart_lose_no_query_and_the_table_is_reconciled() {
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir,
        pin_dir,
        records,
    } = PinnedBed::new("restart", RECORDS);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    let first = start(&link, records, pin_dir);
    let load = Load::start(&link, &dir);
    thread::sleep(Duration::from_secs(2));
    // SIGKILL: no chance to clean up.
    drop(first);
    // A record changes and a name goes while no agent runs; the kernel keeps answering the old
    // table meanwhile.
    dir.write(
        "records.yaml",
        &RECORDS
            .replace("api: 198.18.7.10", "api: 198.18.7.11")
            .replace("      old: 198.18.7.20\n", ""),
    );
    thread::sleep(Duration::from_secs(2));
    assert_eq!(
        dig(
            &link.client_ns,
            link.server.ipv4,
            1053,
            &["web.prod.coreha.example"]
        )
        .answer
        .len(),
        2,
        "answered with no agent running"
    );
    let second = start(&link, records, pin_dir);
    assert!(
        second.logs().contains("adopted"),
        "the second agent adopts the pinned link:\n{}",
        second.logs()
    );
    eventually("the change made while down", 10, || {
        dig(
            &link.client_ns,
            link.server.ipv4,
            1053,
            &["api.prod.coreha.example"],
        )
        .answer_data()
            == ["198.18.7.11"]
    });
    // The adopted kernel table loses the name too (else XDP would still answer it).
    let old = dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["old.prod.coreha.example"],
    );
    assert_eq!(old.status, "NXDOMAIN", "{old:?}");
    // The load ran through the adoption (logged before start returned), and past dnsperf's
    // timeout (-t 2), so that a query dropped then counts as lost, not interrupted.
    thread::sleep(Duration::from_secs(3));
    let (sent, lost) = load.stop();
    assert!(sent > 10_000, "the load ran ({sent} queries)");
    assert_eq!(lost, 0, "queries lost across kill -9 and restart");
    drop(second);
    uninstall(&link, pin_dir);
    assert_eq!(
        xdp_program_id(&link),
        None,
        "uninstall detaches the program"
    );
}

#[test]
fn a_new_agent_replaces_the_program_under_load_without_losing_a_query() {
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir,
        pin_dir,
        records,
    } = PinnedBed::new("upgrade", RECORDS);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    let old = start(&link, records, pin_dir);
    let old_program = xdp_program_id(&link).expect("a program attached");
    let load = Load::start(&link, &dir);
    thread::sleep(Duration::from_secs(2));
    // A rolling restart: the new agent serves beside the old one (the sockets are shared) and
    // waits for the pin directory, which one agent holds at a time.
    let new = Agent::start_native_until(
        &link,
        &["--records", records],
        &["--pin-dir", pin_dir],
        "another agent holds the pin directory",
    );
    assert_eq!(
        xdp_program_id(&link),
        Some(old_program),
        "the old agent's program answers meanwhile"
    );
    thread::sleep(Duration::from_secs(1));
    assert_eq!(old.stop(), Some(0));
    eventually("the new agent adopts the pinned link", 10, || {
        new.logs().contains("adopted") && new.logs().contains("hostport-dns is serving")
    });
    let new_program = xdp_program_id(&link).expect("a program attached");
    assert_ne!(
        old_program, new_program,
        "the link runs the new agent's program"
    );
    // The load ran through the swap and the old agent's exit, and past dnsperf's timeout (-t 2),
    // so that a query dropped then counts as lost, not interrupted.
    thread::sleep(Duration::from_secs(3));
    let (sent, lost) = load.stop();
    assert!(sent > 5_000, "the load ran ({sent} queries)");
    assert_eq!(lost, 0, "queries lost across the upgrade");
    assert!(
        new.metric("hostport_dns_responses", &[("path", "xdp")]) > 0.0,
        "the new program answers"
    );
    drop(new);
    uninstall(&link, pin_dir);
}

/// An upgrade that changes the map layout, with a source slow to deliver (the API server takes
/// seconds to list): the old program keeps answering from its own table until the new agent has
/// written its first complete one, and only then is it replaced.
#[test]
fn the_old_layouts_program_answers_until_the_new_agents_first_table_is_written() {
    require_root();
    let _serial = one_at_a_time();
    let ns = NetNs::new("upgrade");
    let api = FakeApi::start(Some(&ns));
    api.apply(
        Kind::Pod,
        PodSpec::ingress("web-1", "ingress", "web", "node-1", "198.18.7.1").to_json(),
    );
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let pin_dir = pin_dir.to_str().expect("UTF-8");
    let dir = TempDir::new("upgrade");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: prod.coreha.example\nkubernetes:\n  apiServer: {}\npods:\n  - zone: prod.coreha.example\n",
            api.url()
        ),
    );
    let name = "web.ingress.prod.coreha.example";
    let answer = || dig(&ns, "127.0.0.1", 1053, &[name]);
    let first = Agent::start_on_lo(&ns, &config, &["--pin-dir", pin_dir]);
    eventually("the pod is served", 10, || {
        answer().answer_data() == ["198.18.7.1"]
    });
    // Attached after its first complete table, which the server may answer from a moment
    // earlier.
    eventually("the first agent's program is attached", 10, || {
        first.logs().contains("XDP program attached")
    });
    drop(first);
    // The pinned maps now look like another layout's: the next agent must start fresh maps,
    // while the pinned link keeps the old program, and its maps, answering.
    let mut renamed = 0;
    for entry in std::fs::read_dir(pin_dir)
        .expect("the pin directory")
        .flatten()
    {
        let path = entry.path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if let Some(stem) =
            file.strip_suffix(&format!("_v{}", hostport_dns_common::maps::LAYOUT_VERSION))
        {
            std::fs::rename(&path, path.with_file_name(format!("{stem}_v0")))
                .expect("rename a pin");
            renamed += 1;
        }
    }
    assert!(renamed >= 4, "the maps were pinned ({renamed})");
    assert_eq!(
        answer().answer_data(),
        ["198.18.7.1"],
        "the pinned program answers with no agent running"
    );
    api.hold_lists();
    let second = Agent::start_on_lo(&ns, &config, &["--pin-dir", pin_dir]);
    // Until its first list arrives the new agent's userspace can only say SERVFAIL: every
    // answer here is the old program's.
    // The lists are held, so the window is counted in queries (and lasts at least 3 s): a loaded
    // machine runs fewer digs a second, never fewer of them while the lists are held.
    let window = Instant::now();
    let mut answered = 0;
    while answered < 6 || window.elapsed() < Duration::from_secs(3) {
        let reply = answer();
        assert_eq!(
            (reply.status.as_str(), reply.answer_data()),
            ("NOERROR", vec!["198.18.7.1".to_owned()]),
            "answered by the old program while the new agent lists; its log:\n{}",
            second.logs()
        );
        answered += 1;
    }
    eventually("the new agent waiting for its list", 30, || {
        api.list_requests() > 0
    });
    api.release_lists();
    eventually("the new program is attached", 10, || {
        second.logs().contains("XDP program attached")
    });
    let reply = answer();
    assert_eq!(reply.answer_data(), ["198.18.7.1"], "{reply:?}");
    drop(second);
    sh(ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["uninstall", "--pin-dir", pin_dir]));
}

/// The id of the map pinned as `name` in `pin_dir`.
fn pinned_map_id(pin_dir: &str, name: &str) -> u32 {
    let pin = hostport_dns::xdp::pins::map_pin(std::path::Path::new(pin_dir), name);
    aya::maps::MapInfo::from_pin(&pin)
        .unwrap_or_else(|e| panic!("{}: {e}", pin.display()))
        .id()
}

#[test]
fn pinned_maps_are_adopted_as_one_set_or_not_at_all() {
    use hostport_dns_common::maps;
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir: _dir,
        pin_dir,
        records,
    } = PinnedBed::new("pinset", RECORDS);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    drop(start(&link, records, pin_dir));
    let first_set = pinned_map_id(pin_dir, maps::GENERATION);
    // A whole set: the next agent adopts it.
    let second = start(&link, records, pin_dir);
    assert!(second.logs().contains("adopted"), "{}", second.logs());
    assert_eq!(pinned_map_id(pin_dir, maps::GENERATION), first_set);
    drop(second);
    // One map gone: the next agent adopts none of them (else the attached program would read
    // the new agent's generation number against a table it never wrote).
    std::fs::remove_file(hostport_dns::xdp::pins::map_pin(
        std::path::Path::new(pin_dir),
        maps::NAMES,
    ))
    .expect("remove a pin");
    let third = start(&link, records, pin_dir);
    assert_ne!(
        pinned_map_id(pin_dir, maps::GENERATION),
        first_set,
        "a fresh set of maps; the agent's log:\n{}",
        third.logs()
    );
    assert!(
        third.logs().contains("pinned maps not adopted"),
        "{}",
        third.logs()
    );
    let web = dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["web.prod.coreha.example"],
    );
    assert_eq!(web.answer_data(), ["198.18.7.1", "198.18.7.2"], "{web:?}");
    assert!(
        third.metric("hostport_dns_responses", &[("path", "xdp")]) > 0.0,
        "the fresh set answers"
    );
    drop(third);
    uninstall(&link, pin_dir);
}

#[test]
fn a_second_agent_on_one_pin_directory_waits_for_the_first() {
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir: _dir,
        pin_dir,
        records,
    } = PinnedBed::new("pinlock", RECORDS);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    let first = start(&link, records, pin_dir);
    let first_set = pinned_map_id(pin_dir, hostport_dns_common::maps::GENERATION);
    let second = Agent::start_native_until(
        &link,
        &["--records", records],
        &["--pin-dir", pin_dir],
        "another agent holds the pin directory",
    );
    // It writes nothing while the first runs: the table maps are the first's alone.
    thread::sleep(Duration::from_secs(1));
    assert!(
        !second.logs().contains("XDP program attached"),
        "{}",
        second.logs()
    );
    assert_eq!(
        pinned_map_id(pin_dir, hostport_dns_common::maps::GENERATION),
        first_set
    );
    drop(first);
    eventually("the second agent takes the directory over", 10, || {
        second.logs().contains("adopted")
    });
    drop(second);
    uninstall(&link, pin_dir);
}

/// Asks `name` A over and over from the client side of `link` until `stop`, checking every
/// answer against `expected` (the message after its ID): (answered, lost, wrong).
fn ask_until(
    link: &Link,
    name: &'static str,
    expected: Vec<u8>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<(u64, u64, u64)> {
    let server = std::net::SocketAddr::new(link.server.ipv4.parse().expect("v4"), 1053);
    let ns = link.client_ns.name.clone();
    thread::spawn(move || {
        NetNs::enter(&ns, move || {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("a socket");
            socket
                .set_read_timeout(Some(LOST_AFTER))
                .expect("a timeout");
            let (mut answered, mut lost, mut wrong) = (0, 0, 0);
            let mut buf = [0u8; 1500];
            let mut id = 0u16;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                id = id.wrapping_add(1);
                let query = hostport_dns_tests::packet::QueryBuilder {
                    id,
                    ..hostport_dns_tests::packet::QueryBuilder::new(name, 1)
                }
                .bytes();
                socket.send_to(&query, server).expect("send");
                loop {
                    match socket.recv(&mut buf) {
                        // A late answer to an earlier query: not this one's.
                        Ok(n) if n >= 2 && buf[..2] != id.to_be_bytes() => continue,
                        Ok(n) => {
                            answered += 1;
                            if buf[2..n] != expected[2..] {
                                wrong += 1;
                            }
                        }
                        Err(_) => lost += 1,
                    }
                    break;
                }
            }
            (answered, lost, wrong)
        })
    })
}

#[test]
fn an_upgrade_from_map_layout_5_loses_no_query_and_answers_none_wrong() {
    use hostport_dns_tests::legacy::Legacy;
    require_root();
    let _serial = one_at_a_time();
    let link = Link::new("layout5");
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let dir = TempDir::new("layout5");
    let records = dir.write("records.yaml", RECORDS);
    let snapshot = hostport_dns::sources::file::parse(RECORDS, "records".as_ref()).expect("valid");
    let (table, _) =
        hostport_dns_core::table::RecordTable::compile(&snapshot.zones, snapshot.records());
    // The previous release on the node: its program attached through a pinned link, answering
    // from its own maps (layout 5), no agent running.
    let (ifname, server, legacy_pins) = (
        link.server.ifname.clone(),
        link.server.ipv4.parse().expect("v4"),
        pin_dir.clone(),
    );
    let legacy_table = table.clone();
    link.server_ns.run(move || {
        let mut legacy = Legacy::load(&legacy_pins);
        legacy.write(&legacy_table, &[server]);
        legacy.attach(&ifname);
    });
    let old_program = xdp_program_id(&link).expect("the layout-5 program attached");
    let name = "web.prod.coreha.example";
    let expected = hostport_dns_core::answer::respond(
        &hostport_dns_tests::packet::QueryBuilder::new(name, 1).bytes(),
        Some(&table),
        hostport_dns_core::dns::message::Transport::Udp,
    )
    .expect("an answer")
    .bytes;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asking = ask_until(&link, name, expected, stop.clone());
    thread::sleep(Duration::from_secs(1));
    // The upgrade: an agent of this release on the same pin directory.
    let pin_dir = pin_dir.to_str().expect("UTF-8");
    let agent = start(&link, records.to_str().expect("UTF-8"), pin_dir);
    eventually("the new agent's program takes the link over", 10, || {
        xdp_program_id(&link).is_some_and(|id| id != old_program)
    });
    // Past dnsperf's timeout (-t 2): a query dropped at the swap counts as lost.
    thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (answered, lost, wrong) = asking.join().expect("the asking thread");
    println!("{answered} answered, {lost} lost, {wrong} wrong across the upgrade");
    assert!(answered > 100, "queries ran ({answered})");
    assert_eq!(
        (lost, wrong),
        (0, 0),
        "across the upgrade; the agent's log:\n{}",
        agent.logs()
    );
    assert!(
        agent.metric("hostport_dns_responses", &[("path", "xdp")]) > 0.0,
        "the new program answers"
    );
    drop(agent);
    uninstall(&link, pin_dir);
}

/// One A query from the client side, by plain UDP: the answer's bytes, or None (no answer, or
/// the port closed once the kernel passes the query up to no one).
fn ask_once(link: &Link, name: &str) -> Option<Vec<u8>> {
    let server = std::net::SocketAddr::new(link.server.ipv4.parse().expect("an address"), 1053);
    let query = hostport_dns_tests::packet::QueryBuilder::new(name, 1).bytes();
    hostport_dns_tests::clients::udp_exchange(&link.client_ns, server, query)
}

/// The XDP program's counters, read from the pin directory.
fn pinned_stats(link: &Link, pin_dir: &str) -> serde_json::Value {
    let out = sh(link
        .server_ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["stats", "--pin-dir", pin_dir, "--json"]));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_pinned_program_stops_answering_once_its_lease_runs_out_and_a_new_agent_takes_over() {
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir,
        pin_dir,
        records,
    } = PinnedBed::new("lease", RECORDS);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    // Long enough that the stop and the next query fit inside it on a loaded machine.
    let lease = ["--pin-dir", pin_dir, "--pinned-lease", "10"];
    let first = Agent::start_native(&link, &["--records", records], &lease);
    assert!(ask_once(&link, "web.prod.coreha.example").is_some());
    first.stop();
    // Inside the lease the kernel answers with no agent running (a restart loses nothing)...
    assert!(
        ask_once(&link, "web.prod.coreha.example").is_some(),
        "answered inside the lease"
    );
    let stopped = Instant::now();
    // ...and past it, nothing answers: the program passes every query up, to no one.
    eventually("the lease runs out", 40, || {
        ask_once(&link, "web.prod.coreha.example").is_none()
    });
    let silent_after = stopped.elapsed();
    assert!(
        pinned_stats(&link, pin_dir)["no_agent"].as_u64() > Some(0),
        "{}",
        pinned_stats(&link, pin_dir)
    );
    assert!(
        xdp_program_id(&link).is_some(),
        "the program stays attached (inert) until uninstalled"
    );
    // A new agent adopts the expired table, and XDP answers again once its own table is in,
    // not before: its first table waits for an API server that holds its lists, and meanwhile
    // the old table (web at 198.18.7.1) must not answer; the new one has web at 198.18.7.9.
    let api = FakeApi::start(Some(&link.server_ns));
    api.hold_lists();
    let config = dir.write(
        "kube.yaml",
        &format!(
            "zones:\n  - name: kube.coreha.test\nkubernetes:\n  apiServer: {}\npods:\n  - zone: kube.coreha.test\n",
            api.url()
        ),
    );
    let moved = dir.write("moved.yaml", &RECORDS.replace("198.18.7.1,", "198.18.7.9,"));
    let answered_before = pinned_stats(&link, pin_dir)["a"].as_u64();
    let second = Agent::start_native(
        &link,
        &[
            "--records",
            moved.to_str().expect("UTF-8"),
            "--config",
            config.to_str().expect("UTF-8"),
        ],
        &lease,
    );
    let old_address = [198u8, 18, 7, 1];
    let holding = Instant::now();
    let mut asked = 0;
    // Counted in queries (the lists are held), at least 2 s of them.
    while asked <= 10 || holding.elapsed() < Duration::from_secs(2) || api.list_requests() == 0 {
        asked += 1;
        if let Some(answer) = ask_once(&link, "web.prod.coreha.example") {
            assert!(
                !answer.windows(4).any(|w| w == old_address),
                "the expired table answered before the new agent wrote its own"
            );
        }
        assert!(
            holding.elapsed() < Duration::from_secs(30),
            "no list asked for"
        );
    }
    assert!(asked > 10, "asked {asked} times while the lists were held");
    api.release_lists();
    eventually("XDP answers for the new agent", 15, || {
        ask_once(&link, "web.prod.coreha.example")
            .is_some_and(|answer| answer.windows(4).any(|w| w == [198, 18, 7, 9]))
            && pinned_stats(&link, pin_dir)["a"].as_u64() > answered_before
    });
    drop(second);
    uninstall(&link, pin_dir);
    eprintln!(
        "silent {:.1} s after the stop (lease 10 s)",
        silent_after.as_secs_f64()
    );
}

const RECORDS_WITH_SRV: &str = "zones:\n  - name: prod.coreha.example\n    records:\n      web: [198.18.7.1, 198.18.7.2]\n    srv:\n      _https._tcp.web: [{ port: 443, target: web }]\n";

/// How the chart's DaemonSet replaces a pod on a node, read from its rendered defaults
/// (deploy/manifests): with a surge, the new pod starts beside the old one (only possible when
/// the pods declare no host ports); otherwise the old one stops first.
fn chart_rolls_with_a_surge() -> bool {
    let path = hostport_dns_tests::workspace_root().join("deploy/manifests/hostport-dns.yaml");
    let text = std::fs::read_to_string(&path).expect("the plain manifests");
    let daemonset = serde_yaml_ng::Deserializer::from_str(&text)
        .filter_map(|doc| serde_yaml_ng::Value::deserialize(doc).ok())
        .find(|doc| doc["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let spec = &daemonset["spec"];
    let surge = spec["updateStrategy"]["rollingUpdate"]["maxSurge"]
        .as_u64()
        .unwrap_or(0);
    let host_ports = spec["template"]["spec"]["containers"][0]["ports"]
        .as_sequence()
        .is_some_and(|ports| !ports.is_empty());
    surge > 0 && !host_ports
}

/// What a checking client counted: answers, queries that got none (a timeout, a refused port,
/// a connection that could not be made again), answers that were not NOERROR with the expected
/// number of records.
#[derive(Debug, Default)]
struct Tally {
    answered: u64,
    lost: u64,
    wrong: u64,
}

impl Tally {
    fn check(&mut self, answer: &[u8], id: u16, records: u16) {
        self.answered += 1;
        let rcode = answer.get(3).map(|b| b & 0x0f);
        let count = answer.get(6..8).map(|c| u16::from_be_bytes([c[0], c[1]]));
        if answer.get(..2) != Some(&id.to_be_bytes()[..])
            || rcode != Some(0)
            || count != Some(records)
        {
            self.wrong += 1;
        }
    }
}

/// Asks `query` (built for each ID) over UDP from the client side until `stop`, one at a time.
fn udp_checker(
    link: &Link,
    query: impl Fn(u16) -> Vec<u8> + Send + 'static,
    records: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<Tally> {
    let server = std::net::SocketAddr::new(link.server.ipv4.parse().expect("v4"), 1053);
    let ns = link.client_ns.name.clone();
    thread::spawn(move || {
        NetNs::enter(&ns, move || {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("a socket");
            socket
                .set_read_timeout(Some(LOST_AFTER))
                .expect("a timeout");
            let mut tally = Tally::default();
            let mut buf = [0u8; 1500];
            let mut id = 0u16;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                id = id.wrapping_add(1);
                // A refused port (ICMP) shows as an error on the send or the receive.
                if socket.send_to(&query(id), server).is_err() {
                    tally.lost += 1;
                    continue;
                }
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) if n >= 2 && buf[..2] != id.to_be_bytes() => continue,
                        Ok(n) => tally.check(&buf[..n], id, records),
                        Err(_) => tally.lost += 1,
                    }
                    break;
                }
            }
            tally
        })
    })
}

/// Asks `query` over one TCP connection at a time until `stop`, as RFC 7766 clients do: when
/// the server closes the connection between queries, the query goes again on a new one; a
/// query that cannot be sent or answered on a new connection is lost.
fn tcp_checker(
    link: &Link,
    query: impl Fn(u16) -> Vec<u8> + Send + 'static,
    records: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<Tally> {
    use std::io::{Read, Write};
    let server = std::net::SocketAddr::new(link.server.ipv4.parse().expect("v4"), 1053);
    let ns = link.client_ns.name.clone();
    let exchange = |stream: &mut std::net::TcpStream, query: &[u8]| -> std::io::Result<Vec<u8>> {
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        stream.write_all(&framed)?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len)?;
        let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    };
    let connect = move || -> std::io::Result<std::net::TcpStream> {
        let stream = std::net::TcpStream::connect_timeout(&server, LOST_AFTER)?;
        stream.set_read_timeout(Some(LOST_AFTER))?;
        Ok(stream)
    };
    thread::spawn(move || {
        NetNs::enter(&ns, move || {
            let mut tally = Tally::default();
            let mut stream = connect().ok();
            let mut id = 0u16;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                id = id.wrapping_add(1);
                let bytes = query(id);
                let first = stream.as_mut().map(|s| exchange(s, &bytes));
                let answer = match first {
                    Some(Ok(answer)) => Ok(answer),
                    // Closed (or never open): once more on a new connection.
                    _ => connect().and_then(|mut s| {
                        let answer = exchange(&mut s, &bytes);
                        stream = Some(s);
                        answer
                    }),
                };
                match answer {
                    Ok(answer) => tally.check(&answer, id, records),
                    Err(_) => {
                        tally.lost += 1;
                        stream = None;
                        thread::sleep(Duration::from_millis(10));
                    }
                }
            }
            tally
        })
    })
}

/// A rolling update as the chart runs it (with its surge, the new pod starts beside the old one,
/// which stops once the new one is ready; without, the old one stops first), with clients on
/// both paths that check every answer: A over UDP (XDP), SRV over UDP, A with a DNS cookie (both
/// answered by userspace) and SRV over persistent TCP connections. Nothing is lost, and every
/// answer is NOERROR with its records.
#[test]
fn a_surge_restart_under_load_loses_no_query_on_either_path() {
    require_root();
    let _serial = one_at_a_time();
    let PinnedBed {
        link,
        bpffs: _bpffs,
        dir,
        pin_dir,
        records,
    } = PinnedBed::new("surge", RECORDS_WITH_SRV);
    let (pin_dir, records) = (pin_dir.as_str(), records.as_str());
    let old = start(&link, records, pin_dir);
    let load = Load::start(&link, &dir);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let query = |name: &'static str, qtype: u16, cookie: bool| {
        move |id: u16| {
            let mut q = QueryBuilder {
                id,
                ..QueryBuilder::new(name, qtype)
            };
            if cookie {
                q = q.edns(1232, false).option(10, &[1, 2, 3, 4, 5, 6, 7, 8]);
            }
            q.bytes()
        }
    };
    let web = "web.prod.coreha.example";
    let srv = "_https._tcp.web.prod.coreha.example";
    let checkers = [
        (
            "A, UDP (XDP)",
            udp_checker(&link, query(web, 1, false), 2, stop.clone()),
        ),
        (
            "SRV, UDP",
            udp_checker(&link, query(srv, 33, false), 1, stop.clone()),
        ),
        (
            "A with a cookie, UDP",
            udp_checker(&link, query(web, 1, true), 2, stop.clone()),
        ),
        (
            "SRV, TCP",
            tcp_checker(&link, query(srv, 33, false), 1, stop.clone()),
        ),
    ];
    thread::sleep(Duration::from_secs(2));
    let new = if chart_rolls_with_a_surge() {
        let new = Agent::start_native_until(
            &link,
            &["--records", records],
            &["--pin-dir", pin_dir],
            "another agent holds the pin directory",
        );
        thread::sleep(Duration::from_secs(1));
        assert_eq!(old.stop(), Some(0));
        new
    } else {
        assert_eq!(old.stop(), Some(0));
        start(&link, records, pin_dir)
    };
    eventually("the new agent adopts the pinned link", 10, || {
        new.logs().contains("adopted") && new.logs().contains("hostport-dns is serving")
    });
    // Past dnsperf's timeout (-t 2): a query dropped at the swap counts as lost.
    thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut failures = Vec::new();
    for (what, checker) in checkers {
        let tally = checker.join().expect("the checker");
        eprintln!("{what}: {tally:?}");
        if tally.answered < 100 || tally.lost > 0 || tally.wrong > 0 {
            failures.push(format!("{what}: {tally:?}"));
        }
    }
    let (sent, lost) = load.stop();
    eprintln!("dnsperf, A over XDP: {sent} sent, {lost} lost");
    if lost > 0 {
        failures.push(format!("dnsperf: {lost} of {sent} lost"));
    }
    assert!(failures.is_empty(), "{failures:?}");
    drop(new);
    uninstall(&link, pin_dir);
}

/// The stop itself, under steady load (one UDP worker each, 3,000 queries a second, well within
/// what the survivor answers alone): the stopping agent takes its UDP sockets out of the
/// reuse-port groups, answers what they hold, and closes them; the agent beside it takes the
/// rest. Userspace only (no XDP), so every query meets the handover. (Closed as they were, the
/// sockets dropped the 10 to 20 queries they held: measured with the agent before the handover.)
#[test]
fn a_stopping_agent_hands_its_udp_sockets_over_without_losing_a_query() {
    require_root();
    let _serial = one_at_a_time();
    let ns = NetNs::new("handover");
    let dir = TempDir::new("handover");
    let records = dir.write("records.yaml", RECORDS_WITH_SRV);
    let records = records.to_str().expect("UTF-8");
    let args = [
        "--records",
        records,
        "--xdp-mode",
        "off",
        "--udp-workers",
        "2",
    ];
    let old = Agent::start_with_metrics(&ns, "127.0.0.1:9354", &args);
    let new = Agent::start_with_metrics(&ns, "127.0.0.1:9355", &args);
    let queries = dir.write("srv.txt", "_https._tcp.web.prod.coreha.example SRV\n");
    let flood = ns
        .command("dnsperf")
        .args(["-s", "127.0.0.1", "-p", "1053", "-d"])
        .arg(&queries)
        .args(["-l", "300", "-t", "5", "-c", "8", "-q", "500", "-Q", "3000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start dnsperf");
    let flood = Load { child: Some(flood) };
    thread::sleep(Duration::from_secs(2));
    assert_eq!(old.stop(), Some(0));
    // Past dnsperf's timeout (-t 5, which a loaded machine's userspace answers within): a query
    // dropped at the stop counts as lost, not interrupted.
    thread::sleep(Duration::from_secs(6));
    let (sent, lost, codes) = flood.stop_with_codes();
    eprintln!("{sent} sent, {lost} lost, other codes [{codes}]");
    assert!(sent > 2_000, "the flood ran ({sent} queries)");
    assert_eq!(
        (lost, codes.as_str()),
        (0, ""),
        "lost or wrong across the stop"
    );
    drop(new);
}
