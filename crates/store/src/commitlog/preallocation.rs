//! Preallocated space at the end of the active segment.
//!
//! Why: an `fdatasync` after a write that grows the file must also write the new size; one
//! after a small write inside space the file already has does not. On this project's disks
//! (ext4) that is 160–210 µs against 110–130 µs per fsync for a 300-byte write, most of a
//! SYNC_FLUSH single send. So before a commit writes past the file's length, the committer
//! extends the file (`fallocate`: reserved blocks that read as zeros, not sparse)
//! [`PREALLOCATION_STEP_BYTES`] ahead, never past the segment's end.
//!
//! Under SYNC_FLUSH for that reason, with the rule below. Under ASYNC_FLUSH with plain
//! writes there is nothing to gain (windowed sends were 3–5% slower with it); with mapped
//! writes (`super::mapping`, the ASYNC_FLUSH default) the extension is what makes the map
//! safe to copy into, so every commit past the file's length extends it, by
//! [`MAPPED_STEP_BYTES`], whatever the commit sizes. There a record covers the active
//! segment and the next ones ([`MAPPED_COVER_SEGMENTS`]): a record fsync per step queued
//! behind the flusher's writeback of the same disk and stalled the committer for up to
//! 45 ms, and one per segment, written at its first extension, up to 140 ms; so half way
//! through each segment the thread that prepares the next segment's file
//! (`super::next_segment`) first moves the record to the active segment
//! ([`Preallocator::advance_cover`]), and a roll finds its segment covered. It tells
//! recovery no less than per-step records would: under mapped writes data never grows the
//! file, so zeros after the data are space or an unflushed suffix, which ASYNC_FLUSH may
//! lose in an OS crash either way.
//!
//! Only while commits are small: the first write into a reserved block converts it, and a
//! commit of many blocks costs as much as an append or more (4 KiB: 196–200 µs either way;
//! 32 KiB: 209–216 µs against 200–213 µs; 64 SYNC_FLUSH writers lost 8% of their
//! throughput). The committer keeps a moving average of its commit sizes and extends the
//! file only while it is at most [`SMALL_COMMIT_MAX_BYTES`]; otherwise commits append.
//!
//! The cost is that a segment file may now end in zeros that are not data. Zeros at the end
//! of a log are also what a lost write looks like (the file grew, its data never reached
//! the disk), and recovery reports those as a cut. To tell the two apart, the extension is
//! recorded durably *before* it is made, in the store's `preallocation` file
//! ([`Allocation`]): zero bytes at the end of the last segment, below the recorded
//! allocation, are preallocated space, trimmed without a report; anything else after the
//! log's end is reported as before.
//!
//! Invariants:
//! 1. The record is durable before the file is extended, so a file longer than its data
//!    because of preallocation always has a record covering the extension (a crash between
//!    the two leaves a record covering more than the file, which is harmless).
//! 2. A clean close trims the last segment to its written end and records that length, and
//!    a segment is trimmed to its end marker when the log rolls to the next, so a closed
//!    store's files end at their data, as before preallocation.
//! 3. A failed preallocation never fails a write: the commit goes on as a plain append (which
//!    reports a full disk itself), and the failure is counted.
//! 4. Mapped writes only reach space an extension (or a measurement of the file) has shown
//!    to exist: the segment's map room is raised after `fallocate` returned, never before.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::next_segment::NextSegment;
use super::populate_ahead::PopulateAhead;
use super::{CommitLog, Segment};
use crate::error::FileError;

