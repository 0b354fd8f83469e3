//! A TCP fault proxy: sits between clients and a server and cuts, stalls, slows or half-drops
//! their connections on command.
//!
//! [`FaultProxy::start`] listens on `127.0.0.1:0` and forwards every accepted connection to a
//! target address, both directions. [`FaultProxy::set_mode`] switches every connection, open or
//! new, to a [`ProxyMode`]:
//!
//! | Mode | Client → server | Server → client | Connections |
//! |---|---|---|---|
//! | `Pass` | forwarded | forwarded | kept |
//! | `Drop` | — | — | every open one reset at once; new ones reset on accept |
//! | `Stall` | held | held | kept open; held bytes flow when the mode changes |
//! | `Slow(d)` | each chunk delayed by `d` | each chunk delayed by `d` | kept |
//! | `DropReplies` | forwarded | discarded | closed [`DROP_REPLIES_CLOSE_AFTER`] after the first discarded reply |
//! | `DropRequests` | discarded | forwarded | closed [`DROP_REPLIES_CLOSE_AFTER`] after the first discarded request |
//!
//! `DropReplies` models the worst case for a client's bookkeeping: the request reached the
//! server (it may have committed the write), the reply never came back. A correct client reports
//! such an operation as failed or indeterminate, never as a success. `DropRequests` is the
//! other asymmetric partition: what the server says still arrives (heartbeats, pushed data),
//! what the client says does not.
//!
//! Invariants:
//! 1. Stalled bytes are held, never lost: in `Stall` the proxy stops reading (TCP back-pressure
//!    keeps the rest in kernel buffers) and keeps any chunk it already read until the mode
//!    changes.
//! 2. Bounded: at most [`CONNECTIONS_MAX`] connections are proxied at once (more are closed on
//!    accept), each direction holds at most one chunk of [`CHUNK_SIZE_BYTES`], connecting to
//!    the target gives up after [`CONNECT_TIMEOUT`].
//! 3. No busy loops: every wait is on a socket, a timer or a mode change.
//! 4. I/O errors end the one connection they happen on, never the proxy, and never panic.
//! 5. Dropping the [`FaultProxy`] (or [`FaultProxy::shutdown`]) stops the listener and every
//!    connection task.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Connections proxied at once; further ones are closed as soon as they are accepted.
pub const CONNECTIONS_MAX: usize = 1024;
/// Bytes read from one side before they are written to the other.
pub const CHUNK_SIZE_BYTES: usize = 16 * 1024;
/// How long connecting to the target may take before the client's connection is closed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// In [`ProxyMode::DropReplies`], how long after the first discarded server→client byte the
/// connection is closed.
pub const DROP_REPLIES_CLOSE_AFTER: Duration = Duration::from_millis(300);

/// What the proxy does with the bytes of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyMode {
    /// Forward both directions unchanged.
    #[default]
    Pass,
    /// A partition the client sees as resets: every open connection is reset at once and new
    /// ones are reset as soon as they are accepted.
    Drop,
    /// Keep connections open but forward nothing either way; held bytes flow once the mode
    /// changes.
    Stall,
    /// Delay each forwarded chunk, in both directions, by this long.
    Slow(Duration),
    /// Forward client→server, discard server→client, and close a connection
    /// [`DROP_REPLIES_CLOSE_AFTER`] after its first discarded reply.
    DropReplies,
    /// Discard client→server, forward server→client, and close a connection
    /// [`DROP_REPLIES_CLOSE_AFTER`] after its first discarded request.
    DropRequests,
}

impl ProxyMode {
    /// The short name used in fault records (`Fault::Partition { mode }`).
    pub fn name(&self) -> &'static str {
        match self {
            ProxyMode::Pass => "pass",
            ProxyMode::Drop => "drop",
            ProxyMode::Stall => "stall",
            ProxyMode::Slow(_) => "slow",
            ProxyMode::DropReplies => "drop-replies",
            ProxyMode::DropRequests => "drop-requests",
        }
    }
}

