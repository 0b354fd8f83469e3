//! Pull reads in place: a read-only, shared map of a segment, from which a record is copied
//! out directly instead of through a `pread` of the span around it.
//!
//! Why: the records of one queue lie between other queues' records, and a `pread` per
//! record costs more than copying the few records between them, so a pull read one span
//! holding all of them (`CommitLog::read_span`) and each queue's pull copied the same
//! stretch again: on an interleaved backlog `_copy_to_iter` was 22% of the broker's samples.
//! From a map a pull copies only its own records.
//!
//! The hazard of a file map is the fault (`SIGBUS`) on a page past the file's end, where a
//! `pread` would return short. So a copy happens only below [`ReadMap`]'s `safe_len`, a
//! length the file is known to reach, under the segment's read lock; every cut of the file
//! (`Segment::truncate`, `Segment::trim_space`) holds the write lock across its `set_len` and
//! lowers `safe_len` before releasing it. A copy wanting bytes past `safe_len` measures the
//! file (`lseek`) under the read lock, when no cut can run, and raises `safe_len` to what it
//! found, or gives up and leaves the read to `pread`. Only a file cut by something other than
//! the store while it runs can still fault, as it can for RocketMQ's mapped reads.
//!
//! Pages mapped by reads are page-cache pages; they count in the broker's RSS as file pages
//! (`RssFile`), which the kernel reclaims like any page cache.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;

use super::file_map::{FileMap, MapAccess};

/// A shared, read-only mapping of a whole segment span.
#[derive(Debug)]
pub(super) struct ReadMap {
    /// The mapping, read-only, of the whole segment span.
    map: FileMap,
    /// Bytes from the file's start that the file is known to hold (see the module docs).
    safe_len: AtomicU64,
}

impl ReadMap {
    /// Maps `len` bytes of `file` from its start, shared and read-only. Nothing is touched.
    pub(super) fn map(file: &File, len: u64) -> std::io::Result<ReadMap> {
        Ok(ReadMap {
            map: FileMap::map(file, len, MapAccess::ReadOnly)?,
            safe_len: AtomicU64::new(0),
        })
    }

    /// Appends the `len` bytes at `pos` of the map to `out`; `false` (nothing appended) when
    /// they lie past the mapping or past what the file holds. `file_len` measures the file;
    /// the caller holds the segment's read lock, so no cut runs meanwhile. Appending lets the
    /// runs of one pull share one buffer (a buffer per run, and its shared header, were two
    /// allocations per message on an interleaved backlog).
    pub(super) fn copy_out(
        &self,
        pos: u64,
        len: usize,
        file_len: impl FnOnce() -> Option<u64>,
        out: &mut BytesMut,
    ) -> bool {
        let Some(end) = pos.checked_add(len as u64) else {
            return false;
        };
        if end > self.map.len() as u64 {
            return false;
        }
        if end > self.safe_len.load(Ordering::Acquire) {
            let Some(measured) = file_len() else {
                return false;
            };
            self.safe_len.fetch_max(measured, Ordering::AcqRel);
            if end > measured {
                return false;
            }
        }
        out.reserve(len);
        let filled = out.len();
        // SAFETY: `[pos, end)` lies inside the mapping (`end <= map.len()`) and below the
        // file's length (`end <= safe_len`, which only exceeds the file's length after a cut
        // that holds the segment's write lock, excluded while the caller holds its read lock),
        // so every page read is backed by the file and cannot fault. The destination is `out`'s
        // spare capacity, at least `len` bytes after `reserve`, which no mapping overlaps;
        // after the copy its first `filled + len` bytes are initialised.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.base().as_ptr().add(pos as usize),
                out.as_mut_ptr().add(filled),
                len,
            );
            out.set_len(filled + len);
        }
        true
    }

    /// The file is about to be (or was just) cut to `len` bytes: no copy may reach past it
    /// until the file is measured again. Called with the segment's write lock held.
    pub(super) fn lower_safe_len(&self, len: u64) {
        self.safe_len.fetch_min(len, Ordering::AcqRel);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// The bytes `copy_out` appends after a prefix, `None` when it appends nothing (checked:
    /// a refused copy leaves the buffer as it was).
    fn copied(
        map: &ReadMap,
        pos: u64,
        len: usize,
        measure: impl FnOnce() -> Option<u64>,
    ) -> Option<Vec<u8>> {
        let mut out = BytesMut::from(&b"run before"[..]);
        if map.copy_out(pos, len, measure, &mut out) {
            assert_eq!(&out[..10], b"run before", "earlier bytes kept");
            Some(out[10..].to_vec())
        } else {
            assert_eq!(&out[..], b"run before", "nothing appended");
            None
        }
    }

    #[test]
    fn copies_only_what_the_file_holds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = super::super::file_map::scratch_file(dir.path());
        let map = ReadMap::map(&file, 1 << 20).expect("map");
        let measure = || file.metadata().ok().map(|m| m.len());
        assert_eq!(
            copied(&map, 0, 4, measure),
            None,
            "an empty file holds nothing"
        );
        file.write_all_at(b"hello, map", 5000).expect("write");
        assert_eq!(
            copied(&map, 5000, 10, measure).as_deref(),
            Some(&b"hello, map"[..])
        );
        assert_eq!(copied(&map, 5005, 6, measure), None, "past the file's end");
        assert_eq!(
            copied(&map, (1 << 20) - 2, 4, measure),
            None,
            "past the mapping"
        );
        assert_eq!(copied(&map, u64::MAX, 4, measure), None);
        map.lower_safe_len(4096);
        file.set_len(4096).expect("cut");
        assert_eq!(
            copied(&map, 5000, 10, measure),
            None,
            "measured again after a cut"
        );
        assert_eq!(copied(&map, 10, 2, || None).as_deref(), Some(&[0u8, 0][..]));
        assert_eq!(
            copied(&map, 4090, 10, || None),
            None,
            "no measure, no copy past safe_len"
        );
    }
}
