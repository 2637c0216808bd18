//! The chart and the plain manifests: they parse as typed Kubernetes objects, the manifests are
//! the chart's defaults, the chart's values reach the agent's configuration exactly, and the RBAC
//! rules cover exactly the API calls the agent makes.

use std::{collections::BTreeSet, path::PathBuf, process::Command};

use clap::Parser;
use hostport_dns::{
    config::{Cli, Command as AgentCommand},
    sources::kube::config::{AddressSource, PodAddress},
    xdp::XdpMode,
};
use hostport_dns_common::generation::Capacity;
use hostport_dns_tests::{
    TempDir,
    agent::{Agent, records_on_lo},
    api_tls::ApiCredentials,
    book,
    cgroup::Cgroup,
    clients::{dig, udp_exchange},
    eventually,
    fake_api::{Access, FakeApi, Kind},
    k8s::{PodSpec, endpoint_slice, node},
    netns::{NetNs, sh},
    packet::QueryBuilder,
    require_root,
    secondary::TsigKey,
    workspace_root,
};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Secret, Service, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject},
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_yaml_ng::Value;

fn helm() -> PathBuf {
    let path = std::env::var_os("HOSTPORT_DNS_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/hostport-dns/bin/helm")
        });
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask setup`",
        path.display()
    );
    path
}

fn chart() -> PathBuf {
    workspace_root().join("deploy/chart/hostport-dns")
}

/// `helm template` of the chart with extra values (YAML), as documents.
fn render(values: &str) -> Vec<Value> {
    let dir = TempDir::new("values");
    let file = dir.write("values.yaml", values);
    let out = sh(Command::new(helm())
        .args(["template", "hostport-dns"])
        .arg(chart())
        .args(["--namespace", "kube-system", "-f"])
        .arg(file));
    documents(&String::from_utf8_lossy(&out.stdout))
}

/// Every YAML document of `text`; a document that does not parse fails the test (it would be
/// a manifest the cluster rejects, not one to skip).
fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .map(|(i, d)| {
            Value::deserialize(d)
                .unwrap_or_else(|e| panic!("YAML document {i} does not parse: {e}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize;

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn typed<T: serde::de::DeserializeOwned>(doc: &Value) -> T {
    serde_yaml_ng::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("not a valid {}: {e}", std::any::type_name::<T>()))
}

fn manifests() -> Vec<Value> {
    let text = std::fs::read_to_string(workspace_root().join("deploy/manifests/hostport-dns.yaml"))
        .expect("the manifests");
    documents(&text)
}

#[test]
fn the_plain_manifests_parse_as_typed_kubernetes_objects() {
    let docs = manifests();
    for doc in &docs {
        match doc["kind"].as_str().unwrap_or("") {
            "ServiceAccount" => drop(typed::<ServiceAccount>(doc)),
            "ConfigMap" => drop(typed::<ConfigMap>(doc)),
            "ClusterRole" => drop(typed::<ClusterRole>(doc)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(doc)),
            "Role" => drop(typed::<Role>(doc)),
            "RoleBinding" => drop(typed::<RoleBinding>(doc)),
            "DaemonSet" => drop(typed::<DaemonSet>(doc)),
            "Service" => drop(typed::<Service>(doc)),
            "Secret" => drop(typed::<Secret>(doc)),
            other => panic!("unexpected kind {other}"),
        }
    }
    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let pod = ds.spec.expect("a spec").template.spec.expect("a pod spec");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.dns_policy.as_deref(),
        Some("Default"),
        "no dependency on cluster DNS"
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    let container = &pod.containers[0];
    let security = container
        .security_context
        .as_ref()
        .expect("a security context");
    assert_eq!(security.privileged, Some(false));
    let caps = security.capabilities.as_ref().expect("capabilities");
    assert_eq!(
        caps.add.as_deref(),
        Some(
            &[
                "BPF".to_owned(),
                "NET_ADMIN".to_owned(),
                "PERFMON".to_owned()
            ][..]
        )
    );
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    // The runtime's default seccomp profile, on the pod and its container (docs/src/install.md says
    // which runtimes let bpf() through it with CAP_BPF).
    let runtime_default = |profile: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
        profile.is_some_and(|p| p.type_ == "RuntimeDefault")
    };
    assert!(runtime_default(security.seccomp_profile.as_ref()));
    assert!(runtime_default(
        pod.security_context
            .as_ref()
            .and_then(|s| s.seccomp_profile.as_ref())
    ));
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let volumes = pod.volumes.expect("volumes");
    assert!(
        volumes.iter().any(|v| v
            .host_path
            .as_ref()
            .is_some_and(|h| h.path == "/sys/fs/bpf")),
        "bpffs for the pins"
    );
    let tolerations = pod.tolerations.expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("node-role.kubernetes.io/control-plane"))
    );
}

/// Where the chart mounts the cookie Secret, as its configuration names it.
const COOKIE_SECRET_MOUNT: &str = "/etc/hostport-dns-cookies/secret";

/// The chart's agent configuration with the cookie Secret "mounted" as the kubelet would: its
/// content written into `dir`, and the configuration pointing there.
fn config_with_mounted_secret(docs: &[Value], dir: &TempDir) -> String {
    let cm: ConfigMap = typed(of_kind(docs, "ConfigMap")[0]);
    let text = cm
        .data
        .expect("data")
        .remove("config.yaml")
        .expect("config.yaml");
    // The TSIG keys' Secret is the operator's: a key file per key, as the kubelet mounts them.
    let text = if text.contains(TSIG_MOUNT) {
        let keys = dir.path.join("tsig");
        std::fs::create_dir_all(&keys).expect("a directory for the TSIG keys");
        std::fs::write(
            keys.join("transfer-key"),
            TsigKey::test("transfer-key").secret,
        )
        .expect("write the TSIG key");
        text.replace(TSIG_MOUNT, &format!("{}/", keys.display()))
    } else {
        text
    };
    let Some(secret) = of_kind(docs, "Secret").first().map(|d| typed::<Secret>(d)) else {
        return text;
    };
    let file = dir.write("cookie-secret", &secret_text(secret));
    text.replace(COOKIE_SECRET_MOUNT, file.to_str().expect("UTF-8"))
}

/// Where the chart mounts the TSIG keys' Secret.
const TSIG_MOUNT: &str = "/etc/hostport-dns-tsig/";

/// What the kubelet writes into the mounted file: the Secret's `secret` key, decoded.
fn secret_text(secret: Secret) -> String {
    let bytes = secret
        .data
        .expect("data")
        .remove("secret")
        .expect("the secret key")
        .0;
    String::from_utf8(bytes).expect("text")
}

/// The documents with the cookie secret the chart generates (random per render) set aside.
fn without_generated_secrets(mut docs: Vec<Value>) -> Vec<Value> {
    for doc in &mut docs {
        if doc["kind"].as_str() == Some("Secret") {
            doc["data"]["secret"] = Value::from("generated");
        }
    }
    docs
}

#[test]
fn the_plain_manifests_are_the_charts_defaults() {
    assert_eq!(
        without_generated_secrets(render("")),
        without_generated_secrets(manifests()),
        "run `cargo xtask manifests` after changing the chart"
    );
}

#[test]
fn the_charts_cookie_secret_is_one_the_agent_reads_and_its_config_points_to_it() {
    let docs = render("");
    let secret: Secret = typed(of_kind(&docs, "Secret")[0]);
    let dir = TempDir::new("cookiesecret");
    let file = dir.write("secret", &secret_text(secret.clone()));
    hostport_dns_core::cookies::Cookies::new(Some(file)).expect("the agent reads the secret");
    let cm: ConfigMap = typed(of_kind(&docs, "ConfigMap")[0]);
    let text = cm
        .data
        .expect("data")
        .remove("config.yaml")
        .expect("config");
    let parsed = hostport_dns::agent_config::parse(&text, "configmap".as_ref()).expect("config");
    assert_eq!(
        parsed.clients.cookies.secret_file.as_deref(),
        Some(COOKIE_SECRET_MOUNT.as_ref())
    );
    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let pod = ds.spec.expect("spec").template.spec.expect("pod");
    let volume = pod
        .volumes
        .expect("volumes")
        .into_iter()
        .find(|v| v.name == "cookies")
        .expect("the cookie volume");
    assert_eq!(
        volume
            .secret
            .expect("a Secret volume")
            .secret_name
            .as_deref(),
        secret.metadata.name.as_deref()
    );
    let mount = pod.containers[0]
        .volume_mounts
        .clone()
        .expect("mounts")
        .into_iter()
        .find(|m| m.name == "cookies")
        .expect("the cookie mount");
    assert_eq!(mount.mount_path, "/etc/hostport-dns-cookies");
    assert!(
        mount.sub_path.is_none(),
        "a subPath mount would never see a rotation"
    );
}

#[test]
fn helm_lint_accepts_the_chart_and_the_schema_rejects_bad_values() {
    sh(Command::new(helm()).arg("lint").arg(chart()));
    let dir = TempDir::new("badvalues");
    let bad = dir.write("values.yaml", "dns:\n  xdpMode: sideways\n");
    let out = Command::new(helm())
        .args(["template", "x"])
        .arg(chart())
        .arg("-f")
        .arg(bad)
        .output()
        .expect("helm");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("dns.xdpMode"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const CUSTOM_VALUES: &str = "
dns:
  port: 5353
  interfaces: [eth1, eth2]
  xdpMode: native
  pinDir: /sys/fs/bpf/hpd-custom
  answerOn: [198.18.0.10, eth1]
  kernelNames: 20000
  tcp: { maxConnections: 64, maxPerClient: 4 }
clients:
  allow: [198.18.0.0/24, \"2001:db8::/64\"]
  outside: refuse
  rateLimit: { responsesPerSecond: 40, negativePerSecond: 10, slip: 3, exempt: [198.18.0.128/25] }
  cookies: { enabled: true, secretName: corp-dns-cookies }
identity: { nsid: true, chaos: true, name: cp-a }
transfer:
  enabled: true
  tsigSecret: corp-tsig
  keys: [{ name: corp-key, algorithm: hmac-sha512 }]
  allow: [{ from: 198.18.0.0/24, key: corp-key }, { from: \"2001:db8::53\" }]
  notify: [{ address: \"198.18.0.53:5353\", key: corp-key }]
  history: 16
zones:
  - name: lb.corp.example
    ttl: 7
apiServer:
  url: https://198.18.0.1:6443
maxStalenessSeconds: 60
metrics:
  port: 9999
pods:
  - zone: lb.corp.example
    labelKey: gateway.example/name
    labelValue: edge
    namespaces: [gateways, ingress]
    strictHostPort: true
    address: host
    srv: false
endpointSlices:
  - zone: lb.corp.example
    hostnames: [kube-api, api]
    service: kube-system/apiserver
    addressType: IPv6
    addressSource: node-internal
    servingTerminating: true
    keepLastNonEmpty: false
    ttl: 30
";

/// The `--set` values of the install page's `helm install` line.
fn install_page_sets() -> Vec<String> {
    let blocks = book::blocks("install.md", "## Install");
    let install = blocks
        .iter()
        .find(|b| b.starts_with("helm install"))
        .expect("the install page's helm install line");
    let sets: Vec<String> = install
        .split("--set ")
        .skip(1)
        .map(|set| {
            let set = set.trim().trim_end_matches('\\').trim();
            set.trim_matches('\'').to_owned()
        })
        .collect();
    assert!(!sets.is_empty(), "no --set in {install}");
    sets
}

/// `helm template` of the chart with the install page's values and then `values` (a page's
/// block), and the agent configuration it writes, as the agent parses it.
fn configured_as_the_book_says(values: &str) -> hostport_dns::agent_config::AgentConfig {
    let dir = TempDir::new("book-values");
    let file = dir.write("values.yaml", values);
    let mut helm = Command::new(helm());
    helm.args(["template", "hostport-dns"])
        .arg(chart())
        .args(["--namespace", "kube-system"]);
    for set in install_page_sets() {
        helm.args(["--set", &set]);
    }
    let docs = documents(&String::from_utf8_lossy(
        &sh(helm.arg("-f").arg(file)).stdout,
    ));
    let text = config_with_mounted_secret(&docs, &dir);
    hostport_dns::agent_config::parse(&text, "configmap".as_ref())
        .unwrap_or_else(|e| panic!("the agent refuses the chart's config: {e:#}\n{text}"))
}

/// The chart values the book's pages show (the install line's, and with them the external-dns
/// outputs and the transfer settings) install, and configure the agent as the pages say.
#[test]
fn the_chart_values_the_book_shows_configure_what_its_pages_say() {
    let plain = configured_as_the_book_says("");
    assert_eq!(
        plain.zones.zones[0].apex.to_string(),
        "ingress.prod.example.com."
    );
    assert_eq!(plain.kube.pods.len(), 1);
    assert_eq!(plain.kube.endpoint_slices.len(), 1);

    let [external_dns, _update] =
        book::blocks("publishing.md", "## Publishing through external-dns")
            .into_iter()
            .chain(book::blocks(
                "publishing.md",
                "## Publishing into an existing zone (RFC 2136)",
            ))
            .collect::<Vec<_>>()
            .try_into()
            .expect("the external-dns values and the update entry");
    let outputs = configured_as_the_book_says(&external_dns)
        .outputs
        .external_dns
        .expect("externalDns configured")
        .outputs;
    assert_eq!(outputs.len(), 2, "{outputs:?}");

    let secondaries = book::blocks("secondaries.md", "### Secondary configurations");
    let values = secondaries
        .iter()
        .find(|b| b.starts_with("transfer:"))
        .expect("the chart's transfer values");
    let transfer = configured_as_the_book_says(values)
        .transfer
        .expect("transfers configured");
    assert_eq!(transfer.allow.len(), 1);
    assert_eq!(transfer.notify.len(), 1);
    assert_eq!(transfer.notify[0].address.to_string(), "192.0.2.53:53");
}

#[test]
fn chart_values_reach_the_agent_configuration_exactly() {
    let docs = render(CUSTOM_VALUES);
    let cm: ConfigMap = typed(of_kind(&docs, "ConfigMap")[0]);
    let text = cm
        .data
        .expect("data")
        .remove("config.yaml")
        .expect("config.yaml");
    let config = hostport_dns::agent_config::parse(&text, "configmap".as_ref())
        .expect("the agent accepts the chart's config");
    assert_eq!(config.zones.zones[0].apex.to_string(), "lb.corp.example.");
    assert_eq!(config.zones.zones[0].ttl, 7);
    let pods = &config.kube.pods[0];
    assert_eq!(pods.label_key, "gateway.example/name");
    assert_eq!(pods.label_value.as_deref(), Some("edge"));
    assert_eq!(pods.namespaces, ["gateways", "ingress"]);
    assert!(pods.strict_host_port && !pods.srv);
    assert_eq!(pods.address, PodAddress::Host);
    let slices = &config.kube.endpoint_slices[0];
    assert_eq!(
        slices
            .hostnames
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["kube-api.lb.corp.example.", "api.lb.corp.example."]
    );
    assert_eq!(
        (slices.namespace.as_str(), slices.service.as_str()),
        ("kube-system", "apiserver")
    );
    assert_eq!(slices.address_source, AddressSource::NodeInternal);
    assert!(slices.serving_terminating && !slices.keep_last_non_empty);
    assert_eq!(slices.ttl, 30);
    assert!(
        config.kube.kubernetes.token_file.is_some() && config.kube.kubernetes.ca_file.is_some()
    );
    let clients = &config.clients;
    assert_eq!(clients.allow.len(), 2);
    assert_eq!(clients.outside, hostport_dns::clients::Outside::Refuse);
    let rate = &clients.rate_limit;
    assert_eq!(
        (
            rate.responses_per_second,
            rate.negative_per_second,
            rate.errors_per_second,
            rate.slip
        ),
        (40, 10, 40, 3)
    );
    assert_eq!(rate.exempt[0].to_string(), "198.18.0.128/25");
    assert!(clients.cookies.enabled && clients.cookies.secret_file.is_some());
    assert!(
        of_kind(&docs, "Secret").is_empty(),
        "a named Secret is the operator's"
    );
    let transfer = config.transfer.as_ref().expect("transfers on");
    assert_eq!(transfer.keys[0].name.to_ascii(), "corp-key.");
    assert_eq!(
        transfer.keys[0].secret_file,
        std::path::Path::new("/etc/hostport-dns-tsig/corp-key")
    );
    assert_eq!(
        transfer.keys[0].algorithm,
        hickory_proto::rr::rdata::tsig::TsigAlgorithm::HmacSha512
    );
    assert_eq!(transfer.allow.len(), 2);
    assert_eq!(
        transfer.allow[0]
            .key
            .as_ref()
            .map(|k| k.to_ascii())
            .as_deref(),
        Some("corp-key.")
    );
    assert_eq!(transfer.allow[1].from.to_string(), "2001:db8::53/128");
    assert_eq!(transfer.notify[0].address.to_string(), "198.18.0.53:5353");
    assert_eq!(transfer.history, 16);

    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let pod = ds.spec.expect("spec").template.spec.expect("pod");
    let container = &pod.containers[0];
    let args = container.args.clone().expect("args");
    let tsig_mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/etc/hostport-dns-tsig")
        .expect("the TSIG keys are mounted");
    let tsig_volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == tsig_mount.name)
        .expect("a TSIG volume");
    assert_eq!(
        tsig_volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("corp-tsig")
    );
    let identity = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "HOSTPORT_DNS_IDENTITY")
        .expect("the identity is passed");
    assert_eq!(identity.value.as_deref(), Some("cp-a"));
    let cli = Cli::try_parse_from(std::iter::once("hostport-dns".to_owned()).chain(args))
        .expect("the agent accepts the chart's arguments");
    let AgentCommand::Run(run) = cli.command else {
        panic!("the chart runs `hostport-dns run`")
    };
    assert_eq!(run.port, 5353);
    assert_eq!(run.interfaces, ["eth1", "eth2"]);
    assert_eq!(run.xdp_mode, XdpMode::Native);
    assert_eq!(
        run.pin_dir.as_deref(),
        Some("/sys/fs/bpf/hpd-custom".as_ref())
    );
    assert_eq!(run.api_server.as_deref(), Some("https://198.18.0.1:6443"));
    assert_eq!(run.metrics_listen.port(), 9999);
    assert_eq!(run.max_staleness, 60);
    assert_eq!(run.answer_on, ["198.18.0.10", "eth1"]);
    assert_eq!((run.tcp_max_connections, run.tcp_max_per_client), (64, 4));
    assert_eq!(run.kernel_names, 20000);
    assert!(run.nsid && run.chaos);
    assert_eq!(
        run.serials.as_deref(),
        Some("/var/lib/hostport-dns/serials.json".as_ref())
    );
    assert_eq!(
        run.config.as_deref(),
        Some("/etc/hostport-dns/config.yaml".as_ref())
    );
}

/// (API group, resource, verb, namespace or "*")
type Permission = (String, String, String, String);

/// The DaemonSet's service account, as (namespace, name): the identity the agent calls with.
fn agent_identity(docs: &[Value]) -> (String, String) {
    let daemonsets = of_kind(docs, "DaemonSet");
    assert_eq!(daemonsets.len(), 1, "one DaemonSet");
    let ds: DaemonSet = typed(daemonsets[0]);
    let namespace = ds.metadata.namespace.expect("the DaemonSet's namespace");
    let account = ds
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.service_account_name)
        .unwrap_or_else(|| "default".into());
    let accounts: Vec<ServiceAccount> = of_kind(docs, "ServiceAccount")
        .into_iter()
        .map(typed)
        .collect();
    assert!(
        accounts
            .iter()
            .any(|a| a.metadata.name.as_deref() == Some(&account)
                && a.metadata.namespace.as_deref() == Some(&namespace)),
        "the DaemonSet's service account {namespace}/{account} is in the manifests"
    );
    (namespace, account)
}

/// What the rules bound to the agent's service account allow: ClusterRoles through
/// ClusterRoleBindings everywhere, Roles and ClusterRoles through RoleBindings in the binding's
/// namespace. Rules bound to anyone else grant the agent nothing.
fn granted(docs: &[Value]) -> BTreeSet<Permission> {
    let (sa_namespace, sa_name) = agent_identity(docs);
    let binds_agent = |subjects: &Option<Vec<Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == sa_name
                && s.namespace.as_deref() == Some(&sa_namespace)
        })
    };
    let cluster_roles: Vec<ClusterRole> = of_kind(docs, "ClusterRole")
        .into_iter()
        .map(typed)
        .collect();
    let roles: Vec<Role> = of_kind(docs, "Role").into_iter().map(typed).collect();
    let cluster_role = |name: &str| {
        cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("a binding names ClusterRole {name}, which is not there"))
            .rules
            .clone()
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    let mut add = |rules: &[PolicyRule], namespace: &str| {
        for rule in rules {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        out.insert((
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                            namespace.to_owned(),
                        ));
                    }
                }
            }
        }
    };
    for doc in of_kind(docs, "ClusterRoleBinding") {
        let binding: ClusterRoleBinding = typed(doc);
        if binds_agent(&binding.subjects) {
            assert_eq!(binding.role_ref.kind, "ClusterRole");
            add(&cluster_role(&binding.role_ref.name), "*");
        }
    }
    for doc in of_kind(docs, "RoleBinding") {
        let binding: RoleBinding = typed(doc);
        if !binds_agent(&binding.subjects) {
            continue;
        }
        let namespace = binding.metadata.namespace.clone().expect("a namespace");
        let rules = match binding.role_ref.kind.as_str() {
            "ClusterRole" => cluster_role(&binding.role_ref.name),
            "Role" => roles
                .iter()
                .find(|r| {
                    r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str())
                        && r.metadata.namespace.as_deref() == Some(namespace.as_str())
                })
                .unwrap_or_else(|| {
                    panic!(
                        "RoleBinding {namespace}/{:?} names a missing Role",
                        binding.metadata.name
                    )
                })
                .rules
                .clone()
                .unwrap_or_default(),
            other => panic!("a RoleBinding to a {other}"),
        };
        add(&rules, &namespace);
    }
    out
}

/// What the agent asked the (fake) API server for, as permissions.
fn used(api: &FakeApi) -> BTreeSet<Permission> {
    api.requests()
        .iter()
        .filter_map(|r| {
            let mut words = r.split_whitespace();
            let (method, kind, rest) = (words.next()?, words.next()?, words.next()?);
            // The group each is served under (the fake serves them at the real paths).
            let (group, resource) = match kind {
                "Pod" => ("", "pods"),
                "Node" => ("", "nodes"),
                "EndpointSlice" => ("discovery.k8s.io", "endpointslices"),
                "Service" => ("", "services"),
                "Lease" => ("coordination.k8s.io", "leases"),
                "DNSEndpoint" => ("externaldns.k8s.io", "dnsendpoints"),
                _ => return None, // GET /version: allowed to every authenticated client by default
            };
            let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
            // "<namespace>/<name>" for one object, "<namespace>" (or "*") for a collection.
            let (namespace, one) = match target.split_once('/') {
                Some((namespace, _)) => (namespace, true),
                None => (target, false),
            };
            let verb = match method {
                "POST" => "create",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ if one => "get",
                _ if query.contains("watch=true") => "watch",
                _ => "list",
            };
            Some((
                group.to_owned(),
                resource.to_owned(),
                verb.to_owned(),
                namespace.to_owned(),
            ))
        })
        .collect()
}

fn assert_rbac_is_exact(tag: &str, values: &str) {
    assert_rbac_is_exact_with(tag, values, |_| {}, |_| true);
}

/// [`assert_rbac_is_exact`] with objects `prepare` adds before the agent starts, and `settled`
/// saying when the agent has made every call it makes (`api` is the fake API server).
fn assert_rbac_is_exact_with(
    tag: &str,
    values: &str,
    prepare: impl FnOnce(&FakeApi),
    settled: impl Fn(&FakeApi) -> bool,
) {
    require_root();
    let docs = render(values);
    let secret_dir = TempDir::new(&format!("{tag}-secret"));
    let config = config_with_mounted_secret(&docs, &secret_dir);
    let ns = NetNs::new(tag);
    let api = FakeApi::start(Some(&ns));
    api.apply(
        Kind::Pod,
        PodSpec::ingress("p", "ingress", "x", "cp-0", "198.18.0.11").to_json(),
    );
    api.apply(
        Kind::EndpointSlice,
        endpoint_slice(
            "default",
            "k",
            "kubernetes",
            &[("198.18.0.11", None, "cp-0")],
        ),
    );
    api.apply(Kind::Node, node("cp-0", "198.18.0.11", "198.18.1.11"));
    prepare(&api);
    let dir = TempDir::new(tag);
    // The pod's service account files, as the kubelet would mount them (the fake API server
    // speaks plain HTTP, so there is no CA to trust).
    let token = dir.write("token", "test-token");
    let config = config
        .replace(
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            token.to_str().expect("UTF-8"),
        )
        .lines()
        .filter(|l| !l.contains("caFile"))
        .collect::<Vec<_>>()
        .join("\n");
    let file = dir.write("config.yaml", &config);
    let agent = Agent::start(
        &ns,
        &[
            "--config",
            file.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--api-server",
            &api.url(),
        ],
    );
    eventually("the agent to list everything", 10, || {
        agent.http_get("/readyz").0 == 200
    });
    // The record sources watch what they list; the external-dns writer only lists its objects.
    let written = |resource: &str| matches!(resource, "services" | "dnsendpoints");
    let lists = used(&api)
        .iter()
        .filter(|(_, resource, verb, _)| verb == "list" && !written(resource))
        .count();
    eventually("a watch for every list", 10, || {
        used(&api)
            .iter()
            .filter(|(_, _, verb, _)| verb == "watch")
            .count()
            == lists
    });
    eventually("every call the agent makes", 30, || settled(&api));
    let granted = granted(&docs);
    let used = used(&api);
    let allowed = |(group, resource, verb, namespace): &Permission| {
        let with = |ns: &str| (group.clone(), resource.clone(), verb.clone(), ns.to_owned());
        granted.contains(&with("*")) || (namespace != "*" && granted.contains(&with(namespace)))
    };
    let denied: Vec<_> = used.iter().filter(|p| !allowed(p)).collect();
    assert!(
        denied.is_empty(),
        "calls the RBAC rules do not allow: {denied:?} (granted {granted:?})"
    );
    let unused: Vec<_> = granted
        .iter()
        .filter(|g| {
            !used
                .iter()
                .any(|u| u.0 == g.0 && u.1 == g.1 && u.2 == g.2 && (g.3 == "*" || g.3 == u.3))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "permissions the agent never uses: {unused:?} (used {used:?})"
    );
    drop(agent);
}

#[test]
fn rbac_covers_exactly_what_the_agent_calls_with_the_defaults() {
    assert_rbac_is_exact("rbacdef", "");
}

#[test]
fn rbac_covers_exactly_what_the_agent_calls_with_namespaced_pods_and_node_addresses() {
    assert_rbac_is_exact(
        "rbacns",
        "pods:\n  - zone: ingress.example.com\n    namespaces: [ingress]\nendpointSlices:\n  - zone: ingress.example.com\n    hostnames: [api]\n    addressSource: node-internal\n",
    );
}

/// Without node rules, node address sources or topology keys the agent never asks for
/// Nodes, and the chart does not grant them; a topology key alone brings both back.
#[test]
fn rbac_covers_exactly_what_the_agent_calls_without_node_rules_and_with_a_topology_key() {
    assert_rbac_is_exact("rbacnonodes", "nodes:\n  excludeTaints: []\n");
    assert_rbac_is_exact(
        "rbactopo",
        "nodes:\n  excludeTaints: []\npods:\n  - zone: ingress.example.com\n    topologyKey: topology.kubernetes.io/zone\n",
    );
}

/// External-dns outputs of both kinds: the Role in the release namespace grants exactly the
/// writes they make (create, update, delete; list to find them) and the Lease's get, create and
/// update.
#[test]
fn rbac_covers_exactly_what_the_agent_calls_with_external_dns_outputs() {
    let values = "externalDns:\n  enabled: true\n  outputs:\n    - endpointSlices: api.ingress.example.com/IPv4\n      name: api-servers\n    - endpointSlices: api.ingress.example.com/IPv4\n      kind: DNSEndpoint\n      name: api-servers\n";
    let ours = serde_json::json!({"app.kubernetes.io/managed-by": "hostport-dns", "hostport-dns/lease": "hostport-dns-leader"});
    let moved = std::cell::Cell::new(false);
    assert_rbac_is_exact_with(
        "rbaced",
        values,
        |api| {
            // Left by an output no longer configured: deleted.
            api.apply(
                Kind::Service,
                serde_json::json!({"metadata": {"name": "stale", "namespace": "kube-system", "labels": ours},
                                   "spec": {"clusterIP": "None"}}),
            );
            api.apply(
                Kind::DnsEndpoint,
                serde_json::json!({"metadata": {"name": "stale", "namespace": "kube-system", "labels": ours},
                                   "spec": {"endpoints": []}}),
            );
        },
        |api| {
            let writes = api.writes();
            let wrote = |w: &str| writes.iter().any(|x| x.starts_with(w));
            let created =
                wrote("POST Service kube-system") && wrote("POST DNSEndpoint kube-system");
            if created && !moved.replace(true) {
                // Moved endpoints: both objects are updated.
                api.apply(
                    Kind::EndpointSlice,
                    endpoint_slice(
                        "default",
                        "k",
                        "kubernetes",
                        &[("198.18.0.12", None, "cp-0")],
                    ),
                );
            }
            created
                && wrote("PUT Service kube-system/api-servers")
                && wrote("PUT DNSEndpoint kube-system/api-servers")
                && wrote("DELETE Service kube-system/stale")
                && wrote("DELETE DNSEndpoint kube-system/stale")
                && wrote("POST Lease kube-system")
                && wrote("PUT Lease kube-system/hostport-dns-leader")
        },
    );
}

/// RFC 2136 updates alone: the election's Role grants exactly the Lease's get, create and
/// update (the primary is not reachable here; the agent elects itself all the same).
#[test]
fn rbac_covers_exactly_what_the_agent_calls_with_rfc2136_updates() {
    let values = "update:\n  enabled: true\n  targets:\n    - server: 127.0.0.1:5399\n      zone: corp.example\n      source: ingress.example.com\n      names: [api]\n      key: transfer-key\n";
    assert_rbac_is_exact_with(
        "rbacupd",
        values,
        |_| {},
        |api| {
            let writes = api.writes();
            let wrote = |w: &str| writes.iter().any(|x| x.starts_with(w));
            wrote("POST Lease kube-system") && wrote("PUT Lease kube-system/hostport-dns-leader")
        },
    );
}

#[test]
fn the_external_dns_role_and_the_pod_fields_are_rendered_only_when_enabled() {
    let off = render("");
    assert!(
        !off.iter().any(|d| d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-external-dns"))),
        "no external-dns Role without externalDns.enabled"
    );
    let config = |docs: &[Value]| -> String {
        let cm: ConfigMap = typed(of_kind(docs, "ConfigMap")[0]);
        cm.data
            .and_then(|d| d.get("config.yaml").cloned())
            .expect("config.yaml")
    };
    assert!(!config(&off).contains("externalDns"));
    let on = render(
        "externalDns:\n  enabled: true\n  namespace: dns-writers\n  outputs:\n    - endpointSlices: api.ingress.example.com/IPv4\n",
    );
    let rules =
        role_rules(&on, "hostport-dns-external-dns", "dns-writers").expect("the external-dns Role");
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        [(
            strings(&["services"]),
            strings(&["list", "create", "update", "delete"]),
            vec![]
        )],
        "a Service output: Services, nothing else"
    );
    assert_eq!(
        leader_rules(&on),
        Some(lease_rules("hostport-dns-leader")),
        "the Lease, in the release namespace"
    );
    let text = config(&on);
    let parsed = hostport_dns::agent_config::parse(&text, std::path::Path::new("config.yaml"))
        .expect("the agent reads the chart's configuration");
    let external = parsed.outputs.external_dns.expect("externalDns");
    assert_eq!(external.namespace.as_deref(), Some("dns-writers"));
    let ds: DaemonSet = typed(of_kind(&on, "DaemonSet")[0]);
    assert_names_its_pod(&ds.spec.and_then(|s| s.template.spec).expect("a pod spec"));
}

/// The agent's container gets its pod's name and namespace (the Lease holder's name, the
/// default namespace of what it writes).
fn assert_names_its_pod(pod: &k8s_openapi::api::core::v1::PodSpec) {
    let env: Vec<String> = pod.containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        env.contains(&"POD_NAME".to_owned()) && env.contains(&"POD_NAMESPACE".to_owned()),
        "{env:?}"
    );
}

/// A Role rule as (resources, verbs, resource names).
type Rule = (Vec<String>, Vec<String>, Vec<String>);

/// The rules of the election's Role, if rendered (it must be in the release namespace).
fn leader_rules(docs: &[Value]) -> Option<Vec<Rule>> {
    role_rules(docs, "hostport-dns-leader", "kube-system")
}

/// The rules of the Role `name`, if rendered (it must be in `namespace`).
fn role_rules(docs: &[Value], name: &str, namespace: &str) -> Option<Vec<Rule>> {
    let roles: Vec<Role> = of_kind(docs, "Role").into_iter().map(typed).collect();
    let role = roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))?;
    assert_eq!(role.metadata.namespace.as_deref(), Some(namespace));
    Some(
        role.rules
            .iter()
            .flatten()
            .map(|r| {
                (
                    r.resources.clone().unwrap_or_default(),
                    r.verbs.clone(),
                    r.resource_names.clone().unwrap_or_default(),
                )
            })
            .collect(),
    )
}

/// Get and update on the Lease `name`, create on any (create cannot name its object).
fn lease_rules(name: &str) -> Vec<Rule> {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (
            strings(&["leases"]),
            strings(&["get", "update"]),
            strings(&[name]),
        ),
        (strings(&["leases"]), strings(&["create"]), vec![]),
    ]
}

/// `update.enabled`: the targets reach the agent's configuration with the TSIG keys mounted
/// (even with zone transfers off: then nobody may transfer), the election's Role and the pod
/// fields are rendered, and the Lease is the one named; without it, none of that.
#[test]
fn rfc2136_updates_render_their_targets_keys_and_lease_only_when_enabled() {
    let off = render("");
    assert_eq!(leader_rules(&off), None, "no Lease Role without a writer");
    let on = render(
        "update:\n  enabled: true\n  targets:\n    - server: 198.18.0.53\n      zone: corp.example\n      source: ingress.example.com\n      names: [api]\n      key: transfer-key\nleaderElection:\n  leaseName: dns-writer\n",
    );
    assert_eq!(leader_rules(&on), Some(lease_rules("dns-writer")));
    let dir = TempDir::new("updrender");
    let text = config_with_mounted_secret(&on, &dir);
    let parsed = hostport_dns::agent_config::parse(&text, std::path::Path::new("config.yaml"))
        .expect("the agent reads the chart's configuration");
    assert_eq!(parsed.update.len(), 1);
    assert_eq!(parsed.update[0].label(), "corp.example.@198.18.0.53:53");
    assert_eq!(
        parsed.update[0].key.as_ref().map(|k| k.to_string()),
        Some("transfer-key.".to_owned())
    );
    assert_eq!(parsed.outputs.leader_election.lease_name, "dns-writer");
    assert_eq!(
        parsed.outputs.leader_election.namespace.as_deref(),
        Some("kube-system")
    );
    let transfer = parsed.transfer.expect("the keys");
    assert!(
        transfer.allow.is_empty(),
        "updates alone allow no transfers"
    );
    let ds: DaemonSet = typed(of_kind(&on, "DaemonSet")[0]);
    let pod = ds.spec.and_then(|s| s.template.spec).expect("a pod spec");
    assert_names_its_pod(&pod);
    let secret = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "tsig")
        .and_then(|v| v.secret)
        .and_then(|s| s.secret_name);
    assert_eq!(secret.as_deref(), Some("hostport-dns-tsig"));
}

/// The chart's container command line as the kubelet runs it: `$(VAR)` references expanded from
/// the container's environment (`env`: the values the kubelet would set).
fn kubelet_expanded(args: &[String], env: &[(&str, &str)]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            env.iter().fold(arg.clone(), |arg, (name, value)| {
                arg.replace(&format!("$({name})"), value)
            })
        })
        .collect()
}

#[test]
fn the_charts_api_server_url_with_host_ip_set_reaches_the_api_server() {
    chart_api_server_url_reaches_the_api_server("198.18.0.1", "chartapi");
}

/// On an IPv6 node `https://$(HOST_IP):6443` expands to a URL without brackets; the agent
/// brackets it.
#[test]
fn the_charts_api_server_url_works_on_an_ipv6_node() {
    chart_api_server_url_reaches_the_api_server("fd00:198:18::1", "chartapi6");
}

