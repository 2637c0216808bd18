//! A query as it arrived, read once where its bytes arrive (the UDP worker, the TCP connection):
//! its header, its one question, whether its records' lengths hold, its OPT record (the payload
//! offered, whether its options fit, its COOKIE options) and whether a TSIG record ends it. The
//! gate, the cache, the answer and the transfers read this view; none walks the bytes again (as
//! Knot's `knot_pkt_t` and Unbound's `msg_parse` are made once and handed on).
//!
//! It is the framing only (one walk of `framing::read`): names and data are not decoded. What
//! hickory-proto refuses is judged from it (see `answer`).

use hickory_proto::rr::RecordType;
use hostport_dns_common::dns::{EDNS_OPTION_COOKIE, FLAG_QR, HEADER_LEN, OPCODE_MASK};

pub use super::framing::Opt;
use super::framing::{self, Framing, Records};

/// The TSIG record's type (RFC 8945 §4.2).
const TYPE_TSIG: u16 = 250;

/// A query's view. Made for any bytes: what does not hold is absent.
#[derive(Clone, Debug)]
pub struct Query<'a> {
    bytes: &'a [u8],
    question: Option<Question>,
    /// The records after the question, when their counts and lengths hold up to the end of the
    /// message (nothing missing, nothing after).
    records: Option<Records>,
}

/// The query's one question, when it has exactly one and its framing holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Question {
    /// Where it ends (after QTYPE and QCLASS).
    pub end: usize,
    pub qtype: u16,
}

impl<'a> Query<'a> {
    /// Reads the view of `bytes`: one walk over its framing.
    pub fn read(bytes: &'a [u8]) -> Self {
        let Framing {
            question_end,
            records,
        } = framing::read(bytes);
        let question = question_end.and_then(|end| {
            let qtype = bytes.get(end.checked_sub(4)?..end.checked_sub(2)?)?;
            Some(Question {
                end,
                qtype: u16::from_be_bytes([qtype[0], qtype[1]]),
            })
        });
        Self {
            bytes,
            question,
            records,
        }
    }

    /// The bytes as they arrived.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The header's ID, when there is a whole header.
    pub fn id(&self) -> Option<u16> {
        self.header_field(0)
    }

    /// The header's flags, when there is a whole header.
    pub fn flags(&self) -> Option<u16> {
        self.header_field(2)
    }

    fn header_field(&self, at: usize) -> Option<u16> {
        let field = self.bytes.get(at..at + 2)?;
        (self.bytes.len() >= HEADER_LEN).then(|| u16::from_be_bytes([field[0], field[1]]))
    }

    /// The one question, when it holds.
    pub fn question(&self) -> Option<Question> {
        self.question
    }

    /// The type asked for by a query (QR clear, opcode QUERY) of one question.
    pub fn question_type(&self) -> Option<RecordType> {
        let flags = self.flags()?;
        if flags & (FLAG_QR | OPCODE_MASK) != 0 {
            return None;
        }
        self.question.map(|q| RecordType::from(q.qtype))
    }

    /// Whether it asks for a zone transfer (AXFR or IXFR).
    pub fn asks_transfer(&self) -> bool {
        matches!(
            self.question_type(),
            Some(RecordType::AXFR | RecordType::IXFR)
        )
    }

    /// Whether its records hold up to the end of the message.
    pub fn records_hold(&self) -> bool {
        self.records.is_some()
    }

    /// Its OPT record, when its records hold and it has one.
    pub fn opt(&self) -> Option<&Opt> {
        self.records.as_ref()?.opt.as_ref()
    }

    /// The UDP payload size its OPT record offers.
    pub fn offered_payload(&self) -> Option<u16> {
        self.opt().map(|opt| opt.payload)
    }

    /// How many COOKIE options its OPT record holds (none when its options do not fit); read
    /// when asked, as only a query with a cookie is. hickory-proto keeps one option of each
    /// code: this is how more than one is seen.
    pub fn cookie_options(&self) -> usize {
        self.opt()
            .filter(|opt| opt.options_fit)
            .and_then(|opt| self.bytes.get(opt.data.clone()))
            .map_or(0, |data| framing::option_count(data, EDNS_OPTION_COOKIE))
    }

    /// Whether a TSIG record ends it, the last of its additional records (RFC 8945 §4.2), its
    /// records holding.
    pub fn carries_tsig(&self) -> bool {
        self.records
            .as_ref()
            .is_some_and(|records| records.last_additional == Some(TYPE_TSIG))
    }
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
    fn a_plain_query_with_an_opt_record_has_its_question_and_its_opt() {
        let bytes = message([0, 0, 1], &OPT);
        let query = Query::read(&bytes);
        assert_eq!(
            query.question(),
            Some(Question {
                end: QUESTION_END,
                qtype: 1
            })
        );
        assert_eq!(query.question_type(), Some(RecordType::A));
        let opt = query.opt().expect("an OPT record");
        assert_eq!(opt.owner, QUESTION_END..QUESTION_END + 1);
        assert_eq!(opt.data, QUESTION_END + 11..QUESTION_END + 11);
        assert_eq!(query.offered_payload(), Some(1232));
        assert!(opt.options_fit);
    }

