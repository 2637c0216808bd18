//! Generations: how the XDP program always reads one complete record table while the agent
//! changes it, without waiting for an RCU grace period on the publishing path.
//!
//! # The design
//!
//! The maps the program answers from hold two *generations*, 0 and 1, of what says where things
//! are: the name index (`HPD_INDEX`), the zones (`HPD_ZONES`) and this host's addresses
//! (`HPD_HOST`). Generation `g`'s element `i` of a map sized for `n` per generation sits at
//! `g * n + i` ([`slot`]). The name entries (`HPD_SMALL`, `HPD_NAMES`, `HPD_BIG`) are one array
//! per kind that both generations' indexes refer into: an entry is written only into a slot that
//! no index refers to (*copy-on-write*), so the bulk of the table is held once. All of them are
//! arrays (the verifier inlines their lookups: no helper call) created with `BPF_F_MMAPABLE`:
//! the agent writes them through a shared mapping with plain stores, no system call per entry.
//!
//! `HPD_GEN` holds one [`Generation`]: which generation is *active*, and the table's hash seed.
//!
//! ## Readers (the program)
//!
//! A run enters a *read section* before it reads any table (`ebpf/src/table.rs`):
//! 1. `g = active` (a plain load);
//! 2. `readers[g] += 1` on this CPU's [`ReaderSlot`] (`HPD_READERS`, a per-CPU array): an atomic
//!    fetch-and-add, which is a full memory barrier on every JIT (x86 `lock xadd`; arm64 `ldaddal`
//!    or an exclusive-access loop followed by `dmb ish`);
//! 3. `active` is loaded again; if it is no longer `g`, the run leaves (`readers[g] -= 1`) and
//!    passes the packet: the writer may already be rewriting `g`.
//!
//! It then reads only generation `g` (its index, zones and host set) and the entries `g`'s index
//! refers to, and leaves at its end: `readers[g] -= 1`, again a fully ordered atomic, so that no
//! read of the table can be ordered after it. A per-CPU count, not a flag, because runs can nest
//! on one CPU (a `BPF_PROG_TEST_RUN` interrupted by a packet).
//!
//! ## The writer (the agent, one thread)
//!
//! It only ever writes the *inactive* generation's index, zones and host set, and entry slots
//! that neither index refers to (*free* slots). To publish:
//! 1. writes each changed name's entry into a free slot and points the inactive index at it; the
//!    slot the name had is *retired* (the active index still refers to it); a name whose entry is
//!    already what it needs keeps its slot and nothing is written;
//! 2. stores the inactive generation's number into `active` (a release store: whoever loads the
//!    new number sees the data written before it);
//! 3. a full fence (`SeqCst`), then reads every CPU's `readers[left]`, where `left` is the
//!    generation it switched away from, until each has been seen at zero once;
//! 4. brings `left`'s index, zones and host set up to date with the same change; the retired
//!    slots, which no index refers to any more and no run can still be reading, become free.
//!
//! Why seeing zero once suffices: a run that will still read `left` incremented `readers[left]`
//! before its second load of `active` returned `left`, so that load came before the writer's
//! store (2) in memory order; with a full barrier on both sides (the reader's atomic, the
//! writer's fence), the writer's later read (3) sees that increment (the store-buffering litmus
//! test with fences on both sides forbids both loads missing the other's store). A run whose
//! increment the writer missed must see the new number at its second load, and leaves.
//!
//! A change needs a free slot for each name it changes. Kinds of entry keep room for a quarter
//! as many names again (see Sizes), so an ordinary change finds them; one that finds none (a
//! change of most names of a full table: a zone added or removed renumbers every entry) lets
//! the names it could not place pass to userspace for one publication and places them in a
//! *follow-up* publication right after the catch-up, from the slots that catch-up freed. A
//! name passed is answered by userspace, never wrongly, as a rule for the few milliseconds
//! between the two switches (a name that finds no room even then, where a kind is full of
//! names that took it for lack of their own, waits for a slot a later change frees). A whole rewrite of the inactive index (the first publication, an
//! adopted pinned table, a zone or admission change, a generation a failed wait left unknown)
//! is copy-on-write too: a name whose entry in the active index is already what it needs keeps
//! that slot, so an adopted table or a change of admission writes few entries.
//!
//! Why entries copy-on-write, and not the alternatives: entries in both generations (layout 9)
//! hold the bulk of the table twice and write each change twice, for nothing the reader needs;
//! one generation of entries changed in place under a per-entry sequence count would add loads
//! and a retry to every hit, and a run that meets a write could only pass; an RCU grace period
//! per publication (instead of the reader counts) costs milliseconds a change. Copy-on-write
//! keeps the reader's path as it was (one index generation, then the entry its way refers to)
//! and costs the writer only the free room a size class keeps anyway.
//!
//! Step 3 takes microseconds: runs are short and never preempted. A CPU seen busy in `left` for
//! longer than [`READER_WAIT_LIMIT_US`] (a vCPU descheduled by its hypervisor, say) makes the
//! writer fall back to an RCU grace period (XDP runs inside RCU read-side sections; the agent gets
//! `synchronize_rcu()` from a map-in-map update), after which no run can be in `left` whatever the
//! counts say.
//!
//! Before the first complete generation, `active` is [`NO_GENERATION`] and the program answers
//! nothing (it passes every packet to userspace). Nothing a reader holds is ever written while it
//! holds it; the price is that the kernel holds the index, zones and host set twice, and the
//! entries' spare room
//! serves both as growth room and as the slots a change is written into.
//!
//! # Sizes
//!
//! The maps' size ([`Capacity`]) follows the names served, kind of entry by kind of entry
//! (`entry::EntryClass`: 80, 160 and 592 bytes; a name takes the smallest that holds it): each
//! kind starts at its smallest size ([`MIN_KERNEL_NAMES`] small entries) and moves between size
//! classes (powers of two and three quarters of them; [`Capacity::class_for`]: room for a
//! quarter as many names again), growing once its names leave less than a sixteenth of it free
//! ([`GROW_WHEN_FREE_ONE_IN`]: a change is written into free entries) and shrinking once they
//! fill an eighth of it or less ([`Capacity::resized`]), up to the agent's limit
//! (`--kernel-names`). The index has a bucket for every three entries of all kinds. This host's
//! address set follows its addresses the same way ([`Capacity::host_class`]: a power of two at
//! least eight times as many slots, from 256 to `limits::HOST_SLOTS`), so that a node without
//! IPVS's thousands of Service addresses does not hold room for them.
//!
//! A table of another size is a *new program with maps of its own*, not the same maps resized:
//! the agent loads it beside the one answering, writes its whole table (one switch, no reader
//! yet), leases it, then gives it every XDP link in one atomic update per link
//! (`bpf_link_update`). Every packet meets one program or the other, each reading its own
//! complete table, and the previous maps are never written again, so a run still inside them
//! finishes on a consistent table; they are freed with their program. The generations above
//! keep ordering the changes *within* one size.
//!
//! Why this, and not the alternatives:
//! - An array of maps (one outer array, inner arrays swapped per size) would leave the program
//!   unchanged, but the verifier inlines a lookup into an inner array only when every inner map
//!   has the inner map template's size (`BPF_F_INNER_MAP` lifts that and turns each lookup
//!   into a helper call). Sizes that vary cost three helper calls per answer (two index buckets
//!   and an entry): the hit path's whole budget is one.
//! - Hash maps, made without preallocation, would grow by themselves, but each lookup is a call
//!   into the kernel's hash table, and each element takes a rounded-up allocation (layout 5's
//!   976-byte elements took 2 KiB each).
//! - Arrays sized for the limit, as before, charge every node for the largest table it might
//!   ever serve: 59 MiB at 131,072 names, for clusters that serve a few dozen.
//!
//! So the program stays what it was (arrays, inlined lookups, the capacity a load-time constant
//! it reads as `HPD_CAPACITY`) and the price of a resize is a program load and one whole write,
//! about as often as the names of a kind grow by half or fall to an eighth, or this host's
//! addresses grow past a quarter of their set or fall to a thirty-second. Its counters start at zero
//! (the agent adds the previous program's totals), and so does the rate limiter's state (a
//! client's burst allowance resets once per resize). Pinned, the new maps replace the previous
//! pins; a restarted agent adopts them at their size (`Capacity::of` the pinned entry maps'
//! sizes, with the pinned host set's; the index follows from them).
//!
//! What a table takes, then: per name its entry (80 bytes for the common
//! `<value>.<namespace>.<zone>` with a few addresses), and per name and generation a third of a
//! 64-byte bucket, times the room its class leaves (1.25x to 1.9x). For 100,000 such names that
//! is about 16 MB (15.6 MiB), where entries held in both generations with a bucket for every two
//! took 30 MB (28.3 MiB), and a single 160-byte kind for both generations about 50 MB. Entries of variable length in one byte
//! arena would save the rest of the rounding (about a quarter more), at the price of an entry
//! read whose bounds the verifier cannot fix at load time.

