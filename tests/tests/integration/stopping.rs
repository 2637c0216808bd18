//! A stop is bounded: SIGTERM ends the agent, with status 0, within a few seconds whatever it is
//! doing (the first fill of a big record file, a publication, a zone transfer to a client that
//! does not read, open TCP connections, a scrape that never finishes), so a rolling update never
//! holds a node's DNS for the pod's whole grace period. The bound asserted is generous (machines
//! are noisy); the agent's own hard deadline is `stop::DEADLINE`.
//!
//! Every agent here serves XDP in generic mode on the loopback of a namespace of its own, as the
//! flow that once lost its first SIGTERM did.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::Path,
    process::{Child, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hostport_dns_tests::{
    BpfFs, TempDir,
    agent::{binary, http_get},
    clients::dig,
    netns::{NetNs, sh},
    require_root,
};

/// How long a stop may take here: the agent's own deadline is 9 s.
const STOP_BOUND: Duration = Duration::from_secs(12);
/// How long an agent may take to start serving (a 100k-name file on a loaded machine).
const START_BOUND: Duration = Duration::from_secs(60);
const ZONE: &str = "big.stop.example";
const METRICS: &str = "127.0.0.1:9354";

/// A record file of `names` names (`host-N.big.stop.example`, one address each).
fn big_records(
    dir: &TempDir,
    file: &str,
    names: u32,
    last_octet_offset: u32,
) -> std::path::PathBuf {
    let mut text = format!("zones:\n  - name: {ZONE}\n    records:\n");
    for i in 0..names {
        let n = i + last_octet_offset;
        text.push_str(&format!(
            "      host-{i}: 198.18.{}.{}\n",
            (n >> 8) & 255,
            n & 255
        ));
    }
    dir.write(file, &text)
}

/// The agent as a child process: its log kept, killed on drop (a test that fails leaves nothing).
struct Running {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Running {
    /// `hostport-dns run` with `args`, XDP in generic mode on the namespace's lo; returns at once.
    fn spawn(ns: &NetNs, args: &[&str]) -> Self {
        Self::spawn_with_env(ns, args, &[])
    }

    /// As [`Running::spawn`], with `env` added to the agent's environment.
    fn spawn_with_env(ns: &NetNs, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = ns.command(binary().to_str().expect("a UTF-8 path"));
        cmd.args(["run", "--log-format", "json", "--metrics-listen", METRICS])
            .args(["--interface", "lo", "--xdp-mode", "generic"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let kept = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut logs) = kept.lock() {
                    logs.push(line);
                }
            }
        });
        Self {
            child,
            logs,
            started,
        }
    }

    /// Starts the agent and waits until it serves.
    fn serving(ns: &NetNs, args: &[&str]) -> Self {
        let agent = Self::spawn(ns, args);
        agent.wait_for_line("hostport-dns is serving", START_BOUND);
        agent
    }

    fn logs(&self) -> String {
        self.logs.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    fn wait_for_line(&self, line: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.logs().contains(line) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the agent never logged {line:?}; its log:\n{}", self.logs());
    }

    fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Sends SIGTERM, and asserts the agent exits with status 0 within [`STOP_BOUND`].
    fn stops_cleanly(mut self, phase: &str) {
        self.signal(libc::SIGTERM);
        let asked = Instant::now();
        let status = self.exit_within(STOP_BOUND);
        match status {
            Some(status) => assert!(
                status.success(),
                "{phase}: the agent stopped with {status} after {:?}; its log:\n{}",
                asked.elapsed(),
                self.logs()
            ),
            None => panic!(
                "{phase}: the agent was still running {STOP_BOUND:?} after SIGTERM ({:?} after its start); its log:\n{}",
                asked.duration_since(self.started),
                self.logs()
            ),
        }
        eprintln!("{phase}: stopped {:?} after SIGTERM", asked.elapsed());
    }

    fn exit_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP connection to the agent's port `port`, made inside `ns`.
fn connect(ns: &NetNs, port: u16) -> TcpStream {
    ns.run(move || {
        TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .unwrap_or_else(|e| panic!("connect to port {port}: {e}"))
    })
}

/// A DNS query over TCP (length in front) for `name`, of type `qtype`.
fn tcp_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut message = Vec::new();
    message.extend_from_slice(&id.to_be_bytes());
    message.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        message.push(label.len() as u8);
        message.extend_from_slice(label.as_bytes());
    }
    message.push(0);
    message.extend_from_slice(&qtype.to_be_bytes());
    message.extend_from_slice(&1u16.to_be_bytes());
    let mut framed = (message.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&message);
    framed
}

