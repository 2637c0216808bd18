//! External-dns outputs: the records an `endpointSlices` output serves, or every pod name of a
//! `pods` entry, written as the objects external-dns reads, by the agent that holds the lease
//! ([`super::leader`]).
//!
//! Two kinds, per output: a headless Service (`clusterIP: None`, no selector, no port) annotated
//! as kuberture annotates it (`<prefix>hostname`: the names without their final dot,
//! comma-separated; `<prefix>target`: the addresses; `<prefix>ttl`), for external-dns's
//! `service` source; or a `DNSEndpoint` (`externaldns.k8s.io/v1alpha1`, its `crd` source), one
//! endpoint per name and address family (pod names only go there: each has its own targets). An
//! output that serves no address has no object (external-dns then removes its records, as the
//! names answer no address).
//!
//! What the writer owns is labelled `app.kubernetes.io/managed-by: hostport-dns` and
//! `hostport-dns/lease: <lease>`; it lists only those, and creates, replaces (with the
//! `resourceVersion` read, so a concurrent change fails rather than being overwritten) and
//! deletes nothing else. It writes only what differs: [`desired`] and [`plan`] are pure, the
//! loop ([`Writer::run`]) reads, plans and writes.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::Duration,
};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions},
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::{info, warn};

use hostport_dns_core::{
    dns::WireName,
    records::{RecordData, SourceRecord},
    zone::ZoneSpec,
};

use crate::{
    metrics::{ExternalDnsWriteLabel, Metrics},
    outputs::config::{ExternalDnsKind, ExternalDnsSource, OutputsConfig},
    sources::{
        GroupKey, Groups,
        kube::{
            compile::NODES_LABEL,
            config::KubeConfig,
            groups::{output_key, pods_prefix},
        },
    },
};

/// The label every object written carries (with [`LEASE_LABEL`]).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "hostport-dns");
/// The lease whose holder writes the object: what the writer lists by, so that two
/// installations in one namespace (two leases) never touch each other's objects.
pub const LEASE_LABEL: &str = "hostport-dns/lease";
/// The output an object belongs to, for people and metrics (`/` becomes `_`: a label value).
pub const OUTPUT_LABEL: &str = "hostport-dns/output";
/// How often the objects are read again while nothing changes (a hand edit is undone).
const RESYNC: Duration = Duration::from_secs(60);
/// How long after a failed write or read the writer tries again.
const RETRY: Duration = Duration::from_secs(5);

/// One external-dns output, resolved against its `endpointSlices` or `pods` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The `endpointSlices` output's name, or `pods/<index>` (metrics, logs).
    pub output: String,
    /// Where its records are.
    pub source: ExternalDnsSource,
    pub kind: ExternalDnsKind,
    /// The object's name.
    pub name: String,
    pub annotation_prefix: String,
    /// The names written, in order (None: every name with addresses, in DNS order).
    pub hostnames: Option<Vec<Name>>,
    /// Names at or below this one are not written: the SRV targets `<node>.nodes.<zone>` of pod
    /// sources (glue for the SRV records, which are not written).
    pub leave_out: Option<Name>,
    /// The TTL of records without their own.
    pub ttl: u32,
    pub lease: String,
}

