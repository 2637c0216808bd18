//! `transfer:` in the configuration file: who may transfer the zones (an ACL of prefixes, each
//! optionally bound to a TSIG key), the TSIG keys, the secondaries to NOTIFY, and how many
//! versions IXFR can start from.
//!
//! ```yaml
//! transfer:
//!   keys:
//!     - name: transfer-key            # the key's name, as the secondary names it
//!       algorithm: hmac-sha256        # hmac-sha256 (default), hmac-sha384, hmac-sha512
//!       secretFile: /etc/hostport-dns-tsig/transfer-key   # base64, as tsig-keygen prints it
//!   allow:
//!     - from: 198.18.0.0/15           # an address or a prefix
//!       key: transfer-key             # transfers from there must be signed with this key
//!   notify:
//!     - address: 198.18.0.2           # port 53 unless given
//!       key: transfer-key
//!       zones: [prod.example., 0.18.198.in-addr.arpa.]   # default: the forward zones and the
//!                                     # configured reverse zones (reverseZones.zones)
//!   history: 64                       # versions kept for IXFR
//!   catalog:                          # a catalog zone (RFC 9432) of every zone served
//!     zone: catalog.prod.example.     # its name: no served zone is it or holds it
//! ```
//!
//! A `notify` entry with `catalog: true` is a catalog consumer: it gets the NOTIFYs of the
//! catalog and of every member zone, derived reverse zones included, and needs no `zones`.

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
};

use hickory_proto::rr::{Name, rdata::tsig::TsigAlgorithm};
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config_schema::{DomainName, KeyName, Prefix, SocketAddress};

/// Versions kept for IXFR when the configuration does not say.
pub const DEFAULT_HISTORY: usize = 64;
/// The most versions that can be kept.
pub const MAX_HISTORY: usize = 10_000;
/// The port NOTIFY goes to when the configuration names none.
const NOTIFY_PORT: u16 = 53;

/// Zone transfers as configured; `None` in the agent: no transfers (AXFR and IXFR REFUSED).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferConfig {
    pub keys: Vec<KeyConfig>,
    pub allow: Vec<AllowEntry>,
    pub notify: Vec<NotifyTarget>,
    pub history: usize,
    /// The catalog zone of every zone served (None: no catalog).
    pub catalog: Option<CatalogConfig>,
}

/// The catalog zone as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogConfig {
    pub spec: hostport_dns_core::table::catalog::CatalogSpec,
    /// How long a derived reverse zone that lost its last PTR record stays served (empty) and a
    /// member, so that a node's restart does not make every consumer delete and re-create it.
    pub grace: std::time::Duration,
}

/// The catalog's grace period when the configuration does not say: an hour.
pub const DEFAULT_CATALOG_GRACE_SECONDS: u64 = 3600;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyConfig {
    pub name: Name,
    pub algorithm: TsigAlgorithm,
    pub secret_file: PathBuf,
}

/// Transfers from `from` are allowed; signed with `key` if it names one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowEntry {
    pub from: IpNet,
    pub key: Option<Name>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyTarget {
    pub address: SocketAddr,
    pub key: Option<Name>,
    /// The zones it is a secondary of (None: the forward zones and the configured reverse
    /// zones). A NOTIFY for a zone a secondary does not serve is refused and retried for
    /// nothing, and derived reverse zones come and go with the addresses.
    pub zones: Option<Vec<Name>>,
    /// A consumer of the catalog zone: NOTIFYed of the catalog and of every member.
    pub catalog: bool,
}

impl NotifyTarget {
    /// Whether `apex` is to be NOTIFYed to this secondary; `reverse`: it is a reverse zone,
    /// `configured`: one the configuration names.
    pub fn wants(&self, apex: &Name, reverse: bool, configured: bool) -> bool {
        if self.catalog {
            return true;
        }
        match &self.zones {
            Some(zones) => zones.contains(apex),
            None => !reverse || configured,
        }
    }
}