/// How far past the bytes about to be written a preallocation extends the file (less at the
/// end of a segment). One extension, with its record and journal commit, per this many bytes.
pub const PREALLOCATION_STEP_BYTES: u64 = 4 << 20;
/// Average commit size up to which extending pays (see the module docs).
pub const SMALL_COMMIT_MAX_BYTES: u64 = 2048;
/// Zeroed space: average commit size up to which the zeroing thread keeps zeros ahead.
/// Under SYNC_FLUSH a commit is what one fsync covers. The zeros save a fixed cost per
/// fsync (the allocation it no longer writes: 137-140 against 216-240 us for 32 KiB on this
/// project's disk) and cost CPU per byte (every byte of log is written twice through the
/// page cache); batches of 64 through the broker commit about 110 KiB per fsync, are
/// bound by the CPU, and lost 10-19% of their throughput with zeros ahead. Windowed and
/// single sends (0.3-16 KiB) and 64 store writers of 1 KiB (33 KiB) gain.
pub const ZEROING_COMMIT_MAX_BYTES: u64 = 64 << 10;
/// How far past the bytes about to be written an extension for mapped writes reaches: one
/// extension (a record fsync and an `fallocate`) per this many bytes of log.
pub const MAPPED_STEP_BYTES: u64 = 32 << 20;
/// Mapped writes: segments a record covers, from the active one on, so the next segments
/// are covered before the log rolls into them. Two would do when the record moves half way
/// through every segment; the margin covers a record write that waited long behind the
/// disk's queue while the log rolled on.
pub const MAPPED_COVER_SEGMENTS: u64 = 4;
/// Weight of the newest commit in the moving average of commit sizes: 1 / this.
const COMMIT_AVERAGE_WINDOW: u64 = 8;
/// The record file, in the store's root directory.
pub const RECORD_FILE: &str = "preallocation";
/// Bytes read per step when measuring the zeros at the end of a file.
const ZERO_SCAN_WINDOW_BYTES: u64 = 1 << 20;
/// Encoded size of an [`Allocation`]: start, length, CRC-32 of both.
const RECORD_LEN: usize = 20;

/// The space the last extension gave a segment file: the physical span
/// `[segment_start, segment_start + len)` may hold space (zeros that are not data). Under
/// mapped writes `len` passes the segment's end, and the span covers the next segments too
/// ([`MAPPED_COVER_SEGMENTS`] in all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The segment's start offset.
    pub segment_start: u64,
    /// The file's length after the extension (the span's length).
    pub len: u64,
}

impl Allocation {
    /// The end of the covered span (physical).
    fn span_end(&self) -> u64 {
        self.segment_start.saturating_add(self.len)
    }

    /// Whether the span covers the physical range `[from, to)`.
    fn covers(&self, from: u64, to: u64) -> bool {
        self.segment_start <= from && to <= self.span_end()
    }

    /// How many bytes from the start of the segment at `segment_start` the span covers
    /// (zero when it does not reach it).
    fn covered_in(&self, segment_start: u64) -> u64 {
        if segment_start < self.segment_start {
            return 0;
        }
        self.span_end().saturating_sub(segment_start)
    }

