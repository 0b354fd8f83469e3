//! `RemotingClient`: one TCP connection to a remoting server (name server or broker), with
//! multiplexed request/reply, one-way sends, and server-initiated requests.
//!
//! The connection is served by three tasks: a reader that decodes frames and routes them, a
//! writer that drains a bounded queue of encoded frames onto the socket, and a sweeper that
//! fails invokes past their deadline (below). Callers encode their command before queueing
//! it, so an encoding error reaches the caller that caused it.
//!
//! Invariants:
//! - every request sent by [`RemotingClient::invoke`] gets a fresh opaque that no other pending
//!   request holds; its reply is matched by opaque, so replies may arrive in any order;
//! - a pending request leaves the pending map exactly once: when its reply arrives, when its
//!   caller gives up (timeout or cancellation), or when the connection closes;
//! - once the connection is closed (peer EOF, read or write error, bad frame, write timeout,
//!   [`RemotingClient::close`] or drop), it stays closed: every pending and later invoke fails
//!   with [`ClientError::Closed`] and all three tasks end;
//! - every wait is bounded: connecting by the connect timeout, invokes by their timeout (give
//!   or take [`SWEEP_TICK`], below), queueing one-way sends and replies by
//!   [`ClientOptions::send_timeout`], socket writes by [`ClientOptions::write_timeout`];
//! - network input never panics: a malformed frame closes the connection with a log line.
//!
//! Waiting for a reply, an invoke may first spin ([`ClientOptions::reply_spin`], off by
//! default): it yields to the runtime and looks for its reply, for at most that long (and at
//! most [`REPLY_SPIN_MAX`]), before it parks. On a machine whose idle CPUs halt (a VM without
//! guest halt polling), waking a parked thread costs tens of microseconds, as much as the
//! rest of a loopback request; a thread that keeps yielding never halts. On a current-thread
//! runtime each yield also polls the socket, so the whole exchange stays on one running
//! thread (a single send's p50 went from 72 to 38 µs on this project's VM); a multi-thread
//! runtime gains less, since another, parked worker may hold the socket poller.
//!
//! Invokes time out by a sweep, as Java's client scans its response table: each pending
//! request records its deadline, and a third task per connection, while requests are pending,
//! wakes every [`SWEEP_TICK`] and fails those past it. A tokio timer per invoke cost about 4%
//! of a windowed producer's CPU (inserting into and clearing the timer wheel for every
//! message). The sweeper parks when nothing is pending and is woken by the next request, so
//! an idle connection costs no wake-ups and a lone request at most one per tick. The tick is
//! kept short on purpose: a sweeper sleeping until the earliest deadline (up to 1 s) was
//! tried, and a lone client's send p50 went back from 18–25 µs to about 60 µs in most runs
//! (as with a timer per invoke); why a 10 ms tick while requests are pending helps is not
//! understood (docs/performance.md, session 25). Its cost: a connection with a request always
//! pending (a held pull) wakes its sweeper 100 times a second.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio_util::codec::Decoder;

use super::acl::{sign_command, Credentials};
use super::codec::RemotingCodec;
use super::codes::{request_code_name, response};
use super::command::{RemotingCommand, FLAG_ONEWAY, FLAG_RESPONSE};
use super::frame::{FrameError, DEFAULT_MAX_FRAME_LENGTH};

/// Longest [`ClientOptions::reply_spin`] honoured: the spin burns a CPU, so it only covers
/// the latency of a reply that is nearly there.
pub const REPLY_SPIN_MAX: Duration = Duration::from_millis(1);

/// How often the sweeper looks for invokes past their deadline while any is pending: an
/// invoke fails at most this long after its timeout.
pub const SWEEP_TICK: Duration = Duration::from_millis(10);

/// Errors of [`RemotingClient`]. Variants about a command name its code.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The TCP connection could not be established (refused, unreachable or timed out).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Server address.
        addr: SocketAddr,
        /// Cause; `TimedOut` when the connect timeout passed.
        #[source]
        source: io::Error,
    },
    /// No reply arrived (or the request could not be queued) within the timeout.
    #[error("request {code} ({}) got no reply within {after:?}", code_name(*.code))]
    Timeout {
        /// Request code.
        code: i32,
        /// The timeout that passed.
        after: Duration,
    },
    /// The connection is closed, or closed before the reply arrived.
    #[error("connection closed before command {code} ({}) completed", code_name(*.code))]
    Closed {
        /// Code of the command that was being sent.
        code: i32,
    },
    /// The command cannot be encoded (e.g. it exceeds the maximum frame length).
    #[error("cannot encode command {code} ({}): {source}", code_name(*.code))]
    Codec {
        /// Code of the command.
        code: i32,
        /// Cause.
        #[source]
        source: FrameError,
    },
}

fn code_name(code: i32) -> &'static str {
    request_code_name(code).unwrap_or("unknown")
}

