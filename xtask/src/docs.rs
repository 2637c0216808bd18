//! `cargo xtask docs`: the operator's guide, an mdBook (`docs/`), with its generated reference
//! pages written anew from the agent's own types (`hostport-dns docs-reference`), built into
//! `target/book`. Installs mdBook (from crates.io, into the project's cache) if it is missing.

use std::{path::PathBuf, process::Command};

use crate::{cmd, setup};

/// The mdBook release built: pinned, so that every machine renders the book alike.
const MDBOOK_VERSION: &str = "0.5.4";

pub fn run() -> anyhow::Result<()> {
    setup::toolchain()?;
    let agent = cmd::build_agent()?;
    let root = cmd::workspace_root();
    cmd::run(
        Command::new(&agent)
            .arg("docs-reference")
            .arg(root.join("docs/src/reference")),
    )?;
    let mdbook = mdbook()?;
    cmd::run(Command::new(&mdbook).arg("build").arg(root.join("docs")))?;
    println!(
        "docs: the book is in {}",
        root.join("target/book/index.html").display()
    );
    Ok(())
}

/// mdBook, built once into the cache (only its search feature: no server, no file watcher).
fn mdbook() -> anyhow::Result<PathBuf> {
    let root = setup::cache_dir().join("mdbook");
    let binary = root.join("bin/mdbook");
    let wanted = format!("mdbook v{MDBOOK_VERSION}");
    let installed =
        cmd::output(Command::new(&binary).arg("--version")).is_ok_and(|v| v.trim() == wanted);
    if !installed {
        println!("docs: building mdBook {MDBOOK_VERSION} (once)");
        cmd::run(
            cmd::cargo()
                .args(["install", "mdbook", "--locked", "--version", MDBOOK_VERSION])
                .args(["--no-default-features", "--features", "search", "--root"])
                .arg(&root),
        )?;
    }
    Ok(binary)
}
