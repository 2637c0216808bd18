//! Where each name sits in the kernel's name index and entries: which bucket and way, which entry
//! slot. Pure (it works on slices standing for one generation of the maps), tested without a
//! kernel; the writer applies it to the generation it is about to switch to, and copies what it
//! changed (`Dirty`) into the other one once no run reads that any more.
//!
//! The index itself is the record of where names are: a name is found as the kernel finds it
//! (its two candidate buckets, its tag, then its entry's name compared), so nothing but the free
//! slots and the few names without a way of their own is kept beside the maps.

use rustc_hash::{FxHashMap, FxHashSet};

use hostport_dns_common::{
    entry::{BigEntry, Entry, EntryClass, NameEntry, SmallEntry},
    generation::EntryCounts,
    index::{
        BUCKET_OVERFLOW, Bucket, EMPTY_TAG, EntryRef, PASS_REF, candidates, entry_ref, ref_target,
    },
    limits::INDEX_WAYS,
};

use crate::xdp::entries::Built;

/// One generation of the index and entries, as the writer maps them.
pub struct View<'a> {
    pub buckets: &'a mut [Bucket],
    pub small: &'a mut [SmallEntry],
    pub names: &'a mut [NameEntry],
    pub big: &'a mut [BigEntry],
}

impl View<'_> {
    /// The name held by the entry `found` refers to, if it refers to one.
    fn name_of(&self, found: EntryRef) -> Option<&[u8]> {
        let (class, slot) = ref_target(found)?;
        let slot = slot as usize;
        match class {
            EntryClass::Small => self.small.get(slot).map(|e| e.name()),
            EntryClass::Name => self.names.get(slot).map(|e| e.name()),
            EntryClass::Big => self.big.get(slot).map(|e| e.name()),
        }
    }

    /// Writes `built` (of kind `class` or smaller) into slot `slot` of the entries of kind
    /// `class`, widened if it is of a smaller kind.
    fn write(&mut self, class: EntryClass, slot: u32, built: &Built) {
        let slot = slot as usize;
        match class {
            EntryClass::Small => self.small[slot] = widened(built),
            EntryClass::Name => self.names[slot] = widened(built),
            EntryClass::Big => self.big[slot] = widened(built),
        }
    }
}

/// `built` as an entry of payload `Q`, at least its own: the head and the addresses at the
/// front, the name at the back, as the kernel reads any entry.
fn widened<const Q: usize>(built: &Built) -> Entry<Q> {
    fn copy<const P: usize, const Q: usize>(entry: &Entry<P>) -> Entry<Q> {
        let mut wide = Entry::<Q>::EMPTY;
        wide.head = entry.head;
        let addresses = entry.a_offset() + entry.head.a_count as usize * 4;
        wide.payload[..addresses].copy_from_slice(&entry.payload[..addresses]);
        let name = entry.name();
        wide.payload[Q - name.len()..].copy_from_slice(name);
        wide
    }
    match built {
        Built::Small(entry) => copy(entry),
        Built::Name(entry) => copy(entry),
        Built::Big(entry) => copy(entry.as_ref()),
        Built::Pass => Entry::EMPTY,
    }
}

/// What a change touched in one generation: what the other generation must copy to match it.
#[derive(Debug, Default)]
pub struct Dirty {
    pub buckets: FxHashSet<u32>,
    /// Entry slots, by kind ([`EntryClass`] as index).
    pub entries: [FxHashSet<u32>; 3],
}

/// Counts for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    pub written: usize,
    pub removed: usize,
}

/// A name whose way points to no entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Passed {
    wire: Box<[u8]>,
    /// The kind of entry it needs, when none of that kind or a larger one was free.
    without_room: Option<EntryClass>,
}

/// A name that is in no way of the index.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Unplaced {
    wire: Box<[u8]>,
    /// Both candidate buckets were full (they carry the overflow flag for it); otherwise another
    /// name with the same 64-bit hash holds the way the kernel would find.
    full: bool,
}