impl Output {
    /// Every configured external-dns output of `config` (none without `externalDns`), its
    /// sources taken from `kube` and its TTLs from `zones`.
    pub fn all(config: &OutputsConfig, kube: &KubeConfig, zones: &[ZoneSpec]) -> Vec<Output> {
        let Some(external) = &config.external_dns else {
            return Vec::new();
        };
        external
            .outputs
            .iter()
            .filter_map(|o| {
                let (output, hostnames, ttl, leave_out) = match o.source {
                    ExternalDnsSource::EndpointSlices(i) => {
                        let source = kube.endpoint_slices.get(i)?;
                        (
                            source.name.clone(),
                            Some(source.hostnames.clone()),
                            source.ttl,
                            None,
                        )
                    }
                    ExternalDnsSource::Pods(i) => {
                        let zone = &kube.pods.get(i)?.zone;
                        let ttl = zones
                            .iter()
                            .find(|z| &z.apex == zone)
                            .map_or(hostport_dns_common::limits::DEFAULT_TTL, |z| z.ttl);
                        let nodes = Name::from_labels([NODES_LABEL.as_bytes()])
                            .ok()
                            .and_then(|n| n.append_domain(zone).ok());
                        (format!("pods/{i}"), None, ttl, nodes)
                    }
                };
                Some(Output {
                    output,
                    source: o.source,
                    kind: o.kind,
                    name: o.name.clone(),
                    annotation_prefix: o.annotation_prefix.clone(),
                    hostnames,
                    leave_out,
                    ttl,
                    lease: config.leader_election.lease_name.clone(),
                })
            })
            .collect()
    }

    /// The records this output writes from: its group, or every pod group of its source.
    pub fn records(&self, groups: &Groups) -> Vec<SourceRecord> {
        match self.source {
            ExternalDnsSource::EndpointSlices(i) => groups
                .get(&output_key(i))
                .map_or_else(Vec::new, |g| g.to_vec()),
            ExternalDnsSource::Pods(i) => {
                let prefix = pods_prefix(i);
                groups
                    .range(GroupKey::from(prefix.as_str())..)
                    .take_while(|(key, _)| key.starts_with(&prefix))
                    .flat_map(|(_, group)| group.iter())
                    .collect()
            }
        }
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
            (LEASE_LABEL.to_owned(), self.lease.clone()),
            (OUTPUT_LABEL.to_owned(), label_value(&self.output)),
        ])
    }
}

/// `text` as a label value: `/` (in default output names) as `_`, at most 63 characters, ending
/// with a letter or digit.
pub fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// The API resource of `kind`.
pub fn resource(kind: ExternalDnsKind) -> ApiResource {
    match kind {
        ExternalDnsKind::Service => ApiResource::erase::<Service>(&()),
        ExternalDnsKind::DnsEndpoint => ApiResource {
            group: "externaldns.k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "externaldns.k8s.io/v1alpha1".into(),
            kind: "DNSEndpoint".into(),
            plural: "dnsendpoints".into(),
        },
    }
}

/// What of an object the writer owns: its labels (only the writer's keys), its annotations
/// (only the keys it writes: others' annotations, a webhook's say, are left as they are), and
/// the part of its spec the writer sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: Value,
}

/// One object as the writer wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub kind: ExternalDnsKind,
    pub name: String,
    /// The output, for metrics and logs.
    pub output: String,
    pub owned: Owned,
}

/// The addresses each name of `output` is served with (from its records), in order.
fn served(output: &Output, group: &[SourceRecord]) -> Vec<(Name, Vec<IpAddr>, u32)> {
    let every: Vec<Name>;
    let hostnames = match &output.hostnames {
        Some(listed) => listed,
        None => {
            let names: BTreeSet<&WireName> = group
                .iter()
                .filter(|r| matches!(r.data, RecordData::A(_) | RecordData::Aaaa(_)))
                .map(|r| &r.name)
                .collect();
            let mut names: Vec<Name> = names
                .into_iter()
                .map(WireName::to_name)
                .filter(|n| !output.leave_out.as_ref().is_some_and(|l| l.zone_of(n)))
                .collect();
            // In DNS order (RFC 4034 §6.1): stable, so an unchanged set is never rewritten.
            names.sort();
            every = names;
            &every
        }
    };
    hostnames
        .iter()
        .filter_map(|hostname| {
            let mut ttl = output.ttl;
            let wire = WireName::from_name(hostname);
            let mut addresses: Vec<IpAddr> = group
                .iter()
                .filter(|r| r.name == wire)
                .filter_map(|r| {
                    ttl = r.ttl.unwrap_or(ttl);
                    match r.data {
                        RecordData::A(a) => Some(IpAddr::V4(a)),
                        RecordData::Aaaa(a) => Some(IpAddr::V6(a)),
                        RecordData::Srv(_) => None,
                    }
                })
                .collect();
            addresses.sort();
            addresses.dedup();
            (!addresses.is_empty()).then(|| (hostname.clone(), addresses, ttl))
        })
        .collect()
}

