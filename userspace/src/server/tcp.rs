//! DNS over TCP (RFC 7766): several queries per connection, answered in order, within bounds a
//! hostile client cannot stretch: an idle timeout, a write timeout (a client that sends queries
//! and never reads its answers loses its connection once the socket buffers fill), a lifetime and
//! a query count per connection, and caps on open connections per client address and in all.
//! New connections beyond the global cap wait in the kernel backlog; those beyond a client's cap
//! are closed at once. Every close for a limit is counted (`hostport_dns_tcp_closed_total`).

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex},
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::Instant,
};
use tracing::debug;

use hostport_dns_core::{
    answer::TCP_IDLE_TIMEOUT,
    dns::{Query, message::Transport},
};

use crate::server::{
    Shared,
    gate::Client,
    limits::{DEFAULT_CLIENT_PREFIX_V6, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_CLIENT},
    stats::TcpClose,
};

/// An answer the client does not take within this long closes the connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this long, however busy.
pub const MAX_LIFETIME: Duration = Duration::from_secs(120);
/// ...or after this many queries.
pub const MAX_QUERIES: u32 = 10_000;
/// Pending connections the kernel holds while all slots are busy.
const LISTEN_BACKLOG: i32 = 1024;

/// The caps on open connections.
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    pub max_connections: usize,
    pub max_per_client: usize,
    /// The IPv6 prefix length one client is counted by: a host usually holds a whole /64, so
    /// counting each address would let one host take every slot.
    pub client_prefix_v6: u8,
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_client: DEFAULT_MAX_PER_CLIENT,
            client_prefix_v6: DEFAULT_CLIENT_PREFIX_V6,
        }
    }
}

impl TcpLimits {
    /// The client `peer` counts as: IPv4 addresses one by one, IPv6 addresses by their
    /// [`TcpLimits::client_prefix_v6`] (an IPv4-mapped address is IPv4).
    pub fn client_of(&self, peer: IpAddr) -> IpAddr {
        match peer.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u32::from(self.client_prefix_v6.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
            v4 => v4,
        }
    }
}

