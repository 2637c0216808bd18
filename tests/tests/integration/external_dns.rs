//! External-dns outputs through the real kube client against the fake API server: the objects
//! external-dns reads (annotated headless Services, DNSEndpoints) say what the agent answers,
//! follow the endpoints, are written by one agent (the Lease holder) and only when something
//! changed, leave every object the agent does not own alone, and move to another agent when the
//! holder is killed (its lease expires) or stopped (it hands the lease back). Pod names go into
//! one DNSEndpoint per `pods` entry, one endpoint per name and family.

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::dig,
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::{PodSpec, api_server_slice},
    netns::NetNs,
    require_root,
};
use serde_json::{Value, json};

const ZONE: &str = "prod.example";
/// Where the objects and the Lease live.
const NAMESPACE: &str = "hostport-dns";
const LEASE: &str = "hostport-dns-leader";
const PREFIX: &str = "external-dns.alpha.kubernetes.io/";

struct Bed {
    ns: NetNs,
    api: FakeApi,
    dir: TempDir,
}

impl Bed {
    fn new(tag: &str) -> Self {
        require_root();
        let ns = NetNs::new(tag);
        let api = FakeApi::start(Some(&ns));
        api.apply(
            Kind::EndpointSlice,
            api_server_slice("IPv4", "kubernetes-a", &["198.18.0.12", "198.18.0.11"]),
        );
        let dir = TempDir::new(tag);
        Self { ns, api, dir }
    }

    /// The configuration: `api.` and `k8s.<zone>` from `default/kubernetes`, written as `kind`.
    fn config(&self, kind: &str) -> std::path::PathBuf {
        let text = format!(
            "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {}\nendpointSlices:\n  - zone: {ZONE}\n    name: api\n    hostnames: [api, k8s]\n    ttl: 30\nleaderElection:\n  namespace: {NAMESPACE}\nexternalDns:\n  namespace: {NAMESPACE}\n  outputs:\n    - endpointSlices: api\n      name: api-servers\n      kind: {kind}\n",
            self.api.url()
        );
        self.dir.write(&format!("agent-{kind}.yaml"), &text)
    }

    /// An agent (userspace only, so that several share the namespace) on `port`, named `name`.
    fn agent(&self, config: &std::path::Path, port: u16, name: &str) -> Agent {
        Agent::start_with_metrics(
            &self.ns,
            &format!("127.0.0.1:{}", 9300 + port % 100),
            &[
                "--config",
                config.to_str().expect("UTF-8"),
                "--xdp-mode",
                "off",
                "--port",
                &port.to_string(),
                "--identity",
                name,
            ],
        )
    }

    /// The A records `name` is answered with, as "address ttl", sorted.
    fn answer(&self, port: u16, name: &str) -> Vec<String> {
        let reply = dig(
            &self.ns,
            "127.0.0.1",
            port,
            &[&format!("{name}.{ZONE}"), "A"],
        );
        let mut answer: Vec<String> = reply
            .answer
            .iter()
            .map(|r| format!("{} {}", r.data, r.ttl))
            .collect();
        answer.sort();
        answer
    }

    /// The served answer, as the Service annotations should say it: (target, ttl).
    fn served(&self, port: u16) -> (String, String) {
        let api = self.answer(port, "api");
        assert_eq!(api, self.answer(port, "k8s"), "both names answer alike");
        let targets: Vec<&str> = api.iter().filter_map(|a| a.split(' ').next()).collect();
        let ttl = api
            .first()
            .and_then(|a| a.split(' ').nth(1))
            .unwrap_or("")
            .to_owned();
        (targets.join(","), ttl)
    }

    fn service(&self) -> Option<Value> {
        self.api.object(Kind::Service, NAMESPACE, "api-servers")
    }

    /// The lease's holder, if any.
    fn holder(&self) -> Option<String> {
        let lease = self.api.object(Kind::Lease, NAMESPACE, LEASE)?;
        lease["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
    }

    fn move_endpoints(&self, addresses: &[&str]) {
        self.api.apply(
            Kind::EndpointSlice,
            api_server_slice("IPv4", "kubernetes-a", addresses),
        );
    }
}

fn annotation(object: &Value, key: &str) -> String {
    object["metadata"]["annotations"][format!("{PREFIX}{key}")]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// A Service in the namespace: `labels` given, headless.
fn service(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels,
                     "annotations": {format!("{PREFIX}hostname"): "old.example"}},
        "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]},
    })
}

