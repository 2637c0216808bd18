//! The XDP program's per-CPU counters: reading them (metrics, `hostport-dns stats`), and the
//! per-zone counter slots the writer hands out so that counts follow zones, not zone ids.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aya::{
    Ebpf,
    maps::{Map, MapData, PerCpuArray, PerCpuValues},
};
use hickory_proto::rr::{LowerName, Name};
use hostport_dns_common::{
    counters::{ALL_COUNTER_SLOTS, COUNTER_SLOTS, Counter, Event, zone_counter_slot},
    limits::ZONES_CAPACITY,
    maps,
};
use rustc_hash::FxHashMap;

use crate::xdp::map_error::WriteError;

/// Which zone (its apex, as text) each per-zone counter slot counts now.
pub type ZoneSlotNames = Arc<Mutex<BTreeMap<u16, String>>>;

/// The counters of the program that answers, and of the programs it replaced: a resized table
/// is a new program with maps of its own (`xdp::resize`), and what the previous ones counted
/// stays in every total, so that counters never go back.
pub struct Counters {
    array: PerCpuArray<MapData, u64>,
    /// Answers by zone counter slot and type.
    zones: PerCpuArray<MapData, u64>,
    slot_names: ZoneSlotNames,
    /// The program this one replaced, read live: it may still finish a run or two after the
    /// switch.
    previous: Option<Box<Counters>>,
    /// The final totals of the programs before `previous`.
    retired: Retired,
}

/// Totals of programs that no longer run.
#[derive(Clone, Debug, Default)]
struct Retired {
    /// By counter slot (counters, then events).
    slots: Vec<u64>,
    /// By zone apex and type (true: AAAA).
    zones: BTreeMap<(String, bool), u64>,
}

impl Retired {
    fn slot(&self, slot: u32) -> u64 {
        self.slots.get(slot as usize).copied().unwrap_or(0)
    }

    /// Adds the totals of `counters` (its own maps: what it retired before is in it already).
    fn add(&mut self, counters: &Counters) {
        self.slots.resize(ALL_COUNTER_SLOTS as usize, 0);
        for (slot, total) in self.slots.iter_mut().enumerate() {
            *total += sum(&counters.array, slot as u32);
        }
        for (apex, aaaa, total) in counters.own_zone_answers() {
            *self.zones.entry((apex, aaaa)).or_default() += total;
        }
    }
}

impl Counters {
    /// Takes the counter maps out of the loaded object; `slot_names` says which zone each
    /// per-zone slot counts (the writer keeps it: [`ZoneCounters::names`]).
    pub fn new(ebpf: &mut Ebpf, slot_names: ZoneSlotNames) -> Result<Self, WriteError> {
        Ok(Self {
            array: per_cpu(ebpf, maps::COUNTERS)?,
            zones: per_cpu(ebpf, maps::ZONE_ANSWERS)?,
            slot_names,
            previous: None,
            retired: Retired::default(),
        })
    }

    /// These counters now count for the program of `previous`, which they replace: its totals,
    /// and those of the programs it replaced, stay in every figure. The program before
    /// `previous` has long stopped running; its totals are final and kept as numbers.
    pub fn succeed(&mut self, mut previous: Counters) {
        let mut retired = std::mem::take(&mut previous.retired);
        if let Some(older) = previous.previous.take() {
            retired.add(&older);
        }
        self.retired = retired;
        self.previous = Some(Box::new(previous));
    }

    /// Answers by zone apex and type (true: AAAA), summed over the CPUs and the programs this
    /// one replaced; zero cells and zones not served now left out.
    pub fn zone_answers(&self) -> Vec<(String, bool, u64)> {
        let mut totals: BTreeMap<(String, bool), u64> = BTreeMap::new();
        let earlier = self.previous.iter().flat_map(|p| p.own_zone_answers());
        for (apex, aaaa, total) in self.own_zone_answers().into_iter().chain(earlier) {
            *totals.entry((apex, aaaa)).or_default() += total;
        }
        for (key, total) in &self.retired.zones {
            *totals.entry(key.clone()).or_default() += total;
        }
        let served: std::collections::BTreeSet<String> = self
            .slot_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        totals
            .into_iter()
            .filter(|((apex, _), total)| *total > 0 && served.contains(apex))
            .map(|((apex, aaaa), total)| (apex, aaaa, total))
            .collect()
    }

    /// This program's own answers by zone apex and type, for the zones its slots count now.
    fn own_zone_answers(&self) -> Vec<(String, bool, u64)> {
        let names = self
            .slot_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        names
            .into_iter()
            .flat_map(|(slot, apex)| [(slot, apex.clone(), false), (slot, apex, true)])
            .filter_map(|(slot, apex, aaaa)| {
                let total = sum(&self.zones, zone_counter_slot(u32::from(slot), aaaa));
                (total > 0).then_some((apex, aaaa, total))
            })
            .collect()
    }

    /// Slot `slot` summed over the CPUs and the programs this one replaced.
    fn total(&self, slot: u32) -> u64 {
        let previous = self.previous.as_ref().map_or(0, |p| sum(&p.array, slot));
        sum(&self.array, slot) + previous + self.retired.slot(slot)
    }

    /// Every counter summed over the CPUs, in slot order.
    pub fn read(&self) -> Vec<(Counter, u64)> {
        (0..COUNTER_SLOTS)
            .map(|slot| (Counter::ALL[slot as usize], self.total(slot)))
            .collect()
    }