use crate::{
    entry::EntryClass,
    limits::{
        GROW_WHEN_FREE_ONE_IN, GROWTH_ROOM_QUARTERS, HOST_SLOTS, INDEX_NAMES_PER_BUCKET,
        MAX_INDEX_BUCKETS, MAX_ZONE_LABELS, MIN_BIG_ENTRIES, MIN_HOST_SLOTS, MIN_KERNEL_NAMES,
        MIN_NAME_ENTRIES, NAMES_CAPACITY, SHRINK_WHEN_ONE_IN, ZONES_CAPACITY,
    },
};

/// Generations in every table: the active one and the one being written.
pub const GENERATIONS: u32 = 2;

/// `Generation::active` before the first complete generation is in place.
pub const NO_GENERATION: u32 = u32::MAX;

/// How long the writer waits for the runs still reading a generation it left before it falls back
/// to an RCU grace period (microseconds). A run takes well under one.
pub const READER_WAIT_LIMIT_US: u64 = 2_000;

/// The one value of `HPD_GEN`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Seed of the name hash (`hash::name_hash`): random per install, kept with the
    /// pinned maps so that a restarted agent computes the same keys; secret, so that whoever can
    /// name pods or Services cannot aim names at one index bucket.
    pub seed: u64,
    /// The generation the program reads, or [`NO_GENERATION`].
    pub active: u32,
    /// `maps::layout_fingerprint` of the maps this value was written for: an agent
    /// adopts pinned maps only when it computes the same (see `userspace/src/xdp/pins.rs`).
    pub layout: u32,
    /// Per generation, which label counts its zone apexes have: bit `n - 1` is set when an apex
    /// of `n` labels (root not counted, at most [`MAX_ZONE_LABELS`]) is in that generation. A name
    /// not in the table is looked up only at the suffix lengths an apex can have: with one zone,
    /// one lookup instead of one per label. Written with the rest of the generation.
    pub apex_labels: [u16; GENERATIONS as usize],
    /// Puts the size on a multiple of 8 without implicit padding.
    pub reserved: u32,
    /// Whether an agent vouches for this table: a live epoch while its lease runs, [`LEASE_EXPIRED`]
    /// once it has run out (the program then passes every packet), [`NO_LEASE`] for a table
    /// answered without one (a program that is not pinned ends with its agent). A pinned program
    /// outlives its agent; without the lease it would answer the last table for ever once the
    /// agent is uninstalled. The run reads this word, never the clock: the lease's timer
    /// ([`LeaseClock`]) turns it to [`LEASE_EXPIRED`] when no renewal came in time.
    pub lease: u64,
}

