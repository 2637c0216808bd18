//! The lease of a pinned table: the renewal the agent runs every second, and the timer callback
//! that ends the lease when no renewal came in time. The answer path only reads the word these
//! two write (`Generation::lease`, checked in `table`): no clock read per packet. Why the two
//! cannot undo each other is in `hostport_dns_common::generation::LeaseClock`.

use aya_ebpf::{
    helpers::generated::{
        bpf_ktime_get_ns, bpf_timer_init, bpf_timer_set_callback, bpf_timer_start,
    },
    programs::XdpContext,
};
use core::ffi::c_void;
use hostport_dns_common::generation::{
    Generation, LEASE_EXPIRED, LeaseClock, NO_LEASE, next_lease_epoch,
};

use crate::{HPD_GEN, HPD_LEASE, atomic, packet};

/// `CLOCK_MONOTONIC`, the clock `bpf_ktime_get_ns` reads (`include/uapi/linux/time.h`).
const CLOCK_MONOTONIC: u64 = 1;

/// `bpf_timer_init` on a timer already initialised (`-EBUSY`): a renewal after the first.
const ALREADY_INITIALISED: i64 = -16;

/// Why a renewal failed; the program's return code tells the agent which
/// ([`RenewError::action`]).
#[derive(Clone, Copy)]
pub enum RenewError {
    /// The frame does not carry the duration, or a map element is missing.
    Input,
    /// A timer helper refused.
    Timer,
}

impl RenewError {
    /// The return code: `XDP_ABORTED` for bad input, `XDP_DROP` for a timer refused (a
    /// renewal that succeeds returns `XDP_PASS`).
    pub fn action(self) -> u32 {
        match self {
            Self::Input => aya_ebpf::bindings::xdp_action::XDP_ABORTED,
            Self::Timer => aya_ebpf::bindings::xdp_action::XDP_DROP,
        }
    }
}

/// Renews the lease for the duration the frame's first eight bytes carry (nanoseconds, native
/// byte order): the deadline, then a new live epoch, then the timer.
#[inline(always)]
pub fn renew(ctx: &XdpContext) -> Result<(), RenewError> {
    let duration: *const u64 = packet::ptr_at(ctx, 0).map_err(|_| RenewError::Input)?;
    // SAFETY: eight bytes inside the frame (checked by ptr_at); unaligned, so read as such.
    let duration = unsafe { core::ptr::read_unaligned(duration) };
    let clock: *mut LeaseClock = HPD_LEASE.get_ptr_mut(0).ok_or(RenewError::Input)?;
    let state: *mut Generation = HPD_GEN.get_ptr_mut(0).ok_or(RenewError::Input)?;
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the one element of each map; only renewals (one agent, one thread) write `clock`
    // outside its timer, and the callback only reads it.
    unsafe {
        core::ptr::write_volatile(&raw mut (*clock).deadline, now.saturating_add(duration));
        let epoch = next_lease_epoch((*clock).epoch);
        (*clock).epoch = epoch;
        // Fully ordered: the callback that reads this epoch sees the deadline stored above.
        atomic::swap(&raw mut (*state).lease, epoch);
        let timer = (&raw mut (*clock).timer).cast();
        let init = bpf_timer_init(
            timer,
            (&raw const HPD_LEASE).cast_mut().cast(),
            CLOCK_MONOTONIC,
        );
        if init != 0 && init != ALREADY_INITIALISED {
            return Err(RenewError::Timer);
        }
        // Each renewal names its own program's callback: the timer then holds this program,
        // not a previous agent's.
        if bpf_timer_set_callback(timer, expire as *mut c_void) != 0
            || bpf_timer_start(timer, duration, 0) != 0
        {
            return Err(RenewError::Timer);
        }
    }
    Ok(())
}

/// The timer's callback: ends the lease unless a renewal came since the timer was started.
/// Returns 0, as the kernel requires of timer callbacks.
#[inline(never)]
extern "C" fn expire(_map: *mut c_void, _key: *mut u32, clock: *mut LeaseClock) -> i64 {
    let Some(state) = HPD_GEN.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the one element of HPD_GEN; `clock` is the element whose timer fired.
    unsafe {
        let word = &raw mut (*state).lease;
        // A fully ordered read (adding nothing): the deadline read below is at least as new as
        // the renewal that stored this epoch.
        let seen = atomic::fetch_add(word, 0);
        if seen == NO_LEASE || seen == LEASE_EXPIRED {
            return 0;
        }
        let deadline = core::ptr::read_volatile(&raw const (*clock).deadline);
        if bpf_ktime_get_ns() < deadline {
            return 0;
        }
        atomic::compare_exchange(word, seen, LEASE_EXPIRED);
    }
    0
}
