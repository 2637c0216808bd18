//! The command line.

use std::{net::IpAddr, path::PathBuf};

use clap::{
    Args, Parser, Subcommand, ValueEnum,
    builder::{PossibleValuesParser, TypedValueParser},
};
use hostport_dns_common::limits::DEFAULT_DNS_PORT;
use hostport_dns_core::dns::message::SrvTargetCompression;

use crate::xdp::XdpMode;

#[derive(Debug, Parser)]
#[command(
    name = "hostport-dns",
    version,
    about = "Node-local authoritative DNS for Kubernetes load balancers, answered from XDP"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "hostport_dns=debug". By default
    /// the Kubernetes client's own lines (one per failed request) are left out: the agent logs
    /// each watch's failures once, with their count when they end.
    #[arg(
        long,
        global = true,
        env = "HOSTPORT_DNS_LOG",
        default_value = "info,kube_client=off,kube_runtime=off"
    )]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// A count that must be at least 1 (0 would refuse every connection).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the responder: load the records, attach XDP, serve DNS.
    Run(Box<RunArgs>),
    /// What the kernel's record table holds now, decoded.
    Records(InspectArgs),
    /// The XDP program's counters: answers by kind, passes by reason.
    Stats(InspectArgs),
    /// Ask the local responder and say which path (XDP or userspace) answered.
    Query(QueryArgs),
    /// Detach the pinned XDP program and remove its pinned maps.
    Uninstall(PinArgs),
    /// Check a configuration file (and a record file) as `run` would read them, without
    /// serving: for GitOps pipelines. Exits non-zero with the first error.
    CheckConfig(CheckConfigArgs),
    /// Print the configuration file's JSON Schema (draft-07; the chart's values schema embeds
    /// it).
    ConfigSchema,
    /// Write the operator's guide's generated reference pages (configuration keys, flags) into
    /// DIR: what `cargo xtask docs` runs.
    #[command(hide = true)]
    DocsReference {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Clone, Debug, Args)]
pub struct CheckConfigArgs {
    /// The configuration file (`run --config`).
    #[arg(value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A record file (`run --records`), checked alone and against the configuration's zones.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
}

#[derive(Clone, Debug, Args)]
pub struct PinArgs {
    /// Where the agent pinned its maps and links (its --pin-dir).
    #[arg(long, value_name = "DIR", env = "HOSTPORT_DNS_PIN_DIR", default_value = crate::ops::DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,
}

#[derive(Clone, Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub pin: PinArgs,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Debug, Args)]
pub struct QueryArgs {
    /// The name to ask for.
    pub name: String,
    /// The record type.
    #[arg(default_value = "A")]
    pub qtype: String,
    /// The responder to ask.
    #[arg(long, default_value = "127.0.0.1:1053")]
    pub server: std::net::SocketAddr,
    #[command(flatten)]
    pub inspect: InspectArgs,
}

