//! One ConsumeQueue with a write buffer: new entries are kept in memory until `write_out`
//! (at a checkpoint or when the buffer fills) and reads see both file and buffer.

use std::path::Path;

use super::CqError;
use crate::error::FileError;
use crate::file_set::{DirtyFile, FileSet};
use crate::fsutil;

/// Bytes per entry.
pub const CQ_ENTRY_SIZE: u64 = 20;
const PENDING_BYTES_MAX: usize = 64 * 1024;

/// Tag code of a [`CqEntry::damaged_placeholder`]; no Java `int` hash widens to it.
pub const DAMAGED_TAG_CODE: i64 = i64::MIN;

/// One ConsumeQueue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqEntry {
    /// CommitLog offset of the record.
    pub phys_offset: u64,
    /// Record size in bytes; 0 marks a hole.
    pub size: u32,
    /// Java hash of the record's tag (0 without a tag).
    pub tag_code: i64,
}

impl CqEntry {
    fn encode(&self) -> [u8; CQ_ENTRY_SIZE as usize] {
        let mut out = [0u8; CQ_ENTRY_SIZE as usize];
        out[..8].copy_from_slice(&self.phys_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..].copy_from_slice(&self.tag_code.to_be_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> CqEntry {
        CqEntry {
            phys_offset: u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
            size: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
            tag_code: i64::from_be_bytes(bytes[12..20].try_into().expect("8 bytes")),
        }
    }

    /// The entry that stands for a record lost in a damaged CommitLog range: it points at
    /// the range, so a read of it fails verification and names the damage instead of the
    /// queue silently skipping the offset. Its tag code matches no tag filter's hash (tag
    /// hashes are Java `int`s), and readers never filter it out.
    pub fn damaged_placeholder(range: &crate::quarantine::QuarantinedRange) -> CqEntry {
        CqEntry {
            phys_offset: range.phys_offset,
            size: range.len.clamp(1, i32::MAX as u64 - 1) as u32,
            tag_code: DAMAGED_TAG_CODE,
        }
    }

    /// Whether this entry stands for a record lost in a damaged range.
    pub fn is_damaged_placeholder(&self) -> bool {
        self.tag_code == DAMAGED_TAG_CODE
    }

    /// An unwritten slot (all zero, or RocketMQ's pre-blank filler).
    pub fn is_hole(&self) -> bool {
        self.size == 0 || self.size == i32::MAX as u32
    }

    /// End of the record in the CommitLog.
    pub fn phys_end(&self) -> u64 {
        self.phys_offset + u64::from(self.size)
    }
}

/// Result of an idempotent put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The entry was added.
    Added,
    /// The same entry was already present.
    AlreadyPresent,
}

/// What opening a queue found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CqOpenReport {
    /// Bytes of a torn last entry that were cut.
    pub torn_bytes_cut: u64,
    /// A file before the last was short or missing: the queue must be rebuilt from the log.
    pub needs_rebuild: bool,
}

/// One (topic, queue) ConsumeQueue.
#[derive(Debug)]
pub struct ConsumeQueue {
    name: String,
    entries_per_file: u64,
    /// Files keyed by their first queue offset.
    files: FileSet,
    min_offset: u64,
    max_offset: u64,
    /// Entries below this are in files; `[written, max)` are in `pending`.
    written: u64,
    pending: Vec<u8>,
}

