//! The dispatcher: follows the CommitLog and builds every piece of derived state — the
//! ConsumeQueues, the key index and the consumer offset view.
//!
//! Invariants:
//! 1. It is the only writer of derived state, and it consumes the log strictly in order, so
//!    derived state at position P is a pure function of the records below P.
//! 2. It never passes the dispatch limit (flushed end under `SyncFlush`, committed end under
//!    `AsyncFlush`), so consumers never see a record a crash could remove
//!    (invariant 4).
//! 3. Every record read from the files is verified (size, magic, CRC, stored physical offset)
//!    before it is dispatched; the check pairs with the CRC the writer computed. Records
//!    dispatched from the appender's committed chunks, still in memory, get the structural
//!    checks only.
//! 4. Offset records are applied to the view only at or after `view_from` (the position of
//!    the snapshot the view was loaded from), so replay never applies a commit twice.
//! 5. A verified record whose ConsumeQueue cannot exist — its topic breaks the naming rules
//!    (a log written before names were checked), or the file system refuses the queue's name —
//!    is quarantined as [`QuarantineKind::Undispatchable`], logged, and skipped; dispatch goes
//!    on. A failure of the disk itself (full, out of descriptors, I/O error) is not the
//!    record's fault: it stops this pass and is retried, so no acknowledged record is hidden.

use ferromq_protocol::{
    java_string_hash, peek_magic, peek_total_size, property_names, RecordError, RecordView,
    BLANK_MAGIC,
};

use crate::commitlog::writer::TailChunk;
use crate::commitlog::CommitLog;
use crate::consume_queue::{ConsumeQueue, ConsumeQueueSet, CqEntry, CqError};
use crate::error::{FileError, ReadError};
use crate::key_index::KeyIndex;
use crate::offsets::{OffsetCommand, OffsetView, Verdict, OFFSET_TOPIC};
use crate::quarantine::{Quarantine, QuarantineKind, QuarantinedRange};

const READ_CHUNK_BYTES: usize = 1 << 20;

/// Why dispatch stopped.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// Reading the log failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A ConsumeQueue disagrees with the log.
    #[error(transparent)]
    ConsumeQueue(#[from] CqError),
    /// The key index could not be written.
    #[error(transparent)]
    Index(#[from] FileError),
}

/// Derived state and how far it reaches.
#[derive(Debug)]
pub struct Derived {
    /// ConsumeQueues.
    pub queues: ConsumeQueueSet,
    /// Key index.
    pub index: KeyIndex,
    /// Consumer offsets, as of `dispatched`.
    pub view: OffsetView,
    /// Next CommitLog position to dispatch.
    pub dispatched: u64,
    /// Offset records below this were already in the loaded view.
    pub view_from: u64,
    /// Store time of the last dispatched record.
    pub last_store_timestamp_ms: i64,
    /// Offset records whose entries the view rejected at dispatch (a divergence from the
    /// writer's check; should stay 0).
    pub offset_rejections_at_dispatch: u64,
    /// CommitLog ranges kept but not served (see [`crate::quarantine`]).
    pub quarantine: Quarantine,
}

/// What one dispatch pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DispatchStats {
    /// Records dispatched.
    pub records: u64,
    /// Offset records applied.
    pub offset_records: u64,
    /// Records quarantined as undispatchable.
    pub quarantined: u64,
}