/// The writer's knowledge of one layout, shared by both generations once they are in step.
pub struct Layout {
    seed: u64,
    /// The name hash (the kernel's; tests use weaker ones to make names collide).
    hash: fn(u64, &[u8]) -> u64,
    bucket_count: u32,
    /// Free entry slots, by kind ([`EntryClass`] as index).
    free: [Vec<u32>; 3],
    /// Names whose way points to no entry ([`PASS_REF`]): the kernel cannot tell them apart, so
    /// the layout does.
    passed: FxHashMap<u64, Passed>,
    /// Names in no way, by hash.
    unplaced: FxHashMap<u64, Vec<Unplaced>>,
    /// Per bucket: unplaced names (both buckets full) that have it as a candidate.
    overflow: FxHashMap<u32, u32>,
    /// Names the kernel cannot tell from another because they share its 64-bit hash: answered by
    /// userspace. (A name behind another's tag in a bucket is passed too, found by neither.)
    collisions: usize,
    /// Names in `passed` for lack of an entry.
    without_room: usize,
    names_held: usize,
    /// Names taken out of `unplaced` because a way they can use was freed: the writer places them
    /// again, with their entries rebuilt from the table ([`Layout::take_promoted`]).
    promoted: Vec<Box<[u8]>>,
}

impl Layout {
    /// An empty layout for a generation of `entries` entries of each kind and `buckets`
    /// buckets, keyed under `seed`.
    pub fn new(seed: u64, entries: EntryCounts, buckets: u32) -> Self {
        Self::with_hash(seed, entries, buckets, hostport_dns_common::hash::name_hash)
    }

    /// A layout whose names are hashed by `hash` (the kernel's, or a weaker one in tests).
    pub fn with_hash(
        seed: u64,
        entries: EntryCounts,
        buckets: u32,
        hash: fn(u64, &[u8]) -> u64,
    ) -> Self {
        Self {
            seed,
            hash,
            bucket_count: buckets,
            // Popped from the end: low slots first.
            free: entries.map(|count| (0..count).rev().collect()),
            passed: FxHashMap::default(),
            unplaced: FxHashMap::default(),
            overflow: FxHashMap::default(),
            collisions: 0,
            without_room: 0,
            names_held: 0,
            promoted: Vec::new(),
        }
    }

    /// Names to place again (see `promoted`).
    pub fn take_promoted(&mut self) -> Vec<Box<[u8]>> {
        std::mem::take(&mut self.promoted)
    }

    /// The hash of a name in wire form.
    pub fn hash(&self, wire: &[u8]) -> u64 {
        (self.hash)(self.seed, wire)
    }

    /// Names answered by userspace because the kernel cannot tell them from another.
    pub fn collisions(&self) -> usize {
        self.collisions
    }

    /// Names that would have an entry but found none of their kind or a larger one free: in the
    /// index, passed to userspace.
    pub fn names_without_room(&self) -> usize {
        self.without_room
    }

    /// Names in the index (with an entry or passing).
    pub fn names_held(&self) -> usize {
        self.names_held
    }

    /// Names that exist but found no way (both buckets full, or a shared hash).
    pub fn names_unplaced(&self) -> usize {
        self.unplaced.values().map(Vec::len).sum()
    }

    /// Gives `wire` (of hash `hash`) the entry `built` in `view`, wherever it is now.
    pub fn upsert(
        &mut self,
        view: &mut View,
        dirty: &mut Dirty,
        hash: u64,
        wire: &[u8],
        built: Built,
    ) {
        match self.find(view, hash, wire) {
            Some((bucket, way, current)) => {
                let wanted = self.store(view, dirty, current, built, wire, hash);
                if wanted != current {
                    view.buckets[bucket as usize].refs[way] = wanted;
                    dirty.buckets.insert(bucket);
                }
            }
            None if self.is_unplaced(hash, wire) => {}
            None => self.place(view, dirty, hash, wire, built),
        }
    }

