//! The XDP path, brought up beside the userspace server: the pin directory claimed (waiting,
//! while serving from userspace, for an agent that still holds it: a rolling restart), the
//! program loaded, the table's writer thread started and handed to the publisher, this host's
//! addresses followed, the program attached once its first complete table is in place.

use std::{path::PathBuf, sync::Arc, time::Duration};

use hostport_dns_common::generation::Capacity;
use tokio::sync::oneshot;
use tracing::info;

use hostport_dns_core::dns::message::UdpCeiling;

use crate::{
    clients::ClientPolicyTable,
    health::Health,
    kernel_table_size::Resizer,
    metrics::Metrics,
    publisher::{AfterFirstWrite, KernelSink, kernel_report},
    server::Shared,
    xdp::{
        Dataplane, EbpfLogLevel, XdpError, XdpMode,
        counters::Counters,
        lease::Lease,
        loader,
        local_addrs::{AnswerOn, LocalAddrs},
        pins::PinDir,
        writer::MapWriter,
        writer_thread::WriterThread,
    },
};

/// What the XDP path needs from the command line.
#[derive(Clone)]
pub struct Settings {
    pub port: u16,
    pub interfaces: Vec<String>,
    pub mode: XdpMode,
    pub pin_dir: Option<PathBuf>,
    pub log: EbpfLogLevel,
    pub clients: ClientPolicyTable,
    /// Names each kind of entry of the kernel table may grow to (`--kernel-names`): its maps are
    /// sized by the names served, up to this (`kernel_table_size`).
    pub kernel_names: u32,
    /// The ceiling on UDP answers, which the program's OPT records advertise.
    pub udp_ceiling: UdpCeiling,
    pub answer_on: AnswerOn,
    /// How long a pinned program answers once no agent renews its lease.
    pub lease: Duration,
}

/// Everything the XDP path shares with the rest of the agent.
pub struct Wiring {
    pub shared: Arc<Shared>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub sink: Arc<KernelSink>,
}

pub use crate::kernel_table_size::Held;

/// The XDP path before it is wired: the program loaded, or waiting for the pin directory.
pub struct Prepared {
    settings: Settings,
    dataplane: Option<Dataplane>,
}

/// What can be done at once, so that a bad interface or missing privileges show before the agent
/// serves: the interfaces checked, the kernel probed, the pin directory claimed and the program
/// loaded, unless another agent holds the directory (then [`start`] waits for it).
pub fn prepare(settings: Settings) -> Result<Prepared, XdpError> {
    for interface in crate::xdp::loader::resolve_interfaces(&settings.interfaces)? {
        crate::xdp::loader::if_index(&interface)?;
    }
    crate::xdp::probe::kernel_supports(crate::EBPF_OBJECT, settings.pin_dir.is_some())?;
    let pins = match &settings.pin_dir {
        Some(dir) => match PinDir::lock(dir) {
            Ok(pins) => Some(pins),
            Err(XdpError::Held(_)) => {
                return Ok(Prepared {
                    settings,
                    dataplane: None,
                });
            }
            Err(err) => return Err(err),
        },
        None => None,
    };
    let dataplane = load(&settings, pins, None)?;
    Ok(Prepared {
        settings,
        dataplane: Some(dataplane),
    })
}

/// Loads the program with a table of `capacity`; by default, the capacity of the table pinned
/// in `pins` (adopted if it can be), or the smallest: the first table grows it as it needs.
fn load(
    settings: &Settings,
    pins: Option<PinDir>,
    capacity: Option<Capacity>,
) -> Result<Dataplane, XdpError> {
    let capacity = capacity.unwrap_or_else(|| {
        pins.as_ref()
            .and_then(PinDir::pinned_capacity)
            .filter(|pinned| {
                pinned
                    .entries()
                    .iter()
                    .all(|count| *count <= settings.kernel_names)
            })
            .unwrap_or(Capacity::class_for([0; 3], 0, settings.kernel_names))
    });
    Dataplane::load(
        &settings.interfaces,
        settings.mode,
        pins,
        loader::Settings {
            port: settings.port,
            pins: None,
            log: settings.log,
            clients: &settings.clients,
            capacity,
            udp_max_payload: settings.udp_ceiling.bytes(),
            hold_readers: 0,
        },
    )
}

