//! Returning freed heap memory to the kernel after large transient work. Parsing a record file
//! of 100,000 names (the YAML parser holds every event of the document at once), a relist, or a
//! whole table compile allocate several times what the result keeps; glibc's allocator keeps
//! what they freed mapped, so the process's resident memory (what the memory cgroup and the
//! chart's limit see) would stay at the transient peak. After work that large, the free pages
//! are given back (`malloc_trim`); small changes never pay for it.

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
