//! The thread that owns the kernel table's maps (blixt's single writer): the publisher and the
//! address follower post to its mailbox and go on; it takes whatever arrived (the latest table,
//! the union of the names changed since the last one it wrote, the latest addresses), writes it
//! in one switch, and reports: right after the switch (the table the kernel answers from now),
//! and once it is done with the write. Nothing waits on a timer: when the mailbox is empty it
//! sleeps, and what arrives while it writes is merged into the next switch.

use std::{
    sync::{Arc, Condvar, Mutex},
    thread::JoinHandle,
    time::Instant,
};

use hostport_dns_common::generation::{Capacity, EntryCounts};
use rustc_hash::FxHashSet;
use tracing::{info, warn};

use hostport_dns_core::{dns::WireName, table::RecordTable};

use crate::{
    liveness::Alive,
    xdp::{
        entries::TableNeeds,
        hostset::HostAddresses,
        writer::{Change, MapWriter, WriteError, WriteStats},
    },
};

/// Which names of a posted table differ from the previous one.
pub enum TableChange {
    /// Any: compare everything.
    Whole,
    /// These names (and the zones' SOA records).
    Names(Vec<WireName>),
}

/// What one switch of the writer did, for whoever posted.
pub struct Outcome {
    pub result: Result<WriteStats, WriteError>,
    /// When the earliest change this switch carries was observed.
    pub observed: Option<Instant>,
    /// Tables merged into this switch.
    pub tables: usize,
}

/// Moves the kernel table to maps of another size: a program of its own, loaded beside the one
/// answering, written whole, then swapped in (the agent's is `kernel_table_size::Resizer`).
pub trait Resize: Send + 'static {
    /// The capacity the kernel table should move to in order to serve names that need `needs`
    /// entries of each kind on a host of `host`'s addresses, if it should.
    fn wanted(
        &self,
        current: Capacity,
        needs: &EntryCounts,
        host: &HostAddresses,
    ) -> Option<Capacity>;
    /// A writer of fresh maps of `capacity`, loaded beside the answering ones and not answering
    /// yet.
    fn load(&mut self, capacity: Capacity) -> Result<MapWriter, String>;
    /// Makes the maps last loaded answer in place of the previous ones, which are let go.
    fn commit(&mut self) -> Result<(), String>;
    /// Lets go of what [`Resize::load`] made; the previous maps answer on.
    fn abandon(&mut self);
}

/// Whoever posts hears from the thread twice a switch.
pub trait Report: Send + 'static {
    /// The kernel answers from `table` now (or, after a failed write, keeps its last complete
    /// one while `table` is the newest): called right after the switch, before the writer waits
    /// out the runs still reading the generation it left. `observed`: when the earliest change
    /// it carries was seen. `changed`: the names that differ from the table switched to
    /// before (None: any may).
    fn switched(
        &mut self,
        table: RecordTable,
        changed: Option<&[WireName]>,
        observed: Option<Instant>,
    );
    /// The writer is done with the switch.
    fn written(&mut self, outcome: Outcome);
}

#[derive(Default)]
struct Pending {
    table: Option<RecordTable>,
    /// None: every name (a whole table asked for, or nothing known).
    names: Option<FxHashSet<WireName>>,
    tables: usize,
    host: Option<HostAddresses>,
    observed: Option<Instant>,
    closed: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.table.is_none() && self.host.is_none()
    }
}

#[derive(Default)]
struct Mailbox {
    pending: Mutex<Pending>,
    arrived: Condvar,
}

/// The posting side of the writer thread.
pub struct WriterThread {
    mailbox: Arc<Mailbox>,
    thread: Option<JoinHandle<()>>,
}

impl WriterThread {
    /// Starts the thread, which owns `writer`, tells `report` of every switch (on the thread)
    /// and holds `alive` while it runs.
    /// With `resize`, the table moves to maps of another size whenever a table posted needs it.
    pub fn spawn(
        writer: MapWriter,
        report: impl Report,
        alive: Alive,
        resize: Option<Box<dyn Resize>>,
    ) -> Self {
        let mailbox = Arc::new(Mailbox::default());
        let inbox = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("hpd-xdp-writer".into())
            .spawn(move || {
                let _alive = alive;
                run(writer, &inbox, report, resize);
            })
            .ok();
        Self { mailbox, thread }
    }

    /// Posts a table; `change` says which names differ from the one posted before it.
    pub fn post_table(&self, table: RecordTable, change: TableChange, observed: Instant) {
        let mut pending = self.lock();
        let first = pending.table.is_none();
        pending.table = Some(table);
        pending.tables += 1;
        match (change, pending.names.as_mut()) {
            (TableChange::Names(names), Some(set)) => set.extend(names),
            // The first table since the last switch, with its names: a set to merge into.
            (TableChange::Names(names), None) if first => {
                pending.names = Some(names.into_iter().collect())
            }
            // A whole table, or names on top of a whole one: everything.
            _ => pending.names = None,
        }
        pending.observed = Some(pending.observed.map_or(observed, |o| o.min(observed)));
        drop(pending);
        self.mailbox.arrived.notify_one();
    }

