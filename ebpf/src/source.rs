//! Whether the query's source can have sent it. XDP runs before the stack's martian checks and
//! reverse-path filter, so a query whose answer would go to a loopback, multicast or broadcast
//! address, to this host itself, or to port 0, is dropped here, as is a frame sent to a group
//! MAC address (its answer would leave from that address).

use hostport_dns_common::counters::Counter;

use crate::{
    eth::{Family, L2},
    host::{Host, is_local_v4, is_local_v6, is_v6_loopback},
    udp::L4,
};

/// First octets of IPv4 sources that never send from another interface than lo: 0.0.0.0/8
/// ("this network") and 127.0.0.0/8.
const IPV4_THIS_NETWORK: u8 = 0;
const IPV4_LOOPBACK_NET: u8 = 127;
/// 224.0.0.0/4 (multicast) and everything above it (240.0.0.0/4, 255.255.255.255): never a
/// source.
const IPV4_FIRST_MULTICAST: u8 = 224;
/// ff00::/8: multicast, never a source.
const IPV6_MULTICAST: u8 = 0xff;

#[inline(always)]
pub fn ensure_plausible(l2: &L2, l4: &L4, host: &Host) -> Result<(), Counter> {
    if l2.to_group || l4.src_port == 0 {
        return Err(Counter::DropMartian);
    }
    let src = host.ends.src;
    let martian = match host.ends.family {
        Family::V4 => {
            let src = src.v4();
            src[0] >= IPV4_FIRST_MULTICAST
                || (!host.on_loopback
                    && (src[0] == IPV4_THIS_NETWORK
                        || src[0] == IPV4_LOOPBACK_NET
                        || is_local_v4(host.local, src)))
        }
        Family::V6 => {
            let src = src.0;
            src[0] == IPV6_MULTICAST
                || (!host.on_loopback
                    && (u128::from_be_bytes(src) == 0
                        || is_v6_loopback(src)
                        || is_local_v6(host.local, src)))
        }
    };
    if martian {
        Err(Counter::DropMartian)
    } else {
        Ok(())
    }
}
