//! The sections of the configuration file for writing to others: `externalDns` (the objects
//! external-dns reads) and `leaderElection` (the Lease that elects the one agent writing them,
//! and sending the RFC 2136 updates).

use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    config_schema as schema,
    sources::kube::{config::EndpointSliceSource, syntax},
};

/// What the outputs read of the configuration.
#[derive(Clone, Debug, Default)]
pub struct OutputsConfig {
    /// Objects written for external-dns (None: off).
    pub external_dns: Option<ExternalDnsConfig>,
    /// The Lease that elects the one agent writing `external_dns` and the updates.
    pub leader_election: LeaderElection,
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
pub(crate) struct LeaderElectionEntry {
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
    pub(crate) fn compile(self) -> Result<LeaderElection, String> {
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
pub(crate) struct ExternalDnsEntry {
    /// Where the objects live; default: the agent's own namespace (`POD_NAMESPACE`, else the
    /// service account's).
    #[schemars(with = "Option<schema::Namespace>")]
    namespace: Option<String>,
    /// The outputs written: each an `endpointSlices` or a `pods` output, in a zone.
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
    pub(crate) fn compile(
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
