//! Schemas of the strings the configuration file holds, as `agent_config::parse` checks them
//! (the Kubernetes syntax of `sources::kube::syntax`, addresses and prefixes): the types the
//! configuration's JSON Schema (`hostport-dns config-schema`) names for plain strings. A leaf:
//! the configuration types of every module refer to it.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::name_grammar::NAME_PATTERN;

/// A Kubernetes DNS label (RFC 1123), unanchored.
macro_rules! rfc1123 {
    () => {
        "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
    };
}

/// A label name or value (63 of `[A-Za-z0-9_.-]`, alphanumeric at both ends), unanchored.
macro_rules! label_name {
    () => {
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
    };
}

macro_rules! string_schema {
    ($(#[$doc:meta])* $ty:ident, $description:expr, { $($extra:tt)* }) => {
        $(#[$doc])*
        pub struct $ty;

        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "description": $description,
                    "type": "string",
                    $($extra)*
                })
            }
        }
    };
}

string_schema!(
    /// `check_namespace`.
    Namespace,
    "A namespace: a DNS label (RFC 1123), 1 to 63 lowercase letters, digits and '-', not at either end.",
    { "pattern": concat!("^", rfc1123!(), "$") }
);
string_schema!(
    /// `<namespace>/<name>`, both `check_namespace`.
    ServiceRef,
    "A Service as <namespace>/<name>, both DNS labels (RFC 1123): no dots, no uppercase.",
    { "pattern": concat!("^", rfc1123!(), "/", rfc1123!(), "$") }
);
string_schema!(
    /// `check_label_key`.
    LabelKey,
    "A label key: an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' and '.', alphanumeric at both ends.",
    {
        "maxLength": 317,
        "pattern": concat!("^(", rfc1123!(), "(\\.", rfc1123!(), ")*/)?", label_name!(), "$"),
    }
);
string_schema!(
    /// `check_label_value`.
    LabelValue,
    "A label value: empty, or at most 63 letters, digits, '-', '_' and '.', alphanumeric at both ends.",
    { "pattern": concat!("^(", label_name!(), ")?$") }
);
string_schema!(
    /// `parse_name`, absolute.
    DomainName,
    "A name: labels of letters, digits, '-' and '_' (1 to 63 each), with or without the final dot.",
    { "maxLength": 254, "pattern": NAME_PATTERN }
);
string_schema!(
    /// An `IpAddr`.
    IpAddress,
    "An IPv4 or IPv6 address.",
    {
        "pattern": "^[0-9A-Fa-f:.]+$",
        "anyOf": [{ "format": "ipv4" }, { "format": "ipv6" }],
    }
);
string_schema!(
    /// An `IpNet` or an `IpAddr` (a /32 or /128).
    Prefix,
    "An address or a prefix in CIDR notation.",
    { "pattern": "^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$" }
);
string_schema!(
    /// `Network::parse_zone`.
    ReverseNetwork,
    "A network <address>/<prefix>, the prefix a multiple of 8 (IPv4) or 4 (IPv6), no host bits set.",
    { "pattern": "^[0-9A-Fa-f:.]+/[0-9]{1,3}$" }
);
string_schema!(
    /// A `SocketAddr` or an `IpAddr`.
    SocketAddress,
    "An address, or an address and port (IPv6 in brackets then).",
    { "pattern": "^([0-9A-Fa-f:.]+|\\[[0-9A-Fa-f:.]+\\]:[0-9]{1,5})$" }
);
string_schema!(
    /// A TSIG key's name (`Name::from_ascii`).
    KeyName,
    "A TSIG key's name, as the secondary names it.",
    { "minLength": 1, "maxLength": 254 }
);

string_schema!(
    /// `SrvTargetCompression::from_str`.
    SrvTargetCompression,
    "When SRV targets are compressed: to-fit (in full whenever the SRV records fit so; compressed where the alternative is a truncated answer to a client offering more than 1232 bytes over UDP) or never (RFC 2782 always: truncated when they do not fit).",
    { "enum": ["never", "to-fit"] }
);
