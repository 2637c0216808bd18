//! The whole path, as in production: a (fake) API server, the agent with XDP on its interface,
//! and a real HAProxy (`resolvers` + `server-template`, default resolve-prefer: AAAA then A)
//! in another namespace learning the ingress pods' nodes through DNS, following pods becoming
//! Ready, NotReady and deleted, and keeping its backends through an API outage.

use std::time::Duration;

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::dig,
    eventually,
    fake_api::{FakeApi, Kind},
    haproxy::Haproxy,
    k8s::PodSpec,
    netns::Link,
    require_root,
};

const ZONE: &str = "prod.coreha.example";
const NAME: &str = "default-nginx.ingress.prod.coreha.example";

/// The i-th ingress pod: node cp-i, address 198.18.0.(10 + i), hostPort https/443.
fn pod_spec(i: u32) -> PodSpec {
    PodSpec::ingress(
        &format!("nginx-{i}"),
        "ingress",
        "default-nginx",
        &format!("cp-{i}"),
        &format!("198.18.0.{}", 10 + i),
    )
}

fn pod(i: u32, ready: bool) -> serde_json::Value {
    let mut pod = pod_spec(i);
    pod.ready = ready;
    pod.to_json()
}

#[test]
fn haproxy_follows_the_ingress_pods_through_xdp_and_survives_an_api_outage() {
    require_root();
    let link = Link::new("e2e");
    let api = FakeApi::start(Some(&link.server_ns));
    api.apply(Kind::Pod, pod(1, true));
    api.apply(Kind::Pod, pod(2, true));
    let dir = TempDir::new("e2e");
    let config = dir.write(
        "agent.yaml",
        &format!("zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n    strictHostPort: true\n", api.url()),
    );
    let agent = Agent::start_native(&link, &["--config", config.to_str().expect("UTF-8")], &[]);
    let haproxy = Haproxy::start(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        NAME,
        4,
        None,
    );

    eventually("HAProxy to learn both pods", 15, || {
        haproxy.backend_addresses() == ["198.18.0.11", "198.18.0.12"]
    });

    api.apply(Kind::Pod, pod(2, false));
    eventually("HAProxy to drop the NotReady pod", 15, || {
        haproxy.backend_addresses() == ["198.18.0.11"]
    });

    api.apply(Kind::Pod, pod(3, true));
    api.delete(Kind::Pod, "ingress", "nginx-1");
    eventually(
        "HAProxy to swap the deleted pod for the new one",
        15,
        || haproxy.backend_addresses() == ["198.18.0.13"],
    );

    api.apply(Kind::Pod, pod(2, true));
    eventually("HAProxy to take the pod back", 15, || {
        haproxy.backend_addresses() == ["198.18.0.12", "198.18.0.13"]
    });

    api.set_outage(true);
    eventually("the agent to lose the API server", 15, || {
        agent.metric("hostport_dns_source_connected", &[("source", "kubernetes")]) == 0.0
    });
    // HAProxy polls every second and holds a failed lookup for only 1 s: through ten seconds of
    // outage it keeps both backends only if the agent keeps answering them. Asked directly, the
    // agent answers them from XDP.
    let xdp_answers = || agent.metric("hostport_dns_responses", &[("path", "xdp"), ("type", "A")]);
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(
            haproxy.backend_addresses(),
            ["198.18.0.12", "198.18.0.13"],
            "backends lost during the API outage"
        );
        let before = xdp_answers();
        let direct = dig(&link.client_ns, link.server.ipv4, 1053, &[NAME, "A"]);
        assert_eq!(direct.status, "NOERROR");
        assert_eq!(direct.answer_data(), ["198.18.0.12", "198.18.0.13"]);
        assert!(xdp_answers() > before, "answered by XDP during the outage");
    }
    api.set_outage(false);
    api.delete(Kind::Pod, "ingress", "nginx-3");
    eventually("HAProxy to follow changes after the outage", 20, || {
        haproxy.backend_addresses() == ["198.18.0.12"]
    });

    // HAProxy asked AAAA then A for every poll; the kernel answered them.
    let xdp_a = agent.metric("hostport_dns_responses", &[("path", "xdp"), ("type", "A")]);
    let xdp_aaaa = agent.metric(
        "hostport_dns_responses",
        &[("path", "xdp"), ("type", "AAAA")],
    );
    assert!(
        xdp_a > 10.0 && xdp_aaaa > 10.0,
        "A {xdp_a}, AAAA {xdp_aaaa} answered by XDP"
    );
    assert_eq!(
        agent.metric(
            "hostport_dns_responses",
            &[("path", "userspace"), ("type", "A")]
        ),
        0.0
    );
}

#[test]
fn haproxy_with_ipv4_preference_asks_only_for_a() {
    require_root();
    let link = Link::new("e2e4");
    let api = FakeApi::start(Some(&link.server_ns));
    api.apply(Kind::Pod, pod(1, true));
    let dir = TempDir::new("e2e4");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n",
            api.url()
        ),
    );
    let agent = Agent::start_native(&link, &["--config", config.to_str().expect("UTF-8")], &[]);
    let haproxy = Haproxy::start(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        NAME,
        2,
        Some("ipv4"),
    );
    eventually("HAProxy to learn the pod", 15, || {
        haproxy.backend_addresses() == ["198.18.0.11"]
    });
    assert!(agent.metric("hostport_dns_responses", &[("path", "xdp"), ("type", "A")]) > 0.0);
    assert_eq!(
        agent.metric("hostport_dns_responses", &[("type", "AAAA")]),
        0.0
    );
}

#[test]
fn haproxy_in_srv_mode_takes_ports_from_srv_and_addresses_from_the_additional_section() {
    require_root();
    let link = Link::new("e2esrv");
    let api = FakeApi::start(Some(&link.server_ns));
    // A named hostPort other than 443, so that the port can only come from the SRV record.
    for i in [1, 2] {
        let mut pod = pod_spec(i);
        pod.host_port = Some(("https".into(), 8443));
        api.apply(Kind::Pod, pod.to_json());
    }
    let dir = TempDir::new("e2esrv");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n",
            api.url()
        ),
    );
    let agent = Agent::start_native(&link, &["--config", config.to_str().expect("UTF-8")], &[]);
    let haproxy = Haproxy::start(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        &format!("_https._tcp.{NAME}"),
        4,
        None,
    );
    eventually("HAProxy to learn both pods from SRV", 15, || {
        haproxy.backend_endpoints() == ["198.18.0.11:8443", "198.18.0.12:8443"]
    });
    api.delete(Kind::Pod, "ingress", "nginx-1");
    eventually("HAProxy to drop the deleted pod", 15, || {
        haproxy.backend_endpoints() == ["198.18.0.12:8443"]
    });
    assert!(
        agent.metric(
            "hostport_dns_responses",
            &[("path", "userspace"), ("type", "SRV")]
        ) > 0.0,
        "SRV answered by userspace"
    );
}
