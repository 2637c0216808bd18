//! How each watcher is doing, from what its stream delivers: how current its data is (the
//! readiness endpoint and the staleness metric read it, not a `/version` probe that answers
//! while a watch is refused), why it fails, and when to say so in the log: once when a watcher
//! starts failing, once with a count when it recovers.
//!
//! A watcher whose stream has not failed since its last list is current: kube's watcher ends an
//! idle watch after its timeout and watches again from the last resource version, and a failed
//! watch comes back as an error; so silence from a healthy watcher means nothing changed.

use std::{
    fmt,
    time::{Duration, Instant},
};

use kube::runtime::watcher;

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
}

impl WatchState {
    pub fn new(id: WatcherId) -> Self {
        Self { id, failure: None }
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
        WatchState::new(WatcherId {
            resource: "pods",
            namespace: Some("edge".into()),
            selector: Some("ingress.cluster/name".into()),
            watch_key: "/api/v1/namespaces/edge/pods?labelSelector=ingress.cluster%2Fname".into(),
        })
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
