//! The pinned program's lease (`Generation::lease_until`): a pinned program outlives its agent,
//! so that a restart loses no query; the lease bounds how long it answers once no agent runs
//! (`helm uninstall`, a node taken out of the DaemonSet). The agent renews it every second
//! through its mapping of `HPD_GEN` (a store, no system call); past it the program passes every
//! packet. A new agent that adopts a table whose lease still runs renews it at once (no gap); a
//! table whose lease ran out answers again only once the new agent has written its own.

use std::{
    io,
    os::fd::AsFd,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use aya::{
    Ebpf,
    maps::{Map, MapData},
};
use hostport_dns_common::{
    generation::{Generation, LEASE_RENEW_SECONDS, NO_LEASE},
    maps,
};

use crate::xdp::shared::SharedArray;

/// The lease on a pinned table, held by its agent.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<Inner>,
}

struct Inner {
    state: SharedArray<Generation>,
    duration: Duration,
    /// Whether this agent vouches for the table (renews the lease).
    vouching: AtomicBool,
}

// SAFETY: the mapping is only reached through atomics on the one field this type writes.
unsafe impl Sync for Inner {}

impl Lease {
    /// Maps the loaded program's `HPD_GEN`; call before the table's writer takes the map.
    pub fn take_over(ebpf: &Ebpf, duration: Duration) -> io::Result<Self> {
        let Some(Map::Array(data)) = ebpf.map(maps::GENERATION) else {
            return Err(io::Error::other("the program has no generation map"));
        };
        Self::take_over_map(data, duration)
    }

    /// Maps `HPD_GEN` (`map`). The lease is taken over at once if the table in place (adopted
    /// from a previous agent) is still leased, or has nothing to answer yet; otherwise from
    /// [`Lease::vouch`].
    pub fn take_over_map(map: &MapData, duration: Duration) -> io::Result<Self> {
        let state = SharedArray::<Generation>::map(map.fd().as_fd(), 1)?;
        let held = state.get(0);
        let live = held.active_generation().is_none()
            || held.lease_until == NO_LEASE
            || held.lease_until >= monotonic_coarse_ns();
        let lease = Self {
            inner: Arc::new(Inner {
                state,
                duration,
                vouching: AtomicBool::new(live),
            }),
        };
        lease.renew();
        Ok(lease)
    }

    /// Until when the table is leased (`CLOCK_MONOTONIC_COARSE` ns).
    pub fn until(&self) -> u64 {
        self.field().load(Ordering::Relaxed)
    }

    /// From now on this agent vouches for the table (its own first table is written).
    pub fn vouch(&self) {
        self.inner.vouching.store(true, Ordering::Relaxed);
        self.renew();
    }

    /// Extends the lease by its duration from now, if this agent vouches for the table.
    pub fn renew(&self) {
        if self.inner.vouching.load(Ordering::Relaxed) {
            let until = monotonic_coarse_ns().saturating_add(self.inner.duration.as_nanos() as u64);
            self.field().store(until, Ordering::Relaxed);
        }
    }

    /// Renews the lease every [`LEASE_RENEW_SECONDS`], for as long as the agent runs.
    pub async fn keep(self) {
        let mut every = tokio::time::interval(Duration::from_secs(LEASE_RENEW_SECONDS));
        loop {
            every.tick().await;
            self.renew();
        }
    }

    fn field(&self) -> &AtomicU64 {
        let state = self.inner.state.as_ptr(0);
        // SAFETY: an 8-byte-aligned u64 of the mapping, which lives as long as `self`; the
        // program only reads it, and nothing else in the agent writes it.
        unsafe { AtomicU64::from_ptr(&raw mut (*state).lease_until) }
    }
}

/// Now, on the clock `bpf_ktime_get_coarse_ns` reads.
pub fn monotonic_coarse_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}
