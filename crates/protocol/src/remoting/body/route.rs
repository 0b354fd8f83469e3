//! Route data (reply to GET_ROUTEINFO_BY_TOPIC) and cluster info (GET_BROKER_CLUSTER_INFO).
//!
//! Invariants on output: `brokerAddrs` keys are quoted broker ids (`{"0":"ip:port"}`), so the
//! body is always standard JSON; `enableActingMaster` is always written (mxsm's client rejects
//! a route without it); optional fields are left out when absent rather than written as null.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::lenient::{bool_any, i32_any, vec_or_null};

/// Broker id of a master.
pub const MASTER_ID: i64 = 0;

/// `PermName` bits of a queue or topic.
pub mod perm {
    /// Priority.
    pub const PRIORITY: i32 = 8;
    /// Readable.
    pub const READ: i32 = 4;
    /// Writable.
    pub const WRITE: i32 = 2;
    /// Inherit.
    pub const INHERIT: i32 = 1;
}

/// Route of one topic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRouteData {
    /// Order topic configuration (`brokerName:queueNums;...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_topic_conf: Option<String>,
    /// Queues per broker group.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub queue_datas: Vec<QueueData>,
    /// Broker groups serving the topic.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub broker_datas: Vec<BrokerData>,
    /// Filter servers by broker address (always empty in ferromq).
    #[serde(default)]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// Static-topic queue mappings, kept opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_by_broker: Option<serde_json::Value>,
}

/// The queues of a topic on one broker group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    /// Broker group.
    pub broker_name: String,
    /// Readable queues.
    #[serde(deserialize_with = "i32_any")]
    pub read_queue_nums: i32,
    /// Writable queues.
    #[serde(deserialize_with = "i32_any")]
    pub write_queue_nums: i32,
    /// `PermName` bits ([`perm`]).
    #[serde(deserialize_with = "i32_any")]
    pub perm: i32,
    /// Topic sysFlag.
    #[serde(default, deserialize_with = "i32_any")]
    pub topic_sys_flag: i32,
}

/// One broker group: its name and the address of each member by broker id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    /// Cluster.
    pub cluster: String,
    /// Broker group.
    pub broker_name: String,
    /// Broker id (0 = master) to `ip:port`; written with quoted keys.
    #[serde(default)]
    pub broker_addrs: BTreeMap<i64, String>,
    /// Acting-master mode; always written.
    #[serde(default, deserialize_with = "bool_any")]
    pub enable_acting_master: bool,
    /// Zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
}

impl BrokerData {
    /// Address of the master (broker id 0), if it is registered.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&MASTER_ID).map(|v| v.as_str())
    }
}

/// Brokers and clusters known to a name server.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    /// Broker group name to its data.
    #[serde(default)]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// Cluster name to its broker group names.
    #[serde(default)]
    pub cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
}
