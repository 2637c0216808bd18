//! Stop signals (SIGTERM, SIGINT), taken so that a stop is bounded whatever the agent is doing.
//!
//! The signals are blocked in every thread and taken by one thread of their own with
//! `sigwait`, before the runtime starts: a signal stays pending until that thread takes it, so
//! none is lost, and taking it needs neither the async runtime's I/O driver nor a task being
//! polled (a signal stream created late, a worker held by blocking work, a future nobody awaits
//! all once let a SIGTERM go unheard). That thread then:
//!
//! - before the agent is [armed](Stop::arm) (nothing attached yet), ends the process at once:
//!   there is nothing to undo;
//! - afterwards, tells the agent ([`Stop::wait`]) and gives its orderly stop (hand over the
//!   sockets, flush the records and serials, detach XDP: about 7 s at most) until
//!   [`DEADLINE`]; past it, or on a second signal, the process exits with a line that says so.
//!   The kernel detaches an unpinned program when the process's descriptors close.

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::watch;
use tracing::{error, info};

/// How long an orderly stop may take before the process exits anyway: the stop's own steps
/// (UDP hand-over 1 s, TCP connections 1 s, the persister's flush 5 s) and detaching fit, and a
/// Kubernetes grace period (30 s by default) is never used up.
pub const DEADLINE: Duration = Duration::from_secs(9);

/// The exit status of a stop cut short (the deadline, a second signal): not a clean stop.
const CUT_SHORT: i32 = 1;

/// The agent's end of the stop signals.
pub struct Stop {
    asked: watch::Receiver<bool>,
    armed: Arc<AtomicBool>,
}

/// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it starts from now
/// on, and takes them on a thread of their own. Call before any other thread is started (the
/// runtime's included): a thread started earlier would still take the signals the old way.
pub fn install() -> io::Result<Stop> {
    let set = stop_set()?;
    // SAFETY: `set` is an initialised signal set; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let (asked, asked_rx) = watch::channel(false);
    let armed = Arc::new(AtomicBool::new(false));
    let thread_armed = armed.clone();
    std::thread::Builder::new()
        .name("hpd-signals".into())
        .spawn(move || take_signals(&set, &asked, &thread_armed))?;
    Ok(Stop {
        asked: asked_rx,
        armed,
    })
}

impl Stop {
    /// From now on a stop signal is the agent's to act on (something gets attached that a stop
    /// must undo); until now it ended the process at once.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Returns once a stop signal has arrived (at once if one already has).
    pub async fn wait(&mut self) {
        if self.asked.wait_for(|asked| *asked).await.is_err() {
            // The signal thread never ends but by ending the process: nothing will come.
            std::future::pending::<()>().await;
        }
    }
}

/// Makes the agent's orderly stop hang when set (the tests' stand-in for a step that never
/// returns, which the deadline must cut).
pub const HANG_ENV: &str = "HOSTPORT_DNS_TEST_STOP_HANG";

/// Hangs for good when [`HANG_ENV`] is set; returns at once otherwise.
pub fn hang_if_asked() {
    if std::env::var_os(HANG_ENV).is_some_and(|v| !v.is_empty()) {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// SIGTERM and SIGINT.
fn stop_set() -> io::Result<libc::sigset_t> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; sigaddset adds to an initialised one.
    unsafe {
        if libc::sigemptyset(set.as_mut_ptr()) != 0
            || libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM) != 0
            || libc::sigaddset(set.as_mut_ptr(), libc::SIGINT) != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(set.assume_init())
    }
}

/// The signal thread: the first signal stops the agent, the deadline or a second one the process.
fn take_signals(set: &libc::sigset_t, asked: &watch::Sender<bool>, armed: &AtomicBool) {
    let first = loop {
        if let Some(signal) = next_signal(set, None) {
            break signal;
        }
    };
    if !armed.load(Ordering::SeqCst) {
        info!(
            signal = signal_name(first),
            "stopping before anything is attached"
        );
        std::process::exit(0);
    }
    info!(
        signal = signal_name(first),
        deadline_s = DEADLINE.as_secs(),
        "stop signal received: stopping"
    );
    asked.send_replace(true);
    let deadline = Instant::now() + DEADLINE;
    match next_signal(set, Some(deadline)) {
        Some(second) => error!(
            signal = signal_name(second),
            "a second stop signal: exiting now, before the stop is done"
        ),
        None => error!(
            deadline_s = DEADLINE.as_secs(),
            "the stop did not finish in time: exiting now"
        ),
    }
    std::process::exit(CUT_SHORT);
}

/// The next signal of `set`, or None once `deadline` has passed (without one: never None).
fn next_signal(set: &libc::sigset_t, deadline: Option<Instant>) -> Option<i32> {
    loop {
        let left = match deadline {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                left
            }
            None => Duration::from_secs(3600),
        };
        let timeout = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
        };
        // SAFETY: `set` is initialised, the signal's details are not asked for, `timeout` lives
        // for the call.
        let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
        if signal > 0 {
            return Some(signal);
        }
        // EAGAIN (the time ran out) or EINTR (another signal's handler ran): look again.
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "another signal",
    }
}
