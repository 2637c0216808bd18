//! The pinned program's lease (`Generation::lease`): a pinned program outlives its agent, so
//! that a restart loses no query; the lease bounds how long it answers once no agent runs
//! (`helm uninstall`, a node taken out of the DaemonSet). The agent renews it every second by
//! running the program's renewal entry (`BPF_PROG_TEST_RUN`), which stores a new live epoch and
//! re-arms a BPF timer; when the timer fires with no renewal since, it marks the lease expired
//! and the program passes every packet (how, and why the answer path then reads no clock:
//! `hostport_dns_common::generation::LeaseClock`). A new agent that adopts a table whose lease
//! still runs renews it at once (no gap); a table whose lease ran out answers again only once
//! the new agent has written its own.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use aya::{
    Ebpf,
    maps::{Map, MapData},
    programs::{ProgramError, Xdp},
};
use hostport_dns_common::{
    generation::{Generation, LEASE_EXPIRED, LEASE_RENEW_SECONDS},
    maps,
};
use tracing::warn;

use crate::xdp::{
    shared::SharedArray,
    syscall::{self, attr},
};

/// The lease on a pinned table, held by its agent.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<Inner>,
}

struct Inner {
    /// The table whose lease this is: replaced when the table is (a resize:
    /// `kernel_table_size`).
    table: Mutex<Arc<Leased>>,
    duration: Duration,
    /// Whether this agent vouches for the table (renews the lease).
    vouching: AtomicBool,
}

/// One table's lease word and renewal program.
struct Leased {
    /// `HPD_GEN`, mapped to read the lease word.
    state: SharedArray<Generation>,
    /// The loaded renewal program (`maps::RENEW_PROGRAM`).
    renewal: OwnedFd,
}

// SAFETY (both): the mapping is only read, through an atomic, at the one word this type reads,
// from whichever thread holds the lease; it is unmapped once, when the last holder drops it.
unsafe impl Sync for Leased {}
unsafe impl Send for Leased {}

impl Lease {
    /// Takes the object's renewal program (loaded with the object: `loader::load_object`) and
    /// maps its `HPD_GEN`; call before the table's writer takes the map. The lease is taken over at once if the table in place (adopted from a
    /// previous agent) is still leased, or has nothing to answer yet; otherwise from
    /// [`Lease::vouch`]. Needs BPF timers (Linux 5.15).
    pub fn take_over(ebpf: &Ebpf, duration: Duration) -> io::Result<Self> {
        let Some(Map::Array(data)) = ebpf.map(maps::GENERATION) else {
            return Err(io::Error::other("the program has no generation map"));
        };
        Self::take_over_map(data, ebpf, duration)
    }

    /// [`Lease::take_over`] with `HPD_GEN` opened apart (`map`), when the object no longer holds
    /// it.
    pub fn take_over_map(map: &MapData, ebpf: &Ebpf, duration: Duration) -> io::Result<Self> {
        let table = Leased::open(map, ebpf)?;
        let held = table.state.get(0);
        let live = held.active_generation().is_none() || held.lease != LEASE_EXPIRED;
        let lease = Self {
            inner: Arc::new(Inner {
                table: Mutex::new(Arc::new(table)),
                duration,
                vouching: AtomicBool::new(live),
            }),
        };
        if live {
            lease.run_renewal()?;
        }
        Ok(lease)
    }

    /// The lease of a newly loaded object's fresh table (`ebpf`, before its writer takes
    /// `HPD_GEN`), to be handed over to by [`Lease::hand_over`].
    pub fn prepare(ebpf: &Ebpf) -> io::Result<NextLease> {
        let Some(Map::Array(map)) = ebpf.map(maps::GENERATION) else {
            return Err(io::Error::other("the program has no generation map"));
        };
        Ok(NextLease(Arc::new(Leased::open(map, ebpf)?)))
    }

