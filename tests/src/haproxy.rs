//! HAProxy as the load balancer: `resolvers` + `server-template` against the agent, run in the
//! client namespace, its state read over the stats socket.

use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::{Child, Stdio},
};

use crate::{TempDir, netns::NetNs};

/// A running HAProxy, killed on drop.
pub struct Haproxy {
    child: Child,
    socket: PathBuf,
    /// The backend whose servers the slots are (`ingress` unless the configuration names another).
    backend: String,
    _dir: TempDir,
}

impl Haproxy {
    /// HAProxy resolving `name` with `slots` server slots through the DNS server at
    /// `nameserver` ("ip:port"); `resolve_prefer` is None for HAProxy's default (AAAA, then A).
    /// A name starting with `_` is HAProxy's SRV mode: ports from the SRV records, addresses from
    /// the additional section; other names get port 443.
    pub fn start(
        ns: &NetNs,
        nameserver: &str,
        name: &str,
        slots: u32,
        resolve_prefer: Option<&str>,
    ) -> Self {
        Self::start_offering(ns, nameserver, name, slots, resolve_prefer, 8192)
    }

    /// [`Haproxy::start`] with `accepted_payload_size` `payload` instead of the seed's 8192.
    pub fn start_offering(
        ns: &NetNs,
        nameserver: &str,
        name: &str,
        slots: u32,
        resolve_prefer: Option<&str>,
        payload: u16,
    ) -> Self {
        Self::start_config(ns, nameserver, name, slots, resolve_prefer, payload, "")
    }

    fn start_config(
        ns: &NetNs,
        nameserver: &str,
        name: &str,
        slots: u32,
        resolve_prefer: Option<&str>,
        payload: u16,
        more_servers: &str,
    ) -> Self {
        let dir = TempDir::new("haproxy");
        let socket = dir.path.join("stats.sock");
        let prefer = resolve_prefer
            .map(|p| format!(" resolve-prefer {p}"))
            .unwrap_or_default();
        let target = if name.starts_with('_') {
            name.to_owned()
        } else {
            format!("{name}:443")
        };
        // Failed lookups are held 1 s, not HAProxy's 30 s: a silent or failing agent shows as
        // lost backends within seconds, as a test needs to see it.
        let config = format!(
            "global\n  stats socket {} mode 600 level admin\n\
             defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n\
             resolvers agent\n  nameserver hpd {nameserver}\n  accepted_payload_size {payload}\n  resolve_retries 3\n  \
             timeout resolve 1s\n  timeout retry 1s\n  hold valid 10s\n  \
             hold nx 1s\n  hold other 1s\n  hold refused 1s\n  hold timeout 1s\n\
             backend ingress\n  server-template srv {slots} {target} resolvers agent init-addr none{prefer}\n{more_servers}",
            socket.display()
        );
        Self::spawn(ns, dir, &config, "ingress")
    }

    /// HAProxy run with `sections` (its `resolvers` and `backend` sections as a guide gives
    /// them) after the test's `global` (the stats socket) and `defaults`; the slots read are
    /// those of the first backend `sections` names.
    pub fn start_sections(ns: &NetNs, sections: &str) -> Self {
        let dir = TempDir::new("haproxy");
        let backend = sections
            .lines()
            .find_map(|l| l.trim().strip_prefix("backend "))
            .map(|b| b.trim().to_owned())
            .expect("a backend section");
        let config = format!(
            "global\n  stats socket {} mode 600 level admin\n\
             defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n\
             {sections}",
            dir.path.join("stats.sock").display()
        );
        Self::spawn(ns, dir, &config, &backend)
    }

    fn spawn(ns: &NetNs, dir: TempDir, config: &str, backend: &str) -> Self {
        let socket = dir.path.join("stats.sock");
        let config_path = dir.write("haproxy.cfg", config);
        let child = ns
            .command("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let haproxy = Self {
            child,
            socket,
            backend: backend.to_owned(),
            _dir: dir,
        };
        crate::eventually("the HAProxy stats socket", 10, || haproxy.socket.exists());
        haproxy
    }

    /// Runs a command on the stats socket and returns its output.
    pub fn command(&self, command: &str) -> String {
        let Ok(mut stream) = UnixStream::connect(&self.socket) else {
            return String::new();
        };
        let _ = stream.write_all(format!("{command}\n").as_bytes());
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out);
        out
    }

    /// "address:port" of each server slot that holds an address, sorted.
    pub fn backend_endpoints(&self) -> Vec<String> {
        let state = self.command(&format!("show servers state {}", self.backend));
        let Some(header) = state.lines().find(|l| l.starts_with("# be_id")) else {
            return Vec::new();
        };
        let column = |name: &str| {
            header
                .trim_start_matches("# ")
                .split_whitespace()
                .position(|c| c == name)
        };
        let (Some(addr), Some(port)) = (column("srv_addr"), column("srv_port")) else {
            return Vec::new();
        };
        let mut endpoints: Vec<String> = state
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                let (address, port) = (*fields.get(addr)?, *fields.get(port)?);
                (address.parse::<std::net::IpAddr>().is_ok() && address != "0.0.0.0")
                    .then(|| format!("{address}:{port}"))
            })
            .collect();
        endpoints.sort();
        endpoints
    }

    /// The addresses the backend's server slots hold now, sorted.
    pub fn backend_addresses(&self) -> Vec<String> {
        self.slot_addresses("")
    }

    /// The addresses the slots whose name starts with `prefix` (`srv`, `all`) hold, sorted.
    pub fn slot_addresses(&self, prefix: &str) -> Vec<String> {
        let state = self.command(&format!("show servers state {}", self.backend));
        let mut addresses: Vec<String> = state
            .lines()
            .filter(|l| !l.starts_with('#') && l.split_whitespace().count() > 5)
            .filter(|l| {
                l.split_whitespace()
                    .nth(3)
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .filter_map(|l| {
                let address = l.split_whitespace().nth(4)?;
                (address.parse::<std::net::IpAddr>().is_ok() && address != "0.0.0.0")
                    .then(|| address.to_owned())
            })
            .collect();
        addresses.sort();
        addresses
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
