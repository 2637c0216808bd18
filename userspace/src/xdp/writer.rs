//! The one writer of the kernel's record table: name index, zones and this host's addresses in
//! two generations, and the name entries both share (the design is in
//! `hostport_dns_common::generation`). It writes only the generation no program run reads and
//! entry slots no index refers to, through shared mappings of the maps, switches with one store,
//! waits until no run can still read the generation it left (microseconds: the per-CPU reader
//! counts), copies into that one the index buckets the change touched, and frees the entry slots
//! the change replaced.
//!
//! Two ways to bring a generation up to date: its whole index (the first publication, adopted
//! pinned maps, zone or admission changes, and any generation a failed wait left unknown; the
//! entries that are already right are kept), and the names a change touched, which cost the
//! same however large the table is. A change that found no free slot for some names is followed
//! by a publication that places them in the slots the first one freed.

use std::{os::fd::AsFd, time::Instant};

use aya::{
    Ebpf, Pod,
    maps::{Map, MapData, PerCpuArray},
};
use hostport_dns_common::{
    entry::{BigEntry, Entry, NameEntry, SmallEntry, ZoneEntry},
    generation::{Capacity, GENERATIONS, Generation, apex_label_bit, slot},
    host::HostSlot,
    index::Bucket,
    maps,
};
use tracing::warn;

pub use crate::xdp::{map_error::WriteError, readers::Waited};

use hostport_dns_core::{dns::WireName, table::RecordTable};

use crate::xdp::{
    counters::ZoneCounters,
    entries::{self, TableNeeds},
    hostset::HostAddresses,
    layout::{Dirty, Layout, View},
    map_error::{map_err, take},
    readers::Readers,
    shared::{SharedArray, bytes_of},
};

/// What one publication changed, counted in the generation it switched to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// The generation now active.
    pub generation: u32,
    pub names_written: usize,
    pub names_removed: usize,
    pub zones_written: usize,
    /// The whole table was written (not only what changed).
    pub whole: bool,
    /// Names the kernel cannot tell from another (answered by userspace).
    pub collisions: usize,
    /// Names in the kernel's index.
    pub names_held: usize,
    /// Names the kernel table does not answer, userspace does: those of zones that did not fit,
    /// those in no index way, and those that found no entry of their kind or a larger one free.
    pub names_left_out: usize,
    /// Addresses of this host the kernel's set has no room for.
    pub host_left_out: usize,
    /// From the start of the publication to the switch (the new table visible).
    pub switch_micros: u64,
    /// Publications that followed the first to place names that found no free entry in it.
    pub follow_ups: usize,
    /// How the wait for the runs still reading the generation left ended, if there was one.
    pub waited: Option<Waited>,
}

/// What a publication brings: a new table (and which of its names changed), this host's
/// addresses, or both.
pub enum Change<'a> {
    /// Compare nothing: write every name.
    Whole,
    /// Only these names (and the zones' SOA records) may differ from the last table.
    Names(&'a [WireName]),
}

/// The writer's mappings of the table maps.
struct Maps {
    state: SharedArray<Generation>,
    index: SharedArray<Bucket>,
    small: SharedArray<SmallEntry>,
    names: SharedArray<NameEntry>,
    big: SharedArray<BigEntry>,
    zones: SharedArray<ZoneEntry>,
    host: SharedArray<HostSlot>,
}

pub struct MapWriter {
    maps: Maps,
    readers: Readers,
    zone_counters: ZoneCounters,
    capacity: Capacity,
    seed: u64,
    layout: Layout,
    /// The table the generations hold (cheap to keep: its parts are shared).
    table: Option<RecordTable>,
    /// What the names of `table` need of the kernel table.
    needs: TableNeeds,
    /// Per zone id of `table`: whether the zone is in the kernel table (see [`admission`]).
    admitted: Vec<bool>,
    host: HostAddresses,
    host_left_out: usize,
    /// Per zone id, the entry last written and what it was made from: a zone whose serial alone
    /// changed gets its template patched, not encoded again.
    zone_cache: Vec<Option<CachedZone>>,
    active: Option<u32>,
    /// Whether the inactive generation holds what the active one does.
    in_step: bool,
    hooks: TestHooks,
}

