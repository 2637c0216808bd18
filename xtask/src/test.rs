//! `cargo xtask test` and `cargo xtask lint`.

use std::{
    io::{BufRead, BufReader},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct TestArgs {
    /// Arguments passed to `cargo test` (after `--`), e.g. a test name filter.
    #[arg(last = true)]
    cargo_test_args: Vec<String>,
}

pub fn run(args: TestArgs) -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!(
            "the tests create network namespaces and load XDP programs: run `cargo xtask test` as root"
        );
    }
    let mut phases = Phases::default();
    let outcome = run_phases(&args, &mut phases);
    phases.print_summary();
    outcome?;
    if !phases.failures.is_empty() {
        bail!("{} failed", phases.failures.join(", "));
    }
    Ok(())
}

/// Every phase, in order. A phase whose failure leaves the next ones nothing to run on (setup,
/// the builds) ends the run; lint, test and fuzz failures are recorded and the run goes on, so
/// that one failure shows them all.
fn run_phases(args: &TestArgs, phases: &mut Phases) -> anyhow::Result<()> {
    phases.time("setup", setup::run)?;
    if let Err(error) = phases.time("lint (fmt, clippy)", lint) {
        eprintln!("xtask: lint failed: {error:#}");
        phases.failures.push("lint".into());
    }
    // One build of the agent's tree: the agent, the test binaries and the drivers, with one
    // resolution of features, so that `cargo test` below compiles nothing more.
    let agent = phases.time("build (agent, tests)", cmd::build_tree)?;
    // The container image, which a test unpacks and runs the agent from: the same binary.
    let image = phases.time("package the image", || {
        crate::image::package(crate::image::Arch::of_host()?, &agent)
    })?;
    let failed = phases.time("cargo test", || {
        run_tests(
            cmd::in_tree(cmd::cargo_in_agent_tree("test"))
                .arg("--no-fail-fast")
                .args(&args.cargo_test_args)
                .env("HOSTPORT_DNS_BIN", &agent)
                .env("HOSTPORT_DNS_IMAGE", &image)
                .env("HOSTPORT_DNS_HELM", setup::helm_path()),
        )
    })?;
    phases.failures.extend(failed);
    // A filtered run is someone looking at some tests: the fuzz slice is for whole runs.
    if args.cargo_test_args.is_empty()
        && let Err(error) = phases.time("fuzz slice", crate::fuzz::slice)
    {
        eprintln!("xtask: the fuzz slice failed: {error:#}");
        phases.failures.push("fuzz slice".into());
    }
    Ok(())
}

/// The phases' wall times, and what failed.
#[derive(Default)]
struct Phases {
    times: Vec<(&'static str, Duration)>,
    failures: Vec<String>,
}

impl Phases {
    fn time<T>(
        &mut self,
        name: &'static str,
        phase: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let started = Instant::now();
        let outcome = phase();
        self.times.push((name, started.elapsed()));
        outcome
    }

