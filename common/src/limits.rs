//! Named bounds. Each says whether the DNS protocol, the eBPF verifier or the table's memory sets
//! it. This module imports nothing: every other module may use it.

/// Longest domain name in wire form, root byte included (protocol: RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;

/// Longest label (protocol: RFC 1035 §2.3.4; the two top bits of a length byte mark pointers).
pub const MAX_LABEL_LEN: usize = 63;

/// Most labels a name can have: 255 bytes hold at most 127 one-byte labels and the root
/// (protocol). It bounds the kernel's label walk (verifier).
pub const MAX_LABELS: usize = 128;

/// Size of the buffer the kernel keeps the question name in. A power of two so that the kernel
/// can bound an index with a mask (verifier).
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

/// A records the kernel answers for one name; a larger set is answered by userspace (an index
/// way that passes, see `index::PASS_REF`).
pub const MAX_XDP_A_RECORDS: usize = 16;

/// AAAA records the kernel answers for one name; a larger set is answered by userspace.
pub const MAX_XDP_AAAA_RECORDS: usize = 16;

/// Bytes of one IPv4 address in an entry's payload.
pub const A_ADDR_LEN: usize = 4;

/// Bytes of one IPv6 address in an entry's payload.
pub const AAAA_ADDR_LEN: usize = 16;

/// Wire size of one A record whose owner is a pointer to the question: pointer 2, type 2,
/// class 2, TTL 4, length 2, address 4.
pub const A_RR_LEN: usize = 16;

/// Wire size of one AAAA record whose owner is a pointer to the question.
pub const AAAA_RR_LEN: usize = 28;

/// Bytes of addresses one name holds at most in the kernel table: full sets of both types. The
/// kernel copies a hit's addresses into its scratch space (`ebpf/src/scratch.rs`) of this size.
pub const MAX_ADDRESS_BYTES: usize =
    MAX_XDP_A_RECORDS * A_ADDR_LEN + MAX_XDP_AAAA_RECORDS * AAAA_ADDR_LEN;

/// Bytes of answer records the kernel writes at most: a full set of either type (the AAAA one is
/// the larger). Bounds the record loop's packet offsets (verifier).
pub const MAX_ANSWER_RRS_LEN: usize = MAX_XDP_AAAA_RECORDS * AAAA_RR_LEN;

/// Payload of a small entry: its addresses from the front, its name from the back. 64 bytes hold
/// a 52-byte name with 3 A records, a 48-byte name with 4 A records or one AAAA record: the
/// common case (`<value>.<namespace>.<zone>` served by a few nodes). With the 16-byte head an
/// entry is 80 bytes (see `entry`).
pub const SMALL_PAYLOAD_LEN: usize = 64;

/// Payload of a name entry: 144 bytes hold a name of up to 80 bytes with 16 A records (64
/// bytes) or 4 AAAA records (64 bytes), or a 48-byte name with 6 AAAA records: a name served by
/// a fleet. With the head an entry is 160 bytes.
pub const NAME_PAYLOAD_LEN: usize = 144;

/// Payload of a big entry: a name of up to 255 bytes and 16 A and 16 AAAA records (320 bytes).
pub const BIG_PAYLOAD_LEN: usize = 576;

/// Names the object's declared maps hold in small entries, and the size of a
/// table loaded without one of its own (tests, benchmarks; `generation::Capacity::DEFAULT`). The
/// agent sizes each kind of entry by the names that need it instead
/// (`generation::Capacity::resized`), from its smallest size up to its limit
/// ([`KERNEL_NAMES_LIMIT`] by default, `--kernel-names`).
pub const NAMES_CAPACITY: u32 = 131_072;

/// The fewest small entries a table has: names it holds before its small entries
/// first grow. 1,024 of them take 80 KiB (both generations share the entries).
pub const MIN_KERNEL_NAMES: u32 = 1_024;

/// The fewest name entries (160 bytes) a table has: 40 KiB.
pub const MIN_NAME_ENTRIES: u32 = 256;

/// The fewest big entries (592 bytes) a table has: 37 KiB.
pub const MIN_BIG_ENTRIES: u32 = 64;

/// How far each kind of entry grows by default (`--kernel-names`): names beyond it, zone by zone,
/// are answered by userspace. Memory follows the names served, not this bound.
pub const KERNEL_NAMES_LIMIT: u32 = 1_048_576;

/// The most `--kernel-names` may say (a bound on the maps' sizes).
pub const MAX_KERNEL_NAMES: u32 = 4_194_304;

/// A kind of entry grows to hold this many times the names that need it, over four (room for a
/// quarter as many again before the next growth), rounded up to the next size class (a power
/// of two, or three quarters of one: steps of at most 1.5x, so entries number at most 1.9 times
/// their names after growing).
pub const GROWTH_ROOM_QUARTERS: u32 = 5;

/// A kind of entry grows once fewer than one in this many of its entries would be free: entries
/// are written copy-on-write (a changed name takes a free slot; the one it leaves is free again
/// after the switch, `generation`), so a full kind would send every name a change touches to
/// userspace for a moment (until the follow-up publication). One in sixteen keeps 64 free at
/// the smallest size, 8,192 at 131,072.
pub const GROW_WHEN_FREE_ONE_IN: u32 = 16;

/// A kind of entry shrinks once the names that need it fill this fraction (one in so many) of it
/// or less: far enough below the growth point that a table does not move back and forth.
pub const SHRINK_WHEN_ONE_IN: u32 = 8;

