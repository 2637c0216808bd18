//! The benchmark ceiling: sends every DNS query straight back with only the QR bit set, doing no
//! DNS work at all. `cargo xtask bench xdp` runs it beside the real program to show what the
//! path itself costs.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use hostport_dns_common::{counters::Counter, dns::FLAG_QR};
use network_types::{
    ip::{Ipv4Hdr, Ipv6Hdr},
    udp::UdpHdr,
};

use crate::{
    eth::{self, Family},
    ip,
    packet::ptr_at,
    udp,
};

#[inline(always)]
pub fn try_reflect(ctx: &XdpContext) -> Result<u32, Counter> {
    let l2 = eth::parse(ctx)?;
    let l3 = ip::parse(ctx, &l2)?;
    let l4 = udp::parse(ctx, &l3)?;
    let flags: *mut [u8; 2] = ptr_at(ctx, l4.dns_offset + 2)?;
    let udp_header: *mut UdpHdr = ptr_at(ctx, l4.udp_offset)?;
    // SAFETY: bounds checked by ptr_at.
    unsafe {
        let old = u16::from_be_bytes(*flags);
        let new = old | FLAG_QR;
        *flags = new.to_be_bytes();
        core::mem::swap(&mut (*udp_header).src, &mut (*udp_header).dst);
        let check = u16::from_be_bytes((*udp_header).check);
        if check != 0 {
            // RFC 1624: HC' = ~(~HC + ~m + m').
            let sum = (!check as u32) + (!old as u32) + new as u32;
            let folded = (sum & 0xffff) + (sum >> 16);
            (*udp_header).check = (!((folded & 0xffff) + (folded >> 16)) as u16).to_be_bytes();
        }
    }
    eth::swap_macs(ctx)?;
    match l3.family {
        Family::V4 => {
            let ip: *mut Ipv4Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            unsafe { core::mem::swap(&mut (*ip).src_addr, &mut (*ip).dst_addr) };
        }
        Family::V6 => {
            let ip: *mut Ipv6Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            unsafe { core::mem::swap(&mut (*ip).src_addr, &mut (*ip).dst_addr) };
        }
    }
    Ok(xdp_action::XDP_TX)
}
