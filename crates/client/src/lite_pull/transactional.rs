//! Exactly-once consumption into PostgreSQL (cargo feature `postgres`):
//! [`LitePullConsumer::consume_transactionally`] hands the application an open database
//! transaction with a batch, writes the batch's offsets in the same transaction, and
//! commits once.
//!
//! Invariants:
//! 1. **One transaction.** The application's writes and the offset rows of every queue in
//!    the batch commit together or not at all; the offset update runs last, so the row lock
//!    on the offset row is held only between it and `COMMIT`.
//! 2. **Fenced by generation.** Each queue's offset update carries the owner generation the
//!    queue was claimed with *before its messages were polled*; a claim by another consumer,
//!    a re-claim by this one (rebalance, failover) or a broker reset in between makes the
//!    update match no row, and the whole transaction rolls back ([`TransactionalError::Fenced`]).
//! 3. **No move on errors.** When anything fails — the application, the pool, a statement,
//!    `COMMIT` (whose outcome may be unknown), a fence — or the future is dropped, the batch's
//!    queues drop their buffers and read their position again from the database (a new
//!    claim), so the next batch starts exactly after what the database holds.
//! 4. The broker offsets follow for monitoring only: committed offsets are mirrored to the
//!    brokers at most every [`MIRROR_INTERVAL`]; a mirror failure is reported in
//!    [`TransactionalBatch::mirror_error`] and never undoes the database commit.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use thiserror::Error;
use tokio_postgres::Transaction;

use super::fetch::spawn_fetch;
use super::state::Shared;
use super::LitePullConsumer;
use crate::error::OffsetError;
use crate::message::MessageExt;
use crate::offset_store::postgres::PostgresOffsetStore;
use crate::offset_store::BoxFuture;

/// Committed offsets reach the brokers (for `consumerProgress`) at most this often.
pub const MIRROR_INTERVAL: Duration = Duration::from_secs(1);

/// What one [`LitePullConsumer::consume_transactionally`] call committed.
#[derive(Debug, Default)]
#[must_use = "a batch may carry a broker mirror failure"]
pub struct TransactionalBatch {
    /// Messages handed to the application and committed (0: none arrived in time).
    pub messages: usize,
    /// Each queue of the batch with the next offset now stored in the database.
    pub committed: Vec<(MessageQueue, u64)>,
    /// The broker mirror's failure, when it ran in this call and failed (monitoring only:
    /// the database commit stands).
    pub mirror_error: Option<OffsetError>,
}

/// Why a transactional batch was not committed. In every case nothing of the batch was
/// committed (or, for a failed `COMMIT`, the outcome is read back from the database) and
/// the batch's queues resume from the position the database holds.
#[derive(Debug, Error)]
pub enum TransactionalError<E> {
    /// The application's closure failed; the transaction was rolled back.
    #[error("the application failed; the transaction was rolled back: {0}")]
    Apply(E),
    /// Another owner (or a broker reset) took a queue of the batch over; the batch was
    /// dropped. In subscribe mode the queue leaves this consumer until a rebalance gives it
    /// back; in assign mode it is claimed again after `retry_delay`.
    #[error("batch dropped: {0}")]
    Fenced(OffsetError),
    /// The database failed (pool, statement, `COMMIT`).
    #[error("batch not committed: {0}")]
    Offset(OffsetError),
    /// The consumer was not started with
    /// [`LitePullConsumer::start_postgres`].
    #[error("transactional consumption needs a consumer started with start_postgres")]
    NotPostgres,
}

/// One queue's part of a batch.
#[derive(Debug, Clone, Copy)]
struct QueuePart {
    epoch: u64,
    generation: Option<u64>,
    first_offset: u64,
    next_offset: u64,
}

/// Restarts (or fences) the batch's queues unless disarmed after a successful commit
/// (module invariant 3, including a dropped future).
struct Rewind<'a> {
    shared: &'a Arc<Shared>,
    parts: Vec<(MessageQueue, u64)>,
    fenced: Option<MessageQueue>,
    armed: bool,
}

impl Drop for Rewind<'_> {
    fn drop(&mut self) {
        if !self.armed || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for (queue, epoch) in &self.parts {
            if self.fenced.as_ref() == Some(queue) {
                fence_queue(self.shared, queue, *epoch);
            } else {
                restart_queue(self.shared, queue, *epoch);
            }
        }
    }
}