/// A zone entry and what it was made from.
struct CachedZone {
    spec: hostport_dns_core::zone::ZoneSpec,
    serial: u32,
    counter: u32,
    entry: ZoneEntry,
    serial_at: Option<usize>,
}

/// Ways to make the writer misbehave, for the tests that must catch it (`tests/tests/
/// integration/generations.rs`). Never set by the agent.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TestHooks {
    /// After the wait for readers (or instead of it, with `skip_wait`), fill what a run still
    /// reading the generation left may read and the writer is about to reuse (the entry slots
    /// the change retired, the generation's zones) with wrong data, and keep it there this long:
    /// a run still reading that generation answers wrong.
    pub poison: Option<std::time::Duration>,
    /// Do not wait for the runs still reading the generation left: the defect the wait prevents.
    pub skip_wait: bool,
}

impl MapWriter {
    /// Takes the table maps out of the loaded object (sized for `capacity`) and maps them. They
    /// may hold a previous agent's table (pinned maps adopted): its active generation keeps
    /// answering until the first publication, which writes the whole table into the other one;
    /// its hash seed is kept.
    pub fn new(ebpf: &mut Ebpf, capacity: Capacity) -> Result<Self, WriteError> {
        let g = GENERATIONS;
        let maps = Maps {
            state: mapped(ebpf, maps::GENERATION, 1)?,
            index: mapped(ebpf, maps::INDEX, g * capacity.buckets)?,
            small: mapped(ebpf, maps::SMALL, capacity.small)?,
            names: mapped(ebpf, maps::NAMES, capacity.names)?,
            big: mapped(ebpf, maps::BIG, capacity.big)?,
            zones: mapped(ebpf, maps::ZONES, g * capacity.zones)?,
            host: mapped(ebpf, maps::HOST, g * capacity.host)?,
        };
        let readers =
            PerCpuArray::try_from(take(ebpf, maps::READERS)?).map_err(map_err(maps::READERS))?;
        let readers = Readers::new(readers).map_err(WriteError::Wait)?;
        let zone_counters = ZoneCounters::open(ebpf)?;
        let layout_print = maps::layout_fingerprint(&capacity);
        let mut held = maps.state.get(0);
        let active = if held.seed == 0 || held.layout != layout_print {
            // Fresh maps: a new install.
            held = Generation::empty(random_seed()?, layout_print);
            let mut state = maps.state;
            state.set(0, &held);
            return Self::assemble(
                Maps { state, ..maps },
                readers,
                zone_counters,
                capacity,
                held.seed,
                None,
            );
        } else {
            held.active_generation()
        };
        let mut writer = Self::assemble(maps, readers, zone_counters, capacity, held.seed, active);
        if let Ok(writer) = writer.as_mut()
            && let Some(generation) = active
        {
            writer.adopt_counter_slots(generation);
        }
        writer
    }

    fn assemble(
        maps: Maps,
        readers: Readers,
        mut zone_counters: ZoneCounters,
        capacity: Capacity,
        seed: u64,
        active: Option<u32>,
    ) -> Result<Self, WriteError> {
        zone_counters.set_seed(seed);
        Ok(Self {
            maps,
            readers,
            zone_counters,
            capacity,
            seed,
            layout: Layout::new(seed, capacity.entries(), capacity.buckets),
            table: None,
            needs: TableNeeds::default(),
            admitted: Vec::new(),
            host: HostAddresses::default(),
            host_left_out: 0,
            zone_cache: Vec::new(),
            active,
            in_step: false,
            hooks: TestHooks::default(),
        })
    }

    /// Makes this writer misbehave as `hooks` say (tests only).
    #[doc(hidden)]
    pub fn set_test_hooks(&mut self, hooks: TestHooks) {
        self.hooks = hooks;
    }

