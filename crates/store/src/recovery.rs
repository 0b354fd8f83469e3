//! Recovery: from the files on disk to a store whose every structure agrees with its log.
//!
//! Steps (invariant 5; `reference/storage-format.md` §5.4):
//! 1. Lock the directory, check the store format, note whether the last run ended cleanly
//!    (`abort` marker absent) and create the marker for this run.
//! 2. Finish a truncation that a crash interrupted (`truncate.intent`), so a cut tail never
//!    comes back (RocketMQ #10666).
//! 3. Load the newest checkpoint that verifies and lies inside the log; corrupt ones are
//!    reported and skipped.
//! 4. Scan the CommitLog from the checkpoint position, verifying each record (`scan`): bad
//!    bytes with nothing valid after them are a torn tail, cut and reported; bad bytes with
//!    valid records after them are quarantined and reported, and nothing is cut.
//! 5. Cut ConsumeQueue and index entries at or past the checkpoint position, check the queues
//!    against the checkpoint's queue table, and re-dispatch the log from there. A queue that
//!    disagrees (a short or missing file) makes recovery rebuild all queues from the log start.
//!
//! Every step is idempotent: a crash during recovery leads to the same result next time.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checkpoint::{Checkpoint, CheckpointDir};
use crate::commitlog::writer::WriterState;
use crate::commitlog::{preallocation, CommitLog};
use crate::config::StoreConfig;
use crate::consume_queue::ConsumeQueueSet;
use crate::dispatch::{Derived, DispatchError};
use crate::error::{FileError, OpenError};
use crate::file_set::DirtyFile;
use crate::fsutil;
use crate::key_index::KeyIndex;
use crate::offsets::OffsetView;
use crate::quarantine::QuarantinedRange;
use crate::scan::{data_end, scan_log};

pub(crate) const FORMAT_LINE: &str = "ferromq-store format 1";

/// Bytes removed from the end of the CommitLog because they were not valid records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCut {
    /// Where the log now ends.
    pub phys_offset: u64,
    /// How many bytes were removed (the bad record and everything after it).
    pub bytes_cut: u64,
    /// Why the bytes were not a valid record.
    pub reason: String,
}

/// What recovery found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The previous run closed cleanly.
    pub clean_shutdown: bool,
    /// A truncation interrupted by a crash was completed, at this offset.
    pub completed_truncation: Option<u64>,
    /// Position of the checkpoint used (`None`: none usable, everything rebuilt from the log).
    pub checkpoint_position: Option<u64>,
    /// Checkpoints that failed verification, with the reason.
    pub checkpoints_rejected: Vec<String>,
    /// Where the scan of the log started.
    pub scanned_from: u64,
    /// Bytes verified by the scan.
    pub scanned_bytes: u64,
    /// End of the log after recovery.
    pub log_end: u64,
    /// Start of the log (oldest segment kept).
    pub log_min: u64,
    /// The bad tail that was cut, if any: bad bytes with nothing valid after them.
    pub cut: Option<LogCut>,
    /// Zero bytes after the end of the log that were space preallocated for appends (see
    /// [`crate::commitlog::preallocation`]): trimmed, not data, not reported as a cut.
    pub preallocated_trimmed: u64,
    /// Damaged ranges with valid records after them: kept in the log, quarantined, never
    /// served; the records after them stay (see [`crate::scan`]).
    pub quarantined: Vec<QuarantinedRange>,
    /// ConsumeQueues were rebuilt from the start of the log, and why.
    pub queues_rebuilt: Option<String>,
    /// Torn ConsumeQueue tail entries removed, by queue.
    pub queue_torn_tails: Vec<(String, u64)>,
    /// Records re-dispatched into derived state.
    pub records_dispatched: u64,
    /// Time taken.
    pub duration: Duration,
}

/// The pieces of a recovered store.
pub(crate) struct Recovered {
    pub log: CommitLog,
    pub derived: Derived,
    pub writer: WriterState,
    pub checkpoints: CheckpointDir,
    pub lock: File,
    pub report: RecoveryReport,
}

pub(crate) fn abort_marker(root: &Path) -> PathBuf {
    root.join("abort")
}

pub(crate) fn truncate_intent(root: &Path) -> PathBuf {
    root.join("truncate.intent")
}

