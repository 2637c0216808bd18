//! Builds the answer section from the hit's addresses (copied into the scratch space by the
//! lookup): each record's owner is a pointer to the question, then type, class, the name's TTL,
//! the length and the address, written as whole words straight into the packet. The agent summed
//! exactly these bytes for the checksum (`EntryHead::a_csum`, `aaaa_csum`).
//!
//! Each record is bounds-checked as a whole and written through that one pointer, with volatile
//! stores: the compiler would otherwise merge the checks of its words into one the verifier
//! cannot apply to the others.

use aya_ebpf::programs::XdpContext;
use core::intrinsics::unaligned_volatile_store;
use hostport_dns_common::{
    counters::Counter,
    dns::{CLASS_IN, POINTER_TO_QUESTION, TYPE_A, TYPE_AAAA},
    limits::{
        A_ADDR_LEN, A_RR_LEN, AAAA_ADDR_LEN, AAAA_RR_LEN, MAX_ADDRESS_BYTES, MAX_PACKET_OFFSET,
        MAX_XDP_A_RECORDS, MAX_XDP_AAAA_RECORDS,
    },
};

use crate::{
    answer::Records,
    packet::{bound, ptr_at},
    scratch::Scratch,
};

/// The first eight bytes of every record of one answer: pointer, type, class, the TTL's high
/// half.
#[inline(always)]
fn first_word(rtype: u16, ttl: [u8; 4]) -> u64 {
    let pointer = POINTER_TO_QUESTION.to_be_bytes();
    let rtype = rtype.to_be_bytes();
    let class = CLASS_IN.to_be_bytes();
    u64::from_le_bytes([
        pointer[0], pointer[1], rtype[0], rtype[1], class[0], class[1], ttl[0], ttl[1],
    ])
}

/// The TTL's low half and the RDATA length: the first four bytes of a record's second word.
#[inline(always)]
fn ttl_and_length(ttl: [u8; 4], rdlength: usize) -> u32 {
    let length = (rdlength as u16).to_be_bytes();
    u32::from_le_bytes([ttl[2], ttl[3], length[0], length[1]])
}

// `rotated` bounds indexes with a mask.
const _: () =
    assert!(MAX_XDP_A_RECORDS.is_power_of_two() && MAX_XDP_AAAA_RECORDS.is_power_of_two());

/// The address the `k`th record carries: `k` places after the first, wrapping around at the
/// record count, and bounded below `most` (a power of two) where the verifier can see it.
/// Without a branch: a branch per record would double the paths the verifier walks.
/// `count` is at least 1 (so that no division-by-zero check calls a panic handler).
#[inline(always)]
fn rotated(k: usize, first: usize, count: usize, most: usize) -> usize {
    bound((k + first) % count, most - 1)
}

/// Writes the records at packet offset `offset`.
#[inline(always)]
pub fn write(
    ctx: &XdpContext,
    offset: usize,
    records: &Records,
    scratch: &Scratch,
) -> Result<(), Counter> {
    let ttl = scratch.head.ttl;
    let addresses = scratch.addresses.as_ptr() as *const u8;
    // Computed once, before the loops: the records' count, never 0 (plan() gives at least 1).
    let count = records.count.max(1);
    if records.aaaa {
        let first = first_word(TYPE_AAAA, ttl);
        let low = ttl_and_length(ttl, AAAA_ADDR_LEN) as u64;
        let mut k = 0;
        while k < MAX_XDP_AAAA_RECORDS {
            if k >= records.count {
                break;
            }
            let from = rotated(k, records.first, count, MAX_XDP_AAAA_RECORDS) * AAAA_ADDR_LEN;
            // SAFETY: the rotated index is below MAX_XDP_AAAA_RECORDS: within the address buffer.
            let (head, middle, tail) = unsafe {
                (
                    (addresses.add(from) as *const u32).read_unaligned(),
                    (addresses.add(from + 4) as *const u64).read_unaligned(),
                    (addresses.add(from + 12) as *const u32).read_unaligned(),
                )
            };
            let at = bound(offset + k * AAAA_RR_LEN, MAX_PACKET_OFFSET - 1);
            let rr: *mut [u8; AAAA_RR_LEN] = ptr_at(ctx, at)?;
            let rr = rr as *mut u8;
            // SAFETY: within the record, bounds checked (as one) by ptr_at; packet stores may be
            // unaligned.
            unsafe {
                unaligned_volatile_store(rr as *mut u64, first);
                unaligned_volatile_store(rr.add(8) as *mut u64, low | ((head as u64) << 32));
                unaligned_volatile_store(rr.add(16) as *mut u64, middle);
                unaligned_volatile_store(rr.add(24) as *mut u32, tail);
            }
            k += 1;
        }
    } else {
        let first = first_word(TYPE_A, ttl);
        let low = ttl_and_length(ttl, A_ADDR_LEN) as u64;
        let base = scratch.head.aaaa_count as usize * AAAA_ADDR_LEN;
        let mut k = 0;
        while k < MAX_XDP_A_RECORDS {
            if k >= records.count {
                break;
            }
            let from = base + rotated(k, records.first, count, MAX_XDP_A_RECORDS) * A_ADDR_LEN;
            if from + A_ADDR_LEN > MAX_ADDRESS_BYTES {
                return Err(Counter::PassTooLarge);
            }
            // SAFETY: within the address buffer (checked above).
            let address = unsafe { (addresses.add(from) as *const u32).read_unaligned() };
            let at = bound(offset + k * A_RR_LEN, MAX_PACKET_OFFSET - 1);
            let rr: *mut [u64; 2] = ptr_at(ctx, at)?;
            let rr = rr as *mut u64;
            // SAFETY: within the record, bounds checked (as one) by ptr_at; packet stores may be
            // unaligned.
            unsafe {
                unaligned_volatile_store(rr, first);
                unaligned_volatile_store(rr.add(1), low | ((address as u64) << 32));
            }
            k += 1;
        }
    }
    Ok(())
}
