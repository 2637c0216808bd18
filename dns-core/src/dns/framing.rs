//! A message's framing, read from its lengths alone: where its question ends and where each
//! record and its data lie, without decoding names or data. The query's view (`query`) is made
//! from it, in one walk; what hickory-proto refuses to parse is judged from that view.

use std::ops::Range;

use hostport_dns_common::dns::{HEADER_LEN, QTYPE_QCLASS_LEN, RR_FIXED_LEN, TYPE_OPT};

/// One record's place in the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordAt {
    /// Its owner name's bytes.
    pub owner: Range<usize>,
    pub rtype: u16,
    /// Whether it is in the additional section.
    pub additional: bool,
    /// Its data (after RDLENGTH).
    pub data: Range<usize>,
}

/// What one walk over a message's lengths finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framing {
    /// Where the one question ends; None when the message has no single question that holds.
    pub question_end: Option<usize>,
    /// The records after the question, when their counts and lengths hold up to the end of the
    /// message (nothing missing, nothing after).
    pub records: Option<Records>,
}

/// The records of a message whose framing holds, as far as a query's view needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Records {
    /// The last additional record of type OPT.
    pub opt: Option<Opt>,
    /// The last record's type, when it is an additional record.
    pub last_additional: Option<u16>,
}

/// An OPT record's place and what its lengths say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opt {
    /// Its owner name's bytes.
    pub owner: Range<usize>,
    /// Its data, the options.
    pub data: Range<usize>,
    /// The UDP payload size it offers (its CLASS field).
    pub payload: u16,
    /// Whether its options add up to exactly its data (RFC 6891 §6.1.2).
    pub options_fit: bool,
}

/// Reads the framing of `bytes` in one walk: the question, then every record.
pub fn read(bytes: &[u8]) -> Framing {
    let question_end = question_end(bytes);
    // After the one question, or after the header when there is none (a query without a
    // question still gets its FORMERR with the OPT record it offered, RFC 6891 §7).
    let records_start = if bytes.len() >= HEADER_LEN && count(bytes, 4) == 0 {
        Some(HEADER_LEN)
    } else {
        question_end
    };
    let records = records_start.and_then(|start| {
        let mut opt = None;
        let mut last_additional = None;
        let holds = walk_records(bytes, start, |record| {
            last_additional = record.additional.then_some(record.rtype);
            if record.additional && record.rtype == TYPE_OPT {
                opt = Some(record);
            }
        });
        holds.then(|| Records {
            opt: opt.and_then(|record| opt_at(bytes, record)),
            last_additional,
        })
    });
    Framing {
        question_end,
        records,
    }
}

/// The OPT record `record`: its payload from its CLASS field (the two bytes after its type).
fn opt_at(bytes: &[u8], record: RecordAt) -> Option<Opt> {
    let class = record.data.start.checked_sub(RR_FIXED_LEN)? + 2;
    let payload = bytes.get(class..class + 2)?;
    Some(Opt {
        payload: u16::from_be_bytes([payload[0], payload[1]]),
        options_fit: bytes.get(record.data.clone()).is_some_and(options_fit),
        owner: record.owner,
        data: record.data,
    })
}

/// The count at `at` in the header (0 if the header is cut short).
fn count(bytes: &[u8], at: usize) -> usize {
    match bytes.get(at..at + 2) {
        Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
        None => 0,
    }
}

/// Where the one question ends, if the message has one and it is framed right.
fn question_end(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER_LEN || count(bytes, 4) != 1 {
        return None;
    }
    let end = skip_name(bytes, HEADER_LEN)? + QTYPE_QCLASS_LEN;
    (end <= bytes.len()).then_some(end)
}

/// Hands each record after the question (starting at `at`) to `each`, as the header counts
/// them; false when one is cut short or bytes follow the last.
fn walk_records(bytes: &[u8], mut at: usize, mut each: impl FnMut(RecordAt)) -> bool {
    let before = count(bytes, 6) + count(bytes, 8);
    let additionals = count(bytes, 10);
    for i in 0..before + additionals {
        let Some(owner_end) = skip_name(bytes, at) else {
            return false;
        };
        let Some(fixed) = bytes.get(owner_end..owner_end + RR_FIXED_LEN) else {
            return false;
        };
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let length = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let data_start = owner_end + RR_FIXED_LEN;
        let data = data_start..data_start + length;
        if data.end > bytes.len() {
            return false;
        }
        let owner = at..owner_end;
        at = data.end;
        each(RecordAt {
            owner,
            rtype,
            additional: i >= before,
            data,
        });
    }
    at == bytes.len()
}

/// The end of the name at `at`: its labels up to the root, or a compression pointer (two bytes,
/// not followed: only the framing matters here). None if it runs past the message or holds a
/// reserved label type.
fn skip_name(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *bytes.get(at)?;
        match len & 0xc0 {
            0x00 if len == 0 => return Some(at + 1),
            0x00 => at += 1 + usize::from(len),
            0xc0 => return (at + 2 <= bytes.len()).then_some(at + 2),
            _ => return None,
        }
    }
}

/// Whether the options in an OPT record's data add up to exactly its length (each option: code,
/// length, that many bytes; RFC 6891 §6.1.2).
fn options_fit(data: &[u8]) -> bool {
    let mut at = 0;
    while at < data.len() {
        let Some(header) = data.get(at..at + 4) else {
            return false;
        };
        at += 4 + usize::from(u16::from_be_bytes([header[2], header[3]]));
    }
    at == data.len()
}

/// How many options of `code` an OPT record's data holds (its options must fit: `options_fit`).
pub fn option_count(data: &[u8], code: u16) -> usize {
    let mut at = 0;
    let mut seen = 0;
    while let Some(header) = data.get(at..at + 4) {
        seen += usize::from(u16::from_be_bytes([header[0], header[1]]) == code);
        at += 4 + usize::from(u16::from_be_bytes([header[2], header[3]]));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_fit_only_when_they_add_up_to_the_data() {
        assert!(options_fit(&[]));
        assert!(options_fit(&[0, 10, 0, 2, 1, 2]));
        assert!(!options_fit(&[0, 10, 0, 8, 1, 2, 3, 4]), "past the end");
        assert!(!options_fit(&[0, 10, 0]), "a cut header");
    }

    #[test]
    fn options_of_one_code_are_counted() {
        let data = [0, 10, 0, 2, 1, 2, 0, 3, 0, 0, 0, 10, 0, 1, 9];
        assert!(options_fit(&data));
        assert_eq!(option_count(&data, 10), 2);
        assert_eq!(option_count(&data, 3), 1);
        assert_eq!(option_count(&data, 12), 0);
    }
}
