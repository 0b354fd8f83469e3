//! `MessageStore`: the store's public face, tying the CommitLog, flusher, dispatcher,
//! ConsumeQueues, key index, offset view and checkpoints together.
//!
//! Threads: one flusher (owns CommitLog fsyncs), one dispatcher (only writer of derived
//! state; under `AsyncFlush` it also commits the tail on its ~1 ms tick, so records appended
//! without an acknowledgement wait reach the files and consumers), one checkpointer (fsyncs
//! derived state, writes checkpoints, runs retention).
//!
//! Lock order: `checkpoint_lock`, `commit_lock`, `writer`, `derived`. The dispatcher and readers
//! take only `derived`; the checkpointer takes `checkpoint_lock` and `derived` (to write out
//! buffered entries and snapshot), releases `derived`, then fsyncs the written files and
//! waits on the flusher; a truncation takes all three.
//!
//! # Durability
//! A write is acknowledged by [`MessageStore::acknowledged`] (async, bounded by
//! `sync_flush_timeout_ms`, never blocking its thread) or by the blocking
//! [`MessageStore::put`] and [`MessageStore::commit_offsets`]. Under `SyncFlush` they return
//! only after the record is fsynced; concurrent calls share fsyncs (group commit). Under
//! `AsyncFlush` they return once the record is written to the segment files (the page cache),
//! not merely copied into the appender's in-memory tail: a waiting appender commits the tail
//! itself when no commit is running, and concurrent waiters share that `pwrite` (group commit
//! without fsync; see `commit`). So a crash of the process loses nothing acknowledged; an OS
//! or machine crash may lose the suffix not yet fsynced (at most `flush_interval_ms` of
//! appends) but never a record in the middle (recovery cuts the log at the first bad record).

mod checkpoint_health;
mod commit;
mod commit_releases;
pub use commit_releases::CommitWatch;
mod committed;
mod epochs_api;
mod fences_api;
mod maintenance;
mod offsets_api;
mod read;
mod read_regions;
mod replica;
mod threads;
mod zero_ahead;

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ferromq_protocol::DraftRecord;
use tokio::sync::watch;

pub use maintenance::{RetentionReport, TruncateReport, DISPATCH_HOLD_BYTES_MAX};
pub use offsets_api::{CommitOutcome, OffsetEvent, OffsetView};
pub use read::{GetResult, GetStatus, Stored, StoredMessage, TagFilter, TimeBoundary};
pub use read_regions::{Sendable, StoredRegion, ZERO_COPY_SEND_BYTES_MIN};
pub use replica::{
    judge_prefix, LogSample, PrefixCheck, ReplicaAppendError, ReplicaReadError, ReplicationChunk,
    LOG_SAMPLES_MAX,
};

use crate::checkpoint::CheckpointDir;
use crate::clock::{Clock, SystemClock};
use crate::commitlog::writer::{Placement, WriterState};
use crate::commitlog::CommitLog;
use crate::config::{FlushDiskType, StoreConfig};
use crate::dispatch::Derived;
use crate::error::{AppendError, DurabilityError, OpenError};
use crate::flush::FlushControl;
use crate::recovery::{self, RecoveryReport};

/// Where an appended batch landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutReceipt {
    /// One placement per record, in order.
    pub placements: Vec<Placement>,
    /// CommitLog end after the batch: the batch is durable once the flushed end reaches it.
    pub end_offset: u64,
    /// Truncation epoch at append time: a later truncation below `end_offset` fails waiters
    /// instead of letting reused offsets look durable.
    pub truncation_epoch: u64,
}

impl PutReceipt {
    /// The ticket to pass to [`MessageStore::acknowledged`] for this batch.
    pub fn ticket(&self) -> AckTicket {
        AckTicket {
            end: self.end_offset,
            epoch: self.truncation_epoch,
        }
    }
}

/// What an acknowledgement waits for: everything below `end`, appended at truncation epoch
/// `epoch`, acknowledgeable under the flush policy. From [`PutReceipt::ticket`] for messages
/// and from [`MessageStore::append_offsets`] for offset records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTicket {
    /// CommitLog end after the write.
    pub end: u64,
    /// Truncation epoch at the write: a later truncation below `end` fails the wait with
    /// [`DurabilityError::Truncated`] instead of letting reused offsets look acknowledged.
    pub epoch: u64,
}

