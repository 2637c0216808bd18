//! API server records that follow health (`endpointSlices[].healthProbe`): each server an
//! output lists (every endpoint address, with its slice's port) is probed over TLS
//! ([`probe`]); a server failing N probes in a row leaves the answer and comes back after M
//! successes ([`tracker`]). One task per probed output: the kube source hands it the servers
//! its slices list now ([`Probers::follow`]) and receives, each time it changes, the set of
//! addresses left out ([`Verdict`]), which the compiler takes as an input, so that a change of
//! health republishes that output's group as an EndpointSlice change would. The compiler never
//! lets the probes empty an answer ([`tracker::never_empty`]).

pub mod config;
pub mod probe;
pub mod tracker;

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::{
    metrics::{Metrics, ProbeFailureLabel, ProbeLabel},
    sources::kube::config::KubeConfig,
};
use config::HealthProbe;
use tracker::{Tracker, Turn};

/// The addresses of output `output`'s servers that are out of the answer now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub output: usize,
    pub down: BTreeSet<IpAddr>,
}

/// The probing tasks of the outputs with a `healthProbe`.
pub struct Probers {
    /// Per output: where its prober reads the servers to probe (None: not probed).
    targets: Vec<Option<watch::Sender<Vec<SocketAddr>>>>,
    /// The probers' verdicts, each sent when an output's set of left-out addresses changes.
    pub verdicts: mpsc::Receiver<Verdict>,
    /// Keeps `verdicts` open (pending, not ended) when no output is probed.
    _open: mpsc::Sender<Verdict>,
}

impl Probers {
    /// Starts a task for each output with a `healthProbe`. The tasks end with this value.
    pub fn start(config: &KubeConfig, metrics: &Arc<Metrics>) -> Self {
        let (send, verdicts) = mpsc::channel(16);
        let targets = config
            .endpoint_slices
            .iter()
            .enumerate()
            .map(|(output, source)| {
                let settings = source.health_probe.clone()?;
                let (targets, listed) = watch::channel(Vec::new());
                let prober = Prober {
                    output,
                    name: source.name.clone(),
                    settings,
                    listed,
                    verdicts: send.clone(),
                    metrics: metrics.clone(),
                };
                tokio::spawn(prober.run());
                Some(targets)
            })
            .collect();
        Self {
            targets,
            verdicts,
            _open: send,
        }
    }

    /// Whether output `output` is probed.
    pub fn probes(&self, output: usize) -> bool {
        self.targets.get(output).is_some_and(Option::is_some)
    }

    /// Hands output `output`'s prober the servers listed now (it reads them at its next round).
    pub fn follow(&self, output: usize, mut servers: Vec<SocketAddr>) {
        let Some(Some(targets)) = self.targets.get(output) else {
            return;
        };
        servers.sort();
        servers.dedup();
        targets.send_if_modified(|held| {
            let modified = *held != servers;
            if modified {
                *held = servers;
            }
            modified
        });
    }
}

/// One output's prober.
struct Prober {
    output: usize,
    name: String,
    settings: HealthProbe,
    listed: watch::Receiver<Vec<SocketAddr>>,
    verdicts: mpsc::Sender<Verdict>,
    metrics: Arc<Metrics>,
}

