//! Running commands and finding paths.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

/// The root of the checkout xtask runs in, found at run time: a path fixed at compile time
/// (`CARGO_MANIFEST_DIR`) names the checkout xtask was first built in, and a copy made with
/// `cp -a` (mtimes kept, so cargo deems xtask fresh) would build and test the original.
pub fn workspace_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let here = std::env::current_dir().unwrap_or_default();
        find_workspace_root(&here).unwrap_or(here)
    })
    .clone()
}

/// The nearest directory at or above `from` whose `Cargo.toml` declares a `[workspace]`
/// (what `cargo locate-project --workspace` finds, without running cargo again).
pub fn find_workspace_root(from: &Path) -> Option<PathBuf> {
    from.ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|manifest| manifest.lines().any(|l| l.trim() == "[workspace]"))
        })
        .map(Path::to_path_buf)
}

/// Runs a command with inherited output; fails with the command line if it fails.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs a command and returns its standard output.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !out.status.success() {
        bail!("{} failed ({})", describe(cmd), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// `cargo` as invoked by the user (the same toolchain).
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    without_run_environment(&mut cmd);
    cmd
}

/// Removes what `cargo run` set in xtask's environment (`CARGO_PKG_NAME=xtask`, ...). Build
/// scripts that track those variables (ring's does) would otherwise see other values under
/// xtask than in a shell, and cargo would rebuild them, and everything above them, each time.
pub fn without_run_environment(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_run_variable(name) {
            cmd.env_remove(name);
        }
    }
}

fn is_run_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// This machine's target triple (xtask is built for the machine it runs on). Every build of the
/// agent's tree names it (`--target`), which keeps the static-linking flag to the code built
/// for it, off build scripts and proc macros.
pub const HOST_TRIPLE: &str = env!("XTASK_HOST_TRIPLE");

/// `cargo <subcommand> --release` building the agent's tree: for [`HOST_TRIPLE`], linked
/// statically (glibc, `crt-static`). One compiled tree serves the agent (`cargo xtask run`, the
/// benchmarks), its container image (which ships no libc) and the tests, so the dependencies
/// are compiled once, not once for each.
///
/// `RUSTFLAGS` and `CARGO_ENCODED_RUSTFLAGS` are not passed on: cargo would take them instead
/// of the static flag, and an image would ship an agent that needs a libc it does not have.
pub fn cargo_in_agent_tree(subcommand: &str) -> Command {
    let mut cmd = cargo();
    cmd.args([subcommand, "--release", "--target", HOST_TRIPLE])
        .arg("--config")
        .arg(format!(
            "target.{HOST_TRIPLE}.rustflags=[\"-C\", \"target-feature=+crt-static\"]"
        ))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

/// The packages of the whole tree: the workspace but the XDP program (which the agent's build
/// script builds) and the fuzz target (built instrumented by the fuzz slice).
pub fn in_tree(mut cargo: Command) -> Command {
    cargo.args([
        "--workspace",
        "--exclude",
        "hostport-dns-ebpf",
        "--exclude",
        "hostport-dns-fuzz",
    ]);
    cargo
}

/// Builds the whole tree, every target `cargo test` runs and the agent beside them; returns
/// the agent. `cargo build --all-targets` resolves features as `cargo test` does
/// (dev-dependencies on), so the tests then compile nothing more, and the agent is the one the
/// tests run: `cargo xtask test`, `image` and `dist` ship it. ([`build_agent`] resolves the
/// agent's features alone: quicker on a fresh machine, for `run` and the benchmarks.)
pub fn build_tree() -> anyhow::Result<PathBuf> {
    run(in_tree(cargo_in_agent_tree("build")).arg("--all-targets"))?;
    Ok(agent_binary())
}

/// [`build_tree`] with clippy run on the workspace's crates as they compile (clippy's driver as
/// `RUSTC_WORKSPACE_WRAPPER`, the dependencies compiled by rustc alone): the lint of the tree and
/// its build in one pass, where `cargo clippy` would compile every dependency once more (in
/// check mode). The lints are warnings here, so one of them does not stop the tests; returns the
/// agent and how many warnings the workspace's crates had (what `clippy -D warnings` fails on).
/// Cargo replays a fresh crate's warnings, so a second run counts them again.
///
/// [`linted`] gives later commands of the tree (the test listing) the same wrapper, or cargo
/// would compile the workspace's crates again.
pub fn build_tree_linted() -> anyhow::Result<(PathBuf, usize)> {
    let mut build = linted(in_tree(cargo_in_agent_tree("build")));
    build
        .args([
            "--all-targets",
            "--message-format=json-diagnostic-rendered-ansi",
        ])
        .stdout(Stdio::piped());
    let mut child = build
        .spawn()
        .with_context(|| format!("cannot start {}", describe(&build)))?;
    let stdout = child.stdout.take().context("cargo's output")?;
    let mut warnings = 0;
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
        let line = line.context("read cargo's output")?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            println!("{line}");
            continue;
        };
        if message["reason"] != "compiler-message" {
            continue;
        }
        let diagnostic = &message["message"];
        if let Some(rendered) = diagnostic["rendered"].as_str() {
            eprint!("{rendered}");
        }
        if diagnostic["level"] == "warning" {
            warnings += 1;
        }
    }
    let status = child.wait().context("wait for cargo build")?;
    if !status.success() {
        bail!("{} failed ({status})", describe(&build));
    }
    Ok((agent_binary(), warnings))
}

