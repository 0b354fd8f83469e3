//! The committer's map populated ahead of its copies by a background thread.
//!
//! Why: the committer populates each fresh window of its map of the active segment with
//! `madvise(MADV_POPULATE_WRITE)` (`super::mapping`, in steps): a fault's work per page (a readahead
//! zero-filling the unwritten block, a `page_mkwrite`), 15% of the appending thread's time in
//! `bench store` (session 25), done while every appender waits behind the committer. So while
//! the copies fill one window, the store's `ferromq-populate` thread populates the next, and
//! the committer populates a window itself only when the thread has not reached it yet.
//! RocketMQ warms its next mapped file ahead in the same spirit (`warmMappedFile`).
//!
//! Invariants:
//! 1. Populating is only a hint: it changes no byte of the file, and a page past the file's
//!    end fails the call (`EFAULT`) instead of raising `SIGBUS` (the kernel's rule for
//!    `MADV_POPULATE_*`). So the thread may run at any moment relative to the committer's
//!    copies and to a cut of the file; a cut only makes its work useless, and a slow or failed
//!    populate costs speed, never correctness.
//! 2. A job holds the mapping (`Arc<FileMap>`): the addresses it populates stay this
//!    mapping's until it ends, even if the segment is dropped meanwhile.
//! 3. Bounded: one job waits at most (a single slot); a newer request replaces the waiting
//!    one, which is stale by then (the committer has moved past it).
//! 4. A span's populated mark ([`PopulatedMark`]) only grows contiguously: the thread raises it
//!    to a job's end only when the mark already reaches the job's start, so "the mark covers
//!    this copy" means every window below it was populated (by the thread or the committer),
//!    or released behind the copies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::file_map::FileMap;

/// End of the span of one map known populated: shared by the committer's span and the
/// thread's jobs for it (invariant 4).
#[derive(Debug, Default)]
pub(super) struct PopulatedMark(AtomicU64);

impl PopulatedMark {
    /// The end of the populated span.
    pub(super) fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// The committer populated up to `to` itself.
    pub(super) fn raise(&self, to: u64) {
        self.0.fetch_max(to, Ordering::AcqRel);
    }

    /// Lowers the mark before the file is cut to `len`.
    pub(super) fn lower(&self, len: u64) {
        self.0.fetch_min(len, Ordering::AcqRel);
    }

    /// The thread populated `[from, to)`: raises the mark to `to` if it reached `from`.
    fn extend(&self, from: u64, to: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |mark| {
                (from <= mark && mark < to).then_some(to)
            });
    }
}

/// A window of a map to populate.
#[derive(Debug)]
pub(super) struct Job {
    /// The mapping (invariant 2).
    pub(super) map: Arc<FileMap>,
    /// The window, page-aligned `from`, `to` at most the room when asked for.
    pub(super) from: u64,
    pub(super) to: u64,
    /// The span's mark, raised when the window is done.
    pub(super) mark: Arc<PopulatedMark>,
}

impl Job {
    /// Populates what of the window the mark does not cover yet, in steps
    /// (`mapping::populate_in_steps`), raising the mark after each so the committer's copies
    /// can use a part before the whole is done, and yielding the CPU between them (the
    /// thread is background work); `true` if it populated anything.
    fn run(&self) -> bool {
        let from = page_floor(self.from.max(self.mark.get()));
        if from >= self.to {
            return false;
        }
        super::mapping::populate_in_steps(&self.map, from, self.to, |done| {
            self.mark.extend(self.from, done);
            // Gives the CPU to any thread waiting for it (the dispatcher, a consumer): a
            // return to user space alone did not, and the thread kept its CPU for the whole
            // window (7-18 ms) in the scheduler's traces.
            std::thread::yield_now();
        });
        true
    }
}

/// The queue between the committer and the populating thread, and its counters.
#[derive(Debug, Default)]
pub struct PopulateAhead {
    slot: Mutex<Slot>,
    changed: Condvar,
    /// Windows the thread populated.
    windows_ahead: AtomicU64,
    /// Windows the committer had to populate itself (the thread had not reached them).
    windows_inline: AtomicU64,
}

#[derive(Debug, Default)]
struct Slot {
    waiting: Option<Job>,
    closed: bool,
}

impl PopulateAhead {
    /// A queue with no thread yet: [`PopulateAhead::run`] is the thread's body.
    pub fn new() -> PopulateAhead {
        PopulateAhead::default()
    }

    /// Asks for `job` to be run, replacing a job still waiting (invariant 3).
    pub(super) fn request(&self, job: Job) {
        let mut slot = self.lock();
        if slot.closed {
            return;
        }
        slot.waiting = Some(job);
        self.changed.notify_one();
    }

