//! Per-CPU counters (no atomics needed: one CPU, no preemption inside XDP).

use hostport_dns_common::counters::Counter;

use crate::HPD_COUNTERS;

#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = HPD_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: a valid per-CPU slot of this CPU.
        unsafe { *slot += 1 };
    }
}
