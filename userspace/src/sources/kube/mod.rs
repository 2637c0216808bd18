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
//! from the watchers themselves ([`watch_state`]); a watcher that hears nothing for the silence
//! bound (80 s) fails and is restarted alone. With a saved table ([`saved`]), a restarted agent
//! serves the records it last published, stale, until every watcher has listed again; the groups
//! of each watcher that has listed replace their saved ones as soon as it has, so that a watcher
//! that cannot list holds back only its own records.

pub mod access;
pub mod api_health;
pub mod client;
pub mod compile;
pub mod config;
pub mod contact;
pub mod failover;
pub mod groups;
pub mod model;
pub mod node_rules;
pub mod node_state;
pub mod public;
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

use futures::{
    FutureExt, StreamExt,
    stream::{BoxStream, SelectAll},
};
use hickory_proto::rr::Name;
use kube::Client;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use hostport_dns_core::records::RecordGroup;

use crate::{
    health::Health,
    metrics::{Metrics, ServerLabel, SourceErrorLabel, SourceLabel},
    sources::{
        Delta, GroupKey, Snapshot, Update,
        kube::{
            api_health::Probers,
            config::KubeConfig,
            failover::{Failover, Move, another_server_may_help},
            groups::State,
            watch_state::{Transition, WatchState, failure_reason},
            watchers::{Outcome, RevisionProbe, Watchers},
        },
    },
};

/// Name of this source in metrics, logs and readiness.
pub const SOURCE: &str = "kubernetes";
/// How often the watchers' state reaches readiness and metrics.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Every watcher's events, as one stream.
type Changes = SelectAll<BoxStream<'static, Outcome>>;

/// What the watchers run on, and how long they may be silent.
struct Driver {
    config: Arc<KubeConfig>,
    /// The client of the API server in use.
    client: Client,
    contact: contact::ContactLog,
    metrics: Arc<Metrics>,
    failover: Failover,
    /// The scheme of the configured servers (that of the learned ones).
    scheme: String,
    /// How long a watcher may hear nothing before it fails and is restarted.
    silence: Duration,
    /// A probe of the first API server under way (a task: the loop does not wait for it).
    probe: Option<(String, tokio::task::JoinHandle<bool>)>,
}

/// Where the source stands between events.
struct Progress {
    watch: Vec<WatchState>,
    /// Serving records saved by an earlier run until every watcher has listed.
    restored: bool,
    /// The saved groups, while they are served.
    saved: Vec<(GroupKey, RecordGroup)>,
    /// Per watcher, whether its live groups have replaced the saved ones (while restored).
    live: Vec<bool>,
    /// The whole state has been sent since the watchers started (after that, what changed).
    published: bool,
    /// Freed memory was handed back after the first complete snapshot.
    trimmed: bool,
    /// The zones last published as pending (logged when they change).
    pending: Vec<Name>,
    /// The highest Kubernetes revision seen, in events or by a probe before a list.
    revision: Option<u64>,
    /// Per watcher: the collection's revision, asked for when its list started (before the
    /// list request), taken once the list has ended.
    probed: Vec<Option<u64>>,
}

