//! What the XDP program counts, per CPU: every answer by type and kind, every pass by reason.
//! The index of a counter in the `HPD_COUNTERS` array is its discriminant; the agent reads the
//! same enum to name the metrics.

/// One slot of the per-CPU counter array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// An A query answered with A records.
    AnswerA = 0,
    /// An AAAA query answered with AAAA records.
    AnswerAaaa,
    /// A for a name that exists without A records: NOERROR, no answer, SOA.
    NodataA,
    /// AAAA for a name that exists without AAAA records.
    NodataAaaa,
    /// A for a name that does not exist in a served zone: NXDOMAIN, SOA.
    NxdomainA,
    /// AAAA for a name that does not exist in a served zone.
    NxdomainAaaa,
    /// Not IPv4 or IPv6 (after at most one VLAN tag).
    PassNotIp,
    /// Not UDP to the DNS port.
    PassNotDns,
    /// IPv4 options or fragments, or IPv6 extension headers.
    PassIpOptions,
    /// Addressed to an address that is not the node's own (a pod behind it, a broadcast).
    PassNotForThisHost,
    /// Truncated or inconsistent headers, a malformed question or OPT record, trailing bytes.
    PassMalformed,
    /// A response, an opcode other than QUERY, or sections other than one question and an OPT.
    PassNotAQuery,
    /// EDNS version other than 0 (userspace answers BADVERS).
    PassEdnsVersion,
    /// A query type other than A and AAAA, or a class other than IN.
    PassUnsupportedType,
    /// The name is not in a served zone.
    PassNotInZone,
    /// The name's hash matches another name's (the kernel found an entry for another name, or
    /// the agent marked the name): userspace tells them apart.
    PassCollision,
    /// The name's record set is larger than a name entry holds.
    PassLargeSet,
    /// The question ends in a name the zone's SOA record is compressed against (`x.ns.<zone>`):
    /// userspace compresses it.
    PassSoaGuard,
    /// The zone's negative answers are made by userspace (its SOA record does not fit a zone
    /// entry, or compresses differently depending on the question).
    PassSoaInUserspace,
    /// The query has more EDNS options than the kernel walks.
    PassEdnsOptions,
    /// No complete generation of the table is in place yet (the agent has not published), or a
    /// name's zone does not match the question: userspace answers.
    PassNoTable,
    /// The query or its answer is larger than the kernel handles or the client accepts
    /// (userspace answers, truncating if needed).
    PassTooLarge,
    /// The packet could not be grown to hold the answer.
    PassNoRoom,
    /// The query carries a DNS cookie: userspace checks it and answers with the server cookie.
    PassCookie,
    /// The client is not on the allow-list, which is set to refuse: userspace answers REFUSED.
    PassNotAllowed,
    /// A source that cannot have sent the query (loopback, unspecified, multicast or broadcast,
    /// one of this host's own addresses, from another interface than lo), or a frame sent to a
    /// broadcast or multicast MAC address: dropped, never answered.
    DropMartian,
    /// The client is not on the allow-list: dropped.
    DropNotAllowed,
    /// Over its rate limit: dropped.
    DropRateLimited,
    /// Over its rate limit, its turn to slip: answered truncated (TC=1, no records).
    SlipRateLimited,
    /// The query asks for the server's NSID (RFC 5001): userspace answers it, with the NSID
    /// when it is on, so that both paths send the same bytes.
    PassNsid,
    /// The lease of the agent that wrote the table ran out (`Generation::lease`): no agent
    /// vouches for it any more (uninstalled, or stopped for longer than the lease).
    PassNoAgent,
}

/// Number of counter slots.
pub const COUNTER_SLOTS: u32 = Counter::PassNoAgent as u32 + 1;

/// Things the program counts that are no outcome of their own: a path an answer took. Their
/// slots follow the outcome counters' in `HPD_COUNTERS` ([`Event::slot`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An answer could not grow at the packet's head (too little headroom) and grew at its tail:
    /// the fallback, which fails on drivers that size buffers to the frame under load.
    GrownAtTail = 0,
    /// The active generation changed between a run's two reads of it: the run passed the packet
    /// (counted as `PassNoTable`) rather than read a generation being rewritten.
    GenerationRace,
}

