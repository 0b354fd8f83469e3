//! `ConnectionPool`: one shared [`RemotingClient`] per server address, reopened on demand.
//!
//! Invariants: at most one live connection per address is handed out at a time, and at most
//! one connect per address is under way (racing callers wait for it, within their timeout); a closed connection is never returned
//! again — the next request reconnects; every request is bounded by its timeout (connect
//! included).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_protocol::remoting::acl::Credentials;
use ferromq_protocol::remoting::tls::ClientTls;
use ferromq_protocol::remoting::{ClientOptions, RemotingClient, RemotingCommand};

use crate::error::ClientError;

/// The options of a client's pool: its connect timeout, the credentials every request is
/// signed with (ACL), and TLS.
pub fn options(
    connect_timeout: Duration,
    credentials: Option<&Credentials>,
    tls: Option<&ClientTls>,
) -> ClientOptions {
    ClientOptions {
        connect_timeout,
        credentials: credentials.cloned().map(Arc::new),
        tls: tls.cloned(),
        ..ClientOptions::default()
    }
}

/// Connections to name servers and brokers, keyed by address.
#[derive(Debug)]
pub struct ConnectionPool {
    options: ClientOptions,
    connections: Mutex<HashMap<SocketAddr, Arc<RemotingClient>>>,
    /// One connect at a time per address: callers racing to the same server wait for the
    /// first connect instead of each opening (and then dropping) their own.
    connecting: Mutex<HashMap<SocketAddr, Arc<tokio::sync::Mutex<()>>>>,
}

