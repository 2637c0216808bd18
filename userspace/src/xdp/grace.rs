//! Waiting until no run of the XDP program can still be reading the generation it just left.
//!
//! XDP programs run inside RCU read-side critical sections, so an RCU grace period started after
//! the switch ends only once every run that may have read the old generation index has returned.
//! Userspace cannot call `synchronize_rcu()` itself, but the kernel calls it for us on every
//! update of a map-in-map (`maybe_wait_bpf_programs()` in `kernel/bpf/syscall.c`, since Linux
//! 5.0; the kernel's own selftests use it this way): this module keeps a one-slot
//! `BPF_MAP_TYPE_ARRAY_OF_MAPS`, no program uses it, and [`Grace::wait`] updates its slot.
//!
//! aya 0.14 can use a map-in-map but not create one, so the two maps are made with the `bpf(2)`
//! system call directly.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use crate::xdp::syscall::{BPF_MAP_CREATE, BPF_MAP_UPDATE_ELEM, attr, bpf};

const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;

pub struct Grace {
    outer: OwnedFd,
    inner: OwnedFd,
}

impl Grace {
    pub fn new() -> io::Result<Self> {
        let inner = create_map(BPF_MAP_TYPE_ARRAY, None, b"hpd_grace_in")?;
        let outer = create_map(BPF_MAP_TYPE_ARRAY_OF_MAPS, Some(&inner), b"hpd_grace")?;
        Ok(Self { outer, inner })
    }

    /// Returns once every XDP program run that started before the call has ended.
    pub fn wait(&self) -> io::Result<()> {
        let key = 0u32;
        let value = self.inner.as_raw_fd() as u32;
        // struct { map_fd: u32, pad; key, value, flags: u64 }; flags BPF_ANY.
        let mut attr = attr(&[
            (0, &(self.outer.as_raw_fd() as u32).to_ne_bytes()),
            (8, &(&key as *const u32 as u64).to_ne_bytes()),
            (16, &(&value as *const u32 as u64).to_ne_bytes()),
        ]);
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }
}

/// A one-slot map of 4-byte keys and values (an inner map's fd, for a map-in-map).
fn create_map(map_type: u32, inner: Option<&OwnedFd>, name: &[u8]) -> io::Result<OwnedFd> {
    let inner_fd = inner.map_or(0, |fd| fd.as_raw_fd() as u32);
    let mut map_name = [0u8; 16];
    let len = name.len().min(15);
    map_name[..len].copy_from_slice(&name[..len]);
    // struct { map_type, key_size, value_size, max_entries, map_flags, inner_map_fd,
    // numa_node: u32; map_name: [u8; 16]; ... }
    let mut attr = attr(&[
        (0, &map_type.to_ne_bytes()),
        (4, &4u32.to_ne_bytes()),
        (8, &4u32.to_ne_bytes()),
        (12, &1u32.to_ne_bytes()),
        (20, &inner_fd.to_ne_bytes()),
        (28, &map_name),
    ]);
    let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
    // SAFETY: a fresh descriptor the kernel gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
