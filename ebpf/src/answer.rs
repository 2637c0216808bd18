//! Decides the answer: which records, which rcode, whether the zone's SOA goes in the authority
//! section, and whether it fits what the client accepts.

use hostport_dns_common::{
    counters::Counter,
    dns::{OPT_RR_LEN, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A},
    entry::{EntryHead, NAME_FLAG_ROTATE, ZONE_FLAG_NEGATIVE_IN_USERSPACE, ZoneEntry, ZoneId},
    limits::{
        A_RR_LEN, AAAA_RR_LEN, MAX_SOA_GUARDS, MAX_XDP_A_RECORDS, MAX_XDP_AAAA_RECORDS,
        MAX_XDP_ANSWER_LEN, NAME_BUF_LEN,
    },
};

use crate::{
    dns::Query,
    lookup::Found,
    packet::{bound, masked},
    scratch::Scratch,
    table::Section,
};

/// The answer to write.
pub struct Plan {
    pub rcode: u8,
    /// Answer section: the records to build from the entry's addresses.
    pub records: Option<Records>,
    /// The zone whose SOA goes in the authority section (negative answers).
    pub soa: Option<&'static ZoneEntry>,
    /// Length of the whole DNS answer.
    pub dns_len: usize,
    /// What to count when it is sent.
    pub counter: Counter,
    /// Sent truncated (TC=1), with no records: a rate-limited answer's slip.
    pub truncated: bool,
    /// Where the zone's answers are counted (requests by zone).
    pub counter_slot: u32,
}

impl Plan {
    /// The same answer without its records and with TC=1 (as userspace truncates an answer
    /// too large for UDP): the header, the question and the OPT record.
    #[inline(always)]
    pub fn truncate(&mut self, query: &Query) {
        self.records = None;
        self.soa = None;
        self.dns_len = query.question_end() + if query.has_opt { OPT_RR_LEN } else { 0 };
        self.counter = Counter::SlipRateLimited;
        self.truncated = true;
    }
}

/// The answer records of one type, to be built from the hit's addresses (in the scratch space).
#[derive(Clone, Copy)]
pub struct Records {
    /// AAAA records (else A).
    pub aaaa: bool,
    pub count: usize,
    /// The address the records start from (below `count`), the others following in order and
    /// wrapping around: 0, or the query ID modulo `count` when the zone rotates answers.
    pub first: usize,
    /// Checksum sum of the records' bytes, as if they started at an even offset. Every record
    /// is an even number of bytes long: their order does not change it.
    pub sum: u16,
}

impl Records {
    /// Wire length of the records.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.count * if self.aaaa { AAAA_RR_LEN } else { A_RR_LEN }
    }
}

#[inline(always)]
pub fn plan(
    query: &Query,
    found: &Found,
    scratch: &Scratch,
    table: &Section,
) -> Result<Plan, Counter> {
    let is_aaaa = query.qtype != TYPE_A;
    let head = &scratch.head;
    let (rcode, records, soa, counter) = match found {
        Found::Name => match records_of_type(head, is_aaaa, query.id) {
            Some(records) => {
                let counter = Counter::answer(is_aaaa, true, false);
                (RCODE_NOERROR, Some(records), None, counter)
            }
            None => {
                let zone = negative_zone(query, scratch, u32::from(head.zone), table)?;
                let counter = Counter::answer(is_aaaa, false, false);
                (RCODE_NOERROR, None, Some(zone), counter)
            }
        },
        Found::NoSuchName(zone) => {
            let zone = negative_zone(query, scratch, *zone, table)?;
            let counter = Counter::answer(is_aaaa, false, true);
            (RCODE_NXDOMAIN, None, Some(zone), counter)
        }
    };
    let dns_len = query.question_end()
        + records.map_or(0, |r| r.len())
        + soa.map_or(0, |z| z.soa_len as usize)
        + if query.has_opt { OPT_RR_LEN } else { 0 };
    // Larger than the client accepts: userspace truncates it. Larger than the kernel writes
    // (never, by construction; the check also bounds the offsets for the verifier): userspace
    // sends it whole.
    if dns_len > query.udp_limit || dns_len > MAX_XDP_ANSWER_LEN {
        return Err(Counter::PassTooLarge);
    }
    Ok(Plan {
        rcode,
        records,
        soa,
        dns_len,
        counter,
        truncated: false,
        counter_slot: u32::from(head.counter_slot),
    })
}

/// The name's records of the asked type, if it has any.
#[inline(always)]
fn records_of_type(head: &EntryHead, aaaa: bool, id: u16) -> Option<Records> {
    let (count, sum, most) = if aaaa {
        (head.aaaa_count, head.aaaa_csum, MAX_XDP_AAAA_RECORDS)
    } else {
        (head.a_count, head.a_csum, MAX_XDP_A_RECORDS)
    };
    let count = count as usize;
    // An empty set is NODATA; an oversized one cannot come from the agent, and is not trusted.
    if count == 0 || count > most {
        return None;
    }
    // 0 or 1 without a branch (the verifier walks each branch's paths on).
    let rotates = usize::from(head.flags & NAME_FLAG_ROTATE) / usize::from(NAME_FLAG_ROTATE);
    let first = usize::from(id) % count * rotates;
    Some(Records {
        aaaa,
        count,
        first,
        sum,
    })
}

/// The zone entry for a negative answer, unless userspace must make it: the zone says so, or the
/// question ends in a name the SOA record would be compressed against. The zone must be the
/// question's own: its apex ends the question (so no answer can carry another zone's SOA, even
/// from a table the agent got wrong).
#[inline(always)]
fn negative_zone(
    query: &Query,
    scratch: &Scratch,
    zone_id: ZoneId,
    table: &Section,
) -> Result<&'static ZoneEntry, Counter> {
    let zone = table.zone(zone_id).ok_or(Counter::PassNoTable)?;
    if !ends_question(query, scratch, zone.apex_len as usize, zone.apex_hash) {
        return Err(Counter::PassNoTable);
    }
    if zone.flags & ZONE_FLAG_NEGATIVE_IN_USERSPACE != 0 {
        return Err(Counter::PassSoaInUserspace);
    }
    let guards = zone.guard_count as usize;
    let mut g = 0;
    while g < MAX_SOA_GUARDS {
        if g >= guards {
            break;
        }
        let len = *masked(&zone.guard_lens, g) as usize;
        if ends_question(query, scratch, len, *masked(&zone.guards, g)) {
            return Err(Counter::PassSoaGuard);
        }
        g += 1;
    }
    Ok(zone)
}

/// Whether the name of wire length `len` and hash `hash` is a suffix of the question, starting at
/// one of its labels.
#[inline(always)]
fn ends_question(query: &Query, scratch: &Scratch, len: usize, hash: u64) -> bool {
    let start = query.name_len.wrapping_sub(len);
    start < NAME_BUF_LEN
        && scratch.label_starts_at(start)
        && scratch.suffix_hash(bound(len, NAME_BUF_LEN - 1)) == hash
}