    /// Takes `wire` (of hash `hash`) out of `view`.
    pub fn remove(&mut self, view: &mut View, dirty: &mut Dirty, hash: u64, wire: &[u8]) {
        if let Some((bucket, way, current)) = self.find(view, hash, wire) {
            self.release(current, hash);
            let b = &mut view.buckets[bucket as usize];
            b.tags[way] = EMPTY_TAG;
            b.refs[way] = 0;
            dirty.buckets.insert(bucket);
            self.names_held -= 1;
            self.promote(view, dirty, hash, bucket);
            return;
        }
        let Some(list) = self.unplaced.get_mut(&hash) else {
            return;
        };
        let Some(at) = list.iter().position(|u| *u.wire == *wire) else {
            return;
        };
        let gone = list.swap_remove(at);
        if list.is_empty() {
            self.unplaced.remove(&hash);
        }
        if gone.full {
            self.unmark_overflow(view, dirty, hash);
        } else {
            self.collisions -= 1;
        }
    }

    /// The bucket, way and entry reference holding `wire`, found as the kernel finds names but
    /// past ways whose tag is shared with another name.
    fn find(&self, view: &View, hash: u64, wire: &[u8]) -> Option<(u32, usize, EntryRef)> {
        let (first, second, tag) = candidates(hash, self.bucket_count);
        for bucket in [first, second] {
            let b = &view.buckets[bucket as usize];
            for way in 0..INDEX_WAYS {
                if b.tags[way] == tag && self.holds(view, b.refs[way], hash, wire) {
                    return Some((bucket, way, b.refs[way]));
                }
            }
        }
        None
    }

    /// Whether the entry `found` holds `wire`.
    fn holds(&self, view: &View, found: EntryRef, hash: u64, wire: &[u8]) -> bool {
        if found == PASS_REF {
            return self
                .passed
                .get(&hash)
                .is_some_and(|held| *held.wire == *wire);
        }
        view.name_of(found) == Some(wire)
    }

    fn is_unplaced(&self, hash: u64, wire: &[u8]) -> bool {
        self.unplaced
            .get(&hash)
            .is_some_and(|list| list.iter().any(|u| *u.wire == *wire))
    }

    /// Puts a name that is in no way into the emptier of its candidate buckets.
    fn place(&mut self, view: &mut View, dirty: &mut Dirty, hash: u64, wire: &[u8], built: Built) {
        let (first, second, tag) = candidates(hash, self.bucket_count);
        // A name with this very hash is there already: the kernel would find it first.
        let twin = self.passed.contains_key(&hash)
            || [first, second].iter().any(|bucket| {
                let b = &view.buckets[*bucket as usize];
                (0..INDEX_WAYS)
                    .any(|w| b.tags[w] == tag && self.hash_of(view, b.refs[w]) == Some(hash))
            });
        if twin {
            self.collisions += 1;
            self.unplaced.entry(hash).or_default().push(Unplaced {
                wire: wire.into(),
                full: false,
            });
            return;
        }
        let used = |bucket: u32| view.buckets[bucket as usize].used();
        let bucket = if used(second) < used(first) {
            second
        } else {
            first
        };
        let Some(way) = free_way(&view.buckets[bucket as usize]) else {
            self.unplaced.entry(hash).or_default().push(Unplaced {
                wire: wire.into(),
                full: true,
            });
            self.mark_overflow(view, dirty, hash);
            return;
        };
        let entry = self.store(view, dirty, PASS_REF, built, wire, hash);
        let b = &mut view.buckets[bucket as usize];
        b.tags[way] = tag;
        b.refs[way] = entry;
        dirty.buckets.insert(bucket);
        self.names_held += 1;
    }

    /// The hash of the name an entry holds, when the layout can tell (for passing names it keeps
    /// them).
    fn hash_of(&self, view: &View, found: EntryRef) -> Option<u64> {
        if found == PASS_REF {
            return None;
        }
        Some(self.hash(view.name_of(found)?))
    }

