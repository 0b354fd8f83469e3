//! The single appender: assigns physical and queue offsets and encodes records into a tail
//! of in-memory chunks; [`commit_chunks`] later writes the chunks to the segment files.
//!
//! Appends are memory copies under the append lock. A committer (the flusher before each
//! fsync; under `AsyncFlush` an appender waiting for its acknowledgement, and the dispatcher
//! on its ~1 ms tick; see `store::commit`) takes the whole tail under the lock — a swap — and
//! writes it outside the lock, so appenders never hold the lock across a write system call
//! and one `pwrite` (plus, under `SyncFlush`, one `fdatasync`) covers a whole group of
//! appenders. Under `AsyncFlush` with mapped writes a small chunk is copied into the
//! segment's map instead of written (`super::mapping`); the rules below hold either way.
//!
//! Invariants:
//! 1. Only the holder of the writer lock appends; physical offsets and per-queue offsets are
//!    assigned under it, so queue offsets are dense and follow log order.
//! 2. The tail holds exactly the bytes `[committed end, write_pos)`, as one chunk per segment;
//!    a chunk that ends a segment ends with its BLANK marker.
//! 3. Commits are serialised by the caller and write chunks in order, so the committed end
//!    only grows and every byte below it is in the files.
//! 4. A failed commit poisons the store: the chunk's records cannot be written, and the
//!    offsets already assigned to them must never be reused for other records.
//! 5. Store timestamps never decrease along the log (`max(now, last)`), so a binary search
//!    by time over a ConsumeQueue is valid.

use std::collections::HashMap;
use std::sync::Arc;

use ferromq_protocol::{EncodedRecord, BLANK_MAGIC};

use super::{CommitLog, Segment, BLANK_LEN};
use crate::error::FileError;
use crate::offsets::OffsetView;

/// Bytes of uncommitted tail above which an appender commits the tail itself before
/// returning (backpressure when the committer falls behind).
pub const TAIL_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Uncommitted bytes of one segment, starting at physical offset `start`.
#[derive(Debug, Default)]
pub struct TailChunk {
    /// Physical offset of `bytes[0]`.
    pub start: u64,
    /// Encoded records (and possibly a final BLANK marker).
    pub bytes: Vec<u8>,
    /// The chunk ends with a BLANK marker: the log continues at the next segment.
    pub ends_segment: bool,
}

impl TailChunk {
    fn new(start: u64, bytes: Vec<u8>) -> TailChunk {
        TailChunk {
            start,
            bytes,
            ends_segment: false,
        }
    }

    /// Where the log continues after this chunk.
    pub fn end(&self, segment_size: u64) -> u64 {
        if self.ends_segment {
            self.start - self.start % segment_size + segment_size
        } else {
            self.start + self.bytes.len() as u64
        }
    }
}

/// Where one appended record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// CommitLog offset of the record.
    pub phys_offset: u64,
    /// Its ConsumeQueue offset.
    pub queue_offset: u64,
    /// Record size in bytes.
    pub size: u32,
    /// Queue the record went to.
    pub queue_id: u32,
    /// Assigned store time.
    pub store_timestamp_ms: i64,
}

/// A verified record to append as it is (see [`WriterState::append_verbatim`]).
#[derive(Debug, Clone, Copy)]
pub struct VerbatimRecord<'a> {
    /// The whole record, sealed by its first writer.
    pub bytes: &'a [u8],
    /// Its topic.
    pub topic: &'a str,
    /// Its queue.
    pub queue_id: u32,
    /// The queue offset it carries.
    pub queue_offset: u64,
    /// The store time it carries.
    pub store_timestamp_ms: i64,
}

/// State owned by the append lock.
#[derive(Debug, Default)]
pub struct WriterState {
    write_pos: u64,
    tail: Vec<TailChunk>,
    tail_bytes: usize,
    queue_offsets: HashMap<String, HashMap<u32, u64>>,
    last_store_timestamp_ms: i64,
    /// The offset view including commits appended but not yet dispatched; commits are checked
    /// against it under the append lock, so the record order decides every conflict.
    pub offsets: OffsetView,
}

impl WriterState {
    /// A writer continuing at `write_pos` (which must be the end of the files) with the given
    /// next queue offsets.
    pub fn new(
        write_pos: u64,
        queue_offsets: HashMap<String, HashMap<u32, u64>>,
        last_store_timestamp_ms: i64,
        offsets: OffsetView,
    ) -> WriterState {
        WriterState {
            write_pos,
            tail: Vec::new(),
            tail_bytes: 0,
            queue_offsets,
            last_store_timestamp_ms,
            offsets,
        }
    }

