//! Real packets through the real kernel path: the agent in one namespace, dig and kdig in
//! another, a veth pair between them. The metrics prove which path answered.

use std::{
    net::{Ipv4Addr, SocketAddr},
    time::Duration,
};

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::{dig, kdig, udp_exchange, udp_exchange_connected},
    eventually,
    netns::{BEHIND_SERVER_V4, Link, NetNs},
    packet::QueryBuilder,
    require_root,
    vectors::CAPTURE_ZONE,
};

const TYPE_A: u16 = 1;
const TYPE_TXT: u16 = 16;
const TYPE_AAAA: u16 = 28;

const PORT: u16 = 1053;

fn records() -> String {
    format!("{CAPTURE_ZONE}      dual: [198.18.0.20, \"2001:db8::20\"]\n")
}

fn xdp_answers(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_responses", &[("path", "xdp")])
}

fn userspace_answers(agent: &Agent) -> f64 {
    agent.metric("hostport_dns_responses", &[("path", "userspace")])
}

fn start(link: &Link, dir: &TempDir, mode: &str) -> Agent {
    let file = dir.write("records.yaml", &records());
    Agent::start(
        &link.server_ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--interface",
            &link.server.ifname,
            "--xdp-mode",
            mode,
        ],
    )
}

#[test]
fn dig_gets_the_a_record_from_xdp_over_ipv4() {
    require_root();
    let link = Link::new("dig4");
    let dir = TempDir::new("dig4");
    let agent = start(&link, &dir, "native");
    let reply = dig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &["default-nginx.ingress.prod.coreha.example", "A"],
    );
    assert_eq!(reply.status, "NOERROR");
    assert!(reply.has_flag("aa") && !reply.has_flag("ra"), "{reply:?}");
    assert_eq!(
        reply.answer_data(),
        ["198.18.200.1", "198.18.200.2", "198.18.200.3"]
    );
    // The OPT record advertises the default ceiling on UDP answers.
    assert_eq!(reply.edns_udp, Some(8192));
    assert_eq!(xdp_answers(&agent), 1.0, "answered in the kernel");
    assert_eq!(
        userspace_answers(&agent),
        0.0,
        "the userspace listener saw nothing"
    );
}

#[test]
fn kdig_gets_the_aaaa_record_from_xdp_over_ipv6() {
    require_root();
    let link = Link::new("kdig6");
    let dir = TempDir::new("kdig6");
    let agent = start(&link, &dir, "native");
    let reply = kdig(
        &link.client_ns,
        link.server.ipv6,
        PORT,
        &["dual.prod.coreha.example", "AAAA"],
    );
    assert_eq!(reply.status, "NOERROR");
    assert_eq!(reply.answer_data(), ["2001:db8::20"]);
    let reply = kdig(
        &link.client_ns,
        link.server.ipv6,
        PORT,
        &["nope.prod.coreha.example", "A"],
    );
    assert_eq!(reply.status, "NXDOMAIN");
    assert_eq!(reply.authority.len(), 1);
    assert_eq!(reply.authority[0].rtype, "SOA");
    assert_eq!(xdp_answers(&agent), 2.0);
    assert_eq!(userspace_answers(&agent), 0.0);
}

#[test]
fn generic_mode_answers_from_xdp_too() {
    require_root();
    let link = Link::new("generic");
    let dir = TempDir::new("generic");
    let agent = start(&link, &dir, "generic");
    let reply = kdig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &["svc1.ns1.prod.coreha.example", "A"],
    );
    assert_eq!(
        reply.answer_data(),
        ["198.18.101.5", "198.18.101.6", "198.18.101.7"]
    );
    assert_eq!(xdp_answers(&agent), 1.0);
}

#[test]
fn a_miss_reaches_the_userspace_listener() {
    require_root();
    let link = Link::new("miss");
    let dir = TempDir::new("miss");
    let agent = start(&link, &dir, "native");
    let reply = dig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &["prod.coreha.example", "SOA"],
    );
    assert_eq!(reply.status, "NOERROR");
    assert_eq!(reply.answer.len(), 1);
    let reply = dig(
        &link.client_ns,
        link.server.ipv4,
        PORT,
        &["www.example.com", "A"],
    );
    assert_eq!(reply.status, "REFUSED");
    assert_eq!(xdp_answers(&agent), 0.0);
    assert_eq!(userspace_answers(&agent), 2.0);
    assert_eq!(
        agent.metric("hostport_dns_xdp_passed", &[("reason", "unsupported_type")]),
        1.0
    );
    assert_eq!(
        agent.metric("hostport_dns_xdp_passed", &[("reason", "not_in_zone")]),
        1.0
    );
}

