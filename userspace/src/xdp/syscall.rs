//! The `bpf(2)` commands aya 0.14 does not offer here: creating a map-in-map and updating its
//! slot (see `grace`), and running a program from a descriptor it does not own (see `lease`).

use std::io;

/// `bpf(2)` commands (`include/uapi/linux/bpf.h`).
pub const BPF_MAP_CREATE: libc::c_long = 0;
pub const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
pub const BPF_PROG_TEST_RUN: libc::c_long = 10;

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
