//! Keeps the XDP program's host-address set equal to this host's addresses: every address of
//! every interface and each IPv4 subnet's broadcast address (sources that cannot have sent a
//! query), and among them those it answers on, VIPs included (see [`AnswerOn`]): only packets
//! for these are answered in the kernel. The set is part of the table's generation, so the map
//! writer writes it; this follower posts it whenever the kernel announces an address change
//! (netlink), and checks every few seconds regardless.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::Arc,
    time::Duration,
};

use hostport_dns_common::host::{HOST_ANSWER, HOST_BROADCAST, HOST_OWN};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use crate::xdp::{hostset::HostAddresses, writer_thread::WriterThread};

/// Re-read the addresses at least this often, in case a netlink message was lost.
const RESYNC_INTERVAL: Duration = Duration::from_secs(5);

/// Interfaces whose addresses are not this host's to answer on by default: IPVS puts every
/// ClusterIP on `kube-ipvs0` (a dummy device), and the stack forwards what arrives for them.
const IPVS_INTERFACE: &str = "kube-ipvs0";
/// The driver of dummy devices, as ethtool names it.
const DUMMY_DRIVER: &str = "dummy";

/// Which of the node's addresses the kernel answers on (`--answer-on`): by default every
/// address but link-local ones and those on dummy or IPVS interfaces; or exactly the named
/// addresses (while the node holds them: a VIP that moves is answered where it is) and the
/// addresses of the named interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnswerOn {
    pub addresses: Vec<IpAddr>,
    pub interfaces: Vec<String>,
}

impl AnswerOn {
    /// From `--answer-on` values: each an address or an interface name.
    pub fn parse(values: &[String]) -> Self {
        let mut on = Self::default();
        for value in values {
            match value.parse::<IpAddr>() {
                Ok(addr) => on.addresses.push(addr),
                Err(_) => on.interfaces.push(value.clone()),
            }
        }
        on
    }

    fn is_default(&self) -> bool {
        self.addresses.is_empty() && self.interfaces.is_empty()
    }

    /// The addresses the kernel treats as this host's, out of every address of the node.
    pub fn select(&self, node: &[InterfaceAddress]) -> BTreeSet<IpAddr> {
        node.iter()
            .filter(|a| !is_link_local(a.address))
            .filter(|a| {
                if self.is_default() {
                    !a.on_dummy
                } else {
                    self.addresses.contains(&a.address) || self.interfaces.contains(&a.interface)
                }
            })
            .map(|a| a.address)
            .collect()
    }
}

fn is_link_local(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// Hands this host's addresses to the map writer.
pub struct LocalAddrs {
    writer: Arc<WriterThread>,
    answer_on: AnswerOn,
}

impl LocalAddrs {
    pub fn new(writer: Arc<WriterThread>, answer_on: AnswerOn) -> Self {
        Self { writer, answer_on }
    }

    /// Posts the node's current addresses; returns how many the kernel answers on.
    pub fn sync(&mut self) -> std::io::Result<usize> {
        let node = node_addresses()?;
        let answered = self.answer_on.select(&node);
        self.writer.post_host(host_addresses(&node, &answered));
        Ok(answered.len())
    }

    /// Follows address changes until the task is dropped.
    pub async fn follow(mut self) {
        let watcher = AddressWatcher::open()
            .map_err(|err| warn!(%err, "no netlink address events; polling only"))
            .ok();
        loop {
            match self.sync() {
                Ok(count) => debug!(count, "local addresses synced"),
                Err(err) => warn!(%err, "cannot list the local addresses"),
            }
            match &watcher {
                Some(w) => {
                    let _ = tokio::time::timeout(RESYNC_INTERVAL, w.changed()).await;
                }
                None => tokio::time::sleep(RESYNC_INTERVAL).await,
            }
        }
    }
}

/// What the kernel should know of this host: every address of `node` (its own), their subnets'
/// broadcast addresses, and which of them it answers on (`answered`).
pub fn host_addresses(node: &[InterfaceAddress], answered: &BTreeSet<IpAddr>) -> HostAddresses {
    let mut host = HostAddresses::default();
    for address in node {
        host.add(address.address, HOST_OWN);
        if let Some(broadcast) = address.broadcast {
            host.add(broadcast, HOST_BROADCAST);
        }
    }
    for address in answered {
        host.add(*address, HOST_OWN | HOST_ANSWER);
    }
    host
}

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub interface: String,
    pub address: IpAddr,
    /// The interface is a dummy device (or IPVS's `kube-ipvs0`).
    pub on_dummy: bool,
    /// The broadcast address of the address's IPv4 subnet, if it has one: the kernel makes one
    /// for every IPv4 address of a prefix shorter than /31, whether a broadcast address was
    /// configured or not (`fib_add_ifaddr`), and the stack drops queries from it.
    pub broadcast: Option<IpAddr>,
}

