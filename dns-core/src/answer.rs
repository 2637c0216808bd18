//! The authoritative answer logic, free of sockets: a query's view and a record table in, answer
//! bytes out. Both transports call [`respond_for`]; the tests also [`respond`], from bytes.
//!
//! Where the XDP program also answers (A and AAAA in a zone, NODATA, NXDOMAIN), the bytes are the
//! same as the kernel's: owners point to the question, names under the zone are spelled as the
//! question spells the zone (so they compress against it), the OPT record carries our payload
//! size and the client's DO bit and nothing else.

use hickory_proto::{
    op::{self, Message, OpCode, ResponseCode},
    rr::{
        DNSClass, Name, RData, Record, RecordType,
        rdata::{
            PTR,
            opt::{EdnsCode, EdnsOption},
        },
    },
    serialize::binary::{BinDecodable, BinDecoder},
};
use hostport_dns_common::dns::{FLAG_QR, FLAG_RD, FLAG_TC, HEADER_LEN, OPCODE_MASK, RCODE_MASK};

use std::{net::IpAddr, time::Duration};

use hostport_dns_common::policy::RateClass;

use crate::{
    cookies::{CookieState, Cookies},
    dns::{
        Query,
        encode::{self, SrvTargets},
        message::{SrvTargetCompression, Transport, UdpCeiling, response_to},
    },
    identity::Identity,
    rotation::Rotation,
    table::{
        Node, RecordTable, Zone,
        render::{
            addresses_a, addresses_aaaa, name_server_addresses, name_server_records,
            negative_soa_record, ptr_ttl, reverse_zone, soa_record, spelled_apex, srv_records,
            srv_target_addresses,
        },
    },
};

/// An answer and what it was, for metrics and rate limiting.
#[derive(Clone, Debug)]
pub struct Answer {
    pub bytes: Vec<u8>,
    pub rcode: ResponseCode,
    /// The question's type, when the query had a readable question.
    pub qtype: Option<RecordType>,
    pub truncated: bool,
    /// Its SRV targets are compressed: in full they did not fit (`SrvTargetCompression::ToFit`).
    pub srv_targets_compressed: bool,
    /// What rate limiting charges it as.
    pub class: RateClass,
    /// What the query's COOKIE option said.
    pub cookie: CookieState,
    /// Made for this client alone (it carries a server cookie, or its order follows its ID and
    /// cannot be rotated in place): never cached.
    pub personal: bool,
    /// The zone the question fell in, for metrics.
    pub zone: ZoneOf,
    /// Where its address records lie when they rotate by the query ID (`bytes` rotated for the
    /// ID it carries): the cache keeps one copy and rotates it for each query.
    pub rotation: Option<Rotation>,
}

/// Which served zone a question fell in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneOf {
    /// A forward zone, by its id in the table.
    Forward(u32),
    /// A reverse zone.
    Reverse,
    /// None served here (or no readable question).
    Other,
}

impl ZoneOf {
    fn of(request: &Message, table: Option<&RecordTable>) -> Self {
        let (Some(question), Some(table)) = (request.queries.first(), table) else {
            return Self::Other;
        };
        if let Some(zone) = table.zone_for(&question.name) {
            return Self::Forward(zone.id);
        }
        if table.reverse_zone_for(&question.name).is_some() {
            return Self::Reverse;
        }
        Self::Other
    }
}

impl Answer {
    /// An answer of `bytes`, charged as an error and made for nobody in particular until
    /// [`respond_for`] says otherwise.
    pub fn new(
        bytes: Vec<u8>,
        rcode: ResponseCode,
        qtype: Option<RecordType>,
        truncated: bool,
    ) -> Self {
        Self {
            bytes,
            rcode,
            qtype,
            truncated,
            srv_targets_compressed: false,
            class: RateClass::Error,
            cookie: CookieState::Absent,
            personal: false,
            zone: ZoneOf::Other,
            rotation: None,
        }
    }
}

impl Answer {
    /// An answer made elsewhere (a transfer's first message over UDP, a signed answer), read
    /// from its header: what it counts as for metrics and rate limiting. Never cached.
    pub fn made(bytes: Vec<u8>, qtype: Option<RecordType>) -> Self {
        let flags = bytes
            .get(2..4)
            .map_or(0, |f| u16::from_be_bytes([f[0], f[1]]));
        let answers = bytes
            .get(6..8)
            .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
        let rcode = ResponseCode::from(0, (flags & RCODE_MASK) as u8);
        let mut answer = Self::new(bytes, rcode, qtype, flags & FLAG_TC != 0);
        answer.class = match rcode {
            ResponseCode::NoError if answers > 0 => RateClass::Positive,
            ResponseCode::NoError | ResponseCode::NXDomain => RateClass::Negative,
            _ => RateClass::Error,
        };
        answer.personal = true;
        answer
    }
}

/// What the answer is made as, once the client policy has spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The whole answer.
    Full,
    /// A rate-limited answer's slip: TC=1 and no records, as the kernel sends it.
    Slip,
    /// A rate-limited query with a client cookie and no valid server cookie: BADCOOKIE with a
    /// fresh server cookie (RFC 7873 §5.2.3), with which the client's retry is exempt.
    BadCookie,
    /// A client outside the allow-list, in refuse mode.
    Refused,
}

/// Who asked, and how to answer them.
#[derive(Clone, Copy)]
pub struct Asker<'a> {
    /// The client's address (`None`: unknown, no cookies).
    pub client: Option<IpAddr>,
    /// Server cookies, when they are on.
    pub cookies: Option<&'a Cookies>,
    pub shape: Shape,
    /// The server's identity (NSID, CHAOS), when it tells it.
    pub identity: Option<&'a Identity>,
    /// The ceiling on UDP answers, advertised in the OPT record.
    pub udp_ceiling: UdpCeiling,
    /// When SRV targets are compressed.
    pub srv_targets: SrvTargetCompression,
}

