//! A memory cgroup of the test's own (v1 or v2, whichever the host mounts), removed on drop:
//! what a pod's memory limit is, and what the kernel charges to it (BPF map memory included).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The hierarchy's root: cgroup v1's memory controller, or the v2 unified tree.
fn root() -> (PathBuf, bool) {
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.usage_in_bytes").exists() {
        (v1.to_path_buf(), false)
    } else {
        (PathBuf::from("/sys/fs/cgroup"), true)
    }
}

pub struct Cgroup {
    path: PathBuf,
    v2: bool,
}

impl Cgroup {
    /// A new memory cgroup, limited to `limit` bytes if given.
    pub fn new(tag: &str, limit: Option<u64>) -> Self {
        let (root, v2) = root();
        let path = root.join(format!("hpd-{tag}-{}", crate::netns::unique_suffix()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cgroup = Self { path, v2 };
        if let Some(limit) = limit {
            let file = if v2 {
                "memory.max"
            } else {
                "memory.limit_in_bytes"
            };
            cgroup.write(file, &limit.to_string());
        }
        cgroup
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.path.join(file), value)
            .unwrap_or_else(|e| panic!("{}/{file}: {e}", self.path.display()));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }

    /// `program args...` started inside the cgroup (the shell puts itself in, then execs).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo $$ > \"$0/cgroup.procs\" && exec \"$@\"",
            self.path.to_str().expect("a UTF-8 path"),
            program,
        ]);
        cmd
    }

    /// Bytes charged to the cgroup now.
    pub fn usage(&self) -> u64 {
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// The most memory the cgroup has held since it was made (memory.peak, cgroup v2 on Linux
    /// 5.19 and later; max_usage_in_bytes on v1); 0 where the kernel does not say.
    pub fn peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// Bytes of kernel memory charged (slab, vmalloc: BPF maps among them).
    pub fn kernel(&self) -> u64 {
        if self.v2 {
            self.stat("kernel")
        } else {
            self.read("memory.kmem.usage_in_bytes")
                .trim()
                .parse()
                .unwrap_or(0)
        }
    }

    /// A counter of `memory.stat`.
    pub fn stat(&self, key: &str) -> u64 {
        self.read("memory.stat")
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// How many processes the kernel killed for running out of this cgroup's memory.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        self.read(file)
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have ended (killed by their owners); the directory may linger a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
