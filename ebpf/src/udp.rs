//! UDP to the DNS port, its length consistent with the IP header.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::counters::Counter;
use network_types::udp::UdpHdr;

use crate::{
    HPD_DNS_PORT,
    eth::Family,
    ip::L3,
    packet::{be16, ptr_at},
};

/// Where the DNS message starts and how long it is, and the client's port.
pub struct L4 {
    pub src_port: u16,
    pub udp_offset: usize,
    pub dns_offset: usize,
    pub dns_len: usize,
}

#[inline(always)]
fn dns_port() -> u16 {
    // SAFETY: a plain read of a load-time constant; volatile so the compiler does not fold the
    // default in (the agent rewrites it before loading).
    unsafe { core::ptr::read_volatile(&HPD_DNS_PORT) }
}

#[inline(always)]
pub fn parse(ctx: &XdpContext, l3: &L3) -> Result<L4, Counter> {
    let udp: *mut UdpHdr = ptr_at(ctx, l3.l4_offset)?;
    // SAFETY: bounds checked by ptr_at.
    let udp = unsafe { &*udp };
    if be16(udp.dst) != dns_port() {
        return Err(Counter::PassNotDns);
    }
    let udp_len = be16(udp.len) as usize;
    // The UDP length must match the IP payload exactly.
    if udp_len != l3.payload_len || udp_len < UdpHdr::LEN {
        return Err(Counter::PassMalformed);
    }
    // RFC 8200 §8.1: an IPv6 UDP datagram with a zero checksum is discarded (the stack does).
    if l3.family == Family::V6 && udp.check == [0, 0] {
        return Err(Counter::PassMalformed);
    }
    Ok(L4 {
        src_port: be16(udp.src),
        udp_offset: l3.l4_offset,
        dns_offset: l3.l4_offset + UdpHdr::LEN,
        dns_len: udp_len - UdpHdr::LEN,
    })
}

/// Turns the UDP header around for an answer of `dns_len` bytes; the checksum is written last.
#[inline(always)]
pub fn swap_for_answer(ctx: &XdpContext, l4: &L4, dns_len: usize) -> Result<(), Counter> {
    let udp: *mut UdpHdr = ptr_at(ctx, l4.udp_offset)?;
    // SAFETY: bounds checked by ptr_at.
    let udp = unsafe { &mut *udp };
    core::mem::swap(&mut udp.src, &mut udp.dst);
    udp.len = ((UdpHdr::LEN + dns_len) as u16).to_be_bytes();
    udp.check = [0, 0];
    Ok(())
}
