//! Which clients are served and how much: the client allow-list, the prefixes exempt from
//! response rate limiting, and the rate limiter itself.
//!
//! The agent fixes a [`ClientPolicy`] when it loads the program (a global) and writes the
//! prefixes into two LPM tries, one per family, each prefix valued with what it grants
//! ([`PREFIX_ALLOWED`], [`PREFIX_EXEMPT`]). The tries hold, for every configured prefix, the
//! grants of *every* configured prefix that contains it, so the longest match alone says what an
//! address gets: one lookup per packet.
//!
//! Rate limiting counts answers per source prefix (/24 IPv4, /56 IPv6) and per kind of answer
//! ([`RateClass`]), per second, in a fixed table of [`RateBucket`]s indexed by a keyed hash: its
//! memory is the same whatever the number of sources. Both sides decide with
//! [`RateBucket::admit`]; each counts the answers it sends itself.

/// Clients must match an allowed prefix.
pub const POLICY_ACL: u32 = 1 << 0;
/// Clients outside the allow-list are passed to userspace, which answers REFUSED, instead of
/// being dropped.
pub const POLICY_ACL_REFUSE: u32 = 1 << 1;
/// Answers are rate limited.
pub const POLICY_RATE_LIMIT: u32 = 1 << 2;
/// The prefix tries hold entries (an allow-list or exempt prefixes): clients are looked up.
pub const POLICY_PREFIXES: u32 = 1 << 3;

/// A trie value: the prefix is on the allow-list.
pub const PREFIX_ALLOWED: u32 = 1 << 0;
/// A trie value: the prefix is exempt from rate limiting.
pub const PREFIX_EXEMPT: u32 = 1 << 1;

/// Source prefix length rate limiting counts IPv4 clients by (Knot's and BIND's default).
pub const RATE_PREFIX_V4: u32 = 24;
/// Source prefix length rate limiting counts IPv6 clients by (Knot's default).
pub const RATE_PREFIX_V6: u32 = 56;

/// The policy the XDP program enforces, set by the agent at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientPolicy {
    /// `POLICY_*` bits.
    pub flags: u32,
    /// Positive answers per second per source prefix.
    pub positive_per_second: u32,
    /// NXDOMAIN and NODATA answers per second per source prefix.
    pub negative_per_second: u32,
    /// Every `slip`-th limited answer goes out truncated (TC=1); 0: every limited answer is
    /// dropped.
    pub slip: u32,
}

impl ClientPolicy {
    /// Everyone is served, without limits.
    pub const OPEN: Self = Self {
        flags: 0,
        positive_per_second: 0,
        negative_per_second: 0,
        slip: 0,
    };

    pub const fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

/// What kind of answer is counted: each has its own budget (RFC-less, as Knot and BIND do it).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateClass {
    Positive = 0,
    /// NXDOMAIN and NODATA: what random-name floods draw.
    Negative = 1,
    /// Every error rcode (REFUSED, FORMERR, SERVFAIL, ...).
    Error = 2,
}

/// The bucket key of an IPv4 source: its /24 and the class.
pub const fn rate_key_v4(addr: [u8; 4], class: RateClass) -> u64 {
    let prefix = ((addr[0] as u64) << 16) | ((addr[1] as u64) << 8) | addr[2] as u64;
    (1 << 63) | ((class as u64) << 56) | prefix
}

/// The bucket key of an IPv6 source: its /56 and the class.
pub const fn rate_key_v6(addr: [u8; 16], class: RateClass) -> u64 {
    let mut prefix = 0u64;
    let mut i = 0;
    while i < (RATE_PREFIX_V6 / 8) as usize {
        prefix = (prefix << 8) | addr[i] as u64;
        i += 1;
    }
    // Bit 63 clear (IPv6); the class goes above the 56 prefix bits.
    ((class as u64) << 56) | prefix
}

/// The table slot of a bucket key, with the table's secret seed (so that nobody can aim
/// sources at one slot). `buckets` is a power of two.
pub const fn bucket_index(key: u64, seed: u64, buckets: u32) -> u32 {
    // Every key bit must reach the slot's low bits (the class and family sit at the top): a
    // full avalanche (MurmurHash3's finaliser) over the keyed word.
    let mut x = key ^ seed;
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x & (buckets as u64 - 1)) as u32
}

/// What happens to one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Within the budget: answered.
    Answer,
    /// Over the budget, its turn to slip: answered truncated (TC=1, no records), so that a real
    /// client retries over TCP, which is not limited.
    Slip,
    /// Over the budget: not answered.
    Drop,
}

/// One slot of the rate table: the answers one key got in one second.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateBucket {
    pub key: u64,
    /// Seconds since boot (the kernel's clock) this count is for.
    pub second: u32,
    pub count: u32,
}

