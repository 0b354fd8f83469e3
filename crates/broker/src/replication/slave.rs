//! A slave's follower task: connects to the master's HA port, says where its log ends,
//! appends what the master streams at the same offsets, acknowledges what it holds under
//! its own flush policy, and caps its dispatcher at the master's watermark — never past it
//! (invariant 4). It reconnects with a bounded back-off; a refusal (diverged, wrong group)
//! is kept in the status for `haStatus` and retried slowly.
//!
//! Epochs (invariant 6): the Hello carries this log's epoch entries; a master whose log this
//! one is not a prefix of answers Truncate, and the slave cuts its divergent suffix
//! (`MessageStore::truncate_diverged`, crash-safe) and says Hello again at once. While it
//! streams, it records the master's entries (from the Welcome) as its log reaches their
//! starts, and every append carries the master's epoch, so bytes of a deposed master are
//! refused once this store has begun a newer term.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_protocol::ha::{
    Data, HaCodec, HaFrame, HaFrameError, Hello, RecordSample, Refused, Truncate, HA_VERSION,
};
use ferromq_store::AckTicket;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::follower::{Follower, MasterTerm};
use super::handshake::{store_epochs, wire_epochs};
use super::master::frame_max;
use super::{BrokerRole, Replication};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const WELCOME_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(3);
/// Most Data frames already received that are appended before one acknowledgement.
const BATCH_FRAMES_MAX: usize = 64;

type Reader = FramedRead<OwnedReadHalf, HaCodec>;
type Writer = FramedWrite<OwnedWriteHalf, HaCodec>;

/// Why a follow attempt ended.
#[derive(Debug, thiserror::Error)]
enum FollowError {
    #[error("the master refused this slave ({}): {}", .0.code, .0.reason)]
    Refused(Refused),
    #[error("truncated the divergent suffix at {0} as the master said")]
    Truncated(u64),
    #[error("{0}")]
    Broken(String),
}

