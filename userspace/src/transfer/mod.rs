//! Zone transfers to secondaries: AXFR (RFC 5936) and IXFR (RFC 1995) over TCP for every served
//! zone, forward and reverse, to the clients of the transfer ACL, signed with TSIG (RFC 8945);
//! and NOTIFY (RFC 1996) to the configured secondaries when a serial changes ([`notify`]).
//!
//! The order a request is judged in: its TSIG first (a bad signature is NOTAUTH with BADKEY,
//! BADSIG or BADTIME, whoever sends it), then the ACL (REFUSED outside it, or without the key
//! its entry names), then the transport (AXFR over UDP is not a thing: NOTIMP; IXFR over UDP is
//! answered with the current SOA only, which tells the client to come back over TCP, RFC 1995
//! §2), then the zone (NOTAUTH for a zone not served here, SERVFAIL before the first table and
//! for a zone whose sources have not all listed).

pub mod config;
pub mod history;
pub mod notify;
pub mod secondaries;
pub mod stats;
pub mod tsig;
pub mod zone_data;

use std::{net::IpAddr, sync::Arc, sync::Mutex};

use arc_swap::ArcSwap;

use hickory_proto::{
    op::{Message, MessageType, OpCode, ResponseCode},
    rr::{DNSClass, RData, Record, RecordType},
    serialize::binary::BinDecodable,
};
use tracing::{debug, info, warn};

pub use config::TransferConfig;

use hostport_dns_core::{
    dns::{
        Query, WireName,
        message::{Transport, UdpCeiling, response_to},
    },
    table::RecordTable,
};

use crate::{
    serials::serial_gt,
    server::zone_transfers::{SignedAnswer, ZoneTransfers},
    transfer::{
        history::{Found, History},
        stats::{Outcome, TransferStats},
        tsig::{Checked, Keyring, StreamSigner},
        zone_data::ServedZone,
    },
};

/// How often the TSIG keys' secret files are read again (a Kubernetes Secret's mounted file
/// changes within about a minute of the Secret).
pub const KEY_RELOAD: std::time::Duration = std::time::Duration::from_secs(10);

/// The bytes of records one message of a transfer carries at most, counted uncompressed: with
/// the question, the header and a TSIG record it stays well within a TCP message's 65,535.
const MESSAGE_BUDGET: usize = 60_000;
/// The names (owners and names in record data) one message carries at most: hickory-proto
/// compresses only the first 120 names of a message (a bound against pathological messages),
/// and an uncompressed owner costs a transfer twice the bytes (measured: 27 bytes per A record
/// of `example.` instead of 20). The question's name is one of the 120.
const MESSAGE_NAMES: usize = 110;

/// What the server needs for transfers: the configuration, the keys and the versions kept.
pub struct Transfers {
    pub config: TransferConfig,
    /// The TSIG keys, read again from their files every [`KEY_RELOAD`] (a rotated Secret
    /// needs no restart).
    pub keys: ArcSwap<Keyring>,
    history: Mutex<History>,
    /// The newest table, for the NOTIFY task.
    tables: tokio::sync::watch::Sender<Option<Arc<RecordTable>>>,
    pub stats: TransferStats,
    /// The ceiling on UDP answers, which their OPT records advertise as every answer's do.
    pub udp_ceiling: UdpCeiling,
}

impl Transfers {
    pub fn new(config: TransferConfig) -> anyhow::Result<Self> {
        let keys = ArcSwap::from_pointee(Keyring::load(&config.keys)?);
        Ok(Self {
            history: Mutex::new(History::new(config.history)),
            tables: tokio::sync::watch::Sender::new(None),
            config,
            keys,
            stats: TransferStats::default(),
            udp_ceiling: UdpCeiling::DEFAULT,
        })
    }

    /// Advertises `ceiling` in the OPT records, as the query answers do.
    pub fn with_udp_ceiling(mut self, ceiling: UdpCeiling) -> Self {
        self.udp_ceiling = ceiling;
        self
    }

    /// Reads the keys' secret files again; true when they changed. Files that became unreadable
    /// or invalid keep the keys in use (and the error is returned).
    pub fn reload_keys(&self) -> anyhow::Result<bool> {
        let fresh = Keyring::load(&self.config.keys)?;
        if **self.keys.load() == fresh {
            return Ok(false);
        }
        self.keys.store(Arc::new(fresh));
        Ok(true)
    }