/// Opens and recovers the store under `config.root_dir`.
pub(crate) fn recover(config: &StoreConfig) -> Result<Recovered, OpenError> {
    let started = Instant::now();
    config.validate()?;
    let root = &config.root_dir;
    fsutil::create_dir_all(root)?;
    let lock = lock_root(root)?;
    check_format(config)?;
    let mut report = RecoveryReport {
        clean_shutdown: !abort_marker(root).exists(),
        ..Default::default()
    };
    fsutil::write_atomic(&abort_marker(root), b"running\n")?;

    let log = CommitLog::open(
        &config.commitlog_dir(),
        config.segment_size_bytes,
        config.record_size_max(),
    )?;
    log.set_mapped_reads(config.mapped_reads);
    let checkpoints = CheckpointDir::open(&config.checkpoint_dir())?;
    report.completed_truncation = finish_truncation(root, &log, &checkpoints)?;
    report.log_min = log.min_offset();

    let checkpoint = newest_usable_checkpoint(&log, &checkpoints, &mut report)?;
    let scan_from = checkpoint.as_ref().map_or(log.min_offset(), |c| c.position);
    report.scanned_from = scan_from;
    let preallocated = preallocation::read_record(root)?;
    let (end, damaged) = scan_and_cut(&log, scan_from, preallocated, &mut report)?;
    let preallocator = preallocation::Preallocator::new(root);
    if preallocated.is_some() {
        // The space is cut; the record must not go on covering zeros a later run leaves.
        preallocator.trim(&log, end)?;
    }
    // A next segment's file prepared by an earlier run is not a segment (it was never
    // renamed to one): its reserved space goes.
    crate::commitlog::next_segment::NextSegment::discard_leftover(root)?;
    // SyncFlush: small commits gain an fsync that writes no file size. AsyncFlush: mapped
    // writes need the space; plain writes into reserved blocks only cost (windowed sends
    // 3-5% slower; docs/performance.md).
    match config.flush_disk_type {
        crate::config::FlushDiskType::SyncFlush if config.zeroed_space => {
            log.enable_preallocation(preallocation::Preallocator::zeroing(root));
        }
        crate::config::FlushDiskType::SyncFlush => log.enable_preallocation(preallocator),
        crate::config::FlushDiskType::AsyncFlush if config.mapped_writes => {
            log.enable_preallocation(preallocation::Preallocator::for_mapped_writes(
                root,
                config.populate_ahead,
            ));
        }
        crate::config::FlushDiskType::AsyncFlush => {}
    }
    log.reset_ends(end);
    if let Some(space) = log.preallocator() {
        space.prepare_active(&log, end);
    }
    report.log_end = end;

    let derived = rebuild_derived(config, &log, checkpoint, &damaged, &mut report)?;
    let writer = WriterState::new(
        end,
        derived.queues.max_offsets(),
        derived.last_store_timestamp_ms,
        derived.view.clone(),
    );
    report.duration = started.elapsed();
    log_report(&report);
    Ok(Recovered {
        log,
        derived,
        writer,
        checkpoints,
        lock,
        report,
    })
}

fn lock_root(root: &Path) -> Result<File, OpenError> {
    let path = root.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| FileError::new("open", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked(root.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(FileError::new("lock", &path, e).into()),
    }
}

fn check_format(config: &StoreConfig) -> Result<(), OpenError> {
    let path = config.root_dir.join("store.meta");
    let expected = format!(
        "{FORMAT_LINE}\nmappedFileSizeCommitLog={}\n",
        config.segment_size_bytes
    );
    match std::fs::read_to_string(&path) {
        Ok(text) if text == expected => Ok(()),
        Ok(text) if text.starts_with(FORMAT_LINE) => Err(OpenError::Config(format!(
            "mappedFileSizeCommitLog: the store at {} was created with different settings ({}); \
             configure {}",
            config.root_dir.display(),
            text.lines().nth(1).unwrap_or("unknown"),
            config.segment_size_bytes
        ))),
        Ok(_) => Err(OpenError::ForeignFile {
            path,
            reason: "not a ferromq store metadata file".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fsutil::write_atomic(&path, expected.as_bytes()).map_err(OpenError::from)
        }
        Err(e) => Err(FileError::new("read", &path, e).into()),
    }
}

/// Completes a truncation recorded in `truncate.intent`. Returns its offset.
fn finish_truncation(
    root: &Path,
    log: &CommitLog,
    checkpoints: &CheckpointDir,
) -> Result<Option<u64>, OpenError> {
    let path = truncate_intent(root);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::new("read", &path, e).into()),
    };
    let phys_offset = decode_intent(&bytes).ok_or_else(|| OpenError::ForeignFile {
        path: path.clone(),
        reason: "truncate intent is corrupt; it is written atomically, so this file is not ours"
            .into(),
    })?;
    cut_log_files(log, checkpoints, phys_offset)?;
    fsutil::remove_file(&path)?;
    tracing::warn!(phys_offset, "completed a truncation interrupted by a crash");
    Ok(Some(phys_offset))
}

