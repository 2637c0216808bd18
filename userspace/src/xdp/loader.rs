//! Loads the XDP program and attaches it to the configured interfaces.

use std::path::{Path, PathBuf};

use aya::{
    Ebpf, EbpfLoader,
    maps::{
        MapData,
        lpm_trie::{Key, LpmTrie},
    },
    programs::{
        ProgramError, Xdp, XdpMode as AyaXdpMode,
        links::{FdLink, PinnedLink},
        xdp::{XdpLink, XdpLinkId},
    },
};
use hostport_dns_common::{generation::Capacity, limits::DEFAULT_UDP_MAX_PAYLOAD, maps};
use ipnet::IpNet;
use tracing::{info, warn};

use crate::{EBPF_OBJECT, clients::ClientPolicyTable, xdp::pins::PinDir};

/// How the program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver, falling back to generic mode where the driver has no XDP support.
    Auto,
    /// In the driver only (fails where the driver has no XDP support).
    Native,
    /// Generic (SKB) mode: works everywhere (`lo` included), slower.
    Generic,
    /// No XDP: userspace answers everything.
    Off,
}

/// How much the XDP program logs (through aya-log): nothing by default, since every logged
/// packet costs time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EbpfLogLevel {
    #[default]
    Off,
    /// Every packet passed up, with its reason.
    Debug,
    /// Every packet, answered or passed.
    Trace,
}

impl EbpfLogLevel {
    /// The value of aya-log's AYA_LOG_LEVEL global (aya-log levels: debug 4, trace 5).
    fn global(self) -> u8 {
        match self {
            Self::Off => 0,
            Self::Debug => 4,
            Self::Trace => 5,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error(
        "loading the XDP program was refused ({0}): the agent needs CAP_BPF, CAP_NET_ADMIN and \
         CAP_PERFMON (run it as root or grant these capabilities)"
    )]
    Permission(String),
    #[error("loading the XDP program failed: {0}")]
    Load(String),
    #[error("this kernel lacks {0}, which the XDP program needs")]
    Unsupported(String),
    #[error("interface {0:?} does not exist")]
    UnknownInterface(String),
    #[error(
        "another hostport-dns agent holds the pin directory {0} (one agent per node and directory)"
    )]
    Held(PathBuf),
    #[error("attaching the XDP program to {interface} in {mode} mode failed: {reason}")]
    Attach {
        interface: String,
        mode: &'static str,
        reason: String,
    },
}

impl XdpError {
    /// Whether the kernel (or the privileges it grants) rather than the configuration stopped
    /// the program: with `--xdp-mode auto` the agent then serves from userspace alone.
    pub fn is_kernel_refusal(&self) -> bool {
        matches!(
            self,
            Self::Permission(_) | Self::Load(_) | Self::Unsupported(_) | Self::Attach { .. }
        )
    }
}

/// The loaded program and where it is attached. Dropping it detaches the program, unless its
/// links are pinned: then the kernel keeps answering from the pinned maps until the next agent
/// takes over (or `hostport-dns uninstall` removes the pins).
pub struct Dataplane {
    pub ebpf: Ebpf,
    /// (interface, mode actually used)
    pub attachments: Vec<(String, &'static str)>,
    /// Where the maps and links are pinned (locked by this agent), if they are.
    pub pins: Option<PinDir>,
    /// Interfaces to attach to, and how.
    pub interfaces: Vec<String>,
    /// How much the table holds (the maps' sizes).
    pub capacity: Capacity,
    mode: XdpMode,
    /// The links of the attachments this agent owns (without a pin directory): a resized
    /// table's program takes them over ([`Dataplane::take_over`]).
    links: Vec<XdpLinkId>,
}

impl Dataplane {
    /// Loads the program as `settings` say (its port, client policy, table capacity and UDP
    /// ceiling), to be attached to every interface in `interfaces` by [`Dataplane::attach`]
    /// (once its table holds what it should answer). With `pins` (a directory locked for this
    /// agent; it replaces `settings.pins`), the maps and links are pinned there, and what a
    /// previous agent pinned is adopted if it is a whole set of this layout: its maps keep their
    /// table, its links get the new program atomically.
    pub fn load(
        interfaces: &[String],
        mode: XdpMode,
        pins: Option<PinDir>,
        settings: Settings<'_>,
    ) -> Result<Self, XdpError> {
        let interfaces = resolve_interfaces(interfaces)?;
        for interface in &interfaces {
            if_index(interface)?;
        }
        let capacity = settings.capacity;
        let log = settings.log;
        if let Some(pins) = &pins {
            pins.prepare(&capacity);
        }
        let mut ebpf = load_object(
            EBPF_OBJECT,
            &Settings {
                pins: pins.as_ref(),
                ..settings
            },
        )?;
        if log != EbpfLogLevel::Off {
            forward_logs(&mut ebpf);
        }
        Ok(Self {
            ebpf,
            attachments: Vec::new(),
            pins,
            interfaces,
            capacity,
            mode,
            links: Vec::new(),
        })
    }

