//! `cargo xtask fuzz`: the XDP program's mutation campaign through BPF_PROG_TEST_RUN (10 million
//! packets by default), then coverage-guided fuzzing (libFuzzer) of the userspace query path.
//! `cargo xtask test` runs a bounded slice of both.

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct FuzzArgs {
    /// Mutated packets run through the XDP program.
    #[arg(long, default_value_t = 10_000_000)]
    packets: u64,
    /// Seconds of coverage-guided fuzzing of the userspace query path.
    #[arg(long, default_value_t = 300)]
    seconds: u64,
    /// The mutation campaign's seed (a failure prints it: the run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
}

/// What the test command runs: at most about two minutes of fuzzing in all.
const SLICE_PACKETS: u64 = 3_000_000;
const SLICE_XDP_SECONDS: u64 = 60;
const SLICE_USERSPACE_SECONDS: u64 = 45;

pub fn run(args: FuzzArgs) -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!("the XDP campaign loads the program: run `cargo xtask fuzz` as root");
    }
    setup::run()?;
    xdp_campaign(args.packets, Duration::from_secs(24 * 3600), args.seed)?;
    userspace(args.seconds)
}

/// The bounded slice `cargo xtask test` runs, after its build of the agent's tree (which built
/// the XDP campaign's driver).
pub fn slice() -> anyhow::Result<()> {
    run_xdp_campaign(SLICE_PACKETS, Duration::from_secs(SLICE_XDP_SECONDS), None)?;
    userspace(SLICE_USERSPACE_SECONDS)
}

fn xdp_campaign(packets: u64, budget: Duration, seed: Option<u64>) -> anyhow::Result<()> {
    cmd::run(cmd::cargo_in_agent_tree("build").args([
        "--package",
        "hostport-dns-tests",
        "--bin",
        "hostport-dns-fuzz",
    ]))?;
    run_xdp_campaign(packets, budget, seed)
}

/// Runs the XDP campaign's driver, as built in the agent's tree.
fn run_xdp_campaign(packets: u64, budget: Duration, seed: Option<u64>) -> anyhow::Result<()> {
    let mut run = Command::new(cmd::agent_tree_binary("hostport-dns-fuzz"));
    run.args(["--packets", &packets.to_string()])
        .args(["--seconds", &budget.as_secs().to_string()]);
    if let Some(seed) = seed {
        run.args(["--seed", &seed.to_string()]);
    }
    cmd::run(&mut run)
}

/// Coverage instrumentation for libFuzzer, as cargo-fuzz sets it (stable rustc takes these).
const SANCOV_FLAGS: [&str; 7] = [
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
];

fn userspace(seconds: u64) -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let triple = cmd::HOST_TRIPLE;
    let flags = SANCOV_FLAGS
        .iter()
        .map(|f| format!("{f:?}"))
        .collect::<Vec<_>>()
        .join(",");
    // Only the target is instrumented (build scripts and proc macros are not: `--target`), in a
    // build tree of its own so the regular one is not rebuilt.
    let target_dir = root.join("target/fuzz");
    cmd::run(
        cmd::cargo()
            .args(["build", "--release", "--package", "hostport-dns-fuzz"])
            .args(["--bin", "fuzz-answer", "--target", triple])
            .arg("--config")
            .arg(format!("target.{triple}.rustflags=[{flags}]"))
            .env("CARGO_TARGET_DIR", &target_dir),
    )?;
    let binary = target_dir.join(triple).join("release/fuzz-answer");
    let corpus: PathBuf = target_dir.join("corpus");
    std::fs::create_dir_all(&corpus).context("the fuzz corpus directory")?;
    println!("userspace query path: coverage-guided fuzzing for {seconds} s");
    cmd::run(
        Command::new(binary)
            .arg(format!("-max_total_time={seconds}"))
            .args(["-print_final_stats=1", "-rss_limit_mb=2048", "-timeout=10"])
            .arg(format!("-artifact_prefix={}/", target_dir.display()))
            .arg(&corpus)
            .arg(root.join("fuzz/seeds")),
    )
}
