//! RFC 2136 updates to a real BIND primary (`allow-update { key … }`): the names of a served
//! zone arrive in the company zone, changes arrive as the difference alone (BIND's log shows
//! each record added and deleted), deletions included; a change made by another writer fails
//! our prerequisite and the name is written whole; a restart resynchronises the listed names
//! (stale ones removed, whatever BIND held); a wrong key is reported (log line naming key and
//! zone, `hostport_dns_update_total{result="not_authorized"}`) while BIND's content stays as it
//! was and readiness is unaffected; with several agents only the holder of the
//! `leaderElection` Lease writes, and another takes over when it is killed.

use std::io::Write as _;

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    bind_primary::BindPrimary,
    book, eventually,
    fake_api::{FakeApi, Kind},
    k8s::api_server_slice,
    netns::NetNs,
    require_root,
    secondary::TsigKey,
};

const ZONE: &str = "corp.example.";
const SOURCE: &str = "prod.example";
const KEY: &str = "update-key";
const BIND: &str = "127.0.0.1:5310";
const TARGET: &str = "corp.example.@127.0.0.1:5310";

/// A namespace with BIND serving the company zone and the agent's files.
struct Bed {
    ns: NetNs,
    dir: TempDir,
    key: TsigKey,
    bind: BindPrimary,
}

impl Bed {
    /// BIND holds the company's own records: `www` (never ours), a TXT at `api` (a type we do
    /// not manage), and `stale`, an address a previous writer left.
    fn new(tag: &str) -> Self {
        require_root();
        let ns = NetNs::new(tag);
        let dir = TempDir::new(tag);
        let key = TsigKey::test(KEY);
        let bind = BindPrimary::start(
            &ns,
            BIND.parse().expect("an address"),
            ZONE,
            &key,
            &[
                ("www", "A 198.18.9.2"),
                ("api", "TXT \"company\""),
                ("stale", "A 198.18.9.3"),
            ],
        );
        Self { ns, dir, key, bind }
    }

    /// The record file: `records` under the source zone, TTL 30; replaced whole (renamed into
    /// place), so that the agent never reads half of it.
    fn records(&self, records: &str) -> std::path::PathBuf {
        let fresh = self.dir.write(
            "records.yaml.new",
            &format!("zones:\n  - name: {SOURCE}\n    ttl: 30\n    records:\n{records}"),
        );
        let path = self.dir.path.join("records.yaml");
        std::fs::rename(&fresh, &path).expect("rename the record file into place");
        path
    }

    /// The configuration: the key (with `secret` in its file) and one update target; `names`
    /// a YAML list, or empty for every name.
    fn config(&self, secret: &str, names: &str) -> std::path::PathBuf {
        self.dir.write("update-key", secret);
        let names = if names.is_empty() {
            String::new()
        } else {
            format!("    names: {names}\n")
        };
        self.dir.write(
            "agent.yaml",
            &format!(
                "transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/update-key\n\
                 update:\n  - server: {BIND}\n    zone: {ZONE}\n    source: {SOURCE}\n    key: {KEY}\n{names}",
                dir = self.dir.path.display()
            ),
        )
    }

    fn agent(&self, config: &std::path::Path, records: &std::path::Path) -> Agent {
        self.agent_as(config, records, 1053, "agent")
    }

    /// An agent on `port` (its metrics on 93<port % 100>), named `identity` (the Lease holder's
    /// name), so that several share the namespace.
    fn agent_as(
        &self,
        config: &std::path::Path,
        records: &std::path::Path,
        port: u16,
        identity: &str,
    ) -> Agent {
        Agent::start_with_metrics(
            &self.ns,
            &format!("127.0.0.1:{}", 9300 + port % 100),
            &[
                "--config",
                config.to_str().expect("UTF-8"),
                "--records",
                records.to_str().expect("UTF-8"),
                "--xdp-mode",
                "off",
                "--port",
                &port.to_string(),
                "--identity",
                identity,
            ],
        )
    }

    /// Waits until BIND answers `want` (sorted) for `name`.`rtype`.
    fn wait_for(&self, name: &str, rtype: &str, want: &[&str]) {
        let fqdn = format!("{name}.{ZONE}");
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        let mut now;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            now = self.bind.records(&fqdn, rtype);
            if now == want {
                return;
            }
            if std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!(
            "BIND answers {now:?} for {fqdn} {rtype}, not {want:?}; its log:\n{}",
            self.bind.log()
        );
    }

