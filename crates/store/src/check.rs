//! Read-only checks of a store directory: `ferromq standalone --check` (what recovery would
//! do) and `--check --full` (verify every record of the log).
//!
//! A check opens every file read-only and writes nothing: not the abort marker, not a
//! checkpoint, not a ConsumeQueue, not `store.meta`; it never cuts, truncates or rebuilds.
//! It holds a shared lock on the store's `lock` file while it reads, so a broker cannot open
//! the store meanwhile, and it refuses a store a running broker holds. Repairs are the
//! separate, explicit `ferromq standalone --repair` (an ordinary recovery).
//!
//! Its findings come from the same code recovery runs ([`crate::scan`], checkpoint choice),
//! so what it reports is what the next start will do.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::checkpoint::{Checkpoint, CheckpointDir};
use crate::commitlog::CommitLog;
use crate::config::StoreConfig;
use crate::consume_queue::{CqEntry, CQ_ENTRY_SIZE};
use crate::error::{FileError, OpenError};
use crate::fsutil;
use crate::recovery::{self, LogCut};
use crate::scan::{scan_log, LogScan};

/// How much of the log a check verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckScope {
    /// What recovery verifies: from the checkpoint it would use to the end.
    Recovery,
    /// Every record of the log, from its first byte (damage before the checkpoint too).
    Full,
}

/// What a check found, and what recovery would do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The directory holds no store yet (nothing to check; a start would create one).
    pub empty: bool,
    /// The previous run closed cleanly (no abort marker).
    pub clean_shutdown: bool,
    /// A truncation a crash interrupted, which recovery would complete at this offset.
    pub pending_truncation: Option<u64>,
    /// The checkpoint recovery would use.
    pub checkpoint_position: Option<u64>,
    /// Checkpoints that fail verification or lie outside the log, with the reason.
    pub checkpoints_rejected: Vec<String>,
    /// Which part of the log was verified.
    pub scope: CheckScope,
    /// Where verification started.
    pub scanned_from: u64,
    /// What verification found: records, damaged ranges (recovery quarantines them and keeps
    /// what follows), the torn tail.
    pub scan: LogScan,
    /// The torn tail recovery would cut.
    pub would_cut: Option<LogCut>,
    /// Start of the log.
    pub log_min: u64,
    /// Why recovery would rebuild every ConsumeQueue from the log, if it would.
    pub queues_would_rebuild: Option<String>,
    /// Torn ConsumeQueue tails recovery would cut (queue, bytes).
    pub queue_torn_tails: Vec<(String, u64)>,
    /// The epoch file's entries (a corrupt file is an error, as at open).
    pub epochs: Vec<crate::epoch::EpochEntry>,
    /// Epoch entries starting past the log end recovery would keep: the next open drops them.
    pub epochs_past_end: Vec<crate::epoch::EpochEntry>,
}

impl CheckReport {
    /// Whether the store is exactly as a clean stop leaves it: nothing to cut, quarantine,
    /// complete or rebuild.
    pub fn is_clean(&self) -> bool {
        self.clean_shutdown
            && self.pending_truncation.is_none()
            && self.would_cut.is_none()
            && self.scan.damaged.is_empty()
            && self.queues_would_rebuild.is_none()
            && self.queue_torn_tails.is_empty()
            && self.epochs_past_end.is_empty()
            && self.scan.stopped_at.is_none()
    }
}

