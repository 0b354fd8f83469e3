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
