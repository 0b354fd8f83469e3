//! One client connection: frames in, replies out.
//!
//! The reader decodes frames and spawns one task per request, so a held pull never blocks a
//! send on the same connection (a send is first run inline, and moves to a task only if it
//! has to wait); replies (and server-initiated pushes) go through one writer task fed by a
//! bounded channel, which writes every reply already queued in one flush. A frame that
//! cannot be decoded (too long, garbage, bad header) closes only this connection, with a log
//! line; the broker keeps serving others.
//!
//! Frames are read by the shared `FrameReader` (`ferromq_protocol::remoting::limits`): a
//! connection silent both ways with no request in flight for `serverChannelMaxIdleTimeSeconds`,
//! a frame that does not fully arrive within `frameReadTimeoutMillis` of its first byte, and a
//! frame that would pass the `partialFrameBudgetBytes` shared by all connections each close the
//! connection, counted.
//!
//! At most `maxInFlightRequestsPerConnection` requests of a connection are in flight; one
//! more is answered SYSTEM_BUSY at once (`work_limits`). When the connection ends its held
//! pulls end at once (they watch the writer's queue close).
//!
//! TLS (`tls.server.mode`, see `remoting::tls`) is decided before the first frame: a plain
//! connection is served as is, a TLS one after its handshake (both bounded by
//! `frameReadTimeoutMillis`); a failed handshake closes the connection, counted.
//!
//! The writer also sends zero-copy pull replies (`transferMsgByHeap=false`, see
//! `remoting::zero_copy`): it writes the reply's head, flushes, and sends the records from the
//! files itself, so nothing else is written in between.
//!
//! Invariant: when the connection ends, its clients leave every group and the remaining
//! members are told to rebalance.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::limits::{Accepted, Activity, FrameReadError, FrameReader};
use ferromq_protocol::remoting::{request, LanguageCode, RemotingCommand};
use ferromq_store::FileRegion;
use futures_util::SinkExt;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;

use crate::context::BrokerContext;
use crate::core::access::Request;
use crate::core::work_limits::InFlight;
use crate::observability::log_limit::LogEvery;
use crate::observability::transfer::{Abort, Fallback};
use crate::remoting::outbound::{Outbound, RegionReply, WireCodec, WriteError};
use crate::remoting::processor;
use crate::remoting::tls::Upgraded;
use crate::remoting::zero_copy::{self, MaybeTcp, SendError};
use crate::sessions::registry::ClientChannel;

/// Replies and pushes queued per connection before the writer applies backpressure.
const OUTBOUND_QUEUE_MAX: usize = 4096;

static NEXT_CHANNEL_ID: AtomicU64 = AtomicU64::new(1);

/// Serves one connection until the peer closes it, sends a bad frame, breaks a limit, or the
/// broker stops. The connection's place under the connection limit is freed when it returns.
pub async fn serve(
    ctx: Arc<BrokerContext>,
    accepted: Accepted,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let Accepted {
        stream,
        peer,
        permit: _permit,
    } = accepted;
    let _ = stream.set_nodelay(true);
    let deadline = Duration::from_millis(ctx.config.frame_read_timeout_millis);
    match ctx.tls.upgrade(stream, peer, deadline).await {
        Ok(Upgraded::Plain(stream)) => {
            let (read_half, write_half) = stream.into_split();
            serve_io(ctx, read_half, write_half, peer, true, stop).await
        }
        Ok(Upgraded::Tls(stream)) => {
            let (read_half, write_half) = tokio::io::split(*stream);
            serve_io(ctx, read_half, write_half, peer, false, stop).await
        }
        Err(remark) => {
            ctx.metrics
                .refused("tls_handshake_failed", Request::Connection.as_str());
            tracing::warn!(%peer, %remark, "connection refused before its first request");
        }
    }
}

