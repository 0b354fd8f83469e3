//! GET_BROKER_HA_STATUS (907) reply body: a broker's replication state (RocketMQ's
//! `HARuntimeInfo`), as `mqadmin haStatus` prints it.
//!
//! Field names are RocketMQ's; ferromq's additions (`watermark`, `minInSyncReplicas`,
//! `brokerRole`, a connection's `brokerId`, `lagTimeMs`, `bytesStreamed`, a client's
//! `watermark` and `brokerId`) are optional, so a RocketMQ broker's reply (which lacks them)
//! parses too. Unknown fields are ignored, missing ones default, numbers may be strings and
//! null collections read as empty. Optional additions are omitted from the output when `None`.

use serde::{Deserialize, Deserializer, Serialize};

use super::lenient::{bool_any, i32_any, i64_any, string_any, vec_or_null};

/// A broker's HA state: for a master its slaves' connections, for a slave its client's view
/// of the master.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaRuntimeInfo {
    /// Whether the broker answers as master.
    #[serde(default, deserialize_with = "bool_any")]
    pub master: bool,
    /// The master's CommitLog max offset (for a slave: what it knows of it, or 0).
    #[serde(default, deserialize_with = "i64_any")]
    pub master_commit_log_max_offset: i64,
    /// Slaves currently in sync.
    #[serde(default, deserialize_with = "i32_any")]
    pub in_sync_slave_nums: i32,
    /// ferromq: the offset every in-sync replica acknowledged (what a consumer may read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    /// ferromq: replicas (master included) that must acknowledge a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_in_sync_replicas: Option<i32>,
    /// ferromq: `ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_role: Option<String>,
    /// ferromq: the broker's last master epoch (0: a log written before epochs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_epoch: Option<i64>,
    /// ferromq: how many entries its epoch file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_entries: Option<i32>,
    /// One entry per connected slave (a master's).
    #[serde(default, deserialize_with = "vec_or_null")]
    pub ha_connection_info: Vec<HaConnectionRuntimeInfo>,
    /// The slave side (a slave's; zeros on a master).
    #[serde(default, deserialize_with = "null_default")]
    pub ha_client_runtime_info: HaClientRuntimeInfo,
}

/// A master's view of one connected slave (`HAConnectionRuntimeInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaConnectionRuntimeInfo {
    /// The slave's address (of its HA connection).
    #[serde(default, deserialize_with = "string_any")]
    pub addr: String,
    /// ferromq: the slave's broker id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<i64>,
    /// CommitLog offset the slave acknowledged.
    #[serde(default, deserialize_with = "i64_any")]
    pub slave_ack_offset: i64,
    /// Bytes the slave is behind the master's max offset.
    #[serde(default, deserialize_with = "i64_any")]
    pub diff: i64,
    /// ferromq: how long the slave has been behind, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_time_ms: Option<i64>,
    /// Whether the slave counts as in sync.
    #[serde(default, deserialize_with = "bool_any")]
    pub in_sync: bool,
    /// Replication throughput over the last second.
    #[serde(default, deserialize_with = "i64_any")]
    pub transferred_byte_in_second: i64,
    /// Offset replication to this slave started from.
    #[serde(default, deserialize_with = "i64_any")]
    pub transfer_from_where: i64,
    /// ferromq: bytes streamed to the slave over this connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_streamed: Option<i64>,
}

