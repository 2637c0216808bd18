//! Which server answered, for operators behind a VIP: the NSID option (RFC 5001) and the CHAOS
//! TXT names `id.server.` and `hostname.bind.` (RFC 4892). Both are off unless configured; the
//! identity defaults to the node's name.
//!
//! The XDP program passes every query that asks for an NSID up to userspace, which adds the
//! option when NSID is on: the answer's bytes do not depend on which path made them.

use hickory_proto::{
    op::{Message, Query},
    rr::{
        DNSClass, Name, RData, Record, RecordType,
        rdata::{
            TXT,
            opt::{EdnsCode, EdnsOption},
        },
    },
};

/// The longest identity NSID and TXT carry here: one TXT character-string.
pub const MAX_IDENTITY_LEN: usize = 255;

/// This server's identity, and where it is told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The name given (the node's, by default).
    pub name: String,
    /// Answer NSID requests with it.
    pub nsid: bool,
    /// Answer `id.server.` and `hostname.bind.` CH TXT with it.
    pub chaos: bool,
}

impl Identity {
    /// An identity of `name`, told as `nsid` and `chaos` say; an error for a name no TXT
    /// string can hold.
    pub fn new(name: String, nsid: bool, chaos: bool) -> Result<Self, String> {
        if name.is_empty() || name.len() > MAX_IDENTITY_LEN {
            return Err(format!(
                "the server identity must be 1 to {MAX_IDENTITY_LEN} bytes, not {}",
                name.len()
            ));
        }
        Ok(Self { name, nsid, chaos })
    }

    /// Adds the NSID option to `response` if the request asked for it and NSID is on.
    pub fn add_nsid(&self, request: &Message, response: &mut Message) {
        if !self.nsid || !asks_nsid(request) {
            return;
        }
        if let Some(edns) = response.edns.as_mut() {
            edns.options_mut().insert(EdnsOption::Unknown(
                u16::from(EdnsCode::NSID),
                self.name.as_bytes().to_vec(),
            ));
        }
    }

    /// The answer to a CHAOS question, if it is one of the names this server tells its
    /// identity under (TXT or ANY) and CHAOS is on.
    pub fn chaos_answer(&self, question: &Query) -> Option<Vec<Record>> {
        if !self.chaos || question.query_class != DNSClass::CH {
            return None;
        }
        let named = ["id.server.", "hostname.bind."]
            .iter()
            .filter_map(|n| Name::from_ascii(n).ok())
            .any(|n| n == question.name);
        if !named {
            return None;
        }
        if !matches!(question.query_type, RecordType::TXT | RecordType::ANY) {
            return Some(Vec::new());
        }
        let mut record = Record::from_rdata(
            question.name.clone(),
            0,
            RData::TXT(TXT::new(vec![self.name.clone()])),
        );
        record.dns_class = DNSClass::CH;
        Some(vec![record])
    }
}

/// Whether the request carries an NSID option (RFC 5001 §2.1: empty in a query).
fn asks_nsid(request: &Message) -> bool {
    request
        .edns
        .as_ref()
        .is_some_and(|e| e.options().get(EdnsCode::NSID).is_some())
}
