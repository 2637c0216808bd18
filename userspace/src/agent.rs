//! `hostport-dns run`: wires the sources, the table, the XDP dataplane and the servers together.
//!
//! Start-up order makes failures clean: the records are validated and the sockets bound before
//! anything is attached, so a bad file or a port in use leaves nothing behind. The XDP program
//! is detached when the agent stops (dropping the dataplane closes its links). A stop is bounded
//! whatever the agent is doing: `stop` takes the signals on a thread of its own and ends the
//! process itself once `stop::DEADLINE` has passed.
//!
//! Sources send what changed to the publisher (see `publisher`), the only task that compiles
//! the table; one thread (`xdp::writer_thread`) writes the kernel maps, another
//! (`persist`) what must outlive the process.

use std::{
    net::SocketAddr,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::{
    signal::unix::{Signal, SignalKind, signal},
    sync::{mpsc, oneshot},
};
use tracing::{error, info, warn};

use hostport_dns_core::{
    cookies::Cookies,
    dns::message::{SrvTargetCompression, UdpCeiling},
    identity::Identity,
};

use crate::{
    agent_config::{self, AgentConfig},
    clients::ClientPolicyTable,
    config::RunArgs,
    health::Health,
    http, kernel_path,
    metrics::Metrics,
    outputs::Outputs,
    persist::{self, Persister},
    publisher::{CONFIG_SOURCE, FILE_SOURCE, KernelSink, Publisher},
    serials::Serials,
    server::{Shared, gate::Gate, tcp, udp},
    sources::{
        Snapshot, Update,
        file::{self, FileError},
        file_watch::FileWatch,
        kube as kube_source,
    },
    stop::Stop,
    transfer::Transfers,
    update::Updates,
    xdp::{XdpError, XdpMode, loader::resolve_interfaces, local_addrs::AnswerOn},
};

/// How often the record file is checked for changes (SIGHUP reloads at once).
const FILE_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a stop waits for the UDP workers to answer what their sockets hold, and then for
/// the open TCP connections to finish their queries.
const HANDOVER_LIMIT: Duration = Duration::from_secs(1);
/// How long a stop waits for the records and serials to reach the disk.
const STOP_FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the lease to be handed back.
const LEASE_RELEASE_LIMIT: Duration = Duration::from_secs(2);
/// How the embedded example is named in logs.
const EMBEDDED_SOURCE: &str = "<embedded example>";

/// The ceiling on UDP answers: the command line's, else the configuration file's, else 8192.
fn udp_ceiling(args: &RunArgs, config: Option<&AgentConfig>) -> anyhow::Result<UdpCeiling> {
    match (args.udp_max_payload, config.and_then(|c| c.udp_max_payload)) {
        (Some(bytes), _) => UdpCeiling::new(bytes)
            .map_err(anyhow::Error::msg)
            .context("--udp-max-payload"),
        (None, Some(ceiling)) => Ok(ceiling),
        (None, None) => Ok(UdpCeiling::DEFAULT),
    }
}

/// When SRV targets are compressed: the command line's, else the configuration file's, else
/// `to-fit`.
fn srv_targets(args: &RunArgs, config: Option<&AgentConfig>) -> SrvTargetCompression {
    args.srv_target_compression
        .or_else(|| config.and_then(|c| c.srv_target_compression))
        .unwrap_or_default()
}

pub async fn run(args: RunArgs, mut stop: Stop) -> anyhow::Result<()> {
    // Everything that can be wrong with the input is found before anything is bound or attached.
    let mut sources = Sources::load(&args)?;
    let contact = kube_source::contact::ContactLog::default();
    let kube_client = match &sources.config {
        Some(config) if config.uses_kubernetes() || config.elects() => {
            let first = config.kube.kubernetes.api_server.as_deref();
            Some(kube_source::client::connect(&config.kube.kubernetes, first, &contact).await?)
        }
        _ => None,
    };
    let clients = sources
        .config
        .as_ref()
        .map(|c| c.clients.clone())
        .unwrap_or_default();
    let cookies = if clients.cookies.enabled {
        Some(Cookies::new(clients.cookies.secret_file.clone()).context("DNS cookies")?)
    } else {
        None
    };
    let client_policy = ClientPolicyTable::new(clients);
    let udp_ceiling = udp_ceiling(&args, sources.config.as_ref())?;
    let transfers = match sources.config.as_ref().and_then(|c| c.transfer.clone()) {
        Some(config) => Some(Arc::new(
            Transfers::new(config)
                .context("zone transfers")?
                .with_udp_ceiling(udp_ceiling),
        )),
        None => None,
    };
    let identity = Identity::new(
        args.identity.clone().unwrap_or_else(host_name),
        args.nsid,
        args.chaos,
    )
    .map_err(anyhow::Error::msg)
    .context("--identity")?;
    let shared = Shared::with_transfers(
        Gate::new(client_policy.clone(), cookies)
            .with_identity(identity)
            .with_udp_ceiling(udp_ceiling)
            .with_srv_targets(srv_targets(&args, sources.config.as_ref())),
        transfers
            .clone()
            .map(|t| t as Arc<dyn crate::server::zone_transfers::ZoneTransfers>),
    );
    // RFC 2136 targets follow every table published, from the first one.
    let updates = sources
        .config
        .as_ref()
        .filter(|c| !c.update.is_empty())
        .map(|c| Arc::new(Updates::new(c.update.clone())));
    if let Some(updates) = &updates {
        let feed = updates.clone();
        shared.follow_tables(Box::new(move |table, changed| feed.record(table, changed)));
    }
    let workers = if args.udp_workers == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        args.udp_workers
    };
    let mut udp_sockets = Vec::new();
    let mut tcp_listeners = Vec::new();
    for ip in &args.listen {
        let addr = SocketAddr::new(*ip, args.port);
        match bind_listeners(addr, workers) {
            Ok((udp, tcp)) => {
                udp_sockets.extend(udp);
                tcp_listeners.push(tcp);
            }
            Err(err) if ip.is_ipv6() && is_unavailable(&err) => {
                warn!(%addr, %err, "IPv6 unavailable: not listening there");
            }
            Err(err) => return Err(err).with_context(|| format!("cannot listen on {addr}")),
        }
    }
    let http_listener = http::bind(args.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {} (metrics)", args.metrics_listen))?;

    // From here on a stop signal must detach what gets attached: the agent stops in order (within
    // `stop::DEADLINE`); until now it ended the process at once.
    stop.arm();
    let health = Arc::new(Health::new(
        (args.max_staleness > 0).then(|| Duration::from_secs(args.max_staleness)),
    ));
    // A bad interface stops the agent here, before it serves; so does a kernel that refuses the
    // program, unless the mode is auto (then userspace answers everything).
    let prepared = if args.xdp_mode != XdpMode::Off && !args.interfaces.is_empty() {
        let prepared = kernel_path::prepare(kernel_path::Settings {
            port: args.port,
            interfaces: args.interfaces.clone(),
            mode: args.xdp_mode,
            pin_dir: args.pin_dir.clone(),
            log: args.ebpf_log_level,
            clients: client_policy.clone(),
            kernel_names: args.kernel_names,
            udp_ceiling,
            answer_on: AnswerOn::parse(&args.answer_on),
            lease: Duration::from_secs(args.pinned_lease),
        });
        match prepared {
            Ok(prepared) => Some(prepared),
            Err(err) => {
                without_xdp(&args, &health, err)?;
                None
            }
        }
    } else {
        None
    };
    tokio::spawn(reload_cookie_secrets(shared.clone()));
    let (metrics, mut registry) =
        Metrics::register(shared.clone(), health.clone(), transfers.clone());
    if let Some(updates) = &updates {
        updates.register_metrics(&mut registry);
    }
    let kernel = Arc::new(KernelSink::default());
    let mut publisher = Publisher::new(
        shared.clone(),
        kernel.clone(),
        metrics.clone(),
        health.clone(),
        sources.expected(),
    );
    if let Some(config) = &sources.config {
        publisher.serve_reverse(config.reverse.clone());
        publisher.serve_catalog(config.transfer.as_ref().and_then(|t| t.catalog.clone()));
    }
    let uses_kubernetes = sources.config.as_ref().is_some_and(|c| c.uses_kubernetes());
    let persister = Persister::start(persist::Paths {
        records: args.saved_records.clone().filter(|_| uses_kubernetes),
        serials: args.serials.clone(),
    });
    let serials = args
        .serials
        .as_deref()
        .map(Serials::load)
        .unwrap_or_default();
    publisher.persist_with(persister.clone(), serials);
    if uses_kubernetes {
        publisher.follow_revisions();
    }
    let served_groups = sources
        .config
        .as_ref()
        .and_then(|c| c.outputs.external_dns.as_ref())
        .map(|_| publisher.follow_kubernetes_groups());
    if let Some(transfers) = &transfers {
        tokio::spawn(transfers.clone().follow_keys());
        tokio::spawn(transfers.clone().notify());
    }
    let mut first = Vec::new();
    if let Some(config) = &sources.config {
        first.push(Update::whole(CONFIG_SOURCE, config.zones.clone()));
    }
    let expected = sources.expected();
    // The file's records move to the publisher, which holds them from now on: kept here too,
    // they were a second list of every name for the life of the process.
    let (records, record_watch) = sources.records.take().unzip();
    if let Some(snapshot) = records {
        first.push(Update::whole(FILE_SOURCE, snapshot));
    }
    publisher.publish(first);
    // The XDP path comes up beside the server (it may wait for a previous agent to stop).
    let dataplane = kernel_path::Held::default();
    let (xdp_up_tx, mut xdp_up) = oneshot::channel();
    let xdp_wanted = prepared.is_some();
    if let Some(prepared) = prepared {
        let wiring = kernel_path::Wiring {
            shared: shared.clone(),
            metrics: metrics.clone(),
            health: health.clone(),
            sink: kernel.clone(),
        };
        let held = dataplane.clone();
        tokio::spawn(async move {
            let _ = xdp_up_tx.send(kernel_path::start(prepared, wiring, held).await);
        });
    }

    let (updates_tx, updates_rx) = mpsc::channel(64);
    let alive = shared.liveness.register("publisher");
    tokio::spawn(async move {
        let _alive = alive;
        publisher.run(updates_rx).await;
    });
    // Caught before the agent reports that it serves, whatever it serves from: a daemon must
    // not die of a SIGHUP (its default action) sent out of habit.
    let hangup = signal(SignalKind::hangup())
        .map_err(|err| warn!(%err, "no SIGHUP handler"))
        .ok();
    match record_watch.flatten() {
        Some(watch) => {
            tokio::spawn(follow_record_file(watch, hangup, updates_tx.clone()));
        }
        None => {
            if let Some(hangup) = hangup {
                tokio::spawn(explain_hangups(hangup));
            }
        }
    }
    let mut outputs = None;
    if let (Some(config), Some(client)) =
        (sources.config.as_ref().filter(|c| c.elects()), &kube_client)
    {
        // The lease holder's name: the pod's (the chart sets POD_NAME), else the agent's.
        let name = std::env::var("POD_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| args.identity.clone())
            .unwrap_or_else(host_name);
        outputs = Some(Outputs::start(
            &config.outputs,
            (&config.kube, &config.zones.zones),
            config.update.len(),
            client,
            &name,
            served_groups,
            &metrics,
        ));
    }
    if let Some(updates) = &updates {
        let leading = match &outputs {
            Some(outputs) => outputs.leading(),
            None => {
                // No Kubernetes source and no `leaderElection`: nothing to elect by, this agent
                // writes for as long as it runs. Several such agents would each send their own
                // view whole at start and after a failed prerequisite: run one per target.
                info!(
                    "RFC 2136 updates without leader election (no Kubernetes source, no leaderElection): this agent sends them"
                );
                tokio::sync::watch::channel(true).1
            }
        };
        updates.spawn(transfers.clone(), leading);
    }
    if let (Some(config), Some(client)) = (
        sources.config.clone().filter(|c| c.uses_kubernetes()),
        kube_client,
    ) {
        tokio::spawn(kube_source::run(
            Arc::new(config.kube),
            client,
            updates_tx.clone(),
            metrics,
            health.clone(),
            contact,
            args.saved_records.clone(),
        ));
    }
    let udp_workers =
        udp::serve(udp_sockets, shared.clone()).context("cannot start the UDP workers")?;
    for listener in tcp_listeners {
        tokio::spawn(tcp::serve(
            listener,
            shared.clone(),
            tcp::TcpLimits {
                max_connections: args.tcp_max_connections,
                max_per_client: args.tcp_max_per_client,
                client_prefix_v6: args.tcp_client_prefix_v6,
            },
        ));
    }
    let http_health = health.clone();
    let liveness = shared.liveness.clone();
    tokio::spawn(async move {
        if let Err(err) = http::serve(http_listener, registry, http_health, liveness).await {
            error!(%err, "the metrics endpoint stopped");
        }
    });
    // Until the XDP path is up (or not wanted), its failures end the agent; then, a failure to
    // attach the program.
    let mut attach_failed = None;
    if xdp_wanted {
        tokio::select! {
            () = stop.wait() => {
                stopping(&dataplane, &persister, &shared, udp_workers, outputs).await;
                return Ok(());
            }
            up = &mut xdp_up => match up {
                Ok(Ok(failed)) => attach_failed = Some(failed),
                Ok(Err(err)) => {
                    dataplane.lock().unwrap_or_else(|e| e.into_inner()).take();
                    without_xdp(&args, &health, err)?;
                }
                Err(_) => anyhow::bail!("the XDP path's start-up ended without a word"),
            },
        }
    }
    info!(
        port = args.port,
        sources = ?expected,
        metrics = %args.metrics_listen,
        xdp = ?dataplane
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|d| d.attachments.clone()),
        "hostport-dns is serving"
    );
    if let Some(mut failed) = attach_failed {
        tokio::select! {
            () = stop.wait() => {
                stopping(&dataplane, &persister, &shared, udp_workers, outputs).await;
                return Ok(());
            }
            Ok(err) = &mut failed => {
                // The maps stay written (the kernel path keeps its order), unattached.
                without_xdp(&args, &health, err)?;
            }
        }
    }
    stop.wait().await;
    stopping(&dataplane, &persister, &shared, udp_workers, outputs).await;
    Ok(())
}

/// The XDP path could not come up for `err`: with `--xdp-mode auto` and a kernel that refused
/// the program (privileges, a missing helper, the verifier, attaching), userspace answers
/// everything, said once in the log and in the metrics; otherwise the agent stops with the reason.
fn without_xdp(args: &RunArgs, health: &Health, err: XdpError) -> anyhow::Result<()> {
    if args.xdp_mode != XdpMode::Auto || !err.is_kernel_refusal() {
        return Err(err.into());
    }
    let interfaces =
        resolve_interfaces(&args.interfaces).unwrap_or_else(|_| args.interfaces.clone());
    warn!(
        reason = %err,
        "XDP unavailable: serving every query from userspace (--xdp-mode native or generic would stop here)"
    );
    health.xdp_unavailable(&interfaces, err.to_string());
    Ok(())
}

/// Lets go of the XDP program: detached, unless its links are pinned.
async fn stopping(
    dataplane: &kernel_path::Held,
    persister: &Persister,
    shared: &Shared,
    udp_workers: udp::UdpWorkers,
    outputs: Option<Outputs>,
) {
    shared.liveness.stopping();
    crate::stop::hang_if_asked();
    // The lease first: another agent takes over the writing at once.
    if let Some(outputs) = outputs {
        outputs.stop(LEASE_RELEASE_LIMIT).await;
    }
    // New queries go to the agent beside this one (a rolling update's), if there is one; those
    // this one holds are answered first (`server::closing`). The XDP program answers throughout.
    shared.closing.start();
    tokio::task::block_in_place(|| udp_workers.hand_over(HANDOVER_LIMIT));
    let deadline = Instant::now() + HANDOVER_LIMIT;
    while shared.stats.tcp_open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What the last publications left to keep is written before the process ends.
    persister.flush(STOP_FLUSH_LIMIT);
    let dataplane = dataplane.lock().unwrap_or_else(|e| e.into_inner()).take();
    match dataplane.as_ref().and_then(|d| d.pin_dir()) {
        Some(dir) => info!(
            pin_dir = %dir.display(),
            "stopping; the XDP program stays attached (pinned) and answers until its lease (--pinned-lease) runs out, unless an agent takes over: `hostport-dns uninstall` removes it"
        ),
        None if dataplane.is_some() => info!("stopping: detaching XDP"),
        None => info!("stopping"),
    }
    drop(dataplane);
}

/// `hostport-dns check-config`: the files read and checked as `run` would (Kubernetes, secrets
/// and the network left out), for a pipeline before it ships them; what they hold, in one line.
pub fn check_config(config: Option<&Path>, records: Option<&Path>) -> anyhow::Result<String> {
    if config.is_none() && records.is_none() {
        anyhow::bail!("name a configuration file, a record file (--records), or both");
    }
    let sources = Sources::read(config, records)?;
    let mut said = Vec::new();
    if let Some(config) = &sources.config {
        said.push(format!(
            "{} zone(s), {} pod source(s), {} EndpointSlice output(s), transfers {}",
            config.zones.zones.len(),
            config.kube.pods.len(),
            config.kube.endpoint_slices.len(),
            if config.transfer.is_some() {
                "on"
            } else {
                "off"
            },
        ));
    }
    if let Some((snapshot, _)) = &sources.records {
        said.push(format!("record file: {} zone(s)", snapshot.zones.len()));
    }
    Ok(format!("valid: {}", said.join("; ")))
}

/// What the agent serves from: the configuration file (zones, static records, Kubernetes
/// sources) and a record file; the embedded example when neither is given.
struct Sources {
    config: Option<AgentConfig>,
    /// The record file's (or embedded example's) snapshot, and the file to follow.
    records: Option<(Snapshot, Option<FileWatch>)>,
}

impl Sources {
    fn load(args: &RunArgs) -> anyhow::Result<Self> {
        let mut sources = Self::read(args.config.as_deref(), args.records.as_deref())?;
        if let (Some(config), Some(url)) = (sources.config.as_mut(), &args.api_server) {
            config.kube.kubernetes.api_server = Some(url.clone());
        }
        Ok(sources)
    }

    /// The configuration and record files read and checked, alone and together.
    fn read(config: Option<&Path>, records: Option<&Path>) -> anyhow::Result<Self> {
        let config = config.map(agent_config::load).transpose()?;
        let records = match (records, &config) {
            (Some(path), _) => {
                let (watch, text) = FileWatch::open(path).map_err(|source| FileError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Some((file::parse(&text, path)?, Some(watch)))
            }
            (None, Some(_)) => None,
            (None, None) => Some((
                file::parse(file::EMBEDDED_DEFAULT, Path::new(EMBEDDED_SOURCE))?,
                None,
            )),
        };
        if let (Some(config), Some((snapshot, _))) = (&config, &records) {
            let all: Vec<_> = config
                .zones
                .zones
                .iter()
                .chain(&snapshot.zones)
                .cloned()
                .collect();
            hostport_dns_core::zone::check_zones_do_not_overlap(&all)
                .map_err(|e| anyhow::anyhow!("--config and --records: {e}"))?;
            if let Some(transfer) = &config.transfer {
                transfer
                    .check_catalog(&snapshot.zones)
                    .map_err(|e| anyhow::anyhow!("--config and --records: {e}"))?;
            }
        }
        if let Some(config) = &config {
            check_update_sources(config, records.as_ref().map(|(s, _)| s))?;
        }
        Ok(Self { config, records })
    }

    /// The sources that must deliver before anything is served.
    fn expected(&self) -> Vec<&'static str> {
        let mut expected = Vec::new();
        if let Some(config) = &self.config {
            expected.push(CONFIG_SOURCE);
            if config.uses_kubernetes() {
                expected.push(kube_source::SOURCE);
            }
        }
        if self.records.is_some() {
            expected.push(FILE_SOURCE);
        }
        expected
    }
}

/// Every `update` target's source is a zone served, from the configuration or the record file.
fn check_update_sources(config: &AgentConfig, records: Option<&Snapshot>) -> anyhow::Result<()> {
    let served = |apex: &hickory_proto::rr::Name| {
        config
            .zones
            .zones
            .iter()
            .chain(records.map(|r| r.zones.as_slice()).unwrap_or_default())
            .any(|z| z.apex == *apex)
    };
    for (i, target) in config.update.iter().enumerate() {
        if !served(&target.source) {
            anyhow::bail!(
                "update[{i}].source: zone {} is not served (neither in the configuration's zones nor in the record file)",
                target.source
            );
        }
    }
    Ok(())
}

fn bind_listeners(
    addr: SocketAddr,
    workers: usize,
) -> std::io::Result<(Vec<socket2::Socket>, tokio::net::TcpListener)> {
    let udp = udp::bind(addr, workers)?;
    let tcp = tcp::bind(addr)?;
    Ok((udp, tokio::net::TcpListener::from_std(tcp)?))
}

fn is_unavailable(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)
    )
}

