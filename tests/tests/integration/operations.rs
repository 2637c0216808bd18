//! What operators see: metrics and health over HTTP, checked against the traffic the test sent,
//! and the `records`, `stats` and `query` subcommands.

use hostport_dns_tests::{
    BpfFs, TempDir,
    agent::{Agent, binary},
    clients::dig,
    eventually,
    netns::{Link, sh},
    prometheus::assert_exposition_is_clean,
    require_root,
};

const RECORDS: &str = "zones:\n  - name: prod.coreha.example\n    records:\n      web: [198.18.7.1, 198.18.7.2, \"2001:db8::7\"]\n    srv:\n      _https._tcp.web: [{ port: 443, target: web }]\n";

#[test]
fn metrics_and_health_match_the_traffic_sent() {
    require_root();
    let link = Link::new("metrics");
    let dir = TempDir::new("metrics");
    let records = dir.write("records.yaml", RECORDS);
    let agent = Agent::start_native(&link, &["--records", records.to_str().expect("UTF-8")], &[]);
    for _ in 0..5 {
        dig(
            &link.client_ns,
            link.server.ipv4,
            1053,
            &["web.prod.coreha.example", "A"],
        );
    }
    for _ in 0..2 {
        dig(
            &link.client_ns,
            link.server.ipv4,
            1053,
            &["nope.prod.coreha.example", "AAAA"],
        );
    }
    for _ in 0..3 {
        dig(
            &link.client_ns,
            link.server.ipv4,
            1053,
            &["_https._tcp.web.prod.coreha.example", "SRV"],
        );
    }
    let m = |name: &str, labels: &[(&str, &str)]| agent.metric(name, labels);
    assert_eq!(
        m(
            "hostport_dns_responses",
            &[("path", "xdp"), ("type", "A"), ("rcode", "NOERROR")]
        ),
        5.0
    );
    assert_eq!(
        m(
            "hostport_dns_responses",
            &[("path", "xdp"), ("type", "AAAA"), ("rcode", "NXDOMAIN")]
        ),
        2.0
    );
    assert_eq!(
        m(
            "hostport_dns_responses",
            &[("path", "userspace"), ("type", "SRV"), ("rcode", "NOERROR")]
        ),
        3.0
    );
    assert_eq!(
        m("hostport_dns_xdp_passed", &[("reason", "unsupported_type")]),
        3.0
    );
    // Requests by zone on both paths: the kernel counts its answers per zone and type too.
    let zone = [("zone", "prod.coreha.example.")];
    let requests = |path: &str, qtype: &str| {
        let mut labels = vec![("path", path), ("type", qtype)];
        labels.extend(zone);
        m("hostport_dns_requests", &labels)
    };
    assert_eq!(requests("xdp", "A"), 5.0);
    assert_eq!(requests("xdp", "AAAA"), 2.0);
    assert_eq!(requests("userspace", "SRV"), 3.0);
    assert_eq!(
        m(
            "hostport_dns_request_duration_seconds_count",
            &[("proto", "udp")]
        ),
        3.0
    );
    assert_eq!(
        m(
            "hostport_dns_response_size_bytes_count",
            &[("proto", "udp")]
        ),
        3.0
    );
    assert_eq!(m("hostport_dns_xdp_attached", &[("mode", "native")]), 1.0);
    assert_eq!(m("hostport_dns_ready", &[]), 1.0);
    // web, _tcp.web (empty non-terminal), _https._tcp.web, the apex.
    assert_eq!(m("hostport_dns_table_names", &[]), 4.0);
    assert_eq!(m("hostport_dns_table_records", &[]), 4.0);
    assert_eq!(m("hostport_dns_source_synced", &[("source", "file")]), 1.0);
    assert!(m("hostport_dns_propagation_seconds_count", &[]) >= 1.0);
    // The three SRV answers came from userspace: the first is cached, within the budget.
    let cached = m("hostport_dns_answer_cache_bytes", &[]);
    assert!(
        cached > 0.0 && cached <= (16 << 20) as f64,
        "answer cache bytes {cached}"
    );
    assert!(
        agent
            .metrics()
            .contains("hostport_dns_build_info{version=\"")
    );
    assert_eq!(agent.http_get("/healthz").0, 200);
    assert_eq!(agent.http_get("/readyz"), (200, "ready\n".to_owned()));

    // A NODATA from XDP beside its positive answers: they share the labels, so one series.
    dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["_tcp.web.prod.coreha.example", "A"],
    );
    assert_eq!(
        m(
            "hostport_dns_responses",
            &[("path", "xdp"), ("type", "A"), ("rcode", "NOERROR")]
        ),
        6.0
    );
    assert_exposition_is_clean(&agent.metrics());
}