impl Asker<'_> {
    /// Nobody in particular: no cookies, the whole answer.
    pub const ANONYMOUS: Asker<'static> = Asker {
        client: None,
        cookies: None,
        shape: Shape::Full,
        identity: None,
        udp_ceiling: UdpCeiling::DEFAULT,
        srv_targets: SrvTargetCompression::ToFit,
    };
}

/// Answers the query in `bytes` from nobody in particular (its view read here). `None` means no
/// answer at all: too short to carry an ID, or a response (answering those could start a loop
/// between two servers).
pub fn respond(bytes: &[u8], table: Option<&RecordTable>, transport: Transport) -> Option<Answer> {
    respond_for(&Query::read(bytes), table, transport, &Asker::ANONYMOUS)
}

/// Answers one query from `asker`.
pub fn respond_for(
    query: &Query,
    table: Option<&RecordTable>,
    transport: Transport,
    asker: &Asker,
) -> Option<Answer> {
    let (id, flags) = (query.id()?, query.flags()?);
    if flags & FLAG_QR != 0 {
        return None;
    }
    let mut cookie = CookieState::Absent;
    let (request, mut response, rcode) = match parse(query) {
        Parsed::Whole(request) => {
            cookie = cookie_state(&request, query, asker);
            let mut response = response_to(&request, asker.udp_ceiling);
            let rcode = match (cookie, asker.shape) {
                (CookieState::Malformed, _) => {
                    response.metadata.authoritative = false;
                    ResponseCode::FormErr
                }
                (_, Shape::Refused) => {
                    response.metadata.authoritative = false;
                    add_extended_error(&mut response, ExtendedError::Prohibited);
                    ResponseCode::Refused
                }
                (_, Shape::BadCookie) => {
                    response.metadata.authoritative = false;
                    ResponseCode::BADCOOKIE
                }
                _ => fill(&request, &mut response, table, transport, asker.identity),
            };
            announce_keepalive(&request, &mut response, transport);
            if let Some(identity) = asker.identity {
                identity.add_nsid(&request, &mut response);
            }
            add_server_cookie(cookie, asker, &mut response);
            (request, response, rcode)
        }
        // The message parsed but more follows it, or only its question holds: FORMERR, with
        // the question repeated so that the client can match it.
        Parsed::Trailing(request) | Parsed::QuestionOnly(request) => {
            let mut response = response_to(&request, asker.udp_ceiling);
            response.metadata.authoritative = false;
            (request, response, ResponseCode::FormErr)
        }
        Parsed::Unreadable => return Some(header_only(id, flags, ResponseCode::FormErr)),
    };
    let qtype = request.queries.first().map(|q| q.query_type);
    response.metadata.response_code = rcode;
    let class = rate_class(&response);
    let limit = match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => asker
            .udp_ceiling
            .limit(request.edns.as_ref().map(|edns| edns.max_payload())),
    };
    let slip = asker.shape == Shape::Slip;
    let compress_srv = asker.srv_targets.allows(transport, limit);
    // What `rotated` turns by the ID: an answer section of addresses alone.
    let addresses = are_addresses(&response.answers);
    let mut answer = encode(response, limit, qtype, slip, compress_srv);
    answer.class = class;
    answer.cookie = cookie;
    answer.zone = ZoneOf::of(&request, table);
    // Its order follows its ID: rotated in place for each query, or, where its records are not
    // laid out as rotation expects, made for this query alone.
    if rotates(&request, table) && !answer.truncated {
        answer.rotation = Rotation::find(&answer.bytes);
    }
    let unrotatable =
        answer.rotation.is_none() && addresses && rotates_records(&answer.bytes, &request, table);
    // Made for this client alone: it carries a server cookie, or its order follows its ID and
    // cannot be rotated in place.
    answer.personal = (cookie.client_cookie().is_some() && asker.cookies.is_some()) || unrotatable;
    Some(answer)
}

/// Whether the question falls in a zone that rotates answers by the query ID.
fn rotates(request: &Message, table: Option<&RecordTable>) -> bool {
    let (Some(question), Some(table)) = (request.queries.first(), table) else {
        return false;
    };
    table
        .zone_for(&question.name)
        .is_some_and(|zone| zone.spec.rotate)
}

/// Whether `bytes` answer a question in a rotating zone with more than one record (whose order
/// may then follow the ID, if they are addresses: see [`are_addresses`]).
fn rotates_records(bytes: &[u8], request: &Message, table: Option<&RecordTable>) -> bool {
    let answers = bytes
        .get(6..8)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
    answers > 1 && rotates(request, table)
}

