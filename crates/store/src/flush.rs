//! Flushing the CommitLog: group commit under `SyncFlush`, an interval under `AsyncFlush`.
//!
//! One flusher thread owns every `fdatasync` of the CommitLog. Under `SyncFlush` a waiting
//! appender wakes it; appends that arrive while an fsync runs are covered together by the next
//! one, so N concurrent writers share one write and one fsync (group commit). Each caller
//! learns when *its* end is durable through [`FlushControl::wait_durable_since`] (blocking) or
//! [`FlushControl::durable`] (async). Waiters of both kinds are kept ordered by the end they
//! wait for and only those an fsync covers are woken, so a flush does not wake every writer
//! (with 256 sends in flight, waking them all after each fsync cost more CPU than the sends).
//!
//! Invariants:
//! 1. `flushed_end` only grows (except when a truncation lowers it) and never exceeds the
//!    committed end at the moment its fsync began; an fsync that a truncation overtook
//!    publishes nothing (the epoch it read its target at has passed).
//! 2. A failed fsync poisons the control: every waiter, present and future, gets
//!    `DurabilityError::FlushFailed`, and appends are refused until restart (see `error`).
//! 3. A record cut by a truncation while its appender waited is reported as
//!    `DurabilityError::Truncated`, never as durable, even after new records reuse its offsets.
//!
//! Under `AsyncFlush` a record is acknowledged once it is in the files (committed), not once
//! fsynced; [`FlushControl::written_outcome`] answers those waiters with the same truncation
//! and poisoning rules.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::commitlog::CommitLog;
use crate::error::{DurabilityError, FileError};

/// Truncations remembered for waiters; waits are bounded by the flush timeout, so only
/// recent cuts matter.
const CUTS_REMEMBERED_MAX: usize = 256;

/// Flush progress, published to blocking and async waiters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushProgress {
    /// Every CommitLog byte below this is durable.
    pub flushed_end: u64,
    /// Set once an fsync failed.
    pub failure: Option<String>,
    /// Set when the store closes.
    pub closed: bool,
    /// Recent truncations as (epoch after the cut, offset cut to): a record appended before a
    /// cut below its end never becomes durable, whatever the flushed end says later.
    pub cuts: Vec<(u64, u64)>,
}

impl FlushProgress {
    /// The lowest cut below `end` made after `epoch`, if any.
    fn cut_since(&self, epoch: u64, end: u64) -> Option<u64> {
        self.cuts
            .iter()
            .filter(|(cut_epoch, to)| *cut_epoch > epoch && *to < end)
            .map(|(_, to)| *to)
            .min()
    }

    /// The answer for a waiter of `end` appended at `epoch`, if there is one yet.
    fn outcome(&self, end: u64, epoch: u64) -> Option<Result<(), DurabilityError>> {
        if let Some(truncated_to) = self.cut_since(epoch, end) {
            return Some(Err(DurabilityError::Truncated { truncated_to }));
        }
        if let Some(failure) = &self.failure {
            return Some(Err(DurabilityError::FlushFailed(failure.clone())));
        }
        if self.flushed_end >= end {
            return Some(Ok(()));
        }
        if self.closed {
            return Some(Err(DurabilityError::Closed));
        }
        None
    }

    /// The `AsyncFlush` answer for a waiter of `end` appended at `epoch`, when the log is in
    /// the files up to `committed_end`: acknowledged once committed, unless a truncation cut
    /// the record; `NotWritten` when the store was poisoned before the record reached the
    /// files. `None`: not yet committed, ask again after a commit.
    fn written_outcome(
        &self,
        end: u64,
        epoch: u64,
        committed_end: u64,
    ) -> Option<Result<(), DurabilityError>> {
        if let Some(truncated_to) = self.cut_since(epoch, end) {
            return Some(Err(DurabilityError::Truncated { truncated_to }));
        }
        if committed_end >= end {
            return Some(Ok(()));
        }
        self.failure
            .as_ref()
            .map(|failure| Err(DurabilityError::NotWritten(failure.clone())))
    }
}

