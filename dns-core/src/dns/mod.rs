//! DNS itself, apart from what this server does with it: the compact form every name of the
//! table is held in ([`wire_name`]), the response
//! skeleton and transports ([`message`]), the framing of messages hickory-proto refuses
//! ([`framing`]), and the encoding of responses too large for hickory-proto's compression
//! ([`encode`]).

pub mod encode;
pub mod framing;
pub mod message;
pub mod wire_name;

pub use wire_name::WireName;