/// Every address of every interface.
pub fn node_addresses() -> std::io::Result<Vec<InterfaceAddress>> {
    let mut addresses = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut dummies: std::collections::BTreeMap<String, bool> = Default::default();
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let entry = unsafe { &*cursor };
        if let Some(address) = socket_address(entry.ifa_addr) {
            // SAFETY: ifa_name is a NUL-terminated interface name.
            let interface = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) }
                .to_string_lossy()
                .into_owned();
            let on_dummy = *dummies
                .entry(interface.clone())
                .or_insert_with(|| is_dummy(&interface));
            let broadcast = subnet_broadcast(address, socket_address(entry.ifa_netmask));
            addresses.push(InterfaceAddress {
                interface,
                address,
                on_dummy,
                broadcast,
            });
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: the list from getifaddrs above.
    unsafe { libc::freeifaddrs(head) };
    Ok(addresses)
}

/// Whether `interface` is a dummy device (by its driver, as `ethtool -i` reports it) or IPVS's.
fn is_dummy(interface: &str) -> bool {
    interface == IPVS_INTERFACE || driver_of(interface).is_some_and(|d| d == DUMMY_DRIVER)
}

/// `struct ethtool_drvinfo` (linux/ethtool.h), up to the fields read here and padded to its size.
#[repr(C)]
struct DriverInfo {
    cmd: u32,
    driver: [u8; 32],
    rest: [u8; 160],
}

const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
/// The ethtool ioctl (linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// `struct ifreq` with its union as the data pointer ethtool reads (40 bytes on 64-bit).
#[repr(C)]
struct EthtoolRequest {
    name: [u8; libc::IFNAMSIZ],
    data: *mut DriverInfo,
    pad: [u8; 16],
}

/// The driver of `interface`, from the ETHTOOL_GDRVINFO ioctl.
fn driver_of(interface: &str) -> Option<String> {
    let name = std::ffi::CString::new(interface).ok()?;
    // SAFETY: a plain socket(2) call; the descriptor is closed by OwnedFd.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut info = DriverInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 160],
    };
    let bytes = name.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return None;
    }
    let mut request = EthtoolRequest {
        name: [0; libc::IFNAMSIZ],
        data: &mut info,
        pad: [0; 16],
    };
    request.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: the request names the interface and points to `info`, both outliving the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut request) };
    if rc != 0 {
        return None;
    }
    let end = info.driver.iter().position(|b| *b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// The broadcast address of `address`'s subnet (the netmask's), for IPv4 prefixes below /31.
fn subnet_broadcast(address: IpAddr, netmask: Option<IpAddr>) -> Option<IpAddr> {
    let (IpAddr::V4(address), Some(IpAddr::V4(mask))) = (address, netmask) else {
        return None;
    };
    let mask = u32::from(mask);
    (mask.count_ones() < 31).then(|| IpAddr::V4((u32::from(address) | !mask).into()))
}

fn socket_address(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: sa points to a sockaddr whose family says which struct it is.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::from(sin6.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

/// A netlink socket subscribed to address changes; readable when one happened.
struct AddressWatcher {
    fd: AsyncFd<OwnedFd>,
}

impl AddressWatcher {
    fn open() -> std::io::Result<Self> {
        // SAFETY: plain socket(2) call.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_nl is valid; we set family and groups.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
        // SAFETY: addr is a valid sockaddr_nl of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the OwnedFd owns the descriptor, which stays open until the AsyncFd is dropped.
        let fd =
            unsafe { AsyncFd::register(fd) }.map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Self { fd })
    }

    /// Waits for an address change and drains the socket.
    async fn changed(&self) {
        let Ok(mut guard) = self.fd.readable().await else {
            return;
        };
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: reading into a local buffer of the given size.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                break;
            }
        }
        guard.clear_ready();
    }
}
