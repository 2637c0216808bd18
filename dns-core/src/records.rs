//! Records as the sources produce them, before they are compiled into a table.

mod group;

pub use group::{DataView, RecordGroup, RecordView, Records, Views};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

use crate::dns::WireName;

/// One record from a source (40 bytes; the name is shared, not copied: a thin reference).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRecord {
    pub name: WireName,
    /// The record's own TTL; the zone's when None.
    pub ttl: Option<u32>,
    pub data: RecordData,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Srv(Srv),
}

impl From<IpAddr> for RecordData {
    /// An address record of the address's family.
    fn from(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(a) => RecordData::A(a),
            IpAddr::V6(a) => RecordData::Aaaa(a),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Srv {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    pub target: WireName,
}

impl SourceRecord {
    /// A record at `name`.
    pub fn new(name: &Name, ttl: Option<u32>, data: RecordData) -> Self {
        Self {
            name: WireName::from_name(name),
            ttl,
            data,
        }
    }
}
