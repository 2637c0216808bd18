//! hostport-dns agent library.

/// The XDP program's object file, built by the build script.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hostport-dns"));
