//! The state a lite pull consumer's tasks share: per-queue buffers and positions
//! (`QueueState`), the assignment under one lock (`Assignment`), and the counters behind
//! [`LitePullStats`](super::LitePullStats).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::config::LitePullConsumerConfig;
use crate::connections::ConnectionPool;
use crate::message::MessageExt;
use crate::pull_consumer::PullConsumer;

/// The atomic counters behind [`LitePullStats`](super::LitePullStats).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) auto_commits_ok: AtomicU64,
    pub(super) auto_commit_failures: AtomicU64,
    pub(super) release_commit_failures: AtomicU64,
    pub(super) rebalance_failures: AtomicU64,
    pub(super) pull_errors: AtomicU64,
    pub(super) start_lookup_failures: AtomicU64,
    pub(super) correction_failures: AtomicU64,
    pub(super) resets_applied: AtomicU64,
}

/// Adds one to a counter.
pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One assigned queue: its buffer, positions, epoch and fetch task.
#[derive(Debug)]
pub(super) struct QueueState {
    pub(super) expression: String,
    pub(super) buffer: VecDeque<MessageExt>,
    /// Next offset to pull; `None` until the start position is known.
    pub(super) fetch_offset: Option<u64>,
    /// Offset after the last polled message: the position a commit writes.
    pub(super) consumed: Option<u64>,
    /// Identifies the fetch task allowed to fill `buffer`; a seek, a reset or a new
    /// assignment of the queue takes a fresh one ([`Shared::next_epoch`]), so a pull answered
    /// for an older position — even one of an earlier assignment of the same queue — is
    /// never buffered, and `poll` never returns it.
    pub(super) epoch: u64,
    /// The route's master generation of the queue's broker group
    /// ([`RouteCache::master_generation`](crate::route::RouteCache::master_generation)) when
    /// the positions were taken; another value means a failover moved the group to a new
    /// master, and the positions are read again from the committed offsets it holds (R1).
    pub(super) master_generation: u64,
    /// The owner generation the offset store granted when the start position was read
    /// ([`OffsetStore::claim`](crate::OffsetStore::claim)); `None` for stores that do not
    /// fence owners. A transactional commit carries the generation of its batch's poll.
    pub(super) owner_generation: Option<u64>,
    /// A broker reset not yet written to a store that fences owners: the fetch task writes
    /// it ([`OffsetStore::reset_to`](crate::OffsetStore::reset_to)) instead of claiming.
    pub(super) pending_reset: Option<u64>,
    pub(super) paused: bool,
    pub(super) wake: Arc<Notify>,
    pub(super) task: Option<JoinHandle<()>>,
}

impl QueueState {
    /// After a failover to a new master (`generation`): drops the buffer and the positions,
    /// so the fetch task starts again from the offset the new master has committed — never
    /// from an in-memory position the new master may not hold, never from the beginning.
    /// Returns whether anything changed.
    pub(super) fn follow_new_master(&mut self, generation: u64) -> bool {
        if self.master_generation == generation {
            return false;
        }
        self.master_generation = generation;
        self.buffer.clear();
        self.fetch_offset = None;
        self.consumed = None;
        self.owner_generation = None;
        true
    }

    /// Keeps `consumed` at the fetch position while nothing is buffered (messages filtered
    /// out by tag are never delivered, so skipping them is safe).
    pub(super) fn settle(&mut self) {
        if self.buffer.is_empty() {
            if let Some(fetch) = self.fetch_offset {
                self.consumed = Some(fetch);
            }
        }
    }
}

/// Everything behind [`Shared::lock`]: the assigned queues and the subscriptions.
#[derive(Debug, Default)]
pub(super) struct Assignment {
    pub(super) queues: BTreeMap<MessageQueue, QueueState>,
    /// Subscribe mode: topic → tag expression.
    pub(super) subscriptions: BTreeMap<String, String>,
    /// True once `assign` was used (the two modes do not mix).
    pub(super) assigned: bool,
    pub(super) next_poll: usize,
}

/// What the consumer and its tasks share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: LitePullConsumerConfig,
    pub(super) pull: PullConsumer,
    pub(super) pool: ConnectionPool,
    pub(super) state: Mutex<Assignment>,
    pub(super) data: Notify,
    /// Wakes the rebalance loop early (NOTIFY_CONSUMER_IDS_CHANGED).
    pub(super) rebalance_now: Notify,
    pub(super) counters: Counters,
    pub(super) last_auto_commit_error: Mutex<Option<String>>,
    /// Source of [`QueueState::epoch`] values, unique for the consumer's life.
    pub(super) epochs: AtomicU64,
    /// Set once the application consumes transactionally: polled positions are then never
    /// staged in the offset store (only committed transactions move it).
    pub(super) transactional: AtomicBool,
    /// The PostgreSQL store of a consumer built by `start_postgres`.
    #[cfg(feature = "postgres")]
    pub(super) postgres:
        std::sync::OnceLock<Arc<crate::offset_store::postgres::PostgresOffsetStore>>,
    /// When committed offsets were last mirrored to the brokers.
    #[cfg(feature = "postgres")]
    pub(super) last_mirror: Mutex<Option<tokio::time::Instant>>,
}

impl Shared {
    /// A queue epoch never used before by this consumer.
    pub(super) fn next_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// True once the application consumes transactionally.
    pub(super) fn is_transactional(&self) -> bool {
        self.transactional.load(Ordering::Relaxed)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Assignment> {
        // Every critical section is a short, non-blocking map update.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