    /// Another writer (an operator with nsupdate) replaces `name`'s addresses.
    fn nsupdate(&self, commands: &str) {
        let (ip, port) = BIND.split_once(':').expect("address:port");
        let mut child = self
            .ns
            .command("nsupdate")
            .args(["-y", &self.key.kdig_arg()])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run nsupdate");
        let script = format!("server {ip} {port}\nzone {ZONE}\n{commands}send\n");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write to nsupdate");
        let status = child.wait().expect("nsupdate ends");
        assert!(status.success(), "nsupdate failed: {status}");
    }
}

/// docs/src/publishing.md's `update` entry, as the page shows it (its primary and zones made
/// the test's): the names it lists are written into BIND's zone, and a name it does not list is
/// not.
#[test]
fn the_update_entry_of_the_publishing_page_writes_the_names_it_lists() {
    let bed = Bed::new("upd-book");
    let [entry] = book::blocks(
        "publishing.md",
        "## Publishing into an existing zone (RFC 2136)",
    )
    .try_into()
    .expect("one block: the update entry");
    bed.dir.write("update-key", &bed.key.secret);
    let key_file = bed.dir.path.join("update-key");
    let config = book::made_local(
        &entry,
        &[
            (
                "/etc/hostport-dns-tsig/update-key",
                key_file.to_str().expect("UTF-8"),
            ),
            ("server: 192.0.2.53", &format!("server: {BIND}")),
            ("corp.example.com.", ZONE),
            ("ingress.prod.example.com.", &format!("{SOURCE}.")),
        ],
    );
    let config = bed.dir.write("agent.yaml", &config);
    let records = bed.records(
        "      api: 198.18.1.1\n      default-nginx.ingress: [198.18.2.1, 198.18.2.2]\n      unlisted: 198.18.3.1\n",
    );
    let agent = bed.agent(&config, &records);
    bed.wait_for("api", "A", &["198.18.1.1"]);
    bed.wait_for("default-nginx.ingress", "A", &["198.18.2.1", "198.18.2.2"]);
    eventually("the target reported in sync", 10, || {
        agent.metric("hostport_dns_update_in_sync", &[("target", TARGET)]) == 1.0
    });
    assert!(
        bed.bind
            .records(&format!("unlisted.{ZONE}"), "A")
            .is_empty(),
        "a name the entry does not list is written"
    );
}

#[test]
fn names_changes_and_deletions_arrive_as_minimal_updates() {
    let bed = Bed::new("upd-diff");
    let records = bed.records(
        "      api: [198.18.1.1, 198.18.1.2]\n      web.ingress: 198.18.2.1\n      v6: \"2001:db8::1\"\n",
    );
    let config = bed.config(&bed.key.secret, "");
    let agent = bed.agent(&config, &records);
    bed.wait_for("api", "A", &["198.18.1.1", "198.18.1.2"]);
    bed.wait_for("web.ingress", "A", &["198.18.2.1"]);
    bed.wait_for("v6", "AAAA", &["2001:db8::1"]);
    // The company's own records are untouched: another name, and another type at our name.
    bed.wait_for("www", "A", &["198.18.9.2"]);
    bed.wait_for("api", "TXT", &["\"company\""]);
    let ttl = bed.bind.query(&format!("api.{ZONE}"), "A").answer[0].ttl;
    assert_eq!(ttl, 30, "the records' own TTL");
    eventually("the target reported in sync", 10, || {
        agent.metric("hostport_dns_update_in_sync", &[("target", TARGET)]) == 1.0
    });

    // One address replaced, a name gone, a name new: only that is sent.
    let before = bed.bind.update_lines().len();
    bed.records(
        "      api: [198.18.1.2, 198.18.1.3]\n      v6: \"2001:db8::1\"\n      new: 198.18.3.1\n",
    );
    bed.wait_for("api", "A", &["198.18.1.2", "198.18.1.3"]);
    bed.wait_for("web.ingress", "A", &[]);
    bed.wait_for("new", "A", &["198.18.3.1"]);
    bed.wait_for("v6", "AAAA", &["2001:db8::1"]);
    let mut changes: Vec<String> = bed.bind.update_lines()[before..].to_vec();
    changes.sort();
    assert_eq!(
        changes,
        [
            "adding an RR at 'api.corp.example' A 198.18.1.3",
            "adding an RR at 'new.corp.example' A 198.18.3.1",
            // BIND names the type, not the record.
            "deleting an RR at api.corp.example A",
            "deleting rrset at 'web.ingress.corp.example' A",
        ],
        "the difference alone; BIND's log:\n{}",
        bed.bind.log()
    );

    // Another writer changes api behind our back: our next change's prerequisite (the RRset
    // as we last wrote it) fails, and api is written whole.
    bed.nsupdate(&format!(
        "update delete api.{ZONE} A\nupdate add api.{ZONE} 30 A 198.18.7.7\n"
    ));
    bed.wait_for("api", "A", &["198.18.7.7"]);
    bed.records(
        "      api: [198.18.1.3, 198.18.1.4]\n      v6: \"2001:db8::1\"\n      new: 198.18.3.1\n",
    );
    bed.wait_for("api", "A", &["198.18.1.3", "198.18.1.4"]);
    assert!(
        agent.metric(
            "hostport_dns_update_total",
            &[("target", TARGET), ("result", "prerequisite_failed")]
        ) >= 1.0,
        "{}",
        agent.metrics()
    );
    assert!(agent.metric("hostport_dns_update_total", &[("result", "applied")]) >= 3.0);

    // A name new to us that another writer created first: our "RRset does not exist"
    // prerequisite fails, and the name is written whole (ours alone, not added to theirs).
    let failed_before = agent.metric(
        "hostport_dns_update_total",
        &[("target", TARGET), ("result", "prerequisite_failed")],
    );
    bed.nsupdate(&format!("update add late.{ZONE} 30 A 198.18.8.8\n"));
    bed.wait_for("late", "A", &["198.18.8.8"]);
    bed.records(
        "      api: [198.18.1.3, 198.18.1.4]\n      v6: \"2001:db8::1\"\n      new: 198.18.3.1\n      late: 198.18.3.9\n",
    );
    bed.wait_for("late", "A", &["198.18.3.9"]);
    assert!(
        agent.metric(
            "hostport_dns_update_total",
            &[("target", TARGET), ("result", "prerequisite_failed")]
        ) > failed_before,
        "the new name went without its prerequisite: {}",
        agent.metrics()
    );
    bed.wait_for("www", "A", &["198.18.9.2"]);
}

