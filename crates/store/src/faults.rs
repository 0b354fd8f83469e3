//! Fault points: a seam through which tests make the next CommitLog writes or fsyncs fail,
//! to prove that a failure reaches the caller and leaves the log consistent (invariant 2),
//! hold the background committers, to prove what an acknowledgement itself wrote, and make
//! checkpoints fail, to prove that a failed checkpoint is retried and reported without
//! poisoning the store.
//!
//! Stalls make CommitLog fsyncs or tail writes hang (a slow or wedged disk), to prove that an
//! acknowledgement wait is bounded by `sync_flush_timeout_ms` and answers `Timeout` rather
//! than hanging its caller. A read stall holds a queue read between taking its entries and
//! reading the records they point at, to prove that a truncation in that window is not
//! taken for damage.
//!
//! Production never arms them; an unarmed point costs one relaxed atomic load per batch.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest an armed stall holds one fsync or write: a test that forgets to disarm a
/// stall (or panics before it does) slows down but cannot hang forever.
pub const STALL_MAX: Duration = Duration::from_secs(60);

/// Counters of armed faults.
#[derive(Debug, Default)]
pub struct Faults {
    fail_writes: AtomicU32,
    fail_syncs: AtomicU32,
    hold_background_commits: AtomicBool,
    fail_checkpoints: AtomicU32,
    fail_derived_syncs: AtomicU32,
    fail_dispatches: AtomicU32,
    fail_preallocations: AtomicU32,
    /// Mirrors of `stalls` readable without the lock (the unarmed fast path).
    syncs_stalled: AtomicBool,
    writes_stalled: AtomicBool,
    derived_syncs_stalled: AtomicBool,
    reads_stalled: AtomicBool,
    stalls: Mutex<Stalls>,
    stall_changed: Condvar,
    /// Threads held by a stall right now.
    stalled: AtomicUsize,
}

/// Which stalls are armed, and whether the store closed (which releases every stall).
#[derive(Debug, Default)]
struct Stalls {
    syncs: bool,
    writes: bool,
    derived_syncs: bool,
    reads: bool,
    released: bool,
}

/// Which operation a stall holds.
#[derive(Debug, Clone, Copy)]
enum StallPoint {
    Sync,
    Write,
    DerivedSync,
    Read,
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

    /// Makes the next `count` preallocations of CommitLog space fail as on a full disk
    /// (ENOSPC from `fallocate`).
    pub fn fail_preallocations(&self, count: u32) {
        self.fail_preallocations.store(count, Ordering::Release);
    }

    /// While `true`, every CommitLog fsync of the flusher blocks before syncing, until the
    /// stall is disarmed, the store closes, or [`STALL_MAX`] passes (a wedged disk).
    pub fn stall_syncs(&self, stall: bool) {
        self.set_stall(StallPoint::Sync, stall);
    }

    /// While `true`, every commit of the appender's tail to the segment files (the `pwrite`
    /// an `AsyncFlush` acknowledgement rests on) blocks before writing, until the stall is
    /// disarmed, the store closes, or [`STALL_MAX`] passes. The stall holds whichever thread
    /// commits, with the commit lock held, as a slow `pwrite` would.
    pub fn stall_writes(&self, stall: bool) {
        self.set_stall(StallPoint::Write, stall);
    }

    /// While `true`, a checkpoint's fsync of derived state (ConsumeQueues, index) blocks
    /// before syncing, until disarmed, the store closes, or [`STALL_MAX`] passes (a slow
    /// disk): dispatch must go on meanwhile.
    pub fn stall_derived_syncs(&self, stall: bool) {
        self.set_stall(StallPoint::DerivedSync, stall);
    }

    /// While `true`, every queue read (`get_messages` and its kin) blocks after taking the
    /// queue's entries and before reading the records they lead to, until disarmed, the store
    /// closes, or [`STALL_MAX`] passes: a reader descheduled at the worst moment.
    pub fn stall_reads(&self, stall: bool) {
        self.set_stall(StallPoint::Read, stall);
    }

