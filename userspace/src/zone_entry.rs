//! The grammar a zone is written in: the record file's `zones[]`, and the configuration's. Each
//! entry compiles to the zone it describes (`ZoneSpec`, of the DNS core) and its static records.

use std::{collections::BTreeMap, fmt, net::IpAddr};

use hostport_dns_core::{
    dns::WireName,
    records::{RecordData, SourceRecord, Srv},
    zone::{DEFAULT_EXPIRE, DEFAULT_REFRESH, DEFAULT_RETRY, NameServer, ZoneSpec},
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, de};

use crate::{
    config_schema::IpAddress,
    name_grammar::{DnsName, RelativeName},
};

/// One zone as written in a record file or in the agent's configuration file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZoneEntry {
    /// The zone's apex.
    name: DnsName,
    /// TTL of every record in the zone (and the SOA minimum); default 5.
    #[serde(default)]
    ttl: Option<Ttl>,
    /// Static A/AAAA records: name (relative, "@" or absolute in the zone) to addresses.
    #[serde(default)]
    records: BTreeMap<RelativeName, Addresses>,
    /// Static SRV records: name to targets.
    #[serde(default)]
    srv: BTreeMap<RelativeName, Vec<SrvEntry>>,
    /// The apex NS records (default `ns.<zone>`); the first is the SOA's MNAME.
    #[serde(default)]
    nameservers: Option<Vec<NameServerEntry>>,
    #[serde(default)]
    soa: Option<SoaEntry>,
    /// Rotate the A and AAAA records of each answer by the query ID (as CoreDNS's
    /// `loadbalance`), so that clients that take the first address spread over all of them;
    /// default false (the addresses in order).
    #[serde(default, rename = "rotateAnswers")]
    rotate_answers: bool,
}

#[derive(Deserialize, JsonSchema)]
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NameServerEntry {
    /// Relative to the zone or absolute (with a final dot).
    name: RelativeName,
    /// Glue for a name server inside the zone.
    #[serde(default)]
    #[schemars(with = "Vec<IpAddress>")]
    addresses: Vec<IpAddr>,
}

/// SOA fields; each left out keeps its default (refresh 3600, retry 600, expire 86400, minimum:
/// the zone's TTL).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SoaEntry {
    mname: Option<RelativeName>,
    rname: Option<RelativeName>,
    /// Seconds between a secondary's checks of the serial; default 3600.
    refresh: Option<i32>,
    /// Seconds before a secondary retries a failed check; default 600.
    retry: Option<i32>,
    /// Seconds a secondary keeps serving without reaching the primary; default 86400.
    expire: Option<i32>,
    minimum: Option<Ttl>,
}

/// One address or a list of them; each bad address is reported where it stands.
struct Addresses(Vec<IpAddr>);

/// What [`Addresses`] accepts: an IP address or a list of them.
impl JsonSchema for Addresses {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Addresses".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let one = generator.subschema_for::<IpAddress>();
        json_schema!({
            "description": "An IP address or a list of IP addresses.",
            "anyOf": [one, { "type": "array", "items": one }],
        })
    }
}

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
        spec.rotate = self.rotate_answers;
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
            let name = WireName::from_name(&name.resolve(&apex)?);
            for address in addresses.0 {
                records.push(SourceRecord {
                    name: name.clone(),
                    ttl: None,
                    data: address.into(),
                });
            }
        }
        for (name, targets) in self.srv {
            let name = WireName::from_name(&name.resolve(&apex)?);
            for t in targets {
                let srv = Srv {
                    priority: t.priority,
                    weight: t.weight,
                    port: t.port,
                    target: WireName::from_name(&t.target.resolve_anywhere(&apex)?),
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

/// A TTL: at most 2^31 - 1 seconds (RFC 2181 §8).
#[derive(Clone, Copy, Debug)]
pub struct Ttl(pub u32);

/// What [`Ttl`] accepts: 0 to 2^31 - 1.
impl JsonSchema for Ttl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Ttl".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A TTL in seconds: at most 2147483647 (RFC 2181).",
            "type": "integer",
            "minimum": 0,
            "maximum": i32::MAX,
        })
    }
}

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ttl = u32::deserialize(d)?;
        if ttl > i32::MAX as u32 {
            return Err(de::Error::custom("a TTL is at most 2147483647 seconds"));
        }
        Ok(Self(ttl))
    }
}
