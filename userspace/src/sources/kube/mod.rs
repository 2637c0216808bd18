//! The Kubernetes source: watchers on Pods, EndpointSlices and (when an EndpointSlice output needs
//! them) Nodes, each kept as the few fields the compiler reads; a complete snapshot of records is
//! published once every watcher has listed everything, and again after every change.
//!
//! Following the watcher's contract: a relist (after 410 Gone, or a reconnect) is buffered from
//! `Init` to `InitDone` and only then replaces the previous objects, so the table is never wiped
//! by a reconnect; objects missing from a relist count as deleted. During an outage the last
//! known records stay in service; the API server is probed every few seconds, so how old the data
//! is can be read from the metrics and the readiness endpoint.

pub mod client;
pub mod compile;
pub mod model;
pub mod syntax;

use std::{
    collections::BTreeMap,
    net::IpAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{FutureExt, StreamExt, stream::BoxStream};
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, utils::Backoff, watcher},
};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::{
    agent_config::{AgentConfig, PodSource},
    health::Health,
    metrics::{Metrics, OutputLabel, ReasonLabel, SourceLabel},
    publisher::Update,
    records::RecordGroup,
    sources::{
        Snapshot,
        kube::{
            compile::{Skipped, endpoint_addresses, endpoint_records, pod_records},
            model::{NodeInfo, PodInfo, SERVICE_NAME_LABEL, SliceInfo},
        },
    },
};

/// Name of this source in metrics, logs and readiness.
pub const SOURCE: &str = "kubernetes";
/// How often the API server is probed (GET /version) to tell live data from stale.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Watch restarts back off from this...
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// ...to at most this: the agent must converge within seconds once the API server is back.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Doubling backoff between BACKOFF_MIN and BACKOFF_MAX, reset by every successful event.
struct CappedBackoff {
    next: Duration,
}

impl Iterator for CappedBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let current = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        Some(current)
    }
}

impl Backoff for CappedBackoff {
    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

fn backoff() -> CappedBackoff {
    CappedBackoff { next: BACKOFF_MIN }
}

/// The objects of one watcher, with the relist buffer.
struct Store<T> {
    objects: BTreeMap<String, T>,
    relist: Option<BTreeMap<String, T>>,
    synced: bool,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<T: PartialEq> Store<T> {
    /// Applies one watcher event; returns whether the objects changed.
    fn apply<K: ResourceExt>(
        &mut self,
        event: watcher::Event<K>,
        extract: impl Fn(&K) -> Option<T>,
    ) -> bool {
        // Namespaced objects by namespace/name, cluster-scoped ones (nodes) by name.
        let key = |k: &K| match k.namespace() {
            Some(ns) => format!("{ns}/{}", k.name_any()),
            None => k.name_any(),
        };
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                if let (Some(relist), Some(info)) = (self.relist.as_mut(), extract(&object)) {
                    relist.insert(key(&object), info);
                }
                false
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let changed = fresh != self.objects || !self.synced;
                // Objects that did not change keep their value (and its record group).
                let mut previous = std::mem::take(&mut self.objects);
                self.objects = fresh
                    .into_iter()
                    .map(|(key, info)| match previous.remove(&key) {
                        Some(old) if old == info => (key, old),
                        _ => (key, info),
                    })
                    .collect();
                self.synced = true;
                changed
            }
            watcher::Event::Apply(object) => match extract(&object) {
                Some(info) => {
                    let key = key(&object);
                    if self.objects.get(&key) == Some(&info) {
                        return false;
                    }
                    self.objects.insert(key, info);
                    true
                }
                None => self.objects.remove(&key(&object)).is_some(),
            },
            watcher::Event::Delete(object) => self.objects.remove(&key(&object)).is_some(),
        }
    }
}

/// A pod's fields and the records they give, compiled once when the pod changes: a change
/// then costs one pod's work, not every pod's.
struct PodRecords {
    info: PodInfo,
    records: RecordGroup,
}

impl PodRecords {
    /// Compiles the pod's records; a label value that cannot be a DNS name is reported here,
    /// once per change of the pod.
    fn new(source: &PodSource, info: PodInfo, metrics: &Metrics) -> Self {
        let mut records = Vec::new();
        let mut skipped = Skipped::default();
        pod_records(source, [&info], &mut records, &mut skipped);
        for name in &skipped.invalid_names {
            warn!(object = %name, "not a valid DNS label: skipped");
            metrics
                .dropped_records
                .get_or_create(&ReasonLabel {
                    reason: "invalid_dns_label".into(),
                })
                .inc();
        }
        Self {
            info,
            records: records.into(),
        }
    }
}

