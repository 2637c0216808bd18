//! Generations: how the XDP program always reads one complete record table while the agent
//! changes it.
//!
//! # The design
//!
//! Every map the program answers from holds two *generations*, 0 and 1:
//! - the name table (`HPD_NAMES`, a hash map) keys each entry by [`name_key`]: the name hash
//!   with its lowest bit replaced by the generation;
//! - the zone table (`HPD_ZONES`, an array) keeps generation `g`'s zone `id` at [`zone_slot`];
//! - the node's addresses (`HPD_LOCAL`, an array) keep generation `g`'s at index `g`.
//!
//! One more array, `HPD_GEN`, holds one [`Generation`]: which generation is *active*, and the
//! table's hash seed. The program reads it once, first, and reads only that generation from
//! then on: a reader never mixes two generations, because the index it reads everything
//! through is read once.
//!
//! The agent (one writer) only ever writes the *inactive* generation. To publish it:
//! 1. writes the change into the inactive generation (names, zones, addresses);
//! 2. makes it active: one 4-byte store into `HPD_GEN`, the atomic switch;
//! 3. waits until every program run that may have read the old index has ended: an update of a
//!    map-in-map slot returns only after `synchronize_rcu()` (`maybe_wait_bpf_programs()` in
//!    `kernel/bpf/syscall.c`), and XDP programs run inside RCU read-side sections;
//! 4. replays the same change into the generation just left, which no reader can be in any
//!    more, so that both are equal again and the next change can start from it.
//!
//! A write that fails leaves the active generation alone: it stays complete, and it answers.
//! Until the first complete generation is active, `active` is [`NO_GENERATION`] and the program
//! answers nothing (it passes every packet to userspace).
//!
//! Nothing a reader holds is ever written or freed while it holds it, so the torn reads that
//! in-place array updates and `bpf_mem_alloc`'s immediate reuse of freed hash elements (Linux
//! 6.1 and later) would allow cannot happen: both only touch the inactive generation.
//!
//! The price: the kernel holds the table twice.

use crate::record::{NameKey, ZoneId};

/// Generations in every table: the active one and the one being written.
pub const GENERATIONS: u32 = 2;

/// `Generation::active` before the first complete generation is in place.
pub const NO_GENERATION: u32 = u32::MAX;

/// The one value of `HPD_GEN`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Seed of the name hash ([`crate::hash::name_hash`]): random per install, kept with the
    /// pinned maps so that a restarted agent computes the same keys; secret, so that whoever can
    /// name pods or Services cannot aim names at one key.
    pub seed: u64,
    /// The generation the program reads, or [`NO_GENERATION`].
    pub active: u32,
    /// Per generation, which label counts its zone apexes have: bit `n - 1` is set when an apex
    /// of `n` labels (root not counted, at most [`crate::limits::MAX_ZONE_LABELS`]) is in that
    /// generation. A name not in the table is looked up only at the suffix lengths an apex can
    /// have: with one zone, one lookup instead of one per label. Written with the rest of the
    /// generation, while no reader reads it.
    pub apex_labels: [u16; GENERATIONS as usize],
}

impl Generation {
    /// Nothing published yet.
    pub const fn empty(seed: u64) -> Self {
        Self {
            seed,
            active: NO_GENERATION,
            apex_labels: [0; GENERATIONS as usize],
        }
    }

    /// The generation a reader reads, if one is active.
    pub const fn active_generation(&self) -> Option<u32> {
        if self.active < GENERATIONS {
            Some(self.active)
        } else {
            None
        }
    }
}

/// The bit of [`Generation::apex_labels`] that says an apex of `labels` labels is there; None
/// outside 1..=MAX_ZONE_LABELS.
#[inline(always)]
pub const fn apex_label_bit(labels: usize) -> Option<u16> {
    if labels == 0 || labels > crate::limits::MAX_ZONE_LABELS {
        None
    } else {
        Some(1 << (labels - 1))
    }
}

const _: () = assert!(crate::limits::MAX_ZONE_LABELS <= u16::BITS as usize);

/// The bit of a name key that holds the generation.
const GENERATION_BIT: NameKey = 1;

/// Key of generation `generation`'s entry for a name whose hash is `hash`. The two generations'
/// keys of one name differ in their lowest bit only, so no key of one generation can ever be a
/// key of the other.
#[inline(always)]
pub const fn name_key(hash: u64, generation: u32) -> NameKey {
    (hash & !GENERATION_BIT) | (generation as NameKey & GENERATION_BIT)
}

/// The generation a name key belongs to.
#[inline(always)]
pub const fn generation_of_key(key: NameKey) -> u32 {
    (key & GENERATION_BIT) as u32
}

/// Index in the zone array of generation `generation`'s zone `id` (`id` below
/// [`crate::limits::ZONES_CAPACITY`]).
#[inline(always)]
pub const fn zone_slot(generation: u32, id: ZoneId) -> u32 {
    generation * crate::limits::ZONES_CAPACITY + id
}

const _: () = assert!(core::mem::size_of::<Generation>() == 16);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::Generation {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apex_label_bits_cover_exactly_the_label_counts_a_zone_may_have() {
        assert_eq!(apex_label_bit(0), None, "the root is no zone here");
        assert_eq!(apex_label_bit(1), Some(1));
        assert_eq!(apex_label_bit(3), Some(0b100));
        assert_eq!(
            apex_label_bit(crate::limits::MAX_ZONE_LABELS),
            Some(1 << (crate::limits::MAX_ZONE_LABELS - 1))
        );
        assert_eq!(apex_label_bit(crate::limits::MAX_ZONE_LABELS + 1), None);
    }

    #[test]
    fn the_generations_keys_of_one_name_never_meet() {
        for hash in [0u64, 1, 2, 3, u64::MAX, 0x1234_5678_9abc_def1] {
            assert_ne!(name_key(hash, 0), name_key(hash, 1));
            assert_eq!(generation_of_key(name_key(hash, 0)), 0);
            assert_eq!(generation_of_key(name_key(hash, 1)), 1);
            // Hashes that differ only in the generation bit share their keys: a collision the
            // agent sees (both names ask for one key) and sends to userspace.
            assert_eq!(name_key(hash, 1), name_key(hash ^ 1, 1));
        }
    }
}
