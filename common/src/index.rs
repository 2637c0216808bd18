//! The name index: from a name's hash to its entry, in an array the verifier inlines lookups of.
//!
//! One generation's index is an array of [`Bucket`]s, one for every three entries of the table
//! (`limits::INDEX_NAMES_PER_BUCKET`). A name may sit in either of two buckets, both taken from
//! its 64-bit hash ([`candidates`]); the agent puts it in
//! the one with more free ways (two choices keep the fullest bucket within a way or two of the
//! average). A way holds the name's 32-bit *tag* (more bits of the hash, never 0) and a reference
//! to its entry ([`EntryRef`]).
//!
//! The kernel scans the fourteen tags of the two buckets and takes the first way whose tag
//! matches; it then compares the whole name with the entry's, so a tag shared by two names can
//! only cost a pass to userspace, never a wrong answer. When no tag matches, the name is not in
//! the table, unless one of the buckets is marked [`BUCKET_OVERFLOW`]: a name whose two buckets
//! were both full is not in the index, so a miss there passes too.
//!
//! A bucket holds two to three names on average; a lookup touches two cache lines of index and one to
//! three of entry.

use crate::{
    entry::EntryClass,
    hash::avalanche,
    limits::{INDEX_WAYS, MAX_INDEX_BUCKETS},
};

/// A way's tag when it holds nothing.
pub const EMPTY_TAG: u32 = 0;

/// A reference to an entry: its kind in the top two bits ([`SMALL_REF`], [`NAME_REF`],
/// [`BIG_REF`]), its slot in that kind's array below ([`REF_SLOT`]); or [`PASS_REF`].
pub type EntryRef = u32;

/// The entry is a small one ([`crate::entry::SmallEntry`]).
pub const SMALL_REF: EntryRef = 0;

/// The entry is a name entry ([`crate::entry::NameEntry`]).
pub const NAME_REF: EntryRef = 1 << 30;

/// The entry is a big one ([`crate::entry::BigEntry`]).
pub const BIG_REF: EntryRef = 2 << 30;

/// The bits of a reference that hold the kind of its entry.
pub const REF_CLASS: EntryRef = 3 << 30;

/// The bits of a reference that hold its entry's slot.
pub const REF_SLOT: EntryRef = !REF_CLASS;

/// The reference to slot `slot` of the entries of kind `class`.
#[inline(always)]
pub const fn entry_ref(class: EntryClass, slot: u32) -> EntryRef {
    let kind = match class {
        EntryClass::Small => SMALL_REF,
        EntryClass::Name => NAME_REF,
        EntryClass::Big => BIG_REF,
    };
    kind | (slot & REF_SLOT)
}

/// The kind and slot a reference other than [`PASS_REF`] points to (`None` for a kind that
/// does not exist).
#[inline(always)]
pub const fn ref_target(found: EntryRef) -> Option<(EntryClass, u32)> {
    let class = match found & REF_CLASS {
        SMALL_REF => EntryClass::Small,
        NAME_REF => EntryClass::Name,
        BIG_REF => EntryClass::Big,
        _ => return None,
    };
    Some((class, found & REF_SLOT))
}

/// The name exists but has no entry (its records do not fit one, or the entries are full):
/// userspace answers it. The kernel cannot confirm such a name, so whatever question matches its
/// tag is passed, which is always safe.
pub const PASS_REF: EntryRef = u32::MAX;

/// [`Bucket::flags`]: a name that has this bucket among its candidates could not be placed (both
/// were full): a question that finds no tag here is passed instead of answered NXDOMAIN.
pub const BUCKET_OVERFLOW: u32 = 1 << 0;

/// One index bucket: a 64-byte cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Tags of the ways; [`EMPTY_TAG`] for a free way.
    pub tags: [u32; INDEX_WAYS],
    /// `BUCKET_*` bits.
    pub flags: u32,
    /// The entry of each way.
    pub refs: [EntryRef; INDEX_WAYS],
    /// Keeps the size at 64 bytes without implicit padding.
    pub reserved: u32,
}

impl Bucket {
    pub const EMPTY: Self = Self {
        tags: [EMPTY_TAG; INDEX_WAYS],
        flags: 0,
        refs: [0; INDEX_WAYS],
        reserved: 0,
    };

    /// Ways in use.
    pub fn used(&self) -> usize {
        self.tags.iter().filter(|t| **t != EMPTY_TAG).count()
    }
}

/// Bits of the hash each candidate bucket is chosen from.
const BUCKET_BITS: u32 = 24;

/// Where a name of hash `hash` may sit in an index of `buckets` buckets (at most
/// [`MAX_INDEX_BUCKETS`]): its two candidate buckets and its tag.
#[inline(always)]
pub const fn candidates(hash: u64, buckets: u32) -> (u32, u32, u32) {
    // The name hash's low bits are its weakest: avalanche it, then take the first bucket, the
    // second and the tag from separate bits. A 24-bit fraction times the bucket count, shifted
    // back: any count, not only powers of two, so the index follows the table's size.
    let fraction = (1u64 << BUCKET_BITS) - 1;
    let spread = avalanche(hash);
    let first = (((spread & fraction) * buckets as u64) >> BUCKET_BITS) as u32;
    let second = ((((spread >> BUCKET_BITS) & fraction) * buckets as u64) >> BUCKET_BITS) as u32;
    // The tag from the bits no bucket is chosen from (48 to 63), then the first bucket's
    // lowest, which move its choice least: names that share a bucket rarely share a tag.
    let tag = spread.rotate_right(48) as u32 | 1;
    (first, second, tag)
}

const _: () = assert!(core::mem::size_of::<Bucket>() == 64);
const _: () = assert!(INDEX_WAYS * 8 + 8 == 64);
const _: () = assert!(MAX_INDEX_BUCKETS as u64 <= 1 << BUCKET_BITS);
// Slots of the largest table fit below the kind bits.
const _: () = assert!(crate::limits::MAX_KERNEL_NAMES < REF_SLOT);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::Bucket {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_never_empty_and_buckets_stay_in_range() {
        for hash in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            for buckets in [1u32, 3, 64, 65_536, 100_001, MAX_INDEX_BUCKETS] {
                let (a, b, tag) = candidates(hash, buckets);
                assert!(a < buckets && b < buckets);
                assert_ne!(tag, EMPTY_TAG);
            }
        }
    }

    #[test]
    fn references_carry_their_kind_and_slot() {
        for class in EntryClass::ALL {
            for slot in [0u32, 1, crate::limits::MAX_KERNEL_NAMES - 1] {
                let found = entry_ref(class, slot);
                assert_ne!(found, PASS_REF);
                assert_eq!(ref_target(found), Some((class, slot)));
            }
        }
        assert_eq!(ref_target(PASS_REF), None);
    }

    #[test]
    fn names_spread_evenly_over_any_bucket_count() {
        let buckets = 1_000u32;
        let mut load = [0u32; 1_000];
        for i in 0..100_000u64 {
            let (first, second, _) = candidates(crate::hash::mix(7, i), buckets);
            load[first as usize] += 1;
            load[second as usize] += 1;
        }
        // 200 a bucket on average.
        assert!(load.iter().all(|l| (120..=290).contains(l)), "{load:?}");
    }

    #[test]
    fn the_two_buckets_are_independent_of_each_other() {
        // Hashes sharing their low bits (one first bucket) spread over many second buckets.
        let seconds: std::collections::BTreeSet<u32> =
            (0..64u64).map(|i| candidates(i << 16, 1024).1).collect();
        assert!(seconds.len() > 32, "{seconds:?}");
    }
}
