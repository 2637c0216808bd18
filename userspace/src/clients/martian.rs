//! Sources that can never have sent a query: the userspace half of the XDP program's
//! `source` step (the stack drops most of these itself; what it lets through, such as an IPv6
//! packet claiming one of this host's own addresses, must not be answered either: the answer
//! would go to a local service).

use std::net::{IpAddr, SocketAddr};

/// The interface index of lo in every network namespace.
pub const LOOPBACK_IFINDEX: u32 = 1;

/// Whether a query from `peer`, received on interface `ifindex`, must go unanswered.
/// `is_local` says whether an address is one of this host's own.
pub fn is_martian(
    peer: SocketAddr,
    ifindex: Option<u32>,
    is_local: impl Fn(IpAddr) -> bool,
) -> bool {
    if peer.port() == 0 {
        return true;
    }
    let source = crate::clients::prefixes::canonical(peer.ip());
    let never_a_source = match source {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.octets()[0] >= 240,
        IpAddr::V6(a) => a.is_multicast(),
    };
    if never_a_source {
        return true;
    }
    // On lo, loopback and own addresses are where local clients ask from.
    let on_loopback = ifindex.is_none_or(|i| i == LOOPBACK_IFINDEX);
    if on_loopback {
        return false;
    }
    let loopback_only = match source {
        IpAddr::V4(a) => a.is_loopback() || a.octets()[0] == 0,
        IpAddr::V6(a) => a.is_loopback() || a.is_unspecified(),
    };
    loopback_only || is_local(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn martian(peer: &str, ifindex: u32) -> bool {
        let own: IpAddr = "2001:db8::1".parse().unwrap();
        is_martian(peer.parse().unwrap(), Some(ifindex), |a| a == own)
    }

    #[test]
    fn loopback_and_own_sources_are_answered_only_on_lo() {
        assert!(!martian("127.0.0.1:5353", 1));
        assert!(martian("127.0.0.1:5353", 2));
        assert!(!martian("[2001:db8::1]:5353", 1));
        assert!(martian("[2001:db8::1]:5353", 2));
        assert!(martian("[::1]:5353", 2));
        assert!(martian("0.1.2.3:5353", 2));
        assert!(!martian("198.18.0.2:5353", 2));
    }

    #[test]
    fn group_sources_and_port_zero_are_never_answered() {
        for peer in [
            "224.0.0.1:53",
            "255.255.255.255:53",
            "[ff02::1]:53",
            "198.18.0.2:0",
        ] {
            assert!(martian(peer, 1), "{peer}");
            assert!(martian(peer, 2), "{peer}");
        }
    }
}
