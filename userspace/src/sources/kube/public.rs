//! Which node addresses count as public for `addressSource: node-public` (as kuberture chooses:
//! the node's first address that is not private). Not public: every range the IANA special-
//! purpose registries mark as not globally reachable that a node may carry.
//!
//! | IPv4 | IPv6 | what |
//! |---|---|---|
//! | 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 | fc00::/7 | private (RFC 1918), unique local (RFC 4193) |
//! | 100.64.0.0/10 | | shared address space, carrier-grade NAT (RFC 6598) |
//! | 127.0.0.0/8 | ::1/128 | loopback |
//! | 169.254.0.0/16 | fe80::/10 | link-local |
//! | 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 | 2001:db8::/32, 3fff::/20 | documentation (RFC 5737, 3849, 9637) |
//! | 198.18.0.0/15 | | benchmarking (RFC 2544) |
//! | 0.0.0.0/8, 192.0.0.0/24, 224.0.0.0/4, 240.0.0.0/4 | ::/128, ::ffff:0:0/96, 64:ff9b:1::/48, 100::/64, ff00::/8 | this network, protocol assignments, multicast, reserved; unspecified, IPv4-mapped, local NAT64, discard, multicast |

use std::net::IpAddr;

use ipnet::IpNet;

/// The ranges of the table above.
const NOT_PUBLIC: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "198.18.0.0/15",
    "0.0.0.0/8",
    "192.0.0.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "fc00::/7",
    "::1/128",
    "fe80::/10",
    "2001:db8::/32",
    "3fff::/20",
    "::/128",
    "::ffff:0:0/96",
    "64:ff9b:1::/48",
    "100::/64",
    "ff00::/8",
];

/// Whether `address` is outside every range of [`NOT_PUBLIC`].
pub fn is_public(address: IpAddr) -> bool {
    !NOT_PUBLIC.iter().any(|range| {
        range
            .parse::<IpNet>()
            .is_ok_and(|net| net.contains(&address))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_parses() {
        for range in NOT_PUBLIC {
            assert!(range.parse::<IpNet>().is_ok(), "{range}");
        }
    }

    #[test]
    fn private_shared_loopback_link_local_and_documentation_addresses_are_not_public() {
        let public = |text: &str| is_public(text.parse().expect("an address"));
        for private in [
            "10.1.2.3",
            "172.31.255.1",
            "192.168.1.1",
            "100.100.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "192.0.2.7",
            "198.51.100.7",
            "203.0.113.7",
            "198.19.0.1",
            "fd00::1",
            "fe80::1",
            "::1",
            "2001:db8::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!public(private), "{private}");
        }
        for address in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2a00:1450::1",
            "2600::1",
        ] {
            assert!(public(address), "{address}");
        }
    }
}