    #[test]
    fn counts_without_records_keep_the_question_and_lose_the_records() {
        for counts in [[1, 0, 0], [0, 1, 0], [0, 0, 1]] {
            let bytes = message(counts, &[]);
            let query = Query::read(&bytes);
            assert_eq!(query.question().map(|q| q.end), Some(QUESTION_END));
            assert!(!query.records_hold(), "{counts:?}");
        }
        // Bytes after the last record: the records do not hold either.
        let bytes = message([0, 0, 1], &[OPT.as_slice(), &[1]].concat());
        let query = Query::read(&bytes);
        assert!(!query.records_hold());
        assert_eq!(query.offered_payload(), None, "cut short");
    }

    #[test]
    fn a_question_cut_short_or_several_questions_leave_no_question() {
        let whole = message([0, 0, 0], &[]);
        assert_eq!(Query::read(&whole[..20]).question(), None);
        let mut two = whole.clone();
        two[5] = 2;
        assert_eq!(Query::read(&two).question(), None);
        let mut reserved = whole;
        reserved[12] = 0x80;
        assert_eq!(Query::read(&reserved).question(), None);
        assert_eq!(Query::read(&[0; 5]).question(), None);
        assert_eq!(Query::read(&[0; 5]).flags(), None);
    }

    #[test]
    fn tsig_is_seen_only_as_the_last_record_of_a_message_that_holds() {
        let tsig_owner_and_fixed = [3, b'k', b'e', b'y', 0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 2];
        let signed = message(
            [0, 0, 1],
            &[tsig_owner_and_fixed.as_slice(), &[9, 9]].concat(),
        );
        assert!(Query::read(&signed).carries_tsig());
        let opt_after = message(
            [0, 0, 2],
            &[tsig_owner_and_fixed.as_slice(), &[9, 9], &OPT].concat(),
        );
        assert!(!Query::read(&opt_after).carries_tsig(), "TSIG must go last");
        assert!(
            !Query::read(&signed[..signed.len() - 1]).carries_tsig(),
            "cut short"
        );
        assert!(!Query::read(&message([0, 0, 1], &OPT)).carries_tsig());
        let in_the_answer = message(
            [1, 0, 0],
            &[tsig_owner_and_fixed.as_slice(), &[9, 9]].concat(),
        );
        assert!(
            !Query::read(&in_the_answer).carries_tsig(),
            "TSIG is the last additional record"
        );
    }

    #[test]
    fn a_query_without_a_question_has_its_opt_record_from_the_header_on() {
        let mut bytes = vec![0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        bytes.extend_from_slice(&OPT);
        let query = Query::read(&bytes);
        assert_eq!(query.question(), None);
        assert_eq!(query.question_type(), None);
        assert_eq!(query.opt().map(|o| o.owner.clone()), Some(12..13));
        assert_eq!(query.offered_payload(), Some(1232));
    }

    #[test]
    fn cookie_options_are_counted_when_the_options_fit() {
        let options: &[u8] = &[0, 10, 0, 2, 1, 2, 0, 3, 0, 0, 0, 10, 0, 1, 9];
        let mut opt = OPT.to_vec();
        opt[9..11].copy_from_slice(&(options.len() as u16).to_be_bytes());
        opt.extend_from_slice(options);
        let bytes = message([0, 0, 1], &opt);
        let query = Query::read(&bytes);
        let opt = query.opt().expect("an OPT record");
        assert!(opt.options_fit);
        assert_eq!(query.cookie_options(), 2);
        // An option running past the record: they do not fit, and none is counted.
        let mut overrun = bytes.clone();
        let last_length = overrun.len() - 2;
        overrun[last_length] = 9;
        let query = Query::read(&overrun);
        let opt = query.opt().expect("the OPT record still frames");
        assert!(!opt.options_fit);
        assert_eq!(query.cookie_options(), 0);
    }

    #[test]
    fn transfers_are_queries_asking_for_axfr_or_ixfr() {
        let mut axfr = message([0, 0, 0], &[]);
        let qtype_at = QUESTION_END - 4;
        axfr[qtype_at..qtype_at + 2].copy_from_slice(&252u16.to_be_bytes());
        assert!(Query::read(&axfr).asks_transfer());
        let mut response = axfr.clone();
        response[2] |= 0x80;
        assert!(!Query::read(&response).asks_transfer(), "a response");
        assert!(!Query::read(&message([0, 0, 0], &[])).asks_transfer());
        assert!(!Query::read(&[0u8; 12]).asks_transfer());
    }
}
