//! Loads the XDP program and attaches it to the configured interfaces.

use aya::{
    Ebpf, EbpfLoader,
    programs::{ProgramError, Xdp, XdpMode as AyaXdpMode},
};
use hostport_dns_common::maps;
use tracing::{info, warn};

use crate::EBPF_OBJECT;

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

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error(
        "loading the XDP program was refused ({0}): the agent needs CAP_BPF, CAP_NET_ADMIN and \
         CAP_PERFMON (run it as root or grant these capabilities)"
    )]
    Permission(String),
    #[error("loading the XDP program failed: {0}")]
    Load(String),
    #[error("interface {0:?} does not exist")]
    UnknownInterface(String),
    #[error("attaching the XDP program to {interface} in {mode} mode failed: {reason}")]
    Attach {
        interface: String,
        mode: &'static str,
        reason: String,
    },
}

/// The loaded program and where it is attached. Dropping it detaches the program.
pub struct Dataplane {
    pub ebpf: Ebpf,
    /// (interface, mode actually used)
    pub attachments: Vec<(String, &'static str)>,
}

impl Dataplane {
    /// Loads the program for `port` and attaches it to every interface in `interfaces`.
    pub fn start(port: u16, interfaces: &[String], mode: XdpMode) -> Result<Self, XdpError> {
        for interface in interfaces {
            if_index(interface)?;
        }
        let mut ebpf = load(port)?;
        let program = xdp_program(&mut ebpf)?;
        let mut attachments = Vec::new();
        for interface in interfaces {
            let used = attach(program, interface, mode)?;
            info!(interface, mode = used, "XDP program attached");
            attachments.push((interface.clone(), used));
        }
        Ok(Self { ebpf, attachments })
    }
}

/// Loads the embedded object with the DNS port set, without attaching it.
pub fn load(port: u16) -> Result<Ebpf, XdpError> {
    let mut ebpf = EbpfLoader::new()
        .override_global(maps::GLOBAL_DNS_PORT, &port, true)
        .load(EBPF_OBJECT)
        .map_err(|e| classify(chain(&e)))?;
    let program = xdp_program(&mut ebpf)?;
    program.load().map_err(|e| classify(describe(&e)))?;
    Ok(ebpf)
}

/// The XDP program in a loaded object.
pub fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpError> {
    ebpf.program_mut(maps::PROGRAM)
        .ok_or_else(|| XdpError::Load(format!("the object has no program {}", maps::PROGRAM)))?
        .try_into()
        .map_err(|e: ProgramError| XdpError::Load(e.to_string()))
}

fn attach(program: &mut Xdp, interface: &str, mode: XdpMode) -> Result<&'static str, XdpError> {
    let try_mode = |program: &mut Xdp, aya_mode, name: &'static str| {
        program
            .attach(interface, aya_mode)
            .map(|_| name)
            .map_err(|e| XdpError::Attach {
                interface: interface.to_owned(),
                mode: name,
                reason: describe(&e),
            })
    };
    match mode {
        XdpMode::Native => try_mode(program, AyaXdpMode::Driver, "native"),
        XdpMode::Generic => try_mode(program, AyaXdpMode::Skb, "generic"),
        XdpMode::Auto => match try_mode(program, AyaXdpMode::Driver, "native") {
            Ok(used) => Ok(used),
            Err(err) => {
                warn!(interface, %err, "native XDP unavailable, falling back to generic mode");
                try_mode(program, AyaXdpMode::Skb, "generic")
            }
        },
        XdpMode::Off => Ok("off"),
    }
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
fn chain(error: &dyn std::error::Error) -> String {
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
