//! How many nodes one UDP answer holds, per mode and size, measured on the answer path itself
//! and checked against the table docs/src/clients.md gives operators (between the
//! `answer-sizes` markers): a change of encoding or truncation that moves a figure fails here
//! until the table says so. `cargo xtask test -- answer_sizes:: --nocapture` prints the table.

use hickory_proto::op::Message;
use hostport_dns::sources::file;
use hostport_dns_core::{
    answer::{Asker, respond_for},
    dns::{
        Query,
        message::{SrvTargetCompression, Transport},
    },
    table::RecordTable,
};
use hostport_dns_tests::packet::QueryBuilder;

/// What the client offers (EDNS), as the README's columns.
const SIZES: [u16; 4] = [512, 1232, 4096, 8192];
/// More nodes than any answer below holds.
const MOST_NODES: usize = 700;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SRV: u16 = 33;

/// Names of one size class: the zone, the ingress name under it, and a node's name.
struct Names {
    what: &'static str,
    zone: &'static str,
    /// The ingress name, relative to the zone.
    name: &'static str,
    node: fn(usize) -> String,
}

const SHORT: Names = Names {
    what: "short names",
    zone: "k8s.example",
    name: "web.ing",
    node: |i| format!("cp-{i}"),
};

const LONG: Names = Names {
    what: "long names",
    zone: "ingress.prod.example.com",
    name: "default-nginx.ingress-nginx",
    node: |i| format!("ip-10-0-{}-{}.eu-west-1.compute.internal", i / 250, i % 250),
};

/// A fleet of `nodes` dual-stack nodes: the ingress name with every node's addresses, and its
/// SRV records, one per node, with the nodes' addresses at their targets (as the pod source
/// writes them).
fn table(names: &Names, nodes: usize) -> RecordTable {
    let v4 = |i: usize| format!("198.18.{}.{}", 1 + i / 250, 1 + i % 250);
    let v6 = |i: usize| format!("\"2001:db8::{:x}\"", 0x1000 + i);
    let mut records = format!("      {}: [", names.name);
    let all: Vec<String> = (0..nodes).flat_map(|i| [v4(i), v6(i)]).collect();
    records.push_str(&all.join(", "));
    records.push_str("]\n");
    let mut srv = format!("      _https._tcp.{}: [", names.name);
    let targets: Vec<String> = (0..nodes)
        .map(|i| format!("{{ port: 443, target: \"{}.nodes\" }}", (names.node)(i)))
        .collect();
    srv.push_str(&targets.join(", "));
    srv.push_str("]\n");
    for i in 0..nodes {
        records.push_str(&format!(
            "      \"{}.nodes\": [{}, {}]\n",
            (names.node)(i),
            v4(i),
            v6(i)
        ));
    }
    let yaml = format!(
        "zones:\n  - name: {}\n    records:\n{records}    srv:\n{srv}",
        names.zone
    );
    let snapshot = file::parse(&yaml, "fleet.yaml".as_ref()).expect("the fleet's records");
    RecordTable::compile(&snapshot.zones, snapshot.records()).0
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    A,
    Aaaa,
    /// The SRV records whole, their targets in full (`--srv-target-compression never`; their
    /// targets' addresses as many as fit).
    SrvInFull,
    /// The SRV records whole, their targets compressed where in full they do not fit a client
    /// offering more than 1232 bytes (`to-fit`, the default).
    Srv,
    /// The SRV records and every target's addresses.
    SrvWithAdditional,
}

impl Mode {
    const ALL: [Mode; 5] = [
        Mode::A,
        Mode::Aaaa,
        Mode::SrvInFull,
        Mode::Srv,
        Mode::SrvWithAdditional,
    ];

    fn label(self) -> &'static str {
        match self {
            Mode::A => "A",
            Mode::Aaaa => "AAAA",
            Mode::SrvInFull => "SRV, targets in full (`never`)",
            Mode::Srv => "SRV, `to-fit` (the default)",
            Mode::SrvWithAdditional => "SRV with every target's A and AAAA",
        }
    }
}

/// Whether the whole answer for a fleet of `nodes` fits what the client offers.
fn fits(names: &Names, mode: Mode, nodes: usize, size: u16) -> bool {
    let table = table(names, nodes);
    let name = format!("{}.{}", names.name, names.zone);
    let (qname, qtype) = match mode {
        Mode::A => (name, TYPE_A),
        Mode::Aaaa => (name, TYPE_AAAA),
        Mode::SrvInFull | Mode::Srv | Mode::SrvWithAdditional => {
            (format!("_https._tcp.{name}"), TYPE_SRV)
        }
    };
    let query = QueryBuilder::new(&qname, qtype).edns(size, false).bytes();
    let srv_targets = match mode {
        Mode::SrvInFull => SrvTargetCompression::Never,
        _ => SrvTargetCompression::default(),
    };
    let asker = Asker {
        srv_targets,
        ..Asker::ANONYMOUS
    };
    let answer =
        respond_for(&Query::read(&query), Some(&table), Transport::Udp, &asker).expect("an answer");
    assert!(answer.bytes.len() <= usize::from(size), "over the offer");
    let message = Message::from_vec(&answer.bytes).expect("it parses");
    if message.metadata.truncation {
        assert!(message.answers.is_empty(), "TC=1 comes without records");
        return false;
    }
    assert_eq!(message.answers.len(), nodes, "every record or TC=1");
    match mode {
        Mode::SrvWithAdditional => message.additionals.len() == 2 * nodes,
        _ => true,
    }
}

/// The most nodes whose answer fits (answers grow with the fleet: halving finds the edge).
fn most_nodes(names: &Names, mode: Mode, size: u16) -> usize {
    let (mut fitting, mut too_many) = (1, MOST_NODES);
    assert!(fits(names, mode, fitting, size), "one node fits");
    assert!(
        !fits(names, mode, too_many, size),
        "{MOST_NODES} nodes do not"
    );
    while too_many - fitting > 1 {
        let middle = (fitting + too_many) / 2;
        if fits(names, mode, middle, size) {
            fitting = middle;
        } else {
            too_many = middle;
        }
    }
    fitting
}

fn measured_table() -> Vec<String> {
    let mut rows = vec![
        "| answer | names | 512 | 1232 | 4096 | 8192 |".to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    for mode in Mode::ALL {
        for names in [&SHORT, &LONG] {
            let counts: Vec<String> = SIZES
                .iter()
                .map(|size| most_nodes(names, mode, *size).to_string())
                .collect();
            rows.push(format!(
                "| {} | {} | {} |",
                mode.label(),
                names.what,
                counts.join(" | ")
            ));
        }
    }
    rows
}

fn documented_table() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/clients.md"
    ))
    .expect("docs/src/clients.md");
    let start = readme
        .find("<!-- answer-sizes -->")
        .expect("the answer-sizes table in docs/src/clients.md");
    let end = readme
        .find("<!-- /answer-sizes -->")
        .expect("the table's end marker");
    readme[start..end]
        .lines()
        .skip(1)
        .filter(|line| line.starts_with('|'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_fleet_sizes_are_what_one_udp_answer_holds() {
    let measured = measured_table();
    println!("{}", measured.join("\n"));
    assert_eq!(
        documented_table(),
        measured,
        "docs/src/clients.md's table of nodes per answer is not what the answers hold"
    );
}
