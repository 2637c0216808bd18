//! Kubernetes' own syntax for the label keys, label values and namespace names the
//! configuration names (`apimachinery/pkg/util/validation`): checked at start, so that a typo
//! is an error naming the field, not a watch the API server rejects over and over.

use crate::name_grammar::{Underscore, check_label};

/// A label key: an optional DNS-subdomain prefix and `/`, then a name.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        check_subdomain(prefix).map_err(|e| format!("the prefix {prefix:?} {e}"))?;
    }
    if name.is_empty() {
        return Err("the name part is empty".into());
    }
    check_label_name(name).map_err(|e| format!("the name {name:?} {e}"))
}

/// A label value: empty, or a name of at most 63 characters.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_label_name(value)
}

/// A namespace: a DNS label (RFC 1123): lowercase letters, digits and `-`, at most 63.
pub fn check_namespace(namespace: &str) -> Result<(), String> {
    check_rfc1123_label(namespace)
}

/// At most 63 of `[A-Za-z0-9_.-]`, starting and ending with a letter or digit.
fn check_label_name(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!("is {} characters long (at most 63)", name.len()));
    }
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if !bytes.iter().all(inner) {
        return Err("may hold only letters, digits, '-', '_' and '.'".into());
    }
    if !bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        || !bytes.last().is_some_and(u8::is_ascii_alphanumeric)
    {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

/// Dot-separated RFC 1123 labels, at most 253 characters.
fn check_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!("is {} characters long (at most 253)", name.len()));
    }
    name.split('.').try_for_each(check_rfc1123_label)
}

/// A Kubernetes DNS label: a host label (`name_grammar`), lower-case only.
fn check_rfc1123_label(label: &str) -> Result<(), String> {
    let lower = !label.bytes().any(|b| b.is_ascii_uppercase());
    if lower && check_label(label, Underscore::Host).is_ok() {
        Ok(())
    } else {
        Err(format!(
            "is not a DNS label ({label:?}: 1 to 63 lowercase letters, digits and '-', not at either end)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_follow_kubernetes() {
        for good in ["ingress.cluster/name", "app", "a_b.c-d", "k8s.io/x"] {
            assert_eq!(check_label_key(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "ingress.cluster/",
            "/name",
            "Ingress.cluster/name",
            "a b",
            "-app",
            "x/y/z",
        ] {
            assert!(check_label_key(bad).is_err(), "{bad}");
        }
        assert!(check_label_key(&"a".repeat(64)).is_err());
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        for good in ["", "public", "Edge.Public_1", "a"] {
            assert_eq!(check_label_value(good), Ok(()), "{good}");
        }
        for bad in ["-x", "x-", "a b", "a/b", &"v".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespaces_are_dns_labels() {
        assert_eq!(check_namespace("kube-system"), Ok(()));
        for bad in ["", "Kube", "a.b", "x_y", "-a"] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
    }
}