/// Zone transfers to secondaries (absent: AXFR and IXFR are refused).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TransferEntry {
    /// TSIG keys; names are unique.
    #[serde(default)]
    keys: Vec<KeyEntry>,
    /// Who may transfer.
    #[serde(default)]
    allow: Vec<AllowItem>,
    /// Secondaries told of every change.
    #[serde(default)]
    notify: Vec<NotifyItem>,
    /// Versions IXFR can start from (default 64).
    #[schemars(range(max = MAX_HISTORY))]
    history: Option<usize>,
    /// A catalog zone (RFC 9432, version 2) listing every zone served: the forward zones of the
    /// configuration and the record file, and the reverse zones, derived ones included. Off by
    /// default.
    #[serde(default)]
    catalog: Option<CatalogEntry>,
}

/// The catalog zone's settings.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CatalogEntry {
    /// The catalog's name, the same on every agent whose secondaries consume it; no served zone
    /// may be it or hold it.
    #[schemars(with = "DomainName")]
    zone: String,
    /// Seconds a derived reverse zone that lost its last PTR record stays a member, served
    /// empty (default 3600): a node's restart does not make every consumer delete the zone and
    /// create it again. 0: it leaves at once.
    #[serde(default)]
    grace_seconds: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KeyEntry {
    #[schemars(with = "KeyName")]
    name: String,
    /// Default hmac-sha256.
    #[serde(default)]
    #[schemars(with = "Option<TsigAlgorithmName>")]
    algorithm: Option<String>,
    /// The key's base64 secret, as tsig-keygen prints it.
    secret_file: PathBuf,
}

/// The TSIG algorithms `compile` accepts.
#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code, clippy::enum_variant_names)]
enum TsigAlgorithmName {
    HmacSha256,
    HmacSha384,
    HmacSha512,
}

/// Transfers from `from` are allowed; signed with `key` if it names one.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AllowItem {
    #[schemars(with = "Prefix")]
    from: String,
    /// One of `keys`.
    #[serde(default)]
    #[schemars(with = "Option<KeyName>")]
    key: Option<String>,
}

/// A secondary told of every change (port 53 unless given).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NotifyItem {
    #[schemars(with = "SocketAddress")]
    address: String,
    /// One of `keys`.
    #[serde(default)]
    #[schemars(with = "Option<KeyName>")]
    key: Option<String>,
    /// The zones the secondary serves, forward or reverse (default: the forward zones and the
    /// reverse zones of `reverseZones.zones`, not derived ones).
    #[serde(default)]
    #[schemars(with = "Option<Vec<DomainName>>")]
    zones: Option<Vec<String>>,
    /// A consumer of the catalog zone (`transfer.catalog`): NOTIFYed of the catalog and of every
    /// member zone, derived reverse zones included; `zones` is then not given.
    #[serde(default)]
    catalog: bool,
}

