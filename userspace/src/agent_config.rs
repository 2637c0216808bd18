//! The agent's configuration file (YAML): zones (with optional static records, in the record
//! file's format), how to reach the API server, and the Kubernetes record sources. Validated
//! with errors naming the file, line and reason.
//!
//! ```yaml
//! zones:
//!   - name: prod.coreha.example
//!     ttl: 5
//! kubernetes:                       # optional; default: in-cluster, else ~/.kube/config
//!   apiServer: https://127.0.0.1:6443
//!   tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
//!   caFile: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
//! pods:
//!   - zone: prod.coreha.example
//!     labelKey: ingress.cluster/name    # <label value>.<namespace>.<zone>
//!     strictHostPort: false
//! endpointSlices:
//!   - zone: prod.coreha.example
//!     hostnames: [api]
//!     service: default/kubernetes
//! ```

use crate::config_schema as schema;
use std::path::Path;

use hickory_proto::rr::Name;
use schemars::JsonSchema;
use serde::Deserialize;

use hostport_dns_common::limits::MAX_CLIENT_PREFIXES;
use ipnet::IpNet;

use crate::{
    clients::{ClientsConfig, Outside, RateLimit, cookies::CookieConfig},
    dns::{
        grammar::{DnsName, RelativeName, parse_name},
        message::UdpCeiling,
    },
    sources::{
        Snapshot,
        file::FileError,
        kube::{
            access::KubernetesAccess,
            api_health::config::{HealthProbe, HealthProbeEntry},
            node_rules::{NodeRules, NodesEntry},
            syntax,
        },
    },
    table::{Network, ReverseConfig},
    transfer::config::{TransferConfig, TransferEntry},
    update::{UpdateEntry, UpdateTarget, config::check_distinct},
    zone::{ZoneEntry, ZoneSpec, check_zones_do_not_overlap},
};

/// The label key pods are selected by when none is configured (coreha's).
pub const DEFAULT_LABEL_KEY: &str = "ingress.cluster/name";
/// TTL of EndpointSlice records when none is configured (kuberture's default).
pub const DEFAULT_ENDPOINT_TTL: u32 = 60;

#[derive(Clone, Debug, Default)]
pub struct AgentConfig {
    /// Zones and their static records.
    pub zones: Snapshot,
    pub kubernetes: KubernetesAccess,
    pub pods: Vec<PodSource>,
    pub endpoint_slices: Vec<EndpointSliceSource>,
    /// The reverse zones served.
    pub reverse: ReverseConfig,
    /// Who is served and how much.
    pub clients: ClientsConfig,
    /// Zone transfers to secondaries (None: AXFR and IXFR are refused).
    pub transfer: Option<TransferConfig>,
    /// RFC 2136 UPDATEs to existing primaries (empty: none).
    pub update: Vec<UpdateTarget>,
    /// Objects written for external-dns (None: off).
    pub external_dns: Option<ExternalDnsConfig>,
    /// The Lease that elects the one agent writing `external_dns` and `update`.
    pub leader_election: LeaderElection,
    /// The ceiling on UDP answers, when the file sets one.
    pub udp_max_payload: Option<UdpCeiling>,
    /// Which nodes' pods leave the answers.
    pub nodes: NodeRules,
}

impl AgentConfig {
    /// Whether any Kubernetes source is configured.
    pub fn uses_kubernetes(&self) -> bool {
        !self.pods.is_empty() || !self.endpoint_slices.is_empty()
    }

    /// Whether one agent is elected (by the `leaderElection` Lease) to write for the others:
    /// with external-dns outputs, and with RFC 2136 updates from agents that reach the API
    /// server anyway or were told to elect (`leaderElection` given).
    pub fn elects(&self) -> bool {
        self.external_dns.is_some()
            || (!self.update.is_empty() && (self.uses_kubernetes() || self.leader_election.given))
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

/// The agent's configuration file (`run --config`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "hostport-dns configuration file")]
struct ConfigFile {
    #[serde(default)]
    zones: Vec<ZoneEntry>,
    #[serde(default)]
    kubernetes: KubernetesAccess,
    #[serde(default)]
    pods: Vec<PodEntry>,
    #[serde(default)]
    endpoint_slices: Vec<EndpointSliceEntry>,
    #[serde(default)]
    reverse_zones: ReverseZonesEntry,
    #[serde(default)]
    clients: ClientsEntry,
    #[serde(default)]
    transfer: Option<TransferEntry>,
    /// RFC 2136 UPDATEs: names of a served zone written into a zone of another primary.
    #[serde(default)]
    update: Vec<UpdateEntry>,
    #[serde(default)]
    external_dns: Option<ExternalDnsEntry>,
    #[serde(default)]
    leader_election: Option<LeaderElectionEntry>,
    /// The ceiling on UDP answers in bytes (Knot's `udp-max-payload`; 512 to 65507, default
    /// 8192): an answer takes what the client offers up to this, and the OPT record advertises
    /// it. `--udp-max-payload` overrides it.
    #[serde(default)]
    udp_max_payload: Option<u16>,
    /// Which nodes' pods leave the answers made from pods (API-server records keep every
    /// server).
    #[serde(default)]
    nodes: NodesEntry,
}

/// `clients`: the allow-list, rate limiting and cookies.
#[derive(Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClientsEntry {
    /// Source prefixes (or single addresses) served; empty: everyone.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Prefix>")]
    allow: Vec<String>,
    #[serde(default)]
    outside: Outside,
    #[serde(default)]
    rate_limit: RateLimitEntry,
    #[serde(default)]
    cookies: CookieConfig,
}

/// Response rate limiting per /24 (IPv4) or /56 (IPv6) and kind of answer. With
/// `responsesPerSecond` above 0, a `negativePerSecond` or `errorsPerSecond` of 0 is refused.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend(
    "if" = { "properties": { "responsesPerSecond": { "minimum": 1 } }, "required": ["responsesPerSecond"] },
    "then" = { "properties": { "negativePerSecond": { "minimum": 1 }, "errorsPerSecond": { "minimum": 1 } } }
))]
struct RateLimitEntry {
    /// Answers per second (0: off).
    #[serde(default)]
    responses_per_second: u32,
    /// NXDOMAIN/NODATA answers per second; default `responsesPerSecond`.
    negative_per_second: Option<u32>,
    /// Error answers per second; default `responsesPerSecond`.
    errors_per_second: Option<u32>,
    /// Every n-th limited answer goes out truncated (TC=1); 0: all are dropped.
    #[serde(default = "default_slip")]
    #[schemars(range(max = MAX_SLIP))]
    slip: u32,
    /// Prefixes (or addresses) never limited.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Prefix>")]
    exempt: Vec<String>,
}

