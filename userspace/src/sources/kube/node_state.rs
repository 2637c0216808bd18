//! What the pod answers take from the Nodes: which nodes leave them (the `nodes` rules) and
//! which topology values place them (`pods[].topologyKey`). Only nodes that are excluded or
//! carry a topology label are held (a few dozen bytes each). A node deleted while it matters
//! is kept until no pod on it is left: its DaemonSet pod outlives the Node object (until the
//! pod garbage collector comes), still Ready, and must neither come back nor move meanwhile.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use crate::{
    metrics::{Metrics, ReasonLabel},
    name_grammar::host_label,
    sources::kube::{
        model::{NodeInfo, Placement},
        node_rules::Exclusion,
    },
};

struct Held {
    placement: Placement,
    /// The Node object is gone; kept while pods on it remain.
    deleted: bool,
}

#[derive(Default)]
pub struct NodeStates {
    held: BTreeMap<String, Held>,
}

/// What a Node event changed for the pods.
#[derive(Default)]
pub struct Moved {
    /// Nodes whose pods answer differently now.
    pub nodes: BTreeSet<String>,
    /// Whether a node that mattered was deleted (its entry goes once it hosts no pod).
    pub deleted: bool,
}

impl NodeStates {
    /// Whether the pods on `node` are left out.
    pub fn excluded(&self, node: &str) -> bool {
        self.held
            .get(node)
            .is_some_and(|h| h.placement.exclusion.is_some())
    }

    /// The value of topology label `key` on `node`, if it carries one that is a DNS label
    /// (lower-cased).
    pub fn topology(&self, node: &str, key: &str) -> Option<String> {
        let held = self.held.get(node)?;
        let (_, value) = held.placement.topology.iter().find(|(k, _)| &**k == key)?;
        host_label(value)
    }

    /// Follows the Nodes whose objects changed (`keys`, looked up in `nodes`): says once when
    /// a node leaves or returns, and reports a topology value that is no DNS label once per
    /// change.
    pub fn follow(&mut self, keys: Vec<String>, nodes: &BTreeMap<String, NodeInfo>) -> Moved {
        let mut moved = Moved::default();
        for key in keys {
            let Some(node) = nodes.get(&key) else {
                if let Some(held) = self.held.get_mut(&key) {
                    held.deleted = true;
                    moved.deleted = true;
                }
                continue;
            };
            let now = node.placement.clone();
            let before = self.held.get(&key).map(|h| &h.placement);
            if before.unwrap_or(&Placement::default()) == &now {
                if let Some(held) = self.held.get_mut(&key) {
                    held.deleted = false;
                }
                continue;
            }
            let was_excluded = before.and_then(|p| p.exclusion.as_ref());
            match (&now.exclusion, was_excluded) {
                (Some(why), None) => {
                    info!(node = %key, why = %why, "node leaves the answers: its pods are left out");
                }
                (None, Some(_)) => {
                    info!(node = %key, "node returns to the answers: nothing excludes it any more");
                }
                _ => {}
            }
            for (label, value) in &now.topology {
                if host_label(value).is_none() {
                    warn!(node = %key, %label, %value, "a topology value that is not a DNS label: the node's pods get no topology name");
                }
            }
            if now.matters() {
                self.held.insert(
                    key.clone(),
                    Held {
                        placement: now,
                        deleted: false,
                    },
                );
            } else {
                self.held.remove(&key);
            }
            moved.nodes.insert(key);
        }
        moved
    }

    /// Whether `node` was deleted but is still held.
    pub fn is_deleted(&self, node: &str) -> bool {
        self.held.get(node).is_some_and(|h| h.deleted)
    }

    /// Forgets the deleted nodes not in `hosting` (those that still host pods).
    pub fn forget_deleted_except(&mut self, hosting: &BTreeSet<String>) {
        self.held
            .retain(|node, h| !h.deleted || hosting.contains(node));
    }

    /// `hostport_dns_nodes_excluded{reason}`, and the nodes whose topology value is no DNS
    /// label in `hostport_dns_dropped_records{reason="invalid_topology_value"}`.
    pub fn count(&self, metrics: &Metrics) {
        let live = || self.held.values().filter(|h| !h.deleted);
        for reason in Exclusion::REASONS {
            let count = live()
                .filter(|h| h.placement.exclusion.as_ref().map(Exclusion::reason) == Some(reason))
                .count();
            metrics
                .nodes_excluded
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .set(count as i64);
        }
        let invalid = live()
            .filter(|h| {
                h.placement
                    .topology
                    .iter()
                    .any(|(_, value)| host_label(value).is_none())
            })
            .count();
        metrics
            .dropped_records
            .get_or_create(&ReasonLabel {
                reason: "invalid_topology_value".into(),
            })
            .set(invalid as i64);
    }
}