pub(crate) fn encode_intent(phys_offset: u64) -> Vec<u8> {
    let mut out = phys_offset.to_be_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}

pub(crate) fn decode_intent(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != 12 || crc32fast::hash(&bytes[..8]).to_be_bytes() != bytes[8..] {
        return None;
    }
    Some(u64::from_be_bytes(bytes[..8].try_into().ok()?))
}

/// Deletes checkpoints past `phys_offset`, then cuts the log files there, durably, in that
/// order: no checkpoint may ever describe bytes the log no longer holds.
pub(crate) fn cut_log_files(
    log: &CommitLog,
    checkpoints: &CheckpointDir,
    phys_offset: u64,
) -> Result<(), FileError> {
    checkpoints.delete_above(phys_offset)?;
    for segment in log.segments().into_iter().rev() {
        if segment.start >= phys_offset && segment.start > log.min_offset() {
            // Readers holding regions of it must not send them any more.
            segment.retire();
            log.remove_segment(segment.start);
            fsutil::remove_file(segment.path())?;
            continue;
        }
        let keep = phys_offset - segment.start;
        if segment.len()? > keep {
            segment.truncate(keep)?;
        }
        break;
    }
    Ok(())
}

fn newest_usable_checkpoint(
    log: &CommitLog,
    checkpoints: &CheckpointDir,
    report: &mut RecoveryReport,
) -> Result<Option<Checkpoint>, OpenError> {
    let (checkpoint, rejected) = choose_checkpoint(log, checkpoints)?;
    report.checkpoint_position = checkpoint.as_ref().map(|c| c.position);
    report.checkpoints_rejected = rejected;
    Ok(checkpoint)
}

/// The newest checkpoint that verifies and lies inside the log, and why newer ones were
/// rejected. Reads only.
pub(crate) fn choose_checkpoint(
    log: &CommitLog,
    checkpoints: &CheckpointDir,
) -> Result<(Option<Checkpoint>, Vec<String>), OpenError> {
    let data_end = data_end(log)?;
    let mut rejected = Vec::new();
    for position in checkpoints.positions()? {
        if position < log.min_offset() || position > data_end {
            rejected.push(format!(
                "{}: position {position} is outside the log [{}, {data_end}]",
                checkpoints.path(position).display(),
                log.min_offset()
            ));
            continue;
        }
        match checkpoints.read(position) {
            Ok(checkpoint) => return Ok((Some(checkpoint), rejected)),
            Err(reason) => rejected.push(reason),
        }
    }
    Ok((None, rejected))
}

/// Verifies records from `from`; cuts a torn tail (bad bytes with nothing valid after them)
/// and returns the log end and the damaged ranges to quarantine (see [`crate::scan`]). Zeros
/// the `preallocated` record covers are trimmed too, but are not a cut.
fn scan_and_cut(
    log: &CommitLog,
    from: u64,
    preallocated: Option<preallocation::Allocation>,
    report: &mut RecoveryReport,
) -> Result<(u64, Vec<QuarantinedRange>), OpenError> {
    let scan = scan_log(log, from)?;
    if let Some(at) = scan.stopped_at {
        return Err(OpenError::TooDamaged {
            max: crate::scan::DAMAGED_RANGES_MAX,
            at,
        });
    }
    report.scanned_bytes = scan.verified_bytes;
    for range in &scan.damaged {
        tracing::error!(
            phys_offset = range.phys_offset, len = range.len, reason = %range.reason,
            "damaged CommitLog range with valid records after it: quarantined, nothing cut"
        );
    }
    report.quarantined = scan.damaged.clone();
    let pos = scan.end;
    let (bytes_after, cut) = bytes_to_cut(log, pos, scan.tail, preallocated)?;
    report.preallocated_trimmed = bytes_after - cut.as_ref().map_or(0, |c| c.bytes_cut);
    if let Some(cut) = &cut {
        tracing::warn!(phys_offset = pos, bytes_cut = cut.bytes_cut, reason = %cut.reason,
            "CommitLog torn tail cut");
    }
    report.cut = cut;
    if bytes_after > 0 {
        for segment in log.segments().into_iter().rev() {
            if segment.start + log.segment_size() <= pos {
                break;
            }
            if segment.start >= pos && segment.start > log.min_offset() {
                log.remove_segment(segment.start);
                fsutil::remove_file(segment.path())?;
            } else {
                segment.truncate(pos - segment.start)?;
            }
        }
    }
    if let Some(last) = log.segments().last() {
        last.sync()?;
    }
    Ok((pos, scan.damaged))
}

