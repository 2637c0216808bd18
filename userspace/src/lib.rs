//! hostport-dns: the agent. Sources produce records, the table compiler turns them into one
//! immutable table, and both answer paths serve it: the XDP program (from maps the agent writes)
//! and the userspace server.

pub mod agent;
pub mod agent_config;
pub mod atomic_file;
pub mod clients;
pub mod commands;
pub mod config;
pub mod config_schema;
pub mod exposition;
pub mod health;
pub mod heap;
pub mod http;
pub mod kernel_path;
pub mod kernel_table_size;
pub mod liveness;
pub mod metrics;
pub mod name_grammar;
pub mod ops;
pub mod outputs;
pub mod persist;
pub mod publisher;
pub mod reference;
pub mod serials;
pub mod server;
pub mod sources;
pub mod stop;
pub mod transfer;
pub mod update;
pub mod xdp;
pub mod zone_entry;

/// The XDP program's object file, built by the build script.
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hostport-dns-xdp"));

/// The test bed's object: the same program, plus a pass-through program and the benchmark's
/// reflector (never loaded by the agent).
#[doc(hidden)]
pub static TESTBED_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hostport-dns-xdp-testbed"));

/// The log target of the XDP program's own records (`--ebpf-log-level`).
pub const EBPF_LOG_TARGET: &str = "hostport_dns_xdp";
