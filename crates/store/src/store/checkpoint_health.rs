//! How checkpoints are faring, and the checkpointer's retry pace.
//!
//! A failed checkpoint does not poison the store: a checkpoint is derived state, and recovery
//! rebuilds everything after the last good one from the CommitLog, so the data path stays
//! sound and sends keep succeeding. A failure is retried with a growing, bounded back-off,
//! logged, counted and shown in `StoreStats`.
//!
//! One failure is different: a failed **fsync** of derived state (a ConsumeQueue or index
//! file). After it the kernel may have dropped the dirty pages, and a retried fsync could
//! report success for entries that never reached the disk; a later checkpoint would then vouch
//! for them. So from then on no checkpoint is written until restart; the next open replays
//! the log from the last good checkpoint and rebuilds those entries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// First retry after a failed checkpoint: short, because the usual cause (a descriptor
/// shortage) passes as soon as connections close.
pub(crate) const CHECKPOINT_RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest wait between retries: bounds how long derived state stays unsaved (and how much
/// log the next recovery replays) after the cause clears, while a persistent failure logs one
/// line per this interval.
pub(crate) const CHECKPOINT_RETRY_MAX: Duration = Duration::from_secs(10);

/// Checkpoint failures since open, the latest one while they last, and whether derived
/// durability was lost to a failed fsync.
#[derive(Debug, Default)]
pub(crate) struct CheckpointHealth {
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
    derived_sync_lost: Mutex<Option<String>>,
}

impl CheckpointHealth {
    /// Records a failed checkpoint.
    pub(crate) fn failed(&self, error: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_failure.lock().expect("checkpoint health lock") = Some(error.to_string());
    }

    /// Records a checkpoint written; returns whether checkpoints had been failing.
    pub(crate) fn succeeded(&self) -> bool {
        self.last_failure
            .lock()
            .expect("checkpoint health lock")
            .take()
            .is_some()
    }

    /// Failed checkpoints since open.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The latest failure, until a checkpoint succeeds again.
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .expect("checkpoint health lock")
            .clone()
    }

    /// Stops checkpoints until restart: an fsync of derived state failed with `error`.
    pub(crate) fn lose_derived_durability(&self, error: String) {
        let mut lost = self
            .derived_sync_lost
            .lock()
            .expect("checkpoint health lock");
        if lost.is_none() {
            tracing::error!(%error, "fsync of derived state failed: no checkpoint is written \
                until restart; the next open rebuilds derived state from the log");
            *lost = Some(error);
        }
    }

    /// Why checkpoints are stopped, if they are.
    pub(crate) fn derived_sync_lost(&self) -> Option<String> {
        self.derived_sync_lost
            .lock()
            .expect("checkpoint health lock")
            .clone()
    }
}

/// The checkpointer's wait before its next attempt: the interval while checkpoints succeed, a
/// back-off from [`CHECKPOINT_RETRY_MIN`] doubling to [`CHECKPOINT_RETRY_MAX`] while they
/// fail.
#[derive(Debug)]
pub(crate) struct RetryPace {
    interval: Duration,
    backoff: Option<Duration>,
}

impl RetryPace {
    pub(crate) fn new(interval: Duration) -> RetryPace {
        RetryPace {
            interval,
            backoff: None,
        }
    }

    /// How long to wait before the next attempt.
    pub(crate) fn wait(&self) -> Duration {
        self.backoff.unwrap_or(self.interval)
    }

    /// The attempt failed: wait longer next time, up to the bound.
    pub(crate) fn failed(&mut self) {
        let next = self
            .backoff
            .map_or(CHECKPOINT_RETRY_MIN, |b| b.saturating_mul(2));
        self.backoff = Some(next.min(CHECKPOINT_RETRY_MAX));
    }

    /// The attempt succeeded: back to the interval.
    pub(crate) fn succeeded(&mut self) {
        self.backoff = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_their_bound_and_reset_on_success() {
        let mut pace = RetryPace::new(Duration::from_secs(1));
        assert_eq!(pace.wait(), Duration::from_secs(1));
        let mut waits = Vec::new();
        for _ in 0..12 {
            pace.failed();
            waits.push(pace.wait());
        }
        assert_eq!(waits[0], CHECKPOINT_RETRY_MIN);
        assert_eq!(waits[1], CHECKPOINT_RETRY_MIN * 2);
        assert_eq!(*waits.last().unwrap(), CHECKPOINT_RETRY_MAX);
        pace.succeeded();
        assert_eq!(pace.wait(), Duration::from_secs(1));
    }

    #[test]
    fn the_last_failure_lasts_until_a_success() {
        let health = CheckpointHealth::default();
        assert!(!health.succeeded());
        health.failed("list: Too many open files");
        health.failed("list: Too many open files");
        assert_eq!(health.failures(), 2);
        assert!(health.last_failure().unwrap().contains("Too many"));
        assert!(health.succeeded());
        assert_eq!(health.last_failure(), None);
        assert_eq!(health.failures(), 2, "the count stays");
    }
}
