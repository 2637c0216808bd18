//! Zone transfers to real secondaries: knotd, NSD and BIND transfer every zone from hostport-dns
//! (AXFR, then IXFR after changes), learn of changes by NOTIFY, and answer the new records;
//! transfers with a wrong key, from outside the ACL and over UDP are refused as the RFCs say;
//! two agents give the same serials, and a secondary of both never goes backwards through their
//! restarts; the primary shows the serial each secondary holds, and the alert on a secondary
//! left behind holds for a stopped one, in a real Prometheus.

use std::{collections::BTreeMap, net::SocketAddr};

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    book,
    clients::{kdig, soa_serial},
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::NetNs,
    prometheus::Prometheus,
    require_root,
    secondary::{Flavor, Secondary, TsigKey},
    workspace_root,
};

const ZONE: &str = "prod.coreha.example.";
/// The reverse zone of the pods' addresses (198.18.0.0/24).
const REVERSE: &str = "0.18.198.in-addr.arpa.";
const KEY: &str = "transfer-key";
const KNOT: &str = "127.0.0.1:5300";
const NSD: &str = "127.0.0.1:5301";
const BIND: &str = "127.0.0.1:5302";

/// A namespace with the fake API server and the agent's files.
struct Bed {
    ns: NetNs,
    api: FakeApi,
    dir: TempDir,
    key: TsigKey,
}

impl Bed {
    fn new(tag: &str) -> Self {
        require_root();
        let ns = NetNs::new(tag);
        let api = FakeApi::start(Some(&ns));
        let dir = TempDir::new(tag);
        let key = TsigKey::test(KEY);
        dir.write("tsig-key", &key.secret);
        Self { ns, api, dir, key }
    }

    /// The agent's configuration: the pods of the zone, transfers to 127.0.0.1 with the key,
    /// NOTIFY of both zones to `notify` (a derived reverse zone is NOTIFYed only when listed).
    fn config(&self, notify: &[&str]) -> std::path::PathBuf {
        let notify: Vec<String> = notify
            .iter()
            .map(|a| format!("{{address: \"{a}\", key: {KEY}, zones: [{ZONE}, {REVERSE}]}}"))
            .collect();
        let text = format!(
            "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {api}\npods:\n  - zone: {ZONE}\n\
             transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/tsig-key\n  \
             allow:\n    - from: 127.0.0.1\n      key: {KEY}\n  notify: [{notify}]\n",
            api = self.api.url(),
            dir = self.dir.path.display(),
            notify = notify.join(", "),
        );
        self.dir
            .write(&format!("agent-{}.yaml", notify.len()), &text)
    }

    fn pod(&self, i: usize, ip: &str) {
        let pod = PodSpec::ingress(
            &format!("nginx-{i}"),
            "ingress",
            "web",
            &format!("cp-{i}"),
            ip,
        );
        self.api.apply(Kind::Pod, pod.to_json());
    }

    /// An agent on `port` (userspace only: two agents share the namespace's lo) with its
    /// serials in `serials`.
    fn agent(&self, config: &std::path::Path, port: u16, serials: &str) -> Agent {
        self.agent_with(config, port, serials, &[])
    }

    /// [`Bed::agent`] with more arguments.
    fn agent_with(
        &self,
        config: &std::path::Path,
        port: u16,
        serials: &str,
        more: &[&str],
    ) -> Agent {
        let serials = self.dir.path.join(serials);
        let port = port.to_string();
        let mut args = vec![
            "--config",
            config.to_str().expect("UTF-8"),
            "--xdp-mode",
            "off",
            "--port",
            &port,
            "--serials",
            serials.to_str().expect("UTF-8"),
        ];
        args.extend_from_slice(more);
        Agent::start_with_metrics(&self.ns, &metrics_addr(&port), &args)
    }

    fn secondary(&self, flavor: Flavor, addr: &str, primaries: &[u16]) -> Secondary {
        let primaries: Vec<SocketAddr> = primaries
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        Secondary::start(
            flavor,
            &self.ns,
            addr.parse().expect("an address"),
            &primaries,
            &[ZONE, REVERSE],
            &self.key,
        )
    }

    /// The zone's records as an AXFR from the agent on `port` carries them, sorted, the SOA
    /// first (once).
    fn axfr(&self, port: u16, zone: &str) -> Vec<String> {
        let out = self
            .ns
            .command("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &port.to_string(),
                "-y",
                &self.key.kdig_arg(),
            ])
            .args(["+onesoa", "+nocmd", "+nostats", "+nocomments", zone, "AXFR"])
            .output()
            .expect("run dig");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut records: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with(';'))
            .filter(|l| l.split_whitespace().nth(3) != Some("TSIG"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        let soa = records.iter().position(|r| r.contains(" SOA "));
        let soa = soa.map(|i| records.remove(i));
        records.sort();
        records.dedup();
        soa.into_iter().chain(records).collect()
    }

    /// The zone's serial as the agent on `port` answers it (waiting for its first table: a
    /// restarted agent answers SERVFAIL until its watches have listed).
    fn serial_at(&self, port: u16) -> u32 {
        let mut serial = None;
        eventually(&format!("the agent on {port} answers the SOA"), 20, || {
            let reply = kdig(&self.ns, "127.0.0.1", port, &[ZONE, "SOA"]);
            serial = reply
                .answer
                .first()
                .and_then(|soa| soa.data.split_whitespace().nth(2)?.parse().ok());
            serial.is_some()
        });
        serial.expect("a serial")
    }
}

fn web() -> String {
    format!("web.ingress.{ZONE}")
}