/// Whether an answer section is addresses alone (A and AAAA), the only records [`rotated`] turns
/// by the ID: an SRV or NS answer is the same for every ID.
fn are_addresses(answers: &[Record]) -> bool {
    !answers.is_empty()
        && answers
            .iter()
            .all(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
}

/// What a response counts as for rate limiting.
fn rate_class(response: &Message) -> RateClass {
    match response.metadata.response_code {
        ResponseCode::NoError if !response.answers.is_empty() => RateClass::Positive,
        ResponseCode::NoError | ResponseCode::NXDomain => RateClass::Negative,
        _ => RateClass::Error,
    }
}

/// The query's COOKIE option, checked when cookies are on and the client is known. A query
/// with more than one is malformed (FORMERR, no cookie in the answer): a client has one client
/// cookie per server, RFC 7873 §5.1 says how it sends that one, and answering one of several
/// would pick a cookie the client may not be waiting for.
fn cookie_state(request: &Message, query: &Query, asker: &Asker) -> CookieState {
    let (Some(cookies), Some(client)) = (asker.cookies, asker.client) else {
        return CookieState::Absent;
    };
    let option = request
        .edns
        .as_ref()
        .and_then(|edns| edns.options().get(EdnsCode::Cookie));
    match option {
        // hickory-proto keeps one option of each code: the view counts them.
        Some(EdnsOption::Unknown(..)) if query.cookie_options() > 1 => CookieState::Malformed,
        Some(EdnsOption::Unknown(_, data)) => cookies.check(Some(data), client),
        Some(_) => CookieState::Malformed,
        None => CookieState::Absent,
    }
}

/// A query with a client cookie gets it back with a fresh server cookie (RFC 7873 §5.2).
fn add_server_cookie(cookie: CookieState, asker: &Asker, response: &mut Message) {
    let (Some(cookies), Some(client), Some(client_cookie)) =
        (asker.cookies, asker.client, cookie.client_cookie())
    else {
        return;
    };
    if let Some(edns) = response.edns.as_mut() {
        edns.options_mut().insert(EdnsOption::Unknown(
            u16::from(EdnsCode::Cookie),
            cookies.answer_option(client_cookie, client),
        ));
    }
}

/// What the query bytes hold.
enum Parsed {
    /// A message and nothing after it.
    Whole(Message),
    /// A message followed by bytes that belong to no section.
    Trailing(Message),
    /// Only the header and the question hold (a count promises records that are not there, an
    /// option runs past its OPT record): FORMERR with the question, as Knot DNS answers.
    QuestionOnly(Message),
    Unreadable,
}

fn parse(query: &Query) -> Parsed {
    match parse_as_is(query.bytes()) {
        // hickory-proto reads an option running past its OPT record; Knot DNS does not.
        Parsed::Whole(message)
            if message.edns.is_none() || query.opt().is_some_and(|opt| opt.options_fit) =>
        {
            return Parsed::Whole(message);
        }
        Parsed::Whole(_) | Parsed::Unreadable => {}
        parsed => return parsed,
    }
    if let Some(repaired) = repaired_opt(query) {
        return repaired;
    }
    match query.question() {
        Some(question) => question_only(query.bytes(), question.end),
        None => Parsed::Unreadable,
    }
}

fn parse_as_is(bytes: &[u8]) -> Parsed {
    let mut decoder = BinDecoder::new(bytes);
    match Message::read(&mut decoder) {
        Ok(message) if decoder.is_empty() => Parsed::Whole(message),
        Ok(message) => Parsed::Trailing(message),
        Err(_) => Parsed::Unreadable,
    }
}

/// A message whose framing holds but which does not parse, read again with its OPT record
/// repaired as Knot DNS reads it: an owner other than the root is taken as the root, and options
/// whose content does not parse (a bad client subnet, say) are ignored, as the kernel ignores
/// them (RFC 6891 §6.1.2 leaves unusable options to be skipped). Options that do not add up to
/// the record's length are not repaired: that query is malformed (FORMERR, as Knot answers).
fn repaired_opt(query: &Query) -> Option<Parsed> {
    let opt = query.opt()?;
    if !opt.options_fit {
        return None;
    }
    let bytes = query.bytes();
    if opt.owner.len() == 1 && opt.data.is_empty() {
        return None;
    }
    let mut repaired = Vec::with_capacity(bytes.len());
    repaired.extend_from_slice(&bytes[..opt.owner.start]);
    repaired.push(0);
    repaired.extend_from_slice(&bytes[opt.owner.end..]);
    if let parsed @ Parsed::Whole(_) = parse_as_is(&repaired) {
        return Some(parsed);
    }
    // The same without the options: RDLENGTH (the last two bytes before the data) 0, and the
    // data cut out. The owner is one byte now.
    let shift = opt.owner.len() - 1;
    let (data_start, data_end) = (opt.data.start - shift, opt.data.end - shift);
    let length_at = data_start - 2;
    repaired
        .get_mut(length_at..length_at + 2)?
        .copy_from_slice(&[0, 0]);
    repaired.drain(data_start..data_end);
    match parse_as_is(&repaired) {
        parsed @ Parsed::Whole(_) => Some(parsed),
        _ => None,
    }
}

/// The header and the question alone, the question ending at `end`.
fn question_only(bytes: &[u8], end: usize) -> Parsed {
    let mut decoder = BinDecoder::new(&bytes[..end]);
    let (Ok(header), Ok(query)) = (
        hickory_proto::op::Header::read(&mut decoder),
        op::Query::read(&mut decoder),
    ) else {
        return Parsed::Unreadable;
    };
    let mut message = Message::new(
        header.metadata.id,
        header.metadata.message_type,
        header.metadata.op_code,
    );
    message.metadata.recursion_desired = header.metadata.recursion_desired;
    message.metadata.checking_disabled = header.metadata.checking_disabled;
    message.add_query(query);
    Parsed::QuestionOnly(message)
}

/// Extended DNS Error codes (RFC 8914 §4) this server gives.
#[derive(Clone, Copy)]
#[repr(u16)]
enum ExtendedError {
    /// 14: before the first complete table, nothing can be answered.
    NotReady = 14,
    /// 18: the client is not on the allow-list.
    Prohibited = 18,
    /// 20: the name is in no zone served here.
    NotAuthoritative = 20,
}

/// Adds an Extended DNS Error option to a response that has EDNS (RFC 8914 §2; a client
/// without EDNS gets none).
fn add_extended_error(response: &mut Message, error: ExtendedError) {
    const EDE_OPTION: u16 = 15;
    if let Some(edns) = response.edns.as_mut() {
        let code = (error as u16).to_be_bytes();
        edns.options_mut()
            .insert(EdnsOption::Unknown(EDE_OPTION, code.to_vec()));
    }
}

/// A TCP connection with no query for this long is closed (RFC 7766 §6.2.3 suggests seconds):
/// the TCP server enforces it, and answers announce it (EDNS TCP keepalive).
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// EDNS TCP keepalive (RFC 7828): a TCP query that carries the option learns how long the
/// server keeps an idle connection (in units of 100 ms). Never over UDP (§3.2.1).
fn announce_keepalive(request: &Message, response: &mut Message, transport: Transport) {
    let asked = request
        .edns
        .as_ref()
        .is_some_and(|e| e.options().get(EdnsCode::Keepalive).is_some());
    if transport != Transport::Tcp || !asked {
        return;
    }
    let units = (TCP_IDLE_TIMEOUT.as_millis() / 100).min(u128::from(u16::MAX)) as u16;
    if let Some(edns) = response.edns.as_mut() {
        edns.options_mut().insert(EdnsOption::Unknown(
            u16::from(EdnsCode::Keepalive),
            units.to_be_bytes().to_vec(),
        ));
    }
}

/// Fills the answer's sections and returns its rcode.
fn fill(
    request: &Message,
    response: &mut Message,
    table: Option<&RecordTable>,
    transport: Transport,
    identity: Option<&Identity>,
) -> ResponseCode {
    if request.metadata.op_code == OpCode::Notify {
        // RFC 1996 §3.10: a NOTIFY from no configured primary; this server has none.
        response.metadata.authoritative = false;
        return ResponseCode::NotAuth;
    }
    if request.metadata.op_code != OpCode::Query {
        response.metadata.authoritative = false;
        return ResponseCode::NotImp;
    }
    if let Some(edns) = &request.edns
        && edns.version() > 0
    {
        response.metadata.authoritative = false;
        return ResponseCode::BADVERS;
    }
    let [question] = request.queries.as_slice() else {
        response.metadata.authoritative = false;
        return ResponseCode::FormErr;
    };
    // Records in the answer or authority section of a query mean nothing to it: answered as
    // if absent, as Knot DNS does.
    if matches!(question.query_type, RecordType::AXFR | RecordType::IXFR) {
        response.metadata.authoritative = false;
        // A transfer over UDP is not a thing (AXFR: RFC 5936 §4.2; as Knot answers, IXFR too);
        // over TCP there is nothing to transfer to anyone yet.
        return match transport {
            Transport::Udp => ResponseCode::NotImp,
            Transport::Tcp => ResponseCode::Refused,
        };
    }
    if let Some(answers) = identity.and_then(|i| i.chaos_answer(question)) {
        // RFC 4892: the server's own names in class CH.
        response.add_answers(answers);
        return ResponseCode::NoError;
    }
    if question.query_class != DNSClass::IN {
        response.metadata.authoritative = false;
        add_extended_error(response, ExtendedError::NotAuthoritative);
        return ResponseCode::Refused;
    }
    if question.query_type == RecordType::OPT {
        response.metadata.authoritative = false;
        return ResponseCode::FormErr;
    }
    let Some(table) = table else {
        // Not loaded yet: never an NXDOMAIN a load balancer would act on.
        response.metadata.authoritative = false;
        add_extended_error(response, ExtendedError::NotReady);
        return ResponseCode::ServFail;
    };
    match table.zone_for(&question.name) {
        Some(zone) if zone.spec.pending => {
            // A source of the zone has not listed: what it lacks may exist.
            response.metadata.authoritative = false;
            add_extended_error(response, ExtendedError::NotReady);
            ResponseCode::ServFail
        }
        Some(zone) => answer_in_zone(question, zone, table, response),
        None => match table.catalog() {
            Some(catalog) if catalog.apex().zone_of(&question.name) => {
                answer_catalog(question, catalog, response)
            }
            _ => answer_reverse(question, table, response),
        },
    }
}

/// A question in the catalog zone: answered from its content, as a transfer carries it (RFC
/// 9432 needs only transfers, but a consumer's refresh asks the SOA, and an operator `dig`s).
fn answer_catalog(
    question: &op::Query,
    catalog: &crate::table::catalog::Catalog,
    response: &mut Message,
) -> ResponseCode {
    let zone = &catalog.zone;
    let is_apex = question.name.to_lowercase() == *catalog.apex();
    let (mut records, exists) = catalog.lookup(&question.name, question.query_type);
    if is_apex && matches!(question.query_type, RecordType::SOA | RecordType::ANY) {
        records.insert(0, soa_record(zone, catalog.apex()));
    }
    if records.is_empty() {
        response.add_authority(negative_soa_record(zone, catalog.apex()));
        return if exists {
            ResponseCode::NoError
        } else {
            ResponseCode::NXDomain
        };
    }
    response.add_answers(records);
    ResponseCode::NoError
}

fn answer_in_zone(
    question: &op::Query,
    zone: &Zone,
    table: &RecordTable,
    response: &mut Message,
) -> ResponseCode {
    let qname = &question.name;
    let apex = spelled_apex(qname, zone);
    let Some(node) = table.node(qname) else {
        response.add_authority(negative_soa_record(zone, &apex));
        return ResponseCode::NXDomain;
    };
    let at = AtName {
        qname,
        apex: &apex,
        node,
        zone,
        table,
    };
    let (answers, additionals) = match question.query_type {
        // RFC 8482: one RRset is a complete answer to ANY; the first of these that exists.
        RecordType::ANY => [
            RecordType::A,
            RecordType::AAAA,
            RecordType::NS,
            RecordType::SRV,
            RecordType::SOA,
        ]
        .into_iter()
        .map(|qtype| at.records(qtype))
        .find(|(answers, _)| !answers.is_empty())
        .unwrap_or_default(),
        qtype => at.records(qtype),
    };
    if answers.is_empty() {
        response.add_authority(negative_soa_record(zone, &apex));
    } else {
        let answers = rotated(answers, zone, response.metadata.id);
        response.add_answers(answers);
        response.add_additionals(additionals);
    }
    ResponseCode::NoError
}

/// The answer's A or AAAA records from the address `id % count` on, wrapping around, when the
/// zone rotates answers (the kernel writes them in the same order); other records as they are.
fn rotated(mut answers: Vec<Record>, zone: &Zone, id: u16) -> Vec<Record> {
    if zone.spec.rotate && are_addresses(&answers) {
        let first = usize::from(id) % answers.len();
        answers.rotate_left(first);
    }
    answers
}

/// An existing name in a zone, as the question spells it.
struct AtName<'a> {
    qname: &'a Name,
    apex: &'a Name,
    node: &'a Node,
    zone: &'a Zone,
    table: &'a RecordTable,
}

