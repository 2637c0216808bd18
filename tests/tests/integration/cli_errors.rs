//! Bad input at start-up: one clear error line naming the cause, a non-zero exit, and nothing
//! left attached.

use std::{
    net::UdpSocket,
    os::unix::fs::PermissionsExt,
    process::{Command, Output},
};

use hostport_dns_tests::{TempDir, agent::binary, netns::NetNs, require_root};

/// Runs `hostport-dns run <args>` in the namespace and returns its output.
fn run_agent(ns: &NetNs, args: &[&str]) -> Output {
    ns.command(binary().to_str().expect("UTF-8"))
        .args(["run", "--metrics-listen", "127.0.0.1:9354"])
        .args(args)
        .output()
        .expect("run the agent")
}

/// The agent failed with exactly one line on stderr, which contains `expected`.
fn assert_one_error_line(out: &Output, expected: &str) -> String {
    assert!(!out.status.success(), "the agent must fail");
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    assert_eq!(stderr.lines().count(), 1, "one error line, got:\n{stderr}");
    assert!(stderr.starts_with("hostport-dns: "), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in:\n{stderr}"
    );
    stderr
}

fn nothing_attached(ns: &NetNs) {
    let out = ns.ip(&["-j", "link", "show"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("\"xdp\""),
        "an XDP program was left attached: {text}"
    );
}

/// The agent run on a record file of `text` refuses to start with one error line, at `at`
/// (line:column) of the file, saying `says`, and attaches nothing.
fn refuses_record_file(tag: &str, text: &str, at: &str, says: &str) {
    require_root();
    let ns = NetNs::new(tag);
    let dir = TempDir::new(tag);
    let file = dir.write("records.yaml", text);
    let out = run_agent(
        &ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--interface",
            "lo",
        ],
    );
    let line = assert_one_error_line(&out, &format!("{}:{at}", file.display()));
    assert!(line.contains(says), "{line}");
    nothing_attached(&ns);
}

#[test]
fn a_malformed_record_file_is_reported_with_its_line() {
    refuses_record_file(
        "badfile",
        "zones:\n  - name: example\n    records:\n      web: 198.18.0.300\n",
        "4:",
        "\"198.18.0.300\" is not a valid IP address",
    );
}

#[test]
fn a_name_given_twice_in_the_record_file_is_refused_with_its_line() {
    // A name listed twice once kept only its last addresses, without a word.
    refuses_record_file(
        "dupfile",
        "zones:\n  - name: example\n    records:\n      web: 198.18.0.1\n      web: 198.18.0.2\n",
        "5:7:",
        "duplicate mapping key `web`",
    );
}

#[test]
fn a_missing_record_file_is_reported() {
    require_root();
    let ns = NetNs::new("nofile");
    let out = run_agent(&ns, &["--records", "/nonexistent/records.yaml"]);
    assert_one_error_line(&out, "/nonexistent/records.yaml: cannot read");
}

#[test]
fn an_unknown_interface_is_reported() {
    require_root();
    let ns = NetNs::new("noif");
    let out = run_agent(
        &ns,
        &[
            "--interface",
            "lo",
            "--interface",
            "nope0",
            "--xdp-mode",
            "generic",
        ],
    );
    assert_one_error_line(&out, "interface \"nope0\" does not exist");
    nothing_attached(&ns);
}

#[test]
fn a_port_in_use_is_reported() {
    require_root();
    let ns = NetNs::new("inuse");
    // Another server holds the port (without SO_REUSEPORT).
    let _holder: UdpSocket =
        ns.run(|| UdpSocket::bind("0.0.0.0:1053").expect("bind the port first"));
    let out = run_agent(&ns, &["--interface", "lo", "--xdp-mode", "generic"]);
    assert_one_error_line(
        &out,
        "cannot listen on 0.0.0.0:1053: Address already in use",
    );
    nothing_attached(&ns);
}

#[test]
fn missing_privileges_are_reported() {
    require_root();
    let ns = NetNs::new("nopriv");
    // A copy of the binary that an unprivileged user can run wherever the checkout lives.
    let dir = TempDir::new("nopriv");
    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let copy = dir.path.join("hostport-dns");
    std::fs::copy(binary(), &copy).expect("copy the binary");
    let out = ns
        .command("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&copy)
        .args([
            "run",
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
            "--metrics-listen",
            "127.0.0.1:9354",
        ])
        .output()
        .expect("run the agent unprivileged");
    assert_one_error_line(&out, "needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON");
    nothing_attached(&ns);
}

#[test]
fn a_bad_option_is_reported_by_the_command_line_parser() {
    let out = Command::new(binary())
        .args(["run", "--xdp-mode", "sideways"])
        .output()
        .expect("run the agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'sideways' for '--xdp-mode"),
        "{stderr}"
    );
}

