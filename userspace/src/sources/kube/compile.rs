//! Kubernetes objects to records: a pure function of what the watchers hold, tested without a
//! cluster.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
};

use hickory_proto::rr::Name;

use hostport_dns_core::{
    dns::WireName,
    records::{RecordData, SourceRecord, Srv},
};

use crate::{
    name_grammar::host_label,
    sources::kube::{
        config::{
            AddressSource, AddressType, DottedLabelValues, EndpointSliceSource, PodAddress,
            PodSource,
        },
        model::{EndpointInfo, NodeInfo, PodInfo, SliceInfo},
        public,
    },
};

/// The label under `nodes.<zone>` SRV targets live.
pub const NODES_LABEL: &str = "nodes";

/// Objects left out, by reason (for logs and metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Label values (or node names) that are not valid DNS labels.
    pub invalid_names: Vec<String>,
}

/// Records of one pod source.
pub fn pod_records<'a>(
    source: &PodSource,
    pods: impl IntoIterator<Item = &'a PodInfo>,
    out: &mut Vec<SourceRecord>,
    skipped: &mut Skipped,
) {
    for pod in pods {
        if !pod.serving
            || source
                .label_value
                .as_ref()
                .is_some_and(|v| *v != pod.label_value)
            || (!source.namespaces.is_empty() && !source.namespaces.contains(&pod.namespace))
            || (source.strict_host_port && pod.host_ports.is_empty())
        {
            continue;
        }
        let Some(name) = pod_name(source, pod) else {
            skipped
                .invalid_names
                .push(format!("{}/{}", pod.namespace, pod.label_value));
            continue;
        };
        let use_host = match source.address {
            PodAddress::Host => true,
            PodAddress::Pod => false,
            PodAddress::Auto => pod.host_network || !pod.host_ports.is_empty(),
        };
        let addresses = if use_host {
            host_addresses(pod)
        } else {
            pod.pod_ips.clone()
        };
        let wire = WireName::from_name(&name);
        for address in addresses {
            out.push(address_record(wire.clone(), None, address));
        }
        if source.srv {
            srv_records(source, pod, &name, out, skipped);
        }
    }
}

/// `<label value>.<namespace>.<zone>`, or None when the value or namespace is no DNS label.
pub fn pod_name(source: &PodSource, pod: &PodInfo) -> Option<Name> {
    value_labels(&pod.label_value, source.dotted_label_values)
        .zip(host_label(&pod.namespace))
        .and_then(|(mut labels, ns)| {
            labels.push(ns);
            Name::from_labels(labels.iter().map(String::as_bytes)).ok()
        })
        .and_then(|n| n.append_domain(&source.zone).ok())
}

/// The records of a pod's topology name: its records at `name` (`<label value>.<namespace>.
/// <zone>`) and below it (SRV), each moved one level down, under `<value>.` (`value` a DNS
/// label); the SRV targets' address records stay where they are, in the pod's own group. A
/// record whose name would grow past 255 bytes is left out.
pub fn topology_records(
    records: &[SourceRecord],
    name: &WireName,
    value: &str,
) -> Vec<SourceRecord> {
    let parent = name.as_bytes();
    records
        .iter()
        .filter_map(|record| {
            let owner = record.name.as_bytes();
            let prefix = owner.strip_suffix(parent)?;
            // On label boundaries only: the prefix is whole labels (or nothing).
            if !record.name.is_in(name) {
                return None;
            }
            let mut wire = Vec::with_capacity(owner.len() + 1 + value.len());
            wire.extend_from_slice(prefix);
            wire.push(u8::try_from(value.len()).ok()?);
            wire.extend_from_slice(value.as_bytes());
            wire.extend_from_slice(parent);
            Some(SourceRecord {
                name: WireName::from_wire(&wire)?,
                ttl: record.ttl,
                data: record.data.clone(),
            })
        })
        .collect()
}

/// The node addresses a hostPort pod is reachable on: the addresses its hostPorts are bound to
/// (`ports[].hostIP`) when every one is bound to one, else all of the node's (`hostIPs`): a port
/// bound to one address does not listen on the node's others.
fn host_addresses(pod: &PodInfo) -> Vec<IpAddr> {
    let bound: Option<Vec<IpAddr>> = pod.host_ports.iter().map(|p| p.host_ip).collect();
    match bound {
        Some(mut bound) if !bound.is_empty() => {
            let mut seen = std::collections::BTreeSet::new();
            bound.retain(|ip| seen.insert(*ip));
            bound
        }
        _ => pod.host_ips.clone(),
    }
}

