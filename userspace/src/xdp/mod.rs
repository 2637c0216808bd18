//! The kernel side, seen from the agent: checking the kernel (`probe`), loading and attaching
//! the XDP program (`loader`, `pins`, `lease`), the table in kernel form (`entries`, `layout`,
//! `hostset`), writing it (`writer`, owned by one thread: `writer_thread`), keeping the node's
//! addresses current (`local_addrs`), reading its counters (`counters`).

pub mod counters;
pub mod entries;
mod grace;
pub mod hostset;
pub mod layout;
pub mod lease;
pub mod loader;
pub mod local_addrs;
mod map_error;
pub mod pinned_table;
pub mod pins;
pub mod probe;
mod readers;
pub mod shared;
mod syscall;
pub mod writer;
pub mod writer_thread;

pub use loader::{Dataplane, EbpfLogLevel, XdpError, XdpMode};
