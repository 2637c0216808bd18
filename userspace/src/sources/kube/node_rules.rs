//! Which nodes the pod-derived answers leave out: the configuration's `nodes` section, and the
//! verdict it gives on one Node. The conventions are the Kubernetes service controller's
//! (kubernetes PR 105946): a node the cluster autoscaler or Karpenter is taking away leaves
//! the external load balancers' pools at once, before it is drained, because the DaemonSet pod
//! on it stays Ready until the machine is gone. Pure: no I/O, no logs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{config_schema as schema, sources::kube::syntax::check_label_key};

/// The cluster autoscaler's taint on a node it is deleting (set before it drains the node).
pub const AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// Karpenter's taint on a node it disrupts (v1).
pub const KARPENTER_TAINT: &str = "karpenter.sh/disrupted";
/// Karpenter's taint on a node it disrupts, before v1.
pub const KARPENTER_PRE_V1_TAINT: &str = "karpenter.sh/disruption";

/// `nodes`: which nodes' pods leave the answers.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodesEntry {
    /// Taint keys (any effect) that take a node's pods out of the answers. Default: the
    /// cluster autoscaler's and Karpenter's (v1 and earlier) taints for a node on its way out.
    #[serde(default = "default_exclude_taints")]
    #[schemars(with = "Vec<schema::LabelKey>")]
    exclude_taints: Vec<String>,
    /// Label keys whose presence (any value) takes a node's pods out of the answers, e.g.
    /// `node.kubernetes.io/exclude-from-external-load-balancers` (which kubeadm puts on every
    /// control plane). Default: none.
    #[serde(default)]
    #[schemars(with = "Vec<schema::LabelKey>")]
    exclude_labels: Vec<String>,
    /// Whether a cordoned node (`spec.unschedulable`, `kubectl drain`) leaves the answers.
    #[serde(default)]
    exclude_unschedulable: bool,
}

impl Default for NodesEntry {
    fn default() -> Self {
        Self {
            exclude_taints: default_exclude_taints(),
            exclude_labels: Vec::new(),
            exclude_unschedulable: false,
        }
    }
}

fn default_exclude_taints() -> Vec<String> {
    [AUTOSCALER_TAINT, KARPENTER_TAINT, KARPENTER_PRE_V1_TAINT]
        .map(String::from)
        .to_vec()
}

impl NodesEntry {
    pub fn compile(self) -> Result<NodeRules, String> {
        for (field, keys) in [
            ("nodes.excludeTaints", &self.exclude_taints),
            ("nodes.excludeLabels", &self.exclude_labels),
        ] {
            for key in keys {
                if key.is_empty() {
                    return Err(format!("{field}: an empty key"));
                }
                check_label_key(key).map_err(|e| format!("{field}: {key:?}: {e}"))?;
            }
        }
        Ok(NodeRules {
            exclude_taints: self.exclude_taints,
            exclude_labels: self.exclude_labels,
            exclude_unschedulable: self.exclude_unschedulable,
        })
    }
}

/// The compiled `nodes` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRules {
    pub exclude_taints: Vec<String>,
    pub exclude_labels: Vec<String>,
    pub exclude_unschedulable: bool,
}

impl Default for NodeRules {
    fn default() -> Self {
        Self {
            exclude_taints: default_exclude_taints(),
            exclude_labels: Vec::new(),
            exclude_unschedulable: false,
        }
    }
}

/// Why a node's pods are left out: the metric's `reason`, and the key that matched.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exclusion {
    Taint(String),
    Label(String),
    Unschedulable,
}

impl Exclusion {
    /// Every reason, as `hostport_dns_nodes_excluded{reason}` spells it.
    pub const REASONS: [&'static str; 3] = ["taint", "label", "unschedulable"];

    pub fn reason(&self) -> &'static str {
        match self {
            Self::Taint(_) => "taint",
            Self::Label(_) => "label",
            Self::Unschedulable => "unschedulable",
        }
    }
}

