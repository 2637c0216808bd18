//! A real BIND primary of a "company" zone that takes RFC 2136 UPDATEs signed with a TSIG key
//! (`allow-update { key … }`), as the zone hostport-dns publishes into: its content read back
//! with dig, and the updates it applied read from its log. Killed on drop.

use std::{
    fmt::Write as _,
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use crate::{TempDir, clients::dig, netns::NetNs, secondary::TsigKey};

/// A BIND primary, killed on drop.
pub struct BindPrimary {
    child: Child,
    dir: TempDir,
    pub addr: SocketAddr,
    ns_name: String,
}

impl BindPrimary {
    /// A primary of `zone` (fully qualified) on `addr` in `ns`: its SOA and NS, `records`
    /// (`(owner relative to the zone, "A 198.18.9.2")`, the company's own), and updates
    /// allowed only when signed with `key`.
    pub fn start(
        ns: &NetNs,
        addr: SocketAddr,
        zone: &str,
        key: &TsigKey,
        records: &[(&str, &str)],
    ) -> Self {
        let dir = TempDir::new("bind-primary");
        let mut zone_file = format!(
            "$TTL 300\n@ IN SOA ns.{zone} hostmaster.{zone} 1 3600 600 86400 60\n@ IN NS ns.{zone}\nns IN A 198.18.9.1\n"
        );
        for (owner, data) in records {
            let _ = writeln!(zone_file, "{owner} IN {data}");
        }
        dir.write(&format!("{zone}db"), &zone_file);
        let d = dir.path.display();
        let conf = format!(
            "options {{\n  directory \"{d}\";\n  managed-keys-directory \"{d}\";\n  pid-file \"{d}/named.pid\";\n  \
             session-keyfile \"{d}/session.key\";\n  listen-on port {port} {{ {ip}; }};\n  listen-on-v6 {{ none; }};\n  \
             recursion no;\n  dnssec-validation no;\n  notify no;\n}};\ncontrols {{ }};\n\
             key \"{k}\" {{\n  algorithm hmac-sha256;\n  secret \"{s}\";\n}};\n\
             zone \"{zone}\" {{\n  type primary;\n  file \"{d}/{zone}db\";\n  allow-update {{ key \"{k}\"; }};\n}};\n",
            port = addr.port(),
            ip = addr.ip(),
            k = key.name,
            s = key.secret,
        );
        let conf_path = dir.write("primary.conf", &conf);
        let log = std::fs::File::create(dir.path.join("log")).expect("create the log file");
        // -g: foreground, every category (update, update-security) logged to stderr.
        let child = ns
            .command("named")
            .arg("-g")
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start named: {e}"));
        let primary = Self {
            child,
            dir,
            addr,
            ns_name: ns.name.clone(),
        };
        primary.wait_serving(zone);
        primary
    }

    fn wait_serving(&self, zone: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        // A raw dig until it answers (`clients::dig` takes no answer as a failure).
        let answers = || {
            let out = NetNs::borrowed(&self.ns_name)
                .command("dig")
                .args([
                    format!("@{}", self.addr.ip()),
                    "-p".into(),
                    self.addr.port().to_string(),
                    "+tries=1".into(),
                    "+timeout=1".into(),
                    zone.into(),
                    "SOA".into(),
                ])
                .output()
                .expect("run dig");
            String::from_utf8_lossy(&out.stdout).contains("status: NOERROR")
        };
        while !answers() {
            assert!(
                Instant::now() < deadline,
                "named did not serve {zone}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The zone's serial (None: not served).
    pub fn serial(&self, zone: &str) -> Option<u32> {
        let reply = self.query(zone, "SOA");
        if reply.status != "NOERROR" {
            return None;
        }
        reply
            .answer
            .iter()
            .find(|r| r.rtype == "SOA")?
            .data
            .split_whitespace()
            .nth(2)?
            .parse()
            .ok()
    }

    /// The records of type `rtype` it answers for `name`, as data, sorted.
    pub fn records(&self, name: &str, rtype: &str) -> Vec<String> {
        self.query(name, rtype).answer_data()
    }

    /// Its answer for `name`/`rtype`, with the TTLs.
    pub fn query(&self, name: &str, rtype: &str) -> crate::clients::Reply {
        let ns = NetNs::borrowed(&self.ns_name);
        dig(
            &ns,
            &self.addr.ip().to_string(),
            self.addr.port(),
            &[name, rtype],
        )
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("log")).unwrap_or_default()
    }

    /// The changes its updates made, as BIND logs them ("adding an RR at 'api.corp.example' A
    /// 198.18.0.1", "deleting rrset at 'old.corp.example' A", ...), in order.
    pub fn update_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("updating zone"))
            .filter_map(|l| l.split("': ").nth(1).map(str::to_owned))
            .collect()
    }

    /// Updates it refused or could not verify (key, signature, policy), as logged.
    pub fn refusals(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| {
                l.contains("update")
                    && (l.contains("denied") || l.contains("failed") || l.contains("TSIG"))
            })
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for BindPrimary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
