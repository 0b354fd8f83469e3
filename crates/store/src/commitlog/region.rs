//! File regions: a checked record described by where it lies in its segment file, so a
//! server can send it to a socket straight from the file (`sendfile(2)`) instead of copying it
//! through a buffer (RocketMQ's `transferMsgByHeap=false`).
//!
//! A region is handed out only after the record's head and tail were read and checked (size,
//! magic, inner lengths, physical offset, and whatever the caller checks of topic, queue and
//! tags: see [`CommitLog::record_region`]). Its body is **not** read, so its CRC is not
//! verified; the copying path verifies it.
//!
//! Invariant: a region remembers the segment's truncation epoch read *before* its check. The
//! sender calls [`FileRegion::check_intact`] after sending all but the reply's last byte: if no
//! truncation started since the check, the bytes sent are the bytes checked (the log is
//! append-only below its committed end; only a truncation changes them).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use ferromq_protocol::{RecordHead, RecordOutline, RECORD_HEAD_LEN_MAX};

use super::{CommitLog, Segment};
use crate::error::{FileError, ReadError};

/// Records up to this size are checked from one read of the whole record rather than two
/// (head, then tail): for small records the read costs more than the bytes. The read is a
/// copy from the segment's read map when mapped reads are on (no syscall per record; see
/// `read_map`), else a `pread`. The body is still not verified, and the bytes sent are still
/// the file's, by `sendfile`.
pub const WHOLE_READ_MAX: usize = 16 * 1024;

/// Bytes of one segment file holding whole, checked records.
#[derive(Debug, Clone)]
pub struct FileRegion {
    segment: Arc<Segment>,
    /// Position of the first byte in the segment file.
    pos: u64,
    /// Bytes.
    len: u64,
    /// The segment's truncation epoch before the check.
    epoch: u64,
    /// The span of the segment's read map when mapped reads are on (copies then come from
    /// the map, not from a `pread`).
    map_span: Option<u64>,
}

/// Why a region may no longer be sent.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The segment was truncated (or removed by a truncation) after the region was checked.
    #[error(
        "segment {path} was truncated after bytes [{pos}, {end}) were checked: they are not sent",
        path = .path.display(), end = .pos + .len
    )]
    Truncated {
        path: std::path::PathBuf,
        pos: u64,
        len: u64,
    },
    /// The file could not be read or measured.
    #[error(transparent)]
    File(#[from] FileError),
}

impl FileRegion {
    /// The last byte of every region: a record ends with its CRC property's closing
    /// separator, which the check saw. A sender may hold it back, re-check the region with
    /// [`FileRegion::check_intact`] after sending the rest, and then write it from memory,
    /// so a peer never holds a complete reply whose bytes changed under the send.
    pub const LAST_BYTE: u8 = ferromq_protocol::PROPERTY_SEPARATOR;

    /// The segment holding the bytes (its file is what `sendfile` reads).
    pub fn segment(&self) -> &Arc<Segment> {
        &self.segment
    }

    /// Position of the first byte in the segment file.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Bytes in the region.
    #[allow(clippy::len_without_is_empty)] // a region always holds a whole record
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Appends `next` when it directly follows this region in the same segment and was
    /// checked at the same epoch: one `sendfile` then covers both.
    pub fn try_merge(&mut self, next: &FileRegion) -> bool {
        if Arc::ptr_eq(&self.segment, &next.segment)
            && self.epoch == next.epoch
            && self.pos + self.len == next.pos
        {
            self.len += next.len;
            return true;
        }
        false
    }

    /// Whether the bytes are still the ones checked: no truncation of the segment began since
    /// the check, and the file still holds them.
    ///
    /// # Errors
    /// [`RegionError::Truncated`] when they may not be sent; [`RegionError::File`] when the
    /// file cannot be measured.
    pub fn check_intact(&self) -> Result<(), RegionError> {
        Self::check_all_intact(std::slice::from_ref(self))
    }

    /// [`FileRegion::check_intact`] for every region, measuring each segment file once.
    ///
    /// # Errors
    /// As [`FileRegion::check_intact`], for the first region that fails.
    pub fn check_all_intact(regions: &[FileRegion]) -> Result<(), RegionError> {
        // The furthest end needed per segment (a reply touches one or two segments).
        let mut ends: Vec<(&FileRegion, u64)> = Vec::new();
        for region in regions {
            if region.segment.truncations() != region.epoch {
                return Err(region.truncated());
            }
            let end = region.pos + region.len;
            match ends
                .iter_mut()
                .find(|(seen, _)| Arc::ptr_eq(&seen.segment, &region.segment))
            {
                Some((seen, furthest)) if end > *furthest => (*seen, *furthest) = (region, end),
                Some(_) => {}
                None => ends.push((region, end)),
            }
        }
        for (region, end) in ends {
            if region.segment.len()? < end {
                return Err(region.truncated());
            }
        }
        Ok(())
    }

