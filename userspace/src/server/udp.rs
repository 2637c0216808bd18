//! UDP: one socket per core and address family, bound with SO_REUSEPORT, each served by its own
//! thread. Answers leave from the address the query arrived at (IP_PKTINFO / IPV6_PKTINFO), so
//! a client that asked a VIP hears back from the VIP.

use std::{
    io,
    mem::{size_of, zeroed},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::AsRawFd,
    sync::Arc,
    thread,
};

use socket2::{Domain, Protocol, Socket, Type};
use tracing::warn;

use crate::server::{Shared, answer::Transport};

/// Largest datagram read: a query longer than this is not a DNS query we answer.
const MAX_QUERY: usize = 4096;
/// Room for one pktinfo control message of either family.
const CMSG_SPACE: usize = 64;

/// Binds `count` reuse-port sockets to `addr`.
pub fn bind(addr: SocketAddr, count: usize) -> io::Result<Vec<Socket>> {
    (0..count.max(1)).map(|_| bind_one(addr)).collect()
}

fn bind_one(addr: SocketAddr) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    let on: libc::c_int = 1;
    let (level, option) = if addr.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    } else {
        socket.set_only_v6(true)?;
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    };
    // SAFETY: setsockopt with an int option.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Serves each socket on its own thread, until the process exits.
pub fn serve(sockets: Vec<Socket>, shared: Arc<Shared>) -> io::Result<()> {
    for (i, socket) in sockets.into_iter().enumerate() {
        let shared = shared.clone();
        thread::Builder::new()
            .name(format!("dns-udp-{i}"))
            .spawn(move || serve_socket(&socket, &shared))?;
    }
    Ok(())
}

fn serve_socket(socket: &Socket, shared: &Shared) {
    let mut buf = [0u8; MAX_QUERY];
    loop {
        match receive(socket, &mut buf) {
            Ok(Some(datagram)) => {
                if let Some(answer) = shared.answer(&buf[..datagram.len], Transport::Udp)
                    && let Err(err) = send(socket, &answer, &datagram)
                {
                    warn!(%err, peer = %datagram.peer, "cannot send a UDP answer");
                }
            }
            Ok(None) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => {
                warn!(%err, "UDP receive failed");
                thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// One received datagram: its length, sender and the local address it was sent to.
struct Datagram {
    len: usize,
    peer: SocketAddr,
    local: Option<IpAddr>,
}

fn receive(socket: &Socket, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
    // SAFETY: zeroed sockaddr_storage / msghdr are valid; recvmsg fills them within the sizes
    // given.
    unsafe {
        let mut peer: libc::sockaddr_storage = zeroed();
        let mut control = [0u8; CMSG_SPACE];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = (&mut peer as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len();
        let n = libc::recvmsg(socket.as_raw_fd(), &mut msg, 0);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Ok(None);
        }
        let Some(peer) = to_socket_addr(&peer) else {
            return Ok(None);
        };
        Ok(Some(Datagram {
            len: n as usize,
            peer,
            local: local_address(&msg),
        }))
    }
}

/// The destination address from the pktinfo control message.
///
/// SAFETY: msg must come from a successful recvmsg.
unsafe fn local_address(msg: &libc::msghdr) -> Option<IpAddr> {
    // SAFETY: walking the control messages recvmsg wrote.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            if header.cmsg_level == libc::IPPROTO_IP && header.cmsg_type == libc::IP_PKTINFO {
                let info = &*(libc::CMSG_DATA(cmsg) as *const libc::in_pktinfo);
                return Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            }
            if header.cmsg_level == libc::IPPROTO_IPV6 && header.cmsg_type == libc::IPV6_PKTINFO {
                let info = &*(libc::CMSG_DATA(cmsg) as *const libc::in6_pktinfo);
                return Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
        None
    }
}

fn send(socket: &Socket, answer: &[u8], to: &Datagram) -> io::Result<()> {
    let peer = socket2::SockAddr::from(to.peer);
    // SAFETY: buffers outlive the call; the control message is built within its buffer.
    unsafe {
        let mut control = [0u8; CMSG_SPACE];
        let mut iov = libc::iovec {
            iov_base: answer.as_ptr() as *mut _,
            iov_len: answer.len(),
        };
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = peer.as_ptr() as *mut _;
        msg.msg_namelen = peer.len();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(local) = to.local {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len();
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            match local {
                IpAddr::V4(a) => {
                    (*cmsg).cmsg_level = libc::IPPROTO_IP;
                    (*cmsg).cmsg_type = libc::IP_PKTINFO;
                    (*cmsg).cmsg_len =
                        libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as usize;
                    let mut info: libc::in_pktinfo = zeroed();
                    info.ipi_spec_dst.s_addr = u32::from(a).to_be();
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::in_pktinfo, info);
                    msg.msg_controllen =
                        libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize;
                }
                IpAddr::V6(a) => {
                    (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                    (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                    (*cmsg).cmsg_len =
                        libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as usize;
                    let mut info: libc::in6_pktinfo = zeroed();
                    info.ipi6_addr.s6_addr = a.octets();
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(cmsg) as *mut libc::in6_pktinfo,
                        info,
                    );
                    msg.msg_controllen =
                        libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize;
                }
            }
        }
        if libc::sendmsg(socket.as_raw_fd(), &msg, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn to_socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family field says which sockaddr the storage holds.
    unsafe {
        match storage.ss_family as i32 {
            libc::AF_INET => {
                let sin = &*(storage as *const _ as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = &*(storage as *const _ as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            _ => None,
        }
    }
}
