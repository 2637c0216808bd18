//! The DNS query: header, one question, and at most one well-formed OPT record of EDNS version 0.
//! Anything else is passed: userspace parses it fully and answers with the right rcode.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::{
    counters::Counter,
    csum::{add_word, fold},
    dns::{
        CLASS_IN, EDNS_FLAG_DO, EDNS_OPTION_COOKIE, EDNS_OPTION_NSID, FLAG_QR, HEADER_LEN,
        OPCODE_MASK, OPT_RR_LEN, QTYPE_QCLASS_LEN, TYPE_A, TYPE_AAAA, TYPE_OPT,
    },
    hash::{lowercase_word, mix},
    limits::{
        CLASSIC_UDP_PAYLOAD, MAX_EDNS_OPTIONS, MAX_LABEL_LEN, MAX_LABELS, MAX_NAME_LEN,
        MAX_UDP_MAX_PAYLOAD, MAX_XDP_QUERY_LEN, NAME_BUF_LEN, NAME_WORDS,
    },
};

use crate::{
    HPD_UDP_MAX_PAYLOAD,
    packet::{be16, bound, masked_mut, ptr_at},
    scratch::{LABEL_START_WORDS, Scratch},
    udp::L4,
};

/// EDNS option code and length.
const OPTION_HEADER_LEN: usize = 4;
/// The DO bit as the high byte of the OPT flags (the low byte is zero in our answers).
pub const EDNS_FLAG_DO_BYTE: u8 = (EDNS_FLAG_DO >> 8) as u8;

/// The ceiling on UDP answers, which our OPT record advertises: what the agent set at load time
/// (`--udp-max-payload`), never below what any client accepts.
#[inline(always)]
pub fn udp_max_payload() -> u16 {
    // SAFETY: a plain read of a load-time constant; volatile so the compiler does not fold the
    // default in (the agent rewrites it before loading).
    let ceiling = unsafe { core::ptr::read_volatile(&HPD_UDP_MAX_PAYLOAD) };
    ceiling.max(CLASSIC_UDP_PAYLOAD)
}

/// What the client asked for and what it accepts.
pub struct Query {
    /// Header flags as received.
    pub flags: u16,
    /// The query's ID (rotated answers start from it).
    pub id: u16,
    /// Wire length of the question name, root byte included.
    pub name_len: usize,
    /// Labels of the question name (root excluded).
    pub labels: usize,
    pub qtype: u16,
    /// Whether the query had an OPT record (the answer then has one too).
    pub has_opt: bool,
    /// Flags byte of our OPT record: the client's DO bit echoed.
    pub opt_flags: u8,
    /// The largest UDP answer the client takes: 512 without EDNS, else its payload size capped
    /// at ours.
    pub udp_limit: usize,
    /// Checksum sum of the name as received, as if it started at an even offset.
    pub name_sum: u16,
}

impl Query {
    /// Offset, from the DNS header, of the first byte after the question.
    #[inline(always)]
    pub fn question_end(&self) -> usize {
        HEADER_LEN + self.name_len + QTYPE_QCLASS_LEN
    }
}

