//! The store's side of master/slave replication.
//!
//! - A master reads whole records of its committed log for a replica
//!   ([`MessageStore::replication_chunk`]) and checks that a replica's log is a prefix of its
//!   own ([`MessageStore::check_prefix`]).
//! - A replica appends its master's bytes at the same physical offsets
//!   ([`MessageStore::append_replicated`]) after the checks recovery makes on every record
//!   (size, magic, CRC, stored physical offset) plus the writer's own invariants (dense queue
//!   offsets, store times that never go back), so its single dispatcher builds the same
//!   ConsumeQueues, key index and consumer-offset view as the master's, from the same bytes.
//! - The replication bound ([`MessageStore::set_replication_bound`]) caps what the dispatcher
//!   exposes at the point every in-sync replica holds (invariant 4): no consumer reads, and no
//!   commit points past, a suffix a failover to an in-sync replica could cut.
//!
//! Invariants:
//! 1. A replicated append is all or nothing: every record of the batch is verified before the
//!    first is appended, so a bad record never leaves a partial batch behind.
//! 2. A replica's log is byte-identical to its master's below the replica's end: records are
//!    appended verbatim at the offset they carry, and blank end-of-segment markers at the
//!    positions the master wrote them.
//! 3. The replication bound only caps dispatch; it never uncovers anything the local flush
//!    policy would not (the dispatch limit is the smaller of the two).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ferromq_protocol::message::record::sealed_crc;
use ferromq_protocol::{peek_magic, peek_total_size, RecordView, BLANK_MAGIC};

use super::commit_releases::CommitWatch;
use super::{AckTicket, MessageStore};
use crate::commitlog::writer::VerbatimRecord;
use crate::commitlog::BLANK_LEN;
use crate::config::FlushDiskType;
use crate::error::{AppendError, ReadError};
use crate::offsets::{OffsetCommand, Verdict, OFFSET_TOPIC};

/// Most records a replica describes when it says where its log ends.
pub const LOG_SAMPLES_MAX: usize = 64;

/// One record of a log, as a replica describes its tail to its master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSample {
    /// CommitLog offset of the record.
    pub offset: u64,
    /// Its size.
    pub size: u32,
    /// The CRC sealed into it (over the whole record but its trailer).
    pub crc: u32,
}

/// Whether a replica's log is a prefix of this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixCheck {
    /// Every sampled record is this log's record at that offset.
    Prefix,
    /// The replica's log ends past this log's end (a replica of another master, or a master
    /// that lost its tail): it must not be streamed to.
    Ahead {
        /// This log's committed end.
        end: u64,
    },
    /// The first sampled record that differs from this log's record at its offset.
    DiffersAt(u64),
    /// The replica starts below this log's oldest kept offset (retention removed it).
    Purged {
        /// This log's oldest kept offset.
        min: u64,
    },
}

/// The rule of [`MessageStore::check_prefix`], pure over a reader of this log's bytes
/// (`read(offset, size)`: the bytes there, `None` when out of range), so the simulation
/// judges prefixes with the same rule. `end` is this log's committed end, `min` its oldest
/// kept offset.
///
/// # Errors
/// The reader's.
pub fn judge_prefix<B: AsRef<[u8]>, E>(
    end: u64,
    min: u64,
    log_end: u64,
    samples: &[LogSample],
    mut read: impl FnMut(u64, usize) -> Result<Option<B>, E>,
) -> Result<PrefixCheck, E> {
    if log_end > end {
        return Ok(PrefixCheck::Ahead { end });
    }
    if log_end < min {
        return Ok(PrefixCheck::Purged { min });
    }
    for sample in samples.iter().filter(|s| s.offset >= min) {
        let size = sample.size as usize;
        let differs = sample.offset + u64::from(sample.size) > end
            || read(sample.offset, size)?.is_none_or(|bytes| {
                let bytes = bytes.as_ref();
                peek_total_size(bytes).ok() != Some(size) || sealed_crc(bytes) != Some(sample.crc)
            });
        if differs {
            return Ok(PrefixCheck::DiffersAt(sample.offset));
        }
    }
    Ok(PrefixCheck::Prefix)
}

