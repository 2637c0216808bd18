//! API server records that follow health (`endpointSlices[].healthProbe`), on the wire: three
//! fake API servers serve `/readyz` over TLS on 127.0.0.2-4:6443 with a certificate that names
//! only `kubernetes.default.svc` (as kube-apiserver certificates do) and refusing anonymous
//! requests (the probes carry the configured token), `default/kubernetes` lists them as the
//! kube-apiserver writes it, and the agent's answer for the API name follows their
//! probes: a server answering 503 or hanging leaves after N failed probes, comes back after M
//! successes, and when every server fails all are kept.

use std::collections::BTreeSet;

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    api_tls::ApiCredentials,
    clients::dig,
    eventually,
    fake_api::{Access, FakeApi, Kind},
    k8s::api_server_slice,
    netns::NetNs,
    require_root,
};

const ZONE: &str = "prod.example";
const API_NAME: &str = "api.prod.example";
/// An output whose probes check a name the certificates do not carry: every probe fails (TLS).
const WRONG_NAME: &str = "api-wrong-name.prod.example";
/// The output's name (the default, `<first hostname>/<address type>`).
const OUTPUT: &str = "api.prod.example/IPv4";
/// Failed probes in a row that take a server out, successes that bring it back.
const FAILURES: usize = 4;
const SUCCESSES: usize = 3;
/// The servers `default/kubernetes` lists (loopback addresses of the test's namespace).
const SERVERS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// The bearer token the probed servers ask for.
const PROBE_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.probe-token";

struct Bed {
    agent: Agent,
    /// The API server the agent watches.
    api: FakeApi,
    /// The API servers the slices list, in `SERVERS` order: only their `/readyz` is used.
    servers: Vec<FakeApi>,
    ns: NetNs,
    _dir: TempDir,
}

impl Bed {
    fn start() -> Self {
        require_root();
        let ns = NetNs::new("apihealth");
        let dir = TempDir::new("apihealth");
        let credentials = ApiCredentials::generate_for(&dir, &["kubernetes.default.svc"]);
        let https = |bind: Option<&str>, token: Option<&str>| Access {
            tls: Some(credentials.server_config(false)),
            bearer_token: token.map(str::to_owned),
            bind: bind.map(|b| b.parse().expect("an address")),
        };
        let api = FakeApi::start_with(Some(&ns), https(None, None));
        // These refuse anonymous requests (`--anonymous-auth=false`): the probes need the token.
        let servers: Vec<FakeApi> = SERVERS
            .iter()
            .map(|ip| {
                let bind = format!("{ip}:6443");
                FakeApi::start_with(Some(&ns), https(Some(&bind), Some(PROBE_TOKEN)))
            })
            .collect();
        let token = dir.write("token", &format!("{PROBE_TOKEN}\n"));
        api.apply(
            Kind::EndpointSlice,
            api_server_slice("IPv4", "kubernetes", &SERVERS),
        );
        // The probes take the CA and the name from `kubernetes` (the first output), or their own
        // (the second, whose name no certificate carries).
        let config = dir.write(
            "agent.yaml",
            &format!(
                "zones:\n  - name: {ZONE}\n    ttl: 5\nkubernetes:\n  apiServer: {}\n  caFile: {}\n  tlsServerName: kubernetes.default.svc\nendpointSlices:\n  - zone: {ZONE}\n    hostnames: [api]\n    healthProbe:\n      intervalSeconds: 0.5\n      timeoutSeconds: 0.4\n      failures: {FAILURES}\n      successes: {SUCCESSES}\n      tokenFile: {}\n  - zone: {ZONE}\n    hostnames: [api-wrong-name]\n    name: wrong-name\n    healthProbe:\n      intervalSeconds: 0.5\n      timeoutSeconds: 0.4\n      tlsServerName: kubernetes.other.example\n",
                api.url(),
                credentials.ca_file.display(),
                token.display(),
            ),
        );
        let agent = Agent::start_on_lo(&ns, &config, &[]);
        Self {
            agent,
            api,
            servers,
            ns,
            _dir: dir,
        }
    }

    /// The A answer for `name` (never an error: the zone is served throughout).
    fn answer(&self, name: &str) -> Vec<String> {
        let reply = dig(&self.ns, "127.0.0.1", 1053, &[name, "A"]);
        assert_eq!(reply.status, "NOERROR", "{name}: {reply:?}");
        reply.answer_data()
    }

    fn server(&self, ip: &str) -> &FakeApi {
        let i = SERVERS
            .iter()
            .position(|s| *s == ip)
            .expect("a listed server");
        &self.servers[i]
    }

    /// `/readyz` requests `ip` has received so far (each probe is one).
    fn probes_of(&self, ip: &str) -> usize {
        self.server(ip)
            .requests()
            .iter()
            .filter(|r| *r == "GET /readyz")
            .count()
    }

    fn up(&self, ip: &str) -> f64 {
        let server = format!("{ip}:6443");
        self.agent.metric(
            "hostport_dns_api_server_probe_up",
            &[("output", OUTPUT), ("server", &server)],
        )
    }

    fn failures(&self, output: &str, ip: &str, reason: &str) -> f64 {
        let server = format!("{ip}:6443");
        self.agent.metric(
            "hostport_dns_api_server_probe_failures",
            &[("output", output), ("server", &server), ("reason", reason)],
        )
    }

