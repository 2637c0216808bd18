//! Restarts and upgrades without a lost query: with --pin-dir, the program and its maps outlive
//! the agent, the kernel keeps answering while no agent runs, and the next agent adopts them.

use std::{thread, time::Duration};

use hostport_dns_tests::{
    BpfFs, TempDir,
    agent::{Agent, binary},
    clients::dig,
    eventually,
    netns::{Link, sh},
    require_root,
};

const RECORDS: &str = "zones:\n  - name: prod.coreha.example\n    records:\n      web: [198.18.7.1, 198.18.7.2]\n      api: 198.18.7.10\n      old: 198.18.7.20\n";

fn start(link: &Link, records: &str, pin_dir: &str) -> Agent {
    Agent::start_native(link, &["--records", records], &["--pin-dir", pin_dir])
}

/// dnsperf from the client namespace for `seconds`, at a bounded rate: (sent, lost).
fn load(link: &Link, dir: &TempDir, seconds: u64) -> thread::JoinHandle<(u64, u64)> {
    let queries = dir.write(
        "queries.txt",
        "web.prod.coreha.example A\napi.prod.coreha.example A\nweb.prod.coreha.example AAAA\n",
    );
    let mut cmd = link.client_ns.command("dnsperf");
    cmd.args(["-s", link.server.ipv4, "-p", "1053", "-d"])
        .arg(&queries)
        .args(["-l", &seconds.to_string(), "-Q", "2000", "-t", "2"]);
    thread::spawn(move || {
        let out = sh(&mut cmd);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let number = |label: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(label))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {label:?} in dnsperf's output:\n{text}"))
        };
        (number("Queries sent:"), number("Queries lost:"))
    })
}

fn uninstall(link: &Link, pin_dir: &str) {
    sh(link
        .server_ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["uninstall", "--pin-dir", pin_dir]));
}

fn xdp_program_id(link: &Link) -> Option<u64> {
    let out = link
        .server_ns
        .ip(&["-j", "link", "show", &link.server.ifname]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    json[0]["xdp"]["prog"]["id"].as_u64()
}

#[test]
fn kill_9_and_restart_lose_no_query_and_the_table_is_reconciled() {
    require_root();
    let link = Link::new("restart");
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let pin_dir = pin_dir.to_str().expect("UTF-8");
    let dir = TempDir::new("restart");
    let records = dir.write("records.yaml", RECORDS);
    let records = records.to_str().expect("UTF-8");
    let first = start(&link, records, pin_dir);
    let load = load(&link, &dir, 8);
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
    let (sent, lost) = load.join().expect("the load finished");
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
    let link = Link::new("upgrade");
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let pin_dir = pin_dir.to_str().expect("UTF-8");
    let dir = TempDir::new("upgrade");
    let records = dir.write("records.yaml", RECORDS);
    let records = records.to_str().expect("UTF-8");
    let old = start(&link, records, pin_dir);
    let old_program = xdp_program_id(&link).expect("a program attached");
    let load = load(&link, &dir, 6);
    thread::sleep(Duration::from_secs(2));
    let new = start(&link, records, pin_dir);
    let new_program = xdp_program_id(&link).expect("a program attached");
    assert_ne!(
        old_program, new_program,
        "the link runs the new agent's program"
    );
    assert_eq!(old.stop(), Some(0));
    let (sent, lost) = load.join().expect("the load finished");
    assert!(sent > 5_000, "the load ran ({sent} queries)");
    assert_eq!(lost, 0, "queries lost across the upgrade");
    assert!(
        new.metric("hostport_dns_responses", &[("path", "xdp")]) > 0.0,
        "the new program answers"
    );
    drop(new);
    uninstall(&link, pin_dir);
}