impl Derived {
    /// Dispatches every whole record in `[dispatched, limit)`: a record that ends past the
    /// limit waits (the limit may be a replication bound anywhere in the log). No record
    /// starts once `budget` bytes are dispatched (at least one is, so a pass always moves).
    pub fn dispatch_until(
        &mut self,
        log: &CommitLog,
        limit: u64,
        budget: u64,
    ) -> Result<DispatchStats, DispatchError> {
        let mut stats = DispatchStats::default();
        let budget_end = self.dispatched.saturating_add(budget);
        while self.dispatched < limit && self.dispatched < budget_end {
            let damage = self
                .quarantine
                .damaged_at_or_after(self.dispatched)
                .cloned();
            if let Some(range) = damage.as_ref().filter(|r| r.phys_offset == self.dispatched) {
                // Quarantined damage: nothing there to index; the records after it are.
                self.dispatched = range.end();
                continue;
            }
            let segment_end = log.segment_start_of(self.dispatched) + log.segment_size();
            let stop = damage.map_or(limit, |range| range.phys_offset.min(limit));
            let want = (stop.min(segment_end).min(budget_end) - self.dispatched)
                .min(READ_CHUNK_BYTES as u64) as usize;
            let chunk = log.read_unchecked(self.dispatched, want.max(8))?;
            let consumed = self.dispatch_chunk(log, &chunk, limit, &mut stats, true, usize::MAX)?;
            if consumed == 0 {
                // A record larger than the chunk: read exactly that record.
                let total = peek_total_size(&chunk).map_err(|source| ReadError::Corrupt {
                    phys_offset: self.dispatched,
                    source,
                })?;
                log.check_record_size(self.dispatched, total)?;
                if self.dispatched + total as u64 > limit {
                    // The limit (a replication bound) falls inside this record: it waits.
                    break;
                }
                let record = log.read_unchecked(self.dispatched, total)?;
                if self.dispatch_chunk(log, &record, limit, &mut stats, true, usize::MAX)? == 0 {
                    return Err(ReadError::Corrupt {
                        phys_offset: self.dispatched,
                        source: RecordError::Torn {
                            needed: total,
                            available: record.len(),
                        },
                    }
                    .into());
                }
            }
        }
        Ok(stats)
    }

    /// Dispatches a committed tail chunk from memory, saving the read back from the files,
    /// from the dispatched position (which must lie in it) on; returns whether the chunk is
    /// done. No record starts once `budget` bytes are dispatched (at least one is). The
    /// chunk must end within the limit.
    pub fn dispatch_committed_chunk(
        &mut self,
        log: &CommitLog,
        chunk: &TailChunk,
        limit: u64,
        budget: u64,
    ) -> Result<bool, DispatchError> {
        let end = chunk.end(log.segment_size());
        debug_assert!(chunk.start <= self.dispatched && self.dispatched < end && end <= limit);
        let at = (self.dispatched - chunk.start) as usize;
        let rest = chunk.bytes.get(at..).unwrap_or_default();
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let mut stats = DispatchStats::default();
        // The appender sealed these bytes with their CRC in this process; reads from the files
        // (recovery, catch-up) verify it.
        let consumed = self.dispatch_chunk(log, rest, limit, &mut stats, false, budget)?;
        if self.dispatched == end {
            return Ok(true);
        }
        if consumed >= budget {
            return Ok(false);
        }
        Err(ReadError::Corrupt {
            phys_offset: self.dispatched,
            source: RecordError::Torn {
                needed: rest.len(),
                available: consumed,
            },
        }
        .into())
    }

    /// Dispatches whole records at the start of `chunk`, starting none once `budget` bytes
    /// are consumed; returns bytes consumed.
    fn dispatch_chunk(
        &mut self,
        log: &CommitLog,
        chunk: &[u8],
        limit: u64,
        stats: &mut DispatchStats,
        verify: bool,
        budget: usize,
    ) -> Result<usize, DispatchError> {
        let mut at = 0;
        while at + 8 <= chunk.len() && self.dispatched < limit && at < budget {
            let phys_offset = self.dispatched;
            let corrupt = |source| ReadError::Corrupt {
                phys_offset,
                source,
            };
            if peek_magic(&chunk[at..]) == BLANK_MAGIC {
                let next = log.segment_start_of(phys_offset) + log.segment_size();
                self.dispatched = next;
                return Ok(at + 8);
            }
            let total = peek_total_size(&chunk[at..]).map_err(corrupt)?;
            if at + total > chunk.len() {
                break;
            }
            let record = &chunk[at..at + total];
            let view = if verify {
                RecordView::parse(record)
            } else {
                RecordView::parse_structure(record)
            }
            .map_err(corrupt)?;
            if view.phys_offset != phys_offset {
                return Err(ReadError::Misplaced {
                    phys_offset,
                    stored: view.phys_offset,
                }
                .into());
            }
            self.dispatch_record(log, &view, stats)?;
            self.dispatched += total as u64;
            at += total;
        }
        Ok(at)
    }

