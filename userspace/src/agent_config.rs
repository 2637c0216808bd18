//! The agent's configuration file (YAML): zones (with optional static records, in the record
//! file's format), how to reach the API server, the Kubernetes record sources, and what else
//! the agent serves and writes. Validated with errors naming the file, line and reason.
//!
//! Each section's grammar, checks and compiled form live beside the code it configures
//! (`sources::kube::config`, `clients::config`, `outputs::config`, `transfer::config`,
//! `update::config`, `zone`); this module assembles them and checks what crosses sections (a
//! source's zone is served, an external-dns output names an existing source).
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

use hostport_dns_core::{
    dns::message::{SrvTargetCompression, UdpCeiling},
    table::{Network, ReverseConfig},
    zone::{ZoneSpec, check_zones_do_not_overlap},
};

use crate::{
    clients::{ClientsConfig, config::ClientsEntry},
    name_grammar::parse_name,
    outputs::config::{ExternalDnsEntry, LeaderElectionEntry, OutputsConfig},
    sources::{
        Snapshot,
        file::{self, FileError},
        kube::{
            access::KubernetesAccess,
            config::{EndpointSliceEntry, KubeConfig, PodEntry},
            node_rules::NodesEntry,
        },
    },
    transfer::config::{TransferConfig, TransferEntry},
    update::{UpdateEntry, UpdateTarget, config::check_distinct},
    zone_entry::ZoneEntry,
};

/// The whole configuration, each section as the code it configures reads it.
#[derive(Clone, Debug, Default)]
pub struct AgentConfig {
    /// Zones and their static records.
    pub zones: Snapshot,
    /// `kubernetes`, `pods`, `endpointSlices`, `nodes`: the Kubernetes source's.
    pub kube: KubeConfig,
    /// The reverse zones served.
    pub reverse: ReverseConfig,
    /// Who is served and how much.
    pub clients: ClientsConfig,
    /// Zone transfers to secondaries (None: AXFR and IXFR are refused).
    pub transfer: Option<TransferConfig>,
    /// RFC 2136 UPDATEs to existing primaries (empty: none).
    pub update: Vec<UpdateTarget>,
    /// `externalDns` and `leaderElection`: the outputs'.
    pub outputs: OutputsConfig,
    /// The ceiling on UDP answers, when the file sets one.
    pub udp_max_payload: Option<UdpCeiling>,
    /// When SRV targets are compressed, when the file says.
    pub srv_target_compression: Option<SrvTargetCompression>,
}

impl AgentConfig {
    /// Whether any Kubernetes source is configured.
    pub fn uses_kubernetes(&self) -> bool {
        self.kube.uses_kubernetes()
    }

    /// Whether one agent is elected (by the `leaderElection` Lease) to write for the others:
    /// with external-dns outputs, and with RFC 2136 updates from agents that reach the API
    /// server anyway or were told to elect (`leaderElection` given).
    pub fn elects(&self) -> bool {
        self.outputs.external_dns.is_some()
            || (!self.update.is_empty()
                && (self.uses_kubernetes() || self.outputs.leader_election.given))
    }
}

