//! The one writer of the name and zone maps. New and changed entries go first (zones before
//! names, so that a name never points to a zone the kernel lacks), removals last. Each value is
//! replaced whole, atomically for the kernel's readers.
//!
//! Two ways in: the whole table (the first publication, which may find a previous agent's maps,
//! and zone changes), compared entry by entry with what the kernel holds; and the names a change
//! touched, which costs the same however large the table is. Between writes the writer keeps
//! which name each key holds, not the entries: those are rebuilt from the table when touched.

use hickory_proto::rr::LowerName;

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
    /// Whether the maps hold exactly `written` (false at start, when they may hold a previous
    /// agent's table, and after a failed write: compare them all on the next one).
    in_step: bool,
}

impl MapWriter {
    /// Takes the maps out of the loaded object. They may hold a previous agent's table (pinned
    /// maps adopted): the first write compares the whole table with them.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, WriteError> {
        Ok(Self {
            names: take(ebpf, maps::NAMES)?,
            zones: take(ebpf, maps::ZONES)?,
            written: Image::default(),
            in_step: false,
        })
    }

    /// Makes the maps hold the whole table: every entry is compared with what the kernel holds
    /// and written if it differs, and what the table lacks is removed.
    pub fn write_table(&mut self, table: &RecordTable) -> Result<WriteStats, WriteError> {
        self.in_step = false;
        let mut image = Image::default();
        let mut stats = WriteStats::default();
        let map_err = |map| move |source| WriteError::Map { map, source };
        image.refresh_zones(table);
        for (id, entry) in &image.zones {
            if differs(&self.zones, id, entry) {
                self.zones
                    .insert(id, entry, 0)
                    .map_err(map_err(maps::ZONES))?;
                stats.zones_written += 1;
            }
        }
        let mut failure = None;
        let names = &mut self.names;
        image.place_all(table, |key, entry| {
            let Some(entry) = entry else { return };
            if failure.is_none() && differs(names, &key, entry) {
                match names.insert(key, entry, 0) {
                    Ok(()) => stats.names_written += 1,
                    Err(source) => failure = Some(source),
                }
            }
        });
        if let Some(source) = failure {
            return Err(map_err(maps::NAMES)(source));
        }
        stats.names_removed = remove_unless(&mut self.names, |key| image.names.contains_key(key))
            .map_err(map_err(maps::NAMES))?;
        stats.zones_removed = remove_unless(&mut self.zones, |id| image.zones.contains_key(id))
            .map_err(map_err(maps::ZONES))?;
        stats.collisions = image.collisions();
        self.written = image;
        self.in_step = true;
        Ok(stats)
    }

    /// Rewrites the entries of `names` (those a change touched) and the zones' entries.
    pub fn write_names(
        &mut self,
        table: &RecordTable,
        names: &[LowerName],
    ) -> Result<WriteStats, WriteError> {
        if !self.in_step {
            // The maps may hold anything: compare them all.
            return self.write_table(table);
        }
        let changes = self.written.refresh(table, names);
        let result = self.write_changes(&changes);
        self.in_step = result.is_ok();
        result
    }

    /// Writes what `changes` lists: zones first, then names, removals last.
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
        for (key, entry) in &changes.names {
            if let Some(entry) = entry {
                self.names
                    .insert(key, entry.as_ref(), 0)
                    .map_err(map_err(maps::NAMES))?;
                stats.names_written += 1;
            }
        }
        for (key, entry) in &changes.names {
            if entry.is_none() {
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
}

/// Removes the keys of the kernel's map that `keep` refuses; returns how many.
fn remove_unless<K: Pod, V: Pod>(
    map: &mut BpfHashMap<MapData, K, V>,
    keep: impl Fn(&K) -> bool,
) -> Result<usize, MapError> {
    // Collected first: deleting while iterating would restart the kernel's key walk.
    let stale: Vec<K> = map.keys().flatten().filter(|key| !keep(key)).collect();
    for key in &stale {
        map.remove(key)?;
    }
    Ok(stale.len())
}

/// Whether the kernel's map lacks `key` or holds other bytes under it.
fn differs<K: Pod, V: Pod>(map: &BpfHashMap<MapData, K, V>, key: &K, value: &V) -> bool {
    map.get(key, 0)
        .map_or(true, |held| bytes_of(&held) != bytes_of(value))
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
