//! Zeroed space ahead of SYNC_FLUSH commits (`StoreConfig::zeroed_space`).
//!
//! Why: an `fdatasync` after a commit into blocks that are allocated and already written
//! writes the records only; after an append (or into `fallocate`d blocks, which are converted
//! on their first write) it also writes the allocation. On this project's disk a 32 KiB
//! write + `fdatasync` took 137–140 µs p50 over zeroed space against 216–240 µs appending and
//! 196–220 µs into `fallocate`d space (docs/performance.md). So a thread keeps the active
//! segment's file written with zeros [`ZERO_AHEAD_BYTES`] past the committed end, and commits
//! overwrite them.
//!
//! Only while commits are small (`Preallocator::zeroing_pays`): the gain is per fsync, the
//! cost per byte, and large commits (batches) are bound by the CPU the zeros take.
//!
//! Invariants:
//! 1. The zeros are covered by the durable preallocation record before the file grows
//!    (`commitlog::preallocation` invariant 1), so recovery and `--check` take zeros at the
//!    end of the last segment for space, not for a cut.
//! 2. Zeros never land on a record, nor after a segment's end marker: each chunk is written
//!    under the commit lock (every write of records and every truncation holds it), only at
//!    the file's current end, only while the segment is still the last one and not yet ended.
//!    Records are written below the file's end (over zeros) or at it (a commit that outran
//!    the zeros appends); either way they lie below the end the next chunk starts from. A
//!    replicated chunk can end exactly at a segment's end marker: its commit trims the file
//!    to the marker and the segment stays the last until the next record arrives, so the
//!    committed end, not only the segment list, tells that it is closed.
//! 3. A failure never fails a commit: it is counted, and no extension is tried again until
//!    the log passes the one that failed; commits append meanwhile.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::commitlog::preallocation::Preallocator;
use crate::error::FileError;

/// How far past the committed end the zeros reach after a round.
pub(crate) const ZERO_AHEAD_BYTES: u64 = 8 << 20;
/// A round starts when less than this is zeroed past the committed end: the zeros follow
/// the commits in small rounds rather than 4 MiB bursts, whose writeback the flusher's
/// fsyncs queued behind (64 store writers: p99 1.2-1.6 ms with 4 MiB rounds of 256 KiB
/// chunks, 1.0 ms with these; docs/performance.md).
const ZERO_REFILL_BELOW_BYTES: u64 = ZERO_AHEAD_BYTES - (512 << 10);
/// Zeros written per hold of the commit lock (a commit waits for at most this much), and
/// written back at once (an fsync waits for at most this much of their writeback).
const ZERO_CHUNK_BYTES: u64 = 128 << 10;
/// The zeroing thread's pause while commits advance.
pub(crate) const ZERO_TICK_BUSY: Duration = Duration::from_millis(2);
/// Its pause while the log stands still.
pub(crate) const ZERO_TICK_IDLE: Duration = Duration::from_millis(50);

impl Inner {
    /// One round of the zeroing thread: extends the last segment's file with zeros up to
    /// [`ZERO_AHEAD_BYTES`] past the committed end when less than
    /// [`ZERO_REFILL_BELOW_BYTES`] is left. Returns the bytes of zeros written.
    pub(super) fn zero_ahead(&self) -> u64 {
        let Some(space) = self
            .log
            .preallocator()
            .filter(|p| p.zeroes() && p.zeroing_pays())
        else {
            return 0;
        };
        if self.flush.is_poisoned() || self.closed.load(Ordering::Acquire) {
            return 0;
        }
        let Some(segment) = self.log.segments().last().cloned() else {
            return 0;
        };
        let segment_size = self.log.segment_size();
        let Some(data_end) = self.log.committed_end().checked_sub(segment.start) else {
            return 0;
        };
        if data_end >= segment_size || !space.may_extend_to(segment.start + data_end) {
            return 0;
        }
        let len = match segment.len() {
            Ok(len) => len,
            Err(error) => {
                space.note_zeroing_failure(&segment, data_end, &error);
                return 0;
            }
        };
        if len >= segment_size || len.saturating_sub(data_end) >= ZERO_REFILL_BELOW_BYTES {
            return 0;
        }
        let target = (data_end + ZERO_AHEAD_BYTES).min(segment_size);
        match self.zero_segment(space, &segment, len, target) {
            Ok(written) => written,
            Err(error) => {
                space.note_zeroing_failure(&segment, target, &error);
                0
            }
        }
    }