    /// Writes `built` for `wire`, whose way refers to `current` now: into the same slot when it
    /// is of the kind `built` needs, else into a free slot of that kind (or of a larger one when
    /// those are all taken; or none: it passes). Returns the reference the way must hold.
    fn store(
        &mut self,
        view: &mut View,
        dirty: &mut Dirty,
        current: EntryRef,
        built: Built,
        wire: &[u8],
        hash: u64,
    ) -> EntryRef {
        let class = built.class();
        let wanted = match class.and_then(|class| self.slot_for(current, class)) {
            Some((class, slot)) => {
                view.write(class, slot, &built);
                dirty.entries[class as usize].insert(slot);
                entry_ref(class, slot)
            }
            None => PASS_REF,
        };
        if wanted != current {
            self.release(current, hash);
        }
        if wanted == PASS_REF {
            let passed = Passed {
                wire: wire.into(),
                without_room: class,
            };
            self.without_room += usize::from(passed.without_room.is_some());
            if let Some(before) = self.passed.insert(hash, passed) {
                self.without_room -= usize::from(before.without_room.is_some());
            }
        }
        wanted
    }

    /// The slot an entry of kind `class` goes to: the smallest kind, from `class` up, that has
    /// room, where `current` (the slot the name holds now) counts as room of its own kind.
    ///
    /// A name that took a larger kind keeps it until it changes, also once its own kind has room
    /// again; so a name of that larger kind may find it full where the counts
    /// (`Capacity::holds`) say it fits (and, within one publication, a name may move into a kind
    /// before another moves out of it). It then passes (userspace answers it: never a wrong
    /// answer), is counted as left out ([`Layout::names_without_room`]), and is placed again as
    /// soon as a slot it can take is freed ([`Layout::promote_without_room`]). The table does not
    /// grow for it: the counts fit.
    fn slot_for(&mut self, current: EntryRef, class: EntryClass) -> Option<(EntryClass, u32)> {
        let held = if current == PASS_REF {
            None
        } else {
            ref_target(current)
        };
        let mut kind = Some(class);
        while let Some(k) = kind {
            if let Some((held_kind, slot)) = held
                && held_kind == k
            {
                return Some((k, slot));
            }
            if let Some(slot) = self.free[k as usize].pop() {
                return Some((k, slot));
            }
            kind = k.larger();
        }
        None
    }

    /// Frees what `current` held.
    fn release(&mut self, current: EntryRef, hash: u64) {
        if current == PASS_REF {
            if let Some(passed) = self.passed.remove(&hash) {
                self.without_room -= usize::from(passed.without_room.is_some());
            }
        } else if let Some((class, slot)) = ref_target(current) {
            self.free[class as usize].push(slot);
            self.promote_without_room(class);
        }
    }

    /// After a slot of kind `freed` was freed: hands the names that passed for lack of an entry
    /// it can hold to the writer to place again ([`Layout::take_promoted`]). Names pass so
    /// rarely that the walk is short, and it is skipped while none does.
    fn promote_without_room(&mut self, freed: EntryClass) {
        if self.without_room == 0 {
            return;
        }
        let waiting = self
            .passed
            .values()
            .filter(|passed| passed.without_room.is_some_and(|needs| needs <= freed))
            .map(|passed| passed.wire.clone());
        self.promoted.extend(waiting);
    }

    /// After a way of `bucket` was freed by a name of `hash`: takes out of `unplaced` every name
    /// that may now find a way (the freed one, or the one its twin left) for the writer to place
    /// again; those that still find none come back. Names wait rarely, so this walk is short.
    fn promote(&mut self, view: &mut View, dirty: &mut Dirty, hash: u64, bucket: u32) {
        let buckets = self.bucket_count;
        let waiting: Vec<u64> = self
            .unplaced
            .keys()
            .filter(|h| {
                let (first, second, _) = candidates(**h, buckets);
                **h == hash || first == bucket || second == bucket
            })
            .copied()
            .collect();
        for waiting_hash in waiting {
            let Some(list) = self.unplaced.remove(&waiting_hash) else {
                continue;
            };
            for name in list {
                if name.full {
                    self.unmark_overflow(view, dirty, waiting_hash);
                } else {
                    self.collisions -= 1;
                }
                self.promoted.push(name.wire);
            }
        }
    }

