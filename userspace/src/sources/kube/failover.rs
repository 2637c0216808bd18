//! Which API server the watchers talk to. The configured one (the node-local API server) comes
//! first; when every watch has failed for [`FAILOVER_AFTER`] for a reason another server may not
//! share (unreachable, 5xx, 429), the next candidate takes over: the configured fallbacks, then
//! the API servers `default/kubernetes` names. While on another, the watchers go back to the
//! first after [`FAILBACK_AFTER`] (it is the one that needs no network beyond the node), but
//! only once it answers: it is probed (`/readyz`) first, again every [`FAILBACK_PROBE_EVERY`]
//! while it does not, so that a first server that is down costs a probe, not a relist.

use std::time::{Duration, Instant};

/// Every watch failing this long moves the watchers to the next API server.
pub const FAILOVER_AFTER: Duration = Duration::from_secs(3);
/// How long the watchers stay on another API server before the first is tried again.
pub const FAILBACK_AFTER: Duration = Duration::from_secs(30);
/// How often the first API server is probed while it does not answer.
pub const FAILBACK_PROBE_EVERY: Duration = Duration::from_secs(10);

/// Whether a failure reason may be the server's own (so another server may do better): a watch
/// that went silent included (a hung API server).
pub fn another_server_may_help(reason: &str) -> bool {
    matches!(
        reason,
        "unreachable" | "server_error" | "too_many_requests" | super::watch_state::SILENT
    )
}

/// Where the watchers should go.
#[derive(Debug, PartialEq, Eq)]
pub enum Move {
    /// To this server, now: every watch fails here.
    Away(String),
    /// Back to the first server, if it answers ([`Failover::moved`] once it does).
    Back(String),
}

#[derive(Debug)]
pub struct Failover {
    configured: Vec<String>,
    learned: Vec<String>,
    active: String,
    /// Since when every watch has failed for a server's reason (None: not so).
    failing_since: Option<Instant>,
    /// When the watchers last moved.
    switched_at: Instant,
    /// When the first server was last probed for a move back.
    probed_at: Option<Instant>,
}

impl Failover {
    /// `configured`: the first is the preferred server; empty when the client comes from a
    /// kubeconfig or in-cluster (no failover).
    pub fn new(configured: Vec<String>, now: Instant) -> Self {
        let active = configured.first().cloned().unwrap_or_default();
        Self {
            configured,
            learned: Vec::new(),
            active,
            failing_since: None,
            switched_at: now,
            probed_at: None,
        }
    }

    pub fn active(&self) -> &str {
        &self.active
    }

    /// Every server that may be tried, in order, without repeats.
    pub fn candidates(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for server in self.configured.iter().chain(&self.learned) {
            if !all.contains(server) {
                all.push(server.clone());
            }
        }
        all
    }

    /// The API servers learned from `default/kubernetes` now.
    pub fn learn(&mut self, servers: Vec<String>) {
        self.learned = servers;
    }

    /// Where the watchers should go now, if elsewhere: `all_failing` says whether every watch
    /// fails for a reason another server may not share. A move away is made at once; a move
    /// back only when the caller has seen the first server answer (and calls [`Self::moved`]).
    pub fn next(&mut self, all_failing: bool, now: Instant) -> Option<Move> {
        if self.configured.is_empty() {
            return None;
        }
        if !all_failing {
            self.failing_since = None;
        } else if self.failing_since.is_none() {
            self.failing_since = Some(now);
        }
        let candidates = self.candidates();
        let preferred = candidates.first()?.clone();
        let failed_long_enough = self
            .failing_since
            .is_some_and(|since| now.saturating_duration_since(since) >= FAILOVER_AFTER);
        if failed_long_enough && candidates.len() > 1 {
            let here = candidates.iter().position(|c| *c == self.active);
            let next = here.map_or(0, |i| (i + 1) % candidates.len());
            let target = candidates[next].clone();
            if target == self.active {
                return None;
            }
            self.moved(target.clone(), now);
            return Some(Move::Away(target));
        }
        let probe_due = self
            .probed_at
            .is_none_or(|at| now.saturating_duration_since(at) >= FAILBACK_PROBE_EVERY);
        if self.active != preferred
            && !all_failing
            && now.saturating_duration_since(self.switched_at) >= FAILBACK_AFTER
            && probe_due
        {
            self.probed_at = Some(now);
            return Some(Move::Back(preferred));
        }
        None
    }

