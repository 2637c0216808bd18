//! `cargo xtask test` and `cargo xtask lint`.

use anyhow::bail;
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
    setup::run()?;
    lint()?;
    let agent = cmd::build_agent()?;
    // The container image, which a test unpacks and runs the agent from.
    let image = crate::image::build(crate::image::Arch::Amd64)?;
    cmd::run(
        cmd::cargo()
            .args([
                "test",
                "--release",
                "--workspace",
                "--exclude",
                "hostport-dns-ebpf",
            ])
            .args(&args.cargo_test_args)
            .env("HOSTPORT_DNS_BIN", &agent)
            .env("HOSTPORT_DNS_IMAGE", &image)
            .env("HOSTPORT_DNS_HELM", setup::helm_path()),
    )?;
    // A filtered run is someone looking at some tests: the fuzz slice is for whole runs.
    if args.cargo_test_args.is_empty() {
        crate::fuzz::slice()?;
    }
    Ok(())
}

pub fn lint() -> anyhow::Result<()> {
    cmd::run(cmd::cargo().args(["fmt", "--all", "--", "--check"]))?;
    cmd::run(cmd::cargo().args([
        "clippy",
        "--release",
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
