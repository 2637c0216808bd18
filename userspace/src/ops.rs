//! Operator subcommands: what the kernel table holds (`records`), the XDP counters (`stats`),
//! a query to the responder that says which path answered and how it knows (`query`), and removing the
//! pinned program and maps (`uninstall`). They read the maps a running (or stopped) agent pinned.

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use aya::maps::{Map, MapData, PerCpuArray};
use hickory_proto::{
    op::{Message, Query},
    rr::{Name, RecordType},
};
use hostport_dns_common::{
    counters::{COUNTER_SLOTS, Counter, Verdict},
    maps,
};

use crate::xdp::pinned_table::PinnedTable;
use serde::Serialize;

/// Where the chart (and `--pin-dir` users by convention) pin the program's maps and links.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/hostport-dns";

/// One name of the kernel table, decoded.
#[derive(Debug, Serialize)]
pub struct NameRow {
    pub name: String,
    pub zone_id: u32,
    pub ttl: Option<u32>,
    pub a: Vec<Ipv4Addr>,
    pub aaaa: Vec<Ipv6Addr>,
    pub apex: bool,
}

fn open_map(pin_dir: &Path, name: &str) -> anyhow::Result<MapData> {
    let path = crate::xdp::pins::map_pin(pin_dir, name);
    MapData::from_pin(&path).with_context(|| {
        format!(
            "cannot open {}: is an agent running with --pin-dir {}?",
            path.display(),
            pin_dir.display()
        )
    })
}

/// The names the kernel answers for now (its active generation), sorted, and how many more it
/// passes to userspace without an entry of their own.
pub fn read_records(pin_dir: &Path) -> anyhow::Result<(Vec<NameRow>, usize)> {
    let table = PinnedTable::open(pin_dir)?;
    let (names, passed) = table.names();
    let mut rows: Vec<NameRow> = names
        .into_iter()
        .map(|row| NameRow {
            name: dotted(&row.wire),
            zone_id: row.zone_id,
            ttl: (!row.a.is_empty() || !row.aaaa.is_empty()).then_some(row.ttl),
            a: row.a,
            aaaa: row.aaaa,
            apex: row.apex,
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((rows, passed))
}

/// A wire-format name as text.
fn dotted(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&len) = wire.get(i) {
        if len == 0 {
            break;
        }
        let label = wire.get(i + 1..i + 1 + len as usize).unwrap_or_default();
        out.push_str(&String::from_utf8_lossy(label));
        out.push('.');
        i += 1 + len as usize;
    }
    if out.is_empty() { ".".into() } else { out }
}

/// Zone ids the kernel table's active generation holds.
pub fn read_zone_ids(pin_dir: &Path) -> anyhow::Result<Vec<u32>> {
    Ok(PinnedTable::open(pin_dir)?.zone_ids())
}

/// Every XDP counter, summed over CPUs.
pub fn read_counters(pin_dir: &Path) -> anyhow::Result<Vec<(Counter, u64)>> {
    let array: PerCpuArray<MapData, u64> =
        PerCpuArray::try_from(Map::PerCpuArray(open_map(pin_dir, maps::COUNTERS)?))?;
    (0..COUNTER_SLOTS)
        .map(|slot| {
            Ok((
                Counter::ALL[slot as usize],
                array.get(&slot, 0)?.iter().sum(),
            ))
        })
        .collect()
}

/// `hostport-dns records`
pub fn records(pin_dir: &Path, json: bool) -> anyhow::Result<()> {
    let (rows, passed) = read_records(pin_dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<50} {:>5} {:<40} {:<40} flags",
        "NAME", "TTL", "A", "AAAA"
    );
    for row in &rows {
        let flags = if row.apex { "apex" } else { "" };
        let list = |v: Vec<String>| {
            if v.is_empty() {
                "-".to_owned()
            } else {
                v.join(",")
            }
        };
        println!(
            "{:<50} {:>5} {:<40} {:<40} {}",
            row.name,
            row.ttl.map_or("-".into(), |t| t.to_string()),
            list(row.a.iter().map(ToString::to_string).collect()),
            list(row.aaaa.iter().map(ToString::to_string).collect()),
            if flags.is_empty() { "-" } else { flags }
        );
    }
    println!(
        "{} names in {} zones; {passed} more answered by userspace (larger record sets)",
        rows.len(),
        read_zone_ids(pin_dir)?.len()
    );
    Ok(())
}

/// `hostport-dns stats`
pub fn stats(pin_dir: &Path, json: bool) -> anyhow::Result<()> {
    let counters = read_counters(pin_dir)?;
    if json {
        let map: std::collections::BTreeMap<&str, u64> =
            counters.iter().map(|(c, n)| (c.label(), *n)).collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
        return Ok(());
    }
    println!("{:<20} {:>14}", "XDP COUNTER", "PACKETS");
    for (counter, count) in counters {
        let kind = match counter.verdict() {
            Verdict::Answered => "answered",
            Verdict::Passed => "passed",
            Verdict::Dropped => "dropped",
        };
        println!("{:<20} {:>14}  ({kind})", counter.label(), count);
    }
    Ok(())
}