#[test]
fn a_query_for_an_address_behind_the_node_is_never_answered() {
    require_root();
    let link = Link::new("behind");
    let dir = TempDir::new("behind");
    let agent = start(&link, &dir, "native");
    // The client sends the query to the server's MAC but for another host's address.
    link.client_ns.ip(&[
        "neigh",
        "replace",
        BEHIND_SERVER_V4,
        "lladdr",
        &link.server.mac,
        "dev",
        &link.client.ifname,
    ]);
    let out = link
        .client_ns
        .command("dig")
        .args([
            &format!("@{BEHIND_SERVER_V4}"),
            "-p",
            "1053",
            "+tries=1",
            "+timeout=1",
            "one.prod.coreha.example",
        ])
        .output()
        .expect("run dig");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("ANSWER SECTION"), "{text}");
    assert_eq!(
        agent.metric(
            "hostport_dns_xdp_passed",
            &[("reason", "not_for_this_host")]
        ),
        1.0
    );
    assert_eq!(xdp_answers(&agent) + userspace_answers(&agent), 0.0);
}

/// An address the server gets after the agent started: the XDP address set follows netlink.
const VIP: &str = "198.18.0.100";

#[test]
fn a_vip_added_after_start_is_answered_by_xdp_and_from_itself_until_it_goes() {
    require_root();
    let link = Link::new("vip");
    let dir = TempDir::new("vip");
    let agent = start(&link, &dir, "native");
    let name = "default-nginx.ingress.prod.coreha.example";
    // The client reaches the VIP at the server's MAC, also once it is gone (no ARP to ask).
    link.client_ns.ip(&[
        "neigh",
        "replace",
        VIP,
        "lladdr",
        &link.server.mac,
        "dev",
        &link.client.ifname,
    ]);
    let vip_on = |verb: &str| {
        link.server_ns.ip(&[
            "addr",
            verb,
            &format!("{VIP}/32"),
            "dev",
            &link.server.ifname,
        ])
    };
    vip_on("add");
    eventually("XDP to answer the VIP", 10, || {
        let before = xdp_answers(&agent);
        let reply = dig(&link.client_ns, VIP, PORT, &[name, "A"]);
        reply.answer_data() == ["198.18.200.1", "198.18.200.2", "198.18.200.3"]
            && xdp_answers(&agent) == before + 1.0
    });
    // A type XDP passes: userspace answers it, from the VIP (the connected socket takes nothing
    // else), NODATA.
    let vip = SocketAddr::from((VIP.parse::<Ipv4Addr>().expect("an address"), PORT));
    let before = userspace_answers(&agent);
    let answer = udp_exchange_connected(
        &link.client_ns,
        vip,
        QueryBuilder::new(name, TYPE_TXT).bytes(),
        Duration::from_secs(3),
    )
    .expect("an answer from the VIP itself");
    assert_eq!(
        (answer[3] & 0x0f, &answer[6..8]),
        (0, &[0u8, 0][..]),
        "NODATA"
    );
    assert_eq!(userspace_answers(&agent), before + 1.0, "from userspace");
    // Gone: XDP passes what is sent to it as not for this host, and nothing answers.
    vip_on("del");
    let not_for_this_host = || {
        agent.metric(
            "hostport_dns_xdp_passed",
            &[("reason", "not_for_this_host")],
        )
    };
    eventually("XDP to pass queries for the old VIP", 15, || {
        let before = not_for_this_host();
        let answer = udp_exchange_connected(
            &link.client_ns,
            vip,
            QueryBuilder::new(name, TYPE_A).bytes(),
            Duration::from_millis(500),
        );
        answer.is_none() && not_for_this_host() == before + 1.0
    });
}

