//! The single appender: assigns physical and queue offsets, encodes records into a tail
//! buffer, and commits the buffer to the segment files.
//!
//! Appends are memory copies under the append lock; `commit` writes the buffered tail to its
//! segment with one `pwrite`. The flusher commits before each fsync (so under `SyncFlush` one
//! write and one fsync cover a whole group of appenders) and, under `AsyncFlush`, the
//! dispatcher commits on its ~1 ms tick. Readers only see committed bytes.
//!
//! Invariants:
//! 1. Only the holder of the writer lock appends or commits; physical offsets and per-queue
//!    offsets are assigned under it, so queue offsets are dense and follow log order.
//! 2. `tail_start + tail.len() == write_pos`, and the tail never spans two segments: when a
//!    segment fills, its BLANK marker is committed before the next segment's first record.
//! 3. A failed commit poisons the store: the buffered records cannot be written, and the
//!    offsets already assigned to them must never be reused for other records.
//! 4. Store timestamps never decrease along the log (`max(now, last)`), so a binary search
//!    by time over a ConsumeQueue is valid.

use std::collections::HashMap;
use std::sync::Arc;

use ferromq_protocol::{EncodedRecord, BLANK_MAGIC};

use super::{CommitLog, Segment, BLANK_LEN};
use crate::error::FileError;
use crate::offsets::OffsetView;

/// The tail is committed by the appender itself once it holds this many bytes.
pub const TAIL_BYTES_MAX: usize = 512 * 1024;

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

/// State owned by the append lock.
#[derive(Debug, Default)]
pub struct WriterState {
    write_pos: u64,
    tail_start: u64,
    tail: Vec<u8>,
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
            tail_start: write_pos,
            tail: Vec::with_capacity(TAIL_BYTES_MAX + 64 * 1024),
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

    /// Appends `records` (topic, encoded record) as one batch.
    ///
    /// # Errors
    /// Only when a commit forced by a full tail or a segment roll fails; the caller must then
    /// poison the store (invariant 3).
    pub fn append(
        &mut self,
        log: &CommitLog,
        now_ms: i64,
        records: &mut [(&str, EncodedRecord)],
    ) -> Result<Vec<Placement>, FileError> {
        let segment_size = log.segment_size();
        let store_ts = now_ms.max(self.last_store_timestamp_ms);
        let mut placements = Vec::with_capacity(records.len());
        for (topic, record) in records.iter_mut() {
            let len = record.len() as u64;
            debug_assert!(len + BLANK_LEN <= segment_size, "caller checks the size");
            let used = self.write_pos % segment_size;
            if used + len + BLANK_LEN > segment_size {
                let remaining = segment_size - used;
                self.tail
                    .extend_from_slice(&(remaining as u32).to_be_bytes());
                self.tail.extend_from_slice(&BLANK_MAGIC.to_be_bytes());
                self.write_pos += BLANK_LEN;
                self.commit(log)?;
                self.write_pos += remaining - BLANK_LEN;
                self.tail_start = self.write_pos;
            }
            let queue_id = record.queue_id();
            let queue_offset = self.next_queue_offset(topic, queue_id);
            record.finalize(queue_offset, self.write_pos, store_ts);
            self.tail.extend_from_slice(record.as_bytes());
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
        log.publish_appended_end(self.write_pos);
        if self.tail.len() >= TAIL_BYTES_MAX {
            self.commit(log)?;
        }
        Ok(placements)
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

    /// Writes the buffered tail to its segment and publishes the committed end.
    pub fn commit(&mut self, log: &CommitLog) -> Result<(), FileError> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let at = self.tail_start;
        let segment = match log.segment_for(at) {
            Some(segment) => segment,
            None => {
                let segment = Arc::new(Segment::create(log.dir(), log.segment_start_of(at))?);
                log.insert_segment(segment.clone());
                segment
            }
        };
        if log.faults.take_write() {
            segment.write_all_at(at - segment.start, &self.tail[..self.tail.len() / 2])?;
            return Err(FileError::new(
                "write",
                segment.path(),
                crate::faults::disk_full(),
            ));
        }
        segment.write_all_at(at - segment.start, &self.tail)?;
        self.tail_start += self.tail.len() as u64;
        self.tail.clear();
        debug_assert_eq!(self.tail_start, self.write_pos);
        log.publish_committed_end(self.tail_start);
        Ok(())
    }

    /// Resets the writer after a truncation or recovery; the tail must have been committed.
    pub fn reset(
        &mut self,
        write_pos: u64,
        queue_offsets: HashMap<String, HashMap<u32, u64>>,
        last_store_timestamp_ms: i64,
        offsets: OffsetView,
    ) {
        self.write_pos = write_pos;
        self.tail_start = write_pos;
        self.tail.clear();
        self.queue_offsets = queue_offsets;
        self.last_store_timestamp_ms = last_store_timestamp_ms;
        self.offsets = offsets;
    }
}