/// The labels a label value gives: one, or with `labels` for dotted values (coreha writes the
/// value into the name as it is), one per dot-separated part. None when a part is not a DNS label.
fn value_labels(value: &str, dotted: DottedLabelValues) -> Option<Vec<String>> {
    match dotted {
        DottedLabelValues::Reject => host_label(value).map(|label| vec![label]),
        DottedLabelValues::Labels => value.split('.').map(host_label).collect(),
    }
}

/// `_<port>._<proto>.<value>.<namespace>.<zone>` SRV for each named hostPort, its target
/// `<node>.nodes.<zone>` with the node's addresses.
fn srv_records(
    source: &PodSource,
    pod: &PodInfo,
    name: &Name,
    out: &mut Vec<SourceRecord>,
    skipped: &mut Skipped,
) {
    let Some(node) = pod.node_name.as_deref() else {
        return;
    };
    if pod.host_ports.iter().all(|p| p.name.is_none()) {
        return;
    }
    let Some(target) = node_target(node, &source.zone) else {
        skipped.invalid_names.push(format!("node {node}"));
        return;
    };
    let target = WireName::from_name(&target);
    for port in &pod.host_ports {
        let Some(port_name) = port.name.as_deref() else {
            continue;
        };
        let owner = Name::from_labels([
            format!("_{port_name}").as_bytes(),
            format!("_{}", port.protocol).as_bytes(),
        ])
        .ok()
        .and_then(|prefix| prefix.append_name(name).ok());
        let Some(owner) = owner else { continue };
        let srv = Srv {
            priority: 0,
            weight: 1,
            port: port.port,
            target: target.clone(),
        };
        out.push(SourceRecord {
            name: WireName::from_name(&owner),
            ttl: None,
            data: RecordData::Srv(srv),
        });
    }
    for address in &pod.host_ips {
        out.push(address_record(target.clone(), None, *address));
    }
}

/// `<node>.nodes.<zone>` (node names are DNS subdomains).
fn node_target(node: &str, zone: &Name) -> Option<Name> {
    let labels: Vec<String> = node.split('.').map(host_label).collect::<Option<_>>()?;
    let mut labels: Vec<&[u8]> = labels.iter().map(String::as_bytes).collect();
    labels.push(NODES_LABEL.as_bytes());
    Name::from_labels(labels).ok()?.append_domain(zone).ok()
}

fn address_record(name: WireName, ttl: Option<u32>, address: IpAddr) -> SourceRecord {
    SourceRecord {
        name,
        ttl,
        data: address.into(),
    }
}

/// The addresses an EndpointSlice source resolves to now (sorted, no duplicates).
pub fn endpoint_addresses<'a>(
    source: &EndpointSliceSource,
    slices: impl IntoIterator<Item = &'a SliceInfo>,
    nodes: &BTreeMap<String, NodeInfo>,
) -> Vec<IpAddr> {
    endpoint_addresses_without(source, slices, nodes, &BTreeSet::new())
}

/// As [`endpoint_addresses`], without the endpoint addresses in `left_out` (servers failing
/// their health probes): an endpoint whose every address is left out gives nothing, not even
/// its node's addresses.
pub fn endpoint_addresses_without<'a>(
    source: &EndpointSliceSource,
    slices: impl IntoIterator<Item = &'a SliceInfo>,
    nodes: &BTreeMap<String, NodeInfo>,
    left_out: &BTreeSet<IpAddr>,
) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let by_address = NodesByAddress::new(source.address_source, nodes);
    for (_, endpoint) in used_endpoints(source, slices) {
        let mut addresses = endpoint
            .addresses
            .iter()
            .copied()
            .filter(|a| !left_out.contains(a))
            .peekable();
        if addresses.peek().is_none() {
            continue;
        }
        match source.address_source {
            AddressSource::EndpointSlice => out.extend(addresses),
            node_source => {
                let Some(node) = by_address.node_of(endpoint, nodes) else {
                    continue;
                };
                out.extend(node_addresses(node, node_source, source.address_type));
            }
        }
    }
    out.retain(|a| a.is_ipv4() == (source.address_type == AddressType::IPv4));
    out.sort();
    out.dedup();
    out
}

