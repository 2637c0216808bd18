//! The catalog zone (RFC 9432, version 2): one zone listing every zone served, so that
//! secondaries that consume it add and remove member zones without a configuration of their
//! own. Its content is a function of the membership alone:
//!
//! ```text
//! <catalog>                         SOA   (the first forward zone's fields, the catalog's serial)
//! <catalog>                         NS    invalid.                 (§4.1: never queried)
//! version.<catalog>                 TXT   "2"
//! <id>.zones.<catalog>              PTR   <member>.
//! group.<id>.zones.<catalog>        TXT   "forward" | "reverse"
//! ```
//!
//! A member's ID is a hash of its name, so it is the same across restarts and on every agent
//! with the same configuration: secondaries transferring the catalog from different control-plane
//! nodes see one catalog, and a member that stays keeps its ID (§5.4: a changed ID would make a
//! consumer reset the member zone).

use hickory_proto::rr::{
    Name, RData, Record, RecordType,
    rdata::{NS, PTR, TXT},
};

use super::{Zone, serial};
use crate::zone::{NameServer, ZoneSpec};

/// The catalog version this server writes (RFC 9432 §4.2).
pub const VERSION: &str = "2";

/// The `group` property's value of each kind of member (§4.4.2): a consumer can give forward
/// and reverse zones different templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    Forward,
    Reverse,
}

impl Group {
    pub fn label(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::Reverse => "reverse",
        }
    }
}

/// What the configuration says of the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogSpec {
    /// The catalog's apex (lower case, fully qualified); no served zone is it or holds it.
    pub apex: Name,
}

/// One member zone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    /// The member's apex, lower case.
    pub zone: Name,
    pub group: Group,
}

impl Member {
    /// The member's unique ID (§4.4.1): 16 hex digits of a stable hash of its name.
    pub fn id(&self) -> String {
        let text = self.zone.to_lowercase().to_ascii();
        format!("{:016x}", serial::stable_hash(text.as_bytes()))
    }
}

/// The catalog as one table holds it: its members in order, and the zone it is served as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    /// Sorted by member name, no duplicates.
    pub members: Vec<Member>,
    /// The catalog's own zone: apex, SOA fields, the `invalid.` name server, digest and serial.
    pub zone: Zone,
}

impl Catalog {
    /// The catalog of `members` (any order) under `spec`, with the SOA fields of `first`
    /// (the first forward zone's), numbered by its digest until the agent numbers it.
    pub fn new(spec: &CatalogSpec, first: &ZoneSpec, mut members: Vec<Member>) -> Self {
        members.sort();
        members.dedup_by(|a, b| a.zone == b.zone);
        let mut zone_spec = first.clone();
        zone_spec.apex = spec.apex.clone();
        zone_spec.nameservers = vec![NameServer {
            name: Name::from_ascii("invalid.").unwrap_or_else(|_| Name::root()),
            addresses: Vec::new(),
        }];
        zone_spec.pending = false;
        zone_spec.rotate = false;
        let digest = digest(&members, &zone_spec);
        Self {
            members,
            zone: Zone {
                id: u32::MAX,
                spec: zone_spec,
                digest,
                serial: serial::serial_of_digest(digest),
            },
        }
    }

    pub fn apex(&self) -> &Name {
        &self.zone.spec.apex
    }

    /// Every record of the catalog but the SOA, in a fixed order: the NS, the version, then
    /// each member's PTR and group.
    pub fn records(&self) -> Vec<Record> {
        let apex = self.apex();
        let ttl = self.zone.spec.ttl;
        let mut records = Vec::with_capacity(2 + 2 * self.members.len());
        for ns in &self.zone.spec.nameservers {
            records.push(Record::from_rdata(
                apex.clone(),
                ttl,
                RData::NS(NS(ns.name.clone())),
            ));
        }
        if let Ok(version) = Name::from_ascii("version").and_then(|l| l.append_domain(apex)) {
            records.push(txt(version, ttl, VERSION));
        }
        for member in &self.members {
            records.extend(self.member_records(member));
        }
        records
    }

    /// A member's PTR and its `group` property.
    pub fn member_records(&self, member: &Member) -> Vec<Record> {
        let ttl = self.zone.spec.ttl;
        let Ok(owner) = Name::from_ascii(format!("{}.zones", member.id()))
            .and_then(|l| l.append_domain(self.apex()))
        else {
            return Vec::new();
        };
        let mut records = vec![Record::from_rdata(
            owner.clone(),
            ttl,
            RData::PTR(PTR(member.zone.clone())),
        )];
        if let Ok(group) = Name::from_ascii("group").and_then(|l| l.append_domain(&owner)) {
            records.push(txt(group, ttl, member.group.label()));
        }
        records
    }