    fn encode(&self) -> [u8; RECORD_LEN] {
        let mut bytes = [0u8; RECORD_LEN];
        bytes[..8].copy_from_slice(&self.segment_start.to_be_bytes());
        bytes[8..16].copy_from_slice(&self.len.to_be_bytes());
        let crc = crc32fast::hash(&bytes[..16]);
        bytes[16..].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    /// `None` for anything but a whole record with a matching CRC (a torn or foreign file
    /// covers nothing, so zeros after the log are reported, the safe side).
    fn decode(bytes: &[u8]) -> Option<Allocation> {
        let bytes: &[u8; RECORD_LEN] = bytes.try_into().ok()?;
        let crc = u32::from_be_bytes(bytes[16..].try_into().ok()?);
        (crc32fast::hash(&bytes[..16]) == crc).then(|| Allocation {
            segment_start: u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
            len: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        })
    }
}

/// Reads the allocation record under `root`; `None` when there is none or it does not verify.
pub fn read_record(root: &Path) -> Result<Option<Allocation>, FileError> {
    let path = root.join(RECORD_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Allocation::decode(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::new("read", &path, e)),
    }
}

/// Extends the active segment ahead of the writes (see the module docs).
#[derive(Debug)]
pub struct Preallocator {
    path: PathBuf,
    /// The record file, opened at the first extension, and the allocation it last made durable.
    record: Mutex<RecordFile>,
    /// Cleared when the filesystem cannot preallocate: commits append plainly from then on.
    supported: AtomicBool,
    failures: AtomicU64,
    /// Moving average of commit sizes, bytes (written by the serialised committer only).
    average_commit: AtomicU64,
    /// After a failure, no new attempt before the log reaches this physical offset (the
    /// failed extension's end): one attempt, one record fsync and one warning per step on a
    /// full disk, not one per commit.
    retry_from: AtomicU64,
    /// Extending for mapped writes (every commit past the file) rather than for small
    /// SYNC_FLUSH commits.
    mapped: bool,
    /// Zeroed space (SYNC_FLUSH, `zeroed_space`): a background thread writes zeros ahead of
    /// the commits (`store::zero_ahead`); commits never extend the file themselves.
    zeroing: bool,
    /// Mapped writes: the physical span the durable record covers, `[covered_from,
    /// covered_to)` (empty when none is known durable), read by the committer without the
    /// record's lock, so a commit never waits for a record fsync made ahead of the roll
    /// (`advance_cover`). Written under the lock after the record is durable; while a new
    /// record is written the old span stays, which is sound because every record written
    /// covers the segment the committer writes (see `advance_cover`).
    covered_from: AtomicU64,
    covered_to: AtomicU64,
    /// Mapped writes: the next segment's file, prepared ahead of the roll.
    next: Option<NextSegment>,
    /// Mapped writes: the map's next window, populated ahead of the copies.
    populate: Option<PopulateAhead>,
    /// The segment start whose preparation the committer last asked for.
    next_requested: AtomicU64,
}

/// The `preallocation` file and what it says.
#[derive(Debug, Default)]
struct RecordFile {
    file: Option<File>,
    /// The allocation last written and synced (`None` before the first, or after a failure).
    durable: Option<Allocation>,
}

impl Preallocator {
    /// A preallocator keeping its record under the store's `root`.
    pub fn new(root: &Path) -> Preallocator {
        Preallocator {
            path: root.join(RECORD_FILE),
            record: Mutex::new(RecordFile::default()),
            supported: AtomicBool::new(true),
            failures: AtomicU64::new(0),
            average_commit: AtomicU64::new(0),
            retry_from: AtomicU64::new(0),
            mapped: false,
            zeroing: false,
            covered_from: AtomicU64::new(0),
            covered_to: AtomicU64::new(0),
            next: None,
            populate: None,
            next_requested: AtomicU64::new(0),
        }
    }

    /// A preallocator for mapped writes (ASYNC_FLUSH): every commit past the file's length
    /// extends it, and the segment's map is given the space (invariant 4). With
    /// `populate_ahead` a thread populates the map ahead of the copies
    /// (`super::populate_ahead`).
    pub fn for_mapped_writes(root: &Path, populate_ahead: bool) -> Preallocator {
        Preallocator {
            mapped: true,
            next: Some(NextSegment::new(root)),
            populate: populate_ahead.then(PopulateAhead::new),
            ..Preallocator::new(root)
        }
    }

    /// A preallocator for zeroed space (SYNC_FLUSH): the space ahead of the commits is
    /// written with zeros by the store's zeroing thread, never by a commit.
    pub fn zeroing(root: &Path) -> Preallocator {
        Preallocator {
            zeroing: true,
            ..Preallocator::new(root)
        }
    }

    /// Mapped writes: the next segment's file, prepared ahead of the roll.
    pub fn next_segment(&self) -> Option<&NextSegment> {
        self.next.as_ref()
    }

    /// Mapped writes with a populating thread: its queue.
    pub fn populate_ahead(&self) -> Option<&PopulateAhead> {
        self.populate.as_ref()
    }

    /// Counts a failure to prepare the next segment (`next_segment` invariant 3).
    pub fn note_next_segment_failure(&self, error: &FileError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "preparing the next CommitLog segment failed");
    }

    /// Whether the space is zeroed ahead by a background thread.
    pub fn zeroes(&self) -> bool {
        self.zeroing
    }

    /// Zeroed space: whether the commits are small enough for zeros ahead of them to pay
    /// (the moving average of commit sizes is at most [`ZEROING_COMMIT_MAX_BYTES`]).
    pub fn zeroing_pays(&self) -> bool {
        zeroing_pays(self.average_commit.load(Ordering::Relaxed))
    }