impl AtName<'_> {
    /// The records of one type at the name, and the additional records that go with them.
    fn records(&self, qtype: RecordType) -> (Vec<Record>, Vec<Record>) {
        let ttl = self.node.ttl_in(self.zone);
        match qtype {
            RecordType::A => (addresses_a(self.qname, self.node, ttl), Vec::new()),
            RecordType::AAAA => (addresses_aaaa(self.qname, self.node, ttl), Vec::new()),
            RecordType::SRV => (
                srv_records(self.qname, self.node, ttl),
                srv_target_addresses(self.node, self.table),
            ),
            RecordType::SOA if self.node.apex => {
                (vec![soa_record(self.zone, self.apex)], Vec::new())
            }
            RecordType::NS if self.node.apex => (
                name_server_records(self.zone, self.apex),
                name_server_addresses(self.zone, self.table, self.apex),
            ),
            _ => (Vec::new(), Vec::new()),
        }
    }
}

/// PTR for the addresses the zones serve (as coreha does); any other name is not ours.
/// A question outside the forward zones: a reverse zone's, or not ours (REFUSED).
fn answer_reverse(
    question: &op::Query,
    table: &RecordTable,
    response: &mut Message,
) -> ResponseCode {
    let found = table.reverse_zone_for(&question.name);
    let (Some((network, query, extra)), Some(zone)) = (found, reverse_zone(table, found)) else {
        response.metadata.authoritative = false;
        add_extended_error(response, ExtendedError::NotAuthoritative);
        return ResponseCode::Refused;
    };
    let apex = spelled_apex(&question.name, &zone);
    let qtype = question.query_type;
    if !extra && query == network {
        let answers = match qtype {
            RecordType::SOA => vec![soa_record(&zone, &apex)],
            // RFC 8482: one RRset answers ANY; NS comes before SOA, as in the forward zones.
            RecordType::NS | RecordType::ANY => name_server_records(&zone, &apex),
            _ => Vec::new(),
        };
        if answers.is_empty() {
            response.add_authority(negative_soa_record(&zone, &apex));
        } else {
            response.add_answers(answers);
        }
        return ResponseCode::NoError;
    }
    let names = if !extra && query.is_host() {
        table.ptr_names(&query.address)
    } else {
        Vec::new()
    };
    if names.is_empty() {
        response.add_authority(negative_soa_record(&zone, &apex));
        // A network holding addresses with PTR records is an empty non-terminal.
        let exists = !extra && !query.is_host() && table.has_ptr_in(&query);
        return if exists {
            ResponseCode::NoError
        } else {
            ResponseCode::NXDomain
        };
    }
    if matches!(qtype, RecordType::PTR | RecordType::ANY) {
        let ttl = ptr_ttl(table, &names, &zone);
        response.add_answers(
            names.iter().map(|n| {
                Record::from_rdata(question.name.clone(), ttl, RData::PTR(PTR(n.clone())))
            }),
        );
    } else {
        response.add_authority(negative_soa_record(&zone, &apex));
    }
    ResponseCode::NoError
}