/// A failed put or commit: it either never entered the log, or it did but could not be made
/// durable within the policy. Either way it was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The append failed.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// The record was written but is not known to be durable.
    #[error(transparent)]
    Durability(#[from] DurabilityError),
    /// A maintenance step (checkpoint, retention) failed on a file.
    #[error(transparent)]
    File(#[from] crate::error::FileError),
    /// Derived state could not be written or rebuilt.
    #[error(transparent)]
    Derived(#[from] OpenError),
    /// The store was poisoned by a failed CommitLog write or fsync, so it could not close
    /// cleanly; the next open recovers.
    #[error("store is poisoned by an earlier I/O failure ({0}); the next open recovers")]
    Poisoned(String),
    /// An fsync of derived state failed earlier, so no checkpoint is written until restart;
    /// the next open rebuilds derived state from the log.
    #[error("checkpoints are stopped until restart: an fsync of derived state failed ({0})")]
    CheckpointsStopped(String),
}

/// Counters and positions, for `brokerStatus` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Start of the oldest segment kept.
    pub log_min_offset: u64,
    /// End of the appended log (including the writer's uncommitted tail).
    pub written_end: u64,
    /// End of the log in the segment files.
    pub committed_end: u64,
    /// End of the durable log.
    pub flushed_end: u64,
    /// End of the dispatched log (what consumers can see).
    pub dispatched_end: u64,
    /// Position of the newest checkpoint.
    pub checkpoint_position: u64,
    /// fsyncs of the CommitLog so far.
    pub fsync_count: u64,
    /// Records appended since open.
    pub records_appended: u64,
    /// Holds of the derived-state lock by the dispatcher since open (each covers at most
    /// `DISPATCH_HOLD_BYTES_MAX` bytes of log, so a long pass shows as several).
    pub dispatch_holds: u64,
    /// Bytes cut from the log by recoveries and truncations since open.
    pub bytes_cut: u64,
    /// Why the dispatcher cannot index new records, while it cannot (`None` when it can).
    pub dispatch_failure: Option<String>,
    /// Offset-record entries rejected by the dispatcher (should stay 0).
    pub offset_rejections_at_dispatch: u64,
    /// Commit entries rejected by the offset rules since open.
    pub commits_rejected: u64,
    /// The failure that poisoned the store, if any.
    pub poisoned: Option<String>,
    /// Checkpoint attempts that failed since open (each is retried; none poisons the store).
    pub checkpoint_failures: u64,
    /// The latest checkpoint failure, until a checkpoint succeeds again.
    pub last_checkpoint_failure: Option<String>,
    /// Records the dispatcher quarantined as undispatchable since open (see
    /// [`crate::quarantine`]; [`MessageStore::quarantined`] lists them).
    pub undispatchable_records: u64,
    /// Preallocations of CommitLog space that failed since open; the commits went on as
    /// plain appends (see [`crate::commitlog::preallocation`]).
    pub preallocation_failures: u64,
    /// Mapped writes: windows of the committer's map populated ahead of the copies by the
    /// populating thread since open (`commitlog::populate_ahead`).
    pub map_windows_populated_ahead: u64,
    /// Mapped writes: windows the committer populated itself (with a populating thread: the
    /// first of each segment's map, and any the thread had not reached).
    pub map_windows_populated_inline: u64,
}

/// How long dispatch passes must keep failing before the store calls dispatch stalled and
/// refuses writes: a pass that fails once and succeeds on the next tick (a read racing a
/// truncation or a tail commit) is retried, not reported.
const DISPATCH_STALL_AFTER: Duration = Duration::from_secs(1);

/// The dispatcher's current run of failed passes.
#[derive(Debug, Clone)]
pub(crate) struct DispatchFailure {
    /// The last pass's error.
    error: String,
    /// When the run of failures began.
    since: std::time::Instant,
}

/// Under `AsyncFlush`, an appender wakes the committer once the tail holds this much.
const COMMIT_EAGER_BYTES: usize = 256 * 1024;

/// Wakes the dispatcher when there is something new to dispatch.
///
/// `notify` is on the append path, so it touches the mutex only when a thread sleeps in
/// `wait`; otherwise it is one atomic increment.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    ticks: AtomicU64,
    sleepers: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Signal {
    // SeqCst on both sides: a notifier that sees no sleeper is ordered before the sleeper's
    // check of `ticks`, so the sleeper sees the new tick (Dekker's pattern).
    pub(crate) fn notify(&self) {
        self.ticks.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().expect("signal lock");
            self.changed.notify_all();
        }
    }

    /// Waits until a notify after `seen` (a tick count) or `timeout`; returns the tick count.
    pub(crate) fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let guard = self.lock.lock().expect("signal lock");
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let (_guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |_| {
                self.ticks.load(Ordering::SeqCst) == seen
            })
            .expect("signal lock");
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        self.ticks.load(Ordering::SeqCst)
    }
}