#[test]
fn answers_stay_counted_under_their_zone_when_other_zones_come_and_go() {
    require_root();
    let link = Link::new("zonecount");
    let dir = TempDir::new("zonecount");
    let records = dir.write("records.yaml", RECORDS);
    let agent = Agent::start_native(&link, &["--records", records.to_str().expect("UTF-8")], &[]);
    let ask = |name: &str| dig(&link.client_ns, link.server.ipv4, 1053, &[name, "A"]);
    for _ in 0..4 {
        ask("web.prod.coreha.example");
    }
    // A zone that sorts first: every other zone's position (its id in the kernel table) moves.
    dir.write(
        "records.yaml",
        &RECORDS.replace(
            "zones:\n",
            "zones:\n  - name: a.example\n    records:\n      www: 198.18.8.1\n",
        ),
    );
    let mut asked_a = 0.0;
    eventually("the new zone is served", 10, || {
        asked_a += 1.0;
        ask("www.a.example").answer_data() == ["198.18.8.1"]
    });
    for _ in 0..3 {
        ask("web.prod.coreha.example");
    }
    let xdp_a = |zone: &str| {
        agent.metric(
            "hostport_dns_requests",
            &[("path", "xdp"), ("type", "A"), ("zone", zone)],
        )
    };
    assert_eq!(xdp_a("prod.coreha.example."), 7.0, "before and after");
    assert!(
        xdp_a("a.example.") <= asked_a,
        "a.example. counts its own queries alone ({} counted, {asked_a} asked)",
        xdp_a("a.example.")
    );
}

/// A child process killed when the test ends, also when it fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A subcommand's `--json` output, parsed.
fn subcommand_json(link: &Link, client_side: bool, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&subcommand(link, client_side, &args)).expect("JSON")
}

fn subcommand(link: &Link, client_side: bool, args: &[&str]) -> String {
    let ns = if client_side {
        &link.client_ns
    } else {
        &link.server_ns
    };
    let out = sh(ns.command(binary().to_str().expect("UTF-8")).args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn records_stats_and_query_show_the_kernel_side() {
    require_root();
    let link = Link::new("ops");
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let pin = pin_dir.to_str().expect("UTF-8");
    let dir = TempDir::new("ops");
    let records = dir.write("records.yaml", RECORDS);
    let _agent = Agent::start_native(
        &link,
        &["--records", records.to_str().expect("UTF-8")],
        &["--pin-dir", pin],
    );
    let table: serde_json::Value = subcommand_json(&link, false, &["records", "--pin-dir", pin]);
    let web = table
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| r["name"] == "web.prod.coreha.example.")
        .expect("web");
    assert_eq!(web["a"], serde_json::json!(["198.18.7.1", "198.18.7.2"]));
    assert_eq!(web["aaaa"], serde_json::json!(["2001:db8::7"]));
    assert_eq!(web["ttl"], 5);
    let human = subcommand(&link, false, &["records", "--pin-dir", pin]);
    assert!(
        human.contains("web.prod.coreha.example.") && human.contains("4 names in 1 zones"),
        "{human}"
    );
    // Each change switches the active generation: the command reads whichever is active (its
    // index, and the entries both generations share).
    for last in [3, 4] {
        let address = format!("198.18.7.{last}");
        dir.write("records.yaml", &RECORDS.replace("198.18.7.2", &address));
        eventually("the change in the pinned table", 10, || {
            let table: serde_json::Value =
                subcommand_json(&link, false, &["records", "--pin-dir", pin]);
            table.as_array().expect("a list").iter().any(|r| {
                r["name"] == "web.prod.coreha.example."
                    && r["a"] == serde_json::json!(["198.18.7.1", address])
            })
        });
    }

    let server = format!("{}:1053", link.server.ipv4);
    let answer: serde_json::Value = subcommand_json(
        &link,
        true,
        &[
            "query",
            "web.prod.coreha.example",
            "A",
            "--server",
            &server,
            "--pin-dir",
            pin,
        ],
    );
    assert_eq!(
        (answer["rcode"].as_str(), answer["path"].as_str()),
        (Some("No Error"), Some("xdp")),
        "{answer}"
    );
    assert_eq!(answer["answers"].as_array().map(Vec::len), Some(2));
    let srv: serde_json::Value = subcommand_json(
        &link,
        true,
        &[
            "query",
            "_https._tcp.web.prod.coreha.example",
            "SRV",
            "--server",
            &server,
            "--pin-dir",
            pin,
        ],
    );
    assert_eq!(srv["path"], "userspace");

    let stats: serde_json::Value = subcommand_json(&link, false, &["stats", "--pin-dir", pin]);
    assert_eq!(stats["a"], 1, "{stats}");
    assert_eq!(stats["unsupported_type"], 1, "{stats}");

    // Asked on the server itself while XDP answers another client's flood: the query goes over
    // lo, where no XDP program runs, so userspace answered, whatever the counters did meanwhile.
    let queries = dir.write("flood.txt", "web.prod.coreha.example A\n");
    let mut flood = KillOnDrop(
        link.client_ns
            .command("dnsperf")
            .args(["-s", link.server.ipv4, "-p", "1053", "-l", "20", "-q", "50"])
            .arg("-d")
            .arg(&queries)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("dnsperf"),
    );
    eventually("the flood is answered by XDP", 10, || {
        let stats: serde_json::Value = subcommand_json(&link, false, &["stats", "--pin-dir", pin]);
        stats["a"].as_u64().is_some_and(|n| n > 1000)
    });
    let own: serde_json::Value = subcommand_json(
        &link,
        false,
        &[
            "query",
            "web.prod.coreha.example",
            "A",
            "--server",
            &server,
            "--pin-dir",
            pin,
        ],
    );
    assert_eq!(own["rcode"], "No Error", "{own}");
    assert_eq!(own["path"], "userspace", "{own}");
    assert!(
        own["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("over lo")),
        "{own}"
    );
    let _ = flood.0.kill();
    sh(link
        .server_ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["uninstall", "--pin-dir", pin]));
}

/// Starts an agent on `link` with `extra` flags, sends one query XDP answers and one it passes
/// up, and returns the agent (still running) once both were answered.
fn agent_after_two_queries(link: &Link, records: &std::path::Path, extra: &[&str]) -> Agent {
    let agent = Agent::start_native(
        link,
        &["--records", records.to_str().expect("UTF-8")],
        extra,
    );
    let a = dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["web.prod.coreha.example", "A"],
    );
    assert_eq!(a.answer_data(), ["198.18.7.1", "198.18.7.2"]);
    dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["_https._tcp.web.prod.coreha.example", "SRV"],
    );
    agent
}

