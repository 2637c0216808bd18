//! The record table as the XDP program reads it: one [`NameEntry`] per name, one [`ZoneEntry`]
//! per zone. Pure functions, tested without a kernel.
//!
//! The answer bytes stored here are exactly what the userspace server sends for the same query;
//! the SOA template is produced by the same encoder (hickory) the server uses, so both compress
//! the same way.

use rustc_hash::FxHashMap as HashMap;

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query},
    rr::{LowerName, Name, RecordType},
};
use hostport_dns_common::{
    csum::sum16,
    dns::{
        CLASS_IN, HEADER_LEN, POINTER_MARK, POINTER_TO_QUESTION, RR_FIXED_LEN, TYPE_A, TYPE_AAAA,
    },
    generation::{apex_label_bit, name_key},
    hash::name_hash,
    limits::{
        A_RR_LEN, A_RRS_CAPACITY, AAAA_RR_LEN, AAAA_RRS_CAPACITY, MAX_SOA_GUARDS, MAX_SOA_PATCHES,
        MAX_SOA_RR_LEN, NAME_BUF_LEN,
    },
    record::{
        NAME_FLAG_APEX, NAME_FLAG_COLLISION, NAME_FLAG_LARGE_SET, NameEntry, NameKey, SoaPatch,
        ZONE_FLAG_NEGATIVE_IN_USERSPACE, ZoneEntry, ZoneId,
    },
};

use crate::{
    server::answer::negative_soa_record,
    table::{Node, RecordTable, Zone},
    xdp::writer::bytes_of,
};

/// Type and class after the question name.
const QTYPE_QCLASS_LEN: usize = 4;

/// What one generation of the kernel's maps holds, as the writer keeps track of it. Keys are
/// those of generation 0 ([`name_key`]); the writer sets the generation bit as it writes. Zone
/// entries are kept whole (there are few); of a name entry only the name it holds, not its
/// kilobyte of bytes: an entry is rebuilt from the table whenever a change touches its name.
pub struct Image {
    /// Per key, the lower-case wire name whose entry the kernel holds.
    pub names: HashMap<NameKey, Box<[u8]>>,
    pub zones: HashMap<ZoneId, ZoneEntry>,
    /// Keys that two or more names hash to, with those names, sorted. The entry holds the first
    /// name, marked for userspace: the kernel confirms the name, userspace tells them apart.
    shared_keys: HashMap<NameKey, Vec<LowerName>>,
    /// Per zone id, whether the zone is in the kernel table (see [`admission`]).
    admitted: Vec<bool>,
    seed: u64,
    key_of: fn(u64, &[u8]) -> u64,
}

/// What an update changed in an image: the keys to write (present) or delete (absent).
#[derive(Default)]
pub struct Changes {
    /// Each key with the entry to write, or `None` to delete it.
    pub names: Vec<(NameKey, Option<Box<NameEntry>>)>,
    pub zones: Vec<ZoneId>,
}

