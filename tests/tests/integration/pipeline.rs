//! The userspace pipeline as a whole: the order in which the two answer paths switch to a new
//! table, and what is on disk when the agent is stopped in the middle of a burst of changes.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    time::{Duration, Instant},
};

use hostport_dns::sources::kube::saved;

use hostport_dns_core::{records::RecordData, table::RecordTable};
use hostport_dns_tests::{
    TempDir,
    agent::{Agent, records_on_lo},
    clients::dig,
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::NetNs,
    packet::QueryBuilder,
    require_root,
};

const TYPE_A: u16 = 1;

/// The record file of round `round`: `web` at 198.18.7.<round>, 30,000 other names, and a zone
/// of the round's own, so that every round makes the writer rewrite the kernel table whole (the
/// zones moved): a write long enough that answering from the server first would show.
fn zone_file(round: u32) -> String {
    let mut text =
        format!("zones:\n  - name: order.example\n    records:\n      web: 198.18.7.{round}\n");
    for i in 0..30_000 {
        text.push_str(&format!("      filler{i}: 198.18.8.{}\n", i % 250 + 1));
    }
    text.push_str(&format!(
        "  - name: round{round}.example\n    records:\n      www: 198.18.9.1\n"
    ));
    text
}

/// The last octet of the first A record of an answer (None: no A record).
fn last_octet(answer: &[u8]) -> Option<u32> {
    let message = hickory_proto::op::Message::from_vec(answer).ok()?;
    message
        .answers
        .iter()
        .find_map(|record| match &record.data {
            hickory_proto::rr::RData::A(a) => Some(u32::from(a.0.octets()[3])),
            _ => None,
        })
}

/// One query over a TCP connection (answered by the userspace server).
fn over_tcp(server: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(&(query.len() as u16).to_be_bytes()).ok()?;
    stream.write_all(query).ok()?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut answer).ok()?;
    Some(answer)
}

/// One query over UDP, without a cookie (answered by XDP).
fn over_udp(socket: &UdpSocket, server: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
    socket.send_to(query, server).ok()?;
    let mut buf = vec![0u8; 4096];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// The kernel's table switches first, then the server's (`publisher::both_paths`): whenever
/// userspace (TCP) answers a change, XDP (UDP) answers it too, at once. Each round changes the
/// record and polls TCP; the first TCP answer that shows the change is followed straight away by
/// a UDP query, which must show it as well. (Switching the server first fails this: the kernel
/// write of each round takes milliseconds.)
#[test]
fn userspace_never_answers_a_newer_table_than_xdp() {
    require_root();
    let ns = NetNs::new("order");
    let dir = TempDir::new("order");
    let file = dir.write("records.yaml", &zone_file(1));
    let agent = Agent::start(&ns, &records_on_lo(&file));
    let server: SocketAddr = "127.0.0.1:1053".parse().expect("an address");
    let xdp_before = agent.metric("hostport_dns_responses", &[("path", "xdp")]);
    let mut checked = 0;
    for round in 2..=40u32 {
        dir.write("records.yaml", &zone_file(round));
        agent.signal(libc::SIGHUP);
        let seen = ns.run(move || {
            let query = QueryBuilder::new("web.order.example", TYPE_A).bytes();
            let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket");
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("a timeout");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let userspace = over_tcp(server, &query).and_then(|a| last_octet(&a));
                if userspace == Some(round) {
                    let kernel = over_udp(&socket, server, &query).and_then(|a| last_octet(&a));
                    return Some(kernel);
                }
            }
            None
        });
        let kernel = seen.unwrap_or_else(|| panic!("round {round}: userspace never answered it"));
        assert_eq!(
            kernel,
            Some(round),
            "round {round}: XDP answered an older table after userspace answered the new one"
        );
        checked += 1;
    }
    assert_eq!(checked, 39);
    assert!(
        agent.metric("hostport_dns_responses", &[("path", "xdp")]) >= xdp_before + 39.0,
        "the UDP answers came from XDP"
    );
}

const ZONE: &str = "prod.coreha.example";

