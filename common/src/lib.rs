//! The ABI between the hostport-dns agent (userspace) and its XDP program.
//!
//! Everything both sides must agree on lives here: the limits that bound the kernel's loops and
//! the agent's input, the names of the BPF maps, the layout of their values, the name hash both
//! sides compute, and the counters the program increments.
//!
//! Modules depend on each other in one direction: `limits`, `hash`, `dns` and `csum` on nothing;
//! `entry`, `index`, `host`, `counters` and `policy` on those; `generation` on the table's
//! parts; `maps` on everything.
#![no_std]

pub mod counters;
pub mod csum;
pub mod dns;
pub mod entry;
pub mod generation;
pub mod hash;
pub mod host;
pub mod index;
pub mod limits;
pub mod maps;
pub mod policy;

#[cfg(test)]
extern crate std;