/// A slave's view of its master (`HAClientRuntimeInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaClientRuntimeInfo {
    /// The master's HA address (empty when there is none).
    #[serde(default, deserialize_with = "string_any")]
    pub master_addr: String,
    /// ferromq: the slave's broker id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<i64>,
    /// Replication throughput over the last second.
    #[serde(default, deserialize_with = "i64_any")]
    pub transferred_byte_in_second: i64,
    /// The slave's CommitLog max offset.
    #[serde(default, deserialize_with = "i64_any")]
    pub max_offset: i64,
    /// ferromq: the watermark the master last told this slave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    /// Last time data was read from the master (ms since the epoch).
    #[serde(default, deserialize_with = "i64_any")]
    pub last_read_timestamp: i64,
    /// Last time an acknowledgement was written to the master (ms since the epoch).
    #[serde(default, deserialize_with = "i64_any")]
    pub last_write_timestamp: i64,
    /// The master's flushed offset, as last reported.
    #[serde(default, deserialize_with = "i64_any")]
    pub master_flush_offset: i64,
    /// Whether the HA client is running (RocketMQ's field name; fastjson may write
    /// `activated`).
    #[serde(
        default,
        rename = "isActivated",
        alias = "activated",
        deserialize_with = "bool_any"
    )]
    pub is_activated: bool,
    /// ferromq: why the master refuses this slave, while it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// Reads a value, null as its default.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::{decode_json, encode_json};

    const FERROMQ_MASTER: &str = r#"{"master":true,"masterCommitLogMaxOffset":12345,"inSyncSlaveNums":2,
        "watermark":12000,"minInSyncReplicas":1,"brokerRole":"SYNC_MASTER",
        "haConnectionInfo":[{"addr":"127.0.0.1:40000","brokerId":1,"slaveAckOffset":12000,"diff":345,
          "lagTimeMs":12,"inSync":true,"transferredByteInSecond":1000,"transferFromWhere":0,
          "bytesStreamed":99999}],
        "haClientRuntimeInfo":{"masterAddr":"127.0.0.1:10912","transferredByteInSecond":0,"maxOffset":0,
          "lastReadTimestamp":0,"lastWriteTimestamp":0,"masterFlushOffset":0,"isActivated":false}}"#;

    #[test]
    fn ferromq_master_reply_parses_with_its_additions() {
        let info: HaRuntimeInfo = decode_json(FERROMQ_MASTER.as_bytes()).unwrap();
        assert!(info.master);
        assert_eq!(info.master_commit_log_max_offset, 12345);
        assert_eq!(info.in_sync_slave_nums, 2);
        assert_eq!(info.watermark, Some(12000));
        assert_eq!(info.min_in_sync_replicas, Some(1));
        assert_eq!(info.broker_role.as_deref(), Some("SYNC_MASTER"));
        let c = &info.ha_connection_info[0];
        assert_eq!(c.addr, "127.0.0.1:40000");
        assert_eq!(c.broker_id, Some(1));
        assert_eq!(
            (c.slave_ack_offset, c.diff, c.lag_time_ms),
            (12000, 345, Some(12))
        );
        assert!(c.in_sync);
        assert_eq!(c.bytes_streamed, Some(99999));
        assert_eq!(info.ha_client_runtime_info.master_addr, "127.0.0.1:10912");
        // Round trip.
        let again: HaRuntimeInfo = decode_json(&encode_json(&info)).unwrap();
        assert_eq!(again, info);
    }

    #[test]
    fn rocketmq_replies_parse_without_the_additions() {
        // A RocketMQ slave: no ferromq fields, no isActivated (it has no getter), an extra
        // unknown field, numbers as strings.
        let text = r#"{"master":false,"masterCommitLogMaxOffset":0,"inSyncSlaveNums":0,
            "haConnectionInfo":[],"someFutureField":{"x":1},
            "haClientRuntimeInfo":{"masterAddr":"10.0.0.1:10912","transferredByteInSecond":"5",
              "maxOffset":777,"lastReadTimestamp":1,"lastWriteTimestamp":2,"masterFlushOffset":700}}"#;
        let info: HaRuntimeInfo = decode_json(text.as_bytes()).unwrap();
        assert!(!info.master);
        assert!(info.ha_connection_info.is_empty());
        assert_eq!(info.watermark, None);
        let client = &info.ha_client_runtime_info;
        assert_eq!(client.max_offset, 777);
        assert_eq!(client.transferred_byte_in_second, 5);
        assert_eq!(client.watermark, None);
        assert!(!client.is_activated);
        // Minimal and null forms.
        let info: HaRuntimeInfo =
            decode_json(br#"{"haConnectionInfo":null,"haClientRuntimeInfo":null}"#).unwrap();
        assert_eq!(info, HaRuntimeInfo::default());
        let text = String::from_utf8(encode_json(&info)).unwrap();
        assert!(
            !text.contains("watermark") && text.contains("isActivated"),
            "{text}"
        );
    }
}
