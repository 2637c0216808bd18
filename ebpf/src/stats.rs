//! Per-CPU counters (no atomics needed: one CPU, and a nested run only adds its own counts).

use hostport_dns_common::{
    counters::{Counter, Event, zone_counter_slot},
    dns::TYPE_AAAA,
};

use crate::{HPD_COUNTERS, HPD_ZONE_ANSW};

#[inline(always)]
pub fn count(counter: Counter) {
    add(counter as u32);
}

/// One more of a path an answer took.
#[inline(always)]
pub fn count_event(event: Event) {
    add(event.slot());
}

#[inline(always)]
fn add(slot: u32) {
    if let Some(slot) = HPD_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a valid per-CPU slot of this CPU.
        unsafe { *slot += 1 };
    }
}

/// One more answer to a query of `qtype` (A or AAAA) in the zone holding `counter_slot`:
/// requests by zone, as userspace counts its own. A slot beyond the array is not counted (the
/// lookup bounds it).
#[inline(always)]
pub fn count_zone(counter_slot: u32, qtype: u16) {
    if let Some(slot) =
        HPD_ZONE_ANSW.get_ptr_mut(zone_counter_slot(counter_slot, qtype == TYPE_AAAA))
    {
        // SAFETY: a valid per-CPU slot of this CPU.
        unsafe { *slot += 1 };
    }
}