#[test]
fn services_say_what_is_served_follow_the_endpoints_and_nothing_else_is_touched() {
    let bed = Bed::new("edsvc");
    // Not the agent's: no labels; another installation's (another lease).
    bed.api
        .apply(Kind::Service, service("someone-else", json!({})));
    let theirs =
        json!({"app.kubernetes.io/managed-by": "hostport-dns", "hostport-dns/lease": "other"});
    bed.api
        .apply(Kind::Service, service("other-install", theirs));
    // The agent's, of an output no longer configured: deleted.
    let ours = json!({"app.kubernetes.io/managed-by": "hostport-dns", "hostport-dns/lease": LEASE});
    bed.api
        .apply(Kind::Service, service("hostport-dns-gone", ours));
    let before: Vec<Value> = ["someone-else", "other-install"]
        .iter()
        .map(|n| bed.api.object(Kind::Service, NAMESPACE, n).expect("there"))
        .collect();
    let agent = bed.agent(&bed.config("Service"), 1053, "agent-a");

    eventually("the Service to be written", 20, || {
        bed.service()
            .is_some_and(|s| !annotation(&s, "target").is_empty())
    });
    let service = bed.service().expect("written");
    let (target, ttl) = bed.served(1053);
    assert_eq!(target, "198.18.0.11,198.18.0.12");
    assert_eq!(annotation(&service, "target"), target);
    assert_eq!(annotation(&service, "ttl"), ttl);
    assert_eq!(
        annotation(&service, "hostname"),
        "api.prod.example,k8s.prod.example"
    );
    assert_eq!(service["spec"]["clusterIP"], "None", "{service}");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(service["spec"]["selector"].is_null(), "{service}");
    let labels = &service["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "hostport-dns");
    assert_eq!(labels["hostport-dns/lease"], LEASE);
    assert_eq!(labels["hostport-dns/output"], "api");
    assert!(
        bed.holder().is_some_and(|h| h.starts_with("agent-a_")),
        "{:?}",
        bed.holder()
    );
    eventually("the stale Service to go", 10, || {
        bed.api
            .object(Kind::Service, NAMESPACE, "hostport-dns-gone")
            .is_none()
    });

    bed.move_endpoints(&["198.18.0.13"]);
    eventually("the Service to follow the endpoints", 20, || {
        bed.service()
            .is_some_and(|s| annotation(&s, "target") == "198.18.0.13")
    });
    assert_eq!(bed.served(1053).0, "198.18.0.13");

    // Nothing changes: over two renewals, only the Lease is written.
    let written = bed.api.writes().len();
    std::thread::sleep(std::time::Duration::from_secs(12));
    let since: Vec<String> = bed.api.writes()[written..].to_vec();
    assert!(
        since.iter().all(|w| w.starts_with("PUT Lease ")),
        "writes with nothing changed: {since:?}"
    );
    assert!(!since.is_empty(), "the lease is renewed");

    let after: Vec<Value> = ["someone-else", "other-install"]
        .iter()
        .map(|n| {
            bed.api
                .object(Kind::Service, NAMESPACE, n)
                .expect("still there")
        })
        .collect();
    assert_eq!(
        before, after,
        "objects the agent does not own are untouched"
    );
    let writes = bed.api.writes();
    assert!(
        writes
            .iter()
            .all(|w| !w.contains("someone-else") && !w.contains("other-install")),
        "{writes:?}"
    );
    drop(agent);
}

#[test]
fn dns_endpoints_say_what_is_served_and_follow_the_endpoints() {
    let bed = Bed::new("eddnsep");
    let agent = bed.agent(&bed.config("DNSEndpoint"), 1053, "agent-a");
    let endpoints = || {
        bed.api
            .object(Kind::DnsEndpoint, NAMESPACE, "api-servers")
            .map(|o| o["spec"]["endpoints"].clone())
    };
    let expected = |targets: &[&str], ttl: u64| {
        json!([
            {"dnsName": "api.prod.example", "recordType": "A", "targets": targets, "recordTTL": ttl},
            {"dnsName": "k8s.prod.example", "recordType": "A", "targets": targets, "recordTTL": ttl},
        ])
    };
    eventually("the DNSEndpoint to be written", 20, || {
        endpoints().is_some()
    });
    let (target, ttl) = bed.served(1053);
    let ttl: u64 = ttl.parse().expect("a TTL");
    let targets: Vec<&str> = target.split(',').collect();
    assert_eq!(endpoints(), Some(expected(&targets, ttl)));
    assert_eq!(targets, ["198.18.0.11", "198.18.0.12"]);
    let object = bed
        .api
        .object(Kind::DnsEndpoint, NAMESPACE, "api-servers")
        .expect("written");
    assert_eq!(object["apiVersion"], "externaldns.k8s.io/v1alpha1");
    assert_eq!(object["metadata"]["labels"]["hostport-dns/lease"], LEASE);

    bed.move_endpoints(&["198.18.0.14", "198.18.0.11"]);
    eventually("the DNSEndpoint to follow the endpoints", 20, || {
        endpoints() == Some(expected(&["198.18.0.11", "198.18.0.14"], ttl))
    });
    assert_eq!(bed.served(1053).0, "198.18.0.11,198.18.0.14");
    assert!(
        bed.api.objects(Kind::Service, NAMESPACE).is_empty(),
        "a DNSEndpoint output writes no Service"
    );
    drop(agent);
}

/// The records dig gets for `name` and `rtype` from the agent on `port`, sorted.
fn dug(bed: &Bed, port: u16, name: &str, rtype: &str) -> Vec<String> {
    let reply = dig(&bed.ns, "127.0.0.1", port, &[name, rtype]);
    let mut data: Vec<String> = reply.answer.iter().map(|r| r.data.clone()).collect();
    data.sort();
    data
}

#[test]
fn pod_names_are_one_dns_endpoint_that_follows_the_ready_pods() {
    let bed = Bed::new("edpods");
    let pod = |name: &str, value: &str, node: &str, ip: &str| {
        PodSpec::ingress(name, "ingress", value, node, ip)
    };
    bed.api.apply(
        Kind::Pod,
        pod("web-1", "web", "cp-0", "198.18.0.21").to_json(),
    );
    bed.api.apply(
        Kind::Pod,
        pod("web-2", "web", "cp-1", "198.18.0.22").to_json(),
    );
    bed.api.apply(
        Kind::Pod,
        pod("edge-1", "edge", "cp-1", "198.18.0.22").to_json(),
    );
    let mut not_ready = pod("web-3", "web", "cp-2", "198.18.0.23");
    not_ready.ready = false;
    bed.api.apply(Kind::Pod, not_ready.to_json());
    let config = bed.dir.write(
        "agent-pods.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\n    ttl: 7\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n\
             leaderElection:\n  namespace: {NAMESPACE}\nexternalDns:\n  namespace: {NAMESPACE}\n  outputs:\n\
             \x20   - pods: 0\n      kind: DNSEndpoint\n",
            bed.api.url()
        ),
    );
    let agent = bed.agent(&config, 1053, "agent-a");
    let endpoints = || {
        bed.api
            .object(Kind::DnsEndpoint, NAMESPACE, "hostport-dns-pods-0")
            .map(|o| o["spec"]["endpoints"].clone())
    };
    let expected = |edge: &[&str], web: &[&str]| {
        json!([
            {"dnsName": "edge.ingress.prod.example", "recordType": "A", "targets": edge, "recordTTL": 7},
            {"dnsName": "web.ingress.prod.example", "recordType": "A", "targets": web, "recordTTL": 7},
        ])
    };
    eventually("the pods' DNSEndpoint to be written", 20, || {
        endpoints().is_some()
    });
    assert_eq!(
        endpoints(),
        Some(expected(&["198.18.0.22"], &["198.18.0.21", "198.18.0.22"]))
    );
    // What external-dns publishes is what the agent answers.
    assert_eq!(
        dug(&bed, 1053, "web.ingress.prod.example", "A"),
        ["198.18.0.21", "198.18.0.22"]
    );
    assert_eq!(
        dug(&bed, 1053, "edge.ingress.prod.example", "A"),
        ["198.18.0.22"]
    );

    // A pod turns Ready, another is deleted: the one object follows.
    let mut ready = pod("web-3", "web", "cp-2", "198.18.0.23");
    ready.ready = true;
    bed.api.apply(Kind::Pod, ready.to_json());
    bed.api.delete(Kind::Pod, "ingress", "web-1");
    eventually("the DNSEndpoint to follow the pods", 20, || {
        endpoints() == Some(expected(&["198.18.0.22"], &["198.18.0.22", "198.18.0.23"]))
    });
    assert_eq!(
        dug(&bed, 1053, "web.ingress.prod.example", "A"),
        ["198.18.0.22", "198.18.0.23"]
    );
    // The last pod of a name goes: its endpoint goes with it.
    bed.api.delete(Kind::Pod, "ingress", "edge-1");
    eventually("the gone name to leave the DNSEndpoint", 20, || {
        endpoints().is_some_and(|e| e.as_array().is_some_and(|a| a.len() == 1))
    });
    assert_eq!(
        endpoints().and_then(|e| e[0]["dnsName"].as_str().map(str::to_owned)),
        Some("web.ingress.prod.example".to_owned())
    );
    drop(agent);
}

