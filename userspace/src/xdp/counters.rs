//! Reads the XDP program's per-CPU counters.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use hostport_dns_common::{
    counters::{COUNTER_SLOTS, Counter, zone_counter_slot},
    limits::ZONES_CAPACITY,
    maps,
};

use crate::xdp::writer::WriteError;

pub struct Counters {
    array: PerCpuArray<MapData, u64>,
    /// Answers by zone and type.
    zones: PerCpuArray<MapData, u64>,
}

impl Counters {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, WriteError> {
        let map = ebpf
            .take_map(maps::COUNTERS)
            .ok_or(WriteError::MissingMap(maps::COUNTERS))?;
        let array = PerCpuArray::try_from(map).map_err(|source| WriteError::Map {
            map: maps::COUNTERS,
            source,
        })?;
        let map = ebpf
            .take_map(maps::ZONE_ANSWERS)
            .ok_or(WriteError::MissingMap(maps::ZONE_ANSWERS))?;
        let zones = PerCpuArray::try_from(map).map_err(|source| WriteError::Map {
            map: maps::ZONE_ANSWERS,
            source,
        })?;
        Ok(Self { array, zones })
    }

    /// Answers by zone id and type (true: AAAA), summed over the CPUs; zero cells left out.
    pub fn zone_answers(&self) -> Vec<(u32, bool, u64)> {
        (0..ZONES_CAPACITY)
            .flat_map(|zone| [(zone, false), (zone, true)])
            .filter_map(|(zone, aaaa)| {
                let total: u64 = self
                    .zones
                    .get(&zone_counter_slot(zone, aaaa), 0)
                    .map(|per_cpu| per_cpu.iter().sum())
                    .unwrap_or(0);
                (total > 0).then_some((zone, aaaa, total))
            })
            .collect()
    }

    /// Every counter summed over the CPUs, in slot order.
    pub fn read(&self) -> Vec<(Counter, u64)> {
        (0..COUNTER_SLOTS)
            .map(|slot| {
                let total = self
                    .array
                    .get(&slot, 0)
                    .map(|per_cpu| per_cpu.iter().sum())
                    .unwrap_or(0);
                (Counter::ALL[slot as usize], total)
            })
            .collect()
    }

    /// One counter, summed over the CPUs.
    pub fn get(&self, counter: Counter) -> u64 {
        self.array
            .get(&(counter as u32), 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or(0)
    }
}
