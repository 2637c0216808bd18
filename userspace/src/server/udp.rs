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
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, warn};

use hostport_dns_core::dns::{Query, message::Transport};

use crate::server::{Shared, gate::Client};

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

/// The UDP workers: one thread per socket.
pub struct UdpWorkers {
    sockets: Vec<Arc<Socket>>,
    threads: Vec<thread::JoinHandle<()>>,
}

/// Serves each socket on its own thread, until [`UdpWorkers::hand_over`] or the process exits.
pub fn serve(sockets: Vec<Socket>, shared: Arc<Shared>) -> io::Result<UdpWorkers> {
    let mut workers = UdpWorkers {
        sockets: Vec::new(),
        threads: Vec::new(),
    };
    for (i, socket) in sockets.into_iter().enumerate() {
        let socket = Arc::new(socket);
        let shared = shared.clone();
        let name = format!("dns-udp-{i}");
        let alive = shared.liveness.register(name.clone());
        let served = socket.clone();
        workers
            .threads
            .push(thread::Builder::new().name(name).spawn(move || {
                let _alive = alive;
                serve_socket(&served, &shared);
            })?);
        workers.sockets.push(socket);
    }
    Ok(workers)
}

/// How long a worker waits for the next datagram once its socket is handed over: the queue is
/// drained by then.
const DRAIN_POLL: Duration = Duration::from_millis(20);

impl UdpWorkers {
    /// Leaves the reuse-port groups (each socket connected to a peer that never sends: the
    /// kernel gives new queries to the other agent's sockets, or refuses them when there is
    /// none), answers what the sockets already hold, and returns once every worker is done or
    /// `limit` has passed. Call once [`Shared::closing`] is set.
    pub fn hand_over(self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        // Held until the process ends: nothing may send from their ports meanwhile.
        let mut peers = Vec::new();
        for socket in &self.sockets {
            match leave_group(socket) {
                Ok(peer) => peers.push(peer),
                Err(err) => {
                    debug!(%err, "cannot take a UDP socket out of its group: closing it as it is")
                }
            }
        }
        while std::time::Instant::now() < deadline && self.threads.iter().any(|t| !t.is_finished())
        {
            thread::sleep(Duration::from_millis(5));
        }
        std::mem::forget(peers);
    }
}

/// Connects `socket` to a loopback port of its own, bound for this and never sent from but
/// once: an empty datagram that wakes the worker blocked on the socket, which from then on
/// reads with a timeout, so it returns once the queue is empty.
fn leave_group(socket: &Socket) -> io::Result<std::net::UdpSocket> {
    let local = socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))?;
    let (loopback, reach): (IpAddr, IpAddr) = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            (Ipv4Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into())
        }
        IpAddr::V4(ip) => (Ipv4Addr::LOCALHOST.into(), ip.into()),
        IpAddr::V6(ip) => (Ipv6Addr::LOCALHOST.into(), ip.into()),
    };
    let peer = std::net::UdpSocket::bind((loopback, 0))?;
    socket.set_read_timeout(Some(DRAIN_POLL))?;
    socket.connect(&peer.local_addr()?.into())?;
    peer.send_to(&[], (reach, local.port()))?;
    Ok(peer)
}

/// Datagrams moved per recvmmsg/sendmmsg call under load (one call still returns as soon as one
/// datagram is there).
const BATCH: usize = 32;

/// Makes a worker panic on a query that carries this text (the tests' stand-in for a bug).
pub const PANIC_ON_ENV: &str = "HOSTPORT_DNS_TEST_PANIC_ON";

