//! The CommitLog: every message and every offset record, in one append-only sequence of
//! segment files named by their 20-digit start offset (invariant 1).
//!
//! Invariants:
//! 1. A record never spans two segments. When a record and an 8-byte end marker do not fit
//!    in the rest of a segment, the writer puts a BLANK marker (`TOTALSIZE` = bytes left,
//!    `MAGIC` = `BLANK_MAGIC`) and continues at the next segment's start.
//! 2. Bytes below `committed_end` are complete records in the files; readers never look past
//!    it. `appended_end` (≥ `committed_end`) also counts the writer's uncommitted tail.
//! 3. `min_offset` is the start of the oldest segment kept; retention raises it.

mod file_map;
mod mapping;
pub mod next_segment;
pub mod populate_ahead;
pub mod preallocation;
mod read_map;
pub mod region;
pub mod segment;
pub mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use bytes::{Bytes, BytesMut};
use ferromq_protocol::{peek_magic, peek_total_size, RecordError, RecordView, BLANK_MAGIC};

use crate::error::{FileError, OpenError, ReadError};
use crate::fsutil;
pub use region::{FileRegion, RegionError};
pub use segment::{Access, Segment};

/// Size of the end-of-segment marker.
pub const BLANK_LEN: u64 = 8;

/// The segment files and the published log end. Shared by the writer, the flusher, the
/// dispatcher and readers.
#[derive(Debug)]
pub struct CommitLog {
    dir: PathBuf,
    segment_size: u64,
    /// The largest record the writer may append ([`crate::StoreConfig::record_size_max`]);
    /// readers treat a larger TOTALSIZE as damage.
    record_size_max: usize,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    committed_end: AtomicU64,
    appended_end: AtomicU64,
    min_offset: AtomicU64,
    /// Extends the active segment ahead of commits; unset (plain appends) until a writable
    /// store enables it after recovery.
    preallocator: OnceLock<preallocation::Preallocator>,
    /// Pull reads may copy out of the segments' read-only maps (`read_map`).
    mapped_reads: AtomicBool,
    /// Fault points for tests.
    pub faults: crate::faults::Faults,
}

/// What one position of the log holds.
#[derive(Debug)]
pub enum Entry {
    /// A verified record and its bytes.
    Record(Bytes),
    /// The end-of-segment marker; the log continues at `next`.
    Blank { next: u64 },
}

impl CommitLog {
    /// Opens the segment files in `dir`, refusing files that are not segments.
    pub fn open(
        dir: &Path,
        segment_size: u64,
        record_size_max: usize,
    ) -> Result<CommitLog, OpenError> {
        fsutil::create_dir_all(dir)?;
        Self::open_files(dir, segment_size, record_size_max, Access::ReadWrite)
    }

    /// Opens the segment files in `dir` for reading only (`--check`, verification): nothing
    /// is created, and a missing directory is an empty log.
    pub fn open_read_only(
        dir: &Path,
        segment_size: u64,
        record_size_max: usize,
    ) -> Result<CommitLog, OpenError> {
        Self::open_files(dir, segment_size, record_size_max, Access::ReadOnly)
    }

