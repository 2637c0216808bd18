//! The values of the record tables the agent writes and the XDP program reads: name entries in two
//! sizes, and zone entries.
//!
//! All types are `#[repr(C)]`, `Copy` and free of implicit padding (checked below), so that both
//! sides agree on their bytes.
//!
//! # Name entries
//!
//! A name entry is a 16-byte [`EntryHead`] and a payload: the name's addresses from the front
//! (AAAA first, 16 bytes each, then A, 4 bytes each), the name itself, in lower-case wire form,
//! *end-aligned* at the back. The kernel builds the answer records from the addresses (pointer to
//! the question, type, class, TTL, length, address: 16 or 28 bytes each) and adds the checksum
//! sums the agent computed over exactly those bytes.
//!
//! Three sizes ([`EntryClass`]), each its own array sized by the names that need it, so that
//! memory follows what the names hold, not the longest name or the largest fleet:
//!
//! | entry | bytes | holds |
//! |---|---|---|
//! | [`SmallEntry`] | 80 | name + addresses ≤ 64 bytes: a 52-byte name with 3 A, a 48-byte one with 1 AAAA |
//! | [`NameEntry`] | 160 | name + addresses ≤ 144 bytes: an 80-byte name with 16 A or 4 AAAA |
//! | [`BigEntry`] | 592 | any name (≤ 255 bytes), 16 A and 16 AAAA |
//!
//! A name takes the smallest that holds it; when those are all taken, the next larger one.
//! Storing addresses instead of the records' wire form (12 bytes of fixed fields per record) is
//! what lets the common entry be 80 bytes instead of the 976 of layout 5, whose hash-map
//! elements the kernel's allocator rounded up to 2 KiB.

use crate::limits::{
    A_ADDR_LEN, AAAA_ADDR_LEN, BIG_PAYLOAD_LEN, MAX_SOA_GUARDS, MAX_SOA_PATCHES, MAX_SOA_RR_LEN,
    MAX_XDP_A_RECORDS, MAX_XDP_AAAA_RECORDS, NAME_PAYLOAD_LEN, SMALL_PAYLOAD_LEN,
};

/// A zone's id within one generation, as carried by its names' entries: its index in the
/// generation's sorted zone list. Ids may differ between generations: an entry, shared by every
/// generation whose index refers to it, holds the id its zone has in each of them (zones that
/// move write their names' entries anew, copy-on-write), and the kernel checks the zone's apex
/// against the question before it uses the zone's SOA.
pub type ZoneId = u32;

/// The name is a zone apex.
pub const NAME_FLAG_APEX: u8 = 1 << 0;
/// The name's zone rotates answers (`zones[].rotateAnswers`): the A or AAAA records of an
/// answer start at the address `query ID % count` and wrap around, on both paths alike.
pub const NAME_FLAG_ROTATE: u8 = 1 << 1;

/// What every name entry starts with.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryHead {
    /// Wire length of the name, root byte included.
    pub name_len: u8,
    /// A records (addresses after the AAAA ones in the payload).
    pub a_count: u8,
    /// AAAA records (addresses at the front of the payload).
    pub aaaa_count: u8,
    /// `NAME_FLAG_*` bits.
    pub flags: u8,
    /// The zone the name belongs to ([`ZoneId`], below `ZONES_CAPACITY`).
    pub zone: u16,
    /// `csum::sum16` of the name's A records as the kernel writes them, all of them in a row.
    pub a_csum: u16,
    /// `csum::sum16` of its AAAA records as the kernel writes them.
    pub aaaa_csum: u16,
    /// The zone's counter slot (`ZoneEntry::counter_slot`), carried by each name so that an
    /// answer counts without reading the zone.
    pub counter_slot: u16,
    /// The records' TTL, in network byte order (as the kernel writes it).
    pub ttl: [u8; 4],
}

/// A name entry of payload `P` bytes (see the module documentation).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<const P: usize> {
    pub head: EntryHead,
    pub payload: [u8; P],
}

/// The small name entry: 80 bytes.
pub type SmallEntry = Entry<SMALL_PAYLOAD_LEN>;

/// The middle name entry: 160 bytes.
pub type NameEntry = Entry<NAME_PAYLOAD_LEN>;

/// The big name entry: 592 bytes.
pub type BigEntry = Entry<BIG_PAYLOAD_LEN>;

/// The kinds of name entry, smallest first; each has an array of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryClass {
    /// [`SmallEntry`].
    Small = 0,
    /// [`NameEntry`].
    Name = 1,
    /// [`BigEntry`].
    Big = 2,
}

impl EntryClass {
    /// Every kind, smallest first.
    pub const ALL: [Self; 3] = [Self::Small, Self::Name, Self::Big];

