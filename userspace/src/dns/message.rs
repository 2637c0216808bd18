//! The skeleton every response starts from, and the transport it travels by: shared by the
//! query answers and the zone transfers.

use hickory_proto::op::{Edns, Message, MessageType};
use hostport_dns_common::limits::EDNS_PAYLOAD_SIZE;

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