/// Checks the store under `config.root_dir` without changing any file.
///
/// # Errors
/// The configuration is invalid, a running broker holds the store, or a file cannot be read
/// or is foreign — the same errors an open would give, found without writing.
pub fn check_store(config: &StoreConfig, scope: CheckScope) -> Result<CheckReport, OpenError> {
    config.validate()?;
    let root = &config.root_dir;
    if root.exists() && !root.is_dir() {
        return Err(FileError::new(
            "open store directory",
            root,
            std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        )
        .into());
    }
    let _lock = lock_shared(root)?;
    check_format(config)?;
    let log = CommitLog::open_read_only(
        &config.commitlog_dir(),
        config.segment_size_bytes,
        config.record_size_max(),
    )?;
    let checkpoints = CheckpointDir::read_only(&config.checkpoint_dir());
    let (checkpoint, checkpoints_rejected) = recovery::choose_checkpoint(&log, &checkpoints)?;
    let scanned_from = match scope {
        CheckScope::Full => log.min_offset(),
        CheckScope::Recovery => checkpoint.as_ref().map_or(log.min_offset(), |c| c.position),
    };
    let mut scan = scan_log(&log, scanned_from)?;
    let preallocated = crate::commitlog::preallocation::read_record(root)?;
    let (_, cut) = recovery::bytes_to_cut(&log, scan.end, scan.tail.clone(), preallocated)?;
    if cut.is_none() {
        // Whatever follows the log is preallocated space, not a torn tail.
        scan.tail = None;
    }
    // A scan that stopped at too much damage cuts nothing: recovery refuses to open instead.
    let would_cut = cut.filter(|_| scan.stopped_at.is_none());
    let queues = inspect_queues(config, checkpoint.as_ref())?;
    let epochs = crate::epoch::load(root)?;
    let kept_end = pending_truncation(root)?.map_or(scan.end, |cut| cut.min(scan.end));
    let epochs_past_end = epochs
        .iter()
        .copied()
        .filter(|e| e.start > kept_end)
        .collect();
    let empty = log.segments().is_empty() && queues.count == 0;
    let queues_would_rebuild = match &checkpoint {
        None if empty => None,
        None => Some("no usable checkpoint".to_string()),
        Some(_) => queues.rebuild,
    };
    Ok(CheckReport {
        empty,
        clean_shutdown: !recovery::abort_marker(root).exists(),
        pending_truncation: pending_truncation(root)?,
        checkpoint_position: checkpoint.as_ref().map(|c| c.position),
        checkpoints_rejected,
        scope,
        scanned_from,
        scan,
        would_cut,
        log_min: log.min_offset(),
        queues_would_rebuild,
        queue_torn_tails: queues.torn_tails,
        epochs,
        epochs_past_end,
    })
}

/// A shared lock on `root/lock` (read-only), so no broker opens the store during the check.
fn lock_shared(root: &Path) -> Result<Option<File>, OpenError> {
    let path = root.join("lock");
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::new("open", &path, e).into()),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked(root.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(FileError::new("lock", &path, e).into()),
    }
}

