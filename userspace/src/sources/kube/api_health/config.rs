//! `endpointSlices[].healthProbe`: how an output's servers are probed, as the file writes it
//! ([`HealthProbeEntry`]) and validated, with its defaults resolved ([`HealthProbe`]).

use std::{path::PathBuf, time::Duration};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::sources::kube::access::KubernetesAccess;

/// Where a pod finds the cluster CA: the service-account mount.
pub const IN_CLUSTER_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The kube-apiserver's readiness endpoint (200 once it serves; the default
/// `system:public-info-viewer` role lets anyone read it, so no credentials are needed).
pub const DEFAULT_PATH: &str = "/readyz";
pub const DEFAULT_INTERVAL_SECONDS: f64 = 2.0;
pub const DEFAULT_FAILURES: u32 = 3;
pub const DEFAULT_SUCCESSES: u32 = 2;
/// Below this, probing every server costs more than what it tells sooner.
pub const MIN_INTERVAL_SECONDS: f64 = 0.1;
/// Above this (an hour), probing says nothing the EndpointSlices would not.
pub const MAX_INTERVAL_SECONDS: f64 = 3600.0;
/// Consecutive results asked for at most: more keeps a dead server in the answer for ages.
pub const MAX_RUN: u32 = 100;

/// Each server of the output (every endpoint address, with the slice's port) probed with
/// `GET <path>` over TLS; a server failing `failures` probes in a row leaves the answer and
/// comes back after `successes` in a row. Never an empty answer because of probes alone: when
/// every server fails, all are kept.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthProbeEntry {
    /// The path asked for (any 2xx answer is a success); default `/readyz`.
    #[serde(default = "default_path")]
    path: String,
    /// Seconds between two probes of a server (fractions allowed); default 2.
    #[serde(default = "default_interval")]
    #[schemars(range(min = MIN_INTERVAL_SECONDS, max = MAX_INTERVAL_SECONDS))]
    interval_seconds: f64,
    /// Seconds a probe may take, connection and TLS handshake included; default half the
    /// interval, at most the interval.
    #[schemars(range(min = 0.001, max = MAX_INTERVAL_SECONDS))]
    timeout_seconds: Option<f64>,
    /// Failed probes in a row that take a server out of the answer; default 3.
    #[serde(default = "default_failures")]
    #[schemars(range(min = 1, max = MAX_RUN))]
    failures: u32,
    /// Successful probes in a row that bring it back; default 2.
    #[serde(default = "default_successes")]
    #[schemars(range(min = 1, max = MAX_RUN))]
    successes: u32,
    /// CA bundle the servers' certificates are checked against; default `kubernetes.caFile`,
    /// else the in-cluster CA.
    ca_file: Option<PathBuf>,
    /// The name the servers' certificates are checked against and sent as SNI (API server
    /// certificates name `kubernetes.default.svc`, not always the address); default
    /// `kubernetes.tlsServerName`, else the server's address.
    tls_server_name: Option<String>,
    /// A bearer token file sent with each probe, read again each round, for API servers that
    /// refuse anonymous requests (`--anonymous-auth=false`); default none: `/readyz` needs no
    /// credentials. The token goes to every address the slices list: only for
    /// `default/kubernetes`.
    token_file: Option<PathBuf>,
}

fn default_path() -> String {
    DEFAULT_PATH.to_owned()
}

fn default_interval() -> f64 {
    DEFAULT_INTERVAL_SECONDS
}

fn default_failures() -> u32 {
    DEFAULT_FAILURES
}

fn default_successes() -> u32 {
    DEFAULT_SUCCESSES
}

/// A validated `healthProbe`, its defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthProbe {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Failed probes in a row that take a server out.
    pub failures: u32,
    /// Successful probes in a row that bring it back.
    pub successes: u32,
    pub ca_file: PathBuf,
    /// None: the certificate must name the server's address.
    pub tls_server_name: Option<String>,
    /// None: no credentials.
    pub token_file: Option<PathBuf>,
}

impl HealthProbeEntry {
    /// Validates the entry; errors name the field (the caller prefixes the entry's place).
    pub fn compile(self, access: &KubernetesAccess) -> Result<HealthProbe, String> {
        let path = check_path(self.path)?;
        let interval = seconds(
            "intervalSeconds",
            self.interval_seconds,
            MIN_INTERVAL_SECONDS,
        )?;
        let timeout = match self.timeout_seconds {
            Some(timeout) => seconds("timeoutSeconds", timeout, 0.001)?,
            None => interval / 2,
        };
        if timeout > interval {
            return Err(format!(
                "timeoutSeconds: {} is longer than intervalSeconds ({}): a probe must end before the next starts",
                timeout.as_secs_f64(),
                interval.as_secs_f64()
            ));
        }
        for (field, value) in [("failures", self.failures), ("successes", self.successes)] {
            if !(1..=MAX_RUN).contains(&value) {
                return Err(format!("{field}: {value} is not between 1 and {MAX_RUN}"));
            }
        }
        let tls_server_name = self
            .tls_server_name
            .or_else(|| access.tls_server_name.clone());
        if let Some(name) = &tls_server_name
            && ServerName::try_from(name.as_str()).is_err()
        {
            return Err(format!(
                "tlsServerName: {name:?} is neither a DNS name nor an address"
            ));
        }
        Ok(HealthProbe {
            path,
            interval,
            timeout,
            failures: self.failures,
            successes: self.successes,
            ca_file: self
                .ca_file
                .or_else(|| access.ca_file.clone())
                .unwrap_or_else(|| IN_CLUSTER_CA.into()),
            tls_server_name,
            token_file: self.token_file,
        })
    }
}

