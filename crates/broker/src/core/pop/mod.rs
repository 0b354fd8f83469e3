//! Pop-style consumption (RocketMQ 5's receive / ack / change-invisible-duration, served to
//! gRPC v5 consumers): the broker hands messages of a queue to any consumer of a group, each
//! invisible to the others until its deadline, and a consumer acknowledges each one by the
//! receipt handle of its delivery.
//!
//! - [`record`]: the pop records: every change of the state is a message of [`POP_TOPIC`].
//! - [`table`]: the state those records build; [`load`] rebuilds it from the log.
//! - [`receive`]: handing out messages (long polling, FIFO, redelivery, dead letters).
//! - [`settle`]: acks, new invisibility deadlines, forwarding to the dead-letter queue.
//! - [`renew`]: automatic renewal of deliveries while their client is alive (`auto_renew`).
//!
//! Invariants:
//! 1. The state is log records (I1): a delivery, an ack or a renewal is answered only once
//!    its record is acknowledged under the flush and replication policy (I2), so after a
//!    broker restart or a failover the rebuilt table holds every answered change: an acked
//!    message is never delivered again, an un-acked one is once its deadline passes, and the
//!    delivery attempt counts on across restarts.
//! 2. A receipt handle names one delivery ([`ReceiptHandle`]: queue, offset, delivery handle,
//!    reset generation). Acking or renewing any other delivery of that offset — an older one
//!    redelivered since, or one a reset made void — is refused, so a late ack can never settle
//!    a newer delivery.
//! 3. Progress is one view for both protocols: when the acked prefix of a queue grows, the
//!    broker commits the group's offset as an ordinary offset record (generation-checked), and
//!    a queue's state starts at the group's committed offset.
//! 4. The table belongs to one master term: rebuilt on first use after the broker becomes
//!    master (epoch change), refused on a slave.
//! 5. Bounded: [`POP_WINDOW_MAX`] offsets between a queue's committed offset and its first
//!    never-delivered one, [`POP_QUEUES_MAX`] queues, [`RECEIVE_BATCH_MAX`] messages per
//!    receive, [`RECEIVES_HELD_MAX`] receives held at once.

pub mod load;
pub mod receive;
pub mod record;
pub mod renew;
pub mod settle;
pub mod table;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use table::Table;

use super::error::{PullError, Refusal, RefusalKind, ViewError, WriteError};
use super::system_queue::QueueReadError;
use crate::context::BrokerContext;

/// The system topic of pop records (queue 0).
pub const POP_TOPIC: &str = "RMQ_SYS_FERROMQ_POP";
/// The internal group whose offset on [`POP_TOPIC`] is where a rebuild starts reading.
pub const POP_GROUP: &str = "CID_RMQ_SYS_FERROMQ_POP";
/// The client id of the offset commits the broker makes for acked prefixes.
pub const POP_CLIENT_ID: &str = "ferromq-pop";
/// Most offsets between a queue's committed offset and its first never-delivered one.
pub const POP_WINDOW_MAX: u64 = 20_000;
/// Most queues (group, topic, queue) the table tracks.
pub const POP_QUEUES_MAX: usize = 100_000;
/// Most messages one receive returns.
pub const RECEIVE_BATCH_MAX: usize = 32;
/// Most receives held (long polling) at once.
pub const RECEIVES_HELD_MAX: usize = 4_096;
/// Shortest invisibility a receive may ask for.
pub const INVISIBLE_MIN: Duration = Duration::from_secs(1);
/// Longest invisibility (RocketMQ's 12 h).
pub const INVISIBLE_MAX: Duration = Duration::from_secs(12 * 3600);
/// Longest a receive is held.
pub const RECEIVE_WAIT_MAX: Duration = Duration::from_secs(60);
/// Records between two moves of the rebuild watermark.
const WATERMARK_EVERY: u64 = 256;

/// Why a pop operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PopError {
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The receipt handle does not name the current delivery (acked, redelivered, reset, or
    /// never given).
    #[error("receipt handle is expired or unknown: {0}")]
    InvalidHandle(String),
    /// The invisibility asked for is outside what the broker accepts.
    #[error("{0}")]
    IllegalInvisibleTime(String),
    /// A record was not acknowledged; nothing was answered.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A message could not be read.
    #[error(transparent)]
    Read(#[from] PullError),
    /// The offset view could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
    /// The table could not be rebuilt from the log.
    #[error("rebuilding the pop table: {0}")]
    Load(#[from] QueueReadError),
    /// The master term changed while the table was rebuilt.
    #[error("the broker's master term changed while the pop table was rebuilt")]
    TermChanged,
}

/// The token a consumer acks or renews one delivery with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptHandle {
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
    /// Queue offset of the message.
    pub offset: u64,
    /// The delivery.
    pub handle: u64,
    /// The offsets' reset generation of the delivery.
    pub generation: u64,
}

/// First word of every receipt handle this broker writes (format 1).
const HANDLE_TAG: &str = "fmq1";

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{HANDLE_TAG} {} {} {} {} {}",
            self.topic, self.queue_id, self.offset, self.handle, self.generation
        )
    }
}

impl ReceiptHandle {
    /// Reads a handle written by `Display`.
    ///
    /// # Errors
    /// [`PopError::InvalidHandle`] for anything else.
    pub fn parse(text: &str) -> Result<ReceiptHandle, PopError> {
        let invalid =
            || PopError::InvalidHandle(format!("{:?} is not a ferromq receipt handle", cut(text)));
        let words: Vec<&str> = text.split(' ').collect();
        let [tag, topic, queue, offset, handle, generation] = words[..] else {
            return Err(invalid());
        };
        if tag != HANDLE_TAG || topic.is_empty() {
            return Err(invalid());
        }
        Ok(ReceiptHandle {
            topic: topic.to_string(),
            queue_id: queue.parse().map_err(|_| invalid())?,
            offset: offset.parse().map_err(|_| invalid())?,
            handle: handle.parse().map_err(|_| invalid())?,
            generation: generation.parse().map_err(|_| invalid())?,
        })
    }
}