#[inline(always)]
pub fn parse(
    ctx: &XdpContext,
    l4: &L4,
    scratch: &mut Scratch,
    seed: u64,
) -> Result<Query, Counter> {
    if l4.dns_len > MAX_XDP_QUERY_LEN {
        return Err(Counter::PassTooLarge);
    }
    let (id, flags, has_opt) = parse_header(ctx, l4)?;
    let (name_len, labels) = walk_name(ctx, l4, scratch)?;
    let name_len = scratch.forget(name_len, MAX_NAME_LEN)?;
    let labels = scratch.forget(labels, MAX_LABELS - 1)?;
    let type_class: *mut [u8; QTYPE_QCLASS_LEN] =
        ptr_at(ctx, l4.dns_offset + HEADER_LEN + name_len)?;
    // SAFETY: bounds checked by ptr_at.
    let type_class = unsafe { *type_class };
    let qtype = be16([type_class[0], type_class[1]]);
    let qclass = be16([type_class[2], type_class[3]]);
    let question_end = HEADER_LEN + name_len + QTYPE_QCLASS_LEN;
    let (udp_limit, opt_flags) = if has_opt {
        parse_opt(ctx, l4, question_end)?
    } else if question_end != l4.dns_len {
        // Trailing bytes after the question.
        return Err(Counter::PassMalformed);
    } else {
        (CLASSIC_UDP_PAYLOAD as usize, 0)
    };
    // Whatever the client sent, the rest of the program takes one path for it.
    let udp_limit = scratch.forget(udp_limit, MAX_UDP_MAX_PAYLOAD as usize)?;
    let opt_flags = scratch.forget(opt_flags as usize, u8::MAX as usize)? as u8;
    if qclass != CLASS_IN || (qtype != TYPE_A && qtype != TYPE_AAAA) {
        return Err(Counter::PassUnsupportedType);
    }
    let name_sum = load_name(ctx, l4, scratch, name_len, seed)?;
    Ok(Query {
        id,
        flags,
        name_len,
        labels,
        qtype,
        has_opt,
        opt_flags,
        udp_limit,
        name_sum,
    })
}

/// A query: QR=0, opcode QUERY, one question, no answer or authority, at most one additional
/// record (the OPT). Returns the ID, the flags and whether an additional record follows.
#[inline(always)]
fn parse_header(ctx: &XdpContext, l4: &L4) -> Result<(u16, u16, bool), Counter> {
    if l4.dns_len < HEADER_LEN {
        return Err(Counter::PassMalformed);
    }
    let header: *mut [u8; HEADER_LEN] = ptr_at(ctx, l4.dns_offset)?;
    // SAFETY: bounds checked by ptr_at.
    let h = unsafe { *header };
    let flags = be16([h[2], h[3]]);
    let qdcount = be16([h[4], h[5]]);
    let ancount = be16([h[6], h[7]]);
    let nscount = be16([h[8], h[9]]);
    let arcount = be16([h[10], h[11]]);
    if flags & (FLAG_QR | OPCODE_MASK) != 0 || qdcount != 1 || ancount != 0 || nscount != 0 {
        return Err(Counter::PassNotAQuery);
    }
    if arcount > 1 {
        return Err(Counter::PassNotAQuery);
    }
    Ok((be16([h[0], h[1]]), flags, arcount == 1))
}

/// Walks the question name's labels in the packet: no compression pointer, labels of at most 63
/// bytes, at most 255 bytes in all, inside the message. Records where each label starts.
/// Returns the name's wire length and label count.
#[inline(always)]
fn walk_name(ctx: &XdpContext, l4: &L4, scratch: &mut Scratch) -> Result<(usize, usize), Counter> {
    let start = l4.dns_offset + HEADER_LEN;
    // Type and class must follow the name inside the message. Forgotten, so that the loop's
    // comparisons narrow `limit` and not `dns_len`, which the rest of the program uses.
    let limit = scratch.forget(
        l4.dns_len.saturating_sub(HEADER_LEN + QTYPE_QCLASS_LEN),
        MAX_XDP_QUERY_LEN,
    )?;
    clear_label_starts(scratch);
    let mut pos = 0usize;
    let mut labels = 0usize;
    let mut i = 0;
    while i < MAX_LABELS {
        if pos >= limit {
            return Err(Counter::PassMalformed);
        }
        // Two bytes, though only the first is the length: the verifier learns nothing from a
        // one-byte check (the compiler turns `p + 1 > end` into `p >= end`). The type and class
        // follow inside the message, so the second byte is always there.
        let len: *mut [u8; 2] = ptr_at(ctx, start + (pos & (NAME_BUF_LEN - 1)))?;
        // SAFETY: bounds checked by ptr_at.
        let len = unsafe { (*len)[0] } as usize;
        if len == 0 {
            return Ok((pos + 1, labels));
        }
        // Compression pointers (0xC0) and the reserved label types (0x40, 0x80) land here too.
        if len > MAX_LABEL_LEN {
            return Err(Counter::PassMalformed);
        }
        *masked_mut(&mut scratch.label_offset, labels) = pos as u8;
        *masked_mut(&mut scratch.label_starts, pos / 64) |= 1u64 << (pos % 64);
        labels += 1;
        pos += len + 1;
        // The root byte still has to fit in 255 bytes.
        if pos >= MAX_NAME_LEN {
            return Err(Counter::PassMalformed);
        }
        i += 1;
    }
    Err(Counter::PassMalformed)
}

