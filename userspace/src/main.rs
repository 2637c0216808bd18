//! The `hostport-dns` binary: parses the command line and runs the chosen command.

use clap::Parser;
use hostport_dns::{
    config::{Cli, Command, LogFormat},
    ops,
};
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    hostport_dns::heap::limit_arenas();
    let cli = Cli::parse();
    let mut filter = cli.log_level.clone();
    if let Command::Run(args) = &cli.command
        && args.ebpf_log_level != hostport_dns::xdp::EbpfLogLevel::Off
    {
        // What the program logs is shown whatever the agent's own level.
        filter.push_str(&format!(",{}=trace", hostport_dns::EBPF_LOG_TARGET));
    }
    init_logging(&filter, cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("hostport-dns: cannot start the runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => runtime.block_on(hostport_dns::agent::run(*args)),
        Command::Records(a) => ops::records(&a.pin.pin_dir, a.json),
        Command::Stats(a) => ops::stats(&a.pin.pin_dir, a.json),
        Command::Query(q) => ops::query(
            q.server,
            &q.name,
            &q.qtype,
            &q.inspect.pin.pin_dir,
            q.inspect.json,
        ),
        Command::Uninstall(a) => ops::uninstall(&a.pin_dir),
        Command::CheckConfig(a) => {
            hostport_dns::agent::check_config(a.config.as_deref(), a.records.as_deref())
                .map(|said| println!("{said}"))
        }
        Command::ConfigSchema => {
            println!("{:#}", hostport_dns::agent_config::json_schema());
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("hostport-dns: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
