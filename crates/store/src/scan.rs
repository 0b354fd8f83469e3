//! The read-only scan of the CommitLog that recovery, `--check` and full verification share.
//!
//! # Policy for bytes that fail verification (invariant 5)
//! The scan walks records from a start position, verifying each (size within the store's one
//! record size limit, magic, inner lengths, whole-record CRC, stored physical offset). At the
//! first bad record it looks for the next position that holds a valid record (or a valid
//! end-of-segment marker) anywhere after it:
//! - nothing valid follows: the bad bytes are a torn tail, the end of a write a crash
//!   interrupted. Recovery cuts the log there ([`LogScan::tail`]).
//! - a valid record follows: the bad bytes are damage in the middle of the log (a flipped
//!   byte, a zeroed block), not a torn write, and the records after it were acknowledged.
//!   The range is quarantined ([`LogScan::damaged`]) and the scan goes on after it; nothing
//!   valid is ever cut because of damage in front of it.
//!
//! A candidate resynchronisation point must carry a record magic, a plausible size, its own
//! position in PHYSICALOFFSET and a matching CRC; an end-of-segment marker must end exactly at
//! its segment's end. The scan reads only; applying its findings is the caller's job.

use ferromq_protocol::{peek_magic, peek_total_size, RecordView, BLANK_MAGIC, MAGIC_V1, MAGIC_V2};

use crate::commitlog::CommitLog;
use crate::error::FileError;
use crate::quarantine::{QuarantineKind, QuarantinedRange};

/// Bytes read per step of a scan (a record larger than this is read whole on its own).
const SCAN_CHUNK_BYTES: usize = 4 << 20;
/// Bytes examined per step of a resynchronisation search.
const RESYNC_WINDOW_BYTES: usize = 1 << 20;
/// Bytes of a record header the resynchronisation filter looks at (TOTALSIZE .. PHYSICALOFFSET).
const RESYNC_HEADER_BYTES: usize = 36;
/// Damaged ranges one scan follows at most (the quarantine lists every one of them, so the
/// dispatcher can jump over each); past that the scan stops and says so, rather than guess
/// or cut: a scan of garbage stays bounded in memory.
pub const DAMAGED_RANGES_MAX: usize = crate::quarantine::QUARANTINE_LIST_MAX;

/// The bad bytes at the end of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the valid log ends.
    pub phys_offset: u64,
    /// Why the bytes there are not a record.
    pub reason: String,
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogScan {
    /// End of the valid log: the position after the last valid record or marker.
    pub end: u64,
    /// Damaged ranges with valid records after them, in log order.
    pub damaged: Vec<QuarantinedRange>,
    /// The bad bytes after the last valid record, if any are present.
    pub tail: Option<TornTail>,
    /// Bytes of valid records and markers verified.
    pub verified_bytes: u64,
    /// Valid records verified (end-of-segment markers not counted).
    pub records: u64,
    /// The scan met more than [`DAMAGED_RANGES_MAX`] damaged ranges and stopped here, before
    /// the end of the log: what follows is unknown.
    pub stopped_at: Option<u64>,
}

enum ChunkScan {
    /// Every record in the chunk verified; the scan continues at this position.
    Advanced { next: u64, records: u64 },
    /// The record at the chunk's start is larger than the chunk: read it whole.
    NeedWhole(usize),
    /// The record at `at` is bad.
    Bad {
        at: u64,
        records: u64,
        reason: String,
    },
}

/// One step of a scan: a chunk verified, or the bad record that ended it.
enum Step {
    Advanced {
        next: u64,
        records: u64,
    },
    Bad {
        at: u64,
        records: u64,
        reason: String,
    },
}

/// The step a chunk scan starting at `pos` amounts to.
fn step_of(scan: ChunkScan, pos: u64) -> Step {
    match scan {
        ChunkScan::Advanced { next, records } => Step::Advanced { next, records },
        ChunkScan::Bad {
            at,
            records,
            reason,
        } => Step::Bad {
            at,
            records,
            reason,
        },
        // The record does not fit in the bytes read for it.
        ChunkScan::NeedWhole(total) => Step::Bad {
            at: pos,
            records: 0,
            reason: format!("record is torn: needs {total} bytes"),
        },
    }
}

