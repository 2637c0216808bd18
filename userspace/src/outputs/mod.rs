//! What the agent writes for others to read: the objects external-dns reads ([`external_dns`]),
//! written by the one agent a Lease elects ([`leader`]). Off unless `externalDns` is configured.

pub mod external_dns;
pub mod leader;

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::info;

use crate::{agent_config::AgentConfig, metrics::Metrics, sources::Groups};

/// The running election and writer.
pub struct Outputs {
    leadership: leader::Leadership,
}

impl Outputs {
    /// Starts the election and the external-dns writer, if `externalDns` is configured.
    /// `groups` are the Kubernetes source's groups as served (once complete); `name` is this
    /// agent's name (its pod's, else its identity), made unique per process for the lease.
    pub fn start(
        config: &AgentConfig,
        client: &Client,
        name: &str,
        groups: watch::Receiver<Option<Groups>>,
        metrics: &Arc<Metrics>,
    ) -> Option<Self> {
        let external = config.external_dns.as_ref()?;
        // The configured namespace, else the pod's (the chart sets POD_NAMESPACE), else the
        // client's (the service account's, or the kubeconfig context's).
        let namespace = external
            .namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let settings = leader::LeaseSettings {
            namespace: namespace.clone(),
            name: external.lease_name.clone(),
            identity: leader::identity(name),
        };
        info!(
            namespace = %namespace,
            lease = %settings.name,
            identity = %settings.identity,
            outputs = external.outputs.len(),
            "external-dns outputs: writing while this agent holds the lease"
        );
        let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        let leadership = leader::Leadership::start(leases, settings, metrics);
        let writer = external_dns::Writer {
            client: client.clone(),
            namespace,
            lease: external.lease_name.clone(),
            outputs: external_dns::Output::all(config),
            metrics: metrics.clone(),
        };
        tokio::spawn(writer.run(groups, leadership.subscribe()));
        Some(Self { leadership })
    }

    /// Whether this agent leads (for anything else only one agent may do).
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leadership.subscribe()
    }

    /// Stops writing and hands the lease back, within `limit`.
    pub async fn stop(self, limit: Duration) {
        self.leadership.release(limit).await;
    }
}
