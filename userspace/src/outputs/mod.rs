//! What the agent writes for others to read, by the one agent a Lease elects ([`leader`]): the
//! objects external-dns reads ([`external_dns`]) and, through [`Outputs::leading`], the RFC 2136
//! updates (`crate::update`). Off unless `externalDns` or `update` is configured.

pub mod config;
pub mod external_dns;
pub mod leader;

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::info;

use hostport_dns_core::zone::ZoneSpec;

use crate::{
    metrics::Metrics,
    outputs::config::OutputsConfig,
    sources::{Groups, kube::config::KubeConfig},
};

/// The running election and writer.
pub struct Outputs {
    leadership: leader::Leadership,
}

impl Outputs {
    /// Starts the election (for the caller, who knows something needs one writer: `externalDns`
    /// or `update`, `update_targets` of them), and the external-dns writer if `externalDns` is
    /// configured, its outputs read from `kube` and `zones`. `groups`: the Kubernetes source's
    /// groups as served (once complete; None without external-dns outputs); `name`: this
    /// agent's name (its pod's, else its identity), made unique per process for the lease.
    pub fn start(
        config: &OutputsConfig,
        (kube, zones): (&KubeConfig, &[ZoneSpec]),
        update_targets: usize,
        client: &Client,
        name: &str,
        groups: Option<watch::Receiver<Option<Groups>>>,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let lease_namespace = config
            .leader_election
            .namespace
            .clone()
            .unwrap_or_else(|| own_namespace(client));
        let settings = leader::LeaseSettings {
            namespace: lease_namespace.clone(),
            name: config.leader_election.lease_name.clone(),
            identity: leader::identity(name),
        };
        info!(
            namespace = %lease_namespace,
            lease = %settings.name,
            identity = %settings.identity,
            external_dns_outputs = config.external_dns.as_ref().map_or(0, |e| e.outputs.len()),
            update_targets,
            "writing for others (external-dns objects, RFC 2136 updates) while this agent holds the lease"
        );
        let leases: Api<Lease> = Api::namespaced(client.clone(), &lease_namespace);
        let leadership = leader::Leadership::start(leases, settings, metrics);
        if let (Some(external), Some(groups)) = (&config.external_dns, groups) {
            let writer = external_dns::Writer {
                client: client.clone(),
                namespace: external
                    .namespace
                    .clone()
                    .unwrap_or_else(|| own_namespace(client)),
                lease: config.leader_election.lease_name.clone(),
                outputs: external_dns::Output::all(config, kube, zones),
                metrics: metrics.clone(),
            };
            tokio::spawn(writer.run(groups, leadership.subscribe()));
        }
        Self { leadership }
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

/// The agent's own namespace: its pod's (the chart sets POD_NAMESPACE), else the client's (the
/// service account's, or the kubeconfig context's).
fn own_namespace(client: &Client) -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned())
}
