//! Answers that follow the nodes' life (the `nodes` rules), against the fake API server and on
//! the wire: a node the cluster autoscaler or Karpenter takes away leaves the pod answers as
//! soon as its taint appears (XDP and userspace alike) and comes back when the taint goes; the
//! label and cordon rules apply only when configured; the API-server records keep every server;
//! HAProxy drops such a node while its pod is still Ready.

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    book,
    clients::{Reply, dig},
    eventually,
    fake_api::{FakeApi, Kind},
    haproxy::Haproxy,
    k8s::{NodeSpec, PodSpec, endpoint_slice},
    netns::{Link, NetNs},
    require_root,
};

const ZONE: &str = "life.coreha.example";
const NAME: &str = "default-nginx.ingress.life.coreha.example";
const SRV: &str = "_https._tcp.default-nginx.ingress.life.coreha.example";
const AUTOSCALER: &str = "ToBeDeletedByClusterAutoscaler";
const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Node cp-i's address.
fn address(i: u32) -> String {
    format!("198.18.0.{}", 10 + i)
}

fn node(i: u32) -> NodeSpec {
    NodeSpec::new(&format!("cp-{i}"), &address(i))
}

/// The ingress pod on node cp-i (hostPort https/443, so answered with the node's address).
fn pod(i: u32) -> serde_json::Value {
    PodSpec::ingress(
        &format!("nginx-{i}"),
        "ingress",
        "default-nginx",
        &format!("cp-{i}"),
        &address(i),
    )
    .to_json()
}

/// Three nodes with an ingress pod each; cp-1 and cp-2 also run the API servers (their
/// endpoints, as the kube-apiserver writes them, carry the node's name here for clarity).
fn fleet(api: &FakeApi) {
    for i in 0..3 {
        api.apply(Kind::Node, node(i).to_json());
        api.apply(Kind::Pod, pod(i));
    }
    let servers = [(address(1), "cp-1"), (address(2), "cp-2")];
    let servers: Vec<(&str, Option<bool>, &str)> = servers
        .iter()
        .map(|(ip, node)| (ip.as_str(), None, *node))
        .collect();
    api.apply(
        Kind::EndpointSlice,
        endpoint_slice("default", "kubernetes-a", "kubernetes", &servers),
    );
}

struct Cluster {
    agent: Agent,
    api: FakeApi,
    ns: NetNs,
    _dir: TempDir,
}

fn cluster(tag: &str, nodes_section: &str) -> Cluster {
    cluster_with(tag, "", nodes_section, |_| {})
}

/// [`cluster`] with more of the pods entry (`pods_extra`, indented) and objects `prepare`
/// applies over the fleet before the agent starts.
fn cluster_with(
    tag: &str,
    pods_extra: &str,
    nodes_section: &str,
    prepare: impl FnOnce(&FakeApi),
) -> Cluster {
    require_root();
    let ns = NetNs::new(tag);
    let api = FakeApi::start(Some(&ns));
    fleet(&api);
    prepare(&api);
    let dir = TempDir::new(tag);
    let config = format!(
        "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n{pods_extra}endpointSlices:\n  - zone: {ZONE}\n    hostnames: [api]\n    service: default/kubernetes\n{nodes_section}",
        api.url()
    );
    let file = dir.write("agent.yaml", &config);
    let agent = Agent::start_on_lo(&ns, &file, &[]);
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

    /// The addresses of `name` over UDP (XDP answers it) when TCP (userspace) gives the same;
    /// else what each gave, which matches no expected answer (a change may land between the
    /// two questions: `eventually` asks again).
    fn addresses(&self, name: &str) -> Vec<String> {
        let udp = self.dig(&[name, "A"]).answer_data();
        let tcp = self.dig(&["+tcp", name, "A"]).answer_data();
        if udp == tcp {
            udp
        } else {
            vec![format!("XDP {udp:?} but userspace {tcp:?}")]
        }
    }

    fn pods_answer(&self) -> Vec<String> {
        self.addresses(NAME)
    }

    /// The SRV targets of the ingress name.
    fn srv_targets(&self) -> Vec<String> {
        let mut targets: Vec<String> = self
            .dig(&[SRV, "SRV"])
            .answer_data()
            .iter()
            .filter_map(|data| data.split_whitespace().nth(3).map(str::to_owned))
            .collect();
        targets.sort();
        targets
    }

    fn excluded(&self, reason: &str) -> f64 {
        self.agent
            .metric("hostport_dns_nodes_excluded", &[("reason", reason)])
    }
}

