//! Op records: what the broker decided or did about a half message, as messages of
//! `RMQ_SYS_TRANS_OP_HALF_TOPIC` queue 0 (RocketMQ's op queue), so decisions and the checker's
//! progress live in the one log (invariant I1): they are fsynced, replicated, truncated and
//! recovered with the messages.
//!
//! Layout (stable, documented in `docs/transactions.md`): body = the half's queue offset in
//! decimal (as RocketMQ's op records); properties `TAGS=d`, `FERROMQ_TX_OP` (`commit`,
//! `rollback`, `discard`, `check`, `unknown`), `FERROMQ_TX_HALF_PHYS` (the half's CommitLog
//! offset) and, for `check`, `TRANSACTION_CHECK_TIMES` (the check's number, from 1).
//!
//! Invariants:
//! 1. Encoding and decoding are inverse ([`OpRecord::properties`], [`OpRecord::parse`]); a
//!    record that does not parse is skipped by the rebuild with a log line, never trusted.

use ferromq_protocol::remoting::headers::transaction::PROPERTY_TRANSACTION_CHECK_TIMES;
use ferromq_protocol::{Properties, RecordView};

use super::table::Decision;

/// Property naming the operation.
pub const PROPERTY_OP: &str = "FERROMQ_TX_OP";
/// Property naming the half's CommitLog offset.
pub const PROPERTY_HALF_PHYS: &str = "FERROMQ_TX_HALF_PHYS";
/// The tag of every op record (RocketMQ's `REMOVETAG`).
const OP_TAG: &str = "d";

/// What an op record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The half was decided.
    Decided(Decision),
    /// The `n`-th check-back was sent (or attempted).
    Check(u32),
    /// The producer answered "unknown".
    Unknown,
}

/// One op record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRecord {
    /// The half's queue offset.
    pub half_queue_offset: u64,
    /// The half's CommitLog offset.
    pub half_phys_offset: u64,
    /// What happened.
    pub op: Op,
}

impl OpRecord {
    /// The body: the half's queue offset in decimal.
    pub fn body(&self) -> Vec<u8> {
        self.half_queue_offset.to_string().into_bytes()
    }

    /// The encoded properties.
    pub fn properties(&self) -> Vec<u8> {
        let phys = self.half_phys_offset.to_string();
        let (name, checks) = match self.op {
            Op::Decided(decision) => (decision.as_str(), None),
            Op::Check(n) => ("check", Some(n.to_string())),
            Op::Unknown => ("unknown", None),
        };
        let mut pairs = vec![
            ("TAGS", OP_TAG),
            (PROPERTY_OP, name),
            (PROPERTY_HALF_PHYS, phys.as_str()),
        ];
        if let Some(checks) = &checks {
            pairs.push((PROPERTY_TRANSACTION_CHECK_TIMES, checks.as_str()));
        }
        Properties::encode(pairs)
    }

    /// Reads an op record; `None` when it is not one ferromq wrote.
    pub fn parse(view: &RecordView<'_>) -> Option<OpRecord> {
        let half_queue_offset = std::str::from_utf8(view.body).ok()?.parse().ok()?;
        let half_phys_offset = view.properties.get_str(PROPERTY_HALF_PHYS)?.parse().ok()?;
        let op = match view.properties.get_str(PROPERTY_OP)? {
            "commit" => Op::Decided(Decision::Commit),
            "rollback" => Op::Decided(Decision::Rollback),
            "discard" => Op::Decided(Decision::Discard),
            "unknown" => Op::Unknown,
            "check" => Op::Check(
                view.properties
                    .get_str(PROPERTY_TRANSACTION_CHECK_TIMES)?
                    .parse()
                    .ok()?,
            ),
            _ => return None,
        };
        Some(OpRecord {
            half_queue_offset,
            half_phys_offset,
            op,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::DraftRecord;

    #[test]
    fn every_op_parses_back_to_itself() {
        let addr = "127.0.0.1:1".parse().unwrap();
        for op in [
            Op::Decided(Decision::Commit),
            Op::Decided(Decision::Rollback),
            Op::Decided(Decision::Discard),
            Op::Check(15),
            Op::Unknown,
        ] {
            let record = OpRecord {
                half_queue_offset: 42,
                half_phys_offset: 1 << 33,
                op,
            };
            let (body, properties) = (record.body(), record.properties());
            let draft = DraftRecord {
                topic: "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                queue_id: 0,
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: 1,
                born_host: addr,
                store_host: addr,
                reconsume_times: 0,
                prepared_tx_offset: 0,
                body: &body,
                properties: &properties,
            };
            let mut encoded = draft.encode().unwrap();
            encoded.finalize(0, 0, 1);
            let view = RecordView::parse(encoded.as_bytes()).unwrap();
            assert_eq!(OpRecord::parse(&view), Some(record));
            assert_eq!(view.tags(), Some("d"));
        }
    }
}
