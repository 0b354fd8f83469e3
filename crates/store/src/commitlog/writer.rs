//! The single appender: assigns physical and queue offsets and writes records, all-or-nothing.
//!
//! Invariants:
//! 1. Only the holder of the writer lock appends; physical offsets and per-queue offsets are
//!    assigned under it, so queue offsets are dense and follow log order.
//! 2. An append that fails to write leaves the log as it was: the touched segment is cut back
//!    to its previous length and segments created by the append are removed; the queue-offset
//!    table changes only after every byte is written. If the rollback itself fails, the caller
//!    must poison the store.
//! 3. Store timestamps never decrease along the log (`max(now, last)`), so a binary search
//!    by time over a ConsumeQueue is valid.

use std::collections::HashMap;
use std::sync::Arc;

use ferromq_protocol::{EncodedRecord, BLANK_MAGIC};

use super::{CommitLog, Segment, BLANK_LEN};
use crate::error::FileError;
use crate::offsets::OffsetView;

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

/// A failed append: the error, and whether the log could be restored to its previous state.
#[derive(Debug)]
pub struct WriteFailure {
    /// The write error.
    pub error: FileError,
    /// `Some` when cutting the log back also failed: the store must be poisoned.
    pub rollback_error: Option<FileError>,
}

/// State owned by the append lock.
#[derive(Debug, Default)]
pub struct WriterState {
    write_pos: u64,
    queue_offsets: HashMap<String, HashMap<u32, u64>>,
    last_store_timestamp_ms: i64,
    buffer: Vec<u8>,
    /// The offset view including commits appended but not yet dispatched; commits are checked
    /// against it under the append lock, so the record order decides every conflict.
    pub offsets: OffsetView,
}

impl WriterState {
    /// A writer continuing at `write_pos` with the given next queue offsets.
    pub fn new(
        write_pos: u64,
        queue_offsets: HashMap<String, HashMap<u32, u64>>,
        last_store_timestamp_ms: i64,
        offsets: OffsetView,
    ) -> WriterState {
        WriterState {
            write_pos,
            queue_offsets,
            last_store_timestamp_ms,
            buffer: Vec::new(),
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

    /// End of the log as this writer knows it.
    pub fn write_pos(&self) -> u64 {
        self.write_pos
    }

    /// Appends `records` (topic, encoded record) as one batch.
    pub fn append(
        &mut self,
        log: &CommitLog,
        now_ms: i64,
        records: &mut [(&str, EncodedRecord)],
    ) -> Result<Vec<Placement>, WriteFailure> {
        let segment_size = log.segment_size();
        let store_ts = now_ms.max(self.last_store_timestamp_ms);
        let start_pos = self.write_pos;
        let mut staged: HashMap<(&str, u32), u64> = HashMap::new();
        let mut placements = Vec::with_capacity(records.len());
        let mut created: Vec<Arc<Segment>> = Vec::new();
        let mut pos = start_pos;
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        let mut buffer_pos = pos;

        let result = (|| {
            for (topic, record) in records.iter_mut() {
                let len = record.len() as u64;
                debug_assert!(len + BLANK_LEN <= segment_size, "caller checks the size");
                let used = pos % segment_size;
                if used + len + BLANK_LEN > segment_size {
                    let remaining = segment_size - used;
                    buffer.extend_from_slice(&(remaining as u32).to_be_bytes());
                    buffer.extend_from_slice(&BLANK_MAGIC.to_be_bytes());
                    self.write_buffer(log, buffer_pos, &buffer, &mut created)?;
                    buffer.clear();
                    pos += remaining;
                    buffer_pos = pos;
                }
                let queue_id = record.queue_id();
                let next = staged
                    .entry((*topic, queue_id))
                    .or_insert_with(|| self.queue_max(topic, queue_id));
                let queue_offset = *next;
                *next += 1;
                record.finalize(queue_offset, pos, store_ts);
                buffer.extend_from_slice(record.as_bytes());
                placements.push(Placement {
                    phys_offset: pos,
                    queue_offset,
                    size: len as u32,
                    queue_id,
                    store_timestamp_ms: store_ts,
                });
                pos += len;
            }
            self.write_buffer(log, buffer_pos, &buffer, &mut created)
        })();

        self.buffer = buffer;
        if let Err(error) = result {
            let rollback_error = self.roll_back(log, start_pos, &created).err();
            return Err(WriteFailure {
                error,
                rollback_error,
            });
        }
        for ((topic, queue_id), next) in staged {
            match self.queue_offsets.get_mut(topic) {
                Some(queues) => {
                    queues.insert(queue_id, next);
                }
                None => {
                    let queues = HashMap::from([(queue_id, next)]);
                    self.queue_offsets.insert(topic.to_string(), queues);
                }
            }
        }
        self.write_pos = pos;
        self.last_store_timestamp_ms = store_ts;
        log.publish_written_end(pos);
        Ok(placements)
    }

    fn write_buffer(
        &self,
        log: &CommitLog,
        at: u64,
        buffer: &[u8],
        created: &mut Vec<Arc<Segment>>,
    ) -> Result<(), FileError> {
        if buffer.is_empty() {
            return Ok(());
        }
        let segment = match log.segment_for(at) {
            Some(segment) => segment,
            None => {
                let segment = Arc::new(Segment::create(log.dir(), log.segment_start_of(at))?);
                log.insert_segment(segment.clone());
                created.push(segment.clone());
                segment
            }
        };
        if log.faults.take_write() {
            segment.write_all_at(at - segment.start, &buffer[..buffer.len() / 2])?;
            return Err(FileError::new("write", segment.path(), crate::faults::disk_full()));
        }
        segment.write_all_at(at - segment.start, buffer)
    }

    /// Restores the log to end at `start_pos` after a failed write.
    fn roll_back(
        &self,
        log: &CommitLog,
        start_pos: u64,
        created: &[Arc<Segment>],
    ) -> Result<(), FileError> {
        for segment in created {
            log.remove_segment(segment.start);
            crate::fsutil::remove_file(segment.path())?;
        }
        if let Some(segment) = log.segment_for(start_pos) {
            segment.truncate(start_pos - segment.start)?;
        }
        Ok(())
    }

    /// Resets the writer after a truncation or recovery.
    pub fn reset(
        &mut self,
        write_pos: u64,
        queue_offsets: HashMap<String, HashMap<u32, u64>>,
        last_store_timestamp_ms: i64,
        offsets: OffsetView,
    ) {
        self.write_pos = write_pos;
        self.queue_offsets = queue_offsets;
        self.last_store_timestamp_ms = last_store_timestamp_ms;
        self.offsets = offsets;
    }
}
