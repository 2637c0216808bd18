//! The publisher: the one task that turns the sources' deltas into the table both answer paths
//! read.
//!
//! Whatever is queued when it wakes is one batch: the updates are applied in order to what it
//! holds of each source ([`held`]), the last change of a group wins, and only the groups whose
//! records differ from the compiler's are compiled again: one compile and one kernel write for
//! the batch, however many changes it carries, and nothing waits when the queue is empty. A
//! batch that changes no name publishes nothing (answer caches kept, no switch, no transfer
//! version, no NOTIFY). The new table goes to both paths together ([`both_paths`]); what must
//! outlive the process goes to the persister (`persist.rs`), off this path.

pub mod both_paths;
mod held;
mod reverse_grace;

use std::{
    sync::Arc,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

pub use both_paths::{AfterFirstWrite, KernelSink, kernel_report};

use hostport_dns_core::{
    dns::WireName,
    table::{CompileWarning, ReverseConfig, TableBuilder, catalog::CatalogSpec},
};

use crate::{
    health::Health,
    metrics::{Metrics, ReasonLabel, SourceLabel},
    persist::Persister,
    serials::Serials,
    server::Shared,
    sources::{GroupKey, Groups, Update},
    transfer::config::CatalogConfig,
    xdp::writer_thread::TableChange,
};
use held::{Changes, Held};

/// Name of the configuration file's zones and static records as a source.
pub const CONFIG_SOURCE: &str = "config";
/// Name of the record-file source in metrics and logs.
pub const FILE_SOURCE: &str = "file";
/// Name of the Kubernetes source (its records are the ones saved for the next start).
pub const KUBERNETES_SOURCE: &str = crate::sources::kube::SOURCE;

/// Compiles what the sources say into the table both paths answer from.
pub struct Publisher {
    shared: Arc<Shared>,
    /// The kernel table's writer, once XDP is up.
    kernel: Arc<KernelSink>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    persister: Arc<Persister>,
    /// Sources that must all deliver once before anything is served.
    expected: Vec<&'static str>,
    held: Held,
    /// Whether each source's last update was its complete state.
    complete: FxHashMap<&'static str, bool>,
    /// The compiler holding the current table, once every source has delivered.
    builder: Option<TableBuilder>,
    /// What the table lacks now, by the group that brought it (None: the zones themselves).
    dropped: FxHashMap<Option<(&'static str, GroupKey)>, Vec<CompileWarning>>,
    /// The reverse zones the table serves.
    reverse: Arc<ReverseConfig>,
    /// The catalog zone the table keeps of the zones served (None: none).
    catalog: Option<CatalogSpec>,
    /// The derived reverse zones held (served empty, catalog members) after their last PTR
    /// record went; None without a catalog.
    grace: Option<reverse_grace::ReverseGrace>,
    /// The zones' serials.
    serials: Serials,
    /// The Kubernetes source's groups as served, once its state is complete (for the
    /// external-dns writer), if anyone follows them.
    kubernetes_groups: Option<watch::Sender<Option<Groups>>>,
}

/// What one batch compiled.
enum Compiled {
    /// Everything (the first table, or the zones changed).
    Whole,
    /// These names only (none: nothing changed).
    Names(Vec<WireName>),
}

impl Publisher {
    pub fn new(
        shared: Arc<Shared>,
        kernel: Arc<KernelSink>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        expected: Vec<&'static str>,
    ) -> Self {
        for source in &expected {
            health.expect_source(source);
        }
        Self {
            shared,
            kernel,
            metrics,
            health,
            persister: Persister::start(Default::default()),
            expected,
            held: Held::default(),
            complete: FxHashMap::default(),
            builder: None,
            dropped: FxHashMap::default(),
            reverse: Arc::default(),
            catalog: None,
            grace: None,
            serials: Serials::new(),
            kubernetes_groups: None,
        }
    }

    /// The Kubernetes source's groups, each time a publication serves a complete state of it
    /// that differs (None until the first).
    pub fn follow_kubernetes_groups(&mut self) -> watch::Receiver<Option<Groups>> {
        let (sender, receiver) = watch::channel(None);
        self.kubernetes_groups = Some(sender);
        receiver
    }

    /// Hands the Kubernetes groups served now to their follower, when complete and changed (a
    /// persistent map: the copy costs nothing).
    fn share_kubernetes_groups(&self) {
        let Some(sender) = &self.kubernetes_groups else {
            return;
        };
        if self.complete.get(KUBERNETES_SOURCE) != Some(&true) {
            return;
        }
        let Some(state) = self.held.source(KUBERNETES_SOURCE) else {
            return;
        };
        sender.send_if_modified(|shared| {
            if shared.as_ref().is_some_and(|g| g.ptr_eq(&state.groups)) {
                return false;
            }
            *shared = Some(state.groups.clone());
            true
        });
    }

    /// Keeps the serials and the Kubernetes records through `persister`, starting from
    /// `serials` (as the last run left them).
    pub fn persist_with(&mut self, persister: Arc<Persister>, serials: Serials) {
        self.persister = persister;
        self.serials = serials;
    }

    /// The serials follow Kubernetes revisions (a Kubernetes source is configured).
    pub fn follow_revisions(&mut self) {
        self.serials.follow_revisions();
    }

    /// The reverse zones to serve (default: derived from the served addresses).
    pub fn serve_reverse(&mut self, reverse: ReverseConfig) {
        self.reverse = Arc::new(reverse);
    }

    /// Keeps a catalog zone (RFC 9432) of the zones served, as `config` says.
    pub fn serve_catalog(&mut self, config: Option<CatalogConfig>) {
        self.grace = config
            .as_ref()
            .map(|c| reverse_grace::ReverseGrace::new(c.grace));
        self.catalog = config.map(|c| c.spec);
    }

    /// Publishes every batch of updates until all senders are gone: a batch is what is queued
    /// when the publisher wakes.
    pub async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        loop {
            // A held reverse zone's grace period ends with no update to wake for: publish then.
            let expiry = self.grace.as_ref().and_then(|g| g.next_expiry());
            let first = match expiry {
                Some(at) => tokio::select! {
                    update = updates.recv() => update,
                    () = tokio::time::sleep_until(at.into()) => {
                        self.publish(Vec::new());
                        continue;
                    }
                },
                None => updates.recv().await,
            };
            let Some(first) = first else {
                break;
            };
            let mut batch = vec![first];
            while let Ok(next) = updates.try_recv() {
                batch.push(next);
            }
            self.publish(batch);
        }
    }

    /// Applies a batch of updates and publishes the result, if it changed anything.
    pub fn publish(&mut self, batch: Vec<Update>) {
        let mut changes = Changes::default();
        let mut observed: Option<Instant> = None;
        let mut revision: Option<u64> = None;
        let mut sources = Vec::with_capacity(batch.len());
        for update in batch {
            self.note_source(&update);
            observed = Some(observed.map_or(update.observed, |o| o.min(update.observed)));
            revision = revision.max(update.revision);
            if !sources.contains(&update.source) {
                sources.push(update.source);
            }
            self.held.apply(update.source, update.delta, &mut changes);
        }
        for source in &sources {
            let records = self.held.source(source).map_or(0, |s| s.records);
            self.metrics
                .source_records
                .get_or_create(&SourceLabel {
                    source: (*source).to_owned(),
                })
                .set(records as i64);
        }
        if let Some(missing) = self.expected.iter().find(|s| !self.held.has(s)) {
            // Until every source has listed everything: SERVFAIL, never a partial table that
            // would make a load balancer drop backends.
            info!(
                sources = ?sources,
                waiting_for = missing,
                "source synced; waiting for the others"
            );
            return;
        }
        self.share_kubernetes_groups();
        let started = Instant::now();
        if let Some(revision) = revision {
            self.serials.note_revision(revision);
        }
        let before: std::collections::BTreeSet<_> = self
            .builder
            .as_ref()
            .map(|b| b.table().reverse_networks().copied().collect())
            .unwrap_or_default();
        let (compiled, warnings) = self.compile(changes);
        self.count_warnings(&warnings);
        let Some(builder) = self.builder.as_mut() else {
            return;
        };
        let mut held_changed = false;
        if let Some(grace) = self.grace.as_mut() {
            let held = grace.follow(&before, builder.table(), Instant::now());
            held_changed = builder.hold_reverse(held);
            self.metrics
                .catalog_removals_pending
                .set(grace.held_count() as i64);
        }
        if let Some(catalog) = builder.table().catalog() {
            self.metrics
                .catalog_members
                .set(catalog.members.len() as i64);
        }
        if !held_changed && matches!(&compiled, Compiled::Names(names) if names.is_empty()) {
            debug!(sources = ?sources, "nothing changed: nothing published");
            return;
        }
        let serials = &mut self.serials;
        builder.assign_serials(|zone| serials.serial_for(&zone.spec.apex, zone.digest));
        builder.assign_reverse_serials(|apex, digest| serials.serial_for(apex, digest));
        builder.assign_catalog_serial(|apex, digest| serials.serial_for(apex, digest));
        let table = builder.table().clone();
        let changed = match &compiled {
            Compiled::Whole => table.nodes().len(),
            Compiled::Names(names) => names.len(),
        };
        self.metrics.table_names_changed.inc_by(changed as u64);
        let change = match compiled {
            Compiled::Whole => TableChange::Whole,
            Compiled::Names(names) => TableChange::Names(names),
        };
        info!(
            names = table.nodes().len(),
            records = table.record_count(),
            sources = ?sources,
            compile_ms = started.elapsed().as_secs_f64() * 1e3,
            "table compiled"
        );
        self.kernel.post(
            table,
            change,
            observed.unwrap_or(started),
            &both_paths::Paths {
                shared: &self.shared,
                metrics: &self.metrics,
                health: &self.health,
            },
        );
        self.persist();
        // What the sources' parsing and the compile freed (the kernel writer does its own).
        crate::heap::release_after(changed);
    }

    /// Source-level metrics and readiness for one update.
    fn note_source(&mut self, update: &Update) {
        let label = SourceLabel {
            source: update.source.to_owned(),
        };
        self.complete.insert(update.source, update.complete);
        if update.complete {
            self.metrics.source_synced.get_or_create(&label).set(1);
            self.metrics
                .source_last_sync
                .get_or_create(&label)
                .set(unix_now());
            let live = update.source != CONFIG_SOURCE && update.source != FILE_SOURCE;
            self.health.source_synced(update.source, live);
        }
    }

    /// Brings the compiler in line with what the sources hold now, `changes` being what this
    /// batch touched.
    fn compile(&mut self, changes: Changes) -> (Compiled, Vec<CompileWarning>) {
        let builder = match self.builder.as_mut() {
            Some(builder) if !changes.zones => builder,
            _ => return self.compile_whole(),
        };
        let mut warnings = Vec::new();
        for ((source, key), before) in changes.touched {
            let now = self
                .held
                .source(source)
                .and_then(|state| state.groups.get(&key))
                .cloned();
            if let Some(before) = &before {
                builder.remove(before.iter());
            }
            let at = Some((source, key));
            self.dropped.remove(&at);
            if let Some(now) = &now {
                let dropped = builder.add(now.iter());
                if !dropped.is_empty() {
                    warnings.extend(dropped.iter().cloned());
                    self.dropped.insert(at, dropped);
                }
            }
        }
        (Compiled::Names(builder.finish()), warnings)
    }

    /// A new compiler, fed every group of every source.
    fn compile_whole(&mut self) -> (Compiled, Vec<CompileWarning>) {
        let zones = self.held.zones();
        let (mut builder, mut warnings) = TableBuilder::new(&zones);
        builder.set_reverse_config(self.reverse.clone());
        builder.set_catalog(self.catalog.clone());
        self.dropped.clear();
        if !warnings.is_empty() {
            self.dropped.insert(None, warnings.clone());
        }
        for (source, state) in self.held.sources() {
            for (key, group) in &state.groups {
                let dropped = builder.add(group.iter());
                if !dropped.is_empty() {
                    warnings.extend(dropped.iter().cloned());
                    self.dropped.insert(Some((source, key.clone())), dropped);
                }
            }
        }
        builder.finish();
        self.builder = Some(builder);
        (Compiled::Whole, warnings)
    }

    /// Hands the persister what must outlive the process: the Kubernetes records of a complete
    /// state, and the serials when they changed. With Kubernetes records kept, serials go only
    /// with them (never ahead of the records they describe).
    fn persist(&mut self) {
        let kube = self.held.source(KUBERNETES_SOURCE);
        let records = kube
            .filter(|_| self.persister.keeps_records())
            .filter(|_| self.complete.get(KUBERNETES_SOURCE) == Some(&true))
            .map(|state| state.groups.clone());
        if kube.is_some() && self.persister.keeps_records() && records.is_none() {
            return;
        }
        let serials = self.serials.take_changes();
        self.persister.offer(records, serials);
    }

    /// Logs the records this batch dropped (once: a group that does not change is not compiled
    /// again), and sets the gauge of what the table lacks now.
    fn count_warnings(&self, warnings: &[CompileWarning]) {
        for warning in warnings {
            warn!(%warning, "record dropped");
        }
        for reason in ["out_of_zone", "out_of_zone_glue"] {
            let now = self
                .dropped
                .values()
                .flatten()
                .filter(|w| warning_reason(w) == reason)
                .count();
            self.metrics
                .dropped_records
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .set(now as i64);
        }
    }
}

fn warning_reason(warning: &CompileWarning) -> &'static str {
    match warning {
        CompileWarning::OutOfZone { .. } => "out_of_zone",
        CompileWarning::OutOfZoneGlue { .. } => "out_of_zone_glue",
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hickory_proto::rr::Name;

    use super::*;
    use crate::sources::{Delta, Snapshot};
    use hostport_dns_core::{
        records::{RecordData, RecordGroup, SourceRecord},
        table::RecordTable,
        zone::ZoneSpec,
    };

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn zones() -> Vec<ZoneSpec> {
        ["a.example.", "b.example."]
            .iter()
            .map(|apex| ZoneSpec::with_defaults(Name::from_ascii(apex).unwrap()))
            .collect()
    }

    /// A pod's records: a few addresses at one of a few names, sometimes out of every zone.
    fn random_group(rng: &mut Rng) -> RecordGroup {
        let zone = ["a.example.", "b.example.", "c.other."][rng.below(3) as usize];
        let owner = format!("n{}.x{}.{zone}", rng.below(6), rng.below(2));
        let records: Vec<SourceRecord> = (0..1 + rng.below(3))
            .map(|_| SourceRecord {
                name: WireName::from_name(&Name::from_ascii(&owner).unwrap()),
                ttl: (rng.below(4) == 0).then(|| 30 + rng.below(3) as u32),
                data: if rng.below(4) == 0 {
                    RecordData::Aaaa(format!("2001:db8::{}", rng.below(5)).parse().unwrap())
                } else {
                    RecordData::A(format!("198.18.0.{}", rng.below(5)).parse().unwrap())
                },
            })
            .collect();
        records.into()
    }

    /// What matters of a table for the comparison: its names and nodes, its zones' digests, and
    /// address to names (serials are the publisher's to number).
    fn content(table: &RecordTable) -> String {
        let nodes: BTreeMap<String, String> = table
            .nodes()
            .map(|(name, node)| (name.to_string(), format!("{node:?}")))
            .collect();
        let zones: Vec<(String, u64)> = table
            .zones()
            .iter()
            .map(|z| (z.spec.apex.to_string(), z.digest))
            .collect();
        let mut reverse = Vec::new();
        for (_, node) in table.nodes() {
            for address in node.addresses() {
                reverse.push(format!(
                    "{address}: {:?}",
                    table.names_with_address(&address)
                ));
            }
        }
        reverse.sort();
        reverse.dedup();
        format!("{nodes:?}\n{zones:?}\n{reverse:?}")
    }

    fn publisher() -> (Publisher, Arc<Shared>) {
        let shared = Shared::new();
        let health = Arc::new(Health::new(None));
        let (metrics, _) = Metrics::register(shared.clone(), health.clone(), None);
        let publisher = Publisher::new(
            shared.clone(),
            Arc::default(),
            metrics,
            health,
            vec![CONFIG_SOURCE, KUBERNETES_SOURCE],
        );
        (publisher, shared)
    }

    /// Random adds, changes, removals and relists (whole states that keep, change, drop and
    /// add groups), published in random batches: after every batch the table served is the one
    /// a full compile of the same records gives.
    #[test]
    fn deltas_in_batches_give_the_table_of_a_full_compile() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..40 {
            let (mut publisher, shared) = publisher();
            let mut model: BTreeMap<String, RecordGroup> = BTreeMap::new();
            publisher.publish(vec![Update::whole(
                CONFIG_SOURCE,
                Snapshot {
                    zones: zones(),
                    ..Snapshot::default()
                },
            )]);
            for _ in 0..30 {
                let mut batch = Vec::new();
                for _ in 0..1 + rng.below(4) {
                    let delta = match rng.below(10) {
                        // A relist: most groups kept (some in new allocations), some changed,
                        // some gone, some new.
                        0 => {
                            let mut groups: Vec<(GroupKey, RecordGroup)> = Vec::new();
                            for (key, group) in &model {
                                match rng.below(5) {
                                    0 => {}
                                    1 => groups.push((key.as_str().into(), random_group(&mut rng))),
                                    2 => groups.push((key.as_str().into(), group.to_vec().into())),
                                    _ => groups.push((key.as_str().into(), group.clone())),
                                }
                            }
                            groups.push((
                                format!("p{}", rng.below(40)).into(),
                                random_group(&mut rng),
                            ));
                            groups.sort_by(|a, b| a.0.cmp(&b.0));
                            groups.dedup_by(|a, b| a.0 == b.0);
                            model = groups
                                .iter()
                                .map(|(k, g)| (k.to_string(), g.clone()))
                                .collect();
                            Delta::Whole(Snapshot {
                                groups,
                                ..Snapshot::default()
                            })
                        }
                        _ => {
                            let changes: Vec<(GroupKey, Option<RecordGroup>)> = (0..1 + rng
                                .below(3))
                                .map(|_| {
                                    let key = format!("p{}", rng.below(40));
                                    let group = (rng.below(3) != 0).then(|| random_group(&mut rng));
                                    match &group {
                                        Some(g) => model.insert(key.clone(), g.clone()),
                                        None => model.remove(&key),
                                    };
                                    (GroupKey::from(key), group)
                                })
                                .collect();
                            Delta::Groups {
                                changes,
                                pending_zones: None,
                            }
                        }
                    };
                    batch.push(Update {
                        source: KUBERNETES_SOURCE,
                        delta,
                        observed: Instant::now(),
                        complete: true,
                        revision: None,
                    });
                }
                publisher.publish(batch);
                let served = shared.table().expect("a table once every source delivered");
                let records: Vec<SourceRecord> =
                    model.values().flat_map(RecordGroup::iter).collect();
                let (compiled, _) = RecordTable::compile(&zones(), &records);
                assert_eq!(content(&served), content(&compiled), "round {round}");
            }
        }
    }

    #[test]
    fn a_batch_that_changes_nothing_publishes_nothing() {
        let (mut publisher, shared) = publisher();
        let group = || -> RecordGroup {
            vec![SourceRecord {
                name: WireName::from_name(&Name::from_ascii("web.a.example.").unwrap()),
                ttl: None,
                data: RecordData::A("198.18.0.1".parse().unwrap()),
            }]
            .into()
        };
        publisher.publish(vec![
            Update::whole(
                CONFIG_SOURCE,
                Snapshot {
                    zones: zones(),
                    ..Snapshot::default()
                },
            ),
            Update::whole(
                KUBERNETES_SOURCE,
                Snapshot {
                    groups: vec![("p".into(), group())],
                    ..Snapshot::default()
                },
            ),
        ]);
        let first = shared.table().expect("published");
        // The same records again (a relist), and a pod that comes and goes within one batch.
        publisher.publish(vec![
            Update::whole(
                KUBERNETES_SOURCE,
                Snapshot {
                    groups: vec![("p".into(), group())],
                    ..Snapshot::default()
                },
            ),
            Update {
                source: KUBERNETES_SOURCE,
                delta: Delta::Groups {
                    changes: vec![("q".into(), Some(group())), ("q".into(), None)],
                    pending_zones: None,
                },
                observed: Instant::now(),
                complete: true,
                revision: None,
            },
        ]);
        let after = shared.table().expect("published");
        assert!(
            Arc::ptr_eq(&first, &after),
            "the same table: nothing published"
        );
    }
}