/// The chart's API server URL with HOST_IP expanded as the kubelet does, against an API server
/// whose certificate names `kubernetes.default.svc` and not the node address: the chart's
/// `tlsServerName` is what makes the handshake pass.
fn chart_api_server_url_reaches_the_api_server(host_ip: &str, tag: &str) {
    require_root();
    const TOKEN: &str = "chart-token";
    let docs = render("");
    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let container = ds
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].clone())
        .expect("a container");
    // HOST_IP is the node's address, from the downward API.
    let host_ip_env = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "HOST_IP")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(host_ip_env.as_deref(), Some("status.hostIP"));
    let args = kubelet_expanded(
        container.args.as_deref().expect("args"),
        &[("HOST_IP", host_ip)],
    );
    assert!(
        args.contains(&format!("--api-server=https://{host_ip}:6443")),
        "{args:?}"
    );

    let ns = NetNs::new(tag);
    let address = if host_ip.contains(':') {
        format!("{host_ip}/128")
    } else {
        format!("{host_ip}/32")
    };
    // No duplicate address detection: a tentative IPv6 address cannot be bound yet.
    let mut add = vec!["addr", "add", &address, "dev", "lo"];
    if host_ip.contains(':') {
        add.push("nodad");
    }
    ns.ip(&add);
    let dir = TempDir::new(tag);
    let credentials = ApiCredentials::generate_for(&dir, &["kubernetes.default.svc"]);
    let ip: std::net::IpAddr = host_ip.parse().expect("an address");
    let api = FakeApi::start_with(
        Some(&ns),
        Access {
            tls: Some(credentials.server_config(false)),
            bearer_token: Some(TOKEN.into()),
            bind: Some(std::net::SocketAddr::new(ip, 6443)),
        },
    );
    api.apply(
        Kind::Pod,
        PodSpec::ingress("p", "ingress", "default-nginx", "cp-0", "198.18.0.11").to_json(),
    );
    // The service-account mount the chart's configuration reads.
    let service_account = dir.path.join("serviceaccount");
    std::fs::create_dir_all(&service_account).expect("the service-account folder");
    std::fs::write(service_account.join("token"), TOKEN).expect("the token");
    std::fs::copy(&credentials.ca_file, service_account.join("ca.crt")).expect("the CA");
    std::fs::write(service_account.join("namespace"), "kube-system").expect("the namespace");
    let config = dir.write("config.yaml", &config_with_mounted_secret(&docs, &dir));
    // The chart's arguments, but for the node's paths: its configuration mount, XDP on this
    // namespace's lo, no pins in the host's bpffs, the saved records in the test's folder.
    let args: Vec<String> = args
        .into_iter()
        .filter_map(|arg| match arg.split_once('=').map(|(flag, _)| flag) {
            Some("--config") => Some(format!("--config={}", config.display())),
            Some("--interface") => Some("--interface=lo".into()),
            Some("--xdp-mode") => Some("--xdp-mode=generic".into()),
            Some("--pin-dir") => None,
            Some("--saved-records") => Some(format!(
                "--saved-records={}",
                dir.path.join("kubernetes-records.json").display()
            )),
            _ => Some(arg),
        })
        .collect();
    // The in-cluster Service address leads nowhere: only --api-server can reach the API.
    let service: std::net::SocketAddr = "198.18.0.254:443".parse().expect("an address");
    let agent = Agent::start_in_pod(&ns, &service_account, service, &args);
    eventually(
        "the pod's record through the chart's API server URL",
        15,
        || {
            hostport_dns_tests::clients::dig(
                &ns,
                "127.0.0.1",
                1053,
                &["default-nginx.ingress.ingress.example.com", "A"],
            )
            .answer_data()
                == ["198.18.0.11"]
        },
    );
    assert_eq!(api.unauthorized_requests(), 0, "{}", agent.logs());
    assert_eq!(api.refused_handshakes(), 0, "{}", agent.logs());
}

