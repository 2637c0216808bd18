//! CPU accounting and placement: what a responder costs, separated from the generator.

use std::{fs, process::Command, time::Duration};

/// Clock ticks per second of /proc/<pid>/stat times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// CPU seconds (user + system) a thread or process has used.
pub fn cpu_seconds(path: &str) -> f64 {
    let Ok(stat) = fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    (utime + stime) / ticks_per_second()
}

/// CPU seconds of every thread of a process.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// The NAPI kernel threads of an interface (threaded NAPI must be on). Their names are
/// "napi/<ifname>-<id>", cut to 15 characters.
pub fn napi_threads(ifname: &str) -> Vec<u32> {
    let prefix: String = format!("napi/{ifname}-").chars().take(15).collect();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end().starts_with(&prefix))
        })
        .collect()
}

/// Pins every thread of `pid` to `cpu`.
pub fn pin(pid: u32, cpu: usize) {
    let _ = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .output();
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity take valid pointers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Sums CPU seconds over a set of pids.
pub fn total_cpu(pids: &[u32]) -> f64 {
    pids.iter().map(|p| process_cpu_seconds(*p)).sum()
}

/// Busy (non-idle) seconds of one CPU since boot, from /proc/stat: everything that ran there,
/// softirq work included.
pub fn cpu_busy_seconds(cpu: usize) -> f64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let prefix = format!("cpu{cpu} ");
    let Some(line) = stat.lines().find(|l| l.starts_with(&prefix)) else {
        return 0.0;
    };
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: f64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0.0) + fields.get(4).copied().unwrap_or(0.0);
    (total - idle) / ticks_per_second()
}

/// Turns on GRO and threaded NAPI for an interface inside a namespace, so that its receive
/// work runs in a kernel thread that can be pinned (and measured).
pub fn threaded_napi(ns: &crate::netns::NetNs, ifname: &str) {
    let _ = ns
        .command("ethtool")
        .args(["-K", ifname, "gro", "on"])
        .output();
    let _ = ns
        .command("sh")
        .args(["-c", &format!("echo 1 > /sys/class/net/{ifname}/threaded")])
        .output();
}

/// The id of the XDP program attached to an interface inside a namespace, from `ip -d link`
/// ("prog/xdp id N", in any mode).
pub fn xdp_program_id(ns: &crate::netns::NetNs, ifname: &str) -> Option<u32> {
    let out = ns
        .command("ip")
        .args(["-d", "link", "show", "dev", ifname])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word.starts_with("prog/xdp") && words.next() == Some("id") {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// What the kernel's BPF statistics account to a program so far: run time and run count. Zero
/// unless statistics are on (see [`ProgramStats`]).
pub fn program_run_stats(id: u32) -> Option<(Duration, u64)> {
    aya::programs::loaded_programs()
        .flatten()
        .find(|info| info.id() == id)
        .map(|info| (info.run_time(), info.run_count()))
}

/// The kernel's BPF run-time statistics (BPF_ENABLE_STATS) while this lives: each program's
/// own time, without the driver around it. The clock reads around each run add a few tens of
/// nanoseconds (a program that only reflects shows them).
pub struct ProgramStats {
    _enabled: std::os::fd::OwnedFd,
}

impl ProgramStats {
    pub fn enable() -> Self {
        Self {
            _enabled: aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF_ENABLE_STATS"),
        }
    }
}

/// Resident memory of a process, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// A process's memory, in MiB: anonymous (its heap and stacks) and all resident (mapped files
/// and shared memory, BPF maps it maps among them, included).
pub struct Memory {
    pub anon: f64,
    pub rss: f64,
}

pub fn memory_mib(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    Memory {
        anon: field("RssAnon:"),
        rss: field("VmRSS:"),
    }
}

/// The CPU, its SRSO state and the kernel, for a benchmark's title: figures compare only
/// within one run, on one machine, and some machines of this kind carry the SRSO mitigation
/// (every call and return mispredicted) while others do not.
pub fn cpu_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "an unknown CPU".into());
    let srso =
        std::fs::read_to_string("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow")
            .map_or_else(|_| "not reported".into(), |s| s.trim().to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "?".into(), |s| s.trim().to_owned());
    format!("{model}, SRSO: {srso}, kernel {kernel}")
}
