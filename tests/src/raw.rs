//! Raw Ethernet frames on an interface (AF_PACKET): for queries no socket would send (spoofed
//! sources, group MAC addresses), and to see every frame that comes back.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

/// Every EtherType (linux/if_ether.h).
const ETH_P_ALL: u16 = 0x0003;

/// A packet socket bound to one interface of the calling thread's namespace.
pub struct RawSocket {
    fd: OwnedFd,
}

impl RawSocket {
    pub fn open(ifname: &str) -> io::Result<Self> {
        // SAFETY: plain socket(2) call.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let name = std::ffi::CString::new(ifname).map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated interface name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: an all-zero sockaddr_ll is valid; family, protocol and index set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: addr is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Sends one whole frame.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sending from a buffer of the given length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Every frame that arrives within `wait` (frames this socket sent itself excluded: they are
    /// outgoing).
    pub fn receive_for(&self, wait: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut frames = Vec::new();
        let mut buf = vec![0u8; 4096];
        while Instant::now() < deadline {
            // SAFETY: an all-zero sockaddr_ll is valid output space.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: receiving into a local buffer, non-blocking.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n > 0 {
                if from.sll_pkttype != libc::PACKET_OUTGOING {
                    frames.push(buf[..n as usize].to_vec());
                }
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        frames
    }
}

/// Whether a frame is a UDP datagram from port `port` (an answer of the server under test).
pub fn is_udp_from_port(frame: &[u8], port: u16) -> bool {
    let ether_type = u16::from_be_bytes([frame[12], frame[13]]);
    let udp_at = match ether_type {
        0x0800 if frame.len() >= 42 && frame[23] == 17 => 14 + usize::from(frame[14] & 0x0f) * 4,
        0x86dd if frame.len() >= 62 && frame[20] == 17 => 54,
        _ => return false,
    };
    frame
        .get(udp_at..udp_at + 2)
        .is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == port)
}
