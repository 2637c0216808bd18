//! Whether a query is addressed to this host: only the node's own addresses, as the active
//! generation of the table lists them, are answered in the kernel.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{
    counters::Counter,
    limits::{MAX_LOCAL_V4, MAX_LOCAL_V6},
};
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::{HPD_LOCAL, eth::Family, ip::L3, packet::ptr_at, table::Table};

/// Only the node's own addresses (VIPs included, which the agent keeps current) are answered:
/// a query to a pod behind the node, or to a broadcast or multicast address, goes up the stack.
#[inline(always)]
pub fn ensure_addressed_to_this_host(
    ctx: &XdpContext,
    l3: &L3,
    table: Table,
) -> Result<(), Counter> {
    let local = HPD_LOCAL
        .get(table.generation)
        .ok_or(Counter::PassNotForThisHost)?;
    let found = match l3.family {
        Family::V4 => {
            let ip: *mut Ipv4Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let dst = u32::from_ne_bytes(unsafe { (*ip).dst_addr });
            let count = local.v4_count as usize;
            let mut found = false;
            let mut i = 0;
            while i < MAX_LOCAL_V4 {
                if i >= count {
                    break;
                }
                if u32::from_ne_bytes(local.v4[i]) == dst {
                    found = true;
                    break;
                }
                i += 1;
            }
            found
        }
        Family::V6 => {
            let ip: *mut Ipv6Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let dst = u128::from_ne_bytes(unsafe { (*ip).dst_addr });
            let count = local.v6_count as usize;
            let mut found = false;
            let mut i = 0;
            while i < MAX_LOCAL_V6 {
                if i >= count {
                    break;
                }
                if u128::from_ne_bytes(local.v6[i]) == dst {
                    found = true;
                    break;
                }
                i += 1;
            }
            found
        }
    };
    if found {
        Ok(())
    } else {
        Err(Counter::PassNotForThisHost)
    }
}
