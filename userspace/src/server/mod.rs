//! The userspace DNS server: everything the XDP program passes up, and everything when XDP is
//! off. UDP on one socket per core (SO_REUSEPORT), TCP with tokio (RFC 7766).

pub mod closing;
pub mod gate;
pub mod histogram;
pub mod limits;
pub mod stats;
pub mod tcp;
pub mod udp;
pub mod zone_transfers;

pub mod cache;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use arc_swap::ArcSwapOption;

use self::zone_transfers::{SignedAnswer, ZoneTransfers};

use hostport_dns_core::{
    answer,
    dns::{
        Query, WireName,
        message::{SrvTargetCompression, Transport},
    },
    table::RecordTable,
};

use crate::{clients::martian::is_martian, liveness::Liveness};

/// What every server task reads: the current table (swapped whole by the agent, never locked
/// on the query path), the client policy and the counters.
#[derive(Default)]
pub struct Shared {
    table: ArcSwapOption<RecordTable>,
    /// Bumped with every table swap: answers cached for an older table are stale.
    generation: AtomicU64,
    pub gate: gate::Gate,
    pub stats: stats::ServerStats,
    /// Zone transfers, when configured.
    pub transfers: Option<Arc<dyn ZoneTransfers>>,
    /// Where each serving thread and task says it still runs (`/healthz`).
    pub liveness: Liveness,
    /// Set when the agent stops: the server hands its work over (see `closing`).
    pub closing: closing::Closing,
    /// Told of every table published, beside the transfers (the RFC 2136 updates).
    follower: std::sync::OnceLock<Box<TableFollower>>,
}

/// What follows the tables published: each table, and the names it changed (None: any may).
pub type TableFollower = dyn Fn(&Arc<RecordTable>, Option<&[WireName]>) + Send + Sync;

impl Shared {
    /// Serves everyone, without limits or cookies.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Serves as `gate` decides.
    pub fn with_gate(gate: gate::Gate) -> Arc<Self> {
        Arc::new(Self {
            gate,
            ..Self::default()
        })
    }

