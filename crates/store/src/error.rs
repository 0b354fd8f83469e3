//! Errors of the store, one enum per operation family; each keeps its cause.
//!
//! A durability failure is never swallowed: it reaches the caller of the append or commit that
//! could not be made durable (invariant 2). After an fsync failure the store is *poisoned*:
//! every later append fails with [`AppendError::Poisoned`] until the process restarts and
//! recovery rebuilds a state it can trust, because after a failed fsync the kernel may have
//! dropped dirty pages and a retried fsync can report success for data that is gone.

use std::io;
use std::path::PathBuf;

use ferromq_protocol::RecordError;

/// An I/O failure on a named file.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct FileError {
    /// What was being done ("write", "fsync", "open", ...).
    pub op: &'static str,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

impl FileError {
    pub(crate) fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FileError {
            op,
            path: path.into(),
            source,
        }
    }

    /// The filesystem does not support the operation (no `fallocate`, say).
    pub fn is_unsupported(&self) -> bool {
        self.source.kind() == io::ErrorKind::Unsupported
            || self.source.raw_os_error() == Some(EOPNOTSUPP)
    }
}

/// `EOPNOTSUPP` on Linux: what `fallocate` returns on a filesystem without it.
const EOPNOTSUPP: i32 = 95;

/// Why an append (message or offset record) failed. Nothing was acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// A message field is invalid or too large.
    #[error("invalid message: {0}")]
    InvalidMessage(#[from] RecordError),
    /// The message exceeds `max_message_size_bytes`.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge { size: usize, max: usize },
    /// Writing failed (disk full, I/O error); the log was rolled back to its previous end.
    #[error("append failed and was rolled back: {0}")]
    Write(#[source] FileError),
    /// An earlier fsync or rollback failed; the store accepts no writes until restarted.
    #[error("store is poisoned by an earlier I/O failure ({0}); restart to recover")]
    Poisoned(String),
    /// The offset command could not be encoded (too many entries, names too long).
    #[error("offset command cannot be encoded: {0}")]
    OffsetEncoding(#[from] crate::offsets::OffsetCodecError),
    /// The store is shutting down.
    #[error("store is closed")]
    Closed,
    /// The dispatcher cannot index new records (it retries every tick): a write now would be
    /// acknowledged but stay invisible to consumers, so it is refused until dispatch resumes.
    #[error("the store cannot index new records ({0}); retry later")]
    DispatchStalled(String),
    /// A record's topic breaks the naming rules (`ferromq_protocol::names`): no file path may
    /// ever be built from it.
    #[error("record refused: {0}")]
    InvalidName(#[from] ferromq_protocol::names::NameError),
    /// A message append names a topic only the store itself writes (the offsets topic: offset
    /// records go through `commit_offsets`, so a message can never forge them).
    #[error("record refused: topic {topic} is written by the store only")]
    ReservedTopic { topic: String },
}

/// Why an acknowledged-durability wait failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DurabilityError {
    /// fsync failed; the data may not be on disk. The store is poisoned.
    #[error("fsync failed, data is not durable: {0}")]
    FlushFailed(String),
    /// `AsyncFlush`: the record never reached the CommitLog files, because writing them
    /// failed (disk full, I/O error) or an earlier failure poisoned the store first. It is
    /// not acknowledged; the store is poisoned.
    #[error("the record was not written to the CommitLog: {0}")]
    NotWritten(String),
    /// The flush did not complete within the configured timeout (RocketMQ FLUSH_DISK_TIMEOUT).
    #[error("flush did not complete within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    /// The store closed before the data was flushed.
    #[error("store closed before the data was flushed")]
    Closed,
    /// The log was truncated below the record while waiting (failover): it is gone.
    #[error("the log was truncated to {truncated_to} before the record became durable")]
    Truncated { truncated_to: u64 },
}

/// Why reading stored data failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// Stored bytes failed verification (size, magic or CRC).
    #[error("corrupt record at CommitLog offset {phys_offset}: {source}")]
    Corrupt {
        phys_offset: u64,
        #[source]
        source: RecordError,
    },
    /// A ConsumeQueue could not be read.
    #[error(transparent)]
    ConsumeQueue(#[from] crate::consume_queue::CqError),
    /// A record's stored PHYSICALOFFSET disagrees with where it was found.
    #[error("record at CommitLog offset {phys_offset} says it belongs at {stored}")]
    Misplaced { phys_offset: u64, stored: u64 },
    /// The record at a queue offset is damaged (quarantined): a reader gets the good records
    /// before it, then this. Moving a consumer past it is an explicit admin action.
    #[error(
        "the record at queue offset {queue_offset} of {topic}/{queue_id} (CommitLog offset \
         {phys_offset}) is damaged and quarantined: {reason}"
    )]
    Damaged {
        topic: String,
        queue_id: u32,
        queue_offset: u64,
        phys_offset: u64,
        reason: String,
    },
    /// A truncation cut the log under the read, between taking the queue's entries and
    /// reading the records they lead to (the read tried again, up to its bound, and the log
    /// kept changing). Nothing is damaged: the same read may simply be sent again.
    #[error(
        "the CommitLog was truncated under the read of {topic}/{queue_id} at queue offset \
         {queue_offset} (CommitLog offset {phys_offset}); retry"
    )]
    CutUnderRead {
        topic: String,
        queue_id: u32,
        queue_offset: u64,
        phys_offset: u64,
    },
    /// The dispatcher cannot index new records: "nothing new" would be a stale answer.
    #[error("the store cannot index new records ({0}); retry later")]
    DispatchStalled(String),
    /// An offset read waited its bound (`sync_flush_timeout_ms`) and the dispatcher still
    /// had not indexed everything acknowledged: answering from the view would be stale.
    #[error(
        "the offset view could not catch up: dispatched to {dispatched}, acknowledged \
         records reach {target}, after waiting {waited_ms} ms; retry later"
    )]
    ViewBehind {
        dispatched: u64,
        target: u64,
        waited_ms: u64,
    },
    /// A message id that does not decode.
    #[error("bad message id: {0}")]
    BadMessageId(String),
    /// The offset is outside the stored log.
    #[error("CommitLog offset {phys_offset} is outside the log [{min}, {max})")]
    OutOfRange {
        phys_offset: u64,
        min: u64,
        max: u64,
    },
}