    fn dispatch_record(
        &mut self,
        log: &CommitLog,
        record: &RecordView<'_>,
        stats: &mut DispatchStats,
    ) -> Result<(), DispatchError> {
        let topic = record.topic_str();
        // One scan of the properties for the three the dispatcher needs.
        let [tags, keys, unique] = record.properties.get_strs([
            property_names::TAGS,
            property_names::KEYS,
            property_names::UNIQ_KEY,
        ]);
        let tag_code = tags.map(|t| i64::from(java_string_hash(t))).unwrap_or(0);
        let entry = CqEntry {
            phys_offset: record.phys_offset,
            size: record.total_size() as u32,
            tag_code,
        };
        let queue = match self.queues.get_or_create(topic, record.queue_id) {
            Ok(queue) => queue,
            Err(error) => return self.quarantine_unless_transient(record, error, stats),
        };
        let at = QueuePosition {
            topic,
            queue_id: record.queue_id,
            queue_offset: record.queue_offset,
        };
        put_entry(queue, &self.quarantine, log, at, entry)?;
        self.last_store_timestamp_ms = record.store_timestamp_ms;
        stats.records += 1;
        if topic == OFFSET_TOPIC {
            if record.phys_offset >= self.view_from {
                self.apply_offset_record(record);
                stats.offset_records += 1;
            }
            return Ok(());
        }
        if let Some(keys) = keys {
            for key in keys.split(' ').filter(|k| !k.is_empty()) {
                self.index.add(topic, key, record.phys_offset)?;
            }
        }
        if let Some(unique) = unique {
            self.index.add(topic, unique, record.phys_offset)?;
        }
        Ok(())
    }

    /// Quarantines `record` when `error` (from creating its ConsumeQueue) is the record's own
    /// fault (invariant 5); passes any other error on, so the pass stops and is retried.
    fn quarantine_unless_transient(
        &mut self,
        record: &RecordView<'_>,
        error: CqError,
        stats: &mut DispatchStats,
    ) -> Result<(), DispatchError> {
        if !is_undispatchable(&error) {
            return Err(error.into());
        }
        self.last_store_timestamp_ms = record.store_timestamp_ms;
        stats.records += 1;
        let reason = format!(
            "ConsumeQueue for queue {} of this record cannot exist: {error}",
            record.queue_id
        );
        tracing::error!(phys_offset = record.phys_offset, size = record.total_size(), %reason,
            "undispatchable record quarantined; dispatch goes on");
        self.quarantine.add(QuarantinedRange {
            phys_offset: record.phys_offset,
            len: record.total_size() as u64,
            kind: QuarantineKind::Undispatchable,
            reason,
        });
        stats.quarantined += 1;
        Ok(())
    }

    fn apply_offset_record(&mut self, record: &RecordView<'_>) {
        let command = match OffsetCommand::decode(record.body) {
            Ok(command) => command,
            Err(error) => {
                // The CRC passed, so these bytes are what the writer wrote: a codec bug or a
                // record from an incompatible version. Counted and reported, never applied.
                tracing::error!(phys_offset = record.phys_offset, %error, "undecodable offset record");
                self.offset_rejections_at_dispatch += 1;
                return;
            }
        };
        let queues = &self.queues;
        let queue_max =
            |topic: &str, queue_id: u32| queues.get(topic, queue_id).map_or(0, |q| q.max_offset());
        let verdicts = self
            .view
            .apply(&command, record.store_timestamp_ms, &queue_max);
        for (entry, verdict) in command.entries.iter().zip(&verdicts) {
            if let Verdict::Rejected(reason) = verdict {
                tracing::warn!(
                    group = %command.group, topic = %entry.topic, queue = entry.queue_id,
                    offset = entry.offset, %reason, "offset record entry rejected at dispatch"
                );
                self.offset_rejections_at_dispatch += 1;
            }
        }
    }
}

