//! Names of the BPF maps and globals, used by the program's `#[map]` declarations and by the agent
//! to find and pin them (kernel map names are limited to 15 bytes), and the layout fingerprint
//! that decides whether pinned maps can be adopted.

use crate::{
    counters::{ALL_COUNTER_SLOTS, ZONE_COUNTER_SLOTS},
    entry::{BigEntry, NameEntry, SmallEntry, ZoneEntry},
    generation::{Capacity, Generation, LeaseClock, ReaderSlot},
    host::HostSlot,
    index::Bucket,
    policy::RateBucket,
};

/// Version of the pinned maps' layout, part of their pin file names. Bump it whenever the layout
/// of a pinned map changes: an upgraded agent then starts fresh maps instead of adopting ones that
/// the running program reads differently (which keeps its own maps until its link is handed
/// over). Version 6: arrays (index, two entry sizes, host set), per-CPU reader counts. Version 8:
/// the lease is a word a timer clears (`generation::LeaseClock`), not a deadline the run compares
/// with the clock. Version 9: three kinds of entry, each sized by its own names, an index of any
/// bucket count, a host set sized by the host's addresses. Version 10: the entries are shared by
/// both generations (written copy-on-write, only the index, zones and host set are generational),
/// and the index has a bucket for every three entries.
pub const LAYOUT_VERSION: u32 = 10;

/// Which generation is active, the hash seed and the layout fingerprint: one
/// [`Generation`] (see `generation` for the design).
pub const GENERATION: &str = "HPD_GEN";
/// The name index: [`Bucket`]s, both generations.
pub const INDEX: &str = "HPD_INDEX";
/// Small name entries ([`SmallEntry`]), one array both generations share (written
/// copy-on-write: see `generation`).
pub const SMALL: &str = "HPD_SMALL";
/// Name entries ([`NameEntry`]), shared like [`SMALL`].
pub const NAMES: &str = "HPD_NAMES";
/// Big name entries ([`BigEntry`]), shared like [`SMALL`].
pub const BIG: &str = "HPD_BIG";
/// Zone entries ([`ZoneEntry`]), both generations.
pub const ZONES: &str = "HPD_ZONES";
/// This host's addresses ([`HostSlot`]s), both generations.
pub const HOST: &str = "HPD_HOST";
/// The lease's timer, deadline and epoch: one [`LeaseClock`] (a BTF-defined map).
pub const LEASE: &str = "HPD_LEASE";
/// Per-CPU counts of the runs reading each generation ([`ReaderSlot`]).
pub const READERS: &str = "HPD_READERS";
/// Per-CPU counters indexed by `counters::Counter`, then `counters::Event`.
pub const COUNTERS: &str = "HPD_COUNTERS";
/// Per-CPU answers by zone and type, indexed by `counters::zone_counter_slot`.
pub const ZONE_ANSWERS: &str = "HPD_ZONE_ANSW";

/// IPv4 client prefixes (LPM trie) → `PREFIX_*` grants (`policy`).
pub const CLIENTS_V4: &str = "HPD_CLIENTS4";
/// IPv6 client prefixes (LPM trie) → `PREFIX_*` grants.
pub const CLIENTS_V6: &str = "HPD_CLIENTS6";
/// The rate limiter's buckets: [`RateBucket`] per slot.
pub const RATE: &str = "HPD_RATE";

/// Name of the XDP program in the object file.
pub const PROGRAM: &str = "hostport_dns_xdp";

/// The lease's renewal: run by the agent (`BPF_PROG_TEST_RUN`, never attached), it stores a new
/// live epoch and arms the lease's timer (`generation::LeaseClock`).
pub const RENEW_PROGRAM: &str = "hostport_dns_renew";

/// A program that passes every packet (for the far end of a veth pair; in the test bed's object
/// only).
pub const PASS_PROGRAM: &str = "hostport_dns_pass";

/// The benchmark ceiling: reflects queries back without DNS work (the test bed's object only).
pub const REFLECT_PROGRAM: &str = "hostport_dns_reflect";

