//! Reaching the API server the way a control-plane node does without cluster DNS or kube-proxy:
//! an explicit HTTPS URL with the cluster CA, authenticated by a service-account token or by a
//! client certificate. The fake API server checks both as the real one does; wrong credentials
//! are refused and nothing is served. A kubeconfig file does the same. And in-cluster, as a pod finds the API server when no URL
//! is configured: the service-account mount and the KUBERNETES_SERVICE_* variables.

use std::path::PathBuf;

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    api_tls::ApiCredentials,
    clients::{Reply, dig},
    eventually,
    fake_api::{Access, FakeApi, Kind},
    k8s::PodSpec,
    netns::NetNs,
    require_root,
};

const ZONE: &str = "prod.coreha.example";
const NAME: &str = "default-nginx.ingress.prod.coreha.example";
const POD_IP: &str = "198.18.0.21";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.service-account-token";

struct Setup {
    agent: Agent,
    api: FakeApi,
    ns: NetNs,
    _dir: TempDir,
}

impl Setup {
    fn dig(&self) -> Reply {
        dig(&self.ns, "127.0.0.1", 1053, &[NAME, "A"])
    }

    /// Never synced: SERVFAIL, never an empty answer a load balancer would act on; not ready.
    fn assert_nothing_served(&self) {
        let reply = self.dig();
        assert_eq!(reply.status, "SERVFAIL", "{reply:?}");
        assert_ne!(
            self.agent.http_get("/readyz").0,
            200,
            "not ready without data"
        );
    }
}

/// Credentials the agent presents: a token, or a client certificate and key.
enum Presents {
    Token(&'static str),
    Certificate { cert: PathBuf, key: PathBuf },
}

/// An HTTPS fake API server with `credentials`' serving certificate, requiring a client
/// certificate or `bearer_token` if asked, holding one ready ingress pod.
fn https_api_with_a_pod(
    ns: &NetNs,
    credentials: &ApiCredentials,
    require_client_certificate: bool,
    bearer_token: Option<&str>,
) -> FakeApi {
    let api = FakeApi::start_with(
        Some(ns),
        Access {
            tls: Some(credentials.server_config(require_client_certificate)),
            bearer_token: bearer_token.map(str::to_owned),
            bind: None,
        },
    );
    let pod = PodSpec::ingress("nginx-0", "ingress", "default-nginx", "cp-0", POD_IP);
    api.apply(Kind::Pod, pod.to_json());
    api
}

/// An HTTPS fake API server (with `access` beyond TLS) holding one ready ingress pod, and an
/// agent that trusts the cluster CA and presents `presents`.
fn setup(
    tag: &str,
    require_client_certificate: bool,
    bearer_token: Option<&str>,
    presents: impl FnOnce(&ApiCredentials) -> Presents,
) -> Setup {
    require_root();
    let ns = NetNs::new(tag);
    let dir = TempDir::new(tag);
    let credentials = ApiCredentials::generate(&dir);
    let api = https_api_with_a_pod(&ns, &credentials, require_client_certificate, bearer_token);
    let auth = match presents(&credentials) {
        Presents::Token(token) => {
            let file = dir.write("token", token);
            format!("  tokenFile: {}\n", file.display())
        }
        Presents::Certificate { cert, key } => {
            format!(
                "  clientCertFile: {}\n  clientKeyFile: {}\n",
                cert.display(),
                key.display()
            )
        }
    };
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\n  caFile: {}\n{auth}pods:\n  - zone: {ZONE}\n",
            api.url(),
            credentials.ca_file.display(),
        ),
    );
    let agent = Agent::start_on_lo(&ns, &config, &[]);
    Setup {
        agent,
        api,
        ns,
        _dir: dir,
    }
}

