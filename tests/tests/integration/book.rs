//! The book's configuration snippets, run as the pages show them: the record file of the
//! configuration page served and answered as it says; the HAProxy `resolvers` and `backend` of
//! the clients page, in each of its three modes, filling its slots from the agent; the catalog
//! settings of the secondaries page taken by the agent. (The secondaries' Knot, BIND and NSD
//! configurations, the catalog consumers' among them, run in `transfer.rs`, the per-zone load
//! balancer of the node-life page in `node_life.rs`.)

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, records_on_lo},
    book,
    clients::dig,
    eventually,
    haproxy::Haproxy,
    netns::NetNs,
    require_root,
};

/// The configuration page's record file, served from a file: each name answers what the
/// comments beside it say, with the zone's TTL, and the nameserver's glue.
#[test]
fn the_record_file_of_the_configuration_page_answers_as_it_says() {
    require_root();
    let [file] = book::blocks("configuration.md", "## The record file")
        .try_into()
        .expect("one block: the record file");
    let ns = NetNs::new("book-rec");
    let dir = TempDir::new("book-rec");
    let records = dir.write("records.yaml", &file);
    let _agent = Agent::start(&ns, &records_on_lo(&records));
    let ask = |name: &str, rtype: &str| dig(&ns, "127.0.0.1", 1053, &[name, rtype]);

    let pods = ask("default-nginx.ingress.prod.coreha.example", "A");
    assert_eq!(pods.status, "NOERROR", "{pods:?}");
    let mut addresses = pods.answer_data();
    addresses.sort();
    assert_eq!(addresses, ["198.18.200.1", "198.18.200.2"]);
    assert!(
        pods.answer.iter().all(|rr| rr.ttl == 5),
        "the zone's TTL: {pods:?}"
    );
    let v6 = ask("default-nginx.ingress.prod.coreha.example", "AAAA");
    assert_eq!(v6.answer_data(), ["2001:db8::1"]);
    assert_eq!(
        ask("api.prod.coreha.example", "A").answer_data(),
        ["198.18.0.10"]
    );
    let srv = ask(
        "_https._tcp.default-nginx.ingress.prod.coreha.example",
        "SRV",
    );
    let [target] = srv.answer_data().try_into().expect("one SRV record");
    assert!(
        target.ends_with(" 443 node-1.nodes.prod.coreha.example."),
        "a relative target is under the zone: {target}"
    );
    let nameservers = ask("prod.coreha.example", "NS");
    assert_eq!(
        nameservers.answer_data(),
        ["ns1.prod.coreha.example."],
        "{nameservers:?}"
    );
    assert!(
        nameservers
            .additional
            .iter()
            .any(|rr| rr.name == "ns1.prod.coreha.example." && rr.data == "198.18.0.53"),
        "the nameserver's glue: {nameservers:?}"
    );
}

/// The zone the clients page's HAProxy resolves, as the agent's record file here: two nodes
/// with an IPv4 and an IPv6 address each, and the SRV records of the pods' named host ports.
const INGRESS_RECORDS: &str = "zones:
  - name: ingress.prod.example.com
    records:
      default-nginx.ingress: [198.18.0.11, 198.18.0.12, \"2001:db8::11\", \"2001:db8::12\"]
      node-1.nodes: [198.18.0.11]
      node-2.nodes: [198.18.0.12]
    srv:
      _https._tcp.default-nginx.ingress:
        - { port: 443, target: node-1.nodes }
        - { port: 8443, target: node-2.nodes }
";

/// The clients page's HAProxy configuration with its `server-template` line `mode` (0: the
/// default, A and AAAA; 1: IPv4 only; 2: SRV) the one in force and the others commented out;
/// its three control-plane nameservers are the agent on 127.0.0.1.
fn clients_page_haproxy(mode: usize) -> String {
    let [config] = book::blocks("clients.md", "## HAProxy")
        .try_into()
        .expect("one block: the HAProxy configuration");
    let mut templates = 0;
    let config: String = config
        .lines()
        .map(|line| {
            let template = line.trim_start().trim_start_matches("# ");
            if !template.starts_with("server-template ") {
                return format!("{line}\n");
            }
            templates += 1;
            let indent = &line[..line.len() - line.trim_start().len()];
            if templates - 1 == mode {
                format!("{indent}{template}\n")
            } else {
                format!("{indent}# {template}\n")
            }
        })
        .collect();
    assert_eq!(templates, 3, "three modes on the page:\n{config}");
    book::made_local(
        &config,
        &[
            ("192.0.2.11:1053", "127.0.0.1:1053"),
            ("192.0.2.12:1053", "127.0.0.1:1053"),
            ("192.0.2.13:1053", "127.0.0.1:1053"),
        ],
    )
}

#[test]
fn haproxy_as_the_clients_page_configures_it_fills_its_slots_in_each_mode() {
    require_root();
    let ns = NetNs::new("book-hap");
    let dir = TempDir::new("book-hap");
    let records = dir.write("records.yaml", INGRESS_RECORDS);
    let _agent = Agent::start(&ns, &records_on_lo(&records));
    let expectations: [(&str, Vec<&str>); 3] = [
        // HAProxy's default asks AAAA first and keeps it when there is one.
        ("A and AAAA", vec!["2001:db8::11:443", "2001:db8::12:443"]),
        ("IPv4 only", vec!["198.18.0.11:443", "198.18.0.12:443"]),
        // Ports from the SRV records, addresses from the additional section.
        ("SRV", vec!["198.18.0.11:443", "198.18.0.12:8443"]),
    ];
    for (mode, (what, want)) in expectations.iter().enumerate() {
        let haproxy = Haproxy::start_sections(&ns, &clients_page_haproxy(mode));
        eventually(&format!("HAProxy ({what}) to fill its slots"), 30, || {
            haproxy.backend_endpoints() == *want
        });
    }
}

/// The secondaries page's catalog settings, with the install page's zone: the agent takes them,
/// a catalog of that name and its consumer NOTIFYed of every zone.
#[test]
fn the_catalog_settings_of_the_secondaries_page_are_a_configuration_the_agent_takes() {
    let blocks = book::blocks(
        "secondaries.md",
        "## Secondaries that configure themselves (catalog zones)",
    );
    let settings = blocks.first().expect("the agent's catalog settings");
    let text = format!("zones:\n  - name: ingress.prod.example.com\n{settings}");
    let config = hostport_dns::agent_config::parse(&text, "secondaries.md".as_ref())
        .unwrap_or_else(|e| panic!("the agent refuses the page's settings: {e}\n{text}"));
    let transfer = config.transfer.expect("transfers configured");
    let catalog = transfer.catalog.expect("a catalog");
    assert_eq!(catalog.spec.apex.to_ascii(), "catalog.prod.example.com.");
    assert_eq!(catalog.grace.as_secs(), 3600);
    assert!(
        transfer.notify.iter().all(|n| n.catalog),
        "{:?}",
        transfer.notify
    );
}