/// The servers a health probe checks: each address of the endpoints the source uses, with its
/// slice's port (the one named `https`, else the first); a slice without a port gives none.
pub fn probe_targets<'a>(
    source: &EndpointSliceSource,
    slices: impl IntoIterator<Item = &'a SliceInfo>,
) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = used_endpoints(source, slices)
        .filter_map(|(slice, endpoint)| Some((slice.port?, endpoint)))
        .flat_map(|(port, endpoint)| {
            endpoint
                .addresses
                .iter()
                .map(move |a| SocketAddr::new(*a, port))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The endpoints a source uses, with their slice: its Service's, usable, and, when the answer
/// is their own addresses, of the source's address family.
fn used_endpoints<'a, 's>(
    source: &'s EndpointSliceSource,
    slices: impl IntoIterator<Item = &'a SliceInfo>,
) -> impl Iterator<Item = (&'a SliceInfo, &'a EndpointInfo)> {
    let family = match source.address_type {
        AddressType::IPv4 => "IPv4",
        AddressType::IPv6 => "IPv6",
    };
    slices
        .into_iter()
        .filter(move |slice| {
            slice.namespace == source.namespace
                && slice.service == source.service
                && (source.address_source != AddressSource::EndpointSlice
                    || slice.address_type == family)
        })
        .flat_map(|slice| slice.endpoints.iter().map(move |e| (slice, e)))
        .filter(move |(_, endpoint)| usable(source, endpoint))
}

/// Whether an endpoint counts, with unset conditions as the EndpointSlice API defines them:
/// ready unset is ready; serving unset defers to ready; terminating unset is not terminating.
fn usable(source: &EndpointSliceSource, endpoint: &EndpointInfo) -> bool {
    let ready = endpoint.ready.unwrap_or(true);
    let serving = endpoint.serving.unwrap_or(ready);
    ready || (source.serving_terminating && serving && endpoint.terminating.unwrap_or(false))
}

/// The nodes by each of their addresses, for endpoints without `nodeName`: the kube-apiserver
/// writes `default/kubernetes` that way (addresses and conditions only), so its endpoints are
/// matched to the node that holds the address, as kuberture does.
struct NodesByAddress<'a>(BTreeMap<IpAddr, &'a NodeInfo>);

impl<'a> NodesByAddress<'a> {
    fn new(address_source: AddressSource, nodes: &'a BTreeMap<String, NodeInfo>) -> Self {
        let mut by_address = BTreeMap::new();
        if address_source != AddressSource::EndpointSlice {
            for node in nodes.values() {
                for address in &node.all {
                    by_address.entry(*address).or_insert(node);
                }
            }
        }
        Self(by_address)
    }

    /// The endpoint's node: by its `nodeName`, else the node that holds one of its addresses.
    fn node_of(
        &self,
        endpoint: &EndpointInfo,
        nodes: &'a BTreeMap<String, NodeInfo>,
    ) -> Option<&'a NodeInfo> {
        if let Some(node) = endpoint.node_name.as_ref().and_then(|n| nodes.get(n)) {
            return Some(node);
        }
        endpoint
            .addresses
            .iter()
            .find_map(|a| self.0.get(&a.to_canonical()).copied())
    }
}

/// The addresses of `node` that `address_source` names: its InternalIPs, its ExternalIPs, or
/// its first public address of the family asked for.
fn node_addresses(
    node: &NodeInfo,
    address_source: AddressSource,
    family: AddressType,
) -> Vec<IpAddr> {
    match address_source {
        AddressSource::NodeInternal => node.internal.clone(),
        AddressSource::NodeExternal => node.external.clone(),
        AddressSource::NodePublic => node
            .all
            .iter()
            .copied()
            .filter(|a| a.is_ipv4() == (family == AddressType::IPv4))
            .find(|a| public::is_public(*a))
            .into_iter()
            .collect(),
        AddressSource::EndpointSlice => Vec::new(),
    }
}