    /// Where the maps and links are pinned, if they are.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pins.as_ref().map(PinDir::path)
    }

    /// Attaches the program to its interfaces (pinned links get it atomically, so a previous
    /// agent's program answers until this moment).
    pub fn attach(&mut self) -> Result<(), XdpError> {
        let program = xdp_program(&mut self.ebpf)?;
        for interface in &self.interfaces {
            let used = match &self.pins {
                Some(pins) => {
                    attach_pinned(program, interface, self.mode, &pins.link_pin(interface))?
                }
                None => {
                    let (used, link) = attach(program, interface, self.mode)?;
                    self.links.push(link);
                    used
                }
            };
            info!(
                interface,
                mode = used,
                pinned = self.pins.is_some(),
                "XDP program attached"
            );
            self.attachments.push((interface.clone(), used));
        }
        Ok(())
    }

    /// Puts this program (a resized table's, loaded beside `previous` with maps of its own) in
    /// place of `previous`'s on every interface it is attached to: each link gets the new
    /// program in one atomic update, so every packet meets one program or the other, each with
    /// its whole table. Pinned links are found by their pins; the links `previous` owns are
    /// taken from it. Nothing is attached when `previous` was not yet (it is then once the
    /// first table is written, as at start).
    pub fn take_over(&mut self, previous: &mut Dataplane) -> Result<(), XdpError> {
        if previous.attachments.is_empty() {
            return Ok(());
        }
        if self.pins.is_some() {
            self.attach()?;
            // The pinned links keep the mode they were made in.
            self.attachments = previous.attachments.clone();
            return Ok(());
        }
        let old = xdp_program(&mut previous.ebpf)?;
        let new = xdp_program(&mut self.ebpf)?;
        for ((interface, mode), id) in previous.attachments.iter().zip(previous.links.drain(..)) {
            let mode: &'static str = mode;
            let fail = |reason: String| XdpError::Attach {
                interface: interface.clone(),
                mode,
                reason,
            };
            let link = old.take_link(id).map_err(|e| fail(describe(&e)))?;
            let id = new.attach_to_link(link).map_err(|e| fail(describe(&e)))?;
            self.links.push(id);
            self.attachments.push((interface.clone(), mode));
        }
        Ok(())
    }
}

/// Forwards the program's log records to the agent's log (target `hostport_dns_xdp`).
fn forward_logs(ebpf: &mut Ebpf) {
    let logger = match aya_log::EbpfLogger::init(ebpf) {
        Ok(logger) => logger,
        Err(err) => {
            warn!(%err, "eBPF logging unavailable");
            return;
        }
    };
    // SAFETY: the logger owns its ring buffer descriptor, which outlives the AsyncFd.
    let Ok(mut logger) = (unsafe { tokio::io::unix::AsyncFd::register(logger) }) else {
        warn!("eBPF logging unavailable: cannot poll its ring buffer");
        return;
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = logger.readable_mut().await else {
                return;
            };
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
    info!("eBPF logs on: they cost time on every logged packet");
}

/// Where the link of `interface` is pinned in `dir`.
pub fn link_pin(dir: &Path, interface: &str) -> PathBuf {
    dir.join(format!("link-{interface}"))
}

/// How to load an object.
pub struct Settings<'a> {
    pub port: u16,
    /// Where to pin the maps (and adopt a previous agent's), if anywhere.
    pub pins: Option<&'a PinDir>,
    pub log: EbpfLogLevel,
    pub clients: &'a ClientPolicyTable,
    pub capacity: Capacity,
    /// The ceiling on UDP answers, which the program's OPT records advertise (`HPD_UDP_MAX_PAYLOAD`).
    pub udp_max_payload: u16,
    /// The test bed's object only: how long each run stays in its read section (`HPD_HOLD`,
    /// iterations of a spin; 0: not at all).
    pub hold_readers: u32,
}

/// Global of the test bed's object: how long a run stays in its read section.
const GLOBAL_HOLD: &str = "HPD_HOLD";

/// Loads the embedded object with the DNS port set, serving everyone, with a table of the
/// default capacity, without attaching it or pinning anything.
pub fn load(port: u16) -> Result<Ebpf, XdpError> {
    load_with_policy(port, &ClientPolicyTable::default())
}

/// Loads the embedded object with the DNS port and the client policy set, without attaching it
/// or pinning anything.
pub fn load_with_policy(port: u16, clients: &ClientPolicyTable) -> Result<Ebpf, XdpError> {
    load_object(
        EBPF_OBJECT,
        &Settings {
            port,
            pins: None,
            log: EbpfLogLevel::Off,
            clients,
            capacity: Capacity::DEFAULT,
            udp_max_payload: DEFAULT_UDP_MAX_PAYLOAD,
            hold_readers: 0,
        },
    )
}

