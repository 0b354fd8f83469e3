//! Mapped writes: the committer copies a chunk into a shared, writable memory map of the
//! active segment instead of calling `pwrite` for it (RocketMQ writes its CommitLog through
//! a `MappedByteBuffer` for the same reason). A copy into a `MAP_SHARED` mapping is a copy
//! into the page cache, exactly what a `pwrite` achieves, without the system call, so an
//! ASYNC_FLUSH acknowledgement still means "a process kill loses nothing"; the flusher's
//! `fdatasync` on the file writes pages dirtied through the map like any others.
//!
//! The hazard of a file map is the fault on a byte past the file's end (`SIGBUS`), and a
//! disk that fills while a dirty page is written back. So copies go only into space the
//! file already holds, allocated by `fallocate` (`super::preallocation`, whose record tells
//! recovery that zeros after the data are space): [`MappedSpan::room`] is the file length
//! the copies may reach, raised only after an extension succeeded, lowered *before* any
//! `set_len` that shortens the file (trim, truncation), and both under the same lock as the
//! copies. Anything that does not fit goes through `pwrite`, which reports a full disk as an
//! error.
//!
//! Readers never touch this map: they copy out of a read-only map of their own
//! (`super::read_map`) or read the file (`pread`, `sendfile`), all sharing the page cache the
//! copies went into.
//!
//! Page-table upkeep, in windows of [`WINDOW_BYTES`]: a fault per fresh page (an exception,
//! a readahead that zero-fills the unwritten block, a `page_mkwrite`) costs more than the
//! copy, so the window ahead of the copies is populated by `madvise(MADV_POPULATE_WRITE)`, in
//! steps of [`POPULATE_STEP_BYTES`] (one call per window held a CPU for milliseconds);
//! and every page left mapped is one the flusher's `fdatasync` must write-protect again, with
//! a TLB shootdown (an inter-processor interrupt) per page, so the pages behind the copies are
//! unmapped from this process in whole windows (`MADV_DONTNEED`: for a shared file map the
//! dirty pages stay in the page cache, to be written back; nothing is lost). Both are hints:
//! a failure leaves the copies correct, only slower, and is not retried for that window.
//! With a populating thread (`super::populate_ahead`) the committer asks it for the next
//! window whenever it enters one, and populates a window itself only when the thread has not.

use std::fs::File;
use std::sync::Arc;

use super::file_map::{FileMap, MapAccess};
use super::populate_ahead::{page_floor, Job, PopulateAhead, PopulatedMark};

/// Span populated ahead of the copies, and released behind them, at a time.
pub(super) const WINDOW_BYTES: u64 = 1 << 20;
/// Most bytes one `madvise(MADV_POPULATE_WRITE)` covers: a window is populated in steps of
/// this size ([`populate_in_steps`]). A populate runs in the kernel with no point where the
/// scheduler takes the CPU back (a kernel built without preemption, as this project's VMs
/// run), so one call for a whole window held its CPU for about 20 ms where fresh pages came
/// slowly (after a few GB had gone through the page cache), and the dispatcher and the
/// consumers runnable on that CPU waited for it: e2e delivery p999 of 10-20 ms. Between
/// steps the populating thread yields its CPU to a waiting thread (session 27).
pub(super) const POPULATE_STEP_BYTES: u64 = 64 << 10;
/// Largest chunk copied through the map; larger ones are written with `pwrite`. The map
/// saves a system call per commit, which matters for small commits; a large commit covers
/// whole pages, which `pwrite` fills without zeroing them first, while a populated page of
/// the map was zero-filled (windowed batches of 64 were about 10% slower all mapped).
pub(super) const COPY_MAX_BYTES: usize = 16 << 10;

/// A shared, writable mapping of a whole segment span (address space only: pages are
/// touched only below [`MappedSpan::room`]).
#[derive(Debug)]
pub(super) struct MappedSpan {
    /// The mapping, writable, of the whole segment span (shared with populating jobs).
    map: Arc<FileMap>,
    /// Bytes from the start of the file that exist (are allocated); copies stay below it.
    room: u64,
    /// End of the span populated ahead of the copies (by the committer or the thread).
    populated: Arc<PopulatedMark>,
    /// End of the span last asked of the populating thread.
    requested: u64,
    /// Start of the span still mapped: pages below it were released.
    released: u64,
}

