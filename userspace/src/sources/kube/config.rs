//! The Kubernetes sections of the configuration file (`kubernetes`, `pods`, `endpointSlices`,
//! `nodes`): their grammar and checks, and what the Kubernetes source reads of them
//! ([`KubeConfig`]). `agent_config` assembles them with the other sections.

use hickory_proto::rr::Name;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    config_schema as schema,
    name_grammar::{DnsName, RelativeName},
    sources::kube::{
        access::KubernetesAccess,
        api_health::config::{HealthProbe, HealthProbeEntry},
        node_rules::NodeRules,
        syntax,
    },
};

/// The label key pods are selected by when none is configured (coreha's).
pub const DEFAULT_LABEL_KEY: &str = "ingress.cluster/name";
/// TTL of EndpointSlice records when none is configured (kuberture's default).
pub const DEFAULT_ENDPOINT_TTL: u32 = 60;

/// What the Kubernetes source reads of the configuration.
#[derive(Clone, Debug, Default)]
pub struct KubeConfig {
    pub kubernetes: KubernetesAccess,
    pub pods: Vec<PodSource>,
    pub endpoint_slices: Vec<EndpointSliceSource>,
    /// Which nodes' pods leave the answers.
    pub nodes: NodeRules,
}

impl KubeConfig {
    /// Whether any Kubernetes source is configured.
    pub fn uses_kubernetes(&self) -> bool {
        !self.pods.is_empty() || !self.endpoint_slices.is_empty()
    }

    /// Whether Nodes are watched: EndpointSlice outputs that take node addresses, or pod
    /// sources with node rules (a node leaving takes its pods out of the answers).
    pub fn needs_nodes(&self) -> bool {
        self.endpoint_slices
            .iter()
            .any(|e| e.address_source != AddressSource::EndpointSlice)
            || self.follows_nodes()
    }

    /// Whether pod records follow the state of their nodes (`nodes` rules with pod sources, or
    /// a pod source's `topologyKey`).
    pub fn follows_nodes(&self) -> bool {
        (!self.pods.is_empty() && self.nodes.any())
            || self.pods.iter().any(|p| p.topology_key.is_some())
    }

    /// The node labels pod sources name their topology after (each once).
    pub fn topology_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .pods
            .iter()
            .filter_map(|p| p.topology_key.as_deref())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// Pods selected by a label become `<label value>.<namespace>.<zone>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSource {
    pub zone: Name,
    pub label_key: String,
    /// Only pods whose label has this value.
    pub label_value: Option<String>,
    /// Only pods in these namespaces (all when empty).
    pub namespaces: Vec<String>,
    /// Only pods that declare a hostPort.
    pub strict_host_port: bool,
    pub address: PodAddress,
    /// SRV records for named hostPorts, targets `<node>.nodes.<zone>`.
    pub srv: bool,
    /// What a label value with dots becomes.
    pub dotted_label_values: DottedLabelValues,
    /// A node label (`topology.kubernetes.io/zone`, say): each of its values `v` also names
    /// `<v>.<label value>.<namespace>.<zone>`, the pods on the nodes carrying `v`.
    pub topology_key: Option<String>,
}

/// What a label value with dots (`edge.public`, a valid label value) becomes.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum DottedLabelValues {
    /// Skipped and counted (`hostport_dns_dropped_records{reason="invalid_dns_label"}`): one
    /// label value, one DNS label, so a name never grows a level nobody configured.
    #[default]
    Reject,
    /// One DNS label per dot-separated part (`edge.public.<namespace>.<zone>`), as coreha does.
    Labels,
}

/// Which address a pod is published under.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum PodAddress {
    /// The node's for hostPort and hostNetwork pods (where the load balancer connects), the
    /// pod's otherwise.
    #[default]
    Auto,
    Host,
    Pod,
}

