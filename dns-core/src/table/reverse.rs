//! Reverse zones: which `in-addr.arpa` and `ip6.arpa` zones the server is authoritative for,
//! and where a reverse name falls. Configured as networks on octet (IPv4) or nibble (IPv6)
//! boundaries, or by default derived: the /24 or /64 around each served address, so that every
//! address with a PTR record has a zone with a SOA, and a neighbour without one is NXDOMAIN,
//! not REFUSED.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

/// The prefix of a derived IPv4 reverse zone.
pub const DERIVED_V4_PREFIX: u8 = 24;
/// The prefix of a derived IPv6 reverse zone.
pub const DERIVED_V6_PREFIX: u8 = 64;

/// A network: an address with its host bits clear, and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Network {
    pub address: IpAddr,
    pub prefix: u8,
}

impl Network {
    /// `address/prefix` with the host bits cleared; None for a prefix longer than the family's.
    pub fn new(address: IpAddr, prefix: u8) -> Option<Self> {
        let address = match address {
            IpAddr::V4(a) if prefix <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) if prefix <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
            _ => return None,
        };
        Some(Self { address, prefix })
    }

    /// Parses `198.18.0.0/16` or `2001:db8::/48`: the prefix must fall on a label boundary of
    /// the reverse tree (a multiple of 8 for IPv4, of 4 for IPv6) and not below the network.
    pub fn parse_zone(text: &str) -> Result<Self, String> {
        let (address, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: a network is <address>/<prefix>"))?;
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("{text:?}: not an IP address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{text:?}: not a prefix length"))?;
        let step = if address.is_ipv4() { 8 } else { 4 };
        let network = Self::new(address, prefix)
            .filter(|n| n.prefix % step == 0 && n.prefix > 0)
            .ok_or_else(|| {
                format!("{text:?}: a reverse zone's prefix is a multiple of {step}, at most the address length")
            })?;
        if network.address != address {
            return Err(format!("{text:?}: host bits are set"));
        }
        Ok(network)
    }

    pub fn contains(&self, other: &Network) -> bool {
        other.prefix >= self.prefix
            && Network::new(other.address, self.prefix).is_some_and(|n| n.address == self.address)
    }

    /// The full network of an address (/32 or /128).
    pub fn host(address: IpAddr) -> Self {
        let prefix = if address.is_ipv4() { 32 } else { 128 };
        Self { address, prefix }
    }

    pub fn is_host(&self) -> bool {
        self.prefix == if self.address.is_ipv4() { 32 } else { 128 }
    }

    /// The first and last address of the network.
    pub fn range(&self) -> (IpAddr, IpAddr) {
        match self.address {
            IpAddr::V4(a) => {
                let host = u32::MAX.checked_shr(u32::from(self.prefix)).unwrap_or(0);
                (
                    self.address,
                    IpAddr::V4(Ipv4Addr::from(u32::from(a) | host)),
                )
            }
            IpAddr::V6(a) => {
                let host = u128::MAX.checked_shr(u32::from(self.prefix)).unwrap_or(0);
                (
                    self.address,
                    IpAddr::V6(Ipv6Addr::from(u128::from(a) | host)),
                )
            }
        }
    }

    /// The reverse name of the network (`0.18.198.in-addr.arpa.`).
    pub fn reverse_name(&self) -> Name {
        let labels: Vec<String> = match self.address {
            IpAddr::V4(a) => a.octets()[..usize::from(self.prefix / 8)]
                .iter()
                .rev()
                .map(u8::to_string)
                .chain(["in-addr".into(), "arpa".into()])
                .collect(),
            IpAddr::V6(a) => {
                let nibbles: Vec<u8> = a.octets().iter().flat_map(|b| [b >> 4, b & 0x0f]).collect();
                nibbles[..usize::from(self.prefix / 4)]
                    .iter()
                    .rev()
                    .map(|n| format!("{n:x}"))
                    .chain(["ip6".into(), "arpa".into()])
                    .collect()
            }
        };
        let mut name = Name::from_labels(labels.iter().map(String::as_bytes)).unwrap_or_default();
        name.set_fqdn(true);
        name
    }
}

/// Which reverse zones are served, and which names never get a PTR record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReverseConfig {
    /// The configured zones; None: derived from the served addresses.
    pub zones: Option<Vec<Network>>,
    /// Names (and the names below them) that get no PTR record, such as `nodes.<zone>` or the
    /// API servers' name.
    pub leave_out: Vec<Name>,
}

impl ReverseConfig {
    /// Whether `name` may be a PTR record's target.
    pub fn serves(&self, name: &Name) -> bool {
        !self.leave_out.iter().any(|out| out.zone_of(name))
    }
}

/// Where a reverse name falls: the longest suffix of it that reads as a network, and whether
/// labels that are no part of an address come before it.
pub fn network_of(name: &Name) -> Option<(Network, bool)> {
    let labels = name.num_labels();
    for keep in (2..=labels).rev() {
        let mut suffix = name.trim_to(usize::from(keep));
        suffix.set_fqdn(true);
        let Ok(net) = suffix.parse_arpa_name() else {
            continue;
        };
        let network = Network::new(net.addr(), net.prefix_len())?;
        return Some((network, keep < labels));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    #[test]
    fn zones_parse_on_label_boundaries_only() {
        assert_eq!(
            Network::parse_zone("198.18.0.0/16").unwrap().reverse_name(),
            name("18.198.in-addr.arpa.")
        );
        assert_eq!(
            Network::parse_zone("2001:db8::/32").unwrap().reverse_name(),
            name("8.b.d.0.1.0.0.2.ip6.arpa.")
        );
        for bad in [
            "198.18.0.0/20",
            "198.18.0.1/24",
            "198.18.0.0",
            "2001:db8::/33",
            "198.18.0.0/0",
            "x/8",
        ] {
            assert!(Network::parse_zone(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reverse_names_read_back_as_networks() {
        let (net, extra) = network_of(&name("1.200.18.198.in-addr.arpa.")).unwrap();
        assert_eq!(net, Network::host("198.18.200.1".parse().unwrap()));
        assert!(!extra && net.is_host());
        let (net, extra) = network_of(&name("x.1.200.18.198.in-addr.arpa.")).unwrap();
        assert!(extra && net.is_host());
        let (net, _) = network_of(&name("200.18.198.in-addr.arpa.")).unwrap();
        assert_eq!(
            net,
            Network::new("198.18.200.0".parse().unwrap(), 24).unwrap()
        );
        assert_eq!(net.reverse_name(), name("200.18.198.in-addr.arpa."));
        assert_eq!(network_of(&name("www.example.")), None);
        let zone = Network::parse_zone("198.18.0.0/16").unwrap();
        assert!(zone.contains(&net));
        assert!(!net.contains(&zone));
        assert_eq!(
            net.range(),
            (
                "198.18.200.0".parse().unwrap(),
                "198.18.200.255".parse().unwrap()
            )
        );
    }

    #[test]
    fn left_out_names_and_their_subtrees_get_no_ptr() {
        let config = ReverseConfig {
            zones: None,
            leave_out: vec![name("nodes.prod.example.")],
        };
        assert!(!config.serves(&name("cp-1.nodes.prod.example.")));
        assert!(config.serves(&name("web.edge.prod.example.")));
    }
}
