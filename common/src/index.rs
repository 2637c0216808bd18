//! The name index: from a name's hash to its entry, in an array the verifier inlines lookups of.
//!
//! One generation's index is an array of [`Bucket`]s, a power of two of them. A name may sit in
//! either of two buckets, both taken from its 64-bit hash ([`candidates`]); the agent puts it in
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
//! With the default capacity (131,072 names, 65,536 buckets, 4 MiB a generation) a bucket holds
//! two names on average; a lookup touches two cache lines of index and two or three of entry.

use crate::{hash::avalanche, limits::INDEX_WAYS};

/// A way's tag when it holds nothing.
pub const EMPTY_TAG: u32 = 0;

/// A reference to an entry: the slot of a name entry, or of a big entry with [`BIG_REF`] set, or
/// [`PASS_REF`].
pub type EntryRef = u32;

/// The entry is a big one ([`crate::entry::BigEntry`]); the other bits are its slot.
pub const BIG_REF: EntryRef = 1 << 31;

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

/// Where a name of hash `hash` may sit in an index of `buckets` buckets (a power of two): its two
/// candidate buckets and its tag.
#[inline(always)]
pub const fn candidates(hash: u64, buckets: u32) -> (u32, u32, u32) {
    // The name hash's low bits are its weakest: avalanche it, then take the first bucket, the
    // second and the tag from separate bits (at most 2^24 buckets).
    let mask = buckets as u64 - 1;
    let spread = avalanche(hash);
    let first = (spread & mask) as u32;
    let second = ((spread >> 24) & mask) as u32;
    let tag = (spread >> 32) as u32 | 1;
    (first, second, tag)
}

const _: () = assert!(core::mem::size_of::<Bucket>() == 64);
const _: () = assert!(INDEX_WAYS * 8 + 8 == 64);

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
            for buckets in [1u32, 64, 65_536] {
                let (a, b, tag) = candidates(hash, buckets);
                assert!(a < buckets && b < buckets);
                assert_ne!(tag, EMPTY_TAG);
            }
        }
    }

    #[test]
    fn the_two_buckets_are_independent_of_each_other() {
        // Hashes sharing their low bits (one first bucket) spread over many second buckets.
        let seconds: std::collections::BTreeSet<u32> =
            (0..64u64).map(|i| candidates(i << 16, 1024).1).collect();
        assert!(seconds.len() > 32, "{seconds:?}");
    }
}
