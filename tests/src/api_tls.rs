//! TLS for the fake API server, as a kube-apiserver has it: a cluster CA, a serving certificate
//! for 127.0.0.1 signed by it, and (optionally) client certificates signed by the same CA
//! required at the handshake.

use std::{
    io,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        self, RootCertStore, ServerConfig,
        crypto::ring,
        pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
        server::WebPkiClientVerifier,
    },
    server::TlsStream,
};

use crate::TempDir;

/// A cluster CA and what it signed, with PEM files for the agent's configuration.
pub struct ApiCredentials {
    ca: Certificate,
    server: Certificate,
    server_key: KeyPair,
    /// The CA certificate, for `caFile`.
    pub ca_file: PathBuf,
    /// A client certificate and key the CA signed, for `clientCertFile` / `clientKeyFile`.
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    /// A client certificate and key signed by another CA, which the server must refuse.
    pub stranger_cert_file: PathBuf,
    pub stranger_key_file: PathBuf,
}

impl ApiCredentials {
    /// Generates a CA, a serving certificate for 127.0.0.1 and two client certificates (one
    /// signed by an unrelated CA), written as PEM files into `dir`.
    pub fn generate(dir: &TempDir) -> Self {
        Self::generate_for(dir, &["127.0.0.1"])
    }

    /// As [`ApiCredentials::generate`], the serving certificate for `addresses`.
    pub fn generate_for(dir: &TempDir, addresses: &[&str]) -> Self {
        let (ca, ca_key) = certificate_authority("fake-apiserver-ca");
        let (server, server_key) = signed("kube-apiserver", addresses, false, &ca, &ca_key);
        let (client, client_key) = signed("system:hostport-dns", &[], true, &ca, &ca_key);
        let (other_ca, other_ca_key) = certificate_authority("another-ca");
        let (stranger, stranger_key) =
            signed("system:stranger", &[], true, &other_ca, &other_ca_key);
        Self {
            ca_file: dir.write("ca.crt", &ca.pem()),
            client_cert_file: dir.write("client.crt", &client.pem()),
            client_key_file: dir.write("client.key", &client_key.serialize_pem()),
            stranger_cert_file: dir.write("stranger.crt", &stranger.pem()),
            stranger_key_file: dir.write("stranger.key", &stranger_key.serialize_pem()),
            ca,
            server,
            server_key,
        }
    }

    /// The server side: the serving certificate, and the CA as the only trusted issuer of
    /// client certificates when `require_client_certificate`.
    pub fn server_config(&self, require_client_certificate: bool) -> ServerConfig {
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = if require_client_certificate {
            let mut roots = RootCertStore::empty();
            roots
                .add(CertificateDer::from(self.ca.der().to_vec()))
                .expect("the CA as a root");
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("a client certificate verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.serialize_der()));
        let mut config = builder
            .with_single_cert(vec![CertificateDer::from(self.server.der().to_vec())], key)
            .expect("the serving certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }
}

fn certificate_authority(name: &str) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("a CA key");
    let cert = params.self_signed(&key).expect("a self-signed CA");
    (cert, key)
}

fn signed(
    common_name: &str,
    addresses: &[&str],
    client: bool,
    ca: &Certificate,
    ca_key: &KeyPair,
) -> (Certificate, KeyPair) {
    let names: Vec<String> = addresses.iter().map(|a| (*a).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("certificate parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    let key = KeyPair::generate().expect("a key");
    let cert = params
        .signed_by(&key, ca, ca_key)
        .expect("a signed certificate");
    (cert, key)
}

/// Whether a failed handshake is the server refusing the client's certificate (none, or one no
/// trusted CA signed).
fn refuses_client_certificate(err: &io::Error) -> bool {
    matches!(
        err.get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// A TCP listener that hands out connections after a completed TLS handshake; handshakes the
/// server refuses (no or untrusted client certificate) are counted and the connection dropped,
/// as the real API server does.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    refused: Arc<AtomicUsize>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: ServerConfig, refused: Arc<AtomicUsize>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            refused,
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            match self.acceptor.accept(tcp).await {
                Ok(tls) => return (tls, addr),
                // Only refusals count: a client may also drop a connection it no longer needs
                // in the middle of a handshake.
                Err(err) if refuses_client_certificate(&err) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {}
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