/// A Service's EndpointSlices become configured hostnames (the API servers by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSliceSource {
    /// Names the output in metrics and logs: `name`, or `<first hostname>/<address type>`.
    /// Unique among the outputs.
    pub name: String,
    pub zone: Name,
    /// Fully qualified.
    pub hostnames: Vec<Name>,
    pub namespace: String,
    pub service: String,
    pub address_type: AddressType,
    pub address_source: AddressSource,
    /// Also use endpoints that are serving but terminating.
    pub serving_terminating: bool,
    /// When nothing resolves, keep serving the last non-empty answer (split-brain protection).
    pub keep_last_non_empty: bool,
    pub ttl: u32,
    /// Each endpoint probed over TLS; those failing are left out of the answer (None: no probe).
    pub health_probe: Option<HealthProbe>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum AddressType {
    #[default]
    IPv4,
    IPv6,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AddressSource {
    #[default]
    #[serde(rename = "endpointslice")]
    EndpointSlice,
    NodeInternal,
    NodeExternal,
    // The node's first address outside the ranges `sources::kube::public` lists.
    NodePublic,
}

/// Pods selected by a label become `<label value>.<namespace>.<zone>`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PodEntry {
    /// One of `zones`.
    #[schemars(with = "DnsName")]
    zone: String,
    /// The label pods are selected by.
    #[serde(default = "default_label_key")]
    #[schemars(with = "schema::LabelKey")]
    label_key: String,
    /// Only pods whose label has this value.
    #[schemars(with = "Option<schema::LabelValue>")]
    label_value: Option<String>,
    /// Only pods in these namespaces (all when empty).
    #[serde(default)]
    #[schemars(with = "Vec<schema::Namespace>")]
    namespaces: Vec<String>,
    /// Only pods that declare a hostPort.
    #[serde(default)]
    strict_host_port: bool,
    #[serde(default)]
    address: PodAddress,
    /// SRV records for named hostPorts, targets `<node>.nodes.<zone>`.
    #[serde(default = "yes")]
    srv: bool,
    #[serde(default)]
    dotted_label_values: DottedLabelValues,
    /// A node label, e.g. `topology.kubernetes.io/zone`: for each of its values `v`, the name
    /// `<v>.<label value>.<namespace>.<zone>` answers the pods on nodes carrying `v` (the
    /// parent name keeps answering every node). Default: none.
    #[serde(default)]
    #[schemars(with = "Option<schema::LabelKey>")]
    topology_key: Option<String>,
}

fn default_label_key() -> String {
    DEFAULT_LABEL_KEY.to_owned()
}

fn yes() -> bool {
    true
}

/// A Service's EndpointSlices become configured hostnames.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct EndpointSliceEntry {
    /// Names the output in metrics and logs (default `<first hostname>/<address type>`); unique.
    #[serde(default)]
    name: Option<String>,
    /// One of `zones`.
    #[schemars(with = "DnsName")]
    zone: String,
    /// Relative to the zone, "@" for the apex, or absolute (inside the zone) with a final dot,
    /// as record names are written in the record file.
    #[schemars(length(min = 1))]
    hostnames: Vec<RelativeName>,
    /// `<namespace>/<name>` of the Service.
    #[serde(default = "default_service")]
    #[schemars(with = "schema::ServiceRef")]
    service: String,
    /// The slices' address family: `IPv4` (A records) or `IPv6` (AAAA records).
    #[serde(default)]
    address_type: AddressType,
    /// Where an endpoint's addresses come from: the slice itself, or the addresses of the
    /// endpoint's node (`node-internal`, `node-external`, `node-public`: its first address outside
    /// private and special ranges); the node is the endpoint's `nodeName`, else the node that
    /// lists the endpoint's address.
    #[serde(default)]
    address_source: AddressSource,
    /// Also serving-but-terminating endpoints.
    #[serde(default)]
    serving_terminating: bool,
    /// Keep the last non-empty answer when nothing resolves (metric
    /// `hostport_dns_kept_last_answer`).
    #[serde(default = "yes")]
    keep_last_non_empty: bool,
    /// The records' TTL in seconds; default the zone's.
    ttl: Option<u32>,
    /// Probe each endpoint (API server) over TLS and leave those failing out of the answer;
    /// absent: no probe.
    #[serde(default)]
    health_probe: Option<HealthProbeEntry>,
}