/// Which of `names` holds the lease (holder identities are `<name>_<suffix>`).
fn leader(bed: &Bed, names: &[&'static str]) -> Option<&'static str> {
    let holder = bed.holder()?;
    names
        .iter()
        .find(|name| holder.starts_with(&format!("{name}_")))
        .copied()
}

#[test]
fn the_other_agent_takes_over_when_the_holder_is_killed_or_stopped() {
    let bed = Bed::new("edlease");
    let config = bed.config("Service");
    let a = bed.agent(&config, 1053, "agent-a");
    let b = bed.agent(&config, 1054, "agent-b");
    eventually("one agent to lead and write", 30, || {
        bed.holder().is_some() && bed.service().is_some()
    });
    let first = leader(&bed, &["agent-a", "agent-b"]).expect("a known holder");
    let (leading, following, follower_port) = if first == "agent-a" {
        (a, b, 1054)
    } else {
        (b, a, 1053)
    };
    let follower_name = if first == "agent-a" {
        "agent-b"
    } else {
        "agent-a"
    };
    assert_eq!(leading.metric("hostport_dns_leader", &[]), 1.0);
    assert_eq!(following.metric("hostport_dns_leader", &[]), 0.0);
    // Only the holder writes: every Service write so far came while `first` held the lease.
    // (The API server records a write as it arrives, the agent counts it once answered: the
    // two meet once the answer is in.)
    let services_written = || {
        bed.api
            .writes()
            .iter()
            .filter(|w| w.contains(" Service "))
            .count() as f64
    };
    eventually(
        "the holder to count every Service write the API saw",
        30,
        || {
            leading.metric("hostport_dns_external_dns_writes", &[("result", "created")])
                == services_written()
        },
    );
    assert!(
        !following
            .metrics()
            .contains("hostport_dns_external_dns_writes_total{"),
        "the follower wrote nothing"
    );

    // Killed (SIGKILL): the lease is not released; the follower takes it once it expires.
    drop(leading);
    eventually("the follower to take the expired lease", 40, || {
        bed.holder()
            .is_some_and(|h| h.starts_with(&format!("{follower_name}_")))
    });
    bed.move_endpoints(&["198.18.0.15"]);
    eventually("the new holder to write the change", 20, || {
        bed.service()
            .is_some_and(|s| annotation(&s, "target") == "198.18.0.15")
    });
    assert_eq!(bed.served(follower_port).0, "198.18.0.15");
    assert!(following.metric("hostport_dns_external_dns_writes", &[("result", "updated")]) >= 1.0);

    // Stopped (SIGTERM): the holder hands the lease back before it exits.
    let third_port = if follower_port == 1053 { 1054 } else { 1053 };
    let third = bed.agent(&config, third_port, "agent-c");
    let holder = bed.holder();
    assert_eq!(following.stop(), Some(0));
    let right_after = bed
        .api
        .object(Kind::Lease, NAMESPACE, LEASE)
        .expect("a lease");
    let after_holder = right_after["spec"]["holderIdentity"].as_str().unwrap_or("");
    assert!(
        after_holder.is_empty() || after_holder.starts_with("agent-c_"),
        "released at the stop (was {holder:?}), not left to expire: {right_after}"
    );
    eventually("the third agent to take the released lease", 20, || {
        bed.holder().is_some_and(|h| h.starts_with("agent-c_"))
    });
    bed.move_endpoints(&["198.18.0.16"]);
    eventually("the third agent to write the change", 20, || {
        bed.service()
            .is_some_and(|s| annotation(&s, "target") == "198.18.0.16")
    });
    drop(third);
}
