//! The XDP program's mutation campaign: real client queries and the test corpora, mutated, run
//! through BPF_PROG_TEST_RUN, each verdict checked against an oracle that does not share the
//! program's code:
//! - every PASS leaves the packet byte for byte untouched;
//! - every TX is a well-formed answer (IPv4 header and UDP checksums verified, addresses and
//!   ports turned around) whose DNS bytes equal the userspace server's answer to the same query;
//! - every TX leaves from the queried address and port for the sender's;
//! - every verdict is the one the oracle predicts on its own, both ways: what must be dropped (a
//!   martian: a group MAC, destination or source; port 0; a source no one sends from, on that
//!   interface; a client outside the allow-list) is dropped, and nothing else is but a
//!   rate-limited query; what is no query to this host is passed;
//! - the queries the kernel holds the answer to are answered (before the mutations);
//! - a quarter of the campaign runs with an allow-list and rate limiting (slips on): a limited
//!   client's answer is the full one, userspace's slip (TC=1, empty), or a drop, each counted
//!   under the reason the oracle gives it; an exempt client is never limited.
//!
//! The first packet that breaks a rule stops the campaign with its bytes in hex.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use hickory_proto::op::Message;
use hostport_dns::clients::{ClientsConfig, Outside, RateLimit};
use hostport_dns_common::counters::{Counter, Verdict};
use hostport_dns_core::{
    answer::{Asker, Shape, respond, respond_for},
    dns::{Query, message::Transport},
};

use crate::{
    Rng,
    netns::NetNs,
    packet::{Frame, QueryBuilder, parse_checked},
    vectors::{CAPTURE_ZONE, client_queries},
    xdp::{Program, XDP_DROP, XDP_PASS, XDP_TX},
};

const SERVER_V4: &str = "198.18.0.1";
const SERVER_V6: &str = "2001:db8::1";
const LOOPBACK_IFINDEX: u32 = 1;

/// The capture zone plus the shapes the kernel treats apart: many records, an empty
/// non-terminal, a dual-stack name, a second zone whose SOA userspace writes.
fn zone() -> String {
    let many: Vec<String> = (1..=17).map(|i| format!("198.18.9.{i}")).collect();
    format!(
        "{CAPTURE_ZONE}      dual: [198.18.0.20, \"2001:db8::20\"]
      many: [{}]
      x.deep.ent: 198.18.0.40
  - name: odd.test
    soa: {{ mname: ns1.elsewhere.test., rname: hostmaster }}
    records:
      www: 198.18.1.2
",
        many.join(", ")
    )
}

/// What a campaign saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub packets: u64,
    pub answered: u64,
    pub passed: u64,
    pub dropped: u64,
    /// Answers that were rate-limited slips (TC=1, empty).
    pub slipped: u64,
    /// Packets run through the program with an allow-list and rate limiting.
    pub guarded: u64,
    pub elapsed: Duration,
    /// Packets by the counter the program counted them under.
    pub by_counter: Vec<(Counter, u64)>,
}

/// Seed frames: every captured client query over IPv4 and IPv6, with and without a VLAN tag, and
/// built queries for every kind of name and type.
fn seeds() -> Vec<Vec<u8>> {
    let mut queries: Vec<Vec<u8>> = client_queries().into_iter().map(|c| c.query).collect();
    for name in [
        "default-nginx.ingress.prod.coreha.example",
        "dual.prod.coreha.example",
        "many.prod.coreha.example",
        "deep.ent.prod.coreha.example",
        "missing.prod.coreha.example",
        "prod.coreha.example",
        "www.odd.test",
        "nothing.odd.test",
        "elsewhere.example",
    ] {
        for qtype in [1u16, 28, 15, 33, 6, 255] {
            queries.push(QueryBuilder::new(name, qtype).bytes());
            queries.push(QueryBuilder::new(name, qtype).edns(1232, true).bytes());
            queries.push(QueryBuilder::new(name, qtype).edns(512, false).bytes());
        }
    }
    let mut frames = Vec::new();
    for query in &queries {
        for base in [Frame::v4(SERVER_V4), Frame::v6(SERVER_V6)] {
            frames.push(base.build(query));
            frames.push(
                Frame {
                    vlan: Some(42),
                    ..base
                }
                .build(query),
            );
        }
    }
    frames
}

