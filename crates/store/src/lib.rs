//! ferromq's storage engine: one CommitLog for messages *and* consumer progress.
//!
//! - [`commitlog`]: segmented append-only log of RocketMQ-layout records with a whole-record
//!   CRC; a single appender assigns physical and queue offsets.
//! - [`flush`]: `SyncFlush` with group commit, or `AsyncFlush` on an interval.
//! - [`dispatch`]: builds ConsumeQueues, the key index and the offset view from the log, up to
//!   the dispatch limit.
//! - [`offsets`]: offset commits, resets and corrections as log records, and the view.
//! - [`checkpoint`] and [`recovery`]: crash-safe restart from the last checkpoint.
//! - [`MessageStore`]: the public face.
//!
//! # Acknowledgement and offset reads
//! Every write is acknowledged through one future, [`MessageStore::acknowledged`], fed an
//! [`AckTicket`] ([`PutReceipt::ticket`] for messages, [`MessageStore::append_offsets`] for
//! offset records); it never blocks its thread and is bounded by `sync_flush_timeout_ms`
//! under both flush policies. Async code reads consumer offsets through
//! [`MessageStore::offset_view`], which waits (asynchronously, bounded) until the view covers
//! every acknowledged commit and otherwise fails ([`ReadError::ViewBehind`],
//! [`ReadError::DispatchStalled`]) rather than answer from a stale view. The blocking forms
//! (`put`, `commit_offsets`, `consumer_offset`, ...) are for blocking callers only.
//!
//! The invariants of `DESIGN.md` that live here: 1 (one log for data and progress),
//! 2 (acknowledged means durable), 3 (progress is monotone), 4 (consumers read below the
//! dispatch limit), 5 (everything on disk is checked), 7 (no magic offsets).

pub mod check;
pub mod checkpoint;
pub mod clock;
pub mod commitlog;
pub mod config;
pub mod consume_queue;
pub mod dispatch;
pub mod epoch;
pub mod error;
pub mod faults;
mod file_set;
pub mod flush;
pub mod flush_latency;
pub mod fsutil;
pub mod key_index;
pub mod offsets;
pub mod quarantine;
pub mod queue_waiters;
pub mod recovery;
pub mod scan;
mod store;

pub use check::{check_store, CheckReport, CheckScope};
pub use clock::{Clock, SystemClock};
pub use commitlog::writer::Placement;
pub use commitlog::{FileRegion, RegionError};
pub use config::{FlushDiskType, StoreConfig};
pub use epoch::{last_common_point, shared_term, CommonPoint, EpochEntry, EpochError, SharedTerm};
pub use error::{AppendError, DurabilityError, OpenError, ReadError, TruncateError};
pub use quarantine::{QuarantineKind, QuarantineSnapshot, QuarantinedRange};
pub use recovery::{LogCut, RecoveryReport};
pub use store::{
    judge_prefix, AckTicket, CommitOutcome, CommitWatch, GetResult, GetStatus, LogSample,
    MessageStore, OffsetEvent, OffsetView, PrefixCheck, PutReceipt, ReplicaAppendError,
    ReplicaReadError, ReplicationChunk, RetentionReport, Sendable, StoreError, StoreStats, Stored,
    StoredMessage, StoredRegion, TagFilter, TimeBoundary, TruncateReport, DISPATCH_HOLD_BYTES_MAX,
    LOG_SAMPLES_MAX, ZERO_COPY_SEND_BYTES_MIN,
};
