//! Load generators: kxdpgun (AF_XDP, one core) and dnsperf, run from the client namespace.

use std::path::Path;

use crate::netns::{NetNs, sh};

/// What a generator reported.
#[derive(Clone, Copy, Debug, Default)]
pub struct Load {
    pub sent: u64,
    pub answered: u64,
    pub seconds: f64,
}

impl Load {
    pub fn answered_per_second(&self) -> f64 {
        self.answered as f64 / self.seconds.max(1e-9)
    }

    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            1.0 - self.answered as f64 / self.sent as f64
        }
    }
}

/// kxdpgun at `qps` for `seconds`, pinned to `cpu`, through `ifname` to `server:port`.
#[allow(clippy::too_many_arguments)]
pub fn kxdpgun(
    ns: &NetNs,
    ifname: &str,
    server: &str,
    port: u16,
    queries: &Path,
    qps: u64,
    seconds: u64,
    cpu: usize,
) -> Load {
    kxdpgun_from(ns, ifname, server, port, queries, qps, seconds, cpu, None)
}

/// [`kxdpgun`] with its source addresses spread over `sources` (a prefix: spoofed sources). A
/// run that cannot be made (see [`try_kxdpgun_from`]) is reported on stderr and counts nothing.
#[allow(clippy::too_many_arguments)]
pub fn kxdpgun_from(
    ns: &NetNs,
    ifname: &str,
    server: &str,
    port: u16,
    queries: &Path,
    qps: u64,
    seconds: u64,
    cpu: usize,
    sources: Option<&str>,
) -> Load {
    try_kxdpgun_from(
        ns, ifname, server, port, queries, qps, seconds, cpu, sources,
    )
    .unwrap_or_else(|reason| {
        eprintln!("kxdpgun: {reason}");
        Load {
            seconds: seconds as f64,
            ..Load::default()
        }
    })
}

/// [`kxdpgun_from`], or why it measured nothing: kxdpgun failed (its AF_XDP socket refused on
/// this kernel or interface), or no answer came back to it.
#[allow(clippy::too_many_arguments)]
pub fn try_kxdpgun_from(
    ns: &NetNs,
    ifname: &str,
    server: &str,
    port: u16,
    queries: &Path,
    qps: u64,
    seconds: u64,
    cpu: usize,
    sources: Option<&str>,
) -> Result<Load, String> {
    let mut cmd = ns.command("kxdpgun");
    if let Some(sources) = sources {
        cmd.args(["-l", sources]);
    }
    let out = cmd
        .args([
            "-t",
            &seconds.to_string(),
            "-Q",
            &qps.to_string(),
            "-F",
            &cpu.to_string(),
            "-I",
            ifname,
            "-p",
            &port.to_string(),
            "-i",
            queries.to_str().expect("UTF-8"),
            server,
        ])
        .output()
        .map_err(|e| format!("cannot run kxdpgun: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let said = || last_lines(&String::from_utf8_lossy(&out.stderr), &text);
    if !out.status.success() {
        return Err(format!("kxdpgun failed ({}): {}", out.status, said()));
    }
    let number_after = |label: &str| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let load = Load {
        sent: number_after("total queries:"),
        answered: number_after("total replies:"),
        seconds: seconds as f64,
    };
    match (load.sent, load.answered) {
        (0, _) => Err(format!("kxdpgun sent nothing: {}", said())),
        (sent, 0) => Err(format!(
            "kxdpgun sent {sent} queries and received no reply on its AF_XDP socket: {}",
            said()
        )),
        _ => Ok(load),
    }
}

/// The last few lines a tool wrote (stderr first), on one line, for a report.
fn last_lines(stderr: &str, stdout: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    if tail.is_empty() {
        "(it said nothing)".into()
    } else {
        tail.join(" / ")
    }
}

/// dnsperf over `mode` ("udp" or "tcp") with `clients` concurrent clients, for `seconds`.
pub fn dnsperf(
    ns: &NetNs,
    server: &str,
    port: u16,
    queries: &Path,
    mode: &str,
    clients: u32,
    seconds: u64,
) -> Load {
    dnsperf_with(
        ns,
        server,
        port,
        queries,
        (mode, clients),
        seconds,
        &[],
        None,
    )
}

/// [`dnsperf`] over UDP with `clients` clients, pinned to `cpu`: the load for kernel paths where
/// kxdpgun cannot run (its AF_XDP program fails the verifier of kernel 6.18).
pub fn dnsperf_on_cpu(
    ns: &NetNs,
    server: &str,
    port: u16,
    queries: &Path,
    clients: u32,
    seconds: u64,
    cpu: usize,
) -> Load {
    let cpu = cpu.to_string();
    dnsperf_with(
        ns,
        server,
        port,
        queries,
        ("udp", clients),
        seconds,
        &[],
        Some(&cpu),
    )
}

/// [`dnsperf`] with EDNS (`-e`: dnsperf offers 4096 bytes), as load balancers ask for big
/// answers.
pub fn dnsperf_edns(ns: &NetNs, server: &str, port: u16, queries: &Path, seconds: u64) -> Load {
    dnsperf_with(
        ns,
        server,
        port,
        queries,
        ("udp", 1),
        seconds,
        &["-e"],
        None,
    )
}

#[allow(clippy::too_many_arguments)]
fn dnsperf_with(
    ns: &NetNs,
    server: &str,
    port: u16,
    queries: &Path,
    (mode, clients): (&str, u32),
    seconds: u64,
    extra: &[&str],
    cpu: Option<&str>,
) -> Load {
    let mut command = match cpu {
        Some(cpu) => {
            let mut pinned = ns.command("taskset");
            pinned.args(["-c", cpu, "dnsperf"]);
            pinned
        }
        None => ns.command("dnsperf"),
    };
    let out = sh(command.args(extra).args([
        "-s",
        server,
        "-p",
        &port.to_string(),
        "-d",
        queries.to_str().expect("UTF-8"),
        "-m",
        mode,
        "-c",
        &clients.to_string(),
        "-T",
        "1",
        "-l",
        &seconds.to_string(),
        "-q",
        "1000",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let number_after = |label: &str| -> f64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    Load {
        sent: number_after("Queries sent:") as u64,
        answered: number_after("Queries completed:") as u64,
        seconds: number_after("Run time (s):").max(1e-9),
    }
}
