//! Fault points: a seam through which tests make the next CommitLog writes or fsyncs fail,
//! to prove that a failure reaches the caller and leaves the log consistent (invariant 2),
//! hold the background committers, to prove what an acknowledgement itself wrote, and make
//! checkpoints fail, to prove that a failed checkpoint is retried and reported without
//! poisoning the store.
//!
//! Production never arms them; an unarmed point costs one relaxed atomic load per batch.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Counters of armed faults.
#[derive(Debug, Default)]
pub struct Faults {
    fail_writes: AtomicU32,
    fail_syncs: AtomicU32,
    hold_background_commits: AtomicBool,
    fail_checkpoints: AtomicU32,
    fail_derived_syncs: AtomicU32,
    fail_dispatches: AtomicU32,
}

impl Faults {
    /// Makes the next `writes` CommitLog writes fail after writing half their bytes (as a
    /// full disk does), and the next `syncs` fsyncs fail.
    pub fn arm(&self, writes: u32, syncs: u32) {
        self.fail_writes.store(writes, Ordering::Release);
        self.fail_syncs.store(syncs, Ordering::Release);
    }

    /// Under `AsyncFlush`, stops (`true`) or restarts the background committers — the
    /// dispatcher's tick and the interval flusher — from writing the appender's tail, so only
    /// appenders waiting for an acknowledgement (and readers catching up) write it. Release
    /// the hold before closing the store: the final flush needs the flusher to commit.
    pub fn hold_background_commits(&self, hold: bool) {
        self.hold_background_commits.store(hold, Ordering::Release);
    }

    /// Makes the next `count` checkpoint attempts fail as listing the checkpoint directory
    /// fails when the process is out of descriptors (EMFILE).
    pub fn fail_checkpoints(&self, count: u32) {
        self.fail_checkpoints.store(count, Ordering::Release);
    }

    /// Makes the fsync of derived state (ConsumeQueues, index) fail with EIO in the next
    /// `count` checkpoints.
    pub fn fail_derived_syncs(&self, count: u32) {
        self.fail_derived_syncs.store(count, Ordering::Release);
    }

    /// Makes the next `count` dispatch passes fail as creating a ConsumeQueue file fails when
    /// the process is out of descriptors (EMFILE).
    pub fn fail_dispatches(&self, count: u32) {
        self.fail_dispatches.store(count, Ordering::Release);
    }

    pub(crate) fn take_dispatch(&self) -> bool {
        take(&self.fail_dispatches)
    }

    pub(crate) fn take_checkpoint(&self) -> bool {
        take(&self.fail_checkpoints)
    }

    pub(crate) fn take_derived_sync(&self) -> bool {
        take(&self.fail_derived_syncs)
    }

    pub(crate) fn background_commits_held(&self) -> bool {
        self.hold_background_commits.load(Ordering::Relaxed)
    }

    pub(crate) fn take_write(&self) -> bool {
        take(&self.fail_writes)
    }

    pub(crate) fn take_sync(&self) -> bool {
        take(&self.fail_syncs)
    }
}

fn take(counter: &AtomicU32) -> bool {
    if counter.load(Ordering::Relaxed) == 0 {
        return false;
    }
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

/// The error an armed write fault reports: ENOSPC.
pub(crate) fn disk_full() -> std::io::Error {
    std::io::Error::from_raw_os_error(28)
}

/// The error an armed checkpoint fault reports: EMFILE.
pub(crate) fn too_many_open_files() -> std::io::Error {
    std::io::Error::from_raw_os_error(24)
}

/// The error an armed derived-sync fault reports: EIO.
pub(crate) fn io_error() -> std::io::Error {
    std::io::Error::from_raw_os_error(5)
}
