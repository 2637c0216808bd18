//! Answers that rotate by the query ID (a zone's `rotate`), made once and rotated in place.
//!
//! A rotating zone's A or AAAA answer starts at the address `id % count` (the kernel writes the
//! same order). Its records are all of one length (an owner pointer to the question, a fixed
//! header, four or sixteen bytes of address), so the answer for another ID is the same bytes
//! with the answer section rotated by whole records. The cache keeps the answer once, in the
//! order of ID 0, and each query costs a copy and a rotation of its bytes: a 250-address answer
//! is not rendered again for every poll of every load balancer.

use hostport_dns_common::dns::{HEADER_LEN, TYPE_A, TYPE_AAAA};

/// An owner that points to the question's name (offset 12).
const OWNER_POINTER: [u8; 2] = [0xc0, 0x0c];
/// Type, class, TTL and RDLENGTH after the owner.
const FIXED_LEN: usize = 10;

/// Where an answer's address records lie: `count` records of `record_len` bytes from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    start: usize,
    record_len: usize,
    count: usize,
}

impl Rotation {
    /// The address records of `answer` (a response with one question), when its answer section
    /// is two or more A or AAAA records, each owned by a pointer to the question.
    /// None otherwise: nothing to rotate, or a layout this does not rotate (made afresh).
    pub fn find(answer: &[u8]) -> Option<Self> {
        let count = usize::from(u16::from_be_bytes([*answer.get(6)?, *answer.get(7)?]));
        if count < 2 || answer.get(4..6)? != [0, 1] {
            return None;
        }
        let start = question_end(answer)?;
        let first = answer.get(start..start + 2 + FIXED_LEN)?;
        let rtype = [first[2], first[3]];
        // Only addresses rotate: A records of four bytes, AAAA of sixteen.
        let data_len = match u16::from_be_bytes(rtype) {
            TYPE_A => 4,
            TYPE_AAAA => 16,
            _ => return None,
        };
        let record_len = 2 + FIXED_LEN + data_len;
        for i in 0..count {
            let at = start + i * record_len;
            let record = answer.get(at..at + record_len)?;
            let same_shape = record[..2] == OWNER_POINTER
                && record[2..4] == rtype
                && usize::from(u16::from_be_bytes([record[10], record[11]])) == data_len;
            if !same_shape {
                return None;
            }
        }
        Some(Self {
            start,
            record_len,
            count,
        })
    }

    /// Which address the answer to a query with `id` starts at.
    pub fn first_for(&self, id: u16) -> usize {
        usize::from(id) % self.count
    }

    /// Turns `answer`, whose records start at address `from`, into the one starting at `to`.
    pub fn rotate(&self, answer: &mut [u8], from: usize, to: usize) {
        let by = (to + self.count - from % self.count) % self.count;
        let end = self.start + self.count * self.record_len;
        if let Some(records) = answer.get_mut(self.start..end) {
            records.rotate_left(by * self.record_len);
        }
    }
}

/// Where the one question of `message` ends (its name uncompressed, as every response echoes
/// it).
fn question_end(message: &[u8]) -> Option<usize> {
    let mut at = HEADER_LEN;
    loop {
        let len = usize::from(*message.get(at)?);
        if len == 0 {
            return Some(at + 1 + 4);
        }
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::{
        op::{Message, MessageType, OpCode, Query},
        rr::{Name, RData, Record, RecordType, rdata::A},
    };

    use super::*;

    fn answer(id: u16, addresses: &[[u8; 4]]) -> Vec<u8> {
        let name = Name::from_ascii("Big.prod.example.").expect("a name");
        let mut message = Message::new(id, MessageType::Response, OpCode::Query);
        message.add_query(Query::query(name.clone(), RecordType::A));
        message.add_answers(addresses.iter().map(|a| {
            Record::from_rdata(
                name.clone(),
                5,
                RData::A(A::from(std::net::Ipv4Addr::from(*a))),
            )
        }));
        crate::dns::encode::to_vec(&message).expect("encoded")
    }

    #[test]
    fn rotating_the_bytes_gives_the_answer_rendered_in_that_order() {
        let addresses: Vec<[u8; 4]> = (0..250u8).map(|i| [198, 18, 1, i]).collect();
        let in_order = answer(0, &addresses);
        let rotation = Rotation::find(&in_order).expect("uniform A records");
        for id in [0u16, 1, 249, 250, 4_000, u16::MAX] {
            let first = rotation.first_for(id);
            let mut rotated = in_order.clone();
            rotation.rotate(&mut rotated, 0, first);
            let mut expected_order = addresses.clone();
            expected_order.rotate_left(first);
            assert_eq!(rotated, answer(0, &expected_order), "id {id}");
            // And back again.
            rotation.rotate(&mut rotated, first, 0);
            assert_eq!(rotated, in_order);
        }
    }

    #[test]
    fn answers_of_other_shapes_are_not_rotated() {
        assert_eq!(
            Rotation::find(&answer(1, &[[198, 18, 0, 1]])),
            None,
            "one record"
        );
        assert_eq!(Rotation::find(&answer(1, &[])), None, "no record");
        let mut cut = answer(1, &[[198, 18, 0, 1], [198, 18, 0, 2]]);
        cut.truncate(cut.len() - 1);
        assert_eq!(Rotation::find(&cut), None, "a record cut short");
        assert_eq!(Rotation::find(&[0; 5]), None, "no header");
    }
}
