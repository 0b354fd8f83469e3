//! Flushing the CommitLog: group commit under `SyncFlush`, an interval under `AsyncFlush`.
//!
//! One flusher thread owns every `fdatasync` of the CommitLog. Under `SyncFlush` each append
//! wakes it; appends that arrive while an fsync runs are covered together by the next one, so
//! N concurrent writers share one fsync (group commit). Each caller learns when *its* end is
//! durable through [`FlushControl::wait_durable`] (blocking) or [`FlushControl::durable`]
//! (async).
//!
//! Invariants:
//! 1. `flushed_end` only grows and never exceeds the written end at the moment its fsync began.
//! 2. A failed fsync poisons the control: every waiter, present and future, gets
//!    `DurabilityError::FlushFailed`, and appends are refused until restart (see `error`).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::commitlog::CommitLog;
use crate::error::{DurabilityError, FileError};

/// Flush progress, published to blocking and async waiters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushProgress {
    /// Every CommitLog byte below this is durable.
    pub flushed_end: u64,
    /// Set once an fsync failed.
    pub failure: Option<String>,
    /// Set when the store closes.
    pub closed: bool,
}

#[derive(Debug, Default)]
struct Requests {
    /// Highest end someone asked to be flushed.
    wanted: u64,
    stop: bool,
}

/// Coordination between appenders, waiters and the flusher thread.
#[derive(Debug)]
pub struct FlushControl {
    progress: Mutex<FlushProgress>,
    progress_changed: Condvar,
    requests: Mutex<Requests>,
    work_arrived: Condvar,
    watch: watch::Sender<FlushProgress>,
    timeout: Duration,
    /// Number of fsyncs done, for group-commit statistics.
    pub fsync_count: std::sync::atomic::AtomicU64,
}

impl FlushControl {
    /// A control whose log is durable up to `flushed_end`.
    pub fn new(flushed_end: u64, timeout: Duration) -> FlushControl {
        let progress = FlushProgress {
            flushed_end,
            ..FlushProgress::default()
        };
        FlushControl {
            progress: Mutex::new(progress.clone()),
            progress_changed: Condvar::new(),
            requests: Mutex::new(Requests {
                wanted: flushed_end,
                stop: false,
            }),
            work_arrived: Condvar::new(),
            watch: watch::Sender::new(progress),
            timeout,
            fsync_count: Default::default(),
        }
    }

    /// The current progress.
    pub fn progress(&self) -> FlushProgress {
        self.progress.lock().expect("flush lock").clone()
    }

    /// Durable end of the log.
    pub fn flushed_end(&self) -> u64 {
        self.progress.lock().expect("flush lock").flushed_end
    }

    /// Asks the flusher to make everything below `end` durable.
    pub fn request(&self, end: u64) {
        let mut requests = self.requests.lock().expect("flush lock");
        if end > requests.wanted {
            requests.wanted = end;
            self.work_arrived.notify_one();
        }
    }