impl Progress {
    /// Notes the revision an outcome carries. A list's start asks for the collection's revision
    /// at once, before the stream is polled again (the watcher sends its list request only
    /// then): that revision is at least that of every change any node saw before, deletions
    /// included (a list does not show those), and not above the listed content's. Asked for
    /// after the list instead, it could be newer than what was listed, and name older content
    /// with the serial another node gives the newer. The list's end makes it count.
    async fn note_revision(&mut self, (index, outcome, _): &Outcome, probes: &[RevisionProbe]) {
        let Ok(change) = outcome else { return };
        if let Some(revision) = change.revision() {
            self.raise_revision(revision);
        }
        if change.starts_a_list() {
            let revision = match probes.get(*index) {
                Some(probe) => probe.revision().await,
                None => None,
            };
            if let Some(slot) = self.probed.get_mut(*index) {
                *slot = revision;
            }
        }
        if change.ends_a_list()
            && let Some(revision) = self.probed.get_mut(*index).and_then(Option::take)
        {
            self.raise_revision(revision);
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
    config: Arc<KubeConfig>,
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
    let silence = watch_state::silence_bound();
    let mut watchers = Watchers::start(&config, &client, watch_state::watch_timeout(silence));
    let mut state = State::new(&config, &watchers);
    let started = Instant::now();
    let mut progress = Progress {
        watch: watchers
            .ids
            .iter()
            .map(|id| WatchState::new(id.clone(), started))
            .collect(),
        restored: false,
        saved: Vec::new(),
        live: vec![false; watchers.ids.len()],
        published: false,
        trimmed: false,
        pending: Vec::new(),
        revision: None,
        probed: vec![None; watchers.ids.len()],
    };
    if let Some(path) = &saved
        && let Some(update) = restore(path, &health, &metrics)
    {
        if let Delta::Whole(snapshot) = &update.delta {
            progress.saved = snapshot.groups.clone();
        }
        if updates.send(update).await.is_err() {
            return;
        }
        progress.restored = true;
    }
    let label = SourceLabel {
        source: SOURCE.to_owned(),
    };
    let mut driver = Driver {
        failover: Failover::new(configured, started),
        config: config.clone(),
        client,
        contact,
        metrics: metrics.clone(),
        scheme,
        silence,
        probe: None,
    };
    show_active_server(&driver.failover, &metrics);
    let mut changes = futures::stream::select_all(std::mem::take(&mut watchers.streams));
    let mut report = tokio::time::interval(REPORT_INTERVAL);
    let mut probers = Probers::start(&config, &metrics);
    loop {
        let (observed, changed) = tokio::select! {
            change = changes.next() => {
                let Some(first) = change else { return };
                // Take every change already waiting: one publication for a burst.
                let observed = first.2;
                progress.note_revision(&first, &watchers.probes).await;
                let mut changed = apply(
                    &mut state,
                    &config,
                    &watchers,
                    &mut progress,
                    first,
                    &metrics,
                );
                while let Some(Some(next)) = changes.next().now_or_never() {
                    progress.note_revision(&next, &watchers.probes).await;
                    changed |= apply(
                        &mut state,
                        &config,
                        &watchers,
                        &mut progress,
                        next,
                        &metrics,
                    );
                }
                if changed {
                    follow_probe_targets(&probers, &state, &config);
                }
                (observed, changed)
            }
            // A health verdict changes the output's group as a change of its slices would.
            Some(verdict) = probers.verdicts.recv() => {
                (Instant::now(), state.follow_health(verdict.output, verdict.down))
            }
            _ = report.tick() => {
                notice_accepted_watches(&mut progress, &driver.contact);
                restart_silent_watchers(&driver, &mut watchers, &mut changes, &mut progress);
                follow_failover(&mut driver, &state, &mut progress, &mut watchers, &mut changes)
                    .await;
                report_progress(&state, &progress, &health, &metrics, &label);
                continue;
            }
        };
        let all_synced = (0..watchers.ids.len()).all(|i| state.synced(i));
        if progress.restored && !all_synced {
            if let Some(delta) =
                restored_delta(&mut state, &config, &mut progress, changed, &metrics)
            {
                let update = Update {
                    source: SOURCE,
                    delta,
                    observed,
                    complete: false,
                    revision: progress.revision,
                };
                if updates.send(update).await.is_err() {
                    return;
                }
            }
            report_progress(&state, &progress, &health, &metrics, &label);
            continue;
        }
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
                    progress.saved = Vec::new();
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

/// While saved records are served and some watcher has not listed: what to publish. Once a
/// watcher has listed, its live groups replace its saved ones (the whole state, mixed, once per
/// watcher that lists); after that its changes go out as they come. So a watcher that cannot list
/// (forbidden, say) keeps only its own saved records, and freezes no other.
fn restored_delta(
    state: &mut State,
    config: &KubeConfig,
    progress: &mut Progress,
    changed: bool,
    metrics: &Metrics,
) -> Option<Delta> {
    let live: Vec<bool> = (0..progress.live.len()).map(|i| state.synced(i)).collect();
    if live != progress.live {
        progress.live = live;
        let mut snapshot = state.snapshot(config, metrics);
        snapshot
            .groups
            .retain(|(key, _)| state.group_is_live(config, key));
        let saved = progress.saved.iter();
        snapshot.groups.extend(
            saved
                .filter(|(key, _)| !state.group_is_live(config, key))
                .cloned(),
        );
        return Some(Delta::Whole(snapshot));
    }
    if !changed {
        return None;
    }
    // Marks of a watcher that has not listed are dropped: its groups go out whole once it has.
    let changes: Vec<_> = state
        .take_changes(config, metrics)
        .into_iter()
        .filter(|(key, _)| state.group_is_live(config, key))
        .collect();
    (!changes.is_empty()).then_some(Delta::Groups {
        changes,
        pending_zones: None,
    })
}

/// Hands each probed output's prober the servers its slices list now.
fn follow_probe_targets(probers: &Probers, state: &State, config: &KubeConfig) {
    for i in 0..config.endpoint_slices.len() {
        if probers.probes(i) {
            probers.follow(i, state.probe_targets(config, i));
        }
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
    config: &KubeConfig,
    watchers: &Watchers,
    progress: &mut Progress,
    (index, outcome, seen): Outcome,
    metrics: &Metrics,
) -> bool {
    let Some(watch) = progress.watch.get_mut(index) else {
        return false;
    };
    // Anything from the stream, an error included, is news: the watch is not silent.
    watch.heard_at(seen);
    let change = match outcome {
        Ok(change) => change,
        Err(err) => {
            let reason = failure_reason(&err);
            count_error(metrics, watch, reason);
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

/// Counts a failure of `watch` for `reason`.
fn count_error(metrics: &Metrics, watch: &WatchState, reason: &str) {
    metrics
        .source_errors
        .get_or_create(&SourceErrorLabel {
            source: SOURCE.to_owned(),
            resource: watch.id.resource.to_owned(),
            reason: reason.to_owned(),
        })
        .inc();
}

/// Watchers that heard nothing for the silence bound fail (as of when they were last heard
/// from) and start again: a connection that carries nothing ends no other way before kube's own
/// idle timeout, and that one restarts silently.
fn restart_silent_watchers(
    driver: &Driver,
    watchers: &mut Watchers,
    changes: &mut Changes,
    progress: &mut Progress,
) {
    let now = Instant::now();
    for (i, watch) in progress.watch.iter_mut().enumerate() {
        if !watch.silent(driver.silence, now) {
            continue;
        }
        count_error(&driver.metrics, watch, watch_state::SILENT);
        let silent_s = now.saturating_duration_since(watch.heard).as_secs();
        if watch.fell_silent(now) == Transition::Failing {
            warn!(watch = %watch.id, silent_s, "the watch carries nothing; restarting it, the last known records stay in service");
        }
        if let Some(stream) = watchers.restart(&driver.config, &driver.client, i) {
            changes.push(stream);
        }
        // The restart is a new attempt: its silence counts from now.
        watch.heard_at(now);
    }
}

/// Moves the watchers to another API server when every watch fails here, and back to the first
/// once it answers.
async fn follow_failover(
    driver: &mut Driver,
    state: &State,
    progress: &mut Progress,
    watchers: &mut Watchers,
    changes: &mut Changes,
) {
    if driver.config.kubernetes.learn_api_servers {
        let learned = learned_api_servers(&driver.config, state, &driver.scheme);
        driver.failover.learn(learned);
        show_active_server(&driver.failover, &driver.metrics);
    }
    let all_failing = progress.watch.iter().all(|w| {
        w.failure
            .as_ref()
            .is_some_and(|f| another_server_may_help(f.reason))
    });
    let server = match driver.failover.next(all_failing, Instant::now()) {
        Some(Move::Away(server)) => {
            driver.probe = None;
            server
        }
        Some(Move::Back(server)) => {
            start_probe(driver, server);
            return;
        }
        None => match answered_probe(driver) {
            Some(server) => server,
            None => return,
        },
    };
    match client::connect(&driver.config.kubernetes, Some(&server), &driver.contact).await {
        Ok(client) => {
            warn!(%server, "the watches move to another API server");
            *changes = futures::stream::select_all(watchers.move_to(&driver.config, &client));
            driver.client = client;
            let now = Instant::now();
            for watch in &mut progress.watch {
                watch.heard_at(now);
            }
        }
        Err(err) => warn!(%server, %err, "cannot use this API server"),
    }
    show_active_server(&driver.failover, &driver.metrics);
}

/// Probes `server` (the first API server) in a task of its own: up to 2 s the loop would
/// otherwise spend not publishing.
fn start_probe(driver: &mut Driver, server: String) {
    let config = driver.config.clone();
    let contact = driver.contact.clone();
    let probed = server.clone();
    let handle =
        tokio::spawn(async move { client::answers(&config.kubernetes, &probed, &contact).await });
    driver.probe = Some((server, handle));
}

/// The first API server, once a finished probe says it answers (the watchers are then moved to
/// it); None while the probe runs or when it did not answer.
fn answered_probe(driver: &mut Driver) -> Option<String> {
    let (server, handle) = driver.probe.take_if(|(_, handle)| handle.is_finished())?;
    let answered = handle.now_or_never().and_then(Result::ok).unwrap_or(false);
    if !answered {
        debug!(%server, "the first API server does not answer yet: the watches stay");
        return None;
    }
    driver.failover.moved(server.clone(), Instant::now());
    Some(server)
}

/// The API servers `default/kubernetes` names now, as URLs with `scheme`.
fn learned_api_servers(config: &KubeConfig, state: &State, scheme: &str) -> Vec<String> {
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
        let accepted = contact.watch_accepted(&watch.id.watch_key);
        if let Some(at) = accepted {
            watch.heard_at(at);
        }
        if watch.watch_accepted_since_failure(accepted) {
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