/// Follows the master while this broker is a slave, until `stop`.
pub async fn run(replication: Arc<Replication>, mut stop: watch::Receiver<bool>) {
    let mut role = replication.subscribe_role();
    let mut master = replication.master_addr();
    let mut backoff = BACKOFF_MIN;
    loop {
        if *stop.borrow() {
            return;
        }
        let addr = *master.borrow_and_update();
        let following = replication.role() == BrokerRole::Slave;
        let Some(addr) = addr.filter(|_| following) else {
            tokio::select! {
                _ = role.changed() => {}
                _ = master.changed() => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        replication.follower().master_addr = Some(addr);
        let outcome = follow(&replication, addr, &mut stop, &mut role).await;
        replication.follower().connected = false;
        match outcome {
            Ok(()) => backoff = BACKOFF_MIN,
            Err(FollowError::Truncated(to)) => {
                replication.follower().refusal = None;
                tracing::warn!(master = %addr, to, "divergent suffix cut; saying Hello again");
                // Hello again at once: the log now ends at the common point.
                backoff = Duration::ZERO;
            }
            Err(FollowError::Refused(refused)) => {
                tracing::error!(master = %addr, code = %refused.code, differs_at = ?refused.differs_at,
                    reason = %refused.reason, "the master refused this slave; retrying later");
                replication.follower().refusal =
                    Some(format!("{}: {}", refused.code, refused.reason));
                backoff = BACKOFF_MAX;
            }
            Err(FollowError::Broken(reason)) => {
                tracing::warn!(master = %addr, %reason, "HA connection to the master lost; reconnecting");
                backoff = (backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One connection to the master, from Hello to close.
async fn follow(
    replication: &Replication,
    addr: SocketAddr,
    stop: &mut watch::Receiver<bool>,
    role: &mut watch::Receiver<BrokerRole>,
) -> Result<(), FollowError> {
    let broken =
        |what: &str, e: &dyn std::fmt::Display| FollowError::Broken(format!("{what}: {e}"));
    let socket = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|e| broken("connect timed out", &e))?
        .map_err(|e| broken("cannot connect", &e))?;
    let _ = socket.set_nodelay(true);
    let max = frame_max(replication.store());
    let (read, write) = socket.into_split();
    let mut reader = FramedRead::new(read, HaCodec::new(max));
    let mut writer = FramedWrite::new(write, HaCodec::new(max));
    let hello = hello(replication).await?;
    let start = hello.log_end;
    writer
        .send(HaFrame::Hello(hello))
        .await
        .map_err(|e| broken("cannot send Hello", &e))?;
    let term = match tokio::time::timeout(WELCOME_TIMEOUT, reader.next()).await {
        Ok(Some(Ok(HaFrame::Welcome(welcome))))
            if welcome.epoch < replication.min_master_epoch() =>
        {
            return Err(FollowError::Broken(format!(
                "the master at {addr} is at epoch {}, older than epoch {} this slave follows",
                welcome.epoch,
                replication.min_master_epoch()
            )))
        }
        Ok(Some(Ok(HaFrame::Welcome(welcome)))) if welcome.start == start => {
            tracing::info!(master = %addr, from = start, master_end = welcome.master_end,
                epoch = welcome.epoch, "following the master");
            let mut status = replication.follower();
            status.connected = true;
            status.refusal = None;
            status.master_end = welcome.master_end;
            status.last_read = Some(Instant::now());
            MasterTerm {
                epoch: welcome.epoch,
                epochs: store_epochs(&welcome.epochs),
            }
        }
        Ok(Some(Ok(HaFrame::Truncate(truncate)))) => {
            return truncate_diverged(replication, start, truncate).await
        }
        Ok(Some(Ok(HaFrame::Refused(refused)))) => return Err(FollowError::Refused(refused)),
        Ok(Some(Ok(other))) => {
            return Err(malformed(
                replication,
                &format!("{} instead of Welcome", other.kind_name()),
            ))
        }
        Ok(Some(Err(error))) => return Err(malformed(replication, &error.to_string())),
        Ok(None) => {
            return Err(FollowError::Broken(
                "the master closed the connection".into(),
            ))
        }
        Err(_) => return Err(FollowError::Broken("no Welcome from the master".into())),
    };
    receive(replication, &term, &mut reader, &mut writer, stop, role).await
}

/// Cuts this slave's log at the master's last common point (crash-safe: the epoch entries
/// first, then log, ConsumeQueues, key index and offset view together).
async fn truncate_diverged(
    replication: &Replication,
    log_end: u64,
    truncate: Truncate,
) -> Result<(), FollowError> {
    if truncate.to > log_end {
        return Err(malformed(
            replication,
            &format!("Truncate to {} past this log's end {log_end}", truncate.to),
        ));
    }
    tracing::warn!(to = truncate.to, log_end, reason = %truncate.reason,
        "the master says this log diverges from its own; truncating");
    let store = replication.store().clone();
    let to = truncate.to;
    tokio::task::spawn_blocking(move || store.truncate_diverged(to))
        .await
        .map_err(|e| FollowError::Broken(e.to_string()))?
        .map_err(|e| FollowError::Broken(format!("cannot truncate at {to}: {e}")))?;
    Err(FollowError::Truncated(to))
}

/// This slave's Hello: who it is and where its log ends.
async fn hello(replication: &Replication) -> Result<Hello, FollowError> {
    let store = replication.store().clone();
    let (log_end, samples) = tokio::task::spawn_blocking(move || store.log_tail())
        .await
        .map_err(|e| FollowError::Broken(e.to_string()))?
        .map_err(|e| FollowError::Broken(format!("cannot read this slave's log tail: {e}")))?;
    let identity = replication.identity();
    // Entries past the log end (recorded just before a refused append) describe bytes this
    // log does not hold; the next open drops them.
    let epochs: Vec<_> = replication
        .store()
        .epochs()
        .into_iter()
        .filter(|e| e.start <= log_end)
        .collect();
    Ok(Hello {
        epochs: wire_epochs(&epochs),
        version: HA_VERSION,
        cluster: identity.cluster.clone(),
        broker_name: identity.broker_name.clone(),
        broker_id: replication.broker_id(),
        log_end,
        epoch: ferromq_store::epoch::last_epoch(&epochs),
        segment_size: replication.store().config().segment_size_bytes,
        samples: samples
            .into_iter()
            .map(|s| RecordSample {
                offset: s.offset,
                size: s.size,
                crc: s.crc,
            })
            .collect(),
    })
}

fn malformed(replication: &Replication, what: &str) -> FollowError {
    replication
        .counters
        .malformed_frames
        .fetch_add(1, Ordering::Relaxed);
    FollowError::Broken(format!(
        "malformed or unexpected frame from the master: {what}"
    ))
}

/// Appends and acknowledges the stream until it breaks, the role changes or `stop`.
async fn receive(
    replication: &Replication,
    term: &MasterTerm,
    reader: &mut Reader,
    writer: &mut Writer,
    stop: &mut watch::Receiver<bool>,
    role: &mut watch::Receiver<BrokerRole>,
) -> Result<(), FollowError> {
    let interval = replication.settings().heartbeat_interval;
    let silence = 3 * interval;
    let mut heartbeat = tokio::time::interval(interval);
    let mut progress = CatchUp::new(replication.store().appended_end());
    loop {
        tokio::select! {
            frame = tokio::time::timeout(silence, reader.next()) => {
                let frame = frame.map_err(|_| FollowError::Broken(format!("the master was silent for {silence:?}")))?;
                if let Some(ticket) = on_frame(replication, term, frame)? {
                    let ticket = drain_ready(replication, term, reader, ticket)?;
                    acknowledge(replication, writer, ticket).await?;
                    progress.report(ticket.end, replication.follower().master_end);
                }
            }
            _ = heartbeat.tick() => {
                let end = replication.store().locally_acknowledgeable_end();
                send_ack(replication, writer, end).await?;
            }
            _ = role.changed() => {
                if replication.role() != BrokerRole::Slave {
                    return Ok(());
                }
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// Logs a slave's catch-up progress every [`CatchUp::EVERY`] while it is far behind.
struct CatchUp {
    since: Instant,
    from: u64,
    last: Instant,
}

impl CatchUp {
    const EVERY: Duration = Duration::from_secs(5);
    /// Behind by less than this, the slave is following, not catching up.
    const FAR_BYTES: u64 = 64 * 1024 * 1024;

    fn new(from: u64) -> CatchUp {
        let now = Instant::now();
        CatchUp {
            since: now,
            from,
            last: now,
        }
    }

    fn report(&mut self, end: u64, master_end: u64) {
        if self.last.elapsed() < Self::EVERY || master_end.saturating_sub(end) < Self::FAR_BYTES {
            return;
        }
        self.last = Instant::now();
        let seconds = self.since.elapsed().as_secs_f64().max(1e-3);
        let rate = end.saturating_sub(self.from) as f64 / seconds / 1e6;
        tracing::info!(
            at = end,
            master_end,
            behind = master_end - end,
            rate_mb_per_s = format!("{rate:.0}"),
            "catching up with the master"
        );
    }
}

/// Appends the frames that have arrived already (up to [`BATCH_FRAMES_MAX`]), so one
/// acknowledgement covers them all; returns the last ticket.
fn drain_ready(
    replication: &Replication,
    term: &MasterTerm,
    reader: &mut Reader,
    mut ticket: AckTicket,
) -> Result<AckTicket, FollowError> {
    for _ in 0..BATCH_FRAMES_MAX {
        match reader.next().now_or_never() {
            Some(frame) => {
                if let Some(next) = on_frame(replication, term, frame)? {
                    ticket = next;
                }
            }
            None => break,
        }
    }
    Ok(ticket)
}

/// Handles one frame from the master; a Data frame's ticket is returned for acknowledgement.
fn on_frame(
    replication: &Replication,
    term: &MasterTerm,
    frame: Option<Result<HaFrame, HaFrameError>>,
) -> Result<Option<AckTicket>, FollowError> {
    match frame {
        Some(Ok(HaFrame::Data(data))) => append(replication, term, data).map(Some),
        Some(Ok(HaFrame::Heartbeat {
            watermark,
            master_end,
        })) => {
            follow_watermark(replication, watermark, master_end);
            Ok(None)
        }
        Some(Ok(other)) => Err(malformed(replication, other.kind_name())),
        Some(Err(error)) => Err(malformed(replication, &error.to_string())),
        None => Err(FollowError::Broken(
            "the master closed the connection".into(),
        )),
    }
}

fn append(
    replication: &Replication,
    term: &MasterTerm,
    data: Data,
) -> Result<AckTicket, FollowError> {
    let mut follower = Follower::default();
    let ticket = follower
        .on_data(&**replication.store(), &data, term)
        .map_err(|error| {
            replication
                .counters
                .chunks_refused
                .fetch_add(1, Ordering::Relaxed);
            FollowError::Broken(format!(
                "replicated chunk at {} refused: {error}",
                data.offset
            ))
        })?;
    replication
        .counters
        .bytes_received
        .fetch_add(data.bytes.len() as u64, Ordering::Relaxed);
    note_master(replication, follower);
    Ok(ticket)
}

/// Caps this slave's dispatcher at the master's watermark (never lowering the cap).
fn follow_watermark(replication: &Replication, watermark: u64, master_end: u64) {
    let mut follower = Follower::default();
    follower.on_heartbeat(&**replication.store(), watermark, master_end);
    note_master(replication, follower);
}

/// Records what the last frame said of the master, for `haStatus`.
fn note_master(replication: &Replication, follower: Follower) {
    let mut status = replication.follower();
    status.watermark = follower.watermark;
    status.master_end = follower.master_end;
    status.last_read = Some(Instant::now());
}

async fn acknowledge(
    replication: &Replication,
    writer: &mut Writer,
    ticket: AckTicket,
) -> Result<(), FollowError> {
    replication
        .store()
        .acknowledged(ticket)
        .await
        .map_err(|e| FollowError::Broken(format!("replicated bytes not durable here: {e}")))?;
    send_ack(replication, writer, ticket.end).await
}

async fn send_ack(
    replication: &Replication,
    writer: &mut Writer,
    log_end: u64,
) -> Result<(), FollowError> {
    let bound = 3 * replication.settings().heartbeat_interval;
    match tokio::time::timeout(bound, writer.send(HaFrame::Ack { log_end })).await {
        Ok(Ok(())) => {
            replication.follower().last_write = Some(Instant::now());
            Ok(())
        }
        Ok(Err(error)) => Err(FollowError::Broken(format!("cannot acknowledge: {error}"))),
        Err(_) => Err(FollowError::Broken(format!(
            "the master read nothing for {bound:?}"
        ))),
    }
}