/// Whole records of a master's log for a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationChunk {
    /// CommitLog offset of the first byte.
    pub offset: u64,
    /// The bytes, as stored.
    pub bytes: Bytes,
    /// Where the log continues after them (past a segment's end-of-segment marker, the next
    /// segment's start).
    pub next: u64,
}

/// Why replicated bytes were not appended. Nothing of the batch was (invariant 1).
#[derive(Debug, thiserror::Error)]
pub enum ReplicaAppendError {
    /// The bytes do not start where this log ends.
    #[error("replicated bytes start at {got}, but this log ends at {expected}")]
    NotAtEnd {
        /// This log's end.
        expected: u64,
        /// Where the bytes start.
        got: u64,
    },
    /// A record failed a check.
    #[error("replicated record at {at} refused: {reason}")]
    BadRecord {
        /// Its CommitLog offset.
        at: u64,
        /// The check that failed.
        reason: String,
    },
    /// The bytes end inside a record.
    #[error("replicated bytes end inside the record at {at}")]
    Partial {
        /// Offset of the torn record.
        at: u64,
    },
    /// The store refuses writes (closed, poisoned, dispatch stalled).
    #[error(transparent)]
    Refused(#[from] AppendError),
    /// This store has begun (or recorded) a newer epoch than the stream's master: the bytes
    /// come from a deposed master and must never land here (invariant 6).
    #[error(
        "replicated bytes from the master of epoch {stream_epoch} refused: this store is at \
         epoch {store_epoch}"
    )]
    Fenced {
        /// The epoch of the master the stream comes from.
        stream_epoch: u64,
        /// This store's last epoch.
        store_epoch: u64,
    },
}

/// Why a master could not read log bytes for a replica.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaReadError {
    /// The position is past the committed end.
    #[error("position {from} is past the log end {end}")]
    PastEnd {
        /// The position asked for.
        from: u64,
        /// The committed end.
        end: u64,
    },
    /// The position is below the oldest kept offset.
    #[error("position {from} is below the oldest kept offset {min} (removed by retention)")]
    Purged {
        /// The position asked for.
        from: u64,
        /// The oldest kept offset.
        min: u64,
    },
    /// The position is not where a record or end-of-segment marker starts.
    #[error("position {at} is not a record boundary of this log: {reason}")]
    NotABoundary {
        /// The position.
        at: u64,
        /// What was found there.
        reason: String,
    },
    /// Reading the files failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// One verified record of a replicated batch, before it is appended.
enum Planned<'a> {
    Record {
        record: VerbatimRecord<'a>,
        body: &'a [u8],
    },
    Blank,
}

impl MessageStore {
    /// End of the log in the segment files (what a master can stream).
    pub fn committed_end(&self) -> u64 {
        self.inner.log.committed_end()
    }

    /// End of everything appended, including the writer's uncommitted tail.
    pub fn appended_end(&self) -> u64 {
        self.inner.log.appended_end()
    }

    /// How far this store alone acknowledges: the flushed end under `SyncFlush`, the committed
    /// end under `AsyncFlush` (a replica reports this to its master).
    pub fn locally_acknowledgeable_end(&self) -> u64 {
        match self.inner.config.flush_disk_type {
            FlushDiskType::SyncFlush => self.inner.flush.flushed_end(),
            FlushDiskType::AsyncFlush => self.inner.log.committed_end(),
        }
    }

    /// A watcher woken after every tail commit (and truncation) from now on: the committed
    /// end may have moved. A master's streams wait on it; while it lives, every release of
    /// the commit lock signals it (`commit_releases`).
    pub fn subscribe_commits(&self) -> CommitWatch {
        self.inner.commit_releases.watch()
    }

    /// Caps dispatch at `bound` (`None`: no cap beyond the local flush policy). The
    /// replication layer sets the point every in-sync replica holds; it keeps the bound
    /// monotone while a term lasts.
    pub fn set_replication_bound(&self, bound: Option<u64>) {
        self.inner
            .replication_bound
            .store(bound.unwrap_or(u64::MAX), Ordering::Release);
        self.inner.dispatch_signal.notify();
    }

    /// The cap [`MessageStore::set_replication_bound`] set, if any.
    pub fn replication_bound(&self) -> Option<u64> {
        let bound = self.inner.replication_bound.load(Ordering::Acquire);
        (bound != u64::MAX).then_some(bound)
    }

