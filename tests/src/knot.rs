//! Knot DNS as a reference: a zone file written from the same record table, served by knotd in
//! a namespace, and a comparison of two answers section by section.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use hickory_proto::{
    op::Message,
    rr::{RData, Record, RecordType},
};
use hostport_dns_core::table::{RecordTable, Zone};

/// Knot's ceiling on UDP answers here: its highest (Knot 3.2 takes 512 to 4096). Compare its
/// answers with an agent run with the same `--udp-max-payload`.
pub const UDP_MAX_PAYLOAD: u16 = 4096;

use crate::{TempDir, clients::udp_exchange, netns::NetNs, packet::QueryBuilder};

/// A zone file (RFC 1035 master format) for one zone of the table.
pub fn zone_file(table: &RecordTable, zone: &Zone) -> String {
    let spec = &zone.spec;
    let mut out = String::new();
    let soa = &spec.soa;
    let _ = writeln!(out, "$TTL {}", spec.ttl);
    let _ = writeln!(
        out,
        "{} SOA {} {} {} {} {} {} {}",
        spec.apex,
        soa.mname,
        soa.rname,
        zone.serial,
        soa.refresh,
        soa.retry,
        soa.expire,
        soa.minimum
    );
    for ns in &spec.nameservers {
        let _ = writeln!(out, "{} NS {}", spec.apex, ns.name);
    }
    let mut nodes: Vec<_> = table.nodes().filter(|(_, n)| n.zone == zone.id).collect();
    nodes.sort_by_key(|(name, _)| name.as_bytes().to_vec());
    for (name, node) in nodes {
        for a in &node.a {
            let _ = writeln!(out, "{name} A {a}");
        }
        for a in &node.aaaa {
            let _ = writeln!(out, "{name} AAAA {a}");
        }
        for s in &node.srv {
            let _ = writeln!(
                out,
                "{name} SRV {} {} {} {}",
                s.priority, s.weight, s.port, s.target
            );
        }
    }
    out
}

/// knotd serving the table's zones, killed on drop.
pub struct Knot {
    child: Child,
    _dir: TempDir,
    pub addr: SocketAddr,
}

impl Knot {
    pub fn start(ns: &NetNs, addr: SocketAddr, table: &RecordTable) -> Self {
        Self::start_with(ns, addr, table, None)
    }

    /// knotd, in XDP mode on `xdp_interface` if given (UDP answered through AF_XDP), with one
    /// worker of each kind.
    pub fn start_with(
        ns: &NetNs,
        addr: SocketAddr,
        table: &RecordTable,
        xdp_interface: Option<&str>,
    ) -> Self {
        let zones = zone_files(table);
        Self::start_zones(ns, addr, &zones, xdp_interface)
    }

    /// [`Knot::start_with`], or why knotd did not come up, in its own words (knotd 3.2's XDP
    /// program, for one, fails the verifier of kernel 6.18).
    pub fn try_start_with(
        ns: &NetNs,
        addr: SocketAddr,
        table: &RecordTable,
        xdp_interface: Option<&str>,
    ) -> Result<Self, String> {
        let zones = zone_files(table);
        Self::try_start_in(ns, addr, &zones, xdp_interface, ("", &[]), None)
    }

    /// knotd serving zone files given as text, (apex, zone file) each: a reference written
    /// independently of hostport-dns's compiler.
    pub fn start_zones(
        ns: &NetNs,
        addr: SocketAddr,
        zones: &[(String, String)],
        xdp_interface: Option<&str>,
    ) -> Self {
        Self::start_with_modules(ns, addr, zones, xdp_interface, "", &[])
    }

    /// knotd with module sections (`modules`, configuration text such as a `mod-rrl:` block)
    /// and the modules every zone loads (`zone_modules`, such as `mod-rrl/default`).
    pub fn start_with_modules(
        ns: &NetNs,
        addr: SocketAddr,
        zones: &[(String, String)],
        xdp_interface: Option<&str>,
        modules: &str,
        zone_modules: &[&str],
    ) -> Self {
        Self::start_in(
            ns,
            addr,
            zones,
            xdp_interface,
            (modules, zone_modules),
            None,
        )
    }

    /// knotd serving the table's zones from inside `cgroup` (its memory charged there).
    pub fn start_in_cgroup(
        ns: &NetNs,
        addr: SocketAddr,
        table: &RecordTable,
        cgroup: &crate::cgroup::Cgroup,
    ) -> Self {
        let zones = zone_files(table);
        Self::start_in(ns, addr, &zones, None, ("", &[]), Some(cgroup))
    }

    fn start_in(
        ns: &NetNs,
        addr: SocketAddr,
        zones: &[(String, String)],
        xdp_interface: Option<&str>,
        modules: (&str, &[&str]),
        cgroup: Option<&crate::cgroup::Cgroup>,
    ) -> Self {
        Self::try_start_in(ns, addr, zones, xdp_interface, modules, cgroup)
            .unwrap_or_else(|reason| panic!("{reason}"))
    }

