//! The test executables of the tree: listed from cargo's own account of what it built, and run
//! by xtask in two lanes side by side, where `cargo test` would run them one after another.
//!
//! The integration tests (one binary, `tests/tests/integration`) spend most of their time
//! waiting on processes and packets in network namespaces; the unit tests (the DNS core, the
//! agent's library, xtask, the test bed) mostly compute. One lane runs the integration binary,
//! the other the unit-test binaries one at a time, so a 2-core machine has one of each on it.

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::cmd;

/// Test threads of the integration binary. Its tests mostly wait (on agents starting, packets,
/// peers in namespaces), so more than libtest's one a CPU: on a 2-core machine its run took
/// 427 s with 2 threads, 274 s with 4 and 207 s with 8 (both cores then ~94 % busy); 6 leaves
/// the machine some room for the tests that measure a swap or a flood under load.
pub const INTEGRATION_THREADS: usize = 6;

/// One test executable, as cargo built it.
#[derive(Clone, Debug)]
pub struct TestBinary {
    /// How cargo names it when it runs it: `unittests src/lib.rs (hostport-dns)`,
    /// `tests/integration/main.rs (hostport-dns-tests)`.
    pub name: String,
    pub executable: PathBuf,
    /// The package's directory: the tests run in it with `CARGO_MANIFEST_DIR` naming it, as
    /// under `cargo test`.
    pub package_dir: PathBuf,
    /// An integration-test target (`tests/`), not a crate's unit tests.
    pub integration: bool,
}

/// The test executables `cargo` (already given `test --no-run` and the tree's arguments) builds;
/// with the tree built before, it compiles nothing and only reports them.
pub fn list(cargo: &mut Command) -> anyhow::Result<Vec<TestBinary>> {
    cargo.arg("--message-format=json-render-diagnostics");
    let out = cmd::output(cargo)?;
    let mut binaries: Vec<TestBinary> = out.lines().filter_map(parse_artifact).collect();
    if binaries.is_empty() {
        bail!("cargo reported no test executable");
    }
    binaries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(binaries)
}

