//! Both answer paths switch to a new table together. With XDP, the table goes to the kernel
//! table's writer thread, which switches the kernel's generation and, right after that store and
//! before it waits out the runs still reading the generation it left, the server's table: for
//! the few microseconds between the two stores the kernel answers the newer table, and userspace
//! never answers a table newer than the kernel's. (The other order would let TCP and the
//! userspace server answer a newer table than XDP for as long as the kernel write takes.)
//! Without XDP the publisher switches the server's table itself. The propagation metric is
//! observed when the server's table switches, i.e. when both paths answer the change.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use tracing::{debug, error, warn};

use hostport_dns_core::{dns::WireName, table::RecordTable};

use crate::{
    health::Health,
    metrics::Metrics,
    server::Shared,
    xdp::writer_thread::{Outcome, Report, TableChange, WriterThread},
};

/// Where the server's table and its metrics live.
pub struct Paths<'a> {
    pub shared: &'a Shared,
    pub metrics: &'a Metrics,
    pub health: &'a Health,
}

/// Where tables go before the server: the kernel table's writer, once XDP is up. Until then
/// the publisher switches the server's table itself.
#[derive(Default)]
pub struct KernelSink {
    writer: Mutex<Option<Arc<WriterThread>>>,
}

impl KernelSink {
    /// From now on tables go to `writer` first; the table the server answers from now goes at
    /// once (whole). Under the lock tables are posted under, so no table overtakes it. Returns
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

    /// Switches both paths to `table`, which differs from the last one as `change` says.
    pub fn post(&self, table: RecordTable, change: TableChange, observed: Instant, paths: &Paths) {
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        match writer.as_ref() {
            Some(kernel) => kernel.post_table(table, change, observed),
            None => {
                let changed = match &change {
                    TableChange::Names(names) => Some(names.as_slice()),
                    TableChange::Whole => None,
                };
                switched(paths, table, changed, Some(observed))
            }
        }
    }
}

/// Runs once, after the first table is in the kernel (the agent attaches XDP there).
pub type AfterFirstWrite = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// What the kernel table's writer thread does after each switch: the server's table follows
/// the kernel's at once (see the module's text), then metrics, logs, and `after_first_write`
/// once the write is done.
pub fn kernel_report(
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    after_first_write: AfterFirstWrite,
) -> impl Report {
    KernelReport {
        shared,
        metrics,
        health,
        after_first_write,
    }
}

struct KernelReport {
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    after_first_write: AfterFirstWrite,
}

impl Report for KernelReport {
    fn switched(
        &mut self,
        table: RecordTable,
        changed: Option<&[WireName]>,
        observed: Option<Instant>,
    ) {
        let paths = Paths {
            shared: &self.shared,
            metrics: &self.metrics,
            health: &self.health,
        };
        switched(&paths, table, changed, observed);
    }

    fn written(&mut self, outcome: Outcome) {
        let metrics = &self.metrics;
        match outcome.result {
            Ok(stats) => {
                if let Some(then) = self
                    .after_first_write
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    then();
                }
                metrics.xdp_generations.inc();
                metrics.xdp_names_written.inc_by(stats.names_written as u64);
                // What building the kernel image freed.
                crate::heap::release_after(stats.names_written);
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
    paths: &Paths,
    table: RecordTable,
    changed: Option<&[WireName]>,
    observed: Option<Instant>,
) {
    let metrics = paths.metrics;
    metrics.table_names.set(table.nodes().len() as i64);
    metrics.table_records.set(table.record_count() as i64);
    paths.shared.publish_changed(table, changed);
    metrics.table_updates.inc();
    if let Some(observed) = observed {
        metrics
            .propagation
            .observe(observed.elapsed().as_secs_f64());
    }
    paths.health.table_published();
}