fn addresses(of: &[u32]) -> Vec<String> {
    of.iter().map(|i| address(*i)).collect()
}

fn target(i: u32) -> String {
    format!("cp-{i}.nodes.{ZONE}.")
}

#[test]
fn nodes_on_their_way_out_leave_the_pod_answers_and_come_back() {
    let c = cluster("nlife", "");
    eventually("the three pods", 15, || {
        c.pods_answer() == addresses(&[0, 1, 2])
    });
    assert_eq!(c.srv_targets(), [target(0), target(1), target(2)]);
    let xdp_before = c
        .agent
        .metric("hostport_dns_responses", &[("path", "xdp"), ("type", "A")]);
    for taint in [
        AUTOSCALER,
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
    ] {
        let mut leaving = node(1);
        leaving.taints = vec![taint.into()];
        c.api.apply(Kind::Node, leaving.to_json());
        eventually(&format!("cp-1 to leave on {taint}"), 15, || {
            c.pods_answer() == addresses(&[0, 2])
        });
        assert_eq!(c.srv_targets(), [target(0), target(2)], "{taint}");
        // The API server on that node keeps serving until it stops: its record stays.
        assert_eq!(c.addresses(&format!("api.{ZONE}")), addresses(&[1, 2]));
        eventually("the node counted", 10, || c.excluded("taint") == 1.0);
        c.api.apply(Kind::Node, node(1).to_json());
        eventually(&format!("cp-1 to return once {taint} goes"), 15, || {
            c.pods_answer() == addresses(&[0, 1, 2])
        });
        eventually("no node counted", 10, || c.excluded("taint") == 0.0);
    }
    assert!(
        c.agent
            .metric("hostport_dns_responses", &[("path", "xdp"), ("type", "A")])
            > xdp_before,
        "the kernel answered the changed names too"
    );
    let logs = c.agent.logs();
    assert!(
        logs.contains("node leaves the answers") && logs.contains(AUTOSCALER),
        "{logs}"
    );
    assert!(logs.contains("node returns to the answers"), "{logs}");

    // Not configured: the exclusion label (kubeadm's control planes carry it) and a cordon
    // leave cp-2 answered. The taint on cp-0 comes after them: once it shows, they were seen.
    let mut labelled = node(2);
    labelled.labels = vec![(EXCLUDE_LABEL.into(), String::new())];
    labelled.unschedulable = true;
    c.api.apply(Kind::Node, labelled.to_json());
    let mut going = node(0);
    going.taints = vec![AUTOSCALER.into()];
    c.api.apply(Kind::Node, going.to_json());
    eventually("cp-0 to leave", 15, || {
        c.pods_answer() == addresses(&[1, 2])
    });

    // The autoscaler deletes the node before the pod garbage collector deletes its pod, which
    // is still Ready meanwhile: it stays out. A new pod after the deletion shows it was seen.
    c.api.delete(Kind::Node, "", "cp-0");
    c.api.apply(Kind::Node, node(3).to_json());
    c.api.apply(Kind::Pod, pod(3));
    eventually("the new pod", 15, || c.pods_answer().contains(&address(3)));
    assert_eq!(c.pods_answer(), addresses(&[1, 2, 3]));
    // A node of the same name that comes back without the taint brings its pod back.
    c.api.apply(Kind::Node, node(0).to_json());
    eventually("cp-0 back", 15, || {
        c.pods_answer() == addresses(&[0, 1, 2, 3])
    });
}

