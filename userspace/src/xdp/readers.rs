//! Waiting until no run of the XDP program can still be reading a generation the writer left:
//! every CPU's count of the runs inside that generation (`HPD_READERS`) seen at zero once, after
//! a full fence (why that suffices: `hostport_dns_common::generation`). Runs are short, so this
//! takes microseconds; a CPU busy for longer than `READER_WAIT_LIMIT_US` (a descheduled vCPU)
//! makes the wait fall back to an RCU grace period (`grace`), which no run outlives.

use std::{
    sync::atomic::{Ordering, fence},
    time::{Duration, Instant},
};

use aya::maps::{MapData, PerCpuArray};
use hostport_dns_common::generation::{READER_WAIT_LIMIT_US, ReaderSlot};

use crate::xdp::grace::Grace;

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// Every CPU was seen outside the generation.
    Quiescent,
    /// Some CPU stayed inside past the limit: an RCU grace period was waited for instead.
    GracePeriod,
}

pub struct Readers {
    slots: PerCpuArray<MapData, ReaderSlot>,
    grace: Grace,
    limit: Duration,
}

impl Readers {
    pub fn new(slots: PerCpuArray<MapData, ReaderSlot>) -> std::io::Result<Self> {
        Ok(Self {
            slots,
            grace: Grace::new()?,
            limit: Duration::from_micros(READER_WAIT_LIMIT_US),
        })
    }

    /// Returns once no run that entered `generation` before the call can still be inside it.
    /// The caller has already switched the active generation away from it.
    pub fn wait_out(&self, generation: u32) -> std::io::Result<Waited> {
        // Orders the switch (a store) before the reads of the counts (loads): see the design.
        fence(Ordering::SeqCst);
        let started = Instant::now();
        let mut pending: Option<Vec<bool>> = None;
        loop {
            let counts = self
                .slots
                .get(&0, 0)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let inside = pending.get_or_insert_with(|| vec![true; counts.len()]);
            for (cpu, slot) in counts.iter().enumerate() {
                if slot.readers[generation as usize & 1] == 0
                    && let Some(flag) = inside.get_mut(cpu)
                {
                    *flag = false;
                }
            }
            if inside.iter().all(|busy| !busy) {
                return Ok(Waited::Quiescent);
            }
            if started.elapsed() > self.limit {
                self.grace.wait()?;
                return Ok(Waited::GracePeriod);
            }
            std::hint::spin_loop();
        }
    }
}
