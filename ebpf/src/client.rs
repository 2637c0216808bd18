//! Whether the client may be served (the allow-list), and whether it is exempt from rate
//! limiting: one longest-prefix lookup, only when the policy has prefixes at all.

use aya_ebpf::maps::lpm_trie::Key;
use hostport_dns_common::{
    counters::Counter,
    policy::{
        ClientPolicy, POLICY_ACL, POLICY_ACL_REFUSE, POLICY_PREFIXES, PREFIX_ALLOWED, PREFIX_EXEMPT,
    },
};

use crate::{
    HPD_CLIENTS4, HPD_CLIENTS6, HPD_POLICY,
    eth::Family,
    host::{Ends, Host},
};

/// What the policy grants this query's client.
pub struct Client {
    pub policy: ClientPolicy,
    pub ends: Ends,
    pub exempt: bool,
}

#[inline(always)]
fn policy() -> ClientPolicy {
    // SAFETY: a plain read of a load-time constant; volatile so the compiler does not fold the
    // default in (the agent rewrites it before loading).
    unsafe { core::ptr::read_volatile(&HPD_POLICY) }
}

#[inline(always)]
pub fn admit(host: &Host) -> Result<Client, Counter> {
    let policy = policy();
    let grants = if policy.has(POLICY_PREFIXES) {
        grants_of(host.ends)
    } else {
        0
    };
    if policy.has(POLICY_ACL) && grants & PREFIX_ALLOWED == 0 {
        return Err(if policy.has(POLICY_ACL_REFUSE) {
            Counter::PassNotAllowed
        } else {
            Counter::DropNotAllowed
        });
    }
    Ok(Client {
        policy,
        ends: host.ends,
        exempt: grants & PREFIX_EXEMPT != 0,
    })
}

/// A trie key placed so that its address starts on an 8-byte boundary: the address is
/// written a word at a time, and the verifier refuses misaligned stack stores.
#[repr(C, align(8))]
struct AlignedKey<K> {
    pad: u32,
    key: Key<K>,
}

/// The grants of the longest configured prefix holding the source; none without one.
#[inline(always)]
fn grants_of(ends: Ends) -> u32 {
    let found = match ends.family {
        Family::V4 => HPD_CLIENTS4.get(Key::new(32, ends.src.v4_octets())),
        Family::V6 => {
            let aligned = AlignedKey {
                pad: 0,
                key: Key::new(128, ends.src.v6_octets()),
            };
            HPD_CLIENTS6.get(&aligned.key)
        }
    };
    found.copied().unwrap_or(0)
}
