//! The Kubernetes source against the fake API server, driven by the real kube client in the
//! agent: records follow pods and EndpointSlices, nothing is served before the first full list,
//! and answers survive API outages and relists.

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, metric_sum},
    clients::{Reply, dig},
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::{PodSpec, api_server_slice, endpoint_slice, endpoint_slice_of, node, node_with},
    netns::NetNs,
    require_root,
};

const ZONE: &str = "prod.coreha.example";

struct Cluster {
    agent: Agent,
    api: FakeApi,
    ns: NetNs,
    _dir: TempDir,
}

fn config(api: &FakeApi, extra: &str) -> String {
    format!(
        "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\nendpointSlices:\n  - zone: {ZONE}\n    hostnames: [api]\n    service: default/kubernetes\n{extra}",
        api.url()
    )
}

/// A namespace with the fake API server and an agent (XDP generic on lo) configured against it.
fn cluster(
    tag: &str,
    prepare: impl FnOnce(&FakeApi),
    extra_config: &str,
    agent_args: &[&str],
) -> Cluster {
    start_cluster(tag, prepare, |api| config(api, extra_config), agent_args)
}

/// An agent on `config` (a whole configuration; `{api}` stands for the fake API server's URL).
fn cluster_with_config(tag: &str, prepare: impl FnOnce(&FakeApi), config: &str) -> Cluster {
    start_cluster(tag, prepare, |api| config.replace("{api}", &api.url()), &[])
}

fn start_cluster(
    tag: &str,
    prepare: impl FnOnce(&FakeApi),
    config: impl FnOnce(&FakeApi) -> String,
    agent_args: &[&str],
) -> Cluster {
    require_root();
    let ns = NetNs::new(tag);
    let api = FakeApi::start(Some(&ns));
    prepare(&api);
    let dir = TempDir::new(tag);
    let file = dir.write("agent.yaml", &config(&api));
    let agent = Agent::start_on_lo(&ns, &file, agent_args);
    Cluster {
        agent,
        api,
        ns,
        _dir: dir,
    }
}

impl Cluster {
    fn dig(&self, args: &[&str]) -> Reply {
        dig(&self.ns, "127.0.0.1", 1053, args)
    }

    fn addresses(&self, name: &str) -> Vec<String> {
        self.dig(&[&format!("{name}.{ZONE}"), "A"]).answer_data()
    }
}

fn ingress_pods(api: &FakeApi) {
    for (i, ip) in ["198.18.0.11", "198.18.0.12"].iter().enumerate() {
        let pod = PodSpec::ingress(
            &format!("nginx-{i}"),
            "ingress",
            "default-nginx",
            &format!("cp-{i}"),
            ip,
        );
        api.apply(Kind::Pod, pod.to_json());
    }
    api.apply(
        Kind::EndpointSlice,
        api_server_slice("IPv4", "kubernetes-a", &["198.18.0.11"]),
    );
}

#[test]
fn ready_running_pods_become_records_and_leave_when_not_ready_terminating_or_deleted() {
    let c = cluster("kpods", ingress_pods, "", &[]);
    eventually("both pods", 10, || {
        c.addresses("default-nginx.ingress") == ["198.18.0.11", "198.18.0.12"]
    });
    let mut not_ready =
        PodSpec::ingress("nginx-1", "ingress", "default-nginx", "cp-1", "198.18.0.12");
    not_ready.ready = false;
    c.api.apply(Kind::Pod, not_ready.to_json());
    eventually("the not-ready pod to leave", 10, || {
        c.addresses("default-nginx.ingress") == ["198.18.0.11"]
    });
    c.api.delete(Kind::Pod, "ingress", "nginx-0");
    eventually("NXDOMAIN once no pod is left", 10, || {
        c.dig(&[&format!("default-nginx.ingress.{ZONE}")]).status == "NXDOMAIN"
    });
    let mut back = PodSpec::ingress("nginx-2", "ingress", "default-nginx", "cp-2", "198.18.0.13");
    back.terminating = false;
    c.api.apply(Kind::Pod, back.to_json());
    eventually("a new pod", 10, || {
        c.addresses("default-nginx.ingress") == ["198.18.0.13"]
    });
    // Still Ready, but being deleted: it stops serving.
    back.terminating = true;
    c.api.apply(Kind::Pod, back.to_json());
    eventually("the terminating pod to leave", 10, || {
        c.dig(&[&format!("default-nginx.ingress.{ZONE}")]).status == "NXDOMAIN"
    });
    // Ready but not Running (a finished pod keeps its last Ready condition): applied before a
    // Running one, so the answer that shows the Running pod also shows whether it was kept.
    for (name, phase, ip) in [
        ("nginx-3", "Succeeded", "198.18.0.14"),
        ("nginx-4", "Pending", "198.18.0.15"),
        ("nginx-5", "Running", "198.18.0.16"),
    ] {
        let mut pod = PodSpec::ingress(name, "ingress", "default-nginx", "cp-3", ip);
        pod.phase = phase.into();
        c.api.apply(Kind::Pod, pod.to_json());
    }
    eventually("only the running pod", 10, || {
        !c.addresses("default-nginx.ingress").is_empty()
    });
    assert_eq!(c.addresses("default-nginx.ingress"), ["198.18.0.16"]);
    assert!(
        c.agent.metric("hostport_dns_responses", &[("path", "xdp")]) > 0.0,
        "answered from XDP too"
    );
}

#[test]
fn named_host_ports_get_srv_records_whose_targets_resolve() {
    let c = cluster("ksrv", ingress_pods, "", &[]);
    let srv = format!("_https._tcp.default-nginx.ingress.{ZONE}");
    eventually("SRV records", 10, || {
        c.dig(&[&srv, "SRV"]).answer.len() == 2
    });
    let reply = c.dig(&[&srv, "SRV"]);
    assert_eq!(
        reply.answer_data(),
        [
            format!("0 1 443 cp-0.nodes.{ZONE}."),
            format!("0 1 443 cp-1.nodes.{ZONE}.")
        ]
    );
    assert_eq!(
        reply.additional.len(),
        2,
        "target addresses in the additional section"
    );
    assert_eq!(c.addresses("cp-1.nodes"), ["198.18.0.12"]);
}

