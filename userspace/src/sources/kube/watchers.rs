//! The watchers the configuration asks for: one per pod source and namespace (cluster-wide only
//! when no namespace is named, so that RBAC can be namespaced), one per EndpointSlice output, and
//! one on Nodes when an output takes node addresses. Each comes with what it watches and the
//! zones whose names depend on it. Every watch request asks the API server to end the watch
//! after `timeoutSeconds` (see [`super::watch_state::watch_timeout`]), and each watcher can be
//! restarted alone ([`Watchers::restart`]) when it goes silent.

use std::time::Instant;

use futures::{
    StreamExt,
    stream::{AbortHandle, Abortable, BoxStream},
};
use hickory_proto::rr::Name;
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, utils::Backoff, watcher},
};

use crate::sources::kube::{
    config::KubeConfig, contact::watch_key, model::SERVICE_NAME_LABEL, watch_state::WatcherId,
};

/// Watch restarts back off from this...
const BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(100);
/// ...to at most this: the agent must converge within seconds once the API server is back.
const BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Doubling backoff between BACKOFF_MIN and BACKOFF_MAX, reset by every successful event.
struct CappedBackoff {
    next: std::time::Duration,
}

impl Iterator for CappedBackoff {
    type Item = std::time::Duration;
    fn next(&mut self) -> Option<std::time::Duration> {
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

/// One watcher's event.
pub enum Change {
    /// The pod watcher of this index (into [`Watchers::pod_sources`]).
    Pod(usize, Box<watcher::Event<Pod>>),
    /// The EndpointSlice output of this index.
    Slice(usize, Box<watcher::Event<EndpointSlice>>),
    Node(Box<watcher::Event<Node>>),
}

impl Change {
    /// The resourceVersion the event carries, as a number: etcd's revision, one counter for the
    /// whole cluster (None for events without an object, or an opaque version).
    pub fn revision(&self) -> Option<u64> {
        fn of<K: kube::Resource>(event: &watcher::Event<K>) -> Option<u64> {
            match event {
                watcher::Event::Apply(o)
                | watcher::Event::Delete(o)
                | watcher::Event::InitApply(o) => {
                    o.meta().resource_version.as_deref()?.parse().ok()
                }
                watcher::Event::Init | watcher::Event::InitDone => None,
            }
        }
        match self {
            Change::Pod(_, event) => of(event),
            Change::Slice(_, event) => of(event),
            Change::Node(event) => of(event),
        }
    }

    /// Whether this is `InitDone`: a list is complete.
    pub fn ends_a_list(&self) -> bool {
        match self {
            Change::Pod(_, event) => matches!(**event, watcher::Event::InitDone),
            Change::Slice(_, event) => matches!(**event, watcher::Event::InitDone),
            Change::Node(event) => matches!(**event, watcher::Event::InitDone),
        }
    }

    /// Whether this is `Init`, which the watcher emits before it asks for a list: nothing the
    /// API server said.
    pub fn starts_a_list(&self) -> bool {
        match self {
            Change::Pod(_, event) => matches!(**event, watcher::Event::Init),
            Change::Slice(_, event) => matches!(**event, watcher::Event::Init),
            Change::Node(event) => matches!(**event, watcher::Event::Init),
        }
    }
}

/// An event or failure of the watcher at `.0` (an index into [`Watchers::ids`]), with when it
/// was seen.
pub type Outcome = (usize, Result<Change, watcher::Error>, Instant);

pub struct Watchers {
    /// What each watcher watches, pod watchers first, then one per EndpointSlice output, then
    /// the node watcher.
    pub ids: Vec<WatcherId>,
    /// The zones whose names each watcher's objects give.
    pub zones: Vec<Vec<Name>>,
    /// The pod source each pod watcher serves.
    pub pod_sources: Vec<usize>,
    pub streams: Vec<BoxStream<'static, Outcome>>,
    /// Per watcher, how to ask for its collection's current revision.
    pub probes: Vec<RevisionProbe>,
    /// Per watcher, what ends its stream (when it is restarted).
    aborts: Vec<AbortHandle>,
    /// The `timeoutSeconds` of every watch request.
    timeout: u32,
}

/// Asks the API server for the current revision of one watcher's collection (a list of at most
/// one object: its resourceVersion is the revision the list was read at). Asked before a
/// watcher's list request, that revision is at least that of every change any watcher has seen
/// before, deletions included, whose events a list does not carry, and at most the list's.
#[derive(Clone)]
pub enum RevisionProbe {
    Pods(Api<Pod>),
    Slices(Api<EndpointSlice>),
    Nodes(Api<Node>),
}

/// How long a probe may take before the revision is taken from the events alone.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl RevisionProbe {
    pub async fn revision(&self) -> Option<u64> {
        let params = kube::api::ListParams::default().limit(1);
        let version = tokio::time::timeout(PROBE_TIMEOUT, async {
            match self {
                Self::Pods(api) => api.list_metadata(&params).await.map(|l| l.metadata),
                Self::Slices(api) => api.list_metadata(&params).await.map(|l| l.metadata),
                Self::Nodes(api) => api.list_metadata(&params).await.map(|l| l.metadata),
            }
        })
        .await
        .ok()?
        .ok()?
        .resource_version?;
        version.parse().ok()
    }
}

impl Watchers {
    /// Every watcher the configuration asks for, on `client`, each watch request asking the API
    /// server to end it after `timeout` seconds. Nothing is asked before the streams are polled.
    pub fn start(config: &KubeConfig, client: &Client, timeout: u32) -> Self {
        let mut watchers = Watchers {
            ids: Vec::new(),
            zones: Vec::new(),
            pod_sources: Vec::new(),
            streams: Vec::new(),
            probes: Vec::new(),
            aborts: Vec::new(),
            timeout,
        };
        let watch_config = || watcher::Config::default().timeout(timeout);
        for (i, source) in config.pods.iter().enumerate() {
            let selector = match &source.label_value {
                Some(value) => format!("{}={value}", source.label_key),
                None => source.label_key.clone(),
            };
            let namespaces: Vec<Option<&String>> = if source.namespaces.is_empty() {
                vec![None]
            } else {
                source.namespaces.iter().map(Some).collect()
            };
            for namespace in namespaces {
                let api: Api<Pod> = match namespace {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::all(client.clone()),
                };
                let pod_watcher = watchers.pod_sources.len();
                watchers.pod_sources.push(i);
                watchers.probes.push(RevisionProbe::Pods(api.clone()));
                let stream = watcher(api, watch_config().labels(&selector))
                    .backoff(backoff())
                    .map(move |r| r.map(|e| Change::Pod(pod_watcher, Box::new(e))));
                let path = match namespace {
                    Some(ns) => format!("/api/v1/namespaces/{ns}/pods"),
                    None => "/api/v1/pods".to_owned(),
                };
                watchers.add(
                    WatcherId {
                        resource: "pods",
                        namespace: namespace.cloned(),
                        watch_key: watch_key(&path, Some(&selector)),
                        selector: Some(selector.clone()),
                    },
                    vec![source.zone.clone()],
                    stream,
                );
            }
        }
        for (i, source) in config.endpoint_slices.iter().enumerate() {
            let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &source.namespace);
            let selector = format!("{SERVICE_NAME_LABEL}={}", source.service);
            watchers.probes.push(RevisionProbe::Slices(api.clone()));
            let stream = watcher(api, watch_config().labels(&selector))
                .backoff(backoff())
                .map(move |r| r.map(|e| Change::Slice(i, Box::new(e))));
            let path = format!(
                "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices",
                source.namespace
            );
            watchers.add(
                WatcherId {
                    resource: "endpointslices",
                    namespace: Some(source.namespace.clone()),
                    watch_key: watch_key(&path, Some(&selector)),
                    selector: Some(selector),
                },
                vec![source.zone.clone()],
                stream,
            );
        }
        if config.needs_nodes() {
            let api: Api<Node> = Api::all(client.clone());
            watchers.probes.push(RevisionProbe::Nodes(api.clone()));
            let stream = watcher(api, watch_config())
                .backoff(backoff())
                .map(|r| r.map(|e| Change::Node(Box::new(e))));
            let zones = config
                .endpoint_slices
                .iter()
                .filter(|s| {
                    s.address_source != crate::sources::kube::config::AddressSource::EndpointSlice
                })
                .map(|s| s.zone.clone())
                .collect();
            watchers.add(
                WatcherId {
                    resource: "nodes",
                    namespace: None,
                    selector: None,
                    watch_key: watch_key("/api/v1/nodes", None),
                },
                zones,
                stream,
            );
        }
        watchers
    }

