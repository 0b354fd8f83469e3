//! Dispatching, checkpoints, truncation and retention.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::{Inner, MessageStore, StoreError};
use crate::checkpoint::Checkpoint;
use crate::commitlog::writer::TailChunk;
use crate::commitlog::Entry;
use crate::dispatch::{Derived, DispatchError};
use crate::error::{FileError, OpenError, TruncateError};
use crate::file_set::DirtyFile;
use crate::fsutil;
use crate::quarantine::QuarantineKind;
use crate::recovery::{self, RecoveryReport};

/// Most CommitLog bytes the dispatcher indexes in one hold of the `derived` lock (a record
/// that crosses it is finished). Pulls and queue-bound reads on the broker's runtime workers
/// take that lock, so one hold is the longest any of them waits for the dispatcher: at about
/// 0.75 µs per 250-byte record (measured on the 2-core VM, session 21), 128 KiB is about
/// 0.4 ms, where a pass over a burst of batches held it for up to 10 ms before.
pub const DISPATCH_HOLD_BYTES_MAX: u64 = 128 << 10;

/// How a hold of the `derived` lock ended.
enum Hold {
    /// Nothing more to dispatch below the limit (or no progress possible now).
    Done,
    /// The hold's bytes are spent; more is waiting.
    Spent,
}

/// A committed chunk a hold stopped inside, kept for the next hold.
struct PartialChunk {
    chunk: TailChunk,
    /// The truncation epoch when it was taken.
    epoch: u64,
    /// The dispatched position it stopped at.
    resume_at: u64,
}

/// What a truncation removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncateReport {
    /// The new log end.
    pub phys_offset: u64,
    /// Bytes of log removed.
    pub bytes_cut: u64,
    /// The checkpoint derived state restarted from.
    pub checkpoint_position: Option<u64>,
    /// Records re-dispatched from that checkpoint.
    pub records_dispatched: u64,
}

/// What a retention pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Start offsets of the deleted segments.
    pub segments_deleted: Vec<u64>,
    /// The new log start.
    pub log_min_offset: u64,
}

impl Inner {
    /// Stops the threads working ahead of the commits, on the next segment's file
    /// (`commitlog::next_segment`) and on the map's next window (`commitlog::populate_ahead`),
    /// so a close or an abandon can join them.
    pub(crate) fn stop_preparing_segments(&self) {
        let Some(space) = self.log.preallocator() else {
            return;
        };
        if let Some(next) = space.next_segment() {
            next.close();
        }
        if let Some(populate) = space.populate_ahead() {
            populate.close();
        }
    }