#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Agent configuration (YAML): zones, API server access, Kubernetes sources.
    #[arg(long, short = 'c', value_name = "FILE", env = "HOSTPORT_DNS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Static record file (YAML), reloaded on change. Without it and without --config, the
    /// embedded example is served.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// API server URL, overriding the configuration's kubernetes.apiServer (for example the
    /// node-local API server, https://$(HOST_IP):6443, which needs no kube-proxy or cluster DNS).
    #[arg(long, value_name = "URL", env = "HOSTPORT_DNS_API_SERVER")]
    pub api_server: Option<String>,
    /// Interface to attach the XDP program to (repeat for several); `auto`: the interface of
    /// the default route. None: userspace only.
    #[arg(long = "interface", short = 'i', value_name = "IFACE")]
    pub interfaces: Vec<String>,
    /// How to attach the XDP program.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpMode,
    /// UDP and TCP port to serve.
    #[arg(long, default_value_t = DEFAULT_DNS_PORT)]
    pub port: u16,
    /// Addresses the userspace server listens on (repeat for several).
    #[arg(long = "listen", value_name = "ADDR", default_values_t = [IpAddr::from([0u8; 4]), IpAddr::from([0u16; 8])])]
    pub listen: Vec<IpAddr>,
    /// UDP sockets (and threads) per listen address; 0: one per CPU.
    #[arg(long, default_value_t = 0)]
    pub udp_workers: usize,
    /// Address of the metrics and health endpoint (/metrics, /healthz, /readyz).
    /// An IPv6 address may come without brackets (`fd00::1:9354`), as `$(HOST_IP):PORT` in a
    /// pod's arguments gives it.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:9354", value_parser = parse_listen)]
    pub metrics_listen: std::net::SocketAddr,
    /// Pin the XDP program's maps and links in this bpffs directory: a restarted or upgraded
    /// agent adopts them without a gap, and while no agent runs the kernel keeps answering from
    /// the last table, for --pinned-lease. Without it, stopping the agent detaches the program.
    #[arg(long, value_name = "DIR", env = "HOSTPORT_DNS_PIN_DIR")]
    pub pin_dir: Option<PathBuf>,
    /// How long (seconds) a pinned program keeps answering once no agent runs (uninstalled,
    /// or stopped for good); an agent that starts within it takes over without a gap.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=86_400))]
    pub pinned_lease: u64,
    /// Names each kind of kernel table entry (80, 160 and 592 bytes) may grow to. Its maps
    /// follow the names served: each kind starts small and grows (or shrinks) by steps of at
    /// most 1.5x as the names that need it come and go, up to this; zones beyond it are
    /// answered by userspace.
    #[arg(long, value_name = "NAMES", default_value_t = hostport_dns_common::limits::KERNEL_NAMES_LIMIT, value_parser = clap::value_parser!(u32).range(64..=i64::from(hostport_dns_common::limits::MAX_KERNEL_NAMES)))]
    pub kernel_names: u32,
    /// The ceiling on UDP answers in bytes (Knot's `udp-max-payload`): an answer takes what the
    /// client offers up to this (512 without EDNS), and the OPT record advertises it. Overrides
    /// the configuration file's `udpMaxPayload`; default 8192, what load balancers offer
    /// (HAProxy's `accepted_payload_size 8192`). 1232 keeps every answer unfragmented (DNS flag
    /// day 2020).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(512..=65_507))]
    pub udp_max_payload: Option<u16>,
    /// When SRV targets are compressed. RFC 2782 writes them in full, which puts about 187
    /// short-named nodes' SRV records in 8192 bytes; past that, `to-fit` (the default) sends
    /// them compressed rather than truncated to a client offering more than 1232 bytes over UDP,
    /// within a ceiling above 1232 (a truncated answer is an error for HAProxy, whose SRV mode
    /// then fills no slot). Answers that fit in full, TCP answers and answers to clients
    /// offering 1232 or less (which retry over TCP) keep their targets in full. `never`: always
    /// in full, truncated when they do not fit. Overrides the configuration file's
    /// `srvTargetCompression`.
    #[arg(long, value_name = "WHEN", value_parser = srv_target_compression())]
    pub srv_target_compression: Option<SrvTargetCompression>,
    /// Logs from the XDP program itself (off: every logged packet costs time).
    #[arg(long, value_enum, default_value = "off")]
    pub ebpf_log_level: crate::xdp::EbpfLogLevel,
    /// Save the Kubernetes records here after every change (at most once a second) and serve
    /// them at start, marked stale, until the watches have listed: a restart while the API
    /// server is down serves the last records, not SERVFAIL. A path on the node's disk (the
    /// chart uses a hostPath beside the pins).
    #[arg(long, value_name = "FILE", env = "HOSTPORT_DNS_SAVED_RECORDS")]
    pub saved_records: Option<PathBuf>,
    /// Keep the zones' SOA serials here, so that they never go back across restarts and stay
    /// equal to the other nodes' for unchanged content (the chart uses the hostPath beside the
    /// saved records). Without it a restarted agent numbers its zones from the Kubernetes
    /// revision (or, without Kubernetes, from their content) again.
    #[arg(long, value_name = "FILE", env = "HOSTPORT_DNS_SERIALS")]
    pub serials: Option<PathBuf>,
    /// Answer NSID requests (RFC 5001) with the server identity (`--identity`): which node
    /// behind a VIP answered (`dig +nsid`).
    #[arg(long, env = "HOSTPORT_DNS_NSID")]
    pub nsid: bool,
    /// Answer `id.server.` and `hostname.bind.` CH TXT (RFC 4892) with the server identity
    /// (`dig CH TXT id.server`).
    #[arg(long, env = "HOSTPORT_DNS_CHAOS")]
    pub chaos: bool,
    /// The identity NSID and CHAOS tell (default: the host's name; the chart passes the
    /// node's name).
    #[arg(long, value_name = "NAME", env = "HOSTPORT_DNS_IDENTITY")]
    pub identity: Option<String>,
    /// TCP connections served at once (more wait in the kernel backlog).
    #[arg(long, value_name = "N", default_value_t = crate::server::limits::DEFAULT_MAX_CONNECTIONS, value_parser = at_least_one)]
    pub tcp_max_connections: usize,
    /// TCP connections one client address may hold open; more are closed at once.
    #[arg(long, value_name = "N", default_value_t = crate::server::limits::DEFAULT_MAX_PER_CLIENT, value_parser = at_least_one)]
    pub tcp_max_per_client: usize,
    /// IPv6 clients are counted by this prefix length for --tcp-max-per-client (one host
    /// usually holds a whole /64); 128 counts each address.
    #[arg(long, value_name = "BITS", default_value_t = crate::server::limits::DEFAULT_CLIENT_PREFIX_V6, value_parser = clap::value_parser!(u8).range(1..=128))]
    pub tcp_client_prefix_v6: u8,
    /// The addresses the XDP program answers on, or interfaces whose addresses it answers on
    /// (repeat for several). Default: every address of the node but link-local ones and those
    /// on dummy or IPVS interfaces (kube-ipvs0 holds every ClusterIP). A named address that
    /// moves between nodes (a keepalived or kube-vip VIP) is answered wherever it is.
    #[arg(long = "answer-on", value_name = "ADDR|IFACE")]
    pub answer_on: Vec<String>,
    /// Not ready when a source's data is older than this many seconds (0: no limit).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub max_staleness: u64,
}

