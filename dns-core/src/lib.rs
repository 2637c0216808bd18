//! The DNS core of hostport-dns: what a query and an answer are on the wire, the record table
//! the sources compile into, and the authoritative answer made from it. Bytes in, bytes out:
//! no sockets, no tokio, no Kubernetes client. The agent (`hostport-dns`) serves it, the fuzz
//! target drives it directly, and both see the same code (as hickory keeps its wire types apart
//! from its server).
//!
//! - [`dns`]: wire names, framing (reading a query's sections), message building, encoding.
//! - [`records`], [`zone`]: what the sources produce and what a served zone is.
//! - [`table`]: the compiled record table, its serials and its rendering into records.
//! - [`answer`]: query bytes and a table in, answer bytes out; with [`rotation`] (answers
//!   rotated by query ID, as the XDP program does), [`identity`] (NSID, CHAOS TXT) and
//!   [`cookies`] (RFC 7873 / 9018).

pub mod answer;
pub mod cookies;
pub mod dns;
pub mod identity;
pub mod records;
pub mod rotation;
pub mod table;
pub mod zone;
