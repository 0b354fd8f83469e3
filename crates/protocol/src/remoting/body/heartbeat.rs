//! HEART_BEAT (34) body: the producer and consumer groups a client belongs to.
//!
//! Enums arrive as Java names (Java, ali-ons) or ordinals (C++ core), `subVersion` as a number
//! or a string, `codeSet` items as numbers or (rocketmq-client-go) strings; all are accepted.
//! Output uses names.

use serde::{Deserialize, Serialize};

use super::lenient::{bool_any, i64_any, vec_i32_any, vec_or_null, wire_enum};

wire_enum! {
    /// How a consumer gets messages (`ConsumeType`).
    pub enum ConsumeType {
        /// Pull consumer.
        ConsumeActively = "CONSUME_ACTIVELY" | "PULL",
        /// Push consumer.
        ConsumePassively = "CONSUME_PASSIVELY" | "PUSH",
        /// Pop consumer.
        ConsumePop = "CONSUME_POP" | "POP",
    }
}

wire_enum! {
    /// Whether each group member gets every message or a share (`MessageModel`).
    pub enum MessageModel {
        /// Every member gets every message.
        Broadcasting = "BROADCASTING",
        /// Members share the queues.
        Clustering = "CLUSTERING",
    }
}

wire_enum! {
    /// Where a consumer without a stored offset starts (`ConsumeFromWhere`), in Java's
    /// declaration order.
    pub enum ConsumeFromWhere {
        /// Start at the end.
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// Deprecated variant.
        ConsumeFromLastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// Deprecated variant.
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// Deprecated variant.
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        /// Start at the beginning.
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        /// Start at a timestamp.
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
}

/// A client's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    /// Client id, `<ip>@<instance>[@unit]`.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// Producer groups of the client.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub producer_data_set: Vec<ProducerData>,
    /// Consumer groups of the client.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// Heartbeat v2 fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_fingerprint: Option<i64>,
    /// Heartbeat v2: subscriptions omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_sub: Option<bool>,
}

/// A producer group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerData {
    /// Group name.
    pub group_name: String,
}

/// A consumer group and its subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerData {
    /// Group name.
    pub group_name: String,
    /// Pull, push or pop.
    pub consume_type: ConsumeType,
    /// Broadcasting or clustering.
    pub message_model: MessageModel,
    /// Start position without a stored offset.
    pub consume_from_where: ConsumeFromWhere,
    /// Subscriptions.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub subscription_data_set: Vec<SubscriptionData>,
    /// Unit mode.
    #[serde(default, deserialize_with = "bool_any")]
    pub unit_mode: bool,
}

/// One topic subscription.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionData {
    /// Class filter mode (obsolete).
    #[serde(default, deserialize_with = "bool_any")]
    pub class_filter_mode: bool,
    /// Topic.
    pub topic: String,
    /// Expression (`*`, `TagA || TagB`, SQL92).
    #[serde(default)]
    pub sub_string: String,
    /// Tags of a TAG expression.
    #[serde(default, deserialize_with = "vec_or_null")]
    pub tags_set: Vec<String>,
    /// Java hash codes of `tags_set` (numbers, or numeric strings from rocketmq-client-go).
    #[serde(default, deserialize_with = "vec_i32_any")]
    pub code_set: Vec<i32>,
    /// Subscription version.
    #[serde(default, deserialize_with = "i64_any")]
    pub sub_version: i64,
    /// `TAG` or `SQL92`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_type: Option<String>,
}