/// Serves one connection's frames (plain TCP when `plain_tcp`, or TLS) until it ends.
async fn serve_io<R, W>(
    ctx: Arc<BrokerContext>,
    read_half: R,
    write_half: W,
    peer: SocketAddr,
    plain_tcp: bool,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + MaybeTcp + Unpin + Send + 'static,
{
    let codec = WireCodec::new(ctx.config.max_frame_length);
    let mut reader = FrameReader::new(read_half, ctx.connection_limits.clone());
    let activity = reader.activity().clone();
    let mut writer = FramedWrite::new(write_half, codec);
    let (tx, mut rx) = mpsc::channel::<Outbound>(OUTBOUND_QUEUE_MAX);
    let writer_ctx = ctx.clone();
    let channel = ClientChannel {
        id: NEXT_CHANNEL_ID.fetch_add(1, Ordering::Relaxed),
        peer,
        tx,
        plain_tcp,
        language: LanguageCode::Java,
        version: 0,
        held_pulls: Arc::default(),
        calls: Arc::default(),
    };
    let in_flight = InFlight::new(ctx.config.max_in_flight_requests_per_connection);
    // Sends of this connection being handled (read, reply not yet queued). Held pulls are
    // not counted: a reply must not wait for them.
    let busy = Arc::new(AtomicUsize::new(0));
    let busy_writer = busy.clone();
    let write_task = tokio::spawn(async move {
        let (busy, ctx) = (busy_writer, writer_ctx);
        // Every reply already queued goes out in one flush: under load one write syscall
        // carries many replies instead of one each.
        while let Some(item) = rx.recv().await {
            let mut result = write_item(&ctx, &activity, &mut writer, item).await;
            let mut fed = 1;
            for round in 0..2 {
                while result.is_ok() {
                    match rx.try_recv() {
                        Ok(item) => {
                            fed += 1;
                            result = write_item(&ctx, &activity, &mut writer, item).await;
                        }
                        Err(_) => break,
                    }
                }
                if round == 0 && fed == 1 && result.is_ok() && busy.load(Ordering::Relaxed) > 0 {
                    // One reply was waiting but other sends are being handled: let them
                    // finish first, so that under load one write carries many replies. A
                    // lone request (the latency case) is answered at once.
                    tokio::task::yield_now().await;
                } else {
                    break;
                }
            }
            let result = match result {
                Ok(()) => SinkExt::<RemotingCommand>::flush(&mut writer)
                    .await
                    .map_err(WriteError::from),
                Err(error) => Err(error),
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "write failed; closing connection");
                break;
            }
            activity.touch();
        }
    });
    ctx.metrics.connection_opened();
    tracing::debug!(%peer, channel = channel.id, "connection opened");
    loop {
        let frame = tokio::select! {
            frame = reader.next_frame() => frame,
            // The broker is stopping: drop the connection so clients fail over instead of
            // talking to a closed store.
            _ = stop.changed() => break,
        };
        let command = match frame {
            Ok(Some(command)) => command,
            Ok(None) => break,
            Err(error) => {
                log_close(peer, &error);
                break;
            }
        };
        if command.is_response() {
            // A reply to a call of the broker's (`sessions::calls`); replies to one-way
            // pushes find no waiter and are dropped.
            channel.calls.complete(command);
            continue;
        }
        let permit = match in_flight.try_begin(&ctx.metrics) {
            Ok(permit) => permit,
            Err(remark) => {
                refuse_busy(&ctx, &channel, command, remark).await;
                continue;
            }
        };
        let inline = matches!(
            command.code,
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE
        );
        let (ctx, channel, busy) = (ctx.clone(), channel.clone(), busy.clone());
        if inline {
            busy.fetch_add(1, Ordering::Relaxed);
        }
        // A request in flight (a held pull) keeps the connection from counting as idle.
        let in_flight_activity = reader.activity().begin();
        let mut request = Box::pin(async move {
            let _in_flight = (in_flight_activity, permit);
            let (oneway, code) = (command.is_oneway(), command.code);
            let reply = processor::handle(&ctx, &channel, command).await;
            if inline {
                busy.fetch_sub(1, Ordering::Relaxed);
            }
            if oneway {
                note_oneway_failure(&ctx, channel.peer, code, &reply);
            } else if channel.tx.send(reply).await.is_err() {
                tracing::debug!(peer = %channel.peer, "connection closed before its reply was sent");
            }
        });
        // A send under async flush finishes without waiting: run it here and save a task per
        // message. A send that has to wait (for its fsync) moves to a task of its own, so it
        // never blocks this reader. Polling it first with a no-op waker is sound: the spawned
        // task polls it again at once, and a future re-registers its waker on every poll.
        // Other requests (pulls reading many records, which may be held) get their own task
        // at once, so the pulls of one connection are served in parallel.
        if inline {
            let mut here = std::task::Context::from_waker(std::task::Waker::noop());
            if request.as_mut().poll(&mut here).is_pending() {
                tokio::spawn(request);
            }
        } else {
            tokio::spawn(request);
        }
    }
    channel.calls.close();
    ctx.sessions.connection_closed(channel.id);
    let changed = ctx.clients.channel_closed(channel.id);
    ctx.notify_ids_changed(&changed);
    drop(channel);
    write_task.abort();
    ctx.metrics.connection_closed();
    tracing::debug!(%peer, "connection closed");
}

/// Log lines about failed one-way requests: at most one a second over all connections.
static ONEWAY_FAILURE_LOG: LogEvery = LogEvery::new(Duration::from_secs(1));

/// A one-way request's reply is never sent, so a failure would leave no trace: it is counted
/// (`ferromq_oneway_requests_failed`) and logged, rate-limited. A one-way commit refused (a
/// C++ or Java consumer's commits at shutdown are one-way) is exactly what an operator must
/// be able to see.
fn note_oneway_failure(ctx: &BrokerContext, peer: SocketAddr, code: i32, reply: &Outbound) {
    let Outbound::Frame(reply) = reply else {
        return;
    };
    if reply.code == response::SUCCESS {
        return;
    }
    ctx.metrics.oneway_failed(code);
    if let Some(left_out) = ONEWAY_FAILURE_LOG.allow() {
        tracing::warn!(%peer, request = code, reply = reply.code, remark = ?reply.remark,
            similar_lines_left_out = left_out, "one-way request failed; its reply is not sent");
    }
}