/// Brings the XDP path up; a failure after start (attaching) arrives on the returned channel.
pub async fn start(
    prepared: Prepared,
    wiring: Wiring,
    held: Held,
) -> Result<oneshot::Receiver<XdpError>, XdpError> {
    let Prepared {
        settings,
        dataplane,
    } = prepared;
    let mut dataplane = match (dataplane, &settings.pin_dir) {
        (Some(dataplane), _) => dataplane,
        (None, Some(dir)) => {
            let pins = claim(dir.clone()).await?;
            load(&settings, Some(pins), None)?
        }
        (None, None) => load(&settings, None, None)?,
    };
    // Before the writer takes the maps: a pinned table is leased (see `xdp::lease`).
    let lease = match &dataplane.pins {
        Some(_) => Some(
            Lease::take_over(&dataplane.ebpf, settings.lease)
                .map_err(|e| XdpError::Load(format!("cannot map the table's lease: {e}")))?,
        ),
        None => None,
    };
    let writer = MapWriter::new(&mut dataplane.ebpf, dataplane.capacity).map_err(load_error)?;
    let counters =
        Counters::new(&mut dataplane.ebpf, writer.zone_counters().names()).map_err(load_error)?;
    wiring.metrics.install_xdp_counters(counters);
    wiring.metrics.set_xdp_table_size(&dataplane.capacity);
    wiring
        .metrics
        .xdp_table_limit
        .set(i64::from(settings.kernel_names));
    // A previous agent's pinned table answers until this one's first switch.
    let adopted_table = writer.active().is_some();
    let after_first_write = AfterFirstWrite::default();
    let writer = Arc::new(WriterThread::spawn(
        writer,
        kernel_report(
            wiring.shared.clone(),
            wiring.metrics.clone(),
            wiring.health.clone(),
            after_first_write.clone(),
        ),
        wiring.shared.liveness.register("xdp-writer"),
        Some(Box::new(Resizer::new(
            {
                let settings = settings.clone();
                Box::new(move |pins, capacity| load(&settings, pins, Some(capacity)))
            },
            settings.kernel_names,
            held.clone(),
            wiring.metrics.clone(),
            lease.clone(),
        ))),
    ));
    // Before the first table: it carries this host's addresses.
    let mut local_addrs = LocalAddrs::new(writer.clone(), settings.answer_on);
    local_addrs
        .sync()
        .map_err(|e| XdpError::Load(format!("cannot list the node's addresses: {e}")))?;
    tokio::spawn(local_addrs.follow());
    wiring.health.xdp_expected(&dataplane.interfaces);
    let (failed_tx, failed) = oneshot::channel();
    let (attached_tx, attached) = oneshot::channel::<()>();
    // Attached once the kernel table is complete: until then a previous agent's pinned program
    // answers from its own complete table (an upgrade that changed the map layout), or nothing
    // does. With a source that delivers later (Kubernetes), that is after its first full list.
    if let Some(lease) = lease.clone() {
        tokio::spawn(lease.keep());
    }
    if adopted_table {
        dataplane.attach()?;
        note_attachments(&dataplane, &wiring.health);
        let _ = attached_tx.send(());
        // An adopted table whose lease ran out answers again once this agent's table is in.
        if let Some(lease) = lease {
            *after_first_write.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Box::new(move || lease.vouch()));
        }
    } else {
        info!("XDP is attached once the first complete table is written");
        let held = held.clone();
        let health = wiring.health.clone();
        *after_first_write.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(move || {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lease) = &lease {
                lease.vouch();
            }
            if let Some(dataplane) = held.as_mut() {
                match dataplane.attach() {
                    Ok(()) => {
                        note_attachments(dataplane, &health);
                        let _ = attached_tx.send(());
                    }
                    Err(err) => {
                        let _ = failed_tx.send(err);
                    }
                }
            }
        }));
    }
    *held.lock().unwrap_or_else(|e| e.into_inner()) = Some(dataplane);
    // From now on every table goes through the kernel first; the one already served goes now,
    // and the path is up once the program answers it (a source that delivers later attaches
    // it then).
    if wiring.sink.install(writer, &wiring.shared) {
        let _ = attached.await;
    }
    Ok(failed)
}

/// The pin directory, locked for this agent: at once, or once the agent holding it stops (a
/// rolling restart: this one serves from userspace meanwhile, the pinned program from the
/// kernel).
async fn claim(dir: PathBuf) -> Result<PinDir, XdpError> {
    tokio::task::spawn_blocking(move || {
        PinDir::lock_waiting(&dir, || {
            info!(
                pin_dir = %dir.display(),
                "another agent holds the pin directory: serving from userspace until it stops"
            )
        })
    })
    .await
    .map_err(|e| XdpError::Load(format!("waiting for the pin directory: {e}")))?
}

fn load_error(err: crate::xdp::writer::WriteError) -> XdpError {
    XdpError::Load(err.to_string())
}

/// Tells readiness and metrics where the program is attached.
fn note_attachments(dataplane: &Dataplane, health: &Health) {
    for (interface, mode) in &dataplane.attachments {
        health.xdp_attached(interface, mode);
    }
}
