//! The production seams over the simulated log: [`ReplicaLog`] (what the follower appends
//! through) and [`LogPrefix`] (what the master's handshake judges with).
//!
//! `append` makes production's `append_replicated` checks: the epoch fence, the offset, and
//! per record the size, the CRC (`RecordView::parse`), the stored physical offset, dense
//! queue offsets and store times that never go back — all verified before the first byte is
//! appended (all or nothing). `check_prefix` is production's own rule
//! (`ferromq_store::judge_prefix`) over this log's bytes.

use std::collections::BTreeMap;

use ferromq_broker::replication::follower::ReplicaLog;
use ferromq_broker::replication::handshake::LogPrefix;
use ferromq_protocol::RecordView;
use ferromq_store::epoch::EpochEntry;
use ferromq_store::offsets::OFFSET_TOPIC;
use ferromq_store::{AckTicket, EpochError, LogSample, PrefixCheck, ReplicaAppendError};

use super::SimLog;

impl SimLog {
    /// Checks every record of a replicated batch (production `verify_replicated`).
    fn verify(&self, offset: u64, bytes: &[u8]) -> Result<(), ReplicaAppendError> {
        let state = self.state();
        let mut next: BTreeMap<(Vec<u8>, u32), u64> = BTreeMap::new();
        let mut last_ms = state.last_store_ms;
        let (mut at, mut pos) = (0usize, offset);
        while at < bytes.len() {
            let bad = |reason: String| ReplicaAppendError::BadRecord { at: pos, reason };
            let rest = &bytes[at..];
            let size = ferromq_protocol::peek_total_size(rest)
                .map_err(|_| ReplicaAppendError::Partial { at: pos })?;
            if rest.len() < size {
                return Err(ReplicaAppendError::Partial { at: pos });
            }
            let view = RecordView::parse(&rest[..size]).map_err(|e| bad(e.to_string()))?;
            if view.phys_offset != pos {
                return Err(bad(format!("it says it belongs at {}", view.phys_offset)));
            }
            let key = (view.topic.to_vec(), view.queue_id);
            let expected = next.get(&key).copied().unwrap_or_else(|| {
                if view.topic == OFFSET_TOPIC.as_bytes() {
                    state.offset_records
                } else {
                    state.messages.len() as u64
                }
            });
            if view.queue_offset != expected {
                return Err(bad(format!(
                    "queue offset {}, but the queue's next is {expected}",
                    view.queue_offset
                )));
            }
            if view.store_timestamp_ms < last_ms {
                return Err(bad(format!(
                    "store time {} goes back",
                    view.store_timestamp_ms
                )));
            }
            next.insert(key, expected + 1);
            last_ms = view.store_timestamp_ms;
            at += size;
            pos += size as u64;
        }
        Ok(())
    }
}

impl ReplicaLog for SimLog {
    fn append(
        &self,
        offset: u64,
        bytes: &[u8],
        master_epoch: u64,
    ) -> Result<AckTicket, ReplicaAppendError> {
        let store_epoch = self.newest_epoch();
        if store_epoch > master_epoch {
            return Err(ReplicaAppendError::Fenced {
                stream_epoch: master_epoch,
                store_epoch,
            });
        }
        let end = self.end();
        if end != offset {
            return Err(ReplicaAppendError::NotAtEnd {
                expected: end,
                got: offset,
            });
        }
        self.verify(offset, bytes)?;
        let mut at = 0usize;
        while at < bytes.len() {
            let Ok(view) = RecordView::parse(&bytes[at..]) else {
                break;
            };
            at += view.as_bytes().len();
            let mut state = self.state_mut();
            state.push(&view);
            state.disk.append_log(view.as_bytes());
        }
        Ok(AckTicket {
            end: self.end(),
            epoch: self.truncations(),
        })
    }

    fn last_epoch(&self) -> u64 {
        self.newest_epoch()
    }

    fn record_epoch(&self, entry: EpochEntry) -> Result<bool, EpochError> {
        self.record_epoch_entry(entry)
    }

    fn bound(&self) -> Option<u64> {
        self.replication_bound()
    }

    fn set_bound(&self, bound: u64) {
        self.set_replication_bound(Some(bound));
    }
}

impl LogPrefix for SimLog {
    fn check_prefix(&self, log_end: u64, samples: &[LogSample]) -> Result<PrefixCheck, String> {
        let bytes = self.bytes();
        let end = bytes.len() as u64;
        ferromq_store::judge_prefix(end, 0, log_end, samples, |offset, size| {
            let range = offset as usize..offset as usize + size;
            Ok::<_, String>(bytes.get(range))
        })
    }

    fn epochs(&self) -> Vec<EpochEntry> {
        self.epoch_entries()
    }

    fn end(&self) -> u64 {
        SimLog::end(self)
    }
}
