//! The TCP server's limits and their defaults: a leaf, so that the command line reads its
//! defaults without importing the server. The idle timeout is the DNS core's
//! (`answer::TCP_IDLE_TIMEOUT`): answers announce it.

/// Open connections served at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Open connections from one client address, by default.
pub const DEFAULT_MAX_PER_CLIENT: usize = 32;
/// The IPv6 prefix length a TCP client is counted by (one host's /64).
pub const DEFAULT_CLIENT_PREFIX_V6: u8 = 64;
