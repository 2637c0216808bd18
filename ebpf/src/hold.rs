//! The test bed's build only: keeps a run inside its read section for a while, when the test
//! asks for it (`HPD_HOLD`), so that a writer that does not wait for readers is caught reading
//! generations it rewrites (`tests/tests/integration/generations.rs`).

use crate::HPD_HOLD;

/// Most iterations of the hold loop (verifier: bounds it); a few microseconds each thousand.
const MAX_HOLD_ITERATIONS: u32 = 16_384;

/// Spins for `HPD_HOLD` iterations (0: not at all).
#[inline(always)]
pub fn readers() {
    // SAFETY: a plain read of a global the test sets at load time; volatile so that it is read.
    let iterations = unsafe { core::ptr::read_volatile(&HPD_HOLD) };
    let mut sink = 0u32;
    let mut i = 0;
    while i < MAX_HOLD_ITERATIONS {
        if i >= iterations {
            break;
        }
        // SAFETY: a local; volatile so that the loop is not removed.
        unsafe { core::ptr::write_volatile(&mut sink, i) };
        i += 1;
    }
}
