//! `NameServer`: the TCP server in front of the route registry.
//!
//! Lifecycle: [`NameServer::bind`] binds the listener (port 0 lets the OS choose; read it back
//! with [`NameServer::local_addr`]); [`NameServer::run`] accepts connections, scans for expired
//! brokers every `scan_interval`, and returns when the given shutdown future completes, after
//! aborting every connection task. Callers usually `tokio::spawn(server.run(signal))`.
//!
//! Each connection is one task: it reads frames, answers every request in arrival order and
//! writes the replies of all requests already buffered in one write. Request handling never
//! awaits (see `processor`), so connections are served concurrently while each keeps its own
//! back-pressure: a peer that does not read its replies stops being read.
//!
//! Invariants: network input never panics; a bad frame (too long, bad header, garbage), a
//! read or write error, a write that does not finish within `write_timeout`, or a connection
//! idle for `idle_timeout` closes only that connection, with a log line; when a connection
//! closes, brokers whose latest registration came over it are removed, as RocketMQ does.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ferromq_protocol::remoting::{
    response, RemotingCodec, RemotingCommand, DEFAULT_MAX_FRAME_LENGTH,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::codec::Decoder;

use crate::kv::KvConfig;
use crate::processor::Processor;
use crate::route_registry::{ConnectionId, RouteRegistry, DEFAULT_BROKER_EXPIRY};

/// Errors of [`NameServer`].
#[derive(Debug, thiserror::Error)]
pub enum NamesrvError {
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Configured address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// Name server settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamesrvConfig {
    /// Address to listen on; port 0 lets the OS choose.
    pub listen: SocketAddr,
    /// A broker whose last registration is older than this is removed, unless it registered
    /// with its own `heartbeatTimeoutMillis` (RocketMQ: 120 s).
    pub broker_expiry: Duration,
    /// How often expired brokers are looked for (RocketMQ: 5 s).
    pub scan_interval: Duration,
    /// Largest accepted frame, length field included (RocketMQ: 16 MiB).
    pub max_frame_length: usize,
    /// A connection with no request for this long is closed (RocketMQ's
    /// `serverChannelMaxIdleTimeSeconds`, 120 s). Brokers register every 30 s.
    pub idle_timeout: Duration,
    /// Bound on writing replies to a connection; passing it closes the connection.
    pub write_timeout: Duration,
}

impl Default for NamesrvConfig {
    /// RocketMQ's defaults, listening on all interfaces at port 9876.
    fn default() -> Self {
        NamesrvConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9876)),
            broker_expiry: DEFAULT_BROKER_EXPIRY,
            scan_interval: Duration::from_secs(5),
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// A bound name server, not yet serving. See the module documentation for its lifecycle.
#[derive(Debug)]
pub struct NameServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    config: NamesrvConfig,
    processor: Processor,
}

impl NameServer {
    /// Binds `config.listen` with empty route tables.
    pub async fn bind(config: NamesrvConfig) -> Result<NameServer, NamesrvError> {
        let bind_err = |source| NamesrvError::Bind {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        let registry = Arc::new(RouteRegistry::new(config.broker_expiry));
        let processor = Processor::new(registry, Arc::new(KvConfig::new()));
        tracing::info!(addr = %local_addr, "name server listening");
        Ok(NameServer {
            listener,
            local_addr,
            config,
            processor,
        })
    }

    /// The bound address (with the OS-chosen port when the configured port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The route tables, e.g. for an in-process broker or for inspection in tests.
    pub fn registry(&self) -> Arc<RouteRegistry> {
        self.processor.registry().clone()
    }

    /// The key-value store.
    pub fn kv(&self) -> Arc<KvConfig> {
        self.processor.kv().clone()
    }

    /// Serves until `shutdown` completes, then aborts every connection and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let NameServer {
            listener,
            local_addr,
            config,
            processor,
        } = self;
        let mut connections = JoinSet::new();
        let mut scan = tokio::time::interval(config.scan_interval.max(Duration::from_millis(1)));
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_conn: ConnectionId = 0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = scan.tick() => {
                    let removed = processor.registry().scan_expired(Instant::now());
                    if !removed.is_empty() {
                        tracing::info!(count = removed.len(), "expired brokers removed");
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        next_conn += 1;
                        let conn = Connection {
                            id: next_conn,
                            peer,
                            config,
                            processor: processor.clone(),
                        };
                        connections.spawn(conn.serve(stream));
                    }
                    Err(e) => {
                        // E.g. out of file descriptors: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = connections.join_next(), if !connections.is_empty() => {
                    if let Err(e) = done {
                        if e.is_panic() {
                            tracing::error!(error = %e, "connection task panicked");
                        }
                    }
                }
            }
        }
        tracing::info!(addr = %local_addr, connections = connections.len(),
            "name server shutting down");
        connections.shutdown().await;
    }
}