/// A name as external-dns writes it: without the final dot.
fn external_name(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_owned()
}

/// The object `output` should be, given the records it serves (`group`); None when it serves
/// no address.
pub fn desired(output: &Output, group: &[SourceRecord]) -> Option<Desired> {
    let served = served(output, group);
    if served.is_empty() {
        return None;
    }
    let owned = match output.kind {
        ExternalDnsKind::Service => {
            let names: Vec<String> = served.iter().map(|(n, _, _)| external_name(n)).collect();
            let targets: BTreeSet<IpAddr> = served.iter().flat_map(|(_, a, _)| a.clone()).collect();
            let targets: Vec<String> = targets.iter().map(IpAddr::to_string).collect();
            let ttl = served
                .iter()
                .map(|(_, _, ttl)| *ttl)
                .min()
                .unwrap_or(output.ttl);
            let prefix = &output.annotation_prefix;
            Owned {
                labels: output.labels(),
                annotations: BTreeMap::from([
                    (format!("{prefix}hostname"), names.join(",")),
                    (format!("{prefix}target"), targets.join(",")),
                    (format!("{prefix}ttl"), ttl.to_string()),
                ]),
                spec: headless_spec(),
            }
        }
        ExternalDnsKind::DnsEndpoint => {
            // One endpoint per name and record type (a pod name may have both).
            let endpoints: Vec<Value> = served
                .iter()
                .flat_map(|(name, addresses, ttl)| {
                    [("A", true), ("AAAA", false)].into_iter().filter_map(
                        move |(record_type, v4)| {
                            let targets: Vec<String> = addresses
                                .iter()
                                .filter(|a| a.is_ipv4() == v4)
                                .map(IpAddr::to_string)
                                .collect();
                            (!targets.is_empty()).then(|| {
                                json!({
                                    "dnsName": external_name(name),
                                    "recordType": record_type,
                                    "targets": targets,
                                    "recordTTL": ttl,
                                })
                            })
                        },
                    )
                })
                .collect();
            Owned {
                labels: output.labels(),
                annotations: BTreeMap::new(),
                spec: json!({ "endpoints": endpoints }),
            }
        }
    };
    Some(Desired {
        kind: output.kind,
        name: output.name.clone(),
        output: output.output.clone(),
        owned,
    })
}

/// The part of a Service's spec the writer sets: headless, of type ClusterIP, no selector.
fn headless_spec() -> Value {
    json!({ "type": "ClusterIP", "clusterIP": "None" })
}

/// What the writer owns of `object`, as it is now, to compare with `want` (of the same kind).
pub fn owned(want: &Desired, object: &DynamicObject) -> Owned {
    let kind = want.kind;
    let labels = object
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| [MANAGED_BY.0, LEASE_LABEL, OUTPUT_LABEL].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let annotations = object
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| want.owned.annotations.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let spec = &object.data["spec"];
    let spec = match kind {
        ExternalDnsKind::Service => {
            let mut owned = json!({});
            for field in ["type", "clusterIP", "selector", "ports"] {
                let value = &spec[field];
                let empty = value.is_null()
                    || value.as_object().is_some_and(|o| o.is_empty())
                    || value.as_array().is_some_and(|a| a.is_empty());
                if !empty {
                    owned[field] = value.clone();
                }
            }
            owned
        }
        ExternalDnsKind::DnsEndpoint => {
            let endpoints: Vec<Value> = spec["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    json!({
                        "dnsName": e["dnsName"],
                        "recordType": e["recordType"],
                        "targets": e["targets"],
                        "recordTTL": e["recordTTL"],
                    })
                })
                .collect();
            json!({ "endpoints": endpoints })
        }
    };
    Owned {
        labels,
        annotations,
        spec,
    }
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Create(DynamicObject),
    /// The object as read, brought in line (its `resourceVersion` kept).
    Replace(DynamicObject),
    /// The object of this name (the writer deletes it only if it is still the one read).
    Delete(String),
}