/// Index buckets one generation has for every [`INDEX_NAMES_PER_BUCKET`] entries: at most 2.8
/// names a bucket of [`INDEX_WAYS`] ways (a kind grows before it is fifteen sixteenths full),
/// 1.9 to 2.4 when it has just grown, a name placed in the emptier of its two candidate buckets
/// finds a free way with all but negligible probability (the fullest bucket of 2^16 holds about
/// 3 + log2 log2 2^16 = 7 names; simulated, 131,392 names in 43,798 buckets fill none past six,
/// and a million in 349,632 none past six either). One that does not is answered by userspace,
/// and so are the misses of its buckets. Any count works (the index maps a hash onto it by
/// multiplication). Three rather than two: the index is the part of the table held twice (the
/// entries are shared): 43 bytes an entry over both generations, where a bucket for every two
/// took 64.
pub const INDEX_NAMES_PER_BUCKET: u32 = 3;

/// The most index buckets a generation has: a bucket is chosen from 24 bits of the hash.
pub const MAX_INDEX_BUCKETS: u32 = 1 << 24;

/// Ways (names) one index bucket holds: seven 4-byte tags, a flags word and seven 4-byte entry
/// references fill one 64-byte cache line (verifier: bounds the tag scan).
pub const INDEX_WAYS: usize = 7;

/// Zones one generation of the kernel table holds (the zone array holds two generations).
pub const ZONES_CAPACITY: u32 = 256;

/// The most slots the host-address set of one generation has, and its size in a table loaded
/// without one of its own (tests, benchmarks): this host's addresses (every interface,
/// link-local and the Service addresses IPVS holds included) and its subnets' broadcast
/// addresses. With 8,192 addresses (a quarter used) a lookup ends after a probe or two; 24 bytes
/// a slot, 768 KiB a generation. The agent sizes the set by the addresses it holds
/// (`generation::Capacity::host_class`).
pub const HOST_SLOTS: u32 = 32_768;

/// The fewest slots the agent's host-address set has: 64 addresses use at most a quarter of it;
/// 12 KiB for both generations.
pub const MIN_HOST_SLOTS: u32 = 256;

/// Slots the kernel probes in the host-address set before it concludes an address is not there
/// (verifier: bounds the probe loop). The agent places every address within this many of its
/// home slot, or leaves it out (and says so).
pub const HOST_PROBES: usize = 16;

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

/// Longest SOA record (owner pointer included) the kernel writes. A zone whose SOA is longer
/// (long server or mailbox names outside the zone) has its negative answers made by userspace.
pub const MAX_SOA_RR_LEN: usize = 128;

/// Compression pointers the kernel patches into a zone's SOA record: its owner, the server and
/// mailbox names, and one spare.
pub const MAX_SOA_PATCHES: usize = 4;

/// Names (hashes) inside a zone whose presence in a question would change how userspace
/// compresses the SOA record (see `entry::ZoneEntry::guards`).
pub const MAX_SOA_GUARDS: usize = 8;

/// EDNS options the kernel walks to check an OPT record is well formed (verifier; a query with
/// more is passed to userspace, which parses it fully).
pub const MAX_EDNS_OPTIONS: usize = 8;

/// The default ceiling on UDP answers (`--udp-max-payload`, Knot's `udp-max-payload`): an
/// answer is as large as the client offers, up to this, and the OPT record advertises it. This
/// product's clients are load balancers on the data-centre network that offer 8192 bytes
/// (HAProxy's `accepted_payload_size 8192`) so that a whole fleet fits one answer: 250
/// dual-stack nodes' AAAA records take about 7 KB. Larger answers leave as IP fragments.
pub const DEFAULT_UDP_MAX_PAYLOAD: u16 = 8192;

/// The DNS flag day 2020 value, which fits any path MTU of 1280 or more without fragments: the
/// ceiling for clients across the Internet (`--udp-max-payload 1232`).
pub const FLAG_DAY_UDP_PAYLOAD: u16 = 1232;

/// The highest ceiling an operator may set: the most DNS one UDP datagram carries over IPv4
/// (65535 less the IPv4 and UDP headers).
pub const MAX_UDP_MAX_PAYLOAD: u16 = 65_507;

/// What a client without EDNS accepts (protocol: RFC 1035 §4.2.1).
pub const CLASSIC_UDP_PAYLOAD: u16 = 512;

/// Room for the headers and the question, moved forward while an answer grows at the packet's
/// head: Ethernet with a VLAN tag (18), IPv6 (40), UDP (8), DNS header (12), the longest question
/// (259); a power of two (verifier: bounds the copy).
pub const MAX_FRONT_LEN: usize = 512;

/// Packet offsets the kernel writes an answer at, and bytes an answer grows by, stay below this:
/// at most [`MAX_XDP_ANSWER_LEN`] bytes of DNS after at most 66 bytes of headers (verifier:
/// bounds packet offsets computed from lengths, a power of two for masks).
pub const MAX_PACKET_OFFSET: usize = 2048;

/// The largest DNS answer the kernel writes. Its answers are smaller by construction (a
/// question, at most 16 records of a type or one SOA, an OPT record: under 900 bytes); an
/// answer the client accepts but the kernel does not write is passed to userspace, which sends
/// it whole, up to the ceiling (`PassLargeSet`, `PassTooLarge`).
pub const MAX_XDP_ANSWER_LEN: usize = 1232;

/// Words of 8 bytes covering [`MAX_FRONT_LEN`] (verifier: bounds the front copy).
pub const FRONT_WORDS: usize = MAX_FRONT_LEN / 8;
