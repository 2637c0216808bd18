//! Ethernet, with at most one 802.1Q tag.

use aya_ebpf::programs::XdpContext;
use hostport_dns_common::counters::Counter;
use network_types::eth::EthHdr;

use crate::packet::{be16, ptr_at};

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
/// An 802.1Q tag: TCI and the encapsulated EtherType.
const VLAN_TAG_LEN: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Where the IP header starts, which IP it is, and whether the frame was sent to or from a group
/// (broadcast or multicast) MAC address.
pub struct L2 {
    pub l3_offset: usize,
    pub family: Family,
    pub to_group: bool,
    /// A group source address is never a real sender's: the answer would go to every host of the
    /// segment.
    pub from_group: bool,
}

/// The I/G bit of a MAC address (its first byte's lowest bit): set in broadcast and multicast
/// addresses.
const MAC_GROUP_BIT: u8 = 0x01;

#[inline(always)]
pub fn parse(ctx: &XdpContext) -> Result<L2, Counter> {
    let eth: *mut EthHdr = ptr_at(ctx, 0).map_err(|_| Counter::PassNotIp)?;
    // SAFETY: bounds checked by ptr_at.
    let (mut ether_type, to_group, from_group) = unsafe {
        (
            u16::from_be((*eth).ether_type),
            (*eth).dst_addr[0] & MAC_GROUP_BIT != 0,
            (*eth).src_addr[0] & MAC_GROUP_BIT != 0,
        )
    };
    let mut l3_offset = EthHdr::LEN;
    if ether_type == ETH_P_8021Q || ether_type == ETH_P_8021AD {
        let inner: *mut [u8; 2] = ptr_at(ctx, EthHdr::LEN + 2).map_err(|_| Counter::PassNotIp)?;
        // SAFETY: bounds checked by ptr_at.
        ether_type = be16(unsafe { *inner });
        l3_offset += VLAN_TAG_LEN;
    }
    let family = match ether_type {
        ETH_P_IPV4 => Family::V4,
        ETH_P_IPV6 => Family::V6,
        // A second tag, ARP, anything else.
        _ => return Err(Counter::PassNotIp),
    };
    Ok(L2 {
        l3_offset,
        family,
        to_group,
        from_group,
    })
}

/// Swaps source and destination MAC addresses: the answer goes back where the query came from.
#[inline(always)]
pub fn swap_macs(ctx: &XdpContext) -> Result<(), Counter> {
    let eth: *mut EthHdr = ptr_at(ctx, 0)?;
    // SAFETY: bounds checked by ptr_at.
    unsafe { core::mem::swap(&mut (*eth).src_addr, &mut (*eth).dst_addr) };
    Ok(())
}
