//! The publisher: the one task that turns the sources' snapshots into the table both answer
//! paths read. With XDP it posts each table to the kernel table's writer thread
//! (`xdp::writer_thread`) and goes on; the thread switches the kernel table, then the server's,
//! and reports ([`kernel_report`]). Without XDP it switches the server's table itself.
//!
//! Sources send complete snapshots, so nothing a source forgot can linger. The publisher finds
//! what changed by comparing record groups by identity (a source keeps the allocation of every
//! group that did not change) and recompiles only the names the changed groups touch: a change
//! costs the same with a hundred names or a hundred thousand.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use hickory_proto::rr::LowerName;

use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::{
    health::Health,
    metrics::{Metrics, ReasonLabel, SourceLabel},
    records::RecordGroup,
    serials::Serials,
    server::Shared,
    sources::Snapshot,
    table::{CompileWarning, RecordTable, ReverseConfig, TableBuilder},
    xdp::writer_thread::{Outcome, TableChange, WriterThread},
    zone::ZoneSpec,
};

/// Name of the configuration file's zones and static records as a source.
pub const CONFIG_SOURCE: &str = "config";
/// Name of the record-file source in metrics and logs.
pub const FILE_SOURCE: &str = "file";

/// A complete state from one source.
pub struct Update {
    pub source: &'static str,
    pub snapshot: Snapshot,
    /// When the change that led to it was observed.
    pub observed: Instant,
    /// The source's whole, current state: false while it serves saved records or some of its
    /// zones are pending (it has not synced).
    pub complete: bool,
    /// The Kubernetes revision (resourceVersion) the snapshot is at, when the source knows it:
    /// what the zones' serials follow (see `crate::serials`).
    pub revision: Option<u64>,
}

/// Compiles the sources' latest snapshots into the table both paths answer from: swaps it into
/// the server and writes it into the kernel maps.
pub struct Publisher {
    shared: Arc<Shared>,
    /// The kernel table's writer, once XDP is up.
    kernel: Arc<KernelSink>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// Sources that must all deliver once before anything is served.
    expected: Vec<&'static str>,
    snapshots: BTreeMap<&'static str, Snapshot>,
    /// The compiler holding the current table, once every source has delivered.
    builder: Option<TableBuilder>,
    /// What the table lacks now, by the group (see [`group_identity`]) that brought it.
    dropped: FxHashMap<usize, Vec<CompileWarning>>,
    /// The reverse zones the table serves.
    reverse: Arc<ReverseConfig>,
    /// The zones' serials.
    serials: Serials,
    serials_follow_revisions: bool,
}

