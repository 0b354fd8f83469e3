//! The next CommitLog segment's file, prepared ahead of the roll under mapped writes.
//!
//! Why: every extension of the active segment (`fallocate`, 32 MiB at a time) that reaches a
//! block group the filesystem has not loaded yet reads the group's bitmap, and under
//! ASYNC_FLUSH at full speed that read queued behind the flusher's writeback: 10-119 ms with
//! the committer, and every appender behind it, waiting (docs/performance.md). Once the
//! commits are half way through a segment, a thread creates the next segment's file and
//! reserves its blocks whole
//! (`FALLOC_FL_KEEP_SIZE`: allocated, but the file stays empty), so the committer's
//! extensions of it allocate nothing. RocketMQ prepares its next mapped file the same way
//! (`AllocateMappedFileService`).
//!
//! Invariants:
//! 1. The prepared file lives outside the segment directory (`<root>/commitlog.next`) and
//!    reads as an empty file; it becomes a segment only by a rename to the segment's name at
//!    the roll into the start it was prepared for. So recovery never takes it for a
//!    segment, and a leftover one (after a crash) is deleted when the store opens.
//! 2. The file at the path is touched by one side at a time: the committer renames it only
//!    while the state lock is held and a prepared file is ready, and the preparing thread
//!    drops a ready file under the same lock before it creates the next at the path.
//! 3. A failure never fails a roll: the segment is created as without preparation, and the
//!    failure is counted with the store's preallocation failures.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::error::FileError;
use crate::fsutil;

/// The prepared file, in the store's root directory.
pub const NEXT_FILE: &str = "commitlog.next";

/// The preparing side and the committer's side of the next segment's file.
#[derive(Debug)]
pub struct NextSegment {
    path: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The segment start the preparing thread should prepare next.
    wanted: Option<u64>,
    /// The start being prepared now.
    preparing: Option<u64>,
    /// A prepared file and the start it was prepared for.
    ready: Option<(u64, File)>,
    closed: bool,
}

impl NextSegment {
    /// The next segment's file for the store at `root`.
    pub fn new(root: &Path) -> NextSegment {
        NextSegment {
            path: root.join(NEXT_FILE),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    /// Deletes a prepared file left by an earlier run (invariant 1); done at open and at a
    /// clean close.
    pub fn discard_leftover(root: &Path) -> Result<(), FileError> {
        fsutil::remove_file(&root.join(NEXT_FILE))
    }

    /// Asks for the file of the segment at `start` to be prepared, unless it is prepared,
    /// being prepared or asked for already.
    pub fn request(&self, start: u64) {
        let mut state = self.lock();
        let known = state.wanted == Some(start)
            || state.preparing == Some(start)
            || state.ready.as_ref().is_some_and(|(s, _)| *s == start);
        if !known {
            state.wanted = Some(start);
            self.changed.notify_all();
        }
    }

    /// At the roll into `start`: renames the file prepared for `start` to `segment_path` and
    /// returns it (`None` when none is ready: the caller creates the segment).
    pub fn take(&self, start: u64, segment_path: &Path) -> Result<Option<File>, FileError> {
        let mut state = self.lock();
        let Some((prepared_for, _)) = &state.ready else {
            return Ok(None);
        };
        if *prepared_for != start {
            return Ok(None);
        }
        let (_, file) = state.ready.take().expect("checked above");
        std::fs::rename(&self.path, segment_path)
            .map_err(|e| FileError::new("rename the prepared segment", &self.path, e))?;
        Ok(Some(file))
    }

    /// The preparing thread: for each wanted start until [`NextSegment::close`], runs
    /// `before` (the caller's other work ahead of the roll), then prepares the file unless
    /// `before` said no; `failed` counts a failure (invariant 3).
    pub fn run(&self, segment_size: u64, before: &dyn Fn() -> bool, failed: &dyn Fn(&FileError)) {
        loop {
            let start = {
                let mut state = self.lock();
                loop {
                    if state.closed {
                        return;
                    }
                    if let Some(start) = state.wanted.take() {
                        // Invariant 2: the stale file goes before the path is reused.
                        state.ready = None;
                        state.preparing = Some(start);
                        break start;
                    }
                    state = self.changed.wait(state).expect("next segment lock");
                }
            };
            if !before() {
                self.lock().preparing = None;
                continue;
            }
            let prepared = self.prepare(segment_size);
            let mut state = self.lock();
            state.preparing = None;
            match prepared {
                Ok(file) if !state.closed => state.ready = Some((start, file)),
                Ok(_) => {}
                Err(error) => {
                    drop(state);
                    failed(&error);
                    self.remove_half_made(failed);
                }
            }
        }
    }

    /// Prepares the file for the segment at `start` on the caller's thread, before
    /// [`NextSegment::run`] starts: at open, for a log whose active segment has no file yet
    /// (nothing prepared it ahead). A failure, and a failure to delete the half-made file
    /// after it, is counted by `failed` (invariant 3); the roll then creates the segment.
    pub fn prepare_now(&self, start: u64, segment_size: u64, failed: &dyn Fn(&FileError)) {
        let mut state = self.lock();
        match self.prepare(segment_size) {
            Ok(file) => state.ready = Some((start, file)),
            Err(error) => {
                drop(state);
                failed(&error);
                self.remove_half_made(failed);
            }
        }
    }

    /// Stops [`NextSegment::run`] (the file stays until [`NextSegment::discard_leftover`]).
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Creates (or empties) the file at the path and reserves `segment_size` bytes of blocks
    /// for it without changing its length.
    fn prepare(&self, segment_size: u64) -> Result<File, FileError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)
            .map_err(|e| FileError::new("create the next segment", &self.path, e))?;
        super::segment::reserve_file(&file, segment_size)
            .map_err(|e| FileError::new("reserve the next segment", &self.path, e))?;
        Ok(file)
    }