struct Connection {
    id: ConnectionId,
    peer: SocketAddr,
    config: NamesrvConfig,
    processor: Processor,
}

impl Connection {
    async fn serve(self, stream: TcpStream) {
        tracing::debug!(peer = %self.peer, conn = self.id, "connection open");
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %self.peer, error = %e, "cannot set TCP_NODELAY");
        }
        let why = self.serve_frames(stream).await;
        tracing::debug!(peer = %self.peer, conn = self.id, why, "connection closed");
        self.processor.registry().connection_closed(self.id);
    }

    /// Serves frames until the connection must close; returns why.
    async fn serve_frames(&self, mut stream: TcpStream) -> &'static str {
        let mut codec = RemotingCodec::new(self.config.max_frame_length);
        let mut input = BytesMut::with_capacity(8 * 1024);
        let mut output = BytesMut::new();
        loop {
            loop {
                match codec.decode(&mut input) {
                    Ok(Some(cmd)) => self.handle(cmd, &mut output),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(peer = %self.peer, error = %e,
                            "bad frame; closing connection");
                        // Replies to requests decoded before the bad frame are still owed.
                        self.write(&mut stream, &mut output).await;
                        return "bad frame";
                    }
                }
            }
            if !self.write(&mut stream, &mut output).await {
                return "write failed";
            }
            match tokio::time::timeout(self.config.idle_timeout, stream.read_buf(&mut input)).await
            {
                Err(_) => {
                    tracing::info!(peer = %self.peer, idle = ?self.config.idle_timeout,
                        "idle connection closed");
                    return "idle";
                }
                Ok(Ok(0)) => return "peer closed",
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(peer = %self.peer, error = %e, "read failed");
                    return "read failed";
                }
            }
        }
    }

    fn handle(&self, cmd: RemotingCommand, output: &mut BytesMut) {
        if cmd.is_response() {
            tracing::debug!(peer = %self.peer, code = cmd.code, opaque = cmd.opaque,
                "unexpected reply from a client; ignored");
            return;
        }
        let reply = self.processor.process(&cmd, self.id);
        if cmd.is_oneway() {
            return;
        }
        if let Err(e) = reply.encode(output, self.config.max_frame_length) {
            tracing::warn!(peer = %self.peer, code = cmd.code, error = %e,
                "reply cannot be encoded; answering SYSTEM_ERROR");
            let fallback = cmd.reply(
                response::SYSTEM_ERROR,
                Some(format!("reply cannot be encoded: {e}")),
            );
            if let Err(e) = fallback.encode(output, self.config.max_frame_length) {
                tracing::warn!(peer = %self.peer, error = %e, "error reply cannot be encoded");
            }
        }
    }

    /// Writes and clears `output`; returns false when the connection must close.
    async fn write(&self, stream: &mut TcpStream, output: &mut BytesMut) -> bool {
        if output.is_empty() {
            return true;
        }
        let result =
            tokio::time::timeout(self.config.write_timeout, stream.write_all(output)).await;
        output.clear();
        match result {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::debug!(peer = %self.peer, error = %e, "write failed");
                false
            }
            Err(_) => {
                tracing::warn!(peer = %self.peer, timeout = ?self.config.write_timeout,
                    "reply write timed out; closing connection");
                false
            }
        }
    }
}