/// `cargo` with clippy's driver around rustc for the workspace's crates (see
/// [`build_tree_linted`]).
pub fn linted(mut cargo: Command) -> Command {
    cargo
        .env("RUSTC_WORKSPACE_WRAPPER", clippy_driver())
        // What `cargo clippy -- ...` hands its driver: none, the lints' own levels.
        .env_remove("CLIPPY_ARGS");
    cargo
}

/// The clippy driver of the toolchain running this cargo (beside it), else the one on PATH.
fn clippy_driver() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .and_then(|cargo| cargo.parent().map(|dir| dir.join("clippy-driver")))
        .filter(|driver| driver.exists())
        .unwrap_or_else(|| PathBuf::from("clippy-driver"))
}

/// Where a binary of the agent's tree lands.
pub fn agent_tree_binary(name: &str) -> PathBuf {
    workspace_root()
        .join("target")
        .join(HOST_TRIPLE)
        .join("release")
        .join(name)
}

/// The release agent binary, built by [`build_agent`].
pub fn agent_binary() -> PathBuf {
    agent_tree_binary("hostport-dns")
}

/// Builds the agent (and with it the XDP program) in release mode, statically linked.
pub fn build_agent() -> anyhow::Result<PathBuf> {
    run(cargo_in_agent_tree("build").args(["--package", "hostport-dns", "--bin", "hostport-dns"]))?;
    Ok(agent_binary())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cargo_run_sets_is_not_passed_on_but_cargo_settings_are() {
        for name in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR", "CARGO_CRATE_NAME"] {
            assert!(is_run_variable(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO",
        ] {
            assert!(!is_run_variable(name), "{name}");
        }
    }

    #[test]
    fn the_workspace_is_the_checkout_xtask_runs_in() {
        let copy = std::env::temp_dir().join(format!("xtask-root-{}", std::process::id()));
        let nested = copy.join("userspace/src");
        std::fs::create_dir_all(&nested).expect("a directory");
        std::fs::write(copy.join("Cargo.toml"), "[workspace]\nmembers = []\n").expect("a manifest");
        std::fs::write(
            copy.join("userspace/Cargo.toml"),
            "[package]\nname = \"x\"\n",
        )
        .expect("a member manifest");
        let found = find_workspace_root(&nested);
        let _ = std::fs::remove_dir_all(&copy);
        assert_eq!(found.as_deref(), Some(copy.as_path()));
    }
}