/// A snapshot of the proxy's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyStats {
    /// Connections accepted from clients (including those closed at once).
    pub connections_accepted: u64,
    /// Connections closed on accept: mode `Drop`, target unreachable, or [`CONNECTIONS_MAX`].
    pub connections_refused: u64,
    /// Connections reset by a switch to `Drop` while they were open.
    pub connections_dropped: u64,
    /// Bytes forwarded from clients to the server.
    pub bytes_to_server: u64,
    /// Bytes forwarded from the server to clients.
    pub bytes_to_client: u64,
    /// Server→client bytes discarded in `DropReplies`.
    pub bytes_discarded: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections_accepted: AtomicU64,
    connections_refused: AtomicU64,
    connections_dropped: AtomicU64,
    bytes_to_server: AtomicU64,
    bytes_to_client: AtomicU64,
    bytes_discarded: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, count: usize) {
        counter.fetch_add(count as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ProxyStats {
        ProxyStats {
            connections_accepted: self.connections_accepted.load(Ordering::Relaxed),
            connections_refused: self.connections_refused.load(Ordering::Relaxed),
            connections_dropped: self.connections_dropped.load(Ordering::Relaxed),
            bytes_to_server: self.bytes_to_server.load(Ordering::Relaxed),
            bytes_to_client: self.bytes_to_client.load(Ordering::Relaxed),
            bytes_discarded: self.bytes_discarded.load(Ordering::Relaxed),
        }
    }
}

/// State shared by the handle, the listener and the connection tasks.
#[derive(Debug)]
struct Shared {
    target: Mutex<SocketAddr>,
    counters: Counters,
}

impl Shared {
    fn target(&self) -> SocketAddr {
        // A poisoned lock only means a holder panicked mid-assignment of a Copy value, which
        // cannot leave it torn: use the value.
        *self
            .target
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// A running TCP fault proxy. Dropping it stops the listener and every connection.
///
/// Must be started inside a tokio runtime with the time and net drivers enabled.
///
/// # Example
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use ferromq_chaos::proxy::{FaultProxy, ProxyMode};
///
/// let server = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let proxy = FaultProxy::start(server.local_addr()?).await?;
/// // Clients connect to `proxy.local_addr()` instead of the server.
/// proxy.set_mode(ProxyMode::Stall);
/// assert_eq!(proxy.mode().name(), "stall");
/// proxy.set_mode(ProxyMode::Pass);
/// proxy.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    local_addr: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    shared: Arc<Shared>,
    listener: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `target`, in [`ProxyMode::Pass`].
    ///
    /// # Errors
    /// The listening socket could not be bound.
    pub async fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local_addr = listener.local_addr()?;
        let (mode, mode_receiver) = watch::channel(ProxyMode::Pass);
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            counters: Counters::default(),
        });
        let listener = tokio::spawn(accept_loop(listener, mode_receiver, shared.clone()));
        Ok(FaultProxy {
            local_addr,
            mode,
            shared,
            listener,
        })
    }

    /// The address clients connect to instead of the target.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Switches every connection, open and future, to `mode`.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    /// Sends new connections to `target` (a restarted server on another port); open
    /// connections keep their server.
    pub fn set_target(&self, target: SocketAddr) {
        *self
            .shared
            .target
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = target;
    }

    /// Where new connections are forwarded.
    pub fn target(&self) -> SocketAddr {
        self.shared.target()
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        self.shared.counters.snapshot()
    }

    /// Stops accepting and closes every connection; returns once the listening socket is
    /// closed.
    pub async fn shutdown(mut self) {
        self.listener.abort();
        // The task was aborted (or ended): either way the listener and its connection tasks
        // are dropped once this resolves. Its result carries nothing else.
        let _ = (&mut self.listener).await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the listener drops its JoinSet, which aborts every connection task.
        self.listener.abort();
    }
}

