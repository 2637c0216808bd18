//! Builds the XDP program (the `hostport-dns-ebpf` crate) for the BPF target of the agent's byte
//! order, with `bpf_target_arch` the agent's architecture, using the nightly toolchain and
//! bpf-linker (`cargo xtask setup` installs both); the agent embeds the object. How it is built:
//! `ebpf/build_object.rs`, shared with xtask.

use std::{env, path::PathBuf};

/// Set to build without the eBPF program (an empty object is embedded), e.g. for `cargo doc`.
const SKIP: &str = "HOSTPORT_DNS_SKIP_EBPF";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("the workspace root").to_path_buf();
    for dir in [
        "ebpf/src",
        "ebpf/Cargo.toml",
        "ebpf/build_object.rs",
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
        let built = build_object(&root, &target_dir, features);
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

include!("../ebpf/build_object.rs");

/// Builds the eBPF crate with `features`, for the architecture and byte order this agent is
/// built for.
fn build_object(
    root: &std::path::Path,
    target_dir: &std::path::Path,
    features: Option<&str>,
) -> PathBuf {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH");
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").expect("CARGO_CFG_TARGET_ENDIAN");
    build_ebpf_object(root, target_dir, features, &arch, &endian).unwrap_or_else(|e| panic!("{e}"))
}
