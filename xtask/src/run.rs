//! `cargo xtask run`: the responder on its embedded example, with XDP in generic mode on `lo`.

use std::process::Command;

use anyhow::bail;
use clap::Args;

use crate::{cmd, setup};

#[derive(Args)]
pub struct RunArgs {
    /// Extra arguments for `hostport-dns run` (for example `--records FILE`).
    #[arg(last = true)]
    extra: Vec<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!(
            "attaching XDP needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON: run `cargo xtask run` as root"
        );
    }
    // Running needs the toolchain that builds the XDP program, nothing the tests use.
    setup::toolchain()?;
    let agent = cmd::build_agent()?;
    println!();
    println!("Try, from another terminal:");
    println!("    dig @127.0.0.1 -p 1053 default-nginx.ingress.demo.hostport.example");
    println!(
        "    dig @127.0.0.1 -p 1053 _https._tcp.default-nginx.ingress.demo.hostport.example SRV"
    );
    println!("Stop with Ctrl-C.");
    println!();
    cmd::run(
        Command::new(agent)
            .args(["run", "--interface", "lo", "--xdp-mode", "generic"])
            .args(&args.extra),
    )
}
