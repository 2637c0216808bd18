//! The name hash both sides compute.
//!
//! The name index is keyed by a 64-bit hash of the lower-case wire name (see `index`); the entry
//! holds the whole name, so the kernel confirms every hit word by word and a hash collision can
//! never produce a wrong answer (such a question is passed to userspace instead).
//!
//! Names are read in 8-byte words counted from their *end*: a suffix of a name has the same
//! end-aligned words as the name itself. The kernel keeps names end-aligned in an 8-byte aligned
//! buffer, so every read is one aligned load, and one fold over a question's words gives the hash
//! of every suffix (which is how it finds an unknown name's zone).
//!
//! `hash(name) = mix(mix(fold of the whole words from the end, front bytes), length)`, where the
//! fold starts from the table's secret seed (`generation::Generation::seed`), the front
//! bytes (the `len % 8` first bytes) form a little-endian integer and the mix of the front is
//! skipped when there are none.

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixes one 64-bit word into the running hash.
#[inline(always)]
pub const fn mix(hash: u64, word: u64) -> u64 {
    let x = (hash ^ word).wrapping_mul(MULTIPLIER);
    x ^ (x >> 29)
}

/// A full avalanche of a 64-bit word (MurmurHash3's finaliser): every input bit reaches every
/// output bit. For slots taken from a few bits of a key whose variation may sit anywhere in it.
#[inline(always)]
pub const fn avalanche(mut x: u64) -> u64 {
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The last `bytes` bytes (1..=7) of a little-endian word, moved down: the front of a name whose
/// length is not a multiple of 8, without the bytes before it.
#[inline(always)]
pub const fn front_bytes(word: u64, bytes: usize) -> u64 {
    word >> (8 * (8 - bytes))
}

/// The hash of a name (or suffix) of wire length `len`, given the fold of its whole words from
/// the end (`fold_of_whole_words`) and the end-aligned word that holds its front bytes.
#[inline(always)]
pub const fn finish(fold_of_whole_words: u64, front_word: u64, len: usize) -> u64 {
    let rem = len % 8;
    let hash = if rem == 0 {
        fold_of_whole_words
    } else {
        mix(fold_of_whole_words, front_bytes(front_word, rem))
    };
    mix(hash, len as u64)
}

/// The `j`-th 8-byte word of `wire` counted from its end (little-endian). Bytes before the start
/// of the name read as zero.
pub fn word_from_end(wire: &[u8], j: usize) -> u64 {
    let end = wire.len().saturating_sub(8 * j);
    let start = end.saturating_sub(8);
    let mut buf = [0u8; 8];
    buf[8 - (end - start)..].copy_from_slice(&wire[start..end]);
    u64::from_le_bytes(buf)
}

/// Hash of a lower-case name in wire form (root byte included), under the table's `seed`.
pub fn name_hash(seed: u64, wire: &[u8]) -> u64 {
    let len = wire.len();
    let mut fold = seed;
    for j in 0..len / 8 {
        fold = mix(fold, word_from_end(wire, j));
    }
    finish(fold, word_from_end(wire, len / 8), len)
}

/// ASCII lower-casing of eight bytes at once. Bytes outside `A..=Z` (label lengths included:
/// they are at most 63) are left alone.
#[inline(always)]
pub const fn lowercase_word(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte b below 0x80: the high bit of b + 0x3f is set iff b >= 'A' (0x41), the high bit of
    // b + 0x25 iff b > 'Z' (0x5a); neither sum carries into the next byte.
    let low7 = word & !HIGH;
    let ge_a = low7.wrapping_add(ONES * 0x3f);
    let gt_z = low7.wrapping_add(ONES * 0x25);
    let upper = ge_a & !gt_z & !word & HIGH;
    word | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: u64 = 0x6a09_e667_f3bc_c908;

    #[test]
    fn lowercase_word_changes_only_ascii_capitals() {
        for b in 0u8..=255 {
            let word = u64::from_le_bytes([b, b'A', b'Z', b'a', b'@', b'[', 0x3f, 0xc1]);
            let out = lowercase_word(word).to_le_bytes();
            assert_eq!(out[0], b.to_ascii_lowercase(), "byte {b:#x}");
            assert_eq!(&out[1..], &[b'a', b'z', b'a', b'@', b'[', 0x3f, 0xc1]);
        }
    }

    #[test]
    fn a_suffix_hash_comes_from_the_fold_of_the_whole_name() {
        let wire = b"\x0ddefault-nginx\x07ingress\x04prod\x06coreha\x07example\x00";
        let mut folds = [SEED; 8];
        for j in 0..wire.len() / 8 {
            folds[j + 1] = mix(folds[j], word_from_end(wire, j));
        }
        for start in [0usize, 14, 22, 27, 34] {
            let suffix = &wire[start..];
            let len = suffix.len();
            let from_fold = finish(folds[len / 8], word_from_end(wire, len / 8), len);
            assert_eq!(from_fold, name_hash(SEED, suffix), "suffix at {start}");
        }
    }

    #[test]
    fn different_names_hash_differently() {
        let names: [&[u8]; 5] = [
            b"\x01a\x07example\x00",
            b"\x08aexample\x00",
            b"\x07example\x01a\x00",
            b"\x00",
            b"\x01b\x07example\x00",
        ];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(name_hash(SEED, a), name_hash(SEED, b));
            }
        }
    }

    #[test]
    fn the_seed_changes_every_hash() {
        let wire = b"\x03web\x07example\x00";
        assert_ne!(name_hash(SEED, wire), name_hash(SEED ^ 1, wire));
        assert_ne!(
            name_hash(SEED, b"\x00"),
            name_hash(SEED.rotate_left(7), b"\x00")
        );
    }
}
