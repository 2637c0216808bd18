//! One writer among the agents: a `coordination.k8s.io/v1` Lease, held by the agent that renews
//! it. Whatever only one agent may do (writing external-dns's objects, sending RFC 2136 updates)
//! follows [`Leadership::subscribe`].
//!
//! The holder renews every [`RENEW_INTERVAL`] with a replace that carries the lease's
//! `resourceVersion`, so two agents can never both win a round: the API server takes the first
//! and answers the other 409 Conflict. A holder that cannot renew for [`RENEW_DEADLINE`] stops
//! leading before its lease ([`LEASE_DURATION`]) runs out, so it never writes once another may
//! have taken over: the deadline counts from when the last successful renewal was *sent* (the
//! others count from when they saw it, later), every call to the API server is cut off at the
//! deadline, and the deadline ends leadership by itself, whatever a request is doing. The others take a lease whose record has not changed for its duration, as
//! measured by their own clocks from when they saw it change (client-go's rule: no clock skew
//! between nodes matters), and at once a lease its holder released: a holder that stops
//! gracefully clears `holderIdentity`.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
    time::Instant,
};
use tracing::{info, warn};

use crate::metrics::Metrics;

/// How long a lease holds without renewal (`leaseDurationSeconds`).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// A holder that could not renew for this long stops leading (before the others may take over).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often an agent that does not lead looks at the lease.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// How long a call to the API server about the lease may take while not leading (a leader's
/// calls end at its deadline).
pub const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Which lease, and who this agent is.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// `holderIdentity` while this agent leads: unique per process.
    pub identity: String,
}

/// What one look at the lease decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No lease yet: create it, held by this agent.
    Create,
    /// Free, released or expired: take it over.
    Acquire,
    /// This agent holds it: renew.
    Renew,
    /// Another agent holds it.
    Follow,
}

/// The lease's record as an agent sees it: what must change for the holder to be alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub duration: Duration,
    pub renewed: Option<String>,
    pub version: Option<String>,
}

impl Record {
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map_or(LEASE_DURATION, Duration::from_secs),
            renewed: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            version: lease.metadata.resource_version.clone(),
        }
    }
}

/// What to do about the lease `record` (None: there is none), unchanged for `unchanged_for` as
/// this agent saw it.
pub fn decide(record: Option<&Record>, me: &str, unchanged_for: Duration) -> Decision {
    let Some(record) = record else {
        return Decision::Create;
    };
    match record.holder.as_deref() {
        Some(holder) if holder == me => Decision::Renew,
        None => Decision::Acquire,
        Some(_) if unchanged_for >= record.duration => Decision::Acquire,
        Some(_) => Decision::Follow,
    }
}

/// The lease as `me` holds it from now on: `lease` (its metadata and `resourceVersion` kept, so
/// that the replace fails if anyone wrote it since) or a new one.
pub fn held(settings: &LeaseSettings, lease: Option<&Lease>, acquiring: bool) -> Lease {
    let now = MicroTime(Timestamp::now());
    let mut lease = lease.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(settings.name.clone()),
            namespace: Some(settings.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let transitions = spec.lease_transitions.unwrap_or(0);
    spec.holder_identity = Some(settings.identity.clone());
    spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
    spec.renew_time = Some(now.clone());
    if acquiring || spec.acquire_time.is_none() {
        spec.acquire_time = Some(now);
        if lease.metadata.resource_version.is_some() {
            spec.lease_transitions = Some(transitions.saturating_add(1));
        }
    }
    lease
}

/// The lease handed back: no holder, a duration of one second (client-go's release), so that
/// another agent takes it at its next look.
pub fn released(mut lease: Lease) -> Lease {
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    lease
}

/// The election, running: whether this agent leads, and the handle that releases the lease.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Starts taking part in the election for the lease `settings` names.
    pub fn start(api: Api<Lease>, settings: LeaseSettings, metrics: &Metrics) -> Self {
        let (leading_tx, leading) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let gauge = metrics.leader.clone();
        let task = tokio::spawn(async move {
            let mut election = Election {
                api,
                settings,
                leading: leading_tx,
                seen: None,
                held: None,
                renewed_at: None,
                gauge,
            };
            election.run(stopped).await;
        });
        Self {
            leading,
            stop: Some(stop),
            task,
        }
    }

    /// Whether this agent leads, now and as it changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Stops leading and hands the lease back (within `limit`): another agent takes over at
    /// its next look instead of after the lease's duration.
    pub async fn release(mut self, limit: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(limit, &mut self.task).await.is_err() {
            warn!("the lease was not released in time: another agent takes over once it expires");
            self.task.abort();
        }
    }
}

