//! Reading frames from one connection under the idle timeout, the frame deadline and the
//! shared partial-frame budget.
//!
//! The reader manages its buffer itself instead of through `FramedRead`, whose buffer grows
//! to a frame's announced length before any of it arrives: here a frame larger than
//! [`READ_CHUNK`] is charged to the budget first, and only then given a buffer of exactly its
//! size.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use tokio_util::codec::Decoder;

use super::{bump, ConnectionGuard};
use crate::remoting::{CodecError, RawFrame, RemotingCodec, RemotingCommand};

/// The buffer a connection reads into while it holds no large frame, and the largest frame
/// buffered outside the partial-frame budget. Most requests fit, so they never touch the
/// shared budget; memory outside the budget is at most this much per connection.
pub const READ_CHUNK: usize = 8 * 1024;

/// Bytes of the length field: what must arrive before a frame's size is known.
const LENGTH_FIELD: usize = 4;

/// Why a connection's reader stopped; each means the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameReadError {
    /// No byte in or out and no request in flight for the idle timeout.
    #[error("idle for {0:?} (serverChannelMaxIdleTimeSeconds)")]
    Idle(Duration),
    /// A frame started arriving longer ago than the frame deadline and is still incomplete.
    #[error(
        "a frame whose first byte arrived {0:?} ago is still incomplete (frameReadTimeoutMillis)"
    )]
    FrameTimeout(Duration),
    /// Buffering the frame would pass the partial-frame budget shared by all connections.
    #[error(
        "a frame of {size} bytes would pass the partial-frame budget of {budget} bytes \
         ({in_use} in use by incomplete frames; partialFrameBudgetBytes)"
    )]
    Budget {
        /// The frame's announced size.
        size: u64,
        /// Bytes of the budget in use when it was refused.
        in_use: u64,
        /// The budget.
        budget: u64,
    },
    /// Reading the socket failed.
    #[error("read failed: {0}")]
    Io(#[source] io::Error),
    /// The bytes are not a valid frame (too long, garbage, bad header).
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// When a connection last moved a byte, and how many of its requests are in flight: the idle
/// timeout closes only a connection that is silent both ways with nothing pending. The
/// reader records reads; whoever writes replies calls [`Activity::touch`].
#[derive(Debug)]
pub struct Activity {
    base: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Records that bytes moved now.
    pub fn touch(&self) {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(elapsed, Ordering::Release);
    }

    /// Marks a request in flight until the returned guard drops (a held pull is not silence).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// When the connection becomes idle, given the timeout: `None` while requests are in
    /// flight (their completion counts as activity).
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        Some(self.base + last + timeout)
    }
}