/// Records of one EndpointSlice source for the resolved addresses.
pub fn endpoint_records(
    source: &EndpointSliceSource,
    addresses: &[IpAddr],
    out: &mut Vec<SourceRecord>,
) {
    for hostname in &source.hostnames {
        let hostname = WireName::from_name(hostname);
        for address in addresses {
            out.push(address_record(hostname.clone(), Some(source.ttl), *address));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::kube::model::{EndpointInfo, HostPort};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn source() -> PodSource {
        PodSource {
            zone: name("prod.example."),
            label_key: "ingress.cluster/name".into(),
            label_value: None,
            namespaces: vec![],
            strict_host_port: false,
            address: PodAddress::Auto,
            srv: true,
            dotted_label_values: DottedLabelValues::Reject,
            topology_key: None,
        }
    }

    fn pod(value: &str, host_port: bool) -> PodInfo {
        PodInfo {
            namespace: "ingress".into(),
            label_value: value.into(),
            node_name: Some("cp-1".into()),
            serving: true,
            host_network: false,
            host_ips: vec!["198.18.0.11".parse().unwrap()],
            pod_ips: vec!["198.19.1.5".parse().unwrap()],
            host_ports: if host_port {
                vec![HostPort {
                    name: Some("https".into()),
                    protocol: "tcp".into(),
                    port: 443,
                    host_ip: None,
                }]
            } else {
                vec![]
            },
        }
    }

    fn render(records: &[SourceRecord]) -> Vec<String> {
        let mut out: Vec<String> = records
            .iter()
            .map(|r| format!("{} {:?}", r.name, r.data))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_host_port_pod_is_published_under_its_node_address_with_srv() {
        let mut out = Vec::new();
        pod_records(
            &source(),
            [&pod("default-nginx", true)],
            &mut out,
            &mut Skipped::default(),
        );
        assert_eq!(
            render(&out),
            [
                "_https._tcp.default-nginx.ingress.prod.example. Srv(Srv { priority: 0, weight: 1, port: 443, target: cp-1.nodes.prod.example. })",
                "cp-1.nodes.prod.example. A(198.18.0.11)",
                "default-nginx.ingress.prod.example. A(198.18.0.11)",
            ]
        );
    }

    #[test]
    fn a_pod_without_host_port_is_published_under_its_own_address() {
        let mut out = Vec::new();
        pod_records(
            &source(),
            [&pod("web", false)],
            &mut out,
            &mut Skipped::default(),
        );
        assert_eq!(render(&out), ["web.ingress.prod.example. A(198.19.1.5)"]);
    }

    #[test]
    fn strict_host_port_drops_pods_without_one() {
        let mut out = Vec::new();
        let strict = PodSource {
            strict_host_port: true,
            ..source()
        };
        pod_records(
            &strict,
            [&pod("web", false)],
            &mut out,
            &mut Skipped::default(),
        );
        assert!(out.is_empty());
    }

    #[test]
    fn pods_not_serving_are_left_out() {
        let mut out = Vec::new();
        let not_ready = PodInfo {
            serving: false,
            ..pod("web", true)
        };
        pod_records(&source(), [&not_ready], &mut out, &mut Skipped::default());
        assert!(out.is_empty());
    }

    #[test]
    fn a_label_value_that_is_not_a_dns_label_is_skipped() {
        let mut out = Vec::new();
        let mut skipped = Skipped::default();
        pod_records(
            &source(),
            [&pod("bad_value.x", true), &pod("Good", false)],
            &mut out,
            &mut skipped,
        );
        assert_eq!(skipped.invalid_names, ["ingress/bad_value.x"]);
        assert_eq!(render(&out), ["good.ingress.prod.example. A(198.19.1.5)"]);
    }

    fn slice_source(address_source: AddressSource) -> EndpointSliceSource {
        EndpointSliceSource {
            name: "api.prod.example/IPv4".into(),
            zone: name("prod.example."),
            hostnames: vec![name("api.prod.example.")],
            namespace: "default".into(),
            service: "kubernetes".into(),
            address_type: AddressType::IPv4,
            address_source,
            serving_terminating: false,
            keep_last_non_empty: true,
            ttl: 60,
            health_probe: None,
        }
    }

    fn endpoint(address: &str, ready: Option<bool>, node: &str) -> EndpointInfo {
        EndpointInfo {
            addresses: vec![address.parse().unwrap()],
            ready,
            serving: Some(true),
            terminating: Some(ready == Some(false)),
            node_name: Some(node.into()),
        }
    }

    #[test]
    fn all_slices_of_the_service_merge_and_not_ready_endpoints_drop() {
        let slices = [
            SliceInfo {
                port: None,
                namespace: "default".into(),
                service: "kubernetes".into(),
                address_type: "IPv4".into(),
                endpoints: vec![
                    endpoint("198.18.0.10", None, "a"),
                    endpoint("198.18.0.11", Some(false), "b"),
                ],
            },
            SliceInfo {
                port: None,
                namespace: "default".into(),
                service: "kubernetes".into(),
                address_type: "IPv4".into(),
                endpoints: vec![endpoint("198.18.0.12", Some(true), "c")],
            },
            SliceInfo {
                port: None,
                namespace: "default".into(),
                service: "other".into(),
                address_type: "IPv4".into(),
                endpoints: vec![endpoint("198.18.0.13", Some(true), "d")],
            },
        ];
        let got = endpoint_addresses(
            &slice_source(AddressSource::EndpointSlice),
            &slices,
            &BTreeMap::new(),
        );
        assert_eq!(
            got,
            [
                "198.18.0.10".parse::<IpAddr>().unwrap(),
                "198.18.0.12".parse().unwrap()
            ]
        );
        let terminating = EndpointSliceSource {
            serving_terminating: true,
            ..slice_source(AddressSource::EndpointSlice)
        };
        assert_eq!(
            endpoint_addresses(&terminating, &slices, &BTreeMap::new()).len(),
            3
        );
    }

    #[test]
    fn unset_conditions_mean_what_the_endpointslice_api_says() {
        let with = |ready, serving, terminating| EndpointInfo {
            addresses: vec!["198.18.0.10".parse().unwrap()],
            ready,
            serving,
            terminating,
            node_name: None,
        };
        let slice = |e: EndpointInfo| SliceInfo {
            port: None,
            namespace: "default".into(),
            service: "kubernetes".into(),
            address_type: "IPv4".into(),
            endpoints: vec![e],
        };
        let terminating_ok = EndpointSliceSource {
            serving_terminating: true,
            ..slice_source(AddressSource::EndpointSlice)
        };
        let used = |e: EndpointInfo| {
            !endpoint_addresses(&terminating_ok, &[slice(e)], &BTreeMap::new()).is_empty()
        };
        // Nothing set: ready.
        assert!(used(with(None, None, None)));
        // Terminating, serving unset: defers to ready (false here), so not used.
        assert!(!used(with(Some(false), None, Some(true))));
        // Terminating and serving: used with servingTerminating.
        assert!(used(with(Some(false), Some(true), Some(true))));
        // Not ready, terminating unset: not terminating, so not used.
        assert!(!used(with(Some(false), Some(true), None)));
    }

    #[test]
    fn node_addresses_come_from_the_endpoints_nodes() {
        let slices = [SliceInfo {
            port: None,
            namespace: "default".into(),
            service: "kubernetes".into(),
            address_type: "IPv4".into(),
            endpoints: vec![endpoint("198.19.0.10", Some(true), "cp-1")],
        }];
        let nodes = BTreeMap::from([(
            "cp-1".to_owned(),
            node_info(&["198.18.0.21"], &["198.18.1.21"]),
        )]);
        let internal =
            endpoint_addresses(&slice_source(AddressSource::NodeInternal), &slices, &nodes);
        assert_eq!(internal, ["198.18.0.21".parse::<IpAddr>().unwrap()]);
        let external =
            endpoint_addresses(&slice_source(AddressSource::NodeExternal), &slices, &nodes);
        assert_eq!(external, ["198.18.1.21".parse::<IpAddr>().unwrap()]);
    }

    fn node_info(internal: &[&str], external: &[&str]) -> NodeInfo {
        let parse =
            |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|a| a.parse().unwrap()).collect() };
        NodeInfo {
            internal: parse(internal),
            external: parse(external),
            all: parse(&[internal, external].concat()),
            placement: Default::default(),
        }
    }

    /// `default/kubernetes` as the kube-apiserver writes it: addresses and conditions, no
    /// `nodeName`. Each address is matched to the node holding it (any of its addresses).
    #[test]
    fn endpoints_without_a_node_name_are_matched_to_the_node_holding_their_address() {
        let mut api_server = endpoint("10.0.0.21", Some(true), "");
        api_server.node_name = None;
        let mut stranger = endpoint("10.0.0.99", Some(true), "");
        stranger.node_name = None;
        let slices = [SliceInfo {
            port: None,
            namespace: "default".into(),
            service: "kubernetes".into(),
            address_type: "IPv4".into(),
            endpoints: vec![api_server, stranger],
        }];
        let nodes = BTreeMap::from([
            (
                "cp-1".to_owned(),
                node_info(
                    &["10.0.0.21", "fd00::21"],
                    &["192.0.2.21", "8.8.4.21", "2a00::21"],
                ),
            ),
            ("cp-2".to_owned(), node_info(&["10.0.0.22"], &["8.8.4.22"])),
        ]);
        let resolve = |source: AddressSource| -> Vec<String> {
            endpoint_addresses(&slice_source(source), &slices, &nodes)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(resolve(AddressSource::NodeInternal), ["10.0.0.21"]);
        assert_eq!(
            resolve(AddressSource::NodeExternal),
            ["8.8.4.21", "192.0.2.21"]
        );
        // The first address outside the documentation and private ranges.
        assert_eq!(resolve(AddressSource::NodePublic), ["8.8.4.21"]);
    }

    /// Servers failing their health probes leave the answer, their own addresses or their
    /// nodes'; the probes check each used endpoint's addresses on its slice's port.
    #[test]
    fn servers_left_out_by_their_probes_give_no_address_and_targets_are_address_and_port() {
        let mut slice = SliceInfo {
            port: Some(6443),
            namespace: "default".into(),
            service: "kubernetes".into(),
            address_type: "IPv4".into(),
            endpoints: vec![
                endpoint("198.18.0.21", Some(true), "cp-1"),
                endpoint("198.18.0.22", Some(true), "cp-2"),
                endpoint("198.18.0.23", Some(false), "cp-3"),
            ],
        };
        let left_out = BTreeSet::from(["198.18.0.22".parse::<IpAddr>().unwrap()]);
        let own = endpoint_addresses_without(
            &slice_source(AddressSource::EndpointSlice),
            [&slice],
            &BTreeMap::new(),
            &left_out,
        );
        assert_eq!(own, ["198.18.0.21".parse::<IpAddr>().unwrap()]);
        let nodes = BTreeMap::from([
            ("cp-1".to_owned(), node_info(&["198.18.1.21"], &[])),
            ("cp-2".to_owned(), node_info(&["198.18.1.22"], &[])),
        ]);
        let internal = endpoint_addresses_without(
            &slice_source(AddressSource::NodeInternal),
            [&slice],
            &nodes,
            &left_out,
        );
        assert_eq!(internal, ["198.18.1.21".parse::<IpAddr>().unwrap()]);
        let targets = probe_targets(&slice_source(AddressSource::EndpointSlice), [&slice]);
        let shown: Vec<String> = targets.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["198.18.0.21:6443", "198.18.0.22:6443"],
            "the endpoint not ready is not probed"
        );
        slice.port = None;
        assert!(probe_targets(&slice_source(AddressSource::EndpointSlice), [&slice]).is_empty());
    }

    /// The topology name holds the pod's address and SRV records one level down; the SRV
    /// target (and its addresses) stay the node's.
    #[test]
    fn a_topology_name_moves_the_pods_records_one_level_down() {
        let source = source();
        let pod = pod("default-nginx", true);
        let mut records = Vec::new();
        pod_records(&source, [&pod], &mut records, &mut Skipped::default());
        let parent = WireName::from_name(&pod_name(&source, &pod).unwrap());
        let zoned = topology_records(&records, &parent, "eu-west-1a");
        let rendered = render(&zoned);
        assert_eq!(rendered.len(), 2, "{rendered:?}");
        assert!(
            rendered[0]
                .starts_with("_https._tcp.eu-west-1a.default-nginx.ingress.prod.example. Srv"),
            "{rendered:?}"
        );
        assert!(
            rendered[0].contains("cp-1.nodes.prod.example."),
            "{rendered:?}"
        );
        assert_eq!(
            rendered[1],
            "eu-west-1a.default-nginx.ingress.prod.example. A(198.18.0.11)"
        );
        // A name that would pass 255 bytes is left out, not cut.
        let long = format!(
            "{}.{}.{}.d.",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63)
        );
        let long = WireName::from_name(&name(&long));
        let at_long = [SourceRecord {
            name: long.clone(),
            ttl: None,
            data: RecordData::A("198.18.0.1".parse().unwrap()),
        }];
        assert!(topology_records(&at_long, &long, &"e".repeat(63)).is_empty());
    }

    fn a_records(source: &PodSource, pod: &PodInfo) -> (Vec<String>, Skipped) {
        let mut out = Vec::new();
        let mut skipped = Skipped::default();
        pod_records(source, [pod], &mut out, &mut skipped);
        let only_addresses = out
            .iter()
            .filter(|r| matches!(r.data, RecordData::A(_) | RecordData::Aaaa(_)))
            .filter(|r| !r.name.to_string().contains(".nodes."))
            .cloned()
            .collect::<Vec<_>>();
        (render(&only_addresses), skipped)
    }

    #[test]
    fn host_ports_bound_to_one_node_address_are_answered_with_that_address() {
        let mut p = pod("default-nginx", true);
        p.host_ips = vec![
            "198.18.0.11".parse().unwrap(),
            "2001:db8::11".parse().unwrap(),
        ];
        p.host_ports[0].host_ip = Some("198.18.0.99".parse().unwrap());
        p.host_ports.push(HostPort {
            name: None,
            protocol: "tcp".into(),
            port: 80,
            host_ip: Some("198.18.0.99".parse().unwrap()),
        });
        let (records, _) = a_records(&source(), &p);
        assert_eq!(
            records,
            ["default-nginx.ingress.prod.example. A(198.18.0.99)"]
        );
        // One port on every address: the pod is reachable on all of them.
        p.host_ports[1].host_ip = None;
        let (records, _) = a_records(&source(), &p);
        assert_eq!(
            records,
            [
                "default-nginx.ingress.prod.example. A(198.18.0.11)",
                "default-nginx.ingress.prod.example. Aaaa(2001:db8::11)"
            ]
        );
    }

    #[test]
    fn dual_stack_pods_get_both_families_from_host_or_pod_addresses() {
        let mut p = pod("web", false);
        p.pod_ips = vec![
            "198.19.1.5".parse().unwrap(),
            "2001:db8:1::5".parse().unwrap(),
        ];
        let (records, _) = a_records(&source(), &p);
        assert_eq!(
            records,
            [
                "web.ingress.prod.example. A(198.19.1.5)",
                "web.ingress.prod.example. Aaaa(2001:db8:1::5)"
            ]
        );
        p.host_network = true;
        p.host_ips = vec![
            "198.18.0.11".parse().unwrap(),
            "2001:db8::11".parse().unwrap(),
        ];
        let (records, _) = a_records(&source(), &p);
        assert_eq!(
            records,
            [
                "web.ingress.prod.example. A(198.18.0.11)",
                "web.ingress.prod.example. Aaaa(2001:db8::11)"
            ]
        );
    }

    #[test]
    fn uppercase_values_are_lowercased_and_dotted_ones_follow_the_option() {
        let (records, _) = a_records(&source(), &pod("Public-LB", true));
        assert_eq!(records, ["public-lb.ingress.prod.example. A(198.18.0.11)"]);
        let (records, skipped) = a_records(&source(), &pod("edge.public", true));
        assert!(records.is_empty());
        assert_eq!(skipped.invalid_names, ["ingress/edge.public"]);
        let coreha = PodSource {
            dotted_label_values: DottedLabelValues::Labels,
            ..source()
        };
        let (records, _) = a_records(&coreha, &pod("edge.public", true));
        assert_eq!(
            records,
            ["edge.public.ingress.prod.example. A(198.18.0.11)"]
        );
        for bad in ["edge..public", ".edge", "edge_1.public"] {
            let (records, skipped) = a_records(&coreha, &pod(bad, true));
            assert!(
                records.is_empty() && skipped.invalid_names.len() == 1,
                "{bad}"
            );
        }
    }
}