fn wait_for(secondary: &Secondary, addresses: &[&str]) {
    let want: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = secondary.addresses(&web());
        if now == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{:?} answers {now:?}, not {want:?}, after 20 s; its log:\n{}",
            secondary.flavor,
            secondary.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `flavor` as the only secondary of an agent: it bootstraps both zones by AXFR, then follows
/// two pod changes by NOTIFY and IXFR alone, and answers the new records.
fn follows_pod_changes(flavor: Flavor, addr: &str) {
    let bed = Bed::new(match flavor {
        Flavor::Knot => "xfr-knot",
        Flavor::Nsd => "xfr-nsd",
        Flavor::Bind => "xfr-bind",
    });
    bed.pod(0, "198.18.0.11");
    let config = bed.config(&[addr]);
    let agent = bed.agent(&config, 1053, "serials.json");
    let secondary = bed.secondary(flavor, addr, &[1053]);
    wait_for(&secondary, &["198.18.0.11"]);
    // The reverse zone came along.
    eventually("the reverse zone is transferred", 20, || {
        secondary.serial(REVERSE).is_some()
    });
    assert_eq!(secondary.serial(ZONE), Some(bed.serial_at(1053)));
    let first = bed.serial_at(1053);
    let count = |kind: &str, result: &str| {
        agent.metric(
            "hostport_dns_transfers_total",
            &[("type", kind), ("result", result)],
        )
    };
    let bootstrap = count("axfr", "axfr") + count("ixfr", "axfr_fallback");
    assert_eq!(
        bootstrap,
        2.0,
        "one whole transfer per zone:\n{}",
        agent.metrics()
    );
    // A pod joins, another leaves: each change reaches the secondary by NOTIFY and IXFR.
    bed.pod(1, "198.18.0.12");
    wait_for(&secondary, &["198.18.0.11", "198.18.0.12"]);
    bed.api.delete(Kind::Pod, "ingress", "nginx-0");
    wait_for(&secondary, &["198.18.0.12"]);
    eventually("the secondary has the agent's serial", 10, || {
        secondary.serial(ZONE) == Some(bed.serial_at(1053))
    });
    let last = bed.serial_at(1053);
    assert!(
        last.wrapping_sub(first) > 0 && last.wrapping_sub(first) < 1 << 31,
        "the serial went from {first} to {last}"
    );
    // Incremental from then on: no whole zone was sent again.
    assert!(count("ixfr", "ixfr") >= 2.0, "{}", agent.metrics());
    assert_eq!(
        count("axfr", "axfr") + count("ixfr", "axfr_fallback"),
        bootstrap,
        "{}\n{}",
        agent.metrics(),
        secondary.log()
    );
    assert!(
        agent.metric("hostport_dns_notify_total", &[("result", "acknowledged")]) >= 4.0,
        "{}",
        agent.metrics()
    );
}

#[test]
fn knotd_follows_pod_changes_by_notify_and_ixfr() {
    follows_pod_changes(Flavor::Knot, KNOT);
}

#[test]
fn nsd_follows_pod_changes_by_notify_and_ixfr() {
    follows_pod_changes(Flavor::Nsd, NSD);
}

#[test]
fn bind_follows_pod_changes_by_notify_and_ixfr() {
    follows_pod_changes(Flavor::Bind, BIND);
}

#[test]
fn wrong_keys_strangers_and_udp_are_refused_as_the_rfcs_say() {
    let bed = Bed::new("xfr-refused");
    bed.pod(0, "198.18.0.11");
    let config = bed.config(&[]);
    let agent = bed.agent(&config, 1053, "serials.json");
    // Until the pods are listed the zone is pending and every transfer gets SERVFAIL (a loaded
    // machine lists later than the first kdig runs).
    eventually("the agent to be ready", 30, || {
        agent.http_get("/readyz").0 == 200
    });
    let ns = &bed.ns;
    // kdig's whole output, its errors included (it exits non-zero on them).
    let kdig_text = |args: &[&str]| {
        let out = ns
            .command("kdig")
            .args(["@127.0.0.1", "-p", "1053", "+retry=0", "+timeout=3"])
            .args(args)
            .output()
            .expect("run kdig");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text
    };
    // The right key: the zone, signed (kdig checks the signatures of every message).
    let good = kdig_text(&["+tcp", "-y", &bed.key.kdig_arg(), ZONE, "AXFR"]);
    assert!(
        good.contains("198.18.0.11") && good.contains("TSIG"),
        "{good}"
    );
    // Another secret under the key's name: NOTAUTH, BADSIG (the rcode is checked in the
    // unit tests; kdig names the TSIG error).
    let wrong_secret =
        format!("hmac-sha256:{KEY}:c2VjcmV0IHRoYXQgaXMgbm90IHRoZSBrZXkncyBzZWNyZXQ=");
    let bad_sig = kdig_text(&["+tcp", "-y", &wrong_secret, ZONE, "AXFR"]);
    assert!(bad_sig.contains("BADSIG"), "{bad_sig}");
    // A key the server does not know: NOTAUTH, BADKEY.
    let unknown = format!("hmac-sha256:other-key:{}", bed.key.secret);
    let bad_key = kdig_text(&["+tcp", "-y", &unknown, ZONE, "AXFR"]);
    assert!(bad_key.contains("BADKEY"), "{bad_key}");
    // No key where the ACL wants one, and the right key from outside the ACL: REFUSED.
    let unsigned = kdig_text(&["+tcp", ZONE, "AXFR"]);
    assert!(unsigned.contains("REFUSED"), "{unsigned}");
    let stranger = kdig_text(&[
        "+tcp",
        "-b",
        "127.0.0.9",
        "-y",
        &bed.key.kdig_arg(),
        ZONE,
        "AXFR",
    ]);
    assert!(stranger.contains("REFUSED"), "{stranger}");
    // AXFR over UDP is not a thing: NOTIMP. IXFR over UDP gets the SOA alone (RFC 1995 §2).
    let udp_axfr = kdig_text(&["+notcp", "-y", &bed.key.kdig_arg(), ZONE, "AXFR"]);
    assert!(
        udp_axfr.contains("NOTIMPL") && udp_axfr.contains("(UDP)"),
        "{udp_axfr}"
    );
    let udp_ixfr = kdig_text(&["+notcp", "-y", &bed.key.kdig_arg(), ZONE, "IXFR=1"]);
    let soa_lines = udp_ixfr.lines().filter(|l| l.contains("\tSOA\t")).count();
    assert!(
        soa_lines == 1 && udp_ixfr.contains("(UDP)") && !udp_ixfr.contains("198.18.0.11"),
        "{udp_ixfr}"
    );
    // A zone not served here: NOTAUTH.
    let elsewhere = kdig_text(&["+tcp", "-y", &bed.key.kdig_arg(), "example.org.", "AXFR"]);
    assert!(elsewhere.contains("NOTAUTH"), "{elsewhere}");
}

/// The transfer ACL is decided by the most specific entry that holds the client (a broad entry
/// without a key does not cancel a narrower entry's key), and transfers over UDP and signed
/// queries pass the client allow-list like every query: from outside it (drop mode) they get no
/// answer at all, are counted, and log nothing at info. Any signed query gets a signed answer.
#[test]
fn the_most_specific_acl_entry_decides_and_udp_transfers_and_signed_queries_pass_the_gate() {
    let bed = Bed::new("xfr-gate");
    bed.pod(0, "198.18.0.11");
    let text = format!(
        "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {api}\npods:\n  - zone: {ZONE}\n\
         clients:\n  allow: [127.0.0.1/32, 127.0.0.2/32]\n  outside: drop\n\
         transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/tsig-key\n  \
         allow:\n    - from: 127.0.0.0/8\n    - from: 127.0.0.1/32\n      key: {KEY}\n",
        api = bed.api.url(),
        dir = bed.dir.path.display(),
    );
    let config = bed.dir.write("agent-gate.yaml", &text);
    let agent = bed.agent(&config, 1053, "serials.json");
    bed.serial_at(1053);
    let ns = &bed.ns;
    let kdig_text = |source: &str, args: &[&str]| {
        let out = ns
            .command("kdig")
            .args([
                "@127.0.0.1",
                "-p",
                "1053",
                "+retry=0",
                "+timeout=2",
                "-b",
                source,
            ])
            .args(args)
            .output()
            .expect("run kdig");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text
    };
    let key = bed.key.kdig_arg();
    // 127.0.0.1: its /32 wants the key, whatever the /8 says.
    let unsigned = kdig_text("127.0.0.1", &["+tcp", ZONE, "AXFR"]);
    assert!(unsigned.contains("REFUSED"), "{unsigned}");
    let signed = kdig_text("127.0.0.1", &["+tcp", "-y", &key, ZONE, "AXFR"]);
    assert!(
        signed.contains("198.18.0.11") && signed.contains("TSIG"),
        "{signed}"
    );
    // 127.0.0.2: only the /8 holds it, unsigned is fine.
    let broad = kdig_text("127.0.0.2", &["+tcp", ZONE, "AXFR"]);
    assert!(broad.contains("198.18.0.11"), "{broad}");
    // A signed query of any type gets a signed answer (kdig checks the signature).
    let signed_a = kdig_text("127.0.0.1", &["-y", &key, &web(), "A"]);
    assert!(
        signed_a.contains("198.18.0.11")
            && signed_a.contains("TSIG")
            && !signed_a.contains("failed"),
        "{signed_a}"
    );
    let not_allowed = |agent: &Agent| {
        agent.metric(
            "hostport_dns_client_policy",
            &[("path", "userspace"), ("decision", "not_allowed")],
        )
    };
    let before = not_allowed(&agent);
    // 127.0.0.9 is outside the client allow-list (drop): nothing, whatever it asks over UDP.
    let outsider = [
        kdig_text("127.0.0.9", &["+notcp", "-y", &key, ZONE, "AXFR"]),
        kdig_text("127.0.0.9", &["+notcp", "-y", &key, ZONE, "IXFR=1"]),
        kdig_text("127.0.0.9", &["+notcp", ZONE, "AXFR"]),
        kdig_text("127.0.0.9", &["+notcp", "-y", &key, ZONE, "SOA"]),
        kdig_text("127.0.0.9", &["+notcp", ZONE, "SOA"]),
    ];
    for reply in &outsider {
        assert!(
            !reply.contains("->>HEADER<<-") && !reply.contains("status"),
            "answered: {reply}"
        );
    }
    let counted = not_allowed(&agent) - before;
    assert!(counted >= outsider.len() as f64, "counted {counted}");
    let logs = agent.logs();
    let about_outsider = logs
        .lines()
        .filter(|l| l.contains("127.0.0.9") && !l.contains("\"DEBUG\""))
        .collect::<Vec<_>>();
    assert!(
        about_outsider.is_empty(),
        "no line per packet: {about_outsider:#?}"
    );
}

/// A rotated TSIG key (its Secret's file rewritten, as the kubelet does) is taken without a
/// restart, as the cookie secrets are: the new secret signs, the old one gets BADSIG.
#[test]
fn a_rotated_tsig_key_is_taken_without_a_restart() {
    let bed = Bed::new("xfr-rotate");
    bed.pod(0, "198.18.0.11");
    let config = bed.config(&[]);
    let agent = bed.agent(&config, 1053, "serials.json");
    bed.serial_at(1053);
    let ns = &bed.ns;
    let axfr = |key: &str| {
        let out = ns
            .command("kdig")
            .args(["@127.0.0.1", "-p", "1053", "+retry=0", "+timeout=3", "+tcp"])
            .args(["-y", key, ZONE, "AXFR"])
            .output()
            .expect("run kdig");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text
    };
    let old = bed.key.kdig_arg();
    assert!(axfr(&old).contains("198.18.0.11"), "the key in use signs");
    // base64 of 32 bytes "the rotated transfer key secret!"
    let rotated = TsigKey {
        name: KEY.into(),
        secret: "dGhlIHJvdGF0ZWQgdHJhbnNmZXIga2V5IHNlY3JldCE=".into(),
    };
    bed.dir.write("tsig-key", &rotated.secret);
    eventually("the rotated secret signs", 30, || {
        axfr(&rotated.kdig_arg()).contains("198.18.0.11")
    });
    let refused = axfr(&old);
    assert!(refused.contains("BADSIG"), "{refused}");
    assert!(
        agent.logs().contains("TSIG keys reloaded"),
        "{}",
        agent.logs()
    );
}

#[test]
fn two_agents_give_the_same_serials_and_a_secondary_of_both_never_goes_back() {
    let bed = Bed::new("xfr-two");
    bed.pod(0, "198.18.0.11");
    bed.pod(1, "198.18.0.12");
    let config = bed.config(&[KNOT]);
    let ports = [1053, 1054];
    let files = ["serials-a.json", "serials-b.json"];
    let mut agents = [
        Some(bed.agent(&config, ports[0], files[0])),
        Some(bed.agent(&config, ports[1], files[1])),
    ];
    let knot = bed.secondary(Flavor::Knot, KNOT, &ports);
    let mut addresses = vec!["198.18.0.11".to_owned(), "198.18.0.12".to_owned()];
    let converge = |addresses: &[String]| {
        let want: Vec<&str> = addresses.iter().map(String::as_str).collect();
        wait_for(&knot, &want);
    };
    converge(&addresses);
    assert_eq!(bed.serial_at(ports[0]), bed.serial_at(ports[1]));
    // Each round: one agent stops, a pod joins (and one leaves every other round, last: a list
    // does not show a deletion), the other stops and the first comes back alone on its serials file; it
    // must not give the secondary a serial below the one it holds. Then another change with
    // only that one up, and the other comes back: both agree again.
    for round in 0..4usize {
        let (one, other) = (round % 2, 1 - round % 2);
        agents[one] = None;
        let ip = format!("198.18.0.{}", 20 + round);
        bed.pod(20 + round, &ip);
        addresses.push(ip);
        addresses.sort();
        if round % 2 == 1 {
            let (name, ip) = if round == 1 {
                ("nginx-0", "198.18.0.11")
            } else {
                ("nginx-1", "198.18.0.12")
            };
            bed.api.delete(Kind::Pod, "ingress", name);
            addresses.retain(|a| a != ip);
        }
        converge(&addresses);
        let held = knot.serial(ZONE).expect("a serial");
        agents[other] = None;
        agents[one] = Some(bed.agent(&config, ports[one], files[one]));
        let serial = bed.serial_at(ports[one]);
        assert!(
            !serial_gt(held, serial),
            "round {round}: the restarted agent gives {serial}, below the {held} the secondary holds"
        );
        let ip = format!("198.18.0.{}", 40 + round);
        bed.pod(40 + round, &ip);
        addresses.push(ip);
        addresses.sort();
        converge(&addresses);
        agents[other] = Some(bed.agent(&config, ports[other], files[other]));
        eventually("both agents give the same serial", 10, || {
            bed.serial_at(ports[0]) == bed.serial_at(ports[1])
        });
        assert_eq!(knot.serial(ZONE), Some(bed.serial_at(ports[0])));
        // One serial, one content: where both agents give a zone the same serial, their
        // transfers of it are the same.
        for zone in [ZONE, REVERSE] {
            let (a, b) = (bed.axfr(ports[0], zone), bed.axfr(ports[1], zone));
            assert!(a.len() > 2 && b.len() > 2, "{zone}: {a:?} {b:?}");
            if a.first() == b.first() {
                assert_eq!(a, b, "round {round}: {zone} at one serial, two contents");
            }
        }
    }
}

/// The zone of the record file in [`every_serial_names_one_content_through_record_file_changes_restarts_and_relists`].
const STATIC: &str = "static.coreha.example.";

/// What each zone's AXFR carried at each serial, from any agent: one serial must name one
/// content, whichever agent gave it.
struct Contents {
    zones: &'static [&'static str],
    seen: BTreeMap<(String, u32), (u16, Vec<String>)>,
}

