//! What the server needs of zone transfers, as an interface: the `transfer` module provides it
//! and the agent wires it in, so the server never imports the transfers (they import it).

use std::{net::IpAddr, sync::Arc};

use hostport_dns_core::{
    dns::{Query, WireName, message::Transport},
    table::RecordTable,
};

/// What becomes of a query that may carry a TSIG record.
pub enum SignedAnswer {
    /// Not signed: it is answered the ordinary way.
    NotSigned,
    /// Signed: this answer (signed, or the TSIG error), or none.
    Answer(Option<Vec<u8>>),
}

/// Zone transfers, as the server reaches them.
pub trait ZoneTransfers: Send + Sync {
    /// Keeps a published table as a version IXFR can start from; `changed`: the names that
    /// differ from the table published before it (None: any may).
    fn record(&self, table: &Arc<RecordTable>, changed: Option<&[WireName]>);

    /// Answers a transfer request message by message, each handed to `emit` as it is made
    /// (which says false when the client is gone). False: not a transfer request.
    fn stream(
        &self,
        query: &Query,
        table: Option<&RecordTable>,
        client: IpAddr,
        transport: Transport,
        emit: &mut dyn FnMut(Vec<u8>) -> bool,
    ) -> bool;

    /// A query signed with TSIG gets a signed answer (or NOTAUTH with the TSIG error):
    /// `respond` makes the ordinary one.
    fn answer_signed(
        &self,
        query: &Query,
        respond: &mut dyn FnMut() -> Option<Vec<u8>>,
    ) -> SignedAnswer;
}