    /// Counts a window the committer populated itself.
    pub(super) fn note_inline(&self) {
        self.windows_inline.fetch_add(1, Ordering::Relaxed);
    }

    /// The thread: runs each requested job until [`PopulateAhead::close`].
    pub fn run(&self) {
        while let Some(job) = self.next_job() {
            self.run_job(&job);
        }
    }

    /// Stops [`PopulateAhead::run`]; a waiting job is dropped (and its mapping with it).
    pub fn close(&self) {
        let mut slot = self.lock();
        slot.closed = true;
        slot.waiting = None;
        self.changed.notify_all();
    }

    /// Windows populated by the thread and by the committer so far.
    pub fn windows(&self) -> (u64, u64) {
        (
            self.windows_ahead.load(Ordering::Relaxed),
            self.windows_inline.load(Ordering::Relaxed),
        )
    }

    fn run_job(&self, job: &Job) {
        if job.run() {
            self.windows_ahead.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits for the next job; `None` once closed.
    fn next_job(&self) -> Option<Job> {
        let mut slot = self.lock();
        loop {
            if slot.closed {
                return None;
            }
            if let Some(job) = slot.waiting.take() {
                return Some(job);
            }
            slot = self.changed.wait(slot).expect("populate-ahead lock");
        }
    }

    /// Runs the waiting job on the caller's thread (tests drive the thread's work by hand).
    #[cfg(test)]
    pub(super) fn run_waiting(&self) -> bool {
        let job = self.lock().waiting.take();
        job.is_some_and(|job| {
            self.run_job(&job);
            true
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().expect("populate-ahead lock")
    }
}

/// `at` rounded down to its page.
pub(super) fn page_floor(at: u64) -> u64 {
    at - at % super::mapping::page_size()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::file_map::{scratch_file, MapAccess};
    use super::super::mapping::{page_size, MappedSpan, WINDOW_BYTES};
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::time::{Duration, Instant};

    const W: u64 = WINDOW_BYTES;

    /// Pages of `[from, to)` of `file` in the page cache (`mincore` over a read-only map).
    fn cached_pages(file: &File, from: u64, to: u64) -> usize {
        let map = FileMap::map(file, to, MapAccess::ReadOnly).expect("read map");
        let pages = ((to - from) / page_size()) as usize;
        let mut present = vec![0u8; pages];
        // SAFETY: `[from, to)` lies inside the fresh mapping (`from` page-aligned) and
        // `present` holds one byte per page of it, as mincore writes.
        let rc = unsafe {
            libc::mincore(
                map.base().as_ptr().add(from as usize).cast(),
                (to - from) as usize,
                present.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        present.iter().filter(|p| **p & 1 == 1).count()
    }

    /// A map of a 4-window file with room for all of it, populated without readahead (so
    /// only what is populated is in the page cache).
    fn span_over(dir: &std::path::Path) -> (File, MappedSpan) {
        let file = scratch_file(dir);
        file.set_len(4 * W).expect("extend");
        let mut span = MappedSpan::map(&file, 4 * W).expect("map");
        span.without_readahead();
        span.set_room(4 * W);
        (file, span)
    }

    #[test]
    fn the_thread_populates_the_next_window_and_the_committer_only_those_it_missed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (file, mut span) = span_over(dir.path());
        let ahead = PopulateAhead::new();
        let pages = (W / page_size()) as usize;
        assert!(span.copy(0, b"first", Some(&ahead)));
        assert_eq!(
            ahead.windows(),
            (0, 1),
            "the first window is the committer's"
        );
        assert_eq!(
            cached_pages(&file, W, 2 * W),
            0,
            "the next one is only asked for"
        );
        assert!(ahead.run_waiting(), "the next window was asked for");
        assert_eq!(ahead.windows(), (1, 1));
        assert_eq!(cached_pages(&file, W, 2 * W), pages, "populated by the job");
        assert!(span.copy(W + 10, b"second", Some(&ahead)));
        assert_eq!(
            ahead.windows(),
            (1, 1),
            "the committer found its window ready"
        );
        // The thread misses the third window: the committer populates it, and the stale
        // request is replaced by one for the window after.
        assert!(span.copy(2 * W + 5, b"third", Some(&ahead)));
        assert_eq!(ahead.windows(), (1, 2));
        assert!(ahead.run_waiting());
        assert!(!ahead.run_waiting(), "one job waits at most");
        assert_eq!(ahead.windows(), (2, 2));
        assert_eq!(cached_pages(&file, 3 * W, 4 * W), pages);
        for (at, want) in [
            (0, &b"first"[..]),
            (W + 10, b"second"),
            (2 * W + 5, b"third"),
        ] {
            let mut got = vec![0u8; want.len()];
            file.read_exact_at(&mut got, at).expect("read back");
            assert_eq!(got, want, "bytes at {at}");
        }
    }

    #[test]
    fn a_job_for_a_file_cut_meanwhile_does_nothing_harmful() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (file, mut span) = span_over(dir.path());
        let ahead = PopulateAhead::new();
        assert!(span.copy(0, b"kept", Some(&ahead)));
        let cut = page_size();
        span.lower_room(cut);
        file.set_len(cut).expect("cut");
        // The job's window lies past the file's end now: populating it must fail quietly
        // (no SIGBUS, no growth of the file).
        assert!(ahead.run_waiting());
        assert_eq!(file.metadata().expect("meta").len(), cut);
        let mut got = [0u8; 4];
        file.read_exact_at(&mut got, 0).expect("read back");
        assert_eq!(&got, b"kept");
        assert!(
            !span.copy(cut, b"x", Some(&ahead)),
            "no copy past the lowered room"
        );
    }

    #[test]
    fn a_window_is_populated_in_steps_each_done_before_the_next() {
        use super::super::mapping::{advise, populate_in_steps, POPULATE_STEP_BYTES};
        let dir = tempfile::tempdir().expect("temp dir");
        let file = scratch_file(dir.path());
        file.set_len(W).expect("extend");
        let map = Arc::new(FileMap::map(&file, W, MapAccess::ReadWrite).expect("map"));
        advise(&map, 0, W, libc::MADV_RANDOM);
        let mut steps = Vec::new();
        populate_in_steps(&map, 0, W, |end| {
            steps.push((end, cached_pages(&file, 0, end), cached_pages(&file, 0, W)));
        });
        let step_pages = (POPULATE_STEP_BYTES / page_size()) as usize;
        let want: Vec<(u64, usize, usize)> = (1..=W / POPULATE_STEP_BYTES)
            .map(|n| {
                let pages = n as usize * step_pages;
                (n * POPULATE_STEP_BYTES, pages, pages)
            })
            .collect();
        assert_eq!(
            steps, want,
            "one step of {POPULATE_STEP_BYTES} B per call, each populated when reported, none ahead"
        );
        // A job raises its span's mark to the window's end through the steps.
        let mark = Arc::new(PopulatedMark::default());
        let job = Job {
            map: map.clone(),
            from: 0,
            to: W,
            mark: mark.clone(),
        };
        assert!(job.run());
        assert_eq!(mark.get(), W);
        assert!(!job.run(), "nothing left to populate");
    }

    #[test]
    fn the_committers_map_populates_no_page_past_the_window() {
        // Without `MADV_RANDOM` on the map, a populate's faults read ahead past the window in
        // large folios, zero-filling pages nobody asked for, while holding the CPU.
        let dir = tempfile::tempdir().expect("temp dir");
        let file = scratch_file(dir.path());
        file.set_len(4 * W).expect("extend");
        let mut span = MappedSpan::map(&file, 4 * W).expect("map");
        span.set_room(4 * W);
        assert!(span.copy(0, b"one", None));
        assert_eq!(cached_pages(&file, 0, W), (W / page_size()) as usize);
        assert_eq!(cached_pages(&file, W, 4 * W), 0, "nothing past the window");
    }

    #[test]
    fn the_mark_grows_only_from_where_it_reaches() {
        let mark = PopulatedMark::default();
        mark.extend(W, 2 * W);
        assert_eq!(mark.get(), 0, "a window after a gap does not count");
        mark.raise(W);
        mark.extend(W, 2 * W);
        assert_eq!(mark.get(), 2 * W);
        mark.extend(0, W);
        assert_eq!(mark.get(), 2 * W, "never lowered by an old window");
        mark.lower(W / 2);
        assert_eq!(mark.get(), W / 2);
    }

    #[test]
    fn the_thread_serves_requests_until_closed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_file, mut span) = span_over(dir.path());
        let ahead = Arc::new(PopulateAhead::new());
        let thread = {
            let ahead = ahead.clone();
            std::thread::spawn(move || ahead.run())
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(span.copy(0, b"a", Some(&ahead)));
        while ahead.windows().0 < 1 {
            assert!(Instant::now() < deadline, "the thread ran no job");
            std::thread::sleep(Duration::from_millis(1));
        }
        ahead.close();
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "the thread outlived its close");
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.join().expect("the thread ended cleanly");
        assert!(
            span.copy(W, b"b", Some(&ahead)),
            "copies go on after a close"
        );
        assert!(
            ahead.lock().waiting.is_none(),
            "a closed queue keeps no job"
        );
    }
}