    fn try_start_in(
        ns: &NetNs,
        addr: SocketAddr,
        zones: &[(String, String)],
        xdp_interface: Option<&str>,
        (modules, zone_modules): (&str, &[&str]),
        cgroup: Option<&crate::cgroup::Cgroup>,
    ) -> Result<Self, String> {
        let dir = TempDir::new("knot");
        let xdp = match xdp_interface {
            Some(iface) => format!(
                "xdp:\n  listen: [{iface}@{}]\n  udp: on\n  tcp: off\n  route-check: off\n",
                addr.port()
            ),
            None => String::new(),
        };
        // Knot's ceiling on UDP answers at its highest, which an agent compared with it is
        // given too, so that both advertise and answer alike.
        let mut conf = format!(
            "server:\n  listen: {}@{}\n  rundir: {d}\n  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n  udp-max-payload: {UDP_MAX_PAYLOAD}\n\
             {xdp}\
             log:\n  - target: stderr\n    any: error\n\
             database:\n  storage: {d}\n\
             {modules}\
             zone:\n",
            addr.ip(),
            addr.port(),
            d = dir.path.display()
        );
        for (apex, text) in zones {
            let file = dir.write(&format!("{apex}zone"), text);
            let _ = write!(
                conf,
                "  - domain: {apex}\n    file: {}\n    journal-content: none\n    zonefile-sync: -1\n    semantic-checks: off\n",
                file.display()
            );
            if !zone_modules.is_empty() {
                let _ = writeln!(conf, "    module: [{}]", zone_modules.join(", "));
            }
        }
        let conf_path = dir.write("knot.conf", &conf);
        let mut command = match cgroup {
            Some(cgroup) => {
                let mut command = cgroup.command("ip");
                command.args(["netns", "exec", &ns.name, "knotd"]);
                command
            }
            None => ns.command("knotd"),
        };
        // Its errors (the log above: errors only, to stderr) kept, to say why it did not start.
        let log_path = dir.path.join("knotd.log");
        let log = std::fs::File::create(&log_path).expect("knotd's log file");
        let child = command
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start knotd");
        let mut knot = Self {
            child,
            _dir: dir,
            addr,
        };
        let probe = QueryBuilder::new(&zones[0].0, 6).bytes();
        let deadline = Instant::now() + Duration::from_secs(20);
        while udp_exchange(ns, addr, probe.clone()).is_none() {
            let exited = knot.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                let said = std::fs::read_to_string(&log_path).unwrap_or_default();
                let said: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
                let how =
                    exited.map_or("did not answer in 20 s".into(), |s| format!("exited ({s})"));
                return Err(format!(
                    "knotd did not start: it {how}; it said: {}",
                    said[said.len().saturating_sub(3)..].join(" / ")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(knot)
    }
}

impl Knot {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer reduced to what two correct servers must agree on: the header, and each section as
/// a set, with the SOA serial (a content hash here, a counter in Knot) zeroed.
#[derive(Debug, PartialEq, Eq)]
pub struct Comparable {
    pub id: u16,
    pub rcode: String,
    pub flags: String,
    pub question: Vec<String>,
    pub answer: BTreeSet<String>,
    pub authority: BTreeSet<String>,
    pub additional: BTreeSet<String>,
    pub edns: Option<String>,
}

pub fn comparable(bytes: &[u8]) -> Comparable {
    let m = Message::from_vec(bytes).expect("a parsable answer");
    let md = &m.metadata;
    let flags = format!(
        "qr={} op={:?} aa={} tc={} rd={} ra={} ad={} cd={}",
        md.message_type as u8,
        md.op_code,
        md.authoritative,
        md.truncation,
        md.recursion_desired,
        md.recursion_available,
        md.authentic_data,
        md.checking_disabled
    );
    let section = |records: &[Record]| records.iter().map(describe).collect::<BTreeSet<_>>();
    Comparable {
        id: md.id,
        rcode: format!("{:?}", md.response_code),
        flags,
        question: m
            .queries
            .iter()
            .map(|q| format!("{} {:?} {:?}", q.name, q.query_type, q.query_class))
            .collect(),
        answer: section(&m.answers),
        authority: section(&m.authorities),
        additional: section(&m.additionals),
        edns: m.edns.as_ref().map(|e| {
            format!(
                "payload={} version={} do={}",
                e.max_payload(),
                e.version(),
                e.flags().dnssec_ok
            )
        }),
    }
}

fn describe(record: &Record) -> String {
    let data = match &record.data {
        RData::SOA(soa) => format!(
            "{} {} SERIAL {} {} {} {}",
            soa.mname.to_lowercase(),
            soa.rname.to_lowercase(),
            soa.refresh,
            soa.retry,
            soa.expire,
            soa.minimum
        ),
        other => other.to_string().to_lowercase(),
    };
    let rtype: RecordType = record.record_type();
    format!(
        "{} {} {rtype} {data}",
        record.name.to_lowercase(),
        record.ttl
    )
}

/// Each zone of `table`: its apex and its zone file.
fn zone_files(table: &RecordTable) -> Vec<(String, String)> {
    table
        .zones()
        .iter()
        .map(|zone| (zone.spec.apex.to_string(), zone_file(table, zone)))
        .collect()
}