impl ConsumeQueue {
    /// Opens (or creates) the queue stored in `dir`.
    pub fn open(
        name: String,
        dir: &Path,
        entries_per_file: u64,
    ) -> Result<(ConsumeQueue, CqOpenReport), CqError> {
        // The dispatcher opens a new queue under the store's `derived` lock: the new
        // directories are made durable by the next sync, as the queue's files are.
        let new_entries = fsutil::create_dir_all_deferred(dir)?;
        let file_bytes = entries_per_file * CQ_ENTRY_SIZE;
        let mut report = CqOpenReport::default();
        let mut files = FileSet::new(dir, CQ_ENTRY_SIZE);
        files.note_new_entries(new_entries);
        let listing = std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))?;
        for item in listing {
            let item = item.map_err(|e| FileError::new("list", dir, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            let start = fsutil::parse_offset_file_name(&name)
                .filter(|start| start % file_bytes == 0)
                .ok_or_else(|| CqError::Foreign {
                    path: path.clone(),
                    reason: format!("not a ConsumeQueue file (20-digit multiple of {file_bytes})"),
                })?;
            files.open_existing(start / CQ_ENTRY_SIZE)?;
        }
        let mut queue = ConsumeQueue {
            name,
            entries_per_file,
            files,
            min_offset: 0,
            max_offset: 0,
            written: 0,
            pending: Vec::new(),
        };
        queue.load_bounds(&mut report)?;
        Ok((queue, report))
    }

    fn load_bounds(&mut self, report: &mut CqOpenReport) -> Result<(), CqError> {
        let starts: Vec<u64> = self.files.keys().collect();
        let Some(&first) = starts.first() else {
            return Ok(());
        };
        for pair in starts.windows(2) {
            let len = self.file_len(pair[0])?;
            if pair[1] != pair[0] + self.entries_per_file
                || len != self.entries_per_file * CQ_ENTRY_SIZE
            {
                report.needs_rebuild = true;
            }
        }
        let last = *starts.last().expect("non-empty");
        let len = self.file_len(last)?;
        let torn = len % CQ_ENTRY_SIZE;
        if torn != 0 {
            self.files.truncate(last, len - torn)?;
            report.torn_bytes_cut = torn;
        }
        let mut count = (len - torn) / CQ_ENTRY_SIZE;
        // Trailing zero entries are unwritten slots, not entries.
        while count > 0 && self.read_file_entry(last + count - 1)?.size == 0 {
            count -= 1;
        }
        self.min_offset = first;
        self.max_offset = last + count;
        self.written = self.max_offset;
        // Leading holes (a queue that began after older segments were deleted).
        while self.min_offset < self.max_offset && self.entry(self.min_offset)?.is_hole() {
            self.min_offset += 1;
        }
        Ok(())
    }

    fn file_len(&self, start: u64) -> Result<u64, CqError> {
        Ok(self.files.len_of(start)?)
    }

    fn file_start_of(&self, queue_offset: u64) -> u64 {
        queue_offset - queue_offset % self.entries_per_file
    }

    /// `topic/queueId`, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Smallest queue offset still readable.
    pub fn min_offset(&self) -> u64 {
        self.min_offset
    }

    /// Next queue offset to be written (number of entries ever written).
    pub fn max_offset(&self) -> u64 {
        self.max_offset
    }

    /// Whether nothing was ever written.
    pub fn is_empty(&self) -> bool {
        self.max_offset == self.min_offset
    }

    fn read_file_entry(&self, queue_offset: u64) -> Result<CqEntry, CqError> {
        let start = self.file_start_of(queue_offset);
        let mut buf = [0u8; CQ_ENTRY_SIZE as usize];
        let at = (queue_offset - start) * CQ_ENTRY_SIZE;
        if self.files.read_exact_at(start, at, &mut buf)? {
            Ok(CqEntry::decode(&buf))
        } else {
            Ok(CqEntry::default())
        }
    }

    /// The entry at `queue_offset` (a hole outside `[min, max)`).
    pub fn entry(&self, queue_offset: u64) -> Result<CqEntry, CqError> {
        if queue_offset >= self.max_offset {
            return Ok(CqEntry::default());
        }
        if queue_offset >= self.written {
            let at = ((queue_offset - self.written) * CQ_ENTRY_SIZE) as usize;
            return Ok(CqEntry::decode(
                &self.pending[at..at + CQ_ENTRY_SIZE as usize],
            ));
        }
        self.read_file_entry(queue_offset)
    }

    /// Up to `max_count` entries from `queue_offset` (raised to the min offset), stopping at
    /// `max_offset`.
    ///
    /// Entries in files are read with one `pread` per file (not one per entry): a pull of 32
    /// messages, or a filtered scan of thousands of entries, is one system call.
    pub fn entries(&self, queue_offset: u64, max_count: usize) -> Result<Vec<CqEntry>, CqError> {
        let start = queue_offset.max(self.min_offset);
        let end = self.max_offset.min(start.saturating_add(max_count as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
        let mut next = start;
        while next < end.min(self.written) {
            let file = self.file_start_of(next);
            let run_end = end.min(self.written).min(file + self.entries_per_file);
            self.read_file_run(next, run_end, &mut out)?;
            next = run_end;
        }
        for q in next..end {
            out.push(self.entry(q)?);
        }
        Ok(out)
    }

    /// Appends the entries `[from, to)`, all in the file starting at `file_start_of(from)`,
    /// read at once; entry by entry (holes where the file is short) when the file is shorter
    /// than the run.
    fn read_file_run(&self, from: u64, to: u64, out: &mut Vec<CqEntry>) -> Result<(), CqError> {
        let start = self.file_start_of(from);
        let mut buf = vec![0u8; ((to - from) * CQ_ENTRY_SIZE) as usize];
        if self
            .files
            .read_exact_at(start, (from - start) * CQ_ENTRY_SIZE, &mut buf)?
        {
            out.extend(
                buf.chunks_exact(CQ_ENTRY_SIZE as usize)
                    .map(CqEntry::decode),
            );
            return Ok(());
        }
        for q in from..to {
            out.push(self.read_file_entry(q)?);
        }
        Ok(())
    }

    /// The last entry, if any.
    pub fn last_entry(&self) -> Result<Option<CqEntry>, CqError> {
        if self.is_empty() {
            return Ok(None);
        }
        self.entry(self.max_offset - 1).map(Some)
    }

    /// Adds the entry for `queue_offset`, idempotently.
    pub fn put(&mut self, queue_offset: u64, entry: CqEntry) -> Result<PutOutcome, CqError> {
        if queue_offset < self.max_offset {
            if queue_offset >= self.min_offset && self.entry(queue_offset)? == entry {
                return Ok(PutOutcome::AlreadyPresent);
            }
            return Err(CqError::Conflict {
                queue: self.name.clone(),
                queue_offset,
            });
        }
        if queue_offset > self.max_offset {
            if self.files.is_empty() && self.pending.is_empty() {
                // A queue whose earlier records were deleted by retention starts here.
                self.min_offset = queue_offset;
                self.max_offset = queue_offset;
                self.written = queue_offset;
            } else {
                return Err(CqError::Gap {
                    queue: self.name.clone(),
                    expected: self.max_offset,
                    got: queue_offset,
                });
            }
        }
        self.pending.extend_from_slice(&entry.encode());
        self.max_offset += 1;
        if self.pending.len() >= PENDING_BYTES_MAX {
            self.write_out()?;
        }
        Ok(PutOutcome::Added)
    }

    /// Writes buffered entries to their files (not fsynced; see `sync`).
    pub fn write_out(&mut self) -> Result<(), CqError> {
        let mut queue_offset = self.written;
        let mut at = 0usize;
        while at < self.pending.len() {
            let start = self.file_start_of(queue_offset);
            let room = (start + self.entries_per_file - queue_offset) as usize;
            let count = room.min((self.pending.len() - at) / CQ_ENTRY_SIZE as usize);
            let bytes = &self.pending[at..at + count * CQ_ENTRY_SIZE as usize];
            self.files
                .write_at(start, (queue_offset - start) * CQ_ENTRY_SIZE, bytes)?;
            queue_offset += count as u64;
            at += count * CQ_ENTRY_SIZE as usize;
        }
        self.pending.clear();
        self.written = self.max_offset;
        Ok(())
    }

    /// Writes out and fsyncs every file changed since the last sync.
    pub fn sync(&mut self) -> Result<(), CqError> {
        self.write_out()?;
        self.files.sync_dirty()?;
        Ok(())
    }

    /// Writes out and returns the files changed since the last sync, for the caller to fsync
    /// without holding the queue (a checkpoint, outside the `derived` lock).
    pub(crate) fn write_out_for_sync(&mut self) -> Result<Vec<DirtyFile>, CqError> {
        self.write_out()?;
        Ok(self.files.take_dirty())
    }

    /// First queue offset in `[min, max)` whose entry points at or after `phys_offset`
    /// (`max` when none does). Entries are sorted by physical offset; holes sort first.
    pub fn first_at_or_after_phys(&self, phys_offset: u64) -> Result<u64, CqError> {
        let (mut low, mut high) = (self.min_offset, self.max_offset);
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = self.entry(mid)?;
            if entry.is_hole() || entry.phys_offset < phys_offset {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(low)
    }

    /// Removes every entry pointing at or after `phys_offset`, durably. Returns how many.
    pub fn truncate_from_phys(&mut self, phys_offset: u64) -> Result<u64, CqError> {
        let cut = self.first_at_or_after_phys(phys_offset)?;
        self.truncate_to(cut)
    }

    /// Keeps queue offsets below `new_max` only, durably.
    pub fn truncate_to(&mut self, new_max: u64) -> Result<u64, CqError> {
        if new_max >= self.max_offset {
            return Ok(0);
        }
        let removed = self.max_offset - new_max;
        if new_max >= self.written {
            self.pending
                .truncate(((new_max - self.written) * CQ_ENTRY_SIZE) as usize);
        } else {
            self.write_out()?;
            let keep_start = self.file_start_of(new_max);
            self.files.remove_range(keep_start + 1..)?;
            self.files
                .truncate(keep_start, (new_max - keep_start) * CQ_ENTRY_SIZE)?;
            self.written = new_max;
        }
        self.max_offset = new_max;
        self.min_offset = self.min_offset.min(new_max);
        Ok(removed)
    }

    /// Raises the min offset past entries below `log_min` (deleted by retention) and removes
    /// files that hold only such entries.
    pub fn delete_below_phys(&mut self, log_min: u64) -> Result<(), CqError> {
        let new_min = self.first_at_or_after_phys(log_min)?;
        self.min_offset = new_min;
        let keep_start = self.file_start_of(new_min);
        self.files.remove_below(keep_start)?;
        Ok(())
    }

    /// Removes every file: the queue is rebuilt from the log.
    pub fn clear(&mut self) -> Result<(), CqError> {
        self.files.remove_range(..)?;
        self.pending.clear();
        self.min_offset = 0;
        self.max_offset = 0;
        self.written = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of 4 entries per file holding entries 0..count, entry `i` at phys `i * 100`.
    fn filled(dir: &Path, count: u64) -> ConsumeQueue {
        let (mut q, _) = ConsumeQueue::open("T/0".into(), dir, 4).unwrap();
        for i in 0..count {
            assert_eq!(q.put(i, entry(i * 100)).unwrap(), PutOutcome::Added);
        }
        q
    }

    /// Cuts the queue file that starts at byte `start` of the queue to `len` bytes.
    fn cut_file(dir: &Path, start: u64, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(fsutil::offset_file_name(start)))
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    fn entry(phys: u64) -> CqEntry {
        CqEntry {
            phys_offset: phys,
            size: 100,
            tag_code: 7,
        }
    }

    #[test]
    fn entries_survive_reopen_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = filled(dir.path(), 10);
        assert_eq!(q.put(3, entry(300)).unwrap(), PutOutcome::AlreadyPresent);
        assert!(matches!(
            q.put(3, entry(301)),
            Err(CqError::Conflict { .. })
        ));
        assert!(matches!(
            q.put(11, entry(1100)),
            Err(CqError::Gap { expected: 10, .. })
        ));
        q.sync().unwrap();
        drop(q);
        let (q, report) = ConsumeQueue::open("T/0".into(), dir.path(), 4).unwrap();
        assert_eq!(report, CqOpenReport::default());
        assert_eq!((q.min_offset(), q.max_offset()), (0, 10));
        assert_eq!(q.entries(8, 5).unwrap(), vec![entry(800), entry(900)]);
    }

    /// The run reads (one `pread` per file) give what entry-by-entry reads give: across file
    /// boundaries, into the pending tail, and over a file cut short under the queue (holes).
    #[test]
    fn entries_read_by_file_runs_agree_with_single_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = filled(dir.path(), 10);
        q.write_out().unwrap();
        for i in 10..13 {
            q.put(i, entry(i * 100)).unwrap();
        }
        let single = |q: &ConsumeQueue, from: u64, count: u64| -> Vec<CqEntry> {
            (from..(from + count).min(q.max_offset()))
                .map(|o| q.entry(o).unwrap())
                .collect()
        };
        for from in 0..13 {
            for count in [1, 2, 3, 5, 9, 20] {
                assert_eq!(
                    q.entries(from, count as usize).unwrap(),
                    single(&q, from, count),
                    "from {from}, {count} entries"
                );
            }
        }
        assert_eq!(q.entries(2, 9).unwrap()[7], entry(900));
        // The middle file (entries 4..8) cut to one and a half entries under the open queue.
        cut_file(dir.path(), 4 * CQ_ENTRY_SIZE, 30);
        let read = q.entries(3, 6).unwrap();
        assert_eq!(read, single(&q, 3, 6));
        assert_eq!(read[1], entry(400), "the whole entry left is read");
        assert!(read[2].is_hole(), "the cut entries are holes: {read:?}");
        assert_eq!(read[5], entry(800));
    }

    #[test]
    fn truncate_from_phys_cuts_pending_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = filled(dir.path(), 10);
        q.write_out().unwrap();
        q.put(10, entry(1000)).unwrap();
        assert_eq!(q.truncate_from_phys(550).unwrap(), 5);
        assert_eq!(q.max_offset(), 6);
        drop(q);
        let (q, _) = ConsumeQueue::open("T/0".into(), dir.path(), 4).unwrap();
        assert_eq!(q.max_offset(), 6);
        assert_eq!(q.last_entry().unwrap(), Some(entry(500)));
    }

    #[test]
    fn short_middle_file_asks_for_rebuild_and_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = filled(dir.path(), 10);
        q.sync().unwrap();
        drop(q);
        cut_file(dir.path(), 0, 30);
        cut_file(dir.path(), 8 * CQ_ENTRY_SIZE, 25);
        let (q, report) = ConsumeQueue::open("T/0".into(), dir.path(), 4).unwrap();
        assert!(report.needs_rebuild);
        assert_eq!(report.torn_bytes_cut, 5);
        assert_eq!(q.max_offset(), 9);
    }

    #[test]
    fn retention_raises_min_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = filled(dir.path(), 10);
        q.sync().unwrap();
        q.delete_below_phys(450).unwrap();
        assert_eq!(q.min_offset(), 5);
        assert!(!dir.path().join(fsutil::offset_file_name(0)).exists());
        assert_eq!(q.entries(0, 2).unwrap(), vec![entry(500), entry(600)]);
    }

    #[test]
    fn foreign_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let err = ConsumeQueue::open("T/0".into(), dir.path(), 4).unwrap_err();
        assert!(err.to_string().contains("notes.txt"), "{err}");
    }
}
