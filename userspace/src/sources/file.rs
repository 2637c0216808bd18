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

use crate::{
    sources::Snapshot,
    zone::{ZoneEntry, check_zones_do_not_overlap},
};

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
    let file: RecordFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        FileError::Syntax {
            path: path.to_owned(),
            line,
            column,
            reason: strip_location(&e.to_string()),
        }
    })?;
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

/// serde_yaml_ng appends " at line L column C"; the error names the location separately.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
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
        assert!(text.starts_with("records.yaml:4:"), "{text}");
    }

    #[test]
    fn a_bad_label_is_reported_with_its_line() {
        let err = parse_str("zones:\n  - name: example\n    records:\n      'we b': 198.18.0.1\n")
            .unwrap_err();
        assert!(err.to_string().starts_with("records.yaml:4:"), "{err}");
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
