//! The `hostport-dns` binary: the command line, parsed and run by the library
//! ([`hostport_dns::commands`]).

fn main() -> std::process::ExitCode {
    hostport_dns::commands::main()
}