impl RateBucket {
    /// Charges one answer for `key` at second `now` against `rate` answers a second.
    ///
    /// A slot another key holds is taken over only when that key's count is stale or within its
    /// budget: a flooded prefix cannot be reset by a colliding one, which is charged alongside it
    /// instead. Two CPUs charging one slot at once can lose a count; the limit is then exceeded by
    /// at most one answer per racing CPU.
    #[inline(always)]
    pub fn admit(&mut self, key: u64, now: u32, rate: u32, slip: u32) -> Admission {
        if self.second != now {
            self.key = key;
            self.second = now;
            self.count = 0;
        } else if self.key != key && self.count <= rate {
            self.key = key;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        if self.count <= rate {
            return Admission::Answer;
        }
        let over = self.count - rate;
        if slip != 0 && over.is_multiple_of(slip) {
            Admission::Slip
        } else {
            Admission::Drop
        }
    }
}

const _: () = assert!(core::mem::size_of::<ClientPolicy>() == 16);
const _: () = assert!(core::mem::size_of::<RateBucket>() == 16);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::ClientPolicy {}
    unsafe impl aya::Pod for super::RateBucket {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_answers_its_rate_then_slips_every_nth() {
        let mut bucket = RateBucket::default();
        let key = rate_key_v4([198, 18, 1, 7], RateClass::Positive);
        let got: std::vec::Vec<Admission> = (0..9).map(|_| bucket.admit(key, 5, 4, 2)).collect();
        use Admission::*;
        assert_eq!(
            got,
            [Answer, Answer, Answer, Answer, Drop, Slip, Drop, Slip, Drop]
        );
        // The next second starts a new budget.
        assert_eq!(bucket.admit(key, 6, 4, 2), Answer);
    }

    #[test]
    fn slip_zero_drops_every_limited_answer() {
        let mut bucket = RateBucket::default();
        let key = rate_key_v6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8],
            RateClass::Negative,
        );
        for _ in 0..3 {
            assert_eq!(bucket.admit(key, 1, 3, 0), Admission::Answer);
        }
        for _ in 0..10 {
            assert_eq!(bucket.admit(key, 1, 3, 0), Admission::Drop);
        }
    }

    #[test]
    fn a_colliding_key_cannot_reset_a_flooded_bucket() {
        let mut bucket = RateBucket::default();
        let flooded = rate_key_v4([198, 18, 1, 0], RateClass::Positive);
        let other = rate_key_v4([198, 19, 1, 0], RateClass::Positive);
        for _ in 0..5 {
            bucket.admit(flooded, 1, 2, 0);
        }
        assert_eq!(bucket.admit(other, 1, 2, 0), Admission::Drop);
        assert_eq!(bucket.admit(flooded, 1, 2, 0), Admission::Drop);
        // Within its budget, a holder gives the slot up.
        let mut quiet = RateBucket::default();
        quiet.admit(flooded, 1, 2, 0);
        assert_eq!(quiet.admit(other, 1, 2, 0), Admission::Answer);
        assert_eq!(quiet.key, other);
    }

    #[test]
    fn classes_and_families_of_one_prefix_land_in_different_slots() {
        let v4 = [198, 18, 5, 1];
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&v4);
        for seed in [0u64, 1, 0xdead_beef] {
            let slots = [
                bucket_index(rate_key_v4(v4, RateClass::Positive), seed, 65_536),
                bucket_index(rate_key_v4(v4, RateClass::Negative), seed, 65_536),
                bucket_index(rate_key_v4(v4, RateClass::Error), seed, 65_536),
                bucket_index(rate_key_v6(v6, RateClass::Positive), seed, 65_536),
            ];
            for i in 0..slots.len() {
                for j in i + 1..slots.len() {
                    assert_ne!(slots[i], slots[j], "seed {seed}: {slots:?}");
                }
            }
        }
    }

    #[test]
    fn keys_differ_by_family_prefix_and_class_only() {
        let a = rate_key_v4([198, 18, 1, 7], RateClass::Positive);
        assert_eq!(a, rate_key_v4([198, 18, 1, 200], RateClass::Positive));
        assert_ne!(a, rate_key_v4([198, 18, 2, 7], RateClass::Positive));
        assert_ne!(a, rate_key_v4([198, 18, 1, 7], RateClass::Negative));
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[198, 18, 1, 0]);
        assert_ne!(a, rate_key_v6(v6, RateClass::Positive));
        let mut within56 = v6;
        within56[6] = 0xff;
        assert_ne!(
            rate_key_v6(v6, RateClass::Positive),
            rate_key_v6(within56, RateClass::Positive)
        );
        let mut beyond56 = v6;
        beyond56[7] = 0xff;
        assert_eq!(
            rate_key_v6(v6, RateClass::Positive),
            rate_key_v6(beyond56, RateClass::Positive)
        );
    }
}