/// The store's format file must be ours and match the configuration (absent: a new store).
fn check_format(config: &StoreConfig) -> Result<(), OpenError> {
    let path = config.root_dir.join("store.meta");
    let expected = format!(
        "{}\nmappedFileSizeCommitLog={}\n",
        recovery::FORMAT_LINE,
        config.segment_size_bytes
    );
    match std::fs::read_to_string(&path) {
        Ok(text) if text == expected => Ok(()),
        Ok(text) if text.starts_with(recovery::FORMAT_LINE) => Err(OpenError::Config(format!(
            "mappedFileSizeCommitLog: the store at {} was created with different settings ({})",
            config.root_dir.display(),
            text.lines().nth(1).unwrap_or("unknown"),
        ))),
        Ok(_) => Err(OpenError::ForeignFile {
            path,
            reason: "not a ferromq store metadata file".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FileError::new("read", &path, e).into()),
    }
}

fn pending_truncation(root: &Path) -> Result<Option<u64>, OpenError> {
    let path = recovery::truncate_intent(root);
    match std::fs::read(&path) {
        Ok(bytes) => {
            recovery::decode_intent(&bytes)
                .map(Some)
                .ok_or_else(|| OpenError::ForeignFile {
                    path,
                    reason: "truncate intent is corrupt".into(),
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::new("read", &path, e).into()),
    }
}

/// What the ConsumeQueue files say, read-only.
#[derive(Debug, Default)]
struct QueueInspection {
    count: usize,
    torn_tails: Vec<(String, u64)>,
    rebuild: Option<String>,
}

/// Looks at every ConsumeQueue the way recovery's open and checkpoint comparison do.
fn inspect_queues(
    config: &StoreConfig,
    checkpoint: Option<&Checkpoint>,
) -> Result<QueueInspection, OpenError> {
    let mut inspection = QueueInspection::default();
    let mut expected = checkpoint
        .map(|c| c.queue_offsets.clone())
        .unwrap_or_default();
    let file_bytes = config.consume_queue_entries_per_file * CQ_ENTRY_SIZE;
    for (topic, queue_id, dir) in queue_dirs(&config.consume_queue_dir())? {
        inspection.count += 1;
        let label = format!("{topic}/{queue_id}");
        let files = queue_files(&dir, file_bytes)?;
        let Some((last_start, last_path)) = files.last().cloned() else {
            continue;
        };
        for pair in files.windows(2) {
            if pair[1].0 != pair[0].0 + file_bytes || file_len(&pair[0].1)? != file_bytes {
                inspection
                    .rebuild
                    .get_or_insert(format!("ConsumeQueue {label} has a short or missing file"));
            }
        }
        let last_len = file_len(&last_path)?;
        if last_len % CQ_ENTRY_SIZE != 0 {
            inspection
                .torn_tails
                .push((label.clone(), last_len % CQ_ENTRY_SIZE));
        }
        if let Some(checkpoint) = checkpoint {
            let first_entry = files[0].0 / CQ_ENTRY_SIZE;
            let end_entry = (last_start + last_len - last_len % CQ_ENTRY_SIZE) / CQ_ENTRY_SIZE;
            let below = entries_below(
                &files,
                file_bytes,
                first_entry,
                end_entry,
                checkpoint.position,
            )?;
            let want = expected.remove(&(topic.clone(), queue_id)).unwrap_or(0);
            if below != want && !(below == first_entry && want == 0) {
                inspection.rebuild.get_or_insert(format!(
                    "ConsumeQueue {label} ends at {below}, the checkpoint says {want}"
                ));
            }
        }
    }
    if let Some(((topic, queue_id), want)) = expected.into_iter().find(|(_, want)| *want > 0) {
        inspection.rebuild.get_or_insert(format!(
            "ConsumeQueue {topic}/{queue_id} ends at 0, the checkpoint says {want}"
        ));
    }
    Ok(inspection)
}

/// Queue offset of the first entry at or past `position` (holes count as below it), as
/// recovery's cut at the checkpoint finds it.
fn entries_below(
    files: &[(u64, PathBuf)],
    file_bytes: u64,
    first_entry: u64,
    end_entry: u64,
    position: u64,
) -> Result<u64, OpenError> {
    let (mut low, mut high) = (first_entry, end_entry);
    while low < high {
        let mid = low + (high - low) / 2;
        let entry = read_entry(files, file_bytes, mid)?;
        if entry.is_hole() || entry.phys_offset < position {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    Ok(low)
}

fn read_entry(files: &[(u64, PathBuf)], file_bytes: u64, index: u64) -> Result<CqEntry, OpenError> {
    use std::os::unix::fs::FileExt;
    let byte = index * CQ_ENTRY_SIZE;
    let start = byte - byte % file_bytes;
    let Some((_, path)) = files.iter().find(|(s, _)| *s == start) else {
        return Ok(CqEntry::default());
    };
    let file = File::open(path).map_err(|e| FileError::new("open", path, e))?;
    let mut buf = [0u8; CQ_ENTRY_SIZE as usize];
    match file.read_exact_at(&mut buf, byte - start) {
        Ok(()) => Ok(CqEntry::decode(&buf)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(CqEntry::default()),
        Err(e) => Err(FileError::new("read", path, e).into()),
    }
}

fn file_len(path: &Path) -> Result<u64, OpenError> {
    Ok(std::fs::metadata(path)
        .map_err(|e| FileError::new("stat", path, e))?
        .len())
}

/// `consumequeue/<topic>/<queueId>` directories.
fn queue_dirs(root: &Path) -> Result<Vec<(String, u32, PathBuf)>, OpenError> {
    let mut out = Vec::new();
    for topic_dir in sub_dirs(root)? {
        let topic = topic_dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for queue_dir in sub_dirs(&topic_dir)? {
            let name = queue_dir.file_name().unwrap_or_default().to_string_lossy();
            let queue_id: u32 = name.parse().map_err(|_| OpenError::ForeignFile {
                path: queue_dir.clone(),
                reason: "queue directory name is not a queue id".into(),
            })?;
            out.push((topic.clone(), queue_id, queue_dir));
        }
    }
    Ok(out)
}

fn sub_dirs(dir: &Path) -> Result<Vec<PathBuf>, OpenError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))? {
        let item = item.map_err(|e| FileError::new("list", dir, e))?;
        if item.path().is_dir() {
            out.push(item.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The files of one queue, by start byte, refusing foreign ones as recovery does.
fn queue_files(dir: &Path, file_bytes: u64) -> Result<Vec<(u64, PathBuf)>, OpenError> {
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))? {
        let item = item.map_err(|e| FileError::new("list", dir, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        let start = fsutil::parse_offset_file_name(&name)
            .filter(|start| start % file_bytes == 0)
            .ok_or_else(|| OpenError::ForeignFile {
                path: item.path(),
                reason: format!("not a ConsumeQueue file (20-digit multiple of {file_bytes})"),
            })?;
        out.push((start, item.path()));
    }
    out.sort();
    Ok(out)
}