    /// Follows the keys' secret files until the agent stops, as the cookie secrets are.
    pub async fn follow_keys(self: Arc<Self>) {
        if self.config.keys.is_empty() {
            return;
        }
        let mut failing = false;
        loop {
            tokio::time::sleep(KEY_RELOAD).await;
            match self.reload_keys() {
                Ok(changed) => {
                    if changed {
                        info!("TSIG keys reloaded");
                    }
                    failing = false;
                }
                Err(err) => {
                    if !failing {
                        warn!(err = format!("{err:#}"), "keeping the TSIG keys in use");
                    }
                    failing = true;
                }
            }
        }
    }

    /// Sends the NOTIFYs the configuration asks for, until the agent stops.
    pub async fn notify(self: Arc<Self>) {
        let tables = self.tables.subscribe();
        notify::run(self, tables).await;
    }

    /// The messages answering the transfer request `query` from `client`; `None` if it is not
    /// one this module answers (it goes the ordinary way then).
    pub fn respond(
        &self,
        query: &[u8],
        table: Option<&RecordTable>,
        client: IpAddr,
        transport: Transport,
    ) -> Option<Vec<Vec<u8>>> {
        let mut messages = Vec::new();
        let handled = self.stream(
            &Query::read(query),
            table,
            client,
            transport,
            &mut |message| {
                messages.push(message);
                true
            },
        );
        handled.then_some(messages)
    }

    /// The transfer's messages, each handed to `emit`; the kind of transfer asked for, or None
    /// when the query is not a transfer request.
    fn respond_to(
        &self,
        query: &[u8],
        table: Option<&RecordTable>,
        client: IpAddr,
        transport: Transport,
        emit: &mut dyn FnMut(Vec<u8>) -> bool,
    ) -> Option<Kind> {
        let request = Message::from_bytes(query).ok()?;
        let [question] = request.queries.as_slice() else {
            return None;
        };
        let kind = match question.query_type {
            RecordType::AXFR => Kind::Axfr,
            RecordType::IXFR => Kind::Ixfr,
            _ => return None,
        };
        if request.metadata.message_type != MessageType::Query
            || request.metadata.op_code != OpCode::Query
            || question.query_class != DNSClass::IN
        {
            return None;
        }
        let now = tsig::unix_now();
        let mut response = response_to(&request, self.udp_ceiling);
        let signed = match tsig::check(query, &request, &self.keys.load(), now) {
            Checked::Failed(failure) => {
                // Over UDP anyone can send these as often as the rate limit lets them: no
                // line per packet (the metrics count them).
                if transport == Transport::Tcp {
                    warn!(%client, zone = %question.name, error = ?failure.error, "transfer request with a bad TSIG: NOTAUTH");
                } else {
                    debug!(%client, zone = %question.name, error = ?failure.error, "transfer request over UDP with a bad TSIG: NOTAUTH");
                }
                self.stats.count(kind.label(), Outcome::BadTsig);
                response.metadata.response_code = ResponseCode::NotAuth;
                if let Some(record) = failure.error_record(&response, now) {
                    response.set_signature(record);
                }
                emit(response.to_vec().ok()?);
                return Some(kind);
            }
            Checked::Unsigned => None,
            Checked::Signed(signed) => Some(signed),
        };
        let key = signed.as_ref().map(|s| s.signer.signer_name().clone());
        let allowed = self.config.admits(client, key.as_ref());
        let mut signer = signed.map(|s| StreamSigner::new(s, now));
        // Each message signed (or encoded) and handed on; false: stop (the client is gone, or a
        // message could not be made).
        let mut send = |response: Message| -> bool {
            let bytes = match signer.as_mut() {
                Some(signer) => signer.sign(response).ok(),
                None => response.to_vec().ok(),
            };
            bytes.is_some_and(&mut *emit)
        };
        let error = |code: ResponseCode, mut response: Message| {
            response.metadata.response_code = code;
            response.metadata.authoritative = code == ResponseCode::NotAuth;
            response
        };
        if !allowed {
            let key = key.map(|k| k.to_ascii());
            if transport == Transport::Tcp {
                info!(%client, zone = %question.name, ?key, "transfer refused: not in the transfer ACL");
            } else {
                debug!(%client, zone = %question.name, ?key, "transfer over UDP refused: not in the transfer ACL");
            }
            self.stats.count(kind.label(), Outcome::Refused);
            send(error(ResponseCode::Refused, response));
            return Some(kind);
        }
        if transport == Transport::Udp && kind == Kind::Axfr {
            self.stats.count(kind.label(), Outcome::Refused);
            send(error(ResponseCode::NotImp, response));
            return Some(kind);
        }
        let Some(table) = table else {
            self.stats.count(kind.label(), Outcome::NotReady);
            send(error(ResponseCode::ServFail, response));
            return Some(kind);
        };
        if is_pending(table, &question.name) {
            // A source of the zone has not listed yet: what it lacks may exist (as queries).
            self.stats.count(kind.label(), Outcome::NotReady);
            send(error(ResponseCode::ServFail, response));
            return Some(kind);
        }
        let Some(zone) = ServedZone::find(table, &question.name) else {
            self.stats.count(kind.label(), Outcome::NotAuth);
            send(error(ResponseCode::NotAuth, response));
            return Some(kind);
        };
        let how = match kind {
            Kind::Axfr => Outcome::Axfr,
            Kind::Ixfr => {
                let Some(client_serial) = client_serial(&request) else {
                    self.stats.count(kind.label(), Outcome::Malformed);
                    send(error(ResponseCode::FormErr, response));
                    return Some(kind);
                };
                // What it holds now, whatever it is sent next.
                let apex = zone.apex().to_ascii();
                self.stats.secondaries.holds(&apex, client, client_serial);
                if transport == Transport::Udp || !serial_gt(zone.serial(), client_serial) {
                    // Up to date (or UDP): the current SOA alone.
                    self.stats.count(kind.label(), Outcome::UpToDate);
                    split(response, std::iter::once(zone.soa()), &mut send);
                    return Some(kind);
                }
                let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
                let found = history.find(zone.apex(), client_serial);
                drop(history);
                if let Some(found) = found {
                    self.stats.count(kind.label(), Outcome::Ixfr);
                    let records = incremental(&found, table, &zone);
                    debug!(%client, zone = %zone.apex(), serial = zone.serial(), records = records.len(), "IXFR");
                    if split(response, records.into_iter(), &mut send) {
                        self.stats.secondaries.holds(&apex, client, zone.serial());
                    }
                    return Some(kind);
                }
                Outcome::AxfrFallback
            }
        };
        debug!(%client, zone = %zone.apex(), serial = zone.serial(), ?how, "transfer of the whole zone");
        self.stats.count(kind.label(), how);
        if split(response, whole_zone(table, &zone), &mut send) {
            let apex = zone.apex().to_ascii();
            self.stats.secondaries.holds(&apex, client, zone.serial());
        }
        Some(kind)
    }
}