    /// Next queue offset of (topic, queue): the queue's max offset as producers see it.
    pub fn queue_max(&self, topic: &str, queue_id: u32) -> u64 {
        self.queue_offsets
            .get(topic)
            .and_then(|queues| queues.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// The writer's offset view and queue table, borrowed together.
    pub fn split_offsets(&mut self) -> (&mut OffsetView, &HashMap<String, HashMap<u32, u64>>) {
        (&mut self.offsets, &self.queue_offsets)
    }

    /// End of the log including the uncommitted tail.
    pub fn write_pos(&self) -> u64 {
        self.write_pos
    }

    /// Bytes appended but not yet committed.
    pub fn tail_bytes(&self) -> usize {
        self.tail_bytes
    }

    /// Appends `records` (topic, encoded record) as one batch; they reach the files at the
    /// next commit.
    pub fn append(
        &mut self,
        segment_size: u64,
        now_ms: i64,
        records: &mut [(&str, EncodedRecord)],
    ) -> Vec<Placement> {
        let store_ts = now_ms.max(self.last_store_timestamp_ms);
        let mut placements = Vec::with_capacity(records.len());
        for (topic, record) in records.iter_mut() {
            let len = record.len() as u64;
            debug_assert!(len + BLANK_LEN <= segment_size, "caller checks the size");
            let used = self.write_pos % segment_size;
            if used + len + BLANK_LEN > segment_size {
                self.append_blank(segment_size);
            }
            let queue_id = record.queue_id();
            let queue_offset = self.next_queue_offset(topic, queue_id);
            record.finalize(queue_offset, self.write_pos, store_ts);
            self.chunk_at_write_pos()
                .extend_from_slice(record.as_bytes());
            self.tail_bytes += len as usize;
            placements.push(Placement {
                phys_offset: self.write_pos,
                queue_offset,
                size: len as u32,
                queue_id,
                store_timestamp_ms: store_ts,
            });
            self.write_pos += len;
        }
        self.last_store_timestamp_ms = store_ts;
        placements
    }

    /// Ends the current segment with a BLANK marker: the log continues at the next segment.
    pub fn append_blank(&mut self, segment_size: u64) {
        let remaining = segment_size - self.write_pos % segment_size;
        let chunk = self.chunk_at_write_pos();
        chunk.extend_from_slice(&(remaining as u32).to_be_bytes());
        chunk.extend_from_slice(&BLANK_MAGIC.to_be_bytes());
        self.tail.last_mut().expect("chunk exists").ends_segment = true;
        self.tail_bytes += BLANK_LEN as usize;
        self.write_pos += remaining;
    }

    /// Appends a record another store sealed (a replica copying its master), byte for byte.
    /// The caller has verified it: it belongs at `write_pos`, fits the segment, carries the
    /// queue's next offset and a store time no older than the last one, so the writer's
    /// invariants 1 and 5 hold as if this writer had assigned them.
    pub fn append_verbatim(&mut self, record: &VerbatimRecord<'_>) {
        debug_assert_eq!(
            record.queue_offset,
            self.queue_max(record.topic, record.queue_id)
        );
        self.next_queue_offset(record.topic, record.queue_id);
        self.chunk_at_write_pos().extend_from_slice(record.bytes);
        self.tail_bytes += record.bytes.len();
        self.write_pos += record.bytes.len() as u64;
        self.last_store_timestamp_ms = self.last_store_timestamp_ms.max(record.store_timestamp_ms);
    }

    /// Store time of the newest record (the floor of the next one's).
    pub fn last_store_timestamp_ms(&self) -> i64 {
        self.last_store_timestamp_ms
    }

    /// The chunk that continues at `write_pos` (a new one after a segment roll or a commit).
    /// A chunk that ends a segment is never continued, even when its BLANK marker filled the
    /// segment to the last byte and its bytes end exactly at `write_pos`: the next record
    /// belongs to the next segment's file.
    fn chunk_at_write_pos(&mut self) -> &mut Vec<u8> {
        let continues = self.tail.last().is_some_and(|chunk| {
            !chunk.ends_segment && chunk.start + chunk.bytes.len() as u64 == self.write_pos
        });
        if !continues {
            self.tail.push(TailChunk::new(self.write_pos, Vec::new()));
        }
        &mut self.tail.last_mut().expect("pushed above").bytes
    }

    /// Takes the uncommitted tail, leaving an empty one; `spare` supplies reusable buffers.
    pub fn take_tail(&mut self, spare: &mut Vec<Vec<u8>>) -> Vec<TailChunk> {
        self.tail_bytes = 0;
        let taken = std::mem::take(&mut self.tail);
        if let Some(buffer) = spare.pop() {
            self.tail.push(TailChunk::new(self.write_pos, buffer));
        }
        taken
    }

    fn next_queue_offset(&mut self, topic: &str, queue_id: u32) -> u64 {
        let queues = match self.queue_offsets.get_mut(topic) {
            Some(queues) => queues,
            None => self.queue_offsets.entry(topic.to_string()).or_default(),
        };
        let next = queues.entry(queue_id).or_insert(0);
        let queue_offset = *next;
        *next += 1;
        queue_offset
    }

    /// Resets the writer after a truncation or recovery; an uncommitted tail is dropped.
    pub fn reset(
        &mut self,
        write_pos: u64,
        queue_offsets: HashMap<String, HashMap<u32, u64>>,
        last_store_timestamp_ms: i64,
        offsets: OffsetView,
    ) {
        self.write_pos = write_pos;
        self.tail.clear();
        self.tail_bytes = 0;
        self.queue_offsets = queue_offsets;
        self.last_store_timestamp_ms = last_store_timestamp_ms;
        self.offsets = offsets;
    }
}

/// Writes taken tail chunks to their segments, in order, creating segments as needed, and
/// publishes the new committed end. The caller serialises commits (invariant 3) and poisons
/// the store when this fails (invariant 4).
pub fn commit_chunks(log: &CommitLog, chunks: &[TailChunk]) -> Result<(), FileError> {
    for chunk in chunks.iter().filter(|c| !c.bytes.is_empty()) {
        let segment = match log.segment_for(chunk.start) {
            Some(segment) => segment,
            None => {
                let start = log.segment_start_of(chunk.start);
                let segment = Arc::new(Segment::create(log.dir(), start)?);
                log.insert_segment(segment.clone());
                segment
            }
        };
        let at = chunk.start - segment.start;
        if let Some(preallocator) = log.preallocator() {
            let end = at + chunk.bytes.len() as u64;
            preallocator.make_room(log, &segment, at, end);
        }
        if log.faults.take_write() {
            segment.write_all_at(at, &chunk.bytes[..chunk.bytes.len() / 2])?;
            return Err(FileError::new(
                "write",
                segment.path(),
                crate::faults::disk_full(),
            ));
        }
        if !segment.copy_mapped(at, &chunk.bytes) {
            segment.write_all_at(at, &chunk.bytes)?;
        }
        if let Some(preallocator) = log.preallocator().filter(|_| chunk.ends_segment) {
            preallocator.trim_rolled(&segment, at + chunk.bytes.len() as u64);
        }
        debug_assert_eq!(
            chunk.start,
            log.committed_end(),
            "chunks are committed in order"
        );
        log.publish_committed_end(chunk.end(log.segment_size()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::DraftRecord;

    fn encoded(body: &[u8]) -> EncodedRecord {
        let host = "127.0.0.1:10911".parse().expect("address");
        DraftRecord::plain("T", 0, body, &[], host, 1)
            .encode()
            .expect("encode")
    }

    /// Two records end exactly `BLANK_LEN` bytes before the segment end, so the third rolls
    /// with a BLANK that fills the segment to its last byte: the third record must start a
    /// new chunk at the next segment, not be appended to the BLANK's chunk (whose bytes end
    /// exactly where it starts), or it would be written into the previous segment's file.
    #[test]
    fn a_record_after_a_blank_that_fills_the_segment_starts_a_new_chunk() {
        let len = encoded(b"body").len() as u64;
        let segment_size = 2 * len + BLANK_LEN;
        let mut writer = WriterState::new(0, HashMap::new(), 0, OffsetView::default());
        let mut records: Vec<(&str, EncodedRecord)> =
            (0..3).map(|_| ("T", encoded(b"body"))).collect();
        let placements = writer.append(segment_size, 1, &mut records);
        assert_eq!(placements[2].phys_offset, segment_size);
        assert_eq!(writer.write_pos(), segment_size + len);
        let chunks = writer.take_tail(&mut Vec::new());
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(chunks[0].start, 0);
        assert!(chunks[0].ends_segment);
        assert_eq!(chunks[0].bytes.len() as u64, segment_size);
        assert_eq!(chunks[0].end(segment_size), segment_size);
        assert_eq!(chunks[1].start, segment_size);
        assert!(!chunks[1].ends_segment);
        assert_eq!(chunks[1].bytes.len() as u64, len);
    }
}
