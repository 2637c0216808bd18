//! The record file as a live source: changes are served after a reload (on change or SIGHUP),
//! and a broken edit keeps the previous records in service. Without a record file, SIGHUP is
//! explained and survived.

use std::time::{Duration, Instant};

use hostport_dns_tests::{
    TempDir,
    agent::{Agent, records_on_lo},
    clients::dig,
    netns::NetNs,
    require_root,
};

const ZONE: &str = "zones:\n  - name: reload.example\n    records:\n      web: 198.18.5.1\n";

/// Polls until `check` holds or ten seconds pass.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// An agent serving from `file` (given as `flag`) with XDP off.
fn userspace_only(ns: &NetNs, flag: &str, file: &std::path::Path) -> Agent {
    Agent::start(
        ns,
        &[flag, file.to_str().expect("UTF-8"), "--xdp-mode", "off"],
    )
}

fn web(ns: &NetNs) -> Vec<String> {
    dig(ns, "127.0.0.1", 1053, &["web.reload.example"]).answer_data()
}

#[test]
fn an_edited_file_is_served_from_both_paths() {
    require_root();
    let ns = NetNs::new("reload");
    let dir = TempDir::new("reload");
    let file = dir.write("records.yaml", ZONE);
    let agent = Agent::start(&ns, &records_on_lo(&file));
    assert_eq!(web(&ns), ["198.18.5.1"]);
    dir.write(
        "records.yaml",
        &ZONE
            .replace("198.18.5.1", "198.18.5.2, 198.18.5.3]")
            .replace("web: 1", "web: [1"),
    );
    eventually("the new addresses", || {
        web(&ns) == ["198.18.5.2", "198.18.5.3"]
    });
    // Once the new answer is seen, one more query: XDP answers it (its count rises by exactly
    // one) with the new addresses, and userspace (TCP) agrees.
    let xdp = || agent.metric("hostport_dns_responses", &[("path", "xdp")]);
    let before = xdp();
    assert_eq!(web(&ns), ["198.18.5.2", "198.18.5.3"]);
    assert_eq!(xdp(), before + 1.0, "answered by XDP after the reload");
    assert_eq!(
        dig(&ns, "127.0.0.1", 1053, &["+tcp", "web.reload.example"]).answer_data(),
        ["198.18.5.2", "198.18.5.3"],
        "userspace over TCP after the reload"
    );
}

#[test]
fn a_broken_edit_keeps_the_previous_records() {
    require_root();
    let ns = NetNs::new("broken");
    let dir = TempDir::new("broken");
    let file = dir.write("records.yaml", ZONE);
    let agent = userspace_only(&ns, "--records", &file);
    dir.write(
        "records.yaml",
        "zones:\n  - name: reload.example\n    records:\n      web: not-an-address\n",
    );
    eventually("the error to be logged", || {
        agent.logs().contains("record file not reloaded")
    });
    assert_eq!(web(&ns), ["198.18.5.1"]);
}

#[test]
fn sighup_reloads_at_once() {
    require_root();
    let ns = NetNs::new("hup");
    let dir = TempDir::new("hup");
    let file = dir.write("records.yaml", ZONE);
    let agent = userspace_only(&ns, "--records", &file);
    let modified = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("a modification time");
    // Past the window in which the poller compares contents: from now on it looks at the time
    // and length only.
    std::thread::sleep(Duration::from_secs(3));
    // An edit the poller cannot see: same length, same modification time.
    dir.write("records.yaml", &ZONE.replace("198.18.5.1", "198.18.5.9"));
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(modified))
        .expect("set the modification time back");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(web(&ns), ["198.18.5.1"], "the poller did not reload");
    agent.signal(libc::SIGHUP);
    eventually("the edit served after SIGHUP", || {
        web(&ns) == ["198.18.5.9"]
    });
}

#[test]
fn sighup_without_a_record_file_is_explained_and_survived() {
    require_root();
    let ns = NetNs::new("hupcfg");
    let dir = TempDir::new("hupcfg");
    // The same zone from the configuration file, which is read only at start.
    let config = dir.write("agent.yaml", ZONE);
    let agent = userspace_only(&ns, "--config", &config);
    agent.signal(libc::SIGHUP);
    eventually("the SIGHUP to be explained", || {
        agent.logs().contains("nothing to reload")
    });
    assert_eq!(web(&ns), ["198.18.5.1"], "still serving");
}
