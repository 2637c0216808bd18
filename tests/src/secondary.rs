//! Real secondaries of hostport-dns: knotd, NSD and BIND's named, configured to transfer zones from one or
//! more primaries (with a TSIG key) and to take NOTIFY from them; killed on drop.

use std::{
    fmt::Write as _,
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use crate::{TempDir, clients::dig, netns::NetNs};

/// A TSIG key both sides know: its name and base64 secret.
#[derive(Clone)]
pub struct TsigKey {
    pub name: String,
    pub secret: String,
}

impl TsigKey {
    /// A fixed test key (HMAC-SHA256).
    pub fn test(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            // base64 of 32 bytes "hostport-dns transfer test key!!"
            secret: "aG9zdHBvcnQtZG5zIHRyYW5zZmVyIHRlc3Qga2V5ISE=".to_owned(),
        }
    }

    /// kdig's `-y` argument.
    pub fn kdig_arg(&self) -> String {
        format!("hmac-sha256:{}:{}", self.name, self.secret)
    }
}

/// Which secondary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Knot,
    Nsd,
    Bind,
}

/// A secondary server, killed on drop.
pub struct Secondary {
    pub flavor: Flavor,
    child: Child,
    dir: TempDir,
    pub addr: SocketAddr,
    ns_name: String,
}

impl Secondary {
    /// A secondary of `zones` (apexes, fully qualified) listening on `addr`, transferring from
    /// `primaries` with `key` and taking their NOTIFYs.
    pub fn start(
        flavor: Flavor,
        ns: &NetNs,
        addr: SocketAddr,
        primaries: &[SocketAddr],
        zones: &[&str],
        key: &TsigKey,
    ) -> Self {
        let dir = secondary_dir(flavor);
        let zones_conf = match flavor {
            Flavor::Knot => knot_zones(primaries, zones, key),
            Flavor::Nsd => nsd_zones(&dir.path, primaries, zones, key),
            Flavor::Bind => bind_zones(&dir.path, primaries, zones, key),
        };
        Self::spawn(flavor, ns, addr, dir, &zones_conf, zones[0])
    }

    /// A secondary listening on `addr` with `conf` as the operator writes it (keys, primaries,
    /// zones: docs/src/secondaries.md's examples) after the server settings this adds (listen
    /// address, directories, logs); relative zone files land in its directory. `zone` is one it
    /// serves.
    pub fn start_configured(
        flavor: Flavor,
        ns: &NetNs,
        addr: SocketAddr,
        conf: &str,
        zone: &str,
    ) -> Self {
        Self::spawn(flavor, ns, addr, secondary_dir(flavor), conf, zone)
    }

    /// A consumer of the catalog zone `catalog` (RFC 9432) listening on `addr`, configured as
    /// a guide's `blocks` say (docs/src/secondaries.md's, made local) after this server's own
    /// settings: for knotd one block (keys, primary, ACL, a template per group, the catalog
    /// zone), its templates given this harness's storage settings; for BIND the
    /// `catalog-zones` statement, which goes into its options, and the block with the key and
    /// the catalog zone.
    pub fn consume_catalog(
        flavor: Flavor,
        ns: &NetNs,
        addr: SocketAddr,
        blocks: &[&str],
        catalog: &str,
    ) -> Self {
        let dir = secondary_dir(flavor);
        let conf = match (flavor, blocks) {
            (Flavor::Knot, [conf]) => {
                format!(
                    "{}{}",
                    knot_base(&dir.path, addr),
                    with_storage(conf, &dir.path)
                )
            }
            (Flavor::Bind, [catalog_zones, zones]) => format!(
                "{}{zones}",
                bind_server_with(&dir.path, addr, catalog_zones)
            ),
            _ => panic!("{flavor:?} does not take {} blocks here", blocks.len()),
        };
        Self::spawn_whole(flavor, ns, addr, dir, &conf, catalog)
    }

    fn spawn(
        flavor: Flavor,
        ns: &NetNs,
        addr: SocketAddr,
        dir: TempDir,
        zones_conf: &str,
        zone: &str,
    ) -> Self {
        let server = match flavor {
            Flavor::Knot => knot_server(&dir.path, addr),
            Flavor::Nsd => nsd_server(&dir.path, addr),
            Flavor::Bind => bind_server(&dir.path, addr),
        };
        Self::spawn_whole(
            flavor,
            ns,
            addr,
            dir,
            &format!("{server}{zones_conf}"),
            zone,
        )
    }

