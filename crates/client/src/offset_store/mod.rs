//! Consumer offset stores: the [`OffsetStore`] trait, [`BrokerOffsetStore`] (cluster mode)
//! and [`LocalFileOffsetStore`] (broadcasting), plus a background persister.
//!
//! Offsets are the **next** queue offset to consume, per (group, topic, queue).
//!
//! Invariants (DESIGN invariants 2, 3, 7; offset pitfalls C1–C4, C6, C7):
//! - `update` changes memory only; only `persist`, `persist_all` and `correct` reach the
//!   store, and each returns `Err` when the store did not acknowledge the value — a failure
//!   is never only a log line, and every failure is counted in [`OffsetStoreStats`];
//! - the broker store commits with request/response UPDATE_CONSUMER_OFFSET, never one-way;
//!   a stale refusal (regression, stale generation, past max) is
//!   [`OffsetError::Rejected`] with its own [`RejectReason`](crate::error::RejectReason);
//! - `read` returns `Ok(None)` only when the store positively says it has no offset
//!   (QUERY_NOT_FOUND, or no entry in an intact local file); a timeout, a closed connection
//!   or any unexpected answer is `Err` — never `Ok(None)`, never a fallback to min offset;
//! - every queue known to the store is persisted by `persist_all`, registered or not (C1);
//! - the local file is replaced atomically (write temp, fsync, rename, fsync directory) and a
//!   correction is written before `correct` returns (C7);
//! - no public function takes or returns a negative offset.
//!
//! Layout: this module holds the trait and the types its callers see; `memory` the
//! in-memory table and counters both stores share; `broker` the broker-backed store;
//! `local_file` the local-file store; `persister` the background persister; `sql_schema` the
//! PostgreSQL table definition (always built, so the CLI can print it); `postgres` (cargo
//! feature `postgres`) the PostgreSQL store that fences owners by generation.

mod broker;
mod local_file;
mod memory;
mod persister;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sql_schema;

use std::future::Future;
use std::pin::Pin;

use ferromq_protocol::remoting::body::misc::MessageQueue;

use crate::error::OffsetError;

pub use broker::BrokerOffsetStore;
pub use local_file::LocalFileOffsetStore;
pub use persister::{Identify, PersistHooks, Persister};

/// Ext field with which [`BrokerOffsetStore`] marks the commit sent by
/// [`OffsetStore::correct`] as a correction (ferromq extension, value `true`; see
/// [`ferromq_protocol::remoting::extensions::CORRECTION_EXT`]). A broker that refuses it
/// answers [`OffsetError::Rejected`].
pub use ferromq_protocol::remoting::extensions::CORRECTION_EXT;

/// A boxed, sendable future (the trait is object-safe so users can plug their own store).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where [`OffsetStore::read`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Memory if it has the queue, else the store.
    MemoryFirstThenStore,
    /// Memory only (`Ok(None)` when the queue is not in memory).
    Memory,
    /// The store only.
    Store,
}

/// Outcome of [`OffsetStore::persist_all`]: which queues were written and which failed.
#[derive(Debug, Default)]
#[must_use = "a persist report may list failed queues"]
pub struct PersistReport {
    /// Queues whose offset the store acknowledged in this call, with the offset.
    pub persisted: Vec<(MessageQueue, u64)>,
    /// Queues whose offset was already persisted (nothing to do).
    pub unchanged: usize,
    /// Queues whose persist failed, with the error.
    pub failed: Vec<(MessageQueue, OffsetError)>,
}

impl PersistReport {
    /// Adds the outcome of persisting `queue`: `Ok(Some(offset))` when the store acknowledged
    /// `offset`, `Ok(None)` when there was nothing to write, `Err` when the persist failed.
    pub fn record(&mut self, queue: MessageQueue, outcome: Result<Option<u64>, OffsetError>) {
        match outcome {
            Ok(Some(offset)) => self.persisted.push((queue, offset)),
            Ok(None) => self.unchanged += 1,
            Err(error) => self.failed.push((queue, error)),
        }
    }

    /// True when no queue failed.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
    }

    /// The persisted queues, or an error when any queue failed.
    ///
    /// # Errors
    /// [`OffsetError::PersistFailed`] naming the count and the first failure.
    pub fn into_result(self) -> Result<Vec<(MessageQueue, u64)>, OffsetError> {
        match self.failed.first() {
            None => Ok(self.persisted),
            Some((queue, error)) => Err(OffsetError::PersistFailed {
                failed: self.failed.len(),
                total: self.failed.len() + self.persisted.len(),
                first: format!("{queue:?}: {error}"),
            }),
        }
    }
}