/// Reloads the record file when it changes or on SIGHUP. A bad file is logged and the previous
/// records stay in service.
async fn follow_record_file(
    mut watch: FileWatch,
    mut hangup: Option<Signal>,
    updates: mpsc::Sender<Update>,
) {
    loop {
        let forced = tokio::select! {
            _ = tokio::time::sleep(FILE_POLL_INTERVAL) => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        let observed = Instant::now();
        let path = watch.path().to_owned();
        let text = match watch.check(forced) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(source) => {
                let err = FileError::Read { path, source };
                error!(%err, "record file not reloaded; the previous records stay in service");
                continue;
            }
        };
        match file::parse(&text, &path) {
            Ok(snapshot) => {
                info!(path = %path.display(), "record file reloaded");
                if updates
                    .send(Update {
                        observed,
                        ..Update::whole(FILE_SOURCE, snapshot)
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(err) => {
                error!(%err, "record file not reloaded; the previous records stay in service")
            }
        }
    }
}

/// Without a record file there is nothing SIGHUP reloads: the configuration file is read at
/// start (a DaemonSet rolls out a changed ConfigMap). Says so instead of ending the process.
async fn explain_hangups(mut hangup: Signal) {
    while hangup.recv().await.is_some() {
        warn!(
            "SIGHUP: nothing to reload (no record file; the configuration file is read at start, restart to apply a change)"
        );
    }
}

/// How often the cookie secret file is read again (a Kubernetes Secret's mounted file changes
/// within about a minute of the Secret).
const COOKIE_SECRET_RELOAD: Duration = Duration::from_secs(10);

/// The host's name (a pod on the host network has the node's), or "hostport-dns".
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length, NUL-terminated when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_owned(),
        _ => "hostport-dns".to_owned(),
    }
}

/// Follows the cookie secret file: a rotation (RFC 9018 §4.3) needs no restart.
async fn reload_cookie_secrets(shared: Arc<Shared>) {
    let Some(cookies) = shared.gate.cookies.as_ref() else {
        return;
    };
    let mut failing = false;
    loop {
        tokio::time::sleep(COOKIE_SECRET_RELOAD).await;
        match cookies.reload() {
            Ok(changed) => {
                if changed {
                    info!("cookie secrets reloaded");
                }
                failing = false;
            }
            Err(err) => {
                if !failing {
                    warn!(%err, "keeping the cookie secrets in use");
                }
                failing = true;
            }
        }
    }
}