/// A few queries (XDP answers them) and a scrape, as the flow that lost its SIGTERM made.
fn queries_and_a_scrape(ns: &NetNs) {
    for i in [1, 2, 3] {
        dig(ns, "127.0.0.1", 1053, &[&format!("host-{i}.{ZONE}"), "A"]);
    }
    let (status, body) = NetNs::enter(&ns.name, || http_get(METRICS, "/metrics"));
    assert_eq!(status, 200, "{body}");
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// The flow of the report: a record file of 30k or 100k names, a few queries and a scrape, then
/// SIGTERM 20 s after the start; it lost its first SIGTERM 3 times out of 6, so it runs 6 times:
/// three rounds of a 30k and a 100k agent side by side, each in its own namespace (the 20 s are
/// waiting; side by side they take one round's).
#[test]
fn sigterm_20_s_after_start_with_a_big_record_file_stops_every_time() {
    require_root();
    let dir = TempDir::new("stop-flow");
    let small = big_records(&dir, "30k.yaml", 30_000, 0);
    let large = big_records(&dir, "100k.yaml", 100_000, 0);
    for round in 0..3 {
        std::thread::scope(|scope| {
            for (attempt, records) in [(2 * round, &small), (2 * round + 1, &large)] {
                scope.spawn(move || sigterm_20_s_after_start(attempt, records));
            }
        });
    }
}

fn sigterm_20_s_after_start(attempt: u32, records: &Path) {
    let ns = NetNs::new("stopflow");
    let agent = Running::serving(&ns, &["--records", path_str(records)]);
    queries_and_a_scrape(&ns);
    let at = agent.started + Duration::from_secs(20);
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
    agent.stops_cleanly(&format!("attempt {attempt} ({})", path_str(records)));
}

/// SIGTERM while the agent reads, compiles and writes a 100k-name record file for the first
/// time, at several moments from just after its start until it serves.
#[test]
fn sigterm_during_the_first_fill_stops() {
    require_root();
    let dir = TempDir::new("stop-fill");
    let records = big_records(&dir, "100k.yaml", 100_000, 0);
    for after_ms in [50, 300, 800, 1500, 2500] {
        let ns = NetNs::new("stopfill");
        let agent = Running::spawn(&ns, &["--records", path_str(&records)]);
        std::thread::sleep(Duration::from_millis(after_ms));
        agent.stops_cleanly(&format!("{after_ms} ms after the start"));
    }
}

/// SIGTERM while a reloaded 100k-name record file is being published (compiled, written into
/// the kernel table, switched).
#[test]
fn sigterm_during_a_publication_stops() {
    require_root();
    for after_ms in [0, 200, 600, 1200] {
        let dir = TempDir::new("stop-publish");
        let records = big_records(&dir, "records.yaml", 1_000, 0);
        let ns = NetNs::new("stoppub");
        let agent = Running::serving(&ns, &["--records", path_str(&records)]);
        // Written beside and renamed: the agent sees the whole new file at once.
        let next = big_records(&dir, "next.yaml", 100_000, 7);
        std::fs::rename(&next, &records).expect("replace the record file");
        // SIGHUP reloads at once.
        agent.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(after_ms));
        agent.stops_cleanly(&format!("{after_ms} ms into a publication"));
    }
}

/// SIGTERM while an AXFR of 100k names is streamed to a client that asked and reads nothing
/// (the transfer's maker waits on a full queue, the connection on a full socket).
#[test]
fn sigterm_during_a_transfer_to_a_client_that_does_not_read_stops() {
    require_root();
    let dir = TempDir::new("stop-xfr");
    let records = big_records(&dir, "100k.yaml", 100_000, 0);
    let config = dir.write(
        "config.yaml",
        "zones:\n  - name: small.stop.example\n    records:\n      a: 198.18.9.1\n\
         transfer:\n  allow:\n    - from: 127.0.0.1\n",
    );
    let ns = NetNs::new("stopxfr");
    let agent = Running::serving(
        &ns,
        &[
            "--config",
            path_str(&config),
            "--records",
            path_str(&records),
        ],
    );
    let mut slow = connect(&ns, 1053);
    slow.write_all(&tcp_query(1, ZONE, 252))
        .expect("send the AXFR request");
    // The transfer has started (its first bytes are there), and is left to stall.
    let mut first = [0u8; 2];
    slow.set_read_timeout(Some(Duration::from_secs(10))).ok();
    slow.read_exact(&mut first)
        .expect("the transfer's first message");
    std::thread::sleep(Duration::from_secs(2));
    agent.stops_cleanly("a transfer to a client that does not read");
    drop(slow);
}

