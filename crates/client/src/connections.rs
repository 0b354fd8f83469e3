//! `ConnectionPool`: one shared [`RemotingClient`] per server address, reopened on demand.
//!
//! Invariants: at most one live connection per address is handed out at a time (a racing
//! second connect is dropped in favour of the first); a closed connection is never returned
//! again — the next request reconnects; every request is bounded by its timeout (connect
//! included).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferromq_protocol::remoting::{ClientOptions, RemotingClient, RemotingCommand};

use crate::error::ClientError;

/// Connections to name servers and brokers, keyed by address.
#[derive(Debug)]
pub struct ConnectionPool {
    options: ClientOptions,
    connections: Mutex<HashMap<SocketAddr, Arc<RemotingClient>>>,
}

impl ConnectionPool {
    /// An empty pool whose connections use `options`.
    pub fn new(options: ClientOptions) -> Self {
        ConnectionPool {
            options,
            connections: Mutex::new(HashMap::new()),
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
        if let Some(conn) = self.lock().get(&addr) {
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
        }
        let options = ClientOptions {
            connect_timeout: self.options.connect_timeout.min(timeout),
            ..self.options
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
        let started = tokio::time::Instant::now();
        let conn = self.get(addr, timeout).await?;
        let left = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
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