/// The shortest frame a driver hands to XDP.
const ETH_HEADER_LEN: usize = 14;
/// The longest frame the campaign builds (an Ethernet MTU's worth).
const MAX_FRAME_LEN: usize = 1514;

/// Values a field is often wrong with.
const INTERESTING_BYTES: [u8; 8] = [0, 1, 0x3f, 0x40, 0x7f, 0x80, 0xc0, 0xff];

/// One to four random edits of `frame` (one, most often), most of them in its DNS part; half of
/// the time the IP and UDP lengths are then made to match again, so that the edit reaches the
/// DNS parser instead of stopping at the length check.
fn mutate(rng: &mut Rng, frame: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let edits = match rng.index(8) {
        0..=3 => 1,
        4 | 5 => 2,
        _ => 3 + rng.index(2),
    };
    for _ in 0..edits {
        let len = frame.len();
        // Headers are 42 to 66 bytes: three edits in four land after them.
        let at = if rng.index(4) == 0 || len <= 46 {
            rng.index(len)
        } else {
            42 + rng.index(len - 42)
        };
        match rng.index(8) {
            0 => frame[at] ^= 1 << rng.index(8),
            1 => frame[at] = rng.next_u64() as u8,
            2 => frame[at] = INTERESTING_BYTES[rng.index(INTERESTING_BYTES.len())],
            3 if at + 1 < len => {
                let value: u16 = match rng.index(4) {
                    0 => 0,
                    1 => 0xffff,
                    2 => u16::from_be_bytes([frame[at], frame[at + 1]]).wrapping_add(1),
                    _ => u16::from_be_bytes([frame[at], frame[at + 1]]).wrapping_sub(1),
                };
                frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
            }
            // BPF_PROG_TEST_RUN takes no frame shorter than an Ethernet header (no driver hands
            // XDP one either).
            4 => frame.truncate(at.max(ETH_HEADER_LEN)),
            5 => {
                let extra = 1 + rng.index(16);
                frame.extend((0..extra).map(|_| rng.next_u64() as u8));
            }
            6 => {
                let other = &seeds[rng.index(seeds.len())];
                let from = rng.index(other.len());
                let take = (1 + rng.index(32)).min(other.len() - from);
                let end = (at + take).min(len);
                frame[at..end].copy_from_slice(&other[from..from + (end - at)]);
            }
            _ => {
                let take = (1 + rng.index(8)).min(len - at);
                let piece = frame[at..at + take].to_vec();
                frame.splice(at..at, piece);
            }
        }
    }
    frame.truncate(MAX_FRAME_LEN);
    if rng.index(2) == 0 {
        fix_lengths(frame);
    }
}

/// Sets the IP and UDP length fields to what the frame holds (checksums are left as they are:
/// the kernel path does not verify them).
fn fix_lengths(frame: &mut [u8]) {
    let mut at = 12;
    let Some(t) = frame.get(at..at + 2) else {
        return;
    };
    let mut ether_type = u16::from_be_bytes([t[0], t[1]]);
    if ether_type == 0x8100 {
        at += 4;
        let Some(t) = frame.get(at..at + 2) else {
            return;
        };
        ether_type = u16::from_be_bytes([t[0], t[1]]);
    }
    at += 2;
    let udp_at = match ether_type {
        0x0800 if frame.len() >= at + 28 => {
            let total = (frame.len() - at) as u16;
            frame[at + 2..at + 4].copy_from_slice(&total.to_be_bytes());
            at + 20
        }
        0x86dd if frame.len() >= at + 48 => {
            let payload = (frame.len() - at - 40) as u16;
            frame[at + 4..at + 6].copy_from_slice(&payload.to_be_bytes());
            at + 40
        }
        _ => return,
    };
    let udp_len = (frame.len() - udp_at) as u16;
    frame[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
}

/// The headers of a frame as the oracle reads them (independently of the program).
struct Headers {
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    dns: Vec<u8>,
}

/// What the oracle says must become of a frame: every verdict is checked both ways (what must
/// be dropped is dropped, and nothing else is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Not a UDP datagram to the served port of an answering address, in a frame the program
    /// reads: passed untouched.
    Passed,
    /// A source that cannot have sent it: dropped.
    Martian,
    /// A client outside the allow-list (drop mode): dropped.
    NotAllowed,
    /// A query from a client: answered (as userspace answers it) or passed untouched; when its
    /// prefix is rate limited (not exempt), also slipped (TC=1, empty) or dropped.
    Query { limited: bool },
}