#[test]
fn the_chart_installs_the_alert_rules_and_the_service_monitor_when_asked() {
    let docs = render(
        "metrics:\n  serviceMonitor: { enabled: true, labels: { release: kube-prometheus } }\n  prometheusRule: { enabled: true }\n",
    );
    let rule = of_kind(&docs, "PrometheusRule");
    assert_eq!(rule.len(), 1);
    let file: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart().join("rules/hostport-dns.rules.yaml")).expect("rules"),
    )
    .expect("YAML");
    assert_eq!(
        rule[0]["spec"]["groups"], file["groups"],
        "the rule file, as promtool checks it"
    );
    let monitor = of_kind(&docs, "ServiceMonitor");
    assert_eq!(monitor.len(), 1);
    assert_eq!(
        monitor[0]["metadata"]["labels"]["release"],
        "kube-prometheus"
    );
    assert_eq!(monitor[0]["spec"]["endpoints"][0]["port"], "metrics");
    // The job the alert rules select (`up{job=~".*hostport-dns.*"}`) whatever the release's
    // name, and the node's name as the instance (not nodeIP:port) and as `node`.
    assert_eq!(monitor[0]["spec"]["jobLabel"], "app.kubernetes.io/name");
    let service: Service = typed(of_kind(&docs, "Service")[0]);
    assert_eq!(
        service.metadata.labels.expect("labels")["app.kubernetes.io/name"],
        "hostport-dns"
    );
    let relabelings = monitor[0]["spec"]["endpoints"][0]["relabelings"]
        .as_sequence()
        .expect("relabelings");
    for target in ["instance", "node"] {
        assert!(
            relabelings.iter().any(|r| r["targetLabel"] == target
                && r["sourceLabels"][0] == "__meta_kubernetes_pod_node_name"),
            "{target} from the node's name: {relabelings:?}"
        );
    }
    // Off by default: clusters without the Prometheus Operator lack these kinds.
    let defaults = render("");
    assert!(of_kind(&defaults, "PrometheusRule").is_empty());
    assert!(of_kind(&defaults, "ServiceMonitor").is_empty());
}