impl Default for RateLimitEntry {
    fn default() -> Self {
        Self {
            responses_per_second: 0,
            negative_per_second: None,
            errors_per_second: None,
            slip: default_slip(),
            exempt: Vec::new(),
        }
    }
}

/// Knot's and BIND's default: every second limited answer slips.
fn default_slip() -> u32 {
    2
}

/// Largest `slip` (Knot's bound).
const MAX_SLIP: u32 = 100;

impl ClientsEntry {
    fn compile(self) -> Result<ClientsConfig, String> {
        let allow = prefixes(&self.allow, "clients.allow")?;
        let rate = self.rate_limit;
        let exempt = prefixes(&rate.exempt, "clients.rateLimit.exempt")?;
        if rate.slip > MAX_SLIP {
            return Err(format!(
                "clients.rateLimit.slip: {} is more than {MAX_SLIP}",
                rate.slip
            ));
        }
        for family_v4 in [true, false] {
            let count = allow
                .iter()
                .chain(&exempt)
                .filter(|n| matches!(n, IpNet::V4(_)) == family_v4)
                .count();
            if count > MAX_CLIENT_PREFIXES as usize {
                return Err(format!(
                    "clients: {count} IPv{} prefixes in allow and rateLimit.exempt together; the kernel holds {MAX_CLIENT_PREFIXES}",
                    if family_v4 { 4 } else { 6 }
                ));
            }
        }
        let per_second = rate.responses_per_second;
        if per_second > 0 {
            for (field, value) in [
                ("negativePerSecond", rate.negative_per_second),
                ("errorsPerSecond", rate.errors_per_second),
            ] {
                if value == Some(0) {
                    return Err(format!(
                        "clients.rateLimit.{field}: 0 would drop every such answer to every \
                         client (none would be answered, not even slipped); give at least 1, or \
                         leave it out to use responsesPerSecond"
                    ));
                }
            }
        }
        Ok(ClientsConfig {
            allow,
            outside: self.outside,
            rate_limit: RateLimit {
                responses_per_second: per_second,
                negative_per_second: rate.negative_per_second.unwrap_or(per_second),
                errors_per_second: rate.errors_per_second.unwrap_or(per_second),
                slip: rate.slip,
                exempt,
            },
            cookies: self.cookies,
        })
    }
}

/// Prefixes in CIDR notation, or single addresses (a /32 or /128).
fn prefixes(list: &[String], what: &str) -> Result<Vec<IpNet>, String> {
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            let text = text.trim();
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{what}[{i}]: {text:?} is not an address or a prefix"))
        })
        .collect()
}

/// `reverseZones`: `zones` (networks on octet or nibble boundaries; absent: the /24 and /64 of
/// every served address; `[]`: none) and `leaveOut` (names, with the names below them, that
/// get no PTR record).
#[derive(Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReverseZonesEntry {
    /// Networks on octet (IPv4) or nibble (IPv6) boundaries; absent: the /24 and /64 of every
    /// served address; `[]`: none.
    #[schemars(with = "Option<Vec<schema::ReverseNetwork>>")]
    zones: Option<Vec<String>>,
    /// Names (with the names below them) that get no PTR record.
    #[serde(default)]
    #[schemars(with = "Vec<schema::DomainName>")]
    leave_out: Vec<String>,
}

/// Pods selected by a label become `<label value>.<namespace>.<zone>`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodEntry {
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
struct EndpointSliceEntry {
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
    #[serde(default)]
    address_type: AddressType,
    #[serde(default)]
    address_source: AddressSource,
    #[serde(default)]
    serving_terminating: bool,
    #[serde(default = "yes")]
    keep_last_non_empty: bool,
    ttl: Option<u32>,
    /// Probe each endpoint (API server) over TLS and leave those failing out of the answer;
    /// absent: no probe.
    #[serde(default)]
    health_probe: Option<HealthProbeEntry>,
}

