//! The skeleton every response starts from, the transport it travels by, and cheap looks at a
//! query before it is parsed: shared by the query answers and the zone transfers.

use hickory_proto::{
    op::{Edns, Message, MessageType},
    rr::RecordType,
};
use hostport_dns_common::{
    dns::{FLAG_QR, HEADER_LEN, OPCODE_MASK},
    limits::{CLASSIC_UDP_PAYLOAD, EDNS_PAYLOAD_SIZE},
};

/// How the answer travels: UDP answers are limited to what the client accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// A response skeleton: ID and opcode kept, QR and AA set, RD and CD copied, the question and an
/// OPT record (if the query had one) echoed. Transfers start from it too.
pub fn response_to(request: &Message) -> Message {
    let mut response = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.checking_disabled = request.metadata.checking_disabled;
    response.add_queries(request.queries.iter().cloned());
    if let Some(edns) = &request.edns {
        let mut ours = Edns::new();
        ours.set_max_payload(EDNS_PAYLOAD_SIZE);
        ours.set_version(0);
        ours.set_dnssec_ok(edns.flags().dnssec_ok);
        response.set_edns(ours);
    }
    response
}

/// Whether `query` asks for a transfer: a query (QR clear, opcode QUERY) whose first question
/// is of type AXFR or IXFR. A cheap look, before the message is parsed.
pub fn asks_transfer(query: &[u8]) -> bool {
    matches!(
        question_type(query),
        Some(RecordType::AXFR | RecordType::IXFR)
    )
}

/// The most an answer to `query` may take over UDP: 512 bytes without EDNS, else what the
/// client offers, within 512 and [`EDNS_PAYLOAD_SIZE`] (an unreadable query: 512).
pub fn udp_limit(query: &[u8]) -> usize {
    let offered = super::framing::offered_payload(query);
    usize::from(offered.map_or(CLASSIC_UDP_PAYLOAD, |size| {
        size.clamp(CLASSIC_UDP_PAYLOAD, EDNS_PAYLOAD_SIZE)
    }))
}

/// The type of a query's one question (QR clear, opcode QUERY), read without parsing the
/// message.
pub fn question_type(query: &[u8]) -> Option<RecordType> {
    if query.len() < HEADER_LEN + 5 {
        return None;
    }
    let flags = u16::from_be_bytes([query[2], query[3]]);
    if flags & (FLAG_QR | OPCODE_MASK) != 0 || query[4..6] != [0, 1] {
        return None;
    }
    // The question's name, then its type.
    let mut at = HEADER_LEN;
    while let Some(&len) = query.get(at) {
        if len == 0 || len & 0xc0 != 0 {
            break;
        }
        at += 1 + usize::from(len);
    }
    let qtype = query.get(at + 1..at + 3)?;
    Some(RecordType::from(u16::from_be_bytes([qtype[0], qtype[1]])))
}