/// `Generation::lease` of a table whose program needs no lease.
pub const NO_LEASE: u64 = u64::MAX;

/// `Generation::lease` of a table whose lease ran out: the program passes every packet.
pub const LEASE_EXPIRED: u64 = 0;

/// How often an agent renews its lease.
pub const LEASE_RENEW_SECONDS: u64 = 1;

/// The lease's epoch after `epoch`: live epochs run from 1 to `NO_LEASE - 1`, then wrap to 1, so
/// that every renewal writes a value the timer has not seen (see [`LeaseClock`]).
#[inline(always)]
pub const fn next_lease_epoch(epoch: u64) -> u64 {
    if epoch == LEASE_EXPIRED || epoch >= NO_LEASE - 1 {
        1
    } else {
        epoch + 1
    }
}

/// The kernel's `struct bpf_timer`, opaque. The kernel finds a timer in a map value by this
/// type's name in the map's BTF, hence the C name.
#[allow(non_camel_case_types)]
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct bpf_timer {
    pub opaque: [u64; 2],
}

/// The one value of the lease's clock (`HPD_LEASE`: its own map, since a map holding a BPF timer
/// can be neither memory-mapped nor without BTF).
///
/// # How the lease runs out without the answer path reading the clock
///
/// The agent renews by running the program's renewal entry (`BPF_PROG_TEST_RUN`, the duration in
/// its frame) every [`LEASE_RENEW_SECONDS`]. A renewal stores the deadline (now + duration) and
/// the next epoch here, then that epoch into `Generation::lease` (a fully ordered exchange), then
/// (re)starts the timer for the duration. When the timer fires, its callback reads the lease word
/// (a fully ordered read), then the deadline: if the deadline has not passed, a renewal came
/// meanwhile and it leaves the word alone; otherwise it replaces the word it read with
/// [`LEASE_EXPIRED`] by a compare-and-exchange, which fails if a renewal stored a new epoch in
/// between. So a renewal is never undone, and a table stops answering at most the duration after
/// the last renewal (plus the timer's slack). The timer lives as long as the map (its pin keeps
/// it) and holds the program whose callback it runs.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseClock {
    /// Armed by each renewal, for the lease's duration.
    pub timer: bpf_timer,
    /// `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`) nanoseconds at which the last renewal's lease ends.
    pub deadline: u64,
    /// The live epoch the last renewal stored into `Generation::lease`.
    pub epoch: u64,
}

