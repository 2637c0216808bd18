//! The static record file: zones, TTLs and names with their addresses, in YAML. It is the
//! embedded default, what the tests use, and a supported source for non-Kubernetes use. A bad
//! file is reported with its path, line and reason; on reload the previous records stay in
//! service until the file is valid again.
//!
//! ```yaml
//! zones:
//!   - name: prod.coreha.example        # the apex
//!     ttl: 5                           # optional, default 5
//!     records:                         # names relative to the zone ("@" is the apex) or
//!       default-nginx.ingress:         # absolute (ending in "."), to one address or a list
//!         - 198.18.200.1
//!         - 2001:db8::1
//!       api: 198.18.0.10
//!     srv:                             # optional
//!       _https._tcp.web: [{ port: 443, target: node-1.nodes }]
//!     nameservers:                     # optional, default ns.<zone> without addresses
//!       - { name: ns1, addresses: [198.18.0.53] }
//!     soa: { mname: ns1, rname: hostmaster, refresh: 3600, retry: 600, expire: 86400, minimum: 5 }
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use hostport_dns_core::zone::check_zones_do_not_overlap;

use crate::{sources::Snapshot, zone_entry::ZoneEntry};

/// The example served when no source is configured: `cargo xtask run` answers from it.
pub const EMBEDDED_DEFAULT: &str = include_str!("default-records.yaml");

/// A record file that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {reason}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// Parses and validates record file text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Snapshot, FileError> {
    let file: RecordFile = from_yaml(text, path)?;
    let invalid = |reason: String| FileError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let mut zones = Vec::new();
    let mut all_records = Vec::new();
    for zone in file.zones {
        let (spec, records) = zone.compile().map_err(invalid)?;
        zones.push(spec);
        all_records.extend(records);
    }
    check_zones_do_not_overlap(&zones).map_err(invalid)?;
    Ok(Snapshot::new(zones, all_records))
}

/// A YAML file's text (the record file, the configuration) as `T`; `path` names it in errors,
/// with the line and column. A key given twice in one mapping is an error: the last one winning
/// would drop the first's records without a word.
///
/// The text is deserialized straight from the YAML parser's events, as they come: a 100k-name
/// record file (6.7 MB) took 100 MB more while a whole document's events were collected first.
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, FileError> {
    serde_saphyr::from_str_with_options(text, options(text)).map_err(|e| {
        let (line, column) = e
            .location()
            .map_or((0, 0), |l| (l.line() as usize, l.column() as usize));
        FileError::Syntax {
            path: path.to_owned(),
            line,
            column,
            reason: reason(&e),
        }
    })
}

/// The parser's options for an operator's file:
/// - as many nodes, events and scalar bytes as the text is long (or the defaults, if more): the
///   default budget (250,000 nodes) stops near 50,000 names. The alias limits stay, so a short
///   text cannot expand into a large one;
/// - comments are not parsed into events: as events, more than 32 comment lines in a row (a
///   commented-out block of names) made a valid file an error;
/// - `null` read where text is wanted is the text `null` (a valid DNS label), as before;
/// - no source snippet in errors: the error names the file, line and column.
fn options(text: &str) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = budget.max_nodes.max(text.len());
    budget.max_events = budget.max_events.max(text.len());
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(text.len());
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.emit_comments = false;
    options.null_as_string = true;
    options.with_snippet = false;
    options
}

/// The error's own words, for an operator (the error names the location separately); control
/// characters of the file's text (a quoted key may hold a newline) are escaped, so that the
/// error stays one line.
fn reason(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    let words = serde_saphyr::UserMessageFormatter.format_message(error.without_snippet());
    let mut line = String::with_capacity(words.len());
    for c in words.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    zones: Vec<ZoneEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Snapshot, FileError> {
        parse(text, Path::new("records.yaml"))
    }

    #[test]
    fn the_embedded_default_is_valid() {
        let snapshot = parse_str(EMBEDDED_DEFAULT).unwrap();
        assert!(!snapshot.zones.is_empty());
        assert!(snapshot.record_count() > 0);
    }

    #[test]
    fn relative_names_are_completed_and_lower_cased() {
        let s = parse_str("zones:\n  - name: Example.\n    records:\n      Web.Ingress: 198.18.0.1\n      '@': [198.18.0.2]\n").unwrap();
        let mut names: Vec<String> = s.records().map(|r| r.name.to_string()).collect();
        names.sort();
        assert_eq!(names, ["example.", "web.ingress.example."]);
    }

    #[test]
    fn a_bad_address_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: example\n    records:\n      web: 198.18.0.300\n")
            .unwrap_err();
        let text = err.to_string();
        assert_eq!(
            text,
            "records.yaml:4:12: \"198.18.0.300\" is not a valid IP address"
        );
    }

    #[test]
    fn a_bad_label_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: example\n    records:\n      'we b': 198.18.0.1\n")
            .unwrap_err();
        assert!(err.to_string().starts_with("records.yaml:4:"), "{err}");
    }

    #[test]
    fn a_file_past_the_parser_default_budget_is_read_whole() {
        // 60,000 names take 300,000 nodes: past the parser's default budget of 250,000.
        let mut text = String::from("zones:\n  - name: example\n    records:\n");
        for i in 0..60_000 {
            text.push_str(&format!("      n{i}: [198.18.0.1, 198.18.0.2]\n"));
        }
        let snapshot = parse_str(&text).unwrap();
        assert_eq!(snapshot.record_count(), 120_000);
    }

    #[test]
    fn a_syntax_error_is_reported_with_its_line_and_no_location_twice() {
        let err = parse_str("zones:\n  - name: example\n    records: [\n").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("records.yaml:3:"), "{text}");
        assert!(!text.contains("line 3"), "{text}");
    }

    #[test]
    fn a_name_given_twice_is_an_error_not_a_lost_record() {
        let err = parse_str(
            "zones:\n  - name: example\n    records:\n      web: 198.18.0.1\n      web: 198.18.0.2\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "records.yaml:5:7: duplicate mapping key `web` is not allowed here"
        );
    }

    #[test]
    fn a_long_run_of_comment_lines_is_no_error() {
        let comments = "      # old: 198.18.0.9\n".repeat(100);
        let text =
            format!("zones:\n  - name: example\n    records:\n{comments}      web: 198.18.0.1\n");
        assert_eq!(parse_str(&text).unwrap().record_count(), 1);
    }

    #[test]
    fn a_name_spelled_null_is_a_name() {
        let s =
            parse_str("zones:\n  - name: example\n    records:\n      null: 198.18.0.1\n").unwrap();
        let names: Vec<String> = s.records().map(|r| r.name.to_string()).collect();
        assert_eq!(names, ["null.example."]);
    }

    #[test]
    fn an_error_stays_one_line_whatever_the_key_holds() {
        let err = parse_str(
            "zones:\n  - name: example\n    records:\n      \"a\\nb\": 198.18.0.1\n      \"a\\nb\": 198.18.0.2\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = parse_str("zones:\n  - name: example\n    tll: 5\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `tll`"), "{err}");
    }

    #[test]
    fn absolute_names_outside_the_zone_are_errors() {
        let err =
            parse_str("zones:\n  - name: example\n    records:\n      web.other.: 198.18.0.1\n")
                .unwrap_err();
        assert!(err.to_string().contains("outside the zone"), "{err}");
    }

    #[test]
    fn overlapping_zones_are_errors() {
        let err = parse_str("zones:\n  - name: example\n  - name: sub.example\n").unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
    }
}
