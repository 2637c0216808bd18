//! The eBPF object depends on the `bpf-linker` binary, which cargo does not track: rebuild when
//! it changes (for example after `cargo xtask setup` rebuilt it for a new LLVM).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