/// Answers a request past `maxInFlightRequestsPerConnection` with SYSTEM_BUSY at once (a
/// one-way request is dropped, counted), through the connection's bounded writer queue.
async fn refuse_busy(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: RemotingCommand,
    remark: String,
) {
    tracing::debug!(peer = %channel.peer, code = command.code, %remark, "request refused");
    if command.is_oneway() {
        let reply = command.reply(response::SYSTEM_BUSY, Some(remark));
        note_oneway_failure(ctx, channel.peer, command.code, &reply.into());
        return;
    }
    let reply = command.reply(response::SYSTEM_BUSY, Some(remark));
    if channel.tx.send(reply.into()).await.is_err() {
        tracing::debug!(peer = %channel.peer, "connection closed before its reply was sent");
    }
}

/// Writes one queued item into the writer (a frame is buffered; a zero-copy reply is sent
/// at once, its last byte left buffered). An error ends the connection.
async fn write_item<W>(
    ctx: &BrokerContext,
    activity: &Arc<Activity>,
    writer: &mut FramedWrite<W, WireCodec>,
    item: Outbound,
) -> Result<(), WriteError>
where
    W: AsyncWrite + MaybeTcp + Unpin,
{
    match item {
        Outbound::Frame(command) => Ok(writer.feed(command).await?),
        Outbound::Regions(reply) => write_region_reply(ctx, activity, writer, reply).await,
        Outbound::Records(reply) => Ok(writer.feed(reply).await?),
    }
}

/// Sends a zero-copy pull reply (see `zero_copy`): head through the codec, flush, the
/// records with `sendfile`, then the held-back last byte. Copies (verifying every record)
/// when the connection is not plain TCP or `sendfile` is not usable.
async fn write_region_reply<W>(
    ctx: &BrokerContext,
    activity: &Arc<Activity>,
    writer: &mut FramedWrite<W, WireCodec>,
    reply: RegionReply,
) -> Result<(), WriteError>
where
    W: AsyncWrite + MaybeTcp + Unpin,
{
    let transfer = &ctx.metrics.transfer;
    if writer.get_ref().tcp().is_none() || transfer.sendfile_unusable() {
        if writer.get_ref().tcp().is_none() {
            transfer.fallback(Fallback::Tls, "a region reply reached a TLS writer");
        }
        transfer.reply(false);
        return Ok(writer.feed(reply.into_frame()?).await?);
    }
    let head = writer.encoder().head_of(&reply)?;
    writer.feed(head).await?;
    SinkExt::<Bytes>::flush(writer).await?;
    // A reply being sent is not silence: the stall bound below (the same idle timeout,
    // counted from the last progress) decides when a client that stopped reading is dropped.
    let _sending = activity.begin();
    let stall = ctx.connection_limits.settings().idle_timeout;
    let stream = writer.get_ref().tcp().expect("checked above: a TCP writer");
    match zero_copy::send_regions(stream, &reply.regions, stall).await {
        Ok(sent) => {
            transfer.sent_zero_copy(sent + 1);
            transfer.reply(true);
            Ok(writer
                .feed(Bytes::from_static(&[FileRegion::LAST_BYTE]))
                .await?)
        }
        Err(SendError::Unsupported(error)) => {
            // Nothing of the body left: the head is out, the copied body completes it.
            transfer.fallback(Fallback::SendfileUnsupported, &error.to_string());
            transfer.reply(false);
            Ok(writer.feed(reply.read_body()?).await?)
        }
        Err(error) => {
            transfer.aborted(match &error {
                SendError::Truncated(_) | SendError::Short { .. } => Abort::Truncated,
                SendError::Stalled(_) => Abort::Timeout,
                SendError::Unsupported(_) | SendError::Io(_) => Abort::Io,
            });
            if matches!(error, SendError::Truncated(_) | SendError::Short { .. }) {
                tracing::warn!(%error, "zero-copy pull reply stopped: closing the connection, the client pulls again");
            }
            Err(error.into())
        }
    }
}

/// Logs why the reader closed the connection: a limit or a bad frame at `warn` (an operator
/// should see abuse), idleness at `info`, a read error at `debug` (peers vanish).
fn log_close(peer: SocketAddr, error: &FrameReadError) {
    match error {
        FrameReadError::Io(error) => tracing::debug!(%peer, %error, "connection read failed"),
        FrameReadError::Idle(_) => tracing::info!(%peer, %error, "idle connection closed"),
        FrameReadError::Codec(_) => {
            tracing::warn!(%peer, %error, "closing connection after an undecodable frame")
        }
        FrameReadError::FrameTimeout(_) | FrameReadError::Budget { .. } => {
            tracing::warn!(%peer, %error, "closing connection: frame limit")
        }
    }
}