/// Verifies the log from `from` to the end of the bytes present in its files.
pub(crate) fn scan_log(log: &CommitLog, from: u64) -> Result<LogScan, FileError> {
    let data_end = data_end(log)?;
    let mut scan = LogScan {
        end: from,
        ..Default::default()
    };
    let mut pos = from;
    while pos < data_end {
        let step = match scan_step(log, pos)? {
            Some(step) => step,
            None => break,
        };
        match step {
            Step::Advanced { next, records } => {
                scan.verified_bytes += next - pos;
                scan.records += records;
                pos = next;
                scan.end = pos;
            }
            Step::Bad {
                at,
                records,
                reason,
            } => {
                scan.verified_bytes += at - pos;
                scan.records += records;
                scan.end = at;
                if scan.damaged.len() >= DAMAGED_RANGES_MAX {
                    scan.stopped_at = Some(at);
                    return Ok(scan);
                }
                let Some(next) = find_next_valid(log, at, data_end)? else {
                    scan.tail = Some(TornTail {
                        phys_offset: at,
                        reason,
                    });
                    return Ok(scan);
                };
                scan.damaged.push(QuarantinedRange {
                    phys_offset: at,
                    len: next - at,
                    kind: QuarantineKind::Damaged,
                    reason,
                });
                pos = next;
                scan.end = pos;
            }
        }
    }
    Ok(scan)
}

/// Verifies records from `pos` within its segment; `None` when `pos` is past the files.
fn scan_step(log: &CommitLog, pos: u64) -> Result<Option<Step>, FileError> {
    let Some(segment) = log.segment_for(pos) else {
        // A missing segment file in the middle: nothing is here to verify.
        return Ok(Some(Step::Bad {
            at: pos,
            records: 0,
            reason: "segment file missing".into(),
        }));
    };
    let in_segment = pos - segment.start;
    let file_len = segment.len()?;
    if in_segment >= file_len {
        if segment.start + log.segment_size() >= data_end(log)? {
            return Ok(None);
        }
        return Ok(Some(Step::Bad {
            at: pos,
            records: 0,
            reason: "segment file ends without an end-of-segment marker".into(),
        }));
    }
    let want = ((file_len - in_segment) as usize).min(SCAN_CHUNK_BYTES);
    let chunk = read_at(&segment, in_segment, want)?;
    match verify_chunk(log, &chunk, pos) {
        ChunkScan::NeedWhole(total) => {
            if in_segment + total as u64 > file_len {
                return Ok(Some(Step::Bad {
                    at: pos,
                    records: 0,
                    reason: format!(
                        "record is torn: needs {total} bytes, {} available",
                        file_len - in_segment
                    ),
                }));
            }
            let record = read_at(&segment, in_segment, total)?;
            Ok(Some(step_of(verify_chunk(log, &record, pos), pos)))
        }
        other => Ok(Some(step_of(other, pos))),
    }
}

fn read_at(
    segment: &crate::commitlog::Segment,
    pos: u64,
    len: usize,
) -> Result<Vec<u8>, FileError> {
    let mut buf = vec![0u8; len];
    let got = segment.read_at(pos, &mut buf)?;
    buf.truncate(got);
    Ok(buf)
}

