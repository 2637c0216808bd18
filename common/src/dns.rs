//! DNS wire constants both sides use (RFC 1035, RFC 6891).

/// Size of the fixed DNS header.
pub const HEADER_LEN: usize = 12;
/// Type and class after a question's name.
pub const QTYPE_QCLASS_LEN: usize = 4;
/// The IP protocol number of UDP (IPv4 protocol, IPv6 next header, pseudo-header).
pub const IPPROTO_UDP: u8 = 17;
/// Type, class, TTL and RDLENGTH after a record's owner.
pub const RR_FIXED_LEN: usize = 10;
/// An OPT record without options: root owner, type, payload size, extended rcode, version,
/// flags, RDLENGTH.
pub const OPT_RR_LEN: usize = 11;
/// Offset of the question in a message; answers point their owner here.
pub const QUESTION_OFFSET: u16 = HEADER_LEN as u16;
/// A compression pointer to the question name.
pub const POINTER_TO_QUESTION: u16 = 0xC000 | QUESTION_OFFSET;
/// Marks a name-compression pointer in its first two bits.
pub const POINTER_MARK: u16 = 0xC000;

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_OPT: u16 = 41;
/// The EDNS COOKIE option (RFC 7873 §4).
pub const EDNS_OPTION_COOKIE: u16 = 10;
/// The EDNS NSID option (RFC 5001 §2.3).
pub const EDNS_OPTION_NSID: u16 = 3;
pub const CLASS_IN: u16 = 1;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_NXDOMAIN: u8 = 3;

// Header flag bits in the 16-bit flags word (host order), those the kernel and the answer code
// use.
pub const FLAG_QR: u16 = 0x8000;
pub const OPCODE_MASK: u16 = 0x7800;
pub const FLAG_AA: u16 = 0x0400;
pub const FLAG_TC: u16 = 0x0200;
pub const FLAG_RD: u16 = 0x0100;
pub const FLAG_CD: u16 = 0x0010;
pub const RCODE_MASK: u16 = 0x000F;

/// The EDNS "DNSSEC OK" bit in the OPT record's flags.
pub const EDNS_FLAG_DO: u16 = 0x8000;

/// Flags of an authoritative answer to a query with flags `query_flags`: QR and AA set, RD and
/// CD copied, everything else clear (RA=0: no recursion; AD=0: nothing is validated).
pub const fn answer_flags(query_flags: u16, rcode: u8) -> u16 {
    FLAG_QR | FLAG_AA | (query_flags & (FLAG_RD | FLAG_CD)) | (rcode as u16 & RCODE_MASK)
}
