//! Waiting until no run of the XDP program can still be reading the generation it just left.
//!
//! XDP programs run inside RCU read-side critical sections, so an RCU grace period started after
//! the switch ends only once every run that may have read the old generation index has returned.
//! Userspace cannot call `synchronize_rcu()` itself, but the kernel calls it for us on every
//! update of a map-in-map (`maybe_wait_bpf_programs()` in `kernel/bpf/syscall.c`, since Linux
//! 5.0; the kernel's own selftests use it this way): this module keeps a one-slot
//! `BPF_MAP_TYPE_ARRAY_OF_MAPS`, no program uses it, and [`Grace::wait`] updates its slot.
//!
//! aya 0.14 cannot create a map-in-map, so the two maps are made with the `bpf(2)` system call
//! directly.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// `bpf(2)` commands and map types (`include/uapi/linux/bpf.h`).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;

/// Bytes of `union bpf_attr` this module passes (its fields are at the front; the kernel checks
/// that the rest is zero).
const ATTR_WORDS: usize = 32;

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
        let mut attr = [0u64; ATTR_WORDS / 2];
        attr[0] = self.outer.as_raw_fd() as u64;
        attr[1] = &key as *const u32 as u64;
        attr[2] = &value as *const u32 as u64;
        // flags (attr[3]): BPF_ANY.
        bpf(BPF_MAP_UPDATE_ELEM, attr.as_ptr().cast()).map(drop)
    }
}

/// A one-slot map of 4-byte keys and values (an inner map's fd, for a map-in-map).
fn create_map(map_type: u32, inner: Option<&OwnedFd>, name: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = [0u32; ATTR_WORDS];
    attr[0] = map_type;
    attr[1] = 4; // key_size
    attr[2] = 4; // value_size
    attr[3] = 1; // max_entries
    attr[5] = inner.map_or(0, |fd| fd.as_raw_fd() as u32); // inner_map_fd
    // map_name: 16 bytes from word 7, NUL-terminated.
    let mut name_bytes = [0u8; 16];
    let len = name.len().min(15);
    name_bytes[..len].copy_from_slice(&name[..len]);
    for (i, chunk) in name_bytes.chunks(4).enumerate() {
        attr[7 + i] = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    let fd = bpf(BPF_MAP_CREATE, attr.as_ptr().cast())?;
    // SAFETY: a fresh descriptor the kernel gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn bpf(cmd: libc::c_long, attr: *const u8) -> io::Result<libc::c_long> {
    // SAFETY: attr points to ATTR_WORDS * 4 readable bytes laid out as union bpf_attr.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, ATTR_WORDS * 4) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