impl Contents {
    fn new(zones: &'static [&'static str]) -> Self {
        Self {
            zones,
            seen: BTreeMap::new(),
        }
    }

    /// Transfers every zone from the agent on `port` and checks each against what any agent
    /// gave before at the same serial.
    fn observe(&mut self, bed: &Bed, port: u16, step: &str) {
        for &zone in self.zones {
            let records = bed.axfr(port, zone);
            let serial: u32 = records
                .first()
                .and_then(|soa| soa.split_whitespace().nth(6)?.parse().ok())
                .unwrap_or_else(|| panic!("{step}: {zone} from {port} has no SOA: {records:?}"));
            match self.seen.get(&(zone.to_owned(), serial)) {
                Some((first, before)) => assert_eq!(
                    before, &records,
                    "{step}: {zone} at serial {serial}: the agent on {first} gave one content, the one on {port} another"
                ),
                None => {
                    self.seen.insert((zone.to_owned(), serial), (port, records));
                }
            }
        }
    }
}

/// The record file of the static zone with one address.
fn static_records(address: &str) -> String {
    format!("zones:\n  - name: {STATIC}\n    ttl: 5\n    records:\n      www: {address}\n")
}

/// Waits until the agent on `port` transfers `zone` with `text` in it.
fn wait_for_transfer(bed: &Bed, port: u16, zone: &str, text: &str) {
    eventually(&format!("{zone} from {port} to carry {text}"), 20, || {
        bed.axfr(port, zone).iter().any(|r| r.contains(text))
    });
}

