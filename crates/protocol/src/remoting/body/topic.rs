//! Topic configuration bodies: `TopicConfig`, the registration wrapper with its data version,
//! and the REGISTER_BROKER (103) body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::lenient::{bool_any, i32_any, i64_any, vec_or_null};

/// One topic's configuration as brokers store and register it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    /// Topic.
    pub topic_name: String,
    /// Readable queues.
    #[serde(default = "default_queue_nums", deserialize_with = "i32_any")]
    pub read_queue_nums: i32,
    /// Writable queues.
    #[serde(default = "default_queue_nums", deserialize_with = "i32_any")]
    pub write_queue_nums: i32,
    /// `PermName` bits (6 = read and write).
    #[serde(default = "default_perm", deserialize_with = "i32_any")]
    pub perm: i32,
    /// `SINGLE_TAG` or `MULTI_TAG`.
    #[serde(default = "default_filter_type")]
    pub topic_filter_type: String,
    /// Topic sysFlag.
    #[serde(default, deserialize_with = "i32_any")]
    pub topic_sys_flag: i32,
    /// Ordered topic.
    #[serde(default, deserialize_with = "bool_any")]
    pub order: bool,
    /// Attributes.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

fn default_queue_nums() -> i32 {
    16
}
fn default_perm() -> i32 {
    6
}
fn default_filter_type() -> String {
    "SINGLE_TAG".to_owned()
}

impl TopicConfig {
    /// A topic with Java's defaults (16 queues, read-write, single tag).
    pub fn new(topic_name: impl Into<String>) -> Self {
        TopicConfig {
            topic_name: topic_name.into(),
            read_queue_nums: default_queue_nums(),
            write_queue_nums: default_queue_nums(),
            perm: default_perm(),
            topic_filter_type: default_filter_type(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// Version of a broker's metadata; the name server compares it to skip unchanged registrations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVersion {
    /// State version (controller mode).
    #[serde(default, deserialize_with = "i64_any")]
    pub state_version: i64,
    /// Time of the last change, ms.
    #[serde(default, deserialize_with = "i64_any")]
    pub timestamp: i64,
    /// Change counter.
    #[serde(default, deserialize_with = "i64_any")]
    pub counter: i64,
}

/// All topic configs of a broker with their version (GET_ALL_TOPIC_CONFIG reply).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigSerializeWrapper {
    /// Topic name to config.
    #[serde(default)]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// Version.
    #[serde(default)]
    pub data_version: DataVersion,
}

/// REGISTER_BROKER (103) body (uncompressed form).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBrokerBody {
    /// The broker's topics.
    #[serde(default)]
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
    /// Filter servers (always empty in ferromq).
    #[serde(default, deserialize_with = "vec_or_null")]
    pub filter_server_list: Vec<String>,
}