/// Tunables of a [`RemotingClient`] connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Bound on establishing the TCP connection.
    pub connect_timeout: Duration,
    /// Bound on queueing a one-way request or a reply when the write queue is full.
    pub send_timeout: Duration,
    /// Bound on writing one batch of frames to the socket; passing it closes the connection,
    /// since a peer that does not read would otherwise stall every caller.
    pub write_timeout: Duration,
    /// Largest frame accepted from the server or sent to it.
    pub max_frame_length: usize,
    /// Encoded frames waiting for the writer.
    pub write_queue_capacity: usize,
    /// Server-initiated requests waiting for [`RemotingClient::take_server_requests`]'s
    /// receiver; when full, further ones are refused with SYSTEM_BUSY (or dropped if one-way).
    pub server_request_capacity: usize,
    /// ACL credentials: when set, every request and one-way request is signed with them
    /// ([`super::acl::sign_command`]); replies are not signed, as in RocketMQ.
    pub credentials: Option<Arc<Credentials>>,
    /// TLS: when set, the connection is TLS, the server checked against its CA file.
    pub tls: Option<super::tls::ClientTls>,
    /// How long an invoke spins for its reply before it parks (see the module docs);
    /// `Duration::ZERO` (the default) parks at once. Capped at [`REPLY_SPIN_MAX`].
    pub reply_spin: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(3),
            send_timeout: Duration::from_secs(3),
            write_timeout: Duration::from_secs(10),
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            write_queue_capacity: 1024,
            server_request_capacity: 256,
            credentials: None,
            tls: None,
            reply_spin: Duration::ZERO,
        }
    }
}

/// A multiplexed remoting connection. Not `Clone`: share it behind an `Arc`. Dropping it
/// closes the connection.
#[derive(Debug)]
pub struct RemotingClient {
    shared: Arc<Shared>,
    writer: mpsc::Sender<Bytes>,
    server_requests: Mutex<Option<mpsc::Receiver<RemotingCommand>>>,
    options: ClientOptions,
    peer: SocketAddr,
    local: SocketAddr,
}

/// State shared by the client handle and its three tasks.
#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    /// Wakes the parked sweeper when a request becomes pending.
    sweep_wake: Notify,
    closed: AtomicBool,
    closed_tx: watch::Sender<bool>,
    peer: SocketAddr,
}

#[derive(Debug, Default)]
struct Pending {
    /// Set once, under this lock, when the connection closes; no entry is added afterwards.
    closed: bool,
    next_opaque: i32,
    waiters: HashMap<i32, Waiter>,
    /// Whether the sweeper is ticking (it parks, clearing this, when it finds no waiter).
    sweeping: bool,
}