    /// Runs the secondary with `conf` as its whole configuration; `zone` is one it serves.
    fn spawn_whole(
        flavor: Flavor,
        ns: &NetNs,
        addr: SocketAddr,
        dir: TempDir,
        conf: &str,
        zone: &str,
    ) -> Self {
        let conf_path = dir.write("secondary.conf", conf);
        let log = std::fs::File::create(dir.path.join("log")).expect("create the log file");
        let mut cmd = match flavor {
            Flavor::Knot => {
                let mut cmd = ns.command("knotd");
                cmd.arg("-c").arg(&conf_path);
                cmd
            }
            Flavor::Nsd => {
                let mut cmd = ns.command("nsd");
                cmd.arg("-d").arg("-c").arg(&conf_path);
                cmd
            }
            Flavor::Bind => {
                let mut cmd = ns.command("named");
                cmd.arg("-g").arg("-c").arg(&conf_path);
                cmd
            }
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {flavor:?}: {e}"));
        let secondary = Self {
            flavor,
            child,
            dir,
            addr,
            ns_name: ns.name.clone(),
        };
        secondary.wait_listening(ns, zone);
        secondary
    }

    fn wait_listening(&self, ns: &NetNs, zone: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = ns
                .command("kdig")
                .args([
                    format!("@{}", self.addr.ip()),
                    "-p".into(),
                    self.addr.port().to_string(),
                    "+retry=0".into(),
                    "+timeout=1".into(),
                    zone.into(),
                    "SOA".into(),
                ])
                .output()
                .expect("run kdig");
            if String::from_utf8_lossy(&out.stdout).contains("status:") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not start; its log:\n{}",
                self.flavor,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The serial of the zone it serves now (None: it has no copy of the zone yet).
    pub fn serial(&self, zone: &str) -> Option<u32> {
        let ns = NetNs::borrowed(&self.ns_name);
        let reply = dig(
            &ns,
            &self.addr.ip().to_string(),
            self.addr.port(),
            &[zone, "SOA"],
        );
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

    /// The addresses it answers for `name`, sorted.
    pub fn addresses(&self, name: &str) -> Vec<String> {
        let ns = NetNs::borrowed(&self.ns_name);
        let mut addresses = dig(
            &ns,
            &self.addr.ip().to_string(),
            self.addr.port(),
            &[name, "A"],
        )
        .answer_data();
        addresses.sort();
        addresses
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Secondary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn secondary_dir(flavor: Flavor) -> TempDir {
    TempDir::new(match flavor {
        Flavor::Knot => "knot-secondary",
        Flavor::Nsd => "nsd-secondary",
        Flavor::Bind => "bind-secondary",
    })
}

/// knotd's own settings: one worker of each kind, logs to stderr, zones kept in `dir` and
/// never written to zone files. Refresh timers are left at the zone's (an hour): a change
/// reaches it by NOTIFY, not by polling.
fn knot_server(dir: &std::path::Path, addr: SocketAddr) -> String {
    format!(
        "{}template:\n  - id: default\n{}",
        knot_base(dir, addr),
        knot_template_body(dir)
    )
}

/// knotd's `server`, `log` and `database` sections.
fn knot_base(dir: &std::path::Path, addr: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "server:\n  listen: {}@{}\n  rundir: {d}\n  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n\
         log:\n  - target: stderr\n    any: info\n\
         database:\n  storage: {d}\n",
        addr.ip(),
        addr.port(),
    )
}

/// What every knotd template here holds: zones in `dir`, never written to zone files.
fn knot_template_body(dir: &std::path::Path) -> String {
    format!(
        "    storage: {}\n    zonefile-sync: -1\n    zonefile-load: none\n    journal-content: changes\n    semantic-checks: off\n",
        dir.display()
    )
}

/// A knotd configuration with this harness's storage settings in each of its templates, and a
/// `default` template holding them first (for the zones without one, the catalog's).
fn with_storage(conf: &str, dir: &std::path::Path) -> String {
    let body = knot_template_body(dir);
    let mut out = String::new();
    let mut in_templates = false;
    for line in conf.lines() {
        out.push_str(line);
        out.push('\n');
        if !line.starts_with(' ') && line.ends_with(':') {
            in_templates = line == "template:";
            if in_templates {
                out.push_str("  - id: default\n");
                out.push_str(&body);
            }
        } else if in_templates && line.trim_start().starts_with("- id: ") {
            out.push_str(&body);
        }
    }
    out
}

/// knotd: a remote per primary, the zones bootstrapped by AXFR and refreshed by IXFR, NOTIFY
/// accepted from the primaries with the key.
fn knot_zones(primaries: &[SocketAddr], zones: &[&str], key: &TsigKey) -> String {
    let mut conf = format!(
        "key:\n  - id: {k}\n    algorithm: hmac-sha256\n    secret: {s}\nremote:\n",
        k = key.name,
        s = key.secret,
    );
    for (i, primary) in primaries.iter().enumerate() {
        let _ = write!(
            conf,
            "  - id: primary{i}\n    address: {}@{}\n    key: {}\n",
            primary.ip(),
            primary.port(),
            key.name
        );
    }
    let addresses: Vec<String> = primaries.iter().map(|p| p.ip().to_string()).collect();
    let _ = write!(
        conf,
        "acl:\n  - id: from-primaries\n    address: [{}]\n    key: {}\n    action: notify\n",
        addresses.join(", "),
        key.name
    );
    let masters: Vec<String> = (0..primaries.len())
        .map(|i| format!("primary{i}"))
        .collect();
    conf.push_str("zone:\n");
    for zone in zones {
        let _ = write!(
            conf,
            "  - domain: {zone}\n    master: [{}]\n    acl: from-primaries\n",
            masters.join(", ")
        );
    }
    conf
}

/// NSD's own settings: one server process, files in `dir`, no remote control.
fn nsd_server(dir: &std::path::Path, addr: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "server:\n  ip-address: {}@{}\n  zonesdir: \"{d}\"\n  database: \"\"\n  pidfile: \"{d}/nsd.pid\"\n  \
         xfrdfile: \"{d}/xfrd.state\"\n  zonelistfile: \"{d}/zone.list\"\n  xfrdir: \"{d}\"\n  \
         username: \"\"\n  server-count: 1\n  verbosity: 2\n  logfile: \"{d}/log\"\n\
         remote-control:\n  control-enable: no\n",
        addr.ip(),
        addr.port(),
    )
}

/// NSD: each zone requests transfers from every primary with the key and allows their NOTIFY.
fn nsd_zones(
    dir: &std::path::Path,
    primaries: &[SocketAddr],
    zones: &[&str],
    key: &TsigKey,
) -> String {
    let d = dir.display();
    let mut conf = format!(
        "key:\n  name: \"{k}\"\n  algorithm: hmac-sha256\n  secret: \"{s}\"\n",
        k = key.name,
        s = key.secret,
    );
    for zone in zones {
        let _ = write!(
            conf,
            "zone:\n  name: \"{zone}\"\n  zonefile: \"{d}/{zone}zone\"\n"
        );
        for primary in primaries {
            let _ = write!(
                conf,
                "  allow-notify: {} {k}\n  request-xfr: {}@{} {k}\n",
                primary.ip(),
                primary.ip(),
                primary.port(),
                k = key.name
            );
        }
    }
    conf
}

/// BIND 9's own settings: files in `dir`, no recursion, no NOTIFY of its own, no control
/// channel.
fn bind_server(dir: &std::path::Path, addr: SocketAddr) -> String {
    bind_server_with(dir, addr, "")
}

/// [`bind_server`] with `more` (statements such as `catalog-zones`) in its options.
fn bind_server_with(dir: &std::path::Path, addr: SocketAddr, more: &str) -> String {
    let d = dir.display();
    format!(
        "options {{\n  directory \"{d}\";\n  managed-keys-directory \"{d}\";\n  pid-file \"{d}/named.pid\";\n  \
         session-keyfile \"{d}/session.key\";\n  listen-on port {} {{ {}; }};\n  listen-on-v6 {{ none; }};\n  \
         recursion no;\n  dnssec-validation no;\n  notify no;\n{more}}};\ncontrols {{ }};\n",
        addr.port(),
        addr.ip(),
    )
}

/// BIND 9: each zone a secondary of every primary with the key, NOTIFY accepted only signed
/// with it (the configuration docs/src/secondaries.md shows).
fn bind_zones(
    dir: &std::path::Path,
    primaries: &[SocketAddr],
    zones: &[&str],
    key: &TsigKey,
) -> String {
    let d = dir.display();
    let mut conf = format!(
        "key \"{k}\" {{\n  algorithm hmac-sha256;\n  secret \"{s}\";\n}};\n",
        k = key.name,
        s = key.secret,
    );
    let primaries: Vec<String> = primaries
        .iter()
        .map(|p| format!("{} port {} key \"{}\";", p.ip(), p.port(), key.name))
        .collect();
    for zone in zones {
        let _ = write!(
            conf,
            "zone \"{zone}\" {{\n  type secondary;\n  primaries {{ {} }};\n  file \"{d}/{zone}db\";\n  \
             allow-notify {{ key \"{}\"; }};\n}};\n",
            primaries.join(" "),
            key.name
        );
    }
    conf
}
