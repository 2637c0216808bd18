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

use rustc_hash::FxHashSet;

use crate::{
    dns::WireName,
    liveness::Alive,
    table::RecordTable,
    xdp::{
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
    pub fn spawn(writer: MapWriter, report: impl Report, alive: Alive) -> Self {
        let mailbox = Arc::new(Mailbox::default());
        let inbox = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("hpd-xdp-writer".into())
            .spawn(move || {
                let _alive = alive;
                run(writer, &inbox, report);
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

fn run(mut writer: MapWriter, mailbox: &Mailbox, mut report: impl Report) {
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
        let names: Option<Vec<WireName>> = taken.names.map(|set| set.into_iter().collect());
        let table = taken.table.as_ref().map(|table| {
            let change = match &names {
                Some(names) => Change::Names(names),
                None => Change::Whole,
            };
            (table, change)
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
