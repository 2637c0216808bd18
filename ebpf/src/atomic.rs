//! Fully ordered atomic read-modify-writes on map memory. The BPF target offers no `Atomic*`
//! read-modify-write methods, so these call the intrinsics those methods lower to; with the
//! result used, the compiler emits the fetching forms (`BPF_FETCH`), which every JIT orders
//! fully (x86 `lock xadd`/`lock cmpxchg`; arm64 `ldaddal`/`casal`, or exclusive loops and
//! `dmb ish`). The non-fetching `BPF_ADD` is relaxed on arm64: callers use the result.

use core::intrinsics::{
    AtomicOrdering::SeqCst, atomic_cxchg, atomic_xadd, atomic_xchg, atomic_xsub,
};

/// Adds `value` to `*at`; returns what it held.
///
/// # Safety
/// `at` points to an aligned u64 in map memory.
#[inline(always)]
pub unsafe fn fetch_add(at: *mut u64, value: u64) -> u64 {
    // SAFETY: as the caller promises.
    unsafe { atomic_xadd::<u64, u64, { SeqCst }>(at, value) }
}

/// Subtracts `value` from `*at`; returns what it held.
///
/// # Safety
/// `at` points to an aligned u64 in map memory.
#[inline(always)]
pub unsafe fn fetch_sub(at: *mut u64, value: u64) -> u64 {
    // SAFETY: as the caller promises.
    unsafe { atomic_xsub::<u64, u64, { SeqCst }>(at, value) }
}

/// Replaces `*at` with `new` if it holds `current`: whether it did.
///
/// # Safety
/// `at` points to an aligned u64 in map memory.
#[inline(always)]
pub unsafe fn compare_exchange(at: *mut u64, current: u64, new: u64) -> bool {
    // SAFETY: as the caller promises.
    unsafe { atomic_cxchg::<u64, { SeqCst }, { SeqCst }>(at, current, new) }.1
}

/// Stores `value` into `*at`; returns what it held (`BPF_XCHG`, fully ordered).
///
/// # Safety
/// `at` points to an aligned u64 in map memory.
#[inline(always)]
pub unsafe fn swap(at: *mut u64, value: u64) -> u64 {
    // SAFETY: as the caller promises.
    unsafe { atomic_xchg::<u64, { SeqCst }>(at, value) }
}