impl Generation {
    /// Nothing published yet.
    pub const fn empty(seed: u64, layout: u32) -> Self {
        Self {
            seed,
            active: NO_GENERATION,
            layout,
            apex_labels: [0; GENERATIONS as usize],
            reserved: 0,
            lease: NO_LEASE,
        }
    }

    /// The generation a reader reads, if one is active.
    pub const fn active_generation(&self) -> Option<u32> {
        if self.active < GENERATIONS {
            Some(self.active)
        } else {
            None
        }
    }
}

/// One CPU's count of the program runs inside a read section, per generation (`HPD_READERS`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderSlot {
    pub readers: [u64; GENERATIONS as usize],
}

/// Names that need each kind of entry ([`EntryClass`], indexed by it): what a table's size
/// follows.
pub type EntryCounts = [u32; 3];

/// How much the kernel table holds: its entries (shared by both generations) and, per generation,
/// its index, zones and host set. Fixed when the program is loaded: the maps
/// are arrays sized from it, and the program reads it from a global (`HPD_CAPACITY`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Small entries ([`crate::entry::SmallEntry`]).
    pub small: u32,
    /// Name entries ([`crate::entry::NameEntry`]).
    pub names: u32,
    /// Big entries ([`crate::entry::BigEntry`]).
    pub big: u32,
    /// Index buckets ([`Capacity::buckets_for`] of the entries).
    pub buckets: u32,
    /// Zones.
    pub zones: u32,
    /// Slots of the host-address set (`crate::host`), a power of two.
    pub host: u32,
}

/// The fewest entries of each kind a table has.
const MIN_ENTRIES: EntryCounts = [MIN_KERNEL_NAMES, MIN_NAME_ENTRIES, MIN_BIG_ENTRIES];

impl Capacity {
    /// The default capacity: [`NAMES_CAPACITY`] names.
    pub const DEFAULT: Self = Self::for_names(NAMES_CAPACITY);