#[test]
fn every_serial_names_one_content_through_record_file_changes_restarts_and_relists() {
    let bed = Bed::new("xfr-one");
    bed.pod(0, "198.18.0.11");
    bed.pod(1, "198.18.0.12");
    let text = std::fs::read_to_string(bed.config(&[KNOT])).expect("the configuration");
    let config = bed.dir.write(
        "agent-static.yaml",
        &text.replace(
            &format!("zones: [{ZONE}, {REVERSE}]"),
            &format!("zones: [{ZONE}, {REVERSE}, {STATIC}]"),
        ),
    );
    let records = bed.dir.write("records.yaml", &static_records("198.19.1.1"));
    let records = records.to_str().expect("UTF-8").to_owned();
    let ports = [1053, 1054];
    let files = ["serials-a.json", "serials-b.json"];
    let start = |i: usize| bed.agent_with(&config, ports[i], files[i], &["--records", &records]);
    let mut seen = Contents::new(&[ZONE, REVERSE, STATIC]);
    let primaries = ports.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
    let zones = [ZONE, REVERSE, STATIC];
    let knot = Secondary::start(
        Flavor::Knot,
        &bed.ns,
        KNOT.parse().expect("an address"),
        &primaries,
        &zones,
        &bed.key,
    );
    let mut held = Held::default();
    let mut a = Some(start(0));
    let mut b = Some(start(1));
    for port in ports {
        wait_for_transfer(&bed, port, ZONE, "198.18.0.12");
        seen.observe(&bed, port, "both started");
    }
    held.follow(&knot, &["198.18.0.11", "198.18.0.12"], "198.19.1.1");
    // B stops; A counts three record-file edits up and then takes a pod change: A's serials for
    // the edits must not be what B, back on the last file, gives the newer revision.
    drop(b.take());
    for n in 2..=4 {
        let address = format!("198.19.1.{n}");
        bed.dir.write("records.yaml", &static_records(&address));
        wait_for_transfer(&bed, ports[0], STATIC, &address);
        seen.observe(&bed, ports[0], &format!("edit {n} on A alone"));
        held.follow(&knot, &["198.18.0.11", "198.18.0.12"], &address);
    }
    bed.pod(20, "198.18.0.20");
    wait_for_transfer(&bed, ports[0], ZONE, "198.18.0.20");
    seen.observe(&bed, ports[0], "a pod added with A alone");
    let pods = ["198.18.0.11", "198.18.0.12", "198.18.0.20"];
    held.follow(&knot, &pods, "198.19.1.4");
    // A stops too, B comes back alone on the last edit: the secondary must take B's zones.
    drop(a.take());
    b = Some(start(1));
    wait_for_transfer(&bed, ports[1], ZONE, "198.18.0.20");
    seen.observe(&bed, ports[1], "B back on the last edit");
    bed.pod(22, "198.18.0.22");
    let pods = ["198.18.0.11", "198.18.0.12", "198.18.0.20", "198.18.0.22"];
    held.follow(&knot, &pods, "198.19.1.4");
    a = Some(start(0));
    wait_for_transfer(&bed, ports[0], ZONE, "198.18.0.22");
    seen.observe(&bed, ports[0], "A back");
    // Both relist (the history compacted: 410 Gone), then a pod change and an edit with both up.
    bed.api.compact();
    bed.pod(21, "198.18.0.21");
    bed.dir.write("records.yaml", &static_records("198.19.1.5"));
    for port in ports {
        wait_for_transfer(&bed, port, ZONE, "198.18.0.21");
        wait_for_transfer(&bed, port, STATIC, "198.19.1.5");
        seen.observe(&bed, port, "relisted, a pod and an edit");
    }
    let pods = [
        "198.18.0.11",
        "198.18.0.12",
        "198.18.0.20",
        "198.18.0.21",
        "198.18.0.22",
    ];
    held.follow(&knot, &pods, "198.19.1.5");
    // A stops, a pod leaves and the file changes with B alone, and A comes back.
    drop(a.take());
    bed.api.delete(Kind::Pod, "ingress", "nginx-0");
    bed.dir.write("records.yaml", &static_records("198.19.1.6"));
    wait_for_transfer(&bed, ports[1], STATIC, "198.19.1.6");
    eventually("B to drop the pod", 20, || {
        !bed.axfr(ports[1], ZONE)
            .iter()
            .any(|r| r.contains("198.18.0.11"))
    });
    seen.observe(&bed, ports[1], "a pod gone and an edit with B alone");
    let pods = &pods[1..];
    held.follow(&knot, pods, "198.19.1.6");
    a = Some(start(0));
    wait_for_transfer(&bed, ports[0], STATIC, "198.19.1.6");
    seen.observe(&bed, ports[0], "A back");
    seen.observe(&bed, ports[1], "A back");
    held.follow(&knot, pods, "198.19.1.6");
    drop((a, b));
}

