//! What the watchers hold, and the record groups it gives: one group per pod (compiled once,
//! when the pod changes) and one per EndpointSlice output (compiled again when one of its
//! slices, or a node it takes addresses from, changes). Each event marks what it touched; a
//! publication takes the groups of what was marked ([`State::take_changes`]), or all of them
//! ([`State::snapshot`]) for a first or restored state. Nothing here walks every pod for one
//! pod's change; a node leaving or returning (the `nodes` rules) marks the pods on it, found by
//! one pass over the pods: such changes are rare, and an index would cost every pod its bytes.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use tracing::{info, warn};

use hostport_dns_core::{dns::WireName, records::RecordGroup};

use crate::{
    metrics::{Metrics, OutputLabel, ReasonLabel},
    sources::{
        GroupKey, Snapshot,
        kube::{
            api_health::tracker::never_empty,
            compile::{
                Skipped, endpoint_addresses, endpoint_addresses_without, endpoint_records,
                pod_name, pod_records, probe_targets, topology_records,
            },
            config::{AddressSource, EndpointSliceSource, KubeConfig, PodSource},
            model::{NodeInfo, Placement, PodInfo, SliceInfo},
            node_state::NodeStates,
            store::Store,
            watchers::{Change, Watchers},
        },
    },
};

/// The records a pod gives, compiled once when the pod changes (a change costs one pod's work,
/// not every pod's), and nothing else of it: with 100k pods, every byte kept per pod counts.
/// A pod that gives no record (not Ready, say) is not kept at all.
#[derive(PartialEq)]
struct PodRecords {
    records: RecordGroup,
    /// The names it should have had but cannot (a label value that is no DNS label).
    invalid: Vec<String>,
    /// The node it runs on, kept only when records follow the nodes' state: one shared copy
    /// of each node's name ([`NodeNames`]), which a pass over the pods compares by address.
    node: Option<Arc<str>>,
    /// Its name (`<label value>.<namespace>.<zone>`), kept only for a source with a
    /// `topologyKey`: the topology name goes one level below it.
    name: Option<WireName>,
}

impl PodRecords {
    /// The pod's records, or None when it gives none and has nothing to report.
    fn of(source: &PodSource, info: &PodInfo, nodes: Option<&mut NodeNames>) -> Option<Self> {
        let mut records = Vec::new();
        let mut skipped = Skipped::default();
        pod_records(source, [info], &mut records, &mut skipped);
        if records.is_empty() && skipped.invalid_names.is_empty() {
            return None;
        }
        Some(Self {
            records: records.into(),
            invalid: skipped.invalid_names,
            node: info
                .node_name
                .as_deref()
                .zip(nodes)
                .map(|(node, names)| names.intern(node)),
            name: source
                .topology_key
                .as_ref()
                .and_then(|_| pod_name(source, info))
                .map(|name| WireName::from_name(&name)),
        })
    }
}

/// What changed since the last publication.
#[derive(Default)]
struct Marked {
    /// (pod watcher, pod key)
    pods: BTreeSet<(usize, String)>,
    outputs: BTreeSet<usize>,
}

/// Everything the watchers hold, and what the EndpointSlice outputs last resolved to.
pub struct State {
    /// One store per pod watcher.
    pods: Vec<Store<PodRecords>>,
    /// Each pod watcher's source (index into `config.pods`).
    pod_sources: Vec<usize>,
    slices: Vec<Store<SliceInfo>>,
    nodes: Option<Store<NodeInfo>>,
    last_non_empty: Vec<Vec<IpAddr>>,
    /// Each EndpointSlice output's records as last published.
    endpoint_groups: Vec<RecordGroup>,
    /// Each output's "keeping the last answer" as last logged.
    kept: Vec<bool>,
    /// Per output: the endpoint addresses its health probes leave out of the answer.
    down: Vec<BTreeSet<IpAddr>>,
    /// Each output's "every server fails its probes, all kept" as last logged.
    all_down: Vec<bool>,
    /// Pods whose label value is no DNS label, with what it would have named (logged once per
    /// pod, until it is valid or gone).
    invalid: BTreeMap<(usize, String), Vec<String>>,
    /// What the pods take from their nodes: exclusions and topology values.
    nodes_state: NodeStates,
    /// The node names pods run on, each held once.
    node_names: NodeNames,
    /// The groups of pods with a topology name (their records and those of the name), as last
    /// published: a group that did not change keeps its allocation.
    placed: BTreeMap<(usize, String), RecordGroup>,
    marked: Marked,
}

