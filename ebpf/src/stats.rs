//! Per-CPU counters (no atomics needed: one CPU, no preemption inside XDP).

use hostport_dns_common::{
    counters::{Counter, zone_counter_slot},
    dns::TYPE_AAAA,
    record::ZoneId,
};

use crate::{HPD_COUNTERS, HPD_ZONE_ANSW};

#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = HPD_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: a valid per-CPU slot of this CPU.
        unsafe { *slot += 1 };
    }
}

/// One more answer in `zone` to a query of `qtype` (A or AAAA): requests by zone, as userspace
/// counts its own. A zone id beyond the array is not counted (the lookup bounds it).
#[inline(always)]
pub fn count_zone(zone: ZoneId, qtype: u16) {
    if let Some(slot) = HPD_ZONE_ANSW.get_ptr_mut(zone_counter_slot(zone, qtype == TYPE_AAAA)) {
        // SAFETY: a valid per-CPU slot of this CPU.
        unsafe { *slot += 1 };
    }
}
