//! Committing the appender's tail to the segment files, and the `AsyncFlush` acknowledgement
//! that rests on it: a record is acknowledged once its bytes are in the files (the page
//! cache), so a crash of the process loses nothing acknowledged; only an OS crash may lose
//! the unflushed suffix.
//!
//! Committers: the flusher before every fsync; under `AsyncFlush` also the dispatcher on its
//! tick, an appender whose tail passed `TAIL_BYTES_MAX` (backpressure), readers catching up,
//! and above all an appender waiting for its acknowledgement. That waiter does not wait for a
//! background tick: when nobody is committing it commits the whole pending tail itself, one
//! `pwrite` (or mapped copy, `commitlog::mapping`) per chunk for every appender whose bytes
//! are pending, so concurrent acknowledgements
//! share one write (a group commit without fsync). When a commit is running, the waiter
//! waits for it on the commit lock and commits only if it did not cover its end.
//!
//! The async form ([`Inner::written`]) never blocks on the lock: it tries it, and when a
//! commit (or truncation) holds it, it waits for that holder to release it on
//! `commit_releases`, signalled after every release while anyone watches, then looks again. So a stalled `pwrite` held by another
//! thread leaves the waiting task parked, its worker free, and its wait bounded by the
//! caller's timeout. The blocking form waits on the lock itself (blocking callers only).
//!
//! Invariants:
//! 1. Commits are serialised by `commit_lock` (taken before `writer`, which a commit holds
//!    only for the swap of the tail), so chunks reach the files in log order and the
//!    committed end only grows, except when a truncation (which holds the lock) lowers it.
//! 2. An `AsyncFlush` waiter is answered by the same rules as a `SyncFlush` one, with the
//!    committed end in place of the flushed end: `Truncated` if a truncation after its append
//!    cut below its end, success once committed, `NotWritten` if the store was poisoned
//!    before its bytes reached the files.

use std::sync::{MutexGuard, TryLockError};

use super::commit_releases::CommitReleases;
use super::Inner;
use crate::config::FlushDiskType;
use crate::error::{AppendError, DurabilityError, FileError};

/// The commit lock, held; releasing it signals `commit_releases` so async waiters look again.
pub(crate) struct CommitSerial<'a> {
    guard: Option<MutexGuard<'a, ()>>,
    releases: &'a CommitReleases,
}

/// How many times an AsyncFlush waiter gives way to the running commit before it parks.
const WRITTEN_YIELDS_MAX: usize = 4;

impl Drop for CommitSerial<'_> {
    fn drop(&mut self) {
        // Release first: a waiter woken by the signal must find the lock free
        // (`commit_releases` invariant).
        drop(self.guard.take());
        self.releases.released();
    }
}

