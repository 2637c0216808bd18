//! IPv4 (no options, no fragments) and IPv6 (no extension headers): parsing the query's header
//! and turning it around for the answer. Whether it is addressed to this host is `host`'s.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{counters::Counter, dns::IPPROTO_UDP};
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::{
    eth::{Family, L2},
    packet::{be16, len, ptr_at},
};

/// IPv4 header length in 32-bit words without options.
const IPV4_IHL_NO_OPTIONS: u8 = 5;
/// More-fragments flag and fragment offset.
const IPV4_FRAGMENT_MASK: u16 = 0x3fff;
/// Don't-fragment: our answers are at most 1232 bytes of DNS, well below any path MTU of 1280.
const IPV4_FLAG_DF: u16 = 0x4000;
/// The ECN field of the IPv4 TOS byte: an answer is a new packet, its ECN marking is not the
/// query's (RFC 3168 §5: a CE mark copied back would signal congestion that never happened).
const IPV4_ECN_MASK: u8 = 0x03;
/// The ECN bits of the IPv6 traffic class, as they sit in the header's second byte.
const IPV6_ECN_MASK: u8 = 0x30;
/// TTL / hop limit of an answer: a fresh packet, not the query's decremented value.
pub const ANSWER_TTL: u8 = 64;
/// IPv6 next-header values of extension headers (RFC 8200 §4, RFC 7045): hop-by-hop, routing,
/// fragment, ESP, AH, destination options, mobility, HIP, shim6, experimental.
const IPV6_EXTENSION_HEADERS: [u8; 11] = [0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254];

/// Where UDP starts and how long the IP payload is.
pub struct L3 {
    pub family: Family,
    pub l3_offset: usize,
    pub l4_offset: usize,
    /// Bytes of IP payload according to the IP header (link-layer padding excluded).
    pub payload_len: usize,
}

#[inline(always)]
pub fn parse(ctx: &XdpContext, l2: &L2) -> Result<L3, Counter> {
    match l2.family {
        Family::V4 => parse_v4(ctx, l2.l3_offset),
        Family::V6 => parse_v6(ctx, l2.l3_offset),
    }
}

#[inline(always)]
fn parse_v4(ctx: &XdpContext, l3_offset: usize) -> Result<L3, Counter> {
    let ip: *mut Ipv4Hdr = ptr_at(ctx, l3_offset)?;
    // SAFETY: bounds checked by ptr_at.
    let ip = unsafe { &*ip };
    if ip.vihl >> 4 != 4 {
        return Err(Counter::PassMalformed);
    }
    if ip.proto != IPPROTO_UDP {
        return Err(Counter::PassNotDns);
    }
    if ip.vihl & 0x0f != IPV4_IHL_NO_OPTIONS || be16(ip.frags) & IPV4_FRAGMENT_MASK != 0 {
        return Err(Counter::PassIpOptions);
    }
    let total = be16(ip.tot_len) as usize;
    if total < Ipv4Hdr::LEN || l3_offset + total > len(ctx) {
        return Err(Counter::PassMalformed);
    }
    Ok(L3 {
        family: Family::V4,
        l3_offset,
        l4_offset: l3_offset + Ipv4Hdr::LEN,
        payload_len: total - Ipv4Hdr::LEN,
    })
}

#[inline(always)]
fn parse_v6(ctx: &XdpContext, l3_offset: usize) -> Result<L3, Counter> {
    let ip: *mut Ipv6Hdr = ptr_at(ctx, l3_offset)?;
    // SAFETY: bounds checked by ptr_at.
    let ip = unsafe { &*ip };
    if ip.vcf[0] >> 4 != 6 {
        return Err(Counter::PassMalformed);
    }
    if ip.next_hdr != IPPROTO_UDP {
        if IPV6_EXTENSION_HEADERS.contains(&ip.next_hdr) {
            return Err(Counter::PassIpOptions);
        }
        return Err(Counter::PassNotDns);
    }
    let payload_len = be16(ip.payload_len) as usize;
    if l3_offset + Ipv6Hdr::LEN + payload_len > len(ctx) {
        return Err(Counter::PassMalformed);
    }
    Ok(L3 {
        family: Family::V6,
        l3_offset,
        l4_offset: l3_offset + Ipv6Hdr::LEN,
        payload_len,
    })
}

/// Turns the IP header around: addresses swapped, fresh TTL, lengths for the answer, a new
/// header checksum (IPv4). Returns the pseudo-header sum for the UDP checksum.
#[inline(always)]
pub fn swap_for_answer(ctx: &XdpContext, l3: &L3, udp_len: usize) -> Result<u64, Counter> {
    match l3.family {
        Family::V4 => {
            let ip: *mut Ipv4Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let ip = unsafe { &mut *ip };
            core::mem::swap(&mut ip.src_addr, &mut ip.dst_addr);
            ip.tot_len = ((Ipv4Hdr::LEN + udp_len) as u16).to_be_bytes();
            ip.id = [0, 0];
            ip.frags = IPV4_FLAG_DF.to_be_bytes();
            ip.ttl = ANSWER_TTL;
            ip.tos &= !IPV4_ECN_MASK;
            ip.check = [0, 0];
            ip.check = crate::csum::ipv4_header(ip);
            Ok(crate::csum::pseudo_header(
                &ip.src_addr,
                &ip.dst_addr,
                udp_len,
            ))
        }
        Family::V6 => {
            let ip: *mut Ipv6Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at.
            let ip = unsafe { &mut *ip };
            core::mem::swap(&mut ip.src_addr, &mut ip.dst_addr);
            ip.payload_len = (udp_len as u16).to_be_bytes();
            ip.hop_limit = ANSWER_TTL;
            ip.vcf[1] &= !IPV6_ECN_MASK;
            Ok(crate::csum::pseudo_header(
                &ip.src_addr,
                &ip.dst_addr,
                udp_len,
            ))
        }
    }
}
