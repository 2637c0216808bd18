//! The kernel path as the release before map layout 6 left it on a node: its XDP program
//! (`tests/data/legacy-layout-5/hostport-dns-xdp.o`), its maps pinned under their `_v5` names,
//! its link pinned, answering a table written in its layout. What an upgrade starts from.
//!
//! The layout-5 value types are written out here (this project's own, from its history) rather
//! than kept in `common`: the agent never reads them; it only has to leave their program
//! answering until it hands the link over.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader, Pod,
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{
        Xdp, XdpMode,
        links::{FdLink, PinnedLink},
    },
};
use hostport_dns_common::{
    csum::sum16,
    dns::{CLASS_IN, POINTER_TO_QUESTION, TYPE_A, TYPE_AAAA},
    hash::name_hash,
};
use hostport_dns_core::table::RecordTable;

/// The release's program, built from commit 3708e46 (see tests/data/README.md).
pub static OBJECT: &[u8] =
    aya::include_bytes_aligned!("../data/legacy-layout-5/hostport-dns-xdp.o");

const LAYOUT: u32 = 5;
const NAME_BUF_LEN: usize = 256;
const A_RRS: usize = 16 * 16;
const AAAA_RRS: usize = 16 * 28;

#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Generation {
    seed: u64,
    active: u32,
    apex_labels: [u16; 2],
}

#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct NameEntry {
    name: [u8; NAME_BUF_LEN],
    name_len: u16,
    flags: u16,
    zone_id: u32,
    a_len: u16,
    aaaa_len: u16,
    a_csum: u16,
    aaaa_csum: u16,
    a_rrs: [u8; A_RRS],
    aaaa_rrs: [u8; AAAA_RRS],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct LocalAddrs {
    v4_count: u32,
    v6_count: u32,
    v4: [[u8; 4]; 16],
    v6: [[u8; 16]; 16],
}

// SAFETY: plain data without padding, as layout 5 defined them.
unsafe impl Pod for Generation {}
unsafe impl Pod for NameEntry {}
unsafe impl Pod for LocalAddrs {}

/// The legacy program loaded, its maps pinned in `pin_dir`.
pub struct Legacy {
    pub ebpf: Ebpf,
    pin_dir: PathBuf,
}