/// The serials a secondary held, per zone: they must never go back.
#[derive(Default)]
struct Held(BTreeMap<&'static str, u32>);

impl Held {
    /// Waits until `knot` answers the pods' and the record file's addresses, then checks that
    /// none of its zones' serials went back.
    fn follow(&mut self, knot: &Secondary, pods: &[&str], static_address: &str) {
        wait_for(knot, pods);
        let www = format!("www.{STATIC}");
        eventually(
            &format!("the secondary to answer {static_address}"),
            20,
            || knot.addresses(&www) == [static_address],
        );
        for zone in [ZONE, REVERSE, STATIC] {
            let now = knot.serial(zone).expect("a serial");
            if let Some(before) = self.0.insert(zone, now) {
                assert!(
                    !serial_gt(before, now),
                    "{zone}: the secondary went from serial {before} back to {now}"
                );
            }
        }
    }
}

#[test]
fn a_relisting_agent_names_what_it_listed_not_a_change_after_the_list() {
    let bed = Bed::new("xfr-list");
    bed.pod(0, "198.18.0.11");
    let config = bed.config(&[]);
    let ports = [1053, 1054];
    let files = ["serials-a.json", "serials-b.json"];
    let start = |i: usize| bed.agent(&config, ports[i], files[i]);
    let mut seen = Contents::new(&[ZONE, REVERSE]);
    let mut a = Some(start(0));
    let b = start(1);
    for port in ports {
        wait_for_transfer(&bed, port, ZONE, "198.18.0.11");
        seen.observe(&bed, port, "both started");
    }
    // A stops and misses a pod; back, it lists, and another pod joins right after its list is
    // read, which no watch tells anyone of yet: A's serial must be that of what it listed, not
    // that of the revision after the list (B's serial for the newer content).
    drop(a.take());
    bed.pod(8, "198.18.0.18");
    wait_for_transfer(&bed, ports[1], ZONE, "198.18.0.18");
    seen.observe(&bed, ports[1], "a pod A missed");
    let pod = PodSpec::ingress("nginx-9", "ingress", "web", "cp-9", "198.18.0.19");
    bed.api.apply_after_next_list(Kind::Pod, pod.to_json());
    bed.api.hold_watches();
    a = Some(start(0));
    eventually("A's list and the pod after it", 20, || {
        !bed.api.applies_after_a_list()
    });
    bed.serial_at(ports[0]);
    seen.observe(&bed, ports[0], "A listed, the pod not watched yet");
    bed.api.release_watches();
    for port in ports {
        wait_for_transfer(&bed, port, ZONE, "198.18.0.19");
        seen.observe(&bed, port, "the pod watched");
    }
    drop((a, b));
}

/// `a` is greater than `b` in serial number arithmetic (RFC 1982).
fn serial_gt(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// The agent's metrics address in [`Bed::agent`] for `port`.
fn metrics_addr(port: impl std::fmt::Display) -> String {
    let port: u16 = port.to_string().parse().expect("a port");
    format!("127.0.0.1:{}", 9300 + port % 100)
}

/// `hostport_dns_secondary_serial` of `zone` for the secondary at 127.0.0.1 (0: none yet).
fn secondary_serial(agent: &Agent, zone: &str) -> f64 {
    agent.metric(
        "hostport_dns_secondary_serial",
        &[("zone", zone), ("secondary", "127.0.0.1")],
    )
}

fn zone_serial(agent: &Agent, zone: &str) -> f64 {
    agent.metric("hostport_dns_zone_serial", &[("zone", zone)])
}

/// The expression of the chart's alert on a secondary left behind, without its `offset`: the
/// alert waits for a serial 10 minutes old, which a test does not (promtool's rule tests check
/// the timing).
fn secondary_behind_expr() -> String {
    let path = workspace_root().join("deploy/chart/hostport-dns/rules/hostport-dns.rules.yaml");
    let text = std::fs::read_to_string(&path).expect("the rules");
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let expr = rules["groups"][0]["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .find(|r| r["alert"].as_str() == Some("HostportDnsSecondaryBehind"))
        .and_then(|r| r["expr"].as_str())
        .expect("the HostportDnsSecondaryBehind alert");
    assert!(expr.contains(" offset 10m"), "{expr}");
    expr.replace(" offset 10m", "")
}

/// Whether the alert's expression holds for the secondary at 127.0.0.1 on `zone`.
fn behind_in_prometheus(prometheus: &Prometheus, expr: &str, zone: &str) -> bool {
    prometheus.query(expr).iter().any(|r| {
        r["metric"]["secondary"].as_str() == Some("127.0.0.1")
            && r["metric"]["zone"].as_str() == Some(zone)
    })
}

/// Secondaries seen from the primary: a knotd secondary transfers both zones and the agent
/// shows it holding each zone's serial; stopped, it misses a change: it stays at the old serial,
/// below the zone's, and the alert's expression holds for it in a real Prometheus scraping the
/// agent; started again, it catches up and the expression no longer holds.
#[test]
fn the_primary_shows_each_secondarys_serial_and_the_alert_sees_one_left_behind() {
    let bed = Bed::new("xfr-behind");
    bed.pod(0, "198.18.0.11");
    let config = bed.config(&[KNOT]);
    let agent = bed.agent(&config, 1053, "serials.json");
    let prometheus = Prometheus::start(
        &bed.ns,
        SocketAddr::from(([127, 0, 0, 1], 9090)),
        &[&metrics_addr(1053)],
        &[],
    );
    let expr = secondary_behind_expr();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let knot = bed.secondary(Flavor::Knot, KNOT, &[1053]);
    wait_for(&knot, &["198.18.0.11"]);
    for zone in [ZONE, REVERSE] {
        eventually(
            &format!("the agent shows knotd holding {zone}'s serial"),
            20,
            || secondary_serial(&agent, zone) == zone_serial(&agent, zone),
        );
    }
    let old = bed.serial_at(1053);
    assert_eq!(zone_serial(&agent, ZONE), f64::from(old));
    assert_eq!(knot.serial(ZONE), Some(old));
    let when = agent.metric(
        "hostport_dns_secondary_serial_timestamp_seconds",
        &[("zone", ZONE), ("secondary", "127.0.0.1")],
    );
    assert!(when >= started.floor(), "{when} before {started}");
    // Stopped, it misses a change.
    drop(knot);
    bed.pod(1, "198.18.0.12");
    eventually("the zone's serial goes up", 20, || {
        zone_serial(&agent, ZONE) != f64::from(old)
    });
    assert_eq!(
        secondary_serial(&agent, ZONE),
        f64::from(old),
        "{}",
        agent.metrics()
    );
    eventually("Prometheus sees the secondary behind", 20, || {
        behind_in_prometheus(&prometheus, &expr, ZONE)
    });
    // Started again, it catches up.
    let knot = bed.secondary(Flavor::Knot, KNOT, &[1053]);
    wait_for(&knot, &["198.18.0.11", "198.18.0.12"]);
    for zone in [ZONE, REVERSE] {
        eventually(&format!("knotd catches up on {zone}"), 20, || {
            secondary_serial(&agent, zone) == zone_serial(&agent, zone)
        });
    }
    assert_eq!(knot.serial(ZONE), Some(bed.serial_at(1053)));
    eventually("Prometheus no longer sees it behind", 20, || {
        !behind_in_prometheus(&prometheus, &expr, ZONE)
            && !behind_in_prometheus(&prometheus, &expr, REVERSE)
    });
}

/// Zones of the record file whose addresses derive three reverse zones no secondary is
/// configured for.
const STATIC_RECORDS: &str = "zones:\n  - name: static.example\n    records:\n      \
    a: 198.19.1.1\n      b: 198.19.2.1\n      c: 198.19.3.1\n";
const STATIC_REVERSE: [&str; 3] = [
    "1.19.198.in-addr.arpa.",
    "2.19.198.in-addr.arpa.",
    "3.19.198.in-addr.arpa.",
];

/// The deploy guide's secondaries as it configures them: knotd of the zone and the pods' reverse
/// zone, NSD and BIND of the zone alone, each NOTIFY entry listing the zones its secondary
/// serves; the agent also serves a record file (a zone of its own) whose addresses derive three
/// reverse zones nobody follows. Through pod changes, every NOTIFY sent is acknowledged and none is retried (before
/// per-zone reverse serials, every reverse zone was sent to every secondary on every change);
/// the record file's reverse zones keep their serials while only pods change; knotd answers the
/// pods' PTR records and the reverse zone's serial the agent serves.
#[test]
fn the_deploy_guides_secondaries_get_only_the_notifies_they_take() {
    let bed = Bed::new("xfr-guide");
    bed.pod(0, "198.18.0.11");
    let records = bed.dir.write("records.yaml", STATIC_RECORDS);
    let text = std::fs::read_to_string(bed.config(&[])).expect("the configuration");
    let notify = format!(
        "[{{address: \"{KNOT}\", key: {KEY}, zones: [{ZONE}, {REVERSE}]}}, \
         {{address: \"{NSD}\", key: {KEY}, zones: [{ZONE}]}}, \
         {{address: \"{BIND}\", key: {KEY}, zones: [{ZONE}]}}]"
    );
    let config = bed.dir.write(
        "agent-guide.yaml",
        &text.replace("notify: []", &format!("notify: {notify}")),
    );
    // The secondaries first, configured as the guide shows: the NOTIFYs at the agents' start
    // find them listening.
    let [knot_conf, bind_conf, nsd_conf] = guide_secondaries(&bed.key);
    let start = |flavor, addr: &str, conf: &str| {
        let addr = addr.parse().expect("an address");
        Secondary::start_configured(flavor, &bed.ns, addr, conf, ZONE)
    };
    let knot = start(Flavor::Knot, KNOT, &knot_conf);
    let nsd = start(Flavor::Nsd, NSD, &nsd_conf);
    let bind = start(Flavor::Bind, BIND, &bind_conf);
    // The guide's two control-plane nodes.
    let records = records.to_str().expect("UTF-8");
    let agent = bed.agent_with(&config, 1053, "serials-a.json", &["--records", records]);
    let other = bed.agent_with(&config, 1054, "serials-b.json", &["--records", records]);
    let secondaries = [&knot, &nsd, &bind];
    for secondary in secondaries {
        wait_for(secondary, &["198.18.0.11"]);
    }
    let static_serials: Vec<f64> = STATIC_REVERSE
        .iter()
        .map(|zone| zone_serial(&agent, zone))
        .collect();
    assert!(
        static_serials.iter().all(|s| *s > 0.0),
        "{}",
        agent.metrics()
    );
    // Pod changes: one joins, another leaves.
    bed.pod(1, "198.18.0.12");
    for secondary in secondaries {
        wait_for(secondary, &["198.18.0.11", "198.18.0.12"]);
    }
    bed.api.delete(Kind::Pod, "ingress", "nginx-0");
    for secondary in secondaries {
        wait_for(secondary, &["198.18.0.12"]);
        eventually(
            &format!("{:?} has the agent's serial", secondary.flavor),
            10,
            || secondary.serial(ZONE) == Some(bed.serial_at(1053)),
        );
    }
    // knotd's copy of the reverse zone: the agent's serial and the pods' PTR records.
    eventually("knotd has the reverse zone's serial", 10, || {
        knot.serial(REVERSE).map(f64::from) == Some(zone_serial(&agent, REVERSE))
    });
    let ptr = |address: &str| -> Vec<String> {
        let reply = kdig(&bed.ns, "127.0.0.1", 5300, &[address, "PTR"]);
        reply.answer.into_iter().map(|rr| rr.data).collect()
    };
    let names = ptr("12.0.18.198.in-addr.arpa.");
    assert!(names.contains(&web()), "{names:?}");
    assert!(ptr("11.0.18.198.in-addr.arpa.").is_empty());
    let now: Vec<f64> = STATIC_REVERSE
        .iter()
        .map(|zone| zone_serial(&agent, zone))
        .collect();
    assert_eq!(
        now, static_serials,
        "the record file's reverse zones changed serial with the pods"
    );
    // A retry comes 1 s after an attempt without an acknowledgement: wait for any. A secondary
    // that does not take a zone answers its NOTIFY with an error rcode (REFUSED, NOTAUTH); one
    // slow to acknowledge on a loaded machine makes the agent send again, which is no refusal.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for agent in [&agent, &other] {
        let notified =
            |result: &str| agent.metric("hostport_dns_notify_total", &[("result", result)]);
        let logs = agent.logs();
        let refused: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("NOTIFY not acknowledged") && l.contains("answered"))
            .collect();
        assert!(
            refused.is_empty() && notified("failed") == 0.0,
            "NOTIFYs refused or given up:\n{}\n{}",
            refused.join("\n"),
            agent.metrics()
        );
        assert!(notified("acknowledged") >= 6.0, "{}", agent.metrics());
    }
}

/// The secondaries' configurations docs/src/secondaries.md shows ("Secondary configurations": Knot,
/// BIND, NSD, in that order), made to run here: the guide's two control-plane nodes become the
/// agents on 127.0.0.1 ports 1053 and 1054, its zones the test's, its secret the test key.
fn guide_secondaries(key: &TsigKey) -> [String; 3] {
    let blocks = book::blocks("secondaries.md", "### Secondary configurations");
    assert!(blocks.len() >= 3, "Knot, BIND and NSD blocks: {blocks:?}");
    let here = |conf: &str| {
        book::made_local(
            conf,
            &[
                ("192.0.2.11@1053", "127.0.0.1@1053"),
                ("192.0.2.12@1053", "127.0.0.1@1054"),
                ("192.0.2.11 port 1053", "127.0.0.1 port 1053"),
                ("192.0.2.12 port 1053", "127.0.0.1 port 1054"),
                ("192.0.2.11", "127.0.0.1"),
                ("192.0.2.12", "127.0.0.1"),
                ("ingress.prod.example.com.", ZONE),
                ("0.2.192.in-addr.arpa.", REVERSE),
                ("<base64 secret>", &key.secret),
            ],
        )
    };
    [here(&blocks[0]), here(&blocks[1]), here(&blocks[2])]
}

/// The serial of a NOTIFY of `zone` (opcode 4, the zone as its question, the SOA in its answer
/// section), or `None` for any other datagram.
fn notify_serial(datagram: &[u8], zone: &str) -> Option<u32> {
    use hickory_proto::{
        op::{Message, OpCode},
        rr::{Name, RData},
    };
    let message = Message::from_vec(datagram).ok()?;
    let apex = Name::from_ascii(zone).ok()?;
    let question = message.queries.first()?;
    if message.metadata.op_code != OpCode::Notify || question.name != apex {
        return None;
    }
    message
        .answers
        .iter()
        .find_map(|record| match &record.data {
            RData::SOA(soa) => Some(soa.serial),
            _ => None,
        })
}

/// The NOTIFYs of a zone a test's socket received: the newest serial's, each when it came.
#[derive(Default)]
struct Attempts {
    /// Every serial seen, in order.
    serials: Vec<u32>,
    arrivals: Vec<std::time::Instant>,
}

impl Attempts {
    /// A NOTIFY of `serial` came now: a newer serial starts its own attempts.
    fn arrived(&mut self, serial: u32) {
        if self.serials.last() != Some(&serial) {
            self.serials.push(serial);
            self.arrivals.clear();
        }
        self.arrivals.push(std::time::Instant::now());
    }
}

/// NOTIFY to a secondary that never answers: a socket bound in the test records when each
/// NOTIFY of the zone arrives. The attempts of one serial come 1, 2, 4, 8 and 16 s apart (the
/// last one's failure is counted after its 32 s wait, which the test does not sit through), and
/// the agent counts the five retries.
///
/// A newer serial replaces a NOTIFY being retried and starts its own attempts: the test follows
/// the newest serial's, so a publication the agent makes after it reported ready (a watch's
/// list arriving late on a loaded machine) is not read as a broken schedule.
#[test]
fn notify_to_a_deaf_secondary_is_retried_after_1_2_4_8_16_seconds() {
    use std::time::{Duration, Instant};
    const WAITS: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];
    let bed = Bed::new("xfr-deaf");
    bed.pod(0, "198.18.0.11");
    const DEAF: &str = "127.0.0.1:5399";
    let socket = bed
        .ns
        .run(|| std::net::UdpSocket::bind(DEAF).expect("bind the deaf secondary"));
    let config = bed.config(&[DEAF]);
    let agent = bed.agent(&config, 1053, "serials.json");
    // The schedule takes 31 s; a loaded machine starts it late and fires timers late, but it
    // always ends.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut attempts = Attempts::default();
    let mut buf = [0u8; 4096];
    while attempts.arrivals.len() < WAITS.len() + 1 && Instant::now() < deadline {
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .expect("a timeout");
        let Ok(len) = socket.recv(&mut buf) else {
            continue;
        };
        let Some(serial) = notify_serial(&buf[..len], ZONE) else {
            continue;
        };
        attempts.arrived(serial);
    }
    let Attempts { serials, arrivals } = attempts;
    let gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert_eq!(
        gaps.len(),
        WAITS.len(),
        "{} attempts of serial {serials:?} within 120 s, {gaps:?} apart",
        arrivals.len()
    );
    // From below, the bound a timer proves. From above, a loose one that still tells doubling
    // from faster growth: each retry is timed from the attempt before it, so a late timer
    // lengthens one gap, never the ones after it.
    for (gap, want) in gaps.iter().zip(WAITS) {
        assert!(
            *gap >= want - 0.05 && *gap < want * 2.0 + 1.0,
            "attempts {gaps:?} apart, not 1, 2, 4, 8, 16 s"
        );
    }
    let notified = |result: &str| agent.metric("hostport_dns_notify_total", &[("result", result)]);
    assert!(notified("retried") >= 5.0, "{}", agent.metrics());
}

