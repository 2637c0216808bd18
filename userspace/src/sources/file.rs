//! The static record file: zones, TTLs and names with their addresses, in YAML. It is the
//! embedded default, what the tests use, and a supported source for non-Kubernetes use. A bad
//! file is reported with its path, line and reason; on reload the previous records stay in
//! service until the file is valid again.
//!
//! ```yaml
//! zones:
//!   - name: prod.coreha.example        # the apex
//!     ttl: 5                           # optional, default 5
//!     records:                         # names relative to the zone ("@" is the apex) or
//!       default-nginx.ingress:         # absolute (ending in "."), to one address or a list
//!         - 198.18.200.1
//!         - 2001:db8::1
//!       api: 198.18.0.10
//!     srv:                             # optional
//!       _https._tcp.web: [{ port: 443, target: node-1.nodes }]
//!     nameservers:                     # optional, default ns.<zone> without addresses
//!       - { name: ns1, addresses: [198.18.0.53] }
//!     soa: { mname: ns1, rname: hostmaster, refresh: 3600, retry: 600, expire: 86400, minimum: 5 }
//! ```

use std::{
    collections::BTreeMap,
    fmt,
    net::IpAddr,
    path::{Path, PathBuf},
};

use hickory_proto::rr::Name;
use hostport_dns_common::limits::MAX_ZONE_LABELS;
use serde::{Deserialize, Deserializer, de};

use crate::{
    records::{RecordData, SourceRecord, Srv},
    sources::Snapshot,
    zone::{DEFAULT_EXPIRE, DEFAULT_REFRESH, DEFAULT_RETRY, NameServer, ZoneSpec},
};

/// The example served when no source is configured: `cargo xtask run` answers from it.
pub const EMBEDDED_DEFAULT: &str = include_str!("default-records.yaml");

/// A record file that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {reason}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// Parses and validates record file text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Snapshot, FileError> {
    let file: RecordFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        FileError::Syntax {
            path: path.to_owned(),
            line,
            column,
            reason: strip_location(&e.to_string()),
        }
    })?;
    let invalid = |reason: String| FileError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let mut zones = Vec::new();
    let mut all_records = Vec::new();
    for zone in file.zones {
        let (spec, records) = zone.compile().map_err(invalid)?;
        zones.push(spec);
        all_records.extend(records);
    }
    check_zones_do_not_overlap(&zones).map_err(invalid)?;
    Ok(Snapshot::new(zones, all_records))
}

/// Zones must not nest or repeat: every name has exactly one zone.
pub fn check_zones_do_not_overlap(zones: &[ZoneSpec]) -> Result<(), String> {
    for (i, a) in zones.iter().enumerate() {
        for b in &zones[i + 1..] {
            if a.apex.zone_of(&b.apex) || b.apex.zone_of(&a.apex) {
                return Err(format!(
                    "zones {} and {} overlap: zones may not nest or repeat",
                    a.apex, b.apex
                ));
            }
        }
    }
    Ok(())
}

/// serde_yaml_ng appends " at line L column C"; the error names the location separately.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    zones: Vec<ZoneEntry>,
}

/// One zone as written in a record file or in the agent's configuration file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneEntry {
    name: DnsName,
    #[serde(default)]
    ttl: Option<Ttl>,
    #[serde(default)]
    records: BTreeMap<RelativeName, Addresses>,
    #[serde(default)]
    srv: BTreeMap<RelativeName, Vec<SrvEntry>>,
    #[serde(default)]
    nameservers: Option<Vec<NameServerEntry>>,
    #[serde(default)]
    soa: Option<SoaEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SrvEntry {
    #[serde(default)]
    priority: u16,
    #[serde(default = "default_weight")]
    weight: u16,
    port: u16,
    target: RelativeName,
}

fn default_weight() -> u16 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameServerEntry {
    name: RelativeName,
    #[serde(default)]
    addresses: Vec<IpAddr>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SoaEntry {
    mname: Option<RelativeName>,
    rname: Option<RelativeName>,
    refresh: Option<i32>,
    retry: Option<i32>,
    expire: Option<i32>,
    minimum: Option<Ttl>,
}

/// One address or a list of them; each bad address is reported where it stands.
struct Addresses(Vec<IpAddr>);

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> de::Visitor<'de> for Visitor {
            type Value = Addresses;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an IP address or a list of IP addresses")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Addresses, E> {
                parse_address(text).map(|a| Addresses(vec![a]))
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Addresses, A::Error> {
                let mut addresses = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    addresses.push(parse_address(&text)?);
                }
                Ok(Addresses(addresses))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn parse_address<E: de::Error>(text: &str) -> Result<IpAddr, E> {
    text.parse()
        .map_err(|_| E::custom(format!("{text:?} is not a valid IP address")))
}

impl ZoneEntry {
    /// The zone and its static records.
    pub fn compile(self) -> Result<(ZoneSpec, Vec<SourceRecord>), String> {
        let apex = self.name.0;
        let mut spec = ZoneSpec::with_defaults(apex.clone());
        if let Some(ttl) = self.ttl {
            spec.ttl = ttl.0;
            spec.soa.minimum = ttl.0;
        }
        if let Some(nameservers) = self.nameservers {
            spec.nameservers = nameservers
                .into_iter()
                .map(|ns| {
                    Ok(NameServer {
                        name: ns.name.resolve(&apex)?,
                        addresses: ns.addresses,
                    })
                })
                .collect::<Result<_, String>>()?;
            if let Some(first) = spec.nameservers.first() {
                spec.soa.mname = first.name.clone();
            }
        }
        if let Some(soa) = self.soa {
            if let Some(mname) = soa.mname {
                spec.soa.mname = mname.resolve_anywhere(&apex)?;
            }
            if let Some(rname) = soa.rname {
                spec.soa.rname = rname.resolve_anywhere(&apex)?;
            }
            spec.soa.refresh = soa.refresh.unwrap_or(DEFAULT_REFRESH);
            spec.soa.retry = soa.retry.unwrap_or(DEFAULT_RETRY);
            spec.soa.expire = soa.expire.unwrap_or(DEFAULT_EXPIRE);
            if let Some(minimum) = soa.minimum {
                spec.soa.minimum = minimum.0;
            }
        }
        let mut records = Vec::new();
        for (name, addresses) in self.records {
            let name = name.resolve(&apex)?;
            for address in addresses.0 {
                let data = match address {
                    IpAddr::V4(a) => RecordData::A(a),
                    IpAddr::V6(a) => RecordData::Aaaa(a),
                };
                records.push(SourceRecord {
                    name: name.clone(),
                    ttl: None,
                    data,
                });
            }
        }
        for (name, targets) in self.srv {
            let name = name.resolve(&apex)?;
            for t in targets {
                let srv = Srv {
                    priority: t.priority,
                    weight: t.weight,
                    port: t.port,
                    target: t.target.resolve_anywhere(&apex)?,
                };
                records.push(SourceRecord {
                    name: name.clone(),
                    ttl: None,
                    data: RecordData::Srv(srv),
                });
            }
        }
        Ok((spec, records))
    }
}

/// An absolute name (a zone): valid labels, lower-cased.
#[derive(Clone, Debug)]
pub struct DnsName(pub Name);

impl<'de> Deserialize<'de> for DnsName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let name = parse_name(&text, true).map_err(de::Error::custom)?;
        if name.is_root() {
            return Err(de::Error::custom("the root cannot be a zone"));
        }
        if name.num_labels() as usize > MAX_ZONE_LABELS {
            return Err(de::Error::custom(format!(
                "zone {name} has more than {MAX_ZONE_LABELS} labels"
            )));
        }
        Ok(Self(name))
    }
}

