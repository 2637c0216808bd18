//! This host's addresses as the kernel checks them: which destinations it answers on, and which
//! sources cannot have sent a query (martians).
//!
//! One generation's set (`HPD_HOST`) is an open-addressed hash table of a power of two slots
//! (`generation::Capacity::host`, at most [`HOST_SLOTS`]), at most a quarter used (up to 8,192
//! addresses): every address of every interface (link-local ones and the Service addresses
//! IPVS puts on `kube-ipvs0` included) and the broadcast address of each IPv4 subnet, each with
//! what it is ([`HOST_OWN`], [`HOST_ANSWER`], [`HOST_BROADCAST`]). IPv4 addresses are stored
//! IPv4-mapped (`::ffff:a.b.c.d`). An address sits within [`HOST_PROBES`] slots of its home
//! ([`home`]); the kernel stops at the first empty slot or after that many.
//!
//! The set is part of the generation: the agent writes a new one into the inactive generation and
//! switches, so a run reads one whole set.

use crate::{
    hash::{avalanche, mix},
    limits::{HOST_PROBES, HOST_SLOTS},
};

/// An address of this host (any interface): as a source from another interface than lo, a
/// martian.
pub const HOST_OWN: u32 = 1 << 0;
/// An address the kernel answers on (`--answer-on`, by default every address but link-local ones
/// and those of dummy or IPVS interfaces).
pub const HOST_ANSWER: u32 = 1 << 1;
/// The broadcast address of one of this host's IPv4 subnets: never a source.
pub const HOST_BROADCAST: u32 = 1 << 2;

/// One slot of the set; `kind` 0 marks a free slot.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSlot {
    /// The address; IPv4 as `::ffff:a.b.c.d`.
    pub address: [u8; 16],
    /// `HOST_*` bits.
    pub kind: u32,
    /// Keeps the size a multiple of 8 without implicit padding.
    pub reserved: u32,
}

impl HostSlot {
    pub const EMPTY: Self = Self {
        address: [0; 16],
        kind: 0,
        reserved: 0,
    };
}

/// The IPv4-mapped form of an IPv4 address, as the set stores it.
#[inline(always)]
pub const fn mapped_v4(address: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, address[0], address[1], address[2], address[3],
    ]
}

/// [`words`] of the IPv4-mapped form of `address`, computed without the 16-byte form.
#[inline(always)]
pub const fn v4_words(address: [u8; 4]) -> [u64; 2] {
    [0, 0xffff_0000 | (u32::from_le_bytes(address) as u64) << 32]
}

/// The home slot of `address` (as stored) under the table's secret `seed` in a set of `slots`
/// slots (a power of two).
#[inline(always)]
pub const fn home(address_words: [u64; 2], seed: u64, slots: u32) -> u32 {
    // An IPv4 address varies only in the high half of its second word: avalanche it down.
    let hash = avalanche(mix(mix(seed, address_words[0]), address_words[1]));
    (hash & (slots as u64 - 1)) as u32
}

/// The stored address as two little-endian words (how the kernel loads and compares it).
#[inline(always)]
pub const fn words(address: &[u8; 16]) -> [u64; 2] {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        lo[i] = address[i];
        hi[i] = address[8 + i];
        i += 1;
    }
    [u64::from_le_bytes(lo), u64::from_le_bytes(hi)]
}

const _: () = assert!(core::mem::size_of::<HostSlot>() == 24);
const _: () = assert!(HOST_SLOTS.is_power_of_two());
const _: () = assert!(HOST_PROBES < crate::limits::MIN_HOST_SLOTS as usize);
const _: () = assert!(crate::limits::MIN_HOST_SLOTS.is_power_of_two());

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::HostSlot {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_words_are_the_words_of_the_mapped_form() {
        for a in [
            [198, 18, 0, 1],
            [255, 255, 255, 255],
            [0, 0, 0, 0],
            [127, 0, 0, 1],
        ] {
            assert_eq!(v4_words(a), words(&mapped_v4(a)));
        }
    }

    #[test]
    fn mapped_addresses_differ_from_ipv6_ones_with_the_same_tail() {
        let v4 = mapped_v4([198, 18, 0, 1]);
        let mut v6 = [0u8; 16];
        v6[12..].copy_from_slice(&[198, 18, 0, 1]);
        assert_ne!(words(&v4), words(&v6));
        assert!(home(words(&v4), 7, HOST_SLOTS) < HOST_SLOTS);
        assert!(home(words(&v4), 7, 256) < 256);
    }
}
