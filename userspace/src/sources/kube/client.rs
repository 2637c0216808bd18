//! The API server connection. Nothing here needs cluster DNS, a CNI or kube-proxy when an
//! explicit URL is given: a control-plane node reaches its own API server on the node address.

use anyhow::Context;
use kube::{
    Client, Config,
    client::ClientBuilder,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{
    agent_config::KubernetesAccess,
    sources::kube::contact::{ContactLayer, ContactLog},
};

/// A client for the configured API server: an explicit URL (with token or client certificate,
/// and CA), a kubeconfig file, or in-cluster/default kubeconfig.
/// Every watch the API server accepts is noted in `contact`.
pub async fn connect(access: &KubernetesAccess, contact: &ContactLog) -> anyhow::Result<Client> {
    let config = match (&access.api_server, &access.kubeconfig) {
        (Some(server), _) => {
            let kubeconfig = Kubeconfig::from_yaml(&explicit_kubeconfig(server, access))
                .context("cannot build a client configuration for apiServer")?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("cannot use apiServer {server}"))?
        }
        (None, Some(path)) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("cannot use kubeconfig {}", path.display()))?
        }
        (None, None) => Config::infer()
            .await
            .context("no API server configured, and none found in-cluster or in ~/.kube/config")?,
    };
    let mut config = config;
    // kube retries 429/503/504 inside the client, up to 15 times over minutes, and the watcher
    // would see nothing of an API server answering 503: the watchers retry themselves (with
    // their own backoff), and each failure reaches the source's state and metrics at once.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)
        .context("cannot create the Kubernetes client")?
        .with_layer(&ContactLayer(contact.clone()))
        .build())
}

/// A kubeconfig document for an explicit server, so that kube reads the token, certificate and
/// CA files itself (and re-reads a rotated token file).
fn explicit_kubeconfig(server: &str, access: &KubernetesAccess) -> String {
    let mut cluster = format!("    server: {server:?}\n");
    if let Some(ca) = &access.ca_file {
        cluster.push_str(&format!(
            "    certificate-authority: {:?}\n",
            ca.display().to_string()
        ));
    }
    let mut user = String::new();
    if let Some(token) = &access.token_file {
        user.push_str(&format!(
            "    tokenFile: {:?}\n",
            token.display().to_string()
        ));
    }
    if let Some(cert) = &access.client_cert_file {
        user.push_str(&format!(
            "    client-certificate: {:?}\n",
            cert.display().to_string()
        ));
    }
    if let Some(key) = &access.client_key_file {
        user.push_str(&format!(
            "    client-key: {:?}\n",
            key.display().to_string()
        ));
    }
    if user.is_empty() {
        user.push_str("    {}\n");
    }
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: agent\nclusters:\n- name: api\n  cluster:\n{cluster}\
         users:\n- name: agent\n  user:\n{user}contexts:\n- name: agent\n  context:\n    cluster: api\n    user: agent\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_server_becomes_a_kubeconfig() {
        let access = KubernetesAccess {
            api_server: Some("https://198.18.0.1:6443".into()),
            token_file: Some("/var/run/secrets/token".into()),
            ca_file: Some("/var/run/secrets/ca.crt".into()),
            ..KubernetesAccess::default()
        };
        let kubeconfig =
            Kubeconfig::from_yaml(&explicit_kubeconfig("https://198.18.0.1:6443", &access))
                .unwrap();
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://198.18.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/var/run/secrets/ca.crt")
        );
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/var/run/secrets/token"));
    }
}