#[test]
fn the_label_and_cordon_rules_apply_only_when_configured_and_keep_the_api_servers() {
    let section = format!(
        "nodes:\n  excludeTaints: []\n  excludeLabels: [{EXCLUDE_LABEL}]\n  excludeUnschedulable: true\n"
    );
    let c = cluster("nrules", &section);
    eventually("the three pods", 15, || {
        c.pods_answer() == addresses(&[0, 1, 2])
    });
    // cp-1 labelled as kubeadm labels control planes, cp-2 cordoned.
    let mut control_plane = node(1);
    control_plane.labels = vec![
        (EXCLUDE_LABEL.into(), String::new()),
        (
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        ),
    ];
    c.api.apply(Kind::Node, control_plane.to_json());
    let mut cordoned = node(2);
    cordoned.unschedulable = true;
    c.api.apply(Kind::Node, cordoned.to_json());
    eventually("both to leave", 15, || c.pods_answer() == addresses(&[0]));
    assert_eq!(c.srv_targets(), [target(0)]);
    eventually("each counted", 10, || {
        c.excluded("label") == 1.0 && c.excluded("unschedulable") == 1.0
    });
    // The API servers on labelled or cordoned control planes are still answered.
    assert_eq!(c.addresses(&format!("api.{ZONE}")), addresses(&[1, 2]));
    // Taints were emptied: the autoscaler's leaves cp-0 in. Uncordoning cp-2 afterwards shows
    // both were seen.
    let mut tainted = node(0);
    tainted.taints = vec![AUTOSCALER.into()];
    c.api.apply(Kind::Node, tainted.to_json());
    c.api.apply(Kind::Node, node(2).to_json());
    eventually("cp-2 back", 15, || c.pods_answer() == addresses(&[0, 2]));
    assert_eq!(c.excluded("taint"), 0.0);
}

#[test]
fn without_rules_nodes_are_not_watched_for_pods() {
    let c = cluster("nnorules", "nodes:\n  excludeTaints: []\n");
    eventually("the three pods", 15, || {
        c.pods_answer() == addresses(&[0, 1, 2])
    });
    let mut leaving = node(1);
    leaving.taints = vec![AUTOSCALER.into()];
    c.api.apply(Kind::Node, leaving.to_json());
    c.api.apply(Kind::Pod, pod(3));
    eventually("the new pod", 15, || c.pods_answer().len() == 4);
    assert!(
        !c.api.requests().iter().any(|r| r.starts_with("GET Node")),
        "no node watch without rules or node address sources"
    );
}

/// The fleet behind a veth pair: the fake API server and the agent (native XDP) on one side,
/// the load balancer on the other; `pods_extra` adds to the pods entry, `prepare` to the fleet.
struct LinkBed {
    link: Link,
    api: FakeApi,
    _agent: Agent,
    _dir: TempDir,
}

impl LinkBed {
    fn new(tag: &str, pods_extra: &str, prepare: impl FnOnce(&FakeApi)) -> Self {
        require_root();
        let link = Link::new(tag);
        let api = FakeApi::start(Some(&link.server_ns));
        fleet(&api);
        prepare(&api);
        let dir = TempDir::new(tag);
        let config = dir.write(
            "agent.yaml",
            &format!(
                "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n{pods_extra}",
                api.url()
            ),
        );
        let agent = Agent::start_native(&link, &["--config", config.to_str().expect("UTF-8")], &[]);
        Self {
            link,
            api,
            _agent: agent,
            _dir: dir,
        }
    }
}

