//! The client policy on the wire, on both paths: the agent in one namespace (XDP native on its
//! veth, or userspace alone), clients with several source addresses in another. The allow-list,
//! refusal, DNS cookies with dig and kdig (and a secret rotated under a running agent), rate
//! limiting with slips that dig retries over TCP, an exempt prefix and a cookie client answered
//! every time.

use std::{
    io::Read,
    net::{IpAddr, SocketAddr, TcpStream, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hickory_proto::{
    op::Message,
    rr::rdata::opt::{EdnsCode, EdnsOption},
};
use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::{dig, extended_errors},
    eventually,
    netns::{Link, NetNs, sh},
    packet::QueryBuilder,
    require_root,
    vectors::CAPTURE_ZONE,
};

const PORT: u16 = 1053;
/// A client address outside the allow-lists below (which end at .63).
const OUTSIDER: &str = "198.18.0.66";
/// A client address in the rate limiter's exempt prefix.
const EXEMPT: &str = "198.18.0.130";
const NAME: &str = "default-nginx.ingress.prod.coreha.example";
const SECRET_1: &str = "0123456789abcdef0123456789abcdef";
const SECRET_2: &str = "fedcba9876543210fedcba9876543210";

fn secret(hex: &str) -> [u8; 16] {
    let bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    bytes.try_into().expect("16 bytes")
}

/// The capture zone with a `clients:` section.
fn config(dir: &TempDir, clients: &str) -> String {
    let path = dir.write("config.yaml", &format!("{CAPTURE_ZONE}clients:\n{clients}"));
    path.to_str().expect("UTF-8").to_owned()
}

/// The agent on the server end: XDP native on the veth, or userspace alone.
fn start(link: &Link, config: &str, with_xdp: bool) -> Agent {
    if with_xdp {
        Agent::start_native(link, &["--config", config], &[])
    } else {
        Agent::start(&link.server_ns, &["--config", config])
    }
}

/// Gives the client end more source addresses.
fn add_client_addresses(link: &Link, addresses: &[&str]) {
    for address in addresses {
        link.client_ns.ip(&[
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            &link.client.ifname,
        ]);
    }
}

/// Sends each query from `source` to the server and collects the answers that arrive within
/// `wait` of the last query (in order of arrival).
fn udp_from(
    ns: &NetNs,
    source: &str,
    server: SocketAddr,
    queries: Vec<Vec<u8>>,
    wait: Duration,
) -> Vec<Vec<u8>> {
    udp_burst(ns, source, server, queries, wait).answers
}

/// What a burst of queries from one client got back.
struct Burst {
    answers: Vec<Vec<u8>>,
    /// From the first query sent to the last answer received.
    span: Duration,
}

impl Burst {
    /// The one-second rate-limit budgets the burst can have drawn on: every second it spanned,
    /// and one more where it crossed a second's boundary. A loaded machine answers a burst over
    /// a longer span, and so from more budgets.
    fn budgets(&self) -> usize {
        usize::try_from(self.span.as_secs()).unwrap_or(usize::MAX) + 2
    }
}

/// Sends every query from `source` to `server` at once, then reads answers until none has come
/// for `wait` (at least [`ANSWER_GAP`]: a loaded machine's userspace can pause that long).
fn udp_burst(
    ns: &NetNs,
    source: &str,
    server: SocketAddr,
    queries: Vec<Vec<u8>>,
    wait: Duration,
) -> Burst {
    let source: IpAddr = source.parse().expect("an address");
    ns.run(move || {
        let socket = UdpSocket::bind(SocketAddr::new(source, 0)).expect("bind the client");
        socket
            .set_read_timeout(Some(wait.max(ANSWER_GAP)))
            .expect("timeout");
        let started = std::time::Instant::now();
        for query in &queries {
            socket.send_to(query, server).expect("send");
        }
        let mut answers = Vec::new();
        let mut span = Duration::ZERO;
        let mut buf = vec![0u8; 65535];
        while let Ok((n, _)) = socket.recv_from(&mut buf) {
            answers.push(buf[..n].to_vec());
            span = started.elapsed();
        }
        Burst { answers, span }
    })
}

/// The shortest wait for a next answer before a burst counts as answered.
const ANSWER_GAP: Duration = Duration::from_secs(3);

/// Connects from `source` and sends one query over TCP: the answer, or None when the server
/// closed the connection without one.
fn tcp_from(ns: &NetNs, source: &str, server: SocketAddr, query: Vec<u8>) -> Option<Vec<u8>> {
    let source: IpAddr = source.parse().expect("an address");
    ns.run(move || {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        socket
            .bind(&SocketAddr::new(source, 0).into())
            .expect("bind the client");
        socket
            .connect_timeout(&server.into(), Duration::from_secs(3))
            .ok()?;
        let mut stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        use std::io::Write;
        stream.write_all(&(query.len() as u16).to_be_bytes()).ok()?;
        stream.write_all(&query).ok()?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).ok()?;
        let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut answer).ok()?;
        Some(answer)
    })
}