    /// Zeroed space: makes sure the durable record says `segment`'s file may be extended
    /// with zeros to `len` (invariant 1), before the zeros are written. When it does not yet,
    /// records `reach` (at least `len`), so the zeros' small rounds share one record fsync.
    pub fn record_space(&self, segment: &Segment, len: u64, reach: u64) -> Result<(), FileError> {
        let mut record = self.record.lock().expect("preallocation record lock");
        let covered = record
            .durable
            .is_some_and(|a| a.segment_start == segment.start && a.len >= len);
        if covered {
            return Ok(());
        }
        let allocation = Allocation {
            segment_start: segment.start,
            len: reach.max(len),
        };
        self.write_record_locked(&mut record, allocation)
    }

    /// Zeroed space: whether an extension of the log to `end` (physical) may be tried; after
    /// a failure not before the log passed the failed extension.
    pub fn may_extend_to(&self, end: u64) -> bool {
        end >= self.retry_from.load(Ordering::Relaxed)
    }

    /// Zeroed space: counts a failed extension of `segment` to `target` (see `make_room`).
    pub fn note_zeroing_failure(&self, segment: &Segment, target: u64, error: &FileError) {
        self.note_failure(segment, target, error);
    }

    /// Preallocations that failed (the writes went on as plain appends).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Before a commit writes `[at, end)` of `segment` (relative offsets): while commits are
    /// small and the file does not reach `end`, extends it a step ahead. Commits are
    /// serialised by the caller.
    pub fn make_room(&self, log: &CommitLog, segment: &Segment, at: u64, end: u64) {
        if self.mapped {
            return self.make_mapped_room(log, segment, end);
        }
        let average = self.observe_commit(end - at);
        if self.zeroing {
            // The zeroing thread extends the file (while `zeroing_pays`); a commit that
            // outran it appends.
            return;
        }
        if !self.supported.load(Ordering::Relaxed)
            || !extending_pays(average)
            || segment.start + end < self.retry_from.load(Ordering::Relaxed)
        {
            return;
        }
        let target = (end + PREALLOCATION_STEP_BYTES).min(log.segment_size());
        let result = segment.len().and_then(|len| {
            if end <= len {
                return Ok(());
            }
            self.extend(log, segment, target)
        });
        if let Err(error) = result {
            self.note_failure(segment, target, &error);
        }
    }

    /// Mapped writes: unless the segment's map already reaches `end`, extends the file
    /// [`MAPPED_STEP_BYTES`] past it (recorded first, invariant 1) and gives the map the
    /// file's new length (invariant 4). On failure the map keeps its room and the commit
    /// writes with `pwrite` (invariant 3).
    fn make_mapped_room(&self, log: &CommitLog, segment: &Segment, end: u64) {
        self.prepare_next_from_half_way(log, segment, end);
        if segment.mapped_room() >= end
            || !self.supported.load(Ordering::Relaxed)
            || segment.start + end < self.retry_from.load(Ordering::Relaxed)
        {
            return;
        }
        let target = (end + MAPPED_STEP_BYTES).min(log.segment_size());
        let result = segment.len().and_then(|len| {
            let len = if end <= len {
                len
            } else {
                self.cover_segment(log, segment.start)?;
                self.allocate(log, segment, target)?;
                target
            };
            segment.set_mapped_room(len, log.segment_size())
        });
        if let Err(error) = result {
            self.note_failure(segment, target, &error);
        }
    }

    /// Mapped writes: once a commit reaches half way through `segment`, asks for the next
    /// segment's file to be prepared (`super::next_segment`), once per segment.
    fn prepare_next_from_half_way(&self, log: &CommitLog, segment: &Segment, end: u64) {
        let Some(next) = &self.next else {
            return;
        };
        let next_start = segment.start + log.segment_size();
        if end < log.segment_size() / 2 || self.next_requested.load(Ordering::Relaxed) == next_start
        {
            return;
        }
        self.next_requested.store(next_start, Ordering::Relaxed);
        next.request(next_start);
    }

    /// Records the extension of `segment` to `target`, then makes it (invariant 1).
    fn extend(&self, log: &CommitLog, segment: &Segment, target: u64) -> Result<(), FileError> {
        self.write_record(Allocation {
            segment_start: segment.start,
            len: target,
        })?;
        self.allocate(log, segment, target)
    }

