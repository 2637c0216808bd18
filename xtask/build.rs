//! Hands xtask the triple it is built for, which is the machine it runs on: the agent's tree
//! names it with `--target` (see `cmd::HOST_TRIPLE`).

fn main() {
    let triple = std::env::var("TARGET").expect("cargo sets TARGET for build scripts");
    println!("cargo:rustc-env=XTASK_HOST_TRIPLE={triple}");
}