fn server_v4(link: &Link) -> SocketAddr {
    SocketAddr::new(link.server.ipv4.parse().expect("an address"), PORT)
}

fn rcode(answer: &[u8]) -> u8 {
    answer[3] & 0x0f
}

#[test]
fn clients_outside_the_allow_list_get_nothing_on_either_path() {
    require_root();
    for with_xdp in [true, false] {
        let link = Link::new("acl");
        let dir = TempDir::new("acl");
        add_client_addresses(&link, &[OUTSIDER]);
        let config = config(&dir, "  allow: [198.18.0.0/26, \"2001:db8::/64\"]\n");
        let agent = start(&link, &config, with_xdp);
        let server = server_v4(&link);
        // A (the kernel's when XDP runs) and SRV (always userspace's).
        let queries = vec![
            QueryBuilder::new(NAME, 1).bytes(),
            QueryBuilder::new(NAME, 33).bytes(),
        ];
        let inside = udp_from(
            &link.client_ns,
            link.client.ipv4,
            server,
            queries.clone(),
            Duration::from_secs(1),
        );
        assert_eq!(
            inside.len(),
            2,
            "xdp {with_xdp}: an allowed client is answered"
        );
        let outside = udp_from(
            &link.client_ns,
            OUTSIDER,
            server,
            queries.clone(),
            Duration::from_secs(1),
        );
        assert!(outside.is_empty(), "xdp {with_xdp}: {outside:?}");
        assert_eq!(
            tcp_from(&link.client_ns, OUTSIDER, server, queries[1].clone()),
            None,
            "xdp {with_xdp}: the connection is closed"
        );
        assert!(
            tcp_from(
                &link.client_ns,
                link.client.ipv4,
                server,
                queries[1].clone()
            )
            .is_some()
        );
        let path = if with_xdp { "xdp" } else { "userspace" };
        let dropped = agent.metric(
            "hostport_dns_client_policy",
            &[("path", path), ("decision", "not_allowed")],
        );
        assert!(
            dropped >= 2.0,
            "xdp {with_xdp}: {dropped} counted on {path}"
        );
        let refused_tcp = agent.metric(
            "hostport_dns_client_policy",
            &[("path", "userspace"), ("decision", "not_allowed")],
        );
        assert!(refused_tcp >= 1.0, "the TCP connection is counted");
    }
}

#[test]
fn refuse_mode_answers_outsiders_refused_with_the_reason() {
    require_root();
    let link = Link::new("refuse");
    let dir = TempDir::new("refuse");
    add_client_addresses(&link, &[OUTSIDER]);
    let config = config(&dir, "  allow: [198.18.0.0/26]\n  outside: refuse\n");
    let agent = start(&link, &config, true);
    let server = server_v4(&link);
    let query = QueryBuilder::new(NAME, 1).edns(1232, false).bytes();
    let answers = udp_from(
        &link.client_ns,
        OUTSIDER,
        server,
        vec![query.clone()],
        Duration::from_secs(2),
    );
    assert_eq!(answers.len(), 1);
    assert_eq!(rcode(&answers[0]), 5, "REFUSED");
    assert_eq!(extended_errors(&answers[0]), [18], "EDE 18 (Prohibited)");
    let over_tcp = tcp_from(&link.client_ns, OUTSIDER, server, query).expect("an answer over TCP");
    assert_eq!(rcode(&over_tcp), 5);
    let inside = dig(&link.client_ns, link.server.ipv4, PORT, &[NAME, "A"]);
    assert_eq!(inside.status, "NOERROR");
    assert!(
        agent.metric("hostport_dns_xdp_passed", &[("reason", "refused_client")]) >= 1.0,
        "XDP left the refusal to userspace:\n{}",
        agent.metrics()
    );
}

