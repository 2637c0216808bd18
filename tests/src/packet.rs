//! Ethernet frames around DNS messages: built for BPF_PROG_TEST_RUN, and taken apart again with
//! every checksum verified independently of the code under test.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const CLIENT_PORT: u16 = 40_000;

/// How the DNS message is carried.
#[derive(Clone, Debug)]
pub struct Frame {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub vlan: Option<u16>,
    /// Compute the UDP checksum (otherwise 0, as kxdpgun sends over IPv4).
    pub udp_checksum: bool,
    /// Bytes after the IP packet (Ethernet padding of short frames).
    pub trailer: Vec<u8>,
    /// The destination MAC address (the server's by default).
    pub dst_mac: [u8; 6],
    /// The source MAC address (the client's by default).
    pub src_mac: [u8; 6],
    /// IPv4 TOS / IPv6 traffic class (its low two bits are the ECN field).
    pub traffic_class: u8,
}

impl Frame {
    pub fn v4(dst: &str) -> Self {
        Self {
            src: IpAddr::V4("198.18.0.2".parse().expect("an address")),
            dst: IpAddr::V4(dst.parse().expect("an address")),
            src_port: CLIENT_PORT,
            dst_port: 1053,
            vlan: None,
            udp_checksum: true,
            trailer: Vec::new(),
            dst_mac: SERVER_MAC,
            src_mac: CLIENT_MAC,
            traffic_class: 0,
        }
    }

    pub fn v6(dst: &str) -> Self {
        Self {
            src: IpAddr::V6("2001:db8::2".parse().expect("an address")),
            dst: IpAddr::V6(dst.parse().expect("an address")),
            ..Self::v4("198.18.0.1")
        }
    }

    /// From `src` to `dst`, either family (IPv6 when `dst` holds a colon).
    pub fn between(src: &str, dst: &str) -> Self {
        let base = if dst.contains(':') {
            Self::v6(dst)
        } else {
            Self::v4(dst)
        };
        Self {
            src: src.parse().expect("an address"),
            ..base
        }
    }

    /// The frame carrying `dns` as its UDP payload.
    pub fn build(&self, dns: &[u8]) -> Vec<u8> {
        let mut udp = Vec::with_capacity(8 + dns.len());
        udp.extend_from_slice(&self.src_port.to_be_bytes());
        udp.extend_from_slice(&self.dst_port.to_be_bytes());
        udp.extend_from_slice(&((8 + dns.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(dns);
        if self.udp_checksum {
            let check = udp_checksum(self.src, self.dst, &udp);
            udp[6..8].copy_from_slice(&check.to_be_bytes());
        }
        let (ether_type, ip) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                (0x0800u16, ipv4_header(s, d, udp.len(), self.traffic_class))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                (0x86dd, ipv6_header(s, d, udp.len(), self.traffic_class))
            }
            _ => panic!("mixed address families"),
        };
        let mut frame = Vec::new();
        frame.extend_from_slice(&self.dst_mac);
        frame.extend_from_slice(&self.src_mac);
        if let Some(vlan) = self.vlan {
            frame.extend_from_slice(&0x8100u16.to_be_bytes());
            frame.extend_from_slice(&vlan.to_be_bytes());
        }
        frame.extend_from_slice(&ether_type.to_be_bytes());
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&udp);
        frame.extend_from_slice(&self.trailer);
        frame
    }
}

fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, payload: usize, tos: u8) -> Vec<u8> {
    let mut h = vec![0x45, tos, 0, 0, 0x12, 0x34, 0, 0, 63, 17, 0, 0];
    h[2..4].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let check = !fold(sum_be(&h));
    h[10..12].copy_from_slice(&check.to_be_bytes());
    h
}

fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, payload: usize, traffic_class: u8) -> Vec<u8> {
    let mut h = vec![0x60 | traffic_class >> 4, traffic_class << 4, 0, 0];
    h.extend_from_slice(&(payload as u16).to_be_bytes());
    h.extend_from_slice(&[17, 63]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h
}

/// RFC 1071 over big-endian words (written here independently of the responder's code).
fn sum_be(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, udp_len: usize) -> u32 {
    let addrs = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => [s.octets().to_vec(), d.octets().to_vec()].concat(),
        (IpAddr::V6(s), IpAddr::V6(d)) => [s.octets().to_vec(), d.octets().to_vec()].concat(),
        _ => panic!("mixed address families"),
    };
    sum_be(&addrs) + 17 + udp_len as u32
}

fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let check = !fold(pseudo_sum(src, dst, udp.len()) + sum_be(udp));
    if check == 0 { 0xffff } else { check }
}

/// A frame taken apart, its headers checked.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    /// IPv4 TOS / IPv6 traffic class.
    pub traffic_class: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub dns: Vec<u8>,
}

/// Parses a frame and verifies its IPv4 header checksum, lengths and UDP checksum; panics with
/// the reason if anything is off.
pub fn parse_checked(frame: &[u8]) -> Parsed {
    try_parse(frame).unwrap_or_else(|why| panic!("{why}"))
}