#[test]
fn nothing_but_servfail_before_the_first_full_list() {
    require_root();
    let ns = NetNs::new("kslow");
    let api = FakeApi::start(Some(&ns));
    ingress_pods(&api);
    api.hold_lists();
    let dir = TempDir::new("kslow");
    let file = dir.write("agent.yaml", &config(&api, ""));
    let agent = Agent::start(
        &ns,
        &[
            "--config",
            file.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
        ],
    );
    let early = dig(
        &ns,
        "127.0.0.1",
        1053,
        &[&format!("default-nginx.ingress.{ZONE}")],
    );
    assert_eq!(
        early.status, "SERVFAIL",
        "never NXDOMAIN before the first list"
    );
    // With EDNS, the reason: Extended DNS Error 14, Not Ready.
    let query =
        hostport_dns_tests::packet::QueryBuilder::new(&format!("default-nginx.ingress.{ZONE}"), 1)
            .edns(1232, false)
            .bytes();
    let answer = hostport_dns_tests::clients::udp_exchange(
        &ns,
        "127.0.0.1:1053".parse().expect("an address"),
        query,
    )
    .expect("an answer");
    assert_eq!(
        hostport_dns_tests::clients::extended_errors(&answer),
        [14],
        "EDE 14 (Not Ready)"
    );
    let (status, body) = agent.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(api.list_requests() > 0, "the agent is waiting for a list");
    api.release_lists();
    eventually("the records after the slow list", 15, || {
        dig(
            &ns,
            "127.0.0.1",
            1053,
            &[&format!("default-nginx.ingress.{ZONE}")],
        )
        .answer
        .len()
            == 2
    });
    assert_eq!(agent.http_get("/readyz").0, 200);
}

#[test]
fn an_api_outage_keeps_the_last_records_and_shows_their_age() {
    let c = cluster("koutage", ingress_pods, "", &["--max-staleness", "3"]);
    eventually("both pods", 10, || {
        c.addresses("default-nginx.ingress").len() == 2
    });
    c.api.set_outage(true);
    eventually("the agent to notice the outage", 15, || {
        c.agent
            .metric("hostport_dns_source_connected", &[("source", "kubernetes")])
            == 0.0
    });
    assert_eq!(
        c.addresses("default-nginx.ingress"),
        ["198.18.0.11", "198.18.0.12"],
        "still served"
    );
    eventually("not ready once the data is stale", 15, || {
        c.agent.http_get("/readyz").0 == 503
    });
    assert!(
        c.agent.metric(
            "hostport_dns_source_staleness_seconds",
            &[("source", "kubernetes")]
        ) >= 3.0
    );
    // A change made while the agent could not see it...
    c.api.delete(Kind::Pod, "ingress", "nginx-1");
    c.api.set_outage(false);
    // ...is picked up once the API server is back.
    eventually("the change after the outage", 20, || {
        c.addresses("default-nginx.ingress") == ["198.18.0.11"]
    });
    eventually("ready again", 15, || c.agent.http_get("/readyz").0 == 200);
}

/// The EDNS query for `name` A, and the Extended DNS Errors of its answer.
fn extended_errors_for(ns: &NetNs, name: &str) -> Vec<u16> {
    let query = hostport_dns_tests::packet::QueryBuilder::new(name, 1)
        .edns(1232, false)
        .bytes();
    let answer = hostport_dns_tests::clients::udp_exchange(
        ns,
        "127.0.0.1:1053".parse().expect("an address"),
        query,
    )
    .expect("an answer");
    hostport_dns_tests::clients::extended_errors(&answer)
}

/// RBAC refuses the pod watch from the start: the zones that do not depend on it (a static one,
/// the EndpointSlice one) are served, XDP included, while the pods' zone answers SERVFAIL with
/// Not Ready; readiness and the error metric name the resource and the reason, and the log says
/// it once, however often the watch is retried.
#[test]
fn a_forbidden_watch_holds_back_only_its_own_zones_and_names_its_resource() {
    let c = cluster_with_config(
        "kforbid",
        |api| {
            ingress_pods(api);
            api.forbid(Kind::Pod, true);
        },
        &format!(
            "zones:\n  - name: {ZONE}\n  - name: api.coreha.test\n  - name: static.coreha.test\n    records:\n      www: [198.18.0.99]\nkubernetes:\n  apiServer: {{api}}\npods:\n  - zone: {ZONE}\nendpointSlices:\n  - zone: api.coreha.test\n    hostnames: ['@']\n    service: default/kubernetes\n"
        ),
    );
    eventually("the zones without a failing watch are served", 15, || {
        c.dig(&["www.static.coreha.test", "A"]).answer_data() == ["198.18.0.99"]
            && c.dig(&["api.coreha.test", "A"]).answer_data() == ["198.18.0.11"]
    });
    let pods = c.dig(&[&format!("default-nginx.ingress.{ZONE}"), "A"]);
    assert_eq!(pods.status, "SERVFAIL", "{pods:?}");
    assert_eq!(
        extended_errors_for(&c.ns, &format!("default-nginx.ingress.{ZONE}")),
        [14]
    );
    assert_eq!(
        c.dig(&[&format!("nothing.{ZONE}"), "A"]).status,
        "SERVFAIL",
        "no NXDOMAIN from a zone whose pods are unknown"
    );
    let (status, body) = c.agent.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("pods") && body.contains("forbidden"),
        "{body}"
    );
    eventually("the refused watch retried, and counted", 10, || {
        c.agent.metric(
            "hostport_dns_source_errors",
            &[
                ("source", "kubernetes"),
                ("resource", "pods"),
                ("reason", "forbidden"),
            ],
        ) >= 2.0
    });
    // The served zones are in the kernel table (XDP attaches after the first table is
    // written, so the very first answers may be userspace's).
    eventually("XDP answers the served zones", 10, || {
        c.dig(&["www.static.coreha.test", "A"]);
        c.agent.metric(
            "hostport_dns_responses",
            &[("path", "xdp"), ("type", "A"), ("rcode", "NOERROR")],
        ) >= 1.0
    });
    c.api.forbid(Kind::Pod, false);
    eventually("the pods once the watch is allowed", 15, || {
        c.addresses("default-nginx.ingress") == ["198.18.0.11", "198.18.0.12"]
    });
    eventually("ready", 10, || c.agent.http_get("/readyz").0 == 200);
    let logs = c.agent.logs();
    let failing = logs
        .lines()
        .filter(|l| l.contains("the watch fails") && l.contains("pods"))
        .count();
    assert_eq!(failing, 1, "one line per outage:\n{logs}");
    assert!(logs.contains("the watch works again"), "{logs}");
}

