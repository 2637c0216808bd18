//! Returning freed heap memory to the kernel after large transient work. A relist or a whole
//! table compile allocate more than the result keeps (the record file is parsed as it is read,
//! so its text and events are not held whole: see `sources::file`); glibc's allocator keeps
//! what they freed mapped, so the process's resident memory (what the memory cgroup and the
//! chart's limit see) would stay at the transient peak. After work that large, the free pages
//! are given back (`malloc_trim`); small changes never pay for it.
//!
//! The allocator's arenas are limited to one per CPU (glibc's default is eight per CPU): each
//! arena keeps its own free memory, and the agent's threads (sources, publisher, writer,
//! persister, servers) would otherwise each fill one. Measured with 100k pods on 2 CPUs: 83 →
//! 76 MiB of heap.

/// Names changed by one publication (or written by one kernel write) from which the freed
/// memory is given back.
pub const RELEASE_AFTER_NAMES: usize = 4096;

/// Gives freed heap pages back to the kernel if `names` changed (see the module's text).
pub fn release_after(names: usize) {
    if names >= RELEASE_AFTER_NAMES {
        release();
    }
}

/// Gives freed heap pages back to the kernel now.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no pointer is passed.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Limits the allocator to one arena per CPU; call before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let arenas = i32::try_from(cpus).unwrap_or(i32::MAX).max(2);
        // SAFETY: mallopt takes two integers; called before other threads allocate.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
