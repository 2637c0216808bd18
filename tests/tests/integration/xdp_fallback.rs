//! Serving without XDP: where the kernel refuses the program (no CAP_BPF, a helper the kernel
//! lacks), `--xdp-mode auto` serves every query from userspace and says so once, in the log and
//! the metrics, and stays ready; `native` and `generic` stop with the reason.

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, binary},
    clients::dig,
    netns::NetNs,
    require_root,
};

const PORT: u16 = 1053;

const ZONE: &str = "\
zones:
  - name: fallback.example
    ttl: 5
    records:
      web.ingress: [198.18.40.1, 198.18.40.2, \"2001:db8::40:1\"]
      node-1.nodes: 198.18.40.1
    srv:
      _https._tcp.web.ingress:
        - { port: 443, target: node-1.nodes }
";

/// Runs the agent without the capabilities that loading BPF programs takes (as a Pod Security
/// setting or a seccomp profile leaves it): root, with CAP_BPF, CAP_SYS_ADMIN, CAP_PERFMON and
/// CAP_NET_ADMIN out of its bounding set.
const WITHOUT_BPF: &[&str] = &[
    "setpriv",
    "--bounding-set=-bpf,-sys_admin,-perfmon,-net_admin",
];
/// Runs the agent with every capability (a helper the kernel lacks is pretended).
const AS_IS: &[&str] = &["env"];

/// Pretends that the kernel lacks one of the helpers the program calls.
const MISSING_HELPER: (&str, &str) = ("HOSTPORT_DNS_TEST_MISSING_HELPER", "xdp_adjust_tail");

#[test]
fn without_cap_bpf_auto_mode_answers_a_aaaa_and_srv_from_userspace() {
    let (ns, dir) = setup("nobpf");
    let agent = start(&ns, &dir, WITHOUT_BPF, &[]);
    assert_served_from_userspace(&ns, &agent, "bpf_prog_load");
}

#[test]
fn a_kernel_lacking_a_helper_in_auto_mode_answers_from_userspace() {
    let (ns, dir) = setup("nohelper");
    let agent = start(&ns, &dir, AS_IS, &[MISSING_HELPER]);
    assert_served_from_userspace(&ns, &agent, "bpf_xdp_adjust_tail");
}

#[test]
fn native_and_generic_modes_stop_with_the_reason() {
    let (ns, dir) = setup("strict");
    let records = dir.path.join("records.yaml");
    for mode in ["native", "generic"] {
        for (wrapper, env, reason) in [
            (WITHOUT_BPF, None, "needs CAP_BPF"),
            (
                AS_IS,
                Some(MISSING_HELPER),
                "this kernel lacks the bpf_xdp_adjust_tail helper",
            ),
        ] {
            let (program, options) = wrapper.split_first().expect("a wrapper");
            let mut cmd = ns.command(program);
            cmd.args(options)
                .arg(binary())
                .args(["run", "--records"])
                .arg(&records)
                .args(["--interface", "lo", "--xdp-mode", mode])
                .args([
                    "--port",
                    &PORT.to_string(),
                    "--metrics-listen",
                    "127.0.0.1:9354",
                ]);
            if let Some((key, value)) = env {
                cmd.env(key, value);
            }
            let out = cmd.output().expect("run the agent");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{mode}: the agent must stop: {stderr}"
            );
            assert!(
                stderr.contains(reason),
                "{mode}: expected {reason:?} in {stderr}"
            );
        }
    }
}

fn setup(tag: &str) -> (NetNs, TempDir) {
    require_root();
    let ns = NetNs::new(tag);
    let dir = TempDir::new(tag);
    dir.write("records.yaml", ZONE);
    (ns, dir)
}

fn start(ns: &NetNs, dir: &TempDir, wrapper: &[&str], env: &[(&str, &str)]) -> Agent {
    let records = dir.path.join("records.yaml");
    Agent::start_wrapped(
        ns,
        wrapper,
        env,
        &[
            "--records",
            records.to_str().expect("UTF-8"),
            "--interface",
            "lo",
            "--xdp-mode",
            "auto",
            "--port",
            &PORT.to_string(),
        ],
    )
}

/// A, AAAA and SRV are answered (by userspace: the program never counted one), the agent is
/// ready, and the log and metrics say why XDP is not there, once.
fn assert_served_from_userspace(ns: &NetNs, agent: &Agent, reason: &str) {
    let a = dig(
        ns,
        "127.0.0.1",
        PORT,
        &["web.ingress.fallback.example", "A"],
    );
    assert_eq!(a.status, "NOERROR");
    assert_eq!(a.answer_data(), ["198.18.40.1", "198.18.40.2"]);
    let aaaa = dig(
        ns,
        "127.0.0.1",
        PORT,
        &["web.ingress.fallback.example", "AAAA"],
    );
    assert_eq!(aaaa.answer_data(), ["2001:db8::40:1"]);
    let srv = dig(
        ns,
        "127.0.0.1",
        PORT,
        &["_https._tcp.web.ingress.fallback.example", "SRV"],
    );
    assert_eq!(
        srv.answer_data(),
        ["0 1 443 node-1.nodes.fallback.example."]
    );

    assert_eq!(agent.metric("hostport_dns_xdp_fallback", &[]), 1.0);
    assert_eq!(
        agent.metric(
            "hostport_dns_xdp_attached",
            &[("interface", "lo"), ("mode", "unavailable")]
        ),
        0.0
    );
    assert_eq!(
        agent.metric("hostport_dns_requests", &[("path", "xdp")]),
        0.0
    );
    assert!(agent.metric("hostport_dns_requests", &[("path", "userspace")]) >= 3.0);
    let (status, body) = agent.http_get("/readyz");
    assert_eq!(status, 200, "ready without XDP: {body}");
    let logs = agent.logs();
    let said: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("XDP unavailable"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {logs}");
    assert!(
        said[0].contains(reason),
        "the reason ({reason}) is given: {}",
        said[0]
    );
}
