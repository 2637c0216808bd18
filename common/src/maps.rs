//! Names of the BPF maps, used by the program's `#[map]` declarations and by the agent to find
//! and pin them. Kernel map names are limited to 15 bytes.

/// Version of the pinned maps' key and value layouts, part of their pin file names. Bump it
/// whenever the layout of a pinned map changes: an upgraded agent then starts fresh maps instead
/// of adopting ones that the running program reads differently (which keeps its own maps until
/// its link is handed over).
pub const LAYOUT_VERSION: u32 = 5;

/// Which generation the program reads, and the hash seed: one
/// [`crate::generation::Generation`] (see [`crate::generation`] for the design).
pub const GENERATION: &str = "HPD_GEN";
/// [`crate::generation::name_key`] → [`crate::record::NameEntry`], both generations.
pub const NAMES: &str = "HPD_NAMES";
/// [`crate::generation::zone_slot`] → [`crate::record::ZoneEntry`], both generations.
pub const ZONES: &str = "HPD_ZONES";
/// The node's own addresses: one [`crate::record::LocalAddrs`] per generation.
pub const LOCAL: &str = "HPD_LOCAL";
/// Per-CPU counters indexed by [`crate::counters::Counter`].
pub const COUNTERS: &str = "HPD_COUNTERS";
/// Per-CPU answers by zone and type, indexed by [`crate::counters::zone_counter_slot`].
pub const ZONE_ANSWERS: &str = "HPD_ZONE_ANSW";

/// IPv4 client prefixes (LPM trie) → `PREFIX_*` grants ([`crate::policy`]).
pub const CLIENTS_V4: &str = "HPD_CLIENTS4";
/// IPv6 client prefixes (LPM trie) → `PREFIX_*` grants.
pub const CLIENTS_V6: &str = "HPD_CLIENTS6";
/// The rate limiter's buckets: [`crate::policy::RateBucket`] per slot.
pub const RATE: &str = "HPD_RATE";

/// Name of the XDP program in the object file.
pub const PROGRAM: &str = "hostport_dns_xdp";

/// A program that passes every packet (for the far end of a veth pair; in the test bed's object
/// only).
pub const PASS_PROGRAM: &str = "hostport_dns_pass";

/// The benchmark ceiling: reflects queries back without DNS work (the test bed's object only).
pub const REFLECT_PROGRAM: &str = "hostport_dns_reflect";

/// Global in the program holding the DNS port, set at load time.
pub const GLOBAL_DNS_PORT: &str = "HPD_DNS_PORT";

/// Global in the program holding its [`crate::policy::ClientPolicy`], set at load time.
pub const GLOBAL_POLICY: &str = "HPD_POLICY";