/// The DaemonSet's container of a rendered chart.
fn container(docs: &[Value]) -> k8s_openapi::api::core::v1::Container {
    let ds: DaemonSet = typed(of_kind(docs, "DaemonSet")[0]);
    ds.spec
        .expect("spec")
        .template
        .spec
        .expect("pod")
        .containers[0]
        .clone()
}

/// Bytes of a memory quantity as the chart writes them ("482Mi", "1Gi").
fn quantity_bytes(quantity: &Quantity) -> u64 {
    let text = quantity.0.as_str();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("a quantity: {text}"));
    let scale = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => panic!("a unit the test knows: {text}"),
    };
    number * scale
}

/// The container's memory request and limit, in bytes.
fn memory(container: &k8s_openapi::api::core::v1::Container) -> (u64, u64) {
    let resources = container.resources.as_ref().expect("resources");
    let of = |map: &Option<std::collections::BTreeMap<String, Quantity>>| {
        quantity_bytes(map.as_ref().and_then(|m| m.get("memory")).expect("memory"))
    };
    (of(&resources.requests), of(&resources.limits))
}

/// The agent's arguments in a rendered chart, parsed as the agent parses them.
fn run_args(container: &k8s_openapi::api::core::v1::Container) -> hostport_dns::config::RunArgs {
    let args = container.args.clone().expect("args");
    let cli = Cli::try_parse_from(std::iter::once("hostport-dns".to_owned()).chain(args))
        .expect("the agent accepts the chart's arguments");
    let AgentCommand::Run(run) = cli.command else {
        panic!("the chart runs `hostport-dns run`")
    };
    *run
}