fn default_service() -> String {
    "default/kubernetes".to_owned()
}

/// The annotation prefix external-dns reads by default.
pub const DEFAULT_ANNOTATION_PREFIX: &str = "external-dns.alpha.kubernetes.io/";
/// The Lease that elects the writer when none is named.
pub const DEFAULT_LEADER_LEASE: &str = "hostport-dns-leader";

/// Which Lease elects the one agent that writes for others (the external-dns objects, the RFC
/// 2136 updates): every agent of an installation names the same one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    /// Where the Lease lives (None: the agent's own namespace).
    pub namespace: Option<String>,
    pub lease_name: String,
    /// Whether the configuration has the section (then updates elect even without a
    /// Kubernetes source).
    pub given: bool,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            namespace: None,
            lease_name: DEFAULT_LEADER_LEASE.to_owned(),
            given: false,
        }
    }
}

/// `leaderElection`: the Lease whose holder alone writes the external-dns objects and sends
/// the RFC 2136 updates (used only when `externalDns` or `update` is configured).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LeaderElectionEntry {
    /// Where the Lease lives; default: the agent's own namespace (`POD_NAMESPACE`, else the
    /// service account's).
    #[schemars(with = "Option<schema::Namespace>")]
    namespace: Option<String>,
    /// The Lease's name: one per installation (two installations in one namespace need two).
    #[serde(default = "default_lease_name")]
    #[schemars(with = "schema::Namespace")]
    lease_name: String,
}

fn default_lease_name() -> String {
    DEFAULT_LEADER_LEASE.to_owned()
}

impl LeaderElectionEntry {
    fn compile(self) -> Result<LeaderElection, String> {
        if let Some(namespace) = &self.namespace {
            syntax::check_namespace(namespace)
                .map_err(|e| format!("leaderElection.namespace {namespace:?}: {e}"))?;
        }
        syntax::check_namespace(&self.lease_name)
            .map_err(|e| format!("leaderElection.leaseName {:?}: {e}", self.lease_name))?;
        Ok(LeaderElection {
            namespace: self.namespace,
            lease_name: self.lease_name,
            given: true,
        })
    }
}

/// Objects written for external-dns, by one agent (the holder of the `leaderElection` Lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalDnsConfig {
    /// Where the objects live (None: the agent's own namespace).
    pub namespace: Option<String>,
    pub outputs: Vec<ExternalDnsOutput>,
}

/// One output written as one object: an `endpointSlices` output's names, or every pod name of
/// a `pods` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalDnsOutput {
    pub source: ExternalDnsSource,
    pub kind: ExternalDnsKind,
    pub annotation_prefix: String,
    /// The object's name.
    pub name: String,
}

/// What an external-dns output writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExternalDnsSource {
    /// The `endpointSlices` output of this index.
    EndpointSlices(usize),
    /// The `pods` entry of this index: every name it serves.
    Pods(usize),
}

/// Which external-dns source reads the objects.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExternalDnsKind {
    // An annotated headless Service (external-dns `--source=service`), as kuberture writes.
    #[default]
    Service,
    // A `DNSEndpoint` (`externaldns.k8s.io/v1alpha1`, external-dns `--source=crd`).
    #[serde(rename = "DNSEndpoint")]
    DnsEndpoint,
}

/// `externalDns`: the objects external-dns reads, kept equal to what the agent serves.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExternalDnsEntry {
    /// Where the objects live; default: the agent's own namespace (`POD_NAMESPACE`, else the
    /// service account's).
    #[schemars(with = "Option<schema::Namespace>")]
    namespace: Option<String>,
    #[schemars(length(min = 1))]
    outputs: Vec<ExternalDnsOutputEntry>,
}

/// One output written for external-dns: `endpointSlices` or `pods`, not both.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExternalDnsOutputEntry {
    /// The `endpointSlices` output's name (its `name`, or `<first hostname>/<address type>`).
    endpoint_slices: Option<String>,
    /// A `pods` entry, by its index (0: the first): every name it serves, in one DNSEndpoint (a
    /// Service's annotations give all its names one set of targets, so `kind` must be
    /// DNSEndpoint).
    pods: Option<usize>,
    #[serde(default)]
    kind: ExternalDnsKind,
    /// The Service annotations' prefix (external-dns `--annotation-prefix`, kuberture's
    /// `annotationPrefix`); one per external-dns instance to split the outputs between them.
    #[serde(default = "default_annotation_prefix")]
    annotation_prefix: String,
    /// The object's name (kuberture's `serviceName`); default `hostport-dns-<output>`, or
    /// `hostport-dns-pods-<index>`.
    #[schemars(with = "Option<schema::Namespace>")]
    name: Option<String>,
}

fn default_annotation_prefix() -> String {
    DEFAULT_ANNOTATION_PREFIX.to_owned()
}

