//! The kernel table's size follows the names served: it starts small, grows when the names leave
//! less than a sixteenth of it free and shrinks when they fill a small part of it, each time by
//! swapping in a program with maps of the new size. Real packets through the real kernel path,
//! a client querying all the while: no query is lost or answered wrong across a resize, and the
//! new program answers from XDP the names the old one could not hold.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use hickory_proto::{
    op::Message,
    rr::{RData, RecordType},
};
use hostport_dns_tests::{
    BpfFs, TempDir,
    agent::{Agent, binary},
    clients::dig,
    eventually,
    netns::{Link, NetNs, sh},
    packet::QueryBuilder,
    require_root,
};

/// The zone whose names come and go.
const ZONE: &str = "size.example";
/// A zone of its own, the same in every version of the file, asked for all along.
const PROBE: &str = "probe.steady.example";
const PROBE_ADDRESS: &str = "198.18.9.1";
const PORT: u16 = 1053;

/// The probe's zone, and the zone of `names` names: `n<i>` → 198.19.<i / 250>.<i % 250 + 1>.
fn records(names: usize) -> String {
    zone_file((0..names).map(|i| format!("n{i}: 198.19.{}.{}", i / 250, i % 250 + 1)))
}

/// The probe's zone, and the zone holding `records` (`owner: addresses` lines).
fn zone_file(records: impl Iterator<Item = String>) -> String {
    let mut text = format!(
        "zones:\n  - name: steady.example\n    records:\n      probe: {PROBE_ADDRESS}\n  \
         - name: {ZONE}\n    records:\n"
    );
    for record in records {
        text.push_str(&format!("      {record}\n"));
    }
    text
}

/// An agent in native XDP mode on a fresh link, serving `text` as its record file.
fn serving(tag: &str, text: &str) -> (Link, TempDir, Agent) {
    let link = Link::new(tag);
    let dir = TempDir::new(tag);
    let file = dir.write("records.yaml", text);
    let agent = Agent::start_native(&link, &["--records", file.to_str().expect("UTF-8")], &[]);
    (link, dir, agent)
}

/// Small entries the table holds (every name here takes one).
fn capacity(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_xdp_table_capacity", &[("entry", "small")])
}

fn resizes(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_xdp_table_resizes_total", &[])
}

fn xdp_answers(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_responses", &[("path", "xdp")])
}

/// XDP's answers in the zone whose names come and go (the probe's are in another).
fn xdp_answers_in_zone(agent: &Agent) -> f64 {
    agent.metric(
        "hostport_dns_requests",
        &[("path", "xdp"), ("zone", "size.example.")],
    )
}

fn xdp_program_id(link: &Link) -> Option<u32> {
    hostport_dns_tests::bench::system::xdp_program_id(&link.server_ns, &link.server.ifname)
}

/// Serves `names` names (the file rewritten, then SIGHUP) and waits until the kernel table is
/// `expected` names large and XDP answers the last of them.
fn serve(agent: &Agent, dir: &TempDir, link: &Link, names: usize, expected: f64) {
    let counted = xdp_answers(agent);
    let in_zone = xdp_answers_in_zone(agent);
    dir.write("records.yaml", &records(names));
    agent.signal(libc::SIGHUP);
    eventually(&format!("a table of {expected} names"), 20, || {
        capacity(agent) == expected
    });
    let last = format!("n{}.{ZONE}", names - 1);
    eventually("the last name answered", 10, || {
        dig(&link.client_ns, link.server.ipv4, PORT, &[&last, "A"])
            .answer_data()
            .len()
            == 1
    });
    let before = xdp_answers_in_zone(agent);
    let reply = dig(&link.client_ns, link.server.ipv4, PORT, &[&last, "A"]);
    let i = names - 1;
    assert_eq!(
        reply.answer_data(),
        [format!("198.19.{}.{}", i / 250, i % 250 + 1)]
    );
    assert_eq!(
        xdp_answers_in_zone(agent),
        before + 1.0,
        "the program of the new size answers from XDP"
    );
    // The new program's counters carry on from the previous one's: they never go back.
    assert!(
        before >= in_zone,
        "{before} answers in the zone, {in_zone} before"
    );
    assert!(xdp_answers(agent) >= counted);
}

/// What the querier saw.
#[derive(Debug, Default)]
struct Seen {
    answered: u64,
    lost: u64,
    wrong: Vec<String>,
}

/// Asks for the probe over UDP from the client namespace, one query at a time, until told to
/// stop; every answer must carry exactly the probe's address.
struct Querier {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Seen>>,
}

impl Querier {
    fn start(link: &Link) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let server: SocketAddr = format!("{}:{PORT}", link.server.ipv4)
            .parse()
            .expect("an address");
        let ns = link.client_ns.name.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            NetNs::borrowed(&ns).run(move || query_until(server, &flag))
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("the querier")
    }
}