/// What `query` found.
#[derive(Debug, Serialize)]
pub struct QueryResult {
    pub rcode: String,
    pub answers: Vec<String>,
    /// "xdp", "userspace", or "unknown" (no pinned counters to tell).
    pub path: String,
    /// How `path` was found, and how sure it is.
    pub evidence: String,
}

/// Which path answered, from what the query could cross and what the counters did.
fn answered_path(
    lo_without_xdp: bool,
    before: Option<u64>,
    after: Option<u64>,
) -> (&'static str, &'static str) {
    if lo_without_xdp {
        // A query to one of this host's own addresses never leaves through a NIC: the kernel
        // loops it over lo, whatever interface holds the address.
        return (
            "userspace",
            "certain: the server is an address of this host, so the query went over lo, where \
             XDP is not attached (ask from another host to see the XDP path)",
        );
    }
    match (before, after) {
        (Some(b), Some(a)) if a > b => (
            "xdp",
            "the XDP answer counters rose during the exchange; answers to other clients in the \
             same moment rise them too",
        ),
        (Some(_), Some(_)) => (
            "userspace",
            "certain: the XDP answer counters did not rise during the exchange",
        ),
        _ => (
            "unknown",
            "no pinned counters to read (is the agent running with this --pin-dir?)",
        ),
    }
}

/// `hostport-dns query NAME [TYPE]`
pub fn query(
    server: SocketAddr,
    name: &str,
    qtype: &str,
    pin_dir: &Path,
    json: bool,
) -> anyhow::Result<()> {
    let result = ask(server, name, qtype, pin_dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        println!(
            "{} {} from {server}: {}, answered by {} ({})",
            name, qtype, result.rcode, result.path, result.evidence
        );
        for answer in &result.answers {
            println!("  {answer}");
        }
    }
    Ok(())
}

pub fn ask(
    server: SocketAddr,
    name: &str,
    qtype: &str,
    pin_dir: &Path,
) -> anyhow::Result<QueryResult> {
    let rtype: RecordType = qtype
        .to_ascii_uppercase()
        .parse()
        .with_context(|| format!("unknown record type {qtype}"))?;
    let name = Name::from_ascii(name).with_context(|| format!("not a DNS name: {name}"))?;
    let mut message = Message::query();
    message.metadata.recursion_desired = false;
    message.add_query(Query::query(name, rtype));
    let answered_by_xdp = || {
        read_counters(pin_dir).ok().map(|c| {
            c.iter()
                .filter(|(k, _)| k.answer_kind().is_some())
                .map(|(_, n)| n)
                .sum::<u64>()
        })
    };
    let before = answered_by_xdp();
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()?;
    let socket = UdpSocket::bind(bind)?;
    socket.set_read_timeout(Some(Duration::from_secs(3)))?;
    socket.send_to(&message.to_vec()?, server)?;
    let mut buf = vec![0u8; 65535];
    let (n, _) = socket
        .recv_from(&mut buf)
        .with_context(|| format!("no answer from {server}"))?;
    let answer = Message::from_vec(&buf[..n]).context("the answer does not parse")?;
    let after = answered_by_xdp();
    // Binding to the server's address succeeds exactly when it is one of this host's.
    let own_address = UdpSocket::bind(SocketAddr::new(server.ip(), 0)).is_ok();
    let lo_without_xdp = own_address && !crate::xdp::loader::link_pin(pin_dir, "lo").exists();
    let (path, evidence) = answered_path(lo_without_xdp, before, after);
    Ok(QueryResult {
        rcode: answer.metadata.response_code.to_string(),
        answers: answer.answers.iter().map(|r| r.to_string()).collect(),
        path: path.into(),
        evidence: evidence.into(),
    })
}

/// `hostport-dns uninstall`: unpins the links (detaching the program) and the maps.
pub fn uninstall(pin_dir: &Path) -> anyhow::Result<()> {
    if !pin_dir.exists() {
        println!("nothing pinned at {}", pin_dir.display());
        return Ok(());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(pin_dir)?
        .flatten()
        .map(|e| e.path())
        .collect();
    // Links first: the program stops answering before its maps go.
    let (links, others): (Vec<PathBuf>, Vec<PathBuf>) = entries.into_iter().partition(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("link-"))
    });
    for path in links.iter().chain(&others) {
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
        println!("removed {}", path.display());
    }
    std::fs::remove_dir(pin_dir).with_context(|| format!("cannot remove {}", pin_dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_query_over_lo_without_xdp_is_userspace_whatever_the_counters_do() {
        assert_eq!(super::answered_path(true, Some(1), Some(9)).0, "userspace");
        assert_eq!(super::answered_path(false, Some(1), Some(9)).0, "xdp");
        assert_eq!(super::answered_path(false, Some(9), Some(9)).0, "userspace");
        assert_eq!(super::answered_path(false, None, None).0, "unknown");
    }

    #[test]
    fn wire_names_read_back_as_text() {
        assert_eq!(super::dotted(b"\x03web\x07example\x00"), "web.example.");
        assert_eq!(super::dotted(b"\x00"), ".");
    }
}