/// A watch refused after the first list (a permission revoked) while `/version` still answers:
/// the data is stale from the moment the watch failed, and readiness says which watch and why.
#[test]
fn a_watch_refused_after_its_list_is_stale_although_the_api_server_answers() {
    let c = cluster("kstale", ingress_pods, "", &["--max-staleness", "2"]);
    eventually("both pods", 10, || {
        c.addresses("default-nginx.ingress").len() == 2
    });
    eventually("ready", 10, || c.agent.http_get("/readyz").0 == 200);
    c.api.forbid(Kind::Pod, true);
    eventually("not ready once the pods are stale", 15, || {
        c.agent.http_get("/readyz").0 == 503
    });
    let (_, body) = c.agent.http_get("/readyz");
    assert!(
        body.contains("pods") && body.contains("forbidden"),
        "{body}"
    );
    assert!(
        c.agent.metric(
            "hostport_dns_source_staleness_seconds",
            &[("source", "kubernetes")]
        ) >= 2.0
    );
    assert_eq!(
        c.agent
            .metric("hostport_dns_source_connected", &[("source", "kubernetes")]),
        0.0
    );
    let api_addr = c.api.addr.to_string();
    let version =
        c.ns.run(move || hostport_dns_tests::agent::http_get(&api_addr, "/version").0);
    assert_eq!(version, 200, "the API server itself answers");
    assert_eq!(
        c.addresses("default-nginx.ingress"),
        ["198.18.0.11", "198.18.0.12"],
        "the last records stay in service"
    );
    c.api.forbid(Kind::Pod, false);
    eventually("ready again", 15, || c.agent.http_get("/readyz").0 == 200);
}

/// The silence bound the tests set (the agent's default, 80 s, is too long to wait for). Its
/// watches end after 9 s, leaving a healthy server 3 s to answer the next one on a loaded
/// machine before a watch counts as silent.
const SILENCE_S: &str = "12";

/// An agent on `config` (XDP generic on lo) with a short silence bound and `extra` arguments.
fn agent_with_short_silence(ns: &NetNs, config: &std::path::Path, extra: &[&str]) -> Agent {
    let mut args = vec![
        "--config",
        config.to_str().expect("a UTF-8 path"),
        "--interface",
        "lo",
        "--xdp-mode",
        "generic",
    ];
    args.extend_from_slice(extra);
    Agent::start_wrapped(
        ns,
        &["env"],
        &[("HOSTPORT_DNS_WATCH_SILENCE_SECONDS", SILENCE_S)],
        &args,
    )
}

/// A hung API server: its open watches carry nothing and new requests are accepted but never
/// answered (a half-open connection, storage that hangs). Within the silence bound the agent
/// counts a source error and its data is stale as of the last contact (not ready past
/// `--max-staleness`), while the last records stay in service; once the server answers again it
/// catches up with what changed meanwhile and is ready.
#[test]
fn watches_that_go_silent_fail_and_recover_once_the_api_server_answers() {
    require_root();
    let ns = NetNs::new("ksilent");
    let api = FakeApi::start(Some(&ns));
    ingress_pods(&api);
    let dir = TempDir::new("ksilent");
    let file = dir.write("agent.yaml", &config(&api, ""));
    let agent = agent_with_short_silence(&ns, &file, &["--max-staleness", "3"]);
    let name = format!("default-nginx.ingress.{ZONE}");
    eventually("both pods", 10, || addresses_of(&ns, &name) == 2);
    eventually("ready", 10, || agent.http_get("/readyz").0 == 200);
    // Healthy watches that end at their timeout (9 s) are not silence: nothing is counted.
    std::thread::sleep(std::time::Duration::from_secs(15));
    let silent = |agent: &Agent| {
        agent.metric(
            "hostport_dns_source_errors",
            &[("source", "kubernetes"), ("reason", "silent")],
        )
    };
    let metrics = agent.metrics();
    assert!(
        !metrics.contains("reason=\"silent\""),
        "a healthy watch counted as silent:\n{metrics}"
    );
    assert_eq!(agent.http_get("/readyz").0, 200);
    api.freeze(true);
    // The bound is 12 s; generous for a noisy machine.
    eventually("a source error for the silent watches", 40, || {
        agent.metrics().contains("reason=\"silent\"") && silent(&agent) >= 1.0
    });
    eventually("not ready: the data is stale", 10, || {
        agent.http_get("/readyz").0 == 503
    });
    let (_, body) = agent.http_get("/readyz");
    assert!(body.contains("silent"), "{body}");
    assert!(
        agent.metric(
            "hostport_dns_source_staleness_seconds",
            &[("source", "kubernetes")]
        ) >= 3.0
    );
    assert_eq!(
        agent.metric("hostport_dns_source_connected", &[("source", "kubernetes")]),
        0.0
    );
    assert_eq!(
        addresses_of(&ns, &name),
        2,
        "the last records stay in service"
    );
    // A change the agent cannot see while the server hangs...
    api.delete(Kind::Pod, "ingress", "nginx-1");
    api.freeze(false);
    // ...is served once it answers again.
    eventually("the change made while the server hung", 30, || {
        dig(&ns, "127.0.0.1", 1053, &[&name, "A"]).answer_data() == ["198.18.0.11"]
    });
    eventually("ready again", 15, || agent.http_get("/readyz").0 == 200);
    assert_eq!(
        agent.metric("hostport_dns_source_connected", &[("source", "kubernetes")]),
        1.0
    );
}

