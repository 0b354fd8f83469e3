//! Reads for zero-copy sending: the same reads as [`MessageStore::get_messages`], but each
//! message is handed out as a [`FileRegion`] of its segment file instead of its bytes.
//!
//! Each record's head and tail are read and checked (size, magic, inner lengths, physical
//! offset, and that it is the record its ConsumeQueue entry indexed: same topic, queue and
//! queue offset; its tags for the filter), exactly like the copying read checks them. Its
//! body is not read, so the body CRC is **not** verified here — the copying read verifies it,
//! which is why the broker's `transferMsgByHeap` defaults to the copying path.

use ferromq_protocol::RecordOutline;

use super::read::{QueueRange, Stored};
use super::{GetResult, MessageStore, TagFilter};
use crate::commitlog::FileRegion;
use crate::consume_queue::CqEntry;
use crate::error::ReadError;

/// One message as a region of its segment file.
#[derive(Debug, Clone)]
pub struct StoredRegion {
    /// Its queue offset.
    pub queue_offset: u64,
    /// Its CommitLog offset.
    pub phys_offset: u64,
    /// Where its checked record lies.
    pub region: FileRegion,
}

impl Stored for StoredRegion {
    fn queue_offset(&self) -> u64 {
        self.queue_offset
    }
    fn phys_offset(&self) -> u64 {
        self.phys_offset
    }
    fn stored_len(&self) -> usize {
        self.region.len() as usize
    }
}

impl MessageStore {
    /// [`MessageStore::get_messages`] handing out file regions (see the module docs for what
    /// is and is not checked).
    ///
    /// # Errors
    /// As [`MessageStore::get_messages`].
    pub fn get_message_regions(
        &self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult<StoredRegion>, ReadError> {
        let range = QueueRange {
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            filter,
        };
        self.read_messages(&range, || {
            |this_offset, entry: &CqEntry, _ahead: &[CqEntry]| {
                let mut matches = false;
                let region = self.inner.log.record_region(
                    entry.phys_offset,
                    entry.size as usize,
                    |outline| {
                        check_indexed(outline, topic, queue_id, this_offset, entry.phys_offset)?;
                        matches = filter.matches_tag(outline.tags());
                        Ok(())
                    },
                )?;
                let message = StoredRegion {
                    queue_offset: this_offset,
                    phys_offset: entry.phys_offset,
                    region,
                };
                Ok((message, matches))
            }
        })
    }
}

/// The record is the one its ConsumeQueue entry indexed (as `read_indexed` checks).
fn check_indexed(
    outline: &RecordOutline<'_>,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
    phys_offset: u64,
) -> Result<(), ReadError> {
    if outline.topic != topic.as_bytes()
        || outline.head.queue_id != queue_id
        || outline.head.queue_offset != queue_offset
    {
        return Err(ReadError::Misplaced {
            phys_offset,
            stored: outline.head.queue_offset,
        });
    }
    Ok(())
}
