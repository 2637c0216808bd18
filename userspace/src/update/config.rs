//! `update:` in the configuration file: the primaries hostport-dns sends RFC 2136 UPDATEs to.
//!
//! ```yaml
//! update:
//!   - server: 198.18.0.1              # port 53 unless given
//!     zone: corp.example.             # the target zone (the UPDATE's zone section)
//!     source: prod.example.           # a zone hostport-dns serves
//!     names: [api, web.ingress]       # relative to `source`; default: every name of it
//!     key: xfr-key                    # one of transfer.keys; required unless `insecure: true`
//!     ttl: 30                         # default: the records' own TTL
//! ```
//!
//! A name `<relative>.<source>` is written as `<relative>.<zone>`. The source's apex is never
//! written (the target's apex holds the company zone's own addresses).

use std::net::SocketAddr;

use hickory_proto::rr::Name;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    config_schema::{DomainName, KeyName, SocketAddress},
    name_grammar::{RelativeName, parse_name},
    transfer::config::TransferConfig,
};

/// The port UPDATEs go to when the configuration names none.
const UPDATE_PORT: u16 = 53;
/// The largest TTL RFC 2181 §8 allows.
const MAX_TTL: u32 = i32::MAX as u32;

/// One primary and the names written into one of its zones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateTarget {
    pub server: SocketAddr,
    /// The target zone, fully qualified.
    pub zone: Name,
    /// The served zone the names come from, fully qualified.
    pub source: Name,
    /// The names of `source` written (fully qualified, inside it); None: every name of it.
    pub names: Option<Vec<Name>>,
    /// The TSIG key (None only with `insecure: true`).
    pub key: Option<Name>,
    /// The TTL written (None: the records' own).
    pub ttl: Option<u32>,
}

impl UpdateTarget {
    /// How the target is named in logs and metrics: `<zone>@<server>`.
    pub fn label(&self) -> String {
        format!("{}@{}", self.zone, self.server)
    }

    /// The name `name` of the source zone has in the target zone; None: not one written here
    /// (outside the source, or its apex).
    pub fn target_name(&self, name: &Name) -> Option<Name> {
        let depth = usize::from(self.source.num_labels());
        let labels = usize::from(name.num_labels());
        if labels <= depth || !self.source.zone_of(name) {
            return None;
        }
        let relative = Name::from_labels(name.iter().take(labels - depth)).ok()?;
        relative.append_domain(&self.zone).ok()
    }
}

/// An RFC 2136 target: the names of a served zone written into a zone of another primary.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateEntry {
    /// The primary's address (port 53 unless given).
    #[schemars(with = "SocketAddress")]
    server: String,
    /// The zone updated on the primary.
    #[schemars(with = "DomainName")]
    zone: String,
    /// A zone hostport-dns serves: `<relative>.<source>` is written as `<relative>.<zone>`.
    #[schemars(with = "DomainName")]
    source: String,
    /// Names of `source` written (relative to it, or absolute inside it); default: every name
    /// with A or AAAA records, the apex aside.
    #[serde(default)]
    names: Option<Vec<RelativeName>>,
    /// One of `transfer.keys`; required unless `insecure` is true.
    #[serde(default)]
    #[schemars(with = "Option<KeyName>")]
    key: Option<String>,
    /// Send unsigned UPDATEs (a primary that allows updates by address alone).
    #[serde(default)]
    insecure: bool,
    /// The TTL written; default: the records' own.
    #[schemars(range(max = MAX_TTL))]
    ttl: Option<u32>,
}

