//! Small bodies: message queues, consumer lists, queue locks, key-value tables, topic lists.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::lenient::{bool_any, i32_any, vec_or_null};

/// One queue of a topic on one broker group (`MessageQueue`). Orders by topic, broker, queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    /// Topic.
    pub topic: String,
    /// Broker group.
    pub broker_name: String,
    /// Queue id.
    #[serde(deserialize_with = "i32_any")]
    pub queue_id: i32,
}

/// GET_CONSUMER_LIST_BY_GROUP (38) reply body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerListBody {
    /// Client ids of the group's live consumers; must include the caller.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub consumer_id_list: Vec<String>,
}

/// LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) request body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockBatchRequestBody {
    /// Consumer group.
    pub consumer_group: String,
    /// Client asking.
    pub client_id: String,
    /// Do not forward to other brokers.
    #[serde(default, deserialize_with = "bool_any")]
    pub only_this_broker: bool,
    /// Queues to lock or unlock.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub mq_set: Vec<MessageQueue>,
}

/// UNLOCK_BATCH_MQ (42) request body: same shape as the lock request.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// LOCK_BATCH_MQ (41) reply body: the queues now locked by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockBatchResponseBody {
    /// Locked queues.
    #[serde(rename = "lockOKMQSet", default, deserialize_with = "vec_or_null")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

/// A string table (`KVTable`), e.g. GET_BROKER_RUNTIME_INFO's reply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvTable {
    /// Entries.
    #[serde(default)]
    pub table: BTreeMap<String, String>,
}

/// A list of topic names (`TopicList`), e.g. GET_ALL_TOPIC_LIST_FROM_NAMESERVER's reply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicList {
    /// Topic names.
    #[serde(default)]
    pub topic_list: BTreeSet<String>,
    /// Broker the list came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_addr: Option<String>,
}
