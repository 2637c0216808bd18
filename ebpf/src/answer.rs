//! Decides the answer: which records, which rcode, whether the zone's SOA goes in the authority
//! section, and whether it fits what the client accepts.

use hostport_dns_common::{
    counters::Counter,
    dns::{OPT_RR_LEN, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A},
    generation::zone_slot,
    limits::{
        A_RR_LEN, A_RRS_CAPACITY, AAAA_RR_LEN, AAAA_RRS_CAPACITY, MAX_SOA_GUARDS, NAME_BUF_LEN,
        ZONES_CAPACITY,
    },
    record::{
        NAME_FLAG_COLLISION, NAME_FLAG_LARGE_SET, NameEntry, ZONE_FLAG_NEGATIVE_IN_USERSPACE,
        ZoneEntry, ZoneId,
    },
};

use crate::{
    HPD_ZONES,
    dns::Query,
    lookup::Found,
    packet::{bound, masked},
    scratch::Scratch,
    table::Table,
};

/// The answer to write.
pub struct Plan {
    pub rcode: u8,
    /// Answer section: bytes in the name entry and how many records they hold.
    pub records: Option<Records>,
    /// The zone whose SOA goes in the authority section (negative answers).
    pub soa: Option<&'static ZoneEntry>,
    /// Length of the whole DNS answer.
    pub dns_len: usize,
    /// What to count when it is sent.
    pub counter: Counter,
    /// Sent truncated (TC=1), with no records: a rate-limited answer's slip.
    pub truncated: bool,
    /// The zone the question fell in (requests by zone).
    pub zone: ZoneId,
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

#[derive(Clone, Copy)]
pub struct Records {
    pub bytes: *const u8,
    pub len: usize,
    pub count: u16,
    /// Checksum sum of the bytes, as if they started at an even offset.
    pub sum: u16,
}

#[inline(always)]
pub fn plan(
    query: &Query,
    found: &Found,
    scratch: &Scratch,
    table: Table,
) -> Result<Plan, Counter> {
    let zone = match found {
        Found::Name(entry) => entry.zone_id,
        Found::NoSuchName(zone_id) => *zone_id,
    };
    let (rcode, records, soa, counter) = match found {
        Found::Name(entry) => {
            if entry.flags & NAME_FLAG_COLLISION != 0 {
                return Err(Counter::PassCollision);
            }
            if entry.flags & NAME_FLAG_LARGE_SET != 0 {
                return Err(Counter::PassLargeSet);
            }
            match records_of_type(entry, query.qtype) {
                Some((records, counter)) => (RCODE_NOERROR, Some(records), None, counter),
                None => {
                    let zone = negative_zone(query, scratch, entry.zone_id, table)?;
                    let counter = Counter::answer(query.qtype != TYPE_A, false, false);
                    (RCODE_NOERROR, None, Some(zone), counter)
                }
            }
        }
        Found::NoSuchName(zone_id) => {
            let zone = negative_zone(query, scratch, *zone_id, table)?;
            let counter = Counter::answer(query.qtype != TYPE_A, false, true);
            (RCODE_NXDOMAIN, None, Some(zone), counter)
        }
    };
    let dns_len = query.question_end()
        + records.map_or(0, |r| r.len)
        + soa.map_or(0, |z| z.soa_len as usize)
        + if query.has_opt { OPT_RR_LEN } else { 0 };
    if dns_len > query.udp_limit {
        return Err(Counter::PassTooLarge);
    }
    Ok(Plan {
        rcode,
        records,
        soa,
        dns_len,
        counter,
        truncated: false,
        zone,
    })
}

/// The name's records of the asked type, if it has any.
#[inline(always)]
fn records_of_type(entry: &'static NameEntry, qtype: u16) -> Option<(Records, Counter)> {
    let (bytes, len, sum, rr_len, capacity, counter) = if qtype == TYPE_A {
        let a = (entry.a_rrs.as_ptr(), entry.a_len as usize, entry.a_csum);
        (a.0, a.1, a.2, A_RR_LEN, A_RRS_CAPACITY, Counter::AnswerA)
    } else {
        let aaaa = (
            entry.aaaa_rrs.as_ptr(),
            entry.aaaa_len as usize,
            entry.aaaa_csum,
        );
        (
            aaaa.0,
            aaaa.1,
            aaaa.2,
            AAAA_RR_LEN,
            AAAA_RRS_CAPACITY,
            Counter::AnswerAaaa,
        )
    };
    // An empty set is NODATA; an oversized one cannot come from the agent, and is not trusted.
    if len == 0 || len > capacity {
        return None;
    }
    Some((
        Records {
            bytes,
            len,
            count: (len / rr_len) as u16,
            sum,
        },
        counter,
    ))
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
    table: Table,
) -> Result<&'static ZoneEntry, Counter> {
    if zone_id >= ZONES_CAPACITY {
        return Err(Counter::PassNoTable);
    }
    let zone = HPD_ZONES
        .get_ptr(zone_slot(table.generation, zone_id))
        .ok_or(Counter::PassNoTable)?;
    // SAFETY: the slot belongs to the generation this run reads, which the agent does not write
    // until every run that may read it has ended.
    let zone: &'static ZoneEntry = unsafe { &*zone };
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