    /// Mapped writes: records that the whole span of the segment at `start`, and the next
    /// segments', may be space, unless the durable record covers that segment already (invariant 1 for every
    /// extension of it). After the first segment the record is usually written ahead by
    /// [`Preallocator::advance_cover`], off the committer's path.
    fn cover_segment(&self, log: &CommitLog, start: u64) -> Result<(), FileError> {
        let end = start + log.segment_size();
        if self.known_to_cover(start, end) {
            return Ok(());
        }
        let mut record = self.record.lock().expect("preallocation record lock");
        if record.durable.is_some_and(|a| a.covers(start, end)) {
            return Ok(());
        }
        let allocation = Allocation {
            segment_start: start,
            len: MAPPED_COVER_SEGMENTS * log.segment_size(),
        };
        self.write_record_locked(&mut record, allocation)
    }

    /// Mapped writes, at open before any commit (`end` is the log's end): readies the active
    /// segment the way the next one is readied before a roll, so the first segment a store
    /// writes after opening does not stall either (its extensions read block bitmaps behind
    /// the flusher's writeback: up to 33 ms, docs/performance.md): reserves its blocks,
    /// its file's, or a prepared file's (`NextSegment::prepare_now`) when it has none yet.
    /// Nothing writes yet, so no commit waits on the file's lock as it would behind a
    /// reservation made while commits run. The record is left to the first extension (whose
    /// fsync finds little writeback ahead of it): a run that writes nothing leaves no
    /// record, so zeros found after its data are still reported as a cut. A failure is
    /// counted; commits then extend as before (invariant 3).
    pub fn prepare_active(&self, log: &CommitLog, end: u64) {
        let Some(next) = self.next.as_ref().filter(|_| self.mapped) else {
            return;
        };
        match log.segment_for(end) {
            Some(segment) => {
                if let Err(error) = segment.reserve(log.segment_size()) {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, "reserving the active CommitLog segment failed");
                }
            }
            None => next.prepare_now(log.segment_start_of(end), log.segment_size(), &|error| {
                self.note_next_segment_failure(error)
            }),
        }
    }

    /// Mapped writes, off the committer's path (the thread preparing the next segment, half
    /// way through each segment): unless the durable record starts at the last segment, records the last segment and the next ones
    /// as space, so the commit that rolls the log into the next finds it covered and writes no
    /// record (that record's fsync waited behind the flusher's writeback: up to 140 ms
    /// at full speed, docs/performance.md). A failure is counted; the committer then
    /// records a segment the record does not cover itself.
    ///
    /// Why a commit may trust the old span while this writes a new one: the last segment,
    /// read under the record's lock, is the committer's segment or one before it, no further
    /// back than the old span's start (the committer cannot pass the old span's end without
    /// that lock), so the new span, as long as the old one from a later start, covers it.
    pub fn advance_cover(&self, log: &CommitLog) {
        if !self.mapped || !self.supported.load(Ordering::Relaxed) {
            return;
        }
        let mut record = self.record.lock().expect("preallocation record lock");
        let Some(last) = log.segments().last().cloned() else {
            return;
        };
        let allocation = Allocation {
            segment_start: last.start,
            len: MAPPED_COVER_SEGMENTS * log.segment_size(),
        };
        if record
            .durable
            .is_some_and(|a| a.covers(last.start, allocation.span_end()))
        {
            return;
        }
        if let Err(error) = self.write_record_locked(&mut record, allocation) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, "recording the next CommitLog segment's space failed");
        }
    }

    /// Mapped writes: whether the record is known durable and covering `[from, to)`.
    fn known_to_cover(&self, from: u64, to: u64) -> bool {
        self.covered_from.load(Ordering::Acquire) <= from
            && to <= self.covered_to.load(Ordering::Acquire)
    }

    /// Extends `segment`'s file to `target` bytes (the record already covers them).
    fn allocate(&self, log: &CommitLog, segment: &Segment, target: u64) -> Result<(), FileError> {
        if log.faults.take_preallocation() {
            let error = crate::faults::disk_full();
            return Err(FileError::new("fallocate", segment.path(), error));
        }
        segment.allocate(target)
    }

    /// Counts a failed extension and holds off the next attempt until the log passes it.
    fn note_failure(&self, segment: &Segment, target: u64, error: &FileError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.retry_from
            .store(segment.start + target, Ordering::Relaxed);
        if error.is_unsupported() {
            self.supported.store(false, Ordering::Relaxed);
        }
        tracing::warn!(%error, "CommitLog preallocation failed; appending without it");
    }

    /// After a commit wrote `segment`'s end marker ending at `data_end` (relative): cuts the
    /// space after it, so a full segment's file ends at its data (invariant 2 for every
    /// segment but the last). A failure is counted and changes nothing else.
    pub fn trim_rolled(&self, segment: &Segment, data_end: u64) {
        // At the data's end too: blocks reserved past the file's length go as well.
        let result = segment.len().and_then(|len| {
            if len >= data_end {
                segment.trim_space(data_end)?;
            }
            Ok(())
        });
        if let Err(error) = result {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, "trimming a full CommitLog segment's space failed");
        }
    }

    /// Adds a commit of `bytes` to the moving average and returns the new average.
    fn observe_commit(&self, bytes: u64) -> u64 {
        let old = self.average_commit.load(Ordering::Relaxed);
        let new = (old * (COMMIT_AVERAGE_WINDOW - 1) + bytes) / COMMIT_AVERAGE_WINDOW;
        self.average_commit.store(new, Ordering::Relaxed);
        new
    }

    /// Cuts the preallocated space off the last segment (the log ends at `end`) and records
    /// the length it is left with (invariant 2).
    pub fn trim(&self, log: &CommitLog, end: u64) -> Result<(), FileError> {
        let Some(last) = log.segments().last().cloned() else {
            return Ok(());
        };
        let keep = end.saturating_sub(last.start);
        // At the data's end too: blocks reserved past the file's length go as well.
        if last.len()? >= keep {
            last.truncate(keep)?;
        }
        self.write_record(Allocation {
            segment_start: last.start,
            len: keep,
        })
    }

    /// Writes the record in place and makes it durable (invariant 1).
    fn write_record(&self, allocation: Allocation) -> Result<(), FileError> {
        let mut record = self.record.lock().expect("preallocation record lock");
        self.write_record_locked(&mut record, allocation)
    }

    /// [`Preallocator::write_record`] with the record's lock held; remembers what is durable.
    fn write_record_locked(
        &self,
        record: &mut RecordFile,
        allocation: Allocation,
    ) -> Result<(), FileError> {
        let written = self.write_record_file(record, allocation);
        match written {
            Ok(()) => {
                self.covered_from
                    .store(allocation.segment_start, Ordering::Release);
                self.covered_to
                    .store(allocation.span_end(), Ordering::Release);
            }
            Err(_) => self.covered_to.store(0, Ordering::Release),
        }
        written
    }

    /// Writes and syncs the record file; `record.durable` is the allocation after success,
    /// `None` after a failure.
    fn write_record_file(
        &self,
        record: &mut RecordFile,
        allocation: Allocation,
    ) -> Result<(), FileError> {
        record.durable = None;
        if record.file.is_none() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map_err(|e| FileError::new("create", &self.path, e))?;
            crate::fsutil::sync_parent(&self.path)?;
            record.file = Some(file);
        }
        let file = record.file.as_ref().expect("opened above");
        file.write_all_at(&allocation.encode(), 0)
            .map_err(|e| FileError::new("write", &self.path, e))?;
        file.sync_data()
            .map_err(|e| FileError::new("fsync", &self.path, e))?;
        record.durable = Some(allocation);
        Ok(())
    }
}

