//! ConsumeQueues: per (topic, queue) indexes of 20-byte entries into the CommitLog.
//!
//! Layout (RocketMQ's): `consumequeue/<topic>/<queueId>/<20-digit start byte offset>`, each
//! file holding `entries_per_file` entries of `phys_offset: i64, size: i32, tag_code: i64`,
//! big-endian; entry number = queue offset.
//!
//! Invariants:
//! 1. The dispatcher is the only writer; entries are appended in queue-offset order and their
//!    physical offsets increase (log order). An entry for an offset already present must be
//!    identical (idempotent re-dispatch); a gap is an error, never silently skipped.
//! 2. Entries are derived state: recovery cuts every entry at or after the checkpoint's log
//!    position and re-dispatches them from the log.
//! 3. An entry of size 0 is a hole (an unwritten slot); it never points at a message.
//! 4. The only gap the dispatcher fills is one a damaged CommitLog range explains: each
//!    missing offset gets a placeholder entry pointing at the damage (`damaged_placeholder`),
//!    so consumers stop there with an error naming it instead of skipping the offset.

mod queue;
mod set;

pub use queue::{ConsumeQueue, CqEntry, CqOpenReport, PutOutcome, CQ_ENTRY_SIZE, DAMAGED_TAG_CODE};
pub use set::ConsumeQueueSet;

use std::path::PathBuf;

/// ConsumeQueue failures.
#[derive(Debug, thiserror::Error)]
pub enum CqError {
    /// I/O failure on a named file.
    #[error(transparent)]
    File(#[from] crate::error::FileError),
    /// A file in a ConsumeQueue directory that does not belong there.
    #[error("unexpected file {path}: {reason}")]
    Foreign { path: PathBuf, reason: String },
    /// Dispatch skipped queue offsets: derived state does not match the log.
    #[error("ConsumeQueue {queue} expects offset {expected}, got {got}")]
    Gap {
        queue: String,
        expected: u64,
        got: u64,
    },
    /// Re-dispatch found a different entry at an offset already written.
    #[error("ConsumeQueue {queue} offset {queue_offset} holds another entry")]
    Conflict { queue: String, queue_offset: u64 },
    /// A queue was asked for under a topic name that breaks the naming rules: its directory is
    /// never created (the name could lead outside the data directory or not fit a file name).
    #[error("no ConsumeQueue for this topic: {0}")]
    InvalidName(#[from] ferromq_protocol::names::NameError),
}