async fn accept_loop(listener: TcpListener, mode: watch::Receiver<ProxyMode>, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let client = match accepted {
                    Ok((client, _)) => client,
                    Err(error) => {
                        // Usually EMFILE or a connection reset before accept: back off a little
                        // rather than spin on a persistent error.
                        tracing::warn!(%error, "fault proxy: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                Counters::add(&shared.counters.connections_accepted, 1);
                if connections.len() >= CONNECTIONS_MAX || *mode.borrow() == ProxyMode::Drop {
                    refuse(client, &shared);
                    continue;
                }
                connections.spawn(proxy_connection(client, mode.clone(), shared.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Closes `client` with a reset.
fn refuse(client: TcpStream, shared: &Shared) {
    Counters::add(&shared.counters.connections_refused, 1);
    reset(&client);
}

/// Makes the coming close of `stream` a reset (RST) instead of an orderly FIN.
fn reset(stream: &TcpStream) {
    if let Err(error) = stream.set_zero_linger() {
        tracing::debug!(%error, "fault proxy: could not set SO_LINGER 0; closing with FIN");
    }
}

/// Why a connection ended.
enum End {
    /// Both directions finished (EOF each way), one failed, or `DropReplies` closed it.
    Closed,
    /// The mode became `Drop`: reset both sides.
    Dropped,
    /// The proxy handle is gone.
    Shutdown,
}

async fn proxy_connection(
    mut client: TcpStream,
    mut mode: watch::Receiver<ProxyMode>,
    shared: Arc<Shared>,
) {
    let target = shared.target();
    let mut server = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(server)) => server,
        Ok(Err(error)) => {
            tracing::debug!(%error, %target, "fault proxy: target refused");
            return refuse(client, &shared);
        }
        Err(_) => {
            tracing::debug!(%target, "fault proxy: connecting to target timed out");
            return refuse(client, &shared);
        }
    };
    // Small request/response frames should not wait for Nagle; failure only costs latency.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let upstream = pump(
            client_read,
            server_write,
            Direction::ToServer,
            mode.clone(),
            &shared,
        );
        let downstream = pump(
            server_read,
            client_write,
            Direction::ToClient,
            mode.clone(),
            &shared,
        );
        run_both(upstream, downstream, &mut mode).await
    };
    match end {
        End::Dropped => {
            Counters::add(&shared.counters.connections_dropped, 1);
            reset(&client);
            reset(&server);
        }
        End::Shutdown => tracing::debug!("fault proxy: handle dropped, closing connection"),
        End::Closed => {}
    }
}

/// Drives both directions until both reached EOF, either asks to close, or the mode drops the
/// connection.
async fn run_both(
    upstream: impl std::future::Future<Output = PumpEnd>,
    downstream: impl std::future::Future<Output = PumpEnd>,
    mode: &mut watch::Receiver<ProxyMode>,
) -> End {
    tokio::pin!(upstream, downstream);
    let mut upstream_done = false;
    let mut downstream_done = false;
    while !(upstream_done && downstream_done) {
        tokio::select! {
            end = &mut upstream, if !upstream_done => match end {
                PumpEnd::Eof => upstream_done = true,
                PumpEnd::Close => return End::Closed,
            },
            end = &mut downstream, if !downstream_done => match end {
                PumpEnd::Eof => downstream_done = true,
                PumpEnd::Close => return End::Closed,
            },
            end = dropped(mode) => return end,
        }
    }
    End::Closed
}

/// Resolves when the mode becomes `Drop` (or the proxy handle is dropped).
async fn dropped(mode: &mut watch::Receiver<ProxyMode>) -> End {
    loop {
        if *mode.borrow_and_update() == ProxyMode::Drop {
            return End::Dropped;
        }
        if mode.changed().await.is_err() {
            return End::Shutdown;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// What to do with one chunk under the current mode.
enum Verdict {
    Forward,
    Discard,
    Hold,
    Delay(Duration),
    /// The mode is `Drop`: the connection task resets the connection, this chunk waits.
    Stop,
}

fn verdict(mode: ProxyMode, direction: Direction) -> Verdict {
    match mode {
        ProxyMode::Pass => Verdict::Forward,
        ProxyMode::Drop => Verdict::Stop,
        ProxyMode::Stall => Verdict::Hold,
        ProxyMode::Slow(delay) => Verdict::Delay(delay),
        ProxyMode::DropReplies => match direction {
            Direction::ToServer => Verdict::Forward,
            Direction::ToClient => Verdict::Discard,
        },
        ProxyMode::DropRequests => match direction {
            Direction::ToServer => Verdict::Discard,
            Direction::ToClient => Verdict::Forward,
        },
    }
}

/// How one direction ended.
enum PumpEnd {
    /// The reader reached EOF and the EOF was passed on; the other direction may go on.
    Eof,
    /// An I/O error, the `DropReplies` close deadline, or the handle is gone: close both sides.
    Close,
}

/// Copies `reader` to `writer` under the mode until EOF, an I/O error, or the close deadline of
/// `DropReplies`. A switch to `Drop` is handled by the connection task, not here.
async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    direction: Direction,
    mut mode: watch::Receiver<ProxyMode>,
    shared: &Shared,
) -> PumpEnd
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; CHUNK_SIZE_BYTES];
    // Set once this direction discarded a reply: the connection closes at this instant.
    let mut close_at: Option<Instant> = None;
    loop {
        // Read only when the mode lets bytes through: in Stall the unread bytes stay in the
        // kernel (back-pressure), so nothing is lost.
        let readable = !matches!(
            *mode.borrow_and_update(),
            ProxyMode::Stall | ProxyMode::Drop
        );
        tokio::select! {
            // Reading a TcpStream half is cancel safe: a cancelled read took no bytes.
            read = reader.read(&mut buffer), if readable => {
                let count = match read {
                    Ok(0) => {
                        // The peer may already be gone; there is nothing to tell it then.
                        let _ = writer.shutdown().await;
                        return PumpEnd::Eof;
                    }
                    Ok(count) => count,
                    Err(_) => return PumpEnd::Close,
                };
                match deliver(&buffer[..count], &mut writer, direction, &mut mode, shared).await {
                    Delivered::Forwarded => {}
                    Delivered::Discarded => {
                        close_at.get_or_insert_with(|| Instant::now() + DROP_REPLIES_CLOSE_AFTER);
                    }
                    Delivered::Stopped => return PumpEnd::Close,
                }
            }
            changed = mode.changed() => {
                if changed.is_err() {
                    return PumpEnd::Close;
                }
            }
            _ = sleep_until_set(close_at) => return PumpEnd::Close,
        }
    }
}

/// Sleeps until `at`, or forever when it is `None`.
async fn sleep_until_set(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

enum Delivered {
    Forwarded,
    Discarded,
    Stopped,
}

/// Writes (or discards, or holds then writes) one chunk according to the mode in force.
async fn deliver<W: AsyncWrite + Unpin>(
    chunk: &[u8],
    writer: &mut W,
    direction: Direction,
    mode: &mut watch::Receiver<ProxyMode>,
    shared: &Shared,
) -> Delivered {
    loop {
        let current = *mode.borrow_and_update();
        match verdict(current, direction) {
            Verdict::Forward => return write_chunk(chunk, writer, direction, shared).await,
            Verdict::Discard => {
                Counters::add(&shared.counters.bytes_discarded, chunk.len());
                return Delivered::Discarded;
            }
            Verdict::Hold | Verdict::Stop => {
                if mode.changed().await.is_err() {
                    return Delivered::Stopped;
                }
            }
            Verdict::Delay(delay) => {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {
                        return write_chunk(chunk, writer, direction, shared).await;
                    }
                    changed = mode.changed() => if changed.is_err() {
                        return Delivered::Stopped;
                    },
                }
            }
        }
    }
}

async fn write_chunk<W: AsyncWrite + Unpin>(
    chunk: &[u8],
    writer: &mut W,
    direction: Direction,
    shared: &Shared,
) -> Delivered {
    if writer.write_all(chunk).await.is_err() {
        return Delivered::Stopped;
    }
    let counter = match direction {
        Direction::ToServer => &shared.counters.bytes_to_server,
        Direction::ToClient => &shared.counters.bytes_to_client,
    };
    Counters::add(counter, chunk.len());
    Delivered::Forwarded
}