#[test]
fn a_udp_ceiling_outside_512_to_65507_is_refused_on_the_command_line_and_in_the_file() {
    for bad in ["100", "65508"] {
        let out = Command::new(binary())
            .args(["run", "--udp-max-payload", bad])
            .output()
            .expect("run the agent");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("invalid value '{bad}' for '--udp-max-payload"))
                && stderr.contains("512..=65507"),
            "{stderr}"
        );
    }
    let dir = TempDir::new("udpceiling");
    let config = dir.write("config.yaml", "udpMaxPayload: 100\nzones: []\n");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("run check-config");
    assert_one_error_line(&out, "udpMaxPayload: a UDP payload ceiling of 100 bytes");
}

#[test]
fn an_unknown_srv_target_compression_is_refused_on_the_command_line_and_in_the_file() {
    let out = Command::new(binary())
        .args(["run", "--srv-target-compression", "always"])
        .output()
        .expect("run the agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'always' for '--srv-target-compression")
            && stderr.contains("never, to-fit"),
        "{stderr}"
    );
    let dir = TempDir::new("srvcompress");
    let config = dir.write("config.yaml", "srvTargetCompression: always\nzones: []\n");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("run check-config");
    assert_one_error_line(&out, "srvTargetCompression");
    let good = dir.write("good.yaml", "srvTargetCompression: never\nzones: []\n");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&good)
        .output()
        .expect("run check-config");
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn check_config_accepts_a_valid_configuration_and_names_the_first_error() {
    let dir = TempDir::new("checkconfig");
    let valid = "zones:\n  - name: ingress.example.com\npods:\n  - zone: ingress.example.com\n    labelKey: ingress.cluster/name\nendpointSlices:\n  - zone: ingress.example.com\n    hostnames: [api]\n    service: default/kubernetes\n";
    let config = dir.write("config.yaml", valid);
    let records = dir.write(
        "records.yaml",
        "zones:\n  - name: static.example.com\n    records:\n      web: 198.18.0.10\n",
    );
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&config)
        .arg("--records")
        .arg(&records)
        .output()
        .expect("run check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("valid: 1 zone(s), 1 pod source(s), 1 EndpointSlice output(s)"),
        "{stdout}"
    );

    let typo = dir.write("typo.yaml", &valid.replace("labelKey", "labelKee"));
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&typo)
        .output()
        .expect("run");
    assert_one_error_line(&out, "typo.yaml:5:5: unknown field `labelKee`");

    // The record file's zone overlaps the configuration's: refused together as `run` would.
    let overlapping = dir.write(
        "overlap.yaml",
        "zones:\n  - name: sub.ingress.example.com\n    records:\n      web: 198.18.0.10\n",
    );
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&config)
        .arg("--records")
        .arg(&overlapping)
        .output()
        .expect("run");
    assert_one_error_line(&out, "--config and --records");
}

#[test]
fn check_config_takes_the_node_rules_and_topology_key_and_refuses_malformed_keys() {
    let dir = TempDir::new("nodesrules");
    let base = "zones:\n  - name: ingress.example.com\npods:\n  - zone: ingress.example.com\n";
    let check = |name: &str, nodes: &str| {
        let config = dir.write(name, &format!("{base}{nodes}"));
        Command::new(binary())
            .arg("check-config")
            .arg(&config)
            .output()
            .expect("run check-config")
    };
    let valid = check(
        "valid.yaml",
        "nodes:\n  excludeTaints: [ToBeDeletedByClusterAutoscaler, example.com/leaving]\n  excludeLabels: [node.kubernetes.io/exclude-from-external-load-balancers]\n  excludeUnschedulable: true\n",
    );
    assert!(
        valid.status.success(),
        "{}",
        String::from_utf8_lossy(&valid.stderr)
    );
    let empty = check("empty.yaml", "nodes:\n  excludeTaints: [\"\"]\n");
    assert_one_error_line(&empty, "nodes.excludeTaints: an empty key");
    let bad = check("bad.yaml", "nodes:\n  excludeLabels: [\"exclude me\"]\n");
    assert_one_error_line(&bad, "nodes.excludeLabels: \"exclude me\"");
    let typo = check("typo.yaml", "nodes:\n  excludeTaint: [a]\n");
    assert_one_error_line(&typo, "unknown field `excludeTaint`");
    let zone_key = check(
        "topology.yaml",
        "    topologyKey: topology.kubernetes.io/zone\n",
    );
    assert!(
        zone_key.status.success(),
        "{}",
        String::from_utf8_lossy(&zone_key.stderr)
    );
    let bad_zone_key = check("badtopology.yaml", "    topologyKey: \"zone key\"\n");
    assert_one_error_line(&bad_zone_key, "pods[0].topologyKey \"zone key\"");
}
