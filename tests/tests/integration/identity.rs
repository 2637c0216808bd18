//! Which node answered: NSID (RFC 5001) and the CHAOS names `id.server.` and `hostname.bind.`
//! (RFC 4892), asked with dig and kdig of an agent whose XDP program runs on lo. Both are off
//! unless configured.

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, metric_sum, records_on_lo},
    clients::dig,
    netns::NetNs,
    require_root,
};

const RECORDS: &str =
    "zones:\n  - name: prod.coreha.example\n    records:\n      web: [198.18.0.11]\n";
const NAME: &str = "web.prod.coreha.example";
const IDENTITY: &str = "cp-1.test";

struct Server {
    agent: Agent,
    ns: NetNs,
    _dir: TempDir,
}

fn server(tag: &str, extra: &[&str]) -> Server {
    require_root();
    let ns = NetNs::new(tag);
    let dir = TempDir::new(tag);
    let file = dir.write("records.yaml", RECORDS);
    let mut args = records_on_lo(&file);
    args.extend_from_slice(extra);
    let agent = Agent::start(&ns, &args);
    Server {
        agent,
        ns,
        _dir: dir,
    }
}

impl Server {
    /// A client's whole text output.
    fn ask(&self, client: &str, args: &[&str]) -> String {
        let out = self
            .ns
            .command(client)
            .args(["@127.0.0.1", "-p", "1053"])
            .args(args)
            .output()
            .expect("run the client");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn passed_for_nsid(&self) -> f64 {
        metric_sum(
            &self.agent.metrics(),
            "hostport_dns_xdp_passed_total",
            &[("reason", "nsid")],
        )
    }
}

#[test]
fn nsid_and_chaos_tell_the_identity_to_dig_and_kdig() {
    let s = server(
        "identity-on",
        &["--nsid", "--chaos", "--identity", IDENTITY],
    );
    let dig_nsid = s.ask("dig", &["+nsid", "+nocookie", NAME, "A"]);
    assert!(
        dig_nsid.contains(&format!("(\"{IDENTITY}\")")) && dig_nsid.contains("198.18.0.11"),
        "{dig_nsid}"
    );
    let kdig_nsid = s.ask("kdig", &["+nsid", "+nocookie", NAME, "A"]);
    assert!(
        kdig_nsid.contains(&format!("NSID: {} \"{IDENTITY}\"", hex(IDENTITY)))
            && kdig_nsid.contains("198.18.0.11"),
        "{kdig_nsid}"
    );
    // Both went through the kernel path, which left them to userspace.
    assert_eq!(s.passed_for_nsid(), 2.0, "{}", s.agent.metrics());
    // Without +nsid: no NSID in the answer.
    let plain = s.ask("dig", &["+nocookie", NAME, "A"]);
    assert!(!plain.contains("NSID"), "{plain}");
    for name in ["id.server", "hostname.bind"] {
        for client in ["dig", "kdig"] {
            let txt = s.ask(client, &["+short", "CH", "TXT", name]);
            assert_eq!(txt.trim(), format!("\"{IDENTITY}\""), "{client} {name}");
        }
    }
    let reply = dig(&s.ns, "127.0.0.1", 1053, &["CH", "TXT", "id.server"]);
    assert!(reply.has_flag("aa"), "{reply:?}");
    // Other CHAOS names are not answered.
    let version = dig(&s.ns, "127.0.0.1", 1053, &["CH", "TXT", "version.bind"]);
    assert_eq!(version.status, "REFUSED");
}

#[test]
fn nsid_and_chaos_are_off_unless_configured() {
    let s = server("identity-off", &[]);
    let dig_nsid = s.ask("dig", &["+nsid", "+nocookie", NAME, "A"]);
    assert!(
        dig_nsid.contains("198.18.0.11") && !dig_nsid.contains("; NSID"),
        "{dig_nsid}"
    );
    // Still left to userspace, which answers without the option, as the kernel would.
    assert_eq!(s.passed_for_nsid(), 1.0);
    for name in ["id.server", "hostname.bind"] {
        let reply = dig(&s.ns, "127.0.0.1", 1053, &["CH", "TXT", name]);
        assert_eq!(reply.status, "REFUSED", "{name}");
    }
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02X}")).collect()
}
