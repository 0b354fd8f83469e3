//! [`RecordingStore`]: the push consumer's broker offset store, wrapped so that every commit
//! the broker acknowledges or refuses, and every queue the consumer starts or stops, lands in
//! the history with its exact offset.
//!
//! The push consumer reaches its offsets only through the [`OffsetStore`] trait, which gives
//! the hooks the history needs:
//! - `read(queue, Store)` is how it picks a start offset for a newly assigned queue → a
//!   `QueueStart` at the offset read (or, when the store has none, at the offset of the
//!   `update` that follows, which the consumer computed from its consume-from rule);
//! - `correct(queue, offset)` is its answer to OFFSET_ILLEGAL / PULL_OFFSET_MOVED (e.g. after
//!   a reset): the queue restarts at `offset` → a new `QueueStart`, then the commit;
//! - `remove(queue)` follows a rebalance away → `QueueStop`; when an `update` follows at once,
//!   the consumer is following an offset reset the broker pushed → `QueueStart` there;
//! - `persist`/`persist_all` commit. This store keeps the consumer's in-memory offsets
//!   itself and hands the inner store one value at a time under a lock (`update` then
//!   `persist`), so the recorded `CommitOk` offset is exactly the one the broker acknowledged.
//!
//! Only queues of the chaos topic are recorded; the group's retry topic passes through.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use ferromq_client::offset_store::BoxFuture;
use ferromq_client::{
    BrokerOffsetStore, MessageQueue, OffsetError, OffsetStore, OffsetStoreStats, PersistReport,
    ReadMode,
};

use super::{commit_op, queue_of, Active};
use crate::history::{ConsumerId, ConsumerKind};
use crate::recorder::Recorder;

#[derive(Debug, Default)]
struct Table {
    /// The consumer's in-memory offsets (the inner store sees a value only when it is
    /// committed).
    memory: BTreeMap<MessageQueue, u64>,
    /// Queues whose store read found no offset: their next `update` is the start.
    awaiting_start: BTreeSet<MessageQueue>,
    /// Last offset the broker acknowledged per queue (from this store).
    committed: BTreeMap<MessageQueue, u64>,
    /// Queues updated in memory since they were read or started.
    known: BTreeSet<MessageQueue>,
}

/// A recording wrapper around a [`BrokerOffsetStore`].
#[derive(Debug)]
pub struct RecordingStore {
    inner: BrokerOffsetStore,
    topic: String,
    consumer: ConsumerId,
    recorder: Arc<Recorder>,
    active: Active,
    /// The session's gate, shared with its listener: starts and stops are recorded under it,
    /// so a listener batch is recorded wholly before or wholly after them (the history's
    /// order is the real order), and not at all once the session crashed.
    gate: super::push::Alive,
    table: Mutex<Table>,
    /// Serialises commits: the inner store's memory holds the value being committed.
    committing: tokio::sync::Mutex<()>,
}

