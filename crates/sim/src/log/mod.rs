//! A replica's CommitLog over its [`SimDisk`]: records in the production layout (encoded with
//! `DraftRecord`, sealed with the production CRC, parsed back with `RecordView`), the epoch
//! entries in the production epoch-file format, and the two offset views production keeps:
//! the writer's (applied as records are appended, used to judge new commits) and the
//! dispatched one (applied only up to the dispatch limit, what consumers read).
//!
//! It implements the production seams [`ferromq_broker::replication::follower::ReplicaLog`]
//! and [`ferromq_broker::replication::handshake::LogPrefix`] (see `replica.rs`), so the
//! production follower and handshake code run on it.
//!
//! Invariants:
//! 1. `records` describes the live log exactly: consecutive, from offset 0 to the live end.
//! 2. Dispatch never passes the dispatch limit: the smaller of the replication bound and the
//!    durable end (invariant 4 of DESIGN.md; production: the replication bound only caps
//!    what the local flush policy would expose).
//! 3. Both offset views are pure functions of the records they applied (I1): a truncation
//!    rebuilds them by replay.
//! 4. Epoch entries change only through the production rules (`ferromq_store::epoch::{begin,
//!    record, kept_below}`) and only after the epoch file was written.

mod recovery;
mod replica;

use std::cell::{Ref, RefCell, RefMut};
use std::net::SocketAddr;

use ferromq_protocol::{DraftRecord, RecordError, RecordView};
use ferromq_store::epoch::EpochEntry;
use ferromq_store::offsets::{OffsetCodecError, OffsetCommand, OffsetView, Verdict, OFFSET_TOPIC};
use ferromq_store::{EpochError, LogSample, LOG_SAMPLES_MAX};

use crate::disk::SimDisk;

pub use recovery::{LogCut, TruncateError};

/// The one message topic of the simulation.
pub const TOPIC: &str = "SimTopic";
/// Its one queue.
pub const QUEUE_ID: u32 = 0;
/// The one consumer group.
pub const GROUP: &str = "sim-group";

/// Why a local write failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The record could not be encoded.
    #[error("cannot encode the record: {0}")]
    Encode(#[from] RecordError),
    /// The offset command could not be encoded.
    #[error("cannot encode the offset command: {0}")]
    Offsets(#[from] OffsetCodecError),
    /// The epoch file could not be written.
    #[error(transparent)]
    Epoch(#[from] EpochError),
}

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A message of [`TOPIC`]: its queue offset and the producer's message id.
    Message {
        /// Its queue offset.
        queue_offset: u64,
        /// The workload's id (the body's first 8 bytes).
        msg_id: u64,
    },
    /// An offset record of the system topic.
    Offsets,
}

/// One record of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// CommitLog offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u32,
    /// The sealed CRC.
    pub crc: u32,
    /// What it is.
    pub kind: RecordKind,
}

impl RecordMeta {
    /// Where it ends.
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.size)
    }
}

/// The log's state (inside a `RefCell`: the production seams take `&self`).
#[derive(Debug)]
struct LogState {
    disk: SimDisk,
    epochs: Vec<EpochEntry>,
    records: Vec<RecordMeta>,
    /// Record index of each message, by queue offset.
    messages: Vec<usize>,
    /// Next queue offset of the offset topic's queue.
    offset_records: u64,
    last_store_ms: i64,
    bound: Option<u64>,
    writer_view: OffsetView,
    /// Records dispatched (a prefix of `records`).
    dispatched: usize,
    dispatched_messages: u64,
    dispatched_view: OffsetView,
    /// Bumped by every truncation (the production `AckTicket::epoch`).
    truncations: u64,
}

/// A replica's log.
#[derive(Debug)]
pub struct SimLog {
    state: RefCell<LogState>,
}

fn host() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 10911))
}

/// The body of message `msg_id` with `padding` filler bytes.
pub fn message_body(msg_id: u64, padding: usize) -> Vec<u8> {
    let mut body = msg_id.to_le_bytes().to_vec();
    body.extend((0..padding).map(|i| (msg_id as usize + i) as u8));
    body
}

fn kind_of(view: &RecordView<'_>) -> RecordKind {
    if view.topic == OFFSET_TOPIC.as_bytes() {
        return RecordKind::Offsets;
    }
    let mut id = [0u8; 8];
    let n = view.body.len().min(8);
    id[..n].copy_from_slice(&view.body[..n]);
    RecordKind::Message {
        queue_offset: view.queue_offset,
        msg_id: u64::from_le_bytes(id),
    }
}

