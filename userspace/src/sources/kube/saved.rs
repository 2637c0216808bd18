//! The Kubernetes records as last published, saved in a file so that an agent restarted while
//! the API server is down (it restarts during every control-plane upgrade) serves them from both
//! paths at once, marked stale, instead of SERVFAIL, until its watchers have listed.
//!
//! The file is JSON, written to a temporary file and renamed over the old one, so that a crash
//! mid-write leaves the previous version; one that does not parse is reported and ignored.

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize};

use crate::records::{RecordData, RecordGroup, SourceRecord, Srv};

/// The format's version: a file of another version is not read.
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct SavedFile {
    format: u32,
    /// Seconds since the epoch when the records were published.
    saved_at: f64,
    groups: Vec<Vec<SavedRecord>>,
}

#[derive(Serialize, Deserialize)]
struct SavedRecord {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl: Option<u32>,
    #[serde(flatten)]
    data: SavedData,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "type")]
enum SavedData {
    A {
        address: Ipv4Addr,
    },
    #[serde(rename = "AAAA")]
    Aaaa {
        address: Ipv6Addr,
    },
    #[serde(rename = "SRV")]
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
}

/// Records read back, and when they were saved.
pub struct Restored {
    pub groups: Vec<RecordGroup>,
    pub saved_at: SystemTime,
}

/// Writes `groups` to `path`, atomically.
pub fn save(path: &Path, groups: &[RecordGroup], now: SystemTime) -> anyhow::Result<()> {
    let file = SavedFile {
        format: FORMAT,
        saved_at: now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64(),
        groups: groups
            .iter()
            .map(|group| group.iter().map(saved_record).collect())
            .collect(),
    };
    let text = serde_json::to_vec(&file)?;
    let temporary = temporary_path(path);
    std::fs::write(&temporary, text)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| {
        format!(
            "cannot rename {} to {}",
            temporary.display(),
            path.display()
        )
    })
}

/// Reads the records saved at `path`; Ok(None) when there is no file.
pub fn load(path: &Path) -> anyhow::Result<Option<Restored>> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    let file: SavedFile = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a saved table", path.display()))?;
    if file.format != FORMAT {
        anyhow::bail!(
            "{} has format {}, this agent reads {FORMAT}",
            path.display(),
            file.format
        );
    }
    let mut groups = Vec::with_capacity(file.groups.len());
    for group in file.groups {
        let records: Vec<SourceRecord> = group
            .into_iter()
            .map(source_record)
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("{} holds a bad record", path.display()))?;
        groups.push(records.into());
    }
    let saved_at = UNIX_EPOCH
        + Duration::try_from_secs_f64(file.saved_at)
            .with_context(|| format!("{}: bad saved_at", path.display()))?;
    Ok(Some(Restored { groups, saved_at }))
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn saved_record(record: &SourceRecord) -> SavedRecord {
    let data = match &record.data {
        RecordData::A(address) => SavedData::A { address: *address },
        RecordData::Aaaa(address) => SavedData::Aaaa { address: *address },
        RecordData::Srv(srv) => SavedData::Srv {
            priority: srv.priority,
            weight: srv.weight,
            port: srv.port,
            target: srv.target.to_ascii(),
        },
    };
    SavedRecord {
        name: record.name.to_ascii(),
        ttl: record.ttl,
        data,
    }
}

fn source_record(saved: SavedRecord) -> anyhow::Result<SourceRecord> {
    let name = |text: &str| -> anyhow::Result<Name> {
        let name = Name::from_ascii(text).with_context(|| format!("not a name: {text:?}"))?;
        anyhow::ensure!(name.is_fqdn(), "not fully qualified: {text:?}");
        Ok(name.to_lowercase())
    };
    let data = match saved.data {
        SavedData::A { address } => RecordData::A(address),
        SavedData::Aaaa { address } => RecordData::Aaaa(address),
        SavedData::Srv {
            priority,
            weight,
            port,
            target,
        } => RecordData::Srv(Srv {
            priority,
            weight,
            port,
            target: name(&target)?,
        }),
    };
    Ok(SourceRecord {
        name: name(&saved.name)?,
        ttl: saved.ttl,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, data: RecordData) -> SourceRecord {
        SourceRecord {
            name: Name::from_ascii(name).unwrap(),
            ttl: None,
            data,
        }
    }

    #[test]
    fn saved_records_read_back_as_they_were() {
        let dir = std::env::temp_dir().join(format!("hpd-saved-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubernetes.json");
        assert!(load(&path).unwrap().is_none(), "no file yet");
        let groups: Vec<RecordGroup> = vec![
            vec![
                record(
                    "web.edge.prod.example.",
                    RecordData::A("198.18.0.1".parse().unwrap()),
                ),
                SourceRecord {
                    ttl: Some(60),
                    ..record(
                        "web.edge.prod.example.",
                        RecordData::Aaaa("2001:db8::1".parse().unwrap()),
                    )
                },
            ]
            .into(),
            vec![record(
                "_https._tcp.web.edge.prod.example.",
                RecordData::Srv(Srv {
                    priority: 0,
                    weight: 1,
                    port: 443,
                    target: Name::from_ascii("cp-1.nodes.prod.example.").unwrap(),
                }),
            )]
            .into(),
        ];
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        save(&path, &groups, now).unwrap();
        let restored = load(&path).unwrap().unwrap();
        assert_eq!(restored.saved_at, now);
        let back: Vec<Vec<SourceRecord>> = restored.groups.iter().map(|g| g.to_vec()).collect();
        let expected: Vec<Vec<SourceRecord>> = groups.iter().map(|g| g.to_vec()).collect();
        assert_eq!(back, expected);
        std::fs::write(&path, b"{\"format\": 1, \"saved_at\": 1").unwrap();
        assert!(load(&path).is_err(), "a torn file is an error, not records");
        std::fs::write(&path, b"{\"format\": 9, \"saved_at\": 1, \"groups\": []}").unwrap();
        assert!(load(&path).is_err(), "another format is not read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
