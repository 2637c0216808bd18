//! A real Prometheus (Debian's `prometheus` and `promtool`): the exposition checked by promtool,
//! and a server scraping agents in a namespace, queried over its HTTP API.

use std::{
    net::SocketAddr,
    process::{Child, Stdio},
    time::Duration,
};

use crate::{TempDir, agent::http_get, eventually, netns::NetNs};

/// No two series with one name and label set (Prometheus drops all but one), and promtool
/// (Debian's prometheus package) finds nothing to say about the exposition.
pub fn assert_exposition_is_clean(text: &str) {
    let mut seen = std::collections::BTreeSet::new();
    for series in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
    {
        assert!(seen.insert(series), "series {series} twice in:\n{text}");
    }
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (cargo xtask setup installs it)");
    std::io::Write::write_all(&mut promtool.stdin.take().expect("stdin"), text.as_bytes())
        .expect("write the exposition");
    let out = promtool.wait_with_output().expect("promtool's verdict");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\nof:\n{text}",
        out.status
    );
}

/// Prometheus scraping `targets` every second inside `ns`, with `rule_files`; killed on drop.
pub struct Prometheus {
    child: Child,
    _dir: TempDir,
    pub addr: SocketAddr,
    ns_name: String,
}

impl Prometheus {
    pub fn start(
        ns: &NetNs,
        addr: SocketAddr,
        targets: &[&str],
        rule_files: &[&std::path::Path],
    ) -> Self {
        let dir = TempDir::new("prometheus");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let rules: Vec<String> = rule_files
            .iter()
            .map(|r| format!("'{}'", r.display()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [{}]\n\
             scrape_configs:\n  - job_name: hostport-dns\n    static_configs:\n      - targets: [{}]\n",
            rules.join(", "),
            targets.join(", ")
        );
        let config_path = dir.write("prometheus.yml", &config);
        let log = std::fs::File::create(dir.path.join("log")).expect("create the log");
        let child = ns
            .command("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (cargo xtask setup installs it)");
        let prometheus = Self {
            child,
            _dir: dir,
            addr,
            ns_name: ns.name.clone(),
        };
        eventually("Prometheus answers", 60, || {
            prometheus.get("/-/ready").0 == 200
        });
        prometheus
    }

    /// GET `path` on its HTTP API: (status, body); status 0 while it does not listen yet.
    pub fn get(&self, path: &str) -> (u16, String) {
        let addr = self.addr;
        let path = path.to_owned();
        NetNs::enter(&self.ns_name, move || {
            if std::net::TcpStream::connect(addr).is_err() {
                return (0, String::new());
            }
            http_get(&addr.to_string(), &path)
        })
    }

    /// The result of an instant query: the JSON `data.result` array.
    pub fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let (status, body) = self.get(&format!("/api/v1/query?query={}", url_encode(expr)));
        assert_eq!(status, 200, "query {expr}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        json["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path.join("log")).unwrap_or_default()
    }

    /// Waits until `expr` returns a result.
    pub fn wait_for(&self, expr: &str, seconds: u64) {
        eventually(&format!("Prometheus returns {expr}"), seconds, || {
            !self.query(expr).is_empty()
        });
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter.
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