    fn mark_overflow(&mut self, view: &mut View, dirty: &mut Dirty, hash: u64) {
        let (first, second, _) = candidates(hash, self.bucket_count);
        for bucket in dedup(first, second) {
            *self.overflow.entry(bucket).or_insert(0) += 1;
            view.buckets[bucket as usize].flags |= BUCKET_OVERFLOW;
            dirty.buckets.insert(bucket);
        }
    }

    fn unmark_overflow(&mut self, view: &mut View, dirty: &mut Dirty, hash: u64) {
        let (first, second, _) = candidates(hash, self.bucket_count);
        for bucket in dedup(first, second) {
            let Some(count) = self.overflow.get_mut(&bucket) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                self.overflow.remove(&bucket);
                view.buckets[bucket as usize].flags &= !BUCKET_OVERFLOW;
                dirty.buckets.insert(bucket);
            }
        }
    }
}

/// The first free way of a bucket.
fn free_way(bucket: &Bucket) -> Option<usize> {
    bucket.tags.iter().position(|tag| *tag == EMPTY_TAG)
}

/// One bucket, or two distinct ones.
fn dedup(first: u32, second: u32) -> impl Iterator<Item = u32> {
    std::iter::once(first).chain((second != first).then_some(second))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostport_dns_common::limits::{NAME_PAYLOAD_LEN, SMALL_PAYLOAD_LEN};

    /// What the kernel does with a question (`ebpf/src/lookup.rs`, `probe` and `confirm`).
    #[derive(Debug, PartialEq, Eq)]
    enum Kernel {
        /// Answered from this entry's head and payload.
        Hit(Vec<u8>),
        /// Passed to userspace.
        Pass,
        /// Answered NXDOMAIN.
        Miss,
    }

    fn kernel(layout: &Layout, view: &View, wire: &[u8]) -> Kernel {
        let (first, second, tag) = candidates(layout.hash(wire), layout.bucket_count);
        let (a, b) = (
            &view.buckets[first as usize],
            &view.buckets[second as usize],
        );
        let way = (0..INDEX_WAYS)
            .map(|w| (a.tags[w], a.refs[w]))
            .chain((0..INDEX_WAYS).map(|w| (b.tags[w], b.refs[w])))
            .find(|(t, _)| *t == tag);
        let same = |held: &[u8], seen: Vec<u8>| {
            if held == wire {
                Kernel::Hit(seen)
            } else {
                Kernel::Pass
            }
        };
        match way {
            Some((_, PASS_REF)) => Kernel::Pass,
            Some((_, found)) => match ref_target(found) {
                Some((EntryClass::Small, slot)) => {
                    let entry = &view.small[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                Some((EntryClass::Name, slot)) => {
                    let entry = &view.names[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                Some((EntryClass::Big, slot)) => {
                    let entry = &view.big[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                None => Kernel::Pass,
            },
            None if (a.flags | b.flags) & BUCKET_OVERFLOW != 0 => Kernel::Pass,
            None => Kernel::Miss,
        }
    }

    /// What the kernel answers from: the head, the addresses and the name (an entry widened
    /// into a larger one, for lack of its own kind, answers the same).
    fn bytes<const P: usize>(entry: &Entry<P>) -> Vec<u8> {
        let mut out = crate::xdp::shared::bytes_of(&entry.head).to_vec();
        let addresses = entry.a_offset() + entry.head.a_count as usize * 4;
        out.extend_from_slice(&entry.payload[..addresses]);
        out.extend_from_slice(entry.name());
        out
    }

    /// An entry for `wire` of the given kind, its first address byte `mark`.
    fn built(wire: &[u8], kind: u8, mark: u8) -> Built {
        fn fill<const P: usize>(wire: &[u8], mark: u8) -> Entry<P> {
            let mut entry = Entry::<P>::EMPTY;
            entry.head.name_len = wire.len() as u8;
            entry.head.a_count = 1;
            entry.payload[..4].copy_from_slice(&[198, 18, 0, mark]);
            entry.payload[P - wire.len()..].copy_from_slice(wire);
            entry
        }
        match kind {
            0 => Built::Small(fill::<SMALL_PAYLOAD_LEN>(wire, mark)),
            1 => Built::Name(fill::<NAME_PAYLOAD_LEN>(wire, mark)),
            2 => Built::Big(Box::new(fill(wire, mark))),
            _ => Built::Pass,
        }
    }

    fn expected(built: &Built) -> Kernel {
        match built {
            Built::Small(entry) => Kernel::Hit(bytes(entry)),
            Built::Name(entry) => Kernel::Hit(bytes(entry)),
            Built::Big(entry) => Kernel::Hit(bytes(entry.as_ref())),
            Built::Pass => Kernel::Pass,
        }
    }

    /// One generation's index and entries, in memory.
    struct Memory {
        buckets: Vec<Bucket>,
        small: Vec<SmallEntry>,
        names: Vec<NameEntry>,
        big: Vec<BigEntry>,
    }

    impl Memory {
        fn new(buckets: u32, [small, names, big]: EntryCounts) -> Self {
            Self {
                buckets: vec![Bucket::EMPTY; buckets as usize],
                small: vec![SmallEntry::EMPTY; small as usize],
                names: vec![NameEntry::EMPTY; names as usize],
                big: vec![BigEntry::EMPTY; big as usize],
            }
        }

        fn view(&mut self) -> View<'_> {
            View {
                buckets: &mut self.buckets,
                small: &mut self.small,
                names: &mut self.names,
                big: &mut self.big,
            }
        }
    }

    /// Hashes by length only: names of one length share a hash (and so bucket and tag).
    fn by_length(_seed: u64, wire: &[u8]) -> u64 {
        (wire.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn name_hash(seed: u64, wire: &[u8]) -> u64 {
        hostport_dns_common::hash::name_hash(seed, wire)
    }

    /// Random changes to a layout too small for its names, with the kernel's view checked after
    /// each against a model: an existing name is answered with its own entry or passed, never
    /// NXDOMAIN; a name that does not exist is never answered.
    #[test]
    fn the_kernel_never_answers_wrong_whatever_the_changes() {
        for (hash, buckets, entries) in [
            (name_hash as fn(u64, &[u8]) -> u64, 2u32, [4u32, 4, 2]),
            (name_hash, 4, [20, 20, 4]),
            (name_hash, 5, [30, 3, 2]),
            (by_length, 4, [20, 20, 4]),
        ] {
            let mut memory = Memory::new(buckets, entries);
            let mut layout = Layout::with_hash(7, entries, buckets, hash);
            let mut model: FxHashMap<Vec<u8>, Built> = FxHashMap::default();
            let universe: Vec<Vec<u8>> = (0..60)
                .map(|i| {
                    let label = format!("n{}", "x".repeat(i % 7)) + &i.to_string();
                    let mut wire = vec![label.len() as u8];
                    wire.extend_from_slice(label.as_bytes());
                    wire.extend_from_slice(b"\x07example\x00");
                    wire
                })
                .collect();
            let mut state = 0x2545_f491_4f6c_dd1du64;
            let mut next = |below: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % below
            };
            for step in 0..3000 {
                let wire = &universe[next(universe.len() as u64) as usize];
                let hash_of = layout.hash(wire);
                let mut view = memory.view();
                let mut dirty = Dirty::default();
                if next(3) == 0 {
                    layout.remove(&mut view, &mut dirty, hash_of, wire);
                    model.remove(wire);
                } else {
                    let entry = built(wire, next(4) as u8, step as u8);
                    layout.upsert(&mut view, &mut dirty, hash_of, wire, entry.clone());
                    model.insert(wire.clone(), entry);
                }
                loop {
                    let promoted = layout.take_promoted();
                    if promoted.is_empty() {
                        break;
                    }
                    for wire in promoted {
                        if let Some(entry) = model.get(&*wire) {
                            let h = layout.hash(&wire);
                            layout.upsert(&mut view, &mut dirty, h, &wire, entry.clone());
                        }
                    }
                }
                for name in &universe {
                    let seen = kernel(&layout, &view, name);
                    match model.get(name) {
                        Some(entry) => assert!(
                            seen == expected(entry) || seen == Kernel::Pass,
                            "step {step}: {name:?} exists, the kernel says {seen:?}"
                        ),
                        None => assert!(
                            !matches!(seen, Kernel::Hit(_)),
                            "step {step}: {name:?} does not exist, the kernel answers it"
                        ),
                    }
                }
                assert_eq!(
                    layout.names_held() + layout.names_unplaced(),
                    model.len(),
                    "step {step}: every name is held or waits"
                );
                let without_room = model
                    .iter()
                    .filter(|(wire, built)| {
                        built.class().is_some()
                            && layout
                                .find(&view, layout.hash(wire), wire)
                                .is_some_and(|(_, _, found)| found == PASS_REF)
                    })
                    .count();
                assert_eq!(
                    layout.names_without_room(),
                    without_room,
                    "step {step}: names passed for lack of an entry are counted"
                );
            }
        }
    }

    /// Two names trade kinds in one publication while the larger kind is full: the one handled
    /// first finds no room and passes, then takes the slot the other frees.
    #[test]
    fn a_name_that_found_no_room_takes_the_first_slot_freed() {
        let mut memory = Memory::new(4, [1, 1, 0]);
        let mut layout = Layout::new(5, [1, 1, 0], 4);
        let mut view = memory.view();
        let mut dirty = Dirty::default();
        let (a, b) = (b"\x01a\x00".as_slice(), b"\x01b\x00".as_slice());
        let (ha, hb) = (layout.hash(a), layout.hash(b));
        layout.upsert(&mut view, &mut dirty, ha, a, built(a, 0, 1));
        layout.upsert(&mut view, &mut dirty, hb, b, built(b, 1, 2));
        assert_eq!(layout.names_without_room(), 0);
        // `a` now needs the name entry `b` holds, `b` the small one `a` holds.
        let (a_now, b_now) = (built(a, 1, 3), built(b, 0, 4));
        layout.upsert(&mut view, &mut dirty, ha, a, a_now.clone());
        assert_eq!(kernel(&layout, &view, a), Kernel::Pass);
        assert_eq!(layout.names_without_room(), 1);
        layout.upsert(&mut view, &mut dirty, hb, b, b_now.clone());
        assert_eq!(layout.take_promoted(), [Box::from(a)]);
        layout.upsert(&mut view, &mut dirty, ha, a, a_now.clone());
        assert_eq!(layout.names_without_room(), 0);
        assert_eq!(kernel(&layout, &view, a), expected(&a_now));
        assert_eq!(kernel(&layout, &view, b), expected(&b_now));
    }

    #[test]
    fn a_name_that_finds_no_way_makes_its_buckets_pass_misses() {
        let mut memory = Memory::new(1, [16, 1, 1]);
        let mut layout = Layout::new(3, [16, 1, 1], 1);
        let mut view = memory.view();
        let mut dirty = Dirty::default();
        let wires: Vec<Vec<u8>> = (0..INDEX_WAYS + 1)
            .map(|i| format!("\x01{}\x00", (b'a' + i as u8) as char).into_bytes())
            .collect();
        for wire in &wires {
            let h = layout.hash(wire);
            layout.upsert(&mut view, &mut dirty, h, wire, built(wire, 0, 1));
        }
        assert_eq!(layout.names_unplaced(), 1);
        assert_ne!(view.buckets[0].flags & BUCKET_OVERFLOW, 0);
        // One leaves: the waiting name takes its way and the flag goes.
        let h = layout.hash(&wires[0]);
        layout.remove(&mut view, &mut dirty, h, &wires[0]);
        let promoted = layout.take_promoted();
        assert_eq!(promoted.len(), 1);
        let h = layout.hash(&promoted[0]);
        layout.upsert(
            &mut view,
            &mut dirty,
            h,
            &promoted[0],
            built(&promoted[0], 0, 1),
        );
        assert_eq!(view.buckets[0].flags & BUCKET_OVERFLOW, 0);
        assert_eq!(layout.names_unplaced(), 0);
    }
}