/// The client policy of a campaign's program, as the oracle reads it: prefixes (address,
/// length).
struct Guard {
    allow: Vec<(IpAddr, u8)>,
    exempt: Vec<(IpAddr, u8)>,
}

/// Positive, negative and error answers a second per prefix in the guarded campaign (the
/// campaign runs far faster: most of its queries are limited).
const GUARD_RATE: u32 = 100;
/// Every second limited answer is a slip.
const GUARD_SLIP: u32 = 2;

impl Guard {
    /// The seed clients' prefixes are allowed; the IPv6 one is exempt from rate limiting.
    fn new() -> Self {
        let prefix = |a: &str, len: u8| (a.parse().expect("an address"), len);
        Self {
            allow: vec![prefix("198.18.0.0", 24), prefix("2001:db8::", 64)],
            exempt: vec![prefix("2001:db8::", 64)],
        }
    }

    fn clients(&self) -> ClientsConfig {
        let nets = |list: &[(IpAddr, u8)]| {
            list.iter()
                .map(|(a, len)| format!("{a}/{len}").parse().expect("a prefix"))
                .collect()
        };
        ClientsConfig {
            allow: nets(&self.allow),
            outside: Outside::Drop,
            rate_limit: RateLimit {
                responses_per_second: GUARD_RATE,
                negative_per_second: GUARD_RATE,
                errors_per_second: GUARD_RATE,
                slip: GUARD_SLIP,
                exempt: nets(&self.exempt),
            },
            ..ClientsConfig::default()
        }
    }
}

