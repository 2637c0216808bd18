//! The agent binary run as a child process (inside a namespace), with its logs kept for failure
//! messages and its metrics read over HTTP.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use crate::netns::{Link, NetNs};

/// How long an agent may take to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Where agents in test namespaces serve metrics (each namespace has its own loopback).
pub const METRICS_ADDR: &str = "127.0.0.1:9354";

/// The agent binary: `HOSTPORT_DNS_BIN`, or the agent built in the same build tree as this
/// binary (`target/<triple>/release/` under `cargo xtask test`, `target/release/` under a plain
/// `cargo test --release`), where test binaries sit in `deps/` and drivers beside the agent.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("HOSTPORT_DNS_BIN") {
        return PathBuf::from(path);
    }
    let tree = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let dir = exe.parent()?;
            let tree = if dir.ends_with("deps") {
                dir.parent()?
            } else {
                dir
            };
            Some(tree.to_path_buf())
        })
        .unwrap_or_else(|| crate::workspace_root().join("target/release"));
    let path = tree.join("hostport-dns");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo xtask test`",
        path.display()
    );
    path
}

/// A running agent, killed on drop.
pub struct Agent {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    netns: Option<String>,
    /// Where it serves metrics and health.
    metrics_addr: String,
}

impl Agent {
    /// Starts `hostport-dns run <args>` in `ns` and waits until it serves.
    pub fn start(ns: &NetNs, args: &[&str]) -> Self {
        Self::start_with_metrics(ns, METRICS_ADDR, args)
    }

    /// Starts `hostport-dns run <args>` in `ns`, serving metrics on `metrics_addr` (several
    /// agents in one namespace), and waits until it serves.
    pub fn start_with_metrics(ns: &NetNs, metrics_addr: &str, args: &[&str]) -> Self {
        let mut cmd = ns.command(binary().to_str().expect("a UTF-8 path"));
        cmd.args([
            "run",
            "--log-format",
            "json",
            "--metrics-listen",
            metrics_addr,
        ])
        .args(args);
        Self::spawn(cmd, Some(ns.name.clone()), metrics_addr)
    }

    /// Starts `hostport-dns run <args>` in `ns` through `wrapper` (a program that execs the rest
    /// of its arguments, such as `setpriv` with its options) with `env` added, and waits until it
    /// serves.
    pub fn start_wrapped(
        ns: &NetNs,
        wrapper: &[&str],
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Self {
        let (program, options) = wrapper.split_first().expect("a wrapper program");
        let mut cmd = ns.command(program);
        cmd.args(options)
            .arg(binary())
            .args([
                "run",
                "--log-format",
                "json",
                "--metrics-listen",
                METRICS_ADDR,
            ])
            .args(args)
            .envs(env.iter().copied());
        Self::spawn(cmd, Some(ns.name.clone()), METRICS_ADDR)
    }

    /// Starts the agent in `ns` with the configuration file `config`, XDP in generic mode on
    /// `lo`, and `extra` arguments.
    pub fn start_on_lo(ns: &NetNs, config: &Path, extra: &[&str]) -> Self {
        let mut args = on_lo(config);
        args.extend_from_slice(extra);
        Self::start(ns, &args)
    }

    /// Starts the agent on the server side of `link`, XDP in native mode on its interface, with
    /// its source (`--records FILE` or `--config FILE`) and `extra` arguments.
    pub fn start_native(link: &Link, source: &[&str], extra: &[&str]) -> Self {
        let mut args = source.to_vec();
        args.extend_from_slice(&["--interface", &link.server.ifname, "--xdp-mode", "native"]);
        args.extend_from_slice(extra);
        Self::start(&link.server_ns, &args)
    }

    /// Starts the agent in `ns` as a pod would find itself: the service-account files of
    /// `service_account` (token, ca.crt, namespace) at `/var/run/secrets/kubernetes.io/
    /// serviceaccount`, `KUBERNETES_SERVICE_HOST` and `_PORT` naming `api`, and no kubeconfig.
    /// The files are mounted in a mount namespace of the agent's own, over a fresh `/run`, so
    /// nothing on the host changes. Configuration file and XDP as for [`Agent::start_on_lo`].
    pub fn start_in_cluster(
        ns: &NetNs,
        service_account: &Path,
        api: std::net::SocketAddr,
        config: &Path,
    ) -> Self {
        let mut args: Vec<String> = ["run", "--log-format", "json", "--metrics-listen"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.push(METRICS_ADDR.into());
        args.extend(on_lo(config).into_iter().map(str::to_owned));
        Self::start_in_pod(ns, service_account, api, &args)
    }

    /// The agent as a pod runs it: the service-account files mounted as for
    /// [`Agent::start_in_cluster`], KUBERNETES_SERVICE_HOST/PORT pointing at `service`, and
    /// `args` as the container's (the subcommand included).
    pub fn start_in_pod(
        ns: &NetNs,
        service_account: &Path,
        service: std::net::SocketAddr,
        args: &[String],
    ) -> Self {
        let home = service_account.join("home");
        std::fs::create_dir_all(&home).expect("create an empty HOME");
        let mut cmd = ns.command("unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-ec",
            "mount -t tmpfs hpd-sa /run
             mkdir -p /run/secrets/kubernetes.io/serviceaccount
             cp \"$0\"/token \"$0\"/ca.crt \"$0\"/namespace /run/secrets/kubernetes.io/serviceaccount/
             exec \"$@\"",
            service_account.to_str().expect("a UTF-8 path"),
            binary().to_str().expect("a UTF-8 path"),
        ])
        .args(args)
        .env("KUBERNETES_SERVICE_HOST", service.ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", service.port().to_string())
        .env("HOME", &home)
        .env_remove("KUBECONFIG");
        Self::spawn(cmd, Some(ns.name.clone()), METRICS_ADDR)
    }

    /// Starts `hostport-dns run <args>` in `ns` inside `cgroup` (a pod's memory limit), and
    /// waits until it serves.
    pub fn start_in_cgroup(ns: &NetNs, cgroup: &crate::cgroup::Cgroup, args: &[&str]) -> Self {
        let mut cmd = cgroup.command("ip");
        cmd.args(["netns", "exec", &ns.name])
            .arg(binary())
            .args([
                "run",
                "--log-format",
                "json",
                "--metrics-listen",
                METRICS_ADDR,
            ])
            .args(args);
        Self::spawn(cmd, Some(ns.name.clone()), METRICS_ADDR)
    }

    /// Starts the agent on the server side of `link` as [`Agent::start_native`] does, but waits
    /// only until it logs `line` (an agent that waits for another to stop, say).
    pub fn start_native_until(link: &Link, source: &[&str], extra: &[&str], line: &str) -> Self {
        let mut args = vec![
            "run",
            "--log-format",
            "json",
            "--metrics-listen",
            METRICS_ADDR,
        ];
        args.extend_from_slice(source);
        args.extend_from_slice(&["--interface", &link.server.ifname, "--xdp-mode", "native"]);
        args.extend_from_slice(extra);
        let mut cmd = link
            .server_ns
            .command(binary().to_str().expect("a UTF-8 path"));
        cmd.args(&args);
        Self::spawn_until(cmd, Some(link.server_ns.name.clone()), METRICS_ADDR, line)
    }

    fn spawn(cmd: Command, netns: Option<String>, metrics_addr: &str) -> Self {
        Self::spawn_until(cmd, netns, metrics_addr, "hostport-dns is serving")
    }

    fn spawn_until(
        mut cmd: Command,
        netns: Option<String>,
        metrics_addr: &str,
        line: &str,
    ) -> Self {
        let line = line.to_owned();
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let kept = logs.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stderr).lines().map_while(Result::ok) {
                if text.contains(&line) {
                    let _ = ready_tx.send(());
                }
                if let Ok(mut logs) = kept.lock() {
                    logs.push(text);
                }
            }
        });
        let mut agent = Self {
            child,
            logs,
            netns,
            metrics_addr: metrics_addr.to_owned(),
        };
        if ready_rx.recv_timeout(START_TIMEOUT).is_err() {
            let status = agent.child.try_wait().ok().flatten();
            panic!(
                "the agent did not start (exit: {status:?}); its log:\n{}",
                agent.logs()
            );
        }
        agent
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the agent logged so far.
    pub fn logs(&self) -> String {
        self.logs.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// The agent's /metrics text.
    pub fn metrics(&self) -> String {
        self.http_get("/metrics").1
    }

    /// GET `path` on the agent's health and metrics endpoint: (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        let path = path.to_owned();
        let addr = self.metrics_addr.clone();
        let get = move || http_get(&addr, &path);
        match &self.netns {
            Some(name) => NetNs::enter(name, get),
            None => get(),
        }
    }

    /// The sum of a metric's samples whose labels include every `labels` pair.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics(), name, labels)
    }

    /// Sends SIGTERM and waits for the agent to exit; returns its exit code.
    pub fn stop(mut self) -> Option<i32> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// Waits for the agent to exit (after a signal sent with [`Agent::signal`]: a second
    /// SIGTERM would cut its stop short); its exit status.
    pub fn wait(mut self) -> Option<i32> {
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// Sends a signal to the agent.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}

/// Arguments for the configuration file `config`, XDP in generic mode on `lo`.
fn on_lo(config: &Path) -> Vec<&str> {
    vec![
        "--config",
        config.to_str().expect("a UTF-8 path"),
        "--interface",
        "lo",
        "--xdp-mode",
        "generic",
    ]
}

/// The arguments that serve the record file `records` with XDP in generic mode on lo.
pub fn records_on_lo(records: &Path) -> Vec<&str> {
    vec![
        "--records",
        records.to_str().expect("a UTF-8 path"),
        "--interface",
        "lo",
        "--xdp-mode",
        "generic",
    ]
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NetNs {
    /// Runs `f` on a thread inside the namespace called `name`.
    pub fn enter<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        NetNs::borrowed(name).run(f)
    }
}

/// A plain HTTP/1.0 GET: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Sums the samples of `name` (a counter's `_total` included) whose labels contain `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    // A family that is not there, or a label it does not have, is a test gone stale (a renamed
    // metric or label), not a zero.
    // A histogram's or summary's series (`_count`, `_sum`, `_bucket`) belong to its family.
    let family = ["_count", "_sum", "_bucket"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    let declared = text.lines().any(|l| {
        let declared = l.strip_prefix("# TYPE ").and_then(|t| t.split(' ').next());
        // A counter's family is declared under its `_total` name in the classic format.
        declared == Some(name)
            || declared == Some(family)
            || declared == Some(format!("{name}_total").as_str())
    });
    assert!(
        declared,
        "no metric family {name} in the exposition:\n{text}"
    );
    let series: Vec<(Vec<(&str, &str)>, f64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name && metric != format!("{name}_total") {
                return None;
            }
            let pairs = label_text
                .split(',')
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k, v.trim_matches('"')))
                })
                .collect();
            Some((pairs, value.parse::<f64>().ok()?))
        })
        .collect();
    for (key, _) in labels {
        assert!(
            series.is_empty()
                || series
                    .iter()
                    .any(|(pairs, _)| pairs.iter().any(|(k, _)| k == key)),
            "metric family {name} has no label {key}:\n{text}"
        );
    }
    series
        .iter()
        .filter(|(pairs, _)| labels.iter().all(|l| pairs.contains(l)))
        .map(|(_, value)| value)
        .sum()
}
