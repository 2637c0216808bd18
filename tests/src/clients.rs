//! Real DNS clients (dig, kdig) and raw exchanges, run inside a namespace.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    time::Duration,
};

use serde_yaml_ng::Value;

use crate::netns::{NetNs, sh};

/// Pause between two polls of `udp_exchange_many`: the resolution of its measurements.
const POLL_PAUSE: Duration = Duration::from_micros(250);

/// How long a client waits for an answer.
const TIMEOUT: Duration = Duration::from_secs(3);

/// One record as a client printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rr {
    pub name: String,
    pub ttl: u32,
    pub rtype: String,
    pub data: String,
}

/// What dig or kdig reported.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// NOERROR, NXDOMAIN, ...
    pub status: String,
    /// Header flags that were set, lower case: qr, aa, tc, rd, ra, ad, cd.
    pub flags: Vec<String>,
    pub answer: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
    /// The server's EDNS UDP payload size, if it sent an OPT record.
    pub edns_udp: Option<u64>,
}

impl Reply {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// The answer's data fields, sorted.
    pub fn answer_data(&self) -> Vec<String> {
        let mut data: Vec<String> = self.answer.iter().map(|r| r.data.clone()).collect();
        data.sort();
        data
    }
}

/// `dig @server -p port <args>` in the namespace, read through its YAML output. Without a DNS
/// cookie (dig sends one by default, and queries with cookies are answered by userspace), unless
/// `args` asks for one with `+cookie`.
pub fn dig(ns: &NetNs, server: &str, port: u16, args: &[&str]) -> Reply {
    let out = sh(ns
        .command("dig")
        .args([format!("@{server}"), "-p".into(), port.to_string()])
        .args(["+yaml", "+tries=1", "+timeout=3", "+norecurse", "+nocookie"])
        .args(args));
    let text = String::from_utf8_lossy(&out.stdout);
    parse_dig_yaml(&text).unwrap_or_else(|| panic!("dig {args:?} gave no answer:\n{text}"))
}

fn parse_dig_yaml(text: &str) -> Option<Reply> {
    let docs: Value = serde_yaml_ng::from_str(text).ok()?;
    let message = docs.as_sequence()?.iter().find_map(|d| {
        let m = d.get("message")?;
        (m.get("type")?.as_str()? == "AUTH_RESPONSE"
            || m.get("type")?.as_str()? == "RECURSIVE_RESPONSE")
            .then_some(m)
    })?;
    let data = message.get("response_message_data")?;
    let section = |name: &str| -> Vec<Rr> {
        data.get(name)
            .and_then(Value::as_sequence)
            .map(|rrs| {
                rrs.iter()
                    .filter_map(|r| parse_rr_text(r.as_str()?))
                    .collect()
            })
            .unwrap_or_default()
    };
    Some(Reply {
        status: data.get("status")?.as_str()?.to_owned(),
        flags: data
            .get("flags")?
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        answer: section("ANSWER_SECTION"),
        authority: section("AUTHORITY_SECTION"),
        additional: section("ADDITIONAL_SECTION"),
        edns_udp: data
            .get("OPT_PSEUDOSECTION")
            .and_then(|o| o.get("EDNS")?.get("udp")?.as_u64()),
    })
}

/// "name ttl class type data..." as dig prints a record.
fn parse_rr_text(text: &str) -> Option<Rr> {
    let mut fields = text.split_whitespace();
    let name = fields.next()?.to_owned();
    let ttl = fields.next()?.parse().ok()?;
    let _class = fields.next()?;
    let rtype = fields.next()?.to_owned();
    let data = fields.collect::<Vec<_>>().join(" ");
    Some(Rr {
        name,
        ttl,
        rtype,
        data,
    })
}

