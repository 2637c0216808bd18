//! The one writer of the kernel's record table: names, zones and the node's addresses, in two
//! generations (the design is in `hostport_dns_common::generation`). It writes only the
//! generation no program run reads, switches to it in one store, waits until no run can still
//! read the one it left, and brings that one up to date with the same change.
//!
//! Two ways to bring a generation up to date: the whole table (the first publication, adopted
//! pinned maps, zone or capacity changes, and any generation a failed write left unknown),
//! compared entry by entry with what the kernel holds; and the changes of the names a change
//! touched, which cost the same however large the table is. Between writes the writer keeps
//! which name each key holds, not the entries: those are rebuilt from the table when touched.

use std::os::fd::{AsFd, OwnedFd};

use hickory_proto::rr::LowerName;
use rustc_hash::FxHashMap;

use aya::{
    Ebpf, Pod,
    maps::{Array, HashMap as BpfHashMap, Map, MapData, MapError},
};
use hostport_dns_common::{
    generation::{GENERATIONS, Generation, NO_GENERATION, generation_of_key, name_key, zone_slot},
    limits::{NAMES_CAPACITY, ZONES_CAPACITY},
    maps,
    record::{LocalAddrs, NameEntry, NameKey, ZoneEntry},
};
use tracing::warn;

use crate::{
    table::RecordTable,
    xdp::{
        grace::Grace,
        image::{self, Image},
        syscall,
    },
};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the XDP object has no map {0}")]
    MissingMap(&'static str),
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
    #[error("waiting for the XDP program's running invocations failed: {0}")]
    Grace(std::io::Error),
    #[error("no random hash seed: {0}")]
    Seed(std::io::Error),
    #[error("map {map}: {source}")]
    Batch {
        map: &'static str,
        source: std::io::Error,
    },
}

/// How much of the table one generation may hold. The kernel's maps are sized for
/// [`NAMES_CAPACITY`] and [`ZONES_CAPACITY`]; a smaller capacity (tests) leaves more to userspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub names: usize,
    pub zones: usize,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            names: NAMES_CAPACITY as usize,
            zones: ZONES_CAPACITY as usize,
        }
    }
}

/// What one publication changed, counted in the generation it switched to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// The generation now active.
    pub generation: u32,
    pub names_written: usize,
    pub names_removed: usize,
    pub zones_written: usize,
    /// Names sharing a key with another (answered by userspace).
    pub collisions: usize,
    /// Names in the kernel table.
    pub names_held: usize,
    /// Names of zones that did not fit the kernel table (answered by userspace).
    pub names_left_out: usize,
}

pub struct MapWriter {
    names: BpfHashMap<MapData, NameKey, NameEntry>,
    /// The name map's descriptor, for the batch writes aya does not offer.
    names_fd: OwnedFd,
    zones: Array<MapData, ZoneEntry>,
    local: Array<MapData, LocalAddrs>,
    state: Array<MapData, Generation>,
    grace: Grace,
    /// What every generation should hold.
    image: Image,
    local_addrs: LocalAddrs,
    /// The table `image` was made from (cheap to keep: its parts are shared).
    table: Option<RecordTable>,
    active: Option<u32>,
    /// Per generation, the label counts of its zone apexes, as `HPD_GEN` holds them.
    apex_labels: [u16; GENERATIONS as usize],
    /// Per generation: whether the kernel holds exactly `image` and `local_addrs` in it.
    in_step: [bool; GENERATIONS as usize],
    capacity: Capacity,
}

/// A change to replay into a generation that held the previous state.
struct Delta<'a> {
    changes: &'a image::Changes,
    /// Which generations held the previous state.
    held_previous: [bool; GENERATIONS as usize],
}