    /// Blocks until everything below `end` is durable, the flush fails, or the timeout passes.
    pub fn wait_durable(&self, end: u64) -> Result<(), DurabilityError> {
        self.request(end);
        let deadline = Instant::now() + self.timeout;
        let mut progress = self.progress.lock().expect("flush lock");
        loop {
            if let Some(failure) = &progress.failure {
                return Err(DurabilityError::FlushFailed(failure.clone()));
            }
            if progress.flushed_end >= end {
                return Ok(());
            }
            if progress.closed {
                return Err(DurabilityError::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(DurabilityError::Timeout {
                    timeout_ms: self.timeout.as_millis() as u64,
                });
            }
            progress = self
                .progress_changed
                .wait_timeout(progress, deadline - now)
                .expect("flush lock")
                .0;
        }
    }

    /// Resolves when everything below `end` is durable or the flush fails.
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting; the flush itself goes on.
    pub async fn durable(&self, end: u64) -> Result<(), DurabilityError> {
        self.request(end);
        let mut receiver = self.watch.subscribe();
        let progress = receiver
            .wait_for(|p| p.flushed_end >= end || p.failure.is_some() || p.closed)
            .await
            .map_err(|_| DurabilityError::Closed)?
            .clone();
        if let Some(failure) = progress.failure {
            return Err(DurabilityError::FlushFailed(failure));
        }
        if progress.flushed_end >= end {
            Ok(())
        } else {
            Err(DurabilityError::Closed)
        }
    }

    /// Records an fsync failure; every waiter is released with an error.
    pub fn poison(&self, failure: String) {
        let mut progress = self.progress.lock().expect("flush lock");
        if progress.failure.is_none() {
            progress.failure = Some(failure);
        }
        self.publish(&progress);
    }

    /// The failure that poisoned the store, if any.
    pub fn failure(&self) -> Option<String> {
        self.progress.lock().expect("flush lock").failure.clone()
    }

    /// Lowers the flushed end after a truncation.
    pub fn truncate_to(&self, end: u64) {
        let mut requests = self.requests.lock().expect("flush lock");
        requests.wanted = requests.wanted.min(end);
        let mut progress = self.progress.lock().expect("flush lock");
        progress.flushed_end = progress.flushed_end.min(end);
        self.publish(&progress);
    }

    /// Stops the flusher loop and releases waiters that can no longer be served.
    pub fn close(&self) {
        self.requests.lock().expect("flush lock").stop = true;
        self.work_arrived.notify_all();
    }

    fn publish(&self, progress: &FlushProgress) {
        self.progress_changed.notify_all();
        self.watch.send_replace(progress.clone());
    }

    /// The flusher thread body. `interval` is `Some` under `AsyncFlush` (flush at least that
    /// often when there is unflushed data) and `None` under `SyncFlush` (flush on request).
    /// `commit` writes the appender's buffered tail to the files before each fsync.
    pub fn run(
        &self,
        log: &CommitLog,
        interval: Option<Duration>,
        commit: &dyn Fn() -> Result<(), FileError>,
        on_flushed: &dyn Fn(),
    ) {
        loop {
            let stop = {
                let mut requests = self.requests.lock().expect("flush lock");
                // Lock order: `requests`, then `progress`. The flushed end is re-read on every
                // pass because a truncation may lower it while the flusher sleeps.
                while !requests.stop && requests.wanted <= self.flushed_end() {
                    match interval {
                        Some(every) => {
                            let (guard, timed_out) = self
                                .work_arrived
                                .wait_timeout(requests, every)
                                .expect("flush lock");
                            requests = guard;
                            if timed_out.timed_out() {
                                break;
                            }
                        }
                        None => requests = self.work_arrived.wait(requests).expect("flush lock"),
                    }
                }
                requests.stop
            };
            match commit() {
                Ok(()) => {
                    let target = log.committed_end();
                    if let Err(error) = self.flush_once(log, target) {
                        self.poison(error.to_string());
                    }
                }
                Err(error) => self.poison(format!("commit failed: {error}")),
            }
            on_flushed();
            if stop {
                let mut progress = self.progress.lock().expect("flush lock");
                progress.closed = true;
                self.publish(&progress);
                return;
            }
        }
    }

    /// fsyncs every segment holding bytes in `[flushed_end, target)` and publishes `target`.
    pub fn flush_once(&self, log: &CommitLog, target: u64) -> Result<(), FileError> {
        let flushed = self.flushed_end();
        if target <= flushed || self.failure().is_some() {
            return Ok(());
        }
        let first = log.segment_start_of(flushed);
        for segment in log.segments() {
            if segment.start + log.segment_size() > first && segment.start < target {
                if log.faults.take_sync() {
                    return Err(FileError::new(
                        "fsync",
                        segment.path(),
                        std::io::Error::other("injected fsync failure"),
                    ));
                }
                segment.sync()?;
            }
        }
        self.fsync_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut progress = self.progress.lock().expect("flush lock");
        if target > progress.flushed_end {
            progress.flushed_end = target;
        }
        self.publish(&progress);
        Ok(())
    }
}
