//! Observability checked by a real Prometheus: it scrapes a running agent (the Kubernetes
//! source on the fake API server, XDP on lo, transfers configured) while answers flow on both
//! paths; promtool checks the exposition and the alert rules (check rules, test rules), the
//! rules load and evaluate without error, and every query of the Grafana dashboard returns
//! data.

use std::{net::SocketAddr, time::Duration};

use hostport_dns_tests::{
    TempDir,
    agent::Agent,
    clients::dig,
    eventually,
    fake_api::{FakeApi, Kind},
    k8s::PodSpec,
    netns::{NetNs, sh},
    prometheus::{Prometheus, assert_exposition_is_clean},
    require_root,
    secondary::TsigKey,
    workspace_root,
};

const ZONE: &str = "prod.coreha.example.";

fn rules() -> std::path::PathBuf {
    workspace_root().join("deploy/chart/hostport-dns/rules/hostport-dns.rules.yaml")
}

/// Every query of the dashboard, with its variables as Grafana substitutes them when "All" is
/// picked (`.*`) and `$__rate_interval` as Grafana computes it for this test's 1 s scrapes (it
/// is at least four scrape intervals; one minute holds enough samples here).
fn dashboard_queries() -> Vec<(String, String)> {
    let path = workspace_root().join("deploy/grafana/hostport-dns.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for name in ["datasource", "cluster", "node"] {
        assert!(
            variables.contains(&name),
            "no ${name} variable: {variables:?}"
        );
    }
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression").to_owned();
            assert_filtered(&title, &expr);
            let substituted = expr
                .replace("$__rate_interval", "1m")
                .replace("$cluster", ".*")
                .replace("$node", ".*");
            queries.push((title.clone(), substituted));
        }
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());
    queries
}

/// Every series a dashboard query selects is narrowed by the cluster and node variables, and
/// every rate() takes Grafana's `$__rate_interval` (a fixed window shows nothing, or noise,
/// at other scrape intervals and zoom levels).
fn assert_filtered(title: &str, expr: &str) {
    let mut rest = expr;
    while let Some(at) = rest.find("hostport_dns_") {
        let after = &rest[at..];
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let selector = after[name_end..]
            .strip_prefix('{')
            .and_then(|s| s.split_once('}'))
            .map(|(matchers, _)| matchers)
            .unwrap_or_else(|| {
                panic!(
                    "{title}: {} has no label matchers in {expr}",
                    &after[..name_end]
                )
            });
        for matcher in ["cluster=~\"$cluster\"", "instance=~\"$node\""] {
            assert!(
                selector.contains(matcher),
                "{title}: {} lacks {matcher} in {expr}",
                &after[..name_end]
            );
        }
        rest = &after[name_end..];
    }
    let mut rest = expr;
    while let Some(at) = rest.find("rate(") {
        let after = &rest[at..];
        let call = after.split_once(')').map_or(after, |(call, _)| call);
        assert!(
            call.ends_with("[$__rate_interval]"),
            "{title}: a rate() without $__rate_interval in {expr}"
        );
        rest = &after[5..];
    }
}