impl State {
    pub fn new(config: &KubeConfig, watchers: &Watchers) -> Self {
        let outputs = config.endpoint_slices.len();
        Self {
            pods: watchers
                .pod_sources
                .iter()
                .map(|_| Store::default())
                .collect(),
            pod_sources: watchers.pod_sources.clone(),
            slices: (0..outputs).map(|_| Store::default()).collect(),
            nodes: config.needs_nodes().then(Store::default),
            last_non_empty: vec![Vec::new(); outputs],
            endpoint_groups: vec![RecordGroup::from([]); outputs],
            kept: vec![false; outputs],
            down: vec![BTreeSet::new(); outputs],
            all_down: vec![false; outputs],
            invalid: BTreeMap::new(),
            nodes_state: NodeStates::default(),
            node_names: NodeNames::default(),
            placed: BTreeMap::new(),
            marked: Marked::default(),
        }
    }

    /// Whether the watcher at `index` (in [`Watchers::ids`] order) has listed.
    pub fn synced(&self, index: usize) -> bool {
        let pods = self.pods.len();
        let slices = self.slices.len();
        if index < pods {
            self.pods[index].synced()
        } else if index < pods + slices {
            self.slices[index - pods].synced()
        } else {
            self.nodes.as_ref().is_none_or(Store::synced)
        }
    }

    /// Applies one watcher event, marking what it changed; returns whether anything did.
    pub fn apply(&mut self, config: &KubeConfig, watchers: &Watchers, change: Change) -> bool {
        match change {
            Change::Pod(i, event) => {
                let source = &config.pods[watchers.pod_sources[i]];
                let follows_nodes = config.follows_nodes();
                let names = &mut self.node_names;
                let changed = self.pods[i].apply(*event, |pod| {
                    PodInfo::from_pod(pod, &source.label_key).and_then(|info| {
                        PodRecords::of(source, &info, follows_nodes.then_some(&mut *names))
                    })
                });
                let any = !changed.is_empty();
                self.marked
                    .pods
                    .extend(changed.into_iter().map(|key| (i, key)));
                any
            }
            Change::Slice(i, event) => {
                let changed = !self.slices[i]
                    .apply(*event, SliceInfo::from_slice)
                    .is_empty();
                if changed {
                    self.marked.outputs.insert(i);
                }
                changed
            }
            Change::Node(event) => {
                let Some(nodes) = self.nodes.as_mut() else {
                    return false;
                };
                let rules = (!config.pods.is_empty()).then_some(&config.nodes);
                let topology_keys = config.topology_keys();
                let keys = nodes.apply(*event, |node| {
                    Some(NodeInfo {
                        placement: Placement {
                            exclusion: rules.and_then(|r| r.exclusion(node)),
                            topology: topology_values(node, &topology_keys),
                        },
                        ..NodeInfo::from_node(node)
                    })
                });
                let changed = !keys.is_empty();
                self.follow_nodes(keys);
                if changed {
                    // Every output that takes node addresses may resolve differently.
                    for (i, source) in config.endpoint_slices.iter().enumerate() {
                        if source.address_source != AddressSource::EndpointSlice {
                            self.marked.outputs.insert(i);
                        }
                    }
                }
                changed
            }
        }
    }