/// Clears the label-start bitmap word by word (volatile: a memset call is not allowed here).
#[inline(always)]
fn clear_label_starts(scratch: &mut Scratch) {
    let words = scratch.label_starts.as_mut_ptr();
    let mut w = 0;
    while w < LABEL_START_WORDS {
        // SAFETY: w < LABEL_START_WORDS.
        unsafe { words.add(w).write_volatile(0) };
        w += 1;
    }
}

/// Copies the question name into scratch space, lower-cased and end-aligned at `NAME_BUF_LEN`,
/// a word at a time straight from the packet (label lengths are below 'A', so lower-casing
/// leaves them alone); fills the hash folds; returns the checksum sum of the name as received.
///
/// Words are counted from the name's end, so the front word also holds up to seven bytes before
/// the name: the DNS header's, masked off. Plain loads rather than a helper call: a call and
/// its return cost more than the copy.
///
/// The loop runs over a forgotten word count and never branches on `name_len`: a branch on it
/// inside the loop would narrow it differently at each exit, and the verifier would walk the
/// rest of the program once per exit.
#[inline(always)]
fn load_name(
    ctx: &XdpContext,
    l4: &L4,
    scratch: &mut Scratch,
    name_len: usize,
    seed: u64,
) -> Result<u16, Counter> {
    if name_len == 0 || name_len > MAX_NAME_LEN {
        return Err(Counter::PassMalformed);
    }
    let name_end = HEADER_LEN + name_len;
    // The packet word ending `8 * j` bytes before the name's end. Its offset in the message is
    // at least HEADER_LEN - 7 and below MAX_XDP_QUERY_LEN; masked so that the verifier sees it.
    let word_from_end = |j: usize| -> Result<u64, Counter> {
        let at = bound(name_end.wrapping_sub(8 * (j + 1)), MAX_XDP_QUERY_LEN - 1);
        let word: *mut u64 = ptr_at(ctx, l4.dns_offset + at)?;
        // SAFETY: bounds checked by ptr_at; packet loads may be unaligned.
        Ok(unsafe { word.read_unaligned() })
    };
    let words = scratch.name.as_mut_ptr() as *mut u64;
    let whole_words = scratch.forget(name_len / 8, NAME_WORDS - 1)?;
    let mut sum = 0u64;
    let mut hash = seed;
    scratch.fold[0] = hash;
    let mut j = 0;
    while j < NAME_WORDS {
        if j >= whole_words {
            break;
        }
        let raw = word_from_end(j)?;
        sum = add_word(sum, raw);
        let lower = lowercase_word(raw);
        // SAFETY: bounded below NAME_WORDS; the buffer is 8-byte aligned.
        unsafe {
            words
                .add(bound(NAME_WORDS - 1 - j, NAME_WORDS - 1))
                .write(lower)
        };
        hash = mix(hash, lower);
        *masked_mut(&mut scratch.fold, j + 1) = hash;
        j += 1;
    }
    // The front word: the name's first name_len % 8 bytes, after whatever lies before them.
    let front_len = name_len % 8;
    if front_len != 0 {
        let raw = word_from_end(whole_words)? & (u64::MAX << (8 * (8 - front_len)));
        sum = add_word(sum, raw);
        // SAFETY: bounded below NAME_WORDS; the buffer is 8-byte aligned.
        unsafe {
            words
                .add(bound(NAME_WORDS - 1 - whole_words, NAME_WORDS - 1))
                .write(lowercase_word(raw))
        };
    }
    // The name ends at an offset of the message of the same parity as name_len (the header is
    // 12 bytes), and so does the scratch copy.
    let folded = fold(sum);
    Ok(if name_len & 1 == 1 {
        folded.swap_bytes()
    } else {
        folded
    })
}