    /// The capacity of a table made for `names` names whatever they hold (tests and benchmarks;
    /// at least 64): as many small entries, a quarter as many name entries, a sixteenth as many
    /// big ones.
    pub const fn for_names(names: u32) -> Self {
        let names = if names < 64 { 64 } else { names };
        Self::of([names, names / 4, names / 16])
    }

    /// The capacity of `entries` entries of each kind, with the index they need, and a host set
    /// of the most slots (tests and benchmarks; the agent sizes it, [`Capacity::with_host`]).
    pub const fn of(entries: EntryCounts) -> Self {
        let [small, names, big] = entries;
        Self {
            small,
            names,
            big,
            buckets: Self::buckets_for(small as u64 + names as u64 + big as u64),
            zones: ZONES_CAPACITY,
            host: HOST_SLOTS,
        }
    }

    /// This capacity with a host set of `slots` slots (a power of two).
    pub const fn with_host(self, slots: u32) -> Self {
        Self {
            host: slots,
            ..self
        }
    }

    /// The host set's size class for `addresses` addresses: a power of two at least eight times
    /// as many, within [`MIN_HOST_SLOTS`] and [`HOST_SLOTS`]. A set grows once it is more than a
    /// quarter used: with `limits::HOST_PROBES` probes an address then finds a slot in practice
    /// (none left out in 200 simulated sets; at half used, a set of thousands leaves one out more
    /// often than not).
    pub const fn host_class(addresses: u32) -> u32 {
        let wanted = (addresses as u64 * 8).next_power_of_two();
        if wanted < MIN_HOST_SLOTS as u64 {
            MIN_HOST_SLOTS
        } else if wanted > HOST_SLOTS as u64 {
            HOST_SLOTS
        } else {
            wanted as u32
        }
    }

    /// Index buckets for `entries` entries: one for every [`INDEX_NAMES_PER_BUCKET`], within
    /// [`MAX_INDEX_BUCKETS`].
    pub const fn buckets_for(entries: u64) -> u32 {
        let buckets = entries.div_ceil(INDEX_NAMES_PER_BUCKET as u64);
        if buckets == 0 {
            1
        } else if buckets > MAX_INDEX_BUCKETS as u64 {
            MAX_INDEX_BUCKETS
        } else {
            buckets as u32
        }
    }

    /// Entries of each kind, indexed by [`EntryClass`].
    pub const fn entries(&self) -> EntryCounts {
        [self.small, self.names, self.big]
    }

    /// Entries of all kinds together.
    pub const fn total_entries(&self) -> u64 {
        self.small as u64 + self.names as u64 + self.big as u64
    }

    /// Whether names needing `counts` entries of each kind fit this table's entries, each in an
    /// entry of its kind or of a larger one: counted from the largest kind down, the names
    /// needing a kind or a larger one never outnumber those entries.
    pub const fn holds(&self, counts: EntryCounts) -> bool {
        let have = self.entries();
        let (mut need, mut room) = (0u64, 0u64);
        let mut k = 3;
        while k > 0 {
            k -= 1;
            need += counts[k] as u64;
            room += have[k] as u64;
            if need > room {
                return false;
            }
        }
        true
    }

    /// The size class of `count` entries of a kind whose smallest size is `min` under the limit
    /// `limit`: room for a quarter as many again, rounded up to a power of two or three quarters
    /// of one, at least `min`, at most `limit`. A few fixed sizes, so that a table that grows and
    /// shrinks reuses them; any size can be adopted from pinned maps.
    const fn class_of(count: u32, min: u32, limit: u32) -> u32 {
        let wanted = (count as u64 * GROWTH_ROOM_QUARTERS as u64).div_ceil(4);
        let class = if wanted <= min as u64 {
            min as u64
        } else {
            let power = wanted.next_power_of_two();
            if wanted <= power / 4 * 3 {
                power / 4 * 3
            } else {
                power
            }
        };
        if class > limit as u64 {
            limit
        } else {
            class as u32
        }
    }