/// NOTIFY to a secondary that refuses at once (a restarting secondary answers REFUSED for a
/// zone it has not loaded yet): each retry still waits its turn after the attempt before it
/// (1, 2, 4 s), rather than all going out within milliseconds. Bounds from below only: a wait
/// cannot be shorter than its timer, whatever the load.
#[test]
fn notify_refused_at_once_is_still_retried_on_its_schedule() {
    use std::time::{Duration, Instant};
    let bed = Bed::new("xfr-refuse");
    bed.pod(0, "198.18.0.11");
    const REFUSING: &str = "127.0.0.1:5398";
    let socket = bed
        .ns
        .run(|| std::net::UdpSocket::bind(REFUSING).expect("bind the refusing secondary"));
    let config = bed.config(&[REFUSING]);
    let _agent = bed.agent(&config, 1053, "serials.json");
    let mut attempts = Attempts::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 4096];
    // Four attempts of the zone's newest serial (a newer one starts its own): the first and
    // three retries.
    while attempts.arrivals.len() < 4 && Instant::now() < deadline {
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .expect("a timeout");
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Some(serial) = notify_serial(&buf[..len], ZONE) else {
            continue;
        };
        attempts.arrived(serial);
        // REFUSED, at once: the header echoed with QR set, RCODE 5, the question kept.
        let mut answer = buf[..len].to_vec();
        answer[2] |= 0x80;
        answer[3] = (answer[3] & 0xf0) | 5;
        socket.send_to(&answer, from).expect("answer REFUSED");
    }
    let Attempts { serials, arrivals } = attempts;
    assert_eq!(
        arrivals.len(),
        4,
        "four attempts of serial {serials:?} within a minute"
    );
    let gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    for (gap, want) in gaps.iter().zip([1.0, 2.0, 4.0]) {
        assert!(
            *gap >= want - 0.05,
            "attempts {gaps:?} apart: a refused NOTIFY was sent again before its turn (1, 2, 4 s)"
        );
    }
}