impl TransferEntry {
    pub fn compile(self) -> Result<TransferConfig, String> {
        let mut keys: Vec<KeyConfig> = Vec::new();
        for (i, key) in self.keys.into_iter().enumerate() {
            let what = format!("transfer.keys[{i}]");
            let name = key_name(&key.name).map_err(|e| format!("{what}.name: {e}"))?;
            if keys.iter().any(|k| k.name == name) {
                return Err(format!("{what}.name: key {name} is defined twice"));
            }
            let algorithm = match key.algorithm.as_deref().unwrap_or("hmac-sha256") {
                "hmac-sha256" => TsigAlgorithm::HmacSha256,
                "hmac-sha384" => TsigAlgorithm::HmacSha384,
                "hmac-sha512" => TsigAlgorithm::HmacSha512,
                other => {
                    return Err(format!(
                        "{what}.algorithm: {other:?} is not one of hmac-sha256, hmac-sha384, hmac-sha512"
                    ));
                }
            };
            keys.push(KeyConfig {
                name,
                algorithm,
                secret_file: key.secret_file,
            });
        }
        let known = |text: &Option<String>, what: &str| -> Result<Option<Name>, String> {
            let Some(text) = text else { return Ok(None) };
            let name = key_name(text).map_err(|e| format!("{what}: {e}"))?;
            if !keys.iter().any(|k| k.name == name) {
                return Err(format!("{what}: key {name} is not in transfer.keys"));
            }
            Ok(Some(name))
        };
        let mut allow = Vec::new();
        for (i, item) in self.allow.iter().enumerate() {
            let what = format!("transfer.allow[{i}]");
            let text = item.from.trim();
            let from = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{what}.from: {text:?} is not an address or a prefix"))?;
            allow.push(AllowEntry {
                from,
                key: known(&item.key, &format!("{what}.key"))?,
            });
        }
        let mut notify = Vec::new();
        for (i, item) in self.notify.iter().enumerate() {
            let what = format!("transfer.notify[{i}]");
            let text = item.address.trim();
            let address = text
                .parse::<SocketAddr>()
                .or_else(|_| {
                    text.parse::<std::net::IpAddr>()
                        .map(|ip| SocketAddr::new(ip, NOTIFY_PORT))
                })
                .map_err(|_| {
                    format!("{what}.address: {text:?} is not an address (with or without a port)")
                })?;
            if item.catalog && item.zones.is_some() {
                return Err(format!(
                    "{what}: a catalog consumer (catalog: true) is NOTIFYed of every zone; it takes no `zones`"
                ));
            }
            if item.catalog && self.catalog.is_none() {
                return Err(format!(
                    "{what}.catalog: there is no catalog zone (transfer.catalog) to consume"
                ));
            }
            notify.push(NotifyTarget {
                address,
                key: known(&item.key, &format!("{what}.key"))?,
                zones: notify_zones(item.zones.as_deref(), &what)?,
                catalog: item.catalog,
            });
        }
        let catalog = self
            .catalog
            .as_ref()
            .map(|entry| {
                Ok::<_, String>(CatalogConfig {
                    spec: catalog_spec(&entry.zone)?,
                    grace: std::time::Duration::from_secs(
                        entry.grace_seconds.unwrap_or(DEFAULT_CATALOG_GRACE_SECONDS),
                    ),
                })
            })
            .transpose()?;
        let history = self.history.unwrap_or(DEFAULT_HISTORY);
        if history > MAX_HISTORY {
            return Err(format!(
                "transfer.history: {history} is more than {MAX_HISTORY}"
            ));
        }
        Ok(TransferConfig {
            keys,
            allow,
            notify,
            history,
            catalog,
        })
    }
}

/// The catalog's apex, lower case and absolute.
fn catalog_spec(text: &str) -> Result<hostport_dns_core::table::catalog::CatalogSpec, String> {
    let mut apex = Name::from_ascii(text.trim())
        .map_err(|e| format!("transfer.catalog.zone: {text:?} is not a zone name: {e}"))?
        .to_lowercase();
    apex.set_fqdn(true);
    if apex.is_root() {
        return Err("transfer.catalog.zone: the root cannot be the catalog".into());
    }
    Ok(hostport_dns_core::table::catalog::CatalogSpec { apex })
}

/// The zones of a NOTIFY entry, as absolute names.
fn notify_zones(zones: Option<&[String]>, what: &str) -> Result<Option<Vec<Name>>, String> {
    let Some(zones) = zones else {
        return Ok(None);
    };
    let mut names = Vec::with_capacity(zones.len());
    for (i, text) in zones.iter().enumerate() {
        let mut name = Name::from_ascii(text.trim())
            .map_err(|e| format!("{what}.zones[{i}]: {text:?} is not a zone name: {e}"))?
            .to_lowercase();
        name.set_fqdn(true);
        names.push(name);
    }
    Ok(Some(names))
}