/// A listening socket on `addr`; IPv6 sockets take IPv6 only (IPv4 has its own).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Open connections per client (an address, or an IPv6 prefix); an entry lives only while its client has one, so the
/// map never holds more entries than connections are open.
#[derive(Clone, Default)]
struct PerClient(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One open connection of a client, counted until dropped.
struct ClientSlot {
    clients: PerClient,
    client: IpAddr,
}

impl PerClient {
    fn take(&self, client: IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            client,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// Accepts connections until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, limits: TcpLimits) {
    let _alive = shared.liveness.register(format!(
        "dns-tcp-{}",
        listener
            .local_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string())
    ));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let clients = PerClient::default();
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Stopping: the listener closes, and new connections go to the agent beside this one.
        let accepted = tokio::select! {
            biased;
            () = shared.closing.wait() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                if !shared.gate.accepts_connection(peer.ip(), &shared) {
                    drop(stream);
                    continue;
                }
                let client = limits.client_of(peer.ip());
                let Some(slot) = clients.take(client, limits.max_per_client) else {
                    shared.stats.tcp_closed(TcpClose::ClientCap);
                    drop(stream);
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    shared.stats.tcp_opened();
                    let close = serve_connection(stream, &shared, peer).await;
                    shared.stats.tcp_closed(close);
                    debug!(%peer, ?close, "TCP connection ended");
                    drop(slot);
                    drop(permit);
                });
            }
            Err(err) => {
                debug!(%err, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Serves one connection until it ends; returns why.
async fn serve_connection(
    mut stream: TcpStream,
    shared: &Arc<Shared>,
    peer: SocketAddr,
) -> TcpClose {
    let client = Client { addr: peer };
    if stream.set_nodelay(true).is_err() {
        return TcpClose::Error;
    }
    let closes_at = Instant::now() + MAX_LIFETIME;
    let mut buf = Vec::with_capacity(512);
    for _ in 0..MAX_QUERIES {
        // The idle timer runs from the last answer, but never past the connection's lifetime.
        let deadline = (Instant::now() + TCP_IDLE_TIMEOUT).min(closes_at);
        // Between queries, the agent's stop closes the connection (RFC 7766 §6.2.3 lets a
        // server close idle connections; the client reconnects, to the agent beside this one).
        // A query already there is read (and answered) first.
        let len = tokio::select! {
            biased;
            len = tokio::time::timeout_at(deadline, stream.read_u16()) => len,
            () = shared.closing.wait() => return TcpClose::Stopping,
        };
        let len = match len {
            Ok(Ok(len)) => len as usize,
            Ok(Err(_)) => return TcpClose::ByClient,
            Err(_) if deadline == closes_at => return TcpClose::Lifetime,
            Err(_) => return TcpClose::Idle,
        };
        buf.resize(len, 0);
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return TcpClose::ByClient,
            Err(_) => return TcpClose::Idle,
        }
        // Refuse mode serves a client outside the allow-list REFUSED, transfers included.
        let admitted = || shared.gate.policy.grants(client.addr.ip()).allowed;
        // The query's view, read once here: every step after reads it.
        let query = Query::read(&buf);
        if query.asks_transfer() && shared.transfers.is_some() && admitted() {
            match transfer(&mut stream, shared, &buf, client).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(close) => return close,
            }
        }
        let Some(answer) = shared.answer_client(&query, Transport::Tcp, client) else {
            continue;
        };
        if let Err(close) = send(&mut stream, &answer).await {
            return close;
        }
    }
    TcpClose::Queries
}

/// Messages of a transfer made but not yet sent, at most: a whole zone is never held at once.
const TRANSFER_QUEUE: usize = 4;

/// Sends a transfer's messages as they are made. A whole zone takes a while to make and sign
/// (0.4 s for 100k names): not on an async worker's time, which the sources, the publisher and
/// /readyz share. False: the query is not a transfer request after all.
async fn transfer(
    stream: &mut TcpStream,
    shared: &Arc<Shared>,
    query: &[u8],
    client: Client,
) -> Result<bool, TcpClose> {
    let (sender, mut messages) = tokio::sync::mpsc::channel::<Vec<u8>>(TRANSFER_QUEUE);
    let (query, transferring) = (query.to_vec(), shared.clone());
    // The maker's thread owns a copy of the bytes and reads its own view of them (a transfer
    // is made of a whole zone: a second read of one query's framing is nothing beside it).
    let maker = tokio::task::spawn_blocking(move || {
        let query = Query::read(&query);
        transferring.transfer_stream(&query, Transport::Tcp, client, &mut |message| {
            sender.blocking_send(message).is_ok()
        })
    });
    while let Some(message) = messages.recv().await {
        // Returning drops the receiver: the maker stops at its next message.
        send(stream, &message).await?;
    }
    maker.await.map_err(|_| TcpClose::Error)
}

/// Writes one message with its length in front, within [`WRITE_TIMEOUT`].
async fn send(stream: &mut TcpStream, message: &[u8]) -> Result<(), TcpClose> {
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&(message.len() as u16).to_be_bytes());
    framed.extend_from_slice(message);
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&framed)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(TcpClose::ByClient),
        Err(_) => Err(TcpClose::WriteTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_count_by_their_prefix_and_ipv4_clients_by_address() {
        let limits = TcpLimits::default();
        let client = |text: &str| limits.client_of(text.parse().expect("an address"));
        assert_eq!(client("2001:db8:1:2::7"), client("2001:db8:1:2:ffff::1"));
        assert_ne!(client("2001:db8:1:2::7"), client("2001:db8:1:3::7"));
        assert_ne!(client("198.18.0.1"), client("198.18.0.2"));
        assert_eq!(client("::ffff:198.18.0.1"), client("198.18.0.1"));
        let each = TcpLimits {
            client_prefix_v6: 128,
            ..limits
        };
        let client = |text: &str| each.client_of(text.parse().expect("an address"));
        assert_ne!(client("2001:db8::1"), client("2001:db8::2"));
    }
}
