//! Store configuration. Keys keep RocketMQ's names where RocketMQ has the same setting.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::error::OpenError;

/// Bytes a segment must hold beyond `maxMessageSize`: the fixed record fields, a topic and
/// ordinary properties.
const SEGMENT_SLACK_BYTES: u64 = 4096;

/// How appends become durable (RocketMQ `flushDiskType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// An append is acknowledged once `fdatasync` covers it; concurrent appends share one
    /// `fdatasync` (group commit). Consumers see only flushed data.
    SyncFlush,
    /// An append is acknowledged once written to the segment files (the page cache), which
    /// a crash of the process does not lose; a background flush fsyncs every
    /// `flush_interval_ms`. An OS or machine crash may lose the unflushed suffix, never a
    /// record in the middle.
    AsyncFlush,
}

/// Configuration of one store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Root directory (`storePathRootDir`).
    pub root_dir: PathBuf,
    /// CommitLog segment size (`mappedFileSizeCommitLog`, 1 GiB by default).
    pub segment_size_bytes: u64,
    /// Entries per ConsumeQueue file (300,000 in RocketMQ).
    pub consume_queue_entries_per_file: u64,
    /// `flushDiskType`.
    pub flush_disk_type: FlushDiskType,
    /// Interval of the background flush under `AsyncFlush` (`flushIntervalCommitLog`).
    pub flush_interval_ms: u64,
    /// Under `AsyncFlush`, commit by copying into a shared map of the active segment over
    /// preallocated space (`true`, as RocketMQ writes through its `MappedByteBuffer`), or
    /// with one `pwrite` per commit (`false`). Same acknowledgement either way: the bytes
    /// are in the page cache. `SyncFlush` always writes (see `commitlog::mapping`).
    pub mapped_writes: bool,
    /// Under mapped writes, a thread populates the map's next window ahead of the copies
    /// (`true`; `commitlog::populate_ahead`), or the committer populates each window when
    /// its copies reach it (`false`).
    pub populate_ahead: bool,
    /// Pull reads copy records out of a read-only map of each segment (`true`: a queue whose
    /// records lie between other queues' copies only its own) or read spans with `pread`
    /// (`false`). See `commitlog::read_map`.
    pub mapped_reads: bool,
    /// Under `SyncFlush`, a background thread keeps the active segment's file written with
    /// zeros ahead of the commits (`true`; `commitlog::preallocation`, "zeroed space"), so an
    /// fsync after a commit overwrites blocks that are already allocated and written and
    /// writes no metadata, while commits average at most
    /// `commitlog::preallocation::ZEROING_COMMIT_MAX_BYTES` (the default); `false`: space is
    /// reserved with `fallocate` for small commits only.
    pub zeroed_space: bool,
    /// How long a `SyncFlush` append waits for its fsync (`syncFlushTimeout`).
    pub sync_flush_timeout_ms: u64,
    /// Interval between checkpoints (ConsumeQueue/index fsync + offset snapshot).
    pub checkpoint_interval_ms: u64,
    /// Snapshots kept; older ones are deleted (at least 2, so one survives a torn newest).
    pub snapshots_kept: usize,
    /// Largest message body accepted (`maxMessageSize`).
    pub max_message_size_bytes: usize,
    /// The address written as STOREHOST in each record.
    pub store_host: SocketAddr,
    /// Delete CommitLog segments older than this (`fileReservedTime`, in ms); `None` keeps all.
    pub retention_max_age_ms: Option<u64>,
    /// Delete the oldest segments while the CommitLog is larger than this; `None` = no limit.
    pub retention_max_log_bytes: Option<u64>,
}

impl StoreConfig {
    /// RocketMQ's defaults under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            root_dir: root_dir.into(),
            segment_size_bytes: 1 << 30,
            consume_queue_entries_per_file: 300_000,
            flush_disk_type: FlushDiskType::AsyncFlush,
            flush_interval_ms: 500,
            mapped_writes: true,
            populate_ahead: true,
            mapped_reads: true,
            zeroed_space: true,
            sync_flush_timeout_ms: 5_000,
            checkpoint_interval_ms: 1_000,
            snapshots_kept: 3,
            max_message_size_bytes: 4 * 1024 * 1024,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            retention_max_age_ms: Some(72 * 3600 * 1000),
            retention_max_log_bytes: None,
        }
    }

    /// Rejects values the store cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), OpenError> {
        let bad = |key: &str, why: &str| Err(OpenError::Config(format!("{key}: {why}")));
        if self.segment_size_bytes < 64 * 1024 {
            return bad("mappedFileSizeCommitLog", "must be at least 65536 bytes");
        }
        if self.max_message_size_bytes == 0 {
            return bad("maxMessageSize", "must be at least 1 byte");
        }
        if self.max_message_size_bytes > ferromq_protocol::BODY_SIZE_LIMIT {
            return bad(
                "maxMessageSize",
                &format!(
                    "must be at most {} bytes",
                    ferromq_protocol::BODY_SIZE_LIMIT
                ),
            );
        }
        // Room for a body of the largest size with ordinary topic and properties. A record
        // that does not fit in a segment (a longest body with 32 KiB of properties in a small
        // segment) is refused by the writer (MessageTooLarge), never written.
        if self.max_message_size_bytes as u64 + SEGMENT_SLACK_BYTES > self.segment_size_bytes {
            return bad(
                "maxMessageSize",
                &format!(
                    "a message must fit in one CommitLog segment of {} bytes \
                     (mappedFileSizeCommitLog) with {SEGMENT_SLACK_BYTES} bytes to spare",
                    self.segment_size_bytes
                ),
            );
        }
        if self.consume_queue_entries_per_file == 0 {
            return bad("mappedFileSizeConsumeQueue", "must hold at least one entry");
        }
        if self.flush_interval_ms == 0 || self.checkpoint_interval_ms == 0 {
            return bad("flushIntervalCommitLog", "intervals must be positive");
        }
        if self.snapshots_kept < 2 {
            return bad("snapshotsKept", "must be at least 2");
        }
        Ok(())
    }

    /// The largest record a send may produce under this configuration
    /// ([`ferromq_protocol::record_size_max`] of `maxMessageSize`). The writer, the recovery
    /// scanner, the dispatcher and every reader use this one limit.
    pub fn record_size_max(&self) -> usize {
        ferromq_protocol::record_size_max(self.max_message_size_bytes)
    }

    pub(crate) fn commitlog_dir(&self) -> PathBuf {
        self.root_dir.join("commitlog")
    }
    pub(crate) fn consume_queue_dir(&self) -> PathBuf {
        self.root_dir.join("consumequeue")
    }
    pub(crate) fn index_dir(&self) -> PathBuf {
        self.root_dir.join("index")
    }
    pub(crate) fn checkpoint_dir(&self) -> PathBuf {
        self.root_dir.join("checkpoint")
    }
}
