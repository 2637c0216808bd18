//! Builds the XDP program (the `hostport-dns-ebpf` crate) for bpfel-unknown-none with the nightly
//! toolchain and bpf-linker (`cargo xtask setup` installs both); the agent embeds the object.
//!
//! This does what `aya_build::build_ebpf` does, with two more code-generation flags it has no way
//! to pass: BPF ISA v3 (32-bit jumps and ALU) and misaligned memory access, which the kernels the
//! agent supports accept on every architecture with efficient unaligned access. Packet headers are
//! not aligned: without the flag every two- and four-byte field would be read a byte at a time.

use std::{env, path::PathBuf, process::Command};

/// Set to build without the eBPF program (an empty object is embedded), e.g. for `cargo doc`.
const SKIP: &str = "HOSTPORT_DNS_SKIP_EBPF";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("the workspace root").to_path_buf();
    for dir in [
        "ebpf/src",
        "ebpf/Cargo.toml",
        "common/src",
        "common/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed={SKIP}");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    if env::var_os(SKIP).is_some() {
        for name in ["hostport-dns-xdp", "hostport-dns-xdp-testbed"] {
            let object = out_dir.join(name);
            if !object.exists() {
                std::fs::write(&object, []).expect("write an empty object");
            }
        }
        return;
    }
    let target_dir = out_dir.join("ebpf-target");
    // The agent's object, and the test bed's (the same program plus its helpers).
    for (features, name) in [
        (None, "hostport-dns-xdp"),
        (Some("testbed"), "hostport-dns-xdp-testbed"),
    ] {
        build_object(&root, &target_dir, features);
        let built = target_dir.join("bpfel-unknown-none/release/hostport-dns-xdp");
        let object = out_dir.join(name);
        std::fs::copy(&built, &object).unwrap_or_else(|e| {
            panic!(
                "cannot copy {} to {}: {e}",
                built.display(),
                object.display()
            )
        });
    }
}

/// Builds the eBPF crate with `features`.
fn build_object(root: &std::path::Path, target_dir: &std::path::Path, features: Option<&str>) {
    let flags = [
        "--cfg=bpf_target_arch=\"x86_64\"",
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
        "-Ctarget-cpu=v3",
        "-Ctarget-feature=+allows-misaligned-mem-access",
    ]
    .join("\x1f");
    let mut cmd = Command::new("rustup");
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
        .args([
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(root)
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap_or_else(|e| panic!("cannot run rustup (run `cargo xtask setup`): {e}"));
    if !output.status.success() {
        panic!(
            "building the XDP program failed (is `cargo xtask setup` done?):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
