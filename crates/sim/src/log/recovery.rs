//! Opening a log after a crash, cutting a divergent suffix, and epoch changes.
//!
//! Recovery (production `recovery`): records are parsed and CRC-checked from offset 0; the
//! log is cut durably at the first record that does not parse (a torn or lost tail); epoch
//! entries that start past the recovered end are dropped (production `load_at_open`). Both
//! offset views are rebuilt by replay and the whole recovered log is dispatched (production:
//! the dispatcher's limit is the durable end until replication sets a bound).
//!
//! Truncation (production `truncate_diverged`): `to` must be a record boundary; the epoch
//! entries at or past `to` go first (durably), then the log is cut, then the views are
//! rebuilt; the dispatch cap drops to `to` if it was above.

use ferromq_protocol::RecordView;
use ferromq_store::epoch::{self, EpochEntry};
use ferromq_store::error::FileError;
use ferromq_store::EpochError;

use super::{LogState, SimLog};
use crate::disk::{DiskError, SimDisk};

/// What recovery cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCut {
    /// Bytes cut from the tail (torn or partial records).
    pub bytes_cut: u64,
    /// The recovered end.
    pub end: u64,
}

/// Why a truncation failed; nothing was cut.
#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    /// `to` is not a record boundary of this log.
    #[error("{to} is not a record boundary of this log (end {end})")]
    NotABoundary {
        /// The offset asked for.
        to: u64,
        /// The log end.
        end: u64,
    },
    /// The epoch file could not be rewritten.
    #[error(transparent)]
    Epoch(#[from] EpochError),
}

fn epoch_file_error(error: DiskError) -> EpochError {
    EpochError::File(FileError {
        op: "write",
        path: epoch::EPOCH_FILE_NAME.into(),
        source: std::io::Error::other(error),
    })
}

impl SimLog {
    /// Opens the log on `disk` (after a crash, or empty), recovering as production does.
    pub fn open(mut disk: SimDisk) -> (SimLog, LogCut) {
        let bytes = disk.log().to_vec();
        let mut end = 0usize;
        while end < bytes.len() {
            match ferromq_protocol::peek_total_size(&bytes[end..]) {
                Ok(size) if end + size <= bytes.len() => {}
                _ => break,
            }
            if RecordView::parse(&bytes[end..]).is_err() {
                break;
            }
            end += ferromq_protocol::peek_total_size(&bytes[end..]).unwrap_or(0);
        }
        disk.truncate_log(end as u64);
        let entries = epoch::decode(disk.epoch_file()).unwrap_or_default();
        let kept = epoch::kept_below(&entries, end as u64, false);
        if kept.len() != entries.len() {
            // Production rewrites the file too; a failed rewrite leaves stale entries that the
            // next open drops again (the in-memory copy is the kept one either way).
            let _ = disk.write_epoch_file(epoch::encode(&kept));
        }
        let log = SimLog {
            state: std::cell::RefCell::new(LogState {
                disk,
                epochs: kept,
                records: Vec::new(),
                messages: Vec::new(),
                offset_records: 0,
                last_store_ms: 0,
                bound: None,
                writer_view: Default::default(),
                dispatched: 0,
                dispatched_messages: 0,
                dispatched_view: Default::default(),
                truncations: 0,
            }),
        };
        log.reindex();
        log.dispatch();
        let cut = LogCut {
            bytes_cut: (bytes.len() - end) as u64,
            end: end as u64,
        };
        (log, cut)
    }

    /// Rebuilds the record index and both views from the live bytes (invariant 3).
    fn reindex(&self) {
        let mut state = self.state_mut();
        let bytes = state.disk.log().to_vec();
        state.records.clear();
        state.messages.clear();
        state.offset_records = 0;
        state.last_store_ms = 0;
        state.writer_view = Default::default();
        state.dispatched = 0;
        state.dispatched_messages = 0;
        state.dispatched_view = Default::default();
        let mut at = 0usize;
        while let Ok(view) = RecordView::parse(&bytes[at..]) {
            at += view.as_bytes().len();
            state.push(&view);
            if at >= bytes.len() {
                break;
            }
        }
    }

    /// Cuts the divergent suffix at `to`: epoch entries first, then the log; the views are
    /// rebuilt and re-dispatched up to the old dispatch point or `to`, whichever is lower.
    /// Returns how far dispatch had gone before the cut (a cut below it exposes a bug).
    ///
    /// # Errors
    /// [`TruncateError`]; nothing was cut.
    pub fn truncate_diverged(&self, to: u64) -> Result<u64, TruncateError> {
        let end = self.end();
        if to != end && self.record_at(to).is_none() {
            return Err(TruncateError::NotABoundary { to, end });
        }
        let kept = epoch::kept_below(&self.epoch_entries(), to, true);
        self.write_epochs(kept)?;
        let dispatched_before = self.dispatched_end();
        {
            let mut state = self.state_mut();
            state.disk.truncate_log(to);
            state.truncations += 1;
            state.bound = state.bound.map(|b| b.min(to));
        }
        self.reindex();
        self.dispatch();
        Ok(dispatched_before)
    }

    /// Begins a master term at the log end (production `begin_epoch`); the start.
    ///
    /// # Errors
    /// The epoch is not above the last one, or the epoch file could not be written.
    pub fn begin_epoch(&self, epoch_number: u64) -> Result<u64, EpochError> {
        let start = self.end();
        let new = epoch::begin(&self.epoch_entries(), epoch_number, start).map_err(|reason| {
            EpochError::Refused {
                epoch: epoch_number,
                start,
                reason,
            }
        })?;
        self.write_epochs(new)?;
        Ok(start)
    }

    /// Records a master's entry (production `record_epoch`); whether it was new.
    ///
    /// # Errors
    /// The entry breaks the rules, or the epoch file could not be written.
    pub fn record_epoch_entry(&self, entry: EpochEntry) -> Result<bool, EpochError> {
        let new =
            epoch::record(&self.epoch_entries(), entry).map_err(|reason| EpochError::Refused {
                epoch: entry.epoch,
                start: entry.start,
                reason,
            })?;
        let Some(new) = new else {
            return Ok(false);
        };
        self.write_epochs(new)?;
        Ok(true)
    }

    /// Writes the epoch file, then (only on success) the in-memory entries (invariant 4).
    fn write_epochs(&self, entries: Vec<EpochEntry>) -> Result<(), EpochError> {
        let mut state = self.state_mut();
        if state.epochs == entries {
            return Ok(());
        }
        state
            .disk
            .write_epoch_file(epoch::encode(&entries))
            .map_err(epoch_file_error)?;
        state.epochs = entries;
        Ok(())
    }
}