/// An invoke waiting for its reply.
#[derive(Debug)]
struct Waiter {
    reply: oneshot::Sender<RemotingCommand>,
    /// When the sweeper drops `reply`, failing the invoke with a timeout; `None` never.
    deadline: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding this lock cannot leave the map inconsistent (every operation
        // is a single insert or remove), so a poisoned lock is still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves a fresh opaque for a reply waiter; `None` when the connection is closed.
    /// Wakes the sweeper if it is parked.
    fn register(&self, waiter: Waiter) -> Option<i32> {
        let (opaque, wake) = {
            let mut p = self.lock();
            if p.closed {
                return None;
            }
            let opaque = loop {
                p.next_opaque = p.next_opaque.wrapping_add(1);
                let opaque = p.next_opaque;
                if let Entry::Vacant(slot) = p.waiters.entry(opaque) {
                    slot.insert(waiter);
                    break opaque;
                }
            };
            (opaque, !std::mem::replace(&mut p.sweeping, true))
        };
        if wake {
            // Stores a permit if the sweeper is not waiting yet: no wake-up is lost.
            self.sweep_wake.notify_one();
        }
        Some(opaque)
    }

    /// Drops the waiters past their deadline (their invokes fail with a timeout). Returns
    /// whether any waiter is left; when none is, the sweeper is marked parked, under the same
    /// lock `register` marks it ticking under.
    fn expire(&self, now: Instant) -> bool {
        let (expired, ticking): (Vec<Waiter>, bool) = {
            let mut p = self.lock();
            let late: Vec<i32> = p
                .waiters
                .iter()
                .filter(|(_, w)| w.deadline.is_some_and(|d| d <= now))
                .map(|(opaque, _)| *opaque)
                .collect();
            let expired = late.iter().filter_map(|o| p.waiters.remove(o)).collect();
            p.sweeping = !p.waiters.is_empty();
            (expired, p.sweeping)
        };
        // Dropped outside the lock: each drop wakes its invoke.
        drop(expired);
        ticking
    }

    fn unregister(&self, opaque: i32) {
        self.lock().waiters.remove(&opaque);
    }

    fn take_waiter(&self, opaque: i32) -> Option<oneshot::Sender<RemotingCommand>> {
        self.lock().waiters.remove(&opaque).map(|w| w.reply)
    }

    /// Marks the connection closed and fails every pending invoke (their senders drop).
    fn close(&self, why: &str) {
        let waiters = {
            let mut p = self.lock();
            if p.closed {
                return;
            }
            p.closed = true;
            std::mem::take(&mut p.waiters)
        };
        self.closed.store(true, Ordering::Release);
        self.closed_tx.send_replace(true);
        tracing::debug!(peer = %self.peer, pending = waiters.len(), why, "remoting connection closed");
        drop(waiters);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Removes a pending entry if its invoke ends without a reply (timeout, send failure or the
/// caller dropping the future).
struct PendingGuard<'a> {
    shared: &'a Shared,
    opaque: i32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.unregister(self.opaque);
    }
}

impl RemotingClient {
    /// Connects to `addr` with default [`ClientOptions`] and the given connect timeout.
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_with(
            addr,
            ClientOptions {
                connect_timeout: timeout,
                ..ClientOptions::default()
            },
        )
        .await
    }

    /// Connects to `addr` and starts the reader and writer tasks on the current tokio runtime.
    pub async fn connect_with(
        addr: SocketAddr,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let stream =
            match tokio::time::timeout(options.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(source)) => return Err(ClientError::Connect { addr, source }),
                Err(_) => {
                    return Err(ClientError::Connect {
                        addr,
                        source: io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no connection within {:?}", options.connect_timeout),
                        ),
                    })
                }
            };
        // Requests are small and latency-sensitive; Nagle would delay them.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %addr, error = %e, "cannot set TCP_NODELAY");
        }
        let local = stream
            .local_addr()
            .map_err(|source| ClientError::Connect { addr, source })?;
        let (read_half, write_half): (BoxedRead, BoxedWrite) = match &options.tls {
            None => {
                let (read_half, write_half) = stream.into_split();
                (Box::new(read_half), Box::new(write_half))
            }
            Some(tls) => {
                let name = tls
                    .server_name(addr)
                    .map_err(|source| ClientError::Connect { addr, source })?;
                let handshake = tls.connector().connect(name, stream);
                let stream = match tokio::time::timeout(options.connect_timeout, handshake).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(source)) => return Err(ClientError::Connect { addr, source }),
                    Err(_) => {
                        return Err(ClientError::Connect {
                            addr,
                            source: io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!("no TLS handshake within {:?}", options.connect_timeout),
                            ),
                        })
                    }
                };
                let (read_half, write_half) = tokio::io::split(stream);
                (Box::new(read_half), Box::new(write_half))
            }
        };
        let (closed_tx, closed_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            sweep_wake: Notify::new(),
            closed: AtomicBool::new(false),
            closed_tx,
            peer: addr,
        });
        let (writer_tx, writer_rx) = mpsc::channel(options.write_queue_capacity.max(1));
        let (requests_tx, requests_rx) = mpsc::channel(options.server_request_capacity.max(1));

        tokio::spawn(write_loop(
            write_half,
            writer_rx,
            shared.clone(),
            closed_rx.clone(),
            options.write_timeout,
        ));
        tokio::spawn(sweep_loop(shared.clone(), closed_rx.clone()));
        tokio::spawn(read_loop(
            read_half,
            shared.clone(),
            closed_rx,
            writer_tx.clone(),
            requests_tx,
            options.max_frame_length,
        ));
        tracing::debug!(peer = %addr, local = %local, "remoting connection open");

        Ok(RemotingClient {
            shared,
            writer: writer_tx,
            server_requests: Mutex::new(Some(requests_rx)),
            options,
            peer: addr,
            local,
        })
    }

    /// Sends `cmd` as a request and waits up to `timeout` for its reply.
    ///
    /// The command's opaque is replaced by a fresh one and its flag cleared of the reply and
    /// one-way bits. The reply is returned whatever its code: a non-SUCCESS code is an answer,
    /// not a transport error.
    pub async fn invoke(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let code = cmd.code;
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now().checked_add(timeout);
        let opaque = self
            .shared
            .register(Waiter {
                reply: tx,
                deadline,
            })
            .ok_or(ClientError::Closed { code })?;
        let _guard = PendingGuard {
            shared: &self.shared,
            opaque,
        };
        cmd.opaque = opaque;
        cmd.flag &= !(FLAG_RESPONSE | FLAG_ONEWAY);
        self.sign(&mut cmd);
        let frame = self.encode(&cmd)?;
        let timed_out = || ClientError::Timeout {
            code,
            after: timeout,
        };
        // A request that ends without a reply ended by the sweeper (past its deadline) or by
        // the connection closing.
        let no_reply = || match deadline {
            Some(deadline) if Instant::now() >= deadline => timed_out(),
            _ => ClientError::Closed { code },
        };
        self.queue_request(frame, deadline).await.map_err(|full| {
            if full {
                timed_out()
            } else {
                no_reply()
            }
        })?;
        let rx = match spin_for_reply(rx, self.options.reply_spin).await {
            Ok(reply) => return Ok(reply),
            Err(Some(rx)) => rx,
            Err(None) => return Err(no_reply()),
        };
        rx.await.map_err(|_| no_reply())
    }

    /// Queues a request's frame for the writer. Waits for space only until `deadline` (a timer
    /// only when the queue is full); `Err(true)` when the deadline passed, `Err(false)` when
    /// the connection closed.
    async fn queue_request(&self, frame: Bytes, deadline: Option<Instant>) -> Result<(), bool> {
        let frame = match self.writer.try_send(frame) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(false),
            Err(mpsc::error::TrySendError::Full(frame)) => frame,
        };
        let Some(deadline) = deadline else {
            return self.writer.send(frame).await.map_err(|_| false);
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.writer.send_timeout(frame, wait).await {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(true),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(false),
        }
    }

    /// Sends `cmd` as a one-way request (flag bit 1 set; the server never replies). Returns
    /// once the frame is queued for writing, waiting at most [`ClientOptions::send_timeout`]
    /// for queue space. The opaque is a fresh one, as Java assigns.
    pub async fn invoke_oneway(&self, mut cmd: RemotingCommand) -> Result<(), ClientError> {
        cmd.opaque = {
            let mut p = self.shared.lock();
            p.next_opaque = p.next_opaque.wrapping_add(1);
            p.next_opaque
        };
        cmd.flag = (cmd.flag & !FLAG_RESPONSE) | FLAG_ONEWAY;
        self.sign(&mut cmd);
        self.enqueue(&cmd).await
    }

    /// Signs a request with the connection's credentials, if it has any.
    fn sign(&self, cmd: &mut RemotingCommand) {
        if let Some(credentials) = &self.options.credentials {
            sign_command(cmd, credentials);
        }
    }

    /// Sends a reply to a server-initiated request. Build it with
    /// [`RemotingCommand::reply`] on the request so it carries the request's opaque; the reply
    /// bit is set here in any case. Waits at most [`ClientOptions::send_timeout`] for queue
    /// space.
    pub async fn reply(&self, mut cmd: RemotingCommand) -> Result<(), ClientError> {
        cmd.flag = (cmd.flag | FLAG_RESPONSE) & !FLAG_ONEWAY;
        self.enqueue(&cmd).await
    }

    /// Takes the receiver of server-initiated requests (e.g. NOTIFY_CONSUMER_IDS_CHANGED 40,
    /// RESET_CONSUMER_CLIENT_OFFSET 220). Returns `None` after the first call. Until it is
    /// taken, requests queue up to [`ClientOptions::server_request_capacity`]; if it is dropped,
    /// later two-way requests are answered REQUEST_CODE_NOT_SUPPORTED. The receiver ends when
    /// the connection closes.
    pub fn take_server_requests(&self) -> Option<mpsc::Receiver<RemotingCommand>> {
        self.server_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// True once the connection is closed; a closed client never reopens.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Closes the connection: pending invokes fail with [`ClientError::Closed`], frames still
    /// queued for writing are discarded, and all three tasks end. Idempotent.
    pub fn close(&self) {
        self.shared.close("closed by caller");
    }

    /// Waits until the connection is closed, for at most `timeout`; returns whether it is.
    pub async fn closed(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.closed_tx.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|c| *c)).await;
        self.is_closed()
    }

    /// Server address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Local address of the connection.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn encode(&self, cmd: &RemotingCommand) -> Result<Bytes, ClientError> {
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf, self.options.max_frame_length)
            .map_err(|source| ClientError::Codec {
                code: cmd.code,
                source,
            })?;
        Ok(buf.freeze())
    }

    async fn enqueue(&self, cmd: &RemotingCommand) -> Result<(), ClientError> {
        let code = cmd.code;
        if self.is_closed() {
            return Err(ClientError::Closed { code });
        }
        let frame = self.encode(cmd)?;
        match self
            .writer
            .send_timeout(frame, self.options.send_timeout)
            .await
        {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(ClientError::Timeout {
                code,
                after: self.options.send_timeout,
            }),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(ClientError::Closed { code }),
        }
    }
}

