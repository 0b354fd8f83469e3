//! The master's HA listener: one task per slave connection. It judges the slave's Hello
//! ([`super::handshake`]), streams the log from the slave's end under the window
//! ([`super::stream`]), and feeds the slave's acknowledgements to the in-sync set.
//!
//! A hostile or broken peer — a malformed frame, a frame of the wrong kind, an
//! acknowledgement past what it was sent, silence past three heartbeat intervals — loses its
//! HA connection and is counted; client traffic is never touched. Connections are bounded
//! ([`HA_CONNECTIONS_MAX`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_protocol::ha::{Data, HaCodec, HaFrame, Hello, RefusalCode, Refused, Welcome};
use futures_util::{SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::handshake::{judge_hello, wire_epochs, Verdict};
use super::stream::StreamState;
use super::Replication;

/// Most HA connections a master serves at once; more are closed when accepted.
pub const HA_CONNECTIONS_MAX: usize = 32;

/// A slave this close to the committed end is streamed from the task itself (the bytes were
/// just written, so the read is a page-cache copy); farther behind, reads go to the blocking
/// pool so a disk read never stalls a runtime worker.
const HOT_BYTES: u64 = 64 * 1024 * 1024;

/// How long a new HA connection may take to say Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

type Reader = FramedRead<OwnedReadHalf, HaCodec>;
type Writer = FramedWrite<OwnedWriteHalf, HaCodec>;

/// The largest HA frame either side accepts: the largest record plus the frame header.
pub fn frame_max(store: &ferromq_store::MessageStore) -> usize {
    store.config().record_size_max() + 64 * 1024
}

/// Accepts slave connections until `stop`.
pub async fn serve(
    replication: Arc<Replication>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(HA_CONNECTIONS_MAX));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, limit = HA_CONNECTIONS_MAX,
                            "HA connection refused: too many");
                        replication.counters.peers_refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let replication = replication.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        serve_replica(&replication, socket, peer, stop).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "HA accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

/// One slave connection, from Hello to close.
async fn serve_replica(
    replication: &Replication,
    socket: TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let _ = socket.set_nodelay(true);
    let max = frame_max(replication.store());
    let (read, write) = socket.into_split();
    let mut reader = FramedRead::new(read, HaCodec::new(max));
    let mut writer = FramedWrite::new(write, HaCodec::new(max));
    let Some(hello) = read_hello(replication, &mut reader, peer).await else {
        return;
    };
    let id = hello.broker_id;
    let admitted = admit(replication, &hello, peer).await;
    if let Ok(Verdict::Truncate(truncate)) = admitted {
        tracing::warn!(%peer, broker_id = id, to = truncate.to, reason = %truncate.reason,
            "HA peer told to truncate its divergent suffix");
        let _ = send(&mut writer, HaFrame::Truncate(truncate), replication).await;
        return;
    }
    if let Err(refused) = admitted {
        replication
            .counters
            .peers_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%peer, broker_id = id, code = %refused.code, differs_at = ?refused.differs_at,
            reason = %refused.reason, "HA peer refused");
        let _ = writer.send(HaFrame::Refused(refused)).await;
        return;
    }
    tracing::info!(%peer, broker_id = id, from = hello.log_end, "slave connected");
    let outcome = stream(
        replication,
        id,
        &mut reader,
        &mut writer,
        hello.log_end,
        stop,
    )
    .await;
    replication.update(|set| {
        set.disconnect(id);
    });
    match outcome {
        Ok(()) => tracing::info!(%peer, broker_id = id, "slave disconnected"),
        Err(reason) => {
            tracing::warn!(%peer, broker_id = id, %reason, "slave connection closed")
        }
    }
}