pub(crate) struct Inner {
    pub config: StoreConfig,
    pub clock: Arc<dyn Clock>,
    pub log: CommitLog,
    pub writer: Mutex<WriterState>,
    pub flush: FlushControl,
    /// ConsumeQueues, the key index, the offset view and the dispatch position.
    ///
    /// Invariant: no fsync while it is held, outside open and truncation (which hold every
    /// lock anyway). Reads take it on the broker's runtime workers (pulls, queue bounds), so
    /// an fsync under it, waiting behind the CommitLog's writeback, stalled every connection
    /// on those workers: checkpoints fsync what they wrote after releasing it, and directory
    /// fsyncs of new or removed derived files go with them (`file_set`).
    ///
    /// Held at most one dispatch hold at a time (`DISPATCH_HOLD_BYTES_MAX` of log): the
    /// dispatcher hands it to a waiting reader between holds (a fair unlock, which is why this
    /// one is a `parking_lot` mutex: a std mutex lets the releasing thread take it straight
    /// back while the woken reader is still being scheduled).
    pub derived: parking_lot::Mutex<Derived>,
    pub dispatch_signal: Signal,
    /// Wakes the checkpointer's sleep at a close. Not `dispatch_signal`: that one is notified
    /// by every commit while a reader waits, and a checkpointer asleep on it was woken by each
    /// (with 4,000 pulls held, a fifth of a core; session 21).
    pub close_signal: Signal,
    /// Readers waiting for one queue; the dispatcher wakes the queues it appended to.
    pub queue_waiters: crate::queue_waiters::QueueWaiters,
    /// The dispatcher found nothing to do for a while and sleeps its long tick: whoever makes
    /// records dispatchable (an append, a commit, a flush) wakes it (see `threads`).
    pub dispatcher_napping: AtomicBool,
    pub dispatched: watch::Sender<u64>,
    pub checkpoints: CheckpointDir,
    pub checkpoint_position: AtomicU64,
    /// Serialises checkpoints (the checkpointer thread and `close`/`truncate` callers).
    pub checkpoint_lock: Mutex<()>,
    /// Serialises tail commits (taken through `lock_commits`, see `commit`).
    pub commit_lock: Mutex<()>,
    /// Signalled after every release of `commit_lock` while anyone watches: async waiters
    /// wait on it instead of blocking on the lock (see `commit`, `commit_releases`).
    pub commit_releases: commit_releases::CommitReleases,
    /// Committed chunks for the dispatcher, and spare buffers for the appender.
    pub committed: committed::CommittedChunks,
    pub closed: AtomicBool,
    pub records_appended: AtomicU64,
    pub dispatch_holds: AtomicU64,
    pub bytes_cut: AtomicU64,
    pub commits_rejected: AtomicU64,
    /// Why the dispatcher's last pass failed, while it keeps failing (cleared by the next
    /// pass that succeeds); `dispatch_stalled` mirrors it for the hot paths.
    pub dispatch_failure: Mutex<Option<DispatchFailure>>,
    pub dispatch_stalled: AtomicBool,
    /// A run of failed passes is under way (stalled or not yet).
    pub dispatch_failing: AtomicBool,
    pub checkpoint_health: checkpoint_health::CheckpointHealth,
    /// The replication layer's cap on dispatch (`u64::MAX`: none), see `replica`.
    pub replication_bound: AtomicU64,
    /// The epoch entries, oldest first, as the epoch file holds them (see `epochs_api`).
    pub epochs: Mutex<Vec<crate::epoch::EpochEntry>>,
    /// The newest entry's epoch (0: none), changed only with `epochs` held.
    pub last_epoch: AtomicU64,
    pub _lock: File,
}