impl PartialEq for PodRecords {
    fn eq(&self, other: &Self) -> bool {
        self.info == other.info
    }
}

enum Change {
    Pod(usize, Box<watcher::Event<Pod>>),
    Slice(usize, Box<watcher::Event<EndpointSlice>>),
    Node(Box<watcher::Event<Node>>),
}

/// Everything the watchers hold, and what the EndpointSlice outputs last resolved to.
struct State {
    /// One store per pod watcher.
    pods: Vec<Store<PodRecords>>,
    /// The pod source each pod watcher serves.
    pod_sources: Vec<usize>,
    slices: Vec<Store<SliceInfo>>,
    nodes: Option<Store<NodeInfo>>,
    last_non_empty: Vec<Vec<IpAddr>>,
    /// Each EndpointSlice output's records as last published.
    endpoint_groups: Vec<RecordGroup>,
}

impl State {
    fn synced(&self) -> bool {
        self.pods.iter().all(|s| s.synced)
            && self.slices.iter().all(|s| s.synced)
            && self.nodes.as_ref().is_none_or(|s| s.synced)
    }
}

/// Runs the watchers until the agent stops.
pub async fn run(
    config: Arc<AgentConfig>,
    client: Client,
    updates: mpsc::Sender<Update>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) {
    let mut streams: Vec<BoxStream<'static, (Result<Change, watcher::Error>, Instant)>> =
        Vec::new();
    // One pod watcher per source and namespace: cluster-wide only when no namespace is named, so
    // that RBAC can be namespaced.
    let mut pod_watchers = Vec::new();
    for (i, source) in config.pods.iter().enumerate() {
        let selector = match &source.label_value {
            Some(value) => format!("{}={value}", source.label_key),
            None => source.label_key.clone(),
        };
        let apis: Vec<Api<Pod>> = if source.namespaces.is_empty() {
            vec![Api::all(client.clone())]
        } else {
            source
                .namespaces
                .iter()
                .map(|ns| Api::namespaced(client.clone(), ns))
                .collect()
        };
        for api in apis {
            let watcher_index = pod_watchers.len();
            pod_watchers.push(i);
            let stream = watcher(api, watcher::Config::default().labels(&selector))
                .backoff(backoff())
                .map(move |r| {
                    (
                        r.map(|e| Change::Pod(watcher_index, Box::new(e))),
                        Instant::now(),
                    )
                });
            streams.push(stream.boxed());
        }
    }
    for (i, source) in config.endpoint_slices.iter().enumerate() {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &source.namespace);
        let selector = format!("{SERVICE_NAME_LABEL}={}", source.service);
        let stream = watcher(api, watcher::Config::default().labels(&selector))
            .backoff(backoff())
            .map(move |r| (r.map(|e| Change::Slice(i, Box::new(e))), Instant::now()));
        streams.push(stream.boxed());
    }
    if config.needs_nodes() {
        let api: Api<Node> = Api::all(client.clone());
        let stream = watcher(api, watcher::Config::default())
            .backoff(backoff())
            .map(|r| (r.map(|e| Change::Node(Box::new(e))), Instant::now()));
        streams.push(stream.boxed());
    }
    let mut changes = futures::stream::select_all(streams);
    let mut state = State {
        pods: pod_watchers.iter().map(|_| Store::default()).collect(),
        pod_sources: pod_watchers,
        slices: config
            .endpoint_slices
            .iter()
            .map(|_| Store::default())
            .collect(),
        nodes: config.needs_nodes().then(Store::default),
        last_non_empty: vec![Vec::new(); config.endpoint_slices.len()],
        endpoint_groups: vec![RecordGroup::from([]); config.endpoint_slices.len()],
    };
    let label = SourceLabel {
        source: SOURCE.to_owned(),
    };
    let mut probe = tokio::time::interval(PROBE_INTERVAL);
    loop {
        let first = tokio::select! {
            change = changes.next() => match change {
                Some(change) => change,
                None => return,
            },
            _ = probe.tick() => {
                probe_api(&client, &health, &metrics, &label).await;
                continue;
            }
        };
        // Take every change already waiting: one publication for a burst.
        let observed = first.1;
        let mut changed = apply(&mut state, &config, first.0, &metrics, &label, &health);
        while let Some(Some((next, _))) = changes.next().now_or_never() {
            changed |= apply(&mut state, &config, next, &metrics, &label, &health);
        }
        if changed && state.synced() {
            let snapshot = compile_snapshot(&config, &mut state, &metrics);
            if updates
                .send(Update {
                    source: SOURCE,
                    snapshot,
                    observed,
                })
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

fn apply(
    state: &mut State,
    config: &AgentConfig,
    change: Result<Change, watcher::Error>,
    metrics: &Metrics,
    label: &SourceLabel,
    health: &Health,
) -> bool {
    let change = match change {
        Ok(change) => change,
        Err(err) => {
            warn!(%err, "Kubernetes watch failed; retrying, the last known records stay in service");
            metrics.source_errors.get_or_create(label).inc();
            metrics.source_connected.get_or_create(label).set(0);
            return false;
        }
    };
    metrics.source_connected.get_or_create(label).set(1);
    health.source_contact(SOURCE);
    match change {
        Change::Pod(i, event) => {
            let source = &config.pods[state.pod_sources[i]];
            state.pods[i].apply(*event, |pod| {
                PodInfo::from_pod(pod, &source.label_key)
                    .map(|info| PodRecords::new(source, info, metrics))
            })
        }
        Change::Slice(i, event) => state.slices[i].apply(*event, SliceInfo::from_slice),
        Change::Node(event) => match state.nodes.as_mut() {
            Some(nodes) => nodes.apply(*event, |node| Some(NodeInfo::from_node(node))),
            None => false,
        },
    }
}

fn compile_snapshot(config: &AgentConfig, state: &mut State, metrics: &Metrics) -> Snapshot {
    let started = Instant::now();
    // Each pod's group as compiled when the pod last changed.
    let mut groups: Vec<RecordGroup> = state
        .pods
        .iter()
        .flat_map(|store| store.objects.values())
        .filter(|pod| !pod.records.is_empty())
        .map(|pod| pod.records.clone())
        .collect();
    let no_nodes = BTreeMap::new();
    let nodes = state.nodes.as_ref().map_or(&no_nodes, |n| &n.objects);
    for (i, (source, store)) in config.endpoint_slices.iter().zip(&state.slices).enumerate() {
        let mut addresses = endpoint_addresses(source, store.objects.values(), nodes);
        let kept = addresses.is_empty()
            && source.keep_last_non_empty
            && !state.last_non_empty[i].is_empty();
        if kept {
            warn!(service = %format!("{}/{}", source.namespace, source.service), output = %source.name, "no usable endpoint: keeping the last non-empty answer");
            addresses = state.last_non_empty[i].clone();
        } else if !addresses.is_empty() {
            state.last_non_empty[i] = addresses.clone();
        }
        let output = OutputLabel {
            source: format!("{}/{}", source.namespace, source.service),
            output: source.name.clone(),
        };
        metrics
            .kept_last_answer
            .get_or_create(&output)
            .set(i64::from(kept));
        let mut records = Vec::new();
        endpoint_records(source, &addresses, &mut records);
        // The same records keep the same group: nothing to recompile.
        if *state.endpoint_groups[i] != *records {
            state.endpoint_groups[i] = records.into();
        }
        groups.push(state.endpoint_groups[i].clone());
    }
    debug!(
        groups = groups.len(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "Kubernetes snapshot taken"
    );
    Snapshot {
        zones: Vec::new(),
        groups,
    }
}

/// One GET /version: the API server is reachable, so the data is current.
async fn probe_api(client: &Client, health: &Health, metrics: &Metrics, label: &SourceLabel) {
    match tokio::time::timeout(PROBE_INTERVAL, client.apiserver_version()).await {
        Ok(Ok(_)) => {
            health.source_contact(SOURCE);
            metrics.source_connected.get_or_create(label).set(1);
        }
        Ok(Err(err)) => {
            warn!(%err, "the API server does not answer; serving the last known records");
            metrics.source_connected.get_or_create(label).set(0);
        }
        Err(_) => {
            warn!("the API server did not answer in time; serving the last known records");
            metrics.source_connected.get_or_create(label).set(0);
        }
    }
}