#[derive(Debug, Default)]
struct State {
    progress: FlushProgress,
    /// Waiters by (end, ticket): a publish wakes those at or below the flushed end (all of
    /// them after a failure, a cut or the close). Bounded by the appenders waiting: each holds
    /// one entry, removed when it is woken or stops waiting.
    waiters: BTreeMap<(u64, u64), Wake>,
    next_ticket: u64,
}

/// How a waiter is woken: a blocked thread, or an async task.
#[derive(Debug)]
enum Wake {
    Thread(Thread),
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => waker.wake(),
        }
    }
}

/// Waiters taken from the state by a publish, woken once the state lock is released (a woken
/// waiter's first act is to take that lock).
#[must_use = "the waiters must be woken"]
struct Woken(BTreeMap<(u64, u64), Wake>);

impl Woken {
    fn wake(self) {
        for waiter in self.0.into_values() {
            waiter.wake();
        }
    }
}

/// Longest the flusher polls for the next request after a pass before it sleeps (see
/// `FlushControl::poll_for_work`). It bounds the CPU an idle flusher spends: at most this
/// much after each pass, so a broker receiving one synchronous send per millisecond spends
/// a fifth of a CPU, and one receiving none spends it once per flush interval.
pub const FLUSHER_POLL_MAX: Duration = Duration::from_micros(200);

#[derive(Debug, Default)]
struct Requests {
    /// Highest end someone asked to be flushed.
    wanted: u64,
    stop: bool,
}

/// Coordination between appenders, waiters and the flusher thread.
#[derive(Debug)]
pub struct FlushControl {
    state: Mutex<State>,
    /// Mirror of `flushed_end` readable without the lock.
    flushed_end: AtomicU64,
    /// Mirror of `progress.failure.is_some()` readable without the lock.
    poisoned: AtomicBool,
    requests: Mutex<Requests>,
    work_arrived: Condvar,
    timeout: Duration,
    epoch: AtomicU64,
    /// Number of fsyncs done, for group-commit statistics.
    pub fsync_count: AtomicU64,
    /// How long the fsyncs take (metrics and `brokerStatus`).
    pub latency: crate::flush_latency::FlushLatency,
}

impl FlushControl {
    /// A control whose log is durable up to `flushed_end`.
    pub fn new(flushed_end: u64, timeout: Duration) -> FlushControl {
        FlushControl {
            state: Mutex::new(State {
                progress: FlushProgress {
                    flushed_end,
                    ..FlushProgress::default()
                },
                ..State::default()
            }),
            flushed_end: AtomicU64::new(flushed_end),
            poisoned: AtomicBool::new(false),
            requests: Mutex::new(Requests {
                wanted: flushed_end,
                stop: false,
            }),
            work_arrived: Condvar::new(),
            timeout,
            epoch: AtomicU64::new(0),
            fsync_count: AtomicU64::new(0),
            latency: Default::default(),
        }
    }

    /// Durable end of the log.
    pub fn flushed_end(&self) -> u64 {
        self.flushed_end.load(Ordering::Acquire)
    }