#[test]
fn a_restart_resynchronises_the_listed_names() {
    let bed = Bed::new("upd-restart");
    let names = "[api, web.ingress, stale]";
    let records =
        bed.records("      api: [198.18.1.1, 198.18.1.2]\n      web.ingress: 198.18.2.1\n");
    let config = bed.config(&bed.key.secret, names);
    let agent = bed.agent(&config, &records);
    bed.wait_for("api", "A", &["198.18.1.1", "198.18.1.2"]);
    bed.wait_for("web.ingress", "A", &["198.18.2.1"]);
    // A listed name without records: what a previous writer left there is removed.
    bed.wait_for("stale", "A", &[]);
    agent.stop();

    // While no agent runs: the records change, and BIND is edited by hand.
    let records = bed.records("      api: 198.18.1.3\n");
    bed.nsupdate(&format!("update add api.{ZONE} 30 A 198.18.7.7\n"));
    bed.wait_for("api", "A", &["198.18.1.1", "198.18.1.2", "198.18.7.7"]);
    let agent = bed.agent(&config, &records);
    bed.wait_for("api", "A", &["198.18.1.3"]);
    bed.wait_for("web.ingress", "A", &[]);
    bed.wait_for("www", "A", &["198.18.9.2"]);
    bed.wait_for("api", "TXT", &["\"company\""]);
    eventually("the target reported in sync", 10, || {
        agent.metric("hostport_dns_update_in_sync", &[("target", TARGET)]) == 1.0
    });
}

#[test]
fn a_wrong_key_is_reported_and_bind_is_left_alone() {
    let bed = Bed::new("upd-badkey");
    let serial = bed.bind.serial(ZONE).expect("a serial");
    let records = bed.records("      api: 198.18.1.1\n");
    // The key's name BIND knows, another secret: BADSIG.
    let config = bed.config("d3JvbmcgdXBkYXRlIGtleSBmb3IgdGhlIHRlc3QhISE=", "");
    let agent = bed.agent(&config, &records);
    eventually("the failure counted", 20, || {
        agent.metric(
            "hostport_dns_update_total",
            &[("target", TARGET), ("result", "not_authorized")],
        ) >= 1.0
    });
    // The log line is read from the agent's output by a thread of the test bed.
    eventually("the error line", 10, || {
        agent.logs().contains("UPDATE not authorized")
    });
    let logs = agent.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("UPDATE not authorized"))
        .expect("the line");
    assert!(
        line.contains("\"ERROR\"") && line.contains(KEY) && line.contains(ZONE),
        "{line}"
    );
    assert_eq!(
        agent.metric("hostport_dns_update_in_sync", &[("target", TARGET)]),
        0.0
    );
    assert_eq!(
        agent.http_get("/readyz").0,
        200,
        "readiness is not the primary's"
    );
    assert_eq!(bed.bind.serial(ZONE), Some(serial), "BIND's zone unchanged");
    assert_eq!(
        bed.bind.records(&format!("api.{ZONE}"), "A"),
        Vec::<String>::new()
    );
    assert!(bed.bind.update_lines().is_empty(), "{}", bed.bind.log());
}

