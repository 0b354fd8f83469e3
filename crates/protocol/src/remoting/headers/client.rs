//! Headers of client session requests: unregister, consumer list, send-back, rebalance
//! notification, heartbeat reply, message lookup.

header! {
    /// UNREGISTER_CLIENT (35) request; clients send one per group.
    pub struct UnregisterClientRequestHeader {
        /// Client id (`<ip>@<instance>`).
        client_id: String = "clientID",
        /// Producer group being left.
        producer_group: Option<String> = "producerGroup",
        /// Consumer group being left.
        consumer_group: Option<String> = "consumerGroup",
    }
}

header! {
    /// GET_CONSUMER_LIST_BY_GROUP (38) request; the reply body is `ConsumerListBody`.
    pub struct GetConsumerListByGroupRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
    }
}

header! {
    /// NOTIFY_CONSUMER_IDS_CHANGED (40), broker to client, one-way.
    pub struct NotifyConsumerIdsChangedRequestHeader {
        /// Group whose membership changed.
        consumer_group: String = "consumerGroup",
    }
}

header! {
    /// CONSUMER_SEND_MSG_BACK (36) request: a message whose consumption failed.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// CommitLog offset of the failed message.
        offset: i64 = "offset",
        /// Consumer group.
        group: String = "group",
        /// Delay level; 0 means `3 + reconsumeTimes`, negative means straight to the DLQ.
        delay_level: i32 = "delayLevel",
        /// Original message id.
        origin_msg_id: Option<String> = "originMsgId",
        /// Original topic.
        origin_topic: Option<String> = "originTopic",
        /// Unit mode.
        unit_mode: Option<bool> = "unitMode",
        /// Deliveries before the DLQ (read from clients of version >= V3_4_9).
        max_reconsume_times: Option<i32> = "maxReconsumeTimes",
    }
}

header! {
    /// HEART_BEAT (34) reply ext fields added by Java 5.x brokers.
    pub struct HeartbeatResponseHeader {
        /// Whether fingerprint (v2) heartbeats are supported; ferromq says false.
        is_support_heart_beat_v2: Option<bool> = "IS_SUPPORT_HEART_BEAT_V2",
        /// Whether the subscription changed.
        is_sub_change: Option<bool> = "IS_SUB_CHANGE",
    }
}

header! {
    /// VIEW_MESSAGE_BY_ID (33) request.
    pub struct ViewMessageRequestHeader {
        /// CommitLog offset of the message (from the offset message id).
        offset: i64 = "offset",
        /// Topic, sent by 5.x clients.
        topic: Option<String> = "topic",
    }
}

/// Ext field that marks a QUERY_MESSAGE (12) as a unique-key lookup (Java's
/// `MixAll.UNIQUE_MSG_QUERY_FLAG`); its value is `"true"`.
pub const UNIQUE_KEY_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

header! {
    /// QUERY_MESSAGE (12) request: messages of a topic by `KEYS` word, or by `UNIQ_KEY` when
    /// the ext field [`UNIQUE_KEY_QUERY_FLAG`] is `"true"`. The reply body is the matching
    /// stored records, concatenated.
    pub struct QueryMessageRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// The key (a `KEYS` word or a `UNIQ_KEY`).
        key: String = "key",
        /// Most messages to return.
        max_num: i32 = "maxNum",
        /// Earliest store time, ms.
        begin_timestamp: i64 = "beginTimestamp",
        /// Latest store time, ms.
        end_timestamp: i64 = "endTimestamp",
    }
}

header! {
    /// QUERY_MESSAGE (12) reply.
    pub struct QueryMessageResponseHeader {
        /// CommitLog offset the index covers up to.
        index_last_update_phyoffset: i64 = "indexLastUpdatePhyoffset",
        /// Store time of the last indexed message, ms.
        index_last_update_timestamp: i64 = "indexLastUpdateTimestamp",
    }
}

header! {
    /// GET_CONSUMER_RUNNING_INFO (307): tools to broker, and the broker forwards it unchanged
    /// to the client's connection; the client's reply body is `ConsumerRunningInfo`.
    pub struct GetConsumerRunningInfoRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
        /// The client asked (`<ip>@<instance>`).
        client_id: String = "clientId",
        /// Whether a thread dump is asked for.
        jstack_enable: Option<bool> = "jstackEnable",
    }
}