    /// The truncation epoch: appenders record it so a later cut below their record is
    /// reported to them instead of a flush past the reused offsets.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
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
        self.wait_durable_since(end, self.epoch())
    }

    /// Like [`FlushControl::wait_durable`] for a record appended at truncation epoch `epoch`.
    pub fn wait_durable_since(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        if self.flushed_end() >= end && self.epoch() == epoch {
            return Ok(());
        }
        self.request(end);
        let deadline = Instant::now() + self.timeout;
        let ticket = {
            let mut state = self.state.lock().expect("flush lock");
            if let Some(outcome) = state.progress.outcome(end, epoch) {
                return outcome;
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state
                .waiters
                .insert((end, ticket), Wake::Thread(std::thread::current()));
            ticket
        };
        loop {
            let now = Instant::now();
            if now < deadline {
                std::thread::park_timeout(deadline - now);
            }
            let mut state = self.state.lock().expect("flush lock");
            let outcome = state.progress.outcome(end, epoch).or_else(|| {
                (Instant::now() >= deadline).then_some(Err(DurabilityError::Timeout {
                    timeout_ms: self.timeout.as_millis() as u64,
                }))
            });
            if let Some(outcome) = outcome {
                state.waiters.remove(&(end, ticket));
                return outcome;
            }
            // A publish that woke this waiter without answering it (a cut of other records)
            // took its entry: it is put back, or only the deadline would wake it.
            state
                .waiters
                .entry((end, ticket))
                .or_insert_with(|| Wake::Thread(std::thread::current()));
        }
    }

    /// Resolves when everything below `end` (appended at truncation epoch `epoch`) is durable,
    /// the flush fails, or a truncation cut the record. Unbounded:
    /// [`crate::MessageStore::acknowledged`] adds the `sync_flush_timeout_ms` bound.
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting; the flush itself goes on.
    pub async fn durable(&self, end: u64, epoch: u64) -> Result<(), DurabilityError> {
        self.request(end);
        DurableWait {
            control: self,
            end,
            epoch,
            ticket: None,
        }
        .await
    }

    /// Records an fsync failure; every waiter is released with an error.
    pub fn poison(&self, failure: String) {
        let mut state = self.state.lock().expect("flush lock");
        if state.progress.failure.is_none() {
            state.progress.failure = Some(failure);
        }
        self.poisoned.store(true, Ordering::Release);
        let woken = self.publish(&mut state, true);
        drop(state);
        woken.wake();
    }

    /// Whether the store is poisoned, without taking the lock (hot paths).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Under `AsyncFlush`: the answer for a waiter of `end` appended at truncation epoch
    /// `epoch`, once there is one (see `FlushProgress::written_outcome`). `committed_end` is
    /// read under the lock. Callers ask while no truncation is half done (after holding the
    /// commit lock), so a lowered committed end comes with its published cut.
    pub fn written_outcome(
        &self,
        end: u64,
        epoch: u64,
        committed_end: &dyn Fn() -> u64,
    ) -> Option<Result<(), DurabilityError>> {
        let state = self.state.lock().expect("flush lock");
        state.progress.written_outcome(end, epoch, committed_end())
    }

    /// The failure that poisoned the store, if any.
    pub fn failure(&self) -> Option<String> {
        self.state
            .lock()
            .expect("flush lock")
            .progress
            .failure
            .clone()
    }

    /// Lowers the flushed end after a truncation; waiters whose records were cut get
    /// `Truncated`.
    pub fn truncate_to(&self, end: u64) {
        let mut requests = self.requests.lock().expect("flush lock");
        requests.wanted = requests.wanted.min(end);
        let mut state = self.state.lock().expect("flush lock");
        state.progress.flushed_end = state.progress.flushed_end.min(end);
        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        if state.progress.cuts.len() >= CUTS_REMEMBERED_MAX {
            state.progress.cuts.remove(0);
        }
        state.progress.cuts.push((epoch, end));
        let woken = self.publish(&mut state, true);
        drop((state, requests));
        woken.wake();
    }

    /// Stops the flusher loop and releases waiters that can no longer be served.
    pub fn close(&self) {
        self.requests.lock().expect("flush lock").stop = true;
        self.work_arrived.notify_all();
    }

    /// Publishes progress: takes the waiters it answers (all of them when `wake_all`), for
    /// the caller to wake once it released the state lock.
    fn publish(&self, state: &mut State, wake_all: bool) -> Woken {
        self.flushed_end
            .store(state.progress.flushed_end, Ordering::Release);
        let woken = if wake_all {
            std::mem::take(&mut state.waiters)
        } else {
            let later = state
                .waiters
                .split_off(&(state.progress.flushed_end + 1, 0));
            std::mem::replace(&mut state.waiters, later)
        };
        Woken(woken)
    }

    /// The flusher thread body. `interval` is `Some` under `AsyncFlush` (flush at least that
    /// often when there is unflushed data) and `None` under `SyncFlush` (flush on request).
    /// `commit` writes the appender's buffered tail to the files before each fsync;
    /// `flushed` runs after each fsync that succeeded (the store wakes its dispatcher).
    pub fn run(
        &self,
        log: &CommitLog,
        interval: Option<Duration>,
        commit: &dyn Fn() -> Result<(), FileError>,
        flushed: &dyn Fn(),
    ) {
        loop {
            let stop = self.wait_for_work(interval);
            self.flush_pass(log, commit, flushed);
            if stop {
                let mut state = self.state.lock().expect("flush lock");
                state.progress.closed = true;
                let woken = self.publish(&mut state, true);
                drop(state);
                woken.wake();
                return;
            }
        }
    }

    /// Waits until an end above the flushed end is requested, the interval passes (if any) or
    /// the control closes; returns whether it closed.
    fn wait_for_work(&self, interval: Option<Duration>) -> bool {
        if let Some(stop) = self.poll_for_work() {
            return stop;
        }
        let mut requests = self.requests.lock().expect("flush lock");
        // The flushed end is re-read on every pass: a truncation may lower it.
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
    }

    /// Polls for a request (or the close) for at most [`FLUSHER_POLL_MAX`] before the
    /// flusher sleeps; `Some(stop)` when one came. A lone synchronous producer's next send
    /// arrives about one network round trip after its acknowledgement: a flusher asleep by
    /// then must be woken, which on an idle virtual CPU took 30–40 µs of the send's time
    /// (docs/performance.md). The lock is only tried, so a requester is never kept waiting
    /// on it by the poll, and each turn yields the CPU: on two vCPUs a flusher spinning
    /// between windowed sends' fsyncs kept the workers that answer and append them off a
    /// CPU (its `clock_gettime`s alone were 4.6% of the broker's samples); yielding, the
    /// flusher stays awake (no futex wake-up needed) but runs only when nothing else can.
    fn poll_for_work(&self) -> Option<bool> {
        let until = Instant::now() + FLUSHER_POLL_MAX;
        loop {
            if let Ok(requests) = self.requests.try_lock() {
                if requests.stop || requests.wanted > self.flushed_end() {
                    return Some(requests.stop);
                }
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// Group commits while they are asked for: write the tail, fsync it, publish. After an
    /// fsync the flusher writes the tail appended while it ran (the next group) *before*
    /// waking the waiters that fsync answered, and when that group was asked for it fsyncs
    /// it at once, without taking the tail again: once woken, those waiters append and ask
    /// again, competing with the flusher for two cores and for the writer and request locks,
    /// so writing and waking in that order shortens the time between fsyncs (`bench store
    /// --flush sync --writers 64`: 8% more fsyncs of 32 records in the same time,
    /// docs/performance.md). Their new records go to the group after. With one writer the
    /// next tail is empty and costs no write. A failure poisons the store (invariant 2),
    /// after the fsync that succeeded was published.
    fn flush_pass(
        &self,
        log: &CommitLog,
        commit: &dyn Fn() -> Result<(), FileError>,
        flushed: &dyn Fn(),
    ) {
        if let Err(error) = commit() {
            self.poison(format!("commit failed: {error}"));
            return;
        }
        loop {
            // The epoch before the end: a truncation after this read is seen at the publish.
            let epoch = self.epoch();
            let target = log.committed_end();
            match self.sync_through(log, target) {
                Ok(true) => {}
                Ok(false) => {
                    flushed();
                    return;
                }
                Err(error) => {
                    self.poison(error.to_string());
                    return;
                }
            }
            let next_group = commit();
            self.publish_flushed(target, epoch);
            flushed();
            if let Err(error) = next_group {
                self.poison(format!("commit failed: {error}"));
                return;
            }
            if !self.next_group_wanted(log, target) {
                return;
            }
        }
    }

    /// Whether records past `target` are written and someone waits for them to be flushed
    /// (under `AsyncFlush` nobody usually does: the interval paces the flushes), and the
    /// control is not closing.
    fn next_group_wanted(&self, log: &CommitLog, target: u64) -> bool {
        let requests = self.requests.lock().expect("flush lock");
        !requests.stop && requests.wanted > target && log.committed_end() > target
    }

    /// fsyncs every segment holding bytes in `[flushed_end, target)` and publishes `target`
    /// (unless a truncation came first).
    pub fn flush_once(&self, log: &CommitLog, target: u64) -> Result<(), FileError> {
        let epoch = self.epoch();
        if self.sync_through(log, target)? {
            self.publish_flushed(target, epoch);
        }
        Ok(())
    }

    /// fsyncs every segment holding bytes in `[flushed_end, target)`; false when there was
    /// nothing to do (already flushed, or the store is poisoned).
    fn sync_through(&self, log: &CommitLog, target: u64) -> Result<bool, FileError> {
        let flushed = self.flushed_end();
        if target <= flushed || self.is_poisoned() {
            return Ok(false);
        }
        // A test's stall holds the flusher here, as a wedged disk would hold its fsync.
        log.faults.wait_sync_stall();
        let first = log.segment_start_of(flushed);
        let started = Instant::now();
        for segment in log.segments() {
            if segment.start + log.segment_size() > first && segment.start < target {
                if log.faults.take_sync() {
                    let error = std::io::Error::other("injected fsync failure");
                    return Err(FileError::new("fsync", segment.path(), error));
                }
                segment.sync()?;
            }
        }
        self.fsync_count.fetch_add(1, Ordering::Relaxed);
        self.latency.record(started.elapsed());
        Ok(true)
    }

    /// Publishes `target` as flushed after an fsync whose target was read at truncation epoch
    /// `epoch`. A truncation since then (invariant 1) may have lowered the flushed end below
    /// `target` and new records may already fill the cut range, written after the fsync
    /// began: the end is then left as the truncation set it, and the next pass flushes them.
    fn publish_flushed(&self, target: u64, epoch: u64) {
        let mut state = self.state.lock().expect("flush lock");
        if self.epoch() == epoch && target > state.progress.flushed_end {
            state.progress.flushed_end = target;
        }
        let woken = self.publish(&mut state, false);
        drop(state);
        woken.wake();
    }
}

/// The wait of [`FlushControl::durable`]: registered among the waiters (by its end) while
/// pending, so only the publish that answers it wakes it; dropping it unregisters it.
struct DurableWait<'a> {
    control: &'a FlushControl,
    end: u64,
    epoch: u64,
    /// Set once registered.
    ticket: Option<u64>,
}

impl Future for DurableWait<'_> {
    type Output = Result<(), DurabilityError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.control.state.lock().expect("flush lock");
        if let Some(outcome) = state.progress.outcome(this.end, this.epoch) {
            if let Some(ticket) = this.ticket.take() {
                state.waiters.remove(&(this.end, ticket));
            }
            return Poll::Ready(outcome);
        }
        let ticket = *this.ticket.get_or_insert_with(|| {
            state.next_ticket += 1;
            state.next_ticket - 1
        });
        // A publish that woke this wait without answering it (a cut of other records) took
        // its entry: it is put back.
        match state.waiters.entry((this.end, ticket)) {
            Entry::Occupied(mut entry) => match entry.get() {
                Wake::Task(waker) if waker.will_wake(cx.waker()) => {}
                _ => {
                    entry.insert(Wake::Task(cx.waker().clone()));
                }
            },
            Entry::Vacant(entry) => {
                entry.insert(Wake::Task(cx.waker().clone()));
            }
        }
        Poll::Pending
    }
}

