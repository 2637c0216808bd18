//! Keys and values of the record tables the agent writes and the XDP program reads.
//!
//! All types are `#[repr(C)]`, `Copy` and free of implicit padding (checked below), so that both
//! sides agree on their bytes.

use crate::limits::{
    A_RRS_CAPACITY, AAAA_RRS_CAPACITY, MAX_LOCAL_V4, MAX_LOCAL_V6, MAX_SOA_GUARDS, MAX_SOA_PATCHES,
    MAX_SOA_RR_LEN, NAME_BUF_LEN,
};

/// Key of the name table: [`crate::hash`] of the lower-case wire name, with the generation in
/// its lowest bit ([`crate::generation::name_key`]).
pub type NameKey = u64;

/// A zone's id within one generation, as carried by its names' entries: its index in the
/// generation's sorted zone list. Ids may differ between generations; a name entry only ever
/// refers to a zone of its own generation, and the kernel checks the zone's apex against the
/// question before it uses the zone's SOA.
pub type ZoneId = u32;

/// The name is a zone apex.
pub const NAME_FLAG_APEX: u16 = 1 << 0;
/// The kernel passes queries for this name to userspace: its hash collides with another
/// name's, and userspace tells them apart.
pub const NAME_FLAG_COLLISION: u16 = 1 << 1;
/// The kernel passes queries for this name to userspace: its record set is larger than a name
/// entry holds.
pub const NAME_FLAG_LARGE_SET: u16 = 1 << 2;

/// One name of a served zone: every name with records, every empty non-terminal, every apex.
///
/// The A and AAAA records are stored as the exact bytes of the answer section, owners already
/// pointing to the question (`0xC00C`): answering is one copy. A value is replaced as a whole
/// (`BPF_F_NO_PREALLOC` hash map), so a reader never sees half a record set.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct NameEntry {
    /// The name in lower-case wire form, *end-aligned*: it occupies the last `name_len` bytes, the
    /// bytes before it are zero. Every hit is confirmed against it (see [`crate::hash`]).
    pub name: [u8; NAME_BUF_LEN],
    /// Wire length of `name`, root byte included.
    pub name_len: u16,
    /// `NAME_FLAG_*` bits.
    pub flags: u16,
    /// The zone the name belongs to.
    pub zone_id: ZoneId,
    /// Bytes used in `a_rrs` (a multiple of [`crate::limits::A_RR_LEN`]).
    pub a_len: u16,
    /// Bytes used in `aaaa_rrs` (a multiple of [`crate::limits::AAAA_RR_LEN`]).
    pub aaaa_len: u16,
    /// [`crate::csum::sum16`] of the used part of `a_rrs`.
    pub a_csum: u16,
    /// [`crate::csum::sum16`] of the used part of `aaaa_rrs`.
    pub aaaa_csum: u16,
    /// The A records of the answer section, in order.
    pub a_rrs: [u8; A_RRS_CAPACITY],
    /// The AAAA records of the answer section, in order.
    pub aaaa_rrs: [u8; AAAA_RRS_CAPACITY],
}

impl NameEntry {
    /// An entry with no name and no records.
    pub const EMPTY: Self = Self {
        name: [0; NAME_BUF_LEN],
        name_len: 0,
        flags: 0,
        zone_id: 0,
        a_len: 0,
        aaaa_len: 0,
        a_csum: 0,
        aaaa_csum: 0,
        a_rrs: [0; A_RRS_CAPACITY],
        aaaa_rrs: [0; AAAA_RRS_CAPACITY],
    };
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

/// One served zone: what the kernel needs to write its negative answers.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ZoneEntry {
    /// Hash of the apex ([`crate::hash::name_hash`]): the kernel confirms that the question ends
    /// in this zone's apex before it writes this zone's SOA.
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
    /// [`crate::csum::sum16`] of `soa_rr[..soa_len]` with its pointer bytes zero.
    pub soa_csum: u16,
    /// Where the kernel writes compression pointers into `soa_rr`.
    pub patches: [SoaPatch; MAX_SOA_PATCHES],
    /// Puts `soa_rr` on an 8-byte boundary without implicit padding.
    pub reserved: [u8; 4],
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
        reserved: [0; 4],
        soa_rr: [0; MAX_SOA_RR_LEN],
    };
}

/// The node's own addresses, VIPs included, which the kernel answers for. A short array scanned
/// in order costs less than a hash lookup per packet. Part of the generation: the agent writes a
/// new set into the inactive generation and switches, so a reader sees one whole set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalAddrs {
    pub v4_count: u32,
    pub v6_count: u32,
    pub v4: [[u8; 4]; MAX_LOCAL_V4],
    pub v6: [[u8; 16]; MAX_LOCAL_V6],
}

impl LocalAddrs {
    pub const EMPTY: Self = Self {
        v4_count: 0,
        v6_count: 0,
        v4: [[0; 4]; MAX_LOCAL_V4],
        v6: [[0; 16]; MAX_LOCAL_V6],
    };
}

// No implicit padding: the sizes equal the sums of the fields.
const _: () = assert!(
    core::mem::size_of::<NameEntry>()
        == NAME_BUF_LEN + 2 + 2 + 4 + 2 + 2 + 2 + 2 + A_RRS_CAPACITY + AAAA_RRS_CAPACITY
);
const _: () = assert!(
    core::mem::size_of::<ZoneEntry>()
        == 8 + 10 * MAX_SOA_GUARDS + 2 * 6 + 4 * MAX_SOA_PATCHES + MAX_SOA_RR_LEN + 4
);

const _: () =
    assert!(core::mem::size_of::<LocalAddrs>() == 8 + 4 * MAX_LOCAL_V4 + 16 * MAX_LOCAL_V6);

// What the kernel copies a word at a time starts on an 8-byte boundary.
const _: () = assert!(core::mem::offset_of!(NameEntry, a_rrs) % 8 == 0);
const _: () = assert!(core::mem::offset_of!(NameEntry, aaaa_rrs) % 8 == 0);
const _: () = assert!(core::mem::offset_of!(ZoneEntry, soa_rr) % 8 == 0);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding (asserted above).
    unsafe impl aya::Pod for super::NameEntry {}
    unsafe impl aya::Pod for super::ZoneEntry {}
    unsafe impl aya::Pod for super::LocalAddrs {}
}
