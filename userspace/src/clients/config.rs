//! The `clients` section of the configuration file: who is served (the allow-list), how much
//! (rate limiting) and DNS cookies, checked and compiled into a [`ClientsConfig`].

use hostport_dns_common::limits::MAX_CLIENT_PREFIXES;
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    clients::{ClientsConfig, CookieConfig, Outside, RateLimit},
    config_schema as schema,
};

/// `clients`: the allow-list, rate limiting and cookies.
#[derive(Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ClientsEntry {
    /// Source prefixes (or single addresses) served; empty: everyone.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Prefix>")]
    allow: Vec<String>,
    #[serde(default)]
    outside: Outside,
    #[serde(default)]
    rate_limit: RateLimitEntry,
    #[serde(default)]
    cookies: CookieConfig,
}

/// Response rate limiting per /24 (IPv4) or /56 (IPv6) and kind of answer. With
/// `responsesPerSecond` above 0, a `negativePerSecond` or `errorsPerSecond` of 0 is refused.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(extend(
    "if" = { "properties": { "responsesPerSecond": { "minimum": 1 } }, "required": ["responsesPerSecond"] },
    "then" = { "properties": { "negativePerSecond": { "minimum": 1 }, "errorsPerSecond": { "minimum": 1 } } }
))]
struct RateLimitEntry {
    /// Answers per second (0: off).
    #[serde(default)]
    responses_per_second: u32,
    /// NXDOMAIN/NODATA answers per second; default `responsesPerSecond`.
    negative_per_second: Option<u32>,
    /// Error answers per second; default `responsesPerSecond`.
    errors_per_second: Option<u32>,
    /// Every n-th limited answer goes out truncated (TC=1); 0: all are dropped.
    #[serde(default = "default_slip")]
    #[schemars(range(max = MAX_SLIP))]
    slip: u32,
    /// Prefixes (or addresses) never limited.
    #[serde(default)]
    #[schemars(with = "Vec<schema::Prefix>")]
    exempt: Vec<String>,
}

impl Default for RateLimitEntry {
    fn default() -> Self {
        Self {
            responses_per_second: 0,
            negative_per_second: None,
            errors_per_second: None,
            slip: default_slip(),
            exempt: Vec::new(),
        }
    }
}

/// Knot's and BIND's default: every second limited answer slips.
fn default_slip() -> u32 {
    2
}

/// Largest `slip` (Knot's bound).
const MAX_SLIP: u32 = 100;

impl ClientsEntry {
    pub(crate) fn compile(self) -> Result<ClientsConfig, String> {
        let allow = prefixes(&self.allow, "clients.allow")?;
        let rate = self.rate_limit;
        let exempt = prefixes(&rate.exempt, "clients.rateLimit.exempt")?;
        if rate.slip > MAX_SLIP {
            return Err(format!(
                "clients.rateLimit.slip: {} is more than {MAX_SLIP}",
                rate.slip
            ));
        }
        for family_v4 in [true, false] {
            let count = allow
                .iter()
                .chain(&exempt)
                .filter(|n| matches!(n, IpNet::V4(_)) == family_v4)
                .count();
            if count > MAX_CLIENT_PREFIXES as usize {
                return Err(format!(
                    "clients: {count} IPv{} prefixes in allow and rateLimit.exempt together; the kernel holds {MAX_CLIENT_PREFIXES}",
                    if family_v4 { 4 } else { 6 }
                ));
            }
        }
        let per_second = rate.responses_per_second;
        if per_second > 0 {
            for (field, value) in [
                ("negativePerSecond", rate.negative_per_second),
                ("errorsPerSecond", rate.errors_per_second),
            ] {
                if value == Some(0) {
                    return Err(format!(
                        "clients.rateLimit.{field}: 0 would drop every such answer to every \
                         client (none would be answered, not even slipped); give at least 1, or \
                         leave it out to use responsesPerSecond"
                    ));
                }
            }
        }
        Ok(ClientsConfig {
            allow,
            outside: self.outside,
            rate_limit: RateLimit {
                responses_per_second: per_second,
                negative_per_second: rate.negative_per_second.unwrap_or(per_second),
                errors_per_second: rate.errors_per_second.unwrap_or(per_second),
                slip: rate.slip,
                exempt,
            },
            cookies: self.cookies,
        })
    }
}

/// Prefixes in CIDR notation, or single addresses (a /32 or /128).
fn prefixes(list: &[String], what: &str) -> Result<Vec<IpNet>, String> {
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            let text = text.trim();
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{what}[{i}]: {text:?} is not an address or a prefix"))
        })
        .collect()
}
