//! Counters of the userspace server, by transport, query type and rcode. Lock-free: one atomic
//! per cell.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use hickory_proto::{op::ResponseCode, rr::RecordType};

use hostport_dns_core::{
    answer::{Answer, ZoneOf},
    dns::message::Transport,
};

use crate::server::histogram::{AtomicHistogram, HistogramSnapshot};

/// Forward zones counted apart in the requests by zone (by table id); the others count as
/// "other_zones".
pub const COUNTED_ZONES: usize = 32;
/// The zone slots: the counted zones, then those beyond them, reverse zones, and none served.
const ZONE_SLOTS: usize = COUNTED_ZONES + 3;
/// Request duration buckets, seconds (CoreDNS's are 0.25 ms to 8 s; here the work is shorter).
static DURATION_BOUNDS: [f64; 14] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.5,
];
/// Message size buckets, bytes (as CoreDNS's).
static SIZE_BOUNDS: [f64; 9] = [
    0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0,
];

/// Where a zone slot's requests are labelled (the counted zones by name, from the table).
pub enum ZoneSlot {
    Zone(u32),
    Label(&'static str),
}

/// Query types counted by name; the rest count as "other".
pub const QTYPES: [&str; 9] = [
    "A", "AAAA", "SRV", "SOA", "NS", "PTR", "ANY", "other", "none",
];
/// Rcodes counted by name.
pub const RCODES: [&str; 10] = [
    "NOERROR",
    "FORMERR",
    "SERVFAIL",
    "NXDOMAIN",
    "NOTIMP",
    "REFUSED",
    "NOTAUTH",
    "BADVERS",
    "BADCOOKIE",
    "other",
];
pub const TRANSPORTS: [&str; 2] = ["udp", "tcp"];

/// Why a TCP connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpClose {
    ByClient,
    Idle,
    WriteTimeout,
    Lifetime,
    Queries,
    /// Refused at accept: the client had its maximum of connections open.
    ClientCap,
    Error,
    /// Closed between queries because the agent stops (a new one serves beside it).
    Stopping,
}

impl TcpClose {
    pub const ALL: [TcpClose; 8] = [
        TcpClose::ByClient,
        TcpClose::Idle,
        TcpClose::WriteTimeout,
        TcpClose::Lifetime,
        TcpClose::Queries,
        TcpClose::ClientCap,
        TcpClose::Error,
        TcpClose::Stopping,
    ];

    pub fn label(self) -> &'static str {
        match self {
            TcpClose::ByClient => "by_client",
            TcpClose::Idle => "idle",
            TcpClose::WriteTimeout => "write_timeout",
            TcpClose::Lifetime => "lifetime",
            TcpClose::Queries => "queries",
            TcpClose::ClientCap => "client_cap",
            TcpClose::Error => "error",
            TcpClose::Stopping => "stopping",
        }
    }
}

/// What the client policy did with a query instead of answering it as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A source that cannot have sent it: not answered.
    Martian,
    /// Outside the allow-list: not answered (UDP) or the connection closed (TCP).
    NotAllowed,
    /// Outside the allow-list: REFUSED.
    Refused,
    /// Over its rate: not answered.
    RateLimited,
    /// Over its rate: answered truncated.
    Slipped,
    /// Over its rate with a client cookie only: BADCOOKIE with a server cookie.
    BadCookie,
}

impl Decision {
    pub const ALL: [Decision; 6] = [
        Decision::Martian,
        Decision::NotAllowed,
        Decision::Refused,
        Decision::RateLimited,
        Decision::Slipped,
        Decision::BadCookie,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Decision::Martian => "martian",
            Decision::NotAllowed => "not_allowed",
            Decision::Refused => "refused",
            Decision::RateLimited => "rate_limited",
            Decision::Slipped => "slipped",
            Decision::BadCookie => "badcookie",
        }
    }
}

pub struct ServerStats {
    decisions: [AtomicU64; Decision::ALL.len()],
    answers: [[[AtomicU64; RCODES.len()]; QTYPES.len()]; TRANSPORTS.len()],
    /// Answered requests by transport, zone slot and query type.
    requests: [[[AtomicU64; QTYPES.len()]; ZONE_SLOTS]; TRANSPORTS.len()],
    truncated: AtomicU64,
    srv_targets_compressed: AtomicU64,
    tcp_open: AtomicU64,
    tcp_closed: [AtomicU64; TcpClose::ALL.len()],
    /// Per transport: from the query read to its answer made, in nanoseconds.
    duration: [AtomicHistogram; TRANSPORTS.len()],
    request_size: [AtomicHistogram; TRANSPORTS.len()],
    response_size: [AtomicHistogram; TRANSPORTS.len()],
}

impl Default for ServerStats {
    fn default() -> Self {
        Self {
            decisions: Default::default(),
            answers: Default::default(),
            requests: std::array::from_fn(|_| std::array::from_fn(|_| Default::default())),
            truncated: AtomicU64::new(0),
            srv_targets_compressed: AtomicU64::new(0),
            tcp_open: AtomicU64::new(0),
            tcp_closed: Default::default(),
            duration: std::array::from_fn(|_| AtomicHistogram::new(&DURATION_BOUNDS, 1e-9)),
            request_size: std::array::from_fn(|_| AtomicHistogram::new(&SIZE_BOUNDS, 1.0)),
            response_size: std::array::from_fn(|_| AtomicHistogram::new(&SIZE_BOUNDS, 1.0)),
        }
    }
}

