//! What the agent keeps of each Kubernetes object: only the fields the record compiler reads
//! (memory stays proportional to what is served, not to the objects' size).

use std::net::IpAddr;

use super::node_rules::Exclusion;

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
    /// The node address the port is bound to (`ports[].hostIP`); None: every address (unset,
    /// unparseable, or the unspecified address).
    pub host_ip: Option<IpAddr>,
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
                            host_ip: p
                                .host_ip
                                .as_deref()
                                .and_then(|ip| ip.parse::<IpAddr>().ok())
                                .filter(|ip| !ip.is_unspecified()),
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
    /// The port named `https`, else the first (the API servers' port in `default/kubernetes`).
    pub port: Option<u16>,
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
            port: slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some("https"))
                .or_else(|| slice.ports.iter().flatten().next())
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok()),
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
    /// Every IP address the node lists (internal and external), in the node's order: what an
    /// endpoint without `nodeName` is matched against, and where the public address is sought.
    pub all: Vec<IpAddr>,
    /// What the pod answers take from the node (exclusion, topology values).
    pub placement: Placement,
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
                _ => continue,
            }
            info.all.push(ip);
        }
        info
    }
}

/// One node as the pod answers see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Why its pods are left out, if they are.
    pub exclusion: Option<Exclusion>,
    /// (label key, value) of each configured topology key the node carries.
    pub topology: Vec<(Box<str>, Box<str>)>,
}

impl Placement {
    pub fn matters(&self) -> bool {
        self.exclusion.is_some() || !self.topology.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ingress.cluster/name";

    /// A pod of the ingress, running and Ready on node-a, patched by `edit`.
    fn pod(edit: impl FnOnce(&mut serde_json::Value)) -> Pod {
        let mut pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "ingress-1", "namespace": "edge", "labels": {KEY: "public"}},
            "spec": {
                "nodeName": "node-a",
                "containers": [{
                    "name": "proxy",
                    "ports": [
                        {"name": "https", "containerPort": 8443, "hostPort": 443},
                        {"containerPort": 53, "hostPort": 53, "protocol": "UDP"},
                        {"containerPort": 9000}
                    ]
                }]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}
                ],
                "hostIP": "198.18.0.1",
                "hostIPs": [{"ip": "198.18.0.1"}, {"ip": "2001:db8::1"}],
                "podIP": "198.19.0.5",
                "podIPs": [{"ip": "198.19.0.5"}]
            }
        });
        edit(&mut pod);
        serde_json::from_value(pod).expect("a valid Pod")
    }

    fn info(pod: &Pod) -> PodInfo {
        PodInfo::from_pod(pod, KEY).expect("the pod carries the label")
    }

    #[test]
    fn a_running_ready_pod_serves_with_its_fields() {
        let p = info(&pod(|_| {}));
        assert_eq!(
            p,
            PodInfo {
                namespace: "edge".into(),
                label_value: "public".into(),
                node_name: Some("node-a".into()),
                serving: true,
                host_network: false,
                host_ips: vec![
                    "198.18.0.1".parse().unwrap(),
                    "2001:db8::1".parse().unwrap()
                ],
                pod_ips: vec!["198.19.0.5".parse().unwrap()],
                host_ports: vec![
                    HostPort {
                        name: Some("https".into()),
                        protocol: "tcp".into(),
                        port: 443,
                        host_ip: None,
                    },
                    HostPort {
                        name: None,
                        protocol: "udp".into(),
                        port: 53,
                        host_ip: None,
                    },
                ],
            }
        );
    }

    #[test]
    fn a_terminating_pod_does_not_serve() {
        let p = info(&pod(|p| {
            p["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z".into();
        }));
        assert!(!p.serving);
    }

    #[test]
    fn only_the_running_phase_serves() {
        for phase in ["Pending", "Succeeded", "Failed", "Unknown"] {
            let p = info(&pod(|p| p["status"]["phase"] = phase.into()));
            assert!(!p.serving, "phase {phase}");
        }
        let no_status = info(&pod(|p| {
            p.as_object_mut().unwrap().remove("status");
        }));
        assert!(!no_status.serving);
        assert!(no_status.host_ips.is_empty() && no_status.pod_ips.is_empty());
    }

    #[test]
    fn a_pod_that_is_not_ready_does_not_serve() {
        for ready in ["False", "Unknown"] {
            let p = info(&pod(|p| {
                p["status"]["conditions"][1]["status"] = ready.into()
            }));
            assert!(!p.serving, "Ready={ready}");
        }
        let no_conditions = info(&pod(|p| {
            p["status"].as_object_mut().unwrap().remove("conditions");
        }));
        assert!(!no_conditions.serving);
    }

    #[test]
    fn a_pod_without_the_label_is_not_kept() {
        let other = pod(|p| p["metadata"]["labels"] = serde_json::json!({"app": "web"}));
        assert_eq!(PodInfo::from_pod(&other, KEY), None);
        let unlabelled = pod(|p| {
            p["metadata"].as_object_mut().unwrap().remove("labels");
        });
        assert_eq!(PodInfo::from_pod(&unlabelled, KEY), None);
    }

    #[test]
    fn single_address_fields_stand_in_for_missing_lists_and_bad_addresses_are_skipped() {
        let p = info(&pod(|p| {
            let status = p["status"].as_object_mut().unwrap();
            status.remove("hostIPs");
            status.remove("podIPs");
        }));
        assert_eq!(p.host_ips, vec!["198.18.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(p.pod_ips, vec!["198.19.0.5".parse::<IpAddr>().unwrap()]);
        let bad = info(&pod(|p| {
            p["status"]["hostIPs"] = serde_json::json!([{"ip": "not-an-ip"}, {"ip": "198.18.0.7"}]);
            p["status"]["podIP"] = "999.1.1.1".into();
            p["status"].as_object_mut().unwrap().remove("podIPs");
        }));
        assert_eq!(bad.host_ips, vec!["198.18.0.7".parse::<IpAddr>().unwrap()]);
        assert!(bad.pod_ips.is_empty());
    }

    #[test]
    fn host_ports_out_of_range_or_zero_are_not_host_ports() {
        let p = info(&pod(|p| {
            p["spec"]["containers"][0]["ports"] = serde_json::json!([
                {"containerPort": 80, "hostPort": 0},
                {"containerPort": 81, "hostPort": 70000},
                {"containerPort": 82, "hostPort": -1},
                {"containerPort": 83, "hostPort": 8083, "protocol": "SCTP"}
            ]);
            p["spec"]["hostNetwork"] = true.into();
        }));
        assert!(p.host_network);
        assert_eq!(
            p.host_ports,
            vec![HostPort {
                name: None,
                protocol: "sctp".into(),
                port: 8083,
                host_ip: None,
            }]
        );
    }

    #[test]
    fn a_host_port_bound_to_one_node_address_keeps_it_and_wildcards_are_none() {
        let p = info(&pod(|p| {
            p["spec"]["containers"][0]["ports"] = serde_json::json!([
                {"containerPort": 80, "hostPort": 80, "hostIP": "198.18.0.9"},
                {"containerPort": 81, "hostPort": 81, "hostIP": "0.0.0.0"},
                {"containerPort": 82, "hostPort": 82, "hostIP": "::"},
                {"containerPort": 83, "hostPort": 83, "hostIP": "not-an-ip"}
            ]);
        }));
        let bound: Vec<Option<IpAddr>> = p.host_ports.iter().map(|h| h.host_ip).collect();
        assert_eq!(
            bound,
            [Some("198.18.0.9".parse().unwrap()), None, None, None]
        );
    }
}
