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
//! Connections are admitted and read under the limits the broker uses too
//! (`ferromq_protocol::remoting::limits`): at most `max_connections` at once (capped by the
//! open-file limit; more are closed at accept), accepts paused when descriptors run out, and
//! per connection an idle timeout, a frame deadline and a share of the partial-frame budget.
//!
//! TLS ([`NameServer::with_tls`]): the broker's `tls.server.mode` (disabled, permissive,
//! enforcing) with the same certificate files, shared code
//! (`ferromq_protocol::remoting::tls_server`); a connection the mode refuses (a plain client
//! of an enforcing name server, a failed or slow handshake) is closed before its first
//! request and counted ([`NameServer::tls_refusals`]). The handshake is bounded by
//! `frame_read_timeout`.
//!
//! Invariants: network input never panics; a bad frame (too long, bad header, garbage), a
//! read or write error, a write that does not finish within `write_timeout`, a connection
//! idle for `idle_timeout`, a frame that misses `frame_read_timeout` or would pass the
//! partial-frame budget closes only that connection, with a log line; when a connection
//! closes, brokers whose latest registration came over it are removed, as RocketMQ does.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ferromq_protocol::remoting::limits::{
    self, Accepted, Acceptor, ConnectionGuard, FrameReadError, FrameReader, LimitError,
    LimitSettings,
};
use ferromq_protocol::remoting::tls_server::{ServerTls, Upgraded};
use ferromq_protocol::remoting::{response, RemotingCommand, DEFAULT_MAX_FRAME_LENGTH};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

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
    /// A connection limit is zero or absurd, or the open-file limit leaves no room.
    #[error(transparent)]
    Config(#[from] LimitError),
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
    /// Most connections served at once (`maxConnections`), capped below the open-file limit;
    /// more are closed as soon as they are accepted.
    pub max_connections: u32,
    /// Once the first byte of a frame has arrived, the whole frame must arrive within this
    /// (`frameReadTimeoutMillis`).
    pub frame_read_timeout: Duration,
    /// Memory the incomplete frames of all connections may hold together
    /// (`partialFrameBudgetBytes`, at least `max_frame_length`).
    pub partial_frame_budget_bytes: u64,
}

impl Default for NamesrvConfig {
    /// RocketMQ's defaults, listening on all interfaces at port 9876.
    fn default() -> Self {
        NamesrvConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9876)),
            broker_expiry: DEFAULT_BROKER_EXPIRY,
            scan_interval: Duration::from_secs(5),
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            idle_timeout: limits::DEFAULT_IDLE_TIMEOUT,
            write_timeout: Duration::from_secs(10),
            max_connections: limits::DEFAULT_MAX_CONNECTIONS,
            frame_read_timeout: limits::DEFAULT_FRAME_READ_TIMEOUT,
            partial_frame_budget_bytes: limits::DEFAULT_PARTIAL_FRAME_BUDGET,
        }
    }
}

impl NamesrvConfig {
    /// The connection limits of these settings.
    pub fn limit_settings(&self) -> LimitSettings {
        LimitSettings {
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout,
            frame_read_timeout: self.frame_read_timeout,
            partial_frame_budget_bytes: self.partial_frame_budget_bytes,
            max_frame_length: self.max_frame_length,
        }
    }
}

/// A bound name server, not yet serving. See the module documentation for its lifecycle.
#[derive(Debug)]
pub struct NameServer {
    acceptor: Acceptor,
    local_addr: SocketAddr,
    config: NamesrvConfig,
    processor: Processor,
    acl_reload_interval: Duration,
    tls: ServerTls,
    tls_refusals: Arc<AtomicU64>,
}

