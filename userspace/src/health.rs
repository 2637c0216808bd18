//! Readiness: ready once every source has been fully loaded and the table published, and while
//! no source's data is older than the configured limit.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant},
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
    /// Source name → when it last delivered a complete state (None: not yet).
    sources: BTreeMap<String, Option<Instant>>,
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
            s.sources.entry(name.to_owned()).or_insert(None);
        }
    }

    /// The source delivered a complete, valid state now.
    pub fn source_synced(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.sources.insert(name.to_owned(), Some(Instant::now()));
        }
    }

    pub fn table_published(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.published = true;
        }
    }

    /// Seconds since each source last synced (None: never).
    pub fn staleness(&self) -> Vec<(String, Option<Duration>)> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        s.sources
            .iter()
            .map(|(k, v)| (k.clone(), v.map(|t| t.elapsed())))
            .collect()
    }

    /// Why the agent is not ready, or None when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        let Ok(s) = self.state.lock() else {
            return Some("state unavailable".into());
        };
        if !s.published {
            return Some("the record table has not been loaded yet".into());
        }
        for (name, synced) in &s.sources {
            match synced {
                None => return Some(format!("source {name} has not completed its first sync")),
                Some(at) => {
                    if let Some(limit) = self.max_staleness
                        && at.elapsed() > limit
                    {
                        return Some(format!(
                            "source {name} last synced {:.0}s ago",
                            at.elapsed().as_secs_f64()
                        ));
                    }
                }
            }
        }
        None
    }
}
