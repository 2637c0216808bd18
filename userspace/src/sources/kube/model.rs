//! What the agent keeps of each Kubernetes object: only the fields the record compiler reads
//! (memory stays proportional to what is served, not to the objects' size).

use std::net::IpAddr;

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    discovery::v1::EndpointSlice,
};

/// A pod, as far as records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    /// The value of the configured label key.
    pub label_value: String,
    pub node_name: Option<String>,
    /// Running, Ready, not terminating.
    pub serving: bool,
    pub host_network: bool,
    pub host_ips: Vec<IpAddr>,
    pub pod_ips: Vec<IpAddr>,
    /// Container ports that declare a hostPort.
    pub host_ports: Vec<HostPort>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub name: Option<String>,
    /// "tcp", "udp" or "sctp".
    pub protocol: String,
    pub port: u16,
}

impl PodInfo {
    /// The fields of `pod` under `label_key`; None if the pod lacks the label.
    pub fn from_pod(pod: &Pod, label_key: &str) -> Option<Self> {
        let meta = &pod.metadata;
        let label_value = meta.labels.as_ref()?.get(label_key)?.clone();
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let mut host_ips: Vec<IpAddr> = status
            .and_then(|s| s.host_ips.as_ref())
            .map(|ips| ips.iter().filter_map(|i| i.ip.parse().ok()).collect())
            .unwrap_or_default();
        if host_ips.is_empty() {
            host_ips.extend(
                status
                    .and_then(|s| s.host_ip.as_ref())
                    .and_then(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        let mut pod_ips: Vec<IpAddr> = status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|ips| ips.iter().filter_map(|i| i.ip.parse().ok()).collect())
            .unwrap_or_default();
        if pod_ips.is_empty() {
            pod_ips.extend(
                status
                    .and_then(|s| s.pod_ip.as_ref())
                    .and_then(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        let host_ports = spec
            .map(|s| {
                s.containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .filter_map(|p| {
                        let port = u16::try_from(p.host_port?).ok().filter(|p| *p > 0)?;
                        Some(HostPort {
                            name: p.name.clone(),
                            protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                            port,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            label_value,
            node_name: spec.and_then(|s| s.node_name.clone()),
            serving: running && ready && meta.deletion_timestamp.is_none(),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            host_ips,
            pod_ips,
            host_ports,
        })
    }
}

/// An EndpointSlice's endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    pub namespace: String,
    pub service: String,
    /// "IPv4", "IPv6" or "FQDN".
    pub address_type: String,
    pub endpoints: Vec<EndpointInfo>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    pub addresses: Vec<IpAddr>,
    /// None: unknown, which counts as ready (EndpointSlice API).
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
    pub node_name: Option<String>,
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

impl SliceInfo {
    pub fn from_slice(slice: &EndpointSlice) -> Option<Self> {
        let service = slice
            .metadata
            .labels
            .as_ref()?
            .get(SERVICE_NAME_LABEL)?
            .clone();
        Some(Self {
            namespace: slice.metadata.namespace.clone().unwrap_or_default(),
            service,
            address_type: slice.address_type.clone(),
            endpoints: slice
                .endpoints
                .iter()
                .map(|e| EndpointInfo {
                    addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                    ready: e.conditions.as_ref().and_then(|c| c.ready),
                    serving: e.conditions.as_ref().and_then(|c| c.serving),
                    terminating: e.conditions.as_ref().and_then(|c| c.terminating),
                    node_name: e.node_name.clone(),
                })
                .collect(),
        })
    }
}

/// A node's addresses by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub internal: Vec<IpAddr>,
    pub external: Vec<IpAddr>,
}

impl NodeInfo {
    pub fn from_node(node: &Node) -> Self {
        let mut info = Self::default();
        for address in node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
        {
            let Ok(ip) = address.address.parse::<IpAddr>() else {
                continue;
            };
            match address.type_.as_str() {
                "InternalIP" => info.internal.push(ip),
                "ExternalIP" => info.external.push(ip),
                _ => {}
            }
        }
        info
    }
}