/// Whether a failure to create a record's ConsumeQueue is the record's own fault: a name the
/// rules or the file system refuse, or a name that collides with something that is not a
/// queue directory. Such a record can never be indexed, however often dispatch retries it.
fn is_undispatchable(error: &CqError) -> bool {
    use std::io::ErrorKind;
    match error {
        CqError::InvalidName(_) | CqError::Foreign { .. } => true,
        CqError::File(file) => matches!(
            file.source.kind(),
            ErrorKind::InvalidFilename
                | ErrorKind::InvalidInput
                | ErrorKind::NotADirectory
                | ErrorKind::AlreadyExists
        ),
        CqError::Gap { .. } | CqError::Conflict { .. } => false,
    }
}

/// Where a record belongs: its queue and queue offset.
#[derive(Debug, Clone, Copy)]
struct QueuePosition<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
}

/// Adds a queue entry to `queue`. A gap in the queue's offsets is filled with placeholders
/// only when a damaged range lies between the queue's previous record and this one (the
/// records in between were lost to it); any other gap is an error (ConsumeQueue invariant 4).
fn put_entry(
    queue: &mut ConsumeQueue,
    quarantine: &Quarantine,
    log: &CommitLog,
    at: QueuePosition<'_>,
    entry: CqEntry,
) -> Result<(), DispatchError> {
    let QueuePosition {
        topic,
        queue_id,
        queue_offset,
    } = at;
    let expected = queue.max_offset();
    if queue_offset > expected {
        // A new queue starts at offset 0 unless retention removed its first records, which
        // only happens once the log no longer starts at 0.
        let previous_end = if expected == 0 {
            (log.min_offset() == 0).then_some(0)
        } else {
            let last = queue.entry(expected - 1)?;
            (!last.is_hole()).then(|| last.phys_end())
        };
        let damage =
            previous_end.and_then(|from| quarantine.damaged_between(from, entry.phys_offset));
        if let Some(range) = damage {
            let placeholder = CqEntry::damaged_placeholder(range);
            tracing::error!(
                queue = %format!("{topic}/{queue_id}"), from = expected, to = queue_offset,
                damaged_at = range.phys_offset,
                "queue offsets lost to a damaged CommitLog range; placeholders point at it"
            );
            for missing in expected..queue_offset {
                queue.put(missing, placeholder)?;
            }
        }
    }
    queue.put(queue_offset, entry)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_error(kind: std::io::ErrorKind) -> CqError {
        CqError::File(FileError::new(
            "create",
            "consumequeue/T/0",
            std::io::Error::from(kind),
        ))
    }

    #[test]
    fn only_failures_of_the_record_itself_quarantine_it() {
        let name = ferromq_protocol::names::validate_topic("../x").unwrap_err();
        assert!(is_undispatchable(&CqError::InvalidName(name)));
        assert!(is_undispatchable(&file_error(
            std::io::ErrorKind::InvalidFilename
        )));
        for transient in [
            std::io::ErrorKind::StorageFull,
            std::io::ErrorKind::PermissionDenied,
            std::io::ErrorKind::Other,
        ] {
            assert!(!is_undispatchable(&file_error(transient)), "{transient:?}");
        }
        let gap = CqError::Gap {
            queue: "T/0".into(),
            expected: 1,
            got: 3,
        };
        assert!(!is_undispatchable(&gap), "a gap means rebuild, not skip");
    }
}
