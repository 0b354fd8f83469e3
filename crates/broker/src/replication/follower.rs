//! What a slave does with each frame from its master: the slave side of the stream as a state
//! machine over the [`ReplicaLog`] seam (the store, or a simulated log), so the simulation
//! drives this very code.
//!
//! Invariants:
//! 1. Data is appended only at the slave's log end, in order; a gap, an overlap or a bad
//!    record refuses the frame (the connection is dropped and the slave says Hello again from
//!    its real end).
//! 2. The slave's dispatch cap follows the master's watermark and never goes back while the
//!    slave follows one master.
//! 3. The slave acknowledges an end only once the log says it is durable under the slave's
//!    own flush policy (the caller awaits the ticket before sending the Ack).
//! 4. Before bytes at or past a master epoch entry's start are appended, the entry is
//!    recorded durably (so it is durable before those bytes are acknowledged), and the bytes
//!    carry the stream's master epoch: a log that has begun a newer epoch refuses them.

use ferromq_protocol::ha::Data;
use ferromq_store::{AckTicket, EpochEntry, EpochError, MessageStore, ReplicaAppendError};

/// The master term a stream belongs to: its epoch and epoch entries (from its Welcome).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterTerm {
    /// The master's epoch.
    pub epoch: u64,
    /// The master's epoch entries, oldest first.
    pub epochs: Vec<EpochEntry>,
}

/// Why a Data frame was not appended.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The log refused the bytes.
    #[error(transparent)]
    Append(#[from] ReplicaAppendError),
    /// A master epoch entry could not be recorded first.
    #[error("cannot record the master's epoch entry: {0}")]
    Epoch(#[from] EpochError),
}

/// The slave's log as the follower uses it.
pub trait ReplicaLog {
    /// Appends the bytes of the master of `master_epoch` at `offset` (see
    /// `MessageStore::append_replicated`).
    fn append(
        &self,
        offset: u64,
        bytes: &[u8],
        master_epoch: u64,
    ) -> Result<AckTicket, ReplicaAppendError>;
    /// The newest epoch this log has recorded or begun.
    fn last_epoch(&self) -> u64;
    /// Records a master epoch entry durably (see `MessageStore::record_epoch`).
    fn record_epoch(&self, entry: EpochEntry) -> Result<bool, EpochError>;
    /// The dispatch cap now.
    fn bound(&self) -> Option<u64>;
    /// Moves the dispatch cap.
    fn set_bound(&self, bound: u64);
}

impl ReplicaLog for MessageStore {
    fn append(
        &self,
        offset: u64,
        bytes: &[u8],
        master_epoch: u64,
    ) -> Result<AckTicket, ReplicaAppendError> {
        self.append_replicated(offset, bytes, master_epoch)
    }

    fn last_epoch(&self) -> u64 {
        MessageStore::last_epoch(self)
    }

    fn record_epoch(&self, entry: EpochEntry) -> Result<bool, EpochError> {
        MessageStore::record_epoch(self, entry)
    }

    fn bound(&self) -> Option<u64> {
        self.replication_bound()
    }

    fn set_bound(&self, bound: u64) {
        self.set_replication_bound(Some(bound));
    }
}

/// The slave's view of the master, as of the last frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Follower {
    /// The master's watermark the slave follows (its dispatch cap).
    pub watermark: u64,
    /// The master's log end.
    pub master_end: u64,
}

impl Follower {
    /// Appends a Data frame of the master `term` and follows its watermark; the ticket to
    /// acknowledge.
    ///
    /// # Errors
    /// The log refused the bytes (invariant 1), or an epoch entry could not be recorded
    /// first (invariant 4); nothing of the frame was appended.
    pub fn on_data(
        &mut self,
        log: &dyn ReplicaLog,
        data: &Data,
        term: &MasterTerm,
    ) -> Result<AckTicket, DataError> {
        let end = data.offset + data.bytes.len() as u64;
        for entry in &term.epochs {
            if entry.epoch > log.last_epoch() && entry.start <= end {
                log.record_epoch(*entry)?;
            }
        }
        let ticket = log.append(data.offset, &data.bytes, term.epoch)?;
        self.on_heartbeat(log, data.watermark, data.master_end);
        Ok(ticket)
    }

