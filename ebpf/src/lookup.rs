//! Finds the question name in the name table's current generation: the entry itself, or (for a
//! name that does not exist) the zone it would belong to. Every hit is confirmed word by word
//! against the entry's stored name, so a hash collision can only cost a miss, never a wrong
//! answer.

use hostport_dns_common::{
    counters::Counter,
    generation::name_key,
    hash::front_bytes,
    limits::{MAX_ZONE_LABELS, NAME_BUF_LEN, NAME_WORDS},
    record::{NameEntry, ZoneId},
};

use crate::{
    HPD_NAMES,
    dns::Query,
    packet::{bound, masked},
    scratch::Scratch,
    table::Table,
};

/// What the table says about the question name.
pub enum Found {
    /// The name exists (it may still lack the type asked for).
    Name(&'static NameEntry),
    /// The name does not exist, but lies in this zone.
    NoSuchName(ZoneId),
}

#[inline(always)]
pub fn find(query: &Query, scratch: &Scratch, table: Table) -> Result<Found, Counter> {
    // One comparison site for both cases keeps the verifier's work linear.
    let (entry, len, exact) = match lookup(scratch, query.name_len, table) {
        Some(entry) => (entry, query.name_len, true),
        None => apex_of_missing_name(query, scratch, table)?,
    };
    if !same_name(entry, scratch, len) {
        // A hash collision with a name the question is not: userspace tells them apart.
        return Err(Counter::PassCollision);
    }
    Ok(if exact {
        Found::Name(entry)
    } else {
        Found::NoSuchName(entry.zone_id)
    })
}

/// The entry whose hash matches the question's suffix of wire length `len`, if any (not yet
/// confirmed byte by byte).
#[inline(always)]
fn lookup(scratch: &Scratch, len: usize, table: Table) -> Option<&'static NameEntry> {
    let entry = HPD_NAMES.get_ptr(name_key(scratch.suffix_hash(len), table.generation))?;
    // SAFETY: the entry belongs to the generation this run reads, which the agent does not write
    // or free until every run that may read it has ended.
    Some(unsafe { &*entry })
}

/// Whether the entry's name equals the question's suffix of `len` bytes, compared a word at a
/// time from the end (both are end-aligned). The loop's only exit is its forgotten bound.
#[inline(always)]
fn same_name(entry: &NameEntry, scratch: &Scratch, len: usize) -> bool {
    if entry.name_len as usize != len {
        return false;
    }
    let stored = entry.name.as_ptr() as *const u64;
    // SAFETY: bounded below NAME_WORDS; NameEntry is 8-byte aligned.
    let stored_word =
        |j: usize| unsafe { stored.add(bound(NAME_WORDS - 1 - j, NAME_WORDS - 1)).read() };
    let whole_words = scratch.forget_word_count(len / 8);
    let mut diff = 0u64;
    let mut j = 0;
    while j < NAME_WORDS {
        if j >= whole_words {
            break;
        }
        diff |= stored_word(j) ^ scratch.word_from_end(j);
        j += 1;
    }
    let front_len = len % 8;
    if front_len != 0 {
        diff |= front_bytes(
            stored_word(whole_words) ^ scratch.word_from_end(whole_words),
            front_len,
        );
    }
    diff == 0
}

/// For a name not in the table: the entry of its zone apex and the apex's length. Suffixes are
/// tried from the shortest up, only at label counts some apex of the generation has: the first
/// in the table is the apex (zones do not nest). At most MAX_ZONE_LABELS lookups, one per
/// distinct apex label count.
#[inline(always)]
fn apex_of_missing_name(
    query: &Query,
    scratch: &Scratch,
    table: Table,
) -> Result<(&'static NameEntry, usize, bool), Counter> {
    let mut j = 1;
    while j <= MAX_ZONE_LABELS {
        // The whole name was looked up already.
        if j >= query.labels {
            break;
        }
        // No apex has j labels or more: the name is in no zone.
        let wanted = table.apex_labels >> (j - 1);
        if wanted == 0 {
            break;
        }
        if wanted & 1 == 0 {
            j += 1;
            continue;
        }
        let offset = *masked(&scratch.label_offset, query.labels - j) as usize;
        let suffix_len = bound(query.name_len.wrapping_sub(offset), NAME_BUF_LEN - 1);
        if let Some(entry) = lookup(scratch, suffix_len, table) {
            return Ok((entry, suffix_len, false));
        }
        j += 1;
    }
    Err(Counter::PassNotInZone)
}
