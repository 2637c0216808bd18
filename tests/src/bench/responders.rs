//! The responders compared, each started alone in the server namespace of a fresh link.

use std::{
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    programs::{Xdp, XdpMode},
};
use hostport_dns_common::maps;
use hostport_dns_core::table::RecordTable;

use crate::{
    TempDir,
    agent::Agent,
    clients::udp_exchange,
    knot::{Knot, zone_file},
    netns::{Link, NetNs, sh},
    packet::QueryBuilder,
};

pub const PORT: u16 = 1053;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    HostportXdp,
    HostportUserspace,
    KnotXdp,
    KnotUdp,
    Nsd,
    Reflector,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::HostportXdp => "hostport-dns, XDP",
            Kind::HostportUserspace => "hostport-dns, XDP off",
            Kind::KnotXdp => "knotd, XDP mode",
            Kind::KnotUdp => "knotd, kernel UDP",
            Kind::Nsd => "nsd",
            Kind::Reflector => "XDP_TX reflector (ceiling)",
        }
    }
}

/// A running responder: whatever keeps it alive, and the processes whose CPU it costs.
pub struct Running {
    pub pids: Vec<u32>,
    kind: Kind,
    _agent: Option<Agent>,
    _knot: Option<Knot>,
    _nsd: Option<Nsd>,
    _program: Option<Ebpf>,
}

impl Running {
    /// How often the agent's program grew an answer at the tail (the fallback), if it is an
    /// agent with XDP.
    pub fn xdp_fallbacks(&self) -> Option<f64> {
        let agent = self
            ._agent
            .as_ref()
            .filter(|_| self.kind == Kind::HostportXdp)?;
        Some(agent.metric("hostport_dns_xdp_events", &[("event", "grown_at_tail")]))
    }
}

/// Starts `kind`, or says why it cannot run here (knotd's XDP mode on a kernel whose verifier
/// rejects its program).
pub fn start(
    kind: Kind,
    link: &Link,
    dir: &TempDir,
    records_yaml: &str,
    table: &RecordTable,
) -> Result<Running, String> {
    let server: SocketAddr = SocketAddr::new(link.server.ipv4.parse().expect("an address"), PORT);
    let records = dir.write("records.yaml", records_yaml);
    let records = records.to_str().expect("UTF-8");
    let agent = |mode: &str| {
        Agent::start(
            &link.server_ns,
            &[
                "--records",
                records,
                "--interface",
                &link.server.ifname,
                "--xdp-mode",
                mode,
                "--udp-workers",
                "1",
                // The load comes from one address with 100 TCP connections: the per-client cap
                // (32 by default) would close most of them at accept, where the peers have none.
                "--tcp-max-per-client",
                "128",
            ],
        )
    };
    let mut running = Running {
        pids: Vec::new(),
        kind,
        _agent: None,
        _knot: None,
        _nsd: None,
        _program: None,
    };
    match kind {
        Kind::HostportXdp | Kind::HostportUserspace => {
            let a = agent(if kind == Kind::HostportXdp {
                "native"
            } else {
                "off"
            });
            running.pids.push(a.pid());
            running._agent = Some(a);
        }
        Kind::KnotXdp | Kind::KnotUdp => {
            let iface = (kind == Kind::KnotXdp).then_some(link.server.ifname.as_str());
            let k = Knot::try_start_with(&link.server_ns, server, table, iface)?;
            running.pids.push(k.pid());
            running._knot = Some(k);
        }
        Kind::Nsd => {
            let n = Nsd::start(&link.server_ns, server, table);
            running.pids.push(n.child.id());
            running._nsd = Some(n);
        }
        Kind::Reflector => {
            running._program = Some(attach_reflector(&link.server_ns, &link.server.ifname))
        }
    }
    Ok(running)
}

fn attach_reflector(ns: &NetNs, ifname: &str) -> Ebpf {
    let ifname = ifname.to_owned();
    ns.run(move || {
        let mut ebpf = aya::EbpfLoader::new()
            .override_global(maps::GLOBAL_DNS_PORT, &PORT, true)
            .load(hostport_dns::TESTBED_OBJECT)
            .expect("load the test bed's object");
        let program: &mut Xdp = ebpf
            .program_mut(maps::REFLECT_PROGRAM)
            .expect("the reflector")
            .try_into()
            .expect("an XDP program");
        program.load().expect("load the reflector");
        program
            .attach(&ifname, XdpMode::Driver)
            .expect("attach the reflector");
        ebpf
    })
}

/// NSD serving the table's zones from one process, killed on drop.
pub struct Nsd {
    child: Child,
    _dir: TempDir,
}

impl Nsd {
    pub fn start(ns: &NetNs, addr: SocketAddr, table: &RecordTable) -> Self {
        let dir = TempDir::new("nsd");
        let d = dir.path.display().to_string();
        let mut conf = format!(
            "server:\n  ip-address: {}@{}\n  server-count: 1\n  username: \"\"\n  zonesdir: \"{d}\"\n  \
             pidfile: \"{d}/nsd.pid\"\n  database: \"\"\n  zonelistfile: \"{d}/zone.list\"\n  \
             xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  logfile: \"{d}/nsd.log\"\n  verbosity: 0\n\
             remote-control:\n  control-enable: no\n",
            addr.ip(),
            addr.port()
        );
        for zone in table.zones() {
            let file = dir.write(&format!("{}zone", zone.spec.apex), &zone_file(table, zone));
            conf.push_str(&format!(
                "zone:\n  name: \"{}\"\n  zonefile: \"{}\"\n",
                zone.spec.apex,
                file.display()
            ));
        }
        let conf_path = dir.write("nsd.conf", &conf);
        sh(ns.command("nsd-checkconf").arg(&conf_path));
        let child = ns
            .command("nsd")
            .args(["-d", "-c"])
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nsd");
        let nsd = Self { child, _dir: dir };
        let probe = QueryBuilder::new(&table.zones()[0].spec.apex.to_string(), 6).bytes();
        let deadline = Instant::now() + Duration::from_secs(20);
        while udp_exchange(ns, addr, probe.clone()).is_none() {
            assert!(Instant::now() < deadline, "nsd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        nsd
    }
}

impl Drop for Nsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