#[test]
fn ebpf_logs_reach_the_agent_log_only_when_asked_for() {
    require_root();
    let link = Link::new("ebpflog");
    let dir = TempDir::new("ebpflog");
    let records = dir.write("records.yaml", RECORDS);

    let traced = agent_after_two_queries(&link, &records, &["--ebpf-log-level", "trace"]);
    eventually("the program's records in the agent log", 10, || {
        let logs = traced.logs();
        logs.contains("answered: a") && logs.contains("passed: unsupported_type")
    });
    let from_program = format!("\"target\":\"{}\"", hostport_dns::EBPF_LOG_TARGET);
    let logs = traced.logs();
    assert!(logs.contains(&from_program), "{logs}");
    drop(traced);

    // Debug: the passes (debug records), not the answers (trace records).
    let debug = agent_after_two_queries(&link, &records, &["--ebpf-log-level", "debug"]);
    eventually("the pass record in the agent log", 10, || {
        debug.logs().contains("passed: unsupported_type")
    });
    // The answer's record would have been read before the later pass's.
    let logs = debug.logs();
    assert!(!logs.contains("answered: a"), "{logs}");
    drop(debug);

    // Off by default, even with the agent's own log at its most verbose.
    let quiet = agent_after_two_queries(&link, &records, &["--log-level", "trace"]);
    // One more query the program would log (a pass), its answer awaited: the program ran and any
    // record it made was in the log buffer before userspace saw the query.
    dig(
        &link.client_ns,
        link.server.ipv4,
        1053,
        &["_https._tcp.web.prod.coreha.example", "SRV"],
    );
    let logs = quiet.logs();
    assert!(!logs.contains(&from_program), "{logs}");
    assert_eq!(
        quiet.metric("hostport_dns_xdp_passed", &[("reason", "unsupported_type")]),
        2.0
    );
}

#[test]
fn healthz_fails_once_a_serving_thread_has_died() {
    require_root();
    let ns = hostport_dns_tests::netns::NetNs::new("liveness");
    let dir = TempDir::new("liveness");
    let records = dir.write("records.yaml", RECORDS);
    let agent = Agent::start_wrapped(
        &ns,
        &["env"],
        &[("HOSTPORT_DNS_TEST_PANIC_ON", "crash-me")],
        &[
            "--records",
            records.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--udp-workers",
            "2",
            "--port",
            "1053",
        ],
    );
    assert_eq!(
        dig(&ns, "127.0.0.1", 1053, &["web.prod.coreha.example"]).status,
        "NOERROR"
    );
    assert_eq!(agent.http_get("/healthz"), (200, "ok\n".to_owned()));
    // The worker that takes this query panics (a stand-in for a bug); the process lives on.
    let _ = ns
        .command("dig")
        .args([
            "@127.0.0.1",
            "-p",
            "1053",
            "+tries=1",
            "+timeout=1",
            "crash-me.prod.coreha.example",
        ])
        .output();
    eventually("/healthz fails", 10, || {
        let (status, body) = agent.http_get("/healthz");
        status == 500 && body.contains("dns-udp-")
    });
    assert!(
        agent.logs().contains("a serving thread panicked"),
        "{}",
        agent.logs()
    );
}
