//! The `hostport-dns` command line: parses it and runs the chosen command. The binary's
//! `main` is only a call of [`main`]: everything it instantiates (the runtime's `block_on` of the
//! agent, the logging set-up) is compiled here, in the library's code-generation units, not
//! once more in the binary's.

use crate::{
    config::{Cli, Command, LogFormat, RunArgs},
    ops,
};
use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// How long the runtime's leftover tasks get once the agent has stopped.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_millis(500);

/// The binary's `main`.
pub fn main() -> std::process::ExitCode {
    crate::heap::limit_arenas();
    let cli = Cli::parse();
    let mut filter = cli.log_level.clone();
    if let Command::Run(args) = &cli.command
        && args.ebpf_log_level != crate::xdp::EbpfLogLevel::Off
    {
        // What the program logs is shown whatever the agent's own level.
        filter.push_str(&format!(",{}=trace", crate::EBPF_LOG_TARGET));
    }
    init_logging(&filter, cli.log_format);
    let result = match cli.command {
        Command::Run(args) => run(*args),
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
            crate::agent::check_config(a.config.as_deref(), a.records.as_deref())
                .map(|said| println!("{said}"))
        }
        Command::ConfigSchema => {
            println!("{:#}", crate::agent_config::json_schema());
            Ok(())
        }
        Command::DocsReference { dir } => write_reference(&dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("hostport-dns: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `hostport-dns run`: the agent, on a runtime of its own.
fn run(args: RunArgs) -> anyhow::Result<()> {
    // Before the runtime starts its threads: each must leave the stop signals to the one thread
    // that takes them (`stop`).
    let stop = crate::stop::install().context("cannot take the stop signals")?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    let result = runtime.block_on(crate::agent::run(args, stop));
    // Dropping the runtime would wait for every blocking task, however long it blocks (one that
    // waits for the pin directory, a transfer's maker): the stop is done, what is left is cut.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

/// `hostport-dns docs-reference DIR`: the generated pages of the operator's guide.
fn write_reference(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in crate::reference::pages() {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
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
