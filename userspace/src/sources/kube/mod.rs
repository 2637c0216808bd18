//! The Kubernetes source: watchers on Pods, EndpointSlices and (when an EndpointSlice output needs
//! them) Nodes ([`watchers`]), each kept in a [`store::Store`] as the few fields the compiler
//! reads ([`model`]); records are compiled from them by pure functions ([`compile`]). A complete
//! snapshot is published once every watcher has listed everything, and again after every change.
//!
//! A watcher that fails before its first list does not hold the others back: the snapshot is
//! published with that watcher's zones pending (SERVFAIL, Not Ready), and every other zone is
//! served. During an outage the last known records stay in service; how current they are comes
//! from the watchers themselves ([`watch_state`]). With a saved table ([`saved`]), a restarted
//! agent serves the records it last published, stale, until every watcher has listed again.

pub mod client;
pub mod compile;
pub mod contact;
pub mod failover;
pub mod model;
pub mod saved;
pub mod store;
pub mod syntax;
pub mod watch_state;
pub mod watchers;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::{FutureExt, StreamExt};
use hickory_proto::rr::Name;
use kube::Client;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::{
    agent_config::{AgentConfig, PodSource},
    health::Health,
    metrics::{Metrics, OutputLabel, ReasonLabel, ServerLabel, SourceErrorLabel, SourceLabel},
    publisher::Update,
    records::RecordGroup,
    sources::{
        Snapshot,
        kube::{
            compile::{Skipped, endpoint_addresses, endpoint_records, pod_records},
            failover::{Failover, another_server_may_help},
            model::{NodeInfo, PodInfo, SliceInfo},
            store::Store,
            watch_state::{Transition, WatchState, failure_reason},
            watchers::{Change, Outcome, Watchers},
        },
    },
};

/// Name of this source in metrics, logs and readiness.
pub const SOURCE: &str = "kubernetes";
/// How often the watchers' state reaches readiness and metrics, and a due save is written.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// The records a pod gives, compiled once when the pod changes (a change costs one pod's work,
/// not every pod's), and nothing else of it: with 100k pods, every byte kept per pod counts.
/// A pod that gives no record (not Ready, say) is not kept at all.
#[derive(PartialEq)]
struct PodRecords {
    records: RecordGroup,
    /// The names it should have had but cannot (a label value that is no DNS label).
    invalid: Vec<String>,
}

impl PodRecords {
    /// The pod's records, or None when it gives none and has nothing to report.
    fn of(source: &PodSource, info: &PodInfo) -> Option<Self> {
        let mut records = Vec::new();
        let mut skipped = Skipped::default();
        pod_records(source, [info], &mut records, &mut skipped);
        if records.is_empty() && skipped.invalid_names.is_empty() {
            return None;
        }
        Some(Self {
            records: records.into(),
            invalid: skipped.invalid_names,
        })
    }
}

/// Everything the watchers hold, and what the EndpointSlice outputs last resolved to.
struct State {
    /// One store per pod watcher.
    pods: Vec<Store<PodRecords>>,
    slices: Vec<Store<SliceInfo>>,
    nodes: Option<Store<NodeInfo>>,
    last_non_empty: Vec<Vec<IpAddr>>,
    /// Each EndpointSlice output's records as last published.
    endpoint_groups: Vec<RecordGroup>,
    /// Each output's "keeping the last answer" as last logged.
    kept: Vec<bool>,
    /// Pods whose invalid label value was logged (once per pod, until it is valid or gone).
    invalid_reported: BTreeSet<String>,
}

impl State {
    /// Whether the watcher at `index` (in [`Watchers::ids`] order) has listed.
    fn synced(&self, index: usize) -> bool {
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
}

/// Where the source stands between events.
struct Progress {
    watch: Vec<WatchState>,
    /// Serving records saved by an earlier run until every watcher has listed.
    restored: bool,
    /// A snapshot has been sent since the watchers started.
    published: bool,
    /// Records of a complete snapshot not yet saved.
    save_due: Option<Vec<RecordGroup>>,
    saving: Option<tokio::task::JoinHandle<()>>,
    /// Freed memory was handed back after the first complete snapshot.
    trimmed: bool,
    /// The zones last published as pending (logged when they change).
    pending: Vec<Name>,
    /// The highest Kubernetes revision seen, in events or by a probe after a list.
    revision: Option<u64>,
    /// A watcher whose list ended since the last probe: the collection's revision is asked for
    /// before the next publication.
    listed: Option<usize>,
}

impl Progress {
    /// Notes the revision an outcome carries, and whether it ends a list.
    fn note_revision(&mut self, (index, outcome, _): &Outcome) {
        let Ok(change) = outcome else { return };
        if let Some(revision) = change.revision() {
            self.raise_revision(revision);
        }
        if change.ends_a_list() {
            self.listed = Some(*index);
        }
    }