#[test]
fn the_charts_memory_follows_the_names_expected() {
    // The kernel table's limit is passed on, and sets no memory: the maps follow the names.
    for names in [64u32, 131_072, 4_194_304] {
        let docs = render(&format!("dns: {{ kernelNames: {names} }}\n"));
        let container = container(&docs);
        assert_eq!(run_args(&container).kernel_names, names);
        assert_eq!(memory(&container), memory(&container_of_defaults()));
    }
    let mut previous = (0, 0);
    for names in [100u64, 1_000, 10_000, 100_000, 1_000_000] {
        let docs = render(&format!("dns: {{ expectedNames: {names} }}\n"));
        let (request, limit) = memory(&container(&docs));
        // Room for the maps of the size class the names grow the table to, at the least.
        // The host set at its largest (a node with IPVS's thousands of Service addresses).
        let class = Capacity::class_for([names as u32, 0, 0], 0, 1 << 22)
            .with_host(hostport_dns_common::limits::HOST_SLOTS);
        assert!(
            request >= class.map_bytes(),
            "{names} names: a request of {request} bytes is less than the maps' {}",
            class.map_bytes()
        );
        assert!(
            limit >= request,
            "{names} names: the limit {limit} is below the request {request}"
        );
        assert!(
            request >= previous.0 && limit > previous.1,
            "more names, more memory"
        );
        previous = (request, limit);
    }
    // The limit leaves room for the names to grow well past those expected.
    assert!(previous.1 > 3 * previous.0, "{previous:?}");
    // The default: a request within 48 MiB.
    let (request, _) = memory(&container_of_defaults());
    assert!(request <= 48 << 20, "{} MiB", request >> 20);
    // Given values win.
    let docs = render("resources: { requests: { memory: 100Mi }, limits: { memory: 1Gi } }\n");
    assert_eq!(memory(&container(&docs)), (100 << 20, 1 << 30));
}

fn container_of_defaults() -> k8s_openapi::api::core::v1::Container {
    container(&render(""))
}

/// The chart's memory limit for 100,000 expected names holds the agent serving them (a record
/// file, three A records each), XDP answering: the agent is not OOM-killed while it loads,
/// compiles and writes them and grows its kernel table to them, and every sampled name is
/// answered from XDP.
#[test]
fn the_charts_memory_limit_holds_the_100k_names_expected_served_from_xdp() {
    require_root();
    const NAMES: usize = 100_000;
    let container = container(&render(&format!("dns: {{ expectedNames: {NAMES} }}\n")));
    let (_, limit) = memory(&container);
    let kernel_names = run_args(&container).kernel_names.to_string();
    let ns = NetNs::new("memlimit");
    let dir = TempDir::new("memlimit");
    let (records, list) = hostport_dns_tests::bench::zone(NAMES);
    let file = dir.write("records.yaml", &records);
    let cgroup = Cgroup::new("memlimit", Some(limit));
    let agent = Agent::start_in_cgroup(
        &ns,
        &cgroup,
        &[records_on_lo(&file), vec!["--kernel-names", &kernel_names]].concat(),
    );
    let last = list.last().expect("names").clone();
    eventually("the last name is answered", 180, || {
        dig(&ns, "127.0.0.1", 1053, &[&last]).answer.len() == 3
    });
    let sample: Vec<String> = list.iter().step_by(97).cloned().collect();
    let server = "127.0.0.1:1053".parse().expect("an address");
    let unanswered: Vec<String> = sample
        .iter()
        .filter(|name| {
            let query = QueryBuilder::new(name, TYPE_A).bytes();
            let answer = udp_exchange(&ns, server, query);
            answer.is_none_or(|a| answer_count(&a) != 3)
        })
        .cloned()
        .collect();
    assert!(
        unanswered.is_empty(),
        "not answered with 3 records: {unanswered:?}"
    );
    let from_xdp = agent.metric(
        "hostport_dns_responses",
        &[("path", "xdp"), ("type", "A"), ("rcode", "NOERROR")],
    );
    assert!(
        from_xdp >= sample.len() as f64,
        "{from_xdp} answers from XDP for {} queries",
        sample.len()
    );
    assert_eq!(cgroup.oom_kills(), 0, "the agent was OOM-killed");
    println!(
        "limit {} MiB; the cgroup holds {} MiB, of which kernel {} MiB",
        limit >> 20,
        cgroup.usage() >> 20,
        cgroup.kernel() >> 20
    );
    assert!(agent.stop().is_some(), "the agent ran until stopped");
}

const TYPE_A: u16 = 1;

/// ANCOUNT of a DNS message.
fn answer_count(message: &[u8]) -> u16 {
    message
        .get(6..8)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// A node as the scheduler sees it when it places a DaemonSet's pod: its labels and taints
/// (key, value, effect).
struct ClusterNode {
    what: &'static str,
    labels: &'static [(&'static str, &'static str)],
    taints: &'static [(&'static str, &'static str, &'static str)],
}