/// The election loop's state.
struct Election {
    api: Api<Lease>,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
    /// The record last seen, and when it was first seen so.
    seen: Option<(Record, Instant)>,
    /// The lease as this agent last wrote it, while it leads (renewed without reading).
    held: Option<Lease>,
    /// When this agent sent its last renewal that succeeded.
    renewed_at: Option<Instant>,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Election {
    async fn run(&mut self, mut stopped: oneshot::Receiver<()>) {
        loop {
            // A round that hangs past the deadline ends leadership first (the round's own
            // calls are cut off there too; this covers the rest).
            let deadline = self.deadline();
            let overdue = tokio::select! {
                () = self.round() => false,
                () = sleep_until_some(deadline) => true,
            };
            if overdue {
                self.set_leading(false);
            }
            let pause = if *self.leading.borrow() {
                RENEW_INTERVAL
            } else {
                RETRY_INTERVAL
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                () = sleep_until_some(self.deadline()) => self.set_leading(false),
                _ = &mut stopped => {
                    self.release().await;
                    return;
                }
            }
        }
    }

    /// While leading: when leadership ends unless renewed (the last renewal's sending time plus
    /// [`RENEW_DEADLINE`]).
    fn deadline(&self) -> Option<Instant> {
        if !*self.leading.borrow() {
            return None;
        }
        self.renewed_at.map(|at| at + RENEW_DEADLINE)
    }

    /// `call`, cut off at the deadline while leading (else at [`LEASE_CALL_TIMEOUT`]).
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Option<Result<T, kube::Error>> {
        let limit = self
            .deadline()
            .unwrap_or_else(|| Instant::now() + LEASE_CALL_TIMEOUT);
        tokio::time::timeout_at(limit, call).await.ok()
    }

    /// One look at the lease, and what it decides.
    async fn round(&mut self) {
        let (lease, decision) = match self.held.take() {
            Some(held) => (Some(held), Decision::Renew),
            None => match self.bounded(self.api.get_opt(&self.settings.name)).await {
                None => {
                    warn!(lease = %self.settings.name, "reading the lease timed out");
                    self.check_deadline();
                    return;
                }
                Some(Ok(lease)) => {
                    let record = lease.as_ref().map(Record::of);
                    let unchanged_for = self.note(record.as_ref());
                    let decision = decide(record.as_ref(), &self.settings.identity, unchanged_for);
                    (lease, decision)
                }
                Some(Err(err)) => {
                    warn!(lease = %self.settings.name, %err, "cannot read the lease");
                    self.check_deadline();
                    return;
                }
            },
        };
        // The others count the lease's duration from when they see this write: from when it
        // was sent, this agent's deadline comes first whatever the write's delay.
        let sent_at = Instant::now();
        let written = match decision {
            Decision::Follow => {
                self.set_leading(false);
                return;
            }
            Decision::Create => {
                let lease = held(&self.settings, None, true);
                self.bounded(self.api.create(&PostParams::default(), &lease))
                    .await
            }
            Decision::Acquire | Decision::Renew => {
                let lease = held(
                    &self.settings,
                    lease.as_ref(),
                    decision == Decision::Acquire,
                );
                self.bounded(
                    self.api
                        .replace(&self.settings.name, &PostParams::default(), &lease),
                )
                .await
            }
        };
        let Some(written) = written else {
            warn!(lease = %self.settings.name, "writing the lease timed out");
            self.check_deadline();
            return;
        };
        match written {
            Ok(lease) => {
                self.renewed_at = Some(sent_at);
                self.held = Some(lease);
                self.set_leading(true);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Another agent wrote the lease first: it leads, or will; look again.
                self.set_leading(false);
            }
            Err(err) => {
                warn!(lease = %self.settings.name, %err, "cannot write the lease");
                self.check_deadline();
            }
        }
    }

    /// Notes the record seen; returns how long it has been unchanged.
    fn note(&mut self, record: Option<&Record>) -> Duration {
        let now = Instant::now();
        match (record, &self.seen) {
            (Some(record), Some((seen, since))) if seen == record => {
                now.saturating_duration_since(*since)
            }
            (Some(record), _) => {
                self.seen = Some((record.clone(), now));
                Duration::ZERO
            }
            (None, _) => {
                self.seen = None;
                Duration::ZERO
            }
        }
    }

    /// A leader that could not renew for the renew deadline stops leading.
    fn check_deadline(&mut self) {
        let overdue = self
            .renewed_at
            .is_none_or(|at| at.elapsed() >= RENEW_DEADLINE);
        if overdue {
            self.set_leading(false);
        }
    }

    fn set_leading(&mut self, leading: bool) {
        if !leading {
            self.held = None;
        }
        let changed = self.leading.send_if_modified(|now| {
            let changed = *now != leading;
            *now = leading;
            changed
        });
        if !changed {
            return;
        }
        self.gauge.set(i64::from(leading));
        let lease = format!("{}/{}", self.settings.namespace, self.settings.name);
        if leading {
            info!(%lease, identity = %self.settings.identity, "leading: this agent writes");
        } else {
            let holder = self.seen.as_ref().and_then(|(r, _)| r.holder.clone());
            info!(%lease, holder = holder.as_deref().unwrap_or("none"), "not leading: another agent writes");
        }
    }

    /// Stops leading and clears the holder, if this agent holds the lease.
    async fn release(&mut self) {
        let held = self.held.take();
        let was_leading = *self.leading.borrow();
        self.set_leading(false);
        let Some(lease) = held.filter(|_| was_leading) else {
            return;
        };
        match self
            .api
            .replace(
                &self.settings.name,
                &PostParams::default(),
                &released(lease),
            )
            .await
        {
            Ok(_) => info!(lease = %self.settings.name, "lease released"),
            Err(err) => {
                warn!(lease = %self.settings.name, %err, "cannot release the lease: another agent takes over once it expires")
            }
        }
    }
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// A holder identity unique to this process: `<name>_<8 hex digits>` (a restarted agent is a
/// new holder, and two agents of one node during a rolling update never share one).
pub fn identity(name: &str) -> String {
    let mut bytes = [0u8; 4];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    let suffix = if random {
        u32::from_ne_bytes(bytes)
    } else {
        // No /dev/urandom: the time and the process id are unique enough on one node.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        nanos ^ std::process::id()
    };
    format!("{name}_{suffix:08x}")
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    fn record(holder: Option<&str>) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            duration: LEASE_DURATION,
            renewed: Some("2026-01-01T00:00:00Z".into()),
            version: Some("7".into()),
        }
    }