impl std::fmt::Display for Exclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Taint(key) => write!(f, "taint {key}"),
            Self::Label(key) => write!(f, "label {key}"),
            Self::Unschedulable => f.write_str("cordoned (spec.unschedulable)"),
        }
    }
}

impl NodeRules {
    /// Whether any rule can exclude a node (else nodes need not be watched for pods).
    pub fn any(&self) -> bool {
        !self.exclude_taints.is_empty()
            || !self.exclude_labels.is_empty()
            || self.exclude_unschedulable
    }

    /// Why `node`'s pods leave the answers, or None. A taint comes first (the node is going),
    /// then a label, then a cordon; within each, the configured order.
    pub fn exclusion(&self, node: &Node) -> Option<Exclusion> {
        let spec = node.spec.as_ref();
        let taints = spec.and_then(|s| s.taints.as_deref()).unwrap_or_default();
        if let Some(key) = self
            .exclude_taints
            .iter()
            .find(|key| taints.iter().any(|t| t.key == **key))
        {
            return Some(Exclusion::Taint(key.clone()));
        }
        let no_labels = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&no_labels);
        if let Some(key) = self
            .exclude_labels
            .iter()
            .find(|key| labels.contains_key(*key))
        {
            return Some(Exclusion::Label(key.clone()));
        }
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        (self.exclude_unschedulable && cordoned).then_some(Exclusion::Unschedulable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).expect("a node")
    }

    #[test]
    fn the_leaving_taints_exclude_by_default_and_labels_and_cordons_only_when_configured() {
        let rules = NodeRules::default();
        let tainted = |key: &str| {
            node(serde_json::json!({
                "metadata": {"name": "n1"},
                "spec": {"taints": [{"key": key, "effect": "NoSchedule"}]}
            }))
        };
        for key in [AUTOSCALER_TAINT, KARPENTER_TAINT, KARPENTER_PRE_V1_TAINT] {
            assert_eq!(
                rules.exclusion(&tainted(key)),
                Some(Exclusion::Taint(key.into()))
            );
        }
        assert_eq!(rules.exclusion(&tainted("example.com/other")), None);
        let labelled_cordoned = node(serde_json::json!({
            "metadata": {"name": "n1", "labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": ""}},
            "spec": {"unschedulable": true}
        }));
        assert_eq!(rules.exclusion(&labelled_cordoned), None);
        let strict = NodesEntry {
            exclude_taints: Vec::new(),
            exclude_labels: vec!["node.kubernetes.io/exclude-from-external-load-balancers".into()],
            exclude_unschedulable: true,
        }
        .compile()
        .expect("valid");
        assert_eq!(
            strict.exclusion(&labelled_cordoned).map(|e| e.reason()),
            Some("label")
        );
        let cordoned = node(serde_json::json!({
            "metadata": {"name": "n1"}, "spec": {"unschedulable": true}
        }));
        assert_eq!(strict.exclusion(&cordoned), Some(Exclusion::Unschedulable));
        assert_eq!(strict.exclusion(&tainted(AUTOSCALER_TAINT)), None);
    }

    #[test]
    fn empty_and_malformed_keys_are_refused_naming_the_field() {
        let entry = |taints: &[&str], labels: &[&str]| NodesEntry {
            exclude_taints: taints.iter().map(|s| s.to_string()).collect(),
            exclude_labels: labels.iter().map(|s| s.to_string()).collect(),
            exclude_unschedulable: false,
        };
        let error = entry(&[""], &[]).compile().expect_err("empty");
        assert!(
            error.contains("nodes.excludeTaints: an empty key"),
            "{error}"
        );
        let error = entry(&[], &["bad key!"]).compile().expect_err("bad");
        assert!(
            error.starts_with("nodes.excludeLabels: \"bad key!\""),
            "{error}"
        );
        let error = entry(&["-x.io/a"], &[]).compile().expect_err("bad prefix");
        assert!(error.contains("prefix"), "{error}");
    }
}