/// The agent's configuration file (`run --config`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "hostport-dns configuration file")]
struct ConfigFile {
    /// The zones served: each apex with its SOA, TTL and static records.
    #[serde(default)]
    zones: Vec<ZoneEntry>,
    #[serde(default)]
    kubernetes: KubernetesAccess,
    /// Pods as records: the Ready pods carrying a label key, as `<label value>.<namespace>` in a
    /// zone.
    #[serde(default)]
    pods: Vec<PodEntry>,
    /// EndpointSlices as records: configured names for a Service's endpoints (`default/kubernetes`:
    /// the API servers).
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
    /// When SRV targets are compressed: `to-fit` (the default: in full whenever the SRV records
    /// fit so, compressed where the alternative is a truncated answer to a client offering more
    /// than 1232 bytes over UDP) or `never` (RFC 2782 always: truncated when they do not fit).
    /// `--srv-target-compression` overrides it.
    #[serde(default)]
    #[schemars(with = "Option<schema::SrvTargetCompression>")]
    srv_target_compression: Option<String>,
    /// Which nodes' pods leave the answers made from pods (API-server records keep every
    /// server).
    #[serde(default)]
    nodes: NodesEntry,
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
    let file: ConfigFile = file::from_yaml(text, path)?;
    let invalid = |reason: String| FileError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let mut config = AgentConfig {
        clients: file.clients.compile().map_err(invalid)?,
        transfer: file
            .transfer
            .map(TransferEntry::compile)
            .transpose()
            .map_err(invalid)?,
        udp_max_payload: file
            .udp_max_payload
            .map(|bytes| UdpCeiling::new(bytes).map_err(|e| format!("udpMaxPayload: {e}")))
            .transpose()
            .map_err(invalid)?,
        srv_target_compression: file
            .srv_target_compression
            .map(|text| {
                text.parse::<SrvTargetCompression>()
                    .map_err(|e| format!("srvTargetCompression: {e}"))
            })
            .transpose()
            .map_err(invalid)?,
        ..AgentConfig::default()
    };
    config.kube.kubernetes = file.kubernetes;
    config.kube.nodes = file.nodes.compile().map_err(invalid)?;
    config.outputs.leader_election = file
        .leader_election
        .map(LeaderElectionEntry::compile)
        .transpose()
        .map_err(invalid)?
        .unwrap_or_default();
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
    if let Some(transfer) = &config.transfer {
        transfer.check_catalog(&zones).map_err(invalid)?;
    }
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
    let mut pods = Vec::new();
    for (i, entry) in file.pods.into_iter().enumerate() {
        let what = format!("pods[{i}]");
        let zone = zone_named(entry.zone(), &what)?;
        pods.push(entry.compile(&what, zone).map_err(invalid)?);
    }
    let mut endpoint_slices = Vec::new();
    for (i, entry) in file.endpoint_slices.into_iter().enumerate() {
        let what = format!("endpointSlices[{i}]");
        let zone = zone_named(entry.zone(), &what)?;
        let output = entry
            .compile(&what, zone, &config.kube.kubernetes, &endpoint_slices)
            .map_err(invalid)?;
        endpoint_slices.push(output);
    }
    config.kube.pods = pods;
    config.kube.endpoint_slices = endpoint_slices;
    config.outputs.external_dns = file
        .external_dns
        .map(|e| e.compile(&config.kube.endpoint_slices, config.kube.pods.len()))
        .transpose()
        .map_err(invalid)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        clients::Outside,
        outputs::config::{
            DEFAULT_ANNOTATION_PREFIX, ExternalDnsKind, ExternalDnsSource, LeaderElection,
        },
        sources::kube::config::{
            AddressSource, DEFAULT_ENDPOINT_TTL, DEFAULT_LABEL_KEY, DottedLabelValues,
        },
    };

    fn parse_str(text: &str) -> Result<AgentConfig, FileError> {
        parse(text, Path::new("agent.yaml"))
    }

    #[test]
    fn a_static_name_given_twice_is_an_error_not_a_lost_record() {
        let err = parse(
            "zones:\n  - name: example\n    records:\n      web: 198.18.0.1\n      web: 198.18.0.2\n",
            Path::new("agent.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "agent.yaml:5:7: duplicate mapping key `web` is not allowed here"
        );
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
    fn srv_target_compression_is_read_and_checked() {
        let read = |text: &str| parse_str(text).map(|c| c.srv_target_compression);
        assert_eq!(
            read("srvTargetCompression: never\n").ok(),
            Some(Some(SrvTargetCompression::Never))
        );
        assert_eq!(
            read("srvTargetCompression: to-fit\n").ok(),
            Some(Some(SrvTargetCompression::ToFit))
        );
        assert_eq!(read("zones: []\n").ok(), Some(None));
        let error = read("srvTargetCompression: always\n")
            .expect_err("not a choice")
            .to_string();
        assert!(
            error.contains("srvTargetCompression") && error.contains("to-fit"),
            "{error}"
        );
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
        assert_eq!(config.kube.pods[0].label_key, DEFAULT_LABEL_KEY);
        assert!(config.kube.pods[0].strict_host_port && config.kube.pods[0].srv);
        let e = &config.kube.endpoint_slices[0];
        assert_eq!(
            (e.namespace.as_str(), e.service.as_str()),
            ("default", "kubernetes")
        );
        assert_eq!(e.hostnames[0].to_string(), "api.prod.example.");
        assert_eq!(e.name, "api.prod.example/IPv4");
        assert_eq!(e.address_source, AddressSource::NodeInternal);
        assert_eq!(e.ttl, DEFAULT_ENDPOINT_TTL);
        assert!(config.kube.needs_nodes());
    }

    #[test]
    fn hostnames_are_relative_absolute_or_the_apex() {
        let config = parse_str(
            "zones:\n  - name: prod.example\nendpointSlices:\n  - zone: prod.example\n    hostnames: [api, Api2.Prod.Example., \"@\", k8s.api]\n",
        )
        .unwrap();
        let names: Vec<String> = config.kube.endpoint_slices[0]
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
        let names: Vec<&str> = v6
            .kube
            .endpoint_slices
            .iter()
            .map(|o| o.name.as_str())
            .collect();
        assert_eq!(names, ["api.prod.example/IPv4", "api.prod.example/IPv6"]);
        let named = two("    name: api-again\n").unwrap();
        assert_eq!(named.kube.endpoint_slices[1].name, "api-again");
    }

    #[test]
    fn a_health_probe_inherits_the_api_server_access_and_its_errors_name_the_field() {
        let with = |probe: &str| {
            parse_str(&format!(
                "zones:\n  - name: p.example\nkubernetes:\n  caFile: /etc/k8s/ca.crt\n  tlsServerName: kubernetes.default.svc\nendpointSlices:\n  - zone: p.example\n    hostnames: [api]\n{probe}"
            ))
        };
        let config = with("    healthProbe: {intervalSeconds: 0.5}\n").unwrap();
        let probe = config.kube.endpoint_slices[0]
            .health_probe
            .as_ref()
            .unwrap();
        assert_eq!(probe.interval, std::time::Duration::from_millis(500));
        assert_eq!(probe.timeout, std::time::Duration::from_millis(250));
        assert_eq!(probe.ca_file, std::path::PathBuf::from("/etc/k8s/ca.crt"));
        assert_eq!(
            probe.tls_server_name.as_deref(),
            Some("kubernetes.default.svc")
        );
        assert_eq!(with("").unwrap().kube.endpoint_slices[0].health_probe, None);
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
            .map(|c| c.kube.pods[0].clone())
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
            config.outputs.leader_election,
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
        assert_eq!(config.outputs.leader_election, LeaderElection::default());
        assert_eq!(
            config.outputs.leader_election.lease_name,
            "hostport-dns-leader"
        );
        let external = config.outputs.external_dns.expect("configured");
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
            parse_str(base).unwrap().outputs.external_dns.is_none(),
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
        let output = &config.outputs.external_dns.expect("configured").outputs[0];
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