impl Image {
    /// An empty image keyed by the kernel's hash under `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_key(seed, name_hash)
    }

    /// An empty image whose names are keyed by `key_of` (the kernel's hash; tests use others).
    pub fn with_key(seed: u64, key_of: fn(u64, &[u8]) -> u64) -> Self {
        Self {
            names: HashMap::default(),
            zones: HashMap::default(),
            shared_keys: HashMap::default(),
            admitted: Vec::new(),
            seed,
            key_of,
        }
    }

    /// The hash seed the keys are made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// An empty image with the same keys and the zones `admitted` (per zone id) in the kernel.
    pub fn fresh(&self, admitted: Vec<bool>) -> Self {
        let mut image = Self::with_key(self.seed, self.key_of);
        image.admitted = admitted;
        image
    }

    /// Which zones are in the kernel table, per zone id.
    pub fn admitted(&self) -> &[bool] {
        &self.admitted
    }

    fn admits(&self, zone: ZoneId) -> bool {
        self.admitted.get(zone as usize).copied().unwrap_or(false)
    }

    /// Names of the table that are not in the kernel table because their zones did not fit
    /// (pending zones are left out too, but not for lack of room).
    pub fn names_left_out(&self, table: &RecordTable) -> usize {
        if self.admitted.iter().all(|a| *a) {
            return 0;
        }
        let pending = |zone: u32| {
            table
                .zones()
                .get(zone as usize)
                .is_some_and(|z| z.spec.pending)
        };
        table
            .nodes()
            .filter(|(_, node)| !self.admits(node.zone) && !pending(node.zone))
            .count()
    }

    /// The entry the kernel should hold under `key`, if any.
    pub fn entry_at(&self, table: &RecordTable, key: NameKey) -> Option<NameEntry> {
        match self.shared_keys.get(&key) {
            Some(owners) => {
                let mut entry = entry_for(table, owners.first()?)?;
                entry.flags |= NAME_FLAG_COLLISION;
                Some(entry)
            }
            None => entry_for(table, &owner_of(self.names.get(&key)?)?),
        }
    }

    /// The label counts of the apexes of the zones in the kernel table, as
    /// `Generation::apex_labels` holds them.
    pub fn apex_labels(&self, table: &RecordTable) -> u16 {
        table
            .zones()
            .iter()
            .filter(|zone| self.admits(zone.id))
            .filter_map(|zone| apex_label_bit(zone.spec.apex.num_labels() as usize))
            .fold(0, |mask, bit| mask | bit)
    }

    /// Names whose key another name has too (answered by userspace).
    pub fn collisions(&self) -> usize {
        self.shared_keys.values().map(|names| names.len() - 1).sum()
    }

    /// Brings the entries of `names` and every zone entry in line with `table`. Returns what
    /// changed.
    pub fn refresh<'a>(
        &mut self,
        table: &RecordTable,
        names: impl IntoIterator<Item = &'a LowerName>,
    ) -> Changes {
        let zones = self.refresh_zones(table);
        let mut changed = Vec::new();
        for name in names {
            self.place(table, name, |key, entry| {
                changed.push((key, entry.map(|e| Box::new(*e))))
            });
        }
        Changes {
            names: changed,
            zones,
        }
    }

    /// Brings every zone entry in line with `table`; returns the zones that changed.
    pub fn refresh_zones(&mut self, table: &RecordTable) -> Vec<ZoneId> {
        let mut changed = Vec::new();
        for zone in table.zones() {
            if !self.admits(zone.id) {
                continue;
            }
            let entry = zone_entry(zone, self.seed);
            if self
                .zones
                .get(&zone.id)
                .is_none_or(|old| !same(old, &entry))
            {
                self.zones.insert(zone.id, entry);
                changed.push(zone.id);
            }
        }
        let gone: Vec<ZoneId> = self
            .zones
            .keys()
            .filter(|id| table.zones().get(**id as usize).is_none() || !self.admits(**id))
            .copied()
            .collect();
        for id in gone {
            self.zones.remove(&id);
            changed.push(id);
        }
        changed
    }

    /// Places every name of `table`, handing each entry to `write` as it is built (so that a
    /// large table is never held in kernel form all at once).
    pub fn place_all(
        &mut self,
        table: &RecordTable,
        mut write: impl FnMut(NameKey, Option<&NameEntry>),
    ) {
        // Sized once: the table's names are all placed.
        self.names.reserve(table.nodes().len());
        for (name, _) in table.nodes() {
            self.place(table, name, &mut write);
        }
    }

    /// Brings the entry under `name`'s key in line with the table, and hands the key to `write`
    /// with the entry the kernel should now hold (`None`: none).
    fn place(
        &mut self,
        table: &RecordTable,
        name: &LowerName,
        mut write: impl FnMut(NameKey, Option<&NameEntry>),
    ) {
        let wire = wire_name(name);
        let key = name_key((self.key_of)(self.seed, &wire), 0);
        let exists = table
            .node_lower(name)
            .is_some_and(|node| self.admits(node.zone));
        let mut owners = match self.shared_keys.remove(&key) {
            Some(owners) => owners,
            None => match self.names.get(&key) {
                Some(held) if **held != *wire => owner_of(held).into_iter().collect(),
                _ => Vec::new(),
            },
        };
        owners.retain(|owner| owner != name);
        if exists {
            owners.push(name.clone());
        }
        owners.sort();
        let entry = match owners.as_slice() {
            [] => None,
            [only] => entry_for(table, only),
            [first, ..] => entry_for(table, first).map(|mut entry| {
                entry.flags |= NAME_FLAG_COLLISION;
                entry
            }),
        };
        if owners.len() > 1 {
            self.shared_keys.insert(key, owners);
        }
        match entry {
            Some(entry) => {
                self.names.insert(key, stored_name(&entry).into());
                write(key, Some(&entry));
            }
            None => {
                if self.names.remove(&key).is_some() {
                    write(key, None);
                }
            }
        }
    }
}

