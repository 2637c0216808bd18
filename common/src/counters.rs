//! What the XDP program counts, per CPU: every answer by type and kind, every pass by reason.
//! The index of a counter in the `HPD_COUNTERS` array is its discriminant; the agent reads the
//! same enum to name the metrics.

/// One slot of the per-CPU counter array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A query answered with A records.
    AnswerA = 0,
    /// A query answered with AAAA records.
    AnswerAaaa,
    /// A or AAAA for a name that exists without that type: NOERROR, no answer, SOA.
    AnswerNodata,
    /// A or AAAA for a name that does not exist in a served zone: NXDOMAIN, SOA.
    AnswerNxdomain,
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
    /// The name or zone is marked for userspace (large record set, hash collision, SOA
    /// compression that depends on the question).
    PassUserspace,
    /// The answer would exceed what the client accepts (userspace truncates it).
    PassTooLarge,
    /// The packet could not be grown to hold the answer.
    PassNoRoom,
}

/// Number of counter slots.
pub const COUNTER_SLOTS: u32 = Counter::PassNoRoom as u32 + 1;

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; COUNTER_SLOTS as usize] = [
        Counter::AnswerA,
        Counter::AnswerAaaa,
        Counter::AnswerNodata,
        Counter::AnswerNxdomain,
        Counter::PassNotIp,
        Counter::PassNotDns,
        Counter::PassIpOptions,
        Counter::PassNotForThisHost,
        Counter::PassMalformed,
        Counter::PassNotAQuery,
        Counter::PassEdnsVersion,
        Counter::PassUnsupportedType,
        Counter::PassNotInZone,
        Counter::PassUserspace,
        Counter::PassTooLarge,
        Counter::PassNoRoom,
    ];

    /// Whether the program answered (XDP_TX) rather than passed.
    pub const fn is_answer(self) -> bool {
        (self as u32) <= Counter::AnswerNxdomain as u32
    }

    /// Metric label: the answer kind or the pass reason.
    pub const fn label(self) -> &'static str {
        match self {
            Counter::AnswerA => "a",
            Counter::AnswerAaaa => "aaaa",
            Counter::AnswerNodata => "nodata",
            Counter::AnswerNxdomain => "nxdomain",
            Counter::PassNotIp => "not_ip",
            Counter::PassNotDns => "not_dns",
            Counter::PassIpOptions => "ip_options",
            Counter::PassNotForThisHost => "not_for_this_host",
            Counter::PassMalformed => "malformed",
            Counter::PassNotAQuery => "not_a_query",
            Counter::PassEdnsVersion => "edns_version",
            Counter::PassUnsupportedType => "unsupported_type",
            Counter::PassNotInZone => "not_in_zone",
            Counter::PassUserspace => "userspace",
            Counter::PassTooLarge => "too_large",
            Counter::PassNoRoom => "no_room",
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
}
