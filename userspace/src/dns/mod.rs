//! DNS itself, apart from what this server does with it: the grammar of names ([`grammar`]) and
//! the compact form every name of the table is held in ([`wire_name`]).

pub mod grammar;
pub mod wire_name;

pub use wire_name::WireName;