    /// The hash seed of the table.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The active generation, if one is.
    pub fn active(&self) -> Option<u32> {
        self.active
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// The table last written, if one was.
    pub fn table(&self) -> Option<&RecordTable> {
        self.table.as_ref()
    }

    /// What the names of the table last written need.
    pub fn needs(&self) -> &TableNeeds {
        &self.needs
    }

    /// This host's addresses as last written.
    pub fn host(&self) -> &HostAddresses {
        &self.host
    }

    /// Which zone each per-zone counter slot counts (shared with the metrics).
    pub fn zone_counters(&self) -> &ZoneCounters {
        &self.zone_counters
    }

    /// Makes the kernel answer from the whole of `table`.
    pub fn write_table(&mut self, table: &RecordTable) -> Result<WriteStats, WriteError> {
        let needs = TableNeeds::of(table);
        self.publish(Some((table, Change::Whole, &needs)), None, &mut || {})
            .map(Option::unwrap_or_default)
    }

    /// Makes the kernel answer from `table`, which differs from the last one written in the
    /// entries of `names` (those a change touched) and possibly in its zones' SOA records.
    pub fn write_names(
        &mut self,
        table: &RecordTable,
        names: &[WireName],
    ) -> Result<WriteStats, WriteError> {
        let needs = TableNeeds::of(table);
        self.publish(
            Some((table, Change::Names(names), &needs)),
            None,
            &mut || {},
        )
        .map(Option::unwrap_or_default)
    }

    /// Makes the kernel know this host's addresses as `host` (the next generation carries them;
    /// before the first table is written, the first one will). What the switch did, if there
    /// was one.
    pub fn write_host(&mut self, host: HostAddresses) -> Result<Option<WriteStats>, WriteError> {
        self.publish(None, Some(host), &mut || {})
    }

    /// One publication: a new table (with what its names need, [`TableNeeds::of`] it), new
    /// addresses, or both, in one switch. None when there was nothing to switch to (no table
    /// yet, or addresses that did not change). `switched` runs right after the switch, before
    /// the wait for the runs still reading the generation left.
    pub fn publish(
        &mut self,
        table: Option<(&RecordTable, Change, &TableNeeds)>,
        host: Option<HostAddresses>,
        switched: &mut dyn FnMut(),
    ) -> Result<Option<WriteStats>, WriteError> {
        let started = Instant::now();
        let host_changed = host.as_ref().is_some_and(|h| *h != self.host);
        if let Some(host) = host {
            self.host = host;
        }
        let (table, change) = match table {
            Some((table, change, needs)) => {
                self.needs = needs.clone();
                (table.clone(), change)
            }
            None => match &self.table {
                Some(table) if host_changed => (table.clone(), Change::Names(&[])),
                // Nothing to switch to yet, or nothing new.
                _ => return Ok(None),
            },
        };
        let next = self.active.map_or(0, |g| 1 - g);
        let admitted = admission(&table, &self.capacity, &self.needs);
        let zones_moved = self.table.as_ref().is_none_or(|held| {
            held.zones().len() != table.zones().len()
                || held
                    .zones()
                    .iter()
                    .zip(table.zones())
                    .any(|(a, b)| a.spec.apex != b.spec.apex)
        });
        let whole = !self.in_step
            || matches!(change, Change::Whole)
            || admitted != self.admitted
            || zones_moved;
        self.admitted = admitted;
        self.assign_counter_slots(&table);
        let mut stats = WriteStats {
            whole,
            ..WriteStats::default()
        };
        let dirty = if whole {
            self.rewrite(next, &table, &mut stats);
            None
        } else {
            let Change::Names(names) = change else {
                unreachable!("whole otherwise")
            };
            let names = names.iter().map(|name| name.as_bytes().into()).collect();
            Some(self.apply(next, &table, names, &mut stats))
        };
        stats.zones_written = self.write_zones(next, &table, whole);
        if whole || host_changed {
            self.write_host_set(next);
        }
        self.write_apex_labels(next, &table);
        // The table left is dropped after the switch: freeing what it no longer shares takes
        // time the new table need not wait for.
        let previous = self.table.replace(table);
        let left = self.active;
        self.switch(next);
        stats.switch_micros = started.elapsed().as_micros() as u64;
        switched();
        stats.generation = next;
        stats.waited = self.catch_up(left, next, dirty.as_ref())?;
        drop(previous);
        if let Err(err) = self.follow_up(&mut stats) {
            // The table is switched; the names waiting pass (userspace answers them) and the next
            // publication writes the whole index again (the failed wait left it unknown).
            warn!(error = %err, "placing the names a change found no free entry for failed");
        }
        Ok(Some(self.stats(stats)))
    }

    /// Places the names that found no free entry in the publication just made, in the slots its
    /// catch-up freed: one more switch each time some were waiting and room came free (the
    /// table is the same; only where those names are changes). Names placed are not counted as
    /// written again; a wait that fell back to a grace period is reported as the publication's.
    /// Bounded, though a second round finds room only in what the first one's catch-up freed
    /// (names that found none there wait for the next publication's).
    fn follow_up(&mut self, stats: &mut WriteStats) -> Result<(), WriteError> {
        const MOST_FOLLOW_UPS: usize = 4;
        while stats.follow_ups < MOST_FOLLOW_UPS {
            let waiting = self.layout.take_promoted();
            if waiting.is_empty() {
                return Ok(());
            }
            let (Some(table), Some(left)) = (self.table.clone(), self.active) else {
                return Ok(());
            };
            let next = 1 - left;
            let dirty = self.apply(next, &table, waiting, &mut WriteStats::default());
            self.switch(next);
            stats.generation = next;
            stats.follow_ups += 1;
            let waited = self.catch_up(Some(left), next, Some(&dirty))?;
            if stats.waited != Some(Waited::GracePeriod) {
                stats.waited = waited;
            }
        }
        Ok(())
    }

    fn stats(&self, mut stats: WriteStats) -> WriteStats {
        stats.collisions = self.layout.collisions();
        stats.names_held = self.layout.names_held();
        stats.names_left_out = match &self.table {
            Some(table) => {
                names_left_out(table, &self.admitted)
                    + self.layout.names_unplaced()
                    + self.layout.names_without_room()
            }
            None => 0,
        };
        stats.host_left_out = self.host_left_out;
        stats
    }

    /// Writes every name of `table` into `generation`'s index, whatever it held, beside the
    /// other generation's: entries already right there are kept, the others written into slots
    /// it does not refer to.
    fn rewrite(&mut self, generation: u32, table: &RecordTable, stats: &mut WriteStats) {
        let c = self.capacity;
        self.maps
            .index
            .zero(slot(generation, c.buckets, 0), c.buckets);
        let mut dirty = Dirty::default();
        let admitted = std::mem::take(&mut self.admitted);
        {
            let mut view = view(&mut self.maps, self.capacity, generation);
            let mut layout = self.layout.for_rewrite(&view);
            for (name, node) in table.nodes() {
                let Some(zone) = admitted_zone(table, &admitted, node.zone) else {
                    continue;
                };
                let wire = name.as_bytes();
                let hash = layout.hash(wire);
                let slot = self.zone_counters.slot_of(&zone.spec.apex);
                let built = entries::build(wire, node, zone, slot);
                layout.upsert(&mut view, &mut dirty, hash, wire, built);
                stats.names_written += 1;
            }
            layout.retire_unclaimed();
            self.layout = layout;
        }
        self.admitted = admitted;
    }

    /// Writes the entries of `names` (wire form) as `table` has them into `generation`, whose
    /// index holds the previous table.
    fn apply(
        &mut self,
        generation: u32,
        table: &RecordTable,
        names: Vec<Box<[u8]>>,
        stats: &mut WriteStats,
    ) -> Dirty {
        let mut dirty = Dirty::default();
        let mut layout = std::mem::replace(&mut self.layout, Layout::new(0, [0; 3], 1));
        let admitted = std::mem::take(&mut self.admitted);
        {
            let mut view = view(&mut self.maps, self.capacity, generation);
            let mut pending: Vec<(u64, Box<[u8]>)> = names
                .into_iter()
                .map(|wire| (layout.hash(&wire), wire))
                .collect();
            while !pending.is_empty() {
                for (hash, wire) in pending.drain(..) {
                    let present = table
                        .node_wire(&wire)
                        .and_then(|node| Some((node, admitted_zone(table, &admitted, node.zone)?)));
                    match present {
                        Some((node, zone)) => {
                            let slot = self.zone_counters.slot_of(&zone.spec.apex);
                            let built = entries::build(&wire, node, zone, slot);
                            layout.upsert(&mut view, &mut dirty, hash, &wire, built);
                            stats.names_written += 1;
                        }
                        None => {
                            layout.remove(&mut view, &mut dirty, hash, &wire);
                            stats.names_removed += 1;
                        }
                    }
                }
                // Names that waited for a way a removal freed.
                pending = layout
                    .take_promoted()
                    .into_iter()
                    .map(|wire| (layout.hash(&wire), wire))
                    .collect();
            }
        }
        self.layout = layout;
        self.admitted = admitted;
        dirty
    }

    /// Writes the zone entries of `generation`; returns how many differ from what it held.
    fn write_zones(&mut self, generation: u32, table: &RecordTable, whole: bool) -> usize {
        let c = self.capacity;
        let mut written = 0;
        self.zone_cache.resize_with(c.zones as usize, || None);
        for id in 0..c.zones {
            let entry = match admitted_zone(table, &self.admitted, id) {
                Some(zone) => {
                    let counter = u32::from(self.zone_counters.slot_of(&zone.spec.apex));
                    self.zone_entry(id, zone, counter)
                }
                None => {
                    self.zone_cache[id as usize] = None;
                    ZoneEntry::EMPTY
                }
            };
            let at = slot(generation, c.zones, id);
            if whole || bytes_of(self.maps.zones.get_ref(at)) != bytes_of(&entry) {
                self.maps.zones.set(at, &entry);
                written += 1;
            }
        }
        written
    }

    /// Zone `id`'s entry: the cached one, patched for a new serial, or a new encoding.
    fn zone_entry(
        &mut self,
        id: u32,
        zone: &hostport_dns_core::table::Zone,
        counter: u32,
    ) -> ZoneEntry {
        let slot = &mut self.zone_cache[id as usize];
        if let Some(cached) = slot.as_mut()
            && cached.spec == zone.spec
            && cached.counter == counter
        {
            if cached.serial != zone.serial
                && let Some(at) = cached.serial_at
            {
                cached.entry = entries::with_serial(&cached.entry, at, zone.serial);
                cached.serial = zone.serial;
            }
            if cached.serial == zone.serial {
                return cached.entry;
            }
        }
        let (entry, serial_at) = entries::zone_template(zone, self.seed, counter);
        *slot = Some(CachedZone {
            spec: zone.spec.clone(),
            serial: zone.serial,
            counter,
            entry,
            serial_at,
        });
        entry
    }

    fn write_host_set(&mut self, generation: u32) {
        let (slots, left_out) = self.host.slots(self.seed, self.capacity.host);
        if !left_out.is_empty() {
            warn!(
                addresses = left_out.len(),
                "more host addresses than the kernel's set holds: queries from them are not seen as martians, queries to them go to userspace"
            );
        }
        self.host_left_out = left_out.len();
        let base = slot(generation, self.capacity.host, 0);
        for (i, value) in slots.iter().enumerate() {
            self.maps.host.set(base + i as u32, value);
        }
    }

    fn write_apex_labels(&mut self, generation: u32, table: &RecordTable) {
        let labels = table
            .zones()
            .iter()
            .filter(|zone| {
                self.admitted
                    .get(zone.id as usize)
                    .copied()
                    .unwrap_or(false)
            })
            .filter_map(|zone| apex_label_bit(zone.spec.apex.num_labels() as usize))
            .fold(0, |mask, bit| mask | bit);
        let state = self.maps.state.as_ptr(0);
        // SAFETY: a field of the mapped HPD_GEN; no run reads this generation's entry now.
        unsafe {
            std::ptr::addr_of_mut!((*state).apex_labels[generation as usize & 1])
                .write_volatile(labels)
        };
    }

    /// The atomic switch: one release store of the active generation. Whoever loads the new
    /// number sees everything written before it.
    fn switch(&mut self, generation: u32) {
        let state = self.maps.state.as_ptr(0);
        // SAFETY: the mapped HPD_GEN's `active`, an aligned u32 that the program loads.
        let active = unsafe { std::sync::atomic::AtomicU32::from_ptr(&raw mut (*state).active) };
        active.store(generation, std::sync::atomic::Ordering::Release);
        self.active = Some(generation);
    }

    /// Brings the generation the switch left (`left`) in step with `next`: waits until no run
    /// reads it, then copies what `dirty` says changed (everything, without it). A first
    /// publication has left nothing anybody read.
    fn catch_up(
        &mut self,
        left: Option<u32>,
        next: u32,
        dirty: Option<&Dirty>,
    ) -> Result<Option<Waited>, WriteError> {
        let other = 1 - next;
        let waited = match left {
            Some(_) if self.hooks.skip_wait => None,
            Some(left) => match self.readers.wait_out(left) {
                Ok(waited) => Some(waited),
                Err(err) => {
                    self.in_step = false;
                    return Err(WriteError::Wait(err));
                }
            },
            None => None,
        };
        if let Some(hold) = self.hooks.poison {
            self.poison(other, hold);
        }
        let c = self.capacity;
        match dirty {
            Some(dirty) => {
                for bucket in &dirty.buckets {
                    copy_one(&mut self.maps.index, c.buckets, next, other, *bucket);
                }
            }
            None => copy_all(&mut self.maps.index, c.buckets, next, other),
        }
        copy_all(&mut self.maps.zones, c.zones, next, other);
        copy_all(&mut self.maps.host, c.host, next, other);
        let labels = self.maps.state.get(0).apex_labels[next as usize];
        let state = self.maps.state.as_ptr(0);
        // SAFETY: as in write_apex_labels: no run reads `other` now.
        unsafe {
            std::ptr::addr_of_mut!((*state).apex_labels[other as usize]).write_volatile(labels)
        };
        // Neither index refers to the slots the change replaced, and no run reads them.
        self.layout.free_retired();
        self.in_step = true;
        Ok(waited)
    }

    /// Fills what a run still in `generation` may read and the writer is about to reuse (the
    /// entry slots this publication retired, and the generation's zones) with wrong addresses and
    /// serials, and keeps them there for `hold` (tests only: see [`TestHooks`]).
    fn poison(&mut self, generation: u32, hold: std::time::Duration) {
        let c = self.capacity;
        let [small, names, big] = self.layout.retired().clone();
        poison_addresses(&mut self.maps.small, small);
        poison_addresses(&mut self.maps.names, names);
        poison_addresses(&mut self.maps.big, big);
        for id in 0..c.zones {
            let at = slot(generation, c.zones, id);
            let mut zone = self.maps.zones.get(at);
            zone.soa_rr.iter_mut().for_each(|b| *b ^= 0x5a);
            self.maps.zones.set(at, &zone);
        }
        std::thread::sleep(hold);
    }

    /// Gives each zone of `table` the kernel holds a per-zone counter slot (kept while it is
    /// served).
    fn assign_counter_slots(&mut self, table: &RecordTable) {
        let admitted = &self.admitted;
        self.zone_counters.assign(
            table
                .zones()
                .iter()
                .filter(|zone| admitted.get(zone.id as usize).copied().unwrap_or(false))
                .map(|zone| &zone.spec.apex),
        );
    }

    /// After adopting pinned maps: the counter slots the previous agent gave its zones, from the
    /// zone entries of its active generation (so that counts carry on under their zones).
    fn adopt_counter_slots(&mut self, generation: u32) {
        let c = self.capacity;
        let held: Vec<(u64, u32)> = (0..c.zones)
            .map(|id| self.maps.zones.get_ref(slot(generation, c.zones, id)))
            .filter(|entry| entry.apex_len != 0)
            .map(|entry| (entry.apex_hash, entry.counter_slot))
            .collect();
        self.zone_counters.adopt(self.seed, &held);
    }
}

/// Overwrites the addresses of the entries `slots` with a wrong pattern (tests only: see
/// [`TestHooks`]).
fn poison_addresses<const P: usize>(array: &mut SharedArray<Entry<P>>, slots: Vec<u32>)
where
    Entry<P>: Pod,
{
    for at in slots {
        let mut entry = array.get(at);
        let name_at = P - usize::from(entry.head.name_len).min(P);
        entry.payload[..name_at].fill(0xee);
        array.set(at, &entry);
    }
}

/// The writer's view of generation `generation`'s index, beside the other generation's, and of
/// the entries both share.
fn view(maps: &mut Maps, c: Capacity, generation: u32) -> View<'_> {
    let both = maps.index.slice_mut(0, GENERATIONS * c.buckets);
    let (zero, one) = both.split_at_mut(c.buckets as usize);
    let (buckets, beside) = if generation == 0 {
        (zero, &*one)
    } else {
        (one, &*zero)
    };
    View {
        buckets,
        beside,
        small: maps.small.slice_mut(0, c.small),
        names: maps.names.slice_mut(0, c.names),
        big: maps.big.slice_mut(0, c.big),
    }
}

