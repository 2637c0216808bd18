//! The Kubernetes records as last published, saved in a file so that an agent restarted while
//! the API server is down (it restarts during every control-plane upgrade) serves them from both
//! paths at once, marked stale, instead of SERVFAIL, until its watchers have listed.
//!
//! The file is JSON, each group with its key (the pod or output it came from), so that the first
//! list after a restart publishes only what changed while the agent was down. It is written by
//! the persister (`persist.rs`), streamed from the publisher's groups without a second copy
//! of them, and replaced whole (`crate::atomic_file`); one that does not parse is reported and
//! ignored. Files of format 1 (groups without keys) are still read.

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize, Serializer, ser::SerializeStruct};

use hostport_dns_core::{
    dns::{WireName, wire_name::WireText},
    records::{DataView, RecordData, RecordGroup, RecordView, SourceRecord, Srv},
};

use crate::sources::GroupKey;

/// The format's version: a file of another version is not read.
const FORMAT: u32 = 2;
/// The format before groups had keys.
const FORMAT_WITHOUT_KEYS: u32 = 1;

#[derive(Deserialize)]
struct SavedFile {
    format: u32,
    /// Seconds since the epoch when the records were published.
    saved_at: f64,
    groups: Vec<SavedGroup>,
}

/// A group as read back: with its key (format 2) or without (format 1).
#[derive(Deserialize)]
#[serde(untagged)]
enum SavedGroup {
    Keyed {
        key: String,
        records: Vec<SavedRecord>,
    },
    Bare(Vec<SavedRecord>),
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
    pub groups: Vec<(GroupKey, RecordGroup)>,
    pub saved_at: SystemTime,
}

/// Writes `groups` to `path`, replacing it whole; each record is converted as it is written.
pub fn save<'a>(
    path: &Path,
    groups: impl Iterator<Item = (&'a GroupKey, &'a RecordGroup)> + Clone,
    now: SystemTime,
) -> anyhow::Result<()> {
    let view = FileView {
        saved_at: now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64(),
        groups,
    };
    crate::atomic_file::replace(path, |out| {
        serde_json::to_writer(out, &view).map_err(std::io::Error::other)
    })
}

/// The file as written: the groups serialized one by one from where they are held.
struct FileView<I> {
    saved_at: f64,
    groups: I,
}

impl<'a, I> Serialize for FileView<I>
where
    I: Iterator<Item = (&'a GroupKey, &'a RecordGroup)> + Clone,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut file = serializer.serialize_struct("SavedFile", 3)?;
        file.serialize_field("format", &FORMAT)?;
        file.serialize_field("saved_at", &self.saved_at)?;
        file.serialize_field("groups", &GroupsView(self.groups.clone()))?;
        file.end()
    }
}

struct GroupsView<I>(I);

impl<'a, I> Serialize for GroupsView<I>
where
    I: Iterator<Item = (&'a GroupKey, &'a RecordGroup)> + Clone,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.0
                .clone()
                .map(|(key, records)| GroupView { key, records }),
        )
    }
}

struct GroupView<'a> {
    key: &'a GroupKey,
    records: &'a RecordGroup,
}

impl Serialize for GroupView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut group = serializer.serialize_struct("SavedGroup", 2)?;
        group.serialize_field("key", &self.key.to_string())?;
        group.serialize_field("records", &RecordsView(self.records))?;
        group.end()
    }
}

struct RecordsView<'a>(&'a RecordGroup);

impl Serialize for RecordsView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.views().map(saved_view))
    }
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
    if file.format != FORMAT && file.format != FORMAT_WITHOUT_KEYS {
        anyhow::bail!(
            "{} has format {}, this agent reads {FORMAT}",
            path.display(),
            file.format
        );
    }
    let mut groups = Vec::with_capacity(file.groups.len());
    for (i, group) in file.groups.into_iter().enumerate() {
        let (key, records) = match group {
            SavedGroup::Keyed { key, records } => (key, records),
            SavedGroup::Bare(records) => (format!("saved/{i}"), records),
        };
        let records: Vec<SourceRecord> = records
            .into_iter()
            .map(source_record)
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("{} holds a bad record", path.display()))?;
        groups.push((GroupKey::from(key), records.into()));
    }
    let saved_at = UNIX_EPOCH
        + Duration::try_from_secs_f64(file.saved_at)
            .with_context(|| format!("{}: bad saved_at", path.display()))?;
    Ok(Some(Restored { groups, saved_at }))
}

/// A record as saved, from the group's bytes (no name interned: every group is saved once a
/// second while records change).
fn saved_view(record: RecordView<'_>) -> SavedRecord {
    let data = match record.data {
        DataView::A(address) => SavedData::A { address },
        DataView::Aaaa(address) => SavedData::Aaaa { address },
        DataView::Srv {
            priority,
            weight,
            port,
            target,
        } => SavedData::Srv {
            priority,
            weight,
            port,
            target: WireText(target).to_string(),
        },
    };
    SavedRecord {
        name: WireText(record.name).to_string(),
        ttl: record.ttl,
        data,
    }
}

fn source_record(saved: SavedRecord) -> anyhow::Result<SourceRecord> {
    let name = |text: &str| -> anyhow::Result<WireName> {
        let name = Name::from_ascii(text).with_context(|| format!("not a name: {text:?}"))?;
        anyhow::ensure!(name.is_fqdn(), "not fully qualified: {text:?}");
        Ok(WireName::from_name(&name))
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
            name: WireName::from_name(&Name::from_ascii(name).unwrap()),
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
        let groups: Vec<(GroupKey, RecordGroup)> = vec![
            (
                GroupKey::from("pod/0/edge/web-1"),
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
            ),
            (
                GroupKey::from("pod/0/edge/web-2"),
                vec![record(
                    "_https._tcp.web.edge.prod.example.",
                    RecordData::Srv(Srv {
                        priority: 0,
                        weight: 1,
                        port: 443,
                        target: WireName::from_name(
                            &Name::from_ascii("cp-1.nodes.prod.example.").unwrap(),
                        ),
                    }),
                )]
                .into(),
            ),
        ];
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        save(&path, groups.iter().map(|(k, g)| (k, g)), now).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""key":"pod/0/edge/web-1""#), "{text}");
        let restored = load(&path).unwrap().unwrap();
        assert_eq!(restored.saved_at, now);
        assert!(restored.groups.iter().all(|(k, _)| k.text().is_some()));
        let back: Vec<(String, Vec<SourceRecord>)> = restored
            .groups
            .iter()
            .map(|(k, g)| (k.to_string(), g.to_vec()))
            .collect();
        let expected: Vec<(String, Vec<SourceRecord>)> = groups
            .iter()
            .map(|(k, g)| (k.to_string(), g.to_vec()))
            .collect();
        assert_eq!(back, expected);
        // A file of the format before keys: its groups get keys of their own.
        std::fs::write(
            &path,
            br#"{"format": 1, "saved_at": 5, "groups": [[{"name": "a.example.", "type": "A", "address": "198.18.0.1"}]]}"#,
        )
        .unwrap();
        let old = load(&path).unwrap().unwrap();
        assert_eq!(old.groups[0].0.text(), Some("saved/0"));
        assert_eq!(old.groups[0].1.len(), 1);
        std::fs::write(&path, b"{\"format\": 1, \"saved_at\": 1").unwrap();
        assert!(load(&path).is_err(), "a torn file is an error, not records");
        std::fs::write(&path, b"{\"format\": 9, \"saved_at\": 1, \"groups\": []}").unwrap();
        assert!(load(&path).is_err(), "another format is not read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