/// [`parse_checked`] that says what is off instead of panicking.
pub fn try_parse(frame: &[u8]) -> Result<Parsed, String> {
    let ensure = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_owned()) };
    let field = |range: std::ops::Range<usize>| {
        frame
            .get(range)
            .ok_or_else(|| "the frame is too short".to_owned())
    };
    let dst_mac: [u8; 6] = field(0..6)?.try_into().map_err(|_| "6 bytes")?;
    let src_mac: [u8; 6] = field(6..12)?.try_into().map_err(|_| "6 bytes")?;
    let tag = field(12..14)?;
    let (vlan, mut at) = if u16::from_be_bytes([tag[0], tag[1]]) == 0x8100 {
        let vlan = field(14..16)?;
        (Some(u16::from_be_bytes([vlan[0], vlan[1]])), 16)
    } else {
        (None, 12)
    };
    let kind = field(at..at + 2)?;
    let ether_type = u16::from_be_bytes([kind[0], kind[1]]);
    at += 2;
    let (src, dst, ttl, traffic_class, udp) = match ether_type {
        0x0800 => {
            let h = field(at..at + 20)?;
            ensure(fold(sum_be(h)) == 0xffff, "IPv4 header checksum")?;
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            ensure(
                at + total == frame.len(),
                "IPv4 total length matches the frame",
            )?;
            let src = IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
            (src, dst, h[8], h[1], &frame[at + 20..])
        }
        0x86dd => {
            let h = field(at..at + 40)?;
            let payload = u16::from_be_bytes([h[4], h[5]]) as usize;
            ensure(
                at + 40 + payload == frame.len(),
                "IPv6 payload length matches the frame",
            )?;
            let address = |r: std::ops::Range<usize>| {
                <[u8; 16]>::try_from(&h[r])
                    .map(Ipv6Addr::from)
                    .map_err(|_| "16 bytes".to_owned())
            };
            let (src, dst) = (IpAddr::V6(address(8..24)?), IpAddr::V6(address(24..40)?));
            (src, dst, h[7], (h[0] << 4) | (h[1] >> 4), &frame[at + 40..])
        }
        other => return Err(format!("unexpected EtherType {other:#x}")),
    };
    ensure(udp.len() >= 8, "a UDP header")?;
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    ensure(udp_len == udp.len(), "UDP length matches the IP payload")?;
    let check = u16::from_be_bytes([udp[6], udp[7]]);
    ensure(check != 0, "UDP checksum present")?;
    ensure(
        fold(pseudo_sum(src, dst, udp.len()) + sum_be(udp)) == 0xffff,
        "UDP checksum verifies",
    )?;
    Ok(Parsed {
        dst_mac,
        src_mac,
        vlan,
        src,
        dst,
        ttl,
        traffic_class,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        dns: udp[8..].to_vec(),
    })
}

/// A DNS query message in wire form.
pub struct QueryBuilder {
    pub id: u16,
    pub flags: u16,
    pub name: Vec<u8>,
    pub qtype: u16,
    pub qclass: u16,
    /// EDNS: (payload size, DO bit, version, options bytes).
    pub edns: Option<(u16, bool, u8, Vec<u8>)>,
}

impl QueryBuilder {
    /// A query for `name` (dotted, case kept) of type `qtype`, RD set, no EDNS.
    pub fn new(name: &str, qtype: u16) -> Self {
        Self {
            id: 0x4242,
            flags: 0x0100,
            name: wire(name),
            qtype,
            qclass: 1,
            edns: None,
        }
    }

    pub fn edns(mut self, payload: u16, dnssec_ok: bool) -> Self {
        self.edns = Some((payload, dnssec_ok, 0, Vec::new()));
        self
    }

    /// Adds the EDNS option `code` with `data` (EDNS on with 1232 bytes unless set before).
    pub fn option(mut self, code: u16, data: &[u8]) -> Self {
        let edns = self.edns.get_or_insert((1232, false, 0, Vec::new()));
        edns.3.extend_from_slice(&code.to_be_bytes());
        edns.3.extend_from_slice(&(data.len() as u16).to_be_bytes());
        edns.3.extend_from_slice(data);
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&self.id.to_be_bytes());
        m.extend_from_slice(&self.flags.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(self.edns.is_some())]);
        m.extend_from_slice(&self.name);
        m.extend_from_slice(&self.qtype.to_be_bytes());
        m.extend_from_slice(&self.qclass.to_be_bytes());
        if let Some((payload, dnssec_ok, version, options)) = &self.edns {
            m.push(0);
            m.extend_from_slice(&41u16.to_be_bytes());
            m.extend_from_slice(&payload.to_be_bytes());
            m.extend_from_slice(&[0, *version, if *dnssec_ok { 0x80 } else { 0 }, 0]);
            m.extend_from_slice(&(options.len() as u16).to_be_bytes());
            m.extend_from_slice(options);
        }
        m
    }
}

/// A dotted name in wire form, case kept ("." is the root).
pub fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}