    /// Deletes the file a failed preparation left, returning its reserved blocks now rather
    /// than at the next preparation or open; a failure to delete is counted as well. Only
    /// this thread writes the path while nothing is ready, so no roll can be renaming it.
    fn remove_half_made(&self, failed: &dyn Fn(&FileError)) {
        if let Err(error) = crate::fsutil::unlink(&self.path) {
            failed(&error);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("next segment lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Waits (bounded) until the prepared file for `start` is ready.
    fn wait_ready(next: &NextSegment, start: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while next.lock().ready.as_ref().map(|(s, _)| *s) != Some(start) {
            assert!(Instant::now() < deadline, "nothing prepared for {start}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_roll_takes_the_file_prepared_for_its_start_with_its_blocks_reserved() {
        let dir = tempfile::tempdir().expect("temp dir");
        let size = 1 << 20;
        let next = Arc::new(NextSegment::new(dir.path()));
        let runner = {
            let next = next.clone();
            std::thread::spawn(move || next.run(size, &|| true, &|e| panic!("{e}")))
        };
        let segment = |start: u64| dir.path().join(format!("{start:020}"));
        assert!(next.take(0, &segment(0)).expect("take").is_none());
        next.request(size);
        wait_ready(&next, size);
        next.request(size);
        assert!(next.lock().wanted.is_none(), "asked once");
        let prepared = dir.path().join(NEXT_FILE);
        let meta = std::fs::metadata(&prepared).expect("prepared file");
        assert_eq!(meta.len(), 0, "reads as empty");
        assert!(
            meta.blocks() * 512 >= size,
            "blocks reserved: {}",
            meta.blocks()
        );
        // Not for another start: kept until another is asked for, which replaces it.
        assert!(next
            .take(5 * size, &segment(5 * size))
            .expect("take")
            .is_none());
        assert!(next.lock().ready.is_some());
        next.request(6 * size);
        wait_ready(&next, 6 * size);
        let file = next
            .take(6 * size, &segment(6 * size))
            .expect("take")
            .expect("prepared for this start");
        assert!(!prepared.exists() || next.lock().ready.is_some());
        assert_eq!(file.metadata().expect("meta").len(), 0);
        assert!(segment(6 * size).exists(), "renamed to the segment's name");
        next.close();
        runner.join().expect("runner");
        NextSegment::discard_leftover(dir.path()).expect("discard");
        assert!(!prepared.exists());
    }

    /// At open: a file prepared on the caller's thread is taken by the roll into its start;
    /// one that cannot be prepared is counted and leaves nothing.
    #[test]
    fn a_file_prepared_at_open_is_taken_and_a_failed_one_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let next = NextSegment::new(dir.path());
        let failures = std::cell::Cell::new(0);
        let count = |_: &FileError| failures.set(failures.get() + 1);
        next.prepare_now(0, 1 << 62, &count);
        assert_eq!(failures.get(), 1);
        assert!(!dir.path().join(NEXT_FILE).exists());
        let segment = dir.path().join(format!("{:020}", 0));
        assert!(next.take(0, &segment).expect("take").is_none());
        next.prepare_now(0, 1 << 20, &count);
        assert_eq!(failures.get(), 1);
        let file = next.take(0, &segment).expect("take").expect("prepared");
        assert!(file.metadata().expect("meta").blocks() * 512 >= 1 << 20);
        assert!(segment.exists() && !dir.path().join(NEXT_FILE).exists());
    }

    #[test]
    fn a_failed_preparation_is_counted_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        // No file system reserves this many bytes: `reserve` fails after the file exists.
        let size = 1 << 62;
        let next = Arc::new(NextSegment::new(dir.path()));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let runner = {
            let (next, failures) = (next.clone(), failures.clone());
            std::thread::spawn(move || {
                let count = |e: &FileError| failures.lock().expect("lock").push(e.to_string());
                next.run(size, &|| true, &count)
            })
        };
        next.request(size);
        let deadline = Instant::now() + Duration::from_secs(10);
        while failures.lock().expect("lock").is_empty() || next.lock().preparing.is_some() {
            assert!(Instant::now() < deadline, "the preparation never failed");
            std::thread::sleep(Duration::from_millis(2));
        }
        next.close();
        runner.join().expect("runner");
        let failures = failures.lock().expect("lock").clone();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("reserve the next segment"),
            "{failures:?}"
        );
        assert!(
            !dir.path().join(NEXT_FILE).exists(),
            "the half-made file deleted"
        );
        assert!(next.lock().ready.is_none());
        assert!(next
            .take(size, &dir.path().join("x"))
            .expect("take")
            .is_none());
    }
}