/// The catalog zone's name in the catalog tests.
const CATALOG: &str = "catalog.hostport.example.";
/// A zone of the configuration with static records, a member beside the pods' zone.
const STATIC_ZONE: &str = "static.coreha.example.";

impl Bed {
    /// The configuration of an agent publishing a catalog of its zones to `consumers`, each a
    /// catalog consumer (no `zones` of its own), and a second, static forward zone.
    fn catalog_config(&self, consumers: &[&str]) -> std::path::PathBuf {
        self.catalog_config_with(consumers, true, None)
    }

    /// [`Bed::catalog_config`] with or without the static zone, and with a grace period.
    fn catalog_config_with(
        &self,
        consumers: &[&str],
        with_static: bool,
        grace_seconds: Option<u64>,
    ) -> std::path::PathBuf {
        let notify: Vec<String> = consumers
            .iter()
            .map(|a| format!("{{address: \"{a}\", key: {KEY}, catalog: true}}"))
            .collect();
        let static_zone = if with_static {
            format!("  - name: {STATIC_ZONE}\n    records:\n      www: 198.18.3.3\n")
        } else {
            String::new()
        };
        let grace = grace_seconds
            .map(|s| format!("    graceSeconds: {s}\n"))
            .unwrap_or_default();
        let text = format!(
            "zones:\n  - name: {ZONE}\n    ttl: 5\n{static_zone}\
             kubernetes:\n  apiServer: {api}\npods:\n  - zone: {ZONE}\n\
             transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/tsig-key\n  \
             allow:\n    - from: 127.0.0.1\n      key: {KEY}\n  notify: [{notify}]\n  catalog:\n    zone: {CATALOG}\n{grace}",
            api = self.api.url(),
            dir = self.dir.path.display(),
            notify = notify.join(", "),
        );
        self.dir.write(
            &format!("agent-catalog-{with_static}-{grace_seconds:?}.yaml"),
            &text,
        )
    }

    /// knotd at `knot` and BIND at `bind`, each configured with the catalog alone, as
    /// docs/src/secondaries.md shows it ("Secondaries that configure themselves"): its blocks
    /// after the agent's, the primary made the agent on 127.0.0.1:1053.
    fn catalog_consumers(&self, knot: &str, bind: &str) -> Vec<Secondary> {
        let blocks = book::blocks(
            "secondaries.md",
            "## Secondaries that configure themselves (catalog zones)",
        );
        let [_agent, knot_conf, catalog_zones, bind_zones] = blocks.as_slice() else {
            panic!("the agent's, knotd's and BIND's two blocks: {blocks:?}");
        };
        let here = |conf: &str| {
            book::made_local(
                conf,
                &[
                    ("192.0.2.11@1053", "127.0.0.1@1053"),
                    ("192.0.2.11 port 1053", "127.0.0.1 port 1053"),
                    ("[192.0.2.11]", "[127.0.0.1]"),
                    ("catalog.prod.example.com.", CATALOG),
                    ("<base64 secret>", &self.key.secret),
                ],
            )
        };
        let (knot_conf, catalog_zones, bind_zones) =
            (here(knot_conf), here(catalog_zones), here(bind_zones));
        vec![
            Secondary::consume_catalog(
                Flavor::Knot,
                &self.ns,
                knot.parse().expect("an address"),
                &[&knot_conf],
                CATALOG,
            ),
            Secondary::consume_catalog(
                Flavor::Bind,
                &self.ns,
                bind.parse().expect("an address"),
                &[&catalog_zones, &bind_zones],
                CATALOG,
            ),
        ]
    }

    /// The serial of `zone` as the agent on `port` answers it, if it serves the zone.
    fn serial_of(&self, port: u16, zone: &str) -> Option<u32> {
        soa_serial(&self.ns, &format!("127.0.0.1:{port}"), zone)
    }

    /// The member zones the catalog served on `port` lists (its PTR targets), sorted.
    fn catalog_members(&self, port: u16) -> Vec<String> {
        let mut members: Vec<String> = self
            .axfr(port, CATALOG)
            .iter()
            .filter(|r| r.split_whitespace().nth(3) == Some("PTR"))
            .filter_map(|r| r.split_whitespace().nth(4).map(str::to_owned))
            .collect();
        members.sort();
        members
    }
}

/// The reverse zone (derived: a /24) of 198.18.`n`.0/24.
fn reverse_of(n: u8) -> String {
    format!("{n}.18.198.in-addr.arpa.")
}

/// Secondaries configured with the catalog alone (knotd interpreting it with a template per
/// group, BIND's `catalog-zones`) serve every zone the agent serves, the derived reverse zones
/// included, at the agent's serials, and answer as it does; a pod on a node in a new /24 makes
/// a new reverse zone that both serve, with its PTR, with no change on their side; and two
/// agents with the same configuration serve byte-identical catalogs.
#[test]
fn secondaries_configured_with_the_catalog_alone_serve_every_zone_and_new_ones() {
    use std::time::Instant;
    let bed = Bed::new("xfr-cat");
    bed.pod(0, "198.18.0.11");
    bed.pod(1, "198.18.1.11");
    const KNOT_CONSUMER: &str = "127.0.0.1:5320";
    const BIND_CONSUMER: &str = "127.0.0.1:5321";
    let config = bed.catalog_config(&[KNOT_CONSUMER, BIND_CONSUMER]);
    let agent = bed.agent(&config, 1053, "serials.json");
    let consumers = bed.catalog_consumers(KNOT_CONSUMER, BIND_CONSUMER);
    // The static zone's www (198.18.3.3) makes a reverse zone too.
    let members = [
        ZONE,
        STATIC_ZONE,
        &reverse_of(0),
        &reverse_of(1),
        &reverse_of(3),
    ]
    .map(str::to_owned);
    let mut listed = members.to_vec();
    listed.sort();
    assert_eq!(
        bed.catalog_members(1053),
        listed,
        "the catalog lists every zone"
    );
    let in_step = |secondary: &Secondary, zone: &str| {
        let ours = bed.serial_of(1053, zone);
        ours.is_some() && secondary.serial(zone) == ours
    };
    for secondary in &consumers {
        for zone in &members {
            eventually(
                &format!("{:?} serves {zone} at the agent's serial", secondary.flavor),
                60,
                || in_step(secondary, zone),
            );
        }
        assert_eq!(secondary.addresses(&web()), ["198.18.0.11", "198.18.1.11"]);
        assert_eq!(
            secondary.addresses(&format!("www.{STATIC_ZONE}")),
            ["198.18.3.3"]
        );
    }
    // New nodes in new /24s: each makes a reverse zone that the consumers pick up from the
    // catalog, with its PTR record.
    let ptr = |secondary: &Secondary, address: &str| -> Vec<String> {
        let reply = kdig(
            &bed.ns,
            &secondary.addr.ip().to_string(),
            secondary.addr.port(),
            &[address, "PTR"],
        );
        reply.answer.into_iter().map(|rr| rr.data).collect()
    };
    // Twenty of them, one after another; each consumer's time from the pod to the PTR it
    // answers (the note's figures).
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); consumers.len()];
    for n in 4..24u8 {
        let started = Instant::now();
        bed.pod(usize::from(n), &format!("198.18.{n}.11"));
        let zone = reverse_of(n);
        let host = format!("11.{zone}");
        let mut pending: Vec<usize> = (0..consumers.len()).collect();
        eventually(&format!("the consumers serve the new {zone}"), 60, || {
            pending.retain(|&i| {
                let secondary = &consumers[i];
                let done = in_step(secondary, &zone) && ptr(secondary, &host).contains(&web());
                if done {
                    times[i].push(started.elapsed().as_secs_f64());
                }
                !done
            });
            pending.is_empty()
        });
    }
    for (secondary, times) in consumers.iter().zip(&mut times) {
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "{:?}: {} new reverse zones, pod to PTR p50 {:.2} s, p99 {:.2} s",
            secondary.flavor,
            times.len(),
            at(0.5),
            at(0.99)
        );
    }
    assert!(
        agent.metric("hostport_dns_notify_total", &[("result", "failed")]) == 0.0,
        "{}",
        agent.metrics()
    );
    // Another agent with the same configuration: the same catalog, byte for byte.
    let other = bed.agent(&config, 1054, "serials-other.json");
    eventually("the second agent's catalog", 20, || {
        bed.serial_of(1054, CATALOG).is_some()
    });
    assert_eq!(bed.axfr(1054, CATALOG), bed.axfr(1053, CATALOG));
    drop(other);
}

