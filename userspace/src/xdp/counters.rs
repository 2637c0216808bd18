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
    counters::{COUNTER_SLOTS, Counter, Event, zone_counter_slot},
    limits::ZONES_CAPACITY,
    maps,
};
use rustc_hash::FxHashMap;

use crate::xdp::map_error::WriteError;

/// Which zone (its apex, as text) each per-zone counter slot counts now.
pub type ZoneSlotNames = Arc<Mutex<BTreeMap<u16, String>>>;

pub struct Counters {
    array: PerCpuArray<MapData, u64>,
    /// Answers by zone counter slot and type.
    zones: PerCpuArray<MapData, u64>,
    slot_names: ZoneSlotNames,
}

impl Counters {
    /// Takes the counter maps out of the loaded object; `slot_names` says which zone each
    /// per-zone slot counts (the writer keeps it: [`ZoneCounters::names`]).
    pub fn new(ebpf: &mut Ebpf, slot_names: ZoneSlotNames) -> Result<Self, WriteError> {
        Ok(Self {
            array: per_cpu(ebpf, maps::COUNTERS)?,
            zones: per_cpu(ebpf, maps::ZONE_ANSWERS)?,
            slot_names,
        })
    }

    /// Answers by zone apex and type (true: AAAA), summed over the CPUs; zero cells and slots no
    /// zone holds now left out.
    pub fn zone_answers(&self) -> Vec<(String, bool, u64)> {
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

    /// Every counter summed over the CPUs, in slot order.
    pub fn read(&self) -> Vec<(Counter, u64)> {
        (0..COUNTER_SLOTS)
            .map(|slot| (Counter::ALL[slot as usize], sum(&self.array, slot)))
            .collect()
    }

    /// One counter, summed over the CPUs.
    pub fn get(&self, counter: Counter) -> u64 {
        sum(&self.array, counter as u32)
    }

    /// Every event, summed over the CPUs.
    pub fn events(&self) -> Vec<(Event, u64)> {
        Event::ALL
            .iter()
            .map(|event| (*event, sum(&self.array, event.slot())))
            .collect()
    }

    /// One event, summed over the CPUs.
    pub fn event(&self, event: Event) -> u64 {
        sum(&self.array, event.slot())
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
                crate::dns::WireName::from_lower(&apex).as_bytes(),
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