fn default_service() -> String {
    "default/kubernetes".to_owned()
}

impl PodEntry {
    /// The zone the entry names, as written.
    pub(crate) fn zone(&self) -> &str {
        &self.zone
    }

    /// The source, checked, in `zone` (the entry's, resolved); `what`: the entry, for errors.
    pub(crate) fn compile(self, what: &str, zone: Name) -> Result<PodSource, String> {
        syntax::check_label_key(&self.label_key)
            .map_err(|e| format!("{what}.labelKey {:?}: {e}", self.label_key))?;
        if let Some(value) = &self.label_value {
            syntax::check_label_value(value)
                .map_err(|e| format!("{what}.labelValue {value:?}: {e}"))?;
        }
        for (n, namespace) in self.namespaces.iter().enumerate() {
            syntax::check_namespace(namespace)
                .map_err(|e| format!("{what}.namespaces[{n}] {namespace:?}: {e}"))?;
        }
        if let Some(key) = &self.topology_key {
            syntax::check_label_key(key).map_err(|e| format!("{what}.topologyKey {key:?}: {e}"))?;
        }
        Ok(PodSource {
            zone,
            label_key: self.label_key,
            label_value: self.label_value,
            namespaces: self.namespaces,
            strict_host_port: self.strict_host_port,
            address: self.address,
            srv: self.srv,
            dotted_label_values: self.dotted_label_values,
            topology_key: self.topology_key,
        })
    }
}

impl EndpointSliceEntry {
    /// The zone the entry names, as written.
    pub(crate) fn zone(&self) -> &str {
        &self.zone
    }

    /// The output, checked, in `zone` (the entry's, resolved), named apart from the outputs
    /// `before` it; `what`: the entry, for errors.
    pub(crate) fn compile(
        self,
        what: &str,
        zone: Name,
        kubernetes: &KubernetesAccess,
        before: &[EndpointSliceSource],
    ) -> Result<EndpointSliceSource, String> {
        let Some((namespace, service)) = self.service.split_once('/') else {
            return Err(format!(
                "{what}: service must be <namespace>/<name>, got {:?}",
                self.service
            ));
        };
        syntax::check_namespace(namespace)
            .map_err(|e| format!("{what}.service: the namespace {e}"))?;
        syntax::check_namespace(service)
            .map_err(|e| format!("{what}.service: the Service name {e}"))?;
        if self.hostnames.is_empty() {
            return Err(format!("{what}: hostnames is empty"));
        }
        let hostnames = self
            .hostnames
            .iter()
            .map(|h| {
                h.resolve(&zone)
                    .map_err(|e| format!("{what}: hostname: {e}"))
            })
            .collect::<Result<Vec<Name>, _>>()?;
        let name = self.name.clone().unwrap_or_else(|| {
            let first = hostnames[0].to_string();
            format!("{}/{:?}", first.trim_end_matches('.'), self.address_type)
        });
        if before.iter().any(|o| o.name == name) {
            return Err(format!(
                "{what}: another output is named {name:?}; give one a `name`"
            ));
        }
        let health_probe = self
            .health_probe
            .map(|probe| probe.compile(kubernetes))
            .transpose()
            .map_err(|e| format!("{what}.healthProbe.{e}"))?;
        Ok(EndpointSliceSource {
            name,
            zone,
            hostnames,
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            address_type: self.address_type,
            address_source: self.address_source,
            serving_terminating: self.serving_terminating,
            keep_last_non_empty: self.keep_last_non_empty,
            ttl: self.ttl.unwrap_or(DEFAULT_ENDPOINT_TTL),
            health_probe,
        })
    }
}
