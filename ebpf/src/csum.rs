//! Checksums of the rewritten headers. The UDP checksum is assembled from the sums of the pieces
//! the program wrote (see `hostport_dns_common::csum`): it never reads the answer back.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{
    counters::Counter,
    csum::{fold, udp_checksum},
    dns::{HEADER_LEN, IPPROTO_UDP},
};
use network_types::{ip::Ipv4Hdr, udp::UdpHdr};

use crate::packet::ptr_at;

/// Sum of a byte array of even length, in memory order.
#[inline(always)]
fn sum_words<const N: usize>(bytes: &[u8; N]) -> u64 {
    let mut sum = 0u64;
    let mut i = 0;
    while i + 1 < N {
        sum += u16::from_ne_bytes([bytes[i], bytes[i + 1]]) as u64;
        i += 2;
    }
    sum
}

/// The IPv4 header checksum, for a header whose checksum field is zero.
#[inline(always)]
pub fn ipv4_header(ip: &Ipv4Hdr) -> [u8; 2] {
    // SAFETY: Ipv4Hdr is 20 plain bytes.
    let bytes = unsafe { &*(ip as *const Ipv4Hdr as *const [u8; Ipv4Hdr::LEN]) };
    (!fold(sum_words(bytes))).to_ne_bytes()
}

/// Sum of the UDP pseudo-header: addresses, protocol, UDP length.
#[inline(always)]
pub fn pseudo_header<const N: usize>(src: &[u8; N], dst: &[u8; N], udp_len: usize) -> u64 {
    sum_words(src)
        + sum_words(dst)
        + u16::from_ne_bytes((IPPROTO_UDP as u16).to_be_bytes()) as u64
        + u16::from_ne_bytes((udp_len as u16).to_be_bytes()) as u64
}

/// Adds the UDP and DNS headers (read back: both are final) to `sum`, the pieces after the
/// question name included, and writes the UDP checksum.
#[inline(always)]
pub fn write_udp(ctx: &XdpContext, udp_offset: usize, sum: u64) -> Result<(), Counter> {
    let headers: *mut [u8; UdpHdr::LEN + HEADER_LEN] = ptr_at(ctx, udp_offset)?;
    // SAFETY: bounds checked by ptr_at; the checksum field is still zero.
    let sum = sum + sum_words(unsafe { &*headers });
    let check = udp_checksum(sum).to_ne_bytes();
    let udp: *mut UdpHdr = ptr_at(ctx, udp_offset)?;
    // SAFETY: bounds checked by ptr_at.
    unsafe { (*udp).check = check };
    Ok(())
}