impl ExternalDnsOutputEntry {
    /// What the entry writes, and its default object name; `what`: the entry, for errors.
    fn source(
        &self,
        what: &str,
        outputs: &[EndpointSliceSource],
        pods: usize,
    ) -> Result<(ExternalDnsSource, String), String> {
        match (&self.endpoint_slices, self.pods) {
            (Some(output), None) => {
                let Some(index) = outputs.iter().position(|o| &o.name == output) else {
                    let names: Vec<&str> = outputs.iter().map(|o| o.name.as_str()).collect();
                    return Err(format!(
                        "{what}.endpointSlices: no endpointSlices output is named {output:?} (there are {names:?})"
                    ));
                };
                Ok((
                    ExternalDnsSource::EndpointSlices(index),
                    default_object_name(output),
                ))
            }
            (None, Some(index)) if index >= pods => Err(format!(
                "{what}.pods: there is no pods entry {index} (there are {pods}, from 0)"
            )),
            (None, Some(_)) if self.kind == ExternalDnsKind::Service => Err(format!(
                "{what}: pod names need kind DNSEndpoint (a Service gives all its names one set of targets)"
            )),
            (None, Some(index)) => Ok((
                ExternalDnsSource::Pods(index),
                format!("hostport-dns-pods-{index}"),
            )),
            _ => Err(format!(
                "{what}: name either `endpointSlices` (an output's name) or `pods` (an entry's index)"
            )),
        }
    }
}

impl ExternalDnsEntry {
    /// Checks the entry against the `endpointSlices` outputs (`outputs`) and the number of
    /// `pods` entries.
    fn compile(
        self,
        outputs: &[EndpointSliceSource],
        pods: usize,
    ) -> Result<ExternalDnsConfig, String> {
        if let Some(namespace) = &self.namespace {
            syntax::check_namespace(namespace)
                .map_err(|e| format!("externalDns.namespace {namespace:?}: {e}"))?;
        }
        if self.outputs.is_empty() {
            return Err(
                "externalDns.outputs is empty (leave externalDns out to write nothing)".into(),
            );
        }
        let mut compiled: Vec<ExternalDnsOutput> = Vec::new();
        for (i, entry) in self.outputs.into_iter().enumerate() {
            let what = format!("externalDns.outputs[{i}]");
            let (source, default_name) = entry.source(&what, outputs, pods)?;
            let prefix = &entry.annotation_prefix;
            let subdomain = prefix.strip_suffix('/').ok_or_else(|| {
                format!("{what}.annotationPrefix {prefix:?}: must end with '/' (as external-dns.alpha.kubernetes.io/ does)")
            })?;
            syntax::check_label_key(&format!("{subdomain}/hostname"))
                .map_err(|e| format!("{what}.annotationPrefix {prefix:?}: {e}"))?;
            let name = match entry.name {
                Some(name) => {
                    syntax::check_namespace(&name)
                        .map_err(|e| format!("{what}.name {name:?}: {e}"))?;
                    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                        return Err(format!(
                            "{what}.name {name:?}: must start with a letter (a Service name)"
                        ));
                    }
                    name
                }
                None => default_name,
            };
            if compiled
                .iter()
                .any(|o| o.kind == entry.kind && o.name == name)
            {
                return Err(format!(
                    "{what}: another output writes {:?} {name:?}; give one a `name`",
                    entry.kind
                ));
            }
            compiled.push(ExternalDnsOutput {
                source,
                kind: entry.kind,
                annotation_prefix: entry.annotation_prefix,
                name,
            });
        }
        Ok(ExternalDnsConfig {
            namespace: self.namespace,
            outputs: compiled,
        })
    }
}

/// `hostport-dns-<output>` as a Service name: lowercase letters, digits and `-`, at most 63.
fn default_object_name(output: &str) -> String {
    let mut name = String::from("hostport-dns-");
    for c in output.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && name.ends_with('-')) {
            name.push(c);
        }
    }
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

/// The configuration file's grammar as JSON Schema (draft-07, the dialect Helm checks values
/// with): what `hostport-dns config-schema` prints, and what the chart's values schema embeds.
pub fn json_schema() -> serde_json::Value {
    schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<ConfigFile>()
        .to_value()
}