fn copy_one<T: Pod>(
    array: &mut SharedArray<T>,
    per_generation: u32,
    from: u32,
    to: u32,
    index: u32,
) {
    array.copy_within(
        slot(from, per_generation, index),
        slot(to, per_generation, index),
        1,
    );
}

fn copy_all<T: Pod>(array: &mut SharedArray<T>, per_generation: u32, from: u32, to: u32) {
    array.copy_within(
        slot(from, per_generation, 0),
        slot(to, per_generation, 0),
        per_generation,
    );
}

/// The zone `id` of `table` if the kernel table holds it.
fn admitted_zone<'t>(
    table: &'t RecordTable,
    admitted: &[bool],
    id: u32,
) -> Option<&'t hostport_dns_core::table::Zone> {
    admitted
        .get(id as usize)
        .copied()
        .unwrap_or(false)
        .then(|| table.zones().get(id as usize))
        .flatten()
}

/// Which zones of `table` the kernel table holds, per zone id: all of them when they fit, else
/// the zones in order as long as their names (`needs`) fit the entries of `capacity` (each kind,
/// or a larger one) and their number its zones. A zone is in whole or not at all, so that the kernel
/// never answers NXDOMAIN for a name it merely lacks: it passes every query of a zone left out
/// (no apex, no zone).
///
/// A pending zone (a source has not delivered it) is never in: userspace answers it SERVFAIL.
pub fn admission(table: &RecordTable, capacity: &Capacity, needs: &TableNeeds) -> Vec<bool> {
    let zones = table.zones().len();
    let zones_capacity = capacity.zones as usize;
    let ready = |id: usize| table.zones().get(id).is_some_and(|z| !z.spec.pending);
    if capacity.holds(needs.total) && zones <= zones_capacity {
        return (0..zones).map(ready).collect();
    }
    let mut taken = [0u32; 3];
    needs
        .by_zone
        .iter()
        .enumerate()
        .map(|(id, need)| {
            let with = [0, 1, 2].map(|k| taken[k] + need[k]);
            let fits = ready(id) && id < zones_capacity && capacity.holds(with);
            if fits {
                taken = with;
            }
            fits
        })
        .collect()
}