    #[test]
    fn a_lease_is_created_renewed_followed_and_taken_over_when_expired_or_released() {
        assert_eq!(decide(None, "a", Duration::ZERO), Decision::Create);
        assert_eq!(
            decide(Some(&record(Some("a"))), "a", Duration::ZERO),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&record(Some("b"))), "a", Duration::from_secs(14)),
            Decision::Follow
        );
        assert_eq!(
            decide(Some(&record(Some("b"))), "a", LEASE_DURATION),
            Decision::Acquire
        );
        assert_eq!(
            decide(Some(&record(None)), "a", Duration::ZERO),
            Decision::Acquire,
            "released: taken at once"
        );
    }

    #[test]
    fn a_held_lease_keeps_its_version_and_counts_transitions() {
        let settings = LeaseSettings {
            namespace: "hostport-dns".into(),
            name: "l".into(),
            identity: "node-a_01".into(),
        };
        let new = held(&settings, None, true);
        assert_eq!(new.metadata.resource_version, None);
        let spec = new.spec.clone().unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("node-a_01"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, None);
        let mut theirs = new.clone();
        theirs.metadata.resource_version = Some("9".into());
        let taken = held(&settings, Some(&theirs), true);
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(
            taken.spec.as_ref().and_then(|s| s.lease_transitions),
            Some(1)
        );
        let gone = released(taken);
        let spec = gone.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity, None);
        assert_eq!(
            Record::of(&Lease {
                spec: Some(spec),
                ..Lease::default()
            })
            .holder,
            None
        );
    }

    /// The answer of a fake API server: `body` as JSON with `status`.
    fn json_response(
        status: u16,
        body: &serde_json::Value,
    ) -> Result<http::Response<kube::client::Body>, http::Error> {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body.to_string().into_bytes()))
    }

    /// The election of agent `me_00000001` for lease `ns/l` on `api`, not started.
    fn election(api: Api<Lease>, leading: watch::Sender<bool>) -> Election {
        Election {
            api,
            settings: LeaseSettings {
                namespace: "ns".into(),
                name: "l".into(),
                identity: "me_00000001".into(),
            },
            leading,
            seen: None,
            held: None,
            renewed_at: None,
            gauge: Default::default(),
        }
    }

    /// An API server that answers the first look (no lease) and the create, then hangs on
    /// every request: the renewals never return.
    fn hanging_after_create() -> Api<Lease> {
        let service = tower::service_fn(|request: http::Request<kube::client::Body>| async move {
            let (status, body) = match *request.method() {
                http::Method::GET => (
                    404,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
                http::Method::POST => (
                    201,
                    serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"},
                        "spec": {"holderIdentity": "me_00000001", "leaseDurationSeconds": 15}}),
                ),
                _ => std::future::pending().await,
            };
            json_response(status, &body)
        });
        Api::namespaced(kube::Client::new(service, "ns"), "ns")
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewals_hang_stops_leading_at_its_deadline() {
        let (leading_tx, mut leading) = watch::channel(false);
        let (_stop, stopped) = oneshot::channel();
        let mut election = election(hanging_after_create(), leading_tx);
        let task = tokio::spawn(async move { election.run(stopped).await });
        leading.changed().await.expect("a change");
        assert!(*leading.borrow(), "created the lease: leads");
        let since = Instant::now();
        leading.changed().await.expect("a change");
        assert!(!*leading.borrow());
        // The renewal sent at RENEW_INTERVAL hangs; leadership ends at the deadline counted
        // from the create, well before the others may take over (LEASE_DURATION).
        assert_eq!(since.elapsed(), RENEW_DEADLINE);
        task.abort();
    }

    /// An API server whose lease is held by a live leader ("other"): each read shows a later
    /// renewal (and resourceVersion), as the leader's renewals every 5 s would; every write is
    /// counted (and refused: 409 Conflict).
    fn renewed_by_another(writes: Arc<AtomicUsize>) -> Api<Lease> {
        let reads = Arc::new(AtomicUsize::new(0));
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (reads, writes) = (reads.clone(), writes.clone());
            async move {
                let (status, body) = if *request.method() == http::Method::GET {
                    let n = reads.fetch_add(1, Ordering::SeqCst);
                    (
                        200,
                        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": "l", "namespace": "ns", "resourceVersion": (n + 2).to_string()},
                            "spec": {"holderIdentity": "other_00000002", "leaseDurationSeconds": 15,
                                     "renewTime": format!("2026-01-01T00:{:02}:{:02}.000000Z", n / 60 % 60, n % 60)}}),
                    )
                } else {
                    writes.fetch_add(1, Ordering::SeqCst);
                    (
                        409,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}),
                    )
                };
                json_response(status, &body)
            }
        });
        Api::namespaced(kube::Client::new(service, "ns"), "ns")
    }

    /// A follower that sees the same holder renew keeps following: the record changed (its
    /// renewal), so the lease's duration counts again from then. Taking it because the holder
    /// stayed the same would make leadership flap and two writers overlap.
    #[tokio::test(start_paused = true)]
    async fn a_follower_never_takes_a_lease_its_holder_keeps_renewing() {
        let writes = Arc::new(AtomicUsize::new(0));
        let (leading_tx, leading) = watch::channel(false);
        let (_stop, stopped) = oneshot::channel();
        let mut election = election(renewed_by_another(writes.clone()), leading_tx);
        let task = tokio::spawn(async move { election.run(stopped).await });
        // Four lease durations of looking every 2 s.
        tokio::time::sleep(LEASE_DURATION * 4).await;
        assert!(!*leading.borrow(), "took a lease its holder renews");
        assert_eq!(writes.load(Ordering::SeqCst), 0, "tried to take it");
        task.abort();
    }

    #[test]
    fn identities_differ_per_process_start() {
        let (a, b) = (identity("node-a"), identity("node-a"));
        assert!(
            a.starts_with("node-a_") && a.len() == "node-a_".len() + 8,
            "{a}"
        );
        assert_ne!(a, b);
    }
}
