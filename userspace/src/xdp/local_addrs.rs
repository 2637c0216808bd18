//! Keeps the XDP program's local-address sets equal to the node's addresses, VIPs included:
//! only packets for these addresses are answered in the kernel. The sets are re-read whenever
//! the kernel announces an address change (netlink) and every few seconds regardless.

use std::{
    collections::HashSet,
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData},
};
use hostport_dns_common::{maps, record::LocalAddrValue};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use crate::xdp::writer::{WriteError, take};

/// Re-read the addresses at least this often, in case a netlink message was lost.
const RESYNC_INTERVAL: Duration = Duration::from_secs(5);

pub struct LocalAddrs {
    v4: BpfHashMap<MapData, [u8; 4], LocalAddrValue>,
    v6: BpfHashMap<MapData, [u8; 16], LocalAddrValue>,
    written: HashSet<IpAddr>,
}

impl LocalAddrs {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, WriteError> {
        let v4 = take(ebpf, maps::LOCAL_V4)?;
        let v6 = take(ebpf, maps::LOCAL_V6)?;
        let mut written = HashSet::new();
        written.extend(v4.keys().flatten().map(|k: [u8; 4]| IpAddr::from(k)));
        written.extend(v6.keys().flatten().map(|k: [u8; 16]| IpAddr::from(k)));
        Ok(Self { v4, v6, written })
    }

    /// Writes the node's current addresses; returns how many there are.
    pub fn sync(&mut self) -> std::io::Result<usize> {
        let current = node_addresses()?;
        for addr in current.difference(&self.written) {
            let result = match addr {
                IpAddr::V4(a) => self.v4.insert(a.octets(), 1, 0),
                IpAddr::V6(a) => self.v6.insert(a.octets(), 1, 0),
            };
            if let Err(err) = result {
                warn!(%addr, %err, "cannot add a local address to the XDP set");
            }
        }
        for addr in self.written.difference(&current) {
            let _ = match addr {
                IpAddr::V4(a) => self.v4.remove(&a.octets()),
                IpAddr::V6(a) => self.v6.remove(&a.octets()),
            };
        }
        let count = current.len();
        self.written = current;
        Ok(count)
    }

    /// Follows address changes until the task is dropped.
    pub async fn follow(mut self) {
        let watcher = AddressWatcher::open()
            .map_err(|err| warn!(%err, "no netlink address events; polling only"))
            .ok();
        loop {
            match self.sync() {
                Ok(count) => debug!(count, "local addresses synced"),
                Err(err) => warn!(%err, "cannot list local addresses"),
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

/// Every unicast address of every interface.
pub fn node_addresses() -> std::io::Result<HashSet<IpAddr>> {
    let mut addresses = HashSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let entry = unsafe { &*cursor };
        if let Some(addr) = socket_address(entry.ifa_addr) {
            addresses.insert(addr);
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: the list from getifaddrs above.
    unsafe { libc::freeifaddrs(head) };
    Ok(addresses)
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
