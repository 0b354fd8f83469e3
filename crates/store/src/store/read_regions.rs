//! Reads for zero-copy sending: the same reads as [`MessageStore::get_messages`], but each
//! message is handed out as a [`FileRegion`] of its segment file instead of its bytes.
//!
//! Each record's head and tail are read and checked (size, magic, inner lengths, physical
//! offset, and that it is the record its ConsumeQueue entry indexed: same topic, queue and
//! queue offset; its tags for the filter), exactly like the copying read checks them. Its
//! body is not read, so the body CRC is **not** verified here — the copying read verifies it,
//! which is why the broker's `transferMsgByHeap` defaults to the copying path.

use std::cell::OnceCell;

use ferromq_protocol::RecordOutline;

use super::read::{QueueRange, Stored};
use super::{GetResult, MessageStore, StoredMessage, TagFilter};
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
        let range = QueueRange::new(topic, queue_id, queue_offset, max_count, max_bytes, filter);
        self.read_messages(&range, || self.region_fetch(&range))
    }

    /// Reads for a zero-copy pull reply: file regions where sending them pays, else the
    /// records read and verified into memory, as [`MessageStore::get_messages`] reads them
    /// (CRC checked, a damaged record quarantined and the good records before it returned).
    /// Decided once per read, from the ConsumeQueue entries before anything is read
    /// ([`sends_are_small`]), so one result's messages are all of one kind.
    ///
    /// # Errors
    /// As [`MessageStore::get_messages`].
    pub fn get_messages_to_send(
        &self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult<Sendable>, ReadError> {
        let range = QueueRange::new(topic, queue_id, queue_offset, max_count, max_bytes, filter);
        self.read_messages(&range, || {
            let (copy, send) = (self.copying_fetch(&range), self.region_fetch(&range));
            let copying = OnceCell::new();
            move |this_offset, entry: &CqEntry, ahead: &[CqEntry]| {
                let copies = *copying.get_or_init(|| {
                    let taken = std::iter::once(entry)
                        .chain(ahead)
                        .filter(|e| filter.matches_code(e.tag_code) || e.is_damaged_placeholder());
                    sends_are_small(taken, max_count, max_bytes)
                });
                if copies {
                    copy(this_offset, entry, ahead)
                        .map(|(m, matches)| (Sendable::Copied(m), matches))
                } else {
                    send(this_offset, entry, ahead)
                        .map(|(m, matches)| (Sendable::Region(m), matches))
                }
            }
        })
    }

    /// The fetch of a region read: each record's head and tail checked, its region handed out.
    fn region_fetch<'a>(
        &'a self,
        range: &QueueRange<'a>,
    ) -> impl Fn(u64, &CqEntry, &[CqEntry]) -> Result<(StoredRegion, bool), ReadError> + 'a {
        let QueueRange {
            topic,
            queue_id,
            filter,
            ..
        } = *range;
        move |this_offset, entry: &CqEntry, _ahead: &[CqEntry]| {
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
    }
}

/// A zero-copy pull whose `sendfile` calls (one per run of adjacent records) would carry
/// fewer bytes than this on average is copied instead: below it a call costs more than
/// copying its bytes. Small records of queues that share the log interleave, so a pull of 32
/// records of 128 B took 32 calls and drained a backlog at 0.16x the copying path's rate.
pub const ZERO_COPY_SEND_BYTES_MIN: u64 = 16 * 1024;

/// Whether the records of `entries` a pull would take (at most `max_count`, about
/// `max_bytes`) are cheaper copied than sent with zero copy: more than one run of adjacent
/// records, carrying under [`ZERO_COPY_SEND_BYTES_MIN`] per run on average.
fn sends_are_small<'a>(
    entries: impl IntoIterator<Item = &'a CqEntry>,
    max_count: usize,
    max_bytes: usize,
) -> bool {
    let (mut runs, mut bytes, mut run_end) = (0u64, 0u64, None);
    for entry in entries.into_iter().take(max_count) {
        if bytes > 0 && bytes + u64::from(entry.size) > max_bytes as u64 {
            break;
        }
        if run_end != Some(entry.phys_offset) {
            runs += 1;
        }
        run_end = Some(entry.phys_offset + u64::from(entry.size));
        bytes += u64::from(entry.size);
    }
    runs > 1 && bytes / runs < ZERO_COPY_SEND_BYTES_MIN
}

/// One message of a zero-copy pull ([`MessageStore::get_messages_to_send`]).
#[derive(Debug, Clone)]
pub enum Sendable {
    /// Read and verified into memory: the pull's records were small and apart.
    Copied(StoredMessage),
    /// A checked region of its segment file, for `sendfile`.
    Region(StoredRegion),
}

impl Stored for Sendable {
    fn queue_offset(&self) -> u64 {
        match self {
            Sendable::Copied(m) => m.queue_offset,
            Sendable::Region(m) => m.queue_offset,
        }
    }
    fn phys_offset(&self) -> u64 {
        match self {
            Sendable::Copied(m) => m.phys_offset,
            Sendable::Region(m) => m.phys_offset,
        }
    }
    fn stored_len(&self) -> usize {
        match self {
            Sendable::Copied(m) => m.bytes.len(),
            Sendable::Region(m) => m.region.len() as usize,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(phys_offset: u64, size: u32) -> CqEntry {
        CqEntry {
            phys_offset,
            size,
            tag_code: 0,
        }
    }

    #[test]
    fn small_runs_are_copied_and_adjacent_or_large_ones_sent() {
        // Adjacent records: one run, one `sendfile` whatever their size.
        let adjacent: Vec<_> = (0..32).map(|i| entry(i * 200, 200)).collect();
        assert!(!sends_are_small(&adjacent, 32, 1 << 20));
        // Apart (another queue's records between them): a run each, 200 B per call.
        let apart: Vec<_> = (0..32).map(|i| entry(i * 400, 200)).collect();
        assert!(sends_are_small(&apart, 32, 1 << 20));
        // One record taken (count or bytes): one call, nothing to gain by copying.
        assert!(!sends_are_small(&apart, 1, 1 << 20));
        assert!(!sends_are_small(&apart, 32, 300));
        // Two runs of 16 KiB on average: sent; just below: copied.
        let large = [entry(0, 16 << 10), entry(40 << 10, 16 << 10)];
        assert!(!sends_are_small(&large, 32, 1 << 20));
        let below = [entry(0, (16 << 10) - 1), entry(40 << 10, 16 << 10)];
        assert!(sends_are_small(&below, 32, 1 << 20));
        // The count bound: only the entries the pull takes count.
        let mixed = [
            entry(0, 64 << 10),
            entry(100 << 10, 100),
            entry(200 << 10, 100),
        ];
        assert!(!sends_are_small(&mixed[..1], 32, 1 << 20));
        assert!(sends_are_small(&mixed[1..], 32, 1 << 20));
        assert!(!sends_are_small(&mixed, 1, 1 << 20));
        assert!(!sends_are_small(&[], 32, 1 << 20));
    }
}
