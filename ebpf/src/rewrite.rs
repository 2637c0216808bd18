//! Rewrites the query into its answer in place: the packet is resized to the answer, the
//! sections after the question are written, the header is updated, and the Ethernet, IP and UDP
//! headers are turned around with fresh checksums. The question itself is never touched, so the
//! client gets its bytes back exactly (HAProxy compares them).

use aya_ebpf::{
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use core::intrinsics::unaligned_volatile_store;
use hostport_dns_common::{
    counters::{Counter, Event},
    csum::{at_offset, fold, sum16},
    dns::{
        FLAG_TC, HEADER_LEN, OPT_RR_LEN, POINTER_MARK, QTYPE_QCLASS_LEN, TYPE_OPT, answer_flags,
    },
    entry::ZoneEntry,
    limits::{FRONT_WORDS, MAX_FRONT_LEN, MAX_PACKET_OFFSET, MAX_SOA_PATCHES, MAX_SOA_RR_LEN},
};
use network_types::udp::UdpHdr;

use crate::{
    answer::Plan,
    csum,
    dns::Query,
    eth,
    ip::{self, L3},
    packet::{bound, len, masked, ptr_at},
    records,
    scratch::Scratch,
    stats,
    udp::{self, L4},
};

#[inline(always)]
pub fn into_answer(
    ctx: &XdpContext,
    l3: &L3,
    l4: &L4,
    query: &Query,
    plan: &Plan,
    scratch: &Scratch,
) -> Result<(), Counter> {
    resize(
        ctx,
        l4.dns_offset + plan.dns_len,
        l4.dns_offset + query.question_end(),
    )?;
    // Offsets from the start of the UDP header: the checksum adds each piece at its parity.
    let question_end = UdpHdr::LEN + query.question_end();
    let mut sum = at_offset(query.name_sum, UdpHdr::LEN + HEADER_LEN);
    sum += type_class_sum(ctx, l4, query)?;
    let mut at = question_end;
    if let Some(found) = plan.records {
        records::write(ctx, l4.udp_offset + at, &found, scratch)?;
        sum += at_offset(found.sum, at);
        at += found.len();
    }
    if let Some(zone) = plan.soa {
        let (len, soa_sum) = write_soa(ctx, l4.udp_offset, at, zone, query.name_len)?;
        sum += soa_sum;
        at += len;
    }
    if query.has_opt {
        sum += write_opt(ctx, l4.udp_offset, at, query.opt_flags)?;
    }
    write_header(ctx, l4.dns_offset, query, plan)?;
    eth::swap_macs(ctx)?;
    let udp_len = UdpHdr::LEN + plan.dns_len;
    sum += ip::swap_for_answer(ctx, l3, udp_len)?;
    udp::swap_for_answer(ctx, l4, plan.dns_len)?;
    csum::write_udp(ctx, l4.udp_offset, sum)
}

/// Checksum sum of the question's type and class, read back from the packet.
#[inline(always)]
fn type_class_sum(ctx: &XdpContext, l4: &L4, query: &Query) -> Result<u64, Counter> {
    let at = UdpHdr::LEN + HEADER_LEN + query.name_len;
    let bytes: *mut [u8; QTYPE_QCLASS_LEN] = ptr_at(ctx, l4.udp_offset + at)?;
    // SAFETY: bounds checked by ptr_at.
    let b = unsafe { *bytes };
    let sum = u16::from_ne_bytes([b[0], b[1]]) as u64 + u16::from_ne_bytes([b[2], b[3]]) as u64;
    Ok(at_offset(fold(sum), at))
}

/// Grows or shrinks the packet to `new_len` bytes (dropping any link-layer padding too), keeping
/// its first `keep` bytes (headers and question) where the answer needs them.
///
/// An answer grows at the packet's head: every driver leaves `XDP_PACKET_HEADROOM` (256 bytes)
/// there, where tailroom depends on the driver (veth cuts its buffers to the frame, so growing at
/// the tail fails under load). The front is then moved forward with plain copies: one helper call
/// in all. Only an answer that outgrows the headroom (large AAAA sets) tries the tail, counted as
/// `Event::GrownAtTail`.
#[inline(always)]
fn resize(ctx: &XdpContext, new_len: usize, keep: usize) -> Result<(), Counter> {
    let old_len = len(ctx);
    if new_len == old_len {
        return Ok(());
    }
    if new_len < old_len {
        // Shrinking needs no room.
        let delta = new_len as i32 - old_len as i32;
        // SAFETY: the kernel checks the new size against the frame.
        return match unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } {
            0 => Ok(()),
            _ => Err(Counter::PassNoRoom),
        };
    }
    let growth = new_len - old_len;
    if growth >= MAX_PACKET_OFFSET || !(8..=MAX_FRONT_LEN).contains(&keep) || keep > old_len {
        return Err(Counter::PassNoRoom);
    }
    // SAFETY: the kernel checks the headroom.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(growth as i32)) } == 0 {
        return move_front(ctx, bound(growth, MAX_PACKET_OFFSET - 1), keep);
    }
    stats::count_event(Event::GrownAtTail);
    // SAFETY: the kernel checks the tailroom.
    match unsafe { bpf_xdp_adjust_tail(ctx.ctx, growth as i32) } {
        0 => Ok(()),
        _ => Err(Counter::PassNoRoom),
    }
}