/// An agent restarted while the API server is down serves the records its predecessor saved,
/// from both paths (A from XDP, SRV from userspace), marked stale, until its watches list.
#[test]
fn a_restart_while_the_api_server_is_down_serves_the_saved_records() {
    require_root();
    let ns = NetNs::new("ksaved");
    let api = FakeApi::start(Some(&ns));
    ingress_pods(&api);
    let dir = TempDir::new("ksaved");
    let file = dir.write("agent.yaml", &config(&api, ""));
    let saved = dir.path.join("kubernetes-records.json");
    let saved_arg = saved.to_str().expect("UTF-8");
    let name = format!("default-nginx.ingress.{ZONE}");
    let srv = format!("_https._tcp.{name}");
    let first = Agent::start_on_lo(&ns, &file, &["--saved-records", saved_arg]);
    eventually("both pods", 10, || addresses_of(&ns, &name) == 2);
    eventually("the records are saved", 10, || saved.exists());
    let srv_before = dig(&ns, "127.0.0.1", 1053, &[&srv, "SRV"]).answer_data();
    assert_eq!(srv_before.len(), 2, "{srv_before:?}");
    drop(first);
    api.set_outage(true);
    let second = Agent::start_on_lo(&ns, &file, &["--saved-records", saved_arg]);
    eventually("the saved records are served", 10, || {
        dig(&ns, "127.0.0.1", 1053, &[&name, "A"]).answer_data() == ["198.18.0.11", "198.18.0.12"]
    });
    assert_eq!(
        dig(&ns, "127.0.0.1", 1053, &[&srv, "SRV"]).answer_data(),
        srv_before
    );
    assert_eq!(
        second.metric("hostport_dns_source_restored", &[("source", "kubernetes")]),
        1.0
    );
    let (status, body) = second.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("saved"), "{body}");
    eventually("XDP answers from the saved records", 10, || {
        dig(&ns, "127.0.0.1", 1053, &[&name, "A"]);
        second.metric(
            "hostport_dns_responses",
            &[("path", "xdp"), ("type", "A"), ("rcode", "NOERROR")],
        ) >= 1.0
    });
    // A change made while the agent could not see it replaces the saved records once it lists.
    api.delete(Kind::Pod, "ingress", "nginx-1");
    api.set_outage(false);
    eventually("the live records after the outage", 20, || {
        dig(&ns, "127.0.0.1", 1053, &[&name, "A"]).answer_data() == ["198.18.0.11"]
    });
    eventually("ready", 10, || second.http_get("/readyz").0 == 200);
    assert_eq!(
        second.metric("hostport_dns_source_restored", &[("source", "kubernetes")]),
        0.0
    );
}

/// An agent restarted from saved records while every EndpointSlice request is forbidden (a
/// hand-edited RBAC rule): the pod watch lists, and its live records replace the saved ones at
/// once (a new ingress pod is published) while the EndpointSlice output keeps its saved records;
/// allowed again, every watch has listed and the agent is ready.
#[test]
fn a_failing_watch_freezes_only_its_own_saved_records() {
    require_root();
    let ns = NetNs::new("ksavedpart");
    let api = FakeApi::start(Some(&ns));
    ingress_pods(&api);
    let dir = TempDir::new("ksavedpart");
    let file = dir.write("agent.yaml", &config(&api, ""));
    let saved = dir.path.join("kubernetes-records.json");
    let saved_arg = saved.to_str().expect("UTF-8");
    let pods = format!("default-nginx.ingress.{ZONE}");
    let api_name = format!("api.{ZONE}");
    let first = Agent::start_on_lo(&ns, &file, &["--saved-records", saved_arg]);
    eventually("both pods and the API server", 10, || {
        addresses_of(&ns, &pods) == 2 && addresses_of(&ns, &api_name) == 1
    });
    eventually("the records are saved", 10, || saved.exists());
    drop(first);
    api.forbid(Kind::EndpointSlice, true);
    let second = Agent::start_on_lo(&ns, &file, &["--saved-records", saved_arg]);
    eventually("the saved records are served", 10, || {
        addresses_of(&ns, &pods) == 2 && addresses_of(&ns, &api_name) == 1
    });
    api.apply(
        Kind::Pod,
        PodSpec::ingress("nginx-2", "ingress", "default-nginx", "cp-2", "198.18.0.13").to_json(),
    );
    eventually(
        "the new pod, though the slices cannot be listed",
        20,
        || addresses_of(&ns, &pods) == 3,
    );
    assert_eq!(
        dig(&ns, "127.0.0.1", 1053, &[&api_name, "A"]).answer_data(),
        ["198.18.0.11"],
        "the EndpointSlice output keeps its saved records"
    );
    let (status, body) = second.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("endpointslices"), "{body}");
    api.forbid(Kind::EndpointSlice, false);
    eventually("ready once every watch has listed", 20, || {
        second.http_get("/readyz").0 == 200
    });
    assert_eq!(
        second.metric("hostport_dns_source_restored", &[("source", "kubernetes")]),
        0.0
    );
    assert_eq!(addresses_of(&ns, &pods), 3);
}

/// The pods as each of two API servers tells them: the second knows one more, so that the
/// answers show which one the agent reads.
fn two_api_servers(ns: &NetNs) -> (FakeApi, FakeApi) {
    let first = FakeApi::start(Some(ns));
    let second = FakeApi::start(Some(ns));
    ingress_pods(&first);
    ingress_pods(&second);
    second.apply(
        Kind::Pod,
        PodSpec::ingress("nginx-2", "ingress", "default-nginx", "cp-2", "198.18.0.13").to_json(),
    );
    (first, second)
}

/// How many addresses `name` has, asked in `ns`.
fn addresses_of(ns: &NetNs, name: &str) -> usize {
    dig(ns, "127.0.0.1", 1053, &[name, "A"]).answer_data().len()
}

/// `hostport_dns_api_server_active` for `server`.
fn active(agent: &Agent, server: &FakeApi) -> f64 {
    agent.metric(
        "hostport_dns_api_server_active",
        &[("server", &server.url())],
    )
}

/// The node-local API server goes down (as in every control-plane upgrade): the watches move to
/// the configured fallback, and the metric says which server is in use.
#[test]
fn the_watches_move_to_a_fallback_api_server_when_the_first_is_down() {
    require_root();
    let ns = NetNs::new("kfailover");
    let (first, second) = two_api_servers(&ns);
    let dir = TempDir::new("kfailover");
    let file = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\n  fallbackApiServers: [{}]\npods:\n  - zone: {ZONE}\n",
            first.url(),
            second.url()
        ),
    );
    let agent = Agent::start_on_lo(&ns, &file, &[]);
    let name = format!("default-nginx.ingress.{ZONE}");
    eventually("the first server's pods", 10, || {
        addresses_of(&ns, &name) == 2
    });
    assert_eq!(active(&agent, &first), 1.0);
    first.set_outage(true);
    eventually("the second server's pods", 20, || {
        addresses_of(&ns, &name) == 3
    });
    assert_eq!(active(&agent, &second), 1.0);
    assert_eq!(active(&agent, &first), 0.0);
    eventually("ready on the fallback", 10, || {
        agent.http_get("/readyz").0 == 200
    });
}