/// Which zones of `table` the kernel table holds, per zone id: all of them when they fit, else
/// the zones in order as long as their names fit in `names_capacity` and their number in
/// `zones_capacity`. A zone is in whole or not at all, so that the kernel never answers NXDOMAIN
/// for a name it merely lacks: it passes every query of a zone left out (no apex, no zone).
///
/// A pending zone (a source has not delivered it) is never in: userspace answers it SERVFAIL.
pub fn admission(table: &RecordTable, names_capacity: usize, zones_capacity: usize) -> Vec<bool> {
    let zones = table.zones().len();
    let ready = |id: usize| table.zones().get(id).is_some_and(|z| !z.spec.pending);
    if table.nodes().len() <= names_capacity && zones <= zones_capacity {
        return (0..zones).map(ready).collect();
    }
    let mut names = vec![0usize; zones];
    for (_, node) in table.nodes() {
        if let Some(count) = names.get_mut(node.zone as usize) {
            *count += 1;
        }
    }
    let mut room = names_capacity;
    names
        .iter()
        .enumerate()
        .map(|(id, count)| {
            let fits = ready(id) && id < zones_capacity && *count <= room;
            if fits {
                room -= count;
            }
            fits
        })
        .collect()
}

/// The seed the unit tests hash with.
#[cfg(test)]
pub const TEST_SEED: u64 = 0x6a09_e667_f3bc_c908;

/// The whole table in kernel form, keyed by the kernel's hash, with every entry (for tests: the
/// writer never holds them all).
#[cfg(test)]
fn build_entries(table: &RecordTable) -> (Image, HashMap<NameKey, NameEntry>) {
    build_entries_with(table, name_hash)
}

#[cfg(test)]
fn build_entries_with(
    table: &RecordTable,
    key_of: fn(u64, &[u8]) -> u64,
) -> (Image, HashMap<NameKey, NameEntry>) {
    let mut image = Image::with_key(TEST_SEED, key_of).fresh(vec![true; table.zones().len()]);
    image.refresh_zones(table);
    let mut entries = HashMap::default();
    image.place_all(table, |key, entry| match entry {
        Some(entry) => {
            entries.insert(key, *entry);
        }
        None => {
            entries.remove(&key);
        }
    });
    (image, entries)
}

fn entry_for(table: &RecordTable, name: &LowerName) -> Option<NameEntry> {
    let node = table.node_lower(name)?;
    let zone = table.zones().get(node.zone as usize)?;
    Some(name_entry(name, node, zone))
}

fn same<V: aya::Pod>(a: &V, b: &V) -> bool {
    bytes_of(a) == bytes_of(b)
}

