//! `cargo xtask <task>`: everything the project does beyond `cargo build`, each task installing
//! what it needs first (`setup`).

mod bench;
mod cmd;
mod deploy;
mod docs;
mod emulated;
// The XDP object's build, shared with the agent's build script (a test builds it for aarch64).
#[cfg(test)]
#[path = "../../ebpf/build_object.rs"]
mod ebpf_object;
mod fuzz;
mod image;
mod run;
mod schema;
mod setup;
mod test;
mod test_binaries;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "hostport-dns project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what the build and the tests need (idempotent; seconds when nothing is missing).
    Setup {
        /// Only what building the agent needs (for the container image build).
        #[arg(long)]
        toolchain_only: bool,
    },
    /// Build and run the responder on its embedded example: XDP in generic mode on lo, userspace
    /// on port 1053.
    Run(run::RunArgs),
    /// Run every test (unit, BPF_PROG_TEST_RUN, wire tests in network namespaces), after the
    /// format and lint checks. Needs root.
    Test(test::TestArgs),
    /// Format and lint checks (cargo fmt --check, clippy -D warnings, the eBPF crate included).
    Lint,
    /// Benchmarks: figures and ratios against peers run side by side (never assertions).
    Bench(bench::BenchArgs),
    /// The XDP program's mutation campaign (BPF_PROG_TEST_RUN, 10 million packets) and
    /// coverage-guided fuzzing of the userspace query path (libFuzzer). Needs root.
    Fuzz(fuzz::FuzzArgs),
    /// Ten minutes (`--seconds`) at the generator's maximum with 1,000 pod changes a minute:
    /// sampled answers against the table of their time, the final table against the API, memory
    /// growth. Needs root.
    Soak {
        #[arg(long, default_value_t = 600)]
        seconds: u64,
    },
    /// Build the release binary the container image packs, into target/dist.
    Dist,
    /// Build the container image as an OCI archive (target/image/*.oci.tar): a statically linked
    /// agent and its license, no base image, no container engine needed.
    Image(image::ImageArgs),
    /// Render the chart's defaults into deploy/manifests/hostport-dns.yaml.
    Manifests,
    /// Regenerate the chart's values schema from the agent's configuration schema
    /// (`hostport-dns config-schema`).
    Schema,
    /// Build the operator's guide (mdBook, docs/) into target/book, its configuration and flags
    /// reference generated anew from the agent's own types.
    Docs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup {
            toolchain_only: true,
        } => setup::toolchain(),
        Task::Setup {
            toolchain_only: false,
        } => setup::run(),
        Task::Run(args) => run::run(args),
        Task::Test(args) => test::run(args),
        Task::Lint => test::lint(),
        Task::Bench(args) => bench::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::Soak { seconds } => bench::soak(seconds),
        Task::Dist => deploy::dist(),
        Task::Image(args) => image::build(args.arch).map(drop),
        Task::Manifests => deploy::manifests(),
        Task::Schema => schema::run(),
        Task::Docs => docs::run(),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
