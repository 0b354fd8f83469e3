//! One CommitLog segment file: a fixed span of physical offsets starting at `start`.
//!
//! A segment's length is the end of the bytes written to it, or, for the active segment, the
//! end of the zero-filled space preallocated ahead of them (see [`super::preallocation`]); a
//! truncation is a `set_len`. Pull reads copy records out of a read-only map of the file
//! ([`super::read_map`]), which every cut excludes with the read-map lock. Under mapped writes
//! ([`super::mapping`]) the committer copies into a map of the active segment, only inside
//! space the file holds, so a disk-full error still surfaces as a failed `fallocate` or
//! write, never as a fault on the map.
//!
//! Invariant: a segment's `truncations` epoch grows before any of its bytes is cut (a
//! `truncate`, or a truncation removing the whole file), so a reader holding a
//! [`FileRegion`](super::region::FileRegion) checked at epoch `e` knows the bytes are still
//! the ones it checked as long as the epoch is still `e` once it has sent them.

use bytes::BytesMut;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};

use super::mapping::MappedSpan;
use super::populate_ahead::PopulateAhead;
use super::read_map::ReadMap;
use crate::error::FileError;
use crate::fsutil;

/// Whether a file may be changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Recovery and normal operation.
    ReadWrite,
    /// `--check` and verification: every file is opened read-only.
    ReadOnly,
}

/// An open segment.
#[derive(Debug)]
pub struct Segment {
    /// Physical offset of the segment's first byte (also its file name).
    pub start: u64,
    file: File,
    path: PathBuf,
    /// Truncations of this segment so far (see the module invariant).
    truncations: AtomicU64,
    /// Whether the file's directory entry is known to be durable: false from `create` until
    /// the first [`Segment::sync`], which makes it durable before the data.
    entry_durable: AtomicBool,
    /// The committer's map of the file under mapped writes; its room is lowered before any
    /// cut of the file, under this lock (`super::mapping`).
    mapped: Mutex<Option<MappedSpan>>,
    /// The read-only map pull reads copy from; its write lock is held across every cut of
    /// the file (`super::read_map`). Lock order: this before `mapped`.
    read_map: RwLock<ReadMapSlot>,
}

/// Whether a segment's read map exists.
#[derive(Debug)]
enum ReadMapSlot {
    /// Not mapped yet: the first pull read maps the file.
    Untried,
    Mapped(ReadMap),
    /// Mapping failed once (address space, platform): reads use `pread`.
    Unavailable,
}