impl Prober {
    /// Probes every listed server each interval, until the kube source ends.
    async fn run(mut self) {
        let mut tracker = Tracker::new(self.settings.failures, self.settings.successes);
        let mut sent = BTreeSet::new();
        let mut ca_problem: Option<String> = None;
        let mut token_problem: Option<String> = None;
        let mut rounds = tokio::time::interval(self.settings.interval);
        // A round that overran (all probes wait for the slowest) delays the next, not bunches.
        rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            rounds.tick().await;
            if self.listed.has_changed().is_err() || self.verdicts.is_closed() {
                return;
            }
            let servers = self.listed.borrow_and_update().clone();
            for gone in tracker.follow(&servers) {
                self.forget(gone);
            }
            if servers.is_empty() {
                // Nothing to probe: the verdict forgets the servers that went, so that one
                // coming back is not left out until its first probe.
                if !self.publish(tracker.down(), &mut sent).await {
                    return;
                }
                continue;
            }
            let tls = match probe::tls_config(&self.settings.ca_file) {
                Ok(tls) => {
                    ca_problem = None;
                    Some(tls)
                }
                Err(err) => {
                    if ca_problem.as_ref() != Some(&err) {
                        warn!(output = %self.name, %err, "cannot read the CA for the health probes: every probe fails (reason tls)");
                        ca_problem = Some(err);
                    }
                    None
                }
            };
            let token = self.token(&mut token_problem);
            let settings = &self.settings;
            let results = futures::future::join_all(
                servers
                    .iter()
                    .map(|server| probe::probe(*server, settings, tls.clone(), token.as_deref())),
            )
            .await;
            for (server, result) in servers.iter().zip(results) {
                self.count(&mut tracker, *server, result);
            }
            if !self.publish(tracker.down(), &mut sent).await {
                return;
            }
        }
    }

    /// Sends the servers `down` as the verdict if they differ from the last one `sent`; false
    /// once no one listens.
    async fn publish(&self, down: BTreeSet<IpAddr>, sent: &mut BTreeSet<IpAddr>) -> bool {
        if down == *sent {
            return true;
        }
        let verdict = Verdict {
            output: self.output,
            down: down.clone(),
        };
        if self.verdicts.send(verdict).await.is_err() {
            return false;
        }
        *sent = down;
        true
    }

    /// The bearer token for this round, read again each time (a projected service-account
    /// token rotates); None without a token file, or when it cannot be read (logged once per
    /// problem: the probes go without it, and fail if the servers need it).
    fn token(&self, problem: &mut Option<String>) -> Option<String> {
        let path = self.settings.token_file.as_ref()?;
        match std::fs::read_to_string(path) {
            Ok(token) => {
                *problem = None;
                Some(token.trim().to_owned())
            }
            Err(err) => {
                let err = format!("{}: {err}", path.display());
                if problem.as_ref() != Some(&err) {
                    warn!(output = %self.name, %err, "cannot read the health probes' token: probing without it");
                    *problem = Some(err);
                }
                None
            }
        }
    }

    /// Counts one probe's result: the server's standing, its metrics and the log line of a turn.
    fn count(&self, tracker: &mut Tracker, server: SocketAddr, result: Result<(), probe::Failure>) {
        if let Err(failure) = result {
            self.metrics
                .api_server_probe_failures
                .get_or_create(&ProbeFailureLabel {
                    output: self.name.clone(),
                    server: server.to_string(),
                    reason: failure.reason().to_owned(),
                })
                .inc();
        }
        let settings = &self.settings;
        match (tracker.observe(server, result.is_ok()), result) {
            (Turn::WentDown, Err(failure)) => warn!(
                output = %self.name,
                %server,
                %failure,
                failures = settings.failures,
                "the server fails its health probes: left out of the answer"
            ),
            (Turn::CameBack, _) => info!(
                output = %self.name,
                %server,
                successes = settings.successes,
                "the server passes its health probes again: back in the answer"
            ),
            _ => {}
        }
        self.metrics
            .api_server_probe_up
            .get_or_create(&self.label(server))
            .set(i64::from(tracker.is_up(server)));
    }

    /// Drops the series of a server no longer listed.
    fn forget(&self, server: SocketAddr) {
        self.metrics.api_server_probe_up.remove(&self.label(server));
        for reason in [
            probe::Failure::Timeout,
            probe::Failure::Refused,
            probe::Failure::Connect,
            probe::Failure::Tls,
            probe::Failure::Http,
            probe::Failure::Status(0),
        ] {
            self.metrics
                .api_server_probe_failures
                .remove(&ProbeFailureLabel {
                    output: self.name.clone(),
                    server: server.to_string(),
                    reason: reason.reason().to_owned(),
                });
        }
    }

    fn label(&self, server: SocketAddr) -> ProbeLabel {
        ProbeLabel {
            output: self.name.clone(),
            server: server.to_string(),
        }
    }
}
