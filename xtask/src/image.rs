//! `cargo xtask image`: the agent's container image, as an OCI image archive
//! (`target/image/hostport-dns-<version>-<arch>.oci.tar`), built without a container engine and
//! without a base image: one layer holding a statically linked agent (glibc, `crt-static`) and
//! its LICENSE. `skopeo copy oci-archive:FILE docker://REGISTRY/hostport-dns:TAG` pushes it;
//! `podman load` and Docker 25+ load it. The tests unpack it and run the agent from it.
//!
//! Reproducible: every timestamp is the commit's (`SOURCE_DATE_EPOCH` when set), files are
//! written in a fixed order with fixed owners and modes.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::{cmd, setup};

/// The architectures an image is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// x86_64, with the stable toolchain (this machine's).
    Amd64,
    /// aarch64, cross-built: the nightly builds the standard library from source (`-Z
    /// build-std`: no other Rust target can be downloaded here) and links with Debian's cross
    /// toolchain (gcc-aarch64-linux-gnu, which setup installs).
    Arm64,
}

impl Arch {
    /// The Rust target triple.
    pub fn target(self) -> &'static str {
        match self {
            Self::Amd64 => "x86_64-unknown-linux-gnu",
            Self::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// This machine's architecture.
    pub fn of_host() -> anyhow::Result<Self> {
        [Self::Amd64, Self::Arm64]
            .into_iter()
            .find(|arch| arch.target() == cmd::HOST_TRIPLE)
            .with_context(|| format!("no image architecture for {}", cmd::HOST_TRIPLE))
    }

    /// Debian's user-mode emulator of the architecture (`qemu-user-static`).
    fn emulator(self) -> &'static str {
        match self {
            Self::Amd64 => "qemu-x86_64-static",
            Self::Arm64 => "qemu-aarch64-static",
        }
    }

    /// The OCI architecture name.
    fn oci(self) -> &'static str {
        match self {
            Self::Amd64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }
}

#[derive(clap::Args)]
pub struct ImageArgs {
    /// The image's architecture.
    #[arg(long, value_enum, default_value = "amd64")]
    pub arch: Arch,
}
/// Where the agent sits in the image.
const AGENT_PATH: &str = "usr/local/bin/hostport-dns";
/// Where the license sits in the image.
const LICENSE_PATH: &str = "usr/share/doc/hostport-dns/LICENSE";
/// Where the image's sources are published (the OCI `source` label).
const SOURCE: &str = "https://github.com/hostport-dns/hostport-dns";

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// Builds the static agent for `arch` and writes the archive; returns its path.
pub fn build(arch: Arch) -> anyhow::Result<PathBuf> {
    setup::toolchain()?;
    if arch == Arch::Arm64 {
        setup::cross_toolchain()?;
    }
    let agent = if arch.target() == cmd::HOST_TRIPLE {
        // The agent's own tree is already static: the image ships the agent the tests run.
        cmd::build_tree()?
    } else {
        let agent = cross_build_static_agent(arch)?;
        // Built is not run: the other architecture's agent answers a query before it ships.
        crate::emulated::answers_under_emulation(arch.emulator(), &agent)?;
        agent
    };
    package(arch, &agent)
}

/// Writes the archive of `agent`, a static agent built for `arch`; returns its path.
pub fn package(arch: Arch, agent: &Path) -> anyhow::Result<PathBuf> {
    let root = cmd::workspace_root();
    let version = workspace_version(&root)?;
    let revision = cmd::output(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(&root),
    )
    .map(|r| r.trim().to_owned())
    .unwrap_or_else(|_| "unknown".into());
    let epoch = source_date_epoch(&root);
    let archive = root.join(format!(
        "target/image/hostport-dns-{version}-{}.oci.tar",
        arch.oci()
    ));
    write_archive(
        &archive,
        &Contents {
            agent: std::fs::read(agent).with_context(|| format!("read {}", agent.display()))?,
            license: std::fs::read(root.join("LICENSE")).context("read LICENSE")?,
            version,
            revision,
            epoch,
            arch,
        },
    )?;
    println!("{}", archive.display());
    Ok(archive)
}

