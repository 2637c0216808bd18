//! How each watcher is doing, from what its stream delivers: how current its data is (the
//! readiness endpoint and the staleness metric read it, not a `/version` probe that answers
//! while a watch is refused), why it fails, and when to say so in the log: once when a watcher
//! starts failing, once with a count when it recovers.
//!
//! A watcher whose stream has not failed since its last list is current, as long as the API
//! server is heard from: every watch is asked to end after [`watch_timeout`] seconds (a healthy
//! API server ends it then, and the watcher watches again from the last resource version, a
//! request the [`super::contact::ContactLog`] notes), and a failed watch comes back as an error.
//! A watcher that has heard nothing (no event, no error, no accepted watch) for the silence bound
//! ([`SILENCE_BOUND`], 80 s) is on a connection that carries nothing (half-open, or an API server
//! whose storage hangs, which kube's own idle timeout of 295 s would notice only silently): it
//! counts as failing from the last time it was heard, and is restarted.

use std::{
    fmt,
    time::{Duration, Instant},
};

use kube::runtime::watcher;

/// How long a watcher may hear nothing from the API server before it counts as failing and is
/// restarted. A healthy watch is heard from every [`watch_timeout`] (60 s for this bound): the
/// 20 s between them are for an API server under load to answer the next watch request.
pub const SILENCE_BOUND: Duration = Duration::from_secs(80);

/// Overrides [`SILENCE_BOUND`] (whole seconds), for tests that cannot wait that long.
const SILENCE_BOUND_ENV: &str = "HOSTPORT_DNS_WATCH_SILENCE_SECONDS";

/// The silence bound in force: [`SILENCE_BOUND`], unless the environment sets a positive one.
pub fn silence_bound() -> Duration {
    std::env::var(SILENCE_BOUND_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(SILENCE_BOUND, Duration::from_secs)
}

/// The `timeoutSeconds` of every watch request for a silence bound: three quarters of it, so
/// that a healthy API server ends each watch (and is heard from again) well within the bound.
pub fn watch_timeout(bound: Duration) -> u32 {
    u32::try_from(bound.as_secs() * 3 / 4)
        .unwrap_or(u32::MAX)
        .max(1)
}

/// What a watcher watches, for metrics, logs and readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherId {
    /// "pods", "endpointslices" or "nodes" (the API's plural resource names).
    pub resource: &'static str,
    /// The namespace watched; None: all (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// The label selector, if any.
    pub selector: Option<String>,
    /// Its watch requests in the [`super::contact::ContactLog`].
    pub watch_key: String,
}

impl fmt::Display for WatcherId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in namespace {ns}")?;
        }
        if let Some(selector) = &self.selector {
            write!(f, " ({selector})")?;
        }
        Ok(())
    }
}

/// Why a watch failed, in a word fit for a metric label.
pub fn failure_reason(err: &watcher::Error) -> &'static str {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => status_reason(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) => "unreachable",
            kube::Error::Auth(_) => "credentials",
            kube::Error::SerdeError(_) | kube::Error::ReadEvents(_) => "bad_response",
            _ => "other",
        },
        watcher::Error::WatchError(status) => status_reason(status.code),
        watcher::Error::NoResourceVersion => "bad_response",
    }
}

/// The failure reason of a watcher that heard nothing for the silence bound.
pub const SILENT: &str = "silent";

fn status_reason(code: u16) -> &'static str {
    match code {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        410 => "gone",
        429 => "too_many_requests",
        500..=599 => "server_error",
        _ => "other",
    }
}

/// A run of failures, from the first to now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub detail: String,
    pub since: Instant,
    /// The latest failure of the run.
    pub last: Instant,
    pub count: u64,
}

/// What the log should say about a watcher after an outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Transition {
    /// Nothing new to say.
    Quiet,
    /// The watcher started failing (or fails for another reason now).
    Failing,
    /// The watcher works again after `failures` failures over `lasted`.
    Recovered { failures: u64, lasted: Duration },
}