impl SimLog {
    fn state(&self) -> Ref<'_, LogState> {
        self.state.borrow()
    }

    fn state_mut(&self) -> RefMut<'_, LogState> {
        self.state.borrow_mut()
    }

    /// The live end (production: the committed end).
    pub fn end(&self) -> u64 {
        self.state().disk.log().len() as u64
    }

    /// The durable end (production: the locally acknowledgeable end under SYNC_FLUSH).
    pub fn durable_end(&self) -> u64 {
        self.state().disk.durable_len()
    }

    /// The end of what is dispatched (visible to consumers on a master).
    pub fn dispatched_end(&self) -> u64 {
        let state = self.state();
        state
            .dispatched
            .checked_sub(1)
            .map_or(0, |i| state.records[i].end())
    }

    /// The epoch entries.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.state().epochs.clone()
    }

    /// The newest epoch.
    pub fn newest_epoch(&self) -> u64 {
        ferromq_store::epoch::last_epoch(&self.state().epochs)
    }

    /// The live bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.state().disk.log().to_vec()
    }

    /// The record starting at `offset`, if one does.
    pub fn record_at(&self, offset: u64) -> Option<RecordMeta> {
        let state = self.state();
        let i = state
            .records
            .binary_search_by_key(&offset, |r| r.offset)
            .ok()?;
        Some(state.records[i])
    }

    /// The next queue offset of the message queue (the writer's queue max).
    pub fn queue_max(&self) -> u64 {
        self.state().messages.len() as u64
    }

    /// The disk, for flushes and crashes.
    pub fn with_disk<T>(&self, f: impl FnOnce(&mut SimDisk) -> T) -> T {
        f(&mut self.state_mut().disk)
    }

    /// The truncation count (production `AckTicket::epoch`).
    pub fn truncations(&self) -> u64 {
        self.state().truncations
    }

    /// Appends a message as a master: its queue offset is the next, its store time `now_ms`
    /// (never before the previous record's). Returns the record.
    ///
    /// # Errors
    /// The record could not be encoded.
    pub fn append_message(&self, body: &[u8], now_ms: u64) -> Result<RecordMeta, LogError> {
        let queue_offset = self.queue_max();
        self.append_local(TOPIC, QUEUE_ID, queue_offset, body, now_ms)
    }

    /// Appends an offset command as a master, after the writer's view judged it
    /// ([`OffsetView::check`]); the verdicts, and the record when at least one entry applies.
    ///
    /// # Errors
    /// The command or record could not be encoded.
    pub fn append_offsets(
        &self,
        command: &OffsetCommand,
        now_ms: u64,
    ) -> Result<(Vec<Verdict>, Option<RecordMeta>), LogError> {
        let verdicts = {
            let state = self.state();
            let messages = state.messages.len() as u64;
            state
                .writer_view
                .check(command, &|t, q| queue_max_of(t, q, messages))
        };
        if !verdicts.contains(&Verdict::Applied) {
            return Ok((verdicts, None));
        }
        let body = command.encode()?;
        let queue_offset = self.state().offset_records;
        let meta = self.append_local(OFFSET_TOPIC, 0, queue_offset, &body, now_ms)?;
        Ok((verdicts, Some(meta)))
    }

    fn append_local(
        &self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        body: &[u8],
        now_ms: u64,
    ) -> Result<RecordMeta, LogError> {
        let draft = DraftRecord {
            topic,
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: now_ms as i64,
            born_host: host(),
            store_host: host(),
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body,
            properties: b"",
        };
        let mut encoded = draft.encode()?;
        let offset = self.end();
        let store_ms = self.state().last_store_ms.max(now_ms as i64);
        encoded.finalize(queue_offset, offset, store_ms);
        let bytes = encoded.as_bytes();
        let view = RecordView::parse(bytes)?;
        let meta = self.state_mut().push(&view);
        self.state_mut().disk.append_log(bytes);
        Ok(meta)
    }

    /// The dispatch cap.
    pub fn replication_bound(&self) -> Option<u64> {
        self.state().bound
    }

    /// Sets the dispatch cap and dispatches up to the new limit.
    pub fn set_replication_bound(&self, bound: Option<u64>) {
        self.state_mut().bound = bound;
        self.dispatch();
    }

    /// Dispatches every record below the dispatch limit (invariant 2).
    pub fn dispatch(&self) {
        let mut state = self.state_mut();
        let limit = state
            .bound
            .unwrap_or(u64::MAX)
            .min(state.disk.durable_len());
        state.dispatch_to(limit);
    }

    /// The dispatched messages from `queue_offset` on, at most `count_max`.
    pub fn read_messages(&self, queue_offset: u64, count_max: usize) -> Vec<RecordMeta> {
        let state = self.state();
        let end = state.dispatched_messages;
        (queue_offset..end)
            .take(count_max)
            .map(|q| state.records[state.messages[q as usize]])
            .collect()
    }

    /// The dispatched view's stored offset and generation of the simulation's queue.
    pub fn dispatched_offset(&self) -> (Option<u64>, u64) {
        let state = self.state();
        let stored = state.dispatched_view.get(GROUP, TOPIC, QUEUE_ID);
        (
            stored.map(|s| s.offset),
            state.dispatched_view.generation(GROUP, TOPIC),
        )
    }

    /// The writer view's stored offset and generation of the simulation's queue: what every
    /// offset record in this log, replicated or not, sets.
    pub fn writer_offset(&self) -> (Option<u64>, u64) {
        let state = self.state();
        let stored = state.writer_view.get(GROUP, TOPIC, QUEUE_ID);
        (
            stored.map(|s| s.offset),
            state.writer_view.generation(GROUP, TOPIC),
        )
    }

    /// The generation a reset would establish now (the writer's view).
    pub fn next_generation(&self) -> u64 {
        self.state().writer_view.next_generation(GROUP, TOPIC)
    }

    /// The writer view's generation of the simulation's queue.
    pub fn writer_generation(&self) -> u64 {
        self.state().writer_view.generation(GROUP, TOPIC)
    }

    /// The last [`LOG_SAMPLES_MAX`] records and the end: what a replica's Hello says.
    pub fn log_tail(&self) -> (u64, Vec<LogSample>) {
        let state = self.state();
        let skip = state.records.len().saturating_sub(LOG_SAMPLES_MAX);
        let samples = state.records[skip..]
            .iter()
            .map(|r| LogSample {
                offset: r.offset,
                size: r.size,
                crc: r.crc,
            })
            .collect();
        (state.disk.log().len() as u64, samples)
    }

    /// Whole records from `from` (a record boundary), at most `bytes_max` unless the first
    /// record alone is larger; `None` when `from` is the end or not a boundary.
    pub fn chunk(&self, from: u64, bytes_max: usize) -> Option<(Vec<u8>, u64)> {
        let state = self.state();
        let first = state
            .records
            .binary_search_by_key(&from, |r| r.offset)
            .ok()?;
        let mut next = state.records[first].end();
        for record in &state.records[first + 1..] {
            if record.end() - from > bytes_max as u64 {
                break;
            }
            next = record.end();
        }
        Some((
            state.disk.log()[from as usize..next as usize].to_vec(),
            next,
        ))
    }
}