/// Without a configured fallback, the API servers `default/kubernetes` names are the fallbacks.
#[test]
fn the_api_servers_default_kubernetes_names_are_fallbacks_too() {
    require_root();
    let ns = NetNs::new("klearn");
    let (first, second) = two_api_servers(&ns);
    let mut slice = endpoint_slice(
        "default",
        "kubernetes-a",
        "kubernetes",
        &[("127.0.0.1", Some(true), "cp-0")],
    );
    slice["ports"] =
        serde_json::json!([{"name": "https", "port": second.addr.port(), "protocol": "TCP"}]);
    first.apply(Kind::EndpointSlice, slice);
    let dir = TempDir::new("klearn");
    let file = dir.write("agent.yaml", &config(&first, ""));
    let agent = Agent::start_on_lo(&ns, &file, &[]);
    let name = format!("default-nginx.ingress.{ZONE}");
    eventually("the first server's pods", 10, || {
        addresses_of(&ns, &name) == 2
    });
    eventually("the learned server among the candidates", 10, || {
        agent.metrics().contains(&format!(
            "hostport_dns_api_server_active{{server=\"{}\"}} 0",
            second.url()
        ))
    });
    first.set_outage(true);
    eventually("the learned server's pods", 20, || {
        addresses_of(&ns, &name) == 3
    });
    assert_eq!(active(&agent, &second), 1.0);
}

/// The pods of `first`, with `second` as the fallback API server.
fn with_fallback(first: &FakeApi, second: &FakeApi) -> String {
    format!(
        "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\n  fallbackApiServers: [{}]\npods:\n  - zone: {ZONE}\n",
        first.url(),
        second.url()
    )
}

/// A hung first API server (watches that carry nothing, requests never answered) is left for
/// the fallback as one that is down is: its silent watches fail for a server's reason.
#[test]
fn a_hung_api_server_is_left_for_the_fallback() {
    require_root();
    let ns = NetNs::new("khung");
    let (first, second) = two_api_servers(&ns);
    let dir = TempDir::new("khung");
    let file = dir.write("agent.yaml", &with_fallback(&first, &second));
    let agent = agent_with_short_silence(&ns, &file, &[]);
    let name = format!("default-nginx.ingress.{ZONE}");
    eventually("the first server's pods", 10, || {
        addresses_of(&ns, &name) == 2
    });
    first.freeze(true);
    // The bound is 12 s, then 3 s of every watch failing; generous for a noisy machine.
    eventually("the second server's pods", 40, || {
        addresses_of(&ns, &name) == 3 && active(&agent, &second) == 1.0
    });
    eventually("ready on the fallback", 15, || {
        agent.http_get("/readyz").0 == 200
    });
}

