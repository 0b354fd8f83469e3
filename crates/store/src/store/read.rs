//! Reads: messages by queue offset with a tag filter, queue bounds, and lookups by time,
//! message id and key.
//!
//! Readers see only dispatched records (invariant 4). Every record read is verified (CRC) and
//! checked against the ConsumeQueue entry that led to it: same topic, queue and queue offset.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ferromq_protocol::{property_names, MessageId, RecordView};

use super::{MessageStore, OffsetView};
use crate::commitlog::{CommitLog, Entry, ReadSpan};
use crate::consume_queue::CqEntry;
use crate::dispatch::Derived;
use crate::error::ReadError;
use crate::quarantine::{QuarantineKind, QuarantinedRange};

/// Bytes read at most by one `pread` of back-to-back records on the pull path (a pull's own
/// byte limit is the other bound); see [`CommitLog::read_span`].
pub const READ_SPAN_BYTES_MAX: usize = 256 * 1024;

/// What one pull has read so far: the last span, from which later records inside it are
/// sliced, and the buffer the spans copied from the read map are split off.
#[derive(Default)]
struct PullSpans {
    last: ReadSpan,
    buffer: BytesMut,
}

/// Bytes to reserve for a pull's spans at its first read: its first record and the records
/// it may take after it (`max_count` in all), at most `span_max`. Tag filtering may take
/// fewer; a pull that needs more grows the buffer.
fn pull_buffer_size(first: usize, ahead: &[CqEntry], max_count: usize, span_max: usize) -> usize {
    ahead
        .iter()
        .take(max_count.saturating_sub(1))
        .fold(first, |total, entry| {
            total.saturating_add(entry.size as usize)
        })
        .min(span_max)
}

/// A ConsumeQueue entry and where it was found: what the record it leads to must say.
#[derive(Debug, Clone, Copy)]
struct Indexed<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    entry: &'a CqEntry,
}

/// The verified record `bytes` is the one `indexed` leads to: same topic, queue and queue
/// offset.
fn check_is_indexed(bytes: &[u8], indexed: &Indexed<'_>) -> Result<(), ReadError> {
    let view = RecordView::parse_structure(bytes).expect("verified before the check");
    if view.topic != indexed.topic.as_bytes()
        || view.queue_id != indexed.queue_id
        || view.queue_offset != indexed.queue_offset
    {
        return Err(ReadError::Misplaced {
            phys_offset: indexed.entry.phys_offset,
            stored: view.queue_offset,
        });
    }
    Ok(())
}

/// Times a queue read starts again, at most, when a truncation cut the log under it (see
/// [`ReadError::CutUnderRead`]); a truncation is rare, several in a row under one read rarer.
const CUT_UNDER_READ_RETRIES_MAX: usize = 3;

/// Entries scanned at most by one filtered read before it returns `NoMatchedMessage`
/// (RocketMQ's `maxFilterMessageCount`).
pub const FILTER_SCAN_ENTRIES_MAX: usize = 16_000;

/// How often a reader waiting for the offset view checks whether the dispatcher stalled (it
/// is woken by every dispatch pass otherwise).
const VIEW_STALL_CHECK: Duration = Duration::from_millis(50);

/// Which messages a read returns, by tag (RocketMQ subscription expression `tagA || tagB`):
/// the protocol's [`TagExpression`](ferromq_protocol::tags::TagExpression), shared with the
/// client.
pub use ferromq_protocol::tags::TagExpression as TagFilter;

/// Outcome of a read (RocketMQ `GetMessageStatus`; the broker maps it to pull codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    /// Messages returned.
    Found,
    /// The queue exists but holds nothing.
    NoMessageInQueue,
    /// No such queue.
    NoMatchedLogicQueue,
    /// The offset is below the queue's min (expired); `next_begin_offset` = min.
    OffsetTooSmall,
    /// The offset equals the max: nothing new yet (long-poll).
    OffsetOverflowOne,
    /// The offset is past the max; `next_begin_offset` = max.
    OffsetOverflowBadly,
    /// Entries were scanned but none matched the filter.
    NoMatchedMessage,
}

