//! The API server connection. Nothing here needs cluster DNS, a CNI or kube-proxy when an
//! explicit URL is given: a control-plane node reaches its own API server on the node address.

use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use kube::{
    Client, Config,
    client::ClientBuilder,
    config::{
        AuthInfo, Cluster, Context as KubeContext, KubeConfigOptions, Kubeconfig, NamedAuthInfo,
        NamedCluster, NamedContext,
    },
};

use crate::sources::kube::{
    access::KubernetesAccess,
    contact::{ContactLayer, ContactLog},
};

/// A client for `server` (an explicit URL, with the configured token or client certificate, CA
/// and TLS server name), or without one for the configured kubeconfig, in-cluster or the default
/// kubeconfig. Every watch the API server accepts is noted in `contact`.
pub async fn connect(
    access: &KubernetesAccess,
    server: Option<&str>,
    contact: &ContactLog,
) -> anyhow::Result<Client> {
    let mut config = match (server, &access.kubeconfig) {
        (Some(server), _) => Config::from_custom_kubeconfig(
            explicit_kubeconfig(server, access),
            &KubeConfigOptions::default(),
        )
        .await
        .with_context(|| format!("cannot use apiServer {server}"))?,
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
    if access.tls_server_name.is_some() {
        config.tls_server_name = access.tls_server_name.clone();
    }
    // kube retries 429/503/504 inside the client, up to 15 times over minutes, and the watcher
    // would see nothing of an API server answering 503: the watchers retry themselves (with
    // their own backoff), and each failure reaches the source's state and metrics at once.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)
        .context("cannot create the Kubernetes client")?
        .with_layer(&ContactLayer(contact.clone()))
        .build())
}

/// How long the API server has to answer a readiness probe.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `server` answers its readiness endpoint (`/readyz`: 200 once its storage works) within
/// [`PROBE_TIMEOUT`], with the configured credentials: a server worth moving the watchers to.
pub async fn answers(access: &KubernetesAccess, server: &str, contact: &ContactLog) -> bool {
    let Ok(client) = connect(access, Some(server), contact).await else {
        return false;
    };
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await,
        Ok(Ok(_))
    )
}

/// `server` with an IPv6 address put in brackets: the chart's `https://$(HOST_IP):6443` on an
/// IPv6 node reads `https://2001:db8::1:6443`, which no URL parser takes. A URL has no other
/// way to hold a bare IPv6 address, so the last `:` is the port's.
pub fn bracket_ipv6(server: &str) -> String {
    let Some((scheme, rest)) = server.split_once("://") else {
        return server.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.starts_with('[') || authority.matches(':').count() < 2 {
        return server.to_owned();
    }
    let with_port = authority.rsplit_once(':').and_then(|(host, port)| {
        let ip: std::net::Ipv6Addr = host.parse().ok()?;
        let port: u16 = port.parse().ok()?;
        Some(SocketAddr::new(IpAddr::V6(ip), port).to_string())
    });
    let bracketed = match with_port {
        Some(authority) => authority,
        None => match authority.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => format!("[{ip}]"),
            Err(_) => return server.to_owned(),
        },
    };
    format!("{scheme}://{bracketed}{path}")
}

/// A kubeconfig for an explicit server, so that kube reads the token, certificate and CA files
/// itself (and re-reads a rotated token file).
fn explicit_kubeconfig(server: &str, access: &KubernetesAccess) -> Kubeconfig {
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: "api".into(),
            cluster: Some(Cluster {
                server: Some(bracket_ipv6(server)),
                certificate_authority: path(&access.ca_file),
                tls_server_name: access.tls_server_name.clone(),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "agent".into(),
            auth_info: Some(AuthInfo {
                token_file: path(&access.token_file),
                client_certificate: path(&access.client_cert_file),
                client_key: path(&access.client_key_file),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: "agent".into(),
            context: Some(KubeContext {
                cluster: "api".into(),
                user: Some("agent".into()),
                ..KubeContext::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some("agent".into()),
        ..Kubeconfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_server_becomes_a_kubeconfig() {
        let access = KubernetesAccess {
            token_file: Some("/var/run/secrets/token".into()),
            ca_file: Some("/var/run/secrets/ca.crt".into()),
            tls_server_name: Some("kubernetes.default.svc".into()),
            ..KubernetesAccess::default()
        };
        let kubeconfig = explicit_kubeconfig("https://198.18.0.1:6443", &access);
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://198.18.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/var/run/secrets/ca.crt")
        );
        assert_eq!(
            cluster.tls_server_name.as_deref(),
            Some("kubernetes.default.svc")
        );
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/var/run/secrets/token"));
        assert_eq!(user.client_certificate, None);
    }

    #[test]
    fn ipv6_hosts_get_their_brackets() {
        for (given, wanted) in [
            ("https://2001:db8::1:6443", "https://[2001:db8::1]:6443"),
            (
                "https://2001:db8::1:6443/prefix",
                "https://[2001:db8::1]:6443/prefix",
            ),
            ("https://[2001:db8::1]:6443", "https://[2001:db8::1]:6443"),
            ("https://198.18.0.1:6443", "https://198.18.0.1:6443"),
            ("https://api.example:6443", "https://api.example:6443"),
            ("https://fe80::1", "https://[fe80::1]"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(bracket_ipv6(given), wanted, "{given}");
        }
    }
}
