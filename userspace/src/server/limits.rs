//! The TCP server's limits and their defaults: a leaf, so that the command line (its defaults)
//! and the answers (the keepalive they announce) read them without importing the server.

use std::time::Duration;

/// A connection with no query for this long is closed (RFC 7766 §6.2.3 suggests seconds).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections served at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Open connections from one client address, by default.
pub const DEFAULT_MAX_PER_CLIENT: usize = 32;
/// The IPv6 prefix length a TCP client is counted by (one host's /64).
pub const DEFAULT_CLIENT_PREFIX_V6: u8 = 64;