/// What one publication compiled.
enum Compiled {
    /// Everything (the first table, or the zones changed).
    Whole,
    /// These names only.
    Names(Vec<LowerName>),
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
            expected,
            snapshots: BTreeMap::new(),
            builder: None,
            dropped: FxHashMap::default(),
            reverse: Arc::default(),
            serials: Serials::new(None),
            serials_follow_revisions: false,
        }
    }

    /// Keeps the zones' serials in `file` across restarts.
    pub fn keep_serials_in(&mut self, file: std::path::PathBuf) {
        let follows = self.serials_follow_revisions;
        self.serials = Serials::new(Some(file));
        if follows {
            self.serials.follow_revisions();
        }
    }

    /// The serials follow Kubernetes revisions (a Kubernetes source is configured).
    pub fn follow_revisions(&mut self) {
        self.serials_follow_revisions = true;
        self.serials.follow_revisions();
    }

    /// The reverse zones to serve (default: derived from the served addresses).
    pub fn serve_reverse(&mut self, reverse: ReverseConfig) {
        self.reverse = Arc::new(reverse);
    }

    pub fn publish(&mut self, update: Update) {
        let label = SourceLabel {
            source: update.source.to_owned(),
        };
        self.metrics
            .source_records
            .get_or_create(&label)
            .set(update.snapshot.record_count() as i64);
        if update.complete {
            self.metrics.source_synced.get_or_create(&label).set(1);
            self.metrics
                .source_last_sync
                .get_or_create(&label)
                .set(unix_now());
            let live = update.source != CONFIG_SOURCE && update.source != FILE_SOURCE;
            self.health.source_synced(update.source, live);
        }
        // Kept until the comparison below: while it lives, no new group can take the address of
        // one of its groups.
        let previous = self
            .snapshots
            .insert(update.source, update.snapshot)
            .unwrap_or_default();
        if let Some(missing) = self
            .expected
            .iter()
            .find(|s| !self.snapshots.contains_key(*s))
        {
            // Until every source has listed everything: SERVFAIL, never a partial table that
            // would make a load balancer drop backends.
            info!(
                source = update.source,
                waiting_for = missing,
                "source synced; waiting for the others"
            );
            return;
        }

        let started = Instant::now();
        if let Some(revision) = update.revision {
            self.serials.note_revision(revision);
        }
        let (compiled, warnings) = self.compile(update.source, &previous);
        let unchanged = matches!(&compiled, Compiled::Names(names) if names.is_empty());
        drop(previous);
        self.count_warnings(&warnings);
        let Some(builder) = self.builder.as_mut() else {
            return;
        };
        let serials = &mut self.serials;
        builder.assign_serials(|zone| serials.serial_for(&zone.spec.apex, zone.digest));
        builder.set_reverse_serial(serials.reverse_serial());
        serials.save();
        let table = builder.table().clone();
        let compile_ms = started.elapsed().as_secs_f64() * 1e3;
        let (names, records) = (table.nodes().len(), table.record_count());
        if unchanged {
            debug!(
                names,
                records,
                source = update.source,
                compile_ms,
                "table compiled, nothing changed"
            );
        } else {
            info!(
                names,
                records,
                source = update.source,
                compile_ms,
                "table compiled"
            );
        }
        let change = match compiled {
            Compiled::Whole => TableChange::Whole,
            Compiled::Names(names) => TableChange::Names(names),
        };
        let writer = self.kernel.writer.lock().unwrap_or_else(|e| e.into_inner());
        match writer.as_ref() {
            // The writer thread switches the kernel's table, then the server's, and reports.
            Some(kernel) => kernel.post_table(table, change, update.observed),
            None => switched(
                &self.shared,
                &self.metrics,
                &self.health,
                table,
                Some(update.observed),
            ),
        }
    }

    /// Brings the table in line with the snapshots, `source`'s having replaced `previous`.
    fn compile(&mut self, source: &str, previous: &Snapshot) -> (Compiled, Vec<CompileWarning>) {
        let pending: std::collections::BTreeSet<&hickory_proto::rr::Name> = self
            .snapshots
            .values()
            .flat_map(|s| &s.pending_zones)
            .collect();
        let mut zones: Vec<ZoneSpec> = self
            .snapshots
            .values()
            .flat_map(|s| s.zones.iter().cloned())
            .map(|mut zone| {
                zone.pending = pending.contains(&zone.apex);
                zone
            })
            .collect();
        zones.sort_by(|a, b| a.apex.cmp(&b.apex));
        match self.builder.as_mut() {
            Some(builder) if builder.zone_specs() == zones.as_slice() => {
                let Some(current) = self.snapshots.get(source) else {
                    return (Compiled::Names(Vec::new()), Vec::new());
                };
                let (gone, added) = group_changes(&previous.groups, &current.groups);
                let mut warnings = Vec::new();
                for group in gone {
                    builder.remove(group.iter());
                    self.dropped.remove(&group_identity(group));
                }
                for group in added {
                    let dropped = builder.add(group.iter());
                    if !dropped.is_empty() {
                        self.dropped.insert(group_identity(group), dropped.clone());
                    }
                    warnings.extend(dropped);
                }
                (Compiled::Names(builder.finish()), warnings)
            }
            _ => {
                let (mut builder, mut warnings) = TableBuilder::new(&zones);
                builder.set_reverse_config(self.reverse.clone());
                self.dropped.clear();
                if !warnings.is_empty() {
                    self.dropped.insert(0, warnings.clone());
                }
                for group in self.snapshots.values().flat_map(|s| &s.groups) {
                    let dropped = builder.add(group.iter());
                    if !dropped.is_empty() {
                        self.dropped.insert(group_identity(group), dropped.clone());
                    }
                    warnings.extend(dropped);
                }
                builder.finish();
                self.builder = Some(builder);
                (Compiled::Whole, warnings)
            }
        }
    }

    /// Logs the records this publication dropped (once: a group that does not change is not
    /// compiled again), and sets the gauge of what the table lacks now.
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

    /// Publishes every update until all senders are gone.
    pub async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        while let Some(update) = updates.recv().await {
            self.publish(update);
        }
    }
}

/// Where tables go before the server: the kernel table's writer, once XDP is up. Until then
/// the publisher switches the server's table itself.
#[derive(Default)]
pub struct KernelSink {
    writer: Mutex<Option<Arc<WriterThread>>>,
}

impl KernelSink {
    /// From now on tables go to `writer` first; the table the server answers from now goes at
    /// once (whole). Under the lock the publisher posts under, so no table overtakes it. Returns
    /// whether a table went.
    pub fn install(&self, writer: Arc<WriterThread>, shared: &Shared) -> bool {
        let mut held = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let table = shared.table();
        if let Some(table) = &table {
            writer.post_table(table.as_ref().clone(), TableChange::Whole, Instant::now());
        }
        *held = Some(writer);
        table.is_some()
    }
}