/// The bytes in the files after the log's end at `pos`, and the cut they amount to: all of
/// them but the zeros the `preallocated` record covers (`None` when nothing else is there).
pub(crate) fn bytes_to_cut(
    log: &CommitLog,
    pos: u64,
    tail: Option<crate::scan::TornTail>,
    preallocated: Option<preallocation::Allocation>,
) -> Result<(u64, Option<LogCut>), FileError> {
    let bytes_after = bytes_after(log, pos)?;
    let space = preallocation::preallocated_zeros(log, preallocated, pos)?;
    let bytes_cut = bytes_after.saturating_sub(space);
    let cut = (bytes_cut > 0).then(|| LogCut {
        phys_offset: pos,
        bytes_cut,
        reason: tail.map_or_else(|| "bytes after the end of the log".into(), |t| t.reason),
    });
    Ok((bytes_after, cut))
}

/// Bytes present in the files at or after `pos`.
pub(crate) fn bytes_after(log: &CommitLog, pos: u64) -> Result<u64, FileError> {
    let mut total = 0;
    for segment in log.segments() {
        let len = segment.len()?;
        let end = segment.start + len;
        if end > pos {
            total += end - pos.max(segment.start);
        }
    }
    Ok(total)
}

/// Builds ConsumeQueues, index and view for the recovered log `[log min, written end)`.
pub(crate) fn rebuild_derived(
    config: &StoreConfig,
    log: &CommitLog,
    checkpoint: Option<Checkpoint>,
    damaged: &[QuarantinedRange],
    report: &mut RecoveryReport,
) -> Result<Derived, OpenError> {
    let log_min = log.min_offset();
    let end = log.committed_end();
    let (mut queues, queue_reports) = ConsumeQueueSet::open(
        &config.consume_queue_dir(),
        config.consume_queue_entries_per_file,
    )?;
    let mut index = KeyIndex::open(&config.index_dir(), config.segment_size_bytes)?;
    for (queue, queue_report) in &queue_reports {
        if queue_report.torn_bytes_cut > 0 {
            report
                .queue_torn_tails
                .push((queue.clone(), queue_report.torn_bytes_cut));
        }
    }
    let (view, view_from, last_ts) = match &checkpoint {
        Some(c) => (c.view.clone(), c.position, c.last_store_timestamp_ms),
        None if log_min == 0 => (OffsetView::new(), 0, 0),
        None => {
            return Err(OpenError::OffsetsUnrecoverable {
                dir: config.checkpoint_dir(),
                log_min,
            });
        }
    };
    let mut rebuild_reason = match &checkpoint {
        // A store with an empty log has nothing to rebuild (a first start).
        None if end == log_min && queues.iter().next().is_none() => None,
        None => Some("no usable checkpoint".to_string()),
        Some(_) => queue_reports
            .iter()
            .find(|(_, r)| r.needs_rebuild)
            .map(|(queue, _)| format!("ConsumeQueue {queue} has a short or missing file")),
    };
    if let (None, Some(checkpoint)) = (&rebuild_reason, &checkpoint) {
        rebuild_reason = cut_to_checkpoint(&mut queues, &mut index, checkpoint)?;
    }
    let dispatch_from = if let Some(reason) = &rebuild_reason {
        tracing::warn!(%reason, "rebuilding every ConsumeQueue and the key index from the log");
        report.queues_rebuilt = Some(reason.clone());
        for queue in queues.all_mut() {
            queue.clear()?;
        }
        index.truncate_from_phys(0)?;
        log_min
    } else {
        view_from
    };
    for queue in queues.all_mut() {
        queue.delete_below_phys(log_min)?;
    }
    index.delete_below(log_min)?;
    let mut derived = Derived {
        queues,
        index,
        view,
        dispatched: dispatch_from,
        view_from,
        last_store_timestamp_ms: last_ts,
        offset_rejections_at_dispatch: 0,
        quarantine: Default::default(),
    };
    for range in damaged {
        derived.quarantine.add(range.clone());
    }
    match derived.dispatch_until(log, end, u64::MAX) {
        Ok(stats) => report.records_dispatched += stats.records,
        Err(DispatchError::ConsumeQueue(error)) if rebuild_reason.is_none() => {
            // A queue disagrees with the log in a way the checks above could not see: start over
            // with a full rebuild (the checkpoint's view stays valid).
            tracing::warn!(%error, "ConsumeQueue inconsistent with the log; rebuilding");
            drop(derived);
            let mut forced = checkpoint.clone();
            if let Some(c) = forced.as_mut() {
                c.queue_offsets
                    .insert((String::from("\u{0}force-rebuild"), 0), u64::MAX);
            }
            return rebuild_derived(config, log, forced, damaged, report);
        }
        Err(error) => return Err(dispatch_open_error(error)),
    }
    sync_derived(&mut derived)?;
    Ok(derived)
}