impl MapWriter {
    /// Takes the maps out of the loaded object. They may hold a previous agent's table (pinned
    /// maps adopted): its active generation keeps answering until the first publication, which
    /// compares the whole table with what the kernel holds; its hash seed is kept.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, WriteError> {
        Self::with_capacity(ebpf, Capacity::default())
    }

    pub fn with_capacity(ebpf: &mut Ebpf, capacity: Capacity) -> Result<Self, WriteError> {
        let names_map = take(ebpf, maps::NAMES)?;
        let names_fd = match &names_map {
            Map::HashMap(data) => data.fd().as_fd().try_clone_to_owned(),
            _ => Err(std::io::Error::other("not a hash map")),
        }
        .map_err(|source| WriteError::Batch {
            map: maps::NAMES,
            source,
        })?;
        let names = BpfHashMap::try_from(names_map).map_err(map_err(maps::NAMES))?;
        let zones = Array::try_from(take(ebpf, maps::ZONES)?).map_err(map_err(maps::ZONES))?;
        let local = Array::try_from(take(ebpf, maps::LOCAL)?).map_err(map_err(maps::LOCAL))?;
        let mut state: Array<MapData, Generation> =
            Array::try_from(take(ebpf, maps::GENERATION)?).map_err(map_err(maps::GENERATION))?;
        let held = state.get(&0, 0).map_err(map_err(maps::GENERATION))?;
        let (seed, active, apex_labels) = if held.seed == 0 {
            // Fresh maps: a new install.
            let seed = random_seed()?;
            let fresh = Generation::empty(seed);
            state.set(0, fresh, 0).map_err(map_err(maps::GENERATION))?;
            (seed, None, fresh.apex_labels)
        } else {
            (held.seed, held.active_generation(), held.apex_labels)
        };
        Ok(Self {
            names,
            names_fd,
            zones,
            local,
            state,
            grace: Grace::new().map_err(WriteError::Grace)?,
            image: Image::new(seed),
            local_addrs: LocalAddrs::EMPTY,
            table: None,
            active,
            apex_labels,
            in_step: [false; GENERATIONS as usize],
            capacity: capacity.clamped(),
        })
    }

    /// The hash seed of the table.
    pub fn seed(&self) -> u64 {
        self.image.seed()
    }

    /// The active generation, if one is.
    pub fn active(&self) -> Option<u32> {
        self.active
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Makes the kernel answer from the whole of `table`.
    pub fn write_table(&mut self, table: &RecordTable) -> Result<WriteStats, WriteError> {
        let mut image = self.image.fresh(image::admission(
            table,
            self.capacity.names,
            self.capacity.zones,
        ));
        image.refresh_zones(table);
        image.place_all(table, |_, _| {});
        self.image = image;
        self.table = Some(table.clone());
        self.in_step = [false; GENERATIONS as usize];
        self.switch(None)
    }

    /// Makes the kernel answer from `table`, which differs from the last one written in the
    /// entries of `names` (those a change touched) and possibly in its zones' SOA records.
    pub fn write_names(
        &mut self,
        table: &RecordTable,
        names: &[LowerName],
    ) -> Result<WriteStats, WriteError> {
        let admitted = image::admission(table, self.capacity.names, self.capacity.zones);
        if admitted != self.image.admitted() {
            return self.write_table(table);
        }
        let held_previous = self.in_step;
        let changes = self.image.refresh(table, names);
        self.table = Some(table.clone());
        self.in_step = [false; GENERATIONS as usize];
        self.switch(Some(Delta {
            changes: &changes,
            held_previous,
        }))
    }

    /// Makes the kernel answer for the node's addresses in `local` (the next generation carries
    /// them; before the first table is written, the first one will).
    pub fn write_local(&mut self, local: LocalAddrs) -> Result<(), WriteError> {
        if bytes_of(&local) == bytes_of(&self.local_addrs) {
            return Ok(());
        }
        self.local_addrs = local;
        if self.table.is_none() {
            return Ok(());
        }
        let held_previous = self.in_step;
        self.in_step = [false; GENERATIONS as usize];
        let nothing = image::Changes::default();
        self.switch(Some(Delta {
            changes: &nothing,
            held_previous,
        }))
        .map(drop)
    }

    /// Brings the inactive generation up to date, switches to it, and brings the one it left up
    /// to date too. On failure the active generation stays as it was.
    fn switch(&mut self, delta: Option<Delta>) -> Result<WriteStats, WriteError> {
        let next = self.active.map_or(0, |g| 1 - g);
        let mut stats = self.bring_up(next, delta.as_ref())?;
        self.activate(next)?;
        let left = 1 - next;
        if let Err(err) = self.bring_up(left, delta.as_ref()) {
            // The new generation answers; the one left is rewritten whole before it is used.
            warn!(%err, generation = left, "bringing the inactive generation up to date failed");
        }
        stats.generation = next;
        stats.collisions = self.image.collisions();
        stats.names_held = self.image.names.len();
        stats.names_left_out = match &self.table {
            Some(table) => self.image.names_left_out(table),
            None => 0,
        };
        Ok(stats)
    }

    /// Makes `generation` hold the image and the node's addresses: by replaying the change if it
    /// held the previous state, else by comparing everything.
    fn bring_up(
        &mut self,
        generation: u32,
        delta: Option<&Delta>,
    ) -> Result<WriteStats, WriteError> {
        let stats = match delta {
            Some(delta) if delta.held_previous[generation as usize] => {
                self.replay(generation, delta.changes)?
            }
            _ => self.rewrite(generation)?,
        };
        self.local
            .set(generation, self.local_addrs, 0)
            .map_err(map_err(maps::LOCAL))?;
        let apex_labels = self.table.as_ref().map_or(0, |t| self.image.apex_labels(t));
        if self.apex_labels[generation as usize] != apex_labels {
            let held = self.apex_labels;
            self.apex_labels[generation as usize] = apex_labels;
            // The active generation's fields are written with the values they hold. A failed
            // write leaves the copy as the kernel holds it, so the next bring-up writes again.
            if let Err(err) = self.write_state(self.active) {
                self.apex_labels = held;
                return Err(err);
            }
        }
        self.in_step[generation as usize] = true;
        Ok(stats)
    }

    /// Applies `changes` to `generation`: what each key ends with (a key removed and then given
    /// to another name in one change ends with the other name), removals first so that the
    /// generation never holds more than its capacity, each kind in one system call.
    fn replay(
        &mut self,
        generation: u32,
        changes: &image::Changes,
    ) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats::default();
        for id in &changes.zones {
            let entry = self.image.zones.get(id).unwrap_or(&ZoneEntry::EMPTY);
            self.zones
                .set(zone_slot(generation, *id), entry, 0)
                .map_err(map_err(maps::ZONES))?;
            stats.zones_written += 1;
        }
        let mut last: FxHashMap<NameKey, Option<&NameEntry>> = FxHashMap::default();
        for (key, entry) in &changes.names {
            last.insert(name_key(*key, generation), entry.as_deref());
        }
        let (mut keys, mut values, mut gone) = (Vec::new(), Vec::new(), Vec::new());
        for (key, entry) in last {
            match entry {
                Some(entry) => {
                    keys.push(key);
                    values.push(*entry);
                }
                None => gone.push(key),
            }
        }
        if let Err((done, _)) = syscall::delete_batch(self.names_fd.as_fd(), &gone) {
            // One key missing stops the batch: the rest one by one, missing ones allowed.
            for key in &gone[done..] {
                match self.names.remove(key) {
                    Ok(()) | Err(MapError::KeyNotFound) => {}
                    Err(source) => return Err(map_err(maps::NAMES)(source)),
                }
            }
        }
        syscall::update_batch(self.names_fd.as_fd(), &keys, &values).map_err(|source| {
            WriteError::Batch {
                map: maps::NAMES,
                source,
            }
        })?;
        stats.names_written = keys.len();
        stats.names_removed = gone.len();
        Ok(stats)
    }

    /// Makes `generation` hold exactly the image, whatever it held: stale names removed first
    /// (so that the generation never holds more than its capacity), then every entry compared
    /// with the kernel's and written where it differs.
    fn rewrite(&mut self, generation: u32) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats::default();
        let Some(table) = self.table.as_ref() else {
            return Ok(stats);
        };
        for id in 0..self.capacity.zones as u32 {
            let entry = self.image.zones.get(&id).unwrap_or(&ZoneEntry::EMPTY);
            let slot = zone_slot(generation, id);
            let held = self.zones.get(&slot, 0).map_err(map_err(maps::ZONES))?;
            if bytes_of(&held) != bytes_of(entry) {
                self.zones
                    .set(slot, entry, 0)
                    .map_err(map_err(maps::ZONES))?;
                stats.zones_written += 1;
            }
        }
        // Collected first: deleting while iterating would restart the kernel's key walk.
        let stale: Vec<NameKey> = self
            .names
            .keys()
            .flatten()
            .filter(|key| {
                generation_of_key(*key) == generation
                    && !self.image.names.contains_key(&name_key(*key, 0))
            })
            .collect();
        for key in &stale {
            self.names.remove(key).map_err(map_err(maps::NAMES))?;
        }
        stats.names_removed = stale.len();
        for key in self.image.names.keys() {
            let Some(entry) = self.image.entry_at(table, *key) else {
                continue;
            };
            let key = name_key(*key, generation);
            let differs = self
                .names
                .get(&key, 0)
                .map_or(true, |held| bytes_of(&held) != bytes_of(&entry));
            if differs {
                self.names
                    .insert(key, entry, 0)
                    .map_err(map_err(maps::NAMES))?;
                stats.names_written += 1;
            }
        }
        Ok(stats)
    }

    /// The atomic switch: one store of the active generation, then the wait until no program run
    /// can still be reading the one it replaces.
    fn activate(&mut self, generation: u32) -> Result<(), WriteError> {
        self.write_state(Some(generation))?;
        self.active = Some(generation);
        self.grace.wait().map_err(WriteError::Grace)
    }

    /// Writes `HPD_GEN`: `active` as the active generation, the seed, each generation's apex
    /// label counts.
    fn write_state(&mut self, active: Option<u32>) -> Result<(), WriteError> {
        let state = Generation {
            seed: self.image.seed(),
            active: active.unwrap_or(NO_GENERATION),
            apex_labels: self.apex_labels,
        };
        self.state
            .set(0, state, 0)
            .map_err(map_err(maps::GENERATION))
    }
}

impl Capacity {
    /// No more than the kernel's maps hold.
    fn clamped(self) -> Self {
        Self {
            names: self.names.min(NAMES_CAPACITY as usize),
            zones: self.zones.min(ZONES_CAPACITY as usize),
        }
    }
}

fn map_err(map: &'static str) -> impl Fn(MapError) -> WriteError {
    move |source| WriteError::Map { map, source }
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

/// The bytes of a plain-old-data value.
pub fn bytes_of<V: Pod>(value: &V) -> &[u8] {
    // SAFETY: Pod types are plain bytes without padding.
    unsafe { std::slice::from_raw_parts((value as *const V).cast::<u8>(), size_of::<V>()) }
}

fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, WriteError> {
    ebpf.take_map(name).ok_or(WriteError::MissingMap(name))
}
