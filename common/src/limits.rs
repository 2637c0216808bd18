//! Named bounds. Each says whether the DNS protocol or the eBPF verifier sets it.

/// Longest domain name in wire form, root byte included (protocol: RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;

/// Longest label (protocol: RFC 1035 §2.3.4; the two top bits of a length byte mark pointers).
pub const MAX_LABEL_LEN: usize = 63;

/// Most labels a name can have: 255 bytes hold at most 127 one-byte labels and the root
/// (protocol). It bounds the kernel's label walk (verifier).
pub const MAX_LABELS: usize = 128;

/// Size of the buffers names are kept in, on both sides. A power of two so that the kernel can
/// bound an index with a mask (verifier).
pub const NAME_BUF_LEN: usize = 256;

/// Words of 8 bytes covering a whole name buffer (verifier: bounds the word loops).
pub const NAME_WORDS: usize = NAME_BUF_LEN / 8;

/// Longest query the kernel parses; longer ones (large EDNS padding, many options) go to
/// userspace. It bounds the OPT walk's offsets (verifier).
pub const MAX_XDP_QUERY_LEN: usize = 512;

/// Most labels a zone apex may have. The kernel looks up at most this many suffixes of an unknown
/// name to find its zone, which bounds the cost of a miss (verifier and cost; validated by the
/// agent).
pub const MAX_ZONE_LABELS: usize = 16;

/// A records the kernel answers for one name; a larger set is answered by userspace
/// (value size: one A record is [`A_RR_LEN`] bytes).
pub const MAX_XDP_A_RECORDS: usize = 16;

/// AAAA records the kernel answers for one name; a larger set is answered by userspace.
pub const MAX_XDP_AAAA_RECORDS: usize = 16;

/// Wire size of one A record whose owner is a pointer to the question: pointer 2, type 2,
/// class 2, TTL 4, length 2, address 4.
pub const A_RR_LEN: usize = 16;

/// Wire size of one AAAA record whose owner is a pointer to the question.
pub const AAAA_RR_LEN: usize = 28;

/// Bytes of precomputed A records in a name entry.
pub const A_RRS_CAPACITY: usize = MAX_XDP_A_RECORDS * A_RR_LEN;

/// Bytes of precomputed AAAA records in a name entry.
pub const AAAA_RRS_CAPACITY: usize = MAX_XDP_AAAA_RECORDS * AAAA_RR_LEN;

/// Longest SOA record (owner pointer included) the kernel writes. A zone whose SOA is longer
/// (long server or mailbox names outside the zone) has its negative answers made by userspace.
pub const MAX_SOA_RR_LEN: usize = 128;

/// Compression pointers the kernel patches into a zone's SOA record: its owner, the server and
/// mailbox names, and one spare.
pub const MAX_SOA_PATCHES: usize = 4;

/// Names (hashes) inside a zone whose presence in a question would change how userspace
/// compresses the SOA record (see [`crate::record::ZoneEntry::guards`]).
pub const MAX_SOA_GUARDS: usize = 8;

/// EDNS options the kernel walks to check an OPT record is well formed (verifier; a query with
/// more is passed to userspace, which parses it fully).
pub const MAX_EDNS_OPTIONS: usize = 8;

/// The UDP payload size hostport-dns advertises and the largest answer the kernel builds: the
/// DNS flag day 2020 value, which fits any path MTU of 1280 or more.
pub const EDNS_PAYLOAD_SIZE: u16 = 1232;

/// What a client without EDNS accepts (protocol: RFC 1035 §4.2.1).
pub const CLASSIC_UDP_PAYLOAD: u16 = 512;

/// Room for the headers and the question, kept aside while an answer grows at the packet's
/// head: Ethernet with a VLAN tag (18), IPv6 (40), UDP (8), DNS header (12), the longest question
/// (259); a power of two (verifier: bounds the copy).
pub const MAX_FRONT_LEN: usize = 512;

/// Names one generation of the kernel table holds (the map holds two generations). The agent
/// checks it before writing: the zones whose names do not fit are left to userspace whole.
///
/// Cost: the hash map's bucket array has one 16-byte bucket per entry of its capacity
/// (rounded to a power of two), and every lookup lands in a random bucket. At 2 × 262,144
/// entries (8 MiB of buckets) `bench xdp` measured 520 ns per packet under load; at
/// 2 × 131,072 (4 MiB) 477 ns: the cache and TLB misses of a larger array. 131,072 names per
/// generation is room for 100k names and more.
pub const NAMES_CAPACITY: u32 = 131_072;

/// Zones one generation of the kernel table holds (the zone array holds two generations).
pub const ZONES_CAPACITY: u32 = 256;

/// IPv4 addresses of the node the kernel recognises as its own (VIPs included), scanned in order
/// (verifier: bounds the scan; a node with more has the rest answered by userspace).
pub const MAX_LOCAL_V4: usize = 16;

/// IPv6 addresses of the node the kernel recognises as its own.
pub const MAX_LOCAL_V6: usize = 16;

/// The DNS port hostport-dns serves by default (not 53: it runs beside the node's resolver).
pub const DEFAULT_DNS_PORT: u16 = 1053;

/// TTL of the records when the configuration does not say (seconds; coreha's default).
pub const DEFAULT_TTL: u32 = 5;

/// Slots of the rate-limit table (a power of two: the slot is a masked hash). 16 bytes each:
/// 1 MiB, whatever the number of sources; Knot's default table has 393,241 slots.
pub const RATE_BUCKETS: u32 = 65_536;

/// Prefixes each client trie (IPv4, IPv6) holds: the allow-list and the exempt prefixes
/// together (checked by the agent).
pub const MAX_CLIENT_PREFIXES: u32 = 1024;
