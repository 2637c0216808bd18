//! One probe of one server: a TCP connection, a TLS handshake checked against the configured CA
//! and name, and `GET <path>` over HTTP/1.1, all within the timeout. No credentials unless a
//! token file is configured: the servers are whatever the EndpointSlices list, and `/readyz`
//! needs none on a kube-apiserver (`system:public-info-viewer`). A new connection each time, so
//! each probe also checks that the server accepts connections and completes handshakes.

use std::{io, net::SocketAddr, path::Path, sync::Arc};

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::{
    TlsConnector,
    rustls::{
        ClientConfig, RootCertStore,
        crypto::ring,
        pki_types::{CertificateDer, ServerName, pem::PemObject},
    },
};

use super::config::HealthProbe;

/// Why a probe failed (the `reason` label of the failure counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the timeout (a hung server, or a connection that goes nowhere).
    Timeout,
    /// The connection was refused: nothing listens.
    Refused,
    /// Another connection error (no route, reset).
    Connect,
    /// The TLS handshake failed: a certificate the CA did not sign, or that does not name the
    /// server (the CA file unreadable counts here too).
    Tls,
    /// The connection broke or the answer was no HTTP.
    Http,
    /// An answer other than 2xx (`/readyz` says 500 while a check fails, and during shutdown).
    Status(u16),
}

impl Failure {
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Refused => "refused",
            Failure::Connect => "connect",
            Failure::Tls => "tls",
            Failure::Http => "http",
            Failure::Status(_) => "status",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(code) => write!(f, "status {code}"),
            other => f.write_str(other.reason()),
        }
    }
}

/// The TLS client configuration of a probe: the CA bundle at `ca_file` as the only roots (read
/// again for each round, so a rotated CA is used without a restart), HTTP/1.1 by ALPN.
pub fn tls_config(ca_file: &Path) -> Result<Arc<ClientConfig>, String> {
    let shown = ca_file.display();
    let mut roots = RootCertStore::empty();
    let certificates =
        CertificateDer::pem_file_iter(ca_file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|e| format!("{shown}: {e}"))?;
        roots
            .add(certificate)
            .map_err(|e| format!("{shown}: a certificate that is no CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{shown}: no certificate"));
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Probes `server` once, with `token` as a bearer token if given; None for the TLS
/// configuration when the CA could not be read (the probe fails as a TLS failure).
pub async fn probe(
    server: SocketAddr,
    settings: &HealthProbe,
    tls: Option<Arc<ClientConfig>>,
    token: Option<&str>,
) -> Result<(), Failure> {
    let Some(tls) = tls else {
        return Err(Failure::Tls);
    };
    match tokio::time::timeout(settings.timeout, attempt(server, settings, tls, token)).await {
        Ok(result) => result,
        Err(_) => Err(Failure::Timeout),
    }
}

async fn attempt(
    server: SocketAddr,
    settings: &HealthProbe,
    tls: Arc<ClientConfig>,
    token: Option<&str>,
) -> Result<(), Failure> {
    let tcp = TcpStream::connect(server)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::ConnectionRefused => Failure::Refused,
            _ => Failure::Connect,
        })?;
    let _ = tcp.set_nodelay(true);
    let name = match &settings.tls_server_name {
        Some(name) => ServerName::try_from(name.clone()).map_err(|_| Failure::Tls)?,
        None => ServerName::IpAddress(server.ip().into()),
    };
    let stream = TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|_| Failure::Tls)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Failure::Http)?;
    let host = settings
        .tls_server_name
        .clone()
        .unwrap_or_else(|| server.to_string());
    let mut request = http::Request::get(settings.path.as_str())
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, "hostport-dns-health-probe");
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(String::new()).map_err(|_| Failure::Http)?;
    // The connection is driven alongside the request; it ends with the probe.
    tokio::pin!(connection);
    let response = tokio::select! {
        response = sender.send_request(request) => response.map_err(|_| Failure::Http)?,
        _ = &mut connection => return Err(Failure::Http),
    };
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(Failure::Status(status.as_u16()))
    }
}

// Probes of real TLS servers are in the integration test `api_health`; here what needs none.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let err = tls_config(Path::new("/nonexistent/ca.crt")).unwrap_err();
        assert!(err.contains("/nonexistent/ca.crt"), "{err}");
        let empty = std::env::temp_dir().join(format!("empty-ca-{}.crt", std::process::id()));
        std::fs::write(&empty, "").unwrap();
        let err = tls_config(&empty).unwrap_err();
        let _ = std::fs::remove_file(&empty);
        assert!(err.contains("no certificate"), "{err}");
    }

    #[tokio::test]
    async fn nothing_listening_is_refused_and_a_silent_server_times_out() {
        let settings = HealthProbe {
            path: "/readyz".into(),
            interval: Duration::from_millis(400),
            timeout: Duration::from_millis(200),
            failures: 1,
            successes: 1,
            ca_file: "/unused".into(),
            tls_server_name: None,
            token_file: None,
        };
        let config = Arc::new(
            ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        );
        // A port just freed: nothing listens there.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_addr = closed.local_addr().unwrap();
        drop(closed);
        let got = probe(closed_addr, &settings, Some(config.clone()), None).await;
        assert_eq!(got, Err(Failure::Refused));
        // Accepts connections (the kernel's backlog) and never says a word.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let got = probe(silent.local_addr().unwrap(), &settings, Some(config), None).await;
        assert_eq!(got, Err(Failure::Timeout));
        assert_eq!(
            probe(closed_addr, &settings, None, None).await,
            Err(Failure::Tls),
            "no CA, no probe"
        );
    }
}
