//! Whether a query is addressed to this host: only the node's own addresses, as the active
//! generation of the table lists them, are answered in the kernel, and loopback addresses only
//! from lo.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{
    counters::Counter,
    limits::{MAX_LOCAL_V4, MAX_LOCAL_V6},
    record::LocalAddrs,
};
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::{HPD_LOCAL, eth::Family, ip::L3, packet::ptr_at, table::Table};

/// The interface index of lo in every network namespace (`LOOPBACK_IFINDEX` in the kernel).
const LOOPBACK_IFINDEX: usize = 1;
/// 127.0.0.0/8: the first octet.
const IPV4_LOOPBACK_NET: u8 = 127;

/// An address of either family (IPv4 in the first four bytes), aligned so that the verifier sees
/// whole-word stack accesses.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Address(pub [u8; 16]);

impl Address {
    #[inline(always)]
    pub fn v4(&self) -> [u8; 4] {
        [self.0[0], self.0[1], self.0[2], self.0[3]]
    }
}

/// The two ends of the query, as read once from the IP header.
#[derive(Clone, Copy)]
pub struct Ends {
    pub family: Family,
    pub src: Address,
    pub dst: Address,
}

/// The query's addresses, and the node's own for this generation.
pub struct Host {
    pub ends: Ends,
    pub local: &'static LocalAddrs,
    /// The packet came in on lo.
    pub on_loopback: bool,
}

/// Only the node's own addresses (VIPs included, which the agent keeps current) are answered:
/// a query to a pod behind the node, or to a broadcast or multicast address, goes up the stack.
/// A loopback destination is the node's own only on lo: arriving anywhere else it is spoofed
/// (the stack drops it as a martian).
#[inline(always)]
pub fn ensure_addressed_to_this_host(
    ctx: &XdpContext,
    l3: &L3,
    table: Table,
) -> Result<Host, Counter> {
    let local = HPD_LOCAL
        .get(table.generation)
        .ok_or(Counter::PassNotForThisHost)?;
    let ends = read_ends(ctx, l3)?;
    let on_loopback = ctx.ingress_ifindex() == LOOPBACK_IFINDEX;
    let (ours, loopback) = match ends.family {
        Family::V4 => (
            is_local_v4(local, ends.dst.v4()),
            ends.dst.0[0] == IPV4_LOOPBACK_NET,
        ),
        Family::V6 => (is_local_v6(local, ends.dst.0), is_v6_loopback(ends.dst.0)),
    };
    if !ours || (loopback && !on_loopback) {
        return Err(Counter::PassNotForThisHost);
    }
    Ok(Host {
        ends,
        local,
        on_loopback,
    })
}

#[inline(always)]
fn read_ends(ctx: &XdpContext, l3: &L3) -> Result<Ends, Counter> {
    match l3.family {
        Family::V4 => {
            let ip: *mut Ipv4Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let ip = unsafe { &*ip };
            let mut ends = Ends {
                family: Family::V4,
                src: Address([0; 16]),
                dst: Address([0; 16]),
            };
            ends.src.0[..4].copy_from_slice(&ip.src_addr);
            ends.dst.0[..4].copy_from_slice(&ip.dst_addr);
            Ok(ends)
        }
        Family::V6 => {
            let ip: *mut Ipv6Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let ip = unsafe { &*ip };
            Ok(Ends {
                family: Family::V6,
                src: Address(ip.src_addr),
                dst: Address(ip.dst_addr),
            })
        }
    }
}

/// `::1`.
#[inline(always)]
pub fn is_v6_loopback(addr: [u8; 16]) -> bool {
    u128::from_be_bytes(addr) == 1
}

/// Whether `addr` is one of the node's IPv4 addresses.
#[inline(always)]
pub fn is_local_v4(local: &LocalAddrs, addr: [u8; 4]) -> bool {
    let wanted = u32::from_ne_bytes(addr);
    let count = local.v4_count as usize;
    let mut i = 0;
    while i < MAX_LOCAL_V4 {
        if i >= count {
            break;
        }
        if u32::from_ne_bytes(local.v4[i]) == wanted {
            return true;
        }
        i += 1;
    }
    false
}

/// Whether `addr` is one of the node's IPv6 addresses.
#[inline(always)]
pub fn is_local_v6(local: &LocalAddrs, addr: [u8; 16]) -> bool {
    let wanted = u128::from_ne_bytes(addr);
    let count = local.v6_count as usize;
    let mut i = 0;
    while i < MAX_LOCAL_V6 {
        if i >= count {
            break;
        }
        if u128::from_ne_bytes(local.v6[i]) == wanted {
            return true;
        }
        i += 1;
    }
    false
}
