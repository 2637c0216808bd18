//! The helper calls the verified program makes, read from its instructions as the verifier left
//! them (`bpftool prog dump xlated`): on hosts with the SRSO mitigation every call and return
//! is a mispredicted return, so the answer path is kept to one (the packet resize), leased or
//! not. Map lookups are arrays and per-CPU arrays, which the verifier inlines; paths a load-time
//! setting turns off (the client policy, the program's own logs) are dead code it removes. Any
//! call added to the program fails these tests.
//!
//! A leased table (a pinned program: `xdp::lease`) costs no call either: the run reads a word
//! the lease's BPF timer clears, not the clock. The last test drives that lease through the real
//! program: answered while renewed, passed once the timer fires, answered again on renewal.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    process::Command,
    time::{Duration, Instant},
};

use hostport_dns::clients::{ClientsConfig, RateLimit};
use hostport_dns_common::{
    counters::Counter,
    generation::{LEASE_EXPIRED, NO_LEASE},
};
use hostport_dns_tests::{
    packet::{Frame, QueryBuilder},
    require_root,
    xdp::{Program, XDP_PASS, XDP_TX},
};

const ZONE: &str = "zones:
  - name: prod.coreha.example
    records:
      one: 198.18.0.30
";

fn local() -> Vec<IpAddr> {
    vec!["198.18.0.1".parse().expect("an address")]
}

/// The calls in the verified program, by callee (`pc+N`: a call to a function of its own).
fn calls(program: &Program) -> BTreeMap<String, usize> {
    let id = program.program().info().expect("the program's info").id();
    let out = Command::new("bpftool")
        .args(["prog", "dump", "xlated", "id", &id.to_string()])
        .output()
        .expect("run bpftool (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines().count() > 100,
        "the program's instructions:\n{text}"
    );
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let Some((_, callee)) = line.split_once(") call ") else {
            continue;
        };
        let callee = callee.split('#').next().unwrap_or(callee).trim();
        let callee = if callee.starts_with("pc") {
            "a function of its own"
        } else {
            callee
        };
        *calls.entry(callee.to_owned()).or_insert(0) += 1;
    }
    calls
}

#[test]
fn an_answer_takes_one_helper_call_and_every_map_lookup_is_inlined() {
    require_root();
    let program = Program::load(ZONE, &local());
    let calls = calls(&program);
    println!("{calls:?}");
    // Growing the answer at the head is the call every answer makes; the tail is the fallback
    // for answers beyond the headroom, and for shrinking.
    assert_eq!(calls.get("bpf_xdp_adjust_head"), Some(&1), "{calls:?}");
    assert!(calls.contains_key("bpf_xdp_adjust_tail"), "{calls:?}");
    let others: Vec<&String> = calls
        .keys()
        .filter(|c| !matches!(c.as_str(), "bpf_xdp_adjust_head" | "bpf_xdp_adjust_tail"))
        .collect();
    assert!(
        others.is_empty(),
        "no other call, map lookups and functions of its own included: {others:?}"
    );
}

#[test]
fn the_client_policy_adds_its_own_calls_only_when_configured() {
    require_root();
    let clients = ClientsConfig {
        allow: vec!["198.18.0.0/15".parse().expect("a prefix")],
        rate_limit: RateLimit {
            responses_per_second: 100,
            negative_per_second: 50,
            errors_per_second: 50,
            slip: 2,
            exempt: Vec::new(),
        },
        ..ClientsConfig::default()
    };
    let program = Program::load_with_clients(ZONE, &local(), clients);
    let calls = calls(&program);
    println!("{calls:?}");
    // The allow-list's longest-prefix lookup and the rate limiter's clock.
    assert!(calls.contains_key("bpf_map_lookup_elem"), "{calls:?}");
    assert_eq!(calls.get("bpf_ktime_get_coarse_ns"), Some(&1), "{calls:?}");
}

#[test]
fn a_leased_table_answers_while_renewed_and_passes_once_its_timer_fires() {
    require_root();
    let program = Program::load(ZONE, &local());
    let frame =
        Frame::v4("198.18.0.1").build(&QueryBuilder::new("one.prod.coreha.example", 1).bytes());
    assert_eq!(
        program.run(&frame).0,
        XDP_TX,
        "a table without a lease answers"
    );
    // A lease far longer than anything here: live from the first renewal (the renewal program
    // stores the epoch before it returns), and answered.
    let lease = program.lease(Duration::from_secs(3600));
    let live = lease.word();
    assert!(
        live != LEASE_EXPIRED && live != NO_LEASE,
        "a live epoch: {live}"
    );
    assert_eq!(program.run(&frame).0, XDP_TX, "answered under a live lease");
    lease.renew();
    assert_ne!(lease.word(), live, "each renewal stores a new epoch");
    assert_eq!(program.run(&frame).0, XDP_TX);
    drop(lease);
    // A short lease, never renewed: its timer fires and the program passes from then on.
    // Taken before the renewal starts the timer: the timer cannot fire before this plus 200 ms.
    let renewed = Instant::now();
    let lease = program.lease(Duration::from_millis(200));
    let no_agent = program.counters.get(Counter::PassNoAgent);
    while program.run(&frame).0 == XDP_TX {
        assert!(
            renewed.elapsed() < Duration::from_secs(30),
            "still answered long after the lease ran out"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let silent_after = renewed.elapsed();
    assert!(
        silent_after >= Duration::from_millis(200),
        "passed {silent_after:?} after a 200 ms lease began"
    );
    assert_eq!(lease.word(), LEASE_EXPIRED);
    assert_eq!(program.run(&frame).0, XDP_PASS, "stays passed");
    assert!(program.counters.get(Counter::PassNoAgent) > no_agent);
    // The agent that holds the lease renews: answered again at once.
    lease.renew();
    assert_eq!(program.run(&frame).0, XDP_TX, "answered again once renewed");
    eprintln!(
        "passed {:.0} ms after a 200 ms lease began",
        silent_after.as_secs_f64() * 1e3
    );
}
