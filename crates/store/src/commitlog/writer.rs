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
    /// Capacity of a tail buffer started while no spare one is at hand: the size of the last
    /// tail taken (see [`tail_capacity_for`]), so a batch's records are copied once instead
    /// of through every doubling of a buffer started empty.
    fresh_capacity: usize,
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
            fresh_capacity: 0,
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
    ///
    /// Queue offsets are reserved once per run of consecutive records for the same queue (a
    /// batch's records all go to one queue), not looked up per record; each record of a run
    /// still gets the next offset in log order (invariant 1).
    pub fn append(
        &mut self,
        segment_size: u64,
        now_ms: i64,
        records: &mut [(&str, EncodedRecord)],
    ) -> Vec<Placement> {
        let store_ts = now_ms.max(self.last_store_timestamp_ms);
        let mut placements = Vec::with_capacity(records.len());
        let mut rest = records;
        while let Some(&(topic, ref first)) = rest.first() {
            let queue_id = first.queue_id();
            let run = same_queue_run(rest, topic, queue_id);
            let first_offset = self.reserve_queue_offsets(topic, queue_id, run as u64);
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(run);
            for (queue_offset, (_, record)) in (first_offset..).zip(head.iter_mut()) {
                placements.push(self.place(segment_size, store_ts, queue_offset, record));
            }
            rest = tail;
        }
        self.last_store_timestamp_ms = store_ts;
        placements
    }

    /// Seals `record` at `write_pos` with `queue_offset` and copies it into the tail,
    /// ending the segment first when the record does not fit before its end.
    fn place(
        &mut self,
        segment_size: u64,
        store_ts: i64,
        queue_offset: u64,
        record: &mut EncodedRecord,
    ) -> Placement {
        let len = record.len() as u64;
        debug_assert!(len + BLANK_LEN <= segment_size, "caller checks the size");
        let used = self.write_pos % segment_size;
        if used + len + BLANK_LEN > segment_size {
            self.append_blank(segment_size);
        }
        record.finalize(queue_offset, self.write_pos, store_ts);
        self.chunk_at_write_pos()
            .extend_from_slice(record.as_bytes());
        self.tail_bytes += len as usize;
        let placement = Placement {
            phys_offset: self.write_pos,
            queue_offset,
            size: len as u32,
            queue_id: record.queue_id(),
            store_timestamp_ms: store_ts,
        };
        self.write_pos += len;
        placement
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
        self.reserve_queue_offsets(record.topic, record.queue_id, 1);
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
            let buffer = Vec::with_capacity(self.fresh_capacity);
            self.tail.push(TailChunk::new(self.write_pos, buffer));
        }
        &mut self.tail.last_mut().expect("pushed above").bytes
    }

    /// Takes the uncommitted tail, leaving an empty one; `spare` supplies reusable buffers.
    pub fn take_tail(&mut self, spare: &mut Vec<Vec<u8>>) -> Vec<TailChunk> {
        if self.tail_bytes > 0 {
            self.fresh_capacity = tail_capacity_for(self.tail_bytes);
        }
        self.tail_bytes = 0;
        let taken = std::mem::take(&mut self.tail);
        if let Some(buffer) = spare.pop() {
            self.tail.push(TailChunk::new(self.write_pos, buffer));
        }
        taken
    }

    /// Reserves `count` consecutive offsets of (topic, queue) and returns the first: one
    /// map lookup for a whole run of records.
    fn reserve_queue_offsets(&mut self, topic: &str, queue_id: u32, count: u64) -> u64 {
        let queues = match self.queue_offsets.get_mut(topic) {
            Some(queues) => queues,
            None => self.queue_offsets.entry(topic.to_string()).or_default(),
        };
        let next = queues.entry(queue_id).or_insert(0);
        let first = *next;
        *next += count;
        first
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

/// How many records at the start of `records` go to (topic, queue_id); at least one when
/// `records` starts with such a record.
fn same_queue_run(records: &[(&str, EncodedRecord)], topic: &str, queue_id: u32) -> usize {
    records
        .iter()
        .take_while(|(t, record)| *t == topic && record.queue_id() == queue_id)
        .count()
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
                let segment = Arc::new(new_segment(log, start)?);
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
        let ahead = log.preallocator().and_then(|p| p.populate_ahead());
        if !segment.copy_mapped(at, &chunk.bytes, ahead) {
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

/// The file for the segment at `start`: the one prepared for it when ready (mapped writes,
/// `super::next_segment`), else a new one.
fn new_segment(log: &CommitLog, start: u64) -> Result<Segment, FileError> {
    let Some(space) = log.preallocator() else {
        return Segment::create(log.dir(), start);
    };
    let Some(next) = space.next_segment() else {
        return Segment::create(log.dir(), start);
    };
    let path = log.dir().join(crate::fsutil::offset_file_name(start));
    match next.take(start, &path) {
        Ok(Some(file)) => return Ok(Segment::adopt(path, start, file)),
        Ok(None) => {}
        Err(error) => space.note_next_segment_failure(&error),
    }
    Segment::create(log.dir(), start)
}

/// Largest capacity a fresh tail buffer starts with. Committed buffers wait for the
/// dispatcher, which bounds them by length (`store::committed`); a buffer's unused capacity
/// is at most this much.
const FRESH_TAIL_CAPACITY_MAX: usize = 256 * 1024;

/// The capacity for a fresh tail buffer after a tail of `taken` bytes: commits come in
/// similar sizes (a batch, a group of single sends), so the next tail likely needs as much.
fn tail_capacity_for(taken: usize) -> usize {
    taken.min(FRESH_TAIL_CAPACITY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::DraftRecord;

    fn encoded(body: &[u8]) -> EncodedRecord {
        encoded_for("T", 0, body)
    }

    fn encoded_for(topic: &str, queue_id: u32, body: &[u8]) -> EncodedRecord {
        let host = "127.0.0.1:10911".parse().expect("address");
        DraftRecord::plain(topic, queue_id, body, &[], host, 1)
            .encode()
            .expect("encode")
    }

    /// Offsets are reserved per run of same-queue records: a batch that interleaves queues
    /// and topics (and rolls a segment inside a run) must still give every queue dense
    /// offsets in log order, continuing the queue's previous ones.
    #[test]
    fn interleaved_runs_get_dense_offsets_per_queue_in_log_order() {
        let len = encoded(b"body").len() as u64;
        let segment_size = 3 * len + BLANK_LEN;
        let existing = HashMap::from([("T".to_string(), HashMap::from([(1, 7)]))]);
        let mut writer = WriterState::new(0, existing, 0, OffsetView::default());
        let layout = [
            ("T", 0),
            ("T", 0),
            ("T", 1),
            ("U", 0),
            ("T", 0),
            ("T", 0),
            ("T", 1),
        ];
        let mut records: Vec<(&str, EncodedRecord)> = layout
            .iter()
            .map(|&(topic, queue)| (topic, encoded_for(topic, queue, b"body")))
            .collect();
        let placements = writer.append(segment_size, 5, &mut records);
        let got: Vec<(u32, u64)> = placements
            .iter()
            .map(|p| (p.queue_id, p.queue_offset))
            .collect();
        assert_eq!(
            got,
            [(0, 0), (0, 1), (1, 7), (0, 0), (0, 2), (0, 3), (1, 8)]
        );
        let phys: Vec<u64> = placements.iter().map(|p| p.phys_offset).collect();
        let seg = segment_size;
        assert_eq!(
            phys,
            [0, len, 2 * len, seg, seg + len, seg + 2 * len, 2 * seg]
        );
        assert_eq!(writer.queue_max("T", 0), 4);
        assert_eq!(writer.queue_max("T", 1), 9);
        assert_eq!(writer.queue_max("U", 0), 1);
        for ((_, record), placement) in records.iter().zip(&placements) {
            let view = ferromq_protocol::RecordView::parse(record.as_bytes()).expect("sealed");
            assert_eq!(view.queue_offset, placement.queue_offset);
            assert_eq!(view.phys_offset, placement.phys_offset);
        }
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

    /// A tail started without a spare buffer is sized like the last tail taken (at most
    /// `FRESH_TAIL_CAPACITY_MAX`), so a batch of the same size fills it without regrowing;
    /// an empty take keeps the size.
    #[test]
    fn a_fresh_tail_buffer_starts_with_the_last_tails_size() {
        let segment_size = 1 << 30;
        let mut writer = WriterState::new(0, HashMap::new(), 0, OffsetView::default());
        let mut batch: Vec<(&str, EncodedRecord)> =
            (0..64).map(|_| ("T", encoded(&[7; 128]))).collect();
        writer.append(segment_size, 1, &mut batch);
        let first = writer.take_tail(&mut Vec::new());
        let batch_bytes = first[0].bytes.len();
        assert!(batch_bytes > 64 * 128);
        assert!(writer.take_tail(&mut Vec::new()).is_empty());
        let mut one = vec![("T", encoded(b"x"))];
        writer.append(segment_size, 2, &mut one);
        let second = writer.take_tail(&mut Vec::new());
        assert_eq!(second[0].bytes.capacity(), batch_bytes);
        let mut huge: Vec<(&str, EncodedRecord)> =
            (0..3).map(|_| ("T", encoded(&vec![1; 200_000]))).collect();
        writer.append(segment_size, 3, &mut huge);
        writer.take_tail(&mut Vec::new());
        writer.append(segment_size, 4, &mut [("T", encoded(b"y"))]);
        let after_huge = writer.take_tail(&mut Vec::new());
        assert_eq!(after_huge[0].bytes.capacity(), FRESH_TAIL_CAPACITY_MAX);
    }
}
