//! The grammar of names, in one place: the labels of names written in the record file and the
//! configuration (letters, digits, `-` and `_`, the last for service labels such as `_https`),
//! and the stricter host labels that Kubernetes values become (letters, digits and `-`, not at
//! either end: what a load balancer resolving a hostname accepts).

use std::fmt;

use hickory_proto::rr::Name;
use hostport_dns_common::limits::MAX_ZONE_LABELS;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, de};

/// Whether a label may hold `_`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Underscore {
    Allowed,
    /// A host label: letters, digits and `-`, starting and ending with a letter or digit.
    Host,
}

/// Checks one label: 1 to 63 characters of the allowed ones.
pub fn check_label(label: &str, underscore: Underscore) -> Result<(), String> {
    let bytes = label.as_bytes();
    if bytes.is_empty() || bytes.len() > 63 {
        return Err("labels must be 1 to 63 characters".into());
    }
    match underscore {
        Underscore::Allowed => {
            if !bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            {
                return Err("labels may hold letters, digits, '-' and '_' only".into());
            }
        }
        Underscore::Host => {
            if !bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
            {
                return Err("host labels may hold letters, digits and '-' only".into());
            }
            if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
                return Err("host labels may not start or end with '-'".into());
            }
        }
    }
    Ok(())
}

/// A Kubernetes value (label value, namespace, node name) as one lower-case host label, or
/// None when it cannot be one.
pub fn host_label(value: &str) -> Option<String> {
    check_label(value, Underscore::Host).ok()?;
    Some(value.to_ascii_lowercase())
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

/// One label of a written name ([`check_label`] with underscores allowed), unanchored.
macro_rules! label_pattern {
    () => {
        "[A-Za-z0-9_-]{1,63}"
    };
}

/// A written name (`parse_name`): labels separated by dots, an optional final dot, at most 254
/// characters (255 bytes on the wire).
pub const NAME_PATTERN: &str = concat!("^", label_pattern!(), "(\\.", label_pattern!(), ")*\\.?$");

/// What [`DnsName`] accepts, as JSON Schema: `parse_name`'s labels, at most
/// `MAX_ZONE_LABELS` of them, not the root.
impl JsonSchema for DnsName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DnsName".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let pattern = format!(
            "^{label}(\\.{label}){{0,{more}}}\\.?$",
            label = label_pattern!(),
            more = MAX_ZONE_LABELS - 1
        );
        json_schema!({
            "description": format!(
                "A zone: up to {MAX_ZONE_LABELS} labels of letters, digits, '-' and '_' (1 to 63 each), with or without the final dot."
            ),
            "type": "string",
            "maxLength": 254,
            "pattern": pattern,
        })
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

/// What [`RelativeName`] accepts, as JSON Schema: "@" or a name of `parse_name`'s labels.
impl JsonSchema for RelativeName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RelativeName".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let pattern = format!("^(@|{})$", &NAME_PATTERN[1..NAME_PATTERN.len() - 1]);
        json_schema!({
            "description": "A name relative to the zone, \"@\" for the apex, or absolute with a final dot: labels of letters, digits, '-' and '_' (1 to 63 each).",
            "type": "string",
            "maxLength": 254,
            "pattern": pattern,
        })
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
    pub fn resolve_anywhere(&self, apex: &Name) -> Result<Name, String> {
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
        check_label(label, Underscore::Allowed).map_err(|e| format!("{text:?}: {e}"))?;
    }
    let mut name = Name::from_ascii(text)
        .map_err(|e| format!("{text:?}: {e}"))?
        .to_lowercase();
    if absolute {
        name.set_fqdn(true);
    }
    Ok(name)
}

impl fmt::Debug for RelativeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_labels_allow_underscores_and_host_labels_do_not() {
        assert!(check_label("_https", Underscore::Allowed).is_ok());
        assert!(check_label("_https", Underscore::Host).is_err());
        assert!(
            check_label("-a", Underscore::Allowed).is_ok(),
            "a record file may"
        );
        assert!(check_label("-a", Underscore::Host).is_err());
        assert!(check_label("", Underscore::Allowed).is_err());
        assert!(check_label(&"a".repeat(64), Underscore::Allowed).is_err());
        assert_eq!(host_label("Public-LB").as_deref(), Some("public-lb"));
        assert_eq!(host_label("a.b"), None);
    }

    #[test]
    fn names_parse_lower_cased_and_absolute_when_asked() {
        let name = parse_name("Web.Prod.Example", true).unwrap();
        assert_eq!(name.to_ascii(), "web.prod.example.");
        assert!(parse_name("web..example", false).is_err());
        assert!(parse_name("", false).is_err());
        assert!(parse_name("a b.example", false).is_err());
    }
}
