//! The properties every run must keep, checked as the run goes (each step where cheap) and
//! after the final quiesce.
//!
//! "Committed" below means acknowledged to a client (SYNC_MASTER) or served to a consumer:
//! either way no failover may take it back.
//!
//! 1. **No acknowledged loss**: every committed record is in the log of every later master,
//!    at the same position with the same CRC (checked at each promotion and at the end).
//! 2. **R5**: no log position and no queue offset ever holds two different committed values,
//!    across truncations and failovers.
//! 3. **In-sync prefix**: the logs of the master and of every other member of the controller's
//!    in-sync set are byte-identical below the master's watermark (each step). Not above it:
//!    a master streams before its own fsync, so after a crash a slave may hold a tail the
//!    master lost, which nothing acknowledged or showed.
//! 4. **Reads below the watermark**: every record served to a consumer is durable, with the
//!    same CRC, on every running member of the controller's in-sync set.
//! 5. **Monotone progress**: the committed offset a master exposes never goes back within a
//!    reset generation, and the generation never goes back (each step).
//! 6. **One acknowledging master**: when a master acknowledges, no other broker acts as
//!    master with a valid lease at that virtual instant.
//! 7. **Liveness** (checked by the run): after every fault heals, a write is acknowledged
//!    within a bound.
//! 8. **No acknowledged commit lost**: every new master's offset state (generation, offset),
//!    what its log sets, is at least the highest commit acknowledged to the consumer so far,
//!    also one acknowledged as "unchanged" (its value held by an earlier record), which
//!    property 1 does not cover: it has no record of its own (checked at each promotion and
//!    at the end). A consumer reading on from memory would hide the loss; one restarting from
//!    the stored offset would rewind.

use std::collections::BTreeMap;

use ferromq_controller::state::GroupRecord;

use crate::log::{RecordKind, RecordMeta};
use crate::node::Broker;

/// A broken property.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// Property 1.
    #[error(
        "committed record at {offset} (crc {crc:#010x}) is not in broker {broker}'s log \
         (found {found:?}) as master of epoch {epoch}"
    )]
    CommittedRecordMissing {
        /// The master.
        broker: u64,
        /// Its epoch.
        epoch: u64,
        /// The record's position.
        offset: u64,
        /// Its CRC.
        crc: u32,
        /// What the master holds there.
        found: Option<u32>,
    },
    /// Property 2, by position.
    #[error("log position {offset} held committed record {first:#010x}, then {second:#010x}")]
    PositionReused {
        /// The position.
        offset: u64,
        /// The first CRC.
        first: u32,
        /// The second.
        second: u32,
    },
    /// Property 2, by queue offset.
    #[error("queue offset {queue_offset} held committed message {first}, then {second}")]
    QueueOffsetReused {
        /// The queue offset.
        queue_offset: u64,
        /// The first message id.
        first: u64,
        /// The second.
        second: u64,
    },
    /// Property 3.
    #[error("in-sync replicas {a} and {b} differ at byte {at}, below watermark {watermark}")]
    InSyncDiverged {
        /// The master.
        a: u64,
        /// The member.
        b: u64,
        /// The first differing byte.
        at: u64,
        /// The master's watermark.
        watermark: u64,
    },
    /// Property 4.
    #[error(
        "broker {broker} served the record at {offset} (ending {end}); in-sync member {member} \
         does not hold it durably"
    )]
    ReadPastWatermark {
        /// The serving master.
        broker: u64,
        /// The record.
        offset: u64,
        /// Its end.
        end: u64,
        /// The member lacking it.
        member: u64,
    },
    /// Property 5.
    #[error("committed (generation, offset) went from {from:?} to {to:?} without a reset")]
    OffsetRegressed {
        /// Before.
        from: (u64, u64),
        /// After.
        to: (u64, u64),
    },
    /// Property 6.
    #[error("broker {acker} acknowledged while broker {other} also held a master lease")]
    TwoMasters {
        /// The acknowledging master.
        acker: u64,
        /// The other.
        other: u64,
    },
    /// Property 8.
    #[error(
        "commit {acknowledged:?} (generation, offset) was acknowledged, but master {broker} \
         holds {held:?}"
    )]
    AcknowledgedCommitLost {
        /// The master.
        broker: u64,
        /// The highest acknowledged commit.
        acknowledged: (u64, u64),
        /// What the master's log sets (offset `None`: no commit at all).
        held: (u64, Option<u64>),
    },
    /// Property 7.
    #[error("no write acknowledged within {waited_ms} ms after all faults healed")]
    NoProgress {
        /// How long the run waited.
        waited_ms: u64,
    },
}

/// The checker's memory of the run.
#[derive(Debug, Default, Clone)]
pub struct Checker {
    committed: BTreeMap<u64, u32>,
    queue: BTreeMap<u64, u64>,
    progress: Option<(u64, u64)>,
    /// Records acknowledged.
    pub acknowledged: u64,
    /// Records served to the consumer.
    pub served: u64,
}