/// One message as stored; `bytes` can be sent to a client unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its queue offset.
    pub queue_offset: u64,
    /// Its CommitLog offset.
    pub phys_offset: u64,
    /// The stored record.
    pub bytes: Bytes,
}

/// What a read returns per message: its bytes ([`StoredMessage`]) or where they lie
/// ([`StoredRegion`], for sending without a copy).
pub trait Stored {
    /// Its queue offset.
    fn queue_offset(&self) -> u64;
    /// Its CommitLog offset.
    fn phys_offset(&self) -> u64;
    /// Its record size in bytes.
    fn stored_len(&self) -> usize;
}

impl Stored for StoredMessage {
    fn queue_offset(&self) -> u64 {
        self.queue_offset
    }
    fn phys_offset(&self) -> u64 {
        self.phys_offset
    }
    fn stored_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Result of [`MessageStore::get_messages`] (and, with regions, of
/// [`MessageStore::get_message_regions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetResult<M = StoredMessage> {
    /// What happened.
    pub status: GetStatus,
    /// Where the next read should start.
    pub next_begin_offset: u64,
    /// Queue min offset.
    pub min_offset: u64,
    /// Queue max offset (next to be written, as consumers see it).
    pub max_offset: u64,
    /// The messages, in queue order.
    pub messages: Vec<M>,
}

/// Which end of a time range `offset_by_time` picks (RocketMQ `BoundaryType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBoundary {
    /// The first message stored at or after the time.
    Lower,
    /// The last message stored at or before the time.
    Upper,
}

impl MessageStore {
    /// Min and max offset of a queue as consumers see them; `None` if it does not exist.
    pub fn queue_bounds(&self, topic: &str, queue_id: u32) -> Option<(u64, u64)> {
        let derived = self.inner.derived.lock();
        derived
            .queues
            .get(topic, queue_id)
            .map(|q| (q.min_offset(), q.max_offset()))
    }

    /// CommitLog ranges kept but not served: damaged ranges with valid records after them,
    /// and records the dispatcher could not index (see [`crate::quarantine`]).
    pub fn quarantined(&self) -> crate::quarantine::QuarantineSnapshot {
        let derived = self.inner.derived.lock();
        derived.quarantine.snapshot()
    }

    /// Topics with stored messages.
    pub fn topics(&self) -> Vec<String> {
        self.inner.derived.lock().queues.topics()
    }

    /// Queue ids of a topic that hold or held messages.
    pub fn queue_ids(&self, topic: &str) -> Vec<u32> {
        self.inner.derived.lock().queues.queue_ids(topic)
    }