    fn print_summary(&self) {
        let total: Duration = self.times.iter().map(|(_, t)| *t).sum();
        eprintln!("\nxtask test: wall time per phase");
        for (name, time) in &self.times {
            eprintln!("  {name:<20} {:>7.1} s", time.as_secs_f64());
        }
        eprintln!("  {:<20} {:>7.1} s", "total", total.as_secs_f64());
        if self.failures.is_empty() {
            eprintln!("xtask test: everything passed");
        } else {
            eprintln!("xtask test: {} failed:", self.failures.len());
            for failure in &self.failures {
                eprintln!("  {failure}");
            }
        }
    }
}

/// Runs `cargo test` (with `--no-fail-fast`), its output passed through as it comes; returns
/// the failed tests as `<binary>: <test>`, and each binary that failed without naming a test
/// (a crash, a build error).
fn run_tests(cargo: &mut Command) -> anyhow::Result<Vec<String>> {
    let (reader, writer) = std::io::pipe().context("a pipe for cargo test's output")?;
    cargo
        .stdout(
            writer
                .try_clone()
                .context("a pipe for cargo test's output")?,
        )
        .stderr(writer);
    let mut child = cargo
        .spawn()
        .with_context(|| format!("cannot start {}", cmd::describe(cargo)))?;
    // Our copies of the pipe's writing end go with `cargo`'s: dropped so the reader ends.
    drop(std::mem::replace(cargo, Command::new("true")));
    let mut failures = TestFailures::default();
    for line in BufReader::new(reader).lines() {
        let line = line.context("read cargo test's output")?;
        println!("{line}");
        failures.read(&line);
    }
    let status = child.wait().context("wait for cargo test")?;
    let alone = failures.binaries_without_a_named_test();
    let mut failed = failures.tests;
    failed.extend(alone);
    if !status.success() && failed.is_empty() {
        failed.push(format!("cargo test ({status})"));
    }
    Ok(failed)
}

/// What `cargo test`'s output says failed.
#[derive(Default)]
struct TestFailures {
    /// The binary running now (`tests/node_life.rs`, `unittests src/lib.rs (hostport-dns)`).
    binary: String,
    tests: Vec<String>,
    /// Binaries cargo names as failed (`-p hostport-dns-tests --test node_life`).
    binaries: Vec<String>,
}

impl TestFailures {
    fn read(&mut self, line: &str) {
        let trimmed = line.trim();
        if let Some(running) = trimmed.strip_prefix("Running ") {
            self.binary = running.split(" (").next().unwrap_or(running).to_owned();
        } else if let Some(test) = trimmed
            .strip_prefix("test ")
            .and_then(|t| t.strip_suffix(" ... FAILED"))
        {
            self.tests.push(format!("{}: {test}", self.binary));
        } else if trimmed.starts_with('`') && trimmed.ends_with('`') && trimmed.contains("-p ") {
            // `error: N targets failed:` lists each as `-p <package> --test <name>`.
            self.binaries.push(trimmed.trim_matches('`').to_owned());
        } else if let Some(target) = trimmed
            .strip_prefix("error: test failed, to rerun pass `")
            .and_then(|t| t.strip_suffix('`'))
        {
            self.binaries.push(target.to_owned());
        }
    }

    /// The failed binaries none of whose tests were named FAILED (a crash, a timeout).
    fn binaries_without_a_named_test(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for target in &self.binaries {
            let name = target.rsplit(' ').next().unwrap_or(target);
            let named = self
                .tests
                .iter()
                .any(|t| t.split(':').next().is_some_and(|b| b.contains(name)));
            if !named && !out.contains(target) {
                out.push(format!(
                    "{target} (no test named: it crashed or did not build)"
                ));
            }
        }
        out
    }
}

pub fn lint() -> anyhow::Result<()> {
    cmd::run(cmd::cargo().args(["fmt", "--all", "--", "--check"]))?;
    // In the agent's tree: the build scripts and proc macros it compiles serve the build too.
    cmd::run(cmd::cargo_in_agent_tree("clippy").args([
        "--workspace",
        "--exclude",
        "hostport-dns-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The eBPF crate only builds for the BPF target, with the nightly; both of its objects.
    for features in [None, Some("testbed")] {
        let mut clippy = std::process::Command::new("rustup");
        clippy
            .current_dir(cmd::workspace_root())
            .args([
                "run",
                "nightly",
                "cargo",
                "clippy",
                "--release",
                "--package",
            ])
            .arg("hostport-dns-ebpf")
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .args(features.map(|f| ["--features", f]).into_iter().flatten())
            .args(["--", "-D", "warnings"])
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTC_WORKSPACE_WRAPPER");
        cmd::without_run_environment(&mut clippy);
        cmd::run(&mut clippy)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_tests_are_named_with_their_binary_and_crashed_binaries_alone() {
        let mut failures = TestFailures::default();
        for line in [
            "     Running tests/node_life.rs (target/release/deps/node_life-3a29)",
            "test a_node_leaves ... ok",
            "test a_node_returns ... FAILED",
            "     Running tests/restart.rs (target/release/deps/restart-11)",
            "error: test failed, to rerun pass `-p hostport-dns-tests --test node_life`",
            "error: test failed, to rerun pass `-p hostport-dns-tests --test restart`",
            "error: 2 targets failed:",
            "    `-p hostport-dns-tests --test node_life`",
        ] {
            failures.read(line);
        }
        assert_eq!(failures.tests, ["tests/node_life.rs: a_node_returns"]);
        assert_eq!(
            failures.binaries_without_a_named_test(),
            ["-p hostport-dns-tests --test restart (no test named: it crashed or did not build)"]
        );
    }
}
