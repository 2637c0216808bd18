//! The integration tests: one test binary, a module per area (one link of the agent's library
//! instead of one per area, and one pool of test threads across every area, so that an area's
//! slow tail overlaps the next area's tests).
//!
//! Run one area with its module path as the filter: `cargo xtask test -- transfer::`.

mod answer_sizes;
mod api_access;
mod api_health;
mod big_answers;
mod book;
mod cli_errors;
mod deploy;
mod differential_knot;
mod docs;
mod e2e_haproxy;
mod external_dns;
mod generations;
mod identity;
mod image;
mod kube_source;
mod node_life;
mod operations;
mod pipeline;
mod prometheus;
mod record_file;
mod restart;
mod stopping;
mod table_size;
mod transfer;
mod update;
mod wire_clients;
mod wire_server;
mod wire_xdp;
mod xdp_calls;
mod xdp_fallback;
mod xdp_hostile;
mod xdp_packets;