/// A request in flight on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads [`RemotingCommand`]s from one connection under its server's limits.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    buf: BytesMut,
    codec: RemotingCodec,
    guard: Arc<ConnectionGuard>,
    /// Bytes of the budget this connection holds for its incomplete frame.
    charged: u64,
    /// When the first byte of the incomplete frame in `buf` arrived.
    partial_since: Option<Instant>,
    activity: Arc<Activity>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of `io` under `guard`'s settings and budget.
    pub fn new(io: R, guard: Arc<ConnectionGuard>) -> FrameReader<R> {
        let activity = Arc::new(Activity::new());
        activity.touch();
        FrameReader {
            io,
            buf: BytesMut::new(),
            codec: RemotingCodec::new(guard.settings().max_frame_length),
            guard,
            charged: 0,
            partial_since: None,
            activity,
        }
    }

    /// The connection's activity record, for its writer and request tasks.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// A frame already buffered, without reading; `Ok(None)` when none is complete.
    ///
    /// # Errors
    /// The buffered bytes are not a valid frame.
    pub fn buffered_frame(&mut self) -> Result<Option<RemotingCommand>, FrameReadError> {
        let Some(size) = self.frame_size()? else {
            return Ok(None);
        };
        if self.buf.len() < size {
            return Ok(None);
        }
        let command = self.codec.decode(&mut self.buf)?;
        self.recharge(0)?;
        // Bytes after the frame arrived with it: the next frame started no later than now.
        self.partial_since = (!self.buf.is_empty()).then(Instant::now);
        Ok(command)
    }

    /// The next frame; `Ok(None)` when the peer closed the connection.
    ///
    /// # Errors
    /// Idle timeout, frame deadline, budget, a read error or a bad frame (counted in the
    /// guard's counters where they are limits); the connection must be closed.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes read stay buffered and the deadlines are kept in the reader.
    pub async fn next_frame(&mut self) -> Result<Option<RemotingCommand>, FrameReadError> {
        loop {
            if let Some(command) = self.buffered_frame()? {
                return Ok(Some(command));
            }
            self.prepare_room()?;
            let deadline = self.deadline();
            match tokio::time::timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => {
                    self.activity.touch();
                    self.partial_since.get_or_insert_with(Instant::now);
                }
                Ok(Err(error)) => return Err(FrameReadError::Io(error)),
                Err(_) => self.check_deadlines()?,
            }
        }
    }

    /// The size of the frame at the front of the buffer, once its length field arrived.
    fn frame_size(&self) -> Result<Option<usize>, FrameReadError> {
        RawFrame::peek_size(&self.buf, self.codec.max_frame_length())
            .map_err(|e| FrameReadError::Codec(e.into()))
    }

    /// Charges the incomplete frame to the budget when it is larger than [`READ_CHUNK`], then
    /// makes sure the buffer can take it (a large frame gets a buffer of exactly its size).
    fn prepare_room(&mut self) -> Result<(), FrameReadError> {
        let needed = self.frame_size()?.unwrap_or(LENGTH_FIELD);
        self.recharge(if needed > READ_CHUNK {
            needed as u64
        } else {
            0
        })?;
        if self.buf.capacity() < needed || self.buf.capacity() == self.buf.len() {
            let mut fresh = BytesMut::with_capacity(needed.max(READ_CHUNK));
            fresh.extend_from_slice(&self.buf);
            self.buf = fresh;
        }
        Ok(())
    }

    /// Moves this connection's charge to `bytes`, or refuses (and counts) when the budget
    /// cannot hold it.
    fn recharge(&mut self, bytes: u64) -> Result<(), FrameReadError> {
        if bytes == self.charged {
            return Ok(());
        }
        if !self.guard.recharge(self.charged, bytes) {
            bump(&self.guard.counters.closed_frame_budget);
            return Err(FrameReadError::Budget {
                size: bytes,
                in_use: self.guard.partial_frame_bytes(),
                budget: self.guard.settings().partial_frame_budget_bytes,
            });
        }
        self.charged = bytes;
        Ok(())
    }

    /// The earlier of the idle deadline and the incomplete frame's deadline.
    fn deadline(&self) -> Instant {
        let settings = self.guard.settings();
        // With requests in flight there is no idle deadline; look again a timeout from now.
        let idle = self
            .activity
            .idle_at(settings.idle_timeout)
            .unwrap_or_else(|| Instant::now() + settings.idle_timeout);
        match self.partial_since {
            Some(since) => idle.min(since + settings.frame_read_timeout),
            None => idle,
        }
    }

    /// After a wait ran out: an error (counted) when a deadline has passed, else `Ok` (a
    /// write or a finished request moved the idle deadline).
    fn check_deadlines(&self) -> Result<(), FrameReadError> {
        let settings = self.guard.settings();
        let now = Instant::now();
        if let Some(since) = self.partial_since {
            if now >= since + settings.frame_read_timeout {
                bump(&self.guard.counters.closed_frame_timeout);
                return Err(FrameReadError::FrameTimeout(now - since));
            }
        }
        match self.activity.idle_at(settings.idle_timeout) {
            Some(idle_at) if now >= idle_at => {
                bump(&self.guard.counters.closed_idle);
                Err(FrameReadError::Idle(settings.idle_timeout))
            }
            _ => Ok(()),
        }
    }
}

