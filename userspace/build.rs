//! Builds the XDP program (the `hostport-dns-ebpf` crate) for bpfel-unknown-none with the nightly
//! toolchain and bpf-linker; the agent embeds the object file. `cargo xtask setup` installs both.
fn main() -> anyhow::Result<()> {
    let package = aya_build::Package {
        name: "hostport-dns-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf"),
        no_default_features: false,
        features: &[],
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
}