/// The serial and content digest the serials file keeps for `apex`.
fn kept_serial(serials: &std::path::Path, apex: &str) -> (u32, u64) {
    let text = std::fs::read_to_string(serials).expect("the serials file");
    let state: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let kept = &state["zones"][apex];
    (
        kept["serial"].as_u64().expect("a serial") as u32,
        kept["content"].as_u64().expect("a content digest"),
    )
}

/// Stopped (SIGTERM) in the middle of a burst of pod changes, the agent leaves saved records
/// and serials that describe the same table: the zone's content digest in the serials file is
/// the digest of the saved records. Restarted from them while the API server is down, it serves
/// those records under that serial.
#[test]
fn a_stop_during_a_burst_leaves_records_and_serials_that_agree() {
    require_root();
    let ns = NetNs::new("burst");
    let api = FakeApi::start(Some(&ns));
    let pod = |i: usize, round: usize| {
        PodSpec::ingress(
            &format!("pod-{i}"),
            "ingress",
            &format!("svc-{}", i % 50),
            &format!("node-{i}"),
            &format!("198.18.{}.{}", 10 + round % 200, i % 250 + 1),
        )
    };
    for i in 0..200 {
        api.apply(Kind::Pod, pod(i, 0).to_json());
    }
    let dir = TempDir::new("burst");
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n    srv: false\n",
            api.url()
        ),
    );
    let records = dir.path.join("records.json");
    let serials = dir.path.join("serials.json");
    let state_args = [
        "--saved-records",
        records.to_str().expect("UTF-8"),
        "--serials",
        serials.to_str().expect("UTF-8"),
    ];
    let agent = Agent::start_on_lo(&ns, &config, &state_args);
    eventually("the first list", 30, || agent.http_get("/readyz").0 == 200);
    // A burst of changes, the stop in the middle of it.
    for round in 1..=5 {
        for i in 0..200 {
            api.apply(Kind::Pod, pod(i, round).to_json());
            if round == 3 && i == 100 {
                agent.signal(libc::SIGTERM);
            }
        }
    }
    assert_eq!(agent.wait(), Some(0), "a clean stop");
    let restored = saved::load(&records)
        .expect("readable saved records")
        .expect("saved records");
    // The zone as the agent reads it from its configuration.
    let text = std::fs::read_to_string(&config).expect("the configuration");
    let zones = hostport_dns::agent_config::parse(&text, &config)
        .expect("a valid configuration")
        .zones
        .zones;
    let all: Vec<_> = restored
        .groups
        .iter()
        .flat_map(|(_, group)| group.iter())
        .collect();
    let (table, _) = RecordTable::compile(&zones, &all);
    let apex = format!("{ZONE}.");
    let (serial, content) = kept_serial(&serials, &apex);
    assert_eq!(
        table.zones()[0].digest,
        content,
        "the serials describe the saved records"
    );
    // Restarted with the API server down: the saved records, under the kept serial.
    api.set_outage(true);
    let again = Agent::start_on_lo(&ns, &config, &state_args);
    let name = format!("svc-7.ingress.{ZONE}");
    let expected: Vec<String> = {
        let mut addresses: Vec<String> = all
            .iter()
            .filter(|r| r.name.to_string() == format!("{name}."))
            .filter_map(|r| match &r.data {
                RecordData::A(a) => Some(a.to_string()),
                _ => None,
            })
            .collect();
        addresses.sort();
        addresses.dedup();
        addresses
    };
    assert!(!expected.is_empty(), "the saved records hold {name}");
    eventually("the saved records served", 20, || {
        let mut served = dig(&ns, "127.0.0.1", 1053, &[&name, "A"]).answer_data();
        served.sort();
        served == expected
    });
    let soa = dig(&ns, "127.0.0.1", 1053, &[ZONE, "SOA"]).answer_data();
    assert!(
        soa.first()
            .is_some_and(|s| s.split_whitespace().nth(2) == Some(&serial.to_string())),
        "served under serial {serial}: {soa:?}"
    );
    drop(again);
}