/// Why the store could not open (recovery failed). Each names the file and offset concerned.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Bad configuration value.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// Another process holds the store's lock.
    #[error("store directory {0} is in use by another process")]
    Locked(PathBuf),
    /// A file that does not belong in the data directory.
    #[error("unexpected file {path}: {reason}")]
    ForeignFile { path: PathBuf, reason: String },
    /// I/O failure.
    #[error(transparent)]
    File(#[from] FileError),
    /// Derived state could not be rebuilt.
    #[error(transparent)]
    ConsumeQueue(#[from] crate::consume_queue::CqError),
    /// Reading the log failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Offsets cannot be rebuilt: the log no longer starts at 0 and no valid snapshot exists.
    #[error("consumer offsets cannot be rebuilt: no valid snapshot in {dir} and the CommitLog starts at {log_min} (older records were deleted); restore a snapshot file")]
    OffsetsUnrecoverable { dir: PathBuf, log_min: u64 },
    /// The log holds more damaged ranges than the store keeps track of: rather than guess
    /// (or cut acknowledged records after them), the store refuses to open.
    #[error(
        "the CommitLog holds more than {max} damaged ranges (the last one tracked ends at \
         offset {at}); the store will not guess past them: inspect it with \
         `ferromq standalone --check --full`"
    )]
    TooDamaged { max: usize, at: u64 },
    /// The epoch file (which master term wrote which part of the log) cannot be used.
    #[error(transparent)]
    Epoch(#[from] crate::epoch::EpochError),
}

/// Why a truncation failed.
#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    /// The offset is not a record boundary inside the log.
    #[error("cannot truncate at {phys_offset}: {reason}")]
    BadOffset { phys_offset: u64, reason: String },
    /// Rebuilding derived state after the cut failed.
    #[error(transparent)]
    Rebuild(#[from] OpenError),
    /// I/O failure; the store is poisoned and recovery completes the truncation on restart.
    #[error(transparent)]
    File(#[from] FileError),
    /// The epoch file could not be rewritten before the cut (nothing was cut).
    #[error(transparent)]
    Epoch(#[from] crate::epoch::EpochError),
}
