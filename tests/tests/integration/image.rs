//! The container image as `cargo xtask image` writes it (an OCI archive, no base image): every
//! blob matches its digest, the configuration names the entrypoint and the OCI labels, and the
//! agent unpacked from its layer is statically linked and serves DNS.

use std::{
    collections::HashMap,
    io::Read,
    path::{Path, PathBuf},
};

use hostport_dns_tests::{
    TempDir,
    clients::{dig, udp_exchange},
    netns::NetNs,
    packet::QueryBuilder,
    require_root, workspace_root,
};
use sha2::{Digest, Sha256};

/// The archive: `HOSTPORT_DNS_IMAGE` (set by `cargo xtask test`), or the newest one in
/// target/image.
fn archive() -> PathBuf {
    if let Some(path) = std::env::var_os("HOSTPORT_DNS_IMAGE") {
        return PathBuf::from(path);
    }
    let dir = workspace_root().join("target/image");
    std::fs::read_dir(&dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".oci.tar"))
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no image in {}: run `cargo xtask image`", dir.display()))
}

/// The archive's files, by path.
fn files(archive: &Path) -> HashMap<String, Vec<u8>> {
    let file = std::fs::File::open(archive).expect("the archive");
    let mut tar = tar::Archive::new(file);
    tar.entries()
        .expect("a tar archive")
        .map(|entry| {
            let mut entry = entry.expect("an entry");
            let path = entry.path().expect("a path").to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).expect("the entry's bytes");
            (path, bytes)
        })
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The blob a descriptor names, checked against its digest and size.
fn blob<'a>(files: &'a HashMap<String, Vec<u8>>, descriptor: &serde_json::Value) -> &'a [u8] {
    let digest = descriptor["digest"].as_str().expect("a digest");
    let path = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let bytes = files.get(&path).unwrap_or_else(|| panic!("no blob {path}"));
    assert_eq!(sha256(bytes), digest, "{path}: its digest");
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(bytes.len() as u64),
        "{path}: its size"
    );
    bytes
}

/// Whether an ELF file asks for a program interpreter (PT_INTERP): a dynamically linked one.
fn has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u64_at =
        |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().expect("8 bytes")) as usize;
    assert_eq!(&elf[..4], b"\x7fELF");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) == 3
    })
}

#[test]
fn the_image_is_a_valid_oci_archive_whose_agent_serves_dns() {
    require_root();
    let files = files(&archive());
    let layout: serde_json::Value =
        serde_json::from_slice(&files["oci-layout"]).expect("oci-layout");
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).expect("index");
    let manifest: serde_json::Value =
        serde_json::from_slice(blob(&files, &index["manifests"][0])).expect("the manifest");
    assert_eq!(index["manifests"][0]["platform"]["os"], "linux");
    let config: serde_json::Value =
        serde_json::from_slice(blob(&files, &manifest["config"])).expect("the configuration");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/hostport-dns"])
    );
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.title"], "hostport-dns");
    assert_eq!(
        labels["org.opencontainers.image.version"].as_str(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    for label in ["revision", "source", "created"] {
        let value = labels[format!("org.opencontainers.image.{label}")].as_str();
        assert!(value.is_some_and(|v| !v.is_empty()), "label {label}");
    }

    // One layer, whose digest before compression is the configuration's diff_id.
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1);
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(blob(&files, &layers[0]))
        .read_to_end(&mut tar_bytes)
        .expect("a gzip layer");
    assert_eq!(
        config["rootfs"]["diff_ids"][0].as_str(),
        Some(sha256(&tar_bytes).as_str())
    );
    let root = TempDir::new("image");
    tar::Archive::new(tar_bytes.as_slice())
        .unpack(&root.path)
        .expect("unpack the layer");
    let license = std::fs::read_to_string(root.path.join("usr/share/doc/hostport-dns/LICENSE"))
        .expect("the license in the image");
    assert!(license.contains("Apache License"));
    let agent = root.path.join("usr/local/bin/hostport-dns");
    assert!(
        !has_interpreter(&std::fs::read(&agent).expect("the agent")),
        "the agent is statically linked (the image has no libc)"
    );

    // The agent from the image serves its embedded example, XDP included.
    let ns = NetNs::new("image");
    let mut child = ns
        .command(agent.to_str().expect("UTF-8"))
        .args([
            "run",
            "--interface",
            "lo",
            "--xdp-mode",
            "generic",
            "--port",
            "1053",
        ])
        .args(["--metrics-listen", "127.0.0.1:9354"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run the agent from the image");
    let name = "default-nginx.ingress.demo.hostport.example";
    let server: std::net::SocketAddr = "127.0.0.1:1053".parse().expect("an address");
    let serving = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        udp_exchange(&ns, server, QueryBuilder::new(name, 1).bytes()).is_some()
    });
    let answer = serving.then(|| dig(&ns, "127.0.0.1", 1053, &[name]));
    let _ = child.kill();
    let _ = child.wait();
    let answer = answer.expect("the agent from the image answers");
    assert_eq!(answer.status, "NOERROR");
    assert!(!answer.answer.is_empty(), "{answer:?}");
}