impl Event {
    pub const ALL: [Event; EVENT_SLOTS as usize] = [Event::GrownAtTail, Event::GenerationRace];

    /// Its slot in `HPD_COUNTERS`.
    pub const fn slot(self) -> u32 {
        COUNTER_SLOTS + self as u32
    }

    /// Metric label.
    pub const fn label(self) -> &'static str {
        match self {
            Event::GrownAtTail => "grown_at_tail",
            Event::GenerationRace => "generation_race",
        }
    }
}

/// Number of event slots.
pub const EVENT_SLOTS: u32 = Event::GenerationRace as u32 + 1;

/// Slots of `HPD_COUNTERS`: the outcomes, then the events.
pub const ALL_COUNTER_SLOTS: u32 = COUNTER_SLOTS + EVENT_SLOTS;

/// Slots of the per-zone answer counters: one per counter slot a zone holds (the agent hands
/// out at most `ZONES_CAPACITY`) and query type (A, AAAA).
pub const ZONE_COUNTER_SLOTS: u32 = crate::limits::ZONES_CAPACITY * 2;

/// The slot counting the answers to `qtype_is_aaaa` queries in the zone holding counter slot
/// `counter_slot` (`entry::ZoneEntry::counter_slot`).
pub const fn zone_counter_slot(counter_slot: u32, qtype_is_aaaa: bool) -> u32 {
    counter_slot * 2 + qtype_is_aaaa as u32
}

/// What the program does with a packet a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Sent back (XDP_TX).
    Answered,
    /// Up the stack (XDP_PASS).
    Passed,
    /// Dropped (XDP_DROP).
    Dropped,
}

