//! GET_CONSUMER_RUNNING_INFO (307) reply body: a consumer's own account of its state
//! (`ConsumerRunningInfo`), which the broker relays from the client to `mqadmin consumerStatus`.
//!
//! `mqTable` is keyed by `MessageQueue`, so the body is written with
//! [`super::mq_map::encode_fastjson`] (object keys, as Java's fastjson reads them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::heartbeat::SubscriptionData;
use super::lenient::{bool_any, i64_any};
use super::mq_map::MqMap;

/// `properties` key: the name server addresses (`;`-separated).
pub const PROP_NAMESERVER_ADDR: &str = "PROP_NAMESERVER_ADDR";
/// `properties` key: consumer threads.
pub const PROP_THREADPOOL_CORE_SIZE: &str = "PROP_THREADPOOL_CORE_SIZE";
/// `properties` key: `true` for an orderly listener.
pub const PROP_CONSUME_ORDERLY: &str = "PROP_CONSUMEORDERLY";
/// `properties` key: `CONSUME_PASSIVELY` (push) or `CONSUME_ACTIVELY` (pull); mqadmin
/// parses it and fails without it.
pub const PROP_CONSUME_TYPE: &str = "PROP_CONSUME_TYPE";
/// `properties` key: the client's version text.
pub const PROP_CLIENT_VERSION: &str = "PROP_CLIENT_VERSION";
/// `properties` key: when the consumer started, ms since the epoch; mqadmin parses it as a
/// number and fails without it.
pub const PROP_CONSUMER_START_TIMESTAMP: &str = "PROP_CONSUMER_START_TIMESTAMP";

/// The running state of one consumer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerRunningInfo {
    /// `PROP_*` keys and the consumer's settings, as text.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// What the consumer subscribes to.
    #[serde(default)]
    pub subscription_set: Vec<SubscriptionData>,
    /// Per assigned queue: the consumer's processing state.
    #[serde(default)]
    pub mq_table: MqMap<ProcessQueueInfo>,
    /// Per topic: pull and consume rates.
    #[serde(default)]
    pub status_table: BTreeMap<String, ConsumeStatus>,
    /// A thread dump, when asked for and the client can give one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jstack: Option<String>,
}

/// One assigned queue as the consumer sees it (`ProcessQueueInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessQueueInfo {
    /// The offset the consumer would commit now.
    #[serde(default, deserialize_with = "i64_any")]
    pub commit_offset: i64,
    /// Smallest offset pulled and not yet consumed (0 when none).
    #[serde(default, deserialize_with = "i64_any")]
    pub cached_msg_min_offset: i64,
    /// Largest offset pulled and not yet consumed (0 when none).
    #[serde(default, deserialize_with = "i64_any")]
    pub cached_msg_max_offset: i64,
    /// Messages pulled and not yet consumed.
    #[serde(default, deserialize_with = "i64_any")]
    pub cached_msg_count: i64,
    /// Their body bytes, in MiB.
    #[serde(default, deserialize_with = "i64_any")]
    pub cached_msg_size_in_mi_b: i64,
    /// Orderly: transactional min offset (unused by ferromq, 0).
    #[serde(default, deserialize_with = "i64_any")]
    pub transaction_msg_min_offset: i64,
    /// Orderly: transactional max offset (unused by ferromq, 0).
    #[serde(default, deserialize_with = "i64_any")]
    pub transaction_msg_max_offset: i64,
    /// Orderly: transactional count (unused by ferromq, 0).
    #[serde(default, deserialize_with = "i64_any")]
    pub transaction_msg_count: i64,
    /// Orderly: the broker lock is held.
    #[serde(default, deserialize_with = "bool_any")]
    pub locked: bool,
    /// Orderly: failed unlock attempts.
    #[serde(default, deserialize_with = "i64_any")]
    pub try_unlock_times: i64,
    /// Orderly: last lock, ms since the epoch.
    #[serde(default, deserialize_with = "i64_any")]
    pub last_lock_timestamp: i64,
    /// The queue left this consumer (Java's spelling).
    #[serde(default, deserialize_with = "bool_any")]
    pub droped: bool,
    /// Last pull, ms since the epoch.
    #[serde(default, deserialize_with = "i64_any")]
    pub last_pull_timestamp: i64,
    /// Last consumed batch, ms since the epoch.
    #[serde(default, deserialize_with = "i64_any")]
    pub last_consume_timestamp: i64,
}

/// Rates of one topic (`ConsumeStatus`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeStatus {
    /// Mean pull round trip, ms.
    #[serde(default, rename = "pullRT")]
    pub pull_rt: f64,
    /// Pulled messages per second.
    #[serde(default, rename = "pullTPS")]
    pub pull_tps: f64,
    /// Mean listener time, ms.
    #[serde(default, rename = "consumeRT")]
    pub consume_rt: f64,
    /// Successfully consumed messages per second.
    #[serde(default, rename = "consumeOKTPS")]
    pub consume_ok_tps: f64,
    /// Failed messages per second.
    #[serde(default, rename = "consumeFailedTPS")]
    pub consume_failed_tps: f64,
    /// Failed messages in the last hour.
    #[serde(default, deserialize_with = "i64_any")]
    pub consume_failed_msgs: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::decode_json;
    use crate::remoting::body::misc::MessageQueue;
    use crate::remoting::body::mq_map::encode_fastjson;

    #[test]
    fn encodes_queue_keys_as_objects_and_reads_back() {
        let mut info = ConsumerRunningInfo::default();
        info.properties
            .insert(PROP_CONSUME_TYPE.into(), "CONSUME_PASSIVELY".into());
        info.mq_table.0.insert(
            MessageQueue {
                topic: "T".into(),
                broker_name: "b".into(),
                queue_id: 2,
            },
            ProcessQueueInfo {
                commit_offset: 7,
                cached_msg_count: 3,
                ..ProcessQueueInfo::default()
            },
        );
        info.status_table.insert(
            "T".into(),
            ConsumeStatus {
                pull_tps: 1.5,
                ..ConsumeStatus::default()
            },
        );
        let bytes = encode_fastjson(&info);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains(r#""mqTable":{{"brokerName":"b","queueId":2,"topic":"T"}:{"#),
            "{text}"
        );
        assert!(text.contains(r#""pullTPS":1.5"#), "{text}");
        assert!(text.contains(r#""droped":false"#), "{text}");
        let back: ConsumerRunningInfo = decode_json(&bytes).unwrap();
        assert_eq!(back, info);
    }
}