/// The first frame, which must be a Hello, within [`HELLO_TIMEOUT`].
async fn read_hello(
    replication: &Replication,
    reader: &mut Reader,
    peer: SocketAddr,
) -> Option<Hello> {
    match tokio::time::timeout(HELLO_TIMEOUT, reader.next()).await {
        Ok(Some(Ok(HaFrame::Hello(hello)))) => Some(hello),
        Ok(Some(Ok(other))) => {
            malformed(
                replication,
                peer,
                &format!("{} before Hello", other.kind_name()),
            );
            None
        }
        Ok(Some(Err(error))) => {
            malformed(replication, peer, &error.to_string());
            None
        }
        Ok(None) => None,
        Err(_) => {
            tracing::warn!(%peer, "HA connection closed: no Hello within {HELLO_TIMEOUT:?}");
            None
        }
    }
}

fn malformed(replication: &Replication, peer: SocketAddr, what: &str) {
    replication
        .counters
        .malformed_frames
        .fetch_add(1, Ordering::Relaxed);
    tracing::warn!(%peer, %what, "HA connection closed: malformed or unexpected frame");
}

/// Judges the Hello and, if it passes, enters the slave into the in-sync tracking and
/// welcomes it.
async fn admit(
    replication: &Replication,
    hello: &Hello,
    peer: SocketAddr,
) -> Result<Verdict, Refused> {
    let store = replication.store().clone();
    let identity = replication.identity().clone();
    let is_master = replication.role().is_master();
    let judged = {
        let hello = hello.clone();
        tokio::task::spawn_blocking(move || judge_hello(&identity, is_master, &hello, &*store))
            .await
            .map_err(|e| Refused {
                code: RefusalCode::Diverged,
                differs_at: None,
                reason: format!("the master failed judging the Hello: {e}"),
            })?
    };
    if let Verdict::Truncate(truncate) = judged? {
        return Ok(Verdict::Truncate(truncate));
    }
    replication
        .update(|set| {
            set.connect(
                hello.broker_id,
                &peer.to_string(),
                hello.log_end,
                Instant::now(),
            )
        })
        .map_err(|error| Refused {
            code: RefusalCode::DuplicateId,
            differs_at: None,
            reason: error.to_string(),
        })?;
    Ok(Verdict::Stream)
}

