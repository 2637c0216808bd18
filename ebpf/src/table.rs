//! The generation of the record table this run reads. It is read once, before any other table
//! lookup, and every lookup after it goes through it: a run never mixes two generations (the
//! design is in `hostport_dns_common::generation`).

use hostport_dns_common::{
    counters::Counter,
    generation::{GENERATIONS, Generation},
};

use crate::HPD_GEN;

/// The generation this run reads, the hash seed its keys were made with, and the label counts
/// of its zone apexes ([`Generation::apex_labels`]).
#[derive(Clone, Copy)]
pub struct Table {
    pub generation: u32,
    pub seed: u64,
    pub apex_labels: u16,
}

/// The active generation, or a pass while there is none (before the agent's first complete
/// publication).
#[inline(always)]
pub fn current() -> Result<Table, Counter> {
    let state: *const Generation = HPD_GEN.get_ptr(0).ok_or(Counter::PassNoTable)?;
    // SAFETY: a valid array slot; volatile so that each field is loaded exactly once (the agent
    // may switch generations meanwhile: this run keeps the one it read).
    let (generation, seed) = unsafe {
        (
            core::ptr::read_volatile(&(*state).active),
            core::ptr::read_volatile(&(*state).seed),
        )
    };
    if generation >= GENERATIONS {
        return Err(Counter::PassNoTable);
    }
    // SAFETY: as above; the index is a generation, checked just now.
    let apex_labels =
        unsafe { core::ptr::read_volatile((*state).apex_labels.as_ptr().add(generation as usize)) };
    Ok(Table {
        generation,
        seed,
        apex_labels,
    })
}
