//! Kubernetes objects for tests, as the API server would serve them.

use serde_json::{Value, json};

/// A pod of an ingress controller: labelled, on a node, optionally with a named hostPort.
#[derive(Clone, Debug)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub labels: Vec<(String, String)>,
    pub node: String,
    pub host_ip: String,
    /// The node's second address, of the other family (a dual-stack node), if any.
    pub host_ip_v6: Option<String>,
    pub pod_ip: String,
    pub ready: bool,
    pub phase: String,
    pub host_port: Option<(String, u16)>,
    pub terminating: bool,
    pub host_network: bool,
}

impl PodSpec {
    /// A Running, Ready pod labelled `ingress.cluster/name=<value>` with hostPort https/443.
    pub fn ingress(name: &str, namespace: &str, value: &str, node: &str, host_ip: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            labels: vec![("ingress.cluster/name".into(), value.into())],
            node: node.into(),
            host_ip: host_ip.into(),
            host_ip_v6: None,
            pod_ip: "198.19.0.1".into(),
            ready: true,
            phase: "Running".into(),
            host_port: Some(("https".into(), 443)),
            terminating: false,
            host_network: false,
        }
    }

    pub fn to_json(&self) -> Value {
        let labels = labels_json(&self.labels);
        let ports = match &self.host_port {
            Some((name, port)) => {
                json!([{"name": name, "containerPort": port, "hostPort": port, "protocol": "TCP"}])
            }
            None => json!([{"containerPort": 8443, "protocol": "TCP"}]),
        };
        let mut metadata = json!({"name": self.name, "namespace": self.namespace, "labels": labels, "uid": format!("uid-{}", self.name)});
        if self.terminating {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let host_ips: Vec<Value> = std::iter::once(&self.host_ip)
            .chain(&self.host_ip_v6)
            .map(|ip| json!({ "ip": ip }))
            .collect();
        json!({
            "metadata": metadata,
            "spec": {"nodeName": self.node, "hostNetwork": self.host_network, "containers": [{"name": "controller", "image": "controller:1", "ports": ports}]},
            "status": {
                "phase": self.phase,
                "hostIP": self.host_ip,
                "hostIPs": host_ips,
                "podIP": self.pod_ip,
                "podIPs": [{"ip": self.pod_ip}],
                "conditions": [{"type": "Ready", "status": if self.ready { "True" } else { "False" }}],
            },
        })
    }
}

/// An IPv4 EndpointSlice of `namespace/service` with one endpoint per (address, ready, node).
pub fn endpoint_slice(
    namespace: &str,
    name: &str,
    service: &str,
    endpoints: &[(&str, Option<bool>, &str)],
) -> Value {
    endpoint_slice_of("IPv4", namespace, name, service, endpoints)
}

/// An EndpointSlice of `address_type` ("IPv4", "IPv6", "FQDN").
pub fn endpoint_slice_of(
    address_type: &str,
    namespace: &str,
    name: &str,
    service: &str,
    endpoints: &[(&str, Option<bool>, &str)],
) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(address, ready, node)| {
            let mut conditions = json!({});
            if let Some(ready) = ready {
                conditions["ready"] = json!(ready);
            }
            json!({"addresses": [address], "conditions": conditions, "nodeName": node})
        })
        .collect();
    json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    })
}

/// An EndpointSlice of `default/kubernetes` as the kube-apiserver writes it: each address with
/// its conditions only (no `nodeName`, no `targetRef`).
pub fn api_server_slice(address_type: &str, name: &str, addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|address| {
            json!({"addresses": [address], "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    json!({
        "metadata": {"name": name, "namespace": "default", "labels": {
            "kubernetes.io/service-name": "kubernetes",
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        }},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    })
}

/// A node with these addresses, in order: (type, address), e.g. ("InternalIP", "198.18.0.1").
pub fn node_with(name: &str, addresses: &[(&str, &str)]) -> Value {
    let mut listed: Vec<Value> = addresses
        .iter()
        .map(|(kind, address)| json!({"type": kind, "address": address}))
        .collect();
    listed.push(json!({"type": "Hostname", "address": name}));
    json!({"metadata": {"name": name}, "status": {"addresses": listed}})
}

/// A node with an internal and an external address.
pub fn node(name: &str, internal: &str, external: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "status": {"addresses": [
            {"type": "InternalIP", "address": internal},
            {"type": "ExternalIP", "address": external},
            {"type": "Hostname", "address": name},
        ]},
    })
}

/// A node as the `nodes` rules read it: its taints (keys, effect NoSchedule), labels and
/// cordon, with one internal address.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub name: String,
    pub internal: String,
    pub taints: Vec<String>,
    pub labels: Vec<(String, String)>,
    pub unschedulable: bool,
}

impl NodeSpec {
    pub fn new(name: &str, internal: &str) -> Self {
        Self {
            name: name.into(),
            internal: internal.into(),
            taints: Vec::new(),
            labels: Vec::new(),
            unschedulable: false,
        }
    }

    pub fn to_json(&self) -> Value {
        let labels = labels_json(&self.labels);
        // The cluster autoscaler writes its deletion time as the taint's value.
        let taints: Vec<Value> = self
            .taints
            .iter()
            .map(|key| json!({"key": key, "value": "1764806400", "effect": "NoSchedule"}))
            .collect();
        let mut spec = json!({"unschedulable": self.unschedulable});
        if !taints.is_empty() {
            spec["taints"] = json!(taints);
        }
        json!({
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
            "status": {"addresses": [
                {"type": "InternalIP", "address": self.internal},
                {"type": "Hostname", "address": self.name},
            ]},
        })
    }
}

/// `metadata.labels` from (key, value) pairs.
fn labels_json(labels: &[(String, String)]) -> serde_json::Map<String, Value> {
    labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
}
