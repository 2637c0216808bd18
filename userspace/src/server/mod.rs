//! The userspace DNS server: everything the XDP program passes up, and everything when XDP is
//! off. UDP on one socket per core (SO_REUSEPORT), TCP with tokio (RFC 7766).

pub mod answer;
pub mod stats;
pub mod tcp;
pub mod udp;

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::table::RecordTable;

/// What every server task reads: the current table (swapped whole by the agent, never locked
/// on the query path) and the counters.
#[derive(Default)]
pub struct Shared {
    pub table: ArcSwapOption<RecordTable>,
    pub stats: stats::ServerStats,
}

impl Shared {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Answers one query from the current table and counts it.
    pub fn answer(&self, query: &[u8], transport: answer::Transport) -> Option<Vec<u8>> {
        let table = self.table.load();
        let answer = answer::respond(query, table.as_deref(), transport)?;
        self.stats.count(transport, &answer);
        Some(answer.bytes)
    }
}
