//! The one writer of the name and zone maps. It keeps what it last wrote and applies only the
//! difference: new and changed entries first (zones before names, so that a name never points
//! to a zone the kernel lacks), removals last. Each value is replaced whole, atomically for the
//! kernel's readers.
//!
//! Two ways in: the whole table (the first publication, which may find a previous agent's maps,
//! and zone changes), compared entry by entry with what the maps hold; and the names a change
//! touched, which costs the same however large the table is.

use hickory_proto::rr::LowerName;
use rustc_hash::FxHashMap as HashMap;

use aya::{
    Ebpf, Pod,
    maps::{HashMap as BpfHashMap, MapData, MapError},
};
use hostport_dns_common::{
    maps,
    record::{NameEntry, NameKey, ZoneEntry, ZoneId},
};

use crate::{
    table::RecordTable,
    xdp::image::{self, Image},
};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the XDP object has no map {0}")]
    MissingMap(&'static str),
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
}

/// What one update changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub names_written: usize,
    pub names_removed: usize,
    pub zones_written: usize,
    pub zones_removed: usize,
    /// Names sharing a key with another (answered by userspace).
    pub collisions: usize,
}

pub struct MapWriter {
    names: BpfHashMap<MapData, NameKey, NameEntry>,
    zones: BpfHashMap<MapData, ZoneId, ZoneEntry>,
    written: Image,
    /// Whether the maps hold exactly `written` (false after a failed write: compare them all
    /// on the next one).
    in_step: bool,
}

impl MapWriter {
    /// Takes the maps out of the loaded object, and starts from what they hold now (empty after
    /// a fresh load; the previous agent's table after adopting pinned maps).
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, WriteError> {
        let names: BpfHashMap<MapData, NameKey, NameEntry> = take(ebpf, maps::NAMES)?;
        let zones: BpfHashMap<MapData, ZoneId, ZoneEntry> = take(ebpf, maps::ZONES)?;
        let mut writer = Self {
            names,
            zones,
            written: Image::default(),
            in_step: false,
        };
        writer.read_back();
        Ok(writer)
    }

    /// Takes what the maps hold as what was written.
    fn read_back(&mut self) {
        let mut written = Image::default();
        for key in self.names.keys().flatten() {
            if let Ok(entry) = self.names.get(&key, 0) {
                written.names.insert(key, entry);
            }
        }
        for key in self.zones.keys().flatten() {
            if let Ok(entry) = self.zones.get(&key, 0) {
                written.zones.insert(key, entry);
            }
        }
        self.written = written;
        self.in_step = true;
    }

    /// Makes the maps hold the whole table.
    pub fn write_table(&mut self, table: &RecordTable) -> Result<WriteStats, WriteError> {
        if !self.in_step {
            self.read_back();
        }
        let image = image::build(table);
        let result = self.apply(image);
        self.in_step = result.is_ok();
        result
    }

    /// Rewrites the entries of `names` (those a change touched) and the zones' entries.
    pub fn write_names(
        &mut self,
        table: &RecordTable,
        names: &[LowerName],
    ) -> Result<WriteStats, WriteError> {
        if !self.in_step {
            // A write failed before: the maps may hold anything; compare them all.
            return self.write_table(table);
        }
        let changes = self.written.refresh(table, names);
        let result = self.write_changes(&changes);
        self.in_step = result.is_ok();
        result
    }

    /// Writes what `changes` lists from the written image into the maps.
    fn write_changes(&mut self, changes: &image::Changes) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats {
            collisions: self.written.collisions(),
            ..WriteStats::default()
        };
        let map_err = |map| move |source| WriteError::Map { map, source };
        for id in &changes.zones {
            if let Some(entry) = self.written.zones.get(id) {
                self.zones
                    .insert(id, entry, 0)
                    .map_err(map_err(maps::ZONES))?;
                stats.zones_written += 1;
            }
        }
        for key in &changes.names {
            if let Some(entry) = self.written.names.get(key) {
                self.names
                    .insert(key, entry, 0)
                    .map_err(map_err(maps::NAMES))?;
                stats.names_written += 1;
            }
        }
        for key in &changes.names {
            if !self.written.names.contains_key(key) {
                self.names.remove(key).map_err(map_err(maps::NAMES))?;
                stats.names_removed += 1;
            }
        }
        for id in &changes.zones {
            if !self.written.zones.contains_key(id) {
                self.zones.remove(id).map_err(map_err(maps::ZONES))?;
                stats.zones_removed += 1;
            }
        }
        Ok(stats)
    }

    /// Makes the maps hold `image`, writing what differs from what was written.
    fn apply(&mut self, image: Image) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats {
            collisions: image.collisions(),
            ..WriteStats::default()
        };
        let map_err = |map| move |source| WriteError::Map { map, source };
        for (id, entry) in changed(&self.written.zones, &image.zones) {
            self.zones
                .insert(id, entry, 0)
                .map_err(map_err(maps::ZONES))?;
            stats.zones_written += 1;
        }
        for (key, entry) in changed(&self.written.names, &image.names) {
            self.names
                .insert(key, entry, 0)
                .map_err(map_err(maps::NAMES))?;
            stats.names_written += 1;
        }
        for key in self
            .written
            .names
            .keys()
            .filter(|k| !image.names.contains_key(k))
        {
            self.names.remove(key).map_err(map_err(maps::NAMES))?;
            stats.names_removed += 1;
        }
        for id in self
            .written
            .zones
            .keys()
            .filter(|k| !image.zones.contains_key(k))
        {
            self.zones.remove(id).map_err(map_err(maps::ZONES))?;
            stats.zones_removed += 1;
        }
        self.written = image;
        Ok(stats)
    }

    /// What the maps hold, as last written.
    pub fn written(&self) -> &Image {
        &self.written
    }
}

/// Entries of `new` that `old` lacks or holds with other bytes.
fn changed<'a, K: Copy + Eq + std::hash::Hash, V: Pod>(
    old: &'a HashMap<K, V>,
    new: &'a HashMap<K, V>,
) -> impl Iterator<Item = (K, &'a V)> {
    new.iter()
        .filter(|(k, v)| old.get(k).is_none_or(|o| bytes_of(o) != bytes_of(*v)))
        .map(|(k, v)| (*k, v))
}

/// The bytes of a plain-old-data value.
pub fn bytes_of<V: Pod>(value: &V) -> &[u8] {
    // SAFETY: Pod types are plain bytes without padding.
    unsafe { std::slice::from_raw_parts((value as *const V).cast::<u8>(), size_of::<V>()) }
}

pub fn take<K: Pod, V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<BpfHashMap<MapData, K, V>, WriteError> {
    let map = ebpf.take_map(name).ok_or(WriteError::MissingMap(name))?;
    BpfHashMap::try_from(map).map_err(|source| WriteError::Map { map: name, source })
}