/// Two agents, one Lease (the agents watch Kubernetes, so they elect a writer): only the holder
/// sends UPDATEs (the other counts none and reports itself out of sync, so an alert takes the
/// maximum over agents); killed, its lease expires and the other takes over, writes every name
/// whole and then the changes, and deletes the name that went meanwhile (every name managed:
/// the follower remembers what the leader may have written).
#[test]
fn only_the_lease_holder_writes_and_another_takes_over_when_it_is_killed() {
    let bed = Bed::new("upd-lead");
    let api = FakeApi::start(Some(&bed.ns));
    api.apply(
        Kind::EndpointSlice,
        api_server_slice("IPv4", "kubernetes-a", &["198.18.0.11"]),
    );
    let records =
        bed.records("      api: [198.18.1.1, 198.18.1.2]\n      web.ingress: 198.18.2.1\n");
    bed.dir.write("update-key", &bed.key.secret);
    let config = bed.dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: k8s.example\nkubernetes:\n  apiServer: {url}\n\
             endpointSlices:\n  - zone: k8s.example\n    hostnames: [api]\n\
             leaderElection:\n  namespace: hostport-dns\n  leaseName: dns-writer\n\
             transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/update-key\n\
             update:\n  - server: {BIND}\n    zone: {ZONE}\n    source: {SOURCE}\n    key: {KEY}\n",
            url = api.url(),
            dir = bed.dir.path.display()
        ),
    );
    let agent = |port: u16, name: &str| bed.agent_as(&config, &records, port, name);
    let holder = || {
        api.object(Kind::Lease, "hostport-dns", "dns-writer")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
            .filter(|h| !h.is_empty())
    };
    let a = agent(1053, "agent-a");
    let b = agent(1054, "agent-b");
    bed.wait_for("api", "A", &["198.18.1.1", "198.18.1.2"]);
    bed.wait_for("web.ingress", "A", &["198.18.2.1"]);
    let first = holder().expect("a holder");
    let (leader, follower) = if first.starts_with("agent-a_") {
        (a, b)
    } else {
        (b, a)
    };
    let applied = |agent: &Agent| {
        agent.metric(
            "hostport_dns_update_total",
            &[("target", TARGET), ("result", "applied")],
        )
    };
    let in_sync =
        |agent: &Agent| agent.metric("hostport_dns_update_in_sync", &[("target", TARGET)]);
    eventually("the holder to report the target in sync", 10, || {
        in_sync(&leader) == 1.0
    });
    assert!(applied(&leader) >= 1.0, "{}", leader.metrics());
    assert_eq!(applied(&follower), 0.0, "the follower sent nothing");
    assert_eq!(in_sync(&follower), 0.0);
    let updates_so_far = bed.bind.update_lines().len();
    assert!(updates_so_far >= 2, "{}", bed.bind.log());

    // Killed (SIGKILL): nothing is released; the follower takes the lease once it expires and
    // writes the name whole, then the change that came meanwhile.
    drop(leader);
    bed.records("      api: 198.18.1.3\n");
    eventually("the follower to take the lease", 40, || {
        holder().is_some_and(|h| h != first)
    });
    bed.wait_for("api", "A", &["198.18.1.3"]);
    bed.wait_for("web.ingress", "A", &[]);
    eventually("the new holder to report the target in sync", 10, || {
        in_sync(&follower) == 1.0
    });
    assert!(applied(&follower) >= 1.0, "{}", follower.metrics());
    bed.wait_for("www", "A", &["198.18.9.2"]);
}

/// `check-config` (as `run`) refuses a target whose source is not served, with one line naming
/// the entry; with the record file serving it, the same configuration is valid.
#[test]
fn an_update_source_must_be_served() {
    let dir = TempDir::new("upd-check");
    dir.write("update-key", &TsigKey::test(KEY).secret);
    let config = dir.write(
        "agent.yaml",
        &format!(
            "transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/update-key\n\
             update:\n  - server: {BIND}\n    zone: {ZONE}\n    source: {SOURCE}\n    key: {KEY}\n",
            dir = dir.path.display()
        ),
    );
    let check = |records: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(hostport_dns_tests::agent::binary());
        cmd.arg("check-config").arg(&config);
        if let Some(records) = records {
            cmd.arg("--records").arg(records);
        }
        cmd.output().expect("run check-config")
    };
    let out = check(None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("update[0].source: zone prod.example. is not served"),
        "{stderr}"
    );
    let records = dir.write(
        "records.yaml",
        &format!("zones:\n  - name: {SOURCE}\n    records:\n      api: 198.18.1.1\n"),
    );
    let out = check(Some(&records));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
