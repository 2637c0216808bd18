//! Keeps the XDP program's local addresses equal to the node's addresses, VIPs included: only
//! packets for these addresses are answered in the kernel. They are part of the table's
//! generation, so the map writer writes them; this follower tells it whenever the kernel announces
//! an address change (netlink), and checks every few seconds regardless.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{Arc, Mutex},
    time::Duration,
};

use hostport_dns_common::{
    limits::{MAX_LOCAL_V4, MAX_LOCAL_V6},
    record::LocalAddrs as LocalAddrsValue,
};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use crate::xdp::writer::MapWriter;

/// Re-read the addresses at least this often, in case a netlink message was lost.
const RESYNC_INTERVAL: Duration = Duration::from_secs(5);

/// Hands the node's addresses to the map writer.
pub struct LocalAddrs {
    writer: Arc<Mutex<MapWriter>>,
}

impl LocalAddrs {
    pub fn new(writer: Arc<Mutex<MapWriter>>) -> Self {
        Self { writer }
    }

    /// Writes the node's current addresses; returns how many there are.
    pub fn sync(&mut self) -> std::io::Result<usize> {
        let current = node_addresses()?;
        let value = compile(&current);
        // A switch waits for the program's running invocations: not on an async worker's time.
        tokio::task::block_in_place(|| {
            let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            writer.write_local(value)
        })
        .map_err(std::io::Error::other)?;
        Ok(current.len())
    }

    /// Follows address changes until the task is dropped.
    pub async fn follow(mut self) {
        let watcher = AddressWatcher::open()
            .map_err(|err| warn!(%err, "no netlink address events; polling only"))
            .ok();
        loop {
            match self.sync() {
                Ok(count) => debug!(count, "local addresses synced"),
                Err(err) => warn!(%err, "cannot write the local addresses"),
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

/// The kernel's view of a set of addresses. Beyond the array's capacity, addresses are left to
/// userspace (which answers on every address).
pub fn compile(addresses: &BTreeSet<IpAddr>) -> LocalAddrsValue {
    let mut value = LocalAddrsValue::EMPTY;
    let (mut v4, mut v6) = (0usize, 0usize);
    for address in addresses {
        match address {
            IpAddr::V4(a) if v4 < MAX_LOCAL_V4 => {
                value.v4[v4] = a.octets();
                v4 += 1;
            }
            IpAddr::V6(a) if v6 < MAX_LOCAL_V6 => {
                value.v6[v6] = a.octets();
                v6 += 1;
            }
            other => {
                warn!(address = %other, "more local addresses than the kernel checks; this one is answered by userspace")
            }
        }
    }
    value.v4_count = v4 as u32;
    value.v6_count = v6 as u32;
    value
}

/// Every unicast address of every interface.
pub fn node_addresses() -> std::io::Result<BTreeSet<IpAddr>> {
    let mut addresses = BTreeSet::new();
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