fn in_prefix(addr: IpAddr, (net, len): &(IpAddr, u8)) -> bool {
    let len = u32::from(*len);
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            len == 0 || (u32::from(a) ^ u32::from(*n)) >> (32 - len) == 0
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            len == 0 || (u128::from(a) ^ u128::from(*n)) >> (128 - len) == 0
        }
        _ => false,
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (this host's address sets hold both
/// forms as one).
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

/// The headers of a UDP datagram to the served port that the program reads (one VLAN tag at
/// most; IPv4 without options or fragments; IPv6 without extension headers; lengths that
/// agree; an IPv6 UDP checksum), or None: a frame to pass.
fn read(frame: &[u8]) -> Option<Headers> {
    let dst_mac: [u8; 6] = frame.get(0..6)?.try_into().ok()?;
    let src_mac: [u8; 6] = frame.get(6..12)?.try_into().ok()?;
    let mut at = 12;
    let mut ether_type = be16(frame, at)?;
    if ether_type == 0x8100 || ether_type == 0x88a8 {
        at += 4;
        ether_type = be16(frame, at)?;
    }
    at += 2;
    let (src, dst, payload_len, udp_at, v6) = match ether_type {
        0x0800 => {
            let h = frame.get(at..at + 20)?;
            let fragment = be16(h, 6)? & 0x3fff;
            if h[0] >> 4 != 4 || h[9] != 17 || h[0] & 0x0f != 5 || fragment != 0 {
                return None;
            }
            let total = be16(h, 2)? as usize;
            if total < 20 || at + total > frame.len() {
                return None;
            }
            let src = IpAddr::from(<[u8; 4]>::try_from(&h[12..16]).ok()?);
            let dst = IpAddr::from(<[u8; 4]>::try_from(&h[16..20]).ok()?);
            (src, dst, total - 20, at + 20, false)
        }
        0x86dd => {
            let h = frame.get(at..at + 40)?;
            if h[0] >> 4 != 6 || h[6] != 17 {
                return None;
            }
            let payload = be16(h, 4)? as usize;
            if at + 40 + payload > frame.len() {
                return None;
            }
            let src = IpAddr::from(<[u8; 16]>::try_from(&h[8..24]).ok()?);
            let dst = IpAddr::from(<[u8; 16]>::try_from(&h[24..40]).ok()?);
            (src, dst, payload, at + 40, true)
        }
        _ => return None,
    };
    let udp = frame.get(udp_at..udp_at + 8)?;
    let udp_len = be16(udp, 4)? as usize;
    if be16(udp, 2)? != 1053 || udp_len != payload_len || udp_len < 8 || (v6 && udp[6..8] == [0, 0])
    {
        return None;
    }
    Some(Headers {
        dst_mac,
        src_mac,
        src,
        dst,
        src_port: be16(udp, 0)?,
        dst_port: 1053,
        dns: frame.get(udp_at + 8..udp_at + udp_len)?.to_vec(),
    })
}

/// What must become of `frame` arriving on `ifindex`, with `guard` the program's client policy
/// (None: every client, unlimited).
fn fate(
    frame: &[u8],
    ifindex: u32,
    local: &[IpAddr],
    guard: Option<&Guard>,
) -> (Fate, Option<Headers>) {
    let Some(h) = read(frame) else {
        return (Fate::Passed, None);
    };
    // Loopback destinations are this host's only on lo; other addresses only if they answer.
    let loopback = match h.dst {
        IpAddr::V4(a) => a.octets()[0] == 127,
        IpAddr::V6(a) => a.is_loopback(),
    };
    if (loopback && ifindex != LOOPBACK_IFINDEX) || !local.contains(&canonical(h.dst)) {
        return (Fate::Passed, Some(h));
    }
    if is_martian(&h, ifindex, local) {
        return (Fate::Martian, Some(h));
    }
    let Some(guard) = guard else {
        return (Fate::Query { limited: false }, Some(h));
    };
    if !guard.allow.iter().any(|p| in_prefix(h.src, p)) {
        return (Fate::NotAllowed, Some(h));
    }
    let exempt = guard.exempt.iter().any(|p| in_prefix(h.src, p));
    (Fate::Query { limited: !exempt }, Some(h))
}

/// Whether the oracle would drop this query arriving on `ifindex` as a martian.
fn is_martian(h: &Headers, ifindex: u32, local: &[IpAddr]) -> bool {
    // A group bit in either MAC: a broadcast or multicast frame, or a forged source (no station
    // sends from a group address).
    if h.dst_mac[0] & 1 != 0 || h.src_mac[0] & 1 != 0 || h.src_port == 0 {
        return true;
    }
    let on_lo = ifindex == LOOPBACK_IFINDEX;
    let own = local.contains(&canonical(h.src));
    match h.src {
        IpAddr::V4(a) => {
            a.octets()[0] >= 224 || (!on_lo && (a.is_loopback() || a.octets()[0] == 0 || own))
        }
        IpAddr::V6(a) => {
            a.is_multicast() || (!on_lo && (a.is_loopback() || a.is_unspecified() || own))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `packets` mutated frames (or until `budget` passes), alternating between lo and a veth
/// of a namespace of its own as the ingress interface: three quarters through a program open to
/// every client, a quarter through one with an allow-list and rate limiting (slips on). Panics
/// at the first broken rule.
pub fn run(packets: u64, budget: Duration, seed: u64) -> Tally {
    let ns = NetNs::new("fuzz");
    ns.ip(&["link", "add", "fz0", "type", "veth", "peer", "name", "fz1"]);
    ns.ip(&["link", "set", "fz0", "up"]);
    ns.run(move || campaign(packets, budget, seed))
}

fn campaign(packets: u64, budget: Duration, seed: u64) -> Tally {
    let local: Vec<IpAddr> = [SERVER_V4, SERVER_V6, "127.0.0.1", "::1"]
        .iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
    // SAFETY: a NUL-terminated interface name.
    let veth = unsafe { libc::if_nametoindex(c"fz0".as_ptr()) };
    assert_ne!(veth, 0, "the campaign's veth exists");
    let started = Instant::now();
    let open = Program::load(&zone(), &local);
    must_answer(&open, veth);
    let open_packets = packets - packets / 4;
    let mut seeds = seeds();
    let mut tally = mutations(
        &open,
        None,
        &seeds,
        &local,
        veth,
        (open_packets, budget.mul_f64(0.75)),
        seed,
    );
    let guard = Guard::new();
    let guarded = Program::load_with_clients(&zone(), &local, guard.clients());
    must_answer_guarded(&guarded, veth);
    // Queries from outside the allow-list, to be dropped, among the seeds.
    for query in [
        QueryBuilder::new("default-nginx.ingress.prod.coreha.example", 1).bytes(),
        QueryBuilder::new("dual.prod.coreha.example", 28)
            .edns(1232, false)
            .bytes(),
    ] {
        seeds.push(Frame::between(OUTSIDER_V4, SERVER_V4).build(&query));
        seeds.push(Frame::between(OUTSIDER_V6, SERVER_V6).build(&query));
    }
    let rest = budget.saturating_sub(started.elapsed());
    let second = mutations(
        &guarded,
        Some(&guard),
        &seeds,
        &local,
        veth,
        (packets - open_packets, rest),
        seed.rotate_left(32),
    );
    tally.guarded = second.packets;
    tally.packets += second.packets;
    tally.answered += second.answered;
    tally.passed += second.passed;
    tally.dropped += second.dropped;
    tally.slipped += second.slipped;
    for (counter, n) in second.by_counter {
        match tally.by_counter.iter_mut().find(|(c, _)| *c == counter) {
            Some((_, total)) => *total += n,
            None => tally.by_counter.push((counter, n)),
        }
    }
    tally.elapsed = started.elapsed();
    tally
}

/// Clients outside the guarded campaign's allow-list.
const OUTSIDER_V4: &str = "198.18.5.2";
const OUTSIDER_V6: &str = "2001:db8:1::2";

/// Frames the program must answer (XDP_TX, userspace's answer), on both interfaces: A and AAAA
/// queries (with and without EDNS, over IPv4 and IPv6, with and without a VLAN tag) for names
/// the kernel holds, for a missing name (NXDOMAIN) and for an empty non-terminal (NODATA).
fn must_answer_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for name in [
        "default-nginx.ingress.prod.coreha.example",
        "dual.prod.coreha.example",
        "missing.prod.coreha.example",
        "deep.ent.prod.coreha.example",
    ] {
        for qtype in [1u16, 28] {
            for query in [
                QueryBuilder::new(name, qtype).bytes(),
                QueryBuilder::new(name, qtype).edns(1232, false).bytes(),
            ] {
                for base in [Frame::v4(SERVER_V4), Frame::v6(SERVER_V6)] {
                    frames.push(base.build(&query));
                    frames.push(
                        Frame {
                            vlan: Some(42),
                            ..base
                        }
                        .build(&query),
                    );
                }
            }
        }
    }
    frames
}

/// Runs `frame` through `program` and checks that it is answered in full.
fn expect_answered(program: &Program, frame: &[u8], ifindex: u32) {
    let (verdict, out) = program.run_on(frame, ifindex);
    let h = read(frame).expect("a frame the oracle reads");
    let result = match verdict {
        XDP_TX => check_answer(program, &h, &out, false).map(|_| ()),
        other => Err(format!("verdict {other} where an answer is due")),
    };
    if let Err(why) = result {
        panic!(
            "interface {ifindex}: {why}\n in: {}\nout: {}",
            hex(frame),
            hex(&out)
        );
    }
}

/// What must be answered is answered (the mutation campaign alone would let a program that
/// passed everything up through).
fn must_answer(program: &Program, veth: u32) {
    for frame in must_answer_frames() {
        for ifindex in [LOOPBACK_IFINDEX, veth] {
            expect_answered(program, &frame, ifindex);
        }
    }
}

/// The guarded program: the exempt client is answered every time, clients outside the
/// allow-list are dropped, and a flood from a limited client is answered up to the rate, then
/// slipped (TC=1, empty) and dropped in turn.
fn must_answer_guarded(program: &Program, veth: u32) {
    let frames = must_answer_frames();
    let exempt: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| matches!(read(f), Some(h) if h.src.is_ipv6()))
        .collect();
    for _ in 0..4 {
        for frame in &exempt {
            for ifindex in [LOOPBACK_IFINDEX, veth] {
                expect_answered(program, frame, ifindex);
            }
        }
    }
    let query = QueryBuilder::new("default-nginx.ingress.prod.coreha.example", 1).bytes();
    for outsider in [
        Frame::between(OUTSIDER_V4, SERVER_V4),
        Frame::between(OUTSIDER_V6, SERVER_V6),
    ] {
        let frame = outsider.build(&query);
        let (verdict, _) = program.run_on(&frame, veth);
        assert_eq!(
            verdict, XDP_DROP,
            "a client outside the allow-list: {outsider:?}"
        );
    }
    let frame = Frame::v4(SERVER_V4).build(&query);
    let h = read(&frame).expect("a frame the oracle reads");
    let (mut full, mut slips, mut drops) = (0u32, 0u32, 0u32);
    for _ in 0..3 * GUARD_RATE {
        match program.run_on(&frame, veth) {
            (XDP_TX, out) => match check_answer(program, &h, &out, true) {
                Ok(true) => slips += 1,
                Ok(false) => full += 1,
                Err(why) => panic!("the flood: {why}"),
            },
            (XDP_DROP, _) => drops += 1,
            (other, _) => panic!("the flood: verdict {other}"),
        }
    }
    // One budget a second: a flood across a second boundary gets two.
    assert!(
        (GUARD_RATE..=2 * GUARD_RATE).contains(&full) && slips > 0 && drops > 0,
        "a flood at {} queries: {full} answered, {slips} slipped, {drops} dropped",
        3 * GUARD_RATE
    );
}

/// Runs up to `packets` mutated frames through `program` (or until the time is up), each
/// checked against the oracle for the policy `guard`.
fn mutations(
    program: &Program,
    guard: Option<&Guard>,
    seeds: &[Vec<u8>],
    local: &[IpAddr],
    veth: u32,
    (packets, budget): (u64, Duration),
    seed: u64,
) -> Tally {
    let before: Vec<u64> = Counter::ALL
        .iter()
        .map(|c| program.counters.get(*c))
        .collect();
    let mut rng = Rng(seed | 1);
    let mut tally = Tally::default();
    let (mut martians, mut not_allowed, mut limited) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while tally.packets < packets && started.elapsed() < budget {
        let mut frame = seeds[rng.index(seeds.len())].clone();
        mutate(&mut rng, &mut frame, seeds);
        let ifindex = if rng.index(2) == 0 {
            LOOPBACK_IFINDEX
        } else {
            veth
        };
        let (fate, headers) = fate(&frame, ifindex, local, guard);
        let (verdict, out) = program.run_on(&frame, ifindex);
        let policy = if guard.is_some() { "guarded" } else { "open" };
        let fail = |why: &str| -> ! {
            panic!(
                "packet {} of the {policy} campaign (seed {seed}, interface {ifindex}): {why}\n in: {}\nout: {}",
                tally.packets,
                hex(&frame),
                hex(&out)
            )
        };
        match (verdict, fate, &headers) {
            (XDP_PASS, Fate::Passed | Fate::Query { .. }, _) => {
                if out != frame {
                    fail("a passed packet was changed");
                }
                tally.passed += 1;
            }
            (XDP_TX, Fate::Query { limited }, Some(h)) => {
                let slip = check_answer(program, h, &out, limited).unwrap_or_else(|why| fail(&why));
                tally.answered += 1;
                tally.slipped += u64::from(slip);
            }
            (XDP_DROP, Fate::Martian, _) => martians += 1,
            (XDP_DROP, Fate::NotAllowed, _) => not_allowed += 1,
            (XDP_DROP, Fate::Query { limited: true }, _) => limited += 1,
            (verdict, fate, _) => {
                let verdict = match verdict {
                    XDP_PASS => "passed".to_owned(),
                    XDP_TX => "answered".to_owned(),
                    XDP_DROP => "dropped".to_owned(),
                    other => format!("verdict {other}"),
                };
                fail(&format!("{verdict}, where the oracle says {fate:?}"))
            }
        }
        if verdict == XDP_DROP {
            tally.dropped += 1;
        }
        tally.packets += 1;
    }
    tally.elapsed = started.elapsed();
    tally.by_counter = Counter::ALL
        .iter()
        .zip(&before)
        .map(|(c, before)| (*c, program.counters.get(*c) - before))
        .filter(|(_, n)| *n > 0)
        .collect();
    let count = |counter: Counter| {
        tally
            .by_counter
            .iter()
            .find(|(c, _)| *c == counter)
            .map_or(0, |(_, n)| *n)
    };
    let counted: u64 = tally.by_counter.iter().map(|(_, n)| n).sum();
    assert_eq!(counted, tally.packets, "every packet counted exactly once");
    for (verdict, seen) in [
        (Verdict::Answered, tally.answered),
        (Verdict::Passed, tally.passed),
        (Verdict::Dropped, tally.dropped),
    ] {
        let counted: u64 = tally
            .by_counter
            .iter()
            .filter(|(c, _)| c.verdict() == verdict)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            counted, seen,
            "{verdict:?}: the counters agree with the verdicts"
        );
    }
    // Each drop and slip under the reason the oracle gave it.
    assert_eq!(
        (
            count(Counter::DropMartian),
            count(Counter::DropNotAllowed),
            count(Counter::DropRateLimited),
            count(Counter::SlipRateLimited)
        ),
        (martians, not_allowed, limited, tally.slipped),
        "martian, not-allowed and rate-limited drops, and slips: counted as the oracle predicted"
    );
    // A long enough guarded run meets every decision.
    if guard.is_some() && tally.packets >= 20_000 {
        assert!(
            not_allowed > 0 && limited > 0 && tally.slipped > 0,
            "the guarded campaign: {not_allowed} not allowed, {limited} limited, {} slipped",
            tally.slipped
        );
    }
    tally
}

/// The answer leaves from the queried address and port to the sender's, its MAC addresses turned
/// around, its checksums verify, and its DNS bytes are the userspace server's answer to the same
/// query, or (a `limited` client) userspace's slip: TC=1 and empty. Ok(true) for a slip.
fn check_answer(
    program: &Program,
    query: &Headers,
    out: &[u8],
    limited: bool,
) -> Result<bool, String> {
    let parsed = std::panic::catch_unwind(|| parse_checked(out))
        .map_err(|_| "the answer's headers or checksums are wrong".to_owned())?;
    if parsed.dst_mac != query.src_mac || parsed.src_mac != query.dst_mac {
        return Err("MAC addresses not turned around".into());
    }
    if parsed.dst != query.src || parsed.dst_port != query.src_port {
        return Err("not sent back to the client's address and port".into());
    }
    if parsed.src != query.dst || parsed.src_port != query.dst_port {
        return Err("not sent from the queried address and port".into());
    }
    let userspace = respond(&query.dns, Some(&program.table), Transport::Udp)
        .ok_or("userspace would not answer")?;
    if parsed.dns == userspace.bytes {
        return Ok(false);
    }
    if limited {
        let slip = respond_for(
            &Query::read(&query.dns),
            Some(&program.table),
            Transport::Udp,
            &Asker {
                shape: Shape::Slip,
                ..Asker::ANONYMOUS
            },
        )
        .ok_or("userspace would not answer")?;
        let message = Message::from_vec(&parsed.dns).map_err(|e| format!("a slip: {e}"))?;
        let empty = message.answers.is_empty()
            && message.authorities.is_empty()
            && message.additionals.is_empty();
        if parsed.dns == slip.bytes && message.metadata.truncation && empty {
            return Ok(true);
        }
    }
    Err(format!(
        "XDP and userspace answers differ: userspace {}",
        hex(&userspace.bytes)
    ))
}