    /// Serves as `gate` decides, and transfers zones as `transfers` says.
    pub fn with_transfers(
        gate: gate::Gate,
        transfers: Option<Arc<dyn ZoneTransfers>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            gate,
            transfers,
            ..Self::default()
        })
    }

    /// Serves `table` from now on.
    pub fn publish(&self, table: RecordTable) {
        self.publish_changed(table, None);
    }

    /// Serves `table` from now on; `changed` names what differs from the table before it (None:
    /// anything may), which the transfer history keeps for IXFR.
    pub fn publish_changed(&self, table: RecordTable, changed: Option<&[WireName]>) {
        let table = Arc::new(table);
        self.table.store(Some(table.clone()));
        self.generation.fetch_add(1, Ordering::Release);
        if let Some(transfers) = &self.transfers {
            transfers.record(&table, changed);
        }
        if let Some(follower) = self.follower.get() {
            follower(&table, changed);
        }
    }

    /// `follower` is told of every table published from now on (one follower; false: there is
    /// one already).
    pub fn follow_tables(&self, follower: Box<TableFollower>) -> bool {
        self.follower.set(follower).is_ok()
    }

    /// Answers a transfer request from `client` message by message, each handed to `emit` as it
    /// is made (which says false when the client is gone). False: not a transfer, or no
    /// transfers configured: it is answered the ordinary way, REFUSED.
    pub fn transfer_stream(
        &self,
        query: &Query,
        transport: Transport,
        client: gate::Client,
        emit: &mut dyn FnMut(Vec<u8>) -> bool,
    ) -> bool {
        let Some(transfers) = self.transfers.as_ref() else {
            return false;
        };
        if !query.asks_transfer() || (transport == Transport::Udp && is_martian(client.addr)) {
            return false;
        }
        let table = self.table.load_full();
        transfers.stream(query, table.as_deref(), client.addr.ip(), transport, emit)
    }

    /// The table being served, if one has been published.
    pub fn table(&self) -> Option<Arc<RecordTable>> {
        self.table.load_full()
    }

    /// Answers a query from `client` as the client policy decides (`gate`), and counts it.
    /// Answers are cached per thread for the current table: load balancers ask the same
    /// questions every second.
    pub fn answer_client(
        &self,
        query: &Query,
        transport: Transport,
        client: gate::Client,
    ) -> Option<Vec<u8>> {
        let started = std::time::Instant::now();
        let answer = self.answer_client_unmeasured(query, transport, client);
        self.stats.observe(
            transport,
            query.bytes().len(),
            answer.as_ref().map(Vec::len),
            started.elapsed(),
        );
        answer
    }

    fn answer_client_unmeasured(
        &self,
        query: &Query,
        transport: Transport,
        client: gate::Client,
    ) -> Option<Vec<u8>> {
        let answer = self.gate.answer(self, query, transport, client)?;
        self.stats.count(transport, &answer);
        Some(answer.bytes)
    }

    /// What the transfers answer, for a client the gate has let through: over UDP a transfer
    /// request gets one message (NOTIMP, REFUSED or the current SOA), and a query signed with
    /// TSIG gets a signed answer (or NOTAUTH with the TSIG error). None: neither, it is
    /// answered the ordinary way; Some(None): theirs, but nothing could be made.
    fn answer_by_transfers(
        &self,
        query: &Query,
        transport: Transport,
        client: gate::Client,
    ) -> Option<Option<answer::Answer>> {
        let transfers = self.transfers.as_ref()?;
        let qtype = query.question_type();
        if transport == Transport::Udp && query.asks_transfer() {
            let mut first = None;
            let table = self.table.load_full();
            let handled = transfers.stream(
                query,
                table.as_deref(),
                client.addr.ip(),
                transport,
                &mut |message| {
                    first = Some(message);
                    false
                },
            );
            return handled.then(|| first.map(|bytes| answer::Answer::made(bytes, qtype)));
        }
        if !query.carries_tsig() {
            return None;
        }
        // Signed answers are made for one query: never cached. Over UDP one that does not fit
        // is signed truncated and empty, as a slip (RFC 8945 §5.3: the client retries over TCP).
        let signed = |shape| {
            let mut respond = || {
                let table = self.table.load();
                let asker = answer::Asker {
                    shape,
                    udp_ceiling: self.gate.udp_ceiling,
                    // The signer encodes the answer again (hickory-proto: SRV targets in full),
                    // so one that fits only with its targets compressed goes as a slip.
                    srv_targets: SrvTargetCompression::Never,
                    ..answer::Asker::ANONYMOUS
                };
                answer::respond_for(query, table.as_deref(), transport, &asker).map(|a| a.bytes)
            };
            match transfers.answer_signed(query, &mut respond) {
                SignedAnswer::Answer(bytes) => Some(bytes),
                SignedAnswer::NotSigned => None,
            }
        };
        let mut bytes = signed(answer::Shape::Full)?;
        if transport == Transport::Udp
            && bytes
                .as_ref()
                .is_some_and(|b| b.len() > self.gate.udp_ceiling.limit(query.offered_payload()))
        {
            bytes = signed(answer::Shape::Slip)?;
        }
        Some(bytes.map(|bytes| answer::Answer::made(bytes, qtype)))
    }

    /// The answer for `asker`, from the cache when it is not made for the asker alone.
    fn answer_as(
        &self,
        query: &Query,
        transport: Transport,
        asker: &answer::Asker,
    ) -> Option<answer::Answer> {
        let respond = || {
            let table = self.table.load();
            answer::respond_for(query, table.as_deref(), transport, asker)
        };
        if asker.shape != answer::Shape::Full {
            return respond();
        }
        let generation = self.generation.load(Ordering::Acquire);
        cache::lookup_or_insert(generation, query.bytes(), transport, respond)
    }
}
