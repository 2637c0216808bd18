//! `cargo xtask test` and `cargo xtask lint`.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct TestArgs {
    /// Arguments passed to every test binary (after `--`), e.g. a name filter (`transfer::`)
    /// or `--nocapture`.
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
    if let Err(error) = phases.time("lint (fmt, eBPF)", lint_without_the_tree) {
        eprintln!("xtask: lint failed: {error:#}");
        phases.failures.push("lint".into());
    }
    // One build of the agent's tree, clippy on the workspace's crates as they compile: the
    // agent, the test binaries and the drivers, with one resolution of features, so that the
    // test listing below compiles nothing more.
    let (agent, warnings) = phases.time("build (tree, clippy)", cmd::build_tree_linted)?;
    if warnings > 0 {
        eprintln!("xtask: clippy: {warnings} warnings in the workspace's crates (above)");
        phases
            .failures
            .push(format!("lint (clippy: {warnings} warnings)"));
    }
    // The container image, which a test unpacks and runs the agent from: the same binary.
    let image = phases.time("package the image", || {
        crate::image::package(crate::image::Arch::of_host()?, &agent)
    })?;
    let failed = phases.time("tests", || {
        let binaries = crate::test_binaries::list(
            cmd::linted(cmd::in_tree(cmd::cargo_in_agent_tree("test"))).arg("--no-run"),
        )?;
        let env = [
            ("HOSTPORT_DNS_BIN", agent.clone()),
            ("HOSTPORT_DNS_IMAGE", image.clone()),
            ("HOSTPORT_DNS_HELM", setup::helm_path()),
        ];
        let outcomes = crate::test_binaries::run_in_lanes(&binaries, &args.cargo_test_args, &env);
        print_binary_times(&outcomes);
        Ok(failures_of(&outcomes))
    })?;
    phases.failures.extend(failed.tests);
    phases.reports.extend(failed.reports);
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
    /// What failed tests reported (their panics), repeated under the summary.
    reports: Vec<(String, Vec<String>)>,
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
            for (test, lines) in &self.reports {
                eprintln!("\nxtask test: {test} reported (last lines):");
                for line in lines {
                    eprintln!("    {line}");
                }
            }
        }
    }
}

/// Each binary's run time, longest first: where the test phase's time goes.
fn print_binary_times(outcomes: &[crate::test_binaries::Outcome]) {
    let mut times: Vec<_> = outcomes.iter().map(|o| (o.took, &o.binary.name)).collect();
    times.sort_by(|a, b| b.cmp(a));
    eprintln!("\nxtask test: wall time per test binary (two lanes side by side)");
    for (took, name) in times {
        eprintln!("  {:>7.1} s  {name}", took.as_secs_f64());
    }
}

/// The failed tests as `<binary>: <test>` with what they reported, and each binary that failed
/// without naming a test (a crash, a panic outside a test).
fn failures_of(outcomes: &[crate::test_binaries::Outcome]) -> Failed {
    let mut failed = Failed::default();
    for outcome in outcomes {
        let mut failures = TestFailures {
            binary: outcome.binary.name.clone(),
            ..TestFailures::default()
        };
        for line in &outcome.lines {
            failures.read(line);
        }
        failures.finish_report();
        if !outcome.success && failures.tests.is_empty() {
            failed.tests.push(format!(
                "{} ({}: no test named: it crashed)",
                outcome.binary.name, outcome.status
            ));
        }
        failed.tests.extend(failures.tests);
        failed.reports.extend(failures.reports);
    }
    failed
}

/// The test phase's failures.
#[derive(Default)]
struct Failed {
    tests: Vec<String>,
    reports: Vec<(String, Vec<String>)>,
}

/// Lines of a failed test's own report that the summary repeats, from its panic on (the panic's
/// place and message). The summary is what a CI log's tail shows, long after the test printed
/// them.
const REPORT_TAIL_LINES: usize = 12;

/// What one test binary's output says failed, and what each failed test reported.
#[derive(Default)]
struct TestFailures {
    /// The binary (`unittests src/lib.rs (hostport-dns)`).
    binary: String,
    tests: Vec<String>,
    /// `<binary>: <test>` and the last lines of that test's report (libtest's `---- <test>
    /// stdout ----` section), in the order libtest printed them.
    reports: Vec<(String, Vec<String>)>,
    /// The report being read, while inside one.
    reading: Option<(String, Vec<String>)>,
}

impl TestFailures {
    fn read(&mut self, line: &str) {
        if let Some(test) = line
            .trim()
            .strip_prefix("test ")
            .and_then(|t| t.strip_suffix(" ... FAILED"))
        {
            self.tests.push(format!("{}: {test}", self.binary));
            return;
        }
        let section = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"));
        // A section ends where the next begins, or at libtest's list of the failures.
        if section.is_some() || line == "failures:" {
            self.finish_report();
        }
        if let Some(test) = section {
            self.reading = Some((format!("{}: {test}", self.binary), Vec::new()));
        } else if let Some((_, lines)) = &mut self.reading {
            // From the panic on, when there is one: what the test printed before it (an
            // agent's log) is in the output above.
            if line.contains("panicked at") {
                lines.clear();
            }
            if lines.len() < REPORT_TAIL_LINES {
                lines.push(line.to_owned());
            }
        }
    }

    fn finish_report(&mut self) {
        if let Some((test, mut lines)) = self.reading.take() {
            while lines.last().is_some_and(|l| l.trim().is_empty()) {
                lines.pop();
            }
            self.reports.push((test, lines));
        }
    }
}

/// `cargo xtask lint`: the format check, clippy on the tree (in check mode: no build) and on the
/// eBPF crate.
pub fn lint() -> anyhow::Result<()> {
    cmd::run(cmd::cargo_in_agent_tree("clippy").args([
        "--workspace",
        "--exclude",
        "hostport-dns-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    lint_without_the_tree()
}

/// The format check and the eBPF crate's clippy: what `cargo xtask test` lints apart from the
/// tree, whose clippy runs in its build ([`cmd::build_tree_linted`]).
fn lint_without_the_tree() -> anyhow::Result<()> {
    cmd::run(cmd::cargo().args(["fmt", "--all", "--", "--check"]))?;
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
    fn failed_tests_are_named_with_their_binary() {
        let mut failures = TestFailures {
            binary: "tests/integration/main.rs (hostport-dns-tests)".into(),
            ..TestFailures::default()
        };
        for line in [
            "test node_life::a_node_leaves ... ok",
            "test node_life::a_node_returns ... FAILED",
            "",
            "failures:",
            "",
            "---- node_life::a_node_returns stdout ----",
            "agent log: started",
            "",
            "thread 'node_life::a_node_returns' panicked at tests/tests/integration/node_life.rs:9:5:",
            "no answer within 10 s",
            "",
            "",
            "failures:",
            "    node_life::a_node_returns",
            "",
            "test result: FAILED. 1 passed; 1 failed; 0 ignored",
        ] {
            failures.read(line);
        }
        failures.finish_report();
        let test = "tests/integration/main.rs (hostport-dns-tests): node_life::a_node_returns";
        assert_eq!(failures.tests, [test]);
        assert_eq!(
            failures.reports.len(),
            1,
            "one report, not the list after it"
        );
        let (reported, lines) = &failures.reports[0];
        assert_eq!(reported, test);
        assert_eq!(
            lines,
            &[
                "thread 'node_life::a_node_returns' panicked at tests/tests/integration/node_life.rs:9:5:",
                "no answer within 10 s"
            ],
            "the report is the panic and its message: {lines:?}"
        );
    }
}