    /// The smallest kind that holds a name of `name_len` bytes with `a` A and `aaaa` AAAA
    /// records; `None` when the kernel answers no such name (more records than it writes).
    pub const fn for_name(name_len: usize, a: usize, aaaa: usize) -> Option<Self> {
        if a > MAX_XDP_A_RECORDS || aaaa > MAX_XDP_AAAA_RECORDS {
            None
        } else if SmallEntry::fits(name_len, a, aaaa) {
            Some(Self::Small)
        } else if NameEntry::fits(name_len, a, aaaa) {
            Some(Self::Name)
        } else if BigEntry::fits(name_len, a, aaaa) {
            Some(Self::Big)
        } else {
            None
        }
    }

    /// The next larger kind, which holds whatever this one does.
    pub const fn larger(self) -> Option<Self> {
        match self {
            Self::Small => Some(Self::Name),
            Self::Name => Some(Self::Big),
            Self::Big => None,
        }
    }

    /// Bytes of one entry of this kind.
    pub const fn entry_bytes(self) -> usize {
        match self {
            Self::Small => core::mem::size_of::<SmallEntry>(),
            Self::Name => core::mem::size_of::<NameEntry>(),
            Self::Big => core::mem::size_of::<BigEntry>(),
        }
    }
}

impl<const P: usize> Entry<P> {
    /// An entry with no name and no records.
    pub const EMPTY: Self = Self {
        head: EntryHead {
            name_len: 0,
            a_count: 0,
            aaaa_count: 0,
            flags: 0,
            zone: 0,
            a_csum: 0,
            aaaa_csum: 0,
            counter_slot: 0,
            ttl: [0; 4],
        },
        payload: [0; P],
    };

    /// Payload bytes a name of `name_len` bytes with `a` A and `aaaa` AAAA records takes.
    pub const fn bytes_needed(name_len: usize, a: usize, aaaa: usize) -> usize {
        name_len + a * A_ADDR_LEN + aaaa * AAAA_ADDR_LEN
    }

    /// Whether such a name fits an entry of this size.
    pub const fn fits(name_len: usize, a: usize, aaaa: usize) -> bool {
        Self::bytes_needed(name_len, a, aaaa) <= P
    }

    /// Offset in the payload of the first A address (after the AAAA addresses).
    pub const fn a_offset(&self) -> usize {
        self.head.aaaa_count as usize * AAAA_ADDR_LEN
    }

    /// The name, as the payload's last `name_len` bytes (empty if the head is inconsistent).
    pub fn name(&self) -> &[u8] {
        let len = self.head.name_len as usize;
        if len > P {
            return &[];
        }
        &self.payload[P - len..]
    }
}

/// Negative answers (NODATA, NXDOMAIN) of this zone are made by userspace: its SOA record does not
/// fit a zone entry, or compresses differently depending on the question.
pub const ZONE_FLAG_NEGATIVE_IN_USERSPACE: u16 = 1 << 0;

/// A compression pointer the kernel writes into the SOA record template. The pointer's target is
/// `question name length + base`, which covers pointers to a suffix of the question (the zone
/// apex) and pointers to names earlier in the SOA record itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoaPatch {
    /// Offset of the two pointer bytes in `ZoneEntry::soa_rr`.
    pub offset: u16,
    /// Added to the question name's wire length to give the pointer's target.
    pub base: i16,
}

/// One served zone: what the kernel needs to write its negative answers, and where it counts the
/// zone's answers.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneEntry {
    /// Hash of the apex (`hash::name_hash`): the kernel confirms that the question ends in this
    /// zone's apex before it writes this zone's SOA.
    pub apex_hash: u64,
    /// Hashes of the names in the zone that, if they end the question name, make userspace
    /// compress the SOA record's server or mailbox name against the question (`ns.<zone>` in a
    /// question `x.ns.<zone>`). The kernel passes such questions instead of answering them.
    pub guards: [u64; MAX_SOA_GUARDS],
    /// Wire length of each guard name.
    pub guard_lens: [u16; MAX_SOA_GUARDS],
    /// Wire length of the apex, root byte included.
    pub apex_len: u16,
    /// `ZONE_FLAG_*` bits.
    pub flags: u16,
    /// Bytes used in `soa_rr`.
    pub soa_len: u16,
    /// Entries used in `patches`.
    pub patch_count: u16,
    /// Entries used in `guards`.
    pub guard_count: u16,
    /// `csum::sum16` of `soa_rr[..soa_len]` with its pointer bytes zero.
    pub soa_csum: u16,
    /// Where the kernel writes compression pointers into `soa_rr`.
    pub patches: [SoaPatch; MAX_SOA_PATCHES],
    /// The slot of the per-zone answer counters (`HPD_ZONE_ANSW`) this zone counts in: the
    /// agent gives every zone one for as long as it is served, whatever its id, so that counts
    /// follow zones when others come and go (`counters::zone_counter_slot`).
    pub counter_slot: u32,
    /// The SOA record of the authority section, owner included; pointer bytes are zero until
    /// patched. 8-byte aligned: the kernel copies it a word at a time.
    pub soa_rr: [u8; MAX_SOA_RR_LEN],
}