impl MappedSpan {
    /// Maps `len` bytes of `file` from its start, shared and writable. Nothing is touched.
    pub(super) fn map(file: &File, len: u64) -> std::io::Result<MappedSpan> {
        let map = FileMap::map(file, len, MapAccess::ReadWrite)?;
        // No readahead on this map's faults: a populate then fills exactly the pages it is
        // asked for, 4 KiB each. With readahead each fault zero-filled large folios past the
        // window, and one 64 KiB step kept its CPU for about 18 ms after a few GB had gone
        // through the page cache (scheduler traces, session 27); e2e delivery p999 went from
        // 14-21 ms to 3-5 ms without it (docs/performance.md).
        advise(&map, 0, len, libc::MADV_RANDOM);
        Ok(MappedSpan {
            map: Arc::new(map),
            room: 0,
            populated: Arc::default(),
            requested: 0,
            released: 0,
        })
    }

    /// The file length copies may reach.
    pub(super) fn room(&self) -> u64 {
        self.room
    }

    /// The file now holds `len` bytes of allocated space (after an extension, or a length
    /// just measured). Never past the mapping.
    pub(super) fn set_room(&mut self, len: u64) {
        self.room = len.min(self.map.len() as u64);
    }

    /// Lowers the room before the file is cut to `len` bytes.
    pub(super) fn lower_room(&mut self, len: u64) {
        self.room = self.room.min(len);
        self.populated.lower(len);
        self.requested = self.requested.min(len);
        self.released = self.released.min(len);
    }

    /// Copies `bytes` to offset `at`; `false` (nothing copied) when they do not fit the room
    /// or are more than [`COPY_MAX_BYTES`]. With `ahead`, the window after the one the copy
    /// enters is populated by that thread.
    pub(super) fn copy(&mut self, at: u64, bytes: &[u8], ahead: Option<&PopulateAhead>) -> bool {
        if bytes.len() > COPY_MAX_BYTES {
            return false;
        }
        let Some(end) = at.checked_add(bytes.len() as u64) else {
            return false;
        };
        if end > self.room {
            return false;
        }
        if end > self.populated.get() {
            self.populate_from(at, ahead);
        }
        if let Some(ahead) = ahead {
            self.keep_a_window_ahead(end, ahead);
        }
        // SAFETY: `at + bytes.len() <= room <= len`, so the destination lies inside the
        // mapping, and below the file's length, which only shrinks after `lower_room` (same
        // lock as this copy): no page touched here is past the end of the file. The source
        // is a Rust slice, which cannot overlap a mapping no Rust reference points into.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.base().as_ptr().add(at as usize),
                bytes.len(),
            );
        }
        self.release_below(at);
        true
    }

    /// Populates the window from the page holding `at` (within the room) on the committer's
    /// thread, counted by `ahead` (when there is a populating thread) as one it did not reach.
    fn populate_from(&mut self, at: u64, ahead: Option<&PopulateAhead>) {
        let from = page_floor(at);
        let to = (from + WINDOW_BYTES).min(self.room);
        // Marked done whatever the outcome: a failed hint is not retried per copy.
        self.populated.raise(to);
        populate_in_steps(&self.map, from, to, |_| {});
        if let Some(ahead) = ahead {
            ahead.note_inline();
        }
    }

    /// Asks the populating thread for the next window once the copies reach `end`, less
    /// than a window before the end of what is populated or asked for already.
    fn keep_a_window_ahead(&mut self, end: u64, ahead: &PopulateAhead) {
        let from = page_floor(self.populated.get().max(self.requested));
        if end.saturating_add(WINDOW_BYTES) <= from {
            return;
        }
        let to = from.saturating_add(WINDOW_BYTES).min(self.room);
        if to <= from {
            return;
        }
        self.requested = to;
        ahead.request(Job {
            map: self.map.clone(),
            from,
            to,
            mark: self.populated.clone(),
        });
    }

    /// Turns off readahead on faults of the map (tests that watch which pages a populate
    /// brought into the page cache).
    #[cfg(test)]
    pub(super) fn without_readahead(&self) {
        advise(&self.map, 0, self.map.len() as u64, libc::MADV_RANDOM);
    }

    /// Releases the whole windows below the page holding `at` (no copy goes there again).
    fn release_below(&mut self, at: u64) {
        let below = at - at % WINDOW_BYTES;
        if below > self.released {
            let from = self.released;
            self.released = below;
            advise(&self.map, from, below, libc::MADV_DONTNEED);
        }
    }
}

