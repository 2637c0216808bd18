// Builds the XDP program's object (the `hostport-dns-ebpf` crate) with the nightly toolchain and
// bpf-linker. Shared, as source, by the agent's build script (`include!`) and by xtask (`#[path]`),
// so that the object the tests check for other architectures is built exactly as the agent's.
//
// Two code-generation flags beyond what `aya_build::build_ebpf` passes: BPF ISA v3 (32-bit jumps
// and ALU) and misaligned memory access, which the kernels the agent supports accept on every
// architecture with efficient unaligned access. Packet headers are not aligned: without the flag
// every two- and four-byte field would be read a byte at a time.

/// The BPF target for a host of `endian` (`CARGO_CFG_TARGET_ENDIAN`).
pub fn bpf_target(endian: &str) -> Result<&'static str, String> {
    match endian {
        "little" => Ok("bpfel-unknown-none"),
        "big" => Ok("bpfeb-unknown-none"),
        other => Err(format!("no BPF target for a {other}-endian host")),
    }
}

/// The `bpf_target_arch` cfg aya-ebpf reads, for a host of `arch` (`CARGO_CFG_TARGET_ARCH`):
/// the arch itself, riscv64 variants folded into one.
pub fn bpf_target_arch(arch: &str) -> &str {
    if arch.starts_with("riscv64") {
        "riscv64"
    } else {
        arch
    }
}

/// Builds the program with `features` for a host of `arch` and `endian` into `target_dir`, and
/// returns the object's path.
pub fn build_ebpf_object(
    root: &std::path::Path,
    target_dir: &std::path::Path,
    features: Option<&str>,
    arch: &str,
    endian: &str,
) -> Result<std::path::PathBuf, String> {
    let target = bpf_target(endian)?;
    let flags = [
        format!("--cfg=bpf_target_arch=\"{}\"", bpf_target_arch(arch)),
        "-Cdebuginfo=2".into(),
        "-Clink-arg=--btf".into(),
        "-Ctarget-cpu=v3".into(),
        "-Ctarget-feature=+allows-misaligned-mem-access".into(),
    ]
    .join("\x1f");
    let mut cmd = std::process::Command::new("rustup");
    cmd.args([
        "run",
        "nightly",
        "cargo",
        "build",
        "--package",
        "hostport-dns-ebpf",
        "--bins",
        "--release",
    ]);
    if let Some(features) = features {
        cmd.args(["--features", features]);
    }
    let output = cmd
        .args(["--target", target, "-Z", "build-std=core", "--target-dir"])
        .arg(target_dir)
        .current_dir(root)
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTFLAGS")
        .output()
        .map_err(|e| format!("cannot run rustup (run `cargo xtask setup`): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the XDP program failed (is `cargo xtask setup` done?):\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(target_dir.join(target).join("release/hostport-dns-xdp"))
}
