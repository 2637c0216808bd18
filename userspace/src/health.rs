//! Readiness: ready once every source has delivered a complete state and the table is published,
//! and while no source has gone without contact for longer than the configured limit.

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
    sources: BTreeMap<String, SourceState>,
}

#[derive(Clone, Copy, Default)]
struct SourceState {
    synced: bool,
    /// Whether the data can go stale (a watched API server, not a file).
    live: bool,
    /// When the source last showed its data is current (a complete state, an event, a probe).
    contact: Option<Instant>,
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

    /// The source's data is known to be current now.
    pub fn source_contact(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.sources.entry(name.to_owned()).or_default().contact = Some(Instant::now());
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
                let age = if v.live {
                    v.contact.map(|t| t.elapsed())
                } else {
                    Some(Duration::ZERO)
                };
                (k.clone(), age)
            })
            .collect()
    }

    /// Why the agent is not ready, or None when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        let Ok(s) = self.state.lock() else {
            return Some("state unavailable".into());
        };
        for (name, source) in &s.sources {
            if !source.synced {
                return Some(format!("source {name} has not completed its first sync"));
            }
        }
        if !s.published {
            return Some("the record table has not been loaded yet".into());
        }
        for (name, source) in &s.sources {
            if let (Some(limit), Some(at), true) = (self.max_staleness, source.contact, source.live)
                && at.elapsed() > limit
            {
                return Some(format!(
                    "source {name} was last current {:.0}s ago",
                    at.elapsed().as_secs_f64()
                ));
            }
        }
        None
    }
}