/// The writes that bring `actual` (the objects of one kind carrying the writer's labels) to
/// `desired` (of that kind): nothing when they agree.
pub fn plan(
    namespace: &str,
    desired: &[&Desired],
    actual: &[DynamicObject],
    resource: &ApiResource,
) -> Vec<Write> {
    let mut writes = Vec::new();
    let by_name: BTreeMap<&str, &DynamicObject> = actual
        .iter()
        .filter_map(|o| Some((o.metadata.name.as_deref()?, o)))
        .collect();
    for want in desired {
        match by_name.get(want.name.as_str()) {
            None => writes.push(Write::Create(created(namespace, want, resource))),
            Some(object) if owned(want, object) != want.owned => {
                writes.push(Write::Replace(replaced(object, want)));
            }
            Some(_) => {}
        }
    }
    let wanted: BTreeSet<&str> = desired.iter().map(|d| d.name.as_str()).collect();
    for name in by_name.keys() {
        if !wanted.contains(name) {
            writes.push(Write::Delete((*name).to_owned()));
        }
    }
    writes
}

fn created(namespace: &str, want: &Desired, resource: &ApiResource) -> DynamicObject {
    let mut object = DynamicObject::new(&want.name, resource).within(namespace);
    object.metadata.labels = Some(want.owned.labels.clone());
    if !want.owned.annotations.is_empty() {
        object.metadata.annotations = Some(want.owned.annotations.clone());
    }
    object.data = json!({ "spec": want.owned.spec });
    object
}

fn replaced(object: &DynamicObject, want: &Desired) -> DynamicObject {
    let mut object = object.clone();
    let labels = object.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(want.owned.labels.clone());
    if !want.owned.annotations.is_empty() {
        object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(want.owned.annotations.clone());
    }
    match want.kind {
        ExternalDnsKind::Service => {
            if !object.data["spec"].is_object() {
                object.data["spec"] = json!({});
            }
            let spec = &mut object.data["spec"];
            if let Some(fields) = spec.as_object_mut() {
                fields.remove("selector");
                fields.remove("ports");
            }
            spec["type"] = want.owned.spec["type"].clone();
            spec["clusterIP"] = want.owned.spec["clusterIP"].clone();
        }
        ExternalDnsKind::DnsEndpoint => object.data["spec"] = want.owned.spec.clone(),
    }
    object
}

/// The writer: brings the objects in line with what the agent serves, while it leads.
pub struct Writer {
    pub client: Client,
    pub namespace: String,
    pub lease: String,
    pub outputs: Vec<Output>,
    pub metrics: std::sync::Arc<Metrics>,
}