impl ServerStats {
    pub fn count(&self, transport: Transport, answer: &Answer) {
        let t = transport as usize;
        let qtype = qtype_index(answer.qtype);
        self.answers[t][qtype][rcode_index(answer.rcode)].fetch_add(1, Relaxed);
        self.requests[t][zone_slot(answer.zone)][qtype].fetch_add(1, Relaxed);
        if answer.truncated {
            self.truncated.fetch_add(1, Relaxed);
        }
        if answer.srv_targets_compressed {
            self.srv_targets_compressed.fetch_add(1, Relaxed);
        }
    }

    /// One query handled: its size, its answer's (if any), and how long it took.
    pub fn observe(
        &self,
        transport: Transport,
        query_len: usize,
        answer_len: Option<usize>,
        took: std::time::Duration,
    ) {
        let t = transport as usize;
        self.request_size[t].observe(query_len as u64);
        if let Some(len) = answer_len {
            self.response_size[t].observe(len as u64);
        }
        self.duration[t].observe(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The request duration and the message sizes, per transport: (transport, duration,
    /// request size, response size).
    pub fn histograms(
        &self,
    ) -> impl Iterator<
        Item = (
            &'static str,
            HistogramSnapshot,
            HistogramSnapshot,
            HistogramSnapshot,
        ),
    > + '_ {
        (0..TRANSPORTS.len()).map(|t| {
            (
                TRANSPORTS[t],
                self.duration[t].snapshot(),
                self.request_size[t].snapshot(),
                self.response_size[t].snapshot(),
            )
        })
    }

    /// Every non-zero cell of the requests: (transport, zone slot, qtype, count).
    pub fn requests(&self) -> Vec<(&'static str, ZoneSlot, &'static str, u64)> {
        let mut out = Vec::new();
        for (t, by_zone) in self.requests.iter().enumerate() {
            for (z, by_type) in by_zone.iter().enumerate() {
                for (q, cell) in by_type.iter().enumerate() {
                    let n = cell.load(Relaxed);
                    if n == 0 {
                        continue;
                    }
                    let slot = match z {
                        z if z < COUNTED_ZONES => ZoneSlot::Zone(z as u32),
                        z if z == COUNTED_ZONES => ZoneSlot::Label("other_zones"),
                        z if z == COUNTED_ZONES + 1 => ZoneSlot::Label("reverse"),
                        _ => ZoneSlot::Label("none"),
                    };
                    out.push((TRANSPORTS[t], slot, QTYPES[q], n));
                }
            }
        }
        out
    }

    /// Every non-zero cell: (transport, qtype, rcode, count).
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, &'static str, u64)> {
        let mut out = Vec::new();
        for (t, by_type) in self.answers.iter().enumerate() {
            for (q, by_rcode) in by_type.iter().enumerate() {
                for (r, cell) in by_rcode.iter().enumerate() {
                    let n = cell.load(Relaxed);
                    if n > 0 {
                        out.push((TRANSPORTS[t], QTYPES[q], RCODES[r], n));
                    }
                }
            }
        }
        out
    }

    pub fn decided(&self, decision: Decision) {
        self.decisions[decision as usize].fetch_add(1, Relaxed);
    }

    /// Policy decisions by kind.
    pub fn decisions(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Decision::ALL
            .iter()
            .map(|d| (d.label(), self.decisions[*d as usize].load(Relaxed)))
    }

    pub fn truncated(&self) -> u64 {
        self.truncated.load(Relaxed)
    }

    /// Answers sent with their SRV targets compressed (in full they did not fit).
    pub fn srv_targets_compressed(&self) -> u64 {
        self.srv_targets_compressed.load(Relaxed)
    }

    pub fn tcp_opened(&self) {
        self.tcp_open.fetch_add(1, Relaxed);
    }

    /// A connection ended (or was refused, `ClientCap`, without having been opened).
    pub fn tcp_closed(&self, why: TcpClose) {
        if why != TcpClose::ClientCap {
            self.tcp_open.fetch_sub(1, Relaxed);
        }
        self.tcp_closed[why as usize].fetch_add(1, Relaxed);
    }

    /// TCP connections open now.
    pub fn tcp_open(&self) -> u64 {
        self.tcp_open.load(Relaxed)
    }

    /// Closes by reason.
    pub fn tcp_closes(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        TcpClose::ALL
            .iter()
            .map(|why| (why.label(), self.tcp_closed[*why as usize].load(Relaxed)))
    }

    /// All answers of one transport.
    pub fn total(&self, transport: Transport) -> u64 {
        self.answers[transport as usize]
            .iter()
            .flatten()
            .map(|c| c.load(Relaxed))
            .sum()
    }
}

fn zone_slot(zone: ZoneOf) -> usize {
    match zone {
        ZoneOf::Forward(id) if (id as usize) < COUNTED_ZONES => id as usize,
        ZoneOf::Forward(_) => COUNTED_ZONES,
        ZoneOf::Reverse => COUNTED_ZONES + 1,
        ZoneOf::Other => COUNTED_ZONES + 2,
    }
}

fn qtype_index(qtype: Option<RecordType>) -> usize {
    match qtype {
        Some(RecordType::A) => 0,
        Some(RecordType::AAAA) => 1,
        Some(RecordType::SRV) => 2,
        Some(RecordType::SOA) => 3,
        Some(RecordType::NS) => 4,
        Some(RecordType::PTR) => 5,
        Some(RecordType::ANY) => 6,
        Some(_) => 7,
        None => 8,
    }
}

fn rcode_index(rcode: ResponseCode) -> usize {
    match rcode {
        ResponseCode::NoError => 0,
        ResponseCode::FormErr => 1,
        ResponseCode::ServFail => 2,
        ResponseCode::NXDomain => 3,
        ResponseCode::NotImp => 4,
        ResponseCode::Refused => 5,
        ResponseCode::NotAuth => 6,
        ResponseCode::BADVERS => 7,
        ResponseCode::BADCOOKIE => 8,
        _ => 9,
    }
}
