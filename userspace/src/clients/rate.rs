//! Response rate limiting on the userspace path: the same buckets, atomics and decision as the
//! kernel's (`hostport_dns_common::policy`), in a table of the same fixed size. Each path counts the
//! answers it sends; a prefix whose queries both paths answer gets each path's budget.

use std::{
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use hostport_dns_common::{
    limits::RATE_BUCKETS,
    policy::{
        Admission, RateClass, Step, bucket_index, decide, rate_key_v4, rate_key_v6, step, window,
        window_count,
    },
};

use crate::clients::{RateLimit, prefixes::canonical};

pub struct RateLimiter {
    limits: RateLimit,
    seed: u64,
    started: Instant,
    buckets: Vec<Bucket>,
}

/// A `hostport_dns_common::policy::RateBucket` with atomics: the key counted, and the window.
#[derive(Default)]
struct Bucket {
    key: AtomicU64,
    window: AtomicU64,
}

impl RateLimiter {
    /// A limiter for `limits` (which must be enabled), its slots keyed by a random seed.
    pub fn new(limits: RateLimit) -> Self {
        Self {
            limits,
            seed: hostport_dns_core::cookies::random_u64(),
            started: Instant::now(),
            buckets: (0..RATE_BUCKETS).map(|_| Bucket::default()).collect(),
        }
    }

    /// Charges one answer of `class` to `client`'s prefix.
    pub fn admit(&self, client: IpAddr, class: RateClass) -> Admission {
        let key = match canonical(client) {
            IpAddr::V4(a) => rate_key_v4(a.octets(), class),
            IpAddr::V6(a) => rate_key_v6(a.octets(), class),
        };
        let rate = match class {
            RateClass::Positive => self.limits.responses_per_second,
            RateClass::Negative => self.limits.negative_per_second,
            RateClass::Error => self.limits.errors_per_second,
        };
        let now = self.started.elapsed().as_secs() as u32;
        let bucket = &self.buckets[bucket_index(key, self.seed, RATE_BUCKETS) as usize];
        let current = bucket.window.load(Ordering::Relaxed);
        let restart = step(bucket.key.load(Ordering::Relaxed), current, key, now, rate)
            == Step::Restart
            && bucket
                .window
                .compare_exchange(current, window(now, 1), Ordering::SeqCst, Ordering::Relaxed)
                .is_ok();
        let count = if restart {
            bucket.key.store(key, Ordering::Relaxed);
            1
        } else {
            // Counting on, or another thread started the window just now: count in it.
            window_count(bucket.window.fetch_add(1, Ordering::SeqCst)).wrapping_add(1)
        };
        decide(count, rate, self.limits.slip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_limited_and_its_neighbour_is_not() {
        let limiter = RateLimiter::new(RateLimit {
            responses_per_second: 5,
            negative_per_second: 5,
            errors_per_second: 5,
            slip: 2,
            exempt: Vec::new(),
        });
        let flood: IpAddr = "198.18.5.1".parse().unwrap();
        let same_24: IpAddr = "198.18.5.200".parse().unwrap();
        let other: IpAddr = "198.18.6.1".parse().unwrap();
        let answered = (0..100)
            .filter(|i| {
                let from = if i % 2 == 0 { flood } else { same_24 };
                limiter.admit(from, RateClass::Positive) == Admission::Answer
            })
            .count();
        // Within one second (or across one boundary): one or two budgets.
        assert!((5..=10).contains(&answered), "{answered}");
        assert_eq!(limiter.admit(other, RateClass::Positive), Admission::Answer);
        assert_eq!(limiter.admit(flood, RateClass::Negative), Admission::Answer);
    }
}
