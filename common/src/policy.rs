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

use crate::hash::avalanche;

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
    // Every key bit must reach the slot's low bits (the class and family sit at the top).
    (avalanche(key ^ seed) & (buckets as u64 - 1)) as u32
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

/// One slot of the rate table: which key it counts, and the answers counted in one second.
///
/// Every CPU charges answers to the same slots, so the count is one atomic word, `window`: the
/// second in its high half, the count in its low half. An answer either adds one to it (a
/// fetch-and-add: no count is ever lost) or, when the second has passed or another key takes the
/// slot over, swaps in a fresh window with a compare-and-swap (a CPU that loses the swap adds to
/// the window the winner made). [`step`] says which, [`decide`] what the count means; the kernel
/// and userspace run both with their own atomics.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateBucket {
    /// The key counted (written after a fresh window; a race can only misattribute one answer).
    pub key: u64,
    /// `second << 32 | count`.
    pub window: u64,
}

/// A window word: `count` answers in `second`.
pub const fn window(second: u32, count: u32) -> u64 {
    ((second as u64) << 32) | count as u64
}

/// The second a window counts.
pub const fn window_second(window: u64) -> u32 {
    (window >> 32) as u32
}

/// The answers a window counted.
pub const fn window_count(window: u64) -> u32 {
    window as u32
}

/// What charging one answer does to a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Add one to the window.
    Count,
    /// Start a fresh window (count 1) for the answer's key: the second has passed, or the slot's
    /// holder is within its budget and gives it up. A flooded holder keeps its slot: a colliding
    /// key is charged alongside it instead, and cannot reset the flood's count.
    Restart,
}

/// What charging an answer for `key` at second `now`, against `rate` a second, does to a bucket
/// holding `bucket_key` and `window`.
#[inline(always)]
pub const fn step(bucket_key: u64, window: u64, key: u64, now: u32, rate: u32) -> Step {
    // Only a later second restarts the window: a CPU whose coarse clock still reads the second
    // before counts in the window another CPU has just started (restarting it "back" would
    // hand out a second budget within one second, as a multi-CPU flood at a boundary did).
    let passed = (now.wrapping_sub(window_second(window)) as i32) > 0;
    if passed || (bucket_key != key && window_count(window) <= rate) {
        Step::Restart
    } else {
        Step::Count
    }
}

/// What happens to the answer that is the `count`-th (from 1) in its window.
#[inline(always)]
pub const fn decide(count: u32, rate: u32, slip: u32) -> Admission {
    if count <= rate {
        return Admission::Answer;
    }
    let over = count - rate;
    if slip != 0 && over.is_multiple_of(slip) {
        Admission::Slip
    } else {
        Admission::Drop
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

    /// One bucket charged by one thread: what the atomics do without races.
    fn admit(bucket: &mut RateBucket, key: u64, now: u32, rate: u32, slip: u32) -> Admission {
        let count = match step(bucket.key, bucket.window, key, now, rate) {
            Step::Restart => {
                bucket.window = window(now, 1);
                bucket.key = key;
                1
            }
            Step::Count => {
                bucket.window += 1;
                window_count(bucket.window)
            }
        };
        decide(count, rate, slip)
    }

    #[test]
    fn a_clock_a_second_behind_counts_in_the_newer_window() {
        let key = rate_key_v4([198, 18, 1, 7], RateClass::Positive);
        let newer = window(11, 3);
        assert_eq!(step(key, newer, key, 10, 4), Step::Count);
        assert_eq!(step(key, newer, key, 12, 4), Step::Restart);
        // Across the wrap of the 32-bit second.
        assert_eq!(step(key, window(0, 3), key, u32::MAX, 4), Step::Count);
        assert_eq!(step(key, window(u32::MAX, 3), key, 0, 4), Step::Restart);
    }

    #[test]
    fn a_bucket_answers_its_rate_then_slips_every_nth() {
        let mut bucket = RateBucket::default();
        let key = rate_key_v4([198, 18, 1, 7], RateClass::Positive);
        let got: std::vec::Vec<Admission> =
            (0..9).map(|_| admit(&mut bucket, key, 5, 4, 2)).collect();
        use Admission::*;
        assert_eq!(
            got,
            [Answer, Answer, Answer, Answer, Drop, Slip, Drop, Slip, Drop]
        );
        // The next second starts a new budget.
        assert_eq!(admit(&mut bucket, key, 6, 4, 2), Answer);
    }

    #[test]
    fn slip_zero_drops_every_limited_answer() {
        let mut bucket = RateBucket::default();
        let key = rate_key_v6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8],
            RateClass::Negative,
        );
        for _ in 0..3 {
            assert_eq!(admit(&mut bucket, key, 1, 3, 0), Admission::Answer);
        }
        for _ in 0..10 {
            assert_eq!(admit(&mut bucket, key, 1, 3, 0), Admission::Drop);
        }
    }

    #[test]
    fn a_colliding_key_cannot_reset_a_flooded_bucket() {
        let mut bucket = RateBucket::default();
        let flooded = rate_key_v4([198, 18, 1, 0], RateClass::Positive);
        let other = rate_key_v4([198, 19, 1, 0], RateClass::Positive);
        for _ in 0..5 {
            admit(&mut bucket, flooded, 1, 2, 0);
        }
        assert_eq!(admit(&mut bucket, other, 1, 2, 0), Admission::Drop);
        assert_eq!(admit(&mut bucket, flooded, 1, 2, 0), Admission::Drop);
        // Within its budget, a holder gives the slot up.
        let mut quiet = RateBucket::default();
        admit(&mut quiet, flooded, 1, 2, 0);
        assert_eq!(admit(&mut quiet, other, 1, 2, 0), Admission::Answer);
        assert_eq!(quiet.key, other);
    }

    #[test]
    fn a_window_keeps_its_second_and_count_apart() {
        let w = window(0xdead_beef, 7);
        assert_eq!((window_second(w), window_count(w)), (0xdead_beef, 7));
        assert_eq!(window_count(w + 1), 8);
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