impl NameServer {
    /// Binds `config.listen` with empty route tables.
    ///
    /// # Errors
    /// A connection limit is unusable (named), or the address cannot be bound.
    pub async fn bind(config: NamesrvConfig) -> Result<NameServer, NamesrvError> {
        let settings = config.limit_settings();
        settings.validate()?;
        let limit = limits::connection_limit(settings.max_connections)?;
        let guard = ConnectionGuard::new(settings, limit.limit);
        let bind_err = |source| NamesrvError::Bind {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        let registry = Arc::new(RouteRegistry::new(config.broker_expiry));
        let processor = Processor::new(registry, Arc::new(KvConfig::new()));
        tracing::info!(addr = %local_addr, connection_limit = limit.limit, "name server listening");
        Ok(NameServer {
            acceptor: Acceptor::new(listener, guard),
            local_addr,
            config,
            processor,
            acl_reload_interval: ferromq_acl::RELOAD_INTERVAL_DEFAULT,
            tls: ServerTls::disabled(),
            tls_refusals: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Serves the port with `tls` (`tls.server.mode` and its certificate; see the module
    /// documentation). Build it with `ServerTls::new`, whose errors name the bad file.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        tracing::info!(addr = %self.local_addr, mode = ?tls.mode(), "name server TLS");
        self.tls = tls;
        self
    }

    /// Connections refused by the TLS mode so far (plain clients of an enforcing name
    /// server, failed or slow handshakes).
    pub fn tls_refusals(&self) -> u64 {
        self.tls_refusals.load(Ordering::Relaxed)
    }

    /// A shared handle on [`NameServer::tls_refusals`], readable after `run` consumed the
    /// server.
    pub fn tls_refusal_counter(&self) -> Arc<AtomicU64> {
        self.tls_refusals.clone()
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

    /// Turns ACL on for the name server's writes (see `Processor::authorise`); the accounts
    /// file is checked for changes every `reload_interval` while the server runs.
    pub fn with_acl(mut self, acl: Arc<ferromq_acl::Acl>, reload_interval: Duration) -> Self {
        self.processor = self.processor.with_acl(acl);
        self.acl_reload_interval = reload_interval;
        self
    }

    /// Writes refused by ACL so far.
    pub fn acl_refusals(&self) -> u64 {
        self.processor.acl_refusals()
    }

    /// The connection limits in force, with their counters (refusals, limit closes).
    pub fn connection_limits(&self) -> Arc<ConnectionGuard> {
        self.acceptor.guard().clone()
    }

    /// Serves until `shutdown` completes, then aborts every connection and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let NameServer {
            mut acceptor,
            local_addr,
            config,
            processor,
            acl_reload_interval,
            tls,
            tls_refusals,
        } = self;
        let (acl_stop, acl_stop_rx) = tokio::sync::watch::channel(false);
        if let Some(acl) = processor.acl() {
            tokio::spawn(acl.clone().watch(acl_reload_interval, acl_stop_rx));
        }
        let _acl_stop = acl_stop;
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
                accepted = acceptor.accept() => {
                    next_conn += 1;
                    let conn = Connection {
                        id: next_conn,
                        peer: accepted.peer,
                        config,
                        processor: processor.clone(),
                        guard: acceptor.guard().clone(),
                        tls: tls.clone(),
                        tls_refusals: tls_refusals.clone(),
                    };
                    connections.spawn(conn.serve(accepted));
                }
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
    guard: Arc<ConnectionGuard>,
    tls: ServerTls,
    tls_refusals: Arc<AtomicU64>,
}

impl Connection {
    /// Serves until the connection must close; its place under the limit is freed then.
    async fn serve(self, accepted: Accepted) {
        let Accepted {
            stream,
            permit: _permit,
            ..
        } = accepted;
        tracing::debug!(peer = %self.peer, conn = self.id, "connection open");
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %self.peer, error = %e, "cannot set TCP_NODELAY");
        }
        let why = match self
            .tls
            .upgrade(stream, self.peer, self.config.frame_read_timeout)
            .await
        {
            Ok(Upgraded::Plain(stream)) => {
                let (read_half, write_half) = stream.into_split();
                self.serve_frames(read_half, write_half).await
            }
            Ok(Upgraded::Tls(stream)) => {
                let (read_half, write_half) = tokio::io::split(*stream);
                self.serve_frames(read_half, write_half).await
            }
            Err(remark) => {
                self.tls_refusals.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %self.peer, %remark, "connection refused before its first request");
                "refused by tls.server.mode"
            }
        };
        tracing::debug!(peer = %self.peer, conn = self.id, why, "connection closed");
        self.processor.registry().connection_closed(self.id);
    }

    /// Serves frames until the connection must close; returns why. Every request already
    /// buffered is answered in one write.
    async fn serve_frames(
        &self,
        read_half: impl AsyncRead + Unpin,
        mut write_half: impl AsyncWrite + Unpin,
    ) -> &'static str {
        let mut reader = FrameReader::new(read_half, self.guard.clone());
        let mut output = BytesMut::new();
        loop {
            let first = match reader.next_frame().await {
                Ok(Some(cmd)) => cmd,
                Ok(None) => return "peer closed",
                Err(e) => return self.closed_by(&e),
            };
            self.handle(first, &mut output);
            loop {
                match reader.buffered_frame() {
                    Ok(Some(cmd)) => self.handle(cmd, &mut output),
                    Ok(None) => break,
                    Err(e) => {
                        // Replies to requests decoded before the bad frame are still owed.
                        self.write(&mut write_half, &mut output).await;
                        return self.closed_by(&e);
                    }
                }
            }
            if !self.write(&mut write_half, &mut output).await {
                return "write failed";
            }
            reader.activity().touch();
        }
    }

    /// Logs why the reader stopped and names it for the close line.
    fn closed_by(&self, error: &FrameReadError) -> &'static str {
        let peer = self.peer;
        match error {
            FrameReadError::Idle(_) => {
                tracing::info!(%peer, %error, "idle connection closed");
                "idle"
            }
            FrameReadError::FrameTimeout(_) => {
                tracing::warn!(%peer, %error, "closing connection: frame deadline");
                "frame timeout"
            }
            FrameReadError::Budget { .. } => {
                tracing::warn!(%peer, %error, "closing connection: partial-frame budget");
                "frame budget"
            }
            FrameReadError::Codec(_) => {
                tracing::warn!(%peer, %error, "bad frame; closing connection");
                "bad frame"
            }
            FrameReadError::Io(_) => {
                tracing::debug!(%peer, %error, "read failed");
                "read failed"
            }
        }
    }

    fn handle(&self, cmd: RemotingCommand, output: &mut BytesMut) {
        if cmd.is_response() {
            tracing::debug!(peer = %self.peer, code = cmd.code, opaque = cmd.opaque,
                "unexpected reply from a client; ignored");
            return;
        }
        let reply = match self.processor.authorise(&cmd, self.peer.ip()) {
            Some(refused) => refused,
            None => self.processor.process(&cmd, self.id),
        };
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
    async fn write(&self, stream: &mut (impl AsyncWrite + Unpin), output: &mut BytesMut) -> bool {
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
