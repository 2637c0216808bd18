//! Reading a kernel table a running (or stopped) agent pinned: what `hostport-dns records`
//! shows. Read-only mappings of the active generation's index and zones and of the entries it
//! refers to, decoded as the program reads them.

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    os::fd::AsFd,
    path::Path,
};

use aya::{
    Pod,
    maps::{MapData, MapInfo},
};
use hostport_dns_common::{
    entry::{BigEntry, Entry, EntryClass, NAME_FLAG_APEX, NameEntry, SmallEntry, ZoneEntry},
    generation::{GENERATIONS, Generation, slot},
    index::{Bucket, EMPTY_TAG, PASS_REF, ref_target},
    limits::{A_ADDR_LEN, AAAA_ADDR_LEN},
    maps,
};

use crate::xdp::{pins::map_pin, shared::SharedArray};

/// One name of the kernel table, decoded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NameRow {
    /// The name (wire form); empty for a name the kernel passes without an entry.
    pub wire: Vec<u8>,
    pub zone_id: u32,
    pub ttl: u32,
    pub a: Vec<Ipv4Addr>,
    pub aaaa: Vec<Ipv6Addr>,
    pub apex: bool,
}

/// The pinned table maps.
pub struct PinnedTable {
    state: SharedArray<Generation>,
    index: SharedArray<Bucket>,
    small: SharedArray<SmallEntry>,
    names: SharedArray<NameEntry>,
    big: SharedArray<BigEntry>,
    zones: SharedArray<ZoneEntry>,
}

impl PinnedTable {
    pub fn open(pin_dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            state: open(pin_dir, maps::GENERATION)?,
            index: open(pin_dir, maps::INDEX)?,
            small: open(pin_dir, maps::SMALL)?,
            names: open(pin_dir, maps::NAMES)?,
            big: open(pin_dir, maps::BIG)?,
            zones: open(pin_dir, maps::ZONES)?,
        })
    }

    /// The generation the kernel answers from now, if one is active.
    pub fn active(&self) -> Option<u32> {
        self.state.get(0).active_generation()
    }

    /// The names of the active generation: those with an entry, and how many pass without one.
    pub fn names(&self) -> (Vec<NameRow>, usize) {
        let Some(generation) = self.active() else {
            return (Vec::new(), 0);
        };
        // The index has a part per generation; the entries are one array both share.
        let buckets = self.index.len() / GENERATIONS;
        let (small, names, big) = (self.small.len(), self.names.len(), self.big.len());
        let mut rows = Vec::new();
        let mut passed = 0;
        for b in 0..buckets {
            let bucket = self.index.get(slot(generation, buckets, b));
            for (tag, found) in bucket.tags.iter().zip(bucket.refs) {
                if *tag == EMPTY_TAG {
                    continue;
                }
                if found == PASS_REF {
                    passed += 1;
                    continue;
                }
                match ref_target(found) {
                    Some((EntryClass::Small, at)) if at < small => {
                        rows.push(decode(self.small.get_ref(at)));
                    }
                    Some((EntryClass::Name, at)) if at < names => {
                        rows.push(decode(self.names.get_ref(at)));
                    }
                    Some((EntryClass::Big, at)) if at < big => {
                        rows.push(decode(self.big.get_ref(at)));
                    }
                    // Not a slot of this table: nothing the program would answer from.
                    _ => {}
                }
            }
        }
        (rows, passed)
    }

    /// Zone ids the active generation holds.
    pub fn zone_ids(&self) -> Vec<u32> {
        let Some(generation) = self.active() else {
            return Vec::new();
        };
        let zones = self.zones.len() / GENERATIONS;
        (0..zones)
            .filter(|id| self.zones.get_ref(slot(generation, zones, *id)).apex_len != 0)
            .collect()
    }
}

fn decode<const P: usize>(entry: &Entry<P>) -> NameRow {
    let head = entry.head;
    let aaaa: Vec<Ipv6Addr> = entry
        .payload
        .chunks_exact(AAAA_ADDR_LEN)
        .take(head.aaaa_count as usize)
        .filter_map(|chunk| <[u8; 16]>::try_from(chunk).ok().map(Ipv6Addr::from))
        .collect();
    let a = entry
        .payload
        .get(entry.a_offset()..)
        .unwrap_or_default()
        .chunks_exact(A_ADDR_LEN)
        .take(head.a_count as usize)
        .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]))
        .collect();
    NameRow {
        wire: entry.name().to_vec(),
        zone_id: u32::from(head.zone),
        ttl: u32::from_be_bytes(head.ttl),
        a,
        aaaa,
        apex: head.flags & NAME_FLAG_APEX != 0,
    }
}

fn open<T: Pod>(pin_dir: &Path, name: &str) -> anyhow::Result<SharedArray<T>> {
    let path = map_pin(pin_dir, name);
    let context = || {
        format!(
            "cannot open {}: is an agent running with --pin-dir {}?",
            path.display(),
            pin_dir.display()
        )
    };
    let info = MapInfo::from_pin(&path).map_err(|e| anyhow::anyhow!("{}: {e}", context()))?;
    let data = MapData::from_pin(&path).map_err(|e| anyhow::anyhow!("{}: {e}", context()))?;
    if info.value_size() as usize != size_of::<T>() {
        anyhow::bail!("{}: another layout", path.display());
    }
    Ok(SharedArray::map_read_only(
        data.fd().as_fd(),
        info.max_entries(),
    )?)
}