/// Verifies whole records at the start of `chunk` (which starts at `pos`).
fn verify_chunk(log: &CommitLog, chunk: &[u8], pos: u64) -> ChunkScan {
    let mut at = 0usize;
    let mut records = 0u64;
    loop {
        let here = pos + at as u64;
        let bad = |reason: String| ChunkScan::Bad {
            at: here,
            records,
            reason,
        };
        let rest = &chunk[at..];
        if rest.is_empty() {
            return ChunkScan::Advanced {
                next: here,
                records,
            };
        }
        if rest.len() < 8 {
            // A short remainder of a later chunk is re-read from its start next time.
            return if at > 0 {
                ChunkScan::Advanced {
                    next: here,
                    records,
                }
            } else {
                bad(format!("torn header of {} bytes", rest.len()))
            };
        }
        let total = peek_total_size(rest).unwrap_or(0);
        if peek_magic(rest) == BLANK_MAGIC {
            let segment_end = log.segment_start_of(here) + log.segment_size();
            if here + total as u64 != segment_end {
                return bad(format!("end-of-segment marker with wrong size {total}"));
            }
            return ChunkScan::Advanced {
                next: segment_end,
                records,
            };
        }
        if total > log.record_size_max() {
            return bad(format!(
                "record size {total} exceeds the store's record size limit {}",
                log.record_size_max()
            ));
        }
        if total > rest.len() {
            return if at > 0 {
                ChunkScan::Advanced {
                    next: here,
                    records,
                }
            } else {
                ChunkScan::NeedWhole(total)
            };
        }
        match RecordView::parse(&rest[..total]) {
            Ok(view) if view.phys_offset == here => {
                at += total;
                records += 1;
            }
            Ok(view) => return bad(format!("record says it belongs at {}", view.phys_offset)),
            Err(error) => return bad(error.to_string()),
        }
    }
}

/// The first position after `bad` (up to `data_end`) holding a valid record or end-of-segment
/// marker, if any.
fn find_next_valid(log: &CommitLog, bad: u64, data_end: u64) -> Result<Option<u64>, FileError> {
    let mut pos = bad + 1;
    while pos < data_end {
        let segment_start = log.segment_start_of(pos);
        let Some(segment) = log.segment_for(pos) else {
            pos = segment_start + log.segment_size();
            continue;
        };
        let file_len = segment.len()?;
        let in_segment = pos - segment_start;
        if in_segment >= file_len {
            pos = segment_start + log.segment_size();
            continue;
        }
        let window = read_at(
            &segment,
            in_segment,
            RESYNC_WINDOW_BYTES.min((file_len - in_segment) as usize),
        )?;
        for offset in 0..window.len() {
            let candidate = pos + offset as u64;
            if is_resync_point(log, &segment, &window[offset..], candidate, file_len)? {
                return Ok(Some(candidate));
            }
        }
        pos += window.len() as u64;
    }
    Ok(None)
}

/// Whether a valid record or end-of-segment marker starts at `candidate`; `head` holds the
/// bytes from there (possibly fewer than a header when near a window's end).
fn is_resync_point(
    log: &CommitLog,
    segment: &crate::commitlog::Segment,
    head: &[u8],
    candidate: u64,
    file_len: u64,
) -> Result<bool, FileError> {
    // Most candidates fail on their magic: check it before copying anything (a search over
    // megabytes of zeros, preallocated space after a torn write, stays quick).
    if head.len() >= 8 && ![BLANK_MAGIC, MAGIC_V1, MAGIC_V2].contains(&peek_magic(head)) {
        return Ok(false);
    }
    let in_segment = candidate - segment.start;
    let mut header = head[..head.len().min(RESYNC_HEADER_BYTES)].to_vec();
    if header.len() < RESYNC_HEADER_BYTES && in_segment + (header.len() as u64) < file_len {
        header = read_at(segment, in_segment, RESYNC_HEADER_BYTES)?;
    }
    if header.len() < 8 {
        return Ok(false);
    }
    let total = peek_total_size(&header).unwrap_or(0);
    let magic = peek_magic(&header);
    if magic == BLANK_MAGIC {
        return Ok(in_segment + total as u64 == log.segment_size());
    }
    if (magic != MAGIC_V1 && magic != MAGIC_V2) || header.len() < RESYNC_HEADER_BYTES {
        return Ok(false);
    }
    let stored = u64::from_be_bytes(header[28..36].try_into().expect("8 bytes"));
    if stored != candidate || total > log.record_size_max() || in_segment + total as u64 > file_len
    {
        return Ok(false);
    }
    let record = read_at(segment, in_segment, total)?;
    Ok(RecordView::parse(&record).is_ok_and(|view| view.phys_offset == candidate))
}

/// End of the bytes present in the segment files.
pub(crate) fn data_end(log: &CommitLog) -> Result<u64, FileError> {
    match log.segments().last() {
        Some(last) => Ok(last.start + last.len()?),
        None => Ok(log.min_offset()),
    }
}
