//! The few `bpf(2)` commands aya 0.14 does not offer: creating a map-in-map (see `grace`) and
//! writing or deleting many entries in one call (`BPF_MAP_UPDATE_BATCH`, `BPF_MAP_DELETE_BATCH`:
//! one system call instead of one per entry, each of which pays the CPU's speculation
//! mitigations on entry and exit).

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
};

/// `bpf(2)` commands (`include/uapi/linux/bpf.h`).
pub const BPF_MAP_CREATE: libc::c_long = 0;
pub const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Bytes of `union bpf_attr` passed: its fields used here are at the front; the kernel checks
/// that the rest is zero.
pub const ATTR_LEN: usize = 128;

/// `union bpf_attr` as 8-byte words (for the pointers it holds).
pub type Attr = [u64; ATTR_LEN / 8];

/// An attribute whose bytes are `fields` at their offsets, zero elsewhere.
pub fn attr(fields: &[(usize, &[u8])]) -> Attr {
    let mut bytes = [0u8; ATTR_LEN];
    for (offset, field) in fields {
        bytes[*offset..*offset + field.len()].copy_from_slice(field);
    }
    let mut attr = [0u64; ATTR_LEN / 8];
    for (word, chunk) in attr.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(eight);
    }
    attr
}

/// One `bpf(2)` call with `attr` (which the kernel may write back into).
pub fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: attr is ATTR_LEN bytes; every pointer in it is valid for the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_LEN) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Writes `values[i]` under `keys[i]` for every i, in one call.
pub fn update_batch<K, V>(map: BorrowedFd, keys: &[K], values: &[V]) -> io::Result<()> {
    if keys.len() != values.len() {
        return Err(io::Error::other("as many keys as values"));
    }
    batch(BPF_MAP_UPDATE_BATCH, map, keys, values.as_ptr() as u64).map_err(|(_, err)| err)
}

/// Deletes `keys`, in one call. On failure, how many were deleted before it.
pub fn delete_batch<K>(map: BorrowedFd, keys: &[K]) -> Result<(), (usize, io::Error)> {
    batch(BPF_MAP_DELETE_BATCH, map, keys, 0)
}

fn batch<K>(
    cmd: libc::c_long,
    map: BorrowedFd,
    keys: &[K],
    values: u64,
) -> Result<(), (usize, io::Error)> {
    if keys.is_empty() {
        return Ok(());
    }
    // struct { in_batch, out_batch, keys, values: u64; count, map_fd: u32; elem_flags, flags }
    let count = keys.len() as u32;
    let mut attr = attr(&[
        (16, &(keys.as_ptr() as u64).to_ne_bytes()),
        (24, &values.to_ne_bytes()),
        (32, &count.to_ne_bytes()),
        (36, &(map.as_raw_fd() as u32).to_ne_bytes()),
    ]);
    let result = bpf(cmd, &mut attr);
    // The kernel reports in `count` how many it processed.
    let done = attr[4].to_ne_bytes();
    let done = u32::from_ne_bytes([done[0], done[1], done[2], done[3]]);
    result.map(drop).map_err(|err| (done as usize, err))
}
