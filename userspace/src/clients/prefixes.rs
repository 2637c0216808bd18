//! The allow-list and the exempt prefixes as one longest-prefix table: every configured prefix
//! carries the grants of every configured prefix that contains it, so the longest match alone
//! says what an address gets (the kernel's LPM trie holds the same entries).

use std::net::IpAddr;

use hostport_dns_common::policy::{PREFIX_ALLOWED, PREFIX_EXEMPT};
use ipnet::IpNet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefixes {
    /// Longest first, so the first that contains an address is its longest match.
    entries: Vec<(IpNet, u32)>,
}

impl Prefixes {
    pub fn compile(allow: &[IpNet], exempt: &[IpNet]) -> Self {
        let mut nets: Vec<IpNet> = allow.iter().chain(exempt).map(IpNet::trunc).collect();
        nets.sort_by(|a, b| b.prefix_len().cmp(&a.prefix_len()).then(a.cmp(b)));
        nets.dedup();
        let entries = nets
            .into_iter()
            .map(|net| {
                let within = |list: &[IpNet]| list.iter().any(|outer| outer.contains(&net));
                let mut grants = 0;
                if within(allow) {
                    grants |= PREFIX_ALLOWED;
                }
                if within(exempt) {
                    grants |= PREFIX_EXEMPT;
                }
                (net, grants)
            })
            .collect();
        Self { entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The grants of the longest prefix holding `addr`; none without one.
    pub fn lookup(&self, addr: IpAddr) -> u32 {
        let addr = canonical(addr);
        self.entries
            .iter()
            .find(|(net, _)| net.contains(&addr))
            .map_or(0, |(_, grants)| *grants)
    }

    /// The entries, for the kernel's tries.
    pub fn entries(&self) -> &[(IpNet, u32)] {
        &self.entries
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4 client) as IPv4.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_longest_match_carries_every_grant_that_covers_it() {
        let table = Prefixes::compile(
            &nets(&["198.18.0.0/15", "2001:db8::/32"]),
            &nets(&["198.18.7.0/24", "203.0.113.0/24"]),
        );
        let at = |a: &str| table.lookup(a.parse().unwrap());
        assert_eq!(at("198.18.1.1"), PREFIX_ALLOWED);
        assert_eq!(at("198.18.7.9"), PREFIX_ALLOWED | PREFIX_EXEMPT);
        assert_eq!(at("203.0.113.5"), PREFIX_EXEMPT, "exempt yet not allowed");
        assert_eq!(at("192.0.2.1"), 0);
        assert_eq!(at("2001:db8::5"), PREFIX_ALLOWED);
        assert_eq!(at("::ffff:198.18.7.1"), PREFIX_ALLOWED | PREFIX_EXEMPT);
    }

    #[test]
    fn an_allowed_prefix_inside_an_exempt_one_is_exempt_too() {
        let table = Prefixes::compile(&nets(&["198.18.7.128/25"]), &nets(&["198.18.0.0/16"]));
        let at = |a: &str| table.lookup(a.parse().unwrap());
        assert_eq!(at("198.18.7.200"), PREFIX_ALLOWED | PREFIX_EXEMPT);
        assert_eq!(at("198.18.7.1"), PREFIX_EXEMPT);
    }
}