    /// Starts every watcher again on `client` (another API server), ending the old streams;
    /// returns the new ones.
    pub fn move_to(
        &mut self,
        config: &KubeConfig,
        client: &Client,
    ) -> Vec<BoxStream<'static, Outcome>> {
        let moved = Watchers::start(config, client, self.timeout);
        for abort in &self.aborts {
            abort.abort();
        }
        self.probes = moved.probes;
        self.aborts = moved.aborts;
        moved.streams
    }

    /// Ends the stream of watcher `index` and returns a new one on `client`, which lists and
    /// watches from the start (a relist: the store replaces what it held only once it is whole).
    pub fn restart(
        &mut self,
        config: &KubeConfig,
        client: &Client,
        index: usize,
    ) -> Option<BoxStream<'static, Outcome>> {
        // Building them all is cheap (nothing is asked before a stream is polled) and keeps one
        // definition of each watcher.
        let fresh = Watchers::start(config, client, self.timeout);
        let (stream, abort) = fresh.streams.into_iter().zip(fresh.aborts).nth(index)?;
        if let Some(old) = self.aborts.get_mut(index) {
            old.abort();
            *old = abort;
        }
        Some(stream)
    }

    fn add(
        &mut self,
        id: WatcherId,
        zones: Vec<Name>,
        stream: impl futures::Stream<Item = Result<Change, watcher::Error>> + Send + 'static,
    ) {
        let index = self.ids.len();
        self.ids.push(id);
        self.zones.push(zones);
        let (abort, registration) = AbortHandle::new_pair();
        self.aborts.push(abort);
        let stream = stream.map(move |r| (index, r, Instant::now()));
        self.streams
            .push(Abortable::new(stream, registration).boxed());
    }
}
