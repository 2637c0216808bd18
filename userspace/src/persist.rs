//! The persister: one thread that keeps the Kubernetes records and the zones' serials on disk,
//! off the publication path. The publisher offers the latest state after each publication (a
//! copy of a persistent map: nothing is copied) and goes on; the thread writes at most once a
//! second whatever is newest, records before serials (a serial on disk never describes records
//! that are not), each file replaced whole and flushed (`crate::atomic_file`). On SIGTERM the
//! agent calls [`Persister::flush`]: what was offered is written before it exits.

use std::{
    path::PathBuf,
    sync::{Arc, Condvar, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime},
};

use tracing::warn;

use crate::{
    serials::StateFile,
    sources::{Groups, kube::saved},
};

/// At most one write of each file per interval.
const INTERVAL: Duration = Duration::from_secs(1);

/// Where things are kept.
#[derive(Clone, Debug, Default)]
pub struct Paths {
    pub records: Option<PathBuf>,
    pub serials: Option<PathBuf>,
}

#[derive(Default)]
struct Offered {
    records: Option<Groups>,
    serials: Option<StateFile>,
    /// Offers written so far (what `flush` waits for).
    written: u64,
    /// Offers made so far.
    made: u64,
    /// A flush waits: write without waiting for the interval.
    flush: bool,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    offered: Mutex<Offered>,
    /// Signalled on an offer, a flush or close (to the thread), and after a write (to `flush`).
    changed: Condvar,
}

pub struct Persister {
    paths: Paths,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Persister {
    pub fn start(paths: Paths) -> Arc<Self> {
        let shared = Arc::new(Shared::default());
        let thread = if paths.records.is_some() || paths.serials.is_some() {
            let (paths, shared) = (paths.clone(), shared.clone());
            std::thread::Builder::new()
                .name("hpd-persist".into())
                .spawn(move || {
                    lower_priority();
                    run(&paths, &shared)
                })
                .map_err(|err| warn!(%err, "no persister thread: nothing is kept across restarts"))
                .ok()
        } else {
            None
        };
        Arc::new(Self {
            paths,
            shared,
            thread: Mutex::new(thread),
        })
    }

    /// Whether records are kept (the publisher need not offer them otherwise).
    pub fn keeps_records(&self) -> bool {
        self.paths.records.is_some()
    }

    /// Offers the latest state: `records` (the Kubernetes groups of a complete state), `serials`
    /// (when they changed). What was offered before and not written yet is replaced.
    pub fn offer(&self, records: Option<Groups>, serials: Option<StateFile>) {
        let records = records.filter(|_| self.paths.records.is_some());
        let serials = serials.filter(|_| self.paths.serials.is_some());
        if records.is_none() && serials.is_none() {
            return;
        }
        let mut offered = self.lock();
        if records.is_some() {
            offered.records = records;
        }
        if serials.is_some() {
            offered.serials = serials;
        }
        offered.made += 1;
        drop(offered);
        self.shared.changed.notify_all();
    }

    /// Writes what was offered now (without waiting for the interval), and returns once it is
    /// on disk, or after `within`.
    pub fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut offered = self.lock();
        let target = offered.made;
        offered.flush = true;
        self.shared.changed.notify_all();
        while offered.written < target && !offered.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!("the records and serials were not all written before the stop");
                return;
            }
            offered = self
                .shared
                .changed
                .wait_timeout(offered, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Offered> {
        self.shared
            .offered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Persister {
    fn drop(&mut self) {
        self.lock().closed = true;
        self.shared.changed.notify_all();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn run(paths: &Paths, shared: &Shared) {
    let mut last_write: Option<Instant> = None;
    loop {
        let (records, serials, made) = {
            let mut offered = shared.offered.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let pending = offered.records.is_some() || offered.serials.is_some();
                if offered.closed && !pending {
                    return;
                }
                let due = last_write.is_none_or(|at| at.elapsed() >= INTERVAL);
                if pending && (due || offered.flush || offered.closed) {
                    break;
                }
                let wait = match (pending, last_write) {
                    (true, Some(at)) => INTERVAL.saturating_sub(at.elapsed()),
                    _ => Duration::from_secs(3600),
                };
                offered = shared
                    .changed
                    .wait_timeout(offered, wait)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            offered.flush = false;
            (offered.records.take(), offered.serials.take(), offered.made)
        };
        last_write = Some(Instant::now());
        write(paths, records, serials);
        let mut offered = shared.offered.lock().unwrap_or_else(|e| e.into_inner());
        offered.written = offered.written.max(made);
        drop(offered);
        shared.changed.notify_all();
    }
}

/// Writes the records, then the serials: a crash between the two leaves serials that describe
/// older records than those on disk, never newer ones.
fn write(paths: &Paths, records: Option<Groups>, serials: Option<StateFile>) {
    if let (Some(path), Some(groups)) = (&paths.records, records)
        && let Err(err) = saved::save(path, groups.iter(), SystemTime::now())
    {
        warn!(
            err = format!("{err:#}"),
            "cannot save the records for the next start"
        );
    }
    if let (Some(path), Some(state)) = (&paths.serials, serials)
        && let Err(err) = crate::serials::store(path, &state)
    {
        warn!(file = %path.display(), err = format!("{err:#}"), "cannot save the zone serials");
    }
}

/// How much lower than the agent's other threads the persister runs (nice steps): writing 100k
/// pods' records takes a CPU for a good part of a second, which the answering and publishing
/// threads should not wait behind on a small node.
const NICE_STEPS: i32 = 10;

/// Lowers the calling thread's priority (on Linux, nice is per thread).
fn lower_priority() {
    // SAFETY: setpriority with PRIO_PROCESS and 0 changes the calling thread only; no pointers.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE_STEPS) };
    if rc != 0 {
        warn!(
            err = %std::io::Error::last_os_error(),
            "the persister runs at the agent's priority"
        );
    }
}
