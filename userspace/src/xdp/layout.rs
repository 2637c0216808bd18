//! Where each name sits in the kernel's name index and entries: which bucket and way, which entry
//! slot. Pure (it works on slices standing for the maps), tested without a kernel; the writer
//! applies it to the index of the generation it is about to switch to, and copies the buckets it
//! changed (`Dirty`) into the other one once no run reads that any more.
//!
//! The entries are shared by both generations (`hostport_dns_common::generation`): a changed
//! name's entry goes into a free slot, never over one an index refers to, and the slot it leaves
//! is *retired* until the other generation's index no longer refers to it
//! ([`Layout::free_retired`], after the catch-up).
//!
//! The index itself is the record of where names are: a name is found as the kernel finds it
//! (its two candidate buckets, its tag, then its entry's name compared), so nothing but the free
//! and retired slots and the few names without a way of their own is kept beside the maps.

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

/// The index of the generation being written, the other generation's, and the entries both
/// share, as the writer maps them.
pub struct View<'a> {
    pub buckets: &'a mut [Bucket],
    /// The other generation's index, read only; empty when it holds nothing yet. A whole
    /// rewrite keeps the entries it refers to that are already right ([`Layout::for_rewrite`]).
    pub beside: &'a [Bucket],
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

    /// Whether the entry `found` refers to is `built`, as written into an entry of its kind (of
    /// `built`'s kind or a larger one): then the name needs nothing written.
    fn holds_built(&self, found: EntryRef, built: &Built) -> bool {
        let (Some(class), Some((kind, slot))) = (built.class(), ref_target(found)) else {
            return false;
        };
        if kind < class {
            return false;
        }
        let slot = slot as usize;
        match kind {
            EntryClass::Small => self.small.get(slot).is_some_and(|e| *e == widened(built)),
            EntryClass::Name => self.names.get(slot).is_some_and(|e| *e == widened(built)),
            EntryClass::Big => self.big.get(slot).is_some_and(|e| *e == widened(built)),
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

/// What a change touched in one generation's index: what the other generation must copy to
/// match it (the entries are shared: nothing of them is copied).
#[derive(Debug, Default)]
pub struct Dirty {
    pub buckets: FxHashSet<u32>,
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
    /// Entries of each kind.
    entries: EntryCounts,
    /// Free entry slots (no index refers to them), by kind ([`EntryClass`] as index).
    free: [Vec<u32>; 3],
    /// Slots the index being written no longer refers to but the other generation's may, and a
    /// run may still be reading: free once the catch-up has copied the index and waited them out.
    retired: [Vec<u32>; 3],
    /// While a whole rewrite runs: per kind and slot, whether the other generation's index
    /// refers to it and no name of the rewrite has kept it yet.
    beside: Option<[Vec<bool>; 3]>,
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
            entries,
            // Popped from the end: low slots first.
            free: entries.map(|count| (0..count).rev().collect()),
            retired: Default::default(),
            beside: None,
            passed: FxHashMap::default(),
            unplaced: FxHashMap::default(),
            overflow: FxHashMap::default(),
            collisions: 0,
            without_room: 0,
            names_held: 0,
            promoted: Vec::new(),
        }
    }

    /// A layout for writing the index of `view.buckets` anew beside the other generation's
    /// (`view.beside`), whose entries stay as they are: the slots it refers to and those still
    /// retired are not free; a name whose entry there is already what it needs keeps it. Once
    /// every name is written, [`Layout::retire_unclaimed`] retires the slots no name kept.
    pub fn for_rewrite(&self, view: &View) -> Self {
        let mut beside = self.entries.map(|count| vec![false; count as usize]);
        for bucket in view.beside {
            for way in 0..INDEX_WAYS {
                if bucket.tags[way] == EMPTY_TAG {
                    continue;
                }
                if let Some((kind, slot)) = ref_target(bucket.refs[way])
                    && let Some(held) = beside[kind as usize].get_mut(slot as usize)
                {
                    *held = true;
                }
            }
        }
        let mut taken = beside.clone();
        for (kind, slots) in self.retired.iter().enumerate() {
            for slot in slots {
                if let Some(held) = taken[kind].get_mut(*slot as usize) {
                    *held = true;
                }
            }
        }
        let mut layout = Self::with_hash(self.seed, self.entries, self.bucket_count, self.hash);
        for (kind, free) in layout.free.iter_mut().enumerate() {
            free.retain(|slot| !taken[kind][*slot as usize]);
        }
        layout.retired = self.retired.clone();
        layout.beside = Some(beside);
        layout
    }

    /// Ends a whole rewrite ([`Layout::for_rewrite`]): the slots the other generation's index
    /// refers to that no name kept are retired.
    pub fn retire_unclaimed(&mut self) {
        let Some(beside) = self.beside.take() else {
            return;
        };
        for (kind, held) in beside.iter().enumerate() {
            let unclaimed = held.iter().enumerate().filter(|(_, held)| **held);
            self.retired[kind].extend(unclaimed.map(|(slot, _)| slot as u32));
        }
    }

    /// After the catch-up (both indexes alike, no run reading what they referred to before):
    /// the retired slots are free. Names that passed for lack of an entry are handed to the
    /// writer to place again in them ([`Layout::take_promoted`]).
    pub fn free_retired(&mut self) {
        let mut largest = None;
        for kind in EntryClass::ALL {
            let retired = &mut self.retired[kind as usize];
            if !retired.is_empty() {
                self.free[kind as usize].append(retired);
                largest = Some(kind);
            }
        }
        if let Some(kind) = largest {
            self.promote_without_room(kind);
        }
    }

    /// Slots retired by the publication under way (tests poison them: `writer::TestHooks`).
    pub fn retired(&self) -> &[Vec<u32>; 3] {
        &self.retired
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
                let wanted = self.store(view, current, built, wire, hash);
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
        let entry = self.store(view, PASS_REF, built, wire, hash);
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

    /// Writes `built` for `wire`, whose way refers to `current` now, copy-on-write: nothing when
    /// that entry already holds it (or, in a whole rewrite, when the other generation's entry for
    /// the name does: it is kept); else into a free slot of the kind it needs (or of a larger one
    /// when those are all taken; or none: it passes), and `current` is retired. Returns the
    /// reference the way must hold.
    fn store(
        &mut self,
        view: &mut View,
        current: EntryRef,
        built: Built,
        wire: &[u8],
        hash: u64,
    ) -> EntryRef {
        if current != PASS_REF && view.holds_built(current, &built) {
            return current;
        }
        let class = built.class();
        let wanted = match self.keep_beside(view, hash, wire, &built) {
            Some(kept) => kept,
            None => match class.and_then(|class| self.free_slot(class)) {
                Some((class, slot)) => {
                    view.write(class, slot, &built);
                    entry_ref(class, slot)
                }
                None => PASS_REF,
            },
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

    /// In a whole rewrite: the entry the other generation's index has for `wire`, if it holds
    /// `built` and no name kept it yet (it is then kept: neither free nor retired).
    fn keep_beside(
        &mut self,
        view: &View,
        hash: u64,
        wire: &[u8],
        built: &Built,
    ) -> Option<EntryRef> {
        let held = self.beside.as_mut()?;
        let (first, second, tag) = candidates(hash, self.bucket_count);
        let found = [first, second].into_iter().find_map(|bucket| {
            let b = view.beside.get(bucket as usize)?;
            (0..INDEX_WAYS)
                .filter(|way| b.tags[*way] == tag)
                .map(|way| b.refs[way])
                .find(|found| view.name_of(*found) == Some(wire))
        })?;
        let (kind, slot) = ref_target(found)?;
        let unkept = held[kind as usize].get_mut(slot as usize)?;
        if !*unkept || !view.holds_built(found, built) {
            return None;
        }
        *unkept = false;
        Some(found)
    }

    /// A free slot for an entry of kind `class`: of the smallest kind, from `class` up, that has
    /// one.
    ///
    /// A change needs a free slot for every name it writes (the slots it leaves are free only
    /// after the catch-up), and a name that took a larger kind keeps it until it changes; so a
    /// name may find no slot where the counts (`Capacity::holds`) say it fits. It then passes
    /// (userspace answers it: never a wrong answer), is counted as left out
    /// ([`Layout::names_without_room`]), and is placed again as soon as a slot it can take is
    /// freed ([`Layout::free_retired`]: the writer's follow-up publication). The table does not
    /// grow for it: the counts fit.
    fn free_slot(&mut self, class: EntryClass) -> Option<(EntryClass, u32)> {
        let mut kind = Some(class);
        while let Some(k) = kind {
            if let Some(slot) = self.free[k as usize].pop() {
                return Some((k, slot));
            }
            kind = k.larger();
        }
        None
    }

    /// Lets go of what `current` held: a passing name's record, or an entry slot, retired until
    /// the catch-up.
    fn release(&mut self, current: EntryRef, hash: u64) {
        if current == PASS_REF {
            if let Some(passed) = self.passed.remove(&hash) {
                self.without_room -= usize::from(passed.without_room.is_some());
            }
        } else if let Some((class, slot)) = ref_target(current) {
            self.retired[class as usize].push(slot);
        }
    }

    /// After slots of kinds up to `freed` were freed: hands the names that passed for lack of an
    /// entry one of them can hold to the writer to place again ([`Layout::take_promoted`]).
    /// Skipped while no name waits for room.
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
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Kernel {
        /// Answered from this entry's head and payload.
        Hit(Vec<u8>),
        /// Passed to userspace.
        Pass,
        /// Answered NXDOMAIN.
        Miss,
    }

    /// The kernel's answer to `wire` from generation `generation` of `memory`.
    fn kernel(layout: &Layout, memory: &Memory, generation: usize, wire: &[u8]) -> Kernel {
        let buckets = &memory.index[generation];
        let (first, second, tag) = candidates(layout.hash(wire), layout.bucket_count);
        let (a, b) = (&buckets[first as usize], &buckets[second as usize]);
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
                    let entry = &memory.small[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                Some((EntryClass::Name, slot)) => {
                    let entry = &memory.names[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                Some((EntryClass::Big, slot)) => {
                    let entry = &memory.big[slot as usize];
                    same(entry.name(), bytes(entry))
                }
                None => Kernel::Pass,
            },
            None if (a.flags | b.flags) & BUCKET_OVERFLOW != 0 => Kernel::Pass,
            None => Kernel::Miss,
        }
    }

    /// The kernel's answers to every name of `universe` from generation `generation`.
    fn answers(
        layout: &Layout,
        memory: &Memory,
        generation: usize,
        universe: &[Vec<u8>],
    ) -> Vec<Kernel> {
        universe
            .iter()
            .map(|name| kernel(layout, memory, generation, name))
            .collect()
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

    /// Both generations' indexes and the entries they share, in memory.
    struct Memory {
        index: [Vec<Bucket>; 2],
        small: Vec<SmallEntry>,
        names: Vec<NameEntry>,
        big: Vec<BigEntry>,
    }

    impl Memory {
        fn new(buckets: u32, [small, names, big]: EntryCounts) -> Self {
            Self {
                index: [0, 1].map(|_| vec![Bucket::EMPTY; buckets as usize]),
                small: vec![SmallEntry::EMPTY; small as usize],
                names: vec![NameEntry::EMPTY; names as usize],
                big: vec![BigEntry::EMPTY; big as usize],
            }
        }

        /// The writer's view of generation `generation`, beside the other one.
        fn view(&mut self, generation: usize) -> View<'_> {
            let [zero, one] = &mut self.index;
            let (buckets, beside) = if generation == 0 {
                (zero, &*one)
            } else {
                (one, &*zero)
            };
            View {
                buckets,
                beside,
                small: &mut self.small,
                names: &mut self.names,
                big: &mut self.big,
            }
        }

        /// The catch-up: generation `from`'s index copied into the other one.
        fn catch_up(&mut self, from: usize) {
            let copy = self.index[from].clone();
            self.index[1 - from] = copy;
        }
    }

    /// Hashes by length only: names of one length share a hash (and so bucket and tag).
    fn by_length(_seed: u64, wire: &[u8]) -> u64 {
        (wire.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn name_hash(seed: u64, wire: &[u8]) -> u64 {
        hostport_dns_common::hash::name_hash(seed, wire)
    }

    /// Runs `write` on the generation after `active`, and checks that `active` answers every
    /// name of `universe` as it did before: nothing it refers to was written.
    fn write_unseen(
        layout: &mut Layout,
        memory: &mut Memory,
        active: usize,
        universe: &[Vec<u8>],
        write: impl FnOnce(&mut Layout, &mut View),
    ) {
        let before = answers(layout, memory, active, universe);
        write(layout, &mut memory.view(1 - active));
        assert_eq!(
            answers(layout, memory, active, universe),
            before,
            "the active generation changed under its readers"
        );
    }

    /// Places the names the layout hands back, as the writer does, from the model.
    fn place_promoted(layout: &mut Layout, view: &mut View, model: &FxHashMap<Vec<u8>, Built>) {
        let mut dirty = Dirty::default();
        loop {
            let promoted = layout.take_promoted();
            if promoted.is_empty() {
                break;
            }
            for wire in promoted {
                if let Some(entry) = model.get(&*wire) {
                    let h = layout.hash(&wire);
                    layout.upsert(view, &mut dirty, h, &wire, entry.clone());
                }
            }
        }
    }

    /// Random changes, some of many names at once and some whole rewrites, published into two
    /// generations that share their entries, in tables too small for their names, with the
    /// kernel's view checked against a model: while a change is written, the active generation
    /// answers exactly as before it (nothing it refers to is written); after the switch (and
    /// the follow-ups that place names that found no room) an existing name is answered with
    /// its own entry or passed, never NXDOMAIN, and a name that does not exist is never
    /// answered; names passed for lack of room are counted; every slot is free or held by one
    /// way of the index, none lost and none shared.
    #[test]
    fn the_kernel_never_answers_wrong_whatever_the_changes() {
        for (hash, buckets, entries) in [
            (name_hash as fn(u64, &[u8]) -> u64, 2u32, [4u32, 4, 2]),
            (name_hash, 4, [20, 20, 4]),
            (name_hash, 5, [30, 3, 2]),
            (name_hash, 8, [40, 8, 4]),
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
            let mut active = 0usize;
            let mut follow_ups = 0usize;
            for step in 0..1500 {
                let whole = next(10) == 0;
                // One to eight names change (or, rewritten whole, all of them may).
                let changes = 1 + next(8) as usize;
                for _ in 0..changes {
                    let wire = &universe[next(universe.len() as u64) as usize];
                    if next(3) == 0 {
                        model.remove(wire);
                    } else {
                        let kind = next(4) as u8;
                        // Now and then the same entry again: nothing to write.
                        let mark = if next(4) == 0 { 1 } else { step as u8 };
                        model.insert(wire.clone(), built(wire, kind, mark));
                    }
                }
                write_unseen(
                    &mut layout,
                    &mut memory,
                    active,
                    &universe,
                    |layout, view| {
                        let mut dirty = Dirty::default();
                        if whole {
                            view.buckets.fill(Bucket::EMPTY);
                            *layout = layout.for_rewrite(view);
                            for (wire, entry) in &model {
                                let h = layout.hash(wire);
                                layout.upsert(view, &mut dirty, h, wire, entry.clone());
                            }
                            layout.retire_unclaimed();
                        } else {
                            for wire in &universe {
                                let h = layout.hash(wire);
                                match model.get(wire) {
                                    Some(entry) => {
                                        layout.upsert(view, &mut dirty, h, wire, entry.clone())
                                    }
                                    None => layout.remove(view, &mut dirty, h, wire),
                                }
                            }
                        }
                        place_promoted(layout, view, &model);
                    },
                );
                // Switch, catch up, free what the left generation referred to; follow-ups place
                // the names that found no room, into the next generation each time.
                active = 1 - active;
                loop {
                    memory.catch_up(active);
                    layout.free_retired();
                    if layout.promoted.is_empty() {
                        break;
                    }
                    follow_ups += 1;
                    write_unseen(
                        &mut layout,
                        &mut memory,
                        active,
                        &universe,
                        |layout, view| place_promoted(layout, view, &model),
                    );
                    active = 1 - active;
                }
                for name in &universe {
                    let seen = kernel(&layout, &memory, active, name);
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
                let view = memory.view(active);
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
                // Every slot is free or referred to by one way of the index: none is lost, none
                // is held twice.
                let mut held: [FxHashSet<u32>; 3] = Default::default();
                for bucket in view.buckets.iter() {
                    for way in 0..INDEX_WAYS {
                        if bucket.tags[way] != EMPTY_TAG
                            && let Some((kind, slot)) = ref_target(bucket.refs[way])
                        {
                            assert!(held[kind as usize].insert(slot), "step {step}: shared");
                        }
                    }
                }
                for kind in 0..3 {
                    let free: FxHashSet<u32> = layout.free[kind].iter().copied().collect();
                    assert_eq!(
                        free.len(),
                        layout.free[kind].len(),
                        "step {step}: freed twice"
                    );
                    assert!(free.is_disjoint(&held[kind]), "step {step}: held and free");
                    assert_eq!(
                        held[kind].len() + free.len(),
                        entries[kind] as usize,
                        "step {step}: kind {kind}'s slots are all accounted for"
                    );
                }
            }
            assert!(
                follow_ups > 0,
                "changes that found no room were followed up"
            );
        }
    }

    /// A name whose entry does not change keeps its slot: nothing is written, nothing retired.
    #[test]
    fn an_unchanged_name_keeps_its_entry() {
        let mut memory = Memory::new(4, [4, 1, 1]);
        let mut layout = Layout::new(5, [4, 1, 1], 4);
        let mut dirty = Dirty::default();
        let a = b"\x01a\x00".as_slice();
        let h = layout.hash(a);
        layout.upsert(&mut memory.view(1), &mut dirty, h, a, built(a, 0, 1));
        memory.catch_up(1);
        layout.free_retired();
        let free = layout.free[0].len();
        layout.upsert(&mut memory.view(0), &mut dirty, h, a, built(a, 0, 1));
        assert_eq!((layout.free[0].len(), layout.retired[0].len()), (free, 0));
        layout.upsert(&mut memory.view(0), &mut dirty, h, a, built(a, 0, 2));
        assert_eq!(
            (layout.free[0].len(), layout.retired[0].len()),
            (free - 1, 1)
        );
        // The generation being read still answers the old entry.
        assert_eq!(kernel(&layout, &memory, 1, a), expected(&built(a, 0, 1)));
        assert_eq!(kernel(&layout, &memory, 0, a), expected(&built(a, 0, 2)));
    }

    /// Two names trade kinds in one publication while every other slot is taken: both pass for
    /// a moment, and take the slots they left once those are freed.
    #[test]
    fn names_that_found_no_room_take_the_slots_freed_after_the_catch_up() {
        let mut memory = Memory::new(4, [1, 1, 0]);
        let mut layout = Layout::new(5, [1, 1, 0], 4);
        let mut dirty = Dirty::default();
        let (a, b) = (b"\x01a\x00".as_slice(), b"\x01b\x00".as_slice());
        let (ha, hb) = (layout.hash(a), layout.hash(b));
        {
            let mut view = memory.view(1);
            layout.upsert(&mut view, &mut dirty, ha, a, built(a, 0, 1));
            layout.upsert(&mut view, &mut dirty, hb, b, built(b, 1, 2));
        }
        memory.catch_up(1);
        layout.free_retired();
        assert_eq!(layout.names_without_room(), 0);
        // `a` now needs the name entry `b` holds, `b` the small one `a` holds.
        let (a_now, b_now) = (built(a, 1, 3), built(b, 0, 4));
        {
            let mut view = memory.view(0);
            layout.upsert(&mut view, &mut dirty, ha, a, a_now.clone());
            layout.upsert(&mut view, &mut dirty, hb, b, b_now.clone());
        }
        assert_eq!(layout.names_without_room(), 2);
        assert_eq!(kernel(&layout, &memory, 0, a), Kernel::Pass);
        assert_eq!(kernel(&layout, &memory, 1, a), expected(&built(a, 0, 1)));
        memory.catch_up(0);
        layout.free_retired();
        let mut promoted = layout.take_promoted();
        promoted.sort();
        assert_eq!(promoted, [Box::from(a), Box::from(b)]);
        {
            let mut view = memory.view(1);
            layout.upsert(&mut view, &mut dirty, ha, a, a_now.clone());
            layout.upsert(&mut view, &mut dirty, hb, b, b_now.clone());
        }
        assert_eq!(layout.names_without_room(), 0);
        assert_eq!(kernel(&layout, &memory, 1, a), expected(&a_now));
        assert_eq!(kernel(&layout, &memory, 1, b), expected(&b_now));
    }

    /// A whole rewrite keeps the entries of the other generation that are already right, and
    /// writes the others into slots that generation does not refer to.
    #[test]
    fn a_whole_rewrite_keeps_what_is_already_right() {
        let entries = [8, 1, 1];
        let mut memory = Memory::new(4, entries);
        let mut layout = Layout::new(9, entries, 4);
        let mut dirty = Dirty::default();
        let wires: Vec<Vec<u8>> = (0..4u8).map(|i| vec![1, b'a' + i, 0]).collect();
        {
            let mut view = memory.view(0);
            for wire in &wires {
                let h = layout.hash(wire);
                layout.upsert(&mut view, &mut dirty, h, wire, built(wire, 0, 1));
            }
        }
        memory.catch_up(0);
        // A new writer (an adopted table) knows nothing of generation 0's slots.
        let mut layout = Layout::new(9, entries, 4);
        {
            let mut view = memory.view(1);
            view.buckets.fill(Bucket::EMPTY);
            layout = layout.for_rewrite(&view);
            assert_eq!(
                layout.free[0].len(),
                4,
                "the four slots generation 0 refers to are not free"
            );
            for (i, wire) in wires.iter().enumerate() {
                let h = layout.hash(wire);
                let mark = if i == 0 { 2 } else { 1 };
                layout.upsert(&mut view, &mut dirty, h, wire, built(wire, 0, mark));
            }
            layout.retire_unclaimed();
            assert_eq!(layout.free[0].len(), 3, "one entry written");
            assert_eq!(layout.retired[0].len(), 1, "the one it replaces");
        }
        assert_eq!(
            kernel(&layout, &memory, 0, &wires[0]),
            expected(&built(&wires[0], 0, 1))
        );
        assert_eq!(
            kernel(&layout, &memory, 1, &wires[0]),
            expected(&built(&wires[0], 0, 2))
        );
        assert_eq!(
            kernel(&layout, &memory, 1, &wires[3]),
            expected(&built(&wires[3], 0, 1))
        );
    }

    #[test]
    fn a_name_that_finds_no_way_makes_its_buckets_pass_misses() {
        let mut memory = Memory::new(1, [16, 1, 1]);
        let mut layout = Layout::new(3, [16, 1, 1], 1);
        let mut view = memory.view(0);
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