/// Drops `queue`'s buffer and position (when still at `epoch`) so its fetch task claims it
/// again and resumes from the database.
fn restart_queue(shared: &Arc<Shared>, queue: &MessageQueue, epoch: u64) {
    let mut state = shared.lock();
    let Some(q) = state.queues.get_mut(queue) else {
        return;
    };
    if q.epoch != epoch {
        return;
    }
    q.epoch = shared.next_epoch();
    q.buffer.clear();
    q.fetch_offset = None;
    q.consumed = None;
    q.owner_generation = None;
    if let Some(task) = q.task.take() {
        task.abort();
    }
    q.task = Some(spawn_fetch(shared, queue.clone(), q.epoch));
}

/// A fenced queue (still at `epoch`): subscribe mode drops it until a rebalance gives it
/// back; assign mode claims it again after `retry_delay`.
fn fence_queue(shared: &Arc<Shared>, queue: &MessageQueue, epoch: u64) {
    let assigned = {
        let mut state = shared.lock();
        let assigned = state.assigned;
        match state.queues.get_mut(queue) {
            Some(q) if q.epoch == epoch => {
                if let Some(task) = q.task.take() {
                    task.abort();
                }
                q.buffer.clear();
                if !assigned {
                    state.queues.remove(queue);
                }
            }
            _ => return,
        }
        assigned
    };
    shared.pull.offset_store().remove(queue);
    if assigned {
        let weak = Arc::downgrade(shared);
        let queue = queue.clone();
        let delay = shared.config.retry_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(shared) = weak.upgrade() {
                restart_queue(&shared, &queue, epoch);
            }
        });
    }
}

/// Takes up to `max_poll_messages` buffered messages with each queue's epoch, claim
/// generation and offsets, under one lock.
fn take_batch(shared: &Shared) -> (Vec<MessageExt>, BTreeMap<MessageQueue, QueuePart>) {
    let max = shared.config.max_poll_messages;
    let mut messages = Vec::new();
    let mut parts = BTreeMap::new();
    let mut state = shared.lock();
    let count = state.queues.len();
    if count == 0 {
        return (messages, parts);
    }
    let start = state.next_poll % count;
    state.next_poll = state.next_poll.wrapping_add(1);
    let mut keys: Vec<MessageQueue> = state.queues.keys().cloned().collect();
    keys.rotate_left(start);
    for key in keys {
        let Some(q) = state.queues.get_mut(&key) else {
            continue;
        };
        let n = (max - messages.len()).min(q.buffer.len());
        if q.paused || n == 0 {
            continue;
        }
        let taken: Vec<MessageExt> = q.buffer.drain(..n).collect();
        let (Some(first), Some(last)) = (taken.first(), taken.last()) else {
            continue;
        };
        parts.insert(
            key.clone(),
            QueuePart {
                epoch: q.epoch,
                generation: q.owner_generation,
                first_offset: first.queue_offset,
                next_offset: last.queue_offset + 1,
            },
        );
        q.consumed = Some(last.queue_offset + 1);
        q.wake.notify_one();
        messages.extend(taken);
        if messages.len() >= max {
            break;
        }
    }
    (messages, parts)
}