/// The agent for another architecture than this machine's, linked statically as the agent's
/// own tree is (see `cmd::cargo_in_agent_tree`), in a build tree of its own.
fn cross_build_static_agent(arch: Arch) -> anyhow::Result<PathBuf> {
    let target_dir = cmd::workspace_root().join("target/image-build");
    let target = arch.target();
    let mut build = match arch {
        Arch::Amd64 => cmd::cargo(),
        Arch::Arm64 => {
            let mut nightly = Command::new("rustup");
            nightly
                .current_dir(cmd::workspace_root())
                .args(["run", "nightly", "cargo"]);
            cmd::without_run_environment(&mut nightly);
            nightly
                .env_remove("CARGO")
                .env_remove("RUSTC")
                .env_remove("RUSTUP_TOOLCHAIN")
                .env(
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                    "aarch64-linux-gnu-gcc",
                )
                .env("CC_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-gcc")
                .env("AR_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-ar");
            nightly
        }
    };
    build
        .args(["build", "--release", "--package", "hostport-dns", "--bin"])
        .args(["hostport-dns", "--target", target, "--target-dir"])
        .arg(&target_dir)
        // With --target, the flag reaches the agent only, not build scripts or proc macros.
        .env("RUSTFLAGS", "-C target-feature=+crt-static");
    if arch == Arch::Arm64 {
        build.args(["-Z", "build-std=std,panic_abort"]);
    }
    cmd::run(&mut build)?;
    Ok(target_dir.join(target).join("release/hostport-dns"))
}

fn workspace_version(root: &Path) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| l.trim().strip_prefix("version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .context("no [workspace.package] version in Cargo.toml")
}

/// `SOURCE_DATE_EPOCH`, else the commit's time, else 0.
fn source_date_epoch(root: &Path) -> u64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .or_else(|| {
            cmd::output(
                Command::new("git")
                    .args(["log", "-1", "--format=%ct"])
                    .current_dir(root),
            )
            .ok()
        })
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// What goes into the image.
struct Contents {
    agent: Vec<u8>,
    license: Vec<u8>,
    version: String,
    revision: String,
    epoch: u64,
    arch: Arch,
}

/// A blob of the layout: its bytes and their digest.
struct Blob {
    bytes: Vec<u8>,
    digest: String,
}

impl Blob {
    fn new(bytes: Vec<u8>) -> Self {
        let digest = sha256(&bytes);
        Self { bytes, digest }
    }

    fn descriptor(&self, media_type: &str) -> serde_json::Value {
        serde_json::json!({
            "mediaType": media_type,
            "digest": self.digest,
            "size": self.bytes.len(),
        })
    }
}

fn sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn write_archive(path: &Path, contents: &Contents) -> anyhow::Result<()> {
    let layer_tar = layer(contents)?;
    let diff_id = sha256(&layer_tar);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&layer_tar)?;
    let layer = Blob::new(gz.finish()?);
    let created = rfc3339(contents.epoch);
    let labels = serde_json::json!({
        "org.opencontainers.image.title": "hostport-dns",
        "org.opencontainers.image.description": "Node-local authoritative DNS for Kubernetes load balancers, answered from XDP",
        "org.opencontainers.image.version": contents.version,
        "org.opencontainers.image.revision": contents.revision,
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": created,
    });
    let config = Blob::new(serde_json::to_vec(&serde_json::json!({
        "created": created,
        "architecture": contents.arch.oci(),
        "os": "linux",
        "config": {
            // Root inside the container: the capabilities the DaemonSet grants (BPF, NET_ADMIN,
            // PERFMON) apply to uid 0; nothing else is privileged.
            "User": "0",
            "Entrypoint": [format!("/{AGENT_PATH}")],
            "Cmd": ["run", "--interface", "auto"],
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
        "history": [{ "created": created, "created_by": "cargo xtask image" }],
    }))?);
    let manifest = Blob::new(serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(CONFIG_TYPE),
        "layers": [layer.descriptor(LAYER_TYPE)],
        "annotations": labels,
    }))?);
    let mut manifest_descriptor = manifest.descriptor(MANIFEST_TYPE);
    manifest_descriptor["platform"] =
        serde_json::json!({ "architecture": contents.arch.oci(), "os": "linux" });
    manifest_descriptor["annotations"] =
        serde_json::json!({ "org.opencontainers.image.ref.name": contents.version });
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [manifest_descriptor],
    }))?;

    std::fs::create_dir_all(path.parent().context("a parent directory")?)?;
    let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut archive = tar::Builder::new(file);
    let mut add =
        |name: &str, bytes: &[u8]| append(&mut archive, name, bytes, 0o644, contents.epoch);
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index)?;
    for blob in [&layer, &config, &manifest] {
        let name = format!("blobs/sha256/{}", &blob.digest["sha256:".len()..]);
        add(&name, &blob.bytes)?;
    }
    archive.into_inner()?.sync_all()?;
    Ok(())
}

