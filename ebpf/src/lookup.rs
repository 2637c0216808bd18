//! Finds the question name in the generation's name index: its entry, or (for a name that does
//! not exist) the zone it would belong to. Every hit is confirmed word by word against the
//! entry's stored name, so a shared tag can only cost a pass, never a wrong answer
//! (`hostport_dns_common::index` has the index's design).

use hostport_dns_common::{
    counters::Counter,
    entry::{Entry, EntryClass, EntryHead, NAME_FLAG_APEX, ZoneId},
    hash::front_bytes,
    index::{BUCKET_OVERFLOW, EntryRef, PASS_REF, candidates, ref_target},
    limits::{A_ADDR_LEN, AAAA_ADDR_LEN, INDEX_WAYS, MAX_ZONE_LABELS, NAME_BUF_LEN},
};

use crate::{
    dns::Query,
    packet::{bound, masked},
    scratch::{ADDRESS_WORDS, Scratch},
    table::Section,
};

/// What the table says about the question name. The entry found (the name's, or its zone
/// apex's) is in the scratch space: its head and its addresses.
pub enum Found {
    /// The name exists (it may still lack the type asked for).
    Name,
    /// The name does not exist, but lies in this zone.
    NoSuchName(ZoneId),
}

#[inline(always)]
pub fn find(query: &Query, scratch: &mut Scratch, table: &Section) -> Result<Found, Counter> {
    match probe(table, scratch.suffix_hash(query.name_len))? {
        Some(found) => {
            confirm(table, found, scratch, query.name_len)?;
            Ok(Found::Name)
        }
        None => apex_of_missing_name(query, scratch, table),
    }
}

/// The entry reference of the first way, in the name's two candidate buckets, whose tag is the
/// name's; `None` if no way has it. A miss in a bucket that could not take every name of its own
/// is no proof of absence: passed.
#[inline(always)]
fn probe(table: &Section, hash: u64) -> Result<Option<EntryRef>, Counter> {
    let (first, second, tag) = candidates(hash, table.buckets());
    let a = table.bucket(first).ok_or(Counter::PassNoTable)?;
    let b = table.bucket(second).ok_or(Counter::PassNoTable)?;
    let mut w = 0;
    while w < INDEX_WAYS {
        if a.tags[w] == tag {
            return Ok(Some(a.refs[w]));
        }
        w += 1;
    }
    let mut w = 0;
    while w < INDEX_WAYS {
        if b.tags[w] == tag {
            return Ok(Some(b.refs[w]));
        }
        w += 1;
    }
    if (a.flags | b.flags) & BUCKET_OVERFLOW != 0 {
        return Err(Counter::PassCollision);
    }
    Ok(None)
}

/// Whether the entry `found` refers to holds the question's suffix of `len` bytes (the whole
/// name included); if it does, its head and addresses are copied into the scratch space.
#[inline(always)]
fn confirm(
    table: &Section,
    found: EntryRef,
    scratch: &mut Scratch,
    len: usize,
) -> Result<(), Counter> {
    if found == PASS_REF {
        // The name exists with no entry of its own: userspace answers it.
        return Err(Counter::PassLargeSet);
    }
    let same = match ref_target(found) {
        Some((EntryClass::Small, slot)) => {
            let entry = table.small_entry(slot).ok_or(Counter::PassNoTable)?;
            take_if_same(entry, scratch, len)?
        }
        Some((EntryClass::Name, slot)) => {
            let entry = table.name_entry(slot).ok_or(Counter::PassNoTable)?;
            take_if_same(entry, scratch, len)?
        }
        Some((EntryClass::Big, slot)) => {
            let entry = table.big_entry(slot).ok_or(Counter::PassNoTable)?;
            take_if_same(entry, scratch, len)?
        }
        // A kind the agent never writes.
        None => return Err(Counter::PassNoTable),
    };
    if same {
        Ok(())
    } else {
        // A tag shared with a name the question is not: userspace tells them apart.
        Err(Counter::PassCollision)
    }
}

