//! This host's addresses in the form the XDP program reads them (`hostport_dns_common::host`):
//! an open-addressed set, each address within `HOST_PROBES` slots of its home. Pure, tested
//! without a kernel.

use std::{collections::BTreeMap, net::IpAddr};

use hostport_dns_common::{
    host::{HOST_ANSWER, HOST_OWN, HostSlot, home, mapped_v4, words},
    limits::HOST_PROBES,
};

/// Every address the kernel should know, with its `HOST_*` bits (several facts about one address
/// are merged).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAddresses {
    pub kinds: BTreeMap<IpAddr, u32>,
}

impl HostAddresses {
    /// This host's own addresses, each answered on (what a test or a benchmark hands the
    /// writer).
    pub fn answering(addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut set = Self::default();
        for address in addresses {
            set.add(address, HOST_OWN | HOST_ANSWER);
        }
        set
    }

    /// Adds `kind` to what `address` is.
    pub fn add(&mut self, address: IpAddr, kind: u32) {
        *self.kinds.entry(canonical(address)).or_insert(0) |= kind;
    }

    /// Addresses in the set (what its size follows).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The set's `count` slots (a power of two) under `seed`, and the addresses that found no
    /// slot within reach (the kernel then treats them as foreign: answers from them, and passes
    /// queries to them).
    pub fn slots(&self, seed: u64, count: u32) -> (Vec<HostSlot>, Vec<IpAddr>) {
        let mut slots = vec![HostSlot::EMPTY; count as usize];
        let mut left_out = Vec::new();
        for (address, kind) in &self.kinds {
            let stored = stored(*address);
            let first = home(words(&stored), seed, count);
            let free = (0..HOST_PROBES as u32)
                .map(|i| ((first + i) & (count - 1)) as usize)
                .find(|i| slots[*i].kind == 0);
            match free {
                Some(i) => {
                    slots[i] = HostSlot {
                        address: stored,
                        kind: *kind,
                        reserved: 0,
                    }
                }
                None => left_out.push(*address),
            }
        }
        (slots, left_out)
    }
}

/// IPv4-mapped IPv6 addresses as IPv4 (the form the kernel compares).
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// An address as the set stores it.
pub fn stored(address: IpAddr) -> [u8; 16] {
    match address {
        IpAddr::V4(a) => mapped_v4(a.octets()),
        IpAddr::V6(a) => a.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel finds for `address`: probes as `ebpf/src/host.rs` does.
    fn lookup(slots: &[HostSlot], seed: u64, address: IpAddr) -> u32 {
        let wanted = stored(address);
        let count = slots.len() as u32;
        let first = home(words(&wanted), seed, count);
        for i in 0..HOST_PROBES as u32 {
            let slot = &slots[((first + i) & (count - 1)) as usize];
            if slot.kind == 0 {
                return 0;
            }
            if slot.address == wanted {
                return slot.kind;
            }
        }
        0
    }

    use hostport_dns_common::generation::Capacity;

    #[test]
    fn every_address_is_found_with_its_kinds_and_others_are_not() {
        let mut set = HostAddresses::default();
        let addresses: Vec<IpAddr> = (0..5000u32)
            .map(|i| IpAddr::from([198, 18, (i >> 8) as u8, i as u8]))
            .chain((0..100u16).map(|i| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, i])))
            .collect();
        for address in &addresses {
            set.add(*address, HOST_OWN);
        }
        set.add(addresses[0], HOST_ANSWER);
        let (slots, left_out) = set.slots(42, Capacity::host_class(set.len() as u32));
        assert!(left_out.is_empty(), "{} left out", left_out.len());
        for address in &addresses {
            assert_ne!(lookup(&slots, 42, *address) & HOST_OWN, 0, "{address}");
        }
        assert_eq!(lookup(&slots, 42, addresses[0]), HOST_OWN | HOST_ANSWER);
        assert_eq!(lookup(&slots, 42, "198.19.0.1".parse().unwrap()), 0);
        // An IPv4 address and its IPv4-mapped IPv6 form are one address.
        assert_ne!(lookup(&slots, 42, "::ffff:198.18.0.7".parse().unwrap()), 0);
        // A handful of addresses in the smallest set.
        let few = HostAddresses::answering(addresses[..100].iter().copied());
        let (slots, left_out) = few.slots(7, Capacity::host_class(100));
        assert_eq!((slots.len(), left_out.len()), (1024, 0));
        for address in &addresses[..100] {
            assert_ne!(lookup(&slots, 7, *address), 0, "{address}");
        }
    }
}