/// The nodes of the distributions operators run, as each labels and taints them; `true`: an
/// API server runs there, so the agent must.
const CLUSTER_NODES: &[(ClusterNode, bool)] = &[
    (
        ClusterNode {
            what: "kubeadm control plane (1.24+)",
            labels: &[
                ("node-role.kubernetes.io/control-plane", ""),
                (
                    "node.kubernetes.io/exclude-from-external-load-balancers",
                    "",
                ),
            ],
            taints: &[("node-role.kubernetes.io/control-plane", "", "NoSchedule")],
        },
        true,
    ),
    (
        ClusterNode {
            what: "kubeadm control plane (1.20 to 1.23, both labels)",
            labels: &[
                ("node-role.kubernetes.io/control-plane", ""),
                ("node-role.kubernetes.io/master", ""),
            ],
            taints: &[("node-role.kubernetes.io/master", "", "NoSchedule")],
        },
        true,
    ),
    (
        ClusterNode {
            what: "old kubeadm master",
            labels: &[("node-role.kubernetes.io/master", "")],
            taints: &[("node-role.kubernetes.io/master", "", "NoSchedule")],
        },
        true,
    ),
    (
        ClusterNode {
            what: "k3s server",
            labels: &[
                ("node-role.kubernetes.io/control-plane", "true"),
                ("node-role.kubernetes.io/master", "true"),
                ("node-role.kubernetes.io/etcd", "true"),
            ],
            taints: &[],
        },
        true,
    ),
    (
        ClusterNode {
            what: "k3s server tainted CriticalAddonsOnly",
            labels: &[
                ("node-role.kubernetes.io/control-plane", "true"),
                ("node-role.kubernetes.io/master", "true"),
            ],
            taints: &[("CriticalAddonsOnly", "true", "NoExecute")],
        },
        true,
    ),
    (
        ClusterNode {
            what: "RKE2 server",
            labels: &[
                ("node-role.kubernetes.io/control-plane", "true"),
                ("node-role.kubernetes.io/etcd", "true"),
                ("node-role.kubernetes.io/master", "true"),
            ],
            taints: &[
                (
                    "node-role.kubernetes.io/control-plane",
                    "true",
                    "NoSchedule",
                ),
                ("node-role.kubernetes.io/etcd", "true", "NoExecute"),
            ],
        },
        true,
    ),
    (
        ClusterNode {
            what: "RKE2 etcd-only server (no API server)",
            labels: &[("node-role.kubernetes.io/etcd", "true")],
            taints: &[("node-role.kubernetes.io/etcd", "true", "NoExecute")],
        },
        false,
    ),
    (
        ClusterNode {
            what: "worker without a role label",
            labels: &[("kubernetes.io/os", "linux")],
            taints: &[],
        },
        false,
    ),
    (
        ClusterNode {
            what: "worker with a worker role label",
            labels: &[("node-role.kubernetes.io/worker", "true")],
            taints: &[],
        },
        false,
    ),
];

type Labels = std::collections::BTreeMap<String, String>;

/// A node selector requirement against a node's labels, as the scheduler evaluates it.
fn requirement_matches(
    requirement: &k8s_openapi::api::core::v1::NodeSelectorRequirement,
    labels: &Labels,
) -> bool {
    let value = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let bound: i64 = match values {
                [bound] => bound.parse().expect("an integer bound"),
                _ => panic!("{} takes one value", requirement.operator),
            };
            value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| {
                match requirement.operator.as_str() {
                    "Gt" => v > bound,
                    _ => v < bound,
                }
            })
        }
        other => panic!("not a node selector operator: {other}"),
    }
}

/// A node selector term: its expressions ANDed; an empty term matches no node.
fn term_matches(term: &k8s_openapi::api::core::v1::NodeSelectorTerm, labels: &Labels) -> bool {
    assert!(
        term.match_fields.as_deref().unwrap_or_default().is_empty(),
        "matchFields name nodes one by one: not for a chart"
    );
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    !expressions.is_empty() && expressions.iter().all(|r| requirement_matches(r, labels))
}

/// Whether a toleration tolerates a taint (key, value, effect).
fn tolerates(
    toleration: &k8s_openapi::api::core::v1::Toleration,
    taint: (&str, &str, &str),
) -> bool {
    let (key, value, effect) = taint;
    if toleration
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != effect)
    {
        return false;
    }
    let exists = toleration.operator.as_deref() == Some("Exists");
    match toleration.key.as_deref().unwrap_or_default() {
        "" => exists,
        k if k != key => false,
        _ => exists || toleration.value.as_deref().unwrap_or_default() == value,
    }
}

/// Whether the DaemonSet's pod lands on `node`: its nodeSelector, its required node affinity
/// (terms ORed), and every NoSchedule and NoExecute taint tolerated. Why not, when it does not.
fn schedules(pod: &k8s_openapi::api::core::v1::PodSpec, node: &ClusterNode) -> Result<(), String> {
    let labels: Labels = node
        .labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for (key, value) in pod.node_selector.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Err(format!("nodeSelector {key}={value:?}"));
        }
    }
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required
        && !required
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, &labels))
    {
        return Err("the node affinity".into());
    }
    for taint in node.taints {
        let blocks = matches!(taint.2, "NoSchedule" | "NoExecute");
        if blocks
            && !pod
                .tolerations
                .iter()
                .flatten()
                .any(|t| tolerates(t, *taint))
        {
            return Err(format!("the taint {}={}:{}", taint.0, taint.1, taint.2));
        }
    }
    Ok(())
}

fn pod_spec(docs: &[Value]) -> k8s_openapi::api::core::v1::PodSpec {
    let ds: DaemonSet = typed(of_kind(docs, "DaemonSet")[0]);
    ds.spec.expect("spec").template.spec.expect("pod")
}

/// The chart's scheduling, evaluated as the scheduler would: the agent runs on every node an
/// API server runs on, whichever distribution labelled it, and on no other.
#[test]
fn the_chart_schedules_on_control_planes_of_kubeadm_k3s_and_rke2_and_nowhere_else() {
    for (source, docs) in [("chart", render("")), ("manifests", manifests())] {
        let pod = pod_spec(&docs);
        let wrong: Vec<String> = CLUSTER_NODES
            .iter()
            .filter_map(|(node, expected)| match (schedules(&pod, node), expected) {
                (Ok(()), true) | (Err(_), false) => None,
                (Ok(()), false) => Some(format!(
                    "{}: scheduled, but no API server runs there",
                    node.what
                )),
                (Err(why), true) => Some(format!("{}: not scheduled ({why})", node.what)),
            })
            .collect();
        assert!(wrong.is_empty(), "{source}:\n{}", wrong.join("\n"));
    }
    // A given affinity replaces the control-plane one; nodeSelector adds to it.
    let pod = pod_spec(&render(
        "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      \
         nodeSelectorTerms:\n        - matchExpressions:\n            - { key: node-role.kubernetes.io/worker, operator: In, values: [\"true\"] }\n\
         nodeSelector: { kubernetes.io/os: linux }\n",
    ));
    let worker = |labels| ClusterNode {
        what: "worker",
        labels,
        taints: &[],
    };
    assert!(
        schedules(
            &pod,
            &worker(&[
                ("node-role.kubernetes.io/worker", "true"),
                ("kubernetes.io/os", "linux")
            ])
        )
        .is_ok()
    );
    assert!(schedules(&pod, &worker(&[("node-role.kubernetes.io/worker", "true")])).is_err());
    assert!(
        schedules(
            &pod,
            &worker(&[
                ("node-role.kubernetes.io/control-plane", ""),
                ("kubernetes.io/os", "linux")
            ])
        )
        .is_err()
    );
}

/// The host ports of the components that run on control-plane nodes, from docs/src/install.md's
/// table (the list operators read is the one checked).
fn documented_host_ports() -> BTreeSet<u16> {
    let readme =
        std::fs::read_to_string(workspace_root().join("docs/src/install.md")).expect("README");
    let section = readme
        .split_once("\n### Host ports on control-plane nodes\n")
        .expect("a host ports section")
        .1;
    let section = section.split("\n#").next().expect("the section");
    let ports: BTreeSet<u16> = section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .filter_map(|l| l.split('|').nth(2))
        .flat_map(|cell| {
            cell.split(|c: char| !c.is_ascii_digit())
                .filter(|w| !w.is_empty())
                .map(|w| w.parse::<u16>().expect("a port"))
                .collect::<Vec<_>>()
        })
        .collect();
    // NodeLocal DNSCache's metrics port, the collision that made the list.
    assert!(ports.contains(&9253), "the table parses: {ports:?}");
    ports
}

#[test]
fn the_charts_ports_collide_with_no_common_control_plane_component() {
    let taken = documented_host_ports();
    let container = container(&render(""));
    // The ports the agent listens on (the pod declares none by default: see the surge test).
    let args = run_args(&container);
    assert_eq!(args.metrics_listen.port(), 9354);
    for (name, port) in [("dns", args.port), ("metrics", args.metrics_listen.port())] {
        assert!(
            !taken.contains(&port),
            "{name} port {port} is taken by a component of the README's list"
        );
    }
}