impl ZoneEntry {
    /// A zone entry with nothing in it.
    pub const EMPTY: Self = Self {
        apex_hash: 0,
        guards: [0; MAX_SOA_GUARDS],
        guard_lens: [0; MAX_SOA_GUARDS],
        apex_len: 0,
        flags: 0,
        soa_len: 0,
        patch_count: 0,
        guard_count: 0,
        soa_csum: 0,
        patches: [SoaPatch { offset: 0, base: 0 }; MAX_SOA_PATCHES],
        counter_slot: 0,
        soa_rr: [0; MAX_SOA_RR_LEN],
    };
}

// No implicit padding: the sizes equal the sums of the fields.
const _: () = assert!(core::mem::size_of::<EntryHead>() == 16);
const _: () = assert!(core::mem::size_of::<SmallEntry>() == 16 + SMALL_PAYLOAD_LEN);
const _: () = assert!(core::mem::size_of::<NameEntry>() == 16 + NAME_PAYLOAD_LEN);
const _: () = assert!(core::mem::size_of::<BigEntry>() == 16 + BIG_PAYLOAD_LEN);
const _: () = assert!(
    core::mem::size_of::<ZoneEntry>()
        == 8 + 10 * MAX_SOA_GUARDS + 2 * 6 + 4 * MAX_SOA_PATCHES + 4 + MAX_SOA_RR_LEN
);
// Payloads end on an 8-byte boundary: the kernel compares end-aligned names a word at a time.
const _: () = assert!(
    SMALL_PAYLOAD_LEN.is_multiple_of(8)
        && NAME_PAYLOAD_LEN.is_multiple_of(8)
        && BIG_PAYLOAD_LEN.is_multiple_of(8)
);
// What the kernel copies a word at a time starts on an 8-byte boundary.
const _: () = assert!(core::mem::offset_of!(ZoneEntry, soa_rr).is_multiple_of(8));
// The big entry holds the longest name and full sets of both types.
const _: () = assert!(BigEntry::fits(
    crate::limits::MAX_NAME_LEN,
    crate::limits::MAX_XDP_A_RECORDS,
    crate::limits::MAX_XDP_AAAA_RECORDS
));

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::EntryHead {}
    unsafe impl aya::Pod for super::SmallEntry {}
    unsafe impl aya::Pod for super::NameEntry {}
    unsafe impl aya::Pod for super::BigEntry {}
    unsafe impl aya::Pod for super::ZoneEntry {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_case_fits_a_name_entry() {
        // `default-nginx.ingress.prod.coreha.example.`: 43 bytes in wire form.
        assert!(NameEntry::fits(43, 16, 0));
        assert!(NameEntry::fits(80, 0, 4));
        assert!(NameEntry::fits(48, 0, 6));
        assert!(!NameEntry::fits(81, 16, 0));
        assert!(!NameEntry::fits(43, 16, 3));
    }

    #[test]
    fn a_name_takes_the_smallest_entry_that_holds_it() {
        assert_eq!(EntryClass::for_name(43, 3, 0), Some(EntryClass::Small));
        assert_eq!(EntryClass::for_name(52, 3, 0), Some(EntryClass::Small));
        assert_eq!(EntryClass::for_name(53, 3, 0), Some(EntryClass::Name));
        assert_eq!(EntryClass::for_name(48, 0, 1), Some(EntryClass::Small));
        assert_eq!(EntryClass::for_name(43, 16, 0), Some(EntryClass::Name));
        assert_eq!(EntryClass::for_name(43, 16, 16), Some(EntryClass::Big));
        assert_eq!(EntryClass::for_name(255, 16, 16), Some(EntryClass::Big));
        assert_eq!(EntryClass::for_name(43, 17, 0), None);
        assert_eq!(EntryClass::for_name(43, 0, 17), None);
        let sizes = EntryClass::ALL.map(EntryClass::entry_bytes);
        assert_eq!(sizes, [80, 160, 592]);
        let larger = EntryClass::ALL.map(EntryClass::larger);
        assert_eq!(
            larger,
            [Some(EntryClass::Name), Some(EntryClass::Big), None]
        );
    }

    #[test]
    fn the_name_is_read_from_the_back() {
        let mut entry = NameEntry::EMPTY;
        entry.head.name_len = 3;
        entry.payload[NAME_PAYLOAD_LEN - 3..].copy_from_slice(b"\x01a\x00");
        assert_eq!(entry.name(), b"\x01a\x00");
        entry.head.name_len = 200;
        assert_eq!(entry.name(), b"");
    }
}
