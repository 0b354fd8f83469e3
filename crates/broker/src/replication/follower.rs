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

use ferromq_protocol::ha::Data;
use ferromq_store::{AckTicket, MessageStore, ReplicaAppendError};

/// The slave's log as the follower uses it.
pub trait ReplicaLog {
    /// Appends the master's bytes at `offset` (see `MessageStore::append_replicated`).
    fn append(&self, offset: u64, bytes: &[u8]) -> Result<AckTicket, ReplicaAppendError>;
    /// The dispatch cap now.
    fn bound(&self) -> Option<u64>;
    /// Moves the dispatch cap.
    fn set_bound(&self, bound: u64);
}

impl ReplicaLog for MessageStore {
    fn append(&self, offset: u64, bytes: &[u8]) -> Result<AckTicket, ReplicaAppendError> {
        self.append_replicated(offset, bytes)
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
    /// Appends a Data frame and follows its watermark; the ticket to acknowledge.
    ///
    /// # Errors
    /// The log refused the bytes (invariant 1).
    pub fn on_data(
        &mut self,
        log: &dyn ReplicaLog,
        data: &Data,
    ) -> Result<AckTicket, ReplicaAppendError> {
        let ticket = log.append(data.offset, &data.bytes)?;
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
    }

    impl ReplicaLog for MemoryLog {
        fn append(&self, offset: u64, bytes: &[u8]) -> Result<AckTicket, ReplicaAppendError> {
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

    #[test]
    fn data_lands_in_order_and_the_cap_never_goes_back() {
        let log = MemoryLog::default();
        let mut follower = Follower::default();
        assert_eq!(follower.on_data(&log, &data(0, 10, 4)).unwrap().end, 10);
        assert_eq!(log.bound(), Some(4));
        assert!(matches!(
            follower.on_data(&log, &data(5, 10, 9)),
            Err(ReplicaAppendError::NotAtEnd {
                expected: 10,
                got: 5
            })
        ));
        follower.on_heartbeat(&log, 2, 10);
        assert_eq!(
            log.bound(),
            Some(4),
            "an older watermark never lowers the cap"
        );
        assert_eq!(follower.on_data(&log, &data(10, 5, 12)).unwrap().end, 15);
        assert_eq!((follower.watermark, follower.master_end), (12, 15));
    }
}