impl Checker {
    fn remember(&mut self, record: &RecordMeta) -> Result<(), Violation> {
        let first = *self.committed.entry(record.offset).or_insert(record.crc);
        if first != record.crc {
            return Err(Violation::PositionReused {
                offset: record.offset,
                first,
                second: record.crc,
            });
        }
        if let RecordKind::Message {
            queue_offset,
            msg_id,
        } = record.kind
        {
            let first = *self.queue.entry(queue_offset).or_insert(msg_id);
            if first != msg_id {
                return Err(Violation::QueueOffsetReused {
                    queue_offset,
                    first,
                    second: msg_id,
                });
            }
        }
        Ok(())
    }

    /// `acker` acknowledged `record` at `now_ms` (properties 2 and 6).
    ///
    /// # Errors
    /// The broken property.
    pub fn acked(
        &mut self,
        now_ms: u64,
        acker: u64,
        record: &RecordMeta,
        brokers: &[&Broker],
    ) -> Result<(), Violation> {
        self.acknowledged += 1;
        if let Some(other) = brokers
            .iter()
            .find(|b| b.id != acker && b.acknowledging(now_ms))
        {
            return Err(Violation::TwoMasters {
                acker,
                other: other.id,
            });
        }
        self.remember(record)
    }

    /// `server` served `records` (properties 2 and 4); `members` are the running members of
    /// the controller's in-sync set.
    ///
    /// # Errors
    /// The broken property.
    pub fn served(
        &mut self,
        server: &Broker,
        records: &[RecordMeta],
        limit: u64,
        members: &[&Broker],
    ) -> Result<(), Violation> {
        for record in records {
            self.served += 1;
            // The pair of the dispatcher's own bound: nothing past the serving master's limit.
            if record.end() > limit {
                return Err(Violation::ReadPastWatermark {
                    broker: server.id,
                    offset: record.offset,
                    end: record.end(),
                    member: server.id,
                });
            }
            let lacking = members.iter().find(|member| {
                member.log.durable_end() < record.end()
                    || member.log.record_at(record.offset).map(|r| r.crc) != Some(record.crc)
            });
            let Some(member) = lacking else {
                self.remember(record)?;
                continue;
            };
            return Err(Violation::ReadPastWatermark {
                broker: server.id,
                offset: record.offset,
                end: record.end(),
                member: member.id,
            });
        }
        Ok(())
    }

    /// `master` took the master role at `epoch` (property 1).
    ///
    /// # Errors
    /// The first committed record its log lacks.
    pub fn promoted(&self, master: &Broker, epoch: u64) -> Result<(), Violation> {
        for (offset, crc) in &self.committed {
            let found = master.log.record_at(*offset).map(|r| r.crc);
            if found != Some(*crc) {
                return Err(Violation::CommittedRecordMissing {
                    broker: master.id,
                    epoch,
                    offset: *offset,
                    crc: *crc,
                    found,
                });
            }
        }
        Ok(())
    }

    /// `master` (just promoted, or master at the end) holds `acknowledged`, the consumer's
    /// highest acknowledged commit (property 8).
    ///
    /// # Errors
    /// [`Violation::AcknowledgedCommitLost`].
    pub fn commit_held(
        &self,
        master: &Broker,
        acknowledged: Option<(u64, u64)>,
    ) -> Result<(), Violation> {
        let Some(acknowledged) = acknowledged else {
            return Ok(());
        };
        let (offset, generation) = master.log.writer_offset();
        let holds = offset.is_some_and(|offset| (generation, offset) >= acknowledged);
        if holds {
            return Ok(());
        }
        Err(Violation::AcknowledgedCommitLost {
            broker: master.id,
            acknowledged,
            held: (generation, offset),
        })
    }

    /// The per-step checks (properties 3 and 5).
    ///
    /// # Errors
    /// The broken property.
    pub fn step(
        &mut self,
        now_ms: u64,
        brokers: &[&Broker],
        group: &GroupRecord,
    ) -> Result<(), Violation> {
        for broker in brokers.iter().filter(|b| b.acknowledging(now_ms)) {
            self.check_progress(broker)?;
        }
        let Some(master) = brokers
            .iter()
            .find(|b| Some(b.id) == group.master_id && b.role == crate::node::Role::Master)
        else {
            return Ok(());
        };
        let watermark = master.in_sync.watermark();
        for member in brokers
            .iter()
            .filter(|b| b.id != master.id && group.sync_state_set.contains(&b.id))
        {
            if let Some(at) = master.log.first_difference(&member.log, watermark) {
                return Err(Violation::InSyncDiverged {
                    a: master.id,
                    b: member.id,
                    at,
                    watermark,
                });
            }
        }
        Ok(())
    }

    fn check_progress(&mut self, master: &Broker) -> Result<(), Violation> {
        let (Some(offset), generation) = master.log.dispatched_offset() else {
            return Ok(());
        };
        let now = (generation, offset);
        if let Some(before) = self.progress {
            if now < before {
                return Err(Violation::OffsetRegressed {
                    from: before,
                    to: now,
                });
            }
        }
        self.progress = Some(now);
        Ok(())
    }
}