impl Drop for Querier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn query_until(server: SocketAddr, stop: &AtomicBool) -> Seen {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("a socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("a timeout");
    socket.connect(server).expect("connect");
    let mut seen = Seen::default();
    let mut id: u16 = 0;
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        id = id.wrapping_add(1);
        let mut query = QueryBuilder::new(PROBE, 1).bytes();
        query[..2].copy_from_slice(&id.to_be_bytes());
        if socket.send(&query).is_err() {
            seen.lost += 1;
            continue;
        }
        // An answer to an earlier query that arrived late is skipped.
        let answer = loop {
            match socket.recv(&mut buf) {
                Ok(n) if n >= 2 && buf[..2] != id.to_be_bytes() => continue,
                Ok(n) => break Some(buf[..n].to_vec()),
                Err(_) => break None,
            }
        };
        let Some(answer) = answer else {
            seen.lost += 1;
            continue;
        };
        match Message::from_vec(&answer) {
            Ok(message) => {
                let addresses: Vec<String> = message
                    .answers
                    .iter()
                    .filter(|r| r.record_type() == RecordType::A)
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.to_string()),
                        _ => None,
                    })
                    .collect();
                if addresses == [PROBE_ADDRESS] {
                    seen.answered += 1;
                } else {
                    seen.wrong.push(format!("{message:?}"));
                }
            }
            Err(e) => seen.wrong.push(format!("unparsable: {e}")),
        }
    }
    seen
}

/// A table of 11 names grows twice and shrinks back while the probe is asked for all along.
fn grow_and_shrink(link: &Link, dir: &TempDir, agent: &Agent) {
    eventually("the smallest table", 20, || capacity(agent) == 1024.0);
    let first_program = xdp_program_id(link);
    let querier = Querier::start(link);
    let xdp_before = xdp_answers(agent);
    // 1,500 names: past 1,024, grows to 2,048 (room for a quarter as many again).
    serve(agent, dir, link, 1_500, 2048.0);
    assert_ne!(xdp_program_id(link), first_program, "a new program");
    // 5,000 names: past 2,048, grows to 8,192.
    serve(agent, dir, link, 5_000, 8192.0);
    // Back to 10 names: an eighth or less of 8,192, shrinks to the smallest.
    serve(agent, dir, link, 10, 1024.0);
    assert_eq!(resizes(agent), 3.0);
    let seen = querier.stop();
    println!("while resizing: {seen:?}");
    assert!(seen.answered > 0, "{seen:?}");
    assert_eq!(seen.lost, 0, "no query lost: {seen:?}");
    assert!(seen.wrong.is_empty(), "no wrong answer: {:?}", seen.wrong);
    assert!(
        xdp_answers(agent) > xdp_before + 3.0,
        "XDP answered while the table changed size"
    );
    assert_eq!(
        agent.metric("hostport_dns_xdp_table_limit", &[]),
        1_048_576.0,
        "the default limit"
    );
}

#[test]
fn the_table_grows_and_shrinks_with_the_names_without_losing_a_query() {
    require_root();
    let (link, dir, agent) = serving("tsize", &records(10));
    grow_and_shrink(&link, &dir, &agent);
}

#[test]
fn a_pinned_table_resizes_and_the_next_agent_adopts_it_at_its_size() {
    require_root();
    let link = Link::new("tsizep");
    let dir = TempDir::new("tsizep");
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir().to_str().expect("UTF-8").to_owned();
    let file = dir.write("records.yaml", &records(10));
    let file = file.to_str().expect("UTF-8").to_owned();
    let agent = Agent::start_native(
        &link,
        &["--records", &file],
        &["--pin-dir", &pin_dir, "--pinned-lease", "5"],
    );
    grow_and_shrink(&link, &dir, &agent);
    // Grown again, then handed to the next agent: it adopts the pinned table at its size.
    serve(&agent, &dir, &link, 5_000, 8192.0);
    drop(agent);
    let next = Agent::start_native(
        &link,
        &["--records", &file],
        &["--pin-dir", &pin_dir, "--pinned-lease", "5"],
    );
    eventually("the adopted table answering from XDP", 20, || {
        dig(
            &link.client_ns,
            link.server.ipv4,
            PORT,
            &["n4999.size.example", "A"],
        );
        xdp_answers(&next) > 0.0
    });
    assert!(next.logs().contains("adopted"), "{}", next.logs());
    assert_eq!(capacity(&next), 8192.0, "adopted at its size");
    assert_eq!(resizes(&next), 0.0, "no resize to adopt it");
    drop(next);
    // An agent serving far fewer names adopts the larger pinned table (as an upgrade adopts the
    // fixed-size table of an earlier version), then shrinks it.
    std::fs::write(&file, records(10)).expect("rewrite the records");
    let last = Agent::start_native(
        &link,
        &["--records", &file],
        &["--pin-dir", &pin_dir, "--pinned-lease", "5"],
    );
    eventually("the table shrunk", 20, || capacity(&last) == 1024.0);
    assert!(last.logs().contains("adopted"), "{}", last.logs());
    assert_eq!(resizes(&last), 1.0);
    let before = xdp_answers_in_zone(&last);
    let reply = dig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &["n9.size.example", "A"],
    );
    assert_eq!(reply.answer_data(), ["198.19.0.10"]);
    assert_eq!(xdp_answers_in_zone(&last), before + 1.0, "from XDP");
    drop(last);
    sh(link
        .server_ns
        .command(binary().to_str().expect("UTF-8"))
        .args(["uninstall", "--pin-dir", &pin_dir]));
}