    /// Waits until the answer for the API name is `wanted`, checking at every step that it is
    /// never empty and that `ip` has not moved for as long as it has had fewer than `needed`
    /// probes since `since` (its probe count when it turned). One probe counted before the turn
    /// may still see the new state (the fake counts a request as it arrives), so the check
    /// allows for one.
    fn follow_until(
        &self,
        what: &str,
        wanted: &[&str],
        ip: &str,
        since: usize,
        needed: usize,
        in_until_then: bool,
    ) {
        eventually(what, 30, || {
            let answer = self.answer(API_NAME);
            // Counted after the query: at least as many probes as had ended when it was answered.
            let probes = self.probes_of(ip).saturating_sub(since);
            assert!(!answer.is_empty(), "{what}: an empty answer");
            if probes + 1 < needed {
                assert_eq!(
                    answer.contains(&ip.to_owned()),
                    in_until_then,
                    "{what}: {ip} moved after {probes} probes, before {needed}: {answer:?}"
                );
            }
            answer == wanted
        });
    }
}

#[test]
fn api_server_records_follow_the_servers_readiness_and_never_go_empty() {
    let bed = Bed::start();
    eventually("the zone served", 15, || {
        dig(&bed.ns, "127.0.0.1", 1053, &[API_NAME, "A"]).status == "NOERROR"
    });
    eventually("every server answered, each probed and up", 15, || {
        // The series exist once the first probes have ended.
        bed.answer(API_NAME) == SERVERS
            && bed
                .agent
                .metrics()
                .contains("hostport_dns_api_server_probe_up{")
            && SERVERS.iter().all(|ip| bed.up(ip) == 1.0)
    });

    // Unready: /readyz answers 503. It leaves after N failed probes, not before.
    let since = bed.probes_of("127.0.0.3");
    bed.server("127.0.0.3").set_outage(true);
    bed.follow_until(
        "the unready server to leave the answer",
        &["127.0.0.2", "127.0.0.4"],
        "127.0.0.3",
        since,
        FAILURES,
        true,
    );
    assert_eq!(bed.up("127.0.0.3"), 0.0);
    assert!(bed.failures(OUTPUT, "127.0.0.3", "status") >= FAILURES as f64);

    // Ready again: back after M successful probes, not before.
    let since = bed.probes_of("127.0.0.3");
    bed.server("127.0.0.3").set_outage(false);
    bed.follow_until(
        "the server ready again to come back",
        &SERVERS,
        "127.0.0.3",
        since,
        SUCCESSES,
        false,
    );
    assert_eq!(bed.up("127.0.0.3"), 1.0);

    // Hung: accepts connections and requests, never answers. Each probe times out.
    let since = bed.probes_of("127.0.0.4");
    bed.server("127.0.0.4").freeze(true);
    bed.follow_until(
        "the hung server to leave the answer",
        &["127.0.0.2", "127.0.0.3"],
        "127.0.0.4",
        since,
        FAILURES,
        true,
    );
    assert!(bed.failures(OUTPUT, "127.0.0.4", "timeout") >= FAILURES as f64);

    // Every server fails: all are kept (never an empty answer because of probes), and said so.
    bed.server("127.0.0.2").set_outage(true);
    bed.server("127.0.0.3").set_outage(true);
    let all_down = |bed: &Bed| {
        bed.agent.metric(
            "hostport_dns_api_server_probe_all_down",
            &[("output", OUTPUT)],
        )
    };
    eventually("every server down, all kept", 15, || {
        let answer = bed.answer(API_NAME);
        assert!(!answer.is_empty(), "an empty answer: {answer:?}");
        SERVERS.iter().all(|ip| bed.up(ip) == 0.0) && answer == SERVERS
    });
    eventually("the all-down metric", 15, || all_down(&bed) == 1.0);
    assert!(
        bed.agent
            .logs()
            .contains("every server fails its health probes: all are kept in the answer"),
        "{}",
        bed.agent.logs()
    );

    // One comes back: it alone is answered.
    bed.server("127.0.0.2").set_outage(false);
    eventually("the first server back alone", 15, || {
        bed.answer(API_NAME) == ["127.0.0.2"]
    });
    assert_eq!(all_down(&bed), 0.0);
    bed.server("127.0.0.3").set_outage(false);
    bed.server("127.0.0.4").freeze(false);
    eventually("every server back", 15, || bed.answer(API_NAME) == SERVERS);

    // A certificate that does not carry the probe's name fails the handshake: every server of
    // that output fails (reason tls), and all are kept.
    for ip in SERVERS {
        assert!(
            bed.failures("wrong-name", ip, "tls") >= FAILURES as f64,
            "{ip}"
        );
    }
    assert_eq!(bed.answer(WRONG_NAME), SERVERS);
    // Every probe that reached HTTP carried the token.
    for ip in SERVERS {
        assert_eq!(bed.server(ip).unauthorized_requests(), 0, "{ip}");
    }

    // A server no longer listed is forgotten: its series go, and the answer follows the slices.
    bed.api.apply(
        Kind::EndpointSlice,
        api_server_slice("IPv4", "kubernetes", &SERVERS[..2]),
    );
    eventually("the unlisted server's series to go", 10, || {
        let metrics = bed.agent.metrics();
        let servers: BTreeSet<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("hostport_dns_api_server_probe_up{"))
            .filter_map(|l| l.split("server=\"").nth(1)?.split('"').next())
            .collect();
        servers == BTreeSet::from(["127.0.0.2:6443", "127.0.0.3:6443"])
    });
    assert_eq!(bed.answer(API_NAME), &SERVERS[..2]);
}