impl std::fmt::Debug for Transfers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transfers")
    }
}

impl ZoneTransfers for Transfers {
    /// Keeps a published table as a version IXFR can start from, and tells the NOTIFY task.
    fn record(&self, table: &Arc<RecordTable>, changed: Option<&[WireName]>) {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(table, changed);
        self.tables.send_replace(Some(table.clone()));
    }

    /// Answers a transfer request message by message, as each is made: `emit` takes each (and
    /// says false when the connection is gone: nothing more is made). A whole zone is never
    /// held as records or messages at once. False: not a transfer request.
    fn stream(
        &self,
        query: &Query,
        table: Option<&RecordTable>,
        client: IpAddr,
        transport: Transport,
        emit: &mut dyn FnMut(Vec<u8>) -> bool,
    ) -> bool {
        let mut sent = 0;
        let mut counted = |message: Vec<u8>| {
            sent += message.len();
            emit(message)
        };
        let Some(kind) = self.respond_to(query.bytes(), table, client, transport, &mut counted)
        else {
            return false;
        };
        self.stats.sent(kind.label(), sent);
        true
    }

    /// A query signed with TSIG (a secondary's SOA refresh check, or any other) gets a signed
    /// answer (RFC 8945 §5.3): `respond` makes the ordinary answer, which is signed here; a
    /// TSIG that does not verify gets NOTAUTH with its error. Unsigned queries go the ordinary
    /// way.
    fn answer_signed(
        &self,
        query: &Query,
        respond: &mut dyn FnMut() -> Option<Vec<u8>>,
    ) -> SignedAnswer {
        let query = query.bytes();
        let Ok(request) = Message::from_bytes(query) else {
            return SignedAnswer::NotSigned;
        };
        let now = tsig::unix_now();
        let signed = match tsig::check(query, &request, &self.keys.load(), now) {
            Checked::Unsigned => return SignedAnswer::NotSigned,
            Checked::Failed(failure) => {
                let mut response = response_to(&request, self.udp_ceiling);
                response.metadata.response_code = ResponseCode::NotAuth;
                response.metadata.authoritative = false;
                if let Some(record) = failure.error_record(&response, now) {
                    response.set_signature(record);
                }
                return SignedAnswer::Answer(response.to_vec().ok());
            }
            Checked::Signed(signed) => signed,
        };
        let answer = respond().and_then(|bytes| Message::from_bytes(&bytes).ok());
        SignedAnswer::Answer(
            answer.and_then(|answer| StreamSigner::new(signed, now).sign(answer).ok()),
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Axfr,
    Ixfr,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Axfr => "axfr",
            Self::Ixfr => "ixfr",
        }
    }
}