    /// The groups of what changed since the last publication: (key, records), None for a group
    /// gone.
    pub fn take_changes(
        &mut self,
        config: &KubeConfig,
        metrics: &Metrics,
    ) -> Vec<(GroupKey, Option<RecordGroup>)> {
        let marked = std::mem::take(&mut self.marked);
        let mut changes = Vec::with_capacity(marked.pods.len() + marked.outputs.len());
        for (i, key) in marked.pods {
            let records = self.pod_group(config, i, &key);
            self.note_invalid(i, &key);
            changes.push((pod_key(i, &key), records.filter(|r| !r.is_empty())));
        }
        self.count_invalid(metrics);
        self.nodes_state.count(metrics);
        for i in marked.outputs {
            if let Some(group) = self.resolve_output(config, metrics, i) {
                changes.push((output_key(i), Some(group)));
            }
        }
        changes
    }

    /// Every group: the source's whole state.
    pub fn snapshot(&mut self, config: &KubeConfig, metrics: &Metrics) -> Snapshot {
        self.marked = Marked::default();
        let mut groups = Vec::new();
        let mut keys = Vec::new();
        for (i, store) in self.pods.iter().enumerate() {
            keys.extend(store.objects().keys().map(|key| (i, key.clone())));
        }
        for (i, key) in &keys {
            if let Some(records) = self.pod_group(config, *i, key).filter(|r| !r.is_empty()) {
                groups.push((pod_key(*i, key), records));
            }
        }
        self.invalid.clear();
        for (i, key) in keys {
            self.note_invalid(i, &key);
        }
        self.count_invalid(metrics);
        self.nodes_state.count(metrics);
        for i in 0..self.slices.len() {
            self.resolve_output(config, metrics, i);
            if !self.endpoint_groups[i].is_empty() {
                groups.push((output_key(i), self.endpoint_groups[i].clone()));
            }
        }
        Snapshot {
            groups,
            ..Snapshot::default()
        }
    }