/// A label long enough that a name with 8 addresses needs a 160-byte entry.
const FLEET_LABEL: &str = "served-by-a-fleet";

/// `names` names of `fleet` addresses each: `f<i>-served-by-a-fleet` → 198.19.<i % 250>.<1..=fleet>.
fn fleet_records(names: usize, fleet: usize) -> String {
    zone_file((0..names).map(|i| {
        let addresses: Vec<String> = (1..=fleet)
            .map(|n| format!("198.19.{}.{n}", i % 250))
            .collect();
        format!("f{i}-{FLEET_LABEL}: [{}]", addresses.join(", "))
    }))
}

/// Each kind of entry follows the names that need it: names served by 8 nodes each (160-byte
/// entries: names of 35 to 37 bytes and 32 bytes of addresses, more than the 64 a small entry
/// holds) grow their kind alone, past its smallest size, and are answered from XDP. (Eight:
/// sixteen A records grow an answer by more than the headroom a veth gives XDP.)
#[test]
fn names_served_by_fleets_grow_their_own_kind_of_entry() {
    require_root();
    let (link, dir, agent) = serving("tsizef", &fleet_records(10, 8));
    let kind = |entry: &str| agent.metric("hostport_dns_xdp_table_capacity", &[("entry", entry)]);
    eventually("the smallest table", 20, || kind("name") == 256.0);
    let bytes_before = agent.metric("hostport_dns_xdp_table_bytes", &[]);
    // 300 such names: past 256, to 384 (room for a quarter as many again); the others stay.
    dir.write("records.yaml", &fleet_records(300, 8));
    agent.signal(libc::SIGHUP);
    eventually("the name entries grown", 20, || kind("name") == 384.0);
    assert_eq!((kind("small"), kind("big")), (1024.0, 64.0));
    let bytes = agent.metric("hostport_dns_xdp_table_bytes", &[]);
    // 128 more 160-byte entries (held once: both generations share them) and 43 more buckets
    // (one for every three entries: 1,472 / 3 where it was 1,344 / 3, rounded up) in each
    // generation's index.
    assert_eq!(bytes - bytes_before, 128.0 * 160.0 + 2.0 * 43.0 * 64.0);
    let xdp_before = xdp_answers_in_zone(&agent);
    let reply = dig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &[&format!("f299-{FLEET_LABEL}.{ZONE}"), "A"],
    );
    assert_eq!(reply.answer_data().len(), 8, "{reply:?}");
    assert_eq!(
        xdp_answers_in_zone(&agent),
        xdp_before + 1.0,
        "answered from XDP: {}",
        agent.metrics()
    );
}

/// Bytes the kernel table's maps take.
fn table_bytes(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_xdp_table_bytes", &[])
}

/// The host-address set follows the host's addresses: 200 addresses more grow it from its
/// smallest size (256 slots) to 1,024 or more (it grows once more than a quarter used; the
/// addresses may arrive in several batches), a query to one of them is answered from XDP, and
/// once they are gone it shrinks back.
#[test]
fn the_host_set_grows_and_shrinks_with_the_hosts_addresses() {
    require_root();
    let (link, _dir, agent) = serving("tsizeh", &records(10));
    eventually("the smallest table", 20, || capacity(&agent) == 1024.0);
    let before = table_bytes(&agent);
    // `ip addr add|del` of 198.19.250.1-200 on the server's end.
    let addresses = |verb: &str| {
        for i in 1..=200 {
            let address = format!("198.19.250.{i}/32");
            link.server_ns
                .ip(&["addr", verb, &address, "dev", &link.server.ifname]);
        }
    };
    addresses("add");
    // Slots of the host set, from the maps' bytes (24 bytes a slot, two generations).
    let host_slots = |agent: &Agent| 256.0 + (table_bytes(agent) - before) / 48.0;
    eventually("the host set grown", 20, || {
        host_slots(&agent) >= 4.0 * 200.0
    });
    let grown = resizes(&agent);
    assert!(grown >= 1.0, "{grown} resizes");
    link.client_ns.ip(&[
        "route",
        "add",
        "198.19.250.0/24",
        "via",
        link.server.ipv4,
        "dev",
        &link.client.ifname,
    ]);
    // The set may have grown before every address was posted: asked until the one queried is
    // in it.
    eventually("a query to an added address answered from XDP", 20, || {
        let xdp_before = xdp_answers_in_zone(&agent);
        let reply = dig(
            &link.client_ns,
            "198.19.250.150",
            PORT,
            &[&format!("n9.{ZONE}"), "A"],
        );
        reply.answer_data() == ["198.19.0.10"] && xdp_answers_in_zone(&agent) == xdp_before + 1.0
    });
    addresses("del");
    eventually("the host set shrunk", 20, || table_bytes(&agent) == before);
    assert!(resizes(&agent) > grown);
}