/// AXFR: the SOA, every record, the SOA again (RFC 5936 §2.2), made as they are sent.
fn whole_zone<'a>(
    table: &'a RecordTable,
    zone: &'a ServedZone,
) -> impl Iterator<Item = Record> + 'a {
    let soa = zone.soa();
    std::iter::once(soa.clone())
        .chain(zone.records(table))
        .chain(std::iter::once(soa))
}

/// IXFR (RFC 1995 §4), condensed to one difference: the new SOA; the old SOA and the records
/// gone; the new SOA and the records added; the new SOA.
fn incremental(old: &Found, table: &RecordTable, zone: &ServedZone) -> Vec<Record> {
    let (gone, added) = old
        .zone
        .changes(&old.table, old.changed.as_deref(), table, zone);
    let soa = zone.soa();
    let mut records = Vec::with_capacity(gone.len() + added.len() + 4);
    records.push(soa.clone());
    records.push(old.zone.soa());
    records.extend(gone);
    records.push(soa.clone());
    records.extend(added);
    records.push(soa);
    records
}

/// Whether `apex` is a forward zone of `table` whose sources have not all listed.
fn is_pending(table: &RecordTable, apex: &hickory_proto::rr::Name) -> bool {
    table
        .zones()
        .iter()
        .any(|z| z.spec.pending && z.spec.apex == *apex)
}

/// The serial in the SOA record of an IXFR request's authority section.
fn client_serial(request: &Message) -> Option<u32> {
    request.authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    })
}

/// The records in messages of at most [`MESSAGE_BUDGET`] bytes and [`MESSAGE_NAMES`] names
/// each, each handed to `send` as soon as it is full; every message repeats the question (RFC
/// 5936 §2.2 allows it; Knot does the same). Stops when `send` says false; true: every message
/// was sent.
fn split(
    skeleton: Message,
    records: impl Iterator<Item = Record>,
    send: &mut dyn FnMut(Message) -> bool,
) -> bool {
    let mut current = skeleton.clone();
    let (mut size, mut names) = (0, 0);
    for record in records {
        let len = encoded_len_bound(&record);
        let record_names = names_in(&record);
        let full = size + len > MESSAGE_BUDGET || names + record_names > MESSAGE_NAMES;
        if full && !current.answers.is_empty() {
            if !send(std::mem::replace(&mut current, skeleton.clone())) {
                return false;
            }
            (size, names) = (0, 0);
        }
        size += len;
        names += record_names;
        current.add_answer(record);
    }
    send(current)
}

/// The bytes `record` takes uncompressed, counted without encoding it: its owner, the fixed
/// fields and its data (a type not listed counts as the most a record can take).
fn encoded_len_bound(record: &Record) -> usize {
    const FIXED: usize = 10; // type, class, TTL, RDLENGTH
    // A name's text length plus one: its length octets and the root label.
    let wire = |name: &hickory_proto::rr::Name| name.len() + 1;
    let data = match &record.data {
        RData::A(_) => 4,
        RData::AAAA(_) => 16,
        RData::SRV(srv) => 6 + wire(&srv.target),
        RData::NS(ns) => wire(&ns.0),
        RData::PTR(ptr) => wire(&ptr.0),
        RData::SOA(soa) => wire(&soa.mname) + wire(&soa.rname) + 20,
        _ => usize::from(u16::MAX),
    };
    wire(&record.name) + FIXED + data
}

/// The names a record carries: its owner, and those in its data.
fn names_in(record: &Record) -> usize {
    1 + match &record.data {
        RData::SOA(_) => 2,
        RData::NS(_) | RData::PTR(_) | RData::SRV(_) | RData::CNAME(_) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
