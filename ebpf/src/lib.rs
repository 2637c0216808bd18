//! Present so that the userspace crate can name this crate as a build dependency (cargo then
//! rebuilds the agent when the program changes); the program itself is the `hostport-dns` binary.
#![no_std]