#[test]
fn haproxy_drops_a_node_the_autoscaler_takes_before_its_pod_goes() {
    let bed = LinkBed::new("nlifeha", "    strictHostPort: true\n", |_| {});
    let (link, api) = (&bed.link, &bed.api);
    let haproxy = Haproxy::start(
        &link.client_ns,
        &format!("{}:1053", link.server.ipv4),
        NAME,
        4,
        Some("ipv4"),
    );
    eventually("HAProxy to learn the three nodes", 20, || {
        haproxy.backend_addresses() == addresses(&[0, 1, 2])
    });
    // The autoscaler taints (and cordons) cp-2 before draining it; drain leaves the DaemonSet
    // pod alone, Ready.
    let mut leaving = node(2);
    leaving.taints = vec![AUTOSCALER.into()];
    leaving.unschedulable = true;
    api.apply(Kind::Node, leaving.to_json());
    eventually("HAProxy to drop cp-2", 20, || {
        haproxy.backend_addresses() == addresses(&[0, 1])
    });
    assert!(
        api.object(Kind::Pod, "ingress", "nginx-2").is_some(),
        "the pod is still there, Ready"
    );
    // Then the node goes, and later its pod: cp-2 never comes back meanwhile.
    api.delete(Kind::Node, "", "cp-2");
    api.apply(Kind::Node, node(3).to_json());
    api.apply(Kind::Pod, pod(3));
    eventually("HAProxy to learn cp-3", 20, || {
        haproxy.backend_addresses() == addresses(&[0, 1, 3])
    });
    api.delete(Kind::Pod, "ingress", "nginx-2");
    api.apply(Kind::Pod, pod(4));
    api.apply(Kind::Node, node(4).to_json());
    eventually("HAProxy to learn cp-4", 20, || {
        haproxy.backend_addresses() == addresses(&[0, 1, 3, 4])
    });
}

const ZONE_KEY: &str = "topology.kubernetes.io/zone";

fn in_zone(i: u32, zone: &str) -> serde_json::Value {
    let mut node = node(i);
    node.labels = vec![(ZONE_KEY.into(), zone.into())];
    node.to_json()
}

fn zone_name(zone: &str) -> String {
    format!("{zone}.{NAME}")
}

#[test]
fn topology_names_answer_each_zones_nodes_and_follow_nodes_moving() {
    let c = cluster_with(
        "ntopo",
        &format!("    topologyKey: {ZONE_KEY}\n"),
        "",
        |api| {
            api.apply(Kind::Node, in_zone(0, "eu-west-1a"));
            api.apply(Kind::Node, in_zone(1, "eu-west-1a"));
            api.apply(Kind::Node, in_zone(2, "eu-west-1b"));
        },
    );
    eventually("the zone names", 15, || {
        c.addresses(&zone_name("eu-west-1a")) == addresses(&[0, 1])
            && c.addresses(&zone_name("eu-west-1b")) == addresses(&[2])
    });
    assert_eq!(
        c.pods_answer(),
        addresses(&[0, 1, 2]),
        "the parent keeps every node"
    );
    let srv = c.dig(&[&format!("_https._tcp.{}", zone_name("eu-west-1a")), "SRV"]);
    let mut targets: Vec<String> = srv
        .answer_data()
        .iter()
        .filter_map(|d| d.split_whitespace().nth(3).map(str::to_owned))
        .collect();
    targets.sort();
    assert_eq!(targets, [target(0), target(1)]);

    // cp-1 moves to 1b; cp-0 to 1c, which empties 1a: NXDOMAIN.
    c.api.apply(Kind::Node, in_zone(1, "eu-west-1b"));
    eventually("cp-1 in 1b", 15, || {
        c.addresses(&zone_name("eu-west-1b")) == addresses(&[1, 2])
            && c.addresses(&zone_name("eu-west-1a")) == addresses(&[0])
    });
    c.api.apply(Kind::Node, in_zone(0, "eu-west-1c"));
    eventually("1a emptied", 15, || {
        c.dig(&[&zone_name("eu-west-1a"), "A"]).status == "NXDOMAIN"
            && c.dig(&["+tcp", &zone_name("eu-west-1a"), "A"]).status == "NXDOMAIN"
    });
    assert_eq!(c.addresses(&zone_name("eu-west-1c")), addresses(&[0]));

    // A value that is no DNS label: reported, skipped; the node stays under the parent name.
    c.api.apply(Kind::Node, in_zone(2, "Zone_B"));
    eventually("cp-2 out of 1b", 15, || {
        c.addresses(&zone_name("eu-west-1b")) == addresses(&[1])
    });
    assert_eq!(c.pods_answer(), addresses(&[0, 1, 2]));
    eventually("the value counted", 10, || {
        c.agent.metric(
            "hostport_dns_dropped_records",
            &[("reason", "invalid_topology_value")],
        ) == 1.0
    });
    assert!(
        c.agent
            .logs()
            .contains("a topology value that is not a DNS label")
    );

    // A node leaving takes its pod out of its zone's name too.
    let mut leaving = node(0);
    leaving.labels = vec![(ZONE_KEY.into(), "eu-west-1c".into())];
    leaving.taints = vec![AUTOSCALER.into()];
    c.api.apply(Kind::Node, leaving.to_json());
    eventually("1c emptied by the taint", 15, || {
        c.dig(&[&zone_name("eu-west-1c"), "A"]).status == "NXDOMAIN"
    });
    assert_eq!(c.pods_answer(), addresses(&[1, 2]));
}