#[test]
fn promtool_checks_the_rules_and_their_tests() {
    let out = sh(std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules()));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SUCCESS: 13 rules found"),
        "{out:?}"
    );
    let dir = TempDir::new("rules-test");
    let test =
        std::fs::read_to_string(workspace_root().join("tests/data/prometheus/rules-test.yaml"))
            .expect("the rule tests")
            .replace("RULES", &rules().display().to_string());
    let test = dir.write("rules-test.yaml", &test);
    sh(std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(test));
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_every_dashboard_query_returns_data() {
    require_root();
    let ns = NetNs::new("prometheus");
    let api = FakeApi::start(Some(&ns));
    let pod = |i: usize, ip: &str| {
        PodSpec::ingress(
            &format!("nginx-{i}"),
            "ingress",
            "web",
            &format!("cp-{i}"),
            ip,
        )
    };
    api.apply(Kind::Pod, pod(0, "198.18.0.11").to_json());
    let dir = TempDir::new("prometheus");
    let key = TsigKey::test("transfer-key");
    dir.write("tsig-key", &key.secret);
    // NOTIFY goes to a port nothing listens on: it is retried (and counted).
    let config = dir.write(
        "agent.yaml",
        &format!(
            "zones:\n  - name: {ZONE}\nkubernetes:\n  apiServer: {}\npods:\n  - zone: {ZONE}\n\
             transfer:\n  keys: [{{name: transfer-key, secretFile: {}/tsig-key}}]\n  \
             allow: [{{from: 127.0.0.1, key: transfer-key}}]\n  notify: [{{address: \"127.0.0.1:5399\", key: transfer-key}}]\n",
            api.url(),
            dir.path.display()
        ),
    );
    let agent = Agent::start_on_lo(&ns, &config, &[]);
    eventually("the agent is ready", 30, || {
        agent.http_get("/readyz").0 == 200
    });
    let prometheus = Prometheus::start(
        &ns,
        SocketAddr::from(([127, 0, 0, 1], 9090)),
        &[hostport_dns_tests::agent::METRICS_ADDR],
        &[&rules()],
    );
    prometheus.wait_for("up{job=\"hostport-dns\"} == 1", 30);
    // Traffic on both paths and both transports, a transfer, a change, an API outage.
    let name = format!("web.ingress.{ZONE}");
    let traffic = || {
        for _ in 0..5 {
            dig(&ns, "127.0.0.1", 1053, &[&name, "A"]); // XDP (no cookie)
            dig(&ns, "127.0.0.1", 1053, &["+cookie", &name, "A"]); // userspace
            dig(&ns, "127.0.0.1", 1053, &["+tcp", ZONE, "SOA"]);
        }
    };
    traffic();
    sh(ns.command("kdig").args([
        "@127.0.0.1",
        "-p",
        "1053",
        "+tcp",
        "-y",
        &key.kdig_arg(),
        ZONE,
        "AXFR",
    ]));
    api.apply(Kind::Pod, pod(1, "198.18.0.12").to_json());
    api.set_outage(true);
    // (The family appears with the first error.)
    eventually("a watch fails", 30, || {
        agent
            .metrics()
            .contains("hostport_dns_source_errors_total{")
    });
    api.set_outage(false);
    eventually("the watches work again", 30, || {
        agent.metric("hostport_dns_source_connected", &[("source", "kubernetes")]) == 1.0
    });
    traffic();
    assert_exposition_is_clean(&agent.metrics());
    // Enough scrapes for every rate() window to hold two samples after the traffic: traffic
    // goes on until they do (a loaded machine scrapes late, never less data in the end).
    let empty_queries = || -> Vec<String> {
        dashboard_queries()
            .into_iter()
            .filter(|(_, expr)| prometheus.query(expr).is_empty())
            .map(|(title, expr)| format!("{title}: {expr}"))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut empty = empty_queries();
    while !empty.is_empty() && std::time::Instant::now() < deadline {
        traffic();
        std::thread::sleep(Duration::from_secs(1));
        empty = empty_queries();
    }
    assert!(
        empty.is_empty(),
        "dashboard queries that return nothing:\n{}\n\nthe agent's metrics:\n{}",
        empty.join("\n"),
        agent.metrics()
    );
    // The rules loaded, and every one evaluates without error (once evaluated: until then a
    // rule's health is "unknown").
    let loaded_rules = || -> (serde_json::Value, Vec<serde_json::Value>) {
        let (status, rules) = prometheus.get("/api/v1/rules");
        assert_eq!(status, 200);
        let rules: serde_json::Value = serde_json::from_str(&rules).expect("JSON");
        let loaded = rules["data"]["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (rules, loaded)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (mut rules, mut loaded) = loaded_rules();
    while loaded.iter().any(|r| r["health"] == "unknown") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        (rules, loaded) = loaded_rules();
    }
    assert_eq!(loaded.len(), 13, "{rules}");
    for rule in &loaded {
        assert_eq!(rule["health"], "ok", "{rule}\n{}", prometheus.log());
    }
    // A healthy agent meets no alert's condition, whatever its `for:` (longer than this test,
    // it would leave a firing alert unseen): each expression, evaluated now in this Prometheus
    // against this agent's series, selects nothing; but the NOTIFY one (its secondary is absent).
    let alerting: Vec<&serde_json::Value> =
        loaded.iter().filter(|r| r["type"] == "alerting").collect();
    assert_eq!(alerting.len(), 13, "every rule is an alert");
    let holding: Vec<String> = alerting
        .iter()
        .filter(|rule| rule["name"] != "HostportDnsNotifyFailing")
        .filter_map(|rule| {
            let expr = rule["query"].as_str().expect("a rule's expression");
            let result = prometheus.query(expr);
            (!result.is_empty())
                .then(|| format!("{}: {expr}\n  holds for {result:?}", rule["name"]))
        })
        .collect();
    assert!(
        holding.is_empty(),
        "alert conditions a healthy agent meets:\n{}",
        holding.join("\n")
    );
    // A healthy agent raises none of the alerts but the NOTIFY one (its secondary is absent).
    let firing: Vec<String> = prometheus
        .query("ALERTS{alertstate=\"firing\"}")
        .iter()
        .map(|a| {
            a["metric"]["alertname"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(
        firing.iter().all(|a| a == "HostportDnsNotifyFailing"),
        "{firing:?}"
    );
}