#[test]
fn the_readme_command_answers_dig_on_loopback() {
    require_root();
    let ns = NetNs::new("readme");
    // `cargo xtask run` runs exactly this (in the host namespace).
    let agent = Agent::start(&ns, &["--interface", "lo", "--xdp-mode", "generic"]);
    let reply = dig(
        &ns,
        "127.0.0.1",
        PORT,
        &["default-nginx.ingress.demo.hostport.example"],
    );
    assert_eq!(reply.status, "NOERROR");
    assert_eq!(
        reply.answer_data(),
        ["198.18.200.1", "198.18.200.2", "198.18.200.3"]
    );
    assert_eq!(xdp_answers(&agent), 1.0, "generic XDP on lo answered");
    // The README's own check lines, run as written.
    let readme = std::fs::read_to_string(hostport_dns_tests::workspace_root().join("README.md"))
        .expect("README.md");
    let lines: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("dig @127.0.0.1") || l.starts_with("curl -s localhost:9354"))
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "the README's dig, SRV dig and curl lines: {lines:?}"
    );
    let run = |line: &str| {
        let out = hostport_dns_tests::netns::sh(ns.command("sh").args(["-c", line]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = run(lines[0]);
    assert!(
        a.contains("status: NOERROR") && a.contains("198.18.200.1"),
        "{a}"
    );
    let srv = run(lines[1]);
    assert!(
        srv.contains("status: NOERROR")
            && srv.contains("IN SRV 0 1 443 node-1.nodes.demo.hostport.example."),
        "{srv}"
    );
    assert!(
        srv.contains("ADDITIONAL SECTION"),
        "the targets' addresses: {srv}"
    );
    let metrics = run(lines[2]);
    assert!(
        metrics.contains("hostport_dns_responses_total{path=\"xdp\""),
        "{metrics}"
    );
}

#[test]
fn auto_mode_falls_back_to_generic_where_the_driver_cannot() {
    require_root();
    let ns = NetNs::new("auto");
    let agent = Agent::start(&ns, &["--interface", "lo", "--xdp-mode", "auto"]);
    assert!(
        agent.logs().contains("falling back to generic mode"),
        "{}",
        agent.logs()
    );
    let reply = dig(&ns, "127.0.0.1", PORT, &["api.demo.hostport.example"]);
    assert_eq!(reply.answer.len(), 3);
    assert_eq!(xdp_answers(&agent), 1.0);
}

#[test]
fn stopping_the_agent_detaches_the_program() {
    require_root();
    let link = Link::new("detach");
    let dir = TempDir::new("detach");
    let agent = start(&link, &dir, "native");
    let attached = |link: &Link| {
        let out = link
            .server_ns
            .ip(&["-j", "link", "show", &link.server.ifname]);
        String::from_utf8_lossy(&out.stdout).contains("\"xdp\"")
    };
    assert!(attached(&link));
    assert_eq!(agent.stop(), Some(0));
    assert!(!attached(&link), "the program must be gone after SIGTERM");
}

/// The ID of the XDP program on `ifname` in `ns`, if one is attached.
fn xdp_program_on(ns: &NetNs, ifname: &str) -> Option<u64> {
    let out = ns.ip(&["-j", "link", "show", ifname]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    json[0]["xdp"]["prog"]["id"].as_u64()
}

#[test]
fn interface_auto_is_the_default_routes_and_several_interfaces_all_answer() {
    require_root();
    let link = Link::new("ifauto");
    let dir = TempDir::new("ifauto");
    let file = dir.write("records.yaml", &records());
    let name = "default-nginx.ingress.prod.coreha.example";
    let addresses = ["198.18.200.1", "198.18.200.2", "198.18.200.3"];
    link.server_ns
        .ip(&["route", "add", "default", "via", link.client.ipv4]);
    {
        let agent = Agent::start(
            &link.server_ns,
            &[
                "--records",
                file.to_str().expect("UTF-8"),
                "--interface",
                "auto",
                "--xdp-mode",
                "native",
            ],
        );
        assert!(
            xdp_program_on(&link.server_ns, &link.server.ifname).is_some(),
            "auto: attached to the default route's interface"
        );
        assert_eq!(xdp_program_on(&link.server_ns, "lo"), None);
        let reply = dig(&link.client_ns, link.server.ipv4, PORT, &[name, "A"]);
        assert_eq!(reply.answer_data(), addresses);
        assert_eq!(xdp_answers(&agent), 1.0);
    }
    // Both interfaces named: both answer from XDP (generic mode, which lo needs).
    let agent = Agent::start(
        &link.server_ns,
        &[
            "--records",
            file.to_str().expect("UTF-8"),
            "--interface",
            &link.server.ifname,
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
        ],
    );
    assert!(xdp_program_on(&link.server_ns, &link.server.ifname).is_some());
    assert!(xdp_program_on(&link.server_ns, "lo").is_some());
    let over_veth = dig(&link.client_ns, link.server.ipv4, PORT, &[name, "A"]);
    assert_eq!(over_veth.answer_data(), addresses);
    assert_eq!(xdp_answers(&agent), 1.0, "on the veth");
    let over_lo = dig(&link.server_ns, "127.0.0.1", PORT, &[name, "A"]);
    assert_eq!(over_lo.answer_data(), addresses);
    assert_eq!(xdp_answers(&agent), 2.0, "on lo");
    assert_eq!(userspace_answers(&agent), 0.0);
}

/// A ClusterIP as IPVS puts it on the node (on `kube-ipvs0`), and a second address of the veth.
const CLUSTER_IP: &str = "198.18.60.10";
const SECOND_ADDRESS: &str = "198.18.0.5";

/// Gives the server a `kube-ipvs0` interface holding a ClusterIP (a veth named so: this kernel
/// has no dummy devices; the name is what marks IPVS's interface) and the client a route to it.
fn add_ipvs_interface(link: &Link) {
    link.add_ipvs_address(CLUSTER_IP);
    link.server_ns.ip(&[
        "addr",
        "add",
        &format!("{SECOND_ADDRESS}/24"),
        "dev",
        &link.server.ifname,
    ]);
    link.client_ns.ip(&[
        "route",
        "add",
        &format!("{CLUSTER_IP}/32"),
        "via",
        link.server.ipv4,
    ]);
}

/// Asks `address` for the A record and returns which path answered.
fn path_answering(link: &Link, agent: &Agent, address: &str) -> &'static str {
    let (xdp, userspace) = (xdp_answers(agent), userspace_answers(agent));
    let reply = dig(
        &link.client_ns,
        address,
        PORT,
        &["+nocookie", "dual.prod.coreha.example", "A"],
    );
    assert_eq!(reply.status, "NOERROR", "{address}");
    match (
        xdp_answers(agent) - xdp,
        userspace_answers(agent) - userspace,
    ) {
        (1.0, 0.0) => "xdp",
        (0.0, 1.0) => "userspace",
        other => panic!("{address}: answers moved by {other:?}"),
    }
}

#[test]
fn ipvs_addresses_are_not_this_host_and_answer_on_names_what_is() {
    require_root();
    let link = Link::new("ipvs");
    let dir = TempDir::new("ipvs");
    add_ipvs_interface(&link);
    let agent = start(&link, &dir, "native");
    // The ClusterIP is the stack's (IPVS forwards it): the kernel path leaves it alone, and
    // what reaches the listener is answered there.
    assert_eq!(path_answering(&link, &agent, CLUSTER_IP), "userspace");
    assert_eq!(path_answering(&link, &agent, link.server.ipv4), "xdp");
    assert_eq!(path_answering(&link, &agent, SECOND_ADDRESS), "xdp");
    drop(agent);
    // --answer-on an address: only that one is the kernel's.
    let file = dir.write("records.yaml", &records());
    let only = Agent::start_native(
        &link,
        &["--records", file.to_str().expect("UTF-8")],
        &["--answer-on", link.server.ipv4],
    );
    assert_eq!(path_answering(&link, &only, link.server.ipv4), "xdp");
    assert_eq!(path_answering(&link, &only, SECOND_ADDRESS), "userspace");
    drop(only);
    // --answer-on an interface: its addresses, the ClusterIP's included when it is named.
    let named = Agent::start_native(
        &link,
        &["--records", file.to_str().expect("UTF-8")],
        &[
            "--answer-on",
            &link.server.ifname,
            "--answer-on",
            "kube-ipvs0",
        ],
    );
    assert_eq!(path_answering(&link, &named, SECOND_ADDRESS), "xdp");
    assert_eq!(path_answering(&link, &named, CLUSTER_IP), "xdp");
}

/// 250 addresses in the table's order (sorted, as the table holds them).
fn big_fleet() -> Vec<String> {
    let mut fleet: Vec<std::net::Ipv4Addr> = (0..250u8)
        .map(|i| std::net::Ipv4Addr::new(198, 18, 9, i))
        .collect();
    fleet.sort();
    fleet.iter().map(ToString::to_string).collect()
}

/// `rotateAnswers`: the A and AAAA records of each answer start at the address `ID % count` and
/// wrap around, so clients that take the first address spread over all of them; the kernel's
/// answer and userspace's are the same bytes for every ID (one agent answers from XDP, the other
/// with XDP off).
#[test]
fn rotated_answers_follow_the_query_id_byte_for_byte_on_both_paths() {
    require_root();
    let ns = NetNs::new("rotate");
    let dir = TempDir::new("rotate");
    let file = dir.write(
        "records.yaml",
        &format!(
            "zones:\n  - name: prod.coreha.example\n    rotateAnswers: true\n    records:\n      lb: [198.18.7.1, 198.18.7.2, 198.18.7.3, \"2001:db8::7:1\", \"2001:db8::7:2\"]\n      fleet: [{}]\n",
            big_fleet().join(", ")
        ),
    );
    let records = file.to_str().expect("UTF-8");
    let kernel = Agent::start(
        &ns,
        &[
            "--records",
            records,
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
        ],
    );
    let user = Agent::start_with_metrics(
        &ns,
        "127.0.0.1:9391",
        &["--records", records, "--xdp-mode", "off", "--port", "1054"],
    );
    let first_address = |answer: &[u8], qtype: u16| {
        let message = hickory_proto::op::Message::from_vec(answer).expect("an answer");
        let data: Vec<String> = message.answers.iter().map(|r| r.data.to_string()).collect();
        assert_eq!(data.len(), if qtype == TYPE_A { 3 } else { 2 }, "{data:?}");
        data[0].clone()
    };
    let before = xdp_answers(&kernel);
    let mut firsts = Vec::new();
    for (qtype, count) in [(TYPE_A, 3u16), (TYPE_AAAA, 2)] {
        for id in 0..6u16 {
            let mut query = QueryBuilder::new("lb.prod.coreha.example", qtype)
                .edns(1232, false)
                .bytes();
            query[..2].copy_from_slice(&(1000 + id).to_be_bytes());
            let from_xdp =
                udp_exchange(&ns, SocketAddr::from(([127, 0, 0, 1], PORT)), query.clone())
                    .expect("the kernel's answer");
            let from_user = udp_exchange(&ns, SocketAddr::from(([127, 0, 0, 1], 1054)), query)
                .expect("userspace's answer");
            assert_eq!(from_xdp, from_user, "type {qtype} ID {}", 1000 + id);
            firsts.push((qtype, (1000 + id) % count, first_address(&from_xdp, qtype)));
        }
    }
    assert!(xdp_answers(&kernel) - before >= 12.0, "the kernel answered");
    assert_eq!(
        user.metric("hostport_dns_responses", &[("path", "xdp")]),
        0.0
    );
    // A name of 250 addresses (larger than the kernel writes: both agents answer it from
    // userspace, each from its cache after the first query): the same rotation, byte for byte,
    // starting at the (ID % 250)th address and holding all of them.
    let fleet = big_fleet();
    for id in [0u16, 1, 249, 250, 1000, 1001, 0] {
        let mut query = QueryBuilder::new("fleet.prod.coreha.example", TYPE_A)
            .edns(8192, false)
            .bytes();
        query[..2].copy_from_slice(&id.to_be_bytes());
        let one = udp_exchange(&ns, SocketAddr::from(([127, 0, 0, 1], PORT)), query.clone())
            .expect("an answer");
        let other =
            udp_exchange(&ns, SocketAddr::from(([127, 0, 0, 1], 1054)), query).expect("an answer");
        assert_eq!(one, other, "fleet, ID {id}");
        let message = hickory_proto::op::Message::from_vec(&one).expect("an answer");
        let data: Vec<String> = message.answers.iter().map(|r| r.data.to_string()).collect();
        let mut expected = fleet.clone();
        expected.rotate_left(usize::from(id) % fleet.len());
        assert_eq!(data, expected, "fleet, ID {id}");
    }
    // The first address is the (ID % count)th, in the table's order.
    let a = ["198.18.7.1", "198.18.7.2", "198.18.7.3"];
    let aaaa = ["2001:db8::7:1", "2001:db8::7:2"];
    for (qtype, start, first) in firsts {
        let expected = if qtype == TYPE_A {
            a[usize::from(start)]
        } else {
            aaaa[usize::from(start)]
        };
        assert_eq!(first, expected, "type {qtype}");
    }
}