    fn set_stall(&self, point: StallPoint, stall: bool) {
        let mut stalls = self.stalls.lock().expect("stall lock");
        match point {
            StallPoint::Sync => {
                stalls.syncs = stall;
                self.syncs_stalled.store(stall, Ordering::Release);
            }
            StallPoint::Write => {
                stalls.writes = stall;
                self.writes_stalled.store(stall, Ordering::Release);
            }
            StallPoint::DerivedSync => {
                stalls.derived_syncs = stall;
                self.derived_syncs_stalled.store(stall, Ordering::Release);
            }
            StallPoint::Read => {
                stalls.reads = stall;
                self.reads_stalled.store(stall, Ordering::Release);
            }
        }
        self.stall_changed.notify_all();
    }

    /// How many threads a stall holds right now: a test waits for the committer or flusher
    /// to be held before it starts the wait it measures.
    pub fn stalled_now(&self) -> usize {
        self.stalled.load(Ordering::Acquire)
    }

    /// Releases every stall for good: the store is closing and its threads must finish.
    pub(crate) fn release_stalls(&self) {
        self.stalls.lock().expect("stall lock").released = true;
        self.syncs_stalled.store(false, Ordering::Release);
        self.writes_stalled.store(false, Ordering::Release);
        self.derived_syncs_stalled.store(false, Ordering::Release);
        self.reads_stalled.store(false, Ordering::Release);
        self.stall_changed.notify_all();
    }

    /// Blocks while fsyncs are stalled (see [`Faults::stall_syncs`]).
    pub(crate) fn wait_sync_stall(&self) {
        if self.syncs_stalled.load(Ordering::Relaxed) {
            self.wait_stall(StallPoint::Sync);
        }
    }

    /// Blocks while tail writes are stalled (see [`Faults::stall_writes`]).
    pub(crate) fn wait_write_stall(&self) {
        if self.writes_stalled.load(Ordering::Relaxed) {
            self.wait_stall(StallPoint::Write);
        }
    }

    /// Blocks while derived-state fsyncs are stalled (see [`Faults::stall_derived_syncs`]).
    pub(crate) fn wait_derived_sync_stall(&self) {
        if self.derived_syncs_stalled.load(Ordering::Relaxed) {
            self.wait_stall(StallPoint::DerivedSync);
        }
    }

    /// Blocks while queue reads are stalled (see [`Faults::stall_reads`]).
    pub(crate) fn wait_read_stall(&self) {
        if self.reads_stalled.load(Ordering::Relaxed) {
            self.wait_stall(StallPoint::Read);
        }
    }

    /// Waits on the condition variable (no busy loop) until `point` is disarmed, the stalls
    /// are released, or `STALL_MAX` passes.
    fn wait_stall(&self, point: StallPoint) {
        let deadline = Instant::now() + STALL_MAX;
        let armed = |stalls: &mut Stalls| {
            !stalls.released
                && match point {
                    StallPoint::Sync => stalls.syncs,
                    StallPoint::Write => stalls.writes,
                    StallPoint::DerivedSync => stalls.derived_syncs,
                    StallPoint::Read => stalls.reads,
                }
        };
        let mut stalls = self.stalls.lock().expect("stall lock");
        self.stalled.fetch_add(1, Ordering::AcqRel);
        while armed(&mut stalls) {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(?point, "a stall fault outlived STALL_MAX; going on");
                break;
            }
            stalls = self
                .stall_changed
                .wait_timeout(stalls, deadline - now)
                .expect("stall lock")
                .0;
        }
        self.stalled.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn take_dispatch(&self) -> bool {
        take(&self.fail_dispatches)
    }

    pub(crate) fn take_preallocation(&self) -> bool {
        take(&self.fail_preallocations)
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