/// The one layer: the agent and its license (directories first, as a root filesystem lists them).
fn layer(contents: &Contents) -> anyhow::Result<Vec<u8>> {
    let mut layer = tar::Builder::new(Vec::new());
    for dir in [
        "usr/",
        "usr/local/",
        "usr/local/bin/",
        "usr/share/",
        "usr/share/doc/",
        "usr/share/doc/hostport-dns/",
    ] {
        let mut header = header(0o755, contents.epoch, 0);
        header.set_entry_type(tar::EntryType::Directory);
        layer.append_data(&mut header, dir, std::io::empty())?;
    }
    append(
        &mut layer,
        AGENT_PATH,
        &contents.agent,
        0o755,
        contents.epoch,
    )?;
    append(
        &mut layer,
        LICENSE_PATH,
        &contents.license,
        0o644,
        contents.epoch,
    )?;
    Ok(layer.into_inner()?)
}

fn header(mode: u32, epoch: u64, size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_mode(mode);
    header.set_mtime(epoch);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(size);
    header
}

fn append<W: Write>(
    archive: &mut tar::Builder<W>,
    name: &str,
    bytes: &[u8],
    mode: u32,
    epoch: u64,
) -> std::io::Result<()> {
    let mut header = header(mode, epoch, bytes.len() as u64);
    header.set_entry_type(tar::EntryType::Regular);
    archive.append_data(&mut header, name, bytes)
}

/// Seconds since 1970 as an RFC 3339 UTC time (the OCI `created` format).
fn rfc3339(epoch: u64) -> String {
    let days = epoch / 86_400;
    let secs = epoch % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ebpf_object;

    #[test]
    fn created_times_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_220_000), "2026-12-02T14:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    /// The XDP program builds for another architecture than the agent's (the cfg aya-ebpf
    /// reads), exactly as the agent's build script builds it: a BPF object with the program.
    /// This machine's architecture is built by the agent's build script, whose object every
    /// XDP test runs.
    #[test]
    fn the_xdp_object_builds_for_the_other_architecture() {
        let root = cmd::workspace_root();
        let arch = if cfg!(target_arch = "aarch64") {
            "x86_64"
        } else {
            "aarch64"
        };
        let target_dir = root.join(format!("target/ebpf-{arch}"));
        let object = ebpf_object::build_ebpf_object(&root, &target_dir, None, arch, "little")
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        let bytes = std::fs::read(&object).expect("the object");
        // ELF, 64-bit, little-endian, machine EM_BPF (247).
        assert_eq!(&bytes[..4], b"\x7fELF", "{arch}");
        assert_eq!(
            u16::from_le_bytes([bytes[18], bytes[19]]),
            247,
            "{arch}: EM_BPF"
        );
        assert!(
            bytes.windows(16).any(|w| w == b"hostport_dns_xdp"),
            "{arch}: the object carries the program"
        );
    }
}
