//! The kernel side, seen from the agent: loading and attaching the XDP program, writing its maps
//! (one writer), keeping the node's addresses current, reading its counters.

pub mod counters;
mod grace;
pub mod image;
pub mod loader;
pub mod local_addrs;
mod syscall;
pub mod writer;

pub use loader::{Dataplane, EbpfLogLevel, XdpError, XdpMode};