/// The wire name an entry holds.
fn stored_name(entry: &NameEntry) -> &[u8] {
    let len = usize::from(entry.name_len).min(NAME_BUF_LEN);
    &entry.name[NAME_BUF_LEN - len..]
}

/// A wire name as a name.
fn owner_of(wire: &[u8]) -> Option<LowerName> {
    let mut labels = Vec::new();
    let mut rest = wire;
    while let [len, tail @ ..] = rest {
        if *len == 0 {
            break;
        }
        let (label, tail) = tail.split_at_checked(usize::from(*len))?;
        labels.push(label);
        rest = tail;
    }
    Name::from_labels(labels)
        .ok()
        .map(|name| LowerName::new(&name))
}

/// Lower-case wire form of a name.
pub fn wire_name(name: &LowerName) -> Vec<u8> {
    let name: Name = name.into();
    let mut wire = Vec::with_capacity(name.len() + 1);
    for label in name.iter() {
        wire.push(label.len() as u8);
        wire.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    wire.push(0);
    wire
}

fn name_entry(name: &LowerName, node: &Node, zone: &Zone) -> NameEntry {
    let mut entry = NameEntry::EMPTY;
    let wire = wire_name(name);
    entry.name[NAME_BUF_LEN - wire.len()..].copy_from_slice(&wire);
    entry.name_len = wire.len() as u16;
    entry.zone_id = zone.id;
    if node.apex {
        entry.flags |= NAME_FLAG_APEX;
    }
    let ttl = node.ttl_in(zone);
    let a: Vec<u8> = node
        .a
        .iter()
        .flat_map(|a| answer_rr(TYPE_A, ttl, &a.octets()))
        .collect();
    let aaaa: Vec<u8> = node
        .aaaa
        .iter()
        .flat_map(|a| answer_rr(TYPE_AAAA, ttl, &a.octets()))
        .collect();
    if a.len() > A_RRS_CAPACITY || aaaa.len() > AAAA_RRS_CAPACITY {
        // More records than an entry holds: userspace answers this name.
        entry.flags |= NAME_FLAG_LARGE_SET;
        return entry;
    }
    entry.a_rrs[..a.len()].copy_from_slice(&a);
    entry.a_len = a.len() as u16;
    entry.a_csum = sum16(&a);
    entry.aaaa_rrs[..aaaa.len()].copy_from_slice(&aaaa);
    entry.aaaa_len = aaaa.len() as u16;
    entry.aaaa_csum = sum16(&aaaa);
    entry
}

/// One answer record whose owner points to the question.
fn answer_rr(rtype: u16, ttl: u32, address: &[u8]) -> Vec<u8> {
    let mut rr = Vec::with_capacity(RR_FIXED_LEN + 2 + address.len());
    rr.extend_from_slice(&POINTER_TO_QUESTION.to_be_bytes());
    rr.extend_from_slice(&rtype.to_be_bytes());
    rr.extend_from_slice(&CLASS_IN.to_be_bytes());
    rr.extend_from_slice(&ttl.to_be_bytes());
    rr.extend_from_slice(&(address.len() as u16).to_be_bytes());
    rr.extend_from_slice(address);
    debug_assert!(rr.len() == A_RR_LEN || rr.len() == AAAA_RR_LEN);
    rr
}

/// The zone's SOA record as a template: encoded by hickory for a question that is the apex
/// itself, its compression pointers turned into patches relative to the question's length.
pub fn zone_entry(zone: &Zone, seed: u64) -> ZoneEntry {
    let mut entry = ZoneEntry::EMPTY;
    let apex = &zone.spec.apex;
    let apex_wire = wire_name(&LowerName::new(apex));
    entry.apex_hash = name_hash(seed, &apex_wire);
    entry.apex_len = apex_wire.len() as u16;
    match soa_template(zone, apex_wire.len()) {
        Some((template, patches)) => {
            entry.soa_rr[..template.len()].copy_from_slice(&template);
            entry.soa_len = template.len() as u16;
            entry.soa_csum = sum16(&template);
            entry.patches[..patches.len()].copy_from_slice(&patches);
            entry.patch_count = patches.len() as u16;
        }
        None => entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE,
    }
    match guards(zone, seed) {
        Some(guards) => {
            for (i, (hash, len)) in guards.iter().enumerate() {
                entry.guards[i] = *hash;
                entry.guard_lens[i] = *len;
            }
            entry.guard_count = guards.len() as u16;
        }
        None => entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE,
    }
    if shares_suffix_outside(zone) {
        entry.flags |= ZONE_FLAG_NEGATIVE_IN_USERSPACE;
    }
    entry
}

/// Encodes `<apex> A` with the SOA in the authority section and cuts the SOA record out.
fn soa_template(zone: &Zone, apex_len: usize) -> Option<(Vec<u8>, Vec<SoaPatch>)> {
    let apex = &zone.spec.apex;
    let mut message = Message::new(0, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(apex.clone(), RecordType::A));
    message.add_authority(negative_soa_record(zone, apex));
    let bytes = message.to_vec().ok()?;
    let soa_start = HEADER_LEN + apex_len + QTYPE_QCLASS_LEN;
    let mut template = bytes.get(soa_start..)?.to_vec();
    if template.len() > MAX_SOA_RR_LEN {
        return None;
    }
    let mut patches = Vec::new();
    // The owner, then the server and mailbox names at the start of the RDATA.
    let mut offset = 0;
    let mut name_starts = vec![0];
    offset = skip_name(&template, offset, &mut patches)?;
    offset += RR_FIXED_LEN;
    name_starts.push(offset);
    offset = skip_name(&template, offset, &mut patches)?;
    name_starts.push(offset);
    skip_name(&template, offset, &mut patches)?;
    if patches.len() > MAX_SOA_PATCHES {
        return None;
    }
    let mut out = Vec::with_capacity(patches.len());
    for (at, target) in patches {
        let target = target as usize;
        let base = if (HEADER_LEN..HEADER_LEN + apex_len).contains(&target) {
            // Into the question (the apex or a suffix of it).
            target as i64 - apex_len as i64
        } else if target >= soa_start {
            // Into the SOA record itself, which follows the question directly.
            (target - soa_start + HEADER_LEN + QTYPE_QCLASS_LEN) as i64
        } else {
            return None;
        };
        template[at] = 0;
        template[at + 1] = 0;
        out.push(SoaPatch {
            offset: at as u16,
            base: i16::try_from(base).ok()?,
        });
    }
    Some((template, out))
}

/// Skips the name at `offset`, recording a pointer (its offset and target) if it ends in one.
fn skip_name(bytes: &[u8], mut offset: usize, patches: &mut Vec<(usize, u16)>) -> Option<usize> {
    loop {
        let len = *bytes.get(offset)?;
        if len == 0 {
            return Some(offset + 1);
        }
        if u16::from(len) << 8 & POINTER_MARK == POINTER_MARK {
            let pointer = u16::from_be_bytes([len, *bytes.get(offset + 1)?]);
            patches.push((offset, pointer & !POINTER_MARK));
            return Some(offset + 2);
        }
        offset += 1 + len as usize;
    }
}

/// Names under the apex that, ending a question, would make the SOA compress differently:
/// every suffix, longer than the apex, of the server and mailbox names inside the zone.
fn guards(zone: &Zone, seed: u64) -> Option<Vec<(u64, u16)>> {
    let apex = &zone.spec.apex;
    let mut guards: Vec<(u64, u16)> = Vec::new();
    for name in [&zone.spec.soa.mname, &zone.spec.soa.rname] {
        if !apex.zone_of(name) {
            continue;
        }
        let mut suffix = name.to_lowercase();
        while suffix.num_labels() > apex.num_labels() {
            let wire = wire_name(&LowerName::new(&suffix));
            let guard = (name_hash(seed, &wire), wire.len() as u16);
            if !guards.contains(&guard) {
                guards.push(guard);
            }
            suffix = suffix.base_name();
        }
    }
    (guards.len() <= MAX_SOA_GUARDS).then_some(guards)
}

/// Whether a server or mailbox name outside the zone shares a label suffix with the apex: the
/// encoder would point it into the question only when the question spells that suffix the same,
/// so the template would depend on the question.
fn shares_suffix_outside(zone: &Zone) -> bool {
    let apex = &zone.spec.apex;
    [&zone.spec.soa.mname, &zone.spec.soa.rname]
        .into_iter()
        .any(|name| {
            !apex.zone_of(name)
                && name.num_labels() > 0
                && apex.num_labels() > 0
                && name.trim_to(1) == apex.trim_to(1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        records::{RecordData, SourceRecord},
        zone::ZoneSpec,
    };

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn table_with(zone: ZoneSpec, records: &[SourceRecord]) -> RecordTable {
        RecordTable::compile(&[zone], records).0
    }

    #[test]
    fn names_are_stored_end_aligned_in_lower_case() {
        let records = [SourceRecord {
            name: name("web.example."),
            ttl: None,
            data: RecordData::A("198.18.0.1".parse().unwrap()),
        }];
        let (_, entries) = build_entries(&table_with(
            ZoneSpec::with_defaults(name("example.")),
            &records,
        ));
        let wire = b"\x03web\x07example\x00";
        let entry = &entries[&name_key(name_hash(TEST_SEED, wire), 0)];
        assert_eq!(entry.name_len as usize, wire.len());
        assert_eq!(&entry.name[NAME_BUF_LEN - wire.len()..], wire);
        assert!(
            entry.name[..NAME_BUF_LEN - wire.len()]
                .iter()
                .all(|b| *b == 0)
        );
        assert_eq!(
            &entry.a_rrs[..16],
            &[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 198, 18, 0, 1]
        );
    }

    #[test]
    fn the_default_soa_points_into_the_question_twice() {
        let (image, _) = build_entries(&table_with(
            ZoneSpec::with_defaults(name("prod.coreha.example.")),
            &[],
        ));
        let zone = &image.zones[&0];
        assert_eq!(zone.flags, 0);
        // Owner, ns.<apex>, hostmaster.<apex>: three pointers to the apex in the question.
        assert_eq!(zone.patch_count, 3);
        let apex_len = zone.apex_len as i16;
        for patch in &zone.patches[..3] {
            assert_eq!(patch.base, HEADER_LEN as i16 - apex_len);
        }
        // ns.<apex> and hostmaster.<apex> guard questions ending in them.
        assert_eq!(zone.guard_count, 2);
    }

    #[test]
    fn a_server_name_sharing_the_top_label_sends_negative_answers_up() {
        let mut spec = ZoneSpec::with_defaults(name("prod.coreha.example."));
        spec.soa.mname = name("ns1.other.example.");
        let (image, _) = build_entries(&table_with(spec, &[]));
        assert_ne!(image.zones[&0].flags & ZONE_FLAG_NEGATIVE_IN_USERSPACE, 0);
    }

    #[test]
    fn a_record_set_larger_than_an_entry_is_left_to_userspace() {
        let records: Vec<_> = (0..=hostport_dns_common::limits::MAX_XDP_A_RECORDS)
            .map(|i| SourceRecord {
                name: name("big.example."),
                ttl: None,
                data: RecordData::A(format!("198.18.1.{i}").parse().unwrap()),
            })
            .collect();
        let (_, entries) = build_entries(&table_with(
            ZoneSpec::with_defaults(name("example.")),
            &records,
        ));
        let entry = &entries[&name_key(name_hash(TEST_SEED, b"\x03big\x07example\x00"), 0)];
        assert_ne!(entry.flags & NAME_FLAG_LARGE_SET, 0);
    }

    fn a(owner: &str, ip: &str) -> SourceRecord {
        SourceRecord {
            name: name(owner),
            ttl: None,
            data: RecordData::A(ip.parse().unwrap()),
        }
    }

    /// The kernel's maps as the writer would leave them, entry bytes in key order.
    fn contents(
        names: &HashMap<NameKey, NameEntry>,
        zones: &HashMap<ZoneId, ZoneEntry>,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut all: Vec<_> = names
            .iter()
            .map(|(k, e)| (*k, bytes_of(e).to_vec()))
            .collect();
        all.sort();
        let mut zones: Vec<_> = zones
            .iter()
            .map(|(k, e)| (u64::from(*k), bytes_of(e).to_vec()))
            .collect();
        zones.sort();
        all.extend(zones);
        all
    }

    /// Applies `changes` to a map standing in for the kernel's.
    fn apply(kernel: &mut HashMap<NameKey, NameEntry>, changes: Changes) {
        for (key, entry) in changes.names {
            match entry {
                Some(entry) => kernel.insert(key, *entry),
                None => kernel.remove(&key),
            };
        }
    }

    /// Keys by wire length: names of one length collide.
    fn weak_key(_seed: u64, wire: &[u8]) -> u64 {
        (wire.len() as u64) << 1
    }

    #[test]
    fn refreshing_the_changed_names_gives_what_a_full_build_gives() {
        for key_of in [name_hash as fn(u64, &[u8]) -> u64, weak_key] {
            let (mut builder, _) =
                crate::table::TableBuilder::new(&[ZoneSpec::with_defaults(name("example."))]);
            builder.finish();
            let (mut image, mut kernel) = build_entries_with(builder.table(), key_of);
            let mut live: Vec<SourceRecord> = Vec::new();
            for step in 0..400usize {
                let record = a(
                    &format!("n{}.x{}.example.", (step * 7) % 11, step % 3),
                    &format!("198.18.0.{}", step % 5),
                );
                if let Some(at) = live.iter().position(|r| *r == record) {
                    builder.remove([&live.swap_remove(at)]);
                } else {
                    builder.add([&record]);
                    live.push(record);
                }
                let changed = builder.finish();
                apply(&mut kernel, image.refresh(builder.table(), &changed));
                let (full, full_entries) = build_entries_with(builder.table(), key_of);
                assert_eq!(
                    contents(&kernel, &image.zones),
                    contents(&full_entries, &full.zones),
                    "step {step}"
                );
                assert_eq!(image.names, full.names, "step {step}");
                assert_eq!(image.collisions(), full.collisions(), "step {step}");
            }
        }
    }

    #[test]
    fn names_sharing_a_key_go_to_userspace_until_one_is_left() {
        let zone = ZoneSpec::with_defaults(name("example."));
        let (mut builder, _) = crate::table::TableBuilder::new(&[zone]);
        let one = a("aa.example.", "198.18.0.1");
        let other = a("bb.example.", "198.18.0.2");
        builder.add([&one, &other]);
        builder.finish();
        let (mut image, entries) = build_entries_with(builder.table(), weak_key);
        let key = weak_key(TEST_SEED, b"\x02aa\x07example\x00");
        assert_eq!(image.collisions(), 1);
        assert_ne!(entries[&key].flags & NAME_FLAG_COLLISION, 0);
        builder.remove([&one]);
        let changed = builder.finish();
        let changes = image.refresh(builder.table(), &changed);
        let [(changed_key, Some(entry))] = changes.names.as_slice() else {
            panic!("one entry to write");
        };
        assert_eq!(*changed_key, key);
        assert_eq!(entry.flags & NAME_FLAG_COLLISION, 0);
        assert_eq!(stored_name(entry), b"\x02bb\x07example\x00");
        assert_eq!(image.collisions(), 0);
    }
}
