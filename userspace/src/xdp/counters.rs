//! Reads the XDP program's per-CPU counters.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use hostport_dns_common::{
    counters::{COUNTER_SLOTS, Counter},
    maps,
};

use crate::xdp::writer::WriteError;

pub struct Counters {
    array: PerCpuArray<MapData, u64>,
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
        Ok(Self { array })
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