impl TransferConfig {
    /// Refuses a catalog named as a served zone, inside one, or holding one (its records would
    /// be another zone's names).
    pub fn check_catalog(&self, zones: &[hostport_dns_core::zone::ZoneSpec]) -> Result<(), String> {
        let Some(catalog) = self.catalog.as_ref().map(|c| &c.spec) else {
            return Ok(());
        };
        match zones
            .iter()
            .find(|z| z.apex.zone_of(&catalog.apex) || catalog.apex.zone_of(&z.apex))
        {
            Some(zone) => Err(format!(
                "transfer.catalog.zone: {} overlaps the served zone {}: the catalog must be a zone of its own",
                catalog.apex, zone.apex
            )),
            None => Ok(()),
        }
    }

    /// Whether a transfer request from `client`, signed with `key` (None: unsigned), is
    /// allowed. The most specific entries that hold the client decide, as for the client
    /// allow-list: a narrower entry's key requirement is never cancelled by a broader entry
    /// without one. Entries of the same prefix length allow if any of them does (two keys for
    /// one secondary during a rotation).
    pub fn admits(&self, client: IpAddr, key: Option<&Name>) -> bool {
        let client = client.to_canonical();
        let holding = || self.allow.iter().filter(|e| e.from.contains(&client));
        let Some(longest) = holding().map(|e| e.from.prefix_len()).max() else {
            return false;
        };
        holding()
            .filter(|e| e.from.prefix_len() == longest)
            .any(|e| e.key.as_ref().is_none_or(|k| Some(k) == key))
    }
}