#[derive(Debug)]
pub struct WatchState {
    pub id: WatcherId,
    pub failure: Option<Failure>,
    /// When the API server was last heard from on this watcher's behalf (or the watcher last
    /// started): an event, an error, an accepted watch.
    pub heard: Instant,
}

impl WatchState {
    pub fn new(id: WatcherId, now: Instant) -> Self {
        Self {
            id,
            failure: None,
            heard: now,
        }
    }

    /// The API server was heard from at `at` (or the watcher started again then).
    pub fn heard_at(&mut self, at: Instant) {
        self.heard = self.heard.max(at);
    }

    /// Whether nothing has been heard for longer than `bound`.
    pub fn silent(&self, bound: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.heard) > bound
    }

    /// The watcher heard nothing for too long: it fails, since it was last heard from (its data
    /// is current as of then, not as of now).
    pub fn fell_silent(&mut self, now: Instant) -> Transition {
        let silence = now.saturating_duration_since(self.heard);
        let detail = format!(
            "nothing from the API server for {:.0} s (a watch that carries nothing)",
            silence.as_secs_f64()
        );
        let transition = self.failed(SILENT, detail, now);
        if let Some(failure) = self.failure.as_mut()
            && failure.count == 1
        {
            failure.since = self.heard;
        }
        transition
    }

    /// The stream delivered something.
    pub fn succeeded(&mut self, now: Instant) -> Transition {
        match self.failure.take() {
            Some(failure) => Transition::Recovered {
                failures: failure.count,
                lasted: now.saturating_duration_since(failure.since),
            },
            None => Transition::Quiet,
        }
    }

    /// The stream failed for `reason`.
    pub fn failed(&mut self, reason: &'static str, detail: String, now: Instant) -> Transition {
        match &mut self.failure {
            Some(failure) if failure.reason == reason => {
                failure.count += 1;
                failure.detail = detail;
                failure.last = now;
                Transition::Quiet
            }
            Some(failure) => {
                failure.reason = reason;
                failure.detail = detail;
                failure.count += 1;
                failure.last = now;
                Transition::Failing
            }
            None => {
                self.failure = Some(Failure {
                    reason,
                    detail,
                    since: now,
                    last: now,
                    count: 1,
                });
                Transition::Failing
            }
        }
    }

    /// Whether the API server accepted a watch (`accepted`) after the latest failure: the
    /// watcher works again, though nothing may have changed to show it.
    pub fn watch_accepted_since_failure(&self, accepted: Option<Instant>) -> bool {
        matches!((&self.failure, accepted), (Some(f), Some(at)) if at > f.last)
    }

    /// Until when the watcher's data is known to be current: now while it works, the start of
    /// its failure while it fails, never before its first list (`synced`).
    pub fn current_as_of(&self, synced: bool, now: Instant) -> Option<Instant> {
        if !synced {
            return None;
        }
        Some(self.failure.as_ref().map_or(now, |f| f.since))
    }

    /// What is wrong, for the readiness endpoint; None while it works.
    pub fn problem(&self, synced: bool, now: Instant) -> Option<String> {
        match (&self.failure, synced) {
            (Some(f), _) => Some(format!(
                "the watch of {} fails ({}, {} times in {:.0} s): {}",
                self.id,
                f.reason,
                f.count,
                now.saturating_duration_since(f.since).as_secs_f64(),
                f.detail
            )),
            (None, false) => Some(format!("the watch of {} has not listed yet", self.id)),
            (None, true) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> WatchState {
        state_at(Instant::now())
    }

    fn state_at(now: Instant) -> WatchState {
        WatchState::new(
            WatcherId {
                resource: "pods",
                namespace: Some("edge".into()),
                selector: Some("ingress.cluster/name".into()),
                watch_key: "/api/v1/namespaces/edge/pods?labelSelector=ingress.cluster%2Fname"
                    .into(),
            },
            now,
        )
    }

    #[test]
    fn silence_past_the_bound_fails_as_of_the_last_contact() {
        let t0 = Instant::now();
        let bound = Duration::from_secs(80);
        let mut s = state_at(t0);
        s.heard_at(t0 + Duration::from_secs(50));
        assert!(
            !s.silent(bound, t0 + Duration::from_secs(130)),
            "80 s exactly"
        );
        let now = t0 + Duration::from_secs(131);
        assert!(s.silent(bound, now));
        assert_eq!(s.fell_silent(now), Transition::Failing);
        assert_eq!(
            s.current_as_of(true, now),
            Some(t0 + Duration::from_secs(50)),
            "current as of the last contact"
        );
        assert!(s.problem(true, now).is_some_and(|p| p.contains("silent")));
        s.heard_at(now);
        assert_eq!(
            s.fell_silent(now + Duration::from_secs(81)),
            Transition::Quiet,
            "still the same failure"
        );
        assert_eq!(
            s.current_as_of(true, now + Duration::from_secs(81)),
            Some(t0 + Duration::from_secs(50))
        );
    }

    #[test]
    fn a_healthy_watch_ends_well_within_the_bound() {
        assert_eq!(watch_timeout(SILENCE_BOUND), 60);
        assert_eq!(watch_timeout(Duration::from_secs(8)), 6);
        assert_eq!(watch_timeout(Duration::from_secs(1)), 1);
    }

    #[test]
    fn a_run_of_failures_is_said_once_and_its_end_once_with_the_count() {
        let t0 = Instant::now();
        let mut s = state();
        assert_eq!(s.succeeded(t0), Transition::Quiet);
        assert_eq!(s.failed("forbidden", "403".into(), t0), Transition::Failing);
        for _ in 0..5 {
            assert_eq!(s.failed("forbidden", "403".into(), t0), Transition::Quiet);
        }
        assert_eq!(
            s.failed("unreachable", "refused".into(), t0),
            Transition::Failing,
            "another reason is news"
        );
        let later = t0 + Duration::from_secs(7);
        assert_eq!(
            s.succeeded(later),
            Transition::Recovered {
                failures: 7,
                lasted: Duration::from_secs(7)
            }
        );
        assert_eq!(s.succeeded(later), Transition::Quiet);
    }

    #[test]
    fn a_watch_accepted_after_the_latest_failure_means_recovery() {
        let t0 = Instant::now();
        let mut s = state();
        assert!(!s.watch_accepted_since_failure(Some(t0)), "not failing");
        s.failed("forbidden", "403".into(), t0 + Duration::from_secs(1));
        assert!(
            !s.watch_accepted_since_failure(Some(t0)),
            "accepted before the failure"
        );
        assert!(!s.watch_accepted_since_failure(None));
        assert!(s.watch_accepted_since_failure(Some(t0 + Duration::from_secs(2))));
    }

    #[test]
    fn data_is_current_while_the_watch_works_and_as_of_the_failure_after() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(30);
        let mut s = state();
        assert_eq!(s.current_as_of(false, t0), None, "never listed");
        assert!(
            s.problem(false, t0)
                .is_some_and(|p| p.contains("has not listed"))
        );
        assert_eq!(s.current_as_of(true, later), Some(later));
        assert_eq!(s.problem(true, later), None);
        s.failed("forbidden", "pods is forbidden".into(), t0);
        assert_eq!(s.current_as_of(true, later), Some(t0));
        let problem = s.problem(true, later).unwrap_or_default();
        assert!(
            problem.contains("pods in namespace edge") && problem.contains("forbidden"),
            "{problem}"
        );
    }

    #[test]
    fn api_statuses_become_reasons() {
        let status = |code: u16| {
            watcher::Error::WatchError(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(failure_reason(&status(403)), "forbidden");
        assert_eq!(failure_reason(&status(400)), "bad_request");
        assert_eq!(failure_reason(&status(503)), "server_error");
        assert_eq!(
            failure_reason(&watcher::Error::NoResourceVersion),
            "bad_response"
        );
    }
}