/// Members leaving, as consumers see it: a derived reverse zone whose last pod went stays a
/// member, served empty, for its grace period and not a moment less (the time from the pod's
/// deletion to its removal is bounded from below, which no load can shorten), then leaves both
/// consumers; a forward zone removed from the configuration (the agent restarted without it)
/// leaves them at the next catalog.
#[test]
fn members_leave_the_consumers_a_derived_reverse_zone_only_after_its_grace() {
    use std::time::{Duration, Instant};
    const GRACE: u64 = 8;
    let bed = Bed::new("xfr-catgo");
    bed.pod(0, "198.18.0.11");
    bed.pod(1, "198.18.1.11");
    const KNOT_CONSUMER: &str = "127.0.0.1:5322";
    const BIND_CONSUMER: &str = "127.0.0.1:5323";
    let consumers_at = [KNOT_CONSUMER, BIND_CONSUMER];
    let config = bed.catalog_config_with(&consumers_at, true, Some(GRACE));
    let agent = bed.agent(&config, 1053, "serials.json");
    let consumers = bed.catalog_consumers(KNOT_CONSUMER, BIND_CONSUMER);
    let leaving = reverse_of(1);
    for secondary in &consumers {
        for zone in [STATIC_ZONE, leaving.as_str()] {
            eventually(&format!("{:?} serves {zone}", secondary.flavor), 60, || {
                secondary.serial(zone).is_some()
            });
        }
    }
    // The last pod of 198.18.1.0/24 goes.
    let deleted = Instant::now();
    bed.api.delete(Kind::Pod, "ingress", "nginx-1");
    eventually("the agent's PTR gone", 20, || {
        kdig(
            &bed.ns,
            "127.0.0.1",
            1053,
            &["11.1.18.198.in-addr.arpa.", "PTR"],
        )
        .answer
        .is_empty()
    });
    let pending = || agent.metric("hostport_dns_catalog_removals_pending", &[]);
    let member = || bed.catalog_members(1053).contains(&leaving);
    let mut removed_at = None;
    let deadline = Instant::now() + Duration::from_secs(GRACE + 60);
    while Instant::now() < deadline {
        if !member() {
            removed_at = Some(deleted.elapsed());
            break;
        }
        // While it is a member, the agent serves it, empty, and counts it held. (A check that
        // fails is a violation only if it is still a member after it: the grace may have just
        // ended, and it never comes back.)
        let served = bed.serial_of(1053, &leaving).is_some();
        let counted = pending() == 1.0;
        if !(served && counted) {
            assert!(
                !member(),
                "a held member: served {served}, counted {counted}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let removed_at = removed_at.expect("the emptied zone leaves the catalog");
    assert!(
        removed_at >= Duration::from_secs(GRACE),
        "left the catalog {removed_at:?} after its last pod, within its {GRACE} s grace"
    );
    assert_eq!(pending(), 0.0);
    for secondary in &consumers {
        eventually(
            &format!("{:?} drops {leaving}", secondary.flavor),
            60,
            || secondary.serial(&leaving).is_none(),
        );
    }
    // The static zone removed from the configuration: the restarted agent's catalog drops it.
    drop(agent);
    let without = bed.catalog_config_with(&consumers_at, false, Some(GRACE));
    let _agent = bed.agent(&without, 1053, "serials.json");
    for secondary in &consumers {
        eventually(
            &format!("{:?} drops {STATIC_ZONE}", secondary.flavor),
            60,
            || secondary.serial(STATIC_ZONE).is_none(),
        );
        assert!(
            secondary.serial(ZONE).is_some(),
            "{:?} keeps {ZONE}",
            secondary.flavor
        );
    }
}

/// A record file of `zones` forward zones (`z<i>.many.example.`), each with a `www` record,
/// `www` of zone 0 at `first`.
fn many_zones(zones: usize, first: &str) -> String {
    let mut text = String::from("zones:\n");
    for i in 0..zones {
        let address = if i == 0 {
            first.to_owned()
        } else {
            format!("198.18.200.{}", i % 250 + 1)
        };
        text.push_str(&format!(
            "  - name: z{i}.many.example.\n    records:\n      www: {address}\n"
        ));
    }
    text
}

/// A catalog of 1,000 forward zones (a record file's): it lists every one, its serial stays
/// while a member's records change and moves when a member comes; the note's figures (its
/// size on the wire) are printed.
#[test]
fn a_catalog_of_1000_zones_moves_its_serial_only_with_its_membership() {
    use std::time::Instant;
    let bed = Bed::new("xfr-cat1k");
    let records = bed
        .dir
        .write("records.yaml", &many_zones(1000, "198.18.201.1"));
    let config = bed.dir.write(
        "agent.yaml",
        &format!(
            "transfer:\n  keys:\n    - name: {KEY}\n      secretFile: {dir}/tsig-key\n  \
             allow:\n    - from: 127.0.0.1\n      key: {KEY}\n  catalog:\n    zone: {CATALOG}\n    graceSeconds: 0\n",
            dir = bed.dir.path.display(),
        ),
    );
    let records_arg = records.to_str().expect("UTF-8").to_owned();
    let _agent = bed.agent_with(&config, 1053, "serials.json", &["--records", &records_arg]);
    eventually("the catalog served", 30, || {
        bed.serial_of(1053, CATALOG).is_some()
    });
    let started = Instant::now();
    let catalog = bed.axfr(1053, CATALOG);
    let took = started.elapsed();
    // The forward members (the two /24s of the addresses are members too).
    let forward = |records: &[String]| {
        records
            .iter()
            .filter(|r| r.contains(" PTR ") && r.ends_with(".many.example."))
            .count()
    };
    let members = forward(&catalog);
    let bytes: usize = catalog.iter().map(String::len).sum();
    eprintln!(
        "catalog of {members} zones: {} records, {bytes} bytes of presentation text, AXFR by dig in {:.0} ms",
        catalog.len(),
        took.as_secs_f64() * 1e3
    );
    assert_eq!(members, 1000);
    let serial = bed.serial_of(1053, CATALOG).expect("a serial");
    // A member's records change: its own serial moves, the catalog's does not.
    let zone0 = "z0.many.example.";
    let before = bed.serial_of(1053, zone0).expect("zone 0 served");
    let replace = |text: &str| {
        let fresh = bed.dir.write("records.yaml.new", text);
        std::fs::rename(&fresh, &records).expect("rename the record file into place");
    };
    replace(&many_zones(1000, "198.18.201.2"));
    eventually("zone 0's new serial", 30, || {
        bed.serial_of(1053, zone0).is_some_and(|s| s != before)
    });
    assert_eq!(
        bed.serial_of(1053, CATALOG),
        Some(serial),
        "a member's change"
    );
    // A member comes: the catalog's serial moves, and it lists 1,001.
    replace(&many_zones(1001, "198.18.201.2"));
    eventually("the catalog's new serial", 30, || {
        bed.serial_of(1053, CATALOG).is_some_and(|s| s != serial)
    });
    assert_eq!(forward(&bed.axfr(1053, CATALOG)), 1001);
}
