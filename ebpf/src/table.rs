//! The read section: the one generation of the table a run reads, and every access to the table's
//! maps. A run enters before it reads anything of the table and leaves when the [`Section`] goes
//! out of scope; in between it reads only the generation it entered (the design, and why the
//! atomics below are what makes the writer's wait sound, is in
//! `hostport_dns_common::generation`).

use hostport_dns_common::{
    counters::{Counter, Event},
    entry::{BigEntry, NameEntry, SmallEntry, ZoneEntry, ZoneId},
    generation::{Capacity, GENERATIONS, Generation, LEASE_EXPIRED, slot},
    host::HostSlot,
    index::Bucket,
};

use crate::{
    HPD_BIG, HPD_CAPACITY, HPD_GEN, HPD_HOST, HPD_INDEX, HPD_NAMES, HPD_READERS, HPD_SMALL,
    HPD_ZONES, atomic, stats,
};

/// Passes everything once the lease of the table's agent has run out: a word the lease's timer
/// clears (`lease`), so a run reads no clock, leased or not.
#[inline(always)]
fn ensure_leased(lease: u64) -> Result<(), Counter> {
    if lease == LEASE_EXPIRED {
        return Err(Counter::PassNoAgent);
    }
    Ok(())
}

/// A sanity bound on one CPU's nested runs (a test run interrupted by a packet nests two): a
/// count above it is a bookkeeping error, and the run stays out.
const MAX_NESTED_READERS: u64 = 64;

/// The generation this run reads, held from [`Section::enter`] until the section is dropped.
pub struct Section {
    generation: u32,
    /// This CPU's count of the runs reading `generation`.
    readers: *mut u64,
    seed: u64,
    apex_labels: u16,
    capacity: Capacity,
}

impl Section {
    /// Enters the active generation, or passes while there is none (before the agent's first
    /// complete publication) or while the writer switches away from the one just read.
    #[inline(always)]
    pub fn enter() -> Result<Self, Counter> {
        let state: *const Generation = HPD_GEN.get_ptr(0).ok_or(Counter::PassNoTable)?;
        // SAFETY: a valid array slot; volatile so that the load happens exactly here (the agent
        // stores to it through its mapping).
        let generation = unsafe { core::ptr::read_volatile(&(*state).active) };
        if generation >= GENERATIONS {
            return Err(Counter::PassNoTable);
        }
        // SAFETY: as above (renewals and the lease's timer write it).
        ensure_leased(unsafe { core::ptr::read_volatile(&(*state).lease) })?;
        let slot = HPD_READERS.get_ptr_mut(0).ok_or(Counter::PassNoTable)?;
        // SAFETY: this CPU's slot; the index is a generation, checked above.
        let readers = unsafe { (*slot).readers.as_mut_ptr().add(generation as usize) };
        // A fully ordered read-modify-write: the load of `active` below cannot be satisfied
        // before this increment is visible to the writer. Its result is used (the nesting
        // bound), which keeps the compiler on the fetching form, the one every JIT orders fully.
        // SAFETY: an aligned u64 in map memory.
        let nested = unsafe { atomic::fetch_add(readers, 1) };
        // SAFETY: as for the first load.
        let again = unsafe { core::ptr::read_volatile(&(*state).active) };
        if again != generation || nested >= MAX_NESTED_READERS {
            leave(readers);
            stats::count_event(Event::GenerationRace);
            return Err(Counter::PassNoTable);
        }
        // The test bed's build can keep runs in here a while, to show the writer waits for them.
        #[cfg(feature = "testbed")]
        crate::hold::readers();
        // SAFETY: as above; the seed never changes, the apex labels of a generation only while
        // no run reads it.
        let (seed, apex_labels) = unsafe {
            (
                core::ptr::read_volatile(&(*state).seed),
                core::ptr::read_volatile((*state).apex_labels.as_ptr().add(generation as usize)),
            )
        };
        // SAFETY: a plain read of a load-time constant; volatile so the compiler does not fold
        // the default in (the agent rewrites it before loading).
        let capacity = unsafe { core::ptr::read_volatile(&HPD_CAPACITY) };
        Ok(Self {
            generation,
            readers,
            seed,
            apex_labels,
            capacity,
        })
    }

    /// The hash seed of the table's keys.
    #[inline(always)]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The label counts of this generation's zone apexes (`Generation::apex_labels`).
    #[inline(always)]
    pub fn apex_labels(&self) -> u16 {
        self.apex_labels
    }

    /// Index buckets per generation.
    #[inline(always)]
    pub fn buckets(&self) -> u32 {
        self.capacity.buckets
    }

    /// Bucket `index` of this generation's name index.
    #[inline(always)]
    pub fn bucket(&self, index: u32) -> Option<&'static Bucket> {
        HPD_INDEX.get(slot(self.generation, self.capacity.buckets, index))
    }

    /// Small entry `index` (entries are shared by both generations: this generation's index
    /// refers only to slots the writer leaves alone while it is read). The array's own bound is
    /// the capacity's: no generation offset to keep a slot inside.
    #[inline(always)]
    pub fn small_entry(&self, index: u32) -> Option<&'static SmallEntry> {
        HPD_SMALL.get(index)
    }

    /// Name entry `index`.
    #[inline(always)]
    pub fn name_entry(&self, index: u32) -> Option<&'static NameEntry> {
        HPD_NAMES.get(index)
    }

    /// Big entry `index`.
    #[inline(always)]
    pub fn big_entry(&self, index: u32) -> Option<&'static BigEntry> {
        HPD_BIG.get(index)
    }

    /// Zone `id` of this generation.
    #[inline(always)]
    pub fn zone(&self, id: ZoneId) -> Option<&'static ZoneEntry> {
        if id >= self.capacity.zones {
            return None;
        }
        HPD_ZONES.get(slot(self.generation, self.capacity.zones, id))
    }

    /// Slots of the host-address set per generation (a power of two).
    #[inline(always)]
    pub fn host_slots(&self) -> u32 {
        self.capacity.host
    }

    /// Slot `index` of this generation's host-address set.
    #[inline(always)]
    pub fn host_slot(&self, index: u32) -> Option<&'static HostSlot> {
        if index >= self.capacity.host {
            return None;
        }
        HPD_HOST.get(slot(self.generation, self.capacity.host, index))
    }
}

impl Drop for Section {
    #[inline(always)]
    fn drop(&mut self) {
        leave(self.readers);
    }
}

/// One run fewer in the generation `readers` counts: fully ordered, so that every read of the
/// table comes before the writer can see the count drop.
#[inline(always)]
fn leave(readers: *mut u64) {
    // SAFETY: an aligned u64 in this CPU's map memory.
    let before = unsafe { atomic::fetch_sub(readers, 1) };
    // Never zero (this run counted itself in); used, so the fully ordered fetching form stays.
    if before == 0 {
        stats::count_event(Event::GenerationRace);
    }
}
