//! Response rate limiting: each answer is charged to its client's prefix and kind
//! (`hostport_dns_common::policy`); over the budget it is dropped, or every `slip`-th one is sent
//! truncated, so that a real client retries over TCP.

use aya_ebpf::helpers::generated::bpf_ktime_get_coarse_ns;
use hostport_dns_common::{
    counters::Counter,
    limits::RATE_BUCKETS,
    policy::{Admission, POLICY_RATE_LIMIT, RateClass, bucket_index, rate_key_v4, rate_key_v6},
};

use crate::{HPD_RATE, answer::Plan, client::Client, dns::Query, eth::Family, table::Table};

const NANOS_PER_SECOND: u64 = 1_000_000_000;

#[inline(always)]
pub fn limit(client: &Client, query: &Query, plan: &mut Plan, table: Table) -> Result<(), Counter> {
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
        Family::V4 => rate_key_v4(client.ends.src.v4(), class),
        Family::V6 => rate_key_v6(client.ends.src.0, class),
    };
    let slot = bucket_index(key, table.seed, RATE_BUCKETS);
    let Some(bucket) = HPD_RATE.get_ptr_mut(slot) else {
        return Ok(());
    };
    // SAFETY: the coarse clock helper has no arguments.
    let now = (unsafe { bpf_ktime_get_coarse_ns() } / NANOS_PER_SECOND) as u32;
    // SAFETY: a valid array slot, shared by every CPU (see `RateBucket::admit` on races).
    match unsafe { (*bucket).admit(key, now, rate, policy.slip) } {
        Admission::Answer => Ok(()),
        Admission::Slip => {
            plan.truncate(query);
            Ok(())
        }
        Admission::Drop => Err(Counter::DropRateLimited),
    }
}
