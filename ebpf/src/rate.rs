//! Response rate limiting: each answer is charged to its client's prefix and kind
//! (`hostport_dns_common::policy`); over the budget it is dropped, or every `slip`-th one is sent
//! truncated, so that a real client retries over TCP. Every CPU charges the same buckets, with
//! atomics: no count is lost, however many CPUs a flood spreads over.

use aya_ebpf::helpers::generated::bpf_ktime_get_coarse_ns;
use hostport_dns_common::{
    counters::Counter,
    limits::RATE_BUCKETS,
    policy::{
        Admission, POLICY_RATE_LIMIT, RateClass, Step, bucket_index, decide, rate_key_v4,
        rate_key_v6, step, window, window_count,
    },
};

use crate::{
    HPD_RATE, answer::Plan, atomic, client::Client, dns::Query, eth::Family, table::Section,
};

const NANOS_PER_SECOND: u64 = 1_000_000_000;

#[inline(always)]
pub fn limit(
    client: &Client,
    query: &Query,
    plan: &mut Plan,
    table: &Section,
) -> Result<(), Counter> {
    let policy = &client.policy;
    if !policy.has(POLICY_RATE_LIMIT) || client.exempt {
        return Ok(());
    }
    let (class, rate) = if plan.records.is_some() {
        (RateClass::Positive, policy.positive_per_second)
    } else {
        (RateClass::Negative, policy.negative_per_second)
    };
    let key = match client.ends.family {
        Family::V4 => rate_key_v4(client.ends.src.v4_octets(), class),
        Family::V6 => rate_key_v6(client.ends.src.v6_octets(), class),
    };
    let slot = bucket_index(key, table.seed(), RATE_BUCKETS);
    let Some(bucket) = HPD_RATE.get_ptr_mut(slot) else {
        return Ok(());
    };
    // SAFETY: the coarse clock helper has no arguments.
    let now = (unsafe { bpf_ktime_get_coarse_ns() } / NANOS_PER_SECOND) as u32;
    // SAFETY: a valid array slot, shared by every CPU: its window changes only through atomics.
    let (held_key, window_at) = unsafe {
        (
            core::ptr::read_volatile(&(*bucket).key),
            &raw mut (*bucket).window,
        )
    };
    // SAFETY: an aligned u64 of the bucket.
    let current = unsafe { core::ptr::read_volatile(window_at) };
    // SAFETY: (each) an aligned u64 of the bucket.
    let count = match step(held_key, current, key, now, rate) {
        Step::Restart
            if unsafe { atomic::compare_exchange(window_at, current, window(now, 1)) } =>
        {
            // SAFETY: as above; a race here misattributes at most one answer.
            unsafe { core::ptr::write_volatile(&mut (*bucket).key, key) };
            1
        }
        // Counting on, or another CPU started the window just now: count in it.
        _ => window_count(unsafe { atomic::fetch_add(window_at, 1) }).wrapping_add(1),
    };
    match decide(count, rate, policy.slip) {
        Admission::Answer => Ok(()),
        Admission::Slip => {
            plan.truncate(query);
            Ok(())
        }
        Admission::Drop => Err(Counter::DropRateLimited),
    }
}