/// An absolute path (with a query if wanted), as a request line carries it.
fn check_path(path: String) -> Result<String, String> {
    if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
        return Err(format!(
            "path: {path:?} is not an absolute path such as /readyz"
        ));
    }
    Ok(path)
}

/// `value` seconds as a duration, at least `min` and at most [`MAX_INTERVAL_SECONDS`].
fn seconds(field: &str, value: f64, min: f64) -> Result<Duration, String> {
    if !(min..=MAX_INTERVAL_SECONDS).contains(&value) {
        return Err(format!(
            "{field}: {value} is not between {min} and {MAX_INTERVAL_SECONDS} seconds"
        ));
    }
    Duration::try_from_secs_f64(value).map_err(|e| format!("{field}: {value}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(yaml: &str, access: &KubernetesAccess) -> Result<HealthProbe, String> {
        let entry: HealthProbeEntry = crate::sources::file::from_yaml(yaml, "health.yaml".as_ref())
            .map_err(|e| e.to_string())?;
        entry.compile(access)
    }

    #[test]
    fn defaults_come_from_the_api_server_access() {
        let access = KubernetesAccess {
            ca_file: Some("/etc/kubernetes/pki/ca.crt".into()),
            tls_server_name: Some("kubernetes.default.svc".into()),
            ..KubernetesAccess::default()
        };
        let probe = compile("{}", &access).unwrap();
        assert_eq!(
            probe,
            HealthProbe {
                path: "/readyz".into(),
                interval: Duration::from_secs(2),
                timeout: Duration::from_secs(1),
                failures: 3,
                successes: 2,
                ca_file: "/etc/kubernetes/pki/ca.crt".into(),
                tls_server_name: Some("kubernetes.default.svc".into()),
                token_file: None,
            }
        );
        let in_cluster = compile("{}", &KubernetesAccess::default()).unwrap();
        assert_eq!(in_cluster.ca_file, PathBuf::from(IN_CLUSTER_CA));
        assert_eq!(in_cluster.tls_server_name, None);
    }

    #[test]
    fn the_probes_own_fields_win() {
        let access = KubernetesAccess {
            ca_file: Some("/etc/kubernetes/pki/ca.crt".into()),
            tls_server_name: Some("kubernetes.default.svc".into()),
            ..KubernetesAccess::default()
        };
        let probe = compile(
            "{path: /livez, intervalSeconds: 0.3, timeoutSeconds: 0.2, failures: 1, successes: 5, caFile: /ca.pem, tlsServerName: api.example, tokenFile: /token}",
            &access,
        )
        .unwrap();
        assert_eq!(probe.path, "/livez");
        assert_eq!(probe.interval, Duration::from_millis(300));
        assert_eq!(probe.timeout, Duration::from_millis(200));
        assert_eq!((probe.failures, probe.successes), (1, 5));
        assert_eq!(probe.ca_file, PathBuf::from("/ca.pem"));
        assert_eq!(probe.tls_server_name.as_deref(), Some("api.example"));
        assert_eq!(probe.token_file, Some(PathBuf::from("/token")));
    }

    #[test]
    fn bad_values_are_errors_naming_the_field() {
        let access = KubernetesAccess::default();
        for (yaml, wanted) in [
            ("{path: readyz}", "path:"),
            ("{path: \"/ready z\"}", "path:"),
            ("{intervalSeconds: 0}", "intervalSeconds: 0 is not between"),
            ("{intervalSeconds: .nan}", "intervalSeconds"),
            ("{intervalSeconds: 7200}", "intervalSeconds"),
            ("{timeoutSeconds: 0}", "timeoutSeconds: 0 is not between"),
            (
                "{intervalSeconds: 1, timeoutSeconds: 2}",
                "timeoutSeconds: 2 is longer than intervalSeconds (1)",
            ),
            ("{failures: 0}", "failures: 0 is not between 1 and 100"),
            ("{successes: 101}", "successes: 101"),
            ("{tlsServerName: \"not a name\"}", "tlsServerName"),
            ("{interval: 2s}", "unknown field `interval`"),
        ] {
            let err = compile(yaml, &access).unwrap_err();
            assert!(err.contains(wanted), "{yaml}: {err}");
        }
    }
}