    /// Whole records (or one end-of-segment marker) of the committed log starting at `from`,
    /// at most `max_bytes` unless the first record alone is larger; `Ok(None)` when `from` is
    /// the committed end. A chunk never crosses a segment: it ends at the segment's marker.
    ///
    /// # Errors
    /// [`ReplicaReadError`]: `from` is past the end, purged, or not a record boundary, or
    /// the files could not be read.
    pub fn replication_chunk(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<ReplicationChunk>, ReplicaReadError> {
        let log = &self.inner.log;
        let (end, min) = (log.committed_end(), log.min_offset());
        if from > end {
            return Err(ReplicaReadError::PastEnd { from, end });
        }
        if from == end {
            return Ok(None);
        }
        if from < min {
            return Err(ReplicaReadError::Purged { from, min });
        }
        let segment_end = log.segment_start_of(from) + log.segment_size();
        let limit = end.min(segment_end);
        let want = ((limit - from) as usize).min(max_bytes.max(BLANK_LEN as usize));
        let mut bytes = log.read(from, want)?;
        let (whole, ends_segment) = self.whole_records(from, &bytes, segment_end)?;
        if whole == 0 {
            // The first record is larger than `max_bytes`: read it alone.
            let size = peek_total_size(&bytes).unwrap_or(0);
            bytes = log.read(from, size)?;
        } else {
            bytes.truncate(whole);
        }
        let next = if ends_segment {
            segment_end
        } else {
            from + bytes.len() as u64
        };
        Ok(Some(ReplicationChunk {
            offset: from,
            bytes: Bytes::from(bytes),
            next,
        }))
    }

    /// How many bytes at the start of `bytes` (read at `from`) are whole records, ending at
    /// the first end-of-segment marker (and whether one ends them); 0 when the first record
    /// is not complete.
    fn whole_records(
        &self,
        from: u64,
        bytes: &[u8],
        segment_end: u64,
    ) -> Result<(usize, bool), ReplicaReadError> {
        let not_boundary = |reason: String| ReplicaReadError::NotABoundary { at: from, reason };
        let mut at = 0usize;
        while bytes.len() - at >= BLANK_LEN as usize {
            let rest = &bytes[at..];
            let size = peek_total_size(rest).unwrap_or(0);
            if peek_magic(rest) == BLANK_MAGIC {
                if from + (at + size) as u64 != segment_end {
                    return Err(not_boundary(format!(
                        "end-of-segment marker of size {size} at {}",
                        from + at as u64
                    )));
                }
                return Ok((at + BLANK_LEN as usize, true));
            }
            if size > self.inner.config.record_size_max() || size < BLANK_LEN as usize {
                return Err(not_boundary(format!(
                    "bad record size {size} at {}",
                    from + at as u64
                )));
            }
            if size > rest.len() {
                break;
            }
            if at == 0 {
                let view = RecordView::parse_structure(&rest[..size])
                    .map_err(|e| not_boundary(e.to_string()))?;
                if view.phys_offset != from {
                    return Err(not_boundary(format!(
                        "the record there says it belongs at {}",
                        view.phys_offset
                    )));
                }
            }
            at += size;
        }
        if at == 0 && bytes.len() < BLANK_LEN as usize {
            return Err(not_boundary(format!(
                "only {} bytes before the end",
                bytes.len()
            )));
        }
        Ok((at, false))
    }

    /// Whether a replica whose log ends at `log_end`, with `samples` its last records (oldest
    /// first), holds a prefix of this log.
    ///
    /// # Errors
    /// Reading this log's files failed.
    pub fn check_prefix(
        &self,
        log_end: u64,
        samples: &[LogSample],
    ) -> Result<PrefixCheck, ReadError> {
        let log = &self.inner.log;
        let (end, min) = (log.committed_end(), log.min_offset());
        judge_prefix(end, min, log_end, samples, |offset, size| {
            log.read(offset, size)
                .map(Some)
                .or_else(|error| match error {
                    ReadError::OutOfRange { .. } => Ok(None),
                    other => Err(other),
                })
        })
    }

    /// Where this log ends and its last records (at most [`LOG_SAMPLES_MAX`], oldest first):
    /// what a replica tells its master. Commits the writer's tail first, so the end is what
    /// the files hold. Reads from the newest dispatched record on (the undispatched suffix is
    /// short), or from the oldest kept offset when nothing is dispatched.
    ///
    /// # Errors
    /// The tail could not be committed, or the files could not be read.
    pub fn log_tail(&self) -> Result<(u64, Vec<LogSample>), ReadError> {
        self.inner.commit_tail()?;
        let log = &self.inner.log;
        let end = log.committed_end();
        let mut pos = self.newest_dispatched_record().unwrap_or(log.min_offset());
        let mut samples = std::collections::VecDeque::with_capacity(LOG_SAMPLES_MAX);
        while pos + BLANK_LEN <= end {
            let header = log.read(pos, BLANK_LEN as usize)?;
            let size = peek_total_size(&header).unwrap_or(0);
            if peek_magic(&header) == BLANK_MAGIC {
                pos = log.segment_start_of(pos) + log.segment_size();
                continue;
            }
            if size < BLANK_LEN as usize || pos + size as u64 > end {
                break;
            }
            let record = log.read(pos, size)?;
            if samples.len() == LOG_SAMPLES_MAX {
                samples.pop_front();
            }
            samples.push_back(LogSample {
                offset: pos,
                size: size as u32,
                crc: sealed_crc(&record).unwrap_or(0),
            });
            pos += size as u64;
        }
        Ok((end, samples.into()))
    }

    /// The CommitLog offset of the newest record any ConsumeQueue points at.
    fn newest_dispatched_record(&self) -> Option<u64> {
        let derived = self.inner.derived.lock();
        derived
            .queues
            .iter()
            .filter_map(|(_, _, queue)| queue.last_entry().ok().flatten())
            .filter(|entry| !entry.is_hole())
            .map(|entry| entry.phys_offset)
            .max()
    }

    /// Appends `bytes` — whole records and end-of-segment markers copied from the master's
    /// log at `offset` — verbatim, after verifying every record (invariant 1). Offset records
    /// are applied to the writer's view as the master applied them. The returned ticket
    /// resolves through [`MessageStore::acknowledged`] under this store's flush policy.
    ///
    /// `master_epoch` is the epoch of the master the bytes come from (its Welcome's epoch).
    /// Fence: once this store has begun or recorded a newer epoch
    /// ([`MessageStore::begin_epoch`]), the bytes are refused — checked under the writer
    /// lock, which `begin_epoch` holds too, so a promoted slave never appends a deposed
    /// master's bytes after its own term began.
    ///
    /// # Errors
    /// [`ReplicaAppendError`]; nothing was appended.
    pub fn append_replicated(
        &self,
        offset: u64,
        bytes: &[u8],
        master_epoch: u64,
    ) -> Result<AckTicket, ReplicaAppendError> {
        let inner = &self.inner;
        inner.check_writable()?;
        let (ticket, tail_bytes) = {
            let mut writer = inner.writer.lock().expect("writer lock");
            let store_epoch = self.last_epoch();
            if store_epoch > master_epoch {
                return Err(ReplicaAppendError::Fenced {
                    stream_epoch: master_epoch,
                    store_epoch,
                });
            }
            if writer.write_pos() != offset {
                return Err(ReplicaAppendError::NotAtEnd {
                    expected: writer.write_pos(),
                    got: offset,
                });
            }
            let planned = self.verify_replicated(&writer, offset, bytes)?;
            let mut records = 0u64;
            for step in &planned {
                match step {
                    Planned::Blank => writer.append_blank(inner.config.segment_size_bytes),
                    Planned::Record { record, body } => {
                        writer.append_verbatim(record);
                        records += 1;
                        if record.topic == OFFSET_TOPIC {
                            apply_replicated_offsets(&mut writer, record, body);
                        }
                    }
                }
            }
            inner.records_appended.fetch_add(records, Ordering::Relaxed);
            inner.log.publish_appended_end(writer.write_pos());
            let ticket = AckTicket {
                end: writer.write_pos(),
                epoch: inner.flush.epoch(),
            };
            (ticket, writer.tail_bytes())
        };
        inner.commit_if_tail_full(tail_bytes)?;
        inner.dispatch_signal.notify();
        Ok(ticket)
    }

    /// Checks every record of a replicated batch against the writer's state.
    fn verify_replicated<'a>(
        &self,
        writer: &crate::commitlog::writer::WriterState,
        offset: u64,
        bytes: &'a [u8],
    ) -> Result<Vec<Planned<'a>>, ReplicaAppendError> {
        let segment = self.inner.config.segment_size_bytes;
        let size_max = self.inner.config.record_size_max();
        let mut next_offsets: HashMap<(&str, u32), u64> = HashMap::new();
        let mut last_ts = writer.last_store_timestamp_ms();
        let mut planned = Vec::new();
        let (mut at, mut pos) = (0usize, offset);
        while at < bytes.len() {
            let bad = |reason: String| ReplicaAppendError::BadRecord { at: pos, reason };
            let rest = &bytes[at..];
            if rest.len() < BLANK_LEN as usize {
                return Err(ReplicaAppendError::Partial { at: pos });
            }
            let size = peek_total_size(rest).unwrap_or(0);
            if peek_magic(rest) == BLANK_MAGIC {
                if size as u64 != segment - pos % segment {
                    return Err(bad(format!("end-of-segment marker of wrong size {size}")));
                }
                if at + BLANK_LEN as usize != bytes.len() {
                    return Err(bad("bytes follow an end-of-segment marker".into()));
                }
                planned.push(Planned::Blank);
                break;
            }
            if size > size_max || size < BLANK_LEN as usize {
                return Err(bad(format!("size {size} outside 8..={size_max}")));
            }
            if pos % segment + size as u64 + BLANK_LEN > segment {
                return Err(bad(format!("size {size} does not fit its segment")));
            }
            if rest.len() < size {
                return Err(ReplicaAppendError::Partial { at: pos });
            }
            let view = RecordView::parse(&rest[..size]).map_err(|e| bad(e.to_string()))?;
            if view.phys_offset != pos {
                return Err(bad(format!("it says it belongs at {}", view.phys_offset)));
            }
            let topic = view.topic_str();
            let key = (topic, view.queue_id);
            let expected = next_offsets
                .get(&key)
                .copied()
                .unwrap_or_else(|| writer.queue_max(topic, view.queue_id));
            if view.queue_offset != expected {
                return Err(bad(format!(
                    "queue offset {} of {topic}/{}, but the queue's next is {expected}",
                    view.queue_offset, view.queue_id
                )));
            }
            if view.store_timestamp_ms < last_ts {
                return Err(bad(format!(
                    "store time {} before the previous record's {last_ts}",
                    view.store_timestamp_ms
                )));
            }
            next_offsets.insert(key, expected + 1);
            last_ts = view.store_timestamp_ms;
            planned.push(Planned::Record {
                record: VerbatimRecord {
                    bytes: view.as_bytes(),
                    topic,
                    queue_id: view.queue_id,
                    queue_offset: view.queue_offset,
                    store_timestamp_ms: view.store_timestamp_ms,
                },
                body: view.body,
            });
            at += size;
            pos += size as u64;
        }
        Ok(planned)
    }
}

/// Applies a replicated offset record to the writer's view, as the master's writer applied
/// it when it appended the record; a replica that one day becomes master judges new commits
/// against the same view. An entry the rules reject here would be rejected at dispatch too
/// (same view, same record), so it is logged, never applied.
fn apply_replicated_offsets(
    writer: &mut crate::commitlog::writer::WriterState,
    record: &VerbatimRecord<'_>,
    body: &[u8],
) {
    let command = match OffsetCommand::decode(body) {
        Ok(command) => command,
        Err(error) => {
            tracing::error!(%error, topic = record.topic,
                "undecodable replicated offset record (the dispatcher reports it too)");
            return;
        }
    };
    let super::offsets_api::WriterStateParts { offsets, queue_max } =
        super::offsets_api::split(writer);
    let verdicts = offsets.apply(&command, record.store_timestamp_ms, &queue_max);
    if let Some(Verdict::Rejected(reason)) =
        verdicts.iter().find(|v| matches!(v, Verdict::Rejected(_)))
    {
        tracing::warn!(group = %command.group, %reason,
            "replicated offset record entry rejected by the writer's view");
    }
}