/// On the fallback, the first API server is probed before the watches go back to it: while it is
/// down they stay (no relist on the fallback, no move), and once it answers they go back.
#[test]
fn the_watches_go_back_to_the_first_api_server_only_once_it_answers() {
    require_root();
    let ns = NetNs::new("kfailback");
    let (first, second) = two_api_servers(&ns);
    let dir = TempDir::new("kfailback");
    let file = dir.write("agent.yaml", &with_fallback(&first, &second));
    let agent = Agent::start_on_lo(&ns, &file, &[]);
    let name = format!("default-nginx.ingress.{ZONE}");
    eventually("the first server's pods", 10, || {
        addresses_of(&ns, &name) == 2
    });
    first.set_outage(true);
    eventually("the second server's pods", 20, || {
        addresses_of(&ns, &name) == 3 && active(&agent, &second) == 1.0
    });
    let lists = second.list_requests();
    // Past the failback delay (30 s) and a failover after it (3 s), with room to spare.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while std::time::Instant::now() < until {
        assert_eq!(
            active(&agent, &second),
            1.0,
            "moved back to a server that is down"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(
        second.list_requests(),
        lists,
        "no relist on the fallback: {:?}",
        second.requests()
    );
    assert!(
        first.requests().iter().any(|r| r == "GET /readyz"),
        "the first server was probed"
    );
    first.set_outage(false);
    eventually("back on the first server once it answers", 30, || {
        active(&agent, &first) == 1.0 && addresses_of(&ns, &name) == 2
    });
}

#[test]
fn a_410_gone_relists_without_ever_losing_the_records() {
    let c = cluster("k410", ingress_pods, "", &[]);
    eventually("both pods", 10, || {
        c.addresses("default-nginx.ingress").len() == 2
    });
    let relists_before = c
        .api
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET Pod") && !r.contains("watch=true"))
        .count();
    // While the agent is cut off, a pod arrives and the history is compacted: its watch resumes
    // from a resource version the server no longer has.
    c.api.set_outage(true);
    eventually("the agent to notice", 15, || {
        c.agent
            .metric("hostport_dns_source_connected", &[("source", "kubernetes")])
            == 0.0
    });
    let pod = PodSpec::ingress("nginx-9", "ingress", "default-nginx", "cp-9", "198.18.0.19");
    c.api.apply(Kind::Pod, pod.to_json());
    c.api.compact();
    c.api.set_outage(false);
    eventually("the new pod after the relist", 20, || {
        let addresses = c.addresses("default-nginx.ingress");
        assert!(
            addresses.len() >= 2,
            "records lost during the relist: {addresses:?}"
        );
        addresses.len() == 3
    });
    let relists = c
        .api
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET Pod") && !r.contains("watch=true"))
        .count();
    assert!(
        relists > relists_before,
        "the watcher relisted after 410 Gone"
    );
}

#[test]
fn endpoint_slices_serve_the_api_servers_and_keep_the_last_answer() {
    let c = cluster("kslices", ingress_pods, "", &[]);
    eventually("the API server record", 10, || {
        c.addresses("api") == ["198.18.0.11"]
    });
    c.api.apply(
        Kind::EndpointSlice,
        endpoint_slice(
            "default",
            "kubernetes-b",
            "kubernetes",
            &[("198.18.0.12", Some(true), "cp-1")],
        ),
    );
    eventually("both slices merged", 10, || {
        c.addresses("api") == ["198.18.0.11", "198.18.0.12"]
    });
    assert_eq!(
        c.dig(&[&format!("api.{ZONE}")]).answer[0].ttl,
        60,
        "EndpointSlice records carry their own TTL"
    );
    // One endpoint after the other not ready: split-brain protection keeps the last non-empty
    // answer, the one that stayed ready longest.
    c.api.apply(
        Kind::EndpointSlice,
        endpoint_slice(
            "default",
            "kubernetes-a",
            "kubernetes",
            &[("198.18.0.11", Some(false), "cp-0")],
        ),
    );
    eventually("the not-ready endpoint to leave", 10, || {
        c.addresses("api") == ["198.18.0.12"]
    });
    c.api.apply(
        Kind::EndpointSlice,
        endpoint_slice(
            "default",
            "kubernetes-b",
            "kubernetes",
            &[("198.18.0.12", Some(false), "cp-1")],
        ),
    );
    eventually("the kept answer to be flagged", 10, || {
        c.agent.metric(
            "hostport_dns_kept_last_answer",
            &[("source", "default/kubernetes")],
        ) == 1.0
    });
    assert_eq!(
        c.addresses("api"),
        ["198.18.0.12"],
        "the API server name keeps its last answer"
    );
}

#[test]
fn node_addresses_can_stand_for_the_endpoints() {
    let extra = "  - zone: prod.coreha.example\n    hostnames: [api-external]\n    service: default/kubernetes\n    addressSource: node-external\n";
    let c = cluster(
        "knodes",
        |api| {
            ingress_pods(api);
            api.apply(Kind::Node, node("cp-0", "198.18.0.11", "198.18.100.11"));
        },
        extra,
        &[],
    );
    eventually("the node's external address", 10, || {
        c.addresses("api-external") == ["198.18.100.11"]
    });
    assert!(
        c.api.requests().iter().any(|r| r.starts_with("GET Node")),
        "nodes are watched only when needed"
    );
}

/// The API servers as real clusters list them: `default/kubernetes` slices without `nodeName`
/// (IPv4 and IPv6), each address matched to the node that holds it, answered by that node's
/// internal, external or first public address; the answers follow the nodes' addresses.
#[test]
fn api_servers_without_node_names_are_answered_with_their_nodes_addresses() {
    let extra = "  - zone: prod.coreha.example
    hostnames: [api-internal]
    addressSource: node-internal
  - zone: prod.coreha.example
    hostnames: [api-external]
    addressSource: node-external
  - zone: prod.coreha.example
    hostnames: [api-public]
    addressSource: node-public
  - zone: prod.coreha.example
    hostnames: [api-public]
    addressSource: node-public
    addressType: IPv6
";
    // Data only: the public addresses below are answered, never sent to.
    let cp0 = |external: &str| {
        node_with(
            "cp-0",
            &[
                ("InternalIP", "198.18.0.11"),
                ("InternalIP", "2001:db8::11"),
                ("ExternalIP", "192.0.2.11"),
                ("ExternalIP", external),
                ("ExternalIP", "2a00:1450::11"),
            ],
        )
    };
    let c = cluster(
        "knoname",
        |api| {
            ingress_pods(api);
            // cp-1 is listed in the IPv6 slice only.
            api.apply(
                Kind::EndpointSlice,
                api_server_slice("IPv6", "kubernetes-v6", &["2001:db8::11", "2001:db8::12"]),
            );
            api.apply(Kind::Node, cp0("5.6.7.11"));
            api.apply(
                Kind::Node,
                node_with(
                    "cp-1",
                    &[("InternalIP", "2001:db8::12"), ("ExternalIP", "5.6.7.12")],
                ),
            );
            api.apply(Kind::Node, node("worker", "198.18.0.99", "5.6.7.99"));
            // cp-2's API server advertises its node's ExternalIP: matched by that address.
            api.apply(
                Kind::EndpointSlice,
                api_server_slice("IPv4", "kubernetes-b", &["5.6.7.13"]),
            );
            api.apply(Kind::Node, node("cp-2", "198.18.0.13", "5.6.7.13"));
        },
        extra,
        &[],
    );
    let sorted = |mut list: Vec<String>| {
        list.sort();
        list
    };
    eventually("the nodes' external addresses", 10, || {
        sorted(c.addresses("api-external")) == ["192.0.2.11", "5.6.7.11", "5.6.7.12", "5.6.7.13"]
    });
    assert_eq!(
        sorted(c.addresses("api-internal")),
        ["198.18.0.11", "198.18.0.13"],
        "an endpoint at its node's ExternalIP stands for that node too"
    );
    assert_eq!(
        sorted(c.addresses("api-public")),
        ["5.6.7.11", "5.6.7.12", "5.6.7.13"]
    );
    let aaaa = c
        .dig(&[&format!("api-public.{ZONE}"), "AAAA"])
        .answer_data();
    assert_eq!(aaaa, ["2a00:1450::11"]);
    assert_eq!(
        sorted(c.addresses("api")),
        ["198.18.0.11", "5.6.7.13"],
        "the endpoint addresses themselves"
    );
    // The node's public address changes: the answer follows.
    c.api.apply(Kind::Node, cp0("5.6.7.21"));
    eventually("the new public address", 10, || {
        sorted(c.addresses("api-public")) == ["5.6.7.12", "5.6.7.13", "5.6.7.21"]
    });
}

#[test]
fn label_values_that_are_not_dns_labels_are_skipped_and_counted() {
    let c = cluster(
        "kbad",
        |api| {
            ingress_pods(api);
            api.apply(
                Kind::Pod,
                PodSpec::ingress("odd", "ingress", "not_a.label", "cp-5", "198.18.0.15").to_json(),
            );
        },
        "",
        &[],
    );
    eventually("the good pods", 10, || {
        c.addresses("default-nginx.ingress").len() == 2
    });
    assert!(
        c.agent.metric(
            "hostport_dns_dropped_records",
            &[("reason", "invalid_dns_label")]
        ) >= 1.0
    );
}

/// Pods as they come in real clusters: dual-stack node addresses, a hostPort bound to one node
/// address, hostNetwork, uppercase and dotted label values (with coreha's dotted rule switched on
/// for a second source), a pod whose phase is Succeeded and one being deleted.
#[test]
fn pod_edge_cases_on_the_wire() {
    let c = cluster_with_config(
        "kedge",
        |api| {
            let mut dual =
                PodSpec::ingress("dual", "edge", "dual", "cp-1", "198.18.0.21").to_json();
            dual["status"]["hostIPs"] =
                serde_json::json!([{"ip": "198.18.0.21"}, {"ip": "2001:db8::21"}]);
            api.apply(Kind::Pod, dual);
            // Port 443 bound to the node's second address only: that is where it is reachable.
            let mut bound =
                PodSpec::ingress("bound", "edge", "bound", "cp-2", "198.18.0.22").to_json();
            bound["spec"]["containers"][0]["ports"][0]["hostIP"] = "198.18.0.122".into();
            api.apply(Kind::Pod, bound);
            let mut host_net =
                PodSpec::ingress("hostnet", "edge", "hostnet", "cp-3", "198.18.0.23");
            host_net.host_port = None;
            host_net.host_network = true;
            api.apply(Kind::Pod, host_net.to_json());
            api.apply(
                Kind::Pod,
                PodSpec::ingress("upper", "edge", "Public-LB", "cp-4", "198.18.0.24").to_json(),
            );
            api.apply(
                Kind::Pod,
                PodSpec::ingress("dotted", "edge", "lb.public", "cp-5", "198.18.0.25").to_json(),
            );
            let mut done = PodSpec::ingress("done", "edge", "done", "cp-6", "198.18.0.26");
            done.phase = "Succeeded".into();
            api.apply(Kind::Pod, done.to_json());
            let mut leaving = PodSpec::ingress("leaving", "edge", "leaving", "cp-7", "198.18.0.27");
            leaving.terminating = true;
            api.apply(Kind::Pod, leaving.to_json());
        },
        &format!(
            "zones:\n  - name: {ZONE}\n  - name: coreha.test\nkubernetes:\n  apiServer: {{api}}\npods:\n  - zone: {ZONE}\n  - zone: coreha.test\n    dottedLabelValues: labels\n"
        ),
    );
    eventually("the dual-stack pod", 10, || {
        c.addresses("dual.edge") == ["198.18.0.21"]
    });
    assert_eq!(
        c.dig(&[&format!("dual.edge.{ZONE}"), "AAAA"]).answer_data(),
        ["2001:db8::21"]
    );
    assert_eq!(c.addresses("bound.edge"), ["198.18.0.122"]);
    assert!(
        c.dig(&[&format!("bound.edge.{ZONE}"), "AAAA"])
            .answer_data()
            .is_empty()
    );
    assert_eq!(c.addresses("hostnet.edge"), ["198.18.0.23"]);
    assert_eq!(c.addresses("public-lb.edge"), ["198.18.0.24"]);
    assert_eq!(c.addresses("PUBLIC-LB.edge"), ["198.18.0.24"]);
    // Dotted: skipped and counted by default, one label per part where asked for.
    assert_eq!(
        c.dig(&[&format!("lb.public.edge.{ZONE}")]).status,
        "NXDOMAIN"
    );
    assert_eq!(
        dig(
            &c.ns,
            "127.0.0.1",
            1053,
            &["lb.public.edge.coreha.test", "A"]
        )
        .answer_data(),
        ["198.18.0.25"]
    );
    assert!(
        c.agent.metric(
            "hostport_dns_dropped_records",
            &[("reason", "invalid_dns_label")]
        ) >= 1.0
    );
    for gone in ["done.edge", "leaving.edge"] {
        assert_eq!(
            c.dig(&[&format!("{gone}.{ZONE}")]).status,
            "NXDOMAIN",
            "{gone}"
        );
    }
}

#[test]
fn watches_select_by_label_and_ask_for_bookmarks() {
    let c = cluster("kwatch", ingress_pods, "", &[]);
    eventually("both pods", 10, || {
        c.addresses("default-nginx.ingress").len() == 2
    });
    let requests = c.api.requests();
    let pod_watch = requests
        .iter()
        .find(|r| r.starts_with("GET Pod") && r.contains("watch=true"))
        .expect("a pod watch");
    assert!(
        pod_watch.contains("labelSelector=ingress.cluster/name"),
        "{pod_watch}"
    );
    assert!(
        pod_watch.contains("allowWatchBookmarks=true"),
        "{pod_watch}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.contains("labelSelector=kubernetes.io/service-name=kubernetes")),
        "{requests:?}"
    );
    // The default `nodes` rules (nodes on their way out leave the pod answers) watch Nodes
    // once, all of them; tests/tests/integration/node_life.rs shows there is none without rules.
    let node_watches = requests
        .iter()
        .filter(|r| r.starts_with("GET Node") && r.contains("watch=true"))
        .count();
    assert!(node_watches >= 1, "{requests:?}");
}

#[test]
fn pod_options_select_values_addresses_and_srv_on_the_wire() {
    let config = "zones:
  - name: value.example
  - name: host.example
  - name: pod.example
  - name: auto.example
  - name: nosrv.example
kubernetes:
  apiServer: {api}
pods:
  - { zone: value.example, labelValue: public }
  - { zone: host.example, address: host }
  - { zone: pod.example, address: pod }
  - { zone: auto.example }
  - { zone: nosrv.example, srv: false }
";
    let c = cluster_with_config(
        "kpodopt",
        |api| {
            // With a hostPort; without one; on the host network (its pod address made different
            // from the node's, to tell them apart).
            let public = PodSpec::ingress("p1", "edge", "public", "cp-1", "198.18.0.11");
            let mut internal = PodSpec::ingress("p2", "edge", "internal", "cp-2", "198.18.0.12");
            internal.host_port = None;
            internal.pod_ip = "198.19.0.2".into();
            let mut hostnet = PodSpec::ingress("p3", "edge", "hostnet", "cp-3", "198.18.0.13");
            hostnet.host_port = None;
            hostnet.host_network = true;
            hostnet.pod_ip = "198.19.0.3".into();
            for pod in [public, internal, hostnet] {
                api.apply(Kind::Pod, pod.to_json());
            }
        },
        config,
    );
    let a = |name: &str| c.dig(&[name, "A"]);
    eventually("the pods to be served", 10, || {
        a("public.edge.auto.example").answer_data() == ["198.18.0.11"]
    });
    // labelValue: only that value.
    assert_eq!(
        a("public.edge.value.example").answer_data(),
        ["198.18.0.11"]
    );
    assert_eq!(a("internal.edge.value.example").status, "NXDOMAIN");
    // address: host, whatever the pod declares.
    assert_eq!(
        a("internal.edge.host.example").answer_data(),
        ["198.18.0.12"]
    );
    // address: pod, even with a hostPort.
    assert_eq!(a("public.edge.pod.example").answer_data(), ["198.19.0.1"]);
    assert_eq!(a("internal.edge.pod.example").answer_data(), ["198.19.0.2"]);
    // auto: the node for hostPort and hostNetwork pods, the pod otherwise.
    assert_eq!(
        a("internal.edge.auto.example").answer_data(),
        ["198.19.0.2"]
    );
    assert_eq!(
        a("hostnet.edge.auto.example").answer_data(),
        ["198.18.0.13"]
    );
    // srv: false: no SRV names (where the default has them).
    assert_eq!(
        c.dig(&["_https._tcp.public.edge.auto.example", "SRV"])
            .answer_data(),
        ["0 1 443 cp-1.nodes.auto.example."]
    );
    assert_eq!(
        c.dig(&["_https._tcp.public.edge.nosrv.example", "SRV"])
            .status,
        "NXDOMAIN"
    );
    assert_eq!(
        a("public.edge.nosrv.example").answer_data(),
        ["198.18.0.11"]
    );
}

#[test]
fn endpoint_slice_options_select_the_family_and_may_let_a_name_go_empty() {
    let config = format!(
        "zones:
  - name: {ZONE}
kubernetes:
  apiServer: {{api}}
endpointSlices:
  - {{ zone: {ZONE}, hostnames: [api6], addressType: IPv6 }}
  - {{ zone: {ZONE}, hostnames: [api-nokeep, api-abs.{ZONE}., \"@\"], keepLastNonEmpty: false }}
"
    );
    let c = cluster_with_config(
        "kslopt",
        |api| {
            api.apply(
                Kind::EndpointSlice,
                endpoint_slice(
                    "default",
                    "kubernetes-a",
                    "kubernetes",
                    &[("198.18.0.11", Some(true), "cp-0")],
                ),
            );
            api.apply(
                Kind::EndpointSlice,
                endpoint_slice_of(
                    "IPv6",
                    "default",
                    "kubernetes-v6",
                    "kubernetes",
                    &[("2001:db8::11", Some(true), "cp-0")],
                ),
            );
        },
        &config,
    );
    eventually("the API server names", 10, || {
        c.addresses("api-nokeep") == ["198.18.0.11"]
    });
    // Hostnames written absolute or as the apex are not completed twice.
    assert_eq!(c.addresses("api-abs"), ["198.18.0.11"]);
    assert_eq!(
        c.dig(&[ZONE, "A"]).answer_data(),
        ["198.18.0.11"],
        "the apex"
    );
    // IPv6: only the IPv6 slice's addresses.
    assert_eq!(
        c.dig(&[&format!("api6.{ZONE}"), "AAAA"]).answer_data(),
        ["2001:db8::11"]
    );
    let a = c.dig(&[&format!("api6.{ZONE}"), "A"]);
    assert_eq!((a.status.as_str(), a.answer.len()), ("NOERROR", 0), "{a:?}");
    // keepLastNonEmpty: false: with no ready endpoint the name goes.
    c.api.apply(
        Kind::EndpointSlice,
        endpoint_slice(
            "default",
            "kubernetes-a",
            "kubernetes",
            &[("198.18.0.11", Some(false), "cp-0")],
        ),
    );
    eventually("the name to go empty", 10, || {
        c.dig(&[&format!("api-nokeep.{ZONE}"), "A"]).status == "NXDOMAIN"
    });
    // Each output has its own series: the IPv6 one is not overwritten by the IPv4 one.
    for output in [
        "api6.prod.coreha.example/IPv6",
        "api-nokeep.prod.coreha.example/IPv4",
    ] {
        let series = c
            .agent
            .metrics()
            .lines()
            .filter(|l| {
                l.starts_with("hostport_dns_kept_last_answer{")
                    && l.contains(&format!("output=\"{output}\""))
            })
            .count();
        assert_eq!(series, 1, "one series for {output}");
        assert_eq!(
            c.agent
                .metric("hostport_dns_kept_last_answer", &[("output", output)]),
            0.0,
            "{output}"
        );
    }
}

/// A host address of its own for pod `n` (unique below 131072), in 198.18.0.0/15.
fn spread_address(n: usize) -> String {
    format!(
        "198.{}.{}.{}",
        18 + (n >> 16) % 2,
        (n >> 8) & 0xff,
        n & 0xff
    )
}

/// With 100,000 pods, a relist after 410 Gone (the watch resumed from a compacted revision)
/// publishes the names that changed while the agent was cut off, and nothing else: it is
/// compared with what the agent held, not published whole.
#[test]
fn a_relist_after_410_with_100k_pods_publishes_only_the_difference() {
    const PODS: usize = 100_000;
    let pod = |i: usize, address: usize| {
        PodSpec::ingress(
            &format!("pod-{i}"),
            "ingress",
            &format!("svc-{i}"),
            &format!("node-{i}"),
            &spread_address(address),
        )
    };
    // One name a pod (no SRV records): all of them fit the kernel table.
    let c = cluster_with_config(
        "k410big",
        |api| {
            for i in 0..PODS {
                api.apply(Kind::Pod, pod(i, i).to_json());
            }
        },
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {{api}}\npods:\n  - zone: {ZONE}\n    srv: false\n"
        ),
    );
    let last = format!("svc-{}.ingress", PODS - 1);
    eventually("the last pod", 300, || {
        c.addresses(&last) == [spread_address(PODS - 1)]
    });
    let changed = || c.agent.metric("hostport_dns_table_names_changed", &[]);
    let written = || c.agent.metric("hostport_dns_xdp_names_written", &[]);
    // The counters are read with the writer idle: after a change of its own is answered
    // (every earlier write is done by then: the writer takes them in order, and reports each
    // before it starts the next) and that write's report is in (each switched table counted
    // in `table_updates` is counted again once its write ends). Without this, the first fill's
    // follow-up writes landed in the difference under load.
    let idle = |sentinel: usize| {
        c.api.apply(Kind::Pod, pod(0, sentinel).to_json());
        eventually("the sentinel change answered", 120, || {
            c.addresses("svc-0.ingress") == [spread_address(sentinel)]
        });
        eventually("the writer idle", 60, || {
            let text = c.agent.metrics();
            let count = |name: &str| metric_sum(&text, name, &[]);
            count("hostport_dns_table_updates")
                == count("hostport_dns_xdp_generations") + count("hostport_dns_xdp_write_errors")
        });
    };
    idle(PODS + 1);
    let (changed_before, written_before) = (changed(), written());
    c.api.set_outage(true);
    eventually("the agent to notice", 15, || {
        c.agent
            .metric("hostport_dns_source_connected", &[("source", "kubernetes")])
            == 0.0
    });
    // Three pods move while the agent is cut off, and the history is compacted.
    let moved = [7, 50_000, PODS - 1];
    for i in moved {
        c.api.apply(Kind::Pod, pod(i, i + 1).to_json());
    }
    c.api.compact();
    c.api.set_outage(false);
    for i in moved {
        let name = format!("svc-{i}.ingress");
        eventually("the moved pod after the relist", 120, || {
            c.addresses(&name) == [spread_address(i + 1)]
        });
    }
    // The sentinel's own change (one name) is counted too.
    idle(PODS + 2);
    assert_eq!(changed() - changed_before, 4.0, "names compiled again");
    assert_eq!(written() - written_before, 4.0, "kernel entries written");
    assert_eq!(
        c.addresses("svc-8.ingress"),
        [spread_address(8)],
        "the others stay"
    );
}