/// `ADDR:PORT`, `[IPV6]:PORT`, or an IPv6 address without brackets followed by `:PORT` (the
/// port is what follows the last colon).
fn parse_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let bad = || format!("{text:?} is not ADDR:PORT");
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let ip: IpAddr = host.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(std::net::SocketAddr::new(ip, port))
}

/// `--srv-target-compression`: one of its names, which `--help` lists.
fn srv_target_compression() -> impl TypedValueParser<Value = SrvTargetCompression> {
    PossibleValuesParser::new(SrvTargetCompression::NAMES).try_map(|name| name.parse())
}

#[cfg(test)]
mod listen_tests {
    use super::parse_listen;

    #[test]
    fn listen_addresses_parse_with_or_without_ipv6_brackets() {
        let ok = |text: &str| parse_listen(text).map(|a| a.to_string());
        assert_eq!(ok("0.0.0.0:9354"), Ok("0.0.0.0:9354".into()));
        assert_eq!(ok("[fd00::1]:9354"), Ok("[fd00::1]:9354".into()));
        assert_eq!(ok("fd00::1:9354"), Ok("[fd00::1]:9354".into()));
        assert_eq!(ok("2001:db8::10:80"), Ok("[2001:db8::10]:80".into()));
        for bad in ["fd00::1", "198.18.0.1", "198.18.0.1:99999", "node:9354", ""] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }
}