/// Encodes the response within `limit` bytes, what the client takes (RFC 2181 §9, RFC 6891
/// §7): additional records are left out first, a whole RRset at a time from the end, with TC
/// clear (they are not needed for the answer). When the answer and authority sections do not
/// fit with SRV targets in full, they are tried with the targets compressed, if `compress_srv`
/// (`SrvTargetCompression::allows`: a truncated answer is an error for HAProxy); only when
/// that does not fit either is the answer sent truncated: TC=1 and no records.
fn encode(
    mut response: Message,
    limit: usize,
    qtype: Option<RecordType>,
    slip: bool,
    compress_srv: bool,
) -> Answer {
    let rcode = response.metadata.response_code;
    // A slip is sent truncated whatever its size.
    if !slip {
        if let Some(bytes) = fit_additionals(&mut response, limit, SrvTargets::Full) {
            return Answer::new(bytes, rcode, qtype, false);
        }
        if compress_srv
            && encode::can_compress_srv_targets(&response)
            && let Some(bytes) = fit_additionals(&mut response, limit, SrvTargets::Compressed)
        {
            let mut answer = Answer::new(bytes, rcode, qtype, false);
            answer.srv_targets_compressed = true;
            return answer;
        }
    }
    response.answers.clear();
    response.authorities.clear();
    response.additionals.clear();
    response.metadata.truncation = true;
    let mut bytes = response.to_vec().unwrap_or_default();
    // Only a query with several long questions (FORMERR already) echoes more than UDP takes:
    // the questions go, then the OPT record, so that what is sent still fits.
    if bytes.len() > limit {
        response.queries.clear();
        bytes = response.to_vec().unwrap_or_default();
    }
    if bytes.len() > limit {
        response.edns = None;
        bytes = response.to_vec().unwrap_or_default();
    }
    Answer::new(bytes, rcode, qtype, true)
}