    /// Follows a heartbeat's watermark (invariant 2).
    pub fn on_heartbeat(&mut self, log: &dyn ReplicaLog, watermark: u64, master_end: u64) {
        let bound = log.bound().map_or(watermark, |b| b.max(watermark));
        log.set_bound(bound);
        self.watermark = bound;
        self.master_end = master_end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    #[derive(Default)]
    struct MemoryLog {
        bytes: RefCell<Vec<u8>>,
        bound: Cell<Option<u64>>,
        epochs: RefCell<Vec<EpochEntry>>,
    }

    impl ReplicaLog for MemoryLog {
        fn append(
            &self,
            offset: u64,
            bytes: &[u8],
            master_epoch: u64,
        ) -> Result<AckTicket, ReplicaAppendError> {
            if self.last_epoch() > master_epoch {
                return Err(ReplicaAppendError::Fenced {
                    stream_epoch: master_epoch,
                    store_epoch: self.last_epoch(),
                });
            }
            let mut log = self.bytes.borrow_mut();
            if offset != log.len() as u64 {
                return Err(ReplicaAppendError::NotAtEnd {
                    expected: log.len() as u64,
                    got: offset,
                });
            }
            log.extend_from_slice(bytes);
            Ok(AckTicket {
                end: log.len() as u64,
                epoch: 0,
            })
        }

        fn bound(&self) -> Option<u64> {
            self.bound.get()
        }

        fn last_epoch(&self) -> u64 {
            self.epochs.borrow().last().map_or(0, |e| e.epoch)
        }

        fn record_epoch(&self, entry: EpochEntry) -> Result<bool, EpochError> {
            let mut epochs = self.epochs.borrow_mut();
            if epochs.contains(&entry) {
                return Ok(false);
            }
            epochs.push(entry);
            Ok(true)
        }

        fn set_bound(&self, bound: u64) {
            self.bound.set(Some(bound));
        }
    }

    fn data(offset: u64, len: usize, watermark: u64) -> Data {
        Data {
            offset,
            watermark,
            master_end: offset + len as u64,
            bytes: vec![7u8; len].into(),
        }
    }

    fn term() -> MasterTerm {
        MasterTerm::default()
    }

    #[test]
    fn data_lands_in_order_and_the_cap_never_goes_back() {
        let log = MemoryLog::default();
        let mut follower = Follower::default();
        assert_eq!(
            follower
                .on_data(&log, &data(0, 10, 4), &term())
                .unwrap()
                .end,
            10
        );
        assert_eq!(log.bound(), Some(4));
        assert!(matches!(
            follower.on_data(&log, &data(5, 10, 9), &term()),
            Err(DataError::Append(ReplicaAppendError::NotAtEnd {
                expected: 10,
                got: 5
            }))
        ));
        follower.on_heartbeat(&log, 2, 10);
        assert_eq!(
            log.bound(),
            Some(4),
            "an older watermark never lowers the cap"
        );
        assert_eq!(
            follower
                .on_data(&log, &data(10, 5, 12), &term())
                .unwrap()
                .end,
            15
        );
        assert_eq!((follower.watermark, follower.master_end), (12, 15));
    }

    #[test]
    fn master_epochs_are_recorded_as_the_log_reaches_them_and_old_masters_are_fenced() {
        let log = MemoryLog::default();
        let mut follower = Follower::default();
        let term = MasterTerm {
            epoch: 3,
            epochs: vec![
                EpochEntry { epoch: 1, start: 0 },
                EpochEntry {
                    epoch: 3,
                    start: 12,
                },
            ],
        };
        follower.on_data(&log, &data(0, 10, 0), &term).unwrap();
        assert_eq!(
            *log.epochs.borrow(),
            vec![EpochEntry { epoch: 1, start: 0 }]
        );
        // The frame that reaches 12 records epoch 3 before its bytes land.
        follower.on_data(&log, &data(10, 5, 0), &term).unwrap();
        assert_eq!(log.last_epoch(), 3);
        // A stream of an older master (epoch 2) is fenced now.
        let old = MasterTerm {
            epoch: 2,
            epochs: vec![],
        };
        assert!(matches!(
            follower.on_data(&log, &data(15, 5, 0), &old),
            Err(DataError::Append(ReplicaAppendError::Fenced { .. }))
        ));
        assert_eq!(log.bytes.borrow().len(), 15);
    }
}
