//! A message's framing, read from its lengths alone: where its question ends and where each
//! record and its data lie, without decoding names or data. What hickory-proto refuses to parse
//! is judged from it: a query whose question holds gets that question back with its FORMERR,
//! and an OPT record that is framed right but otherwise odd can be repaired (as Knot DNS reads
//! it) instead of failing the whole query.

use std::ops::Range;

use hostport_dns_common::dns::{HEADER_LEN, QTYPE_QCLASS_LEN, RR_FIXED_LEN, TYPE_OPT};

/// The TSIG record's type (RFC 8945 §4.2).
const TYPE_TSIG: u16 = 250;

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

/// What the lengths of a message say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framing {
    /// Where the one question ends; None when the message has no single readable question.
    pub question_end: Option<usize>,
    /// Every record, when the counts and lengths hold up to the end of the message (nothing
    /// missing, nothing after).
    pub records: Option<Vec<RecordAt>>,
}

/// Reads the framing of `bytes` (at least a header's worth, else nothing holds).
pub fn read(bytes: &[u8]) -> Framing {
    let question_end = question_end(bytes);
    let records = records_start(bytes).and_then(|start| {
        let mut records = Vec::new();
        walk_records(bytes, start, |record| records.push(record)).then_some(records)
    });
    Framing {
        question_end,
        records,
    }
}

/// Whether `query` carries a TSIG record: its framing holds and its last record is one (RFC
/// 8945 §4.2: TSIG goes last). A look without allocating, for every query.
pub fn carries_tsig(query: &[u8]) -> bool {
    if count(query, 10) == 0 {
        return false;
    }
    let mut last = None;
    records_start(query).is_some_and(|start| walk_records(query, start, |r| last = Some(r.rtype)))
        && last == Some(TYPE_TSIG)
}

/// The UDP payload size the query's OPT record offers, if its framing holds and it has one.
pub fn offered_payload(query: &[u8]) -> Option<u16> {
    let mut offered = None;
    let start = records_start(query)?;
    let holds = walk_records(query, start, |record| {
        if record.additional && record.rtype == TYPE_OPT {
            // The OPT record's CLASS field: the two bytes after its type.
            let class = record.data.start - RR_FIXED_LEN + 2;
            offered = query
                .get(class..class + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]));
        }
    });
    offered.filter(|_| holds)
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

/// Where the records start: after the one question, or after the header when there is none (a
/// query without a question still gets its FORMERR with the OPT record it offered, RFC 6891 §7).
fn records_start(bytes: &[u8]) -> Option<usize> {
    if bytes.len() >= HEADER_LEN && count(bytes, 4) == 0 {
        return Some(HEADER_LEN);
    }
    question_end(bytes)
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

/// The OPT record of a message whose framing holds: the last additional record of type OPT.
pub fn opt_record(records: &[RecordAt]) -> Option<&RecordAt> {
    records
        .iter()
        .rev()
        .find(|r| r.additional && r.rtype == TYPE_OPT)
}

/// Whether the options in an OPT record's data add up to exactly its length (each option: code,
/// length, that many bytes; RFC 6891 §6.1.2).
pub fn options_fit(data: &[u8]) -> bool {
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

    /// `www.example. A IN`, ID 7, with the given counts and what follows the question.
    fn message(counts: [u8; 3], rest: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0, 7, 1, 0, 0, 1, 0, counts[0], 0, counts[1], 0, counts[2]];
        bytes.extend_from_slice(b"\x03www\x07example\x00\x00\x01\x00\x01");
        bytes.extend_from_slice(rest);
        bytes
    }

    const OPT: [u8; 11] = [0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0];
    const QUESTION_END: usize = 12 + 13 + 4;

    #[test]
    fn a_plain_query_with_an_opt_record_frames_as_one_additional_record() {
        let framing = read(&message([0, 0, 1], &OPT));
        assert_eq!(framing.question_end, Some(QUESTION_END));
        let records = framing.records.expect("the framing holds");
        assert_eq!(records.len(), 1);
        let opt = opt_record(&records).expect("an OPT record");
        assert_eq!(opt.owner, QUESTION_END..QUESTION_END + 1);
        assert_eq!(opt.data, QUESTION_END + 11..QUESTION_END + 11);
    }

    #[test]
    fn counts_without_records_keep_the_question_and_lose_the_records() {
        for counts in [[1, 0, 0], [0, 1, 0], [0, 0, 1]] {
            let framing = read(&message(counts, &[]));
            assert_eq!(framing.question_end, Some(QUESTION_END), "{counts:?}");
            assert_eq!(framing.records, None, "{counts:?}");
        }
        // Bytes after the last record: the framing does not hold either.
        let framing = read(&message([0, 0, 1], &[OPT.as_slice(), &[1]].concat()));
        assert_eq!(framing.records, None);
    }

    #[test]
    fn a_question_cut_short_or_several_questions_leave_no_question() {
        let whole = message([0, 0, 0], &[]);
        assert_eq!(read(&whole[..20]).question_end, None);
        let mut two = whole.clone();
        two[5] = 2;
        assert_eq!(read(&two).question_end, None);
        let mut reserved = whole;
        reserved[12] = 0x80;
        assert_eq!(read(&reserved).question_end, None);
        assert_eq!(read(&[0; 5]).question_end, None);
    }

    #[test]
    fn tsig_is_seen_only_as_the_last_record_of_a_framed_message() {
        let tsig_owner_and_fixed = [3, b'k', b'e', b'y', 0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 2];
        let signed = message(
            [0, 0, 1],
            &[tsig_owner_and_fixed.as_slice(), &[9, 9]].concat(),
        );
        assert!(carries_tsig(&signed));
        let opt_after = message(
            [0, 0, 2],
            &[tsig_owner_and_fixed.as_slice(), &[9, 9], &OPT].concat(),
        );
        assert!(!carries_tsig(&opt_after), "TSIG must go last");
        assert!(!carries_tsig(&signed[..signed.len() - 1]), "cut short");
        assert!(!carries_tsig(&message([0, 0, 1], &OPT)));
    }

    #[test]
    fn the_offered_payload_is_read_from_the_opt_record() {
        assert_eq!(offered_payload(&message([0, 0, 1], &OPT)), Some(1232));
        assert_eq!(offered_payload(&message([0, 0, 0], &[])), None);
        assert_eq!(
            offered_payload(&message([0, 0, 2], &OPT)),
            None,
            "cut short"
        );
    }

    #[test]
    fn options_fit_only_when_they_add_up_to_the_data() {
        assert!(options_fit(&[]));
        assert!(options_fit(&[0, 10, 0, 2, 1, 2]));
        assert!(!options_fit(&[0, 10, 0, 8, 1, 2, 3, 4]), "past the end");
        assert!(!options_fit(&[0, 10, 0]), "a cut header");
    }

    #[test]
    fn a_query_without_a_question_frames_its_records_from_the_header_on() {
        let mut bytes = vec![0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        bytes.extend_from_slice(&OPT);
        let framing = read(&bytes);
        assert_eq!(framing.question_end, None);
        let records = framing.records.expect("the framing holds");
        assert_eq!(opt_record(&records).map(|r| r.owner.clone()), Some(12..13));
        assert_eq!(offered_payload(&bytes), Some(1232));
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