/// Whether commits averaging `average_commit` bytes gain from preallocated space.
fn extending_pays(average_commit: u64) -> bool {
    average_commit <= SMALL_COMMIT_MAX_BYTES
}

/// Whether commits averaging `average_commit` bytes gain from zeros written ahead.
fn zeroing_pays(average_commit: u64) -> bool {
    average_commit <= ZEROING_COMMIT_MAX_BYTES
}

/// Zero bytes at the end of the last segment, at or after `pos`, inside the space `record`
/// says was preallocated: space, not data, so not a cut.
pub fn preallocated_zeros(
    log: &CommitLog,
    record: Option<Allocation>,
    pos: u64,
) -> Result<u64, FileError> {
    let (Some(record), Some(last)) = (record, log.segments().last().cloned()) else {
        return Ok(0);
    };
    let covered = record.covered_in(last.start);
    if covered == 0 {
        return Ok(0);
    }
    let floor = pos.max(last.start) - last.start;
    let mut end = covered.min(last.len()?);
    let top = end;
    let mut window = Vec::new();
    while end > floor {
        let from = end.saturating_sub(ZERO_SCAN_WINDOW_BYTES).max(floor);
        window.resize((end - from) as usize, 0);
        let got = last.read_at(from, &mut window)?;
        window.truncate(got);
        match window.iter().rposition(|&b| b != 0) {
            Some(at) => return Ok(top - (from + at as u64 + 1)),
            None if got as u64 == end - from => end = from,
            None => return Ok(top - end),
        }
    }
    Ok(top - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_commits_extend_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let preallocator = Preallocator::new(dir.path());
        assert!(extending_pays(preallocator.observe_commit(300)));
        // A run of large commits moves the average past the limit within a few commits...
        let after_large: Vec<bool> = (0..8)
            .map(|_| extending_pays(preallocator.observe_commit(32 * 1024)))
            .collect();
        assert!(!after_large[0], "one 32 KiB commit: {after_large:?}");
        assert!(after_large.iter().all(|pays| !pays));
        // ...and a run of small ones moves it back.
        let back = (0..40).map(|_| preallocator.observe_commit(300)).last();
        assert!(back.is_some_and(extending_pays), "{back:?}");
    }

    #[test]
    fn zeros_ahead_stop_while_commits_are_large_and_resume_when_small() {
        let dir = tempfile::tempdir().expect("temp dir");
        let preallocator = Preallocator::zeroing(dir.path());
        assert!(preallocator.zeroing_pays(), "no commit yet");
        // Windowed sends and 64 store writers commit 16-33 KiB per fsync: zeros pay.
        for _ in 0..16 {
            preallocator.observe_commit(33 * 1024);
        }
        assert!(preallocator.zeroing_pays());
        // Batches commit about 110 KiB per fsync: a few such commits stop the zeros.
        for _ in 0..6 {
            preallocator.observe_commit(110 * 1024);
        }
        assert!(!preallocator.zeroing_pays());
        for _ in 0..16 {
            preallocator.observe_commit(300);
        }
        assert!(preallocator.zeroing_pays());
    }

    #[test]
    fn zeroed_space_is_recorded_a_reach_ahead_and_only_when_not_covered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let segment = Segment::create(dir.path(), 0).expect("segment");
        let preallocator = Preallocator::zeroing(dir.path());
        let recorded = || read_record(dir.path()).expect("read").map(|a| a.len);
        preallocator
            .record_space(&segment, 1_000, 8_000)
            .expect("record");
        assert_eq!(recorded(), Some(8_000));
        // Covered: no write (the file is not touched, so a stale value there stays).
        std::fs::write(dir.path().join(RECORD_FILE), b"stale").expect("overwrite");
        preallocator
            .record_space(&segment, 7_999, 20_000)
            .expect("covered");
        assert_eq!(
            std::fs::read(dir.path().join(RECORD_FILE)).expect("read"),
            b"stale"
        );
        preallocator
            .record_space(&segment, 8_001, 20_000)
            .expect("record");
        assert_eq!(recorded(), Some(20_000));
        // Another segment is never covered by this one's record.
        let next = Segment::create(dir.path(), 1 << 20).expect("segment");
        preallocator.record_space(&next, 10, 10).expect("record");
        assert_eq!(
            read_record(dir.path()).expect("read"),
            Some(Allocation {
                segment_start: 1 << 20,
                len: 10
            })
        );
    }

    #[test]
    fn a_record_reads_back_and_a_damaged_one_covers_nothing() {
        let allocation = Allocation {
            segment_start: 1 << 30,
            len: 12_345_678,
        };
        let bytes = allocation.encode();
        assert_eq!(Allocation::decode(&bytes), Some(allocation));
        for at in 0..RECORD_LEN {
            let mut flipped = bytes;
            flipped[at] ^= 0x10;
            assert_eq!(Allocation::decode(&flipped), None, "byte {at}");
        }
        assert_eq!(Allocation::decode(&bytes[..RECORD_LEN - 1]), None);
        assert_eq!(Allocation::decode(&[0u8; RECORD_LEN + 1]), None);
    }
}
