//! Per-CPU scratch space: the question name is copied here, end-aligned in an 8-byte aligned
//! buffer, to be lower-cased, hashed and compared a whole word at a time without touching the
//! packet (the answer repeats the question exactly as received); the entry a question hits is
//! copied here too, so that planning and writing the answer do not depend on its size.

use core::cell::Cell;

use hostport_dns_common::{
    counters::Counter,
    entry::EntryHead,
    hash::finish,
    limits::{MAX_ADDRESS_BYTES, MAX_LABELS, NAME_BUF_LEN, NAME_WORDS},
};

use crate::{
    HPD_SCRATCH,
    packet::{bound, masked},
};

/// Words in the label-start bitmap: one bit per possible offset in a name.
pub const LABEL_START_WORDS: usize = NAME_BUF_LEN / 64;

/// Words holding the addresses of a hit (verifier: bounds the copy and the record loop).
pub const ADDRESS_WORDS: usize = MAX_ADDRESS_BYTES / 8;

#[repr(C, align(8))]
pub struct Scratch {
    /// The lower-cased question name in its last `len` bytes: `[NAME_BUF_LEN - len,
    /// NAME_BUF_LEN)`; the word before its front may hold bytes of the DNS header.
    pub name: [u8; NAME_BUF_LEN],
    /// `fold[j]`: the hash fold of the name's `j` last whole words.
    pub fold: [u64; NAME_WORDS],
    /// Offset in the name of each label's length byte, left to right.
    pub label_offset: [u8; MAX_LABELS],
    /// Bit `i` is set when a label starts at offset `i` of the name.
    pub label_starts: [u64; LABEL_START_WORDS],
    /// See [`Scratch::forget`].
    pub forgotten: Cell<u64>,
    /// The head of the entry the question hit (or of its zone's apex, for a name that does not
    /// exist).
    pub head: EntryHead,
    /// The hit's addresses, copied out of its entry (AAAA first, then A, as the entry holds
    /// them): what follows works on one buffer, whichever size of entry the name has.
    pub addresses: [u64; ADDRESS_WORDS],
}

// SAFETY: each CPU has its own copy, and XDP programs are not preempted: no two threads ever
// reach the same Scratch (the Cell inside is what makes the compiler ask).
unsafe impl Sync for Scratch {}

impl Scratch {
    /// The `j`-th word of the name counted from its end (an aligned load).
    #[inline(always)]
    pub fn word_from_end(&self, j: usize) -> u64 {
        let words = self.name.as_ptr() as *const u64;
        // SAFETY: the index is below NAME_WORDS and the buffer is 8-byte aligned.
        unsafe {
            words
                .add(bound(
                    NAME_WORDS - 1 - bound(j, NAME_WORDS - 1),
                    NAME_WORDS - 1,
                ))
                .read()
        }
    }

    /// Hash of the name's suffix of wire length `len` (the whole name included).
    #[inline(always)]
    pub fn suffix_hash(&self, len: usize) -> u64 {
        let whole = len / 8;
        finish(*masked(&self.fold, whole), self.word_from_end(whole), len)
    }

    /// Returns `value` after a round trip through map memory, bounded by `max`.
    ///
    /// A loop that can end at any of its iterations hands the rest of the program a different
    /// exact value from each (the label count, the name length), and the verifier would walk the
    /// rest of the program once per iteration. A value read back from a map is just "some
    /// number" to it; bounded again, every exit looks the same and is checked once. Loops bounded
    /// by a forgotten count do not narrow the value they were computed from either.
    #[inline(always)]
    pub fn forget(&self, value: usize, max: usize) -> Result<usize, Counter> {
        let slot = self.forgotten.as_ptr();
        // SAFETY: this CPU's scratch, no preemption: nothing else uses the slot meanwhile;
        // volatile so that the compiler keeps the round trip.
        let value = unsafe {
            core::ptr::write_volatile(slot, value as u64);
            core::ptr::read_volatile(slot)
        } as usize;
        if value > max {
            Err(Counter::PassMalformed)
        } else {
            Ok(value)
        }
    }

    /// A word count below NAME_WORDS, forgotten (see [`Scratch::forget`]); 0 if out of range.
    #[inline(always)]
    pub fn forget_word_count(&self, words: usize) -> usize {
        self.forget(words, NAME_WORDS - 1).unwrap_or(0)
    }

    /// A count of address words, at most ADDRESS_WORDS, forgotten (see [`Scratch::forget`]).
    #[inline(always)]
    pub fn forget_address_words(&self, words: usize) -> Result<usize, Counter> {
        self.forget(words, ADDRESS_WORDS)
    }

    /// Whether a label starts `offset` bytes into the name.
    #[inline(always)]
    pub fn label_starts_at(&self, offset: usize) -> bool {
        let word = *masked(&self.label_starts, offset / 64);
        word & (1u64 << (offset % 64)) != 0
    }
}

/// This CPU's scratch space.
#[inline(always)]
pub fn get() -> Result<&'static mut Scratch, Counter> {
    match HPD_SCRATCH.get_ptr_mut(0) {
        // SAFETY: per-CPU, and XDP runs without preemption: nothing else touches it meanwhile.
        Some(ptr) => Ok(unsafe { &mut *ptr }),
        None => Err(Counter::PassNoTable),
    }
}
