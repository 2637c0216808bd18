//! Bounds-checked access to packet bytes: every read or write proves to the verifier that it
//! stays inside the packet.

use aya_ebpf::programs::XdpContext;
use core::mem::size_of;
use hostport_dns_common::counters::Counter;

/// A `T`-sized view of the packet at `offset`, or `PassMalformed` if the packet is shorter.
#[inline(always)]
pub fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Result<*mut T, Counter> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + size_of::<T>() > end {
        return Err(Counter::PassMalformed);
    }
    Ok((start + offset) as *mut T)
}

/// Bytes in the packet.
#[inline(always)]
pub fn len(ctx: &XdpContext) -> usize {
    ctx.data_end() - ctx.data()
}

/// A big-endian u16 from two bytes.
#[inline(always)]
pub fn be16(bytes: [u8; 2]) -> u16 {
    u16::from_be_bytes(bytes)
}

/// `i & mask`, where the compiler does not know the mask: it cannot drop the AND when it can
/// prove `i` in range by facts the verifier does not track (the verifier does know the mask: a
/// constant spilled to the stack). Callers pass values already in range.
#[inline(always)]
pub fn bound(i: usize, mask: usize) -> usize {
    // SAFETY: a plain local.
    i & unsafe { core::ptr::read_volatile(&mask) }
}

/// `arr[i]` for a power-of-two sized array, the index bounded into range: no bounds-check panic
/// for the verifier to reject, and a bound it can see. Callers pass indexes already in range.
#[inline(always)]
pub fn masked<T, const N: usize>(arr: &[T; N], i: usize) -> &T {
    const { assert!(N.is_power_of_two()) };
    // SAFETY: bound(i, N - 1) < N.
    unsafe { arr.get_unchecked(bound(i, N - 1)) }
}

/// Mutable [`masked`].
#[inline(always)]
pub fn masked_mut<T, const N: usize>(arr: &mut [T; N], i: usize) -> &mut T {
    const { assert!(N.is_power_of_two()) };
    // SAFETY: bound(i, N - 1) < N.
    unsafe { arr.get_unchecked_mut(bound(i, N - 1)) }
}
