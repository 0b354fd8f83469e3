//! Fault points: a seam through which tests make the next CommitLog writes or fsyncs fail,
//! to prove that a failure reaches the caller and leaves the log consistent (invariant 2),
//! and hold the background committers, to prove what an acknowledgement itself wrote.
//!
//! Production never arms them; an unarmed point costs one relaxed atomic load per batch.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Counters of armed faults.
#[derive(Debug, Default)]
pub struct Faults {
    fail_writes: AtomicU32,
    fail_syncs: AtomicU32,
    hold_background_commits: AtomicBool,
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