impl Segment {
    /// Creates the file for the segment at `start`. Its directory entry is made durable by
    /// its first [`Segment::sync`], before any of its bytes is (so a flushed record always
    /// has its file), not here: a roll happens on the committer's path, and there the
    /// directory's fsync waited behind the flusher's writeback of the segment before
    /// (35-80 ms under ASYNC_FLUSH at full speed, docs/performance.md).
    pub fn create(dir: &Path, start: u64) -> Result<Segment, FileError> {
        let path = dir.join(fsutil::offset_file_name(start));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| FileError::new("create segment", &path, e))?;
        Ok(Segment::adopt(path, start, file))
    }

    /// The segment at `start` in `file`, just renamed to `path` (a file prepared ahead of
    /// the roll, `super::next_segment`): as [`Segment::create`], its directory entry is made
    /// durable by its first sync.
    pub fn adopt(path: PathBuf, start: u64, file: File) -> Segment {
        Segment {
            start,
            file,
            path,
            truncations: AtomicU64::new(0),
            entry_durable: AtomicBool::new(false),
            mapped: Mutex::new(None),
            read_map: RwLock::new(ReadMapSlot::Untried),
        }
    }

    /// Opens an existing segment file (`ReadOnly`: a check that must change nothing).
    pub fn open(path: PathBuf, start: u64, access: Access) -> Result<Segment, FileError> {
        let file = OpenOptions::new()
            .read(true)
            .write(access == Access::ReadWrite)
            .open(&path)
            .map_err(|e| FileError::new("open segment", &path, e))?;
        Ok(Segment {
            start,
            file,
            path,
            truncations: AtomicU64::new(0),
            entry_durable: AtomicBool::new(true),
            mapped: Mutex::new(None),
            read_map: RwLock::new(ReadMapSlot::Untried),
        })
    }

    /// Bytes in the file.
    ///
    /// Measured with `lseek(SEEK_END)`, not `stat`: asking for a file's timestamps makes
    /// Linux (6.13 and later, multigrain timestamps) give the next write a fine-grained new
    /// mtime, which dirties the inode, and on ext4 without a journal every `fdatasync` then
    /// writes the inode too: a SYNC_FLUSH fsync measured 190 µs instead of 130 µs with a
    /// `stat` between the writes (readers check the length before each reply). Every access
    /// is positional (`pread`, `pwrite`, `sendfile` with an offset), so the file position
    /// the seek moves is never used.
    #[allow(clippy::len_without_is_empty)] // fallible and on a file: `len()? == 0` reads clearly
    pub fn len(&self) -> Result<u64, FileError> {
        use std::io::{Seek, SeekFrom};
        (&self.file)
            .seek(SeekFrom::End(0))
            .map_err(|e| FileError::new("seek", &self.path, e))
    }

    /// Reads up to `buf.len()` bytes at `pos` (relative to the segment); returns the count read.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize, FileError> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FileError::new("read", &self.path, e)),
            }
        }
        Ok(done)
    }

    /// Reads up to `len` bytes at `pos` (relative to the segment) into a new buffer; shorter
    /// at the end of the file. The buffer is not zero-filled first: pull spans are up to
    /// 256 KiB, and zeroing one costs about as much as the read's own copy.
    pub fn read_vec(&self, pos: u64, len: usize) -> Result<Vec<u8>, FileError> {
        use std::os::fd::AsRawFd;
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        while buf.len() < len {
            let done = buf.len();
            let at = pos
                .checked_add(done as u64)
                .and_then(|at| libc::off_t::try_from(at).ok())
                .ok_or_else(|| {
                    FileError::new("read", &self.path, std::io::ErrorKind::InvalidInput.into())
                })?;
            let spare = &mut buf.spare_capacity_mut()[..len - done];
            // SAFETY: `spare` is this vector's unused capacity, valid for writes of
            // `spare.len()` bytes; `pread` writes at most that many into it and reads none of
            // them. The descriptor is this segment's open file, alive for the call.
            let rc = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    at,
                )
            };
            match rc {
                0 => break,
                n if n > 0 => {
                    // SAFETY: `pread` initialised the first `n <= spare.len()` bytes after
                    // `done`, so the first `done + n` bytes of the vector are initialised.
                    unsafe { buf.set_len(done + n as usize) };
                }
                _ => {
                    let error = std::io::Error::last_os_error();
                    if error.kind() != std::io::ErrorKind::Interrupted {
                        return Err(FileError::new("read", &self.path, error));
                    }
                }
            }
        }
        Ok(buf)
    }

    /// Appends the `len` bytes at `pos` (relative to the segment) to `out`, copied out of the
    /// segment's read-only map of `span` bytes, mapping the file at the first call; `false`
    /// (nothing appended) when the map is unavailable or the bytes lie past it or past the
    /// file's end, and the caller reads with `pread` instead (which reports a short file).
    pub fn read_mapped(&self, pos: u64, len: usize, span: u64, out: &mut BytesMut) -> bool {
        {
            let slot = self.read_map.read().expect("segment read-map lock");
            match &*slot {
                ReadMapSlot::Mapped(map) => return map.copy_out(pos, len, || self.len().ok(), out),
                ReadMapSlot::Unavailable => return false,
                ReadMapSlot::Untried => {}
            }
        }
        let mut slot = self.read_map.write().expect("segment read-map lock");
        if matches!(*slot, ReadMapSlot::Untried) {
            *slot = match ReadMap::map(&self.file, span) {
                Ok(map) => ReadMapSlot::Mapped(map),
                Err(error) => {
                    tracing::debug!(%error, path = %self.path.display(), "no read map: reads use pread");
                    ReadMapSlot::Unavailable
                }
            };
        }
        match &*slot {
            ReadMapSlot::Mapped(map) => map.copy_out(pos, len, || self.len().ok(), out),
            _ => false,
        }
    }

    /// Takes the read-map lock for a cut of the file to `len` bytes: no read copies from the
    /// map until it is released, and none after reaches past `len` without measuring the file.
    fn exclude_map_reads(&self, len: u64) -> RwLockWriteGuard<'_, ReadMapSlot> {
        let slot = self.read_map.write().expect("segment read-map lock");
        if let ReadMapSlot::Mapped(map) = &*slot {
            map.lower_safe_len(len);
        }
        slot
    }

    /// Writes all of `bytes` at `pos` (relative to the segment).
    pub fn write_all_at(&self, pos: u64, bytes: &[u8]) -> Result<(), FileError> {
        self.file
            .write_all_at(bytes, pos)
            .map_err(|e| FileError::new("write", &self.path, e))
    }

    /// Extends the file to `len` bytes of allocated, zero-filled space (`fallocate` with no
    /// flags: the size changes and the blocks are reserved, so later writes below `len` do
    /// not change the file's size). Never shrinks the file.
    pub fn allocate(&self, len: u64) -> Result<(), FileError> {
        allocate_file(&self.file, 0, len).map_err(|e| FileError::new("fallocate", &self.path, e))
    }

    /// Reserves blocks for the first `len` bytes without changing the file's length, so
    /// later extensions ([`Segment::allocate`]) allocate nothing. A truncation to the
    /// file's length frees what stays unused (a clean close, a roll's trim).
    pub fn reserve(&self, len: u64) -> Result<(), FileError> {
        reserve_file(&self.file, len).map_err(|e| FileError::new("reserve", &self.path, e))
    }

    /// Writes `len` zero bytes at `pos` (relative), extending the file when they pass its
    /// end. The caller makes sure no record lies there (`store::zero_ahead`).
    pub fn write_zeros(&self, pos: u64, len: u64) -> Result<(), FileError> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let mut at = pos;
        let end = pos.saturating_add(len);
        while at < end {
            let n = (end - at).min(ZEROS.len() as u64);
            self.file
                .write_all_at(&ZEROS[..n as usize], at)
                .map_err(|e| FileError::new("write zeros", &self.path, e))?;
            at += n;
        }
        Ok(())
    }

    /// Starts writing back `[from, to)` (relative) and waits for it, without a device cache
    /// flush or the file's metadata: the blocks behind freshly written zeros are allocated
    /// and written, so the next `fdatasync` of records over them writes no allocation of its
    /// own (`sync_file_range`).
    pub fn write_back(&self, from: u64, to: u64) -> Result<(), FileError> {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to.saturating_sub(from)))
        else {
            return Ok(());
        };
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: the descriptor belongs to `self.file`, open for the whole call; no memory
        // is passed to the kernel.
        let result = unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset, len, flags) };
        if result == 0 {
            Ok(())
        } else {
            Err(FileError::new(
                "sync_file_range",
                &self.path,
                std::io::Error::last_os_error(),
            ))
        }
    }

    /// Cuts preallocated space past `len` off the file. Unlike [`Segment::truncate`] no byte
    /// a reader may hold is cut (everything from `len` on is unused space), so the truncation
    /// epoch stays, and nothing is synced: space left after a crash reads as zeros past the
    /// segment's end marker, which no scan or read looks at.
    pub fn trim_space(&self, len: u64) -> Result<(), FileError> {
        let _reads = self.exclude_map_reads(len);
        let mut mapped = self.lower_mapped_room(len);
        let trimmed = self
            .file
            .set_len(len)
            .map_err(|e| FileError::new("trim", &self.path, e));
        // A segment trimmed after its end marker takes no more writes: release the map.
        *mapped = None;
        trimmed
    }

    /// Cuts the file to `len` bytes and makes the cut durable.
    pub fn truncate(&self, len: u64) -> Result<(), FileError> {
        self.retire();
        let reads = self.exclude_map_reads(len);
        let mapped = self.lower_mapped_room(len);
        self.file
            .set_len(len)
            .map_err(|e| FileError::new("truncate", &self.path, e))?;
        drop(mapped);
        drop(reads);
        self.sync()
    }

    /// Lowers the map's room to `len` and returns the lock, held across the cut.
    fn lower_mapped_room(&self, len: u64) -> MutexGuard<'_, Option<MappedSpan>> {
        let mut mapped = self.mapped.lock().expect("segment map lock");
        if let Some(span) = mapped.as_mut() {
            span.lower_room(len);
        }
        mapped
    }

    /// Bytes from the file's start that mapped copies may reach (0 without a map).
    pub fn mapped_room(&self) -> u64 {
        let mapped = self.mapped.lock().expect("segment map lock");
        mapped.as_ref().map_or(0, MappedSpan::room)
    }

    /// Records that the file holds `len` bytes of allocated space for mapped copies, mapping
    /// `span` bytes of it first if it is not mapped yet. The caller has just extended or
    /// measured the file.
    pub fn set_mapped_room(&self, len: u64, span: u64) -> Result<(), FileError> {
        let mut mapped = self.mapped.lock().expect("segment map lock");
        if mapped.is_none() {
            let map = MappedSpan::map(&self.file, span)
                .map_err(|e| FileError::new("mmap", &self.path, e))?;
            *mapped = Some(map);
        }
        mapped.as_mut().expect("mapped above").set_room(len);
        Ok(())
    }

    /// Copies `bytes` to `pos` through the map; `false` (nothing done) when there is no map
    /// or they do not fit its room, and the caller writes them with [`Segment::write_all_at`].
    /// `ahead`: the store's populating thread (`super::populate_ahead`), if it has one.
    pub fn copy_mapped(&self, pos: u64, bytes: &[u8], ahead: Option<&PopulateAhead>) -> bool {
        let mut mapped = self.mapped.lock().expect("segment map lock");
        mapped
            .as_mut()
            .is_some_and(|span| span.copy(pos, bytes, ahead))
    }

    /// `fdatasync`: the written bytes (and the length they imply) are durable when it returns,
    /// and so is the file's directory entry (fsynced first, the first time).
    pub fn sync(&self) -> Result<(), FileError> {
        if !self.entry_durable.load(Ordering::Acquire) {
            fsutil::sync_parent(&self.path)?;
            self.entry_durable.store(true, Ordering::Release);
        }
        self.file
            .sync_data()
            .map_err(|e| FileError::new("fsync", &self.path, e))
    }

    /// Whether the file's directory entry is known to be durable (see [`Segment::create`]).
    pub fn entry_durable(&self) -> bool {
        self.entry_durable.load(Ordering::Acquire)
    }

    /// Truncations of this segment so far; read it before checking bytes to send later,
    /// and again after sending them (see the module invariant).
    pub fn truncations(&self) -> u64 {
        self.truncations.load(Ordering::SeqCst)
    }

    /// Marks every byte of the segment as possibly cut: done before a truncation, and when a
    /// truncation removes the whole file.
    pub fn retire(&self) {
        self.truncations.fetch_add(1, Ordering::SeqCst);
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsFd for Segment {
    /// The open file, for `sendfile(2)` of a checked [`FileRegion`](super::region::FileRegion).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// `fallocate(file, mode, 0, len)`, retried when interrupted: mode 0 extends the file to
/// `len` with allocated, zero-reading blocks; `FALLOC_FL_KEEP_SIZE` only reserves them.
#[cfg(target_os = "linux")]
pub(crate) fn allocate_file(file: &File, mode: i32, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    loop {
        // SAFETY: `fallocate` takes a file descriptor and integers only, no memory; the
        // descriptor is `file`'s, open for writing and alive for the whole call.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn allocate_file(_file: &File, _mode: i32, _len: u64) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Allocates `len` bytes of blocks for `file` without changing its length.
pub(crate) fn reserve_file(file: &File, len: u64) -> std::io::Result<()> {
    allocate_file(file, KEEP_SIZE, len)
}

#[cfg(target_os = "linux")]
const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
/// Unused: `allocate_file` is unsupported off Linux.
#[cfg(not(target_os = "linux"))]
const KEEP_SIZE: i32 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_vec` returns exactly the file's bytes: whole, from the middle, short at the end
    /// of the file, empty past it, and across more than one `pread` worth of a large read.
    /// A created segment's directory entry is fsynced by its first sync, not by the create
    /// (which runs on the committer's path); an opened one's is durable already.
    #[test]
    fn a_created_segments_entry_is_made_durable_by_its_first_sync() {
        let dir = tempfile::tempdir().expect("temp dir");
        let segment = Segment::create(dir.path(), 0).expect("create");
        assert!(!segment.entry_durable());
        segment.write_all_at(0, b"abc").expect("write");
        assert!(!segment.entry_durable(), "a write does not sync");
        segment.sync().expect("sync");
        assert!(segment.entry_durable());
        let path = segment.path().to_path_buf();
        drop(segment);
        let opened = Segment::open(path, 0, Access::ReadWrite).expect("open");
        assert!(opened.entry_durable());
    }

    #[test]
    fn read_vec_returns_the_files_bytes_and_stops_at_its_end() {
        let dir = tempfile::tempdir().expect("temp dir");
        let segment = Segment::create(dir.path(), 0).expect("create");
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        segment.write_all_at(0, &bytes).expect("write");
        assert_eq!(segment.read_vec(0, bytes.len()).expect("read"), bytes);
        assert_eq!(
            segment.read_vec(1000, 10).expect("read"),
            &bytes[1000..1010]
        );
        let tail = segment.read_vec(299_990, 100).expect("read");
        assert_eq!(tail, &bytes[299_990..], "short at the end of the file");
        assert!(segment.read_vec(400_000, 16).expect("read").is_empty());
        assert!(segment.read_vec(0, 0).expect("read").is_empty());
        assert!(
            segment.read_vec(u64::MAX - 4, 16).is_err(),
            "offset past off_t"
        );
    }

    /// The bytes `read_mapped` appends to an empty buffer, `None` when it appends nothing.
    fn mapped(segment: &Segment, pos: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = BytesMut::new();
        let appended = segment.read_mapped(pos, len, 1 << 20, &mut out);
        assert_eq!(appended, !out.is_empty() || len == 0);
        appended.then(|| out.to_vec())
    }

    /// Reads from the read map see the file's bytes, and after a cut never reach past it
    /// (a fault there would kill the process), while bytes below the cut still read.
    #[test]
    fn read_map_copies_committed_bytes_and_never_past_a_cut() {
        let dir = tempfile::tempdir().expect("temp dir");
        let segment = Segment::create(dir.path(), 0).expect("create");
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i % 241) as u8).collect();
        segment.write_all_at(0, &bytes).expect("write");
        assert_eq!(mapped(&segment, 100, 50).as_deref(), Some(&bytes[100..150]));
        assert_eq!(mapped(&segment, 19_990, 20), None, "past the file's end");
        segment.truncate(8192).expect("truncate");
        assert_eq!(mapped(&segment, 10_000, 10), None, "past the cut");
        assert_eq!(mapped(&segment, 8190, 4), None, "across the cut");
        assert_eq!(
            mapped(&segment, 8000, 192).as_deref(),
            Some(&bytes[8000..8192])
        );
        segment.write_all_at(8192, b"new bytes").expect("write");
        assert_eq!(
            mapped(&segment, 8192, 9).as_deref(),
            Some(&b"new bytes"[..])
        );
        segment.trim_space(4096).expect("trim");
        assert_eq!(mapped(&segment, 4000, 200), None, "past a trim");
    }
}