/// Streams the log to one slave and takes its acknowledgements until either side stops.
async fn stream(
    replication: &Replication,
    id: u64,
    reader: &mut Reader,
    writer: &mut Writer,
    start: u64,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let store = replication.store().clone();
    let epochs = store.epochs();
    let epoch = ferromq_store::epoch::last_epoch(&epochs);
    let welcome = Welcome {
        epoch,
        master_end: store.committed_end(),
        start,
        watermark: replication.watermark(),
        epochs: wire_epochs(&epochs),
    };
    let watermark_sent = welcome.watermark;
    send(writer, HaFrame::Welcome(welcome), replication).await?;
    let interval = replication.settings().heartbeat_interval;
    let mut heartbeat = tokio::time::interval(interval);
    let mut commits = store.subscribe_commits();
    let mut changes = replication.changed.subscribe();
    let mut role = replication.subscribe_role();
    let mut state = StreamState::new(start);
    let mut last_heard = Instant::now();
    let mut watermark_sent = watermark_sent;
    loop {
        // The slave records the entries it was welcomed with: a new term (a new epoch of
        // this same master) needs a new Welcome, so the connection is closed.
        if store.last_epoch() != epoch {
            return Err(format!(
                "this master began epoch {} (the stream was at {epoch})",
                store.last_epoch()
            ));
        }
        watermark_sent = send_ready(replication, id, writer, &mut state, watermark_sent).await?;
        // A watermark that moved without new data to carry it goes out in a heartbeat, so
        // slaves expose what the in-sync set holds without waiting for the next interval.
        let watermark = replication.watermark();
        if watermark > watermark_sent {
            watermark_sent = heartbeat_to(writer, replication, watermark).await?;
        }
        tokio::select! {
            frame = reader.next() => {
                last_heard = Instant::now();
                on_slave_frame(replication, id, &mut state, frame)?;
            }
            _ = commits.changed() => {}
            _ = changes.changed() => {}
            _ = heartbeat.tick() => {
                if last_heard.elapsed() > 3 * interval {
                    return Err(format!("slave silent for {:?}", last_heard.elapsed()));
                }
                let watermark = replication.watermark();
                watermark_sent = heartbeat_to(writer, replication, watermark).await?;
            }
            _ = role.changed() => {
                if !replication.role().is_master() {
                    return Err("this broker is no longer master".into());
                }
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// Sends what the window allows; returns the watermark the last frame carried.
async fn send_ready(
    replication: &Replication,
    id: u64,
    writer: &mut Writer,
    state: &mut StreamState,
    mut watermark_sent: u64,
) -> Result<u64, String> {
    let store = replication.store();
    while let Some((from, max)) = state.next_read(store.committed_end()) {
        let chunk = if store.committed_end() - from <= HOT_BYTES {
            // Just written: in the page cache, a copy rather than a disk read.
            store.replication_chunk(from, max)
        } else {
            let reader = store.clone();
            tokio::task::spawn_blocking(move || reader.replication_chunk(from, max))
                .await
                .map_err(|e| e.to_string())?
        }
        .map_err(|e| format!("cannot read the log for the slave at {from}: {e}"))?;
        let Some(chunk) = chunk else {
            break;
        };
        let len = chunk.bytes.len() as u64;
        watermark_sent = replication.watermark();
        let data = Data {
            offset: chunk.offset,
            watermark: watermark_sent,
            master_end: store.committed_end(),
            bytes: chunk.bytes,
        };
        send(writer, HaFrame::Data(data), replication).await?;
        state.sent(chunk.next);
        replication.note_streamed(id, len);
    }
    Ok(watermark_sent)
}

async fn heartbeat_to(
    writer: &mut Writer,
    replication: &Replication,
    watermark: u64,
) -> Result<u64, String> {
    let frame = HaFrame::Heartbeat {
        watermark,
        master_end: replication.store().committed_end(),
    };
    send(writer, frame, replication).await?;
    Ok(watermark)
}

/// Sends one frame, bounded by three heartbeat intervals (a slave that stops reading is
/// dropped, not waited for).
async fn send(
    writer: &mut Writer,
    frame: HaFrame,
    replication: &Replication,
) -> Result<(), String> {
    let bound = 3 * replication.settings().heartbeat_interval;
    match tokio::time::timeout(bound, writer.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(format!("cannot write to the slave: {error}")),
        Err(_) => Err(format!("the slave read nothing for {bound:?}")),
    }
}

/// Handles one frame from the slave: only acknowledgements are expected.
fn on_slave_frame(
    replication: &Replication,
    id: u64,
    state: &mut StreamState,
    frame: Option<Result<HaFrame, ferromq_protocol::ha::HaFrameError>>,
) -> Result<(), String> {
    let counters = &replication.counters;
    match frame {
        Some(Ok(HaFrame::Ack { log_end })) => {
            if let Err(error) = state.acked(log_end) {
                counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                return Err(error.to_string());
            }
            let store = replication.store();
            let (end, durable) = (store.committed_end(), store.locally_acknowledgeable_end());
            replication
                .update(|set| set.ack(id, log_end, end, durable, Instant::now()))
                .map_err(|error| {
                    counters.bad_acks.fetch_add(1, Ordering::Relaxed);
                    error.to_string()
                })?;
            Ok(())
        }
        Some(Ok(other)) => {
            counters.malformed_frames.fetch_add(1, Ordering::Relaxed);
            Err(format!(
                "unexpected {} frame from a slave",
                other.kind_name()
            ))
        }
        Some(Err(error)) => {
            counters.malformed_frames.fetch_add(1, Ordering::Relaxed);
            Err(format!("malformed frame: {error}"))
        }
        None => Err("the slave closed the connection".into()),
    }
}