/// Cuts queues and index at the checkpoint and checks the queue table. Returns a reason to
/// rebuild everything when a queue does not match.
fn cut_to_checkpoint(
    queues: &mut ConsumeQueueSet,
    index: &mut KeyIndex,
    checkpoint: &Checkpoint,
) -> Result<Option<String>, OpenError> {
    for queue in queues.all_mut() {
        queue.truncate_from_phys(checkpoint.position)?;
    }
    index.truncate_from_phys(checkpoint.position)?;
    let mut actual: HashMap<(String, u32), u64> = HashMap::new();
    for (topic, queue_id, queue) in queues.iter() {
        if queue.max_offset() > 0 {
            actual.insert((topic.to_string(), queue_id), queue.max_offset());
        }
    }
    for ((topic, queue_id), expected) in &checkpoint.queue_offsets {
        let found = actual.remove(&(topic.clone(), *queue_id)).unwrap_or(0);
        if found != *expected {
            return Ok(Some(format!(
                "ConsumeQueue {topic}/{queue_id} ends at {found}, the checkpoint says {expected}"
            )));
        }
    }
    if let Some(((topic, queue_id), found)) = actual.into_iter().next() {
        return Ok(Some(format!(
            "ConsumeQueue {topic}/{queue_id} has {found} entries the checkpoint does not know"
        )));
    }
    Ok(None)
}

pub(crate) fn sync_derived(derived: &mut Derived) -> Result<(), OpenError> {
    for file in write_out_derived(derived)? {
        file.sync()?;
    }
    Ok(())
}

/// Writes out every buffered ConsumeQueue and index entry and returns the files to fsync, so
/// a checkpoint can fsync them after releasing the `derived` lock: entries written here cover
/// the dispatched position read under the same lock.
pub(crate) fn write_out_derived(derived: &mut Derived) -> Result<Vec<DirtyFile>, OpenError> {
    let mut dirty = Vec::new();
    for queue in derived.queues.all_mut() {
        dirty.extend(queue.write_out_for_sync()?);
    }
    dirty.extend(derived.index.write_out_for_sync()?);
    Ok(dirty)
}

pub(crate) fn dispatch_open_error(error: DispatchError) -> OpenError {
    match error {
        DispatchError::Read(e) => OpenError::Read(e),
        DispatchError::ConsumeQueue(e) => OpenError::ConsumeQueue(e),
        DispatchError::Index(e) => OpenError::File(e),
    }
}

fn log_report(report: &RecoveryReport) {
    tracing::info!(
        clean = report.clean_shutdown,
        checkpoint = ?report.checkpoint_position,
        scanned_from = report.scanned_from,
        scanned_bytes = report.scanned_bytes,
        log_end = report.log_end,
        cut = ?report.cut,
        queues_rebuilt = ?report.queues_rebuilt,
        records_dispatched = report.records_dispatched,
        duration_ms = report.duration.as_millis() as u64,
        "store recovered"
    );
    for rejected in &report.checkpoints_rejected {
        tracing::warn!(%rejected, "checkpoint skipped");
    }
}