/// `kdig @server -p port <args>` in the namespace, read through its JSON output (RFC 8427).
pub fn kdig(ns: &NetNs, server: &str, port: u16, args: &[&str]) -> Reply {
    let out = sh(ns
        .command("kdig")
        .args([format!("@{server}"), "-p".into(), port.to_string()])
        .args(["+json", "+retry=0", "+timeout=3", "+norecurse"])
        .args(args));
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kdig {args:?}: {e}:\n{text}"));
    let rcode = json["RCODE"].as_u64().unwrap_or(99);
    let flags = ["QR", "AA", "TC", "RD", "RA", "AD", "CD"]
        .into_iter()
        .filter(|f| json[*f].as_u64() == Some(1))
        .map(str::to_lowercase)
        .collect();
    let section = |name: &str| -> Vec<Rr> {
        json[name]
            .as_array()
            .map(|rrs| {
                rrs.iter()
                    .map(|r| Rr {
                        name: r["NAME"].as_str().unwrap_or("").to_owned(),
                        ttl: r["TTL"].as_u64().unwrap_or(0) as u32,
                        rtype: r["TYPEname"].as_str().unwrap_or("").to_owned(),
                        data: rdata_of(r),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    Reply {
        status: rcode_name(rcode).to_owned(),
        flags,
        answer: section("answerRRs"),
        authority: section("authorityRRs"),
        additional: section("additionalRRs"),
        edns_udp: None,
    }
}

/// The rdata field kdig names after the type (rdataA, rdataAAAA, rdataSOA, ...).
fn rdata_of(rr: &serde_json::Value) -> String {
    let field = format!("rdata{}", rr["TYPEname"].as_str().unwrap_or(""));
    match &rr[field.as_str()] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => rr["RDATAHEX"].as_str().unwrap_or("").to_owned(),
        other => other.to_string(),
    }
}

pub fn rcode_name(rcode: u64) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        16 => "BADVERS",
        _ => "OTHER",
    }
}

/// A UDP socket of `server`'s address family on an ephemeral port, reads timing out after
/// `timeout`.
fn udp_socket_for(server: SocketAddr, timeout: Duration) -> Option<UdpSocket> {
    let any: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .ok()?;
    let socket = UdpSocket::bind(any).ok()?;
    socket.set_read_timeout(Some(timeout)).ok()?;
    Some(socket)
}

/// Sends `query` over UDP from inside the namespace and returns the answer's bytes, or None
/// after the timeout.
pub fn udp_exchange(ns: &NetNs, server: SocketAddr, query: Vec<u8>) -> Option<Vec<u8>> {
    ns.run(move || {
        let socket = udp_socket_for(server, TIMEOUT)?;
        socket.send_to(&query, server).ok()?;
        let mut buf = vec![0u8; 65535];
        let (n, _) = socket.recv_from(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    })
}

/// Like [`udp_exchange`], from a *connected* socket, which takes answers only from `server`:
/// None unless the answer came from the address and port it was sent to.
pub fn udp_exchange_connected(
    ns: &NetNs,
    server: SocketAddr,
    query: Vec<u8>,
    timeout: Duration,
) -> Option<Vec<u8>> {
    ns.run(move || {
        let socket = udp_socket_for(server, timeout)?;
        socket.connect(server).ok()?;
        socket.send(&query).ok()?;
        let mut buf = vec![0u8; 65535];
        let n = socket.recv(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    })
}

/// Sends each query over one TCP connection from inside the namespace and returns the answers.
pub fn tcp_exchange(ns: &NetNs, server: SocketAddr, queries: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    ns.run(move || {
        let mut stream = TcpStream::connect_timeout(&server, TIMEOUT).expect("TCP connect");
        stream.set_read_timeout(Some(TIMEOUT)).ok();
        let mut answers = Vec::new();
        for query in &queries {
            stream
                .write_all(&(query.len() as u16).to_be_bytes())
                .expect("send length");
            stream.write_all(query).expect("send query");
        }
        for _ in &queries {
            let mut len = [0u8; 2];
            if stream.read_exact(&mut len).is_err() {
                break;
            }
            let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
            stream.read_exact(&mut answer).expect("read answer");
            answers.push(answer);
        }
        answers
    })
}

/// Sends `query` over UDP from inside the namespace again and again until an answer satisfies
/// `done` or `within` passes; returns that answer.
pub fn udp_exchange_many(
    ns: &NetNs,
    server: SocketAddr,
    query: Vec<u8>,
    within: Duration,
    done: impl Fn(&[u8]) -> bool + Send + 'static,
) -> Option<Vec<u8>> {
    ns.run(move || {
        let socket = udp_socket_for(server, Duration::from_millis(200))?;
        let deadline = std::time::Instant::now() + within;
        let mut buf = vec![0u8; 65535];
        while std::time::Instant::now() < deadline {
            socket.send_to(&query, server).ok()?;
            if let Ok((n, _)) = socket.recv_from(&mut buf)
                && done(&buf[..n])
            {
                return Some(buf[..n].to_vec());
            }
            // Poll, but leave the CPUs to the server under test (two cores here).
            std::thread::sleep(POLL_PAUSE);
        }
        None
    })
}

/// The Extended DNS Error codes (RFC 8914, EDNS option 15) an answer carries.
pub fn extended_errors(answer: &[u8]) -> Vec<u16> {
    let message = hickory_proto::op::Message::from_vec(answer).expect("a parsable answer");
    message
        .edns
        .iter()
        .flat_map(|e| e.options().as_ref().iter())
        .filter_map(|(_, option)| match option {
            hickory_proto::rr::rdata::opt::EdnsOption::Unknown(15, data) => {
                Some(u16::from_be_bytes([*data.first()?, *data.get(1)?]))
            }
            _ => None,
        })
        .collect()
}

/// The SOA serial `server` gives for `zone` (asked with dig, one try of a second), if it answers.
pub fn soa_serial(ns: &NetNs, server: &str, zone: &str) -> Option<u32> {
    let addr: SocketAddr = server.parse().expect("an address");
    let out = ns
        .command("dig")
        .args([
            format!("@{}", addr.ip()),
            "-p".into(),
            addr.port().to_string(),
            "+short".into(),
            "+tries=1".into(),
            "+timeout=1".into(),
            zone.into(),
            "SOA".into(),
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}
