//! `cargo xtask fuzz`: the XDP program's mutation campaign through BPF_PROG_TEST_RUN
//! (`hostport_dns_tests::fuzz`). Prints the counts; exits non-zero at the first broken rule.
//!
//! Usage: hostport-dns-fuzz [--packets N] [--seconds S] [--seed X]

use std::time::Duration;

use clap::Parser;
use hostport_dns_tests::{fuzz, require_root};

#[derive(Parser)]
struct Args {
    /// Mutated packets to run.
    #[arg(long, default_value_t = 10_000_000)]
    packets: u64,
    /// Stop after this many seconds even if fewer packets ran.
    #[arg(long, default_value_t = 3600)]
    seconds: u64,
    /// The generator's seed (a failure names it: the run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() {
    require_root();
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "XDP mutation campaign: up to {} packets, seed {seed}",
        args.packets
    );
    let tally = fuzz::run(args.packets, Duration::from_secs(args.seconds), seed);
    let rate = tally.packets as f64 / tally.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{} packets in {:.1} s ({rate:.0}/s), {} of them with an allow-list and rate limiting: {} answered (each equal to userspace's answer or slip; {} slips), {} passed untouched, {} dropped (each as the oracle predicted)",
        tally.packets,
        tally.elapsed.as_secs_f64(),
        tally.guarded,
        tally.answered,
        tally.slipped,
        tally.passed,
        tally.dropped
    );
    println!("{:<20} {:>12}", "COUNTER", "PACKETS");
    for (counter, count) in &tally.by_counter {
        println!("{:<20} {:>12}", counter.label(), count);
    }
}