impl Drop for RemotingClient {
    fn drop(&mut self) {
        self.shared.close("client dropped");
    }
}

/// Writes queued frames, batching whatever is already queued into one write.
/// The read half of a plain or TLS connection.
type BoxedRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
/// The write half of a plain or TLS connection.
type BoxedWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// Spins for the reply on `rx` for at most `spin` (capped at [`REPLY_SPIN_MAX`]), yielding
/// to the runtime between looks: the reply, or the receiver still waiting when the spin ends
/// (`Err(Some)`), or `Err(None)` when the connection closed.
async fn spin_for_reply(
    mut rx: oneshot::Receiver<RemotingCommand>,
    spin: Duration,
) -> Result<RemotingCommand, Option<oneshot::Receiver<RemotingCommand>>> {
    let spin = spin.min(REPLY_SPIN_MAX);
    if spin.is_zero() {
        return Err(Some(rx));
    }
    let started = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(reply) => return Ok(reply),
            Err(oneshot::error::TryRecvError::Closed) => return Err(None),
            Err(oneshot::error::TryRecvError::Empty) if started.elapsed() >= spin => {
                return Err(Some(rx))
            }
            Err(oneshot::error::TryRecvError::Empty) => tokio::task::yield_now().await,
        }
    }
}

async fn write_loop(
    mut socket: BoxedWrite,
    mut queue: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
    mut closed: watch::Receiver<bool>,
    write_timeout: Duration,
) {
    let mut batch = BytesMut::new();
    loop {
        let first = tokio::select! {
            frame = queue.recv() => frame,
            _ = closed.wait_for(|c| *c) => None,
        };
        let Some(first) = first else { break };
        batch.clear();
        batch.extend_from_slice(&first);
        drain_into(&mut batch, &mut queue);
        if batch.len() == first.len() && shared.lock().waiters.len() > 1 {
            // Only one frame was waiting but other requests are in flight: let the tasks
            // about to queue theirs run first, so that under concurrency one write carries
            // many frames. A lone request (the latency case) is written at once.
            tokio::task::yield_now().await;
            drain_into(&mut batch, &mut queue);
        }
        let write = async {
            socket.write_all(&batch).await?;
            socket.flush().await
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(write_timeout, write) => r,
            _ = closed.wait_for(|c| *c) => break,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(peer = %shared.peer, error = %e, "remoting write failed; closing");
                shared.close("write failed");
                break;
            }
            Err(_) => {
                tracing::warn!(peer = %shared.peer, timeout = ?write_timeout,
                    "remoting write timed out; closing");
                shared.close("write timed out");
                break;
            }
        }
    }
    // Best effort: tell the peer we are done writing. Bounded, since the peer may not read.
    let _ = tokio::time::timeout(Duration::from_millis(100), socket.shutdown()).await;
}