/// After the packet grew by `growth` bytes at its head: moves its first `keep` bytes (now at
/// `growth`) back to the start, a word at a time. The copy runs forward and its destination is
/// below its source, so it never reads a byte it wrote; the last word, which may overlap the one
/// before it, is read first and written last.
///
/// Every offset goes through `bound` and every store is volatile: otherwise the compiler folds
/// the offsets of the loads into those of the stores, or turns the loop into a `memmove`, and
/// the verifier can no longer see each access checked.
#[inline(always)]
fn move_front(ctx: &XdpContext, growth: usize, keep: usize) -> Result<(), Counter> {
    let keep = bound(keep, MAX_FRONT_LEN - 1);
    if keep < 8 {
        return Err(Counter::PassNoRoom);
    }
    let growth = bound(growth, MAX_PACKET_OFFSET - 1);
    let tail = bound(keep - 8, MAX_FRONT_LEN - 1);
    let last: *mut u64 = ptr_at(ctx, growth + tail)?;
    // SAFETY: bounds checked by ptr_at; packet loads may be unaligned.
    let last_word = unsafe { last.read_unaligned() };
    let words = keep / 8;
    let mut w = 0;
    while w < FRONT_WORDS {
        if w >= words {
            break;
        }
        let at = bound(8 * w, MAX_FRONT_LEN - 1);
        // The destination checked first: the source's check does not imply it to the verifier,
        // though it does to the compiler, which would drop a check made second.
        let to: *mut u64 = ptr_at(ctx, at)?;
        let from: *mut u64 = ptr_at(ctx, growth + at)?;
        // SAFETY: bounds checked by ptr_at; packet accesses may be unaligned.
        unsafe { unaligned_volatile_store(to, from.read_unaligned()) };
        w += 1;
    }
    let end: *mut u64 = ptr_at(ctx, tail)?;
    // SAFETY: bounds checked by ptr_at.
    unsafe { unaligned_volatile_store(end, last_word) };
    Ok(())
}

/// Copies `len` bytes of a map value array of `CAPACITY` bytes (8-byte aligned, a multiple of
/// 8 long) into the packet at `offset`: whole words, then the last bytes one by one. Plain loads
/// and stores: a helper call costs more than such a copy (each call and return goes through the
/// kernel's mitigation thunks).
#[inline(always)]
fn copy_to_packet<const CAPACITY: usize>(
    ctx: &XdpContext,
    offset: usize,
    src: *const u8,
    len: usize,
) -> Result<(), Counter> {
    let capacity_words = CAPACITY / 8;
    // A mask at least as large as the word count, for the verifier.
    let word_mask = capacity_words.next_power_of_two() - 1;
    let words = src as *const u64;
    let whole_words = len / 8;
    let mut w = 0;
    while w < capacity_words {
        if w >= whole_words {
            break;
        }
        let dst: *mut u64 = ptr_at(ctx, offset + 8 * w)?;
        // SAFETY: w < whole_words <= CAPACITY / 8; the packet side is checked by ptr_at;
        // packet stores may be unaligned.
        unsafe { dst.write_unaligned(words.add(bound(w, word_mask)).read()) };
        w += 1;
    }
    let rest = len % 8;
    if rest == 0 {
        return Ok(());
    }
    // The check tells the verifier what `len <= CAPACITY` already implies.
    let last = bound(whole_words, word_mask);
    if last >= capacity_words {
        return Err(Counter::PassTooLarge);
    }
    // SAFETY: last < CAPACITY / 8.
    let bytes = unsafe { words.add(last).read() }.to_le_bytes();
    let mut i = 0;
    while i < 8 {
        if i >= rest {
            break;
        }
        let dst: *mut u8 = ptr_at(ctx, offset + 8 * last + i)?;
        // SAFETY: bounds checked by ptr_at.
        unsafe { *dst = bytes[i] };
        i += 1;
    }
    Ok(())
}