    /// The size class of a table whose names need `counts` entries of each kind, under the limit
    /// `limit` (per kind), with a host set for `addresses` addresses: each kind's
    /// [`Capacity::class_of`], and [`Capacity::host_class`].
    pub const fn class_for(counts: EntryCounts, addresses: u32, limit: u32) -> Self {
        let mut entries = [0; 3];
        let mut k = 0;
        while k < 3 {
            entries[k] = Self::class_of(counts[k], MIN_ENTRIES[k], limit);
            k += 1;
        }
        Self::of(entries).with_host(Self::host_class(addresses))
    }

    /// The capacity a table of this size should move to when its names need `counts` entries of
    /// each kind under the limit `limit`, and this host has `addresses` addresses, if it should
    /// move: when a kind's names leave less than [`GROW_WHEN_FREE_ONE_IN`]th of it free (and it
    /// is below the limit), when they fill
    /// [`SHRINK_WHEN_ONE_IN`]th of it or less, or when the limit changed under it; when the
    /// addresses fill more than a quarter of the host set (below its most slots), or a
    /// thirty-second or less. Otherwise `None`: between the two points a kind stays, so names coming and going
    /// near a class's edge cause no resize.
    pub const fn resized(&self, counts: EntryCounts, addresses: u32, limit: u32) -> Option<Self> {
        let class = Self::class_for(counts, addresses, limit);
        let host_grows = addresses as u64 * 4 > self.host as u64 && self.host < HOST_SLOTS;
        let host_shrinks = addresses as u64 * 32 <= self.host as u64 && class.host < self.host;
        let have = self.entries();
        let wanted = class.entries();
        let mut moves = (host_grows || host_shrinks) && class.host != self.host;
        let mut k = 0;
        while k < 3 {
            // Past all but a sixteenth: a change needs free entries to be written into.
            let free = (have[k] as u64).saturating_sub(counts[k] as u64);
            let grow = free * (GROW_WHEN_FREE_ONE_IN as u64) < have[k] as u64 && have[k] < limit;
            let shrink = (counts[k] as u64) * (SHRINK_WHEN_ONE_IN as u64) <= have[k] as u64
                && wanted[k] < have[k];
            let over_limit = have[k] > limit;
            moves |= (grow || shrink || over_limit) && wanted[k] != have[k];
            k += 1;
        }
        if moves { Some(class) } else { None }
    }

    /// Bytes of kernel memory the table maps take: the entries once (both generations share
    /// them), the index, zones and host set for each generation (arrays: fixed at load).
    pub const fn map_bytes(&self) -> u64 {
        let entries = self.small as u64 * EntryClass::Small.entry_bytes() as u64
            + self.names as u64 * EntryClass::Name.entry_bytes() as u64
            + self.big as u64 * EntryClass::Big.entry_bytes() as u64;
        let per_generation = self.buckets as u64
            * core::mem::size_of::<crate::index::Bucket>() as u64
            + self.zones as u64 * core::mem::size_of::<crate::entry::ZoneEntry>() as u64
            + self.host as u64 * core::mem::size_of::<crate::host::HostSlot>() as u64;
        entries + per_generation * GENERATIONS as u64
    }
}

/// Index of generation `generation`'s element `index` in a map holding `per_generation` elements
/// of each generation.
#[inline(always)]
pub const fn slot(generation: u32, per_generation: u32, index: u32) -> u32 {
    generation * per_generation + index
}

/// The bit of [`Generation::apex_labels`] that says an apex of `labels` labels is there; None
/// outside 1..=MAX_ZONE_LABELS.
#[inline(always)]
pub const fn apex_label_bit(labels: usize) -> Option<u16> {
    if labels == 0 || labels > MAX_ZONE_LABELS {
        None
    } else {
        Some(1 << (labels - 1))
    }
}