    /// Whether the group `key` (of this run, or read back from saved records) comes from
    /// watchers that have all listed: its live records can replace the saved ones. A key of no
    /// known group is not live (it goes once every watcher has listed).
    pub fn group_is_live(&self, config: &KubeConfig, key: &GroupKey) -> bool {
        let Some(key) = key.text() else {
            return false;
        };
        if let Some(rest) = key.strip_prefix("pod/") {
            let watcher = rest
                .split_once('/')
                .and_then(|(i, _)| i.parse::<usize>().ok());
            return watcher
                .and_then(|i| self.pods.get(i))
                .is_some_and(Store::synced);
        }
        let Some(i) = key
            .strip_prefix("endpoints/")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            return false;
        };
        let (Some(slices), Some(source)) = (self.slices.get(i), config.endpoint_slices.get(i))
        else {
            return false;
        };
        let nodes_listed = source.address_source == AddressSource::EndpointSlice
            || self.nodes.as_ref().is_some_and(Store::synced);
        slices.synced() && nodes_listed
    }

    /// Takes output `output`'s health verdict: the endpoint addresses left out of its answer.
    /// Returns whether it changed (the output is then marked, to be compiled again).
    pub fn follow_health(&mut self, output: usize, down: BTreeSet<IpAddr>) -> bool {
        let Some(held) = self.down.get_mut(output) else {
            return false;
        };
        if *held == down {
            return false;
        }
        *held = down;
        self.marked.outputs.insert(output);
        true
    }

    /// The servers output `i`'s health probes check now.
    pub fn probe_targets(&self, config: &KubeConfig, i: usize) -> Vec<SocketAddr> {
        probe_targets(
            &config.endpoint_slices[i],
            self.slices[i].objects().values(),
        )
    }

    /// The objects of the EndpointSlice output `i`'s watcher.
    pub fn slices(&self, i: usize) -> &BTreeMap<String, SliceInfo> {
        self.slices[i].objects()
    }

    /// Logs a pod whose label value became invalid (once), and forgets one that is valid or
    /// gone.
    fn note_invalid(&mut self, i: usize, key: &str) {
        let invalid = self.pods[i]
            .objects()
            .get(key)
            .map(|pod| pod.invalid.clone())
            .unwrap_or_default();
        let at = (i, key.to_owned());
        if invalid.is_empty() {
            self.invalid.remove(&at);
        } else if self.invalid.get(&at) != Some(&invalid) {
            warn!(pod = %key, names = ?invalid, "a label value that is not a DNS label: the pod is left out");
            self.invalid.insert(at, invalid);
        }
    }

    /// The group pod `key` of watcher `i` publishes now: None when it is gone or its node is
    /// left out; with a topology name, its records and the name's (the allocation kept while
    /// they do not change).
    fn pod_group(&mut self, config: &KubeConfig, i: usize, key: &str) -> Option<RecordGroup> {
        let at = (i, key.to_owned());
        let Some(pod) = self.pods[i].objects().get(key) else {
            self.placed.remove(&at);
            return None;
        };
        let node = pod.node.as_deref();
        if node.is_some_and(|n| self.nodes_state.excluded(n)) {
            self.placed.remove(&at);
            return None;
        }
        let source = self.pod_source(config, i);
        let value = source
            .topology_key
            .as_deref()
            .zip(node)
            .and_then(|(topology_key, node)| self.nodes_state.topology(node, topology_key));
        let (Some(value), Some(name)) = (value, pod.name.as_ref()) else {
            self.placed.remove(&at);
            return Some(pod.records.clone());
        };
        let mut records = pod.records.to_vec();
        records.extend(topology_records(&records, name, &value));
        let group = match self.placed.get(&at) {
            Some(held) if *held == *records => held.clone(),
            _ => RecordGroup::from(records),
        };
        self.placed.insert(at, group.clone());
        Some(group)
    }

    /// The source of pod watcher `i`.
    fn pod_source<'c>(&self, config: &'c KubeConfig, i: usize) -> &'c PodSource {
        &config.pods[self.pod_sources[i]]
    }

    /// Follows the Nodes whose objects changed (`keys`): the pods on a node that left, returned
    /// or moved to another topology value are marked, found by one pass over the pods (such
    /// changes are rare; an index would cost every pod its bytes). The same pass finds which
    /// deleted nodes still host pods (the others are forgotten).
    fn follow_nodes(&mut self, keys: Vec<String>) {
        let Some(nodes) = self.nodes.as_ref() else {
            return;
        };
        let moved = self.nodes_state.follow(keys, nodes.objects());
        if moved.nodes.is_empty() && !moved.deleted {
            return;
        }
        // Compared by address: the pass reads each pod's entry, not its node's name.
        let moved_names: Vec<Arc<str>> = moved
            .nodes
            .iter()
            .filter_map(|node| self.node_names.get(node))
            .collect();
        let mut hosting = BTreeSet::new();
        for (i, store) in self.pods.iter().enumerate() {
            for (key, pod) in store.objects() {
                let Some(node) = pod.node.as_ref() else {
                    continue;
                };
                if moved_names.iter().any(|m| Arc::ptr_eq(m, node)) {
                    self.marked.pods.insert((i, key.clone()));
                }
                if moved.deleted && self.nodes_state.is_deleted(node) {
                    hosting.insert(node.to_string());
                }
            }
        }
        if moved.deleted {
            self.node_names.forget_unused();
        }
        if moved.deleted {
            self.nodes_state.forget_deleted_except(&hosting);
        }
    }

    fn count_invalid(&self, metrics: &Metrics) {
        metrics
            .dropped_records
            .get_or_create(&ReasonLabel {
                reason: "invalid_dns_label".into(),
            })
            .set(self.invalid.len() as i64);
    }

    /// Resolves output `i` again; returns its group if it changed.
    fn resolve_output(
        &mut self,
        config: &KubeConfig,
        metrics: &Metrics,
        i: usize,
    ) -> Option<RecordGroup> {
        let source = &config.endpoint_slices[i];
        let no_nodes = BTreeMap::new();
        let nodes = self.nodes.as_ref().map_or(&no_nodes, |n| n.objects());
        let slices = self.slices[i].objects().values();
        let healthy = endpoint_addresses_without(source, slices.clone(), nodes, &self.down[i]);
        let (mut addresses, all_down) =
            never_empty(healthy, || endpoint_addresses(source, slices, nodes));
        self.note_all_down(metrics, i, source, all_down);
        let kept = addresses.is_empty()
            && source.keep_last_non_empty
            && !self.last_non_empty[i].is_empty();
        let service = format!("{}/{}", source.namespace, source.service);
        if kept != self.kept[i] {
            if kept {
                warn!(%service, output = %source.name, "no usable endpoint: keeping the last non-empty answer");
            } else {
                info!(%service, output = %source.name, "usable endpoints again");
            }
            self.kept[i] = kept;
        }
        if kept {
            addresses = self.last_non_empty[i].clone();
        } else if !addresses.is_empty() {
            self.last_non_empty[i] = addresses.clone();
        }
        metrics
            .kept_last_answer
            .get_or_create(&OutputLabel {
                source: service,
                output: source.name.clone(),
            })
            .set(i64::from(kept));
        let mut records = Vec::new();
        endpoint_records(source, &addresses, &mut records);
        if self.endpoint_groups[i] == *records {
            return None;
        }
        self.endpoint_groups[i] = records.into();
        Some(self.endpoint_groups[i].clone())
    }

    /// Logs (once per change) and shows whether every probed server of output `i` fails its
    /// probes, so that all are kept rather than none answered.
    fn note_all_down(
        &mut self,
        metrics: &Metrics,
        i: usize,
        source: &EndpointSliceSource,
        all_down: bool,
    ) {
        if source.health_probe.is_none() {
            return;
        }
        let service = format!("{}/{}", source.namespace, source.service);
        let output = &source.name;
        if all_down != self.all_down[i] {
            if all_down {
                warn!(%service, %output, "every server fails its health probes: all are kept in the answer");
            } else {
                info!(%service, %output, "not every server fails its health probes any more: those failing them are left out again");
            }
            self.all_down[i] = all_down;
        }
        metrics
            .api_server_probe_all_down
            .get_or_create(&OutputLabel {
                source: service,
                output: output.clone(),
            })
            .set(i64::from(all_down));
    }
}