impl LitePullConsumer {
    /// Waits up to `timeout` for a batch (at most `max_poll_messages`), opens a database
    /// transaction, lets `apply` write the batch's effects in it, writes each queue's next
    /// offset in the same transaction under the queue's owner generation, and commits once.
    ///
    /// The database is the source of truth: each queue starts (on start, after every
    /// rebalance, after a failover or a broker reset) from the offset stored in the
    /// database, claimed under a new owner generation. Returns an empty batch when no
    /// message arrived in time.
    ///
    /// ```no_run
    /// # async fn run(consumer: &ferromq_client::LitePullConsumer) {
    /// use std::time::Duration;
    /// let batch = consumer
    ///     .consume_transactionally(Duration::from_secs(1), |tx, messages| {
    ///         Box::pin(async move {
    ///             for m in messages {
    ///                 tx.execute("INSERT INTO seen (id) VALUES ($1)", &[&m.msg_id]).await?;
    ///             }
    ///             Ok::<(), ferromq_client::offset_store::postgres::tokio_postgres::Error>(())
    ///         })
    ///     })
    ///     .await;
    /// # let _ = batch;
    /// # }
    /// ```
    ///
    /// # Durability
    /// `Ok` means PostgreSQL committed the application's writes and the offsets together.
    ///
    /// # Cancel safety
    /// Dropping the future before it returns rolls the transaction back (the driver sends
    /// `ROLLBACK`; a `COMMIT` already sent may still land) and makes the batch's queues
    /// read their position again from the database, so nothing is skipped and nothing
    /// applied twice.
    ///
    /// # Errors
    /// [`TransactionalError::Apply`] (the closure failed), [`TransactionalError::Fenced`]
    /// (another owner or a reset took a queue over: the batch is dropped),
    /// [`TransactionalError::Offset`] (the database failed), and
    /// [`TransactionalError::NotPostgres`]. In each case the batch's queues resume from the
    /// database's position.
    pub async fn consume_transactionally<E, F>(
        &self,
        timeout: Duration,
        apply: F,
    ) -> Result<TransactionalBatch, TransactionalError<E>>
    where
        F: for<'t> FnOnce(&'t Transaction<'t>, &'t [MessageExt]) -> BoxFuture<'t, Result<(), E>>,
    {
        let Some(store) = self.shared.postgres.get().cloned() else {
            return Err(TransactionalError::NotPostgres);
        };
        self.shared.transactional.store(true, Ordering::Relaxed);
        let (messages, parts) = self.wait_batch(timeout).await;
        if messages.is_empty() {
            return Ok(TransactionalBatch::default());
        }
        let mut rewind = Rewind {
            shared: &self.shared,
            parts: parts.iter().map(|(q, p)| (q.clone(), p.epoch)).collect(),
            fenced: None,
            armed: true,
        };
        let result = commit_batch(&store, &messages, &parts, apply).await;
        if let Err(TransactionalError::Fenced(OffsetError::Fenced { queue, .. })) = &result {
            rewind.fenced = Some(queue.clone());
        }
        result?;
        rewind.armed = false;
        drop(rewind);
        let mut committed = Vec::with_capacity(parts.len());
        for (queue, part) in &parts {
            store.committed(queue, part.next_offset);
            committed.push((queue.clone(), part.next_offset));
        }
        let mirror_error = self.mirror_if_due(&store).await;
        Ok(TransactionalBatch {
            messages: messages.len(),
            committed,
            mirror_error,
        })
    }

    /// Waits up to `timeout` for buffered messages and takes a batch.
    async fn wait_batch(
        &self,
        timeout: Duration,
    ) -> (Vec<MessageExt>, BTreeMap<MessageQueue, QueuePart>) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.data.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = take_batch(&self.shared);
            if !taken.0.is_empty() {
                return taken;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return taken;
            }
        }
    }

    /// Writes the committed offsets to the brokers when [`MIRROR_INTERVAL`] has passed.
    async fn mirror_if_due(&self, store: &PostgresOffsetStore) -> Option<OffsetError> {
        {
            let mut last = self
                .shared
                .last_mirror
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            if last.is_some_and(|at| now.duration_since(at) < MIRROR_INTERVAL) {
                return None;
            }
            *last = Some(now);
        }
        match store.persist_mirror().await {
            Ok(Some(report)) => report.into_result().err(),
            Ok(None) => None,
            Err(error) => Some(error),
        }
    }
}

/// Invariants 1 and 2: one transaction with the application's writes and the offsets.
async fn commit_batch<E, F>(
    store: &PostgresOffsetStore,
    messages: &[MessageExt],
    parts: &BTreeMap<MessageQueue, QueuePart>,
    apply: F,
) -> Result<(), TransactionalError<E>>
where
    F: for<'t> FnOnce(&'t Transaction<'t>, &'t [MessageExt]) -> BoxFuture<'t, Result<(), E>>,
{
    let database = |what: &str, source: Box<dyn std::error::Error + Send + Sync>| {
        TransactionalError::Offset(OffsetError::Database {
            what: what.to_string(),
            source,
        })
    };
    let mut client = store
        .database()
        .pool()
        .get()
        .await
        .map_err(|e| database("get a connection for a batch", Box::new(e)))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| database("begin a batch's transaction", Box::new(e)))?;
    apply(&tx, messages)
        .await
        .map_err(TransactionalError::Apply)?;
    for (queue, part) in parts {
        let Some(generation) = part.generation else {
            return Err(TransactionalError::Offset(OffsetError::NotClaimed {
                queue: queue.clone(),
            }));
        };
        let written = store
            .commit_with(&*tx, queue, generation, part.first_offset, part.next_offset)
            .await;
        if let Err(error) = written {
            store.commit_failed(&error);
            return Err(if error.is_fenced() {
                TransactionalError::Fenced(error)
            } else {
                TransactionalError::Offset(error)
            });
        }
    }
    tx.commit().await.map_err(|e| {
        database(
            "commit a batch's transaction (outcome unknown)",
            Box::new(e),
        )
    })
}