    /// Posts this host's addresses.
    pub fn post_host(&self, host: HostAddresses) {
        self.lock().host = Some(host);
        self.mailbox.arrived.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.mailbox
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        self.lock().closed = true;
        self.mailbox.arrived.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    mut writer: MapWriter,
    mailbox: &Mailbox,
    mut report: impl Report,
    mut resize: Option<Box<dyn Resize>>,
) {
    loop {
        let taken = {
            let mut pending = mailbox.pending.lock().unwrap_or_else(|e| e.into_inner());
            while pending.is_empty() && !pending.closed {
                pending = mailbox
                    .arrived
                    .wait(pending)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if pending.closed {
                return;
            }
            std::mem::take(&mut *pending)
        };
        // A table posted, or the one held when the addresses alone changed: either may call for
        // maps of another size. Addresses posted again unchanged (the follower resyncs every few
        // seconds) ask nothing of the size, so a resize that failed is not retried for them.
        let host_changed = taken
            .host
            .as_ref()
            .is_some_and(|host| host != writer.host());
        // One walk over the posted table's names, for the size and the zones' admission alike.
        let needs = taken.table.as_ref().map(TableNeeds::of);
        let sized_for = match (&taken.table, &needs) {
            (Some(table), Some(needs)) => Some((table.clone(), needs.clone())),
            _ if host_changed => writer.table().cloned().map(|t| (t, writer.needs().clone())),
            _ => None,
        };
        if let (Some(resize), Some((table, table_needs))) =
            (resize.as_deref_mut(), sized_for.as_ref())
        {
            let host = taken.host.as_ref().unwrap_or_else(|| writer.host());
            if let Some(capacity) = resize.wanted(writer.capacity(), &table_needs.total, host) {
                let host = host.clone();
                let from = writer.capacity();
                match resized(resize, capacity, table, table_needs, host) {
                    Ok((resized, stats)) => {
                        info!(
                            from = ?from.entries(),
                            to = ?capacity.entries(),
                            host_from = from.host,
                            host_to = capacity.host,
                            names = table.nodes().len(),
                            "the kernel table moved to maps of another size"
                        );
                        // The previous maps are unmapped here; its program is gone already.
                        writer = resized;
                        // As a switch of addresses alone, a resize for them tells the server
                        // of no new table.
                        if taken.table.is_some() {
                            report.switched(table.clone(), None, taken.observed);
                        }
                        report.written(Outcome {
                            result: Ok(stats),
                            observed: taken.observed,
                            tables: taken.tables,
                        });
                        continue;
                    }
                    Err(reason) => warn!(
                        %reason,
                        from = ?from.entries(),
                        to = ?capacity.entries(),
                        "the kernel table cannot move to maps of another size: it keeps its own"
                    ),
                }
            }
        }
        let names: Option<Vec<WireName>> = taken.names.map(|set| set.into_iter().collect());
        let table = taken
            .table
            .as_ref()
            .zip(needs.as_ref())
            .map(|(table, needs)| {
                let change = match &names {
                    Some(names) => Change::Names(names),
                    None => Change::Whole,
                };
                (table, change, needs)
            });
        let mut for_server = taken.table.clone();
        let published = {
            let mut switched = || {
                if let Some(table) = for_server.take() {
                    report.switched(table, names.as_deref(), taken.observed);
                }
            };
            writer.publish(table, taken.host, &mut switched)
        };
        // A write that failed before its switch: the server still takes the newest table.
        if let Some(table) = for_server.take() {
            report.switched(table, names.as_deref(), taken.observed);
        }
        let result = match published {
            Ok(Some(stats)) => Ok(stats),
            // Addresses before any table, or the same ones again: nothing switched.
            Ok(None) => continue,
            Err(err) => Err(err),
        };
        report.written(Outcome {
            result,
            observed: taken.observed,
            tables: taken.tables,
        });
    }
}

/// The whole of `table`, and `host`, written into fresh maps of `capacity`, which then answer in
/// place of the current ones: the new writer, and what its publication did.
fn resized(
    resize: &mut dyn Resize,
    capacity: Capacity,
    table: &RecordTable,
    needs: &TableNeeds,
    host: HostAddresses,
) -> Result<(MapWriter, WriteStats), String> {
    let mut fresh = resize.load(capacity)?;
    let written = fresh
        .publish(Some((table, Change::Whole, needs)), Some(host), &mut || {})
        .map_err(|e| e.to_string())
        .and_then(|stats| stats.ok_or_else(|| "nothing was written".to_owned()))
        .and_then(|stats| resize.commit().map(|()| stats));
    match written {
        Ok(stats) => Ok((fresh, stats)),
        Err(reason) => {
            resize.abandon();
            Err(reason)
        }
    }
}