/// The OPT record: root owner, type OPT, EDNS version 0, options that add up exactly to its
/// length, and nothing after it. Returns the UDP size limit of the answer and our OPT flags
/// byte.
#[inline(always)]
fn parse_opt(ctx: &XdpContext, l4: &L4, question_end: usize) -> Result<(usize, u8), Counter> {
    let at = l4.dns_offset + (question_end & (MAX_XDP_QUERY_LEN * 2 - 1));
    let opt: *mut [u8; OPT_RR_LEN] = ptr_at(ctx, at)?;
    // SAFETY: bounds checked by ptr_at.
    let opt = unsafe { *opt };
    if opt[0] != 0 || be16([opt[1], opt[2]]) != TYPE_OPT {
        // TSIG, SIG(0) or something else: not ours to judge.
        return Err(Counter::PassNotAQuery);
    }
    let payload = be16([opt[3], opt[4]]);
    let extended_rcode = opt[5];
    let version = opt[6];
    let flags = be16([opt[7], opt[8]]);
    let rdlen = be16([opt[9], opt[10]]) as usize;
    if extended_rcode != 0 {
        return Err(Counter::PassMalformed);
    }
    if version != 0 {
        return Err(Counter::PassEdnsVersion);
    }
    let rdata_start = question_end + OPT_RR_LEN;
    if rdata_start + rdlen != l4.dns_len {
        return Err(Counter::PassMalformed);
    }
    walk_options(ctx, l4, rdata_start)?;
    // What the client offers, within 512 (RFC 6891 §6.2.5) and our ceiling: the same limit as
    // userspace's, so that an answer the kernel passes as too large is the one userspace
    // truncates.
    let limit = payload.clamp(CLASSIC_UDP_PAYLOAD, udp_max_payload()) as usize;
    let opt_flags = if flags & EDNS_FLAG_DO != 0 {
        EDNS_FLAG_DO_BYTE
    } else {
        0
    };
    Ok((limit, opt_flags))
}

/// Each option's header and data fit, and the last one ends the message.
#[inline(always)]
fn walk_options(ctx: &XdpContext, l4: &L4, mut offset: usize) -> Result<(), Counter> {
    let mut i = 0;
    while i < MAX_EDNS_OPTIONS {
        if offset == l4.dns_len {
            return Ok(());
        }
        if offset + OPTION_HEADER_LEN > l4.dns_len || offset > MAX_XDP_QUERY_LEN {
            return Err(Counter::PassMalformed);
        }
        let header: *mut [u8; OPTION_HEADER_LEN] = ptr_at(ctx, l4.dns_offset + offset)?;
        // SAFETY: bounds checked by ptr_at.
        let header = unsafe { *header };
        match be16([header[0], header[1]]) {
            // RFC 7873: userspace makes and checks server cookies (one secret, one code).
            EDNS_OPTION_COOKIE => return Err(Counter::PassCookie),
            // RFC 5001: the identity is userspace's to give (or not), in one place.
            EDNS_OPTION_NSID => return Err(Counter::PassNsid),
            _ => {}
        }
        offset += OPTION_HEADER_LEN + be16([header[2], header[3]]) as usize;
        if offset > l4.dns_len {
            return Err(Counter::PassMalformed);
        }
        i += 1;
    }
    if offset == l4.dns_len {
        Ok(())
    } else {
        // More options than the kernel walks: userspace parses them.
        Err(Counter::PassEdnsOptions)
    }
}