/// Loads `object` (the agent's, or the test bed's) as `settings` say: the DNS port, the client
/// policy and the table's capacity set, the maps sized for it and pinned in (or adopted from)
/// the pin directory, the client prefixes written.
pub fn load_object(object: &[u8], settings: &Settings) -> Result<Ebpf, XdpError> {
    let mut loader = EbpfLoader::new();
    loader.override_global(maps::GLOBAL_DNS_PORT, &settings.port, true);
    let policy = settings.clients.kernel_policy();
    loader.override_global(maps::GLOBAL_POLICY, &policy, true);
    loader.override_global(maps::GLOBAL_CAPACITY, &settings.capacity, true);
    loader.override_global(
        maps::GLOBAL_UDP_MAX_PAYLOAD,
        &settings.udp_max_payload,
        true,
    );
    if settings.hold_readers != 0 {
        loader.override_global(GLOBAL_HOLD, &settings.hold_readers, true);
    }
    let level = settings.log.global();
    loader.override_global(aya_log::LEVEL, &level, true);
    for (name, _, entries) in maps::pinned_maps(&settings.capacity) {
        loader.map_max_entries(name, entries);
    }
    let paths: Vec<(&str, PathBuf)> = match settings.pins {
        Some(pins) => maps::pinned_maps(&settings.capacity)
            .iter()
            .map(|(name, _, _)| (*name, pins.map_pin(name)))
            .collect(),
        None => Vec::new(),
    };
    for (name, path) in &paths {
        loader.map_pin_path(name, path.as_path());
    }
    let mut ebpf = loader.load(object).map_err(|e| classify(chain(&e)))?;
    write_client_prefixes(&mut ebpf, settings.clients)?;
    let program = xdp_program(&mut ebpf)?;
    program.load().map_err(|e| classify(describe(&e)))?;
    load_renewal(&mut ebpf, settings.pins.is_some())?;
    Ok(ebpf)
}

/// Loads the lease's renewal program (`xdp::lease`) now, while the object holds every map's
/// descriptor its instructions name (the table's writer takes and closes some). It needs BPF
/// timers (Linux 5.15): required with a pin directory (a pinned table is leased); without one
/// the lease is never taken, and a kernel that refuses the program is no reason to stop.
fn load_renewal(ebpf: &mut Ebpf, required: bool) -> Result<(), XdpError> {
    let Some(program) = ebpf.program_mut(maps::RENEW_PROGRAM) else {
        return Err(XdpError::Load(format!(
            "the object has no program {}",
            maps::RENEW_PROGRAM
        )));
    };
    let loaded = <&mut Xdp>::try_from(program)
        .map_err(|e| describe(&e))
        .and_then(|program| program.load().map_err(|e| describe(&e)));
    match loaded {
        Ok(()) => Ok(()),
        Err(reason) if required => Err(classify(format!(
            "the pinned table's lease (BPF timers, Linux 5.15): {reason}"
        ))),
        Err(reason) => {
            tracing::debug!(%reason, "the lease's renewal program is not loaded (no pin directory needs it)");
            Ok(())
        }
    }
}

/// The allow-list and exempt prefixes, into the program's two tries (before it answers).
fn write_client_prefixes(ebpf: &mut Ebpf, clients: &ClientPolicyTable) -> Result<(), XdpError> {
    let entries = clients.prefixes.entries();
    let v4 = entries.iter().filter_map(|(net, grants)| match net {
        IpNet::V4(n) => Some((n.prefix_len(), n.network().octets(), *grants)),
        IpNet::V6(_) => None,
    });
    write_trie(ebpf, maps::CLIENTS_V4, v4)?;
    let v6 = entries.iter().filter_map(|(net, grants)| match net {
        IpNet::V6(n) => Some((n.prefix_len(), n.network().octets(), *grants)),
        IpNet::V4(_) => None,
    });
    write_trie(ebpf, maps::CLIENTS_V6, v6)
}

/// (prefix length, network address, grants) into the LPM trie `name`.
fn write_trie<K: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
    entries: impl Iterator<Item = (u8, K, u32)>,
) -> Result<(), XdpError> {
    let failed =
        |e: String| XdpError::Load(format!("cannot write the client prefixes ({name}): {e}"));
    let mut trie: LpmTrie<&mut MapData, K, u32> = ebpf
        .map_mut(name)
        .ok_or_else(|| failed("no such map".into()))?
        .try_into()
        .map_err(|e: aya::maps::MapError| failed(e.to_string()))?;
    for (prefix_len, network, grants) in entries {
        trie.insert(&Key::new(u32::from(prefix_len), network), grants, 0)
            .map_err(|e| failed(e.to_string()))?;
    }
    Ok(())
}

