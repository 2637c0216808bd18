//! Liveness: each thread and task that serves holds a guard from here; one that ends (a panic:
//! threads and tasks unwind alone, the process lives on) makes `/healthz` fail, so the kubelet
//! restarts the agent rather than leaving a share of the clients unanswered.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use tracing::error;

/// The serving threads and tasks that have stopped.
#[derive(Clone, Default)]
pub struct Liveness {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    stopped: Mutex<Vec<String>>,
    /// The agent stops: threads and tasks end as they should.
    stopping: AtomicBool,
}

/// Held by a serving thread or task for as long as it runs.
pub struct Alive {
    name: String,
    state: Arc<State>,
}

impl Liveness {
    /// A guard for the thread or task `name`, to be held while it serves.
    pub fn register(&self, name: impl Into<String>) -> Alive {
        Alive {
            name: name.into(),
            state: self.state.clone(),
        }
    }

    /// The serving threads and tasks that have stopped (empty while the agent is whole).
    pub fn stopped(&self) -> Vec<String> {
        self.state
            .stopped
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The agent stops: what ends from now on ends as it should.
    pub fn stopping(&self) {
        self.state.stopping.store(true, Ordering::Relaxed);
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        if self.state.stopping.load(Ordering::Relaxed) {
            return;
        }
        // A thread's guard drops while it unwinds; a task's after the runtime caught its panic.
        if std::thread::panicking() {
            error!(thread = %self.name, "a serving thread panicked: /healthz fails from now on");
        } else {
            error!(thread = %self.name, "a serving thread stopped: /healthz fails from now on");
        }
        if let Ok(mut stopped) = self.state.stopped.lock() {
            stopped.push(std::mem::take(&mut self.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_thread_is_reported_and_a_running_one_is_not() {
        let liveness = Liveness::default();
        let _running = liveness.register("running");
        let doomed = liveness.register("doomed");
        let joined = std::thread::spawn(move || {
            let _alive = doomed;
            panic!("a bug");
        })
        .join();
        assert!(joined.is_err());
        assert_eq!(liveness.stopped(), ["doomed"]);
        liveness.stopping();
        drop(_running);
        assert_eq!(
            liveness.stopped(),
            ["doomed"],
            "an end while stopping is no failure"
        );
    }
}