/// A recovered, running store.
pub struct MessageStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    report: RecoveryReport,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.inner.config.root_dir)
            .finish()
    }
}

impl MessageStore {
    /// Opens the store, recovering from whatever state the files are in.
    ///
    /// # Errors
    /// [`OpenError`] naming the file and offset when the directory cannot be trusted: a foreign
    /// file, a lock held by another process, unreadable files, or offsets that cannot be
    /// rebuilt. Bad records at the log tail are not errors: they are cut and reported.
    pub fn open(config: StoreConfig) -> Result<MessageStore, OpenError> {
        Self::open_with_clock(config, Arc::new(SystemClock))
    }

    /// Opens the store with a custom clock (tests).
    pub fn open_with_clock(
        config: StoreConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<MessageStore, OpenError> {
        let recovered = recovery::recover(&config)?;
        let end = recovered.log.committed_end();
        let position = recovered.report.checkpoint_position.unwrap_or(0);
        let bytes_cut = recovered.report.cut.as_ref().map_or(0, |c| c.bytes_cut);
        let epochs =
            epochs_api::load_at_open(&config.root_dir, end, recovered.report.completed_truncation)?;
        let last_epoch = crate::epoch::last_epoch(&epochs);
        let inner = Arc::new(Inner {
            flush: FlushControl::new(end, Duration::from_millis(config.sync_flush_timeout_ms)),
            config,
            clock,
            log: recovered.log,
            writer: Mutex::new(recovered.writer),
            queue_waiters: Default::default(),
            derived: parking_lot::Mutex::new(recovered.derived),
            dispatch_signal: Signal::default(),
            close_signal: Signal::default(),
            dispatcher_napping: AtomicBool::new(false),
            dispatched: watch::Sender::new(end),
            checkpoints: recovered.checkpoints,
            checkpoint_position: AtomicU64::new(position),
            checkpoint_lock: Mutex::new(()),
            commit_lock: Mutex::new(()),
            commit_releases: Default::default(),
            committed: Default::default(),
            closed: AtomicBool::new(false),
            records_appended: AtomicU64::new(0),
            dispatch_holds: AtomicU64::new(0),
            bytes_cut: AtomicU64::new(bytes_cut),
            commits_rejected: AtomicU64::new(0),
            dispatch_failure: Mutex::new(None),
            dispatch_stalled: AtomicBool::new(false),
            dispatch_failing: AtomicBool::new(false),
            checkpoint_health: Default::default(),
            replication_bound: AtomicU64::new(u64::MAX),
            epochs: Mutex::new(epochs),
            last_epoch: AtomicU64::new(last_epoch),
            _lock: recovered.lock,
        });
        let threads = threads::start(&inner);
        Ok(MessageStore {
            inner,
            threads: Mutex::new(threads),
            report: recovered.report,
        })
    }

    /// What recovery found and did when this store opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Appends records as one batch without waiting for durability.
    ///
    /// # Errors
    /// A record is invalid or too large, its topic breaks the naming rules
    /// ([`AppendError::InvalidName`]) or is the offsets topic ([`AppendError::ReservedTopic`]),
    /// the write failed (rolled back), or the store is poisoned or closed.
    pub fn append(&self, records: &[DraftRecord<'_>]) -> Result<PutReceipt, AppendError> {
        let max = self.inner.config.max_message_size_bytes;
        let mut encoded = Vec::with_capacity(records.len());
        for record in records {
            check_topic(record.topic)?;
            if record.body.len() > max {
                return Err(AppendError::MessageTooLarge {
                    size: record.body.len(),
                    max,
                });
            }
            let record_bytes = record.encode()?;
            // Pair check with recovery: no record past the one size limit every reader uses.
            if record_bytes.len() > self.inner.config.record_size_max() {
                return Err(AppendError::MessageTooLarge {
                    size: record_bytes.len(),
                    max: self.inner.config.record_size_max(),
                });
            }
            encoded.push((record.topic, record_bytes));
        }
        let (receipt, tail_bytes) = {
            let mut writer = self.inner.writer.lock().expect("writer lock");
            let receipt = self.inner.append_locked(&mut writer, &mut encoded)?;
            (receipt, writer.tail_bytes())
        };
        self.inner.commit_if_tail_full(tail_bytes)?;
        self.inner.wake_napping_dispatcher();
        Ok(receipt)
    }

    /// Appends records and returns once they are acknowledgeable per the flush policy.
    ///
    /// Blocking: not for async contexts, which use [`MessageStore::append`] and
    /// [`MessageStore::acknowledged`].
    ///
    /// # Durability
    /// `SyncFlush`: fsynced. `AsyncFlush`: written to the segment files (the page cache, so a
    /// process crash keeps them), fsynced within `flush_interval_ms`.
    pub fn put(&self, records: &[DraftRecord<'_>]) -> Result<PutReceipt, StoreError> {
        let receipt = self.append(records)?;
        self.wait_acknowledgeable(receipt.end_offset, receipt.truncation_epoch)?;
        Ok(receipt)
    }

    /// Blocks until everything below `end` (appended at truncation epoch `epoch`, both from
    /// a [`PutReceipt`]) may be acknowledged under the flush policy: the blocking form of
    /// [`MessageStore::acknowledged`], for blocking callers only.
    ///
    /// # Durability
    /// As [`MessageStore::acknowledged`].
    ///
    /// # Errors
    /// As [`MessageStore::acknowledged`], except that under `AsyncFlush` the wait for a
    /// running commit (on the commit lock) is not bounded: `Timeout` is `SyncFlush` only.
    pub fn wait_acknowledgeable(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        match self.inner.config.flush_disk_type {
            FlushDiskType::SyncFlush => self.inner.flush.wait_durable_since(end, epoch),
            FlushDiskType::AsyncFlush => self.inner.wait_written(end, epoch),
        }
    }

    /// The acknowledgement future of every write — messages, batches and offset records:
    /// resolves once everything below `ticket.end` may be acknowledged under the flush
    /// policy. It never blocks or sleeps on the calling thread, so it is safe on a tokio
    /// worker; it needs a runtime with the time driver enabled (for its bound).
    ///
    /// # Durability
    /// `SyncFlush`: once fsynced, waiting among the flusher's waiters ordered by end (group
    /// commit with concurrent waiters; an fsync wakes only the waiters it covers). `AsyncFlush`: once written to the segment files, i.e. in the page
    /// cache: a process crash loses nothing acknowledged, an OS crash may lose the suffix not
    /// yet fsynced. When nobody is committing, the waiter writes the pending tail itself (one
    /// `pwrite` shared by every appender pending: bounded work, not waiting); when a commit
    /// holds the commit lock it waits for its release asynchronously (see `commit`).
    ///
    /// # Errors
    /// `Timeout` when the wait outlives `sync_flush_timeout_ms`, under both policies (the
    /// record may still become durable later, but it was not acknowledged); `Truncated` when
    /// a truncation after the write cut the record; `FlushFailed` (sync) or `NotWritten`
    /// (async) with the I/O error's text when a failed fsync or write poisoned the store
    /// first; `Closed` when the store closed before the record was flushed.
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting: the flush goes on, and a `pwrite` it started
    /// has completed (no lock is held across an await).
    pub async fn acknowledged(&self, ticket: AckTicket) -> Result<(), DurabilityError> {
        let AckTicket { end, epoch } = ticket;
        // No wait to bound (and no clock read for a deadline): already durable under
        // `SyncFlush` (a group commit covered it); under `AsyncFlush` already written, or
        // written now by this caller (`Inner::written_without_waiting`).
        match self.inner.config.flush_disk_type {
            FlushDiskType::SyncFlush
                if self.inner.flush.flushed_end() >= end && self.inner.flush.epoch() == epoch =>
            {
                return Ok(());
            }
            FlushDiskType::SyncFlush => {}
            FlushDiskType::AsyncFlush => {
                if let Some(outcome) = self.inner.written_without_waiting(end, epoch) {
                    return outcome;
                }
            }
        }
        let timeout = Duration::from_millis(self.inner.config.sync_flush_timeout_ms);
        let waited = match self.inner.config.flush_disk_type {
            FlushDiskType::SyncFlush => {
                tokio::time::timeout(timeout, self.inner.flush.durable(end, epoch)).await
            }
            FlushDiskType::AsyncFlush => {
                tokio::time::timeout(timeout, self.inner.written(end, epoch)).await
            }
        };
        waited.unwrap_or(Err(DurabilityError::Timeout {
            timeout_ms: self.inner.config.sync_flush_timeout_ms,
        }))
    }

    /// Blocks until everything below `end` is fsynced, whatever the policy.
    pub fn wait_durable(&self, end: u64) -> Result<(), DurabilityError> {
        self.inner.flush.wait_durable(end)
    }

    /// Whether the store was closed (or abandoned): it serves nothing any more.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Positions and counters.
    pub fn stats(&self) -> StoreStats {
        let inner = &self.inner;
        let (offset_rejections_at_dispatch, undispatchable_records) = {
            let derived = inner.derived.lock();
            (
                derived.offset_rejections_at_dispatch,
                derived.quarantine.undispatchable_found(),
            )
        };
        let populated = inner
            .log
            .preallocator()
            .and_then(|p| p.populate_ahead())
            .map_or((0, 0), |ahead| ahead.windows());
        StoreStats {
            log_min_offset: inner.log.min_offset(),
            written_end: inner.log.appended_end(),
            committed_end: inner.log.committed_end(),
            flushed_end: inner.flush.flushed_end(),
            dispatched_end: *inner.dispatched.borrow(),
            checkpoint_position: inner.checkpoint_position.load(Ordering::Acquire),
            fsync_count: inner.flush.fsync_count.load(Ordering::Relaxed),
            records_appended: inner.records_appended.load(Ordering::Relaxed),
            dispatch_holds: inner.dispatch_holds.load(Ordering::Relaxed),
            bytes_cut: inner.bytes_cut.load(Ordering::Relaxed),
            offset_rejections_at_dispatch,
            commits_rejected: inner.commits_rejected.load(Ordering::Relaxed),
            poisoned: inner.poisoned(),
            dispatch_failure: inner.dispatch_stall(),
            checkpoint_failures: inner.checkpoint_health.failures(),
            last_checkpoint_failure: inner.checkpoint_health.last_failure(),
            undispatchable_records,
            preallocation_failures: inner.log.preallocator().map_or(0, |p| p.failures()),
            map_windows_populated_ahead: populated.0,
            map_windows_populated_inline: populated.1,
        }
    }

    /// Blocks until the dispatcher has reached `position` or `timeout` passes; returns the
    /// dispatched end. Blocking (it sleeps in short steps): not for async contexts, which
    /// use [`MessageStore::dispatch_caught_up`] or [`MessageStore::offset_view`].
    pub fn wait_dispatched(&self, position: u64, timeout: Duration) -> u64 {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let dispatched = *self.inner.dispatched.borrow();
            if dispatched >= position || std::time::Instant::now() >= deadline {
                return dispatched;
            }
            self.inner.dispatch_signal.notify();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Fsync latency of the CommitLog flusher (metrics).
    pub fn flush_latency(&self) -> &crate::flush_latency::FlushLatency {
        &self.inner.flush.latency
    }

    /// Fault points (tests): arm them to make CommitLog writes or fsyncs fail.
    pub fn faults(&self) -> &crate::faults::Faults {
        &self.inner.log.faults
    }

    /// Resolves once everything acknowledged before the call is visible to readers, or after
    /// `timeout`. A reader that finds a queue shorter than expected waits for this before
    /// answering "offset out of range", so a record acknowledged a moment ago is never
    /// reported missing.
    ///
    /// It never blocks the calling thread: under `AsyncFlush` it commits the pending tail as
    /// [`MessageStore::acknowledged`] does (waiting asynchronously for a running commit).
    /// Offset reads use [`MessageStore::offset_view`], which also says when it ran out.
    pub async fn dispatch_caught_up(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        if self.inner.config.flush_disk_type == FlushDiskType::AsyncFlush {
            let (end, epoch) = (self.inner.log.appended_end(), self.inner.flush.epoch());
            // A failure poisons the store; readers then see what is committed.
            let _ = tokio::time::timeout_at(deadline, self.inner.written(end, epoch)).await;
        }
        let target = self.inner.dispatch_limit();
        let mut dispatched = self.inner.dispatched.subscribe();
        let _ = tokio::time::timeout_at(deadline, dispatched.wait_for(|end| *end >= target)).await;
    }

    /// Registers a reader waiting for new entries of one queue (a long-polled pull) until the
    /// guard is dropped: the dispatcher wakes it when it appends to that queue (see
    /// [`crate::queue_waiters`]), and [`MessageStore::close`] wakes it too.
    pub fn wait_for_queue(
        &self,
        topic: &str,
        queue_id: u32,
    ) -> crate::queue_waiters::QueueWait<'_> {
        self.inner.queue_waiters.register(topic, queue_id)
    }

    /// Flushes, checkpoints and stops the store; the next open is a clean start.
    ///
    /// # Errors
    /// The final flush or checkpoint failed, or the store is poisoned: the next open runs crash
    /// recovery.
    pub fn close(self) -> Result<(), StoreError> {
        self.shutdown()
    }

    /// Stops the store as a crash of the process would: no final flush, no checkpoint, the
    /// `abort` marker stays, and appended records not yet committed to the files are lost.
    /// For crash tests that cannot kill a process; under either policy nothing acknowledged
    /// is lost (acknowledged records are in the files).
    pub fn abandon(self) {
        self.inner
            .flush
            .poison("store abandoned (simulated crash)".to_string());
        self.inner.closed.store(true, Ordering::Release);
        self.inner.log.faults.release_stalls();
        self.inner.flush.close();
        self.inner.stop_preparing_segments();
        self.inner.dispatch_signal.notify();
        self.inner.close_signal.notify();
        for handle in self.threads.lock().expect("threads lock").drain(..) {
            let _ = handle.join();
        }
        self.inner.queue_waiters.wake_all();
    }

    /// Like [`MessageStore::close`] for a store shared behind an `Arc`: flushes, checkpoints
    /// and stops it; later calls do nothing and appends fail with `Closed`.
    pub fn close_shared(&self) -> Result<(), StoreError> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<(), StoreError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // A test's stall must not hold the final flush (or the threads joined below).
        self.inner.log.faults.release_stalls();
        let result = self.inner.final_checkpoint();
        self.inner.flush.close();
        self.inner.stop_preparing_segments();
        self.inner.dispatch_signal.notify();
        self.inner.close_signal.notify();
        for handle in self.threads.lock().expect("threads lock").drain(..) {
            let _ = handle.join();
        }
        self.inner.queue_waiters.wake_all();
        result?;
        if let Some(reason) = self.inner.poisoned() {
            return Err(StoreError::Poisoned(reason));
        }
        if let Some(preallocator) = self.inner.log.preallocator() {
            preallocator.trim(&self.inner.log, self.inner.log.committed_end())?;
        }
        crate::commitlog::next_segment::NextSegment::discard_leftover(&self.inner.config.root_dir)?;
        crate::fsutil::remove_file(&recovery::abort_marker(&self.inner.config.root_dir))?;
        Ok(())
    }
}

/// Refuses a message record whose topic could not be indexed (a name breaking the rules
/// would reach a file path at dispatch) or that would forge an offset record.
fn check_topic(topic: &str) -> Result<(), AppendError> {
    ferromq_protocol::names::validate_topic(topic)?;
    if topic == crate::offsets::OFFSET_TOPIC {
        return Err(AppendError::ReservedTopic {
            topic: topic.to_string(),
        });
    }
    Ok(())
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::error!(%error, "store did not close cleanly; the next open recovers");
        }
    }
}