fn queue_max_of(topic: &str, queue_id: u32, messages: u64) -> u64 {
    if topic == TOPIC && queue_id == QUEUE_ID {
        messages
    } else {
        0
    }
}

impl LogState {
    /// Indexes a record appended at the live end and applies an offset record to the
    /// writer's view, as production's writer does.
    fn push(&mut self, view: &RecordView<'_>) -> RecordMeta {
        let meta = RecordMeta {
            offset: view.phys_offset,
            size: view.as_bytes().len() as u32,
            crc: ferromq_protocol::message::record::sealed_crc(view.as_bytes()).unwrap_or(0),
            kind: kind_of(view),
        };
        match meta.kind {
            RecordKind::Message { .. } => self.messages.push(self.records.len()),
            RecordKind::Offsets => {
                self.offset_records += 1;
                if let Ok(command) = OffsetCommand::decode(view.body) {
                    let messages = self.messages.len() as u64;
                    self.writer_view
                        .apply(&command, view.store_timestamp_ms, &|t, q| {
                            queue_max_of(t, q, messages)
                        });
                }
            }
        }
        self.last_store_ms = self.last_store_ms.max(view.store_timestamp_ms);
        self.records.push(meta);
        meta
    }

    fn dispatch_to(&mut self, limit: u64) {
        while let Some(record) = self.records.get(self.dispatched).copied() {
            if record.end() > limit {
                break;
            }
            match record.kind {
                RecordKind::Message { .. } => self.dispatched_messages += 1,
                RecordKind::Offsets => self.apply_dispatched_offsets(&record),
            }
            self.dispatched += 1;
        }
    }

    fn apply_dispatched_offsets(&mut self, record: &RecordMeta) {
        let (start, end) = (record.offset as usize, record.end() as usize);
        let Ok(view) = RecordView::parse(&self.disk.log()[start..end]) else {
            return;
        };
        let Ok(command) = OffsetCommand::decode(view.body) else {
            return;
        };
        let messages = self.dispatched_messages;
        self.dispatched_view
            .apply(&command, view.store_timestamp_ms, &|t, q| {
                queue_max_of(t, q, messages)
            });
    }
}

impl SimLog {
    /// The first byte below `upto` where this log and `other` differ, comparing only what
    /// both hold.
    pub fn first_difference(&self, other: &SimLog, upto: u64) -> Option<u64> {
        let (a, b) = (self.state(), other.state());
        let (a, b) = (a.disk.log(), b.disk.log());
        let len = (upto as usize).min(a.len()).min(b.len());
        if a[..len] == b[..len] {
            return None;
        }
        a[..len]
            .iter()
            .zip(&b[..len])
            .position(|(x, y)| x != y)
            .map(|i| i as u64)
    }

    /// Gives the disk back (a crash: everything else is volatile).
    pub fn into_disk(self) -> SimDisk {
        self.state.into_inner().disk
    }
}
