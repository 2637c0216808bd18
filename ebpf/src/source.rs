//! Whether the query's source can have sent it. XDP runs before the stack's martian checks and
//! reverse-path filter, so a query whose answer would go to a loopback, multicast or broadcast
//! address, to this host itself (any of its addresses, on any interface), or to port 0, is
//! dropped here, as is a frame from or to a group MAC address (its answer would leave from that
//! address, or to every host of the segment).

use hostport_dns_common::{
    counters::Counter,
    host::{HOST_BROADCAST, HOST_OWN},
};

use crate::{
    eth::{Family, L2},
    host::{Host, IPV4_LOOPBACK_NET, kind_of},
    table::Section,
    udp::L4,
};

/// First octet of IPv4 "this network" sources (0.0.0.0/8), which never send from another
/// interface than lo.
const IPV4_THIS_NETWORK: u8 = 0;
/// 224.0.0.0/4 (multicast) and everything above it (240.0.0.0/4, 255.255.255.255): never a
/// source.
const IPV4_FIRST_MULTICAST: u8 = 224;
/// ff00::/8: multicast, never a source.
const IPV6_MULTICAST: u8 = 0xff;

#[inline(always)]
pub fn ensure_plausible(l2: &L2, l4: &L4, host: &Host, table: &Section) -> Result<(), Counter> {
    if l2.from_group || l2.to_group || l4.src_port == 0 {
        return Err(Counter::DropMartian);
    }
    let (src, family) = (host.ends.src, host.ends.family);
    let first = src.first_octet(family);
    let group = match family {
        Family::V4 => first >= IPV4_FIRST_MULTICAST,
        Family::V6 => first == IPV6_MULTICAST,
    };
    if group {
        return Err(Counter::DropMartian);
    }
    // On lo every source is this host's: nothing more to ask.
    if host.on_loopback {
        return Ok(());
    }
    let unroutable = match family {
        Family::V4 => first == IPV4_THIS_NETWORK || first == IPV4_LOOPBACK_NET,
        Family::V6 => src.is_v6_unspecified() || src.is_v6_loopback(),
    };
    if unroutable || kind_of(table, src.words) & (HOST_OWN | HOST_BROADCAST) != 0 {
        return Err(Counter::DropMartian);
    }
    Ok(())
}