/// The response encoded with as many of its additional RRsets as fit in `limit`, whole and in
/// order (the OPT record is kept apart, always in), its SRV targets written as `targets` says;
/// or None, the response unchanged, when even the answer and authority sections do not fit.
/// The largest number that fits is searched by halving: a 250-target SRV answer's 500 address
/// RRsets take 10 encodings, not 500.
fn fit_additionals(response: &mut Message, limit: usize, targets: SrvTargets) -> Option<Vec<u8>> {
    let fits = |response: &Message| {
        encode::to_vec_with(response, targets)
            .ok()
            .filter(|bytes| !bytes.is_empty() && bytes.len() <= limit)
    };
    if let Some(bytes) = fits(response) {
        return Some(bytes);
    }
    let additionals = std::mem::take(&mut response.additionals);
    let ends = rrset_ends(&additionals);
    let Some(mut best) = fits(response) else {
        response.additionals = additionals;
        return None;
    };
    // Invariant: the first `fitting` RRsets fit (with `best` their encoding); `ends.len()`
    // (all of them) did not.
    let (mut fitting, mut too_many) = (0, ends.len());
    while too_many - fitting > 1 {
        let middle = (fitting + too_many) / 2;
        response.additionals = additionals[..ends[middle - 1]].to_vec();
        match fits(response) {
            Some(bytes) => (best, fitting) = (bytes, middle),
            None => too_many = middle,
        }
    }
    let kept = fitting.checked_sub(1).map_or(0, |last| ends[last]);
    response.additionals = additionals[..kept].to_vec();
    Some(best)
}

/// Where each RRset of `records` ends (a run of records of one owner and type), in order.
fn rrset_ends(records: &[Record]) -> Vec<usize> {
    let mut ends: Vec<usize> = Vec::new();
    for (i, record) in records.iter().enumerate() {
        let same_rrset = i > 0
            && records[i - 1].name == record.name
            && records[i - 1].record_type() == record.record_type();
        match ends.last_mut() {
            Some(end) if same_rrset => *end = i + 1,
            _ => ends.push(i + 1),
        }
    }
    ends
}