impl RecordingStore {
    /// Wraps `inner`, recording queues of `topic` as `consumer`'s.
    pub fn new(
        inner: BrokerOffsetStore,
        topic: &str,
        consumer: ConsumerId,
        recorder: Arc<Recorder>,
        active: Active,
        gate: super::push::Alive,
    ) -> RecordingStore {
        RecordingStore {
            inner,
            topic: topic.to_string(),
            consumer,
            recorder,
            active,
            gate,
            table: Mutex::new(Table::default()),
            committing: tokio::sync::Mutex::new(()),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Each critical section is one set or map operation.
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn recorded(&self, queue: &MessageQueue) -> bool {
        queue.topic == self.topic
    }

    fn start(&self, queue: &MessageQueue, offset: u64) {
        let alive = self
            .gate
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if *alive {
            self.active.start(
                &self.recorder,
                self.consumer,
                ConsumerKind::Push,
                queue_of(queue),
                offset,
            );
        }
    }

    fn stop(&self, queue: &MessageQueue) {
        let alive = self
            .gate
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if *alive {
            self.active
                .stop(&self.recorder, self.consumer, &queue_of(queue));
        }
    }

    /// Records the outcome of a commit of `offset` (plain or correction).
    /// `sent_ms`: when the commit was sent (run clock).
    fn record_commit(
        &self,
        queue: &MessageQueue,
        offset: u64,
        sent_ms: u64,
        result: &Result<(), OffsetError>,
    ) {
        if self.recorded(queue) {
            self.recorder.record(commit_op(
                self.consumer,
                queue,
                offset,
                Some(sent_ms),
                result,
            ));
        }
        if result.is_ok() {
            self.table().committed.insert(queue.clone(), offset);
        }
    }

    /// Persists `queue`'s in-memory offset when it differs from the last acknowledged one;
    /// `Some(offset)` when a commit was acknowledged.
    async fn persist_queue(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        let _serial = self.committing.lock().await;
        let offset = {
            let table = self.table();
            let Some(&offset) = table.memory.get(queue) else {
                return Ok(None);
            };
            if table.committed.get(queue) == Some(&offset) {
                return Ok(None);
            }
            offset
        };
        self.inner.update(queue, offset);
        let sent_ms = self.recorder.elapsed_ms();
        let result = self.inner.persist(queue).await;
        self.record_commit(queue, offset, sent_ms, &result);
        result.map(|()| Some(offset))
    }
}

impl OffsetStore for RecordingStore {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        let start = {
            let mut table = self.table();
            table.known.insert(queue.clone());
            table.memory.insert(queue.clone(), offset);
            table.awaiting_start.remove(queue)
        };
        if start && self.recorded(queue) {
            self.start(queue, offset);
        }
    }

    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            let _serial = self.committing.lock().await;
            {
                let mut table = self.table();
                table.known.insert(queue.clone());
                table.memory.insert(queue.clone(), offset);
            }
            if self.recorded(queue) {
                // The consumer abandons its position and resumes the queue at `offset`.
                self.stop(queue);
                self.start(queue, offset);
            }
            let sent_ms = self.recorder.elapsed_ms();
            let result = self.inner.correct(queue, offset).await;
            self.record_commit(queue, offset, sent_ms, &result);
            result
        })
    }

    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move { self.persist_queue(queue).await.map(|_| ()) })
    }

    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        Box::pin(async move {
            let queues: Vec<MessageQueue> = self.table().known.iter().cloned().collect();
            let mut report = PersistReport::default();
            for queue in queues {
                let outcome = self.persist_queue(&queue).await;
                report.record(queue, outcome);
            }
            Ok(report)
        })
    }

    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        Box::pin(async move {
            if mode != ReadMode::Store {
                if let Some(&offset) = self.table().memory.get(queue) {
                    return Ok(Some(offset));
                }
                if mode == ReadMode::Memory {
                    return Ok(None);
                }
            }
            let found = self.inner.read(queue, ReadMode::Store).await?;
            {
                // The push consumer reads the store only to start a newly assigned queue.
                match found {
                    Some(offset) => {
                        {
                            let mut table = self.table();
                            table.known.insert(queue.clone());
                            table.committed.insert(queue.clone(), offset);
                            table.awaiting_start.remove(queue);
                            if mode != ReadMode::Store {
                                table.memory.entry(queue.clone()).or_insert(offset);
                            }
                        }
                        if self.recorded(queue) {
                            self.start(queue, offset);
                        }
                    }
                    None => {
                        self.table().awaiting_start.insert(queue.clone());
                    }
                }
            }
            Ok(found)
        })
    }

    fn remove(&self, queue: &MessageQueue) {
        {
            let mut table = self.table();
            table.known.remove(queue);
            table.memory.remove(queue);
            table.committed.remove(queue);
            // An `update` right after a removal is the push consumer following an offset reset
            // pushed by the broker (remove, then update to the reset offset): a new start.
            table.awaiting_start.insert(queue.clone());
        }
        if self.recorded(queue) {
            self.stop(queue);
        }
        self.inner.remove(queue);
    }

    fn reports_acknowledged(&self) -> bool {
        true
    }

    fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        self.table().committed.get(queue).copied()
    }

    fn stats(&self) -> OffsetStoreStats {
        self.inner.stats()
    }
}
