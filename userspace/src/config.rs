//! The command line.

use std::{net::IpAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use hostport_dns_common::limits::DEFAULT_DNS_PORT;

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
    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "hostport_dns=debug".
    #[arg(long, global = true, env = "HOSTPORT_DNS_LOG", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the responder: load the records, attach XDP, serve DNS.
    Run(RunArgs),
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
    /// Interface to attach the XDP program to (repeat for several). None: userspace only.
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
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:9253")]
    pub metrics_listen: std::net::SocketAddr,
    /// Not ready when a source's data is older than this many seconds (0: no limit).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub max_staleness: u64,
}
