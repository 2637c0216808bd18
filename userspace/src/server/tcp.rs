//! DNS over TCP (RFC 7766): several queries per connection, answered in order; an idle timeout;
//! a cap on open connections (new ones wait for a free slot, the kernel backlog holds them).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tracing::debug;

use crate::server::{Shared, answer::Transport};

/// A connection with no query for this long is closed (RFC 7766 §6.2.3 suggests seconds).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pending connections the kernel holds while all slots are busy.
const LISTEN_BACKLOG: i32 = 1024;
/// Open connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;

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

/// Accepts connections until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, peer)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Err(err) = serve_connection(stream, &shared).await {
                        debug!(%peer, %err, "TCP connection ended");
                    }
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

async fn serve_connection(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(512);
    loop {
        let len = match tokio::time::timeout(IDLE_TIMEOUT, stream.read_u16()).await {
            Ok(Ok(len)) => len as usize,
            // Idle, or the client closed.
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        buf.resize(len, 0);
        tokio::time::timeout(IDLE_TIMEOUT, stream.read_exact(&mut buf))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        let Some(answer) = shared.answer(&buf, Transport::Tcp) else {
            continue;
        };
        let mut framed = Vec::with_capacity(answer.len() + 2);
        framed.extend_from_slice(&(answer.len() as u16).to_be_bytes());
        framed.extend_from_slice(&answer);
        stream.write_all(&framed).await?;
    }
}