/// A `compiler-artifact` message of a test target, with its executable.
fn parse_artifact(line: &str) -> Option<TestBinary> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let target = &message["target"];
    let kinds: Vec<&str> = target["kind"]
        .as_array()?
        .iter()
        .filter_map(|k| k.as_str())
        .collect();
    let manifest = PathBuf::from(message["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let src = PathBuf::from(target["src_path"].as_str()?);
    let relative = src.strip_prefix(&package_dir).unwrap_or(&src);
    let package = package_name(message["package_id"].as_str()?, &package_dir);
    let integration = kinds.contains(&"test");
    let name = if integration {
        format!("{} ({package})", relative.display())
    } else {
        format!("unittests {} ({package})", relative.display())
    };
    Some(TestBinary {
        name,
        executable,
        package_dir,
        integration,
    })
}

/// The package's name from its id (`path+file:///work/x/userspace#hostport-dns@0.1.0`, or
/// `path+file:///work/x/xtask#0.1.0` where the name is the directory's).
fn package_name(id: &str, dir: &Path) -> String {
    let fragment = id.rsplit_once('#').map_or(id, |(_, f)| f);
    match fragment.split_once('@') {
        Some((name, _)) => name.to_owned(),
        None => dir
            .file_name()
            .map_or_else(|| fragment.to_owned(), |n| n.to_string_lossy().into_owned()),
    }
}

/// What one executable's run came to.
pub struct Outcome {
    pub binary: TestBinary,
    pub lines: Vec<String>,
    pub success: bool,
    pub status: String,
    pub took: Duration,
}

/// Runs every binary with `args` (a name filter, `--nocapture`, ...) and `env`: the integration
/// binaries in one lane, the unit-test binaries in the other, one at a time each. The
/// integration lane's output is printed as it comes; each unit-test binary's output when it
/// ends, whole, so that the two lanes' lines never interleave within a binary's report.
pub fn run_in_lanes(
    binaries: &[TestBinary],
    args: &[String],
    env: &[(&str, PathBuf)],
) -> Vec<Outcome> {
    let (integration, units): (Vec<_>, Vec<_>) =
        binaries.iter().cloned().partition(|b| b.integration);
    let print = Mutex::new(());
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for (lane, live) in [(integration, true), (units, false)] {
            let (print, outcomes) = (&print, &outcomes);
            scope.spawn(move || {
                for binary in lane {
                    let outcome = run_one(binary, args, env, live.then_some(print));
                    if !live {
                        let _held = print.lock().unwrap_or_else(|p| p.into_inner());
                        println!("\n     Running {}", outcome.binary.name);
                        for line in &outcome.lines {
                            println!("{line}");
                        }
                    }
                    outcomes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(outcome);
                }
            });
        }
    });
    outcomes.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Runs one test executable as `cargo test` would (in its package's directory, with
/// `CARGO_MANIFEST_DIR`), its output (stdout and stderr, merged) kept; printed line by line as
/// it comes under `live`'s lock when given.
fn run_one(
    binary: TestBinary,
    args: &[String],
    env: &[(&str, PathBuf)],
    live: Option<&Mutex<()>>,
) -> Outcome {
    let started = Instant::now();
    if let Some(lock) = live {
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        println!("\n     Running {}", binary.name);
    }
    let mut lines = Vec::new();
    let result = spawn_merged(&binary, args, env).and_then(|(mut child, reader)| {
        for line in BufReader::new(reader).lines() {
            let line = line.context("read a test binary's output")?;
            if let Some(lock) = live {
                let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
                println!("{line}");
            }
            lines.push(line);
        }
        child.wait().context("wait for a test binary")
    });
    let (success, status) = match result {
        Ok(status) => (status.success(), status.to_string()),
        Err(error) => (false, format!("{error:#}")),
    };
    Outcome {
        binary,
        lines,
        success,
        status,
        took: started.elapsed(),
    }
}

/// Starts the binary with its stdout and stderr on one pipe; returns the pipe's reading end.
fn spawn_merged(
    binary: &TestBinary,
    args: &[String],
    env: &[(&str, PathBuf)],
) -> anyhow::Result<(std::process::Child, impl Read)> {
    let (reader, writer) = std::io::pipe().context("a pipe for a test binary's output")?;
    let mut command = Command::new(&binary.executable);
    // A thread count given on the command line wins.
    if binary.integration && !args.iter().any(|a| a.starts_with("--test-threads")) {
        command.arg(format!("--test-threads={INTEGRATION_THREADS}"));
    }
    command
        .args(args)
        .current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().context("a pipe for a test binary")?)
        .stderr(writer);
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command
        .spawn()
        .with_context(|| format!("cannot start {}", binary.executable.display()))?;
    // The command holds the pipe's writing ends until it is dropped: drop it so the reader ends
    // when the child does.
    drop(command);
    Ok((child, reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_targets_are_named_as_cargo_names_them_and_other_artifacts_are_not_tests() {
        let unit = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/userspace#hostport-dns@0.1.0","manifest_path":"/w/userspace/Cargo.toml","target":{"kind":["lib"],"name":"hostport_dns","src_path":"/w/userspace/src/lib.rs"},"profile":{"test":true},"executable":"/w/target/release/deps/hostport_dns-1"}"#;
        let integration = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#hostport-dns-tests@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["test"],"name":"integration","src_path":"/w/tests/tests/integration/main.rs"},"profile":{"test":true},"executable":"/w/target/release/deps/integration-2"}"#;
        let xtask = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/xtask#0.1.0","manifest_path":"/w/xtask/Cargo.toml","target":{"kind":["bin"],"name":"xtask","src_path":"/w/xtask/src/main.rs"},"profile":{"test":true},"executable":"/w/target/release/deps/xtask-3"}"#;
        let library = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/userspace#hostport-dns@0.1.0","manifest_path":"/w/userspace/Cargo.toml","target":{"kind":["lib"],"name":"hostport_dns","src_path":"/w/userspace/src/lib.rs"},"profile":{"test":false},"executable":null}"#;
        let unit = parse_artifact(unit).expect("a unit-test binary");
        assert_eq!(unit.name, "unittests src/lib.rs (hostport-dns)");
        assert!(!unit.integration);
        assert_eq!(unit.package_dir, Path::new("/w/userspace"));
        let integration = parse_artifact(integration).expect("an integration binary");
        assert_eq!(
            integration.name,
            "tests/integration/main.rs (hostport-dns-tests)"
        );
        assert!(integration.integration);
        assert_eq!(
            parse_artifact(xtask).expect("xtask's unit tests").name,
            "unittests src/main.rs (xtask)"
        );
        assert!(parse_artifact(library).is_none());
        assert!(parse_artifact("Compiling x").is_none());
    }
}