    /// Dispatches up to the dispatch limit, in holds of the `derived` lock of at most
    /// [`DISPATCH_HOLD_BYTES_MAX`] bytes each, handing the lock to any waiting reader between
    /// holds, and publishes the dispatched end after each hold.
    pub(crate) fn dispatch_once(&self) -> Result<(), DispatchError> {
        if self.log.faults.take_dispatch() {
            let dir = self.config.consume_queue_dir();
            let error = FileError::new("create", &dir, crate::faults::too_many_open_files());
            return Err(DispatchError::Index(error));
        }
        let mut derived = self.derived.lock();
        let mut partial = None;
        let result = loop {
            // Read under the lock (`queue_waiters`, invariant 2).
            let tracking = self.queue_waiters.any();
            derived.queues.track_touched(tracking);
            let hold = self.dispatch_hold(&mut derived, &mut partial);
            self.dispatch_holds.fetch_add(1, Ordering::Relaxed);
            // Published under the lock: a truncation lowers the end and publishes it under
            // the lock too, so an end published after releasing it could replace the cut's.
            self.dispatched.send_replace(derived.dispatched);
            if tracking {
                match derived.queues.touched() {
                    Some(touched) => self.queue_waiters.wake(touched),
                    None => self.queue_waiters.wake_all(),
                }
                derived.queues.track_touched(false);
            }
            match hold {
                Ok(Hold::Spent) => parking_lot::MutexGuard::bump(&mut derived),
                Ok(Hold::Done) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        drop(derived);
        if let Some(chunk) = partial {
            self.committed.recycle(chunk.chunk.bytes);
        }
        result
    }

    /// One hold: dispatches up to the limit (read under the lock: a truncation lowers the
    /// ends while holding it, so a limit read before the lock may lie past a cut made
    /// meanwhile, and the pass would index whatever the files hold there — nothing, or
    /// records not yet committed or replicated), or until the hold's bytes are spent.
    fn dispatch_hold(
        &self,
        derived: &mut Derived,
        partial: &mut Option<PartialChunk>,
    ) -> Result<Hold, DispatchError> {
        let limit = self.dispatch_limit();
        let segment_size = self.config.segment_size_bytes;
        let hold_end = derived.dispatched.saturating_add(DISPATCH_HOLD_BYTES_MAX);
        while derived.dispatched < limit {
            let from = derived.dispatched;
            if from >= hold_end {
                return Ok(Hold::Spent);
            }
            let budget = hold_end - from;
            let epoch = self.flush.epoch();
            // A chunk left half done by the last hold goes on only where it was left and if no
            // truncation ran while the lock was lent (its bytes may be cut).
            let resumed = partial
                .take()
                .filter(|p| p.epoch == epoch && p.resume_at == from)
                .map(|p| p.chunk);
            let next = resumed.or_else(|| self.committed.next_after(from, segment_size));
            match next {
                Some(chunk) if chunk.start <= from && chunk.end(segment_size) <= limit => {
                    match derived.dispatch_committed_chunk(&self.log, &chunk, limit, budget) {
                        Ok(false) => {
                            *partial = Some(PartialChunk {
                                chunk,
                                epoch,
                                resume_at: derived.dispatched,
                            })
                        }
                        done => {
                            self.committed.recycle(chunk.bytes);
                            done?;
                        }
                    }
                }
                Some(chunk) => {
                    // Not usable yet (past the limit) or a gap before it: read from the files.
                    let until = if chunk.start > from {
                        chunk.start.min(limit)
                    } else {
                        limit
                    };
                    self.committed.put_back(chunk);
                    derived.dispatch_until(&self.log, until, budget)?;
                }
                None => {
                    derived.dispatch_until(&self.log, limit, budget)?;
                }
            }
            if derived.dispatched == from {
                break;
            }
        }
        Ok(Hold::Done)
    }

    /// Makes derived state durable and writes a checkpoint at the dispatched position; a
    /// failure is recorded in the checkpoint health (`StoreStats`), never poisons the store.
    pub(crate) fn checkpoint(&self) -> Result<(), StoreError> {
        let result = self.write_checkpoint();
        match &result {
            Ok(()) => {
                if self.checkpoint_health.succeeded() {
                    tracing::info!(
                        failures = self.checkpoint_health.failures(),
                        "checkpoint written again after failed attempts"
                    );
                }
            }
            Err(error) => self.checkpoint_health.failed(&error.to_string()),
        }
        result
    }

    fn write_checkpoint(&self) -> Result<(), StoreError> {
        let _serial = self.checkpoint_lock.lock().expect("checkpoint lock");
        if let Some(reason) = self.checkpoint_health.derived_sync_lost() {
            return Err(StoreError::CheckpointsStopped(reason));
        }
        if self.log.faults.take_checkpoint() {
            let dir = self.checkpoints.dir();
            return Err(FileError::new("list", dir, crate::faults::too_many_open_files()).into());
        }
        // Under the `derived` lock only the writes and the snapshot; the fsyncs follow after
        // it is released, so dispatch (and every consumer waiting for it) does not stall for
        // the ConsumeQueue fsyncs (it stalled tens of ms every second under load: the e2e
        // tail). Sound because the entries covering `position` were written before the lock
        // was released and `checkpoint_lock` keeps truncations out until the checkpoint is
        // written.
        let (dirty, checkpoint) = {
            let mut derived = self.derived.lock();
            let dirty = self.write_out_derived(&mut derived)?;
            let mut queue_offsets = BTreeMap::new();
            for (topic, queue_id, queue) in derived.queues.iter() {
                if queue.max_offset() > 0 {
                    queue_offsets.insert((topic.to_string(), queue_id), queue.max_offset());
                }
            }
            let checkpoint = Checkpoint {
                position: derived.dispatched,
                last_store_timestamp_ms: derived.last_store_timestamp_ms,
                queue_offsets,
                view: derived.view.clone(),
            };
            (dirty, checkpoint)
        };
        self.sync_files(&dirty)?;
        let position = checkpoint.position;
        if position == self.checkpoint_position.load(Ordering::Acquire)
            && self.checkpoints.positions()?.first() == Some(&position)
        {
            return Ok(());
        }
        // The log must be durable up to the position before a checkpoint may name it.
        self.flush.wait_durable(checkpoint.position)?;
        self.checkpoints.write(&checkpoint)?;
        self.checkpoints.prune(self.config.snapshots_kept)?;
        self.checkpoint_position
            .store(checkpoint.position, Ordering::Release);
        Ok(())
    }

    /// Writes out derived state and returns the files to fsync (a write failure is safe to
    /// retry at the next checkpoint).
    fn write_out_derived(
        &self,
        derived: &mut crate::dispatch::Derived,
    ) -> Result<Vec<DirtyFile>, StoreError> {
        recovery::write_out_derived(derived).map_err(|error| self.derived_error(error))
    }

    /// fsyncs derived state's written files; a failed fsync (not an open or a write, which
    /// are safe to retry) stops checkpoints until restart (see `checkpoint_health`).
    fn sync_files(&self, dirty: &[DirtyFile]) -> Result<(), StoreError> {
        // A test's stall holds the checkpointer here, outside the `derived` lock.
        self.log.faults.wait_derived_sync_stall();
        let result = if self.log.faults.take_derived_sync() {
            let dir = self.config.root_dir.join("consumequeue");
            Err(FileError::new("fsync", dir, crate::faults::io_error()).into())
        } else {
            dirty
                .iter()
                .try_for_each(DirtyFile::sync)
                .map_err(OpenError::from)
        };
        result.map_err(|error| self.derived_error(error))
    }

    fn derived_error(&self, error: OpenError) -> StoreError {
        if is_failed_fsync(&error) {
            self.checkpoint_health
                .lose_derived_durability(error.to_string());
        }
        StoreError::Derived(error)
    }

    /// At close: flush everything, dispatch everything, checkpoint.
    pub(crate) fn final_checkpoint(&self) -> Result<(), StoreError> {
        if self.poisoned().is_some() {
            return Ok(());
        }
        let end = self.log.appended_end();
        self.flush.wait_durable(end)?;
        self.dispatch_once()
            .map_err(|e| StoreError::Derived(recovery::dispatch_open_error(e)))?;
        self.checkpoint()
    }

    /// Deletes whole segments past their age or over the size limit, never the active one,
    /// and only segments a checkpoint already covers (their offset records live on in it).
    pub(crate) fn delete_expired_segments(&self) -> Result<RetentionReport, StoreError> {
        let segments = self.log.segments();
        let segment_size = self.config.segment_size_bytes;
        let mut total: u64 = 0;
        let mut sizes = Vec::with_capacity(segments.len());
        let committed_end = self.log.committed_end();
        for segment in &segments {
            // The active segment's file may run past its data (preallocated space).
            let len = segment
                .len()
                .map_err(file_error)?
                .min(committed_end.saturating_sub(segment.start));
            total += len;
            sizes.push(len);
        }
        let now = SystemTime::now();
        let mut doomed = Vec::new();
        for (segment, len) in segments
            .iter()
            .zip(&sizes)
            .take(segments.len().saturating_sub(1))
        {
            let too_big = self
                .config
                .retention_max_log_bytes
                .is_some_and(|max| total > max);
            let too_old = match self.config.retention_max_age_ms {
                Some(max_age) => {
                    let modified = std::fs::metadata(segment.path())
                        .and_then(|m| m.modified())
                        .map_err(|e| file_error(FileError::new("stat", segment.path(), e)))?;
                    now.duration_since(modified).unwrap_or_default()
                        > Duration::from_millis(max_age)
                }
                None => false,
            };
            if !(too_big || too_old) {
                break;
            }
            doomed.push(segment.clone());
            total -= len;
        }
        let Some(last) = doomed.last() else {
            return Ok(RetentionReport {
                segments_deleted: vec![],
                log_min_offset: self.log.min_offset(),
            });
        };
        let new_min = last.start + segment_size;
        if self.checkpoint_position.load(Ordering::Acquire) < new_min {
            self.checkpoint()?;
        }
        let covered = self.checkpoint_position.load(Ordering::Acquire);
        doomed.retain(|segment| segment.start + segment_size <= covered);
        let Some(last) = doomed.last() else {
            return Ok(RetentionReport {
                segments_deleted: vec![],
                log_min_offset: self.log.min_offset(),
            });
        };
        let new_min = last.start + segment_size;
        self.log.set_min_offset(new_min);
        let mut deleted = Vec::new();
        for segment in &doomed {
            self.log.remove_segment(segment.start);
            fsutil::remove_file(segment.path()).map_err(file_error)?;
            deleted.push(segment.start);
        }
        let mut derived = self.derived.lock();
        for queue in derived.queues.all_mut() {
            queue
                .delete_below_phys(new_min)
                .map_err(|e| open_to_store_error(e.into()))?;
        }
        derived.index.delete_below(new_min).map_err(file_error)?;
        derived.quarantine.delete_below(new_min);
        tracing::info!(segments = ?deleted, log_min = new_min, "retention deleted CommitLog segments");
        Ok(RetentionReport {
            segments_deleted: deleted,
            log_min_offset: new_min,
        })
    }
}

impl MessageStore {
    /// Writes a checkpoint now (derived state fsynced, offset view snapshotted).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint()
    }

    /// Runs retention now.
    pub fn delete_expired_segments(&self) -> Result<RetentionReport, StoreError> {
        self.inner.delete_expired_segments()
    }

    /// Cuts the log at `phys_offset` and every derived structure with it: ConsumeQueues, key
    /// index and offset view then equal a replay of the surviving log (invariant 6).
    ///
    /// # Durability
    /// Crash-safe: the intent is recorded durably first, and recovery completes an interrupted
    /// truncation before anything else, so a cut tail never comes back.
    ///
    /// # Errors
    /// `phys_offset` is not a record boundary inside the log, or I/O failed (the store is then
    /// poisoned; recovery finishes the truncation on restart).
    ///
    /// Epoch entries starting past the cut are dropped with it (durably, before the cut), so
    /// no entry ever names bytes the log no longer holds.
    pub fn truncate(&self, phys_offset: u64) -> Result<TruncateReport, TruncateError> {
        self.truncate_with(phys_offset, |inner| {
            inner.drop_epochs_from(phys_offset, false)?;
            Ok(())
        })
    }

    /// [`MessageStore::truncate`], running `before_cut` once the offset is validated and the
    /// intent is durable, but before any byte is cut, under every store lock (lock order:
    /// `before_cut` may take only locks that come after `derived`). A failure of
    /// `before_cut` fails the truncation like an I/O error (the store is poisoned and the
    /// next open completes the cut the intent records).
    pub(crate) fn truncate_with(
        &self,
        phys_offset: u64,
        before_cut: impl FnOnce(&Inner) -> Result<(), TruncateError>,
    ) -> Result<TruncateReport, TruncateError> {
        let inner = &self.inner;
        // Lock order: checkpoint, writer, derived. No checkpoint may be written past the cut.
        let _serial = inner.checkpoint_lock.lock().expect("checkpoint lock");
        let _commits = inner.lock_commits();
        let mut writer = inner.writer.lock().expect("writer lock");
        let mut derived = inner.derived.lock();
        // Everything appended so far goes to the files first, so the cut sees the whole log.
        let tail = writer.take_tail(&mut Vec::new());
        inner.committed.clear();
        if let Err(error) = crate::commitlog::writer::commit_chunks(&inner.log, &tail) {
            inner
                .flush
                .poison(format!("writing the CommitLog failed: {error}"));
            return Err(error.into());
        }
        let end = inner.log.committed_end();
        let bad = |reason: String| TruncateError::BadOffset {
            phys_offset,
            reason,
        };
        if phys_offset < inner.log.min_offset() || phys_offset > end {
            return Err(bad(format!(
                "outside the log [{}, {end}]",
                inner.log.min_offset()
            )));
        }
        if phys_offset < end {
            match inner.log.read_entry(phys_offset) {
                Ok(Entry::Record(_)) | Ok(Entry::Blank { .. }) => {}
                Err(error) => return Err(bad(format!("not a record boundary: {error}"))),
            }
        }
        let root = &inner.config.root_dir;
        let result = (|| -> Result<TruncateReport, TruncateError> {
            fsutil::write_atomic(
                &recovery::truncate_intent(root),
                &recovery::encode_intent(phys_offset),
            )?;
            before_cut(inner)?;
            recovery::cut_log_files(&inner.log, &inner.checkpoints, phys_offset)?;
            inner.log.reset_ends(phys_offset);
            inner.flush.truncate_to(phys_offset);
            let checkpoint = inner.checkpoints.positions()?.into_iter().find_map(|p| {
                inner
                    .checkpoints
                    .read(p)
                    .ok()
                    .filter(|c| c.position <= phys_offset)
            });
            let checkpoint_position = checkpoint.as_ref().map(|c| c.position);
            let mut report = RecoveryReport::default();
            // Damaged ranges below the cut stay quarantined; undispatchable records are found
            // again by the re-dispatch.
            let damaged: Vec<_> = derived
                .quarantine
                .snapshot()
                .ranges
                .into_iter()
                .filter(|r| r.kind == QuarantineKind::Damaged && r.end() <= phys_offset)
                .collect();
            let rebuilt = recovery::rebuild_derived(
                &inner.config,
                &inner.log,
                checkpoint,
                &damaged,
                &mut report,
            )?;
            *derived = rebuilt;
            writer.reset(
                phys_offset,
                derived.queues.max_offsets(),
                derived.last_store_timestamp_ms,
                derived.view.clone(),
            );
            inner
                .checkpoint_position
                .store(checkpoint_position.unwrap_or(0), Ordering::Release);
            inner.dispatched.send_replace(derived.dispatched);
            fsutil::remove_file(&recovery::truncate_intent(root))?;
            Ok(TruncateReport {
                phys_offset,
                bytes_cut: end - phys_offset,
                checkpoint_position,
                records_dispatched: report.records_dispatched,
            })
        })();
        match &result {
            Ok(report) => {
                inner
                    .bytes_cut
                    .fetch_add(report.bytes_cut, Ordering::Relaxed);
                tracing::warn!(
                    phys_offset,
                    bytes_cut = report.bytes_cut,
                    "CommitLog truncated"
                );
            }
            Err(error) => {
                inner
                    .flush
                    .poison(format!("truncation to {phys_offset} failed: {error}"));
            }
        }
        result
    }
}

/// Whether `error` is a failed fsync of a file (as opposed to an open, write or read).
fn is_failed_fsync(error: &OpenError) -> bool {
    let file = match error {
        OpenError::File(file) => file,
        OpenError::ConsumeQueue(crate::consume_queue::CqError::File(file)) => file,
        _ => return false,
    };
    file.op == "fsync"
}

fn file_error(error: FileError) -> StoreError {
    StoreError::Durability(crate::error::DurabilityError::FlushFailed(
        error.to_string(),
    ))
}

fn open_to_store_error(error: OpenError) -> StoreError {
    StoreError::Durability(crate::error::DurabilityError::FlushFailed(
        error.to_string(),
    ))
}