/// SIGTERM with TCP connections open: idle ones, one stopped halfway through a query, and busy
/// ones that send queries without reading the answers.
#[test]
fn sigterm_with_idle_and_busy_tcp_connections_stops() {
    require_root();
    let dir = TempDir::new("stop-tcp");
    let records = big_records(&dir, "30k.yaml", 30_000, 0);
    let ns = NetNs::new("stoptcp");
    let agent = Running::serving(&ns, &["--records", path_str(&records)]);
    let idle: Vec<TcpStream> = (0..4).map(|_| connect(&ns, 1053)).collect();
    let mut halfway = connect(&ns, 1053);
    let query = tcp_query(2, &format!("host-1.{ZONE}"), 1);
    halfway
        .write_all(&query[..query.len() / 2])
        .expect("send half a query");
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let mut stream = connect(&ns, 1053);
            std::thread::spawn(move || {
                // Until the agent closes the connection; the answers are never read.
                let query = tcp_query(3, &format!("host-2.{ZONE}"), 1);
                while stream.write_all(&query).is_ok() {}
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    agent.stops_cleanly("idle and busy TCP connections");
    drop((idle, halfway));
    // The busy clients end once the agent has gone (their writes fail).
    for client in busy {
        let _ = client.join();
    }
}

/// SIGTERM with scrapes left unfinished: a client that connected and never sent its request,
/// and one that sent it and never reads the answer.
#[test]
fn sigterm_with_unanswered_and_unread_scrapes_stops() {
    require_root();
    let dir = TempDir::new("stop-scrape");
    let records = big_records(&dir, "30k.yaml", 30_000, 0);
    let ns = NetNs::new("stopscrape");
    let agent = Running::serving(&ns, &["--records", path_str(&records)]);
    let silent = connect(&ns, 9354);
    let mut unread: Vec<TcpStream> = (0..4).map(|_| connect(&ns, 9354)).collect();
    for stream in &mut unread {
        // The kernel's buffers soon hold no more of the answer than a client that reads nothing.
        let _ = stream.set_nodelay(true);
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send the scrape");
    }
    let mut half = connect(&ns, 9354);
    half.write_all(b"GET /metr").expect("send half a request");
    std::thread::sleep(Duration::from_secs(1));
    agent.stops_cleanly("scrapes unanswered and unread");
    drop((silent, unread, half));
}

/// SIGTERM to an agent that waits for the pin directory another agent holds (a rolling update
/// whose old agent has not stopped yet): the wait is a blocking task, which the process must not
/// wait for on its way out.
#[test]
fn sigterm_while_waiting_for_the_pin_directory_stops() {
    require_root();
    let bpffs = BpfFs::mount();
    let pin_dir = bpffs.pin_dir();
    let pin_dir = path_str(&pin_dir);
    let dir = TempDir::new("stop-pins");
    let records = big_records(&dir, "30k.yaml", 30_000, 0);
    let ns = NetNs::new("stoppins");
    let holder = Running::serving(
        &ns,
        &["--records", path_str(&records), "--pin-dir", pin_dir],
    );
    let waiting = Running::spawn(
        &ns,
        &["--records", path_str(&records), "--pin-dir", pin_dir],
    );
    waiting.wait_for_line("another agent holds the pin directory", START_BOUND);
    std::thread::sleep(Duration::from_secs(1));
    waiting.stops_cleanly("waiting for the pin directory");
    holder.stops_cleanly("holding the pin directory");
    sh(ns.command(binary().to_str().expect("a UTF-8 path")).args([
        "uninstall",
        "--pin-dir",
        pin_dir,
    ]));
}

/// The deadline itself: an orderly stop that hangs (a test hook makes it) is cut once
/// `stop::DEADLINE` has passed, and a second signal cuts it at once; both say so, with status 1.
#[test]
fn a_stop_that_hangs_is_cut_by_the_deadline_or_a_second_signal() {
    require_root();
    let dir = TempDir::new("stop-hang");
    let records = big_records(&dir, "1k.yaml", 1_000, 0);
    for second_signal in [false, true] {
        let ns = NetNs::new("stophang");
        let mut agent = Running::spawn_with_env(
            &ns,
            &["--records", path_str(&records)],
            &[(hostport_dns::stop::HANG_ENV, "1")],
        );
        agent.wait_for_line("hostport-dns is serving", START_BOUND);
        agent.signal(libc::SIGTERM);
        agent.wait_for_line("stop signal received", STOP_BOUND);
        let expected = if second_signal {
            agent.signal(libc::SIGTERM);
            "a second stop signal: exiting now"
        } else {
            "the stop did not finish in time: exiting now"
        };
        let status = agent.exit_within(STOP_BOUND).unwrap_or_else(|| {
            panic!(
                "the agent outlived its deadline; its log:\n{}",
                agent.logs()
            )
        });
        assert_eq!(status.code(), Some(1), "{}", agent.logs());
        assert!(agent.logs().contains(expected), "{}", agent.logs());
    }
}