impl Inner {
    pub(crate) fn poisoned(&self) -> Option<String> {
        self.flush.failure()
    }

    /// Why dispatch is failing, once it has failed for `DISPATCH_STALL_AFTER` (one load when
    /// it is not).
    pub(crate) fn dispatch_stall(&self) -> Option<String> {
        if !self.dispatch_stalled.load(Ordering::Acquire) {
            return None;
        }
        self.dispatch_failure
            .lock()
            .expect("dispatch failure lock")
            .as_ref()
            .map(|failure| failure.error.clone())
    }

    /// Records the outcome of a dispatch pass: a failure is kept (and logged once) until a
    /// pass succeeds again.
    pub(crate) fn note_dispatch(&self, outcome: Result<(), String>) {
        if outcome.is_ok() && !self.dispatch_failing.load(Ordering::Acquire) {
            return; // the common case: no lock on the dispatcher's every pass
        }
        let mut failure = self.dispatch_failure.lock().expect("dispatch failure lock");
        match outcome {
            Ok(()) => {
                if self.dispatch_stalled.swap(false, Ordering::AcqRel) {
                    tracing::warn!(failure = ?failure.as_ref().map(|f| &f.error), "dispatch resumed");
                }
                *failure = None;
                self.dispatch_failing.store(false, Ordering::Release);
            }
            Err(error) => {
                self.dispatch_failing.store(true, Ordering::Release);
                let since = failure
                    .as_ref()
                    .map_or_else(std::time::Instant::now, |f| f.since);
                let stalled = since.elapsed() >= DISPATCH_STALL_AFTER;
                if stalled && !self.dispatch_stalled.swap(true, Ordering::AcqRel) {
                    tracing::error!(%error, "dispatch keeps failing: new records stay invisible \
                        and writes are refused until a pass succeeds");
                }
                *failure = Some(DispatchFailure { error, since });
            }
        }
    }