/// Reads and validates a configuration file.
pub fn load(path: &Path) -> Result<AgentConfig, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<AgentConfig, FileError> {
    let file: ConfigFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        let reason = e.to_string();
        let reason = reason
            .split(" at line ")
            .next()
            .unwrap_or(&reason)
            .to_owned();
        FileError::Syntax {
            path: path.to_owned(),
            line,
            column,
            reason,
        }
    })?;
    let invalid = |reason: String| FileError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let mut config = AgentConfig {
        kubernetes: file.kubernetes,
        clients: file.clients.compile().map_err(invalid)?,
        transfer: file
            .transfer
            .map(TransferEntry::compile)
            .transpose()
            .map_err(invalid)?,
        leader_election: file
            .leader_election
            .map(LeaderElectionEntry::compile)
            .transpose()
            .map_err(invalid)?
            .unwrap_or_default(),
        udp_max_payload: file
            .udp_max_payload
            .map(|bytes| UdpCeiling::new(bytes).map_err(|e| format!("udpMaxPayload: {e}")))
            .transpose()
            .map_err(invalid)?,
        nodes: file.nodes.compile().map_err(invalid)?,
        ..AgentConfig::default()
    };
    for (i, entry) in file.update.into_iter().enumerate() {
        let target = entry
            .compile(i, config.transfer.as_ref())
            .map_err(invalid)?;
        config.update.push(target);
    }
    check_distinct(&config.update).map_err(invalid)?;
    let mut zones = Vec::new();
    let mut static_records = Vec::new();
    for zone in file.zones {
        let (spec, records) = zone.compile().map_err(invalid)?;
        zones.push(spec);
        static_records.extend(records);
    }
    check_zones_do_not_overlap(&zones).map_err(invalid)?;
    config.zones = Snapshot::new(zones, static_records);
    let zone_named = |name: &str, what: &str| -> Result<Name, FileError> {
        let zone = parse_name(name, true).map_err(|e| invalid(format!("{what}: zone {e}")))?;
        if config.zones.zones.iter().any(|z: &ZoneSpec| z.apex == zone) {
            Ok(zone)
        } else {
            Err(invalid(format!("{what}: zone {zone} is not in `zones`")))
        }
    };
    config.reverse = ReverseConfig {
        zones: file
            .reverse_zones
            .zones
            .map(|zones| {
                zones
                    .iter()
                    .map(|z| {
                        Network::parse_zone(z)
                            .map_err(|e| invalid(format!("reverseZones.zones: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?,
        leave_out: file
            .reverse_zones
            .leave_out
            .iter()
            .map(|n| {
                parse_name(n, true).map_err(|e| invalid(format!("reverseZones.leaveOut: {e}")))
            })
            .collect::<Result<_, _>>()?,
    };
    for (i, pods) in file.pods.into_iter().enumerate() {
        let what = format!("pods[{i}]");
        syntax::check_label_key(&pods.label_key)
            .map_err(|e| invalid(format!("{what}.labelKey {:?}: {e}", pods.label_key)))?;
        if let Some(value) = &pods.label_value {
            syntax::check_label_value(value)
                .map_err(|e| invalid(format!("{what}.labelValue {value:?}: {e}")))?;
        }
        for (n, namespace) in pods.namespaces.iter().enumerate() {
            syntax::check_namespace(namespace)
                .map_err(|e| invalid(format!("{what}.namespaces[{n}] {namespace:?}: {e}")))?;
        }
        if let Some(key) = &pods.topology_key {
            syntax::check_label_key(key)
                .map_err(|e| invalid(format!("{what}.topologyKey {key:?}: {e}")))?;
        }
        config.pods.push(PodSource {
            zone: zone_named(&pods.zone, &what)?,
            label_key: pods.label_key,
            label_value: pods.label_value,
            namespaces: pods.namespaces,
            strict_host_port: pods.strict_host_port,
            address: pods.address,
            srv: pods.srv,
            dotted_label_values: pods.dotted_label_values,
            topology_key: pods.topology_key,
        });
    }
    for (i, slices) in file.endpoint_slices.into_iter().enumerate() {
        let what = format!("endpointSlices[{i}]");
        let zone = zone_named(&slices.zone, &what)?;
        let Some((namespace, service)) = slices.service.split_once('/') else {
            return Err(invalid(format!(
                "{what}: service must be <namespace>/<name>, got {:?}",
                slices.service
            )));
        };
        syntax::check_namespace(namespace)
            .map_err(|e| invalid(format!("{what}.service: the namespace {e}")))?;
        syntax::check_namespace(service)
            .map_err(|e| invalid(format!("{what}.service: the Service name {e}")))?;
        if slices.hostnames.is_empty() {
            return Err(invalid(format!("{what}: hostnames is empty")));
        }
        let hostnames = slices
            .hostnames
            .iter()
            .map(|h| {
                h.resolve(&zone)
                    .map_err(|e| invalid(format!("{what}: hostname: {e}")))
            })
            .collect::<Result<Vec<Name>, _>>()?;
        let name = slices.name.clone().unwrap_or_else(|| {
            let first = hostnames[0].to_string();
            format!("{}/{:?}", first.trim_end_matches('.'), slices.address_type)
        });
        if config.endpoint_slices.iter().any(|o| o.name == name) {
            return Err(invalid(format!(
                "{what}: another output is named {name:?}; give one a `name`"
            )));
        }
        let health_probe = slices
            .health_probe
            .map(|probe| probe.compile(&config.kubernetes))
            .transpose()
            .map_err(|e| invalid(format!("{what}.healthProbe.{e}")))?;
        config.endpoint_slices.push(EndpointSliceSource {
            name,
            zone,
            hostnames,
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            address_type: slices.address_type,
            address_source: slices.address_source,
            serving_terminating: slices.serving_terminating,
            keep_last_non_empty: slices.keep_last_non_empty,
            ttl: slices.ttl.unwrap_or(DEFAULT_ENDPOINT_TTL),
            health_probe,
        });
    }
    config.external_dns = file
        .external_dns
        .map(|e| e.compile(&config.endpoint_slices, config.pods.len()))
        .transpose()
        .map_err(invalid)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<AgentConfig, FileError> {
        parse(text, Path::new("agent.yaml"))
    }

    #[test]
    fn the_schema_refuses_unknown_keys_wherever_the_parser_does() {
        let schema = json_schema();
        assert_eq!(schema["additionalProperties"], false);
        let definitions = schema["definitions"].as_object().expect("definitions");
        for (name, definition) in definitions {
            if definition.get("properties").is_some() {
                assert_eq!(
                    definition["additionalProperties"], false,
                    "{name} (deny_unknown_fields)"
                );
            }
        }
        for name in [
            "ZoneEntry",
            "SoaEntry",
            "NameServerEntry",
            "ServiceRef",
            "DnsName",
        ] {
            assert!(definitions.contains_key(name), "{name}");
        }
    }

    #[test]
    fn the_udp_ceiling_is_read_and_checked() {
        let config = parse_str("udpMaxPayload: 1232\n").expect("parses");
        assert_eq!(config.udp_max_payload.map(UdpCeiling::bytes), Some(1232));
        assert_eq!(
            parse_str("zones: []\n").expect("parses").udp_max_payload,
            None
        );
        let error = parse_str("udpMaxPayload: 100\n")
            .expect_err("too small")
            .to_string();
        assert!(
            error.contains("udpMaxPayload") && error.contains("512"),
            "{error}"
        );
    }

    #[test]
    fn the_client_policy_parses_with_its_defaults() {
        let config = parse_str(
            "clients:\n  allow: [198.18.0.0/15, \"2001:db8::/32\", 203.0.113.7]\n  outside: refuse\n  rateLimit:\n    responsesPerSecond: 20\n    exempt: [198.18.7.0/24]\n",
        )
        .unwrap();
        let clients = &config.clients;
        assert_eq!(clients.allow.len(), 3);
        assert_eq!(clients.allow[2].to_string(), "203.0.113.7/32");
        assert_eq!(clients.outside, Outside::Refuse);
        assert_eq!(clients.rate_limit.negative_per_second, 20);
        assert_eq!(clients.rate_limit.slip, 2);
        assert!(clients.cookies.enabled);
        let open = parse_str("zones: []\n").unwrap().clients;
        assert!(open.allow.is_empty() && !open.rate_limit.enabled());
    }

    #[test]
    fn bad_client_prefixes_are_errors_naming_the_entry() {
        let err = parse_str("clients:\n  allow: [198.18.0.0/15, nonsense]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("clients.allow[1]") && err.contains("nonsense"),
            "{err}"
        );
        let err = parse_str("clients:\n  rateLimit: {responsesPerSecond: 5, slip: 1000}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("slip"), "{err}");
    }

    #[test]
    fn a_negative_or_error_budget_of_zero_is_refused_not_silently_dropping_everything() {
        for field in ["negativePerSecond", "errorsPerSecond"] {
            let err = parse_str(&format!(
                "clients:\n  rateLimit: {{responsesPerSecond: 5, {field}: 0}}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains(&format!("clients.rateLimit.{field}")) && err.contains("at least 1"),
                "{err}"
            );
        }
        let config =
            parse_str("clients:\n  rateLimit: {responsesPerSecond: 5, negativePerSecond: 1}\n")
                .expect("1 is a budget");
        assert_eq!(config.clients.rate_limit.negative_per_second, 1);
    }

    #[test]
    fn a_full_configuration_parses() {
        let config = parse_str(
            "zones:\n  - name: prod.example\nkubernetes:\n  apiServer: https://127.0.0.1:6443\npods:\n  - zone: prod.example\n    strictHostPort: true\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api]\n    addressSource: node-internal\n",
        )
        .unwrap();
        assert_eq!(config.pods[0].label_key, DEFAULT_LABEL_KEY);
        assert!(config.pods[0].strict_host_port && config.pods[0].srv);
        let e = &config.endpoint_slices[0];
        assert_eq!(
            (e.namespace.as_str(), e.service.as_str()),
            ("default", "kubernetes")
        );
        assert_eq!(e.hostnames[0].to_string(), "api.prod.example.");
        assert_eq!(e.name, "api.prod.example/IPv4");
        assert_eq!(e.address_source, AddressSource::NodeInternal);
        assert_eq!(e.ttl, DEFAULT_ENDPOINT_TTL);
        assert!(config.needs_nodes());
    }

    #[test]
    fn hostnames_are_relative_absolute_or_the_apex() {
        let config = parse_str(
            "zones:\n  - name: prod.example\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api, Api2.Prod.Example., \"@\", k8s.api]\n",
        )
        .unwrap();
        let names: Vec<String> = config.endpoint_slices[0]
            .hostnames
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "api.prod.example.",
                "api2.prod.example.",
                "prod.example.",
                "k8s.api.prod.example."
            ]
        );
        let err = parse_str(
            "zones:\n  - name: prod.example\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api.other.example.]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("outside the zone"), "{err}");
    }

    #[test]
    fn outputs_have_unique_names() {
        let two = |second: &str| {
            parse_str(&format!(
                "zones:\n  - name: prod.example\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api]\n  - zone: prod.example\n    hostnames: [api]\n{second}"
            ))
        };
        let err = two("").unwrap_err();
        assert!(err.to_string().contains("another output is named"), "{err}");
        let v6 = two("    addressType: IPv6\n").unwrap();
        let names: Vec<&str> = v6.endpoint_slices.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["api.prod.example/IPv4", "api.prod.example/IPv6"]);
        let named = two("    name: api-again\n").unwrap();
        assert_eq!(named.endpoint_slices[1].name, "api-again");
    }

    #[test]
    fn a_health_probe_inherits_the_api_server_access_and_its_errors_name_the_field() {
        let with = |probe: &str| {
            parse_str(&format!(
                "zones:\n  - name: p.example\nkubernetes:\n  caFile: /etc/k8s/ca.crt\n  tlsServerName: kubernetes.default.svc\nendpointSlices:\n  - zone: p.example\n    hostnames: [api]\n{probe}"
            ))
        };
        let config = with("    healthProbe: {intervalSeconds: 0.5}\n").unwrap();
        let probe = config.endpoint_slices[0].health_probe.as_ref().unwrap();
        assert_eq!(probe.interval, std::time::Duration::from_millis(500));
        assert_eq!(probe.timeout, std::time::Duration::from_millis(250));
        assert_eq!(probe.ca_file, std::path::PathBuf::from("/etc/k8s/ca.crt"));
        assert_eq!(
            probe.tls_server_name.as_deref(),
            Some("kubernetes.default.svc")
        );
        assert_eq!(with("").unwrap().endpoint_slices[0].health_probe, None);
        let err = with("    healthProbe: {failures: 0}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("endpointSlices[0].healthProbe.failures: 0"),
            "{err}"
        );
        let err = with("    healthProbe:\n      period: 2\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("agent.yaml:10:") && err.contains("unknown field `period`"),
            "{err}"
        );
    }

    #[test]
    fn a_source_must_name_a_configured_zone() {
        let err = parse_str("zones:\n  - name: prod.example\npods:\n  - zone: other.example\n")
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("pods[0]: zone other.example. is not in `zones`"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_address_source_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: p.example\nendpointSlices:\n  - zone: p.example\n    hostnames: [api]\n    addressSource: node-elsewhere\n")
            .unwrap_err();
        assert!(err.to_string().starts_with("agent.yaml:6:"), "{err}");
    }

    #[test]
    fn a_service_needs_its_namespace() {
        let err = parse_str("zones:\n  - name: p.example\nendpointSlices:\n  - zone: p.example\n    hostnames: [api]\n    service: kubernetes\n")
            .unwrap_err();
        assert!(err.to_string().contains("<namespace>/<name>"), "{err}");
    }

    #[test]
    fn selectors_in_bad_kubernetes_syntax_are_errors_naming_the_field() {
        let pods = |entry: &str| {
            parse_str(&format!(
                "zones:\n  - name: p.example\npods:\n  - zone: p.example\n{entry}"
            ))
            .map(|c| c.pods[0].clone())
        };
        for (entry, field) in [
            ("    labelKey: \"\"\n", "pods[0].labelKey"),
            ("    labelKey: \"ingress cluster\"\n", "pods[0].labelKey"),
            ("    labelKey: Ingress.Cluster/name\n", "pods[0].labelKey"),
            ("    labelValue: \"-edge\"\n", "pods[0].labelValue"),
            ("    namespaces: [ok, Bad_NS]\n", "pods[0].namespaces[1]"),
        ] {
            let err = pods(entry).unwrap_err().to_string();
            assert!(err.contains(field), "{entry}: {err}");
        }
        let fine = pods("    labelKey: app.example.com/edge\n    labelValue: Edge.Public_1\n    dottedLabelValues: labels\n").unwrap();
        assert_eq!(fine.dotted_label_values, DottedLabelValues::Labels);
        let err = parse_str("zones:\n  - name: p.example\nendpointSlices:\n  - zone: p.example\n    hostnames: [api]\n    service: Default/kubernetes\n")
            .unwrap_err();
        assert!(
            err.to_string().contains("endpointSlices[0].service"),
            "{err}"
        );
    }

    #[test]
    fn the_leader_lease_is_named_and_checked() {
        let config =
            parse_str("leaderElection:\n  namespace: dns-system\n  leaseName: dns-writer\n")
                .unwrap();
        assert_eq!(
            config.leader_election,
            LeaderElection {
                namespace: Some("dns-system".into()),
                lease_name: "dns-writer".into(),
                given: true,
            }
        );
        // Updates elect with a Kubernetes source, or when told to; not otherwise.
        let update = "zones:\n  - name: prod.example\ntransfer:\n  keys: [{name: k, secretFile: /k}]\nupdate:\n  - {server: 198.18.0.53, zone: corp.example, source: prod.example, key: k}\n";
        assert!(!parse_str(update).unwrap().elects());
        assert!(
            parse_str(&format!("{update}leaderElection: {{}}\n"))
                .unwrap()
                .elects()
        );
        assert!(
            parse_str(&format!(
                "{update}endpointSlices:\n  - zone: prod.example\n    hostnames: [api]\n"
            ))
            .unwrap()
            .elects()
        );
        assert!(!config.elects(), "nothing to write: no election");
        let err = parse_str("leaderElection:\n  leaseName: Dns_Writer\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("leaderElection.leaseName \"Dns_Writer\""),
            "{err}"
        );
        let err = parse_str("externalDns:\n  leaseName: old\n  outputs: []\n").unwrap_err();
        assert!(err.to_string().contains("leaseName"), "{err}");
    }

    #[test]
    fn external_dns_outputs_name_an_endpoint_slices_output_and_default_their_object() {
        let base = "zones:\n  - name: prod.example\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api]\n  - zone: prod.example\n    hostnames: [api]\n    addressType: IPv6\n";
        let config = parse_str(&format!(
            "{base}externalDns:\n  outputs:\n    - endpointSlices: api.prod.example/IPv4\n    - endpointSlices: api.prod.example/IPv6\n      kind: DNSEndpoint\n    - endpointSlices: api.prod.example/IPv4\n      annotationPrefix: internal.example.com/\n      name: api-internal\n"
        ))
        .unwrap();
        assert_eq!(config.leader_election, LeaderElection::default());
        assert_eq!(config.leader_election.lease_name, "hostport-dns-leader");
        let external = config.external_dns.expect("configured");
        assert_eq!(external.namespace, None);
        let o = &external.outputs;
        assert_eq!(
            (o[0].source, o[0].kind, o[0].name.as_str()),
            (
                ExternalDnsSource::EndpointSlices(0),
                ExternalDnsKind::Service,
                "hostport-dns-api-prod-example-ipv4"
            )
        );
        assert_eq!(o[0].annotation_prefix, DEFAULT_ANNOTATION_PREFIX);
        assert_eq!(
            (o[1].source, o[1].kind),
            (
                ExternalDnsSource::EndpointSlices(1),
                ExternalDnsKind::DnsEndpoint
            )
        );
        assert_eq!(o[2].annotation_prefix, "internal.example.com/");
        assert!(
            parse_str(base).unwrap().external_dns.is_none(),
            "off by default"
        );
        for (entry, expected) in [
            (
                "    - endpointSlices: nope\n",
                "externalDns.outputs[0].endpointSlices: no endpointSlices output is named \"nope\"",
            ),
            (
                "    - endpointSlices: api.prod.example/IPv4\n      annotationPrefix: external-dns\n",
                "externalDns.outputs[0].annotationPrefix",
            ),
            (
                "    - endpointSlices: api.prod.example/IPv4\n      name: Api\n",
                "externalDns.outputs[0].name",
            ),
            (
                "    - endpointSlices: api.prod.example/IPv4\n    - endpointSlices: api.prod.example/IPv4\n",
                "externalDns.outputs[1]: another output writes",
            ),
            (
                "    - pods: 0\n      kind: DNSEndpoint\n",
                "externalDns.outputs[0].pods: there is no pods entry 0 (there are 0, from 0)",
            ),
            (
                "    - kind: DNSEndpoint\n",
                "externalDns.outputs[0]: name either `endpointSlices`",
            ),
            (
                "    - endpointSlices: api.prod.example/IPv4\n      pods: 0\n",
                "externalDns.outputs[0]: name either `endpointSlices`",
            ),
        ] {
            let err = parse_str(&format!("{base}externalDns:\n  outputs:\n{entry}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{entry}: {err}");
        }
        let err = parse_str(&format!("{base}externalDns:\n  outputs:\n    - endpointSlices: api.prod.example/IPv4\n      kind: Ingress\n"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("agent.yaml:"), "{err}");
    }

    #[test]
    fn pod_names_are_written_as_one_dns_endpoint_per_pods_entry() {
        let base = "zones:\n  - name: prod.example\npods:\n  - zone: prod.example\n  - zone: prod.example\n    labelKey: gateway.example/name\n";
        let config = parse_str(&format!(
            "{base}externalDns:\n  outputs:\n    - pods: 1\n      kind: DNSEndpoint\n"
        ))
        .unwrap();
        let output = &config.external_dns.expect("configured").outputs[0];
        assert_eq!(output.source, ExternalDnsSource::Pods(1));
        assert_eq!(output.name, "hostport-dns-pods-1");
        let err = parse_str(&format!("{base}externalDns:\n  outputs:\n    - pods: 0\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("externalDns.outputs[0]: pod names need kind DNSEndpoint"),
            "{err}"
        );
    }

    #[test]
    fn reverse_zones_are_networks_on_label_boundaries() {
        let config = parse_str(
            "zones:\n  - name: p.example\nreverseZones:\n  zones: [198.18.0.0/16, \"2001:db8::/48\"]\n  leaveOut: [nodes.p.example]\n",
        )
        .unwrap();
        let zones = config.reverse.zones.unwrap();
        assert_eq!(zones.len(), 2);
        assert_eq!(config.reverse.leave_out[0].to_ascii(), "nodes.p.example.");
        let derived = parse_str("zones:\n  - name: p.example\n").unwrap();
        assert_eq!(derived.reverse.zones, None, "derived by default");
        let err =
            parse_str("zones:\n  - name: p.example\nreverseZones:\n  zones: [198.18.0.0/20]\n")
                .unwrap_err();
        assert!(err.to_string().contains("reverseZones.zones"), "{err}");
    }
}