    /// Records the space (invariant 1), then writes zeros from `len` towards `target` chunk
    /// by chunk (invariant 2), each written back before the next. Returns the bytes of zeros written.
    fn zero_segment(
        &self,
        space: &Preallocator,
        segment: &Arc<crate::commitlog::Segment>,
        len: u64,
        target: u64,
    ) -> Result<u64, FileError> {
        let reach = (target + ZERO_AHEAD_BYTES).min(self.log.segment_size());
        space.record_space(segment, target, reach)?;
        let mut at = len;
        while at < target {
            if self.log.faults.take_preallocation() {
                let error = crate::faults::disk_full();
                return Err(FileError::new("write", segment.path(), error));
            }
            let chunk = (target - at).min(ZERO_CHUNK_BYTES);
            if !self.zero_chunk(space, segment, at, chunk)? {
                break;
            }
            // Written back chunk by chunk, outside the lock: an fsync of the flusher waits for
            // pages under writeback, so one long writeback would stall it (p99 3 ms with
            // 4 MiB at once, docs/performance.md).
            segment.write_back(at, at + chunk)?;
            at += chunk;
        }
        Ok(at - len)
    }

    /// Writes `chunk` zero bytes at `at`, the file's end, under the commit lock, unless the
    /// segment is no longer the last or was ended by its marker, the file's end moved (a
    /// commit appended, a truncation cut), or the store is closing or poisoned (invariant 2),
    /// or commits grew large since the round began (the committer updates their average under the same lock). Returns
    /// whether it wrote.
    fn zero_chunk(
        &self,
        space: &Preallocator,
        segment: &Arc<crate::commitlog::Segment>,
        at: u64,
        chunk: u64,
    ) -> Result<bool, FileError> {
        let _commits = self.lock_commits();
        let still_last = self
            .log
            .segments()
            .last()
            .is_some_and(|last| Arc::ptr_eq(last, segment));
        let ended = self.log.committed_end() >= segment.start + self.log.segment_size();
        if !still_last
            || ended
            || !space.zeroing_pays()
            || self.flush.is_poisoned()
            || self.closed.load(Ordering::Acquire)
            || segment.len()? != at
        {
            return Ok(false);
        }
        segment.write_zeros(at, chunk)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::MessageStore;
    use crate::{FlushDiskType, StoreConfig};
    use ferromq_protocol::DraftRecord;

    const SEGMENT: u64 = 64 * 1024;

    fn open(root: &std::path::Path) -> MessageStore {
        let mut config = StoreConfig::new(root);
        config.segment_size_bytes = SEGMENT;
        config.max_message_size_bytes = 16 * 1024;
        config.flush_disk_type = FlushDiskType::SyncFlush;
        config.zeroed_space = true;
        MessageStore::open(config).expect("open")
    }

    /// Copies the master's log to the replica chunk by chunk until a chunk ends the first
    /// segment at its end marker.
    fn replicate_to_first_marker(master: &MessageStore, replica: &MessageStore) {
        loop {
            let from = replica.appended_end();
            let chunk = master
                .replication_chunk(from, 4096)
                .expect("chunk")
                .expect("the master's log reaches past the first segment");
            let ticket = replica
                .append_replicated(from, &chunk.bytes, 0)
                .expect("append");
            replica
                .wait_acknowledgeable(ticket.end, ticket.epoch)
                .expect("durable");
            if chunk.next == SEGMENT {
                return;
            }
        }
    }

    /// The race a replica test once lost: a zeroing round decided on the file's length just
    /// before a replicated chunk ended the segment (its commit trims the file to the marker,
    /// and the segment stays the last one until the next record arrives). The round's write,
    /// under the commit lock, must see the segment ended and write nothing, so the file still
    /// ends at its marker, as the master's does.
    #[test]
    fn a_segment_ended_by_a_replicated_marker_gets_no_zeros() {
        let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (master, replica) = (open(m_dir.path()), open(r_dir.path()));
        let host = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let body = [b'z'; 1000];
        for _ in 0..80 {
            let draft = DraftRecord::plain("T", 0, &body, &[], host, 1_700_000_000_000);
            master.put(&[draft]).expect("put");
        }
        replicate_to_first_marker(&master, &replica);

        let inner = &replica.inner;
        let segment = inner.log.segments().last().cloned().expect("a segment");
        assert_eq!(segment.start, 0, "the ended segment is still the last one");
        let trimmed = segment.len().expect("len");
        assert!(trimmed < SEGMENT, "trimmed to its marker: {trimmed}");
        let space = inner.log.preallocator().expect("zeroed space");
        let written = inner
            .zero_segment(space, &segment, trimmed, SEGMENT)
            .expect("round");
        assert_eq!(written, 0, "zeros after the end marker");
        assert_eq!(segment.len().expect("len"), trimmed);
    }
}