    /// Leases `next`'s table from now on, in place of the one leased so far, which is no longer
    /// renewed: call once that table is whole and before its program replaces the previous one
    /// on the interfaces, so that it is leased from its first answer. The previous program keeps
    /// what its last renewal gave it, ample for the swap that follows. Returns the previous
    /// table's lease, to hand back to if the swap fails.
    pub fn hand_over(&self, next: NextLease) -> io::Result<NextLease> {
        let previous = std::mem::replace(&mut *self.table(), next.0);
        if let Err(error) = self.run_renewal() {
            *self.table() = previous;
            return Err(error);
        }
        Ok(NextLease(previous))
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Arc<Leased>> {
        self.inner.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease word the program reads (`Generation::lease`): a live epoch, `LEASE_EXPIRED` or
    /// `NO_LEASE`.
    pub fn word(&self) -> u64 {
        let table = self.table().clone();
        let state = table.state.as_ptr(0);
        // SAFETY: an 8-byte-aligned u64 of the mapping, which lives as long as `table`; read
        // atomically since the program writes it.
        unsafe { AtomicU64::from_ptr(&raw mut (*state).lease) }.load(Ordering::Acquire)
    }

    /// From now on this agent vouches for the table (its own first table is written).
    pub fn vouch(&self) {
        self.inner.vouching.store(true, Ordering::Relaxed);
        self.renew();
    }

    /// Extends the lease by its duration from now, if this agent vouches for the table.
    pub fn renew(&self) {
        if self.inner.vouching.load(Ordering::Relaxed)
            && let Err(error) = self.run_renewal()
        {
            warn!(%error, "cannot renew the pinned table's lease");
        }
    }

    /// Renews the lease for its duration from now: runs the renewal program once.
    fn run_renewal(&self) -> io::Result<()> {
        let mut frame = [0u8; RENEWAL_FRAME_LEN];
        let nanos = u64::try_from(self.inner.duration.as_nanos()).unwrap_or(u64::MAX);
        frame[..8].copy_from_slice(&nanos.to_ne_bytes());
        let table = self.table().clone();
        let fd = table.renewal.as_raw_fd() as u32;
        let mut run = attr(&[
            (TEST_PROG_FD, &fd.to_ne_bytes()),
            (TEST_DATA_SIZE_IN, &(RENEWAL_FRAME_LEN as u32).to_ne_bytes()),
            (TEST_DATA_IN, &(frame.as_ptr() as u64).to_ne_bytes()),
            (TEST_REPEAT, &1u32.to_ne_bytes()),
        ]);
        syscall::bpf(syscall::BPF_PROG_TEST_RUN, &mut run)?;
        // `retval`: the upper half of the first word (offset 4).
        match run[0] >> 32 {
            XDP_PASS => Ok(()),
            XDP_ABORTED => Err(io::Error::other(
                "the renewal program found no duration or no map",
            )),
            _ => Err(io::Error::other(
                "the kernel refused to arm the lease's timer",
            )),
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
}

/// A table's lease, prepared before its writer takes its maps (see [`Lease::prepare`]).
pub struct NextLease(Arc<Leased>);

impl Leased {
    /// `map` (`HPD_GEN`) mapped, and the renewal program of `ebpf`.
    fn open(map: &MapData, ebpf: &Ebpf) -> io::Result<Self> {
        Ok(Self {
            renewal: renewal_program(ebpf)?,
            state: SharedArray::<Generation>::map(map.fd().as_fd(), 1)?,
        })
    }
}

/// The renewal's frame: the duration, padded past an Ethernet header (the least
/// `BPF_PROG_TEST_RUN` takes for XDP).
const RENEWAL_FRAME_LEN: usize = 64;

/// Offsets in `union bpf_attr`'s `test` member (`include/uapi/linux/bpf.h`).
const TEST_PROG_FD: usize = 0;
const TEST_DATA_SIZE_IN: usize = 8;
const TEST_DATA_IN: usize = 16;
const TEST_REPEAT: usize = 32;

/// The renewal program's return codes (`ebpf/src/lease.rs`).
const XDP_ABORTED: u64 = 0;
const XDP_PASS: u64 = 2;

/// The descriptor of the object's renewal program, which must have been loaded with the object:
/// its instructions name the maps by the descriptors the object held then.
fn renewal_program(ebpf: &Ebpf) -> io::Result<OwnedFd> {
    let failed = |e: ProgramError| io::Error::other(format!("the lease's renewal program: {e}"));
    let program: &Xdp = ebpf
        .program(maps::RENEW_PROGRAM)
        .ok_or_else(|| io::Error::other("the object has no lease renewal program"))?
        .try_into()
        .map_err(failed)?;
    let fd = program.fd().map_err(failed)?;
    fd.as_fd().try_clone_to_owned()
}