/// The names of the nodes pods run on, each held once (5,000 nodes, 100,000 pods: 5,000
/// copies, not 100,000).
#[derive(Default)]
struct NodeNames(BTreeSet<Arc<str>>);

impl NodeNames {
    fn intern(&mut self, node: &str) -> Arc<str> {
        if let Some(held) = self.0.get(node) {
            return held.clone();
        }
        let name: Arc<str> = Arc::from(node);
        self.0.insert(name.clone());
        name
    }

    fn get(&self, node: &str) -> Option<Arc<str>> {
        self.0.get(node).cloned()
    }

    /// Forgets the names no pod holds any more.
    fn forget_unused(&mut self) {
        self.0.retain(|name| Arc::strong_count(name) > 1);
    }
}

/// The group key of pod `key` of pod watcher `i` (two pod sources may both watch a pod).
fn pod_key(i: usize, key: &str) -> GroupKey {
    GroupKey::from(format!("{}{key}", pods_prefix(i)))
}

/// What the group keys of pod source `i` start with, one group per pod (the external-dns
/// writer reads the source's records by it).
pub fn pods_prefix(i: usize) -> String {
    format!("pod/{i}/")
}

/// The group key of EndpointSlice output `i` (the external-dns writer reads its records by it).
pub fn output_key(i: usize) -> GroupKey {
    GroupKey::from(format!("endpoints/{i}"))
}

/// The (key, value) of each of `keys` that `node` is labelled with.
fn topology_values(
    node: &k8s_openapi::api::core::v1::Node,
    keys: &[&str],
) -> Vec<(Box<str>, Box<str>)> {
    let Some(labels) = node.metadata.labels.as_ref() else {
        return Vec::new();
    };
    keys.iter()
        .filter_map(|key| Some((Box::from(*key), Box::from(labels.get(*key)?.as_str()))))
        .collect()
}