/// Names of the table that are not in the kernel table because their zones did not fit
/// (pending zones are left out too, but not for lack of room).
fn names_left_out(table: &RecordTable, admitted: &[bool]) -> usize {
    if admitted.iter().all(|a| *a) {
        return 0;
    }
    let out = |zone: u32| {
        !admitted.get(zone as usize).copied().unwrap_or(false)
            && table
                .zones()
                .get(zone as usize)
                .is_some_and(|z| !z.spec.pending)
    };
    table.nodes().filter(|(_, node)| out(node.zone)).count()
}

/// The array map `name`, mapped, checked to hold `len` elements.
fn mapped<T: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    len: u32,
) -> Result<SharedArray<T>, WriteError> {
    let map = take(ebpf, name)?;
    let Map::Array(data) = &map else {
        return Err(WriteError::Mmap {
            map: name,
            source: std::io::Error::other("not an array"),
        });
    };
    let data: &MapData = data;
    let info = data.info().map_err(map_err(name))?;
    if info.max_entries() != len || info.value_size() as usize != size_of::<T>() {
        return Err(WriteError::Mmap {
            map: name,
            source: std::io::Error::other(format!(
                "{} entries of {} bytes, expected {len} of {}",
                info.max_entries(),
                info.value_size(),
                size_of::<T>()
            )),
        });
    }
    SharedArray::map(data.fd().as_fd(), len)
        .map_err(|source| WriteError::Mmap { map: name, source })
}

/// A random, non-zero hash seed (zero marks fresh maps).
fn random_seed() -> Result<u64, WriteError> {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom(2) writes at most the buffer's length into it.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(WriteError::Seed(std::io::Error::last_os_error()));
    }
    Ok(u64::from_ne_bytes(bytes).max(1))
}