    /// The records at `name` of type `qtype` (`ANY`: every type), and whether the name exists
    /// at all (an empty non-terminal such as `zones.<catalog>` does): for queries, which RFC
    /// 9432 does not need but a consumer's refresh (SOA) and an operator's `dig` do.
    pub fn lookup(&self, name: &Name, qtype: RecordType) -> (Vec<Record>, bool) {
        let name = name.to_lowercase();
        let mut exists = name == *self.apex();
        let mut found = Vec::new();
        for record in self.records() {
            let owner = record.name.to_lowercase();
            if owner == name {
                exists = true;
                if qtype == RecordType::ANY || record.record_type() == qtype {
                    found.push(record);
                }
            } else if name.zone_of(&owner) {
                exists = true;
            }
        }
        (found, exists)
    }
}

fn txt(owner: Name, ttl: u32, text: &str) -> Record {
    Record::from_rdata(owner, ttl, RData::TXT(TXT::new(vec![text.to_owned()])))
}

/// The catalog's digest: its members and the SOA fields it carries, so that its serial moves
/// exactly when a member comes or goes (or the SOA fields change).
fn digest(members: &[Member], spec: &ZoneSpec) -> u64 {
    let mut text = String::from(VERSION);
    for member in members {
        text.push(' ');
        text.push_str(&member.zone.to_ascii());
        text.push('=');
        text.push_str(member.group.label());
    }
    serial::zone_digest(serial::stable_hash(text.as_bytes()), spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("a name")
    }

    fn member(zone: &str, group: Group) -> Member {
        Member {
            zone: name(zone),
            group,
        }
    }

    fn catalog(members: Vec<Member>) -> Catalog {
        let first = ZoneSpec::with_defaults(name("prod.example."));
        Catalog::new(
            &CatalogSpec {
                apex: name("catalog.hostport.invalid."),
            },
            &first,
            members,
        )
    }

    #[test]
    fn member_ids_follow_the_name_alone() {
        let a = member("prod.example.", Group::Forward);
        assert_eq!(a.id(), member("PROD.example.", Group::Forward).id());
        assert_eq!(a.id().len(), 16);
        assert_ne!(
            a.id(),
            member("0.18.198.in-addr.arpa.", Group::Reverse).id()
        );
    }

    #[test]
    fn the_serial_moves_with_the_membership_and_not_with_the_order() {
        let one = catalog(vec![
            member("prod.example.", Group::Forward),
            member("0.18.198.in-addr.arpa.", Group::Reverse),
        ]);
        let same = catalog(vec![
            member("0.18.198.in-addr.arpa.", Group::Reverse),
            member("prod.example.", Group::Forward),
        ]);
        let more = catalog(vec![
            member("prod.example.", Group::Forward),
            member("0.18.198.in-addr.arpa.", Group::Reverse),
            member("1.18.198.in-addr.arpa.", Group::Reverse),
        ]);
        assert_eq!(one, same);
        assert_ne!(one.zone.serial, more.zone.serial);
    }

    #[test]
    fn the_records_are_those_of_a_version_2_catalog() {
        let catalog = catalog(vec![member("prod.example.", Group::Forward)]);
        let id = member("prod.example.", Group::Forward).id();
        let text: Vec<String> = catalog.records().iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "catalog.hostport.invalid. 5 IN NS invalid.".to_owned(),
                "version.catalog.hostport.invalid. 5 IN TXT 2".to_owned(),
                format!("{id}.zones.catalog.hostport.invalid. 5 IN PTR prod.example."),
                format!("group.{id}.zones.catalog.hostport.invalid. 5 IN TXT forward"),
            ]
        );
    }

    #[test]
    fn lookups_find_records_and_empty_non_terminals() {
        let catalog = catalog(vec![member("prod.example.", Group::Forward)]);
        let (version, exists) =
            catalog.lookup(&name("VERSION.catalog.hostport.invalid."), RecordType::TXT);
        assert!(exists && version.len() == 1);
        let (none, exists) =
            catalog.lookup(&name("zones.catalog.hostport.invalid."), RecordType::A);
        assert!(none.is_empty() && exists, "an empty non-terminal");
        let (none, exists) = catalog.lookup(&name("x.catalog.hostport.invalid."), RecordType::A);
        assert!(none.is_empty() && !exists);
    }
}
