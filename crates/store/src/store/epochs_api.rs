//! Master epochs on the store (invariant 6): the epoch file kept with the log, a new
//! master's term ([`MessageStore::begin_epoch`]), a replica recording its master's terms
//! ([`MessageStore::record_epoch`]) and cutting a divergent suffix
//! ([`MessageStore::truncate_diverged`]). See [`crate::epoch`] for the file and the
//! last-common-point rule.
//!
//! Locks: `epochs` comes after `writer` and `derived` in the store's lock order.
//! `last_epoch` mirrors the newest entry and is only changed with `epochs` held; the fence of
//! `append_replicated` reads it under the writer lock, which `begin_epoch` also holds while
//! it changes it, so no replicated append from an older master lands after a term began.

use std::sync::atomic::Ordering;

use super::{Inner, MessageStore, TruncateReport};
use crate::epoch::{self, EpochEntry, EpochError};
use crate::error::TruncateError;

/// Loads the epoch file at open and drops, durably, the entries that describe bytes the
/// recovered log no longer holds: starts past `log_end`, and starts at or past a truncation
/// a crash interrupted (`completed_truncation`, see [`MessageStore::truncate_diverged`]).
pub(crate) fn load_at_open(
    root: &std::path::Path,
    log_end: u64,
    completed_truncation: Option<u64>,
) -> Result<Vec<EpochEntry>, EpochError> {
    let entries = epoch::load(root)?;
    let keep =
        |e: &EpochEntry| e.start <= log_end && completed_truncation.is_none_or(|cut| e.start < cut);
    if entries.iter().all(keep) {
        return Ok(entries);
    }
    let kept: Vec<EpochEntry> = entries.iter().copied().filter(keep).collect();
    tracing::warn!(dropped = ?&entries[kept.len()..], log_end,
        "epoch entries past the recovered log dropped");
    epoch::store(root, &kept)?;
    Ok(kept)
}

impl Inner {
    /// Replaces the entries, durably first; the in-memory copy changes only on success.
    fn set_epochs(
        &self,
        entries: &mut Vec<EpochEntry>,
        new: Vec<EpochEntry>,
    ) -> Result<(), EpochError> {
        epoch::store(&self.config.root_dir, &new)?;
        self.last_epoch
            .store(epoch::last_epoch(&new), Ordering::Release);
        *entries = new;
        Ok(())
    }

    /// Drops, durably, the entries starting past `offset` (and at it when `inclusive`).
    pub(crate) fn drop_epochs_from(&self, offset: u64, inclusive: bool) -> Result<(), EpochError> {
        let mut entries = self.epochs_lock();
        let kept = epoch::kept_below(&entries, offset, inclusive);
        if kept.len() != entries.len() {
            self.set_epochs(&mut entries, kept)?;
        }
        Ok(())
    }

    fn epochs_lock(&self) -> std::sync::MutexGuard<'_, Vec<EpochEntry>> {
        self.epochs.lock().expect("epochs lock")
    }
}

impl MessageStore {
    /// The epoch entries, oldest first: `(epoch, start)` where the master of `epoch` wrote
    /// the log from `start` to the next entry's start (or the log end).
    pub fn epochs(&self) -> Vec<EpochEntry> {
        self.inner.epochs_lock().clone()
    }

    /// The newest epoch; 0 when there is none (a log written before epochs is epoch 0 from
    /// offset 0 for every purpose).
    pub fn last_epoch(&self) -> u64 {
        self.inner.last_epoch.load(Ordering::Acquire)
    }

    /// Begins a master term: appends `(epoch, current log end)` durably and returns the
    /// start. Holds the writer lock throughout, so no append lands between reading the end
    /// and recording it: the start is exact, and from then on `append_replicated` refuses
    /// bytes from masters of older epochs.
    ///
    /// # Errors
    /// [`EpochError::Refused`] when `epoch` is not above the last epoch; I/O (nothing
    /// changed).
    pub fn begin_epoch(&self, epoch: u64) -> Result<u64, EpochError> {
        let inner = &self.inner;
        let writer = inner.writer.lock().expect("writer lock");
        let start = writer.write_pos();
        let mut entries = inner.epochs_lock();
        let new = epoch::begin(&entries, epoch, start).map_err(|reason| EpochError::Refused {
            epoch,
            start,
            reason,
        })?;
        inner.set_epochs(&mut entries, new)?;
        drop(entries);
        drop(writer);
        tracing::info!(epoch, start, "master epoch begun");
        Ok(start)
    }

    /// Records a term of this replica's master (one of its Welcome's entries) as the log
    /// reaches its start; the slave calls it before appending bytes at or past `entry.start`,
    /// so the entry is durable before those bytes are acknowledged. Returns whether it was
    /// new: recording an entry already present is a no-op.
    ///
    /// # Errors
    /// [`EpochError::Refused`] when the entry is not newer than the last one (or starts
    /// before it); I/O (nothing changed).
    pub fn record_epoch(&self, entry: EpochEntry) -> Result<bool, EpochError> {
        let inner = &self.inner;
        let mut entries = inner.epochs_lock();
        let new = epoch::record(&entries, entry).map_err(|reason| EpochError::Refused {
            epoch: entry.epoch,
            start: entry.start,
            reason,
        })?;
        let Some(new) = new else {
            return Ok(false);
        };
        inner.set_epochs(&mut entries, new)?;
        tracing::info!(
            epoch = entry.epoch,
            start = entry.start,
            "master epoch recorded"
        );
        Ok(true)
    }

    /// Cuts a suffix that diverges from a new master's log at `to` (the last common point):
    /// the epoch entries starting at or past `to`, then the log, ConsumeQueues, key index and
    /// offset view together ([`MessageStore::truncate`]). The replication bound drops to `to`
    /// when it was above (what the old master's watermark covered is not the new master's).
    ///
    /// # Durability (R9)
    /// The order is: validate `to`, write the truncate intent durably, drop the epoch entries
    /// durably, cut. The entries go FIRST, before any byte is cut, so no crash can leave an
    /// entry claiming a term for bytes that are gone while the log still holds them under
    /// another name. A crash after the entries are dropped but before the cut would leave a
    /// log tail past `to` with no entry of its own; the intent makes recovery finish the cut
    /// at `to` on the next open, and even without it that tail would be attributed to an
    /// older term, which the next handshake compares with the master's and cuts again. A
    /// crash after the intent but before the entries were rewritten is completed at open by
    /// dropping entries at or past the completed cut.
    ///
    /// # Errors
    /// `to` is not a record boundary of the log, the epoch file could not be rewritten, or
    /// I/O failed (the store is poisoned; the next open completes the truncation).
    pub fn truncate_diverged(&self, to: u64) -> Result<TruncateReport, TruncateError> {
        let report = self.truncate_with(to, |inner: &Inner| {
            inner.drop_epochs_from(to, true)?;
            Ok(())
        })?;
        if self.replication_bound().is_some_and(|bound| bound > to) {
            self.set_replication_bound(Some(to));
        }
        tracing::warn!(to, bytes_cut = report.bytes_cut, epochs = ?self.epochs(),
            "divergent suffix truncated");
        Ok(report)
    }
}
