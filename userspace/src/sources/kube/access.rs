//! How the agent reaches the API server (`kubernetes:` in the configuration file): read by the
//! client ([`super::client`]) and by the API server health probes ([`super::api_health`]).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// How to reach the API server; without any field: in-cluster, else the default kubeconfig.
#[derive(Clone, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesAccess {
    /// A kubeconfig file.
    pub kubeconfig: Option<PathBuf>,
    /// An explicit API server URL, such as the node-local API server of a control-plane node.
    pub api_server: Option<String>,
    /// Bearer token file (service account token) for `apiServer`.
    pub token_file: Option<PathBuf>,
    /// CA bundle for `apiServer`.
    pub ca_file: Option<PathBuf>,
    /// Client certificate for `apiServer` (with `clientKeyFile`).
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub client_key_file: Option<PathBuf>,
    /// The name the API servers' certificate is checked against (and sent as SNI), instead of
    /// the host of the URL: the node-local API server's certificate rarely names 127.0.0.1, and
    /// one name (`kubernetes.default.svc`) fits every control-plane node's.
    pub tls_server_name: Option<String>,
    /// API servers tried in order when `apiServer` is down (it restarts during every
    /// control-plane upgrade), before the ones learned from `default/kubernetes`.
    #[serde(default)]
    pub fallback_api_servers: Vec<String>,
    /// Also try the API servers `default/kubernetes`'s EndpointSlices name (when an
    /// `endpointSlices` output watches that Service).
    #[serde(default = "learn_by_default")]
    pub learn_api_servers: bool,
}

fn learn_by_default() -> bool {
    true
}

impl Default for KubernetesAccess {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            api_server: None,
            token_file: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            tls_server_name: None,
            fallback_api_servers: Vec::new(),
            learn_api_servers: true,
        }
    }
}