/// `metrics.bindAddress`: every address by default, the node's address with `node` (HOST_IP,
/// expanded by the kubelet), any other address as given (an IPv6 one in brackets).
#[test]
fn the_metrics_bind_address_reaches_the_agent() {
    let listen = |values: &str, host_ip: &str| {
        let container = container(&render(values));
        let args = kubelet_expanded(
            container.args.as_deref().expect("args"),
            &[("HOST_IP", host_ip)],
        );
        let mut container = container;
        container.args = Some(args);
        run_args(&container).metrics_listen
    };
    assert_eq!(listen("", "198.18.0.1").to_string(), "0.0.0.0:9354");
    assert_eq!(
        listen("metrics: { bindAddress: node }", "198.18.0.1").to_string(),
        "198.18.0.1:9354"
    );
    // On an IPv6 node HOST_IP expands without brackets; the agent takes it so.
    assert_eq!(
        listen("metrics: { bindAddress: node }", "fd00:198:18::1").to_string(),
        "[fd00:198:18::1]:9354"
    );
    let args = container(&render("metrics: { bindAddress: node, port: 9400 }"))
        .args
        .expect("args");
    assert!(
        args.contains(&"--metrics-listen=$(HOST_IP):9400".to_owned()),
        "{args:?}"
    );
    assert_eq!(
        listen("metrics: { bindAddress: 127.0.0.1 }", "198.18.0.1").to_string(),
        "127.0.0.1:9354"
    );
    assert_eq!(
        listen("metrics: { bindAddress: \"fd00::1\" }", "198.18.0.1").to_string(),
        "[fd00::1]:9354"
    );
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every extension point the chart offers, set at once.
fn extension_values() -> String {
    format!(
        "
image: {{ repository: registry.corp.example/hostport-dns, tag: \"9.9.9\", digest: \"{DIGEST}\" }}
imagePullSecrets: [{{ name: corp-registry }}]
podAnnotations: {{ corp.example/team: dns }}
podLabels: {{ corp.example/tier: edge }}
extraArgs: [--records=/etc/corp/records.yaml]
extraEnv:
  - {{ name: CORP_PROXY, value: \"http://proxy.corp.example:3128\" }}
extraVolumes:
  - {{ name: corp-records, configMap: {{ name: corp-records }} }}
extraVolumeMounts:
  - {{ name: corp-records, mountPath: /etc/corp, readOnly: true }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {{ key: corp.example/dns, operator: In, values: [\"yes\"] }}
nodeSelector: {{ kubernetes.io/os: linux }}
serviceAccount:
  create: true
  name: corp-dns
  annotations: {{ corp.example/owner: dns-team }}
terminationGracePeriodSeconds: 45
livenessProbe: {{ periodSeconds: 20, timeoutSeconds: 3 }}
readinessProbe: {{ failureThreshold: 6 }}
seccompProfile: {{ type: Localhost, localhostProfile: profiles/hostport-dns.json }}
dns:
  udpWorkers: 4
  listen: [198.18.0.10, \"2001:db8::10\"]
metrics:
  port: 9400
  bindAddress: node
"
    )
}

#[test]
fn every_extension_point_of_the_chart_renders_into_the_daemonset() {
    let docs = render(&extension_values());
    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let template = ds.spec.expect("spec").template;
    let meta = template.metadata.expect("pod metadata");
    let pod = template.spec.expect("pod");
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(format!("registry.corp.example/hostport-dns@{DIGEST}").as_str()),
        "a digest wins over the tag"
    );
    assert_eq!(
        pod.image_pull_secrets.as_deref().map(|s| s[0].name.clone()),
        Some("corp-registry".to_owned())
    );
    let annotations = meta.annotations.expect("annotations");
    assert_eq!(annotations["corp.example/team"], "dns");
    assert!(
        annotations.contains_key("checksum/config"),
        "{annotations:?}"
    );
    let labels = meta.labels.expect("labels");
    assert_eq!(labels["corp.example/tier"], "edge");
    assert_eq!(
        labels["app.kubernetes.io/name"], "hostport-dns",
        "the selector's labels stay"
    );
    // The arguments: the agent accepts them, the extra ones last.
    let args = container.args.clone().expect("args");
    assert_eq!(
        args.last().map(String::as_str),
        Some("--records=/etc/corp/records.yaml")
    );
    let expanded = kubelet_expanded(&args, &[("HOST_IP", "198.18.0.1")]);
    let mut expanded_container = container.clone();
    expanded_container.args = Some(expanded);
    let run = run_args(&expanded_container);
    assert_eq!(run.udp_workers, 4);
    assert_eq!(
        run.listen
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["198.18.0.10", "2001:db8::10"]
    );
    assert_eq!(
        run.records.as_deref(),
        Some("/etc/corp/records.yaml".as_ref())
    );
    assert_eq!(run.metrics_listen.to_string(), "198.18.0.1:9400");
    let env: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        env.contains(&"HOST_IP") && env.contains(&"CORP_PROXY"),
        "{env:?}"
    );
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "corp-records"
                && v.config_map.as_ref().map(|c| c.name.as_str()) == Some("corp-records"))
    );
    assert!(
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "corp-records"
                && m.mount_path == "/etc/corp"
                && m.read_only == Some(true))
    );
    assert!(
        container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "config"),
        "the chart's own mounts stay"
    );
    let terms = &pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("the given affinity")
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    assert_eq!(
        terms[0].match_expressions.as_deref().expect("expressions")[0].key,
        "corp.example/dns"
    );
    assert_eq!(
        pod.node_selector
            .as_ref()
            .map(|s| s["kubernetes.io/os"].as_str()),
        Some("linux")
    );
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    // Probes: the given fields over the chart's.
    let liveness = container.liveness_probe.as_ref().expect("liveness");
    assert_eq!(
        (
            liveness.period_seconds,
            liveness.timeout_seconds,
            liveness.failure_threshold
        ),
        (Some(20), Some(3), Some(3))
    );
    assert_eq!(
        liveness.http_get.as_ref().and_then(|h| h.path.as_deref()),
        Some("/healthz")
    );
    let readiness = container.readiness_probe.as_ref().expect("readiness");
    assert_eq!(
        (readiness.period_seconds, readiness.failure_threshold),
        (Some(5), Some(6))
    );
    assert_eq!(
        readiness.http_get.as_ref().and_then(|h| h.path.as_deref()),
        Some("/readyz")
    );
    let seccomp = |profile: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
        profile.map(|p| (p.type_.clone(), p.localhost_profile.clone()))
    };
    let expected = Some((
        "Localhost".to_owned(),
        Some("profiles/hostport-dns.json".to_owned()),
    ));
    assert_eq!(
        seccomp(
            pod.security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
        ),
        expected
    );
    assert_eq!(
        seccomp(
            container
                .security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
        ),
        expected
    );
    // The metrics port everywhere it is named.
    assert_eq!(
        container
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.port.clone()),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9400))
    );
    let service: Service = typed(of_kind(&docs, "Service")[0]);
    assert_eq!(
        service.spec.and_then(|s| s.ports).expect("ports")[0].port,
        9400
    );
    // The service account: named, annotated, bound.
    assert_eq!(pod.service_account_name.as_deref(), Some("corp-dns"));
    let account: ServiceAccount = typed(of_kind(&docs, "ServiceAccount")[0]);
    assert_eq!(account.metadata.name.as_deref(), Some("corp-dns"));
    assert_eq!(
        account.metadata.annotations.expect("annotations")["corp.example/owner"],
        "dns-team"
    );
    assert!(
        !granted(&docs).is_empty(),
        "the RBAC rules bind the named account"
    );
}

/// An account the operator made: the chart makes none and binds its rules to that one.
#[test]
fn the_chart_binds_an_existing_service_account() {
    let docs = render("serviceAccount: { create: false, name: corp-existing }\n");
    assert!(of_kind(&docs, "ServiceAccount").is_empty());
    assert_eq!(
        pod_spec(&docs).service_account_name.as_deref(),
        Some("corp-existing")
    );
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        for doc in of_kind(&docs, kind) {
            assert_eq!(doc["subjects"][0]["name"], "corp-existing", "{kind}");
        }
    }
}

/// `helm template` of the chart with `values`: its status and what it said.
fn try_render(values: &str) -> (bool, String) {
    let dir = TempDir::new("tryvalues");
    let file = dir.write("values.yaml", values);
    let out = Command::new(helm())
        .args(["template", "x"])
        .arg(chart())
        .arg("-f")
        .arg(file)
        .output()
        .expect("helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_schema_accepts_the_extension_points_and_still_rejects_unknown_keys() {
    let (ok, said) = try_render(&extension_values());
    assert!(ok, "{said}");
    let (ok, said) = try_render(
        "grafana: { dashboard: { enabled: true, namespace: monitoring, labels: { grafana_dashboard: \"1\" }, annotations: { grafana_folder: DNS } } }\nmetrics: { serviceMonitor: { enabled: true, relabelings: [] } }\n",
    );
    assert!(ok, "{said}");
    for (values, key) in [
        ("imagePullSecret: [x]\n", "imagePullSecret"),
        ("serviceAccount: { create: true, nam: x }\n", "nam"),
        ("metrics: { bindAdress: node }\n", "bindAdress"),
        ("dns: { udpWorker: 2 }\n", "udpWorker"),
        ("grafana: { dashbord: { enabled: true } }\n", "dashbord"),
    ] {
        let (ok, said) = try_render(values);
        assert!(!ok && said.contains(key), "{values}: {said}");
    }
    for values in [
        "dns: { udpWorkers: -1 }\n",
        "dns: { listen: [\"\"] }\n",
        "terminationGracePeriodSeconds: -5\n",
        "image: { digest: latest }\n",
        "metrics: { bindAddress: \"\" }\n",
    ] {
        let (ok, said) = try_render(values);
        assert!(!ok, "{values} was accepted: {said}");
    }
}

/// The dashboard's JSON as the chart ships it (a ConfigMap the Grafana sidecar picks up) and as
/// the repository offers it for import: one file, twice (Helm does not package symlinks).
#[test]
fn the_grafana_dashboard_ships_as_a_sidecar_configmap_when_asked() {
    let root = workspace_root();
    let chart_copy =
        std::fs::read(chart().join("dashboards/hostport-dns.json")).expect("the chart's dashboard");
    let repo_copy =
        std::fs::read(root.join("deploy/grafana/hostport-dns.json")).expect("the dashboard");
    assert!(
        chart_copy == repo_copy,
        "deploy/grafana/hostport-dns.json and the chart's dashboards/hostport-dns.json differ: copy one over the other"
    );
    let dashboards = |docs: &[Value]| -> Vec<ConfigMap> {
        of_kind(docs, "ConfigMap")
            .into_iter()
            .map(typed::<ConfigMap>)
            .filter(|c| {
                c.data
                    .as_ref()
                    .is_some_and(|d| d.contains_key("hostport-dns.json"))
            })
            .collect()
    };
    assert!(dashboards(&render("")).is_empty(), "off by default");
    let docs = render("grafana: { dashboard: { enabled: true } }\n");
    let found = dashboards(&docs);
    assert_eq!(found.len(), 1);
    let labels = found[0].metadata.labels.clone().expect("labels");
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1"),
        "the sidecar's default label"
    );
    assert_eq!(found[0].metadata.namespace.as_deref(), Some("kube-system"));
    let shipped = &found[0].data.as_ref().expect("data")["hostport-dns.json"];
    assert_eq!(shipped.as_bytes(), &repo_copy[..]);
    let docs = render(
        "grafana: { dashboard: { enabled: true, namespace: monitoring, labels: { corp_dashboards: \"yes\" }, annotations: { grafana_folder: DNS } } }\n",
    );
    let found = dashboards(&docs);
    let meta = &found[0].metadata;
    assert_eq!(meta.namespace.as_deref(), Some("monitoring"));
    let labels = meta.labels.clone().expect("labels");
    assert_eq!(
        labels.get("corp_dashboards").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1"),
        "given labels add to the sidecar's"
    );
    assert_eq!(
        meta.annotations.clone().expect("annotations")["grafana_folder"],
        "DNS"
    );
    // A sidecar watching another label: the default one dropped (null), the other given.
    let docs = render(
        "grafana: { dashboard: { enabled: true, labels: { grafana_dashboard: null, corp_dashboards: \"1\" } } }\n",
    );
    let labels = dashboards(&docs)[0]
        .metadata
        .labels
        .clone()
        .expect("labels");
    assert!(!labels.contains_key("grafana_dashboard"), "{labels:?}");
    assert_eq!(labels.get("corp_dashboards").map(String::as_str), Some("1"));
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every alert names a runbook: a section of docs/src/troubleshooting.md that exists.
#[test]
fn every_alert_links_a_runbook_section_of_the_guide() {
    let rules: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(chart().join("rules/hostport-dns.rules.yaml")).expect("rules"),
    )
    .expect("YAML");
    let readme = std::fs::read_to_string(workspace_root().join("docs/src/troubleshooting.md"))
        .expect("README");
    let anchors: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    const BASE: &str =
        "https://github.com/hostport-dns/hostport-dns/blob/main/docs/src/troubleshooting.md#";
    let mut alerts = 0;
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
            let fragment = url
                .strip_prefix(BASE)
                .unwrap_or_else(|| panic!("{alert}: {url} is not in docs/src/troubleshooting.md"));
            assert_eq!(
                fragment,
                format!("runbook-{}", alert.to_lowercase()),
                "{alert}"
            );
            assert!(
                anchors.contains(fragment),
                "{alert}: no section #{fragment} in docs/src/troubleshooting.md"
            );
        }
    }
    assert!(alerts >= 11, "{alerts} alerts");
}

