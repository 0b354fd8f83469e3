//! Headers of END_TRANSACTION (37, producer → broker) and CHECK_TRANSACTION_STATE (39, broker →
//! producer, one-way), and the message sysFlag transaction bits they carry.
//!
//! `commitOrRollback` takes the sysFlag transaction values: [`TRANSACTION_NOT_TYPE`] (0, the
//! producer does not know yet), [`TRANSACTION_COMMIT_TYPE`] (8) and
//! [`TRANSACTION_ROLLBACK_TYPE`] (12). A send whose sysFlag carries
//! [`TRANSACTION_PREPARED_TYPE`] (4) — or whose `TRAN_MSG` property is `true` — is a half
//! message.

/// Mask of the transaction bits of a message sysFlag.
pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
/// sysFlag / `commitOrRollback`: not a transaction, or (END) state unknown.
pub const TRANSACTION_NOT_TYPE: i32 = 0;
/// sysFlag: a half (prepared) message.
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
/// sysFlag / `commitOrRollback`: commit.
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
/// sysFlag / `commitOrRollback`: rollback.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;

/// Property marking a half message (`"true"`).
pub const PROPERTY_TRANSACTION_PREPARED: &str = "TRAN_MSG";
/// Property naming the producer group of a half message.
pub const PROPERTY_PRODUCER_GROUP: &str = "PGROUP";
/// Property: how many times the broker checked a half message back.
pub const PROPERTY_TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// Property: seconds after the send before the first check-back (overrides the broker's
/// `transactionTimeOut` for this message).
pub const PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";

header! {
    /// END_TRANSACTION (37) request header, Java's `EndTransactionRequestHeader`.
    pub struct EndTransactionRequestHeader {
        /// Producer group that sent the half message.
        producer_group: String = "producerGroup",
        /// Queue offset of the half message (the send reply's `queueOffset`).
        tran_state_table_offset: i64 = "tranStateTableOffset",
        /// CommitLog offset of the half message (from the send reply's `msgId`).
        commit_log_offset: i64 = "commitLogOffset",
        /// 8 commit, 12 rollback, 0 unknown.
        commit_or_rollback: i32 = "commitOrRollback",
        /// True when this END answers a CHECK_TRANSACTION_STATE.
        from_transaction_check: Option<bool> = "fromTransactionCheck",
        /// Client message id (`UNIQ_KEY`).
        msg_id: Option<String> = "msgId",
        /// Transaction id.
        transaction_id: Option<String> = "transactionId",
    }
}

header! {
    /// CHECK_TRANSACTION_STATE (39) request header, Java's
    /// `CheckTransactionStateRequestHeader`; the body is the half message, encoded as a stored
    /// record with its real topic and queue.
    pub struct CheckTransactionStateRequestHeader {
        /// Queue offset of the half message.
        tran_state_table_offset: i64 = "tranStateTableOffset",
        /// CommitLog offset of the half message.
        commit_log_offset: i64 = "commitLogOffset",
        /// Client message id (`UNIQ_KEY`).
        msg_id: Option<String> = "msgId",
        /// Transaction id.
        transaction_id: Option<String> = "transactionId",
        /// Broker message id of the half message.
        offset_msg_id: Option<String> = "offsetMsgId",
        /// Real topic (RocketMQ 5 adds it).
        topic: Option<String> = "topic",
        /// Broker name (RocketMQ 5 adds it).
        broker_name: Option<String> = "brokerName",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::ext::{CommandHeader, ExtFields};

    #[test]
    fn end_transaction_reads_numbers_in_every_client_form() {
        let mut ext = ExtFields::new();
        for (key, value) in [
            ("producerGroup", "PG"),
            ("tranStateTableOffset", "7"),
            ("commitLogOffset", "4096"),
            ("commitOrRollback", "8"),
            ("fromTransactionCheck", "true"),
        ] {
            ext.insert(key, value);
        }
        let header = EndTransactionRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.producer_group, "PG");
        assert_eq!(header.tran_state_table_offset, 7);
        assert_eq!(header.commit_log_offset, 4096);
        assert_eq!(header.commit_or_rollback, TRANSACTION_COMMIT_TYPE);
        assert_eq!(header.from_transaction_check, Some(true));
        let back = EndTransactionRequestHeader::from_ext(&header.to_ext()).unwrap();
        assert_eq!(back, header);
        ext.remove("commitLogOffset");
        assert!(EndTransactionRequestHeader::from_ext(&ext).is_err());
    }
}