/// `madvise(advice)` over `[from, to)` of `map` (page-aligned `from`); a failure is logged at
/// debug level and otherwise ignored (see the module docs). A range not inside the mapping is
/// skipped.
pub(super) fn advise(map: &FileMap, from: u64, to: u64, advice: libc::c_int) {
    if to <= from || advice < 0 || to > map.len() as u64 {
        return;
    }
    // SAFETY: `[from, to)` lies inside the mapping (checked above), `from` is page-aligned.
    // Populating pages, or dropping this process's page-table entries of a shared file map,
    // changes no byte any Rust value refers to; a page past the file's end makes
    // `MADV_POPULATE_WRITE` fail with EFAULT rather than raise SIGBUS (`super::populate_ahead`
    // invariant 1), and `MADV_DONTNEED` there drops nothing.
    let rc = unsafe {
        libc::madvise(
            map.base().as_ptr().add(from as usize).cast(),
            (to - from) as usize,
            advice,
        )
    };
    if rc != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            advice,
            "madvise on the CommitLog map failed"
        );
    }
}

/// Populates `[from, to)` of `map` (page-aligned `from`) for writing, one
/// [`POPULATE_STEP_BYTES`] step per `madvise`, and tells `step_done` the end of each step as
/// it completes. Failures are ignored as in [`advise`].
pub(super) fn populate_in_steps(map: &FileMap, from: u64, to: u64, mut step_done: impl FnMut(u64)) {
    let mut at = from;
    while at < to {
        let end = at.saturating_add(POPULATE_STEP_BYTES).min(to);
        advise(map, at, end, populate_advice());
        step_done(end);
        at = end;
    }
}

/// The system's page size.
pub(super) fn page_size() -> u64 {
    // SAFETY: `sysconf` reads a constant of the system and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// `MADV_POPULATE_WRITE` where the platform has it, else no advice (-1).
pub(super) fn populate_advice() -> libc::c_int {
    #[cfg(target_os = "linux")]
    {
        libc::MADV_POPULATE_WRITE
    }
    #[cfg(not(target_os = "linux"))]
    {
        -1
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn copies_reach_the_file_only_inside_the_room() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = super::super::file_map::scratch_file(dir.path());
        let mut span = MappedSpan::map(&file, 1 << 20).expect("map");
        assert!(
            !span.copy(0, b"abc", None),
            "no room before the file has space"
        );
        file.set_len(8192).expect("extend");
        span.set_room(8192);
        assert!(span.copy(4090, b"across a page", None));
        assert!(
            !span.copy(8190, b"past", None),
            "must not reach past the room"
        );
        let mut read = [0u8; 13];
        file.read_exact_at(&mut read, 4090).expect("read back");
        assert_eq!(&read, b"across a page", "the file sees the copy");
        span.lower_room(4096);
        assert!(!span.copy(4095, b"xy", None));
        span.set_room(u64::MAX);
        assert_eq!(span.room(), 1 << 20, "never past the mapping");
        file.set_len(1 << 20).expect("extend");
        let large = vec![7u8; COPY_MAX_BYTES + 1];
        assert!(
            !span.copy(0, &large, None),
            "large commits are left to pwrite"
        );
        assert!(span.copy(0, &large[..COPY_MAX_BYTES], None));
    }
}