fn key_name(text: &str) -> Result<Name, String> {
    let mut name = Name::from_ascii(text.trim())
        .map_err(|e| format!("{text:?} is not a key name: {e}"))?
        .to_lowercase();
    name.set_fqdn(true);
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(yaml: &str) -> Result<TransferConfig, String> {
        crate::sources::file::from_yaml::<TransferEntry>(yaml, "transfer.yaml".as_ref())
            .map_err(|e| e.to_string())?
            .compile()
    }

    #[test]
    fn a_whole_section_compiles() {
        let config = compile(
            "keys: [{name: Transfer-Key, secretFile: /k}]\n\
             allow: [{from: 198.18.0.0/15, key: transfer-key}, {from: '::1'}]\n\
             notify: [{address: 198.18.0.2, key: transfer-key}, {address: '[::1]:5300'}]\n",
        )
        .unwrap();
        assert_eq!(config.keys[0].name.to_ascii(), "transfer-key.");
        assert_eq!(config.allow[1].from, "::1/128".parse().unwrap());
        assert_eq!(config.notify[0].address, "198.18.0.2:53".parse().unwrap());
        assert_eq!(config.notify[1].address, "[::1]:5300".parse().unwrap());
        assert_eq!(config.history, DEFAULT_HISTORY);
        assert_eq!(config.notify[0].zones, None);
    }

    #[test]
    fn notify_goes_to_the_zones_a_secondary_serves() {
        let config = compile(
            "notify: [{address: 198.18.0.2, zones: [Prod.Example, 0.18.198.in-addr.arpa.]}, \
             {address: 198.18.0.3}]",
        )
        .unwrap();
        let name = |s: &str| Name::from_ascii(s).unwrap();
        let (listed, default) = (&config.notify[0], &config.notify[1]);
        assert!(listed.wants(&name("prod.example."), false, false));
        assert!(listed.wants(&name("0.18.198.in-addr.arpa."), true, false));
        assert!(!listed.wants(&name("other.example."), false, false));
        assert!(!listed.wants(&name("1.18.198.in-addr.arpa."), true, true));
        // Without a list: forward zones and configured reverse zones, not derived ones.
        assert!(default.wants(&name("other.example."), false, false));
        assert!(default.wants(&name("0.18.198.in-addr.arpa."), true, true));
        assert!(!default.wants(&name("0.18.198.in-addr.arpa."), true, false));
        let err = compile("notify: [{address: 198.18.0.2, zones: ['bad..name']}]").unwrap_err();
        assert!(err.contains("transfer.notify[0].zones[0]"), "{err}");
    }

    #[test]
    fn the_most_specific_entry_decides_and_a_broad_one_cancels_no_key() {
        let config = compile(
            "keys: [{name: xfr-key, secretFile: /k}, {name: next-key, secretFile: /n}]\n\
             allow: [{from: 127.0.0.0/8}, {from: 127.0.0.1/32, key: xfr-key},\n\
                     {from: 198.18.0.9, key: xfr-key}, {from: 198.18.0.9, key: next-key}]\n",
        )
        .unwrap();
        let key = |name: &str| Name::from_ascii(name).unwrap();
        let admits = |client: &str, k: Option<&str>| {
            config.admits(client.parse().unwrap(), k.map(key).as_ref())
        };
        assert!(!admits("127.0.0.1", None), "the /32 asks for its key");
        assert!(admits("127.0.0.1", Some("xfr-key.")));
        assert!(!admits("127.0.0.1", Some("next-key.")));
        assert!(admits("127.0.0.2", None), "only the /8 holds it");
        assert!(admits("::ffff:127.0.0.2", None), "IPv4-mapped is IPv4");
        assert!(
            admits("198.18.0.9", Some("next-key.")),
            "either of equal entries"
        );
        assert!(admits("198.18.0.9", Some("xfr-key.")));
        assert!(!admits("198.18.0.9", None));
        assert!(!admits("198.18.0.10", Some("xfr-key.")), "in no entry");
    }

    #[test]
    fn mistakes_are_reported_where_they_stand() {
        let err = compile("allow: [{from: 198.18.0.0/15, key: nokey}]").unwrap_err();
        assert!(err.contains("transfer.allow[0].key"), "{err}");
        let err = compile("keys: [{name: k, algorithm: md5, secretFile: /k}]").unwrap_err();
        assert!(err.contains("transfer.keys[0].algorithm"), "{err}");
        let err = compile("notify: [{address: nowhere}]").unwrap_err();
        assert!(err.contains("transfer.notify[0].address"), "{err}");
        let err = compile("history: 1000000").unwrap_err();
        assert!(err.contains("transfer.history"), "{err}");
        let err = compile("notify: [{address: 198.18.0.2, catalog: true}]").unwrap_err();
        assert!(err.contains("transfer.notify[0].catalog"), "{err}");
        let err = compile(
            "catalog: {zone: cat.example}\nnotify: [{address: 198.18.0.2, catalog: true, zones: [a.]}]",
        )
        .unwrap_err();
        assert!(err.contains("takes no `zones`"), "{err}");
        let err = compile("catalog: {zone: 'bad..name'}").unwrap_err();
        assert!(err.contains("transfer.catalog.zone"), "{err}");
    }

    #[test]
    fn a_catalog_consumer_is_told_of_every_zone_and_the_catalog_stands_apart() {
        let config = compile(
            "catalog: {zone: Catalog.Example}\nnotify: [{address: 198.18.0.2, catalog: true}]",
        )
        .unwrap();
        let name = |s: &str| Name::from_ascii(s).unwrap();
        let catalog = config.catalog.as_ref().expect("a catalog");
        assert_eq!(catalog.spec.apex, name("catalog.example."));
        assert_eq!(catalog.grace.as_secs(), DEFAULT_CATALOG_GRACE_SECONDS);
        let consumer = &config.notify[0];
        assert!(consumer.wants(&name("0.18.198.in-addr.arpa."), true, false));
        assert!(consumer.wants(&name("catalog.example."), false, false));
        let zones = |apex: &str| [hostport_dns_core::zone::ZoneSpec::with_defaults(name(apex))];
        assert!(config.check_catalog(&zones("prod.example.")).is_ok());
        for overlapping in ["catalog.example.", "example.", "in.catalog.example."] {
            let err = config.check_catalog(&zones(overlapping)).unwrap_err();
            assert!(err.contains("overlaps"), "{overlapping}: {err}");
        }
    }
}