/// The COOKIE option of an answer.
fn cookie_of(answer: &[u8]) -> Option<Vec<u8>> {
    let message = Message::from_vec(answer).expect("an answer");
    match message.edns?.options().get(EdnsCode::Cookie)? {
        EdnsOption::Unknown(_, data) => Some(data.clone()),
        _ => None,
    }
}

/// kdig's answer's COOKIE option, from its JSON (RFC 8427) OPT record.
fn kdig_cookie(ns: &NetNs, server: &str) -> Vec<u8> {
    let out = sh(ns
        .command("kdig")
        .args([format!("@{server}"), "-p".into(), PORT.to_string()])
        .args([
            "+json",
            "+retry=0",
            "+timeout=3",
            "+norecurse",
            "+cookie",
            NAME,
        ]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("kdig prints JSON");
    let opt = json["additionalRRs"]
        .as_array()
        .and_then(|rrs| rrs.iter().find(|rr| rr["TYPE"] == 41))
        .expect("an OPT record");
    let rdata = opt["RDATAHEX"].as_str().expect("RDATAHEX");
    let bytes: Vec<u8> = (0..rdata.len() / 2)
        .map(|i| u8::from_str_radix(&rdata[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let code = u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let len = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        if code == 10 {
            return bytes[at + 4..at + 4 + len].to_vec();
        }
        at += 4 + len;
    }
    panic!("no COOKIE option in {rdata}");
}

/// dig's report of the server cookie: the hex dig prints and whether it called it good.
fn dig_cookie(ns: &NetNs, server: &str, cookie: &str) -> (String, bool) {
    let out = sh(ns
        .command("dig")
        .args([format!("@{server}"), "-p".into(), PORT.to_string()])
        .args(["+tries=1", "+timeout=3", "+norecurse", cookie, NAME]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("COOKIE:"))
        .unwrap_or_else(|| panic!("no cookie in dig's output:\n{text}"));
    let hex = line
        .split_whitespace()
        .nth(2)
        .expect("the cookie's hex")
        .to_owned();
    (hex, line.contains("(good)"))
}

/// RFC 9018 §4.4, computed here and not by the agent's code: the secret (of `secrets`) whose
/// SipHash-2-4 over client cookie | version | reserved | timestamp | client IP is the cookie's
/// hash, if the cookie (client cookie and server cookie, 24 bytes) is an RFC 9018 cookie for
/// `client`, version 1, reserved bytes zero, stamped within the last minute.
fn rfc9018_secret(cookie: &[u8], client: IpAddr, secrets: &[[u8; 16]]) -> Option<usize> {
    use std::hash::Hasher;
    if cookie.len() != 24 || cookie[8] != 1 || cookie[9..12] != [0, 0, 0] {
        return None;
    }
    let stamp = u32::from_be_bytes(cookie[12..16].try_into().ok()?);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    if u64::from(stamp) + 60 < now || u64::from(stamp) > now + 5 {
        return None;
    }
    secrets.iter().position(|secret| {
        let mut hasher = siphasher::sip::SipHasher24::new_with_key(secret);
        hasher.write(&cookie[..16]);
        match client {
            IpAddr::V4(a) => hasher.write(&a.octets()),
            IpAddr::V6(a) => hasher.write(&a.octets()),
        }
        // SipHash's 64 bits in the reference implementation's (little-endian) byte order.
        hasher.finish().to_le_bytes() == cookie[16..24]
    })
}

fn hex_of(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The computation above gives RFC 9018's own test vector (Appendix A.1), at its time.
#[test]
fn the_tests_rfc_9018_computation_gives_the_rfcs_test_vector() {
    use std::hash::Hasher;
    let secret: [u8; 16] = hex_of("e5e973e5a6b2a43f48e7dc849e37bfcf")
        .try_into()
        .expect("16 bytes");
    let cookie = hex_of("2464c4abcf10c957010000005cf79f111f8130c3eee29480");
    let mut hasher = siphasher::sip::SipHasher24::new_with_key(&secret);
    hasher.write(&cookie[..16]);
    hasher.write(&[198, 51, 100, 100]);
    assert_eq!(hasher.finish().to_le_bytes(), cookie[16..24]);
}

#[test]
fn cookies_are_made_and_checked_with_dig_and_kdig_and_survive_a_rotation() {
    require_root();
    let link = Link::new("cookie");
    let dir = TempDir::new("cookie");
    let secrets = dir.write("cookie-secret", &format!("{SECRET_1}\n"));
    let config = config(
        &dir,
        &format!(
            "  cookies:\n    secretFile: {}\n",
            secrets.to_str().expect("UTF-8")
        ),
    );
    let agent = start(&link, &config, true);
    let client: IpAddr = link.client.ipv4.parse().expect("an address");
    // dig sends a client cookie and checks that the server cookie comes back.
    let (first, good) = dig_cookie(&link.client_ns, link.server.ipv4, "+cookie");
    assert!(good, "dig finds the cookie good");
    assert_eq!(
        first.len(),
        48,
        "client cookie and an RFC 9018 server cookie: {first}"
    );
    // dig's "(good)" only says its client cookie came back: the server cookie is checked here.
    let known = [secret(SECRET_1), secret(SECRET_2)];
    assert_eq!(
        rfc9018_secret(&hex_of(&first), client, &known),
        Some(0),
        "dig's server cookie is RFC 9018's with the configured secret: {first}"
    );
    // Returned, it checks out (dig sends it back with +cookie=<hex>).
    let (again, good_again) = dig_cookie(
        &link.client_ns,
        link.server.ipv4,
        &format!("+cookie={first}"),
    );
    assert!(good_again);
    assert_eq!(
        rfc9018_secret(&hex_of(&again), client, &known),
        Some(0),
        "{again}"
    );
    // kdig: the server cookie verifies with the shared secret for this client.
    let from_kdig = kdig_cookie(&link.client_ns, link.server.ipv4);
    assert_eq!(
        rfc9018_secret(&from_kdig, client, &known),
        Some(0),
        "{from_kdig:02x?}"
    );
    // A cookie option of an impossible length: FORMERR.
    let malformed = QueryBuilder {
        edns: Some((1232, false, 0, vec![0, 10, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
        ..QueryBuilder::new(NAME, 1)
    };
    let answers = udp_from(
        &link.client_ns,
        link.client.ipv4,
        server_v4(&link),
        vec![malformed.bytes()],
        Duration::from_secs(2),
    );
    assert_eq!(answers.len(), 1);
    assert_eq!(rcode(&answers[0]), 1, "FORMERR");
    assert!(
        agent.metric("hostport_dns_xdp_passed", &[("reason", "cookie")]) >= 3.0,
        "cookie queries went up to userspace"
    );
    // Rotation step 1 and 2 at once on this node: the new secret makes cookies, the old one is
    // still accepted.
    std::fs::write(&secrets, format!("{SECRET_2}\n{SECRET_1}\n")).expect("rotate");
    eventually("cookies made with the new secret", 30, || {
        let cookie = kdig_cookie(&link.client_ns, link.server.ipv4);
        rfc9018_secret(&cookie, client, &known) == Some(1)
    });
    let (renewed_by_dig, old_still_good) = dig_cookie(
        &link.client_ns,
        link.server.ipv4,
        &format!("+cookie={first}"),
    );
    assert!(
        old_still_good,
        "a cookie made with the old secret is still valid"
    );
    assert_eq!(
        rfc9018_secret(&hex_of(&renewed_by_dig), client, &known),
        Some(1),
        "after the rotation, cookies are made with the new secret: {renewed_by_dig}"
    );
    let raw = QueryBuilder {
        edns: Some((
            1232,
            false,
            0,
            [vec![0, 10, 0, 24], hex_bytes(&first)].concat(),
        )),
        ..QueryBuilder::new(NAME, 1)
    };
    let answers = udp_from(
        &link.client_ns,
        link.client.ipv4,
        server_v4(&link),
        vec![raw.bytes()],
        Duration::from_secs(2),
    );
    let renewed = cookie_of(&answers[0]).expect("a cookie back");
    assert_eq!(
        rfc9018_secret(&renewed, client, &known),
        Some(1),
        "{renewed:02x?}"
    );
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// Floods `server` from `source` with A queries (no cookie) until `stop` is set.
fn flood_until(
    ns: &NetNs,
    source: &str,
    server: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let ns_name = ns.name.clone();
    let source: IpAddr = source.parse().expect("an address");
    std::thread::spawn(move || {
        NetNs::enter(&ns_name, move || {
            let socket = UdpSocket::bind(SocketAddr::new(source, 0)).expect("bind the flood");
            let query = QueryBuilder::new(NAME, 1).bytes();
            while !stop.load(Ordering::Relaxed) {
                let _ = socket.send_to(&query, server);
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    })
}

#[test]
fn a_flooding_prefix_is_limited_while_exempt_and_cookie_clients_are_answered_every_time() {
    require_root();
    let link = Link::new("rrl");
    let dir = TempDir::new("rrl");
    add_client_addresses(&link, &[EXEMPT]);
    let config = config(
        &dir,
        "  rateLimit:\n    responsesPerSecond: 5\n    slip: 1\n    exempt: [198.18.0.128/26]\n",
    );
    let agent = start(&link, &config, true);
    let server = server_v4(&link);
    let stop = Arc::new(AtomicBool::new(false));
    let flood = flood_until(&link.client_ns, link.client.ipv4, server, stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // With slip 1 every limited answer is a TC=1 slip: dig retries over TCP, which is not
    // limited, and gets the records.
    let out = sh(link
        .client_ns
        .command("dig")
        .args([
            format!("@{}", link.server.ipv4),
            "-p".into(),
            PORT.to_string(),
        ])
        .args([
            "+tries=1",
            "+timeout=3",
            "+norecurse",
            "+nocookie",
            NAME,
            "A",
        ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("Truncated, retrying in TCP mode"), "{text}");
    assert!(
        text.contains("status: NOERROR") && text.contains("198.18.200.1"),
        "{text}"
    );
    // The exempt prefix: every query answered, in full.
    let queries: Vec<Vec<u8>> = (0..50)
        .map(|_| QueryBuilder::new(NAME, 1).bytes())
        .collect();
    let exempt = udp_from(
        &link.client_ns,
        EXEMPT,
        server,
        queries,
        Duration::from_secs(1),
    );
    assert_eq!(exempt.len(), 50, "the exempt client is answered every time");
    assert!(
        exempt.iter().all(|a| a[2] & 0x02 == 0 && a[7] == 3),
        "full answers"
    );
    // A cookie client in the flooded prefix: its first query (client cookie only) gets
    // BADCOOKIE or an answer, both with a server cookie; with that cookie every query is answered.
    let with_client_cookie = QueryBuilder {
        edns: Some((1232, false, 0, vec![0, 10, 0, 8, 9, 9, 9, 9, 9, 9, 9, 9])),
        ..QueryBuilder::new(NAME, 1)
    };
    let first = udp_from(
        &link.client_ns,
        link.client.ipv4,
        server,
        vec![with_client_cookie.bytes()],
        Duration::from_secs(1),
    );
    let cookie = first
        .iter()
        .find_map(|a| cookie_of(a))
        .expect("a server cookie (BADCOOKIE, a slip or the answer)");
    let with_cookie = QueryBuilder {
        edns: Some((
            1232,
            false,
            0,
            [vec![0, 10, 0, cookie.len() as u8], cookie].concat(),
        )),
        ..QueryBuilder::new(NAME, 1)
    };
    let queries: Vec<Vec<u8>> = (0..50).map(|_| with_cookie.bytes()).collect();
    let answered = udp_from(
        &link.client_ns,
        link.client.ipv4,
        server,
        queries,
        Duration::from_secs(1),
    );
    stop.store(true, Ordering::Relaxed);
    flood.join().expect("the flood");
    assert_eq!(
        answered.len(),
        50,
        "the cookie client is answered every time"
    );
    assert!(
        answered
            .iter()
            .all(|a| a[2] & 0x02 == 0 && a[7] == 3 && rcode(a) == 0)
    );
    let decided = |path: &str, decision: &str| {
        agent.metric(
            "hostport_dns_client_policy",
            &[("path", path), ("decision", decision)],
        )
    };
    assert!(
        decided("xdp", "slipped") > 10.0,
        "the kernel slipped the flood"
    );
    assert_eq!(decided("xdp", "rate_limited"), 0.0, "slip 1 drops nothing");
}

/// The agent on the server side of `link`, XDP on, `clients.allow` empty, for spoofed frames:
/// its directory (kept while the test runs), the agent, the server's MAC and a query for a
/// served name.
fn spoof_bed(link: &Link, tag: &str) -> (TempDir, Agent, [u8; 6], Vec<u8>) {
    let dir = TempDir::new(tag);
    let config = config(&dir, "  allow: []\n");
    let agent = start(link, &config, true);
    (
        dir,
        agent,
        mac_bytes(&link.server.mac),
        QueryBuilder::new(NAME, 1).bytes(),
    )
}

fn mac_bytes(text: &str) -> [u8; 6] {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC address"))
        .collect();
    bytes.try_into().expect("six bytes")
}

#[test]
fn spoofed_and_martian_queries_on_the_veth_get_no_answer_from_either_path() {
    use hostport_dns_tests::{
        packet::Frame,
        raw::{RawSocket, is_udp_from_port},
    };
    require_root();
    let link = Link::new("martian");
    let (_dir, agent, server_mac, query) = spoof_bed(&link, "martian");
    let to_server = |src: &str, dst: &str| Frame {
        dst_mac: server_mac,
        ..Frame::between(src, dst)
    };
    let spoofed = [
        // Loopback, multicast and the server's own address as the source.
        to_server("127.0.0.1", link.server.ipv4),
        to_server("224.0.0.1", link.server.ipv4),
        to_server(link.server.ipv4, link.server.ipv4),
        to_server("::1", link.server.ipv6),
        // A query to the broadcast MAC address.
        Frame {
            dst_mac: [0xff; 6],
            ..to_server(link.client.ipv4, link.server.ipv4)
        },
    ];
    // A loopback destination from the veth: not this host for XDP, a martian for the stack.
    let to_loopback = to_server(link.client.ipv4, "127.0.0.1");
    let frames: Vec<Vec<u8>> = spoofed
        .iter()
        .chain([&to_loopback])
        .map(|f| f.build(&query))
        .collect();
    let control = to_server(link.client.ipv4, link.server.ipv4).build(&query);
    let ifname = link.client.ifname.clone();
    let (answers_to_spoofed, answers_to_control) = link.client_ns.run(move || {
        let socket = RawSocket::open(&ifname).expect("a packet socket");
        for frame in &frames {
            socket.send(frame).expect("send a frame");
        }
        let spoofed = socket.receive_for(Duration::from_secs(2));
        socket.send(&control).expect("send the control frame");
        let control = socket.receive_for(Duration::from_secs(1));
        let answers =
            |frames: &[Vec<u8>]| frames.iter().filter(|f| is_udp_from_port(f, PORT)).count();
        (answers(&spoofed), answers(&control))
    });
    assert_eq!(
        answers_to_control, 1,
        "the capture sees an answer to a real query"
    );
    assert_eq!(
        answers_to_spoofed, 0,
        "no answer left for any spoofed query"
    );
    assert_eq!(
        agent.metric(
            "hostport_dns_client_policy",
            &[("path", "xdp"), ("decision", "martian")]
        ),
        spoofed.len() as f64
    );
    assert_eq!(
        agent.metric(
            "hostport_dns_xdp_passed",
            &[("reason", "not_for_this_host")]
        ),
        1.0,
        "the loopback destination went up, and the stack dropped it"
    );
    assert_eq!(
        agent.metric("hostport_dns_responses", &[("path", "userspace")]),
        0.0,
        "nothing reached the listener"
    );
}

#[test]
fn queries_from_this_hosts_own_addresses_and_from_group_macs_get_no_answer() {
    use hostport_dns_tests::{
        packet::Frame,
        raw::{RawSocket, is_udp_from_port},
    };
    require_root();
    let link = Link::new("ownsrc");
    // What IPVS does with every Service address: kube-ipvs0 holding it.
    let cluster_ip = "198.19.7.7";
    link.add_ipvs_address(cluster_ip);
    let server_link_local = link_local_of(&link.server_ns, &link.server.ifname);
    let (_dir, agent, server_mac, query) = spoof_bed(&link, "ownsrc");
    let to_server = |src: &str, dst: &str| Frame {
        dst_mac: server_mac,
        ..Frame::between(src, dst)
    };
    let spoofed = [
        // A Service address of this node (IPVS), its subnet's broadcast address, its own
        // link-local address: the stack would drop each as a martian source.
        to_server(cluster_ip, link.server.ipv4),
        to_server("198.18.0.255", link.server.ipv4),
        to_server(&server_link_local, link.server.ipv6),
        // Group source MAC addresses: the answer would go to every host of the segment.
        Frame {
            src_mac: [0xff; 6],
            ..to_server(link.client.ipv4, link.server.ipv4)
        },
        Frame {
            src_mac: [0x01, 0x00, 0x5e, 0, 0, 1],
            ..to_server(link.client.ipv4, link.server.ipv4)
        },
    ];
    let frames: Vec<Vec<u8>> = spoofed.iter().map(|f| f.build(&query)).collect();
    let control = to_server(link.client.ipv4, link.server.ipv4).build(&query);
    let ifname = link.client.ifname.clone();
    let (answered, answers_to_control) = link.client_ns.run(move || {
        let socket = RawSocket::open(&ifname).expect("a packet socket");
        let answers =
            |frames: &[Vec<u8>]| frames.iter().filter(|f| is_udp_from_port(f, PORT)).count();
        // One at a time, to say which was answered.
        let answered: Vec<usize> = frames
            .iter()
            .enumerate()
            .filter(|(_, frame)| {
                socket.send(frame).expect("send a frame");
                answers(&socket.receive_for(Duration::from_millis(500))) > 0
            })
            .map(|(i, _)| i)
            .collect();
        socket.send(&control).expect("send the control frame");
        let control = socket.receive_for(Duration::from_secs(1));
        (answered, answers(&control))
    });
    assert_eq!(
        answers_to_control, 1,
        "the capture sees an answer to a real query"
    );
    assert_eq!(
        answered,
        Vec::<usize>::new(),
        "no answer left for any query from this host's own addresses or a group MAC (indexes \
         of the queries answered)"
    );
    assert_eq!(
        agent.metric(
            "hostport_dns_client_policy",
            &[("path", "xdp"), ("decision", "martian")]
        ),
        spoofed.len() as f64,
        "the kernel dropped each"
    );
}

/// The link-local IPv6 address of `ifname` in `ns`.
fn link_local_of(ns: &NetNs, ifname: &str) -> String {
    let out = ns.ip(&["-6", "-o", "addr", "show", "dev", ifname, "scope", "link"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .skip_while(|word| *word != "inet6")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .unwrap_or_else(|| panic!("a link-local address on {ifname}: {text}"))
        .to_owned()
}

/// Negative answers have their own budget on both paths: with `negativePerSecond` far below
/// `responsesPerSecond`, a path limiting NXDOMAIN at the positive rate answers too many of them,
/// and one limiting positive answers at the negative rate too few.
#[test]
fn negative_answers_are_limited_at_their_own_rate_on_either_path() {
    require_root();
    let (positive_rate, negative_rate) = (20usize, 3usize);
    // Both paths are tried before failing, so that the failure names each broken one.
    let mut failures = Vec::new();
    for with_xdp in [true, false] {
        let link = Link::new("nrrl");
        let dir = TempDir::new("nrrl");
        let config = config(
            &dir,
            &format!(
                "  rateLimit:\n    responsesPerSecond: {positive_rate}\n    negativePerSecond: {negative_rate}\n    slip: 0\n"
            ),
        );
        let agent = start(&link, &config, with_xdp);
        let server = server_v4(&link);
        let positive = QueryBuilder::new(NAME, 1).bytes();
        let negative = QueryBuilder::new("missing.prod.coreha.example", 1).bytes();
        let queries: Vec<Vec<u8>> = (0..60)
            .flat_map(|_| [positive.clone(), negative.clone()])
            .collect();
        let burst = udp_burst(
            &link.client_ns,
            link.client.ipv4,
            server,
            queries,
            Duration::from_secs(1),
        );
        let budgets = burst.budgets();
        let answers = burst.answers;
        let nxdomain = answers.iter().filter(|a| rcode(a) == 3).count();
        let answered = answers.iter().filter(|a| rcode(a) == 0 && a[7] > 0).count();
        let path = if with_xdp { "xdp" } else { "userspace" };
        if nxdomain + answered != answers.len() {
            failures.push(format!("{path}: answers other than A records and NXDOMAIN"));
        }
        // One budget a second: a burst across a second boundary gets two.
        if !(positive_rate..=budgets * positive_rate).contains(&answered) {
            failures.push(format!(
                "{path}: {answered} positive answers at {positive_rate}/s ({budgets} budgets)"
            ));
        }
        if !(negative_rate..=budgets * negative_rate).contains(&nxdomain) {
            failures.push(format!(
                "{path}: {nxdomain} NXDOMAIN answers at {negative_rate}/s ({budgets} budgets)"
            ));
        }
        let limited = agent.metric(
            "hostport_dns_client_policy",
            &[("path", path), ("decision", "rate_limited")],
        );
        if limited == 0.0 {
            failures.push(format!("{path}: no rate-limited decision counted"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The userspace path (no XDP): a limited client's slips are TC=1 and empty (slip 1: every
/// limited answer slips), and the exempt prefix is never limited.
#[test]
fn userspace_slips_are_truncated_and_empty_and_the_exempt_prefix_is_never_limited() {
    require_root();
    let link = Link::new("uslip");
    let dir = TempDir::new("uslip");
    add_client_addresses(&link, &[EXEMPT]);
    let config = config(
        &dir,
        "  rateLimit:\n    responsesPerSecond: 5\n    slip: 1\n    exempt: [198.18.0.128/26]\n",
    );
    let agent = start(&link, &config, false);
    let server = server_v4(&link);
    let query = QueryBuilder::new(NAME, 1).bytes();
    let burst = udp_burst(
        &link.client_ns,
        link.client.ipv4,
        server,
        vec![query.clone(); 40],
        Duration::from_secs(1),
    );
    let budgets = burst.budgets();
    let answers = burst.answers;
    assert_eq!(
        answers.len(),
        40,
        "slip 1: every query gets an answer or a slip"
    );
    let (slips, full): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
        answers.iter().partition(|a| a[2] & 0x02 != 0);
    // One budget a second: a burst across a second boundary gets two.
    assert!(
        (5..=5 * budgets).contains(&full.len()),
        "{} full answers ({budgets} budgets)",
        full.len()
    );
    let question = Message::from_vec(&query).expect("the query").queries;
    for slip in &slips {
        let message = Message::from_vec(slip).expect("a slip parses");
        assert!(
            message.metadata.truncation
                && message.answers.is_empty()
                && message.authorities.is_empty()
                && message.additionals.is_empty(),
            "a slip is TC=1 and empty: {message:?}"
        );
        assert_eq!(message.queries, question, "a slip echoes the question");
    }
    assert!(
        full.iter().all(|a| rcode(a) == 0 && a[7] == 3),
        "full answers"
    );
    // The exempt prefix, on this path too: every query answered, in full.
    let exempt = udp_from(
        &link.client_ns,
        EXEMPT,
        server,
        vec![query; 50],
        Duration::from_secs(1),
    );
    assert_eq!(exempt.len(), 50, "the exempt client is answered every time");
    assert!(
        exempt.iter().all(|a| a[2] & 0x02 == 0 && a[7] == 3),
        "the exempt client gets full answers, never a slip"
    );
    let slipped = agent.metric(
        "hostport_dns_client_policy",
        &[("path", "userspace"), ("decision", "slipped")],
    );
    assert_eq!(slipped, slips.len() as f64, "each slip counted");
}