/// Counters of an offset store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffsetStoreStats {
    /// Persists the store acknowledged.
    pub persists_ok: u64,
    /// Persists that failed, whatever the reason (stale rejections included).
    pub persists_failed: u64,
    /// Persists the broker rejected as stale (regression, stale generation, past max).
    pub stale_rejections: u64,
    /// Reads from the store that failed.
    pub reads_failed: u64,
}

/// What a consumer learns when it takes a queue over ([`OffsetStore::claim`],
/// [`OffsetStore::reset_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The stored next offset (`None`: the store positively has none).
    pub offset: Option<u64>,
    /// The owner generation this consumer now holds, for stores that fence owners (`None`
    /// for the others). Commits carry it; a commit under an older generation is refused
    /// with [`OffsetError::Fenced`].
    pub generation: Option<u64>,
}

/// A consumer group's offset store. Implementations must keep the module invariants.
pub trait OffsetStore: Send + Sync + std::fmt::Debug {
    /// Sets the in-memory offset of `queue` (the next offset to consume). Nothing is written
    /// until [`OffsetStore::persist`] or [`OffsetStore::persist_all`].
    fn update(&self, queue: &MessageQueue, offset: u64);

    /// Sets the offset of `queue` and persists it at once (used after OFFSET_ILLEGAL, with
    /// the broker's suggested offset). [`BrokerOffsetStore`] sends it as a correction
    /// ([`CORRECTION_EXT`]), which a ferromq broker accepts only when the queue's state
    /// justifies it.
    ///
    /// # Errors
    /// As [`OffsetStore::persist`].
    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>>;

    /// Writes the in-memory offset of `queue` to the store and waits for its
    /// acknowledgement. `Ok(())` when there is nothing to write.
    ///
    /// # Errors
    /// Any [`OffsetError`]: the store is unreachable, refused the value, or failed to write.
    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>>;

    /// Persists every queue in memory whose offset changed since its last persist.
    ///
    /// # Errors
    /// Implementations that write all queues at once return their write error; per-queue
    /// failures are listed in the report.
    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>>;

    /// The offset of `queue`: `Ok(None)` when the store has none.
    ///
    /// # Errors
    /// The store could not be read (unreachable, timeout, unexpected answer, corrupt file).
    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>>;

    /// Forgets `queue` in memory (e.g. after a rebalance moved it away).
    fn remove(&self, queue: &MessageQueue);

    /// Counters.
    fn stats(&self) -> OffsetStoreStats;

    /// The offset of `queue` the store last acknowledged from this consumer (the value of
    /// its last successful persist or correction, or the stored value it read), `None` when
    /// nothing was acknowledged since the queue entered memory (or was forgotten, reset or
    /// forced). Consumers bound how far they consume past it, only when
    /// [`OffsetStore::reports_acknowledged`] is true.
    fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        let _ = queue;
        None
    }

    /// True when [`OffsetStore::acknowledged`] reports acknowledgements. The default (a store
    /// that does not track them) is false: consumers then apply no uncommitted window.
    fn reports_acknowledged(&self) -> bool {
        false
    }

    /// Takes `queue` over for this consumer and reads its stored offset. Consumers call it
    /// whenever a queue (re)enters their assignment: at start, after every rebalance and
    /// after a failover. The default reads the store ([`ReadMode::Store`]); a store that
    /// fences owners ([`OffsetStore::fences_owners`]) also starts a new owner generation,
    /// which refuses every later commit of the previous owner.
    ///
    /// # Errors
    /// As [`OffsetStore::read`].
    fn claim<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<Claim, OffsetError>> {
        Box::pin(async move {
            let offset = self.read(queue, ReadMode::Store).await?;
            Ok(Claim {
                offset,
                generation: None,
            })
        })
    }

    /// Applies a broker-side reset of `queue` to `offset` (RESET_CONSUMER_CLIENT_OFFSET).
    /// The default moves the in-memory offset (the broker already stores the reset); a store
    /// that fences owners writes the reset under a new owner generation, so a batch read
    /// before the reset can never be committed over it.
    ///
    /// # Errors
    /// The store could not write the reset (the consumer retries).
    fn reset_to<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<Claim, OffsetError>> {
        Box::pin(async move {
            self.remove(queue);
            self.update(queue, offset);
            Ok(Claim {
                offset: Some(offset),
                generation: None,
            })
        })
    }

    /// True when the store keeps an owner generation per queue and refuses commits of a
    /// superseded owner ([`OffsetError::Fenced`]). Consumers then claim queues through
    /// [`OffsetStore::claim`] and route broker resets through [`OffsetStore::reset_to`].
    fn fences_owners(&self) -> bool {
        false
    }
}