    /// One counter, summed over the CPUs.
    pub fn get(&self, counter: Counter) -> u64 {
        self.total(counter as u32)
    }

    /// Every event, summed over the CPUs.
    pub fn events(&self) -> Vec<(Event, u64)> {
        Event::ALL
            .iter()
            .map(|event| (*event, self.total(event.slot())))
            .collect()
    }

    /// One event, summed over the CPUs.
    pub fn event(&self, event: Event) -> u64 {
        self.total(event.slot())
    }
}

fn sum(array: &PerCpuArray<MapData, u64>, slot: u32) -> u64 {
    array
        .get(&slot, 0)
        .map(|per_cpu| per_cpu.iter().sum())
        .unwrap_or(0)
}

fn per_cpu(ebpf: &mut Ebpf, name: &'static str) -> Result<PerCpuArray<MapData, u64>, WriteError> {
    let map = ebpf.take_map(name).ok_or(WriteError::MissingMap(name))?;
    PerCpuArray::try_from(map).map_err(|source| WriteError::Map { map: name, source })
}

/// The per-zone counter slots: one per zone while it is served, whatever its id (ids shift when
/// zones come and go; the slot stays). A slot is zeroed before another zone gets it.
pub struct ZoneCounters {
    /// A second handle on `HPD_ZONE_ANSW` (the metrics own the first), to zero slots.
    array: PerCpuArray<MapData, u64>,
    slots: FxHashMap<LowerName, u16>,
    /// Slots the previous agent's zones held, by apex hash (pinned maps adopted).
    adopted: FxHashMap<u64, u16>,
    seed: u64,
    names: ZoneSlotNames,
}

impl ZoneCounters {
    /// Opens the per-zone counters of a loaded object (without taking them from it).
    pub fn open(ebpf: &Ebpf) -> Result<Self, WriteError> {
        let map = ebpf
            .map(maps::ZONE_ANSWERS)
            .ok_or(WriteError::MissingMap(maps::ZONE_ANSWERS))?;
        let id = match map {
            Map::PerCpuArray(data) => data.info(),
            _ => return Err(WriteError::MissingMap(maps::ZONE_ANSWERS)),
        }
        .map_err(|source| WriteError::Map {
            map: maps::ZONE_ANSWERS,
            source,
        })?
        .id();
        let data = MapData::from_id(id).map_err(|source| WriteError::Map {
            map: maps::ZONE_ANSWERS,
            source,
        })?;
        let array =
            PerCpuArray::try_from(Map::PerCpuArray(data)).map_err(|source| WriteError::Map {
                map: maps::ZONE_ANSWERS,
                source,
            })?;
        Ok(Self {
            array,
            slots: FxHashMap::default(),
            adopted: FxHashMap::default(),
            seed: 0,
            names: Arc::default(),
        })
    }

    /// Which zone each slot counts, for the metrics.
    pub fn names(&self) -> ZoneSlotNames {
        self.names.clone()
    }

    /// The slot of a zone given one by [`ZoneCounters::assign`] (0 for any other: never
    /// answered by the kernel).
    pub fn slot_of(&self, apex: &Name) -> u16 {
        self.slots.get(&LowerName::new(apex)).copied().unwrap_or(0)
    }

    /// Slots for exactly the zones `apexes`: a zone keeps its slot, a new one takes the slot it
    /// had under the previous agent or a free one (zeroed first), a zone gone frees its slot.
    pub fn assign<'a>(&mut self, apexes: impl Iterator<Item = &'a Name>) {
        let wanted: Vec<LowerName> = apexes.map(LowerName::new).collect();
        self.slots.retain(|apex, _| wanted.contains(apex));
        for apex in wanted {
            if self.slots.contains_key(&apex) {
                continue;
            }
            let hash = hostport_dns_common::hash::name_hash(
                self.seed,
                hostport_dns_core::dns::WireName::from_lower(&apex).as_bytes(),
            );
            let taken: std::collections::BTreeSet<u16> = self.slots.values().copied().collect();
            let slot = match self.adopted.remove(&hash) {
                Some(slot) if !taken.contains(&slot) => slot,
                _ => {
                    let Some(free) = (0..ZONES_CAPACITY as u16).find(|s| !taken.contains(s)) else {
                        continue;
                    };
                    self.zero(free);
                    free
                }
            };
            self.slots.insert(apex, slot);
        }
        let names = self
            .slots
            .iter()
            .map(|(apex, slot)| (*slot, Name::from(apex).to_ascii()))
            .collect();
        *self.names.lock().unwrap_or_else(|e| e.into_inner()) = names;
    }

    /// The slots a previous agent's zones held: (apex hash, slot) under `seed`.
    pub fn adopt(&mut self, seed: u64, held: &[(u64, u32)]) {
        self.seed = seed;
        self.adopted = held
            .iter()
            .filter_map(|(hash, slot)| Some((*hash, u16::try_from(*slot).ok()?)))
            .collect();
    }

    /// Sets the table's seed (apex hashes of adopted slots are under it).
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    fn zero(&mut self, slot: u16) {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        for aaaa in [false, true] {
            if let Ok(zeros) = PerCpuValues::try_from(vec![0u64; cpus]) {
                let _ = self
                    .array
                    .set(zone_counter_slot(u32::from(slot), aaaa), zeros, 0);
            }
        }
    }
}