/// RBAC without nodes (a hand-made role from before the rules): the pod answers are served
/// without the rules, and readiness names the failing watch; once allowed, the rules apply.
#[test]
fn a_forbidden_node_watch_keeps_the_pod_answers_and_says_why() {
    let c = cluster_with("nforbid", "", "", |api| api.forbid(Kind::Node, true));
    eventually("the pods, without the rules", 15, || {
        c.pods_answer() == addresses(&[0, 1, 2])
    });
    let (status, body) = c.agent.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("nodes") && body.contains("forbidden"),
        "{body}"
    );
    let mut leaving = node(1);
    leaving.taints = vec![AUTOSCALER.into()];
    c.api.apply(Kind::Node, leaving.to_json());
    c.api.forbid(Kind::Node, false);
    eventually("the rules once nodes are allowed", 20, || {
        c.pods_answer() == addresses(&[0, 2])
    });
    eventually("ready", 10, || c.agent.http_get("/readyz").0 == 200);
}

/// docs/src/node-life.md's load balancer in one zone, its configuration as the page shows it:
/// its zone's name in the slots, the whole fleet as `backup`; a node moving zones moves between
/// them.
#[test]
fn haproxy_in_one_zone_takes_that_zones_nodes_with_the_fleet_as_backup() {
    let bed = LinkBed::new(
        "ntopoha",
        &format!("    topologyKey: {ZONE_KEY}\n"),
        |api| {
            api.apply(Kind::Node, in_zone(0, "eu-west-1a"));
            api.apply(Kind::Node, in_zone(1, "eu-west-1a"));
            api.apply(Kind::Node, in_zone(2, "eu-west-1b"));
        },
    );
    let (link, api) = (&bed.link, &bed.api);
    let [config] = book::blocks("node-life.md", "## Nodes leaving and topology")
        .try_into()
        .expect("one block: the per-zone load balancer");
    let server = format!("{}:1053", link.server.ipv4);
    let config = book::made_local(
        &config,
        &[
            ("192.0.2.11:1053", &server),
            ("192.0.2.12:1053", &server),
            ("ingress.prod.example.com", ZONE),
        ],
    );
    assert!(config.contains(&zone_name("eu-west-1a")), "{config}");
    let haproxy = Haproxy::start_sections(&link.client_ns, &config);
    eventually("the zone's nodes, the fleet as backup", 20, || {
        haproxy.slot_addresses("zone") == addresses(&[0, 1])
            && haproxy.slot_addresses("all") == addresses(&[0, 1, 2])
    });
    api.apply(Kind::Node, in_zone(1, "eu-west-1b"));
    eventually("cp-1 out of the zone's slots", 20, || {
        haproxy.slot_addresses("zone") == addresses(&[0])
            && haproxy.slot_addresses("all") == addresses(&[0, 1, 2])
    });
}