    /// Reads up to `max_count` messages (and at most about `max_bytes`) from `queue_offset`.
    ///
    /// # Errors
    /// A file could not be read or a stored record failed verification.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult, ReadError> {
        let range = QueueRange::new(topic, queue_id, queue_offset, max_count, max_bytes, filter);
        self.read_messages(&range, || self.copying_fetch(&range))
    }

    /// The fetch of a copying read: each record read and verified into memory (from the last
    /// span read when it holds it, see [`MessageStore::read_indexed_in_span`]). New for every
    /// try of a read: a try after a cut under the read must not find the bytes read before it.
    pub(super) fn copying_fetch<'a>(
        &'a self,
        range: &QueueRange<'a>,
    ) -> impl Fn(u64, &CqEntry, &[CqEntry]) -> Result<(StoredMessage, bool), ReadError> + 'a {
        let QueueRange {
            topic,
            queue_id,
            max_count,
            max_bytes,
            filter,
            ..
        } = *range;
        let span_max = max_bytes.min(READ_SPAN_BYTES_MAX);
        // The span of back-to-back records read last; later entries inside it are sliced
        // from it instead of read again.
        let span = RefCell::new(PullSpans::default());
        move |this_offset, entry: &CqEntry, ahead: &[CqEntry]| {
            let indexed = Indexed {
                topic,
                queue_id,
                queue_offset: this_offset,
                entry,
            };
            let bytes = self.read_indexed_in_span(&indexed, (ahead, max_count), &span, span_max)?;
            // Finding the tags scans the properties: only a tag filter needs them.
            let matches = *filter == TagFilter::All || {
                let view = RecordView::parse_structure(&bytes).expect("verified by read_indexed");
                filter.matches_tag(view.tags())
            };
            let message = StoredMessage {
                queue_offset: this_offset,
                phys_offset: entry.phys_offset,
                bytes,
            };
            Ok((message, matches))
        }
    }

    /// Reads the range's entries, `fetch`ing each one the tag code lets through (a message
    /// and whether its tags match; it also gets the entries after it, to read ahead), into a
    /// result; shared by both kinds of read. While a truncation keeps cutting the log under
    /// the read it starts again (at most [`CUT_UNDER_READ_RETRIES_MAX`] more times), with the
    /// queue's entries taken afresh and a fetch `new_fetch` makes afresh, so after a cut it
    /// reads the log the cut left.
    pub(super) fn read_messages<M: Stored, F>(
        &self,
        range: &QueueRange<'_>,
        new_fetch: impl Fn() -> F,
    ) -> Result<GetResult<M>, ReadError>
    where
        F: Fn(u64, &CqEntry, &[CqEntry]) -> Result<(M, bool), ReadError>,
    {
        let mut retries = 0;
        let result = loop {
            match self.read_entries(range, &new_fetch()) {
                Err(ReadError::CutUnderRead { .. }) if retries < CUT_UNDER_READ_RETRIES_MAX => {
                    retries += 1;
                }
                outcome => break outcome?,
            }
        };
        // While dispatch is failing, "nothing (new) here" may be false: say why instead.
        if result.messages.is_empty() {
            if let Some(failure) = self.inner.dispatch_stall() {
                return Err(ReadError::DispatchStalled(failure));
            }
        }
        Ok(result)
    }

    fn read_entries<M: Stored>(
        &self,
        range: &QueueRange<'_>,
        fetch: &impl Fn(u64, &CqEntry, &[CqEntry]) -> Result<(M, bool), ReadError>,
    ) -> Result<GetResult<M>, ReadError> {
        let QueueRange {
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            filter,
        } = *range;
        let (min, max, entries) = {
            let derived = self.inner.derived.lock();
            let Some(queue) = derived.queues.get(topic, queue_id) else {
                return Ok(empty(GetStatus::NoMatchedLogicQueue, 0, 0, 0));
            };
            let (min, max) = (queue.min_offset(), queue.max_offset());
            if max == 0 {
                return Ok(empty(GetStatus::NoMessageInQueue, 0, min, max));
            }
            if queue_offset < min {
                return Ok(empty(GetStatus::OffsetTooSmall, min, min, max));
            }
            if queue_offset == max {
                return Ok(empty(GetStatus::OffsetOverflowOne, queue_offset, min, max));
            }
            if queue_offset > max {
                return Ok(empty(GetStatus::OffsetOverflowBadly, max, min, max));
            }
            let scan = if *filter == TagFilter::All {
                max_count
            } else {
                FILTER_SCAN_ENTRIES_MAX.max(max_count)
            };
            (min, max, queue.entries(queue_offset, scan)?)
        };
        // A test's stall holds the read here, as a descheduled reader would be held.
        self.inner.log.faults.wait_read_stall();
        let mut messages = Vec::new();
        let mut bytes_total = 0usize;
        let mut next = queue_offset;
        for (index, entry) in entries.iter().enumerate() {
            let this_offset = queue_offset + index as u64;
            if messages.len() >= max_count
                || (!messages.is_empty() && bytes_total + entry.size as usize > max_bytes)
            {
                break;
            }
            // A placeholder for a record lost to damage is never filtered out: its tag is not
            // known, so the consumer must learn of it.
            if !filter.matches_code(entry.tag_code) && !entry.is_damaged_placeholder() {
                next = this_offset + 1;
                continue;
            }
            let (message, tag_matches) = match fetch(this_offset, entry, &entries[index + 1..]) {
                Ok(fetched) => fetched,
                Err(error @ (ReadError::Corrupt { .. } | ReadError::Misplaced { .. })) => {
                    let indexed = Indexed {
                        topic,
                        queue_id,
                        queue_offset: this_offset,
                        entry,
                    };
                    let failed = self.note_damaged(&indexed, &error);
                    if messages.is_empty() {
                        return Err(failed);
                    }
                    // The good records before the failure now; the next read names it (or,
                    // after a cut under this read, reads what the cut left).
                    break;
                }
                Err(error) => return Err(error),
            };
            next = this_offset + 1;
            if tag_matches {
                bytes_total += message.stored_len();
                messages.push(message);
            }
        }
        let status = if messages.is_empty() {
            GetStatus::NoMatchedMessage
        } else {
            GetStatus::Found
        };
        Ok(GetResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages,
        })
    }

    /// Quarantines the damaged record a queue entry leads to and returns the error a reader
    /// gets for it; or, when the failure was a truncation cutting the log under the read,
    /// quarantines nothing and returns [`ReadError::CutUnderRead`].
    ///
    /// Invariant: only bytes that fail verification while no truncation can run (under the
    /// `derived` lock, which a truncation holds from before its cut until its re-dispatch)
    /// and that the queue still indexes are quarantined. The entries a read works from were
    /// taken under that lock but the records are read after it is released, so a cut (and new
    /// records written over the cut) can change the bytes under the read: taking those for
    /// damage would make dispatch skip good records written there later, and make the next
    /// truncation's re-dispatch jump into the middle of a record.
    fn note_damaged(&self, indexed: &Indexed<'_>, error: &ReadError) -> ReadError {
        let Indexed {
            topic,
            queue_id,
            queue_offset,
            entry,
        } = *indexed;
        let mut derived = self.inner.derived.lock();
        if !self.damage_stands(&derived, indexed) {
            drop(derived);
            tracing::debug!(
                topic, queue_id, queue_offset, phys_offset = entry.phys_offset, %error,
                "a read raced a truncation: nothing quarantined"
            );
            return ReadError::CutUnderRead {
                topic: topic.to_string(),
                queue_id,
                queue_offset,
                phys_offset: entry.phys_offset,
            };
        }
        let reason = error.to_string();
        let added = derived.quarantine.add(QuarantinedRange {
            phys_offset: entry.phys_offset,
            len: u64::from(entry.size),
            kind: QuarantineKind::Damaged,
            reason: reason.clone(),
        });
        drop(derived);
        if added {
            tracing::error!(
                topic, queue_id, queue_offset, phys_offset = entry.phys_offset, %reason,
                "damaged record found by a read: quarantined"
            );
        }
        ReadError::Damaged {
            topic: topic.to_string(),
            queue_id,
            queue_offset,
            phys_offset: entry.phys_offset,
            reason,
        }
    }

    /// Reads and verifies the record a ConsumeQueue entry points at (from the last span read
    /// when it holds it, else with a new span over the following records of `ahead`, at most
    /// `span_max` bytes: copied out of the segment's read-only map into the pull's shared
    /// buffer when the map can serve them, else read with `pread`) and checks it is the one
    /// indexed. `ahead` comes with the pull's message count, which bounds what the buffer is
    /// sized for.
    fn read_indexed_in_span(
        &self,
        indexed: &Indexed<'_>,
        (ahead, max_count): (&[CqEntry], usize),
        spans: &RefCell<PullSpans>,
        span_max: usize,
    ) -> Result<Bytes, ReadError> {
        let Indexed { entry, .. } = *indexed;
        let (phys_offset, size) = (entry.phys_offset, entry.size as usize);
        let mut spans = spans.borrow_mut();
        let PullSpans { last, buffer } = &mut *spans;
        let bytes = match last.record(phys_offset, size) {
            Some(bytes) => bytes,
            None => {
                let following = || ahead.iter().map(|e| (e.phys_offset, e.size as usize));
                if buffer.capacity() == 0 {
                    buffer.reserve(pull_buffer_size(size, ahead, max_count, span_max));
                }
                let log = &self.inner.log;
                *last = match log.read_span_in_place(
                    (phys_offset, size),
                    following(),
                    span_max,
                    buffer,
                ) {
                    Some(in_place) => in_place,
                    None => log.read_span((phys_offset, size), following(), span_max)?,
                };
                // The span holds at least this record unless the read came back short; then
                // the usual read says why.
                match last.record(phys_offset, size) {
                    Some(bytes) => bytes,
                    None => return self.read_indexed(indexed),
                }
            }
        };
        self.inner.log.check_record_size(phys_offset, size)?;
        let bytes = CommitLog::verify_record(phys_offset, bytes)?;
        check_is_indexed(&bytes, indexed)?;
        Ok(bytes)
    }

    /// Whether the failed read of `indexed` still fails with no truncation running (the
    /// caller holds `derived`): the queue still holds that entry, and reading its record
    /// again still finds it corrupt or misplaced.
    fn damage_stands(&self, derived: &Derived, indexed: &Indexed<'_>) -> bool {
        let current = derived
            .queues
            .get(indexed.topic, indexed.queue_id)
            .and_then(|queue| queue.entry(indexed.queue_offset).ok());
        current.as_ref() == Some(indexed.entry)
            && matches!(
                self.read_indexed(indexed),
                Err(ReadError::Corrupt { .. } | ReadError::Misplaced { .. })
            )
    }

    /// Reads the record a ConsumeQueue entry points at and checks it is the one indexed.
    fn read_indexed(&self, indexed: &Indexed<'_>) -> Result<Bytes, ReadError> {
        let entry = indexed.entry;
        let bytes = self
            .inner
            .log
            .read_record(entry.phys_offset, entry.size as usize)?;
        check_is_indexed(&bytes, indexed)?;
        Ok(bytes)
    }

    /// Queue offset by store time, for `resetOffsetByTime` and `searchOffset`.
    ///
    /// `Lower`: the first message stored at or after `timestamp_ms` (the max offset when none
    /// is). `Upper`: the last message stored at or before it (the min offset when none is).
    pub fn offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
        boundary: TimeBoundary,
    ) -> Result<u64, ReadError> {
        let derived = self.inner.derived.lock();
        let Some(queue) = derived.queues.get(topic, queue_id) else {
            return Ok(0);
        };
        let (min, max) = (queue.min_offset(), queue.max_offset());
        // First offset whose store time is > t (Upper) or >= t (Lower).
        let (mut low, mut high) = (min, max);
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = queue.entry(mid)?;
            let stored_at = self.store_time_of(&entry)?;
            let before = match boundary {
                TimeBoundary::Lower => stored_at < timestamp_ms,
                TimeBoundary::Upper => stored_at <= timestamp_ms,
            };
            if before {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(match boundary {
            TimeBoundary::Lower => low,
            TimeBoundary::Upper => low.saturating_sub(1).max(min),
        })
    }

    fn store_time_of(&self, entry: &CqEntry) -> Result<i64, ReadError> {
        let bytes = self
            .inner
            .log
            .read_record(entry.phys_offset, entry.size as usize)?;
        Ok(RecordView::parse(&bytes)
            .expect("verified by read_record")
            .store_timestamp_ms)
    }

    /// The message with this offset message id (store host + CommitLog offset), if present.
    ///
    /// Blocking (it waits for the dispatcher, bounded): not for async contexts.
    ///
    /// # Errors
    /// The id is malformed, the bytes at its offset are not a valid record, or the dispatcher
    /// could not catch up ([`ReadError::ViewBehind`], [`ReadError::DispatchStalled`]), so
    /// "not found" could be false.
    pub fn message_by_id(&self, message_id: &str) -> Result<Option<Bytes>, ReadError> {
        let id =
            MessageId::decode(message_id).map_err(|e| ReadError::BadMessageId(e.to_string()))?;
        // A message acknowledged moments ago may still be on its way to the dispatcher.
        self.catch_up_dispatch()?;
        let dispatched = *self.inner.dispatched.borrow();
        if id.phys_offset < self.inner.log.min_offset() || id.phys_offset >= dispatched {
            return Ok(None);
        }
        match self.inner.log.read_entry(id.phys_offset)? {
            Entry::Record(bytes) => Ok(Some(bytes)),
            Entry::Blank { .. } => Ok(None),
        }
    }

    /// Messages of `topic` whose `KEYS` contain `key`, newest first, at most `max_count`.
    pub fn messages_by_key(
        &self,
        topic: &str,
        key: &str,
        max_count: usize,
    ) -> Result<Vec<Bytes>, ReadError> {
        self.lookup(topic, key, max_count, |view| {
            view.properties
                .get_str(property_names::KEYS)
                .is_some_and(|keys| keys.split(' ').any(|k| k == key))
        })
    }

    /// Messages of `topic` whose `UNIQ_KEY` is `key` (more than one after a producer retry).
    pub fn messages_by_unique_key(
        &self,
        topic: &str,
        key: &str,
        max_count: usize,
    ) -> Result<Vec<Bytes>, ReadError> {
        self.lookup(topic, key, max_count, |view| {
            view.properties.get_str(property_names::UNIQ_KEY) == Some(key)
        })
    }

    fn lookup(
        &self,
        topic: &str,
        key: &str,
        max_count: usize,
        matches: impl Fn(&RecordView<'_>) -> bool,
    ) -> Result<Vec<Bytes>, ReadError> {
        // Candidates may include hash collisions: over-fetch, then check each record.
        let candidates = {
            let derived = self.inner.derived.lock();
            derived
                .index
                .lookup(topic, key, max_count.saturating_mul(4).max(64))?
        };
        let mut found = Vec::new();
        for phys_offset in candidates {
            if phys_offset < self.inner.log.min_offset() {
                continue;
            }
            let Entry::Record(bytes) = self.inner.log.read_entry(phys_offset)? else {
                continue;
            };
            let view = RecordView::parse(&bytes).expect("verified by read_entry");
            if view.topic == topic.as_bytes() && matches(&view) {
                found.push(bytes.clone());
                if found.len() >= max_count {
                    break;
                }
            }
        }
        Ok(found)
    }

    /// Blocks until everything acknowledged before the call is visible to readers, bounded
    /// by `sync_flush_timeout_ms`. Blocking: the offset reads that use it are not for async
    /// contexts, which use [`MessageStore::offset_view`].
    ///
    /// # Errors
    /// [`ReadError::DispatchStalled`] or [`ReadError::ViewBehind`] when the view did not
    /// catch up in time: the caller must not answer from it.
    pub(crate) fn catch_up_dispatch(&self) -> Result<(), ReadError> {
        let started = Instant::now();
        if self.inner.config.flush_disk_type == crate::config::FlushDiskType::AsyncFlush {
            // An acknowledged AsyncFlush record may still sit in the appender's tail. A
            // failure poisons the store inside commit_tail; the view covers what is committed.
            let _ = self.inner.commit_tail();
        }
        let target = self.inner.dispatch_limit();
        if self.inner.dispatch_stall().is_none() {
            self.wait_dispatched(target, self.view_bound());
        }
        self.view_outcome(target, started)
    }

    /// Resolves once the offset view covers everything acknowledged before the call, and
    /// returns it: the way async code reads consumer offsets. It never blocks or sleeps on
    /// the calling thread (it waits on the dispatched-end watch), and never answers from a
    /// view that missed an acknowledged commit. Needs a runtime with the time driver.
    ///
    /// Under `AsyncFlush` it first commits the appender's pending tail (as an acknowledgement
    /// does, without blocking on a running commit), so every acknowledged record can reach
    /// the dispatcher; then it waits until the dispatched end covers the dispatch limit read
    /// at that point. The whole wait is bounded by `sync_flush_timeout_ms`.
    ///
    /// # Errors
    /// [`ReadError::DispatchStalled`] when the dispatcher cannot index new records (see
    /// [`crate::StoreStats::dispatch_failure`]) and the view misses acknowledged records:
    /// answered at once while the stall is declared, as [`MessageStore::get_messages`] does;
    /// [`ReadError::ViewBehind`] when the bound passed before the view caught up.
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting; a tail commit it started has completed.
    pub async fn offset_view(&self) -> Result<OffsetView<'_>, ReadError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.view_bound();
        if self.inner.config.flush_disk_type == crate::config::FlushDiskType::AsyncFlush {
            let (end, epoch) = (self.inner.log.appended_end(), self.inner.flush.epoch());
            // An error here (truncated, poisoned, timed out) leaves the committed end where
            // it is; the target below is what the files hold, and the check decides.
            let _ = tokio::time::timeout_at(deadline, self.inner.written(end, epoch)).await;
        }
        let target = self.inner.dispatch_limit();
        let mut dispatched = self.inner.dispatched.subscribe();
        self.inner.dispatch_signal.notify();
        loop {
            if *dispatched.borrow_and_update() >= target || self.inner.dispatch_stall().is_some() {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            // Wakes at least every VIEW_STALL_CHECK to notice a dispatcher that stalls.
            let slice = (deadline - now).min(VIEW_STALL_CHECK);
            let _ = tokio::time::timeout(slice, dispatched.changed()).await;
        }
        self.view_outcome(target, started)?;
        Ok(OffsetView::new(self))
    }

    /// How long an offset read waits for the view to catch up: the acknowledgement bound.
    fn view_bound(&self) -> Duration {
        Duration::from_millis(self.inner.config.sync_flush_timeout_ms)
    }

    /// Whether the view covers `target`; if not, why not (a stalled dispatcher or a wait that
    /// ran out since `started`).
    fn view_outcome(&self, target: u64, started: Instant) -> Result<(), ReadError> {
        let dispatched = *self.inner.dispatched.borrow();
        if dispatched >= target {
            return Ok(());
        }
        if let Some(failure) = self.inner.dispatch_stall() {
            return Err(ReadError::DispatchStalled(failure));
        }
        Err(ReadError::ViewBehind {
            dispatched,
            target,
            waited_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// Which entries a read covers.
#[derive(Debug, Clone, Copy)]
pub(super) struct QueueRange<'a> {
    pub(super) topic: &'a str,
    pub(super) queue_id: u32,
    pub(super) queue_offset: u64,
    pub(super) max_count: usize,
    pub(super) max_bytes: usize,
    pub(super) filter: &'a TagFilter,
}

impl<'a> QueueRange<'a> {
    pub(super) fn new(
        topic: &'a str,
        queue_id: u32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &'a TagFilter,
    ) -> QueueRange<'a> {
        QueueRange {
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            filter,
        }
    }
}

fn empty<M>(status: GetStatus, next: u64, min: u64, max: u64) -> GetResult<M> {
    GetResult {
        status,
        next_begin_offset: next,
        min_offset: min,
        max_offset: max,
        messages: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(sizes: &[u32]) -> Vec<CqEntry> {
        sizes
            .iter()
            .map(|&size| CqEntry {
                phys_offset: 0,
                size,
                tag_code: 0,
            })
            .collect()
    }

    #[test]
    fn a_pull_buffer_holds_the_records_the_pull_may_take_and_no_more_than_a_span() {
        let ahead = entries(&[100, 200, 300, 400]);
        assert_eq!(pull_buffer_size(50, &ahead, 3, 1 << 20), 50 + 100 + 200);
        assert_eq!(pull_buffer_size(50, &ahead, 32, 1 << 20), 1050);
        assert_eq!(pull_buffer_size(50, &ahead, 1, 1 << 20), 50);
        assert_eq!(pull_buffer_size(50, &ahead, 32, 500), 500);
        let huge = entries(&[u32::MAX, u32::MAX]);
        assert_eq!(pull_buffer_size(usize::MAX, &huge, 3, 4096), 4096);
    }
}