const _: () = assert!(MAX_ZONE_LABELS <= u16::BITS as usize);
const _: () = assert!(core::mem::size_of::<Generation>() == 32);
const _: () = assert!(core::mem::size_of::<ReaderSlot>() == 16);
const _: () = assert!(core::mem::size_of::<Capacity>() == 24);
// The index of the largest table (every kind at the limit) has a bucket for every three entries.
const _: () = assert!(
    3 * crate::limits::MAX_KERNEL_NAMES as u64 / INDEX_NAMES_PER_BUCKET as u64
        <= MAX_INDEX_BUCKETS as u64
);
const _: () = assert!(core::mem::size_of::<LeaseClock>() == 32);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::Generation {}
    unsafe impl aya::Pod for super::ReaderSlot {}
    unsafe impl aya::Pod for super::Capacity {}
    unsafe impl aya::Pod for super::LeaseClock {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apex_label_bits_cover_exactly_the_label_counts_a_zone_may_have() {
        assert_eq!(apex_label_bit(0), None, "the root is no zone here");
        assert_eq!(apex_label_bit(1), Some(1));
        assert_eq!(apex_label_bit(3), Some(0b100));
        assert_eq!(
            apex_label_bit(MAX_ZONE_LABELS),
            Some(1 << (MAX_ZONE_LABELS - 1))
        );
        assert_eq!(apex_label_bit(MAX_ZONE_LABELS + 1), None);
    }

    #[test]
    fn the_default_capacity_fits_in_64_mib_for_both_generations() {
        let bytes = Capacity::DEFAULT.map_bytes();
        assert!(bytes <= 64 << 20, "{} MiB", bytes >> 20);
        assert_eq!(Capacity::for_names(100_000).buckets, 43_750);
    }

    fn small(names: u32) -> EntryCounts {
        [names, 0, 0]
    }

    #[test]
    fn a_table_starts_small_and_takes_room_for_a_quarter_as_many_again() {
        let limit = crate::limits::KERNEL_NAMES_LIMIT;
        let empty = Capacity::class_for([0; 3], 0, limit);
        assert_eq!(
            empty.entries(),
            [MIN_KERNEL_NAMES, MIN_NAME_ENTRIES, MIN_BIG_ENTRIES]
        );
        assert_eq!(Capacity::class_for(small(819), 0, limit).small, 1024);
        assert_eq!(Capacity::class_for(small(820), 0, limit).small, 1536);
        assert_eq!(Capacity::class_for(small(1_500), 0, limit).small, 2048);
        assert_eq!(Capacity::class_for(small(9_000), 0, limit).small, 12_288);
        assert_eq!(Capacity::class_for(small(10_000), 0, limit).small, 16_384);
        assert_eq!(Capacity::class_for(small(100_000), 0, limit).small, 131_072);
        assert_eq!(Capacity::class_for(small(2_000_000), 0, limit).small, limit);
        // Each kind follows its own names.
        let mixed = Capacity::class_for([100, 5_000, 300], 0, limit);
        assert_eq!(mixed.entries(), [1024, 8_192, 384]);
        // A limit that is no class is the top class itself.
        assert_eq!(Capacity::class_for(small(50_000), 0, 20_000).small, 20_000);
        // The index has a bucket for every three entries.
        assert_eq!(mixed.buckets, (1024u32 + 8_192 + 384).div_ceil(3));
    }

    #[test]
    fn the_host_set_follows_the_addresses() {
        let limit = 1 << 20;
        assert_eq!(Capacity::host_class(0), MIN_HOST_SLOTS);
        assert_eq!(Capacity::host_class(32), 256);
        assert_eq!(Capacity::host_class(33), 512);
        assert_eq!(Capacity::host_class(4_096), HOST_SLOTS);
        assert_eq!(Capacity::host_class(100_000), HOST_SLOTS);
        let first = Capacity::class_for([0; 3], 10, limit);
        assert_eq!(first.host, 256);
        assert_eq!(first.resized([0; 3], 64, limit), None, "a quarter used");
        let grown = first.resized([0; 3], 65, limit).expect("grows");
        assert_eq!((grown.host, grown.entries()), (1024, first.entries()));
        assert_eq!(grown.resized([0; 3], 33, limit), None);
        assert_eq!(grown.resized([0; 3], 32, limit).map(|c| c.host), Some(256));
        // At its most, the set stays whatever the addresses.
        let most = first.with_host(HOST_SLOTS);
        assert_eq!(most.resized([0; 3], 20_000, limit), None);
        assert_eq!(
            most.map_bytes() - first.map_bytes(),
            2 * (HOST_SLOTS as u64 - 256) * 24
        );
    }

    #[test]
    fn names_fit_their_kind_or_a_larger_one() {
        let table = Capacity::of([4, 2, 1]);
        assert!(table.holds([4, 2, 1]));
        assert!(!table.holds([0, 0, 7]));
        assert!(table.holds([0, 3, 0]), "one takes the big entry");
        assert!(!table.holds([0, 3, 1]), "not when a big name needs it");
        assert!(
            table.holds([6, 0, 1]),
            "small names widen into name entries"
        );
        assert!(!table.holds([8, 0, 0]));
    }

    #[test]
    fn a_table_grows_past_its_size_and_shrinks_only_far_below_it() {
        let limit = 1 << 20;
        let first = Capacity::class_for([0; 3], 0, limit);
        assert_eq!(
            first.resized(small(960), 0, limit),
            None,
            "a sixteenth free"
        );
        let grown = first.resized(small(961), 0, limit).expect("grows");
        assert_eq!(grown.small, 1536);
        // A full kind grows too (names that no longer fit wait in a larger one meanwhile).
        assert_eq!(first.resized(small(1_025), 0, limit), Some(grown));
        // Names going back below the growth point keep it.
        assert_eq!(grown.resized(small(600), 0, limit), None);
        assert_eq!(grown.resized(small(193), 0, limit), None);
        assert_eq!(
            grown.resized(small(192), 0, limit).map(|c| c.small),
            Some(1024)
        );
        // Nothing is smaller than the smallest class.
        assert_eq!(first.resized([0; 3], 0, limit), None);
        // One kind growing moves the table; the others keep their classes.
        let big_grown = first.resized([10, 10, 65], 0, limit).expect("grows");
        assert_eq!(big_grown.entries(), [1024, 256, 96]);
        // The limit caps growth, and a table past a lowered limit comes down to it.
        let capped = Capacity::of([4096, 256, 64]).with_host(MIN_HOST_SLOTS);
        assert_eq!(capped.resized(small(5_000), 0, 4096), None);
        assert_eq!(
            capped.resized(small(3_000), 0, 2048).map(|c| c.small),
            Some(2048)
        );
        // Grown, the table holds the names with room to spare, under twice as many.
        for names in [1_025u32, 5_000, 77_777, 100_000, 400_000] {
            let class = first.resized(small(names), 0, limit).expect("grows");
            assert!(class.small >= names + names / 4, "{names}: {}", class.small);
            assert!(
                class.small < names * 19 / 10 + 1,
                "{names}: {}",
                class.small
            );
        }
    }

    #[test]
    fn the_entries_are_held_once_and_the_index_per_generation() {
        let table = Capacity::class_for([100_000, 0, 0], 0, crate::limits::KERNEL_NAMES_LIMIT);
        let entries = 131_072 * 80 + 256 * 160 + 64 * 592;
        let per_generation = table.buckets as u64 * 64 + 256 * 248 + 256 * 24;
        assert_eq!(table.buckets, (131_072u32 + 256 + 64).div_ceil(3));
        assert_eq!(table.map_bytes(), entries + 2 * per_generation);
        // 100,000 names of about 40 bytes with three A records each need about 5 MB in wire
        // form: the table takes about three times that.
        assert!(table.map_bytes() < 16_500_000, "{}", table.map_bytes());
    }

    #[test]
    fn generations_of_a_map_do_not_overlap() {
        assert_eq!(slot(0, 10, 9), 9);
        assert_eq!(slot(1, 10, 0), 10);
    }
}
