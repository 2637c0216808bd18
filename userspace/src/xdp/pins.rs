//! The pin directory: where the program's maps and links outlive the agent, so that a restart
//! or an upgrade hands the kernel path over without a gap.
//!
//! One agent at a time: it holds an exclusive lock on the directory (`flock`) for as long as it
//! runs. Maps are adopted as one set or not at all: every table map pinned under this layout
//! version with the sizes this build expects, and `HPD_GEN` carrying this build's layout
//! fingerprint (`hostport_dns_common::maps::layout_fingerprint`). Otherwise every pin is removed
//! and the agent starts fresh maps; a program still attached keeps its own maps (its references
//! hold them) and answers from them until its link is handed over.

use std::{
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use aya::maps::{Array, Map, MapData, MapInfo};
use hostport_dns_common::{
    generation::{Capacity, GENERATIONS, Generation},
    maps,
};
use tracing::{info, warn};

use crate::xdp::XdpError;

/// A pin directory this agent holds.
pub struct PinDir {
    path: PathBuf,
    /// The open directory: its `flock` is the agent's claim.
    _lock: File,
}

impl PinDir {
    /// Creates `path` if needed and locks it, or fails when another agent holds it.
    pub fn lock(path: &Path) -> Result<Self, XdpError> {
        Self::claim(path, None::<fn()>)
    }

    /// [`PinDir::lock`], but when another agent holds the directory: says so with `waiting`,
    /// then blocks until that agent releases it (stops).
    pub fn lock_waiting(path: &Path, waiting: impl FnOnce()) -> Result<Self, XdpError> {
        Self::claim(path, Some(waiting))
    }

    fn claim(path: &Path, waiting: Option<impl FnOnce()>) -> Result<Self, XdpError> {
        std::fs::create_dir_all(path).map_err(|e| {
            XdpError::Load(format!(
                "cannot create the pin directory {}: {e}",
                path.display()
            ))
        })?;
        let dir = File::open(path).map_err(|e| {
            XdpError::Load(format!(
                "cannot open the pin directory {}: {e}",
                path.display()
            ))
        })?;
        let flock = |how| {
            // SAFETY: flock(2) on a descriptor we own.
            if unsafe { libc::flock(dir.as_raw_fd(), how) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        let held = |err: &std::io::Error| err.raw_os_error() == Some(libc::EWOULDBLOCK);
        match (flock(libc::LOCK_EX | libc::LOCK_NB), waiting) {
            (Ok(()), _) => {}
            (Err(err), Some(waiting)) if held(&err) => {
                waiting();
                flock(libc::LOCK_EX).map_err(|err| {
                    XdpError::Load(format!(
                        "cannot lock the pin directory {}: {err}",
                        path.display()
                    ))
                })?;
            }
            (Err(err), _) => {
                return Err(if held(&err) {
                    XdpError::Held(path.to_path_buf())
                } else {
                    XdpError::Load(format!(
                        "cannot lock the pin directory {}: {err}",
                        path.display()
                    ))
                });
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            _lock: dir,
        })
    }

    /// A second handle on the claim (the lock holds while either does): a resized table's
    /// program is loaded with it while the previous one still holds the first.
    pub fn try_clone(&self) -> Result<Self, XdpError> {
        let lock = self._lock.try_clone().map_err(|e| {
            XdpError::Load(format!(
                "cannot share the pin directory {}: {e}",
                self.path.display()
            ))
        })?;
        Ok(Self {
            path: self.path.clone(),
            _lock: lock,
        })
    }

    /// The capacity of the pinned table, if one is pinned: what its entry maps and host set hold
    /// (the index follows from them, `Capacity::of`). Whether the whole set can be adopted at that capacity
    /// is [`PinDir::prepare`]'s to say.
    pub fn pinned_capacity(&self) -> Option<Capacity> {
        let elements = |map: &str| -> Option<u32> {
            Some(MapInfo::from_pin(self.map_pin(map)).ok()?.max_entries())
        };
        // The entries are one array both generations share; the host set has one per generation.
        let entries = [
            elements(maps::SMALL)?,
            elements(maps::NAMES)?,
            elements(maps::BIG)?,
        ];
        let host = elements(maps::HOST)? / GENERATIONS;
        (entries.iter().all(|count| *count > 0) && host.is_power_of_two())
            .then(|| Capacity::of(entries).with_host(host))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the map `name` is pinned: its name and the layout version, so that a build with
    /// another layout never opens it (bpffs allows no dot in a name).
    pub fn map_pin(&self, name: &str) -> PathBuf {
        map_pin(&self.path, name)
    }

    /// Where the link of `interface` is pinned.
    pub fn link_pin(&self, interface: &str) -> PathBuf {
        self.path.join(format!("link-{interface}"))
    }

    /// Makes the directory hold either a whole set of maps this build can adopt, or none: pins
    /// of other layout versions, and a set that is incomplete or made for another layout or
    /// capacity, are removed. Returns whether a set is there to adopt.
    pub fn prepare(&self, capacity: &Capacity) -> bool {
        for (name, _, _) in maps::pinned_maps(capacity) {
            for stale in other_layouts(&self.path, name, &self.map_pin(name)) {
                info!(pin = %stale.display(), "pinned map of another layout version: starting fresh");
                let _ = std::fs::remove_file(&stale);
            }
        }
        match self.adoptable(capacity) {
            Ok(()) => true,
            Err(reason) => {
                let present: Vec<PathBuf> = maps::pinned_maps(capacity)
                    .iter()
                    .map(|(name, _, _)| self.map_pin(name))
                    .filter(|pin| pin.exists())
                    .collect();
                if !present.is_empty() {
                    warn!(%reason, "pinned maps not adopted: starting a fresh set");
                }
                for pin in present {
                    let _ = std::fs::remove_file(pin);
                }
                false
            }
        }
    }

    /// Why the pinned maps cannot be adopted, if they cannot.
    fn adoptable(&self, capacity: &Capacity) -> Result<(), String> {
        for (name, value, entries) in maps::pinned_maps(capacity) {
            let pin = self.map_pin(name);
            if !pin.exists() {
                return Err(format!("{name} is not pinned"));
            }
            let info = MapInfo::from_pin(&pin).map_err(|e| format!("{name}: {e}"))?;
            if info.value_size() as usize != value || info.max_entries() != entries {
                return Err(format!(
                    "{name} holds {} entries of {} bytes, this build {entries} of {value}",
                    info.max_entries(),
                    info.value_size()
                ));
            }
        }
        let data = MapData::from_pin(self.map_pin(maps::GENERATION))
            .map_err(|e| format!("{}: {e}", maps::GENERATION))?;
        let state: Array<MapData, Generation> =
            Array::try_from(Map::Array(data)).map_err(|e| e.to_string())?;
        let held = state.get(&0, 0).map_err(|e| e.to_string())?;
        let ours = maps::layout_fingerprint(capacity);
        if held.layout != ours {
            return Err(format!(
                "the maps were made for layout {:#x}, this build is {ours:#x}",
                held.layout
            ));
        }
        Ok(())
    }
}

/// Where the map `name` is pinned in `dir`.
pub fn map_pin(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}_v{}", maps::LAYOUT_VERSION))
}

/// Pins of the map `name` in `dir` other than `current`: unversioned, or of another version.
fn other_layouts(dir: &Path, name: &str, current: &Path) -> Vec<PathBuf> {
    let versioned = format!("{name}_v");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path != current)
        .filter(|path| {
            path.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f == name || f.starts_with(&versioned))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_of_other_layout_versions_are_found_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("hpd-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let current = map_pin(&dir, maps::NAMES);
        let names = [
            "HPD_NAMES",
            "HPD_NAMES_v1",
            "HPD_NAMES_v99",
            "HPD_NAMESX",
            "HPD_ZONES_v1",
            "link-eth0",
        ];
        for name in names {
            std::fs::write(dir.join(name), b"").expect("a file");
        }
        std::fs::write(&current, b"").expect("a file");
        let mut stale: Vec<String> = other_layouts(&dir, maps::NAMES, &current)
            .iter()
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
            .collect();
        stale.sort();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(stale, ["HPD_NAMES", "HPD_NAMES_v1", "HPD_NAMES_v99"]);
        assert_eq!(
            current.file_name().and_then(|f| f.to_str()),
            Some(format!("HPD_NAMES_v{}", maps::LAYOUT_VERSION).as_str())
        );
    }

    #[test]
    fn a_second_agent_cannot_take_a_locked_directory() {
        let dir = std::env::temp_dir().join(format!("hpd-lock-{}", std::process::id()));
        let first = PinDir::lock(&dir).expect("the first lock");
        let second = PinDir::lock(&dir);
        assert!(
            matches!(&second, Err(XdpError::Held(held)) if *held == dir),
            "{:?}",
            second.err()
        );
        drop(first);
        assert!(
            PinDir::lock(&dir).is_ok(),
            "free again once the first is gone"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