/// Runs once, after the first table is in the kernel (the agent attaches XDP there).
pub type AfterFirstWrite = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// What the kernel table's writer thread does after each switch: the server's table follows
/// the kernel's (so userspace never answers a newer table than XDP), then metrics, logs, and
/// `after_first_write` once.
pub fn kernel_report(
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    after_first_write: AfterFirstWrite,
) -> impl FnMut(Outcome) + Send + 'static {
    move |outcome: Outcome| {
        if let Some(table) = outcome.table {
            switched(&shared, &metrics, &health, table, outcome.observed);
        }
        match outcome.result {
            Ok(stats) => {
                if let Some(then) = after_first_write
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    then();
                }
                metrics.xdp_generations.inc();
                metrics.xdp_switch.observe(stats.switch_micros as f64 / 1e6);
                if stats.waited == Some(crate::xdp::writer::Waited::GracePeriod) {
                    metrics.xdp_grace_waits.inc();
                }
                metrics.xdp_table_names.set(stats.names_held as i64);
                metrics
                    .xdp_names_in_userspace
                    .set(stats.names_left_out as i64);
                metrics.xdp_collisions.set(stats.collisions as i64);
                if stats.collisions > 0 {
                    warn!(
                        collisions = stats.collisions,
                        "name hash collisions: those names are answered by userspace"
                    );
                }
                if stats.names_left_out > 0 {
                    warn!(
                        names = stats.names_left_out,
                        "the kernel table is full: what does not fit is answered by userspace"
                    );
                }
                debug!(?stats, tables = outcome.tables, "kernel table switched");
            }
            Err(err) => {
                metrics.xdp_write_errors.inc();
                error!(
                    %err,
                    "writing the kernel table failed; the next change rewrites it whole"
                )
            }
        }
    }
}

/// The server answers from `table` now: metrics and health follow.
fn switched(
    shared: &Shared,
    metrics: &Metrics,
    health: &Health,
    table: RecordTable,
    observed: Option<Instant>,
) {
    metrics.table_names.set(table.nodes().len() as i64);
    metrics.table_records.set(table.record_count() as i64);
    shared.publish(table);
    metrics.table_updates.inc();
    if let Some(observed) = observed {
        metrics
            .propagation
            .observe(observed.elapsed().as_secs_f64());
    }
    health.table_published();
}

fn warning_reason(warning: &CompileWarning) -> &'static str {
    match warning {
        CompileWarning::OutOfZone { .. } => "out_of_zone",
        CompileWarning::OutOfZoneGlue { .. } => "out_of_zone_glue",
    }
}

/// A group's identity: its allocation (0 stands for the zones themselves).
fn group_identity(group: &RecordGroup) -> usize {
    Arc::as_ptr(group).cast::<()>() as usize
}

/// The groups of `old` that `new` no longer has, and those `new` adds, told apart by identity.
fn group_changes<'a>(
    old: &'a [RecordGroup],
    new: &'a [RecordGroup],
) -> (Vec<&'a RecordGroup>, Vec<&'a RecordGroup>) {
    let identity = group_identity;
    let mut balance: FxHashMap<usize, (i64, &'a RecordGroup)> = FxHashMap::default();
    for group in old {
        balance.entry(identity(group)).or_insert((0, group)).0 -= 1;
    }
    for group in new {
        balance.entry(identity(group)).or_insert((0, group)).0 += 1;
    }
    let mut gone = Vec::new();
    let mut added = Vec::new();
    for (count, group) in balance.into_values() {
        let list = if count < 0 { &mut gone } else { &mut added };
        for _ in 0..count.unsigned_abs() {
            list.push(group);
        }
    }
    (gone, added)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{RecordData, SourceRecord};

    fn group(ip: &str) -> RecordGroup {
        vec![SourceRecord {
            name: hickory_proto::rr::Name::from_ascii("x.example.").unwrap(),
            ttl: None,
            data: RecordData::A(ip.parse().unwrap()),
        }]
        .into()
    }

    #[test]
    fn groups_are_compared_by_identity_not_content() {
        let kept = group("198.18.0.1");
        let replaced = group("198.18.0.2");
        let same_content = group("198.18.0.2");
        let old = [kept.clone(), replaced.clone()];
        let new = [same_content.clone(), kept.clone()];
        let (gone, added) = group_changes(&old, &new);
        assert!(gone.len() == 1 && Arc::ptr_eq(gone[0], &replaced));
        assert!(added.len() == 1 && Arc::ptr_eq(added[0], &same_content));
    }
}
