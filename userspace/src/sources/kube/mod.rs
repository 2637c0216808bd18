//! The Kubernetes source: watchers on Pods, EndpointSlices and (when an EndpointSlice output needs
//! them) Nodes ([`watchers`]), each kept in a [`store::Store`] as the few fields the compiler
//! reads ([`model`]); records are compiled from them by pure functions ([`compile`]) into groups
//! ([`groups`]). The whole state is published once every watcher has listed everything; after
//! that, each burst of events publishes the groups it changed, and a relist the difference from
//! what was held.
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
pub mod groups;
pub mod model;
pub mod saved;
pub mod store;
pub mod syntax;
pub mod watch_state;
pub mod watchers;

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::{FutureExt, StreamExt};
use hickory_proto::rr::Name;
use kube::Client;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::{
    agent_config::AgentConfig,
    health::Health,
    metrics::{Metrics, ServerLabel, SourceErrorLabel, SourceLabel},
    sources::{
        Delta, Snapshot, Update,
        kube::{
            failover::{Failover, another_server_may_help},
            groups::State,
            watch_state::{Transition, WatchState, failure_reason},
            watchers::{Outcome, Watchers},
        },
    },
};

/// Name of this source in metrics, logs and readiness.
pub const SOURCE: &str = "kubernetes";
/// How often the watchers' state reaches readiness and metrics.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Where the source stands between events.
struct Progress {
    watch: Vec<WatchState>,
    /// Serving records saved by an earlier run until every watcher has listed.
    restored: bool,
    /// The whole state has been sent since the watchers started (after that, what changed).
    published: bool,
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

/// Runs the watchers until the agent stops. With `saved`, the records the last run saved there
/// (the persister keeps them) are served until every watcher has listed.
pub async fn run(
    config: Arc<AgentConfig>,
    client: Client,
    updates: mpsc::Sender<Update>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    contact: contact::ContactLog,
    saved: Option<PathBuf>,
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
    let mut state = State::new(&config, &watchers);
    let mut progress = Progress {
        watch: watchers.ids.iter().cloned().map(WatchState::new).collect(),
        restored: false,
        published: false,
        trimmed: false,
        pending: Vec::new(),
        revision: None,
        listed: None,
    };
    if let Some(path) = &saved
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
            // The whole state the first time, and in place of saved records; else what changed.
            let delta = if !progress.published || (progress.restored && all_synced) {
                let mut snapshot = state.snapshot(&config, &metrics);
                snapshot.pending_zones = pending;
                Delta::Whole(snapshot)
            } else {
                Delta::Groups {
                    changes: state.take_changes(&config, &metrics),
                    pending_zones: Some(pending),
                }
            };
            if all_synced {
                if !progress.trimmed {
                    // The first lists parsed every object in full and freed it: give that memory
                    // back rather than keep the peak resident.
                    release_freed_memory();
                    progress.trimmed = true;
                }
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
                delta,
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
                delta: Delta::Whole(Snapshot {
                    groups: restored.groups,
                    ..Snapshot::default()
                }),
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
    state.apply(config, watchers, change)
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
    for slice in state.slices(i).values() {
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