/// An answer with only a header: for queries too broken to echo their question.
fn header_only(id: u16, query_flags: u16, rcode: ResponseCode) -> Answer {
    let flags = FLAG_QR | (query_flags & (OPCODE_MASK | FLAG_RD)) | (u16::from(rcode) & 0x000f);
    let mut bytes = vec![0u8; HEADER_LEN];
    bytes[0..2].copy_from_slice(&id.to_be_bytes());
    bytes[2..4].copy_from_slice(&flags.to_be_bytes());
    Answer::new(bytes, rcode, None, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What libFuzzer found (issue 25): nine questions, FORMERR, which once took 585 bytes over
    /// UDP without EDNS. Kept as a fuzz seed too.
    const NINE_QUESTIONS: &[u8] =
        include_bytes!("../../fuzz/seeds/regression-nine-questions-over-udp.bin");

    /// The zone `prod.coreha.example` with `www` at `addresses`.
    fn table_with_www(addresses: &[&str]) -> RecordTable {
        let zone = crate::zone::ZoneSpec::with_defaults(
            Name::from_ascii("prod.coreha.example.").expect("a name"),
        );
        let owner = Name::from_ascii("www.prod.coreha.example.").expect("a name");
        let records: Vec<crate::records::SourceRecord> = addresses
            .iter()
            .map(|a| {
                let address: IpAddr = a.parse().expect("an address");
                crate::records::SourceRecord::new(&owner, None, address.into())
            })
            .collect();
        RecordTable::compile(&[zone], &records).0
    }

    #[test]
    fn no_udp_answer_exceeds_what_a_query_without_edns_allows() {
        let table = table_with_www(&["198.18.200.1", "2001:db8::5"]);
        let cookies = Cookies::with_secrets(vec![[7; 16]]);
        let identity = Identity::new("cp-1.test".into(), true, true).expect("an identity");
        for shape in [Shape::Full, Shape::Slip, Shape::BadCookie, Shape::Refused] {
            let asker = Asker {
                client: Some("198.18.0.2".parse().expect("an address")),
                cookies: Some(&cookies),
                shape,
                identity: Some(&identity),
                udp_ceiling: UdpCeiling::DEFAULT,
                srv_targets: SrvTargetCompression::ToFit,
            };
            let answer = respond_for(
                &Query::read(NINE_QUESTIONS),
                Some(&table),
                Transport::Udp,
                &asker,
            )
            .expect("an answer");
            assert!(
                answer.bytes.len() <= 512,
                "{shape:?}: {}",
                answer.bytes.len()
            );
            let message = Message::from_vec(&answer.bytes).expect("it parses");
            assert_eq!(message.metadata.response_code, ResponseCode::FormErr);
            assert_eq!(message.metadata.id, 0x196f);
        }
    }

    /// A query of `qdcount` questions (the name `www.prod.coreha.example`, type A, when there is
    /// one) with an OPT record holding `options` (code, data).
    fn edns_query(qdcount: u16, options: &[(u16, &[u8])]) -> Vec<u8> {
        let mut bytes = vec![0x12, 0x34, 0x01, 0x00];
        bytes.extend_from_slice(&qdcount.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 1]);
        if qdcount == 1 {
            bytes.extend_from_slice(b"\x03www\x04prod\x06coreha\x07example\x00\x00\x01\x00\x01");
        }
        let data: Vec<u8> = options
            .iter()
            .flat_map(|(code, data)| {
                let mut option = code.to_be_bytes().to_vec();
                option.extend_from_slice(&(data.len() as u16).to_be_bytes());
                option.extend_from_slice(data);
                option
            })
            .collect();
        bytes.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        bytes.extend_from_slice(&(data.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&data);
        bytes
    }

    fn answered(query: &[u8], transport: Transport) -> Message {
        let table = table_with_www(&["198.18.200.1"]);
        let cookies = Cookies::with_secrets(vec![[7; 16]]);
        let asker = Asker {
            client: Some("198.18.0.2".parse().expect("an address")),
            cookies: Some(&cookies),
            ..Asker::ANONYMOUS
        };
        let answer =
            respond_for(&Query::read(query), Some(&table), transport, &asker).expect("an answer");
        Message::from_vec(&answer.bytes).expect("it parses")
    }

    #[test]
    fn a_formerr_to_an_edns_query_keeps_the_opt_record_also_without_a_question() {
        for transport in [Transport::Udp, Transport::Tcp] {
            let message = answered(&edns_query(0, &[]), transport);
            assert_eq!(message.metadata.response_code, ResponseCode::FormErr);
            assert!(message.queries.is_empty());
            let edns = message.edns.as_ref().expect("the OPT record (RFC 6891 §7)");
            assert_eq!(edns.max_payload(), UdpCeiling::DEFAULT.bytes());
        }
    }

    #[test]
    fn two_cookie_options_are_a_formerr_without_a_cookie_in_the_answer() {
        let first: &[u8] = &[1; 8];
        let second: &[u8] = &[2; 8];
        for transport in [Transport::Udp, Transport::Tcp] {
            let one = answered(&edns_query(1, &[(10, first)]), transport);
            assert_eq!(one.metadata.response_code, ResponseCode::NoError);
            let two = answered(&edns_query(1, &[(10, first), (10, second)]), transport);
            assert_eq!(two.metadata.response_code, ResponseCode::FormErr, "{two:?}");
            assert_eq!(two.queries.len(), 1, "the question repeated");
            assert!(two.answers.is_empty());
            let edns = two.edns.as_ref().expect("the OPT record");
            assert!(
                edns.options().get(EdnsCode::Cookie).is_none(),
                "no cookie echoed: which one would it be?"
            );
        }
    }

    const SRV_ZONE: &str = "prod.coreha.example.";
    const SRV_NAME: &str = "_https._tcp.default-nginx.ingress.prod.coreha.example.";

    /// The SRV records of a fleet of `nodes` dual-stack nodes, with every target's addresses.
    fn srv_fleet(nodes: usize) -> RecordTable {
        srv_fleet_in(nodes, false)
    }

    /// [`srv_fleet`] in a zone that rotates answers, or not.
    fn srv_fleet_in(nodes: usize, rotate: bool) -> RecordTable {
        let mut zone =
            crate::zone::ZoneSpec::with_defaults(Name::from_ascii(SRV_ZONE).expect("zone"));
        zone.rotate = rotate;
        let owner = Name::from_ascii(SRV_NAME).expect("a name");
        let mut records = Vec::new();
        for i in 0..nodes {
            let target = Name::from_ascii(format!("cp-{i}.nodes.{SRV_ZONE}")).expect("a target");
            let srv = crate::records::Srv {
                priority: 0,
                weight: 1,
                port: 443,
                target: crate::dns::WireName::from_name(&target),
            };
            records.push(crate::records::SourceRecord::new(
                &owner,
                None,
                crate::records::RecordData::Srv(srv),
            ));
            let v4 = std::net::Ipv4Addr::new(198, 18, 1 + (i / 250) as u8, 1 + (i % 250) as u8);
            let v6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, i as u16);
            for address in [IpAddr::V4(v4), IpAddr::V6(v6)] {
                records.push(crate::records::SourceRecord::new(
                    &target,
                    None,
                    address.into(),
                ));
            }
        }
        RecordTable::compile(&[zone], &records).0
    }

    /// The answer to `_https._tcp.…` SRV over `transport` offering `offer` bytes, with SRV
    /// targets as `srv_targets` says.
    fn srv_answer_over(
        table: &RecordTable,
        transport: Transport,
        offer: u16,
        srv_targets: SrvTargetCompression,
    ) -> Answer {
        let bytes = srv_query(0x4d2, offer).to_vec().expect("a query");
        // A ceiling above the offers the tests make (up to 16384), or the offer itself.
        let ceiling = UdpCeiling::new(offer.max(16384)).expect("a ceiling");
        let asker = Asker {
            srv_targets,
            udp_ceiling: ceiling,
            ..Asker::ANONYMOUS
        };
        respond_for(&Query::read(&bytes), Some(table), transport, &asker).expect("an answer")
    }

    /// `_https._tcp.…` SRV with ID `id`, offering `offer` bytes.
    fn srv_query(id: u16, offer: u16) -> Message {
        let mut query = Message::new(id, op::MessageType::Query, OpCode::Query);
        query.add_query(op::Query::query(
            Name::from_ascii(SRV_NAME).expect("a name"),
            RecordType::SRV,
        ));
        let mut edns = op::Edns::new();
        edns.set_max_payload(offer);
        query.set_edns(edns);
        query
    }

    fn srv_answer(table: &RecordTable, offer: u16, srv_targets: SrvTargetCompression) -> Answer {
        srv_answer_over(table, Transport::Udp, offer, srv_targets)
    }

    /// The SRV targets of an answer (`nodes` of them, `cp-N.nodes.<zone>`, read back whole),
    /// after checking that every target in the additional section has its A and AAAA (the last
    /// one may have its A alone: the section is cut between whole RRsets).
    fn srv_targets_read(message: &Message, nodes: usize) -> Vec<String> {
        let mut targets: Vec<String> = message
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::SRV(srv) if srv.port == 443 => Some(srv.target.to_ascii()),
                _ => None,
            })
            .collect();
        targets.sort();
        let mut expected: Vec<String> = (0..nodes)
            .map(|i| format!("cp-{i}.nodes.{SRV_ZONE}"))
            .collect();
        expected.sort();
        assert_eq!(targets, expected, "every target, whole");
        for record in &message.additionals {
            let owner = record.name.to_ascii();
            assert!(targets.contains(&owner), "{record:?}");
            let types: Vec<RecordType> = message
                .additionals
                .iter()
                .filter(|r| r.name.to_ascii() == owner)
                .map(|r| r.record_type())
                .collect();
            let last = message.additionals.last().map(|r| r.name.to_ascii()) == Some(owner.clone());
            if !(last && types == [RecordType::A]) {
                assert_eq!(types, [RecordType::A, RecordType::AAAA], "{owner}");
            }
        }
        targets
    }

    /// How many times `labels` are spelled out in `bytes`.
    fn spelled(bytes: &[u8], labels: &[u8]) -> usize {
        bytes.windows(labels.len()).filter(|w| *w == labels).count()
    }

    /// The targets' common part (`nodes.prod.coreha.example`), in full.
    const TARGETS_SUFFIX: &[u8] = b"\x05nodes\x04prod\x06coreha\x07example\x00";

    #[test]
    fn srv_targets_are_compressed_only_where_in_full_they_would_be_truncated() {
        // 250 nodes: in full the SRV records take over 8192 bytes; compressed they fit.
        let fleet = srv_fleet(250);
        let never = srv_answer(&fleet, 8192, SrvTargetCompression::Never);
        assert!(never.truncated && !never.srv_targets_compressed);
        let to_fit = srv_answer(&fleet, 8192, SrvTargetCompression::ToFit);
        assert!(!to_fit.truncated && to_fit.srv_targets_compressed);
        assert!(to_fit.bytes.len() <= 8192, "{}", to_fit.bytes.len());
        assert_eq!(spelled(&to_fit.bytes, b"\x05nodes"), 1, "`nodes` once");
        assert_eq!(
            spelled(&to_fit.bytes, TARGETS_SUFFIX),
            0,
            "pointers to the zone"
        );
        let message = Message::from_vec(&to_fit.bytes).expect("it parses");
        assert!(!message.metadata.truncation);
        srv_targets_read(&message, 250);
        assert!(!message.additionals.is_empty(), "the addresses that fit");
        // Offered 16384, the same records fit in full.
        let raised = srv_answer(&fleet, 16384, SrvTargetCompression::ToFit);
        assert!(!raised.truncated && !raised.srv_targets_compressed);
        assert_eq!(spelled(&raised.bytes, TARGETS_SUFFIX), 250);
        // Over TCP, in full.
        let tcp = srv_answer_over(&fleet, Transport::Tcp, 8192, SrvTargetCompression::ToFit);
        assert!(!tcp.truncated && !tcp.srv_targets_compressed);
        assert_eq!(spelled(&tcp.bytes, TARGETS_SUFFIX), 250);

        // 150 nodes fit in full (their addresses left out first): RFC 2782's bytes, whatever
        // the setting.
        let fleet = srv_fleet(150);
        let never = srv_answer(&fleet, 8192, SrvTargetCompression::Never);
        let to_fit = srv_answer(&fleet, 8192, SrvTargetCompression::ToFit);
        assert!(!to_fit.truncated && !to_fit.srv_targets_compressed);
        assert_eq!(to_fit.bytes, never.bytes);
        assert_eq!(
            spelled(&to_fit.bytes, TARGETS_SUFFIX),
            150,
            "every target in full"
        );

        // Past what even compressed targets fit: truncated, as before.
        let too_many = srv_answer(&srv_fleet(400), 8192, SrvTargetCompression::ToFit);
        assert!(too_many.truncated && !too_many.srv_targets_compressed);
        let message = Message::from_vec(&too_many.bytes).expect("it parses");
        assert!(message.answers.is_empty());
    }

    #[test]
    fn compressed_srv_targets_past_16_kib_point_only_where_a_pointer_reaches() {
        // 1,500 targets in full take about 75,000 bytes: over the largest UDP ceiling. Offered
        // 65507, compressed: names past offset 0x3fff cannot be pointed at, so the targets
        // after them point at earlier ones, and every one reads back whole.
        let fleet = srv_fleet(1500);
        let answer = srv_answer(&fleet, 65507, SrvTargetCompression::ToFit);
        assert!(!answer.truncated && answer.srv_targets_compressed);
        assert!(answer.bytes.len() > 0x3fff, "{}", answer.bytes.len());
        let message = Message::from_vec(&answer.bytes).expect("it parses");
        srv_targets_read(&message, 1500);
    }

    #[test]
    fn an_srv_answer_in_a_rotating_zone_is_the_same_for_every_id_and_cached() {
        let table = srv_fleet_in(250, true);
        assert!(
            rotates(&srv_query(1, 8192), Some(&table)),
            "the zone rotates"
        );
        let answer_to = |id: u16| {
            let query = srv_query(id, 8192).to_vec().expect("a query");
            respond(&query, Some(&table), Transport::Udp).expect("an answer")
        };
        let (one, two) = (answer_to(1), answer_to(2));
        assert!(one.srv_targets_compressed && !one.truncated);
        assert_eq!(one.bytes[2..], two.bytes[2..], "the same but for the ID");
        for answer in [one, two] {
            assert!(answer.rotation.is_none(), "SRV records do not rotate");
            assert!(!answer.personal, "the same bytes for every ID: cached");
        }
    }

    #[test]
    fn a_client_offering_1232_or_less_gets_srv_targets_in_full_or_truncated() {
        // 30 SRV records take about 1,600 bytes in full, about 800 compressed.
        let fleet = srv_fleet(30);
        for offer in [512, 1232] {
            let answer = srv_answer(&fleet, offer, SrvTargetCompression::ToFit);
            assert!(
                answer.truncated && !answer.srv_targets_compressed,
                "{offer}"
            );
        }
        // Offering more, a small answer too is encoded with its targets compressed (here, not by
        // hickory-proto), and reads back whole.
        let to_fit = srv_answer(&fleet, 1400, SrvTargetCompression::ToFit);
        assert!(!to_fit.truncated && to_fit.srv_targets_compressed);
        assert!(to_fit.bytes.len() <= 1400, "{}", to_fit.bytes.len());
        let message = Message::from_vec(&to_fit.bytes).expect("it parses");
        srv_targets_read(&message, 30);
        assert_eq!(message.metadata.id, 0x4d2);
        assert_eq!(message.edns.map(|e| e.max_payload()), Some(16384));
        let never = srv_answer(&fleet, 1400, SrvTargetCompression::Never);
        assert!(never.truncated);
    }
}