    /// The watchers moved to `target` at `now`.
    pub fn moved(&mut self, target: String, now: Instant) {
        self.active = target;
        self.failing_since = None;
        self.switched_at = now;
        self.probed_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failover(now: Instant) -> Failover {
        Failover::new(vec!["https://a:6443".into(), "https://b:6443".into()], now)
    }

    #[test]
    fn every_watch_failing_for_a_while_moves_to_the_next_server_and_on() {
        let t0 = Instant::now();
        let mut f = failover(t0);
        f.learn(vec!["https://b:6443".into(), "https://c:6443".into()]);
        assert_eq!(
            f.candidates(),
            ["https://a:6443", "https://b:6443", "https://c:6443"]
        );
        assert_eq!(f.next(true, t0), None, "not yet");
        assert_eq!(f.next(true, t0 + Duration::from_secs(1)), None);
        assert_eq!(
            f.next(true, t0 + FAILOVER_AFTER),
            Some(away("https://b:6443"))
        );
        assert_eq!(f.active(), "https://b:6443");
        let t1 = t0 + FAILOVER_AFTER;
        assert_eq!(
            f.next(true, t1 + Duration::from_secs(1)),
            None,
            "the clock starts again"
        );
        assert_eq!(
            f.next(true, t1 + FAILOVER_AFTER + Duration::from_secs(1)),
            Some(away("https://c:6443"))
        );
        let t2 = t1 + FAILOVER_AFTER + Duration::from_secs(1);
        assert_eq!(f.next(true, t2), None);
        assert_eq!(
            f.next(true, t2 + FAILOVER_AFTER),
            Some(away("https://a:6443")),
            "round again"
        );
    }

    fn away(server: &str) -> Move {
        Move::Away(server.to_owned())
    }

    #[test]
    fn a_working_fallback_gives_way_to_the_first_server_after_a_while() {
        let t0 = Instant::now();
        let mut f = failover(t0);
        f.next(true, t0);
        assert_eq!(
            f.next(true, t0 + FAILOVER_AFTER),
            Some(away("https://b:6443"))
        );
        let t1 = t0 + FAILOVER_AFTER;
        assert_eq!(f.next(false, t1 + Duration::from_secs(5)), None);
        let back = Some(Move::Back("https://a:6443".into()));
        let t2 = t1 + FAILBACK_AFTER;
        assert_eq!(f.next(false, t2), back);
        assert_eq!(f.active(), "https://b:6443", "not before it answers");
        // It did not answer: the watchers stay, and it is probed again a while later.
        assert_eq!(f.next(false, t2 + Duration::from_secs(1)), None);
        assert_eq!(f.next(false, t2 + FAILBACK_PROBE_EVERY), back);
        f.moved("https://a:6443".into(), t2 + FAILBACK_PROBE_EVERY);
        assert_eq!(f.active(), "https://a:6443");
        assert_eq!(f.next(false, t2 + FAILBACK_AFTER * 3), None, "home");
    }

    #[test]
    fn a_failure_that_is_not_the_servers_or_no_server_list_moves_nothing() {
        let t0 = Instant::now();
        let mut f = failover(t0);
        assert_eq!(f.next(false, t0 + Duration::from_secs(60)), None);
        let mut none = Failover::new(Vec::new(), t0);
        assert_eq!(none.next(true, t0 + Duration::from_secs(60)), None);
        assert!(another_server_may_help("unreachable"));
        assert!(another_server_may_help("silent"), "a hung server");
        assert!(!another_server_may_help("forbidden"));
    }
}