/// The host ports a pod takes from its node: on the host network every listed container port is
/// one (the API server sets hostPort to containerPort), and the scheduler's NodePorts filter gives
/// each to one pod per node.
fn host_ports(container: &k8s_openapi::api::core::v1::Container) -> Vec<(i32, String)> {
    container
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.host_port.unwrap_or(p.container_port),
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            )
        })
        .collect()
}

#[test]
fn the_rollout_is_a_surge_that_the_scheduler_lets_run_beside_the_old_pod() {
    let docs = render("");
    let ds: DaemonSet = typed(of_kind(&docs, "DaemonSet")[0]);
    let rolling = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.clone())
        .expect("a rolling update");
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    // The new pod beside the old one on the same node: no host port of one is the other's.
    let old = container(&docs);
    let new = container(&docs);
    let taken = host_ports(&old);
    assert!(
        host_ports(&new).iter().all(|p| !taken.contains(p)),
        "the surge pod would stay Pending on {taken:?}"
    );
    // The probes reach the metrics port by number (no named port is declared).
    for probe in [&old.liveness_probe, &old.readiness_probe] {
        let port = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.port.clone());
        assert_eq!(port, Some(IntOrString::Int(9354)));
    }
    // Declared ports, for those who want the scheduler to see them (and roll without a surge).
    let declared = container(&render("declareHostPorts: true\nmetrics: { port: 9999 }\n"));
    assert_eq!(
        host_ports(&declared),
        [
            (1053, "UDP".to_owned()),
            (1053, "TCP".to_owned()),
            (9999, "TCP".to_owned())
        ]
    );
    let probe_port = declared
        .readiness_probe
        .and_then(|p| p.http_get)
        .map(|h| h.port);
    assert_eq!(probe_port, Some(IntOrString::Int(9999)));
}

/// The values schema, parsed.
fn values_schema() -> serde_json::Value {
    let text = std::fs::read_to_string(chart().join("values.schema.json")).expect("the schema");
    serde_json::from_str(&text).expect("the values schema is JSON")
}

/// The chart's values schema embeds the agent's own configuration schema (`hostport-dns
/// config-schema`, derived from the types the agent parses its file with), and the values
/// sections the chart copies into the configuration file refer to it: the chart cannot accept
/// what the agent rejects. After a change to the agent's configuration: `cargo xtask schema`.
#[test]
fn the_values_schema_embeds_the_agents_configuration_schema() {
    let out = sh(Command::new(hostport_dns_tests::agent::binary()).arg("config-schema"));
    let generated: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("config-schema prints JSON");
    let values = values_schema();
    let (want, have) = (&generated["definitions"], &values["definitions"]);
    let want = want.as_object().expect("generated definitions");
    let empty = serde_json::Map::new();
    let have = have.as_object().unwrap_or(&empty);
    let differing: Vec<&String> = want
        .keys()
        .chain(have.keys())
        .filter(|k| want.get(*k) != have.get(*k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        differing.is_empty(),
        "values.schema.json's definitions differ from `hostport-dns config-schema` in {differing:?}: run `cargo xtask schema`"
    );
    for (pointer, definition) in [
        ("/properties/zones/items", "ZoneEntry"),
        ("/properties/pods/items", "PodEntry"),
        ("/properties/endpointSlices/items", "EndpointSliceEntry"),
        ("/properties/reverseZones", "ReverseZonesEntry"),
        ("/properties/clients/properties/rateLimit", "RateLimitEntry"),
        ("/properties/clients/properties/outside", "Outside"),
        ("/properties/transfer/properties/allow/items", "AllowItem"),
        ("/properties/transfer/properties/notify/items", "NotifyItem"),
    ] {
        assert_eq!(
            values
                .pointer(&format!("{pointer}/$ref"))
                .and_then(|r| r.as_str()),
            Some(format!("#/definitions/{definition}").as_str()),
            "{pointer} is the configuration file's {definition}"
        );
    }
}

/// Values the agent rejects in the sections the chart copies into its configuration file: the
/// schema rejects them at `helm install`, not the agent in a crash loop. Each snippet is also a
/// configuration file, which the agent's parser is asked about.
#[test]
fn the_values_schema_rejects_what_the_agent_rejects() {
    let zone = "zones: [{ name: p.example }]\n";
    let slices = |service: &str| {
        format!(
            "{zone}endpointSlices: [{{ zone: p.example, hostnames: [api], service: {service} }}]\n"
        )
    };
    let zone_with = |field: &str| format!("zones: [{{ name: p.example, {field} }}]\n");
    let pods = |field: &str| format!("{zone}pods: [{{ zone: p.example, {field} }}]\n");
    let bad = [
        slices("default/my.service"),
        slices("Default/kubernetes"),
        slices("kubernetes"),
        slices("default/kube_api"),
        format!("{zone}endpointSlices: [{{ zone: p.example, hostnames: [] }}]\n"),
        format!("{zone}endpointSlices: [{{ zone: p.example, hostnames: [\"a b\"] }}]\n"),
        "zones: [{ name: \"bad name.example\" }]\n".to_owned(),
        "zones: [{ name: p.example, ttl: 2147483648 }]\n".to_owned(),
        zone_with("records: { web: [not-an-address] }"),
        zone_with("records: { web: 192.0.2.300 }"),
        zone_with("records: { \"web server\": [192.0.2.1] }"),
        zone_with("records: { web: { address: 192.0.2.1 } }"),
        zone_with("soa: { serial: 5 }"),
        zone_with("soa: { minimum: -1 }"),
        zone_with("soa: { mname: \"ns 1\" }"),
        zone_with("soa: { refresh: 1h }"),
        zone_with("nameservers: [ns1]"),
        zone_with("nameservers: [{ addresses: [192.0.2.53] }]"),
        zone_with("nameservers: [{ name: ns1, addresses: [ns1.example] }]"),
        zone_with("nameservers: [{ name: ns1, glue: [192.0.2.53] }]"),
        zone_with("srv: { _x._tcp: [{ port: 70000, target: web }] }"),
        pods("labelKey: Ingress.Cluster/name"),
        pods("labelValue: \"-edge\""),
        pods("namespaces: [Bad_NS]"),
        pods("address: node"),
        pods("topologyKey: \"zone key\""),
        "nodes: { excludeTaints: [\"\"] }\n".to_owned(),
        "nodes: { excludeLabels: [\"-x/y\"] }\n".to_owned(),
        "nodes: { excludeTaint: [a] }\n".to_owned(),
        format!("{zone}reverseZones: {{ zones: [198.18.0.0] }}\n"),
        "clients: { allow: [nonsense] }\n".to_owned(),
        "clients: { rateLimit: { responsesPerSecond: 5, slip: 1000 } }\n".to_owned(),
        "clients: { rateLimit: { responsesPerSecond: 5, negativePerSecond: 0 } }\n".to_owned(),
    ];
    for values in &bad {
        assert!(
            hostport_dns::agent_config::parse(values, "values.yaml".as_ref()).is_err(),
            "the agent accepts {values}"
        );
        let (ok, said) = try_render(values);
        assert!(
            !ok,
            "the schema accepts what the agent rejects: {values}{said}"
        );
    }
    // And still accepts what the agent does, beyond the chart's defaults and the values of the
    // other tests (rendered there).
    let good = [
        slices("kube-system/kube-apiserver"),
        zone_with(
            "ttl: 30, records: { web: [192.0.2.10, \"2001:db8::10\"], \"@\": 192.0.2.1, _acme.web: [] }, \
             srv: { _https._tcp: [{ port: 443, target: web }] }, \
             nameservers: [{ name: ns1, addresses: [192.0.2.53] }, { name: ns2.p.example. }], \
             soa: { rname: hostmaster.other.example., refresh: 600, minimum: 30 }",
        ),
        pods("labelKey: app.example.com/edge, labelValue: Edge.Public_1, namespaces: [a-b]"),
        pods("topologyKey: topology.kubernetes.io/zone"),
        "nodes: { excludeTaints: [ToBeDeletedByClusterAutoscaler, example.com/Leaving], excludeLabels: [node.kubernetes.io/exclude-from-external-load-balancers], excludeUnschedulable: true }\n".to_owned(),
        format!(
            "{zone}reverseZones: {{ zones: [198.18.0.0/16, \"2001:db8::/48\"], leaveOut: [nodes.p.example] }}\n"
        ),
        "clients: { rateLimit: { responsesPerSecond: 0, negativePerSecond: 0 } }\n".to_owned(),
    ];
    for values in &good {
        hostport_dns::agent_config::parse(values, "values.yaml".as_ref())
            .unwrap_or_else(|e| panic!("the agent rejects {values}: {e}"));
        let (ok, said) = try_render(values);
        assert!(
            ok,
            "the schema rejects what the agent accepts: {values}{said}"
        );
    }
}