/// Fails invokes past their deadline: while any request is pending, every [`SWEEP_TICK`];
/// otherwise parked until `register` wakes it. Ends when the connection closes (which fails
/// every pending invoke itself).
async fn sweep_loop(shared: Arc<Shared>, mut closed: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shared.sweep_wake.notified() => {}
            _ = closed.wait_for(|c| *c) => return,
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(SWEEP_TICK) => {}
                _ = closed.wait_for(|c| *c) => return,
            }
            if !shared.expire(Instant::now()) {
                break;
            }
        }
    }
}

/// Appends the frames already queued to `batch`, up to [`WRITE_BATCH_BYTES_MAX`].
fn drain_into(batch: &mut BytesMut, queue: &mut mpsc::Receiver<Bytes>) {
    while batch.len() < WRITE_BATCH_BYTES_MAX {
        match queue.try_recv() {
            Ok(frame) => batch.extend_from_slice(&frame),
            Err(_) => break,
        }
    }
}

/// Bound on the bytes one socket write gathers from the write queue.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

/// Reads frames: replies go to their waiters, requests to the server-request channel.
async fn read_loop(
    mut socket: BoxedRead,
    shared: Arc<Shared>,
    mut closed: watch::Receiver<bool>,
    writer: mpsc::Sender<Bytes>,
    requests: mpsc::Sender<RemotingCommand>,
    max_frame_length: usize,
) {
    let mut codec = RemotingCodec::new(max_frame_length);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let why = 'conn: loop {
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(cmd)) => dispatch(cmd, &shared, &writer, &requests),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(peer = %shared.peer, error = %e,
                        "bad frame from remoting server; closing");
                    break 'conn "bad frame";
                }
            }
        }
        let read = tokio::select! {
            r = socket.read_buf(&mut buf) => r,
            _ = closed.wait_for(|c| *c) => break 'conn "closed",
        };
        match read {
            Ok(0) => break 'conn "peer closed the connection",
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(peer = %shared.peer, error = %e, "remoting read failed");
                break 'conn "read failed";
            }
        }
    };
    shared.close(why);
}