impl Inner {
    /// Takes the commit lock, waiting (blocking) for a running commit or truncation.
    pub(crate) fn lock_commits(&self) -> CommitSerial<'_> {
        self.serial(self.commit_lock.lock().expect("commit lock"))
    }

    /// Takes the commit lock if nobody holds it.
    fn try_lock_commits(&self) -> Option<CommitSerial<'_>> {
        match self.commit_lock.try_lock() {
            Ok(guard) => Some(self.serial(guard)),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(poisoned)) => {
                panic!("commit lock poisoned: {poisoned}")
            }
        }
    }

    fn serial<'a>(&'a self, guard: MutexGuard<'a, ()>) -> CommitSerial<'a> {
        CommitSerial {
            guard: Some(guard),
            releases: &self.commit_releases,
        }
    }

    /// Commits the appender's uncommitted tail to the segment files (see
    /// `commitlog::writer`). Lock order: `commit_lock`, then `writer` only for the swap.
    pub(crate) fn commit_tail(&self) -> Result<(), FileError> {
        self.commit_tail_locked(self.lock_commits())
    }

    /// Commits the tail while holding `serial` (the commit lock), then releases it. A failed
    /// write poisons the store. Does nothing once the store is poisoned: no byte may follow
    /// records that failed to reach the files (`commitlog::writer` invariant 4).
    fn commit_tail_locked(&self, serial: CommitSerial<'_>) -> Result<(), FileError> {
        if self.flush.is_poisoned() {
            return Ok(());
        }
        let mut spare = self.committed.take_spare();
        let chunks = self
            .writer
            .lock()
            .expect("writer lock")
            .take_tail(&mut spare);
        for buffer in spare {
            self.committed.recycle(buffer);
        }
        if chunks.is_empty() {
            return Ok(());
        }
        // A test's stall holds the commit here, lock held, as a slow `pwrite` would.
        self.log.faults.wait_write_stall();
        if let Err(error) = crate::commitlog::writer::commit_chunks(&self.log, &chunks) {
            tracing::error!(%error, "writing the CommitLog failed; poisoning the store");
            self.flush
                .poison(format!("writing the CommitLog failed: {error}"));
            return Err(error);
        }
        // Queued under the lock, so the dispatcher receives chunks in log order.
        self.committed.push(chunks);
        drop(serial);
        Ok(())
    }

    /// The commit of a background committer (the flusher, the dispatcher's tick). It takes
    /// no lock when the tail is empty — under `AsyncFlush` acknowledged appends commit
    /// themselves, so the tick mostly finds nothing, and must not contend with them for the
    /// commit and append locks. Tests may hold these commits under `AsyncFlush`
    /// (`Faults::hold_background_commits`).
    pub(crate) fn commit_tail_in_background(&self) -> Result<(), FileError> {
        if self.background_commit_due() {
            self.commit_tail()
        } else {
            Ok(())
        }
    }

    /// The dispatcher's commit on its tick: as [`Inner::commit_tail_in_background`], but it
    /// never waits for the commit lock. A commit running now takes the tail it would have
    /// taken, and what is appended after that swap is the next tick's (or its waiter's); a
    /// tick blocking on the lock, then holding it while descheduled on a busy machine,
    /// stalled single appenders for milliseconds.
    pub(crate) fn commit_tail_unless_busy(&self) -> Result<(), FileError> {
        if !self.background_commit_due() {
            return Ok(());
        }
        match self.try_lock_commits() {
            Some(serial) => self.commit_tail_locked(serial),
            None => Ok(()),
        }
    }

    /// Whether a background committer has something to commit (and may).
    fn background_commit_due(&self) -> bool {
        // Both ends are published after the bytes they cover are in the tail or the files,
        // so an append not seen here is committed by its waiter or the next pass.
        if self.log.appended_end() <= self.log.committed_end() {
            return false;
        }
        self.config.flush_disk_type != FlushDiskType::AsyncFlush
            || !self.log.faults.background_commits_held()
    }

    /// Commits the tail when appenders have outrun the committer (backpressure). Called
    /// without the writer lock held.
    pub(crate) fn commit_if_tail_full(&self, tail_bytes: usize) -> Result<(), AppendError> {
        if tail_bytes >= crate::commitlog::writer::TAIL_BYTES_MAX {
            self.commit_tail().map_err(AppendError::Write)?;
        }
        Ok(())
    }

    /// `AsyncFlush`: blocks until the record ending at `end`, appended at truncation epoch
    /// `epoch`, is in the files — committing the pending tail itself unless a running commit
    /// covers it (invariant 2).
    pub(crate) fn wait_written(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        if self.written_at_once(end, epoch) {
            return Ok(());
        }
        self.commit_for(end, self.lock_commits());
        self.written_outcome(end, epoch)
    }

    /// `AsyncFlush`, async: resolves once the record ending at `end`, appended at truncation
    /// epoch `epoch`, is in the files, by the rules of [`Inner::wait_written`]. When the
    /// commit lock is free the waiter commits the pending tail itself (one bounded `pwrite`,
    /// shared with every appender pending); when a commit or truncation holds it, the task
    /// waits on `commit_releases` for its release instead of blocking its worker. Unbounded:
    /// the caller adds the timeout.
    ///
    /// # Cancel safety
    /// The lock is never held across an await: dropping the future only stops waiting, and
    /// a write it started has completed.
    pub(crate) async fn written(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        // The common cases first, without a subscription: already written, or the commit lock
        // is free and this waiter writes the tail itself.
        if let Some(outcome) = self.written_without_waiting(end, epoch) {
            return outcome;
        }
        // The running commit is one `pwrite` long: give way a few times before parking on the
        // release signal (parking and waking costs more than the write).
        for _ in 0..WRITTEN_YIELDS_MAX {
            tokio::task::yield_now().await;
            if let Some(outcome) = self.written_without_waiting(end, epoch) {
                return outcome;
            }
        }
        // Counted as a watcher before the looks below (`commit_releases` invariant).
        let mut released = self.commit_releases.watch();
        loop {
            // Marked seen before the looks: a release after them wakes the wait below.
            released.mark_seen();
            if let Some(outcome) = self.written_without_waiting(end, epoch) {
                return outcome;
            }
            // The sender lives in `self`, so `changed` cannot fail while we borrow it.
            let _ = released.changed().await;
        }
    }

    /// `AsyncFlush`: the outcome for the record ending at `end` (appended at truncation epoch
    /// `epoch`) when it needs no wait: already written, or the commit lock free and this caller
    /// commits the pending tail itself (bounded work). `None` while a commit or truncation
    /// holds the lock.
    pub(crate) fn written_without_waiting(
        &self,
        end: u64,
        epoch: u64,
    ) -> Option<Result<(), DurabilityError>> {
        if self.written_at_once(end, epoch) {
            return Some(Ok(()));
        }
        let serial = self.try_lock_commits()?;
        self.commit_for(end, serial);
        Some(self.written_outcome(end, epoch))
    }

    /// Commits the tail unless the commit that held the lock before `serial` already
    /// covered `end`. A failure poisons the store; the waiter learns it from the outcome.
    fn commit_for(&self, end: u64, serial: CommitSerial<'_>) {
        if self.log.committed_end() < end {
            // The error is recorded as the store's poison and answered by `written_outcome`.
            if self.commit_tail_locked(serial).is_ok() {
                self.wake_dispatcher_for_readers();
            }
        }
    }

    /// Wakes the dispatcher now, rather than at its next tick, when a reader waits for
    /// dispatched records (a held pull or receive, registered in `queue_waiters`; a reader
    /// catching up, subscribed to the dispatched end): an acknowledged record then reaches it
    /// within one dispatch pass instead of up to a tick later. Without such a reader the tick
    /// suffices and writers pay no extra dispatch pass.
    pub(crate) fn wake_dispatcher_for_readers(&self) {
        if self.readers_wait_for_dispatch() {
            self.dispatch_signal.notify();
        } else {
            self.wake_napping_dispatcher();
        }
    }

    /// Whether a reader waits for the dispatcher: a held pull or receive (a queue waiter) or a
    /// reader subscribed to the dispatched end.
    pub(crate) fn readers_wait_for_dispatch(&self) -> bool {
        self.dispatched.receiver_count() > 0 || self.queue_waiters.any()
    }

    /// Wakes the dispatcher if it sleeps its long idle tick, after this thread made records
    /// dispatchable (or appended them). The fence pairs with the dispatcher's, after it
    /// announced the nap and before it looked for work: either it sees these records, or
    /// this sees its nap (`threads::nap_unless_work`).
    pub(crate) fn wake_napping_dispatcher(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if self
            .dispatcher_napping
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.dispatch_signal.notify();
        }
    }

    /// The lock-free check: committed past `end` and no truncation since the append.
    fn written_at_once(&self, end: u64, epoch: u64) -> bool {
        self.flush.epoch() == epoch && self.log.committed_end() >= end
    }

    /// The answer after the waiter held the commit lock (so no truncation is half done and
    /// its own bytes were committed, unless the store is poisoned or the record was cut).
    fn written_outcome(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        if self.written_at_once(end, epoch) {
            return Ok(());
        }
        self.flush
            .written_outcome(end, epoch, &|| self.log.committed_end())
            .unwrap_or_else(|| {
                // Only if the truncation that cut the record is no longer remembered.
                Err(DurabilityError::Truncated {
                    truncated_to: self.log.committed_end(),
                })
            })
    }
}