    fn truncated(&self) -> RegionError {
        RegionError::Truncated {
            path: self.segment.path().to_path_buf(),
            pos: self.pos,
            len: self.len,
        }
    }

    /// Reads the region's bytes (the copying fallback), then checks it is still intact.
    ///
    /// # Errors
    /// As [`FileRegion::check_intact`]; a short read is [`RegionError::Truncated`].
    pub fn read(&self) -> Result<Vec<u8>, RegionError> {
        let mut buf = BytesMut::new();
        Self::read_all_into(std::slice::from_ref(self), &mut buf)?;
        Ok(buf.to_vec())
    }

    /// [`FileRegion::read`] of every region, in order, appended to `out` (copied from the
    /// segments' read maps when mapped reads are on), then one check that all are still
    /// intact ([`FileRegion::check_all_intact`]: each segment measured once, not once per
    /// region). On an error `out` may hold part of the bytes.
    ///
    /// # Errors
    /// As [`FileRegion::read`], for the first region that fails.
    pub fn read_all_into(regions: &[FileRegion], out: &mut BytesMut) -> Result<(), RegionError> {
        for region in regions {
            let before = out.len();
            let len = region.len as usize;
            read_into(&region.segment, region.map_span, region.pos, len, out)?;
            if out.len() - before < len {
                return Err(region.truncated());
            }
        }
        Self::check_all_intact(regions)
    }
}

/// Appends the `len` bytes at `pos` of `segment` to `out`: copied from its read map when
/// `map_span` is given and the map can serve them, else read with `pread`. Fewer bytes are
/// appended when the file ends first.
fn read_into(
    segment: &Segment,
    map_span: Option<u64>,
    pos: u64,
    len: usize,
    out: &mut BytesMut,
) -> Result<(), FileError> {
    if let Some(span) = map_span {
        if segment.read_mapped(pos, len, span, out) {
            return Ok(());
        }
    }
    let start = out.len();
    out.resize(start + len, 0);
    let got = segment.read_at(pos, &mut out[start..])?;
    out.truncate(start + got);
    Ok(())
}

impl CommitLog {
    /// The region of the record of `size` bytes (size known from a ConsumeQueue) at
    /// `phys_offset`, after reading and checking its head and tail (not its body): TOTALSIZE
    /// equals `size`, the magic and inner lengths are a record's, the stored physical offset
    /// is `phys_offset`, and `check` accepts its outline (topic, queue, queue offset, tags).
    ///
    /// # Errors
    /// As [`CommitLog::read_record`]: out of range, unreadable, [`ReadError::Corrupt`] or
    /// [`ReadError::Misplaced`]; and whatever `check` returns.
    pub fn record_region(
        &self,
        phys_offset: u64,
        size: usize,
        check: impl FnOnce(&RecordOutline<'_>) -> Result<(), ReadError>,
    ) -> Result<FileRegion, ReadError> {
        self.check_record_size(phys_offset, size)?;
        let out_of_range = || ReadError::OutOfRange {
            phys_offset,
            min: self.min_offset(),
            max: self.committed_end(),
        };
        if phys_offset < self.min_offset() || phys_offset + size as u64 > self.committed_end() {
            return Err(out_of_range());
        }
        let segment = self.segment_for(phys_offset).ok_or_else(out_of_range)?;
        // Read before the check: a truncation racing it changes the epoch the sender sees.
        let epoch = segment.truncations();
        let pos = phys_offset - segment.start;
        let corrupt = |source| ReadError::Corrupt {
            phys_offset,
            source,
        };
        let map_span = self
            .mapped_reads
            .load(Ordering::Relaxed)
            .then_some(self.segment_size);
        let mut whole = BytesMut::new();
        let mut head = [0u8; RECORD_HEAD_LEN_MAX];
        let head_bytes: &[u8] = if size <= WHOLE_READ_MAX {
            read_into(&segment, map_span, pos, size, &mut whole)?;
            &whole
        } else {
            let got = segment.read_at(pos, &mut head)?;
            &head[..got]
        };
        let parsed = RecordHead::parse(head_bytes, size).map_err(corrupt)?;
        if parsed.phys_offset != phys_offset {
            return Err(ReadError::Misplaced {
                phys_offset,
                stored: parsed.phys_offset,
            });
        }
        let mut tail = Vec::new();
        let tail_bytes: &[u8] = if size <= WHOLE_READ_MAX {
            whole.get(parsed.tail_at()..).unwrap_or_default()
        } else {
            tail.resize(parsed.tail_len(), 0);
            let got = segment.read_at(pos + parsed.tail_at() as u64, &mut tail)?;
            &tail[..got]
        };
        let outline = parsed.outline(tail_bytes).map_err(corrupt)?;
        check(&outline)?;
        Ok(FileRegion {
            segment,
            pos,
            len: size as u64,
            epoch,
            map_span,
        })
    }
}
