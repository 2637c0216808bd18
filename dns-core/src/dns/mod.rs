//! DNS itself, apart from what this server does with it: the compact form every name of the
//! table is held in ([`wire_name`]), a query as it arrived, read once ([`query`], from the
//! framing of its lengths: [`framing`]), the response skeleton and transports ([`message`]),
//! and the encoding of responses too large for hickory-proto's compression ([`encode`]).

pub mod encode;
pub mod framing;
pub mod message;
pub mod query;
pub mod wire_name;

pub use query::Query;
pub use wire_name::WireName;