    fn raise_revision(&mut self, revision: u64) {
        self.revision = Some(self.revision.map_or(revision, |r| r.max(revision)));
    }
}

/// Returns the allocator's free memory to the system (glibc keeps it otherwise).
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs the watchers until the agent stops. With `save_to`, the records are saved there after
/// every complete snapshot (at most once per [`REPORT_INTERVAL`]) and served from there at start.
pub async fn run(
    config: Arc<AgentConfig>,
    client: Client,
    updates: mpsc::Sender<Update>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    contact: contact::ContactLog,
    save_to: Option<PathBuf>,
) {
    let access = &config.kubernetes;
    let configured: Vec<String> = access
        .api_server
        .iter()
        .chain(&access.fallback_api_servers)
        .map(|server| client::bracket_ipv6(server))
        .collect();
    let scheme = configured
        .first()
        .and_then(|s| s.split_once("://"))
        .map_or("https", |(scheme, _)| scheme)
        .to_owned();
    let mut failover = Failover::new(configured, Instant::now());
    show_active_server(&failover, &metrics);
    let mut watchers = Watchers::start(&config, &client);
    let mut state = State {
        pods: watchers
            .pod_sources
            .iter()
            .map(|_| Store::default())
            .collect(),
        slices: config
            .endpoint_slices
            .iter()
            .map(|_| Store::default())
            .collect(),
        nodes: config.needs_nodes().then(Store::default),
        last_non_empty: vec![Vec::new(); config.endpoint_slices.len()],
        endpoint_groups: vec![RecordGroup::from([]); config.endpoint_slices.len()],
        kept: vec![false; config.endpoint_slices.len()],
        invalid_reported: BTreeSet::new(),
    };
    let mut progress = Progress {
        watch: watchers.ids.iter().cloned().map(WatchState::new).collect(),
        restored: false,
        published: false,
        save_due: None,
        saving: None,
        trimmed: false,
        pending: Vec::new(),
        revision: None,
        listed: None,
    };
    if let Some(path) = &save_to
        && let Some(update) = restore(path, &health, &metrics)
    {
        if updates.send(update).await.is_err() {
            return;
        }
        progress.restored = true;
    }
    let label = SourceLabel {
        source: SOURCE.to_owned(),
    };
    let mut changes = futures::stream::select_all(std::mem::take(&mut watchers.streams));
    let mut report = tokio::time::interval(REPORT_INTERVAL);
    loop {
        let first = tokio::select! {
            change = changes.next() => match change {
                Some(change) => change,
                None => return,
            },
            _ = report.tick() => {
                notice_accepted_watches(&mut progress, &contact);
                if config.kubernetes.learn_api_servers {
                    failover.learn(learned_api_servers(&config, &state, &scheme));
                    show_active_server(&failover, &metrics);
                }
                let all_failing = progress.watch.iter().all(|w| {
                    w.failure.as_ref().is_some_and(|f| another_server_may_help(f.reason))
                });
                if let Some(server) = failover.next(all_failing, Instant::now()) {
                    match client::connect(&config.kubernetes, Some(&server), &contact).await {
                        Ok(client) => {
                            warn!(%server, "the watches move to another API server");
                            let moved = Watchers::start(&config, &client);
                            watchers.probes = moved.probes;
                            changes = futures::stream::select_all(moved.streams);
                        }
                        Err(err) => warn!(%server, %err, "cannot use this API server"),
                    }
                    show_active_server(&failover, &metrics);
                }
                report_progress(&state, &progress, &health, &metrics, &label);
                save_if_due(&mut progress, save_to.as_ref());
                continue;
            }
        };
        // Take every change already waiting: one publication for a burst.
        let observed = first.2;
        progress.note_revision(&first);
        let mut changed = apply(
            &mut state,
            &config,
            &watchers,
            &mut progress,
            first,
            &metrics,
        );
        while let Some(Some(next)) = changes.next().now_or_never() {
            progress.note_revision(&next);
            changed |= apply(
                &mut state,
                &config,
                &watchers,
                &mut progress,
                next,
                &metrics,
            );
        }
        let all_synced = (0..watchers.ids.len()).all(|i| state.synced(i));
        // Before every watcher has listed: publish what the others have (their zones served,
        // the rest pending) once every unlisted watcher has failed, unless saved records are
        // being served (they cover every zone, and stay until the watchers have listed).
        let publishable = all_synced
            || (!progress.restored
                && (0..watchers.ids.len())
                    .all(|i| state.synced(i) || progress.watch[i].failure.is_some()));
        if publishable && (changed || !progress.published || progress.restored) {
            let pending: Vec<Name> = (0..watchers.ids.len())
                .filter(|i| !state.synced(*i))
                .flat_map(|i| watchers.zones[i].iter().cloned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if pending != progress.pending {
                if pending.is_empty() {
                    info!("every watch has listed: no zone is pending");
                } else {
                    warn!(zones = ?pending.iter().map(Name::to_ascii).collect::<Vec<_>>(), "a watch fails before its first list: its zones answer SERVFAIL, the others are served");
                }
                progress.pending = pending.clone();
            }
            if let Some(index) = progress.listed.take()
                && let Some(revision) = watchers.probes[index].revision().await
            {
                progress.raise_revision(revision);
            }
            let mut snapshot = compile_snapshot(&config, &mut state, &metrics);
            snapshot.pending_zones = pending;
            if all_synced {
                if !progress.trimmed {
                    // The first lists parsed every object in full and freed it: give that memory
                    // back rather than keep the peak resident.
                    release_freed_memory();
                    progress.trimmed = true;
                }
                progress.save_due = Some(snapshot.groups.clone());
                if progress.restored {
                    info!("every watch has listed: the saved records are replaced");
                    progress.restored = false;
                    health.source_restored(SOURCE, None);
                    metrics.source_restored.get_or_create(&label).set(0);
                }
            }
            progress.published = true;
            let update = Update {
                source: SOURCE,
                snapshot,
                observed,
                complete: all_synced,
                revision: progress.revision,
            };
            if updates.send(update).await.is_err() {
                return;
            }
        }
        report_progress(&state, &progress, &health, &metrics, &label);
    }
}

/// The update that serves the records saved at `path`, if there are any.
fn restore(path: &std::path::Path, health: &Health, metrics: &Metrics) -> Option<Update> {
    match saved::load(path) {
        Ok(Some(restored)) => {
            let age = SystemTime::now()
                .duration_since(restored.saved_at)
                .unwrap_or_default();
            info!(
                file = %path.display(),
                age_s = age.as_secs(),
                "serving the records saved by the last run until every watch has listed"
            );
            health.source_restored(SOURCE, Some(restored.saved_at));
            metrics
                .source_restored
                .get_or_create(&SourceLabel {
                    source: SOURCE.to_owned(),
                })
                .set(1);
            Some(Update {
                source: SOURCE,
                snapshot: Snapshot {
                    groups: restored.groups,
                    ..Snapshot::default()
                },
                observed: Instant::now(),
                complete: false,
                revision: None,
            })
        }
        Ok(None) => None,
        Err(err) => {
            warn!(%err, "the saved records cannot be used; waiting for the watches");
            None
        }
    }
}

/// Applies one watcher outcome; returns whether the objects changed.
fn apply(
    state: &mut State,
    config: &AgentConfig,
    watchers: &Watchers,
    progress: &mut Progress,
    (index, outcome, seen): Outcome,
    metrics: &Metrics,
) -> bool {
    let watch = &mut progress.watch[index];
    let change = match outcome {
        Ok(change) => change,
        Err(err) => {
            let reason = failure_reason(&err);
            metrics
                .source_errors
                .get_or_create(&SourceErrorLabel {
                    source: SOURCE.to_owned(),
                    resource: watch.id.resource.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
            if watch.failed(reason, err.to_string(), seen) == Transition::Failing {
                warn!(watch = %watch.id, reason, %err, "the watch fails; retrying, the last known records stay in service");
            }
            return false;
        }
    };
    // `Init` starts an attempt to list (it comes before the list request): only what the API
    // server sent shows that the watch works.
    if !change.starts_a_list() {
        let transition = watch.succeeded(seen);
        log_recovery(watch, transition);
    }
    match change {
        Change::Pod(i, event) => {
            let source = &config.pods[watchers.pod_sources[i]];
            state.pods[i].apply(*event, |pod| {
                PodInfo::from_pod(pod, &source.label_key)
                    .and_then(|info| PodRecords::of(source, &info))
            })
        }
        Change::Slice(i, event) => state.slices[i].apply(*event, SliceInfo::from_slice),
        Change::Node(event) => match state.nodes.as_mut() {
            Some(nodes) => nodes.apply(*event, |node| Some(NodeInfo::from_node(node))),
            None => false,
        },
    }
}

/// The API servers `default/kubernetes` names now, as URLs with `scheme`.
fn learned_api_servers(config: &AgentConfig, state: &State, scheme: &str) -> Vec<String> {
    let Some(i) = config
        .endpoint_slices
        .iter()
        .position(|s| s.namespace == "default" && s.service == "kubernetes")
    else {
        return Vec::new();
    };
    let mut servers = Vec::new();
    for slice in state.slices[i].objects().values() {
        let Some(port) = slice.port else { continue };
        for endpoint in &slice.endpoints {
            if endpoint.ready == Some(false) {
                continue;
            }
            for address in &endpoint.addresses {
                servers.push(format!(
                    "{scheme}://{}",
                    std::net::SocketAddr::new(*address, port)
                ));
            }
        }
    }
    servers.sort();
    servers.dedup();
    servers
}

fn show_active_server(failover: &Failover, metrics: &Metrics) {
    for server in failover.candidates() {
        let active = server == failover.active();
        metrics
            .api_server_active
            .get_or_create(&ServerLabel { server })
            .set(i64::from(active));
    }
}

/// The one line that ends a watch's run of failures.
fn log_recovery(watch: &WatchState, transition: Transition) {
    if let Transition::Recovered { failures, lasted } = transition {
        info!(
            watch = %watch.id,
            failures,
            lasted_s = lasted.as_secs_f64(),
            "the watch works again"
        );
    }
}

/// Failing watchers whose watch the API server has accepted since: they work again.
fn notice_accepted_watches(progress: &mut Progress, contact: &contact::ContactLog) {
    let now = Instant::now();
    for watch in &mut progress.watch {
        if watch.watch_accepted_since_failure(contact.watch_accepted(&watch.id.watch_key)) {
            let transition = watch.succeeded(now);
            log_recovery(watch, transition);
        }
    }
}

/// Hands the watchers' state to readiness and metrics.
fn report_progress(
    state: &State,
    progress: &Progress,
    health: &Health,
    metrics: &Metrics,
    label: &SourceLabel,
) {
    let now = Instant::now();
    let mut current_as_of = Some(now);
    let mut problem = None;
    for (i, watch) in progress.watch.iter().enumerate() {
        let synced = state.synced(i);
        current_as_of = match (current_as_of, watch.current_as_of(synced, now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
        if problem.is_none() {
            problem = watch.problem(synced, now);
        }
    }
    health.source_current_as_of(SOURCE, current_as_of);
    health.source_problem(SOURCE, problem);
    let failing = progress.watch.iter().any(|w| w.failure.is_some());
    metrics
        .source_connected
        .get_or_create(label)
        .set(i64::from(!failing));
}

/// Writes the last complete snapshot's records, off the event loop, one write at a time.
fn save_if_due(progress: &mut Progress, save_to: Option<&PathBuf>) {
    let Some(path) = save_to else {
        progress.save_due = None;
        return;
    };
    if progress.saving.as_ref().is_some_and(|s| !s.is_finished()) {
        return;
    }
    let Some(groups) = progress.save_due.take() else {
        return;
    };
    let path = path.clone();
    progress.saving = Some(tokio::task::spawn_blocking(move || {
        if let Err(err) = saved::save(&path, &groups, SystemTime::now()) {
            warn!(%err, "cannot save the records for the next start");
        }
    }));
}

fn compile_snapshot(config: &AgentConfig, state: &mut State, metrics: &Metrics) -> Snapshot {
    let started = Instant::now();
    // Each pod's group as compiled when the pod last changed.
    let mut groups: Vec<RecordGroup> = Vec::new();
    let mut invalid_now = BTreeSet::new();
    for (key, pod) in state.pods.iter().flat_map(|store| store.objects()) {
        if !pod.records.is_empty() {
            groups.push(pod.records.clone());
        }
        if !pod.invalid.is_empty() {
            if !state.invalid_reported.contains(key) {
                warn!(pod = %key, names = ?pod.invalid, "a label value that is not a DNS label: the pod is left out");
            }
            invalid_now.insert(key.clone());
        }
    }
    metrics
        .dropped_records
        .get_or_create(&ReasonLabel {
            reason: "invalid_dns_label".into(),
        })
        .set(invalid_now.len() as i64);
    state.invalid_reported = invalid_now;
    let no_nodes = BTreeMap::new();
    let nodes = state.nodes.as_ref().map_or(&no_nodes, |n| n.objects());
    for (i, (source, store)) in config.endpoint_slices.iter().zip(&state.slices).enumerate() {
        let mut addresses = endpoint_addresses(source, store.objects().values(), nodes);
        let kept = addresses.is_empty()
            && source.keep_last_non_empty
            && !state.last_non_empty[i].is_empty();
        let service = format!("{}/{}", source.namespace, source.service);
        if kept != state.kept[i] {
            if kept {
                warn!(%service, output = %source.name, "no usable endpoint: keeping the last non-empty answer");
            } else {
                info!(%service, output = %source.name, "usable endpoints again");
            }
            state.kept[i] = kept;
        }
        if kept {
            addresses = state.last_non_empty[i].clone();
        } else if !addresses.is_empty() {
            state.last_non_empty[i] = addresses.clone();
        }
        let output = OutputLabel {
            source: service,
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
        groups,
        ..Snapshot::default()
    }
}