impl ConnectionPool {
    /// An empty pool whose connections use `options`.
    pub fn new(options: ClientOptions) -> Self {
        ConnectionPool {
            options,
            connections: Mutex::new(HashMap::new()),
            connecting: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Arc<RemotingClient>>> {
        // Every operation under this lock is one insert, get or remove.
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open connection to `addr`, connecting if there is none.
    ///
    /// # Errors
    /// [`ClientError::Transport`] when the connection cannot be established within
    /// `min(timeout, connect timeout)`.
    pub async fn get(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Arc<RemotingClient>, ClientError> {
        if let Some(conn) = self.open(addr) {
            return Ok(conn);
        }
        let gate = self
            .connecting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr)
            .or_default()
            .clone();
        let started = tokio::time::Instant::now();
        let _turn = tokio::time::timeout(timeout, gate.lock())
            .await
            .map_err(|_| ClientError::Transport {
                addr,
                source: ferromq_protocol::remoting::ClientError::Connect {
                    addr,
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {timeout:?} (another connect was under way)"),
                    ),
                },
            })?;
        // The caller ahead of us may have connected.
        if let Some(conn) = self.open(addr) {
            return Ok(conn);
        }
        let timeout = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        let options = ClientOptions {
            connect_timeout: self.options.connect_timeout.min(timeout),
            ..self.options.clone()
        };
        let conn = RemotingClient::connect_with(addr, options)
            .await
            .map_err(|source| ClientError::Transport { addr, source })?;
        let conn = Arc::new(conn);
        let mut map = self.lock();
        match map.get(&addr) {
            Some(existing) if !existing.is_closed() => Ok(existing.clone()),
            _ => {
                map.insert(addr, conn.clone());
                Ok(conn)
            }
        }
    }

    /// The pooled connection to `addr` if it is open.
    fn open(&self, addr: SocketAddr) -> Option<Arc<RemotingClient>> {
        self.lock().get(&addr).filter(|c| !c.is_closed()).cloned()
    }

    /// Sends `cmd` to `addr` and waits up to `timeout` for the reply (any code).
    ///
    /// # Errors
    /// [`ClientError::Transport`] on connect failure, timeout or a closed connection; the
    /// broken connection is dropped from the pool.
    pub async fn invoke(
        &self,
        addr: SocketAddr,
        cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        // An open connection costs no time: no clock reads on that (usual) path.
        let (conn, left) = match self.open(addr) {
            Some(conn) => (conn, timeout),
            None => {
                let started = tokio::time::Instant::now();
                let conn = self.get(addr, timeout).await?;
                let left = timeout
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                (conn, left)
            }
        };
        match conn.invoke(cmd, left).await {
            Ok(reply) => Ok(reply),
            Err(source) => {
                if conn.is_closed() {
                    self.forget(addr, &conn);
                }
                Err(ClientError::Transport { addr, source })
            }
        }
    }

    /// Like [`ConnectionPool::invoke`], but a reply with any code other than SUCCESS is an
    /// error carrying the broker's code and remark.
    ///
    /// # Errors
    /// [`ClientError::Transport`] as `invoke`, and [`ClientError::Broker`] for a refusal.
    pub async fn invoke_success(
        &self,
        addr: SocketAddr,
        cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let reply = self.invoke(addr, cmd, timeout).await?;
        if reply.code != ferromq_protocol::remoting::codes::response::SUCCESS {
            return Err(ClientError::Broker {
                addr,
                code: reply.code,
                remark: reply.remark.unwrap_or_default(),
            });
        }
        Ok(reply)
    }

    /// Sends `cmd` one-way to `addr`.
    ///
    /// # Errors
    /// [`ClientError::Transport`] when the frame cannot be queued for writing.
    pub async fn invoke_oneway(
        &self,
        addr: SocketAddr,
        cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let conn = self.get(addr, timeout).await?;
        conn.invoke_oneway(cmd).await.map_err(|source| {
            if conn.is_closed() {
                self.forget(addr, &conn);
            }
            ClientError::Transport { addr, source }
        })
    }

    fn forget(&self, addr: SocketAddr, conn: &Arc<RemotingClient>) {
        let mut map = self.lock();
        if map.get(&addr).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            map.remove(&addr);
        }
    }

    /// Closes every connection.
    pub fn close_all(&self) {
        for (_, conn) in self.lock().drain() {
            conn.close();
        }
    }
}

/// The local IP address this host uses to reach `addr`: the local address of a UDP socket
/// connected to it. Connecting a UDP socket sends no packet; the kernel only chooses the
/// route and with it the source address a TCP connection to `addr` would get.
///
/// # Errors
/// The socket error when no route to `addr` exists.
pub fn local_ip_toward(addr: SocketAddr) -> std::io::Result<IpAddr> {
    let unspecified: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(unspecified)?;
    socket.connect(addr)?;
    Ok(socket.local_addr()?.ip())
}

/// A client id as Java builds it (`ClientConfig.buildMQClientId`): `<ip>@<instance name>`,
/// where `ip` is the local address used to reach the first name server that has a route
/// ([`local_ip_toward`]) and the instance name defaults to `<pid>#<nanoseconds>` (Java's
/// `changeInstanceNameToPID`), so two clients of one process get distinct ids.
///
/// Brokers key producer and consumer registrations by this id, and consumers allocate queues
/// by its sorted position, so it must differ between live clients of one group.
pub fn client_id(namesrvs: &[SocketAddr], instance_name: Option<&str>) -> String {
    let ip = namesrvs
        .iter()
        .find_map(|&addr| local_ip_toward(addr).ok())
        .unwrap_or_else(|| {
            tracing::debug!(
                ?namesrvs,
                "no route to any name server; client id uses 127.0.0.1"
            );
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        });
    match instance_name {
        Some(name) => format!("{ip}@{name}"),
        None => {
            // Strictly increasing within the process, so two clients never share an id even
            // on a coarse clock.
            static LAST: AtomicU64 = AtomicU64::new(0);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let previous = LAST
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                    Some(now.max(last + 1))
                })
                .unwrap_or(now);
            let nanos = now.max(previous + 1);
            format!("{ip}@{}#{nanos}", std::process::id())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_uses_the_address_that_reaches_the_name_server() {
        let namesrv: SocketAddr = "127.0.0.1:9876".parse().unwrap();
        assert_eq!(
            local_ip_toward(namesrv).unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        let id = client_id(&[namesrv], None);
        let (ip, instance) = id.split_once('@').unwrap();
        assert_eq!(ip, "127.0.0.1");
        let (pid, nanos) = instance.split_once('#').unwrap();
        assert_eq!(pid, std::process::id().to_string());
        assert!(nanos.parse::<u128>().is_ok(), "{id}");
        assert_ne!(id, client_id(&[namesrv], None), "ids of two clients differ");
        assert_eq!(client_id(&[namesrv], Some("app-1")), "127.0.0.1@app-1");
    }
}