impl Drop for DurableWait<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            let mut state = self.control.state.lock().expect("flush lock");
            state.waiters.remove(&(self.end, ticket));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control durable to 100 whose log was then cut to 50: the waiter of a record that
    /// ended at 80 (appended before the cut) is told `Truncated`, before and after later
    /// flushes pass 80 again with other records; a record below the cut is durable.
    fn cut_control() -> (FlushControl, u64) {
        let control = FlushControl::new(100, Duration::from_millis(500));
        let epoch = control.epoch();
        control.truncate_to(50);
        assert_eq!(control.flushed_end(), 50, "a cut lowers the flushed end");
        assert_eq!(control.epoch(), epoch + 1, "a cut starts a new epoch");
        (control, epoch)
    }

    /// The poll answers at once for a request above the flushed end (and for the close),
    /// and gives up after its bound when there is none, including after a cut lowered the
    /// flushed end below a request already served.
    #[test]
    fn the_flushers_poll_finds_a_request_at_once_and_gives_up_after_its_bound() {
        let control = FlushControl::new(100, Duration::from_millis(500));
        let started = Instant::now();
        assert_eq!(control.poll_for_work(), None, "nothing asked above 100");
        let waited = started.elapsed();
        assert!(
            waited >= FLUSHER_POLL_MAX && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        control.request(100);
        assert_eq!(control.poll_for_work(), None, "100 is durable already");
        control.request(150);
        assert_eq!(control.poll_for_work(), Some(false));
        assert!(!control.wait_for_work(None), "the sleeping wait agrees");
        control.close();
        assert_eq!(control.poll_for_work(), Some(true), "the close is seen too");
    }

    /// A flush across a roll syncs the new segment, which makes its directory entry durable
    /// before its bytes count as flushed (`Segment::create` leaves that to the first sync);
    /// a segment with no bytes below the target is left for a later flush.
    #[test]
    fn a_flush_across_a_roll_makes_each_new_segments_entry_durable() {
        use crate::commitlog::writer::{commit_chunks, TailChunk};
        let dir = tempfile::tempdir().expect("temp dir");
        let segment_size = 1 << 16;
        let log = CommitLog::open(dir.path(), segment_size, 4096).expect("log");
        // The first two chunks end their segments (as a roll's BLANK marker does).
        let chunk = |start: u64, ends_segment: bool| TailChunk {
            start,
            bytes: vec![7; 100],
            ends_segment,
        };
        let chunks = [
            chunk(0, true),
            chunk(segment_size, true),
            chunk(2 * segment_size, false),
        ];
        commit_chunks(&log, &chunks).expect("commit");
        let durable = || {
            log.segments()
                .iter()
                .map(|segment| segment.entry_durable())
                .collect::<Vec<_>>()
        };
        assert_eq!(durable(), [false, false, false], "created, not yet synced");
        let control = FlushControl::new(0, Duration::from_millis(500));
        control.flush_once(&log, segment_size + 100).expect("flush");
        assert_eq!(control.flushed_end(), segment_size + 100);
        assert_eq!(durable(), [true, true, false]);
        control
            .flush_once(&log, 2 * segment_size + 100)
            .expect("flush");
        assert_eq!(durable(), [true, true, true]);
    }

    #[test]
    fn waiter_of_a_cut_record_gets_truncated_not_durable() {
        let (control, epoch) = cut_control();
        assert!(matches!(
            control.wait_durable_since(80, epoch),
            Err(DurabilityError::Truncated { truncated_to: 50 })
        ));
        // 40 is below the cut and below the flushed end: it stayed durable.
        assert!(control.wait_durable_since(40, epoch).is_ok());

        // New records reuse [50, 120) and a flush covers them: the old waiter of 80 is still
        // told its record was cut, while a waiter from after the cut sees it durable. An
        // empty CommitLog has no segment to fsync, so `flush_once` only publishes the end.
        let dir = tempfile::tempdir().expect("tempdir");
        let log = CommitLog::open(dir.path(), 64 * 1024, 32 * 1024).expect("open empty CommitLog");
        control.flush_once(&log, 120).expect("flush");
        assert_eq!(control.flushed_end(), 120);
        assert!(matches!(
            control.wait_durable_since(80, epoch),
            Err(DurabilityError::Truncated { truncated_to: 50 })
        ));
        assert!(control.wait_durable_since(40, epoch).is_ok());
        assert!(control.wait_durable_since(80, control.epoch()).is_ok());
    }

    /// A truncation while an fsync runs: that fsync's publish must not raise the flushed end
    /// back over the cut, where new records written after the fsync began may already lie.
    /// A later flush publishes its own end as usual.
    #[test]
    fn a_truncation_during_an_fsync_is_not_undone_by_its_publish() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = CommitLog::open(dir.path(), 64 * 1024, 32 * 1024).expect("open empty CommitLog");
        let control = FlushControl::new(0, Duration::from_millis(500));
        log.faults.stall_syncs(true);
        std::thread::scope(|scope| {
            let flusher = scope.spawn(|| control.flush_once(&log, 120));
            let started = Instant::now();
            while log.faults.stalled_now() == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the fsync stalls"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            control.truncate_to(50);
            log.faults.stall_syncs(false);
            flusher.join().expect("flusher").expect("flush");
        });
        assert_eq!(
            control.flushed_end(),
            0,
            "the fsync that the cut overtook publishes nothing"
        );
        control.flush_once(&log, 90).expect("flush after the cut");
        assert_eq!(control.flushed_end(), 90);
    }

    #[tokio::test]
    async fn async_waiter_of_a_cut_record_gets_truncated_not_durable() {
        let (control, epoch) = cut_control();
        let waited = tokio::time::timeout(Duration::from_secs(5), control.durable(80, epoch))
            .await
            .expect("answered at once, not after a timeout");
        assert!(matches!(
            waited,
            Err(DurabilityError::Truncated { truncated_to: 50 })
        ));
        let below = tokio::time::timeout(Duration::from_secs(5), control.durable(40, epoch))
            .await
            .expect("answered at once");
        assert!(below.is_ok());
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct CountingWaker(AtomicU64);

    impl std::task::Wake for CountingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waiters(control: &FlushControl) -> Vec<u64> {
        let state = control.state.lock().expect("flush lock");
        state.waiters.keys().map(|(end, _)| *end).collect()
    }

    /// A publish wakes the async waiters it answers and no other; a cut of other records
    /// wakes every waiter, and the ones it does not answer wait on; a dropped wait leaves
    /// nothing behind.
    #[test]
    fn a_publish_wakes_only_the_async_waiters_it_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = CommitLog::open(dir.path(), 64 * 1024, 32 * 1024).expect("open empty CommitLog");
        let control = FlushControl::new(0, Duration::from_millis(500));
        let epoch = control.epoch();
        let counters: Vec<std::sync::Arc<CountingWaker>> =
            (0..3).map(|_| std::sync::Arc::default()).collect();
        let wakers: Vec<Waker> = counters.iter().map(|c| Waker::from(c.clone())).collect();
        let mut waits: Vec<_> = [10, 20, 30]
            .into_iter()
            .map(|end| {
                Box::pin(DurableWait {
                    control: &control,
                    end,
                    epoch,
                    ticket: None,
                })
            })
            .collect();
        for (wait, waker) in waits.iter_mut().zip(&wakers) {
            let polled = wait.as_mut().poll(&mut Context::from_waker(waker));
            assert!(polled.is_pending());
        }
        assert_eq!(waiters(&control), vec![10, 20, 30]);

        control.flush_once(&log, 20).expect("flush");
        let wakes: Vec<u64> = counters
            .iter()
            .map(|c| c.0.load(Ordering::SeqCst))
            .collect();
        assert_eq!(
            wakes,
            vec![1, 1, 0],
            "only the waiters of 10 and 20 are woken"
        );
        for (wait, waker) in waits.iter_mut().zip(&wakers).take(2) {
            let polled = wait.as_mut().poll(&mut Context::from_waker(waker));
            assert!(matches!(polled, Poll::Ready(Ok(()))), "{polled:?}");
        }
        assert_eq!(waiters(&control), vec![30]);

        // A cut at 100 (above 30) cuts nothing the waiter of 30 wrote: woken, it waits on.
        control.truncate_to(100);
        assert_eq!(
            counters[2].0.load(Ordering::SeqCst),
            1,
            "a cut wakes everyone"
        );
        assert_eq!(waiters(&control), Vec::<u64>::new());
        let polled = waits[2].as_mut().poll(&mut Context::from_waker(&wakers[2]));
        assert!(polled.is_pending(), "{polled:?}");
        assert_eq!(waiters(&control), vec![30], "registered again");
        waits.truncate(2);
        assert_eq!(
            waiters(&control),
            Vec::<u64>::new(),
            "a dropped wait unregisters"
        );
    }

    /// A blocking waiter woken by a cut that does not touch its record waits on and is
    /// answered by the next flush, not by its deadline.
    #[test]
    fn a_blocking_waiter_woken_by_a_cut_of_other_records_waits_for_its_flush() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = CommitLog::open(dir.path(), 64 * 1024, 32 * 1024).expect("open empty CommitLog");
        let control = FlushControl::new(30, Duration::from_secs(20));
        let epoch = control.epoch();
        let started = Instant::now();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| control.wait_durable_since(40, epoch));
            while waiters(&control).is_empty() {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the waiter waits"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            control.truncate_to(60);
            std::thread::sleep(Duration::from_millis(50));
            control.flush_once(&log, 50).expect("flush");
            assert!(waiter.join().expect("waiter").is_ok());
        });
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "answered by the flush, not the deadline: {:?}",
            started.elapsed()
        );
    }
}
