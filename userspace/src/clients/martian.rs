//! Sources that can never have sent a query, on the userspace path: group sources (multicast,
//! broadcast, 240.0.0.0/4) and port 0, whose answers would go nowhere or to many.
//!
//! The rest of the kernel's martian rules (loopback, this-network and this host's own addresses
//! arriving from another interface than lo) are the stack's before anything reaches a socket:
//! IPv4 drops them as martians, IPv6 drops `::1` from other interfaces. What a socket cannot tell
//! is the interface a packet claiming one of this host's own IPv6 addresses came in on (a local
//! client's query to the node's address reports the address's interface, not lo), so that rule is
//! enforced by the XDP program only, on the interfaces it is attached to.

use std::net::SocketAddr;

/// Whether a query from `peer` must go unanswered.
pub fn is_martian(peer: SocketAddr) -> bool {
    if peer.port() == 0 {
        return true;
    }
    match crate::clients::prefixes::canonical(peer.ip()) {
        std::net::IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.octets()[0] >= 240,
        std::net::IpAddr::V6(a) => a.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sources_and_port_zero_are_never_answered() {
        for peer in [
            "224.0.0.1:53",
            "255.255.255.255:53",
            "240.0.0.1:53",
            "[ff02::1]:53",
            "[::ffff:224.0.0.1]:53",
            "198.18.0.2:0",
        ] {
            assert!(is_martian(peer.parse().unwrap()), "{peer}");
        }
        for peer in ["198.18.0.2:5353", "127.0.0.1:5353", "[2001:db8::1]:5353"] {
            assert!(!is_martian(peer.parse().unwrap()), "{peer}");
        }
    }
}
