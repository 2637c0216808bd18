//! Who the server answers and how much: the client allow-list, the sources that can never have
//! sent a query (martians), response rate limiting with its exempt prefixes, and DNS cookies'
//! configuration (the cookies themselves are the DNS core's `cookies`).
//! The XDP program enforces the same policy in the kernel (`hostport_dns_common::policy`); this
//! module compiles it for both paths.

pub mod config;
pub mod martian;
pub mod prefixes;
pub mod rate;

use std::{net::IpAddr, path::PathBuf};

use hostport_dns_common::policy::{
    ClientPolicy, POLICY_ACL, POLICY_ACL_REFUSE, POLICY_PREFIXES, POLICY_RATE_LIMIT,
    PREFIX_ALLOWED, PREFIX_EXEMPT,
};
use ipnet::IpNet;
use serde::Deserialize;

pub use prefixes::Prefixes;

/// `clients.cookies` in the configuration.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CookieConfig {
    /// Answer with server cookies and check returned ones.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The shared secrets (the chart mounts a Secret here). Without it, a random secret per
    /// process: cookies then stay valid only while the same agent answers.
    pub secret_file: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl Default for CookieConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            secret_file: None,
        }
    }
}

/// What happens to a client outside the allow-list.
#[derive(Clone, Copy, Debug, Default, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Outside {
    /// Not answered at all (nothing to reflect, nothing to learn).
    #[default]
    Drop,
    /// Answered REFUSED (by userspace, on both paths).
    Refuse,
}

/// Response rate limiting (modelled on Knot's RRL): answers per second per source prefix (/24,
/// /56), counted apart for positive, negative and error answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// Positive answers per second per prefix; 0: rate limiting is off (the default).
    pub responses_per_second: u32,
    /// NXDOMAIN and NODATA answers per second per prefix.
    pub negative_per_second: u32,
    /// Error answers (REFUSED, FORMERR, ...) per second per prefix.
    pub errors_per_second: u32,
    /// Every `slip`-th limited answer goes out truncated (TC=1); 0: all are dropped.
    pub slip: u32,
    /// Prefixes never limited (the load balancers).
    pub exempt: Vec<IpNet>,
}

impl RateLimit {
    pub fn enabled(&self) -> bool {
        self.responses_per_second > 0
    }
}

/// The client policy as configured (`clients:` in the configuration file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientsConfig {
    /// Allowed source prefixes; empty: every client (the default).
    pub allow: Vec<IpNet>,
    pub outside: Outside,
    pub rate_limit: RateLimit,
    pub cookies: CookieConfig,
}

/// The policy compiled for lookups: what each configured prefix grants.
#[derive(Clone, Debug)]
pub struct ClientPolicyTable {
    pub config: ClientsConfig,
    pub prefixes: Prefixes,
}

/// What one client gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grants {
    pub allowed: bool,
    pub exempt: bool,
}

impl ClientPolicyTable {
    pub fn new(config: ClientsConfig) -> Self {
        let prefixes = Prefixes::compile(&config.allow, &config.rate_limit.exempt);
        Self { config, prefixes }
    }

    /// What `addr` gets: the same answer the kernel's longest-prefix lookup gives.
    pub fn grants(&self, addr: IpAddr) -> Grants {
        let grants = self.prefixes.lookup(addr);
        Grants {
            allowed: self.config.allow.is_empty() || grants & PREFIX_ALLOWED != 0,
            exempt: grants & PREFIX_EXEMPT != 0,
        }
    }

    /// The policy global the XDP program is loaded with.
    pub fn kernel_policy(&self) -> ClientPolicy {
        let rate = &self.config.rate_limit;
        let mut flags = 0;
        if !self.config.allow.is_empty() {
            flags |= POLICY_ACL;
            if self.config.outside == Outside::Refuse {
                flags |= POLICY_ACL_REFUSE;
            }
        }
        if rate.enabled() {
            flags |= POLICY_RATE_LIMIT;
        }
        if !self.prefixes.is_empty() {
            flags |= POLICY_PREFIXES;
        }
        ClientPolicy {
            flags,
            positive_per_second: rate.responses_per_second,
            negative_per_second: rate.negative_per_second,
            slip: rate.slip,
        }
    }
}

impl Default for ClientPolicyTable {
    fn default() -> Self {
        Self::new(ClientsConfig::default())
    }
}