fn dispatch(
    cmd: RemotingCommand,
    shared: &Shared,
    writer: &mpsc::Sender<Bytes>,
    requests: &mpsc::Sender<RemotingCommand>,
) {
    if cmd.is_response() {
        match shared.take_waiter(cmd.opaque) {
            // The waiter may have just timed out; then the reply is simply dropped.
            Some(waiter) => {
                let _ = waiter.send(cmd);
            }
            None => tracing::debug!(peer = %shared.peer, opaque = cmd.opaque, code = cmd.code,
                "reply with no pending request (late or unknown); dropped"),
        }
        return;
    }
    let refusal = match requests.try_send(cmd) {
        Ok(()) => return,
        Err(mpsc::error::TrySendError::Full(cmd)) => (
            cmd,
            response::SYSTEM_BUSY,
            "client is busy: server request queue is full",
        ),
        Err(mpsc::error::TrySendError::Closed(cmd)) => (
            cmd,
            response::REQUEST_CODE_NOT_SUPPORTED,
            "client does not handle server requests",
        ),
    };
    let (cmd, code, remark) = refusal;
    tracing::warn!(peer = %shared.peer, code = cmd.code, remark, "server request refused");
    if cmd.is_oneway() {
        return;
    }
    let reply = cmd.reply(code, Some(format!("{remark} (request code {})", cmd.code)));
    let mut buf = BytesMut::new();
    // A short reply with a remark always fits in a frame; if not, there is nothing to send.
    if reply.encode(&mut buf, DEFAULT_MAX_FRAME_LENGTH).is_ok() {
        // Never block the reader: if the write queue is full the refusal is dropped and the
        // server times out, which is what it would see from a busy Java client too.
        let _ = writer.try_send(buf.freeze());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::codes::request;
    use crate::remoting::ext::ExtFields;
    use tokio::net::TcpListener;

    const T: Duration = Duration::from_secs(5);

    /// A tiny server: answers every request with SUCCESS and the request's ext fields; a
    /// request with ext `delayMs` is answered after that delay; a request with ext `push`
    /// first makes the server send a request of that code to the client and forwards the
    /// client's answer code in ext `pushReply`; code 999 closes the connection.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        });
        addr
    }

    async fn serve(stream: TcpStream) {
        let (mut rd, wr) = stream.into_split();
        let wr = Arc::new(tokio::sync::Mutex::new(wr));
        let mut codec = RemotingCodec::default();
        let mut buf = BytesMut::new();
        type Push = (RemotingCommand, oneshot::Sender<RemotingCommand>);
        let (push_tx, mut push_rx) = mpsc::channel::<Push>(16);
        let mut waiting_push: Option<oneshot::Sender<RemotingCommand>> = None;
        loop {
            while let Ok(Some(cmd)) = codec.decode(&mut buf) {
                if cmd.is_response() {
                    if let Some(w) = waiting_push.take() {
                        let _ = w.send(cmd);
                    }
                    continue;
                }
                if cmd.code == 999 {
                    let _ = wr.lock().await.shutdown().await;
                    return;
                }
                if cmd.is_oneway() {
                    // Acknowledge a one-way request with a one-way NOTIFY carrying its code.
                    let mut ext = ExtFields::new();
                    ext.insert("oneway", cmd.code.to_string());
                    let mut note =
                        RemotingCommand::new_request(request::NOTIFY_CONSUMER_IDS_CHANGED, ext)
                            .with_opaque(100_000);
                    note.set_oneway(true);
                    write(&wr, &note).await;
                    continue;
                }
                let wr = wr.clone();
                let push_tx = push_tx.clone();
                tokio::spawn(async move {
                    let mut reply = cmd.reply(response::SUCCESS, None);
                    reply.ext_fields = cmd.ext_fields.clone();
                    if let Some(ms) = cmd.ext_fields.get("delayMs") {
                        let ms: u64 = ms.parse().unwrap();
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    if let Some(code) = cmd.ext_fields.get("push") {
                        let push =
                            RemotingCommand::new_request(code.parse().unwrap(), ExtFields::new())
                                .with_opaque(7_000);
                        let (tx, rx) = oneshot::channel();
                        push_tx.send((push, tx)).await.unwrap();
                        let answer = rx.await.unwrap();
                        reply
                            .ext_fields
                            .insert("pushReply", answer.code.to_string());
                    }
                    write(&wr, &reply).await;
                });
            }
            tokio::select! {
                r = rd.read_buf(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(_) => {} },
                Some((push, waiter)) = push_rx.recv() => {
                    waiting_push = Some(waiter);
                    write(&wr, &push).await;
                }
            }
        }
    }

    async fn write(
        wr: &tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>,
        cmd: &RemotingCommand,
    ) {
        let bytes = cmd.to_bytes().unwrap();
        let _ = wr.lock().await.write_all(&bytes).await;
    }

    fn req(code: i32, pairs: &[(&str, &str)]) -> RemotingCommand {
        let ext = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RemotingCommand::new_request(code, ext)
    }

    /// Timeouts come from the sweep: concurrent invokes with different timeouts each fail
    /// after their own (and within a few ticks of it), a quick request on the same connection
    /// is answered meanwhile, and once nothing is pending the sweeper parks; the next request
    /// wakes it, so a timeout after a quiet spell still fires.
    #[tokio::test]
    async fn the_sweep_fails_each_invoke_after_its_own_timeout_and_parks_when_idle() {
        let addr = echo_server().await;
        let client = Arc::new(RemotingClient::connect(addr, T).await.unwrap());
        let slack = SWEEP_TICK * 10;
        let timed = |ms: u64| {
            let client = client.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let timeout = Duration::from_millis(ms);
                let result = client
                    .invoke(req(105, &[("delayMs", "2000")]), timeout)
                    .await;
                (started.elapsed(), result)
            })
        };
        let (short, long) = (timed(60), timed(250));
        let reply = client.invoke(req(106, &[]), T).await.unwrap();
        assert_eq!(reply.code, response::SUCCESS);
        for (task, ms) in [(short, 60), (long, 250)] {
            let (took, result) = task.await.unwrap();
            let timeout = Duration::from_millis(ms);
            assert!(
                matches!(result, Err(ClientError::Timeout { after, .. }) if after == timeout),
                "{ms} ms: {result:?}"
            );
            assert!(
                took >= timeout && took < timeout + slack,
                "{ms} ms timeout failed after {took:?}"
            );
        }
        let parked = Instant::now() + T;
        while client.shared.lock().sweeping {
            assert!(Instant::now() < parked, "the sweeper never parked");
            tokio::time::sleep(SWEEP_TICK).await;
        }
        tokio::time::sleep(SWEEP_TICK * 5).await;
        let started = Instant::now();
        let result = client
            .invoke(req(105, &[("delayMs", "2000")]), Duration::from_millis(50))
            .await;
        assert!(
            matches!(result, Err(ClientError::Timeout { .. })),
            "{result:?}"
        );
        assert!(started.elapsed() < Duration::from_millis(50) + slack);
        assert!(client.shared.lock().waiters.is_empty());
    }

    /// A request that cannot even be queued (the server reads nothing, the socket and the
    /// write queue are full) still fails at its timeout.
    #[tokio::test]
    async fn an_invoke_stuck_behind_a_full_write_queue_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(T * 2).await;
            drop(stream);
        });
        let options = ClientOptions {
            write_queue_capacity: 1,
            send_timeout: Duration::from_millis(50),
            write_timeout: T * 4,
            ..ClientOptions::default()
        };
        let client = RemotingClient::connect_with(addr, options).await.unwrap();
        let big = vec![0u8; 1 << 20];
        let mut full = false;
        for _ in 0..256 {
            let one_way =
                RemotingCommand::new_request(106, ExtFields::new()).with_body(big.clone());
            if let Err(ClientError::Timeout { .. }) = client.invoke_oneway(one_way).await {
                full = true;
                break;
            }
        }
        assert!(full, "the write queue never filled");
        let started = Instant::now();
        let result = client
            .invoke(req(106, &[]), Duration::from_millis(100))
            .await;
        assert!(
            matches!(result, Err(ClientError::Timeout { .. })),
            "{result:?}"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(100)
                && took < Duration::from_millis(100) + SWEEP_TICK * 10,
            "{took:?}"
        );
        server.abort();
    }

    /// With a reply spin, on a current-thread runtime (where the spin's yields poll the
    /// socket): replies that come within the spin and after it both reach their callers, and
    /// a connection closing under a spinning invoke fails it at once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reply_spin_gets_replies_within_and_after_it_and_sees_the_close() {
        let addr = echo_server().await;
        let options = ClientOptions {
            reply_spin: Duration::from_micros(500),
            ..ClientOptions::default()
        };
        let client = RemotingClient::connect_with(addr, options).await.unwrap();
        for i in 0..20 {
            let id = i.to_string();
            let reply = client.invoke(req(105, &[("id", &id)]), T).await.unwrap();
            assert_eq!(
                reply.ext_fields.get("id").map(|v| v.as_str()),
                Some(id.as_str())
            );
        }
        let started = std::time::Instant::now();
        let reply = client
            .invoke(req(105, &[("delayMs", "30"), ("id", "late")]), T)
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(reply.ext_fields.get("id").map(|v| v.as_str()), Some("late"));
        let started = std::time::Instant::now();
        let closed = client.invoke(req(999, &[]), T).await;
        assert!(
            matches!(closed, Err(ClientError::Closed { code: 999 })),
            "{closed:?}"
        );
        assert!(
            started.elapsed() < T,
            "the close was seen only at the timeout"
        );
    }

    /// The spin returns a reply already there, sees a dropped sender as a close, and gives
    /// the receiver back after its bound, which is capped at `REPLY_SPIN_MAX`.
    #[tokio::test(flavor = "current_thread")]
    async fn the_reply_spin_is_bounded() {
        let (tx, rx) = oneshot::channel();
        tx.send(RemotingCommand::new_request(105, ExtFields::new()))
            .unwrap();
        let spun = spin_for_reply(rx, Duration::from_micros(100)).await;
        assert!(matches!(spun, Ok(reply) if reply.code == 105));

        let (tx, rx) = oneshot::channel::<RemotingCommand>();
        drop(tx);
        let spun = spin_for_reply(rx, Duration::from_micros(100)).await;
        assert!(matches!(spun, Err(None)));

        let (_tx, rx) = oneshot::channel::<RemotingCommand>();
        let started = std::time::Instant::now();
        let spun = spin_for_reply(rx, Duration::from_secs(30)).await;
        let spent = started.elapsed();
        assert!(matches!(spun, Err(Some(_))));
        assert!(spent >= REPLY_SPIN_MAX, "{spent:?}");
        assert!(
            spent < Duration::from_secs(5),
            "the cap did not hold: {spent:?}"
        );

        let (_tx, rx) = oneshot::channel::<RemotingCommand>();
        let started = std::time::Instant::now();
        assert!(matches!(
            spin_for_reply(rx, Duration::ZERO).await,
            Err(Some(_))
        ));
        assert!(started.elapsed() < REPLY_SPIN_MAX);
    }

    #[tokio::test]
    async fn invoke_matches_replies_out_of_order() {
        let addr = echo_server().await;
        let client = Arc::new(RemotingClient::connect(addr, T).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..50u64 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                // Earlier requests are answered later.
                let delay = ((50 - i) * 2).to_string();
                let id = i.to_string();
                let reply = client
                    .invoke(req(105, &[("delayMs", &delay), ("id", &id)]), T)
                    .await
                    .unwrap();
                assert!(reply.is_response());
                assert_eq!(
                    reply.ext_fields.get("id").map(|v| v.as_str()),
                    Some(id.as_str())
                );
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(!client.is_closed());
    }

    #[tokio::test]
    async fn invoke_times_out_naming_the_code_and_connection_survives() {
        let addr = echo_server().await;
        let client = RemotingClient::connect(addr, T).await.unwrap();
        let err = client
            .invoke(req(105, &[("delayMs", "500")]), Duration::from_millis(50))
            .await
            .unwrap_err();
        match &err {
            ClientError::Timeout { code, after } => {
                assert_eq!(*code, 105);
                assert_eq!(*after, Duration::from_millis(50));
            }
            other => panic!("expected timeout, got {other:?}"),
        }
        assert!(err.to_string().contains("GET_ROUTEINFO_BY_TOPIC"));
        // The late reply is dropped; the connection still works.
        let reply = client.invoke(req(106, &[]), T).await.unwrap();
        assert_eq!(reply.code, response::SUCCESS);
        assert!(client.shared.lock().waiters.is_empty());
    }

    #[tokio::test]
    async fn connection_loss_fails_pending_invokes_with_closed() {
        let addr = echo_server().await;
        let client = Arc::new(RemotingClient::connect(addr, T).await.unwrap());
        let slow = {
            let client = client.clone();
            tokio::spawn(async move { client.invoke(req(105, &[("delayMs", "3000")]), T).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // 999 makes the server drop the connection.
        client.invoke_oneway(req(10, &[])).await.unwrap();
        let _ = client
            .invoke(req(999, &[]), Duration::from_millis(10))
            .await;
        let err = tokio::time::timeout(T, slow)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, ClientError::Closed { code: 105 }), "{err:?}");
        assert!(client.closed(T).await);
        let err = client.invoke(req(106, &[]), T).await.unwrap_err();
        assert!(matches!(err, ClientError::Closed { code: 106 }), "{err:?}");
        assert!(matches!(
            client.invoke_oneway(req(10, &[])).await,
            Err(ClientError::Closed { code: 10 })
        ));
    }

    #[tokio::test]
    async fn server_requests_are_delivered_and_answered() {
        let addr = echo_server().await;
        let client = Arc::new(RemotingClient::connect(addr, T).await.unwrap());
        let mut server_requests = client.take_server_requests().unwrap();
        assert!(client.take_server_requests().is_none());

        // One-way request: the test server answers with a one-way NOTIFY (40).
        client.invoke_oneway(req(15, &[])).await.unwrap();
        let note = tokio::time::timeout(T, server_requests.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(note.code, request::NOTIFY_CONSUMER_IDS_CHANGED);
        assert!(note.is_oneway());
        assert_eq!(
            note.ext_fields.get("oneway").map(|v| v.as_str()),
            Some("15")
        );

        // Two-way server request (220) answered by the caller while an invoke waits on it.
        let invoke = {
            let client = client.clone();
            tokio::spawn(async move { client.invoke(req(34, &[("push", "220")]), T).await })
        };
        let push = tokio::time::timeout(T, server_requests.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(push.code, request::RESET_CONSUMER_CLIENT_OFFSET);
        client
            .reply(push.reply(response::SUCCESS, None))
            .await
            .unwrap();
        let reply = invoke.await.unwrap().unwrap();
        assert_eq!(
            reply.ext_fields.get("pushReply").map(|v| v.as_str()),
            Some("0")
        );
    }

    #[tokio::test]
    async fn dropped_server_request_receiver_means_not_supported() {
        let addr = echo_server().await;
        let client = RemotingClient::connect(addr, T).await.unwrap();
        drop(client.take_server_requests());
        let reply = client.invoke(req(34, &[("push", "221")]), T).await.unwrap();
        assert_eq!(
            reply.ext_fields.get("pushReply").map(|v| v.as_str()),
            Some("3")
        );
    }

    #[tokio::test]
    async fn connect_refused_and_oversized_command() {
        // Bind then drop to get a port with nothing listening.
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let err = RemotingClient::connect(addr, T).await.unwrap_err();
        assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");

        let addr = echo_server().await;
        let client = RemotingClient::connect_with(
            addr,
            ClientOptions {
                max_frame_length: 256,
                ..ClientOptions::default()
            },
        )
        .await
        .unwrap();
        let err = client
            .invoke(req(10, &[]).with_body(vec![0u8; 1024]), T)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Codec { code: 10, .. }),
            "{err:?}"
        );
        assert!(!client.is_closed());
        assert!(client.shared.lock().waiters.is_empty());
    }

    #[tokio::test]
    async fn bad_frame_from_server_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(&[0, 0, 0, 9, 7, 0, 0, 1, b'x', 0, 0, 0, 0])
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let client = RemotingClient::connect(addr, T).await.unwrap();
        assert!(client.closed(T).await);
    }

    #[tokio::test]
    async fn drop_closes_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = RemotingClient::connect(addr, T).await.unwrap();
        let (mut s, _) = listener.accept().await.unwrap();
        drop(client);
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(T, s.read(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
    }
}
