//! The ABI between the hostport-dns agent (userspace) and its XDP program.
//!
//! Everything both sides must agree on lives here: the limits that bound the kernel's loops and
//! the agent's input, the names of the BPF maps, the layout of their keys and values, the name
//! hash both sides compute, and the counters the program increments.
#![no_std]

pub mod counters;
pub mod csum;
pub mod dns;
pub mod generation;
pub mod hash;
pub mod limits;
pub mod maps;
pub mod policy;
pub mod record;

#[cfg(test)]
extern crate std;