/// A record name as written: relative to its zone, "@" for the apex, or absolute with a final
/// dot.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RelativeName(String);

impl<'de> Deserialize<'de> for RelativeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text != "@" {
            parse_name(&text, false).map_err(de::Error::custom)?;
        }
        Ok(Self(text))
    }
}

impl RelativeName {
    /// The name inside `apex`; an absolute name outside it is an error.
    pub fn resolve(&self, apex: &Name) -> Result<Name, String> {
        let name = self.resolve_anywhere(apex)?;
        if apex.zone_of(&name) {
            Ok(name)
        } else {
            Err(format!("zone {apex}: {name} is outside the zone"))
        }
    }

    /// The name, relative ones completed with `apex`.
    fn resolve_anywhere(&self, apex: &Name) -> Result<Name, String> {
        if self.0 == "@" {
            return Ok(apex.clone());
        }
        let name = parse_name(&self.0, false)?;
        if self.0.ends_with('.') {
            return Ok(name);
        }
        name.append_domain(apex)
            .map(|n| n.to_lowercase())
            .map_err(|e| format!("zone {apex}: {}: {e}", self.0))
    }
}

/// A DNS name of letters, digits, hyphens and underscores (service labels), lower-cased.
pub fn parse_name(text: &str, absolute: bool) -> Result<Name, String> {
    if text.is_empty() {
        return Err("empty name".into());
    }
    for label in text.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("{text:?}: labels must be 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "{text:?}: labels may hold letters, digits, '-' and '_' only"
            ));
        }
    }
    let mut name = Name::from_ascii(text)
        .map_err(|e| format!("{text:?}: {e}"))?
        .to_lowercase();
    if absolute {
        name.set_fqdn(true);
    }
    Ok(name)
}

/// A TTL: at most 2^31 - 1 seconds (RFC 2181 §8).
#[derive(Clone, Copy, Debug)]
pub struct Ttl(pub u32);

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ttl = u32::deserialize(d)?;
        if ttl > i32::MAX as u32 {
            return Err(de::Error::custom("a TTL is at most 2147483647 seconds"));
        }
        Ok(Self(ttl))
    }
}

impl fmt::Debug for RelativeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Snapshot, FileError> {
        parse(text, Path::new("records.yaml"))
    }

    #[test]
    fn the_embedded_default_is_valid() {
        let snapshot = parse_str(EMBEDDED_DEFAULT).unwrap();
        assert!(!snapshot.zones.is_empty());
        assert!(snapshot.record_count() > 0);
    }

    #[test]
    fn relative_names_are_completed_and_lower_cased() {
        let s = parse_str("zones:\n  - name: Example.\n    records:\n      Web.Ingress: 198.18.0.1\n      '@': [198.18.0.2]\n").unwrap();
        let names: Vec<String> = s.records().map(|r| r.name.to_string()).collect();
        assert_eq!(names, ["example.", "web.ingress.example."]);
    }

    #[test]
    fn a_bad_address_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: example\n    records:\n      web: 198.18.0.300\n")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("records.yaml:4:"), "{text}");
    }

    #[test]
    fn a_bad_label_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: example\n    records:\n      'we b': 198.18.0.1\n")
            .unwrap_err();
        assert!(err.to_string().starts_with("records.yaml:4:"), "{err}");
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = parse_str("zones:\n  - name: example\n    tll: 5\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `tll`"), "{err}");
    }

    #[test]
    fn absolute_names_outside_the_zone_are_errors() {
        let err =
            parse_str("zones:\n  - name: example\n    records:\n      web.other.: 198.18.0.1\n")
                .unwrap_err();
        assert!(err.to_string().contains("outside the zone"), "{err}");
    }

    #[test]
    fn overlapping_zones_are_errors() {
        let err = parse_str("zones:\n  - name: example\n  - name: sub.example\n").unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
    }
}