impl<R> Drop for FrameReader<R> {
    fn drop(&mut self) {
        self.guard.recharge(self.charged, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::limits::LimitSettings;
    use tokio::io::AsyncWriteExt;

    /// Bound on every wait of these tests.
    const WAIT: Duration = Duration::from_secs(5);

    fn guard(budget: u64, max_frame: usize) -> Arc<ConnectionGuard> {
        let settings = LimitSettings {
            idle_timeout: Duration::from_millis(300),
            frame_read_timeout: Duration::from_millis(100),
            partial_frame_budget_bytes: budget,
            max_frame_length: max_frame,
            ..LimitSettings::default()
        };
        ConnectionGuard::new(settings, 16)
    }

    fn frame(body_len: usize) -> Vec<u8> {
        let command =
            RemotingCommand::new_request(10, Default::default()).with_body(vec![7u8; body_len]);
        let mut out = BytesMut::new();
        command.encode(&mut out, usize::MAX).unwrap();
        out.to_vec()
    }

    async fn next(
        reader: &mut FrameReader<tokio::io::DuplexStream>,
    ) -> Result<Option<RemotingCommand>, FrameReadError> {
        tokio::time::timeout(WAIT, reader.next_frame())
            .await
            .expect("the reader answers within the bound")
    }

    #[tokio::test]
    async fn small_large_and_pipelined_frames_decode_and_release_their_charge() {
        let guard = guard(1 << 20, 1 << 20);
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = FrameReader::new(server, guard.clone());
        let mut wire = frame(10);
        wire.extend(frame(100_000));
        wire.extend(frame(20));
        let writer = tokio::spawn(async move {
            client.write_all(&wire).await.unwrap();
            client
        });
        let sizes: Vec<usize> = [
            next(&mut reader).await,
            next(&mut reader).await,
            next(&mut reader).await,
        ]
        .into_iter()
        .map(|c| c.unwrap().unwrap().body.map_or(0, |b| b.len()))
        .collect();
        assert_eq!(sizes, [10, 100_000, 20]);
        assert_eq!(guard.partial_frame_bytes(), 0, "no frame is incomplete");
        drop(writer.await.unwrap());
        assert!(next(&mut reader).await.unwrap().is_none(), "peer closed");
    }

    #[tokio::test]
    async fn a_frame_that_stalls_misses_its_deadline() {
        let guard = guard(1 << 20, 1 << 20);
        let (mut client, server) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(server, guard.clone());
        client.write_all(&frame(10)[..3]).await.unwrap();
        let started = Instant::now();
        let error = next(&mut reader).await.unwrap_err();
        assert!(matches!(error, FrameReadError::FrameTimeout(_)), "{error}");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(90), "{waited:?}");
        assert_eq!(guard.counters().snapshot().closed_frame_timeout, 1);
    }

    #[tokio::test]
    async fn a_silent_connection_is_idle_unless_a_request_is_in_flight() {
        let guard = guard(1 << 20, 1 << 20);
        let (_client, server) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(server, guard.clone());
        let held = reader.activity().begin();
        let early = tokio::time::timeout(Duration::from_millis(500), reader.next_frame()).await;
        assert!(early.is_err(), "not idle while a request is in flight");
        drop(held);
        let error = next(&mut reader).await.unwrap_err();
        assert!(matches!(error, FrameReadError::Idle(_)), "{error}");
        assert_eq!(guard.counters().snapshot().closed_idle, 1);
    }

    #[tokio::test]
    async fn frames_past_the_shared_budget_are_refused_and_the_charge_is_freed_on_drop() {
        let guard = guard(150_000, 101_000);
        let (mut first_client, first_server) = tokio::io::duplex(1024);
        let (mut second_client, second_server) = tokio::io::duplex(1024);
        let mut first = FrameReader::new(first_server, guard.clone());
        let mut second = FrameReader::new(second_server, guard.clone());
        let big = frame(100_000);
        first_client.write_all(&big[..100]).await.unwrap();
        second_client.write_all(&big[..100]).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(50), first.next_frame()).await;
        assert!(waiting.is_err(), "the first large frame is buffered");
        assert_eq!(guard.partial_frame_bytes(), big.len() as u64);
        let error = next(&mut second).await.unwrap_err();
        assert!(matches!(error, FrameReadError::Budget { .. }), "{error}");
        assert_eq!(guard.counters().snapshot().closed_frame_budget, 1);
        drop(first);
        assert_eq!(guard.partial_frame_bytes(), 0);
    }
}
