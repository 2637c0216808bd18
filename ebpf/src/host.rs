//! Whether a query is addressed to this host: only the addresses the kernel answers on, as the
//! generation's host-address set marks them, are answered in the kernel, and loopback addresses
//! only from lo. The set is also what the source check asks (`source`).

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{
    counters::Counter,
    host::{HOST_ANSWER, home, v4_words},
    limits::HOST_PROBES,
};
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::{eth::Family, ip::L3, packet::ptr_at, table::Section};

/// The interface index of lo in every network namespace (`LOOPBACK_IFINDEX` in the kernel).
const LOOPBACK_IFINDEX: usize = 1;
/// 127.0.0.0/8: the first octet.
pub const IPV4_LOOPBACK_NET: u8 = 127;

/// An address as the host set stores it (IPv4 mapped, `::ffff:a.b.c.d`), as two little-endian
/// words: loaded from the packet and compared a word at a time, never copied byte by byte (the
/// verifier refuses the misaligned stack stores a byte array invites).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Address {
    pub words: [u64; 2],
}

impl Address {
    /// The IPv4 address's four bytes.
    #[inline(always)]
    pub fn v4_octets(&self) -> [u8; 4] {
        ((self.words[1] >> 32) as u32).to_le_bytes()
    }

    /// The IPv6 address's sixteen bytes.
    #[inline(always)]
    pub fn v6_octets(&self) -> [u8; 16] {
        let (a, b) = (self.words[0].to_le_bytes(), self.words[1].to_le_bytes());
        [
            a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], b[0], b[1], b[2], b[3], b[4], b[5],
            b[6], b[7],
        ]
    }

    /// The address's first byte (of the IPv4 address for IPv4).
    #[inline(always)]
    pub fn first_octet(&self, family: Family) -> u8 {
        match family {
            Family::V4 => (self.words[1] >> 32) as u8,
            Family::V6 => self.words[0] as u8,
        }
    }

    /// `::1`.
    #[inline(always)]
    pub fn is_v6_loopback(&self) -> bool {
        self.words[0] == 0 && self.words[1] == IPV6_LOOPBACK_HIGH_WORD
    }

    /// `::`.
    #[inline(always)]
    pub fn is_v6_unspecified(&self) -> bool {
        self.words[0] == 0 && self.words[1] == 0
    }
}

/// The second word of `::1`: its last byte is 1.
const IPV6_LOOPBACK_HIGH_WORD: u64 = 1 << 56;

/// The two ends of the query, as read once from the IP header.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Ends {
    pub src: Address,
    pub dst: Address,
    pub family: Family,
}

/// The query's addresses, and where it came in.
#[repr(C, align(8))]
pub struct Host {
    pub ends: Ends,
    /// The packet came in on lo.
    pub on_loopback: bool,
}

/// Only the addresses the kernel answers on (VIPs included, which the agent keeps current) are
/// answered: a query to a pod behind the node, or to a broadcast or multicast address, goes up
/// the stack. A loopback destination is the node's own only on lo: arriving anywhere else it is
/// spoofed (the stack drops it as a martian).
#[inline(always)]
pub fn ensure_addressed_to_this_host(
    ctx: &XdpContext,
    l3: &L3,
    table: &Section,
) -> Result<Host, Counter> {
    let ends = read_ends(ctx, l3)?;
    let on_loopback = ctx.ingress_ifindex() == LOOPBACK_IFINDEX;
    let loopback = match ends.family {
        Family::V4 => ends.dst.first_octet(Family::V4) == IPV4_LOOPBACK_NET,
        Family::V6 => ends.dst.is_v6_loopback(),
    };
    if loopback && !on_loopback {
        return Err(Counter::PassNotForThisHost);
    }
    if kind_of(table, ends.dst.words) & HOST_ANSWER == 0 {
        return Err(Counter::PassNotForThisHost);
    }
    Ok(Host { ends, on_loopback })
}

#[inline(always)]
fn read_ends(ctx: &XdpContext, l3: &L3) -> Result<Ends, Counter> {
    match l3.family {
        Family::V4 => {
            let ip: *mut Ipv4Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at; packet loads may be unaligned.
            let (src, dst) = unsafe {
                (
                    (&raw const (*ip).src_addr as *const u32).read_unaligned(),
                    (&raw const (*ip).dst_addr as *const u32).read_unaligned(),
                )
            };
            Ok(Ends {
                src: Address {
                    words: v4_words(src.to_le_bytes()),
                },
                dst: Address {
                    words: v4_words(dst.to_le_bytes()),
                },
                family: Family::V4,
            })
        }
        Family::V6 => {
            let ip: *mut Ipv6Hdr = ptr_at(ctx, l3.l3_offset)?;
            // SAFETY: bounds checked by ptr_at; packet loads may be unaligned.
            let (src, dst) = unsafe {
                let src = &raw const (*ip).src_addr as *const u64;
                let dst = &raw const (*ip).dst_addr as *const u64;
                (
                    [src.read_unaligned(), src.add(1).read_unaligned()],
                    [dst.read_unaligned(), dst.add(1).read_unaligned()],
                )
            };
            Ok(Ends {
                src: Address { words: src },
                dst: Address { words: dst },
                family: Family::V6,
            })
        }
    }
}

/// What the host set says of an address (`HOST_*` bits; 0: not this host's). Probes from the
/// address's home slot to the first free slot, at most `HOST_PROBES` slots.
#[inline(always)]
pub fn kind_of(table: &Section, wanted: [u64; 2]) -> u32 {
    let slots = table.host_slots();
    let first = home(wanted, table.seed(), slots);
    let mut i = 0;
    while i < HOST_PROBES {
        let index = (first + i as u32) & slots.wrapping_sub(1);
        let Some(slot) = table.host_slot(index) else {
            return 0;
        };
        if slot.kind == 0 {
            return 0;
        }
        // SAFETY: the slot's address is its first 16 bytes, and the slot is 8-byte aligned.
        let held = unsafe { *(slot.address.as_ptr() as *const [u64; 2]) };
        if held[0] == wanted[0] && held[1] == wanted[1] {
            return slot.kind;
        }
        i += 1;
    }
    0
}