/// If the entry holds the question's suffix of `len` bytes: copies its head and addresses into
/// the scratch space, and says so. An entry claiming more addresses than an answer can hold is
/// one the agent never wrote: passed.
#[inline(always)]
fn take_if_same<const P: usize>(
    entry: &Entry<P>,
    scratch: &mut Scratch,
    len: usize,
) -> Result<bool, Counter> {
    if !same_name(entry, scratch, len) {
        return Ok(false);
    }
    // The head as two words: a plain struct copy between two map values becomes a call to
    // memmove.
    let from = &entry.head as *const EntryHead as *const [u64; 2];
    let to = &mut scratch.head as *mut EntryHead as *mut [u64; 2];
    // SAFETY: EntryHead is 16 bytes, 8-byte aligned, plain data.
    unsafe { to.write(from.read()) };
    let used =
        entry.head.aaaa_count as usize * AAAA_ADDR_LEN + entry.head.a_count as usize * A_ADDR_LEN;
    let words = scratch
        .forget_address_words(used.div_ceil(8))
        .map_err(|_| Counter::PassNoTable)?;
    let from = entry.payload.as_ptr() as *const u64;
    let mut w = 0;
    while w < P / 8 && w < ADDRESS_WORDS {
        if w >= words {
            break;
        }
        // SAFETY: w < P / 8: a word of the payload, which is 8-byte aligned.
        *masked_address(&mut scratch.addresses, w) = unsafe { from.add(w).read() };
        w += 1;
    }
    Ok(true)
}

/// `addresses[w]` for `w` below ADDRESS_WORDS (checked by the caller's loop).
#[inline(always)]
fn masked_address(addresses: &mut [u64; ADDRESS_WORDS], w: usize) -> &mut u64 {
    // SAFETY: the caller's loop keeps w below ADDRESS_WORDS.
    unsafe { addresses.get_unchecked_mut(w) }
}

/// Whether the entry's name equals the question's suffix of `len` bytes, compared a word at a
/// time from the end (both are end-aligned, the entry's at the end of its payload). The loop's
/// only exit is its forgotten bound.
#[inline(always)]
fn same_name<const P: usize>(entry: &Entry<P>, scratch: &Scratch, len: usize) -> bool {
    let words = P / 8;
    if entry.head.name_len as usize != len || len > P {
        return false;
    }
    let stored = entry.payload.as_ptr() as *const u64;
    let whole_words = scratch.forget_word_count(len / 8);
    let mut diff = 0u64;
    let mut j = 0;
    while j < words {
        if j >= whole_words {
            break;
        }
        // SAFETY: j < words: a word of the payload, which is 8-byte aligned.
        diff |= unsafe { stored.add(words - 1 - j).read() } ^ scratch.word_from_end(j);
        j += 1;
    }
    let front_len = len % 8;
    if front_len != 0 {
        if whole_words >= words {
            return false;
        }
        // SAFETY: whole_words < words, checked just now.
        let front = unsafe { stored.add(words - 1 - whole_words).read() };
        diff |= front_bytes(front ^ scratch.word_from_end(whole_words), front_len);
    }
    diff == 0
}

/// For a name not in the table: its zone, found by its apex's entry. Suffixes are tried from the
/// shortest up, only at label counts some apex of the generation has: the first in the table is
/// the apex (zones do not nest, and every name of a zone is longer than its apex). At most
/// MAX_ZONE_LABELS probes, one per distinct apex label count.
#[inline(always)]
fn apex_of_missing_name(
    query: &Query,
    scratch: &mut Scratch,
    table: &Section,
) -> Result<Found, Counter> {
    let mut j = 1;
    while j <= MAX_ZONE_LABELS {
        // The whole name was looked up already.
        if j >= query.labels {
            break;
        }
        // No apex has j labels or more: the name is in no zone.
        let wanted = table.apex_labels() >> (j - 1);
        if wanted == 0 {
            break;
        }
        if wanted & 1 == 0 {
            j += 1;
            continue;
        }
        let offset = *masked(&scratch.label_offset, query.labels - j) as usize;
        let suffix_len = bound(query.name_len.wrapping_sub(offset), NAME_BUF_LEN - 1);
        if let Some(found) = probe(table, scratch.suffix_hash(suffix_len))? {
            confirm(table, found, scratch, suffix_len)?;
            if scratch.head.flags & NAME_FLAG_APEX == 0 {
                // Only a table the agent got wrong has a shorter name than its apex.
                return Err(Counter::PassNoTable);
            }
            return Ok(Found::NoSuchName(u32::from(scratch.head.zone)));
        }
        j += 1;
    }
    Err(Counter::PassNotInZone)
}