impl UpdateEntry {
    /// The target as the agent uses it; `i`: its index, for errors; `transfer`: where the keys
    /// are.
    pub fn compile(
        self,
        i: usize,
        transfer: Option<&TransferConfig>,
    ) -> Result<UpdateTarget, String> {
        let what = format!("update[{i}]");
        let text = self.server.trim();
        let server = text
            .parse::<SocketAddr>()
            .or_else(|_| {
                text.parse::<std::net::IpAddr>()
                    .map(|ip| SocketAddr::new(ip, UPDATE_PORT))
            })
            .map_err(|_| {
                format!("{what}.server: {text:?} is not an address (with or without a port)")
            })?;
        let zone = parse_name(self.zone.trim(), true).map_err(|e| format!("{what}.zone: {e}"))?;
        let source =
            parse_name(self.source.trim(), true).map_err(|e| format!("{what}.source: {e}"))?;
        let names = match self.names {
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .enumerate()
                    .map(|(n, name)| resolve(name, &source, &format!("{what}.names[{n}]")))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let key = match (self.key, self.insecure) {
            (Some(_), true) => {
                return Err(format!(
                    "{what}: key and insecure: true contradict each other; leave one out"
                ));
            }
            (None, false) => {
                return Err(format!(
                    "{what}.key: a TSIG key of transfer.keys is required (or insecure: true for a primary that allows updates by address)"
                ));
            }
            (None, true) => None,
            (Some(text), false) => {
                let mut name = Name::from_ascii(text.trim())
                    .map_err(|e| format!("{what}.key: {text:?} is not a key name: {e}"))?
                    .to_lowercase();
                name.set_fqdn(true);
                let known = transfer.is_some_and(|t| t.keys.iter().any(|k| k.name == name));
                if !known {
                    return Err(format!("{what}.key: key {name} is not in transfer.keys"));
                }
                Some(name)
            }
        };
        if let Some(ttl) = self.ttl
            && ttl > MAX_TTL
        {
            return Err(format!("{what}.ttl: {ttl} is more than {MAX_TTL}"));
        }
        Ok(UpdateTarget {
            server,
            zone,
            source,
            names,
            key,
            ttl: self.ttl,
        })
    }
}

/// A name of `names`, inside `source` and not its apex.
fn resolve(name: &RelativeName, source: &Name, what: &str) -> Result<Name, String> {
    let resolved = name.resolve(source).map_err(|e| format!("{what}: {e}"))?;
    if resolved == *source {
        return Err(format!(
            "{what}: the apex of {source} is not written (it would replace the target zone's own apex addresses)"
        ));
    }
    Ok(resolved)
}

/// Targets that would write the same names twice (the same server, zone and, with both
/// `names` lists, a common name; or without a list) fight each other: refused.
pub fn check_distinct(targets: &[UpdateTarget]) -> Result<(), String> {
    for (i, a) in targets.iter().enumerate() {
        for (j, b) in targets.iter().enumerate().skip(i + 1) {
            if a.server != b.server || a.zone != b.zone {
                continue;
            }
            let overlap = match (&a.names, &b.names) {
                (Some(x), Some(y)) => x
                    .iter()
                    .filter_map(|n| a.target_name(n))
                    .any(|n| y.iter().filter_map(|m| b.target_name(m)).any(|m| m == n)),
                _ => true,
            };
            if overlap {
                return Err(format!(
                    "update[{i}] and update[{j}] write the same names of {} on {}; give them distinct `names`",
                    a.zone, a.server
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::config::TransferEntry;

    fn transfer() -> TransferConfig {
        crate::sources::file::from_yaml::<TransferEntry>(
            "keys: [{name: xfr-key, secretFile: /k}]",
            "transfer.yaml".as_ref(),
        )
        .unwrap()
        .compile()
        .unwrap()
    }

    fn compile(yaml: &str) -> Result<UpdateTarget, String> {
        crate::sources::file::from_yaml::<UpdateEntry>(yaml, "update.yaml".as_ref())
            .map_err(|e| e.to_string())?
            .compile(0, Some(&transfer()))
    }

    #[test]
    fn an_entry_compiles_and_maps_names_into_the_target_zone() {
        let target = compile(
            "{server: 198.18.0.1, zone: Corp.Example, source: prod.example., names: [api, web.ingress.prod.example.], key: xfr-key, ttl: 30}",
        )
        .unwrap();
        assert_eq!(target.server, "198.18.0.1:53".parse().unwrap());
        assert_eq!(target.zone.to_ascii(), "corp.example.");
        assert_eq!(target.key.as_ref().unwrap().to_ascii(), "xfr-key.");
        let names: Vec<String> = target
            .names
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| target.target_name(n).unwrap().to_ascii())
            .collect();
        assert_eq!(names, ["api.corp.example.", "web.ingress.corp.example."]);
        let apex = Name::from_ascii("prod.example.").unwrap();
        assert_eq!(target.target_name(&apex), None);
        let outside = Name::from_ascii("api.other.example.").unwrap();
        assert_eq!(target.target_name(&outside), None);
        assert_eq!(target.label(), "corp.example.@198.18.0.1:53");
    }

    #[test]
    fn mistakes_are_reported_where_they_stand() {
        for (yaml, expected) in [
            (
                "{server: nowhere, zone: c.example, source: p.example, key: xfr-key}",
                "update[0].server",
            ),
            (
                "{server: 198.18.0.1, zone: c.example, source: p.example}",
                "update[0].key: a TSIG key",
            ),
            (
                "{server: 198.18.0.1, zone: c.example, source: p.example, key: other}",
                "key other. is not in transfer.keys",
            ),
            (
                "{server: 198.18.0.1, zone: c.example, source: p.example, key: xfr-key, insecure: true}",
                "contradict",
            ),
            (
                "{server: 198.18.0.1, zone: c.example, source: p.example, key: xfr-key, names: ['@']}",
                "update[0].names[0]: the apex",
            ),
            (
                "{server: 198.18.0.1, zone: c.example, source: p.example, key: xfr-key, names: [a.q.example.]}",
                "outside the zone",
            ),
        ] {
            let err = compile(yaml).unwrap_err();
            assert!(err.contains(expected), "{yaml}: {err}");
        }
        let err = compile("{server: 198.18.0.1, zone: c.example, source: p.example, keys: x}")
            .unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
        let insecure = compile(
            "{server: '[2001:db8::1]:5353', zone: c.example, source: p.example, insecure: true}",
        )
        .unwrap();
        assert_eq!(insecure.key, None);
        assert_eq!(insecure.server.port(), 5353);
    }

    #[test]
    fn two_targets_writing_one_name_are_refused() {
        let target = |names: &str| {
            compile(&format!(
                "{{server: 198.18.0.1, zone: c.example, source: p.example, key: xfr-key{names}}}"
            ))
            .unwrap()
        };
        let err = check_distinct(&[target(", names: [a, b]"), target(", names: [b]")]).unwrap_err();
        assert!(err.contains("update[0] and update[1]"), "{err}");
        assert!(check_distinct(&[target(", names: [a]"), target(", names: [b]")]).is_ok());
        assert!(check_distinct(&[target(""), target(", names: [b]")]).is_err());
    }
}