impl Writer {
    /// Runs until the agent stops: whenever the served groups or the leadership change (and
    /// every [`RESYNC`]), while leading, reads the objects and writes what differs.
    pub async fn run(
        self,
        mut groups: watch::Receiver<Option<Groups>>,
        mut leading: watch::Receiver<bool>,
    ) {
        loop {
            let now_leading = *leading.borrow_and_update();
            let current = groups.borrow_and_update().clone();
            let pause = match current {
                Some(groups) if now_leading => {
                    if self.reconcile(&groups, &leading).await {
                        RESYNC
                    } else {
                        RETRY
                    }
                }
                _ => RESYNC,
            };
            tokio::select! {
                changed = groups.changed() => if changed.is_err() { return },
                changed = leading.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One pass over every kind in use; false if anything failed.
    async fn reconcile(&self, groups: &Groups, leading: &watch::Receiver<bool>) -> bool {
        let desired: Vec<Desired> = self
            .outputs
            .iter()
            .filter_map(|o| desired(o, &o.records(groups)))
            .collect();
        let mut ok = true;
        let kinds: BTreeSet<ExternalDnsKind> = self.outputs.iter().map(|o| o.kind).collect();
        for kind in kinds {
            let of_kind: Vec<&Desired> = desired.iter().filter(|d| d.kind == kind).collect();
            ok &= self.reconcile_kind(kind, &of_kind, leading).await;
        }
        ok
    }

    async fn reconcile_kind(
        &self,
        kind: ExternalDnsKind,
        desired: &[&Desired],
        leading: &watch::Receiver<bool>,
    ) -> bool {
        let resource = resource(kind);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        let selector = format!(
            "{}={},{LEASE_LABEL}={}",
            MANAGED_BY.0, MANAGED_BY.1, self.lease
        );
        let actual = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list.items,
            Err(err) => {
                let hint = status_code(&err).filter(|c| *c == 404).map(|_| {
                    format!(
                        "is the {} kind installed (external-dns's CRD)?",
                        resource.kind
                    )
                });
                warn!(kind = %resource.kind, namespace = %self.namespace, %err, hint = hint.as_deref().unwrap_or(""), "cannot list the external-dns objects; retrying");
                return false;
            }
        };
        let mut ok = true;
        for write in plan(&self.namespace, desired, &actual, &resource) {
            // A leader that lost the lease mid-pass writes nothing more.
            if !*leading.borrow() {
                return ok;
            }
            let (name, output) = match &write {
                Write::Create(o) | Write::Replace(o) => (
                    o.metadata.name.clone().unwrap_or_default(),
                    output_of(desired, o),
                ),
                Write::Delete(name) => (name.clone(), deleted_output(&actual, name)),
            };
            let (verb, result) = match write {
                Write::Create(object) => (
                    "created",
                    api.create(&PostParams::default(), &object).await.map(drop),
                ),
                Write::Replace(object) => (
                    "updated",
                    api.replace(&name, &PostParams::default(), &object)
                        .await
                        .map(drop),
                ),
                Write::Delete(_) => (
                    "deleted",
                    api.delete(&name, &still_the_one_read(&actual, &name))
                        .await
                        .map(drop),
                ),
            };
            let result = match result {
                Ok(()) => {
                    info!(kind = %resource.kind, namespace = %self.namespace, %name, %output, "external-dns object {verb}");
                    verb
                }
                Err(err) => {
                    let hint = (verb == "created" && status_code(&err) == Some(409)).then_some(
                        "an object of this name exists without hostport-dns's labels: it is left alone; give the output another `name`",
                    );
                    warn!(kind = %resource.kind, namespace = %self.namespace, %name, %output, %err, hint = hint.unwrap_or(""), "cannot write the external-dns object; retrying");
                    ok = false;
                    "error"
                }
            };
            self.metrics
                .external_dns_writes
                .get_or_create(&ExternalDnsWriteLabel {
                    output,
                    result: result.to_owned(),
                })
                .inc();
        }
        ok
    }
}

/// The HTTP status an API error carries.
fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A delete of the object `name` as read in `actual` only: another object of that name (its
/// owner deleted ours and made its own since the list) has another uid, and a changed one
/// another `resourceVersion`; the API server then answers 409 and the next pass looks again.
fn still_the_one_read(actual: &[DynamicObject], name: &str) -> DeleteParams {
    let read = actual
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some(name));
    DeleteParams {
        preconditions: read.map(|o| Preconditions {
            uid: o.metadata.uid.clone(),
            resource_version: o.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    }
}

/// The output `object` is written for.
fn output_of(desired: &[&Desired], object: &DynamicObject) -> String {
    desired
        .iter()
        .find(|d| Some(d.name.as_str()) == object.metadata.name.as_deref())
        .map_or_else(String::new, |d| d.output.clone())
}

/// The output a deleted object was written for (its label).
fn deleted_output(actual: &[DynamicObject], name: &str) -> String {
    actual
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some(name))
        .and_then(|o| o.metadata.labels.as_ref()?.get(OUTPUT_LABEL).cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(kind: ExternalDnsKind) -> Output {
        Output {
            output: "api.prod.example/IPv4".into(),
            source: ExternalDnsSource::EndpointSlices(0),
            kind,
            name: "hostport-dns-api".into(),
            annotation_prefix: "external-dns.alpha.kubernetes.io/".into(),
            hostnames: Some(vec![
                Name::from_ascii("api.prod.example.").unwrap(),
                Name::from_ascii("k8s.prod.example.").unwrap(),
            ]),
            leave_out: None,
            ttl: 60,
            lease: "hostport-dns-leader".into(),
        }
    }

    fn group(addresses: &[&str]) -> Vec<SourceRecord> {
        let mut records = Vec::new();
        for name in ["api.prod.example.", "k8s.prod.example."] {
            for address in addresses {
                records.push(SourceRecord {
                    name: WireName::from_name(&Name::from_ascii(name).unwrap()),
                    ttl: Some(30),
                    data: RecordData::from(address.parse::<IpAddr>().unwrap()),
                });
            }
        }
        records
    }

    #[test]
    fn a_service_carries_the_kuberture_annotations_and_is_headless() {
        let want = desired(
            &output(ExternalDnsKind::Service),
            &group(&["198.18.0.12", "198.18.0.11"]),
        )
        .expect("addresses: an object");
        let a = &want.owned.annotations;
        assert_eq!(
            a["external-dns.alpha.kubernetes.io/hostname"],
            "api.prod.example,k8s.prod.example"
        );
        assert_eq!(
            a["external-dns.alpha.kubernetes.io/target"],
            "198.18.0.11,198.18.0.12"
        );
        assert_eq!(a["external-dns.alpha.kubernetes.io/ttl"], "30");
        assert_eq!(
            want.owned.spec,
            json!({"type": "ClusterIP", "clusterIP": "None"})
        );
        assert_eq!(want.owned.labels[OUTPUT_LABEL], "api.prod.example_IPv4");
        assert!(desired(&output(ExternalDnsKind::Service), &[]).is_none());
    }

    #[test]
    fn a_dns_endpoint_has_one_endpoint_per_name() {
        let want = desired(
            &output(ExternalDnsKind::DnsEndpoint),
            &group(&["198.18.0.11"]),
        )
        .expect("an object");
        assert_eq!(
            want.owned.spec["endpoints"][1],
            json!({"dnsName": "k8s.prod.example", "recordType": "A", "targets": ["198.18.0.11"], "recordTTL": 30})
        );
    }

    #[test]
    fn pod_names_each_get_their_own_endpoints_per_family() {
        let pods = Output {
            output: "pods/0".into(),
            source: ExternalDnsSource::Pods(0),
            hostnames: None,
            leave_out: Some(Name::from_ascii("nodes.prod.example.").unwrap()),
            ttl: 5,
            ..output(ExternalDnsKind::DnsEndpoint)
        };
        let record = |name: &str, address: &str| SourceRecord {
            name: WireName::from_name(&Name::from_ascii(name).unwrap()),
            ttl: None,
            data: RecordData::from(address.parse::<IpAddr>().unwrap()),
        };
        // Two pods of one name (two nodes), one dual-stack pod of another.
        let records = [
            record("web.ingress.prod.example.", "198.18.0.12"),
            record("edge.gw.prod.example.", "198.18.0.13"),
            record("edge.gw.prod.example.", "2001:db8::13"),
            record("web.ingress.prod.example.", "198.18.0.11"),
            // An SRV target's address: not a pod name.
            record("cp-0.nodes.prod.example.", "198.18.0.11"),
        ];
        let want = desired(&pods, &records).expect("an object");
        assert_eq!(
            want.owned.spec["endpoints"],
            json!([
                {"dnsName": "edge.gw.prod.example", "recordType": "A", "targets": ["198.18.0.13"], "recordTTL": 5},
                {"dnsName": "edge.gw.prod.example", "recordType": "AAAA", "targets": ["2001:db8::13"], "recordTTL": 5},
                {"dnsName": "web.ingress.prod.example", "recordType": "A", "targets": ["198.18.0.11", "198.18.0.12"], "recordTTL": 5},
            ])
        );
        let mut groups = Groups::new();
        groups.insert(
            GroupKey::from("pod/0/gw/edge-1"),
            records[1..3].to_vec().into(),
        );
        groups.insert(
            GroupKey::from("pod/0/ingress/web-1"),
            vec![records[0].clone()].into(),
        );
        groups.insert(
            GroupKey::from("pod/1/ingress/other"),
            vec![record("x.prod.example.", "198.18.0.99")].into(),
        );
        groups.insert(
            GroupKey::from("endpoints/0"),
            vec![record("api.prod.example.", "198.18.0.98")].into(),
        );
        let read: Vec<String> = pods
            .records(&groups)
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(read.len(), 3, "the pod groups of entry 0 alone: {read:?}");
    }

    #[test]
    fn the_plan_creates_replaces_and_deletes_only_what_differs() {
        for kind in [ExternalDnsKind::Service, ExternalDnsKind::DnsEndpoint] {
            let resource = resource(kind);
            let want = desired(&output(kind), &group(&["198.18.0.11"])).expect("an object");
            let create = plan("ns", &[&want], &[], &resource);
            let [Write::Create(object)] = create.as_slice() else {
                panic!("{create:?}")
            };
            // As the API server gives it back: defaults added, a version.
            let mut stored = object.clone();
            stored.metadata.resource_version = Some("5".into());
            if kind == ExternalDnsKind::Service {
                stored.data["spec"]["clusterIPs"] = json!(["None"]);
                stored.data["spec"]["sessionAffinity"] = json!("None");
            }
            assert_eq!(plan("ns", &[&want], &[stored.clone()], &resource), []);
            let moved = desired(&output(kind), &group(&["198.18.0.12"])).expect("an object");
            let replace = plan("ns", &[&moved], &[stored.clone()], &resource);
            let [Write::Replace(object)] = replace.as_slice() else {
                panic!("{replace:?}")
            };
            assert_eq!(object.metadata.resource_version.as_deref(), Some("5"));
            assert_eq!(owned(&moved, object), moved.owned);
            let mut other = stored.clone();
            other.metadata.name = Some("gone".into());
            assert_eq!(
                plan("ns", &[&want], &[stored, other], &resource),
                [Write::Delete("gone".into())]
            );
        }
    }

    #[test]
    fn annotations_others_add_are_neither_compared_nor_removed() {
        let resource = resource(ExternalDnsKind::Service);
        let want = desired(&output(ExternalDnsKind::Service), &group(&["198.18.0.11"]))
            .expect("an object");
        let created = plan("ns", &[&want], &[], &resource);
        let [Write::Create(stored)] = created.as_slice() else {
            panic!("{created:?}")
        };
        let mut stored = stored.clone();
        stored.metadata.resource_version = Some("5".into());
        stored
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("webhook.example/injected".into(), "yes".into());
        assert_eq!(plan("ns", &[&want], &[stored.clone()], &resource), []);
        let moved = desired(&output(ExternalDnsKind::Service), &group(&["198.18.0.12"]))
            .expect("an object");
        let replace = plan("ns", &[&moved], &[stored], &resource);
        let [Write::Replace(replaced)] = replace.as_slice() else {
            panic!("{replace:?}")
        };
        let annotations = replaced.metadata.annotations.clone().expect("annotations");
        assert_eq!(annotations["webhook.example/injected"], "yes");
        assert_eq!(
            annotations["external-dns.alpha.kubernetes.io/target"],
            "198.18.0.12"
        );
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(
            label_value("api.prod.example/IPv4"),
            "api.prod.example_IPv4"
        );
        assert_eq!(label_value(&"x".repeat(80)).len(), 63);
        assert_eq!(label_value("api/"), "api");
    }
}