#[test]
fn a_service_account_token_over_https_reaches_the_api_server() {
    let s = setup("tok", false, Some(TOKEN), |_| Presents::Token(TOKEN));
    assert!(s.api.url().starts_with("https://"), "{}", s.api.url());
    eventually("the pod's record", 15, || s.dig().answer_data() == [POD_IP]);
    assert_eq!(s.api.unauthorized_requests(), 0);
}

#[test]
fn a_wrong_token_is_refused_and_nothing_is_served() {
    let s = setup("badtok", false, Some(TOKEN), |_| Presents::Token("stale"));
    eventually("the API server to refuse the token", 15, || {
        s.api.unauthorized_requests() > 0
    });
    s.assert_nothing_served();
}

#[test]
fn a_client_certificate_of_the_cluster_ca_authenticates() {
    let s = setup("cert", true, None, |c| Presents::Certificate {
        cert: c.client_cert_file.clone(),
        key: c.client_key_file.clone(),
    });
    eventually("the pod's record", 15, || s.dig().answer_data() == [POD_IP]);
    assert_eq!(s.api.refused_handshakes(), 0);
}

#[test]
fn a_client_certificate_of_another_ca_is_refused_and_nothing_is_served() {
    let s = setup("strange", true, None, |c| Presents::Certificate {
        cert: c.stranger_cert_file.clone(),
        key: c.stranger_key_file.clone(),
    });
    eventually("the API server to refuse the handshake", 15, || {
        s.api.refused_handshakes() > 0
    });
    s.assert_nothing_served();
}

#[test]
fn in_cluster_the_service_account_mount_and_environment_are_enough() {
    require_root();
    let ns = NetNs::new("incluster");
    let dir = TempDir::new("incluster");
    let credentials = ApiCredentials::generate(&dir);
    let api = https_api_with_a_pod(&ns, &credentials, false, Some(TOKEN));
    let service_account = dir.path.join("serviceaccount");
    std::fs::create_dir_all(&service_account).expect("create the service-account folder");
    std::fs::write(service_account.join("token"), TOKEN).expect("write the token");
    std::fs::copy(&credentials.ca_file, service_account.join("ca.crt")).expect("copy the CA");
    std::fs::write(service_account.join("namespace"), "kube-system").expect("write namespace");
    // No apiServer, kubeconfig, tokenFile or caFile: everything comes from the pod's view.
    let config = dir.write(
        "agent.yaml",
        &format!("zones:\n  - name: {ZONE}\npods:\n  - zone: {ZONE}\n"),
    );
    let agent = Agent::start_in_cluster(&ns, &service_account, api.addr, &config);
    eventually("the pod's record", 15, || {
        dig(&ns, "127.0.0.1", 1053, &[NAME, "A"]).answer_data() == [POD_IP]
    });
    assert_eq!(api.unauthorized_requests(), 0, "{}", agent.logs());
}

#[test]
fn a_kubeconfig_file_with_a_token_and_the_cluster_ca_reaches_the_api_server() {
    require_root();
    let ns = NetNs::new("kubeconfig");
    let dir = TempDir::new("kubeconfig");
    let credentials = ApiCredentials::generate(&dir);
    let api = https_api_with_a_pod(&ns, &credentials, false, Some(TOKEN));
    let kubeconfig = dir.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ops\nclusters:\n- name: cluster\n  \
             cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: ops\n  user:\n    \
             token: {TOKEN}\ncontexts:\n- name: ops\n  context:\n    cluster: cluster\n    user: ops\n",
            api.url(),
            credentials.ca_file.display(),
        ),
    );
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  kubeconfig: {}\npods:\n  - zone: {ZONE}\n",
            kubeconfig.display()
        ),
    );
    let agent = Agent::start_on_lo(&ns, &config, &[]);
    eventually("the pod's record", 15, || {
        dig(&ns, "127.0.0.1", 1053, &[NAME, "A"]).answer_data() == [POD_IP]
    });
    assert_eq!(api.unauthorized_requests(), 0, "{}", agent.logs());
}
