//! Readiness: ready once every source has delivered a complete state and the table is published,
//! and while no source has gone without contact for longer than the configured limit.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant, SystemTime},
};

#[derive(Default)]
pub struct Health {
    /// Data older than this makes the agent not ready (None: no limit).
    pub max_staleness: Option<Duration>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    published: bool,
    sources: BTreeMap<String, SourceState>,
    /// The interfaces the XDP program should be attached to, and whether it is (with the mode).
    xdp: BTreeMap<String, Option<&'static str>>,
    /// Why the XDP program could not run (`--xdp-mode auto`): userspace answers everything.
    xdp_unavailable: Option<String>,
}

#[derive(Clone, Default)]
struct SourceState {
    synced: bool,
    /// Whether the data can go stale (a watched API server, not a file).
    live: bool,
    /// Until when the source's data is known to be current (a complete state; for the API
    /// server, what its watchers say).
    contact: Option<Instant>,
    /// Serving records saved by an earlier run, saved at this time.
    restored: Option<SystemTime>,
    /// What is wrong with the source now, in words.
    problem: Option<String>,
}

impl Health {
    pub fn new(max_staleness: Option<Duration>) -> Self {
        Self {
            max_staleness,
            state: Mutex::default(),
        }
    }

    /// A source the agent waits for.
    pub fn expect_source(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.sources.entry(name.to_owned()).or_default();
        }
    }

    /// The source delivered a complete, valid state now. A source that is not `live` (a file)
    /// cannot go stale; a live one (the API server) is stale when contact is lost.
    pub fn source_synced(&self, name: &str, live: bool) {
        if let Ok(mut s) = self.state.lock() {
            let source = s.sources.entry(name.to_owned()).or_default();
            source.synced = true;
            source.live = live;
            source.contact = Some(Instant::now());
        }
    }

    /// The source's data is known to be current as of `at` (None: it never was).
    pub fn source_current_as_of(&self, name: &str, at: Option<Instant>) {
        if let Ok(mut s) = self.state.lock() {
            s.sources.entry(name.to_owned()).or_default().contact = at;
        }
    }

    /// What is wrong with the source (None: nothing), for the readiness endpoint.
    pub fn source_problem(&self, name: &str, problem: Option<String>) {
        if let Ok(mut s) = self.state.lock() {
            s.sources.entry(name.to_owned()).or_default().problem = problem;
        }
    }

    /// The source serves records an earlier run saved at `saved_at` (None: no longer).
    pub fn source_restored(&self, name: &str, saved_at: Option<SystemTime>) {
        if let Ok(mut s) = self.state.lock() {
            let source = s.sources.entry(name.to_owned()).or_default();
            source.restored = saved_at;
            source.live = true;
        }
    }

    pub fn table_published(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.published = true;
        }
    }

    /// How long ago each source was last known current (None: never).
    pub fn staleness(&self) -> Vec<(String, Option<Duration>)> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        s.sources
            .iter()
            .map(|(k, v)| {
                let age = match (v.restored, v.live) {
                    (Some(saved), _) => SystemTime::now().duration_since(saved).ok(),
                    (None, true) => v.contact.map(|t| t.elapsed()),
                    (None, false) => Some(Duration::ZERO),
                };
                (k.clone(), age)
            })
            .collect()
    }

    /// The XDP program is to be attached to `interfaces` (not yet).
    pub fn xdp_expected(&self, interfaces: &[String]) {
        if let Ok(mut s) = self.state.lock() {
            for interface in interfaces {
                s.xdp.entry(interface.clone()).or_insert(None);
            }
        }
    }

    /// The XDP program is attached to `interface` in `mode`.
    pub fn xdp_attached(&self, interface: &str, mode: &'static str) {
        if let Ok(mut s) = self.state.lock() {
            s.xdp.insert(interface.to_owned(), Some(mode));
        }
    }

    /// The XDP program cannot run on `interfaces`, for `reason`: userspace answers everything.
    /// Readiness does not change (every query is still answered).
    pub fn xdp_unavailable(&self, interfaces: &[String], reason: String) {
        if let Ok(mut s) = self.state.lock() {
            for interface in interfaces {
                s.xdp.insert(interface.clone(), None);
            }
            s.xdp_unavailable = Some(reason);
        }
    }

    /// Why the XDP program could not run, if it could not.
    pub fn xdp_unavailable_reason(&self) -> Option<String> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.xdp_unavailable.clone())
    }

    /// Per expected interface: the mode the program is attached in, or None.
    pub fn xdp(&self) -> Vec<(String, Option<&'static str>)> {
        self.state
            .lock()
            .map(|s| s.xdp.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }

    /// Why the agent is not ready, or None when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        let Ok(s) = self.state.lock() else {
            return Some("state unavailable".into());
        };
        for (name, source) in &s.sources {
            if !source.synced {
                let mut reason = format!("source {name} has not completed its first sync");
                if let Some(saved) = source.restored {
                    let age = SystemTime::now().duration_since(saved).unwrap_or_default();
                    reason.push_str(&format!(
                        "; serving the records saved {:.0} s ago",
                        age.as_secs_f64()
                    ));
                }
                if let Some(problem) = &source.problem {
                    reason.push_str(": ");
                    reason.push_str(problem);
                }
                return Some(reason);
            }
        }
        if !s.published {
            return Some("the record table has not been loaded yet".into());
        }
        for (name, source) in &s.sources {
            if let (Some(limit), Some(at), true) = (self.max_staleness, source.contact, source.live)
                && at.elapsed() > limit
            {
                let mut reason = format!(
                    "source {name} was last current {:.0}s ago",
                    at.elapsed().as_secs_f64()
                );
                if let Some(problem) = &source.problem {
                    reason.push_str(": ");
                    reason.push_str(problem);
                }
                return Some(reason);
            }
        }
        None
    }
}