    /// Refuses a write when the store is closed, poisoned, or cannot dispatch.
    pub(crate) fn check_writable(&self) -> Result<(), AppendError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(AppendError::Closed);
        }
        if self.flush.is_poisoned() {
            return Err(AppendError::Poisoned(self.poisoned().unwrap_or_default()));
        }
        if let Some(failure) = self.dispatch_stall() {
            return Err(AppendError::DispatchStalled(failure));
        }
        Ok(())
    }

    /// Appends under the writer lock; poisons the store when a rollback fails.
    pub(crate) fn append_locked(
        &self,
        writer: &mut WriterState,
        records: &mut [(&str, ferromq_protocol::EncodedRecord)],
    ) -> Result<PutReceipt, AppendError> {
        self.check_writable()?;
        let segment_room = self.config.segment_size_bytes - crate::commitlog::BLANK_LEN;
        if let Some((_, big)) = records.iter().find(|(_, r)| r.len() as u64 > segment_room) {
            return Err(AppendError::MessageTooLarge {
                size: big.len(),
                max: segment_room as usize,
            });
        }
        let tail_before = writer.tail_bytes();
        let placements =
            writer.append(self.config.segment_size_bytes, self.clock.now_ms(), records);
        if self.config.flush_disk_type == FlushDiskType::AsyncFlush
            && tail_before < COMMIT_EAGER_BYTES
            && writer.tail_bytes() >= COMMIT_EAGER_BYTES
        {
            // Wake the dispatcher to commit now rather than at its next tick, so appenders do
            // not fill the tail and commit it themselves.
            self.dispatch_signal.notify();
        }
        self.records_appended
            .fetch_add(placements.len() as u64, Ordering::Relaxed);
        self.log.publish_appended_end(writer.write_pos());
        Ok(PutReceipt {
            placements,
            end_offset: writer.write_pos(),
            truncation_epoch: self.flush.epoch(),
        })
    }

    /// How far the dispatcher may go: the flushed end under `SyncFlush`, the committed end
    /// (bytes in the files) under `AsyncFlush`, and never past the replication bound, the
    /// point every in-sync replica holds (invariant 4).
    pub(crate) fn dispatch_limit(&self) -> u64 {
        let local = match self.config.flush_disk_type {
            FlushDiskType::SyncFlush => self.flush.flushed_end(),
            FlushDiskType::AsyncFlush => self.log.committed_end(),
        };
        local.min(self.replication_bound.load(Ordering::Acquire))
    }
}