impl Legacy {
    /// Loads the program for port 1053 with its maps pinned (layout-5 names) in `pin_dir`.
    pub fn load(pin_dir: &Path) -> Self {
        std::fs::create_dir_all(pin_dir).expect("the pin directory");
        let mut loader = EbpfLoader::new();
        loader.override_global("HPD_DNS_PORT", &1053u16, true);
        let maps = [
            "HPD_GEN",
            "HPD_NAMES",
            "HPD_ZONES",
            "HPD_LOCAL",
            "HPD_COUNTERS",
            "HPD_ZONE_ANSW",
        ];
        let pins: Vec<(&str, PathBuf)> = maps
            .iter()
            .map(|name| (*name, pin_dir.join(format!("{name}_v{LAYOUT}"))))
            .collect();
        for (name, path) in &pins {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(OBJECT).expect("load the layout-5 object");
        let program: &mut Xdp = ebpf
            .program_mut("hostport_dns_xdp")
            .expect("its program")
            .try_into()
            .expect("XDP");
        program.load().expect("the verifier accepts it");
        Self {
            ebpf,
            pin_dir: pin_dir.to_path_buf(),
        }
    }

    /// Writes `table` and this host's `local` addresses into generation 0 and makes it active.
    pub fn write(&mut self, table: &RecordTable, local: &[IpAddr]) {
        let seed = 0x1234_5678_9abc_def1;
        let mut names: BpfHashMap<&mut MapData, u64, NameEntry> =
            BpfHashMap::try_from(self.ebpf.map_mut("HPD_NAMES").expect("HPD_NAMES"))
                .expect("a hash map");
        let mut apex_labels = 0u16;
        for (name, node) in table.nodes() {
            let zone = &table.zones()[node.zone as usize];
            if node.apex {
                apex_labels |= 1 << (zone.spec.apex.num_labels() - 1);
            }
            let wire = name.as_bytes().to_vec();
            let entry = name_entry(&wire, node, zone);
            let key = name_hash(seed, &wire) & !1;
            names.insert(key, entry, 0).expect("write a name");
        }
        let mut zones: Array<&mut MapData, hostport_dns_common::entry::ZoneEntry> =
            Array::try_from(self.ebpf.map_mut("HPD_ZONES").expect("HPD_ZONES")).expect("an array");
        for zone in table.zones() {
            // Layout 5's zone entry has the same bytes as layout 6's (a reserved word where the
            // counter slot now is).
            let entry = hostport_dns::xdp::entries::zone_entry(zone, seed, 0);
            zones.set(zone.id, entry, 0).expect("write a zone");
        }
        let mut addrs = LocalAddrs {
            v4_count: 0,
            v6_count: 0,
            v4: [[0; 4]; 16],
            v6: [[0; 16]; 16],
        };
        for address in local {
            match address {
                IpAddr::V4(a) => {
                    addrs.v4[addrs.v4_count as usize] = a.octets();
                    addrs.v4_count += 1;
                }
                IpAddr::V6(a) => {
                    addrs.v6[addrs.v6_count as usize] = a.octets();
                    addrs.v6_count += 1;
                }
            }
        }
        let mut local_map: Array<&mut MapData, LocalAddrs> =
            Array::try_from(self.ebpf.map_mut("HPD_LOCAL").expect("HPD_LOCAL")).expect("an array");
        local_map.set(0, addrs, 0).expect("write the addresses");
        let mut state: Array<&mut MapData, Generation> =
            Array::try_from(self.ebpf.map_mut("HPD_GEN").expect("HPD_GEN")).expect("an array");
        state
            .set(
                0,
                Generation {
                    seed,
                    active: 0,
                    apex_labels: [apex_labels, 0],
                },
                0,
            )
            .expect("switch to generation 0");
    }

    /// Attaches the program to `interface` natively and pins the link where an agent with this
    /// pin directory looks for it.
    pub fn attach(&mut self, interface: &str) {
        let program: &mut Xdp = self
            .ebpf
            .program_mut("hostport_dns_xdp")
            .expect("its program")
            .try_into()
            .expect("XDP");
        let id = program
            .attach(interface, XdpMode::Driver)
            .expect("attach natively");
        let link = program.take_link(id).expect("the link");
        let link = FdLink::try_from(link).expect("a BPF link");
        let pinned: PinnedLink = link
            .pin(self.pin_dir.join(format!("link-{interface}")))
            .expect("pin the link");
        drop(pinned);
    }
}

fn name_entry(
    wire: &[u8],
    node: &hostport_dns_core::table::Node,
    zone: &hostport_dns_core::table::Zone,
) -> NameEntry {
    let ttl = node.ttl_in(zone);
    let rr = |rtype: u16, address: &[u8]| {
        let mut rr = Vec::new();
        rr.extend_from_slice(&POINTER_TO_QUESTION.to_be_bytes());
        rr.extend_from_slice(&rtype.to_be_bytes());
        rr.extend_from_slice(&CLASS_IN.to_be_bytes());
        rr.extend_from_slice(&ttl.to_be_bytes());
        rr.extend_from_slice(&(address.len() as u16).to_be_bytes());
        rr.extend_from_slice(address);
        rr
    };
    let a: Vec<u8> = node
        .a
        .iter()
        .flat_map(|a| rr(TYPE_A, &a.octets()))
        .collect();
    let aaaa: Vec<u8> = node
        .aaaa
        .iter()
        .flat_map(|a| rr(TYPE_AAAA, &a.octets()))
        .collect();
    let mut entry = NameEntry {
        name: [0; NAME_BUF_LEN],
        name_len: wire.len() as u16,
        flags: u16::from(node.apex),
        zone_id: zone.id,
        a_len: a.len() as u16,
        aaaa_len: aaaa.len() as u16,
        a_csum: sum16(&a),
        aaaa_csum: sum16(&aaaa),
        a_rrs: [0; A_RRS],
        aaaa_rrs: [0; AAAA_RRS],
    };
    entry.name[NAME_BUF_LEN - wire.len()..].copy_from_slice(wire);
    entry.a_rrs[..a.len()].copy_from_slice(&a);
    entry.aaaa_rrs[..aaaa.len()].copy_from_slice(&aaaa);
    entry
}
