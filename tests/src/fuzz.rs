//! The XDP program's mutation campaign: real client queries and the test corpora, mutated, run
//! through BPF_PROG_TEST_RUN, each verdict checked against an oracle that does not share the
//! program's code:
//! - every PASS leaves the packet byte for byte untouched;
//! - every TX is a well-formed answer (IPv4 header and UDP checksums verified, addresses and
//!   ports turned around) whose DNS bytes equal the userspace server's answer to the same query;
//! - every DROP is a martian decision the oracle reaches on its own (a group MAC, destination or
//!   source; port 0; a source no one sends from, on that interface).
//!
//! The first packet that breaks a rule stops the campaign with its bytes in hex.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use hostport_dns::{dns::message::Transport, server::answer::respond};
use hostport_dns_common::counters::{Counter, Verdict};

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
    src_port: u16,
    dns: Vec<u8>,
}

fn headers(frame: &[u8]) -> Option<Headers> {
    let dst_mac: [u8; 6] = frame.get(0..6)?.try_into().ok()?;
    let src_mac: [u8; 6] = frame.get(6..12)?.try_into().ok()?;
    let mut at = 12;
    let mut ether_type = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
    if ether_type == 0x8100 || ether_type == 0x88a8 {
        at += 4;
        ether_type = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
    }
    at += 2;
    let (src, udp_at) = match ether_type {
        0x0800 => {
            let h = frame.get(at..at + 20)?;
            let src = IpAddr::from(<[u8; 4]>::try_from(&h[12..16]).ok()?);
            (src, at + 20)
        }
        0x86dd => {
            let h = frame.get(at..at + 40)?;
            let src = IpAddr::from(<[u8; 16]>::try_from(&h[8..24]).ok()?);
            (src, at + 40)
        }
        _ => return None,
    };
    let udp = frame.get(udp_at..udp_at + 8)?;
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    let dns = frame.get(udp_at + 8..udp_at + udp_len.max(8))?.to_vec();
    Some(Headers {
        dst_mac,
        src_mac,
        src,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dns,
    })
}

/// Whether the oracle would drop this frame arriving on `ifindex`.
fn is_martian(h: &Headers, ifindex: u32, local: &[IpAddr]) -> bool {
    // A group bit in either MAC: a broadcast or multicast frame, or a forged source (no station
    // sends from a group address).
    if h.dst_mac[0] & 1 != 0 || h.src_mac[0] & 1 != 0 || h.src_port == 0 {
        return true;
    }
    let on_lo = ifindex == LOOPBACK_IFINDEX;
    match h.src {
        IpAddr::V4(a) => {
            a.octets()[0] >= 224
                || (!on_lo && (a.is_loopback() || a.octets()[0] == 0 || local.contains(&h.src)))
        }
        IpAddr::V6(a) => {
            a.is_multicast()
                || (!on_lo && (a.is_loopback() || a.is_unspecified() || local.contains(&h.src)))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `packets` mutated frames (or until `budget` passes), alternating between lo and a veth
/// of a namespace of its own as the ingress interface. Panics at the first broken rule.
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
    let program = Program::load(&zone(), &local);
    // SAFETY: a NUL-terminated interface name.
    let veth = unsafe { libc::if_nametoindex(c"fz0".as_ptr()) };
    assert_ne!(veth, 0, "the campaign's veth exists");
    let seeds = seeds();
    let mut rng = Rng(seed | 1);
    let mut tally = Tally::default();
    let started = Instant::now();
    while tally.packets < packets && started.elapsed() < budget {
        let mut frame = seeds[rng.index(seeds.len())].clone();
        mutate(&mut rng, &mut frame, &seeds);
        let ifindex = if rng.index(2) == 0 {
            LOOPBACK_IFINDEX
        } else {
            veth
        };
        let (verdict, out) = program.run_on(&frame, ifindex);
        let fail = |why: &str| -> ! {
            panic!(
                "packet {} (seed {seed}, interface {ifindex}): {why}\n in: {}\nout: {}",
                tally.packets,
                hex(&frame),
                hex(&out)
            )
        };
        match verdict {
            XDP_PASS => {
                if out != frame {
                    fail("a passed packet was changed");
                }
                tally.passed += 1;
            }
            XDP_TX => {
                check_answer(&program, &frame, &out).unwrap_or_else(|why| fail(&why));
                tally.answered += 1;
            }
            XDP_DROP => {
                let martian = headers(&frame).is_some_and(|h| is_martian(&h, ifindex, &local));
                if !martian {
                    fail("dropped without being a martian");
                }
                tally.dropped += 1;
            }
            other => fail(&format!("verdict {other}")),
        }
        tally.packets += 1;
    }
    tally.elapsed = started.elapsed();
    tally.by_counter = Counter::ALL
        .iter()
        .map(|c| (*c, program.counters.get(*c)))
        .filter(|(_, n)| *n > 0)
        .collect();
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
    tally
}

/// The answer's headers are the query's turned around, its checksums verify, and its DNS bytes
/// are the userspace server's answer to the same query.
fn check_answer(program: &Program, frame: &[u8], out: &[u8]) -> Result<(), String> {
    let query = headers(frame).ok_or("answered a frame the oracle cannot read")?;
    let parsed = std::panic::catch_unwind(|| parse_checked(out))
        .map_err(|_| "the answer's headers or checksums are wrong".to_owned())?;
    if parsed.dst_mac != query.src_mac || parsed.src_mac != query.dst_mac {
        return Err("MAC addresses not turned around".into());
    }
    if parsed.dst != query.src || parsed.dst_port != query.src_port {
        return Err("not sent back to the client".into());
    }
    let userspace = respond(&query.dns, Some(&program.table), Transport::Udp)
        .ok_or("userspace would not answer")?;
    if parsed.dns != userspace.bytes {
        return Err(format!(
            "XDP and userspace answers differ: userspace {}",
            hex(&userspace.bytes)
        ));
    }
    Ok(())
}