/// The first 64 characters of client text, for messages.
fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The table of one master term.
#[derive(Debug)]
struct Loaded {
    epoch: u64,
    table: Table,
}

/// The pop state of a broker.
#[derive(Debug, Default)]
pub struct Pop {
    loaded: Mutex<Option<Loaded>>,
    loading: tokio::sync::Mutex<()>,
    held: AtomicUsize,
    records_since_watermark: AtomicU64,
    /// Offset commits of acked prefixes that failed (the ack itself was durable; the next
    /// advance commits again).
    pub commit_failures: AtomicU64,
    /// Messages moved to a dead-letter queue after their last delivery attempt.
    pub dead_lettered: AtomicU64,
    /// Deliveries registered for automatic renewal (`renew`).
    pub renewals: renew::Renewals,
    /// Automatic renewals written.
    pub renewed: AtomicU64,
    /// Deliveries not registered for renewal because [`renew::RENEWALS_MAX`] were.
    pub renewals_refused: AtomicU64,
}

impl Pop {
    fn with_table<R>(&self, epoch: u64, f: impl FnOnce(&mut Table) -> R) -> Option<R> {
        let mut loaded = self.loaded.lock().expect("pop lock");
        match loaded.as_mut() {
            Some(l) if l.epoch == epoch => Some(f(&mut l.table)),
            _ => None,
        }
    }

    /// Drops the table (the broker is no longer master).
    pub fn unload(&self) {
        *self.loaded.lock().expect("pop lock") = None;
    }

    /// Number of receives held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// Counts one held receive while it lives.
struct HeldGuard<'a>(&'a AtomicUsize);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Takes one of the [`RECEIVES_HELD_MAX`] places of held receives.
fn hold(pop: &Pop) -> Result<HeldGuard<'_>, Refusal> {
    if pop.held.fetch_add(1, Ordering::Relaxed) >= RECEIVES_HELD_MAX {
        pop.held.fetch_sub(1, Ordering::Relaxed);
        return Err(Refusal::new(
            RefusalKind::Busy,
            format!("{RECEIVES_HELD_MAX} receives are held already; retry later"),
        ));
    }
    Ok(HeldGuard(&pop.held))
}

/// Runs `f` on the table of the current master term, rebuilding it from the log first if
/// needed; refused on a slave.
///
/// # Errors
/// Not master, or the rebuild's error.
pub async fn with_table<R>(
    ctx: &BrokerContext,
    f: impl FnOnce(&mut Table) -> R,
) -> Result<R, PopError> {
    super::ack::check_writable(ctx, "pop record")?;
    let pop = &ctx.pop;
    let epoch = ctx.replication.epoch();
    let mut f = Some(f);
    if let Some(r) = pop.with_table(epoch, |t| (f.take().expect("called once"))(t)) {
        return Ok(r);
    }
    let _turn = pop.loading.lock().await;
    if pop.with_table(epoch, |_| ()).is_none() {
        let table = load::rebuild(ctx, epoch).await?;
        *pop.loaded.lock().expect("pop lock") = Some(Loaded { epoch, table });
    }
    pop.with_table(epoch, |t| (f.take().expect("called once"))(t))
        .ok_or(PopError::TermChanged)
}

/// Runs `f` on the loaded table of the current term, if any (after a write: the term may have
/// ended meanwhile, and then there is nothing to update).
pub(crate) fn with_loaded(ctx: &BrokerContext, f: impl FnOnce(&mut Table)) {
    let _ = ctx.pop.with_table(ctx.replication.epoch(), f);
}

/// Runs its closure when dropped, unless disarmed: a claim or a reservation made for a request
/// is undone when the request's future is dropped midway (a client cancelled the call, or the
/// transport's deadline passed), so no slot stays busy for ever.
pub(crate) struct Undo<F: FnOnce()> {
    undo: Option<F>,
}

impl<F: FnOnce()> Undo<F> {
    /// Arms `undo`.
    pub(crate) fn new(undo: F) -> Undo<F> {
        Undo { undo: Some(undo) }
    }

    /// The request finished: nothing to undo.
    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for Undo<F> {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            undo();
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undo_runs_when_dropped_armed_and_not_when_disarmed() {
        let ran = std::cell::Cell::new(0);
        drop(Undo::new(|| ran.set(ran.get() + 1)));
        assert_eq!(ran.get(), 1, "a dropped request undoes its claim");
        Undo::new(|| ran.set(ran.get() + 1)).disarm();
        assert_eq!(ran.get(), 1, "a finished request does not");
    }

    #[test]
    fn receipt_handles_round_trip_and_foreign_text_is_refused() {
        let h = ReceiptHandle {
            topic: "a|b%c".into(),
            queue_id: 3,
            offset: 99,
            handle: 1 << 40,
            generation: 2,
        };
        assert_eq!(ReceiptHandle::parse(&h.to_string()).unwrap(), h);
        for bad in [
            "",
            "fmq1",
            "fmq1 t 1 2 3",
            "fmq2 t 1 2 3 4",
            "fmq1 t x 2 3 4",
            "fmq1 t 1 2 3 4 5",
            "fmq1  1 2 3 4",
        ] {
            assert!(
                matches!(ReceiptHandle::parse(bad), Err(PopError::InvalidHandle(_))),
                "{bad:?}"
            );
        }
    }
}