/// What an answer counter stands for: the query type and the kind of answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerKind {
    pub qtype: &'static str,
    /// The rcode sent.
    pub rcode: &'static str,
    /// Whether the answer section held records (NOERROR with data) or not (NODATA/NXDOMAIN).
    pub with_data: bool,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; COUNTER_SLOTS as usize] = [
        Counter::AnswerA,
        Counter::AnswerAaaa,
        Counter::NodataA,
        Counter::NodataAaaa,
        Counter::NxdomainA,
        Counter::NxdomainAaaa,
        Counter::PassNotIp,
        Counter::PassNotDns,
        Counter::PassIpOptions,
        Counter::PassNotForThisHost,
        Counter::PassMalformed,
        Counter::PassNotAQuery,
        Counter::PassEdnsVersion,
        Counter::PassUnsupportedType,
        Counter::PassNotInZone,
        Counter::PassCollision,
        Counter::PassLargeSet,
        Counter::PassSoaGuard,
        Counter::PassSoaInUserspace,
        Counter::PassEdnsOptions,
        Counter::PassNoTable,
        Counter::PassTooLarge,
        Counter::PassNoRoom,
        Counter::PassCookie,
        Counter::PassNotAllowed,
        Counter::DropMartian,
        Counter::DropNotAllowed,
        Counter::DropRateLimited,
        Counter::SlipRateLimited,
        Counter::PassNsid,
        Counter::PassNoAgent,
    ];

    /// What happens to the packet.
    pub const fn verdict(self) -> Verdict {
        match self {
            Counter::DropMartian | Counter::DropNotAllowed | Counter::DropRateLimited => {
                Verdict::Dropped
            }
            Counter::SlipRateLimited => Verdict::Answered,
            other if other.answer_kind().is_some() => Verdict::Answered,
            _ => Verdict::Passed,
        }
    }

    /// The counter of an answer to `qtype` (A or AAAA): with records, NODATA, or NXDOMAIN.
    pub const fn answer(is_aaaa: bool, with_data: bool, nxdomain: bool) -> Counter {
        match (is_aaaa, with_data, nxdomain) {
            (false, true, _) => Counter::AnswerA,
            (true, true, _) => Counter::AnswerAaaa,
            (false, false, false) => Counter::NodataA,
            (true, false, false) => Counter::NodataAaaa,
            (false, false, true) => Counter::NxdomainA,
            (true, false, true) => Counter::NxdomainAaaa,
        }
    }

    /// For an answer counter, what it counts; `None` for a pass reason.
    pub const fn answer_kind(self) -> Option<AnswerKind> {
        let (qtype, rcode, with_data) = match self {
            Counter::AnswerA => ("A", "NOERROR", true),
            Counter::AnswerAaaa => ("AAAA", "NOERROR", true),
            Counter::NodataA => ("A", "NOERROR", false),
            Counter::NodataAaaa => ("AAAA", "NOERROR", false),
            Counter::NxdomainA => ("A", "NXDOMAIN", false),
            Counter::NxdomainAaaa => ("AAAA", "NXDOMAIN", false),
            _ => return None,
        };
        Some(AnswerKind {
            qtype,
            rcode,
            with_data,
        })
    }

    /// Metric label of a pass reason (or of an answer kind).
    pub const fn label(self) -> &'static str {
        match self {
            Counter::AnswerA => "a",
            Counter::AnswerAaaa => "aaaa",
            Counter::NodataA => "nodata_a",
            Counter::NodataAaaa => "nodata_aaaa",
            Counter::NxdomainA => "nxdomain_a",
            Counter::NxdomainAaaa => "nxdomain_aaaa",
            Counter::PassNotIp => "not_ip",
            Counter::PassNotDns => "not_dns",
            Counter::PassIpOptions => "ip_options",
            Counter::PassNotForThisHost => "not_for_this_host",
            Counter::PassMalformed => "malformed",
            Counter::PassNotAQuery => "not_a_query",
            Counter::PassEdnsVersion => "edns_version",
            Counter::PassUnsupportedType => "unsupported_type",
            Counter::PassNotInZone => "not_in_zone",
            Counter::PassCollision => "collision",
            Counter::PassLargeSet => "large_set",
            Counter::PassSoaGuard => "soa_guard",
            Counter::PassSoaInUserspace => "soa_in_userspace",
            Counter::PassEdnsOptions => "edns_options",
            Counter::PassNoTable => "no_table",
            Counter::PassTooLarge => "too_large",
            Counter::PassNoRoom => "no_room",
            Counter::PassCookie => "cookie",
            Counter::PassNotAllowed => "refused_client",
            Counter::DropMartian => "martian",
            Counter::DropNotAllowed => "not_allowed",
            Counter::DropRateLimited => "rate_limited",
            Counter::SlipRateLimited => "slipped",
            Counter::PassNsid => "nsid",
            Counter::PassNoAgent => "no_agent",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_slot_in_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn answer_counters_say_what_they_count() {
        for is_aaaa in [false, true] {
            for (with_data, nxdomain) in [(true, false), (false, false), (false, true)] {
                let kind = Counter::answer(is_aaaa, with_data, nxdomain)
                    .answer_kind()
                    .unwrap();
                assert_eq!(kind.qtype, if is_aaaa { "AAAA" } else { "A" });
                assert_eq!(kind.with_data, with_data);
                assert_eq!(kind.rcode, if nxdomain { "NXDOMAIN" } else { "NOERROR" });
            }
        }
        assert!(Counter::PassNoRoom.answer_kind().is_none());
    }

    #[test]
    fn verdicts_follow_the_names() {
        for c in Counter::ALL {
            let expected = match c.verdict() {
                Verdict::Dropped => "Drop",
                Verdict::Passed => "Pass",
                Verdict::Answered => "",
            };
            let name = std::format!("{c:?}");
            if expected.is_empty() {
                assert!(
                    !name.starts_with("Pass") && !name.starts_with("Drop"),
                    "{name}"
                );
            } else {
                assert!(name.starts_with(expected), "{name}");
            }
        }
    }
}