/// The zone's SOA record at UDP offset `at`, with its compression pointers aimed at this
/// question. Returns its length and checksum contribution.
#[inline(always)]
fn write_soa(
    ctx: &XdpContext,
    udp_offset: usize,
    at: usize,
    zone: &ZoneEntry,
    name_len: usize,
) -> Result<(usize, u64), Counter> {
    let soa_len = zone.soa_len as usize;
    if soa_len == 0 || soa_len > MAX_SOA_RR_LEN {
        return Err(Counter::PassTooLarge);
    }
    copy_to_packet::<MAX_SOA_RR_LEN>(ctx, udp_offset + at, zone.soa_rr.as_ptr(), soa_len)?;
    let mut sum = at_offset(zone.soa_csum, at);
    let patches = zone.patch_count as usize;
    let mut i = 0;
    while i < MAX_SOA_PATCHES {
        if i >= patches {
            break;
        }
        let patch = *masked(&zone.patches, i);
        let target = (name_len as i32 + patch.base as i32) as u16;
        let pointer = (POINTER_MARK | target).to_be_bytes();
        let offset = (patch.offset as usize) & (MAX_SOA_RR_LEN - 1);
        let bytes: *mut [u8; 2] = ptr_at(ctx, udp_offset + at + offset)?;
        // SAFETY: bounds checked by ptr_at.
        unsafe { *bytes = pointer };
        sum += at_offset(u16::from_ne_bytes(pointer), at + offset);
        i += 1;
    }
    Ok((soa_len, sum))
}

/// Our OPT record at UDP offset `at`: version 0, our ceiling on UDP answers, `flags` (the
/// client's DO bit), no options. Returns its checksum contribution.
#[inline(always)]
fn write_opt(ctx: &XdpContext, udp_offset: usize, at: usize, flags: u8) -> Result<u64, Counter> {
    let opt: *mut [u8; OPT_RR_LEN] = ptr_at(ctx, udp_offset + at)?;
    let payload = crate::dns::udp_max_payload().to_be_bytes();
    let type_opt = TYPE_OPT.to_be_bytes();
    let bytes = [
        0,
        type_opt[0],
        type_opt[1],
        payload[0],
        payload[1],
        0,
        0,
        flags,
        0,
        0,
        0,
    ];
    // SAFETY: bounds checked by ptr_at.
    unsafe { *opt = bytes };
    Ok(at_offset(sum16(&bytes), at))
}

/// ID kept; flags of an authoritative answer; counts of what was written.
#[inline(always)]
fn write_header(ctx: &XdpContext, at: usize, query: &Query, plan: &Plan) -> Result<(), Counter> {
    let header: *mut [u8; HEADER_LEN] = ptr_at(ctx, at)?;
    let truncation = if plan.truncated { FLAG_TC } else { 0 };
    let flags = (answer_flags(query.flags, plan.rcode) | truncation).to_be_bytes();
    let ancount = plan.records.map_or(0u16, |r| r.count as u16).to_be_bytes();
    let nscount: u16 = if plan.soa.is_some() { 1 } else { 0 };
    let arcount: u16 = if query.has_opt { 1 } else { 0 };
    // SAFETY: bounds checked by ptr_at.
    let h = unsafe { &mut *header };
    h[2] = flags[0];
    h[3] = flags[1];
    // qdcount stays 1.
    h[6] = ancount[0];
    h[7] = ancount[1];
    h[8..10].copy_from_slice(&nscount.to_be_bytes());
    h[10..12].copy_from_slice(&arcount.to_be_bytes());
    Ok(())
}
