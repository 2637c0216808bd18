//! The hostport-dns test bed: network namespaces joined by veth pairs (addresses in
//! 198.18.0.0/15 and 2001:db8::/32, inside namespaces the test creates), processes run inside
//! them, packets built and checked byte by byte, real DNS clients (dig, kdig) and peers (Knot).
//! Everything a test creates is removed when its guard drops, also when the test panics.

pub mod agent;
pub mod api_tls;
pub mod bench;
pub mod bind_primary;
pub mod book;
pub mod cgroup;
pub mod clients;
pub mod fake_api;
pub mod fuzz;
pub mod haproxy;
pub mod k8s;
pub mod knot;
pub mod legacy;
pub mod netns;
pub mod packet;
pub mod prometheus;
pub mod raw;
pub mod secondary;
pub mod vectors;
pub mod xdp;

use std::path::PathBuf;

/// Panics unless running as root: the tests that create namespaces or load XDP programs must
/// fail loudly, never skip, where they cannot run.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "this test needs root (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON): run `cargo xtask test` as root"
        );
    }
}

/// A small, fast, seedable generator (xorshift64*): randomised tests and campaigns repeat from
/// their seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for `n` 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index below `len` (0 for an empty range).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

/// Polls `check` until it holds, panicking with `what` after `seconds`.
pub fn eventually(what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while std::time::Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("timed out after {seconds} s waiting for {what}");
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    // `cargo test` sets CARGO_MANIFEST_DIR when it runs a test, so the checkout it runs in wins
    // over the one the binary was compiled in (a copy made with `cp -a` keeps its binaries).
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("..")
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!("hpd-{tag}-{}", netns::unique_suffix()));
        // create_dir, not create_dir_all: a directory that exists already belongs to another run,
        // which would delete it under this one.
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("create the temporary directory {}: {e}", path.display()));
        Self { path }
    }

    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, content).expect("write a temporary file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A private bpffs mount for pinning (the host's /sys/fs/bpf is hidden inside `ip netns exec`,
/// which remounts /sys). Unmounted on drop, which also drops whatever is still pinned there.
pub struct BpfFs {
    dir: TempDir,
}

impl BpfFs {
    pub fn mount() -> Self {
        let dir = TempDir::new("bpffs");
        netns::sh(
            std::process::Command::new("mount")
                .args(["-t", "bpf", "bpf"])
                .arg(&dir.path),
        );
        Self { dir }
    }

    /// A pin directory inside the mount.
    pub fn pin_dir(&self) -> PathBuf {
        self.dir.path.join("hostport-dns")
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.dir.path)
            .status();
    }
}