/// Global in the program holding the DNS port, set at load time.
pub const GLOBAL_DNS_PORT: &str = "HPD_DNS_PORT";

/// Global in the program holding its `policy::ClientPolicy`, set at load time.
pub const GLOBAL_POLICY: &str = "HPD_POLICY";

/// Global in the program holding the ceiling on UDP answers (`--udp-max-payload`), set at load
/// time.
pub const GLOBAL_UDP_MAX_PAYLOAD: &str = "HPD_UDP_MAX_PAYLOAD";

/// Global in the program holding the table's [`Capacity`], set at load time.
pub const GLOBAL_CAPACITY: &str = "HPD_CAPACITY";

/// The maps a table lives in, which the agent pins and adopts together, with their key and value
/// sizes and their element counts for `capacity`.
pub const fn pinned_maps(capacity: &Capacity) -> [(&'static str, usize, u32); 12] {
    let g = crate::generation::GENERATIONS;
    [
        (GENERATION, size_of::<Generation>(), 1),
        (INDEX, size_of::<Bucket>(), g * capacity.buckets),
        (SMALL, size_of::<SmallEntry>(), capacity.small),
        (NAMES, size_of::<NameEntry>(), capacity.names),
        (BIG, size_of::<BigEntry>(), capacity.big),
        (ZONES, size_of::<ZoneEntry>(), g * capacity.zones),
        (HOST, size_of::<HostSlot>(), g * capacity.host),
        (READERS, size_of::<ReaderSlot>(), 1),
        (LEASE, size_of::<LeaseClock>(), 1),
        (COUNTERS, size_of::<u64>(), ALL_COUNTER_SLOTS),
        (ZONE_ANSWERS, size_of::<u64>(), ZONE_COUNTER_SLOTS),
        (RATE, size_of::<RateBucket>(), crate::limits::RATE_BUCKETS),
    ]
}

/// A fingerprint of everything the maps' layout depends on: the version, every pinned map's value
/// size and element count. An agent adopts pinned maps only when the fingerprint their
/// [`Generation`] holds equals its own (and every map is there with these sizes).
pub const fn layout_fingerprint(capacity: &Capacity) -> u32 {
    let maps = pinned_maps(capacity);
    let mut hash = crate::hash::mix(0x6a09_e667_f3bc_c908, LAYOUT_VERSION as u64);
    let mut i = 0;
    while i < maps.len() {
        let (_, value, entries) = maps[i];
        hash = crate::hash::mix(hash, ((value as u64) << 32) | entries as u64);
        i += 1;
    }
    (hash ^ (hash >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_take_what_the_capacity_says() {
        // The maps the agent pins (and checks the program's against) are what `map_bytes`
        // reports: the entries once, the index, zones and host set for each generation.
        let table_maps = [INDEX, SMALL, NAMES, BIG, ZONES, HOST];
        for capacity in [
            Capacity::DEFAULT,
            Capacity::of([1024, 256, 64]).with_host(256),
        ] {
            let bytes: u64 = pinned_maps(&capacity)
                .iter()
                .filter(|(name, _, _)| table_maps.contains(name))
                .map(|(_, value, entries)| *value as u64 * *entries as u64)
                .sum();
            assert_eq!(bytes, capacity.map_bytes());
        }
    }

    #[test]
    fn the_fingerprint_changes_with_the_capacity() {
        assert_ne!(
            layout_fingerprint(&Capacity::DEFAULT),
            layout_fingerprint(&Capacity::for_names(1024))
        );
        // Any one kind's size counts, and the host set's.
        let base = Capacity::of([1024, 256, 64]);
        assert_ne!(
            layout_fingerprint(&base),
            layout_fingerprint(&base.with_host(256))
        );
        for other in [[1536, 256, 64], [1024, 384, 64], [1024, 256, 96]] {
            assert_ne!(
                layout_fingerprint(&base),
                layout_fingerprint(&Capacity::of(other))
            );
        }
        assert_eq!(
            layout_fingerprint(&Capacity::DEFAULT),
            layout_fingerprint(&Capacity::for_names(crate::limits::NAMES_CAPACITY))
        );
    }
}