    fn open_files(
        dir: &Path,
        segment_size: u64,
        record_size_max: usize,
        access: Access,
    ) -> Result<CommitLog, OpenError> {
        let mut segments = BTreeMap::new();
        if access == Access::ReadOnly && !dir.exists() {
            return Ok(Self::from_segments(
                dir,
                segment_size,
                record_size_max,
                segments,
            ));
        }
        let listing = std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))?;
        for item in listing {
            let item = item.map_err(|e| FileError::new("list", dir, e))?;
            let path = item.path();
            let name = item.file_name().to_string_lossy().into_owned();
            let Some(start) = fsutil::parse_offset_file_name(&name) else {
                return Err(OpenError::ForeignFile {
                    path,
                    reason: "not a CommitLog segment (expected a 20-digit offset name)".into(),
                });
            };
            if start % segment_size != 0 {
                return Err(OpenError::ForeignFile {
                    path,
                    reason: format!(
                        "segment start is not a multiple of the segment size {segment_size}; \
                         was the store created with another mappedFileSizeCommitLog?"
                    ),
                });
            }
            let segment = Segment::open(path.clone(), start, access)?;
            if segment.len()? > segment_size {
                return Err(OpenError::ForeignFile {
                    path,
                    reason: format!("segment is larger than the segment size {segment_size}"),
                });
            }
            segments.insert(start, Arc::new(segment));
        }
        let log = Self::from_segments(dir, segment_size, record_size_max, segments);
        log.check_contiguous()?;
        Ok(log)
    }

    fn from_segments(
        dir: &Path,
        segment_size: u64,
        record_size_max: usize,
        segments: BTreeMap<u64, Arc<Segment>>,
    ) -> CommitLog {
        let min = segments.keys().next().copied().unwrap_or(0);
        CommitLog {
            dir: dir.to_path_buf(),
            segment_size,
            record_size_max,
            segments: RwLock::new(segments),
            committed_end: AtomicU64::new(min),
            appended_end: AtomicU64::new(min),
            min_offset: AtomicU64::new(min),
            preallocator: OnceLock::new(),
            mapped_reads: AtomicBool::new(true),
            faults: Default::default(),
        }
    }

    /// The largest record the log may hold.
    pub fn record_size_max(&self) -> usize {
        self.record_size_max
    }

    /// Checks a TOTALSIZE read from the log against the one size limit.
    pub(crate) fn check_record_size(
        &self,
        phys_offset: u64,
        total: usize,
    ) -> Result<(), ReadError> {
        if total > self.record_size_max {
            return Err(ReadError::Corrupt {
                phys_offset,
                source: RecordError::BadTotalSize(total as u32),
            });
        }
        Ok(())
    }

    fn check_contiguous(&self) -> Result<(), OpenError> {
        let segments = self.segments.read().expect("segments lock");
        let mut expected = None;
        for start in segments.keys() {
            if let Some(expected) = expected {
                if *start != expected {
                    return Err(OpenError::ForeignFile {
                        path: self.dir.join(fsutil::offset_file_name(expected)),
                        reason: format!("segment missing: the log jumps to {start}"),
                    });
                }
            }
            expected = Some(start + self.segment_size);
        }
        Ok(())
    }

    /// Whether pull reads copy out of the segments' read-only maps (the default) or read
    /// spans with `pread` (`StoreConfig::mapped_reads`).
    pub fn set_mapped_reads(&self, enabled: bool) {
        self.mapped_reads.store(enabled, Ordering::Relaxed);
    }

    /// Preallocates the active segment ahead of commits from now on (see [`preallocation`]).
    /// Later calls change nothing.
    pub fn enable_preallocation(&self, preallocator: preallocation::Preallocator) {
        let _ = self.preallocator.set(preallocator);
    }

    /// The preallocator, once enabled.
    pub fn preallocator(&self) -> Option<&preallocation::Preallocator> {
        self.preallocator.get()
    }

    /// Directory of the segment files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segment size in bytes.
    pub fn segment_size(&self) -> u64 {
        self.segment_size
    }

    /// End of the complete records in the segment files.
    pub fn committed_end(&self) -> u64 {
        self.committed_end.load(Ordering::Acquire)
    }

    /// End of the appended records, including the writer's uncommitted tail.
    pub fn appended_end(&self) -> u64 {
        self.appended_end.load(Ordering::Acquire)
    }

    pub(crate) fn publish_committed_end(&self, end: u64) {
        self.committed_end.store(end, Ordering::Release);
    }

    pub(crate) fn publish_appended_end(&self, end: u64) {
        self.appended_end.store(end, Ordering::Release);
    }

    /// Sets both ends after recovery or truncation, when the files hold everything.
    pub(crate) fn reset_ends(&self, end: u64) {
        self.committed_end.store(end, Ordering::Release);
        self.appended_end.store(end, Ordering::Release);
    }

    /// Start of the oldest segment kept.
    pub fn min_offset(&self) -> u64 {
        self.min_offset.load(Ordering::Acquire)
    }

    pub(crate) fn set_min_offset(&self, min: u64) {
        self.min_offset.store(min, Ordering::Release);
    }

    /// Start of the segment that holds `phys_offset`.
    pub fn segment_start_of(&self, phys_offset: u64) -> u64 {
        phys_offset - phys_offset % self.segment_size
    }

    /// The segment holding `phys_offset`, if its file exists.
    pub fn segment_for(&self, phys_offset: u64) -> Option<Arc<Segment>> {
        let start = self.segment_start_of(phys_offset);
        self.segments
            .read()
            .expect("segments lock")
            .get(&start)
            .cloned()
    }

    /// All segments, oldest first.
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.segments
            .read()
            .expect("segments lock")
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn insert_segment(&self, segment: Arc<Segment>) {
        self.segments
            .write()
            .expect("segments lock")
            .insert(segment.start, segment);
    }

    pub(crate) fn remove_segment(&self, start: u64) -> Option<Arc<Segment>> {
        self.segments.write().expect("segments lock").remove(&start)
    }

    /// Reads `len` bytes at `phys_offset`; the range must lie inside one segment and below the
    /// written end.
    pub fn read(&self, phys_offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let end = self.committed_end();
        let min = self.min_offset();
        if phys_offset < min || phys_offset + len as u64 > end {
            return Err(ReadError::OutOfRange {
                phys_offset,
                min,
                max: end,
            });
        }
        self.read_unchecked(phys_offset, len)
    }

    /// Reads without the written-end check (recovery scans bytes not yet published).
    pub(crate) fn read_unchecked(
        &self,
        phys_offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ReadError> {
        let segment = self.segment_for(phys_offset).ok_or(ReadError::OutOfRange {
            phys_offset,
            min: self.min_offset(),
            max: self.committed_end(),
        })?;
        Ok(segment.read_vec(phys_offset - segment.start, len)?)
    }

    /// Reads and verifies the record (or end marker) at `phys_offset`.
    pub fn read_entry(&self, phys_offset: u64) -> Result<Entry, ReadError> {
        let head = self.read(phys_offset, 8)?;
        let corrupt = |source| ReadError::Corrupt {
            phys_offset,
            source,
        };
        let total = peek_total_size(&head).map_err(corrupt)?;
        if peek_magic(&head) == BLANK_MAGIC {
            return Ok(Entry::Blank {
                next: self.segment_start_of(phys_offset) + self.segment_size,
            });
        }
        self.check_record_size(phys_offset, total)?;
        let bytes = self.read(phys_offset, total)?;
        let view = RecordView::parse(&bytes).map_err(corrupt)?;
        if view.phys_offset != phys_offset {
            return Err(ReadError::Misplaced {
                phys_offset,
                stored: view.phys_offset,
            });
        }
        Ok(Entry::Record(Bytes::from(bytes)))
    }

    /// Reads the record of `size` bytes at `phys_offset` (size known from a ConsumeQueue) and
    /// verifies it.
    pub fn read_record(&self, phys_offset: u64, size: usize) -> Result<Bytes, ReadError> {
        self.check_record_size(phys_offset, size)?;
        let bytes = self.read(phys_offset, size)?;
        Self::verify_record(phys_offset, Bytes::from(bytes))
    }

    /// Verifies (structure and CRC) the record read at `phys_offset` and hands it back.
    pub fn verify_record(phys_offset: u64, bytes: Bytes) -> Result<Bytes, ReadError> {
        RecordView::parse(&bytes).map_err(|source| ReadError::Corrupt {
            phys_offset,
            source,
        })?;
        Ok(bytes)
    }

    /// Reads, with one `pread`, the record of `first` (`(phys_offset, size)`) together with
    /// the records of `following` that lie after it in the same segment, each at most
    /// [`READ_SPAN_GAP_MAX`] bytes after the one before, while the span stays within
    /// `max_bytes` (at least the first record). The bytes are not verified:
    /// [`ReadSpan::record`] hands out each record, and the caller verifies it as
    /// [`CommitLog::read_record`] would.
    ///
    /// A queue's records often lie back to back (batches, a lone producer) or a few records
    /// apart (several producers over a few queues), and one read for several of them saves a
    /// system call and a buffer per message on the pull path; reading the other queues'
    /// records in between costs less than the calls it saves.
    pub fn read_span(
        &self,
        first: (u64, usize),
        following: impl Iterator<Item = (u64, usize)>,
        max_bytes: usize,
    ) -> Result<ReadSpan, ReadError> {
        let (start, size) = first;
        self.check_record_size(start, size)?;
        let end = self.span_end(first, following, max_bytes, READ_SPAN_GAP_MAX);
        let bytes = self.read(start, (end - start) as usize)?;
        Ok(ReadSpan {
            start,
            bytes: Bytes::from(bytes),
        })
    }

    /// As [`CommitLog::read_span`] over back-to-back records only, copied out of the
    /// segment's read-only map (`read_map`) instead of read with `pread`: a queue whose records
    /// lie between other queues' records copies only its own, and a run of one queue's records
    /// is still one copy. The span is appended to `buffer` (empty; the caller reserves its
    /// capacity) and split off it, so the spans of one pull share one allocation. `None` when
    /// the first record is not all committed bytes within the size limit, mapped reads are
    /// off, or the map cannot serve the span; the caller then reads with `pread`, which says
    /// why if anything is wrong.
    pub fn read_span_in_place(
        &self,
        first: (u64, usize),
        following: impl Iterator<Item = (u64, usize)>,
        max_bytes: usize,
        buffer: &mut BytesMut,
    ) -> Option<ReadSpan> {
        let (start, size) = first;
        let committed = self.committed_end();
        if !self.mapped_reads.load(Ordering::Relaxed)
            || start < self.min_offset()
            || size > self.record_size_max
        {
            return None;
        }
        let end = self.span_end(first, following, max_bytes, 0).min(committed);
        if end < start.checked_add(size as u64)? {
            return None;
        }
        let segment = self.segment_for(start)?;
        debug_assert!(buffer.is_empty(), "spans are split off as they are read");
        let read = segment.read_mapped(
            start - segment.start,
            (end - start) as usize,
            self.segment_size,
            buffer,
        );
        read.then(|| ReadSpan {
            start,
            bytes: buffer.split().freeze(),
        })
    }

    /// End of a span starting with `first` and taking the records of `following` while each
    /// lies at most `gap_max` bytes after the one before, in the same segment, within the size
    /// limit, and the span stays within `max_bytes` (always at least `first`).
    fn span_end(
        &self,
        first: (u64, usize),
        following: impl Iterator<Item = (u64, usize)>,
        max_bytes: usize,
        gap_max: u64,
    ) -> u64 {
        let (start, size) = first;
        let segment = self.segment_start_of(start);
        let mut end = start + size as u64;
        for (phys_offset, size) in following {
            let next_end = phys_offset + size as u64;
            if phys_offset < end
                || phys_offset - end > gap_max
                || next_end - start > max_bytes as u64
                || self.segment_start_of(next_end - 1) != segment
                || size > self.record_size_max
            {
                break;
            }
            end = next_end;
        }
        end
    }
}

/// Most bytes of other records [`CommitLog::read_span`] reads past between two records of a
/// span: about a dozen small records of other queues, so interleaved queues still read many
/// records per call, while a sparse queue does not read far past what it needs.
pub const READ_SPAN_GAP_MAX: u64 = 4 * 1024;

/// Bytes of the CommitLog read at once by [`CommitLog::read_span`].
#[derive(Debug, Clone, Default)]
pub struct ReadSpan {
    start: u64,
    bytes: Bytes,
}

impl ReadSpan {
    /// The `size` bytes at `phys_offset` when the span holds all of them (a short read may
    /// have left the span shorter than asked); shares the span's buffer.
    pub fn record(&self, phys_offset: u64, size: usize) -> Option<Bytes> {
        let from = usize::try_from(phys_offset.checked_sub(self.start)?).ok()?;
        let to = from.checked_add(size)?;
        (to <= self.bytes.len()).then(|| self.bytes.slice(from..to))
    }
}