/// Attaches through the link pinned at `path` (handing it the new program atomically), or
/// attaches anew and pins the link there.
fn attach_pinned(
    program: &mut Xdp,
    interface: &str,
    mode: XdpMode,
    path: &Path,
) -> Result<&'static str, XdpError> {
    let fail = |reason: String| XdpError::Attach {
        interface: interface.to_owned(),
        mode: "pinned",
        reason,
    };
    if path.exists() {
        let adopted = PinnedLink::from_pin(path)
            .map_err(|e| {
                fail(format!(
                    "cannot open the pinned link {}: {e}",
                    path.display()
                ))
            })
            .and_then(|pinned| XdpLink::try_from(FdLink::from(pinned)).map_err(|e| fail(chain(&e))))
            .and_then(|link| program.attach_to_link(link).map_err(|e| fail(describe(&e))));
        match adopted {
            Ok(_) => return Ok("adopted"),
            Err(err) => {
                warn!(interface, %err, "the pinned link cannot be reused: attaching anew");
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let (used, id) = attach(program, interface, mode)?;
    let link = program.take_link(id).map_err(|e| fail(describe(&e)))?;
    let fd_link = FdLink::try_from(link).map_err(|e| {
        fail(format!(
            "the kernel attached without a link ({e}); cannot pin"
        ))
    })?;
    let pinned = fd_link
        .pin(path)
        .map_err(|e| fail(format!("cannot pin the link at {}: {e}", path.display())))?;
    // The pin holds the link; this handle can go.
    drop(pinned);
    Ok(used)
}

/// The XDP program in a loaded object.
pub fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpError> {
    ebpf.program_mut(maps::PROGRAM)
        .ok_or_else(|| XdpError::Load(format!("the object has no program {}", maps::PROGRAM)))?
        .try_into()
        .map_err(|e: ProgramError| XdpError::Load(e.to_string()))
}

fn attach(
    program: &mut Xdp,
    interface: &str,
    mode: XdpMode,
) -> Result<(&'static str, XdpLinkId), XdpError> {
    let try_mode = |program: &mut Xdp, aya_mode, name: &'static str| {
        program
            .attach(interface, aya_mode)
            .map(|id| (name, id))
            .map_err(|e| XdpError::Attach {
                interface: interface.to_owned(),
                mode: name,
                reason: describe(&e),
            })
    };
    match mode {
        XdpMode::Native => try_mode(program, AyaXdpMode::Driver, "native"),
        XdpMode::Generic | XdpMode::Off => try_mode(program, AyaXdpMode::Skb, "generic"),
        XdpMode::Auto => match try_mode(program, AyaXdpMode::Driver, "native") {
            Ok(used) => Ok(used),
            Err(err) => {
                warn!(interface, %err, "native XDP unavailable, falling back to generic mode");
                try_mode(program, AyaXdpMode::Skb, "generic")
            }
        },
    }
}

/// The interfaces to attach to, `auto` standing for the interface of the default route (where
/// the node's address, and the load balancers' queries, are).
pub fn resolve_interfaces(interfaces: &[String]) -> Result<Vec<String>, XdpError> {
    interfaces
        .iter()
        .map(|i| {
            if i == "auto" {
                default_route_interface()
            } else {
                Ok(i.clone())
            }
        })
        .collect()
}

fn default_route_interface() -> Result<String, XdpError> {
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    // Columns: Iface Destination Gateway Flags ...; the default route has destination 0.
    routes
        .lines()
        .skip(1)
        .find_map(|l| {
            let mut fields = l.split_whitespace();
            let iface = fields.next()?;
            (fields.next()? == "00000000").then(|| iface.to_owned())
        })
        .ok_or_else(|| XdpError::UnknownInterface("auto (no IPv4 default route)".into()))
}

/// The interface's index, or a clear error if it does not exist.
pub fn if_index(interface: &str) -> Result<u32, XdpError> {
    let name = std::ffi::CString::new(interface)
        .map_err(|_| XdpError::UnknownInterface(interface.to_owned()))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(XdpError::UnknownInterface(interface.to_owned())),
        index => Ok(index),
    }
}

/// An error with its causes, one after the other.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The error with its causes, and the verifier's last lines if it rejected the program.
fn describe(error: &ProgramError) -> String {
    let mut text = chain(error);
    if let ProgramError::LoadError { verifier_log, .. } = error {
        let log = verifier_log.to_string();
        let tail: Vec<&str> = log.lines().rev().take(8).collect();
        text.push_str("; verifier: ");
        text.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
    }
    text
}

fn classify(text: String) -> XdpError {
    if text.contains("Operation not permitted") || text.contains("Permission denied") {
        XdpError::Permission(text)
    } else {
        XdpError::Load(text)
    }
}
