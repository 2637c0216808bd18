//! `cargo xtask bench <xdp|big-answer|userspace|propagation|kernel|churn|flood|transfer|memory>`: builds the agent and the benchmark
//! driver, then runs the driver (figures and ratios; nothing is asserted).

use anyhow::bail;
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct BenchArgs {
    /// What to measure: xdp (big-answer is its last table alone), userspace, propagation,
    /// kernel, churn, flood, transfer or memory.
    what: String,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    drive(&args.what, &[])
}

/// `cargo xtask soak`: the bench driver's soak, for `seconds`.
pub fn soak(seconds: u64) -> anyhow::Result<()> {
    drive("soak", &[("HPD_SOAK_SECONDS", seconds.to_string())])
}

fn drive(what: &str, env: &[(&str, String)]) -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!("the benchmarks create network namespaces and load XDP programs: run them as root");
    }
    setup::run()?;
    let agent = cmd::build_agent()?;
    cmd::run(cmd::cargo_in_agent_tree("build").args([
        "--package",
        "hostport-dns-tests",
        "--bin",
        "hostport-dns-bench",
    ]))?;
    let driver = cmd::agent_tree_binary("hostport-dns-bench");
    cmd::run(
        std::process::Command::new(driver)
            .arg(what)
            .env("HOSTPORT_DNS_BIN", agent)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
    )
}