fn serve_socket(socket: &Socket, shared: &Shared) {
    let mut batch = Batch::new();
    let panic_on = std::env::var(PANIC_ON_ENV).ok().filter(|t| !t.is_empty());
    loop {
        match batch.receive(socket) {
            Ok(received) => {
                let mut answers: Vec<(Vec<u8>, usize)> = Vec::with_capacity(received);
                for i in 0..received {
                    let Some(client) = batch.client(i) else {
                        continue;
                    };
                    // The empty datagram that wakes a handed-over worker (`leave_group`).
                    if batch.query(i).is_empty() && shared.closing.is_closing() {
                        continue;
                    }
                    if let Some(text) = &panic_on
                        && contains(batch.query(i), text.as_bytes())
                    {
                        panic!("{PANIC_ON_ENV}: a query carries {text:?}");
                    }
                    // The query's view, read once here: every step after reads it.
                    let query = Query::read(batch.query(i));
                    if let Some(answer) = shared.answer_client(&query, Transport::Udp, client) {
                        answers.push((answer, i));
                    }
                }
                if let Err(err) = batch.send(socket, &answers) {
                    warn!(%err, "cannot send UDP answers");
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            // Only a handed-over socket has a receive timeout: its queue is empty.
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && shared.closing.is_closing() =>
            {
                return;
            }
            Err(err) => {
                warn!(%err, "UDP receive failed");
                thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Buffers for one recvmmsg/sendmmsg round: queries in, answers out, each with the peer's
/// address and the local address it was sent to.
struct Batch {
    buffers: Vec<[u8; MAX_QUERY]>,
    peers: Vec<libc::sockaddr_storage>,
    controls: Vec<[u8; CMSG_SPACE]>,
    lengths: Vec<usize>,
    locals: Vec<Option<IpAddr>>,
}

impl Batch {
    fn new() -> Self {
        // SAFETY: an all-zero sockaddr_storage is valid.
        let zero_peer: libc::sockaddr_storage = unsafe { zeroed() };
        Self {
            buffers: vec![[0u8; MAX_QUERY]; BATCH],
            peers: vec![zero_peer; BATCH],
            controls: vec![[0u8; CMSG_SPACE]; BATCH],
            lengths: vec![0; BATCH],
            locals: vec![None; BATCH],
        }
    }

    /// Who sent datagram `i`.
    fn client(&self, i: usize) -> Option<Client> {
        Some(Client {
            addr: socket_address(&self.peers[i])?,
        })
    }

    fn query(&self, i: usize) -> &[u8] {
        &self.buffers[i][..self.lengths[i]]
    }

    /// Waits for at least one datagram and takes up to BATCH; returns how many. Truncated
    /// datagrams (longer than any query we answer) come back empty and are not answered.
    fn receive(&mut self, socket: &Socket) -> io::Result<usize> {
        // SAFETY: every pointer handed to recvmmsg points into this batch's buffers, which
        // outlive the call; the lengths given are the buffers' sizes.
        unsafe {
            let mut iovs: Vec<libc::iovec> = self
                .buffers
                .iter_mut()
                .map(|b| libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
                .map(|i| {
                    let mut hdr: libc::msghdr = zeroed();
                    hdr.msg_name = (&mut self.peers[i] as *mut libc::sockaddr_storage).cast();
                    hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
                    hdr.msg_iov = &mut iovs[i];
                    hdr.msg_iovlen = 1;
                    hdr.msg_control = self.controls[i].as_mut_ptr().cast();
                    hdr.msg_controllen = CMSG_SPACE;
                    libc::mmsghdr {
                        msg_hdr: hdr,
                        msg_len: 0,
                    }
                })
                .collect();
            let n = libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            );
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            for (i, msg) in msgs.iter().take(n as usize).enumerate() {
                let truncated = msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
                self.lengths[i] = if truncated { 0 } else { msg.msg_len as usize };
                self.locals[i] = local_address(&msg.msg_hdr);
            }
            Ok(n as usize)
        }
    }

    /// Sends each answer to the peer of the query it answers, from the address that query was
    /// sent to.
    fn send(&mut self, socket: &Socket, answers: &[(Vec<u8>, usize)]) -> io::Result<()> {
        if answers.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `receive`; the control buffers are rewritten with one pktinfo each.
        unsafe {
            let mut iovs: Vec<libc::iovec> = answers
                .iter()
                .map(|(a, _)| libc::iovec {
                    iov_base: a.as_ptr() as *mut _,
                    iov_len: a.len(),
                })
                .collect();
            let mut out_controls = vec![[0u8; CMSG_SPACE]; answers.len()];
            let mut msgs: Vec<libc::mmsghdr> = answers
                .iter()
                .enumerate()
                .map(|(j, (_, i))| {
                    let mut hdr: libc::msghdr = zeroed();
                    hdr.msg_name = (&mut self.peers[*i] as *mut libc::sockaddr_storage).cast();
                    hdr.msg_namelen = match self.peers[*i].ss_family as i32 {
                        libc::AF_INET => size_of::<libc::sockaddr_in>() as u32,
                        _ => size_of::<libc::sockaddr_in6>() as u32,
                    };
                    hdr.msg_iov = &mut iovs[j];
                    hdr.msg_iovlen = 1;
                    if let Some(local) = self.locals[*i] {
                        hdr.msg_control = out_controls[j].as_mut_ptr().cast();
                        hdr.msg_controllen = CMSG_SPACE;
                        hdr.msg_controllen = write_pktinfo(&hdr, local);
                    }
                    libc::mmsghdr {
                        msg_hdr: hdr,
                        msg_len: 0,
                    }
                })
                .collect();
            let mut sent = 0;
            while sent < msgs.len() {
                let n = libc::sendmmsg(
                    socket.as_raw_fd(),
                    msgs[sent..].as_mut_ptr(),
                    (msgs.len() - sent) as u32,
                    0,
                );
                if n < 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    // Skip the datagram that failed (an unreachable peer) and go on.
                    sent += 1;
                    if sent >= msgs.len() {
                        return Err(err);
                    }
                    continue;
                }
                sent += n as usize;
            }
            drop(out_controls);
        }
        Ok(())
    }
}

/// Writes a pktinfo control message selecting `local` as the source address into the control
/// buffer of `msg`; returns the control length to use.
///
/// SAFETY: `msg.msg_control` must point to at least CMSG_SPACE writable bytes.
unsafe fn write_pktinfo(msg: &libc::msghdr, local: IpAddr) -> usize {
    // SAFETY: per the contract, the control buffer holds one pktinfo of either family.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(msg);
        match local {
            IpAddr::V4(a) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IP;
                (*cmsg).cmsg_type = libc::IP_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as usize;
                let mut info: libc::in_pktinfo = zeroed();
                info.ipi_spec_dst.s_addr = u32::from(a).to_be();
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::in_pktinfo, info);
                libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize
            }
            IpAddr::V6(a) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as usize;
                let mut info: libc::in6_pktinfo = zeroed();
                info.ipi6_addr.s6_addr = a.octets();
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::in6_pktinfo, info);
                libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize
            }
        }
    }
}

/// The source address of a datagram, as recvmmsg wrote it.
fn socket_address(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family says which struct the storage holds; both fit in it.
    unsafe {
        match storage.ss_family as i32 {
            libc::AF_INET => {
                let sin = &*(storage as *const libc::sockaddr_storage as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 =
                    &*(storage as *const libc::sockaddr_storage as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            _ => None,
        }
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
