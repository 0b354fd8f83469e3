//! Headers of broker admin requests (mqadmin): topics, subscription groups, connections,
//! consume queue inspection.

use super::enums::TopicFilterType;

header! {
    /// UPDATE_AND_CREATE_TOPIC (17) request.
    pub struct CreateTopicRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Template topic.
        default_topic: String = "defaultTopic",
        /// Readable queues.
        read_queue_nums: i32 = "readQueueNums",
        /// Writable queues.
        write_queue_nums: i32 = "writeQueueNums",
        /// `PermName` bits: 8 priority, 4 read, 2 write, 1 inherit.
        perm: i32 = "perm",
        /// Tag filter type.
        topic_filter_type: TopicFilterType = "topicFilterType",
        /// Topic sysFlag.
        topic_sys_flag: Option<i32> = "topicSysFlag",
        /// Ordered topic; absent means false.
        order: Option<bool> = "order",
        /// Attribute changes, `+k=v,-k`.
        attributes: Option<String> = "attributes",
        /// Apply even when it changes the message type.
        force: Option<bool> = "force",
    }
}

impl CreateTopicRequestHeader {
    /// The header Java's `MQClientAPIImpl.createTopic` (mqadmin `updateTopic`) sends for a
    /// plain topic: template `TBW102`, `SINGLE_TAG`, and `topicSysFlag` 0 and `order` false
    /// always present. Some RocketMQ-compatible brokers refuse a creation that omits them
    /// (mxsm/rocketmq-rust answers 29 "Request header is invalid" without `order`).
    pub fn as_java_sends(
        topic: &str,
        read_queue_nums: i32,
        write_queue_nums: i32,
        perm: i32,
    ) -> Self {
        CreateTopicRequestHeader {
            topic: topic.to_string(),
            default_topic: "TBW102".into(),
            read_queue_nums,
            write_queue_nums,
            perm,
            topic_filter_type: TopicFilterType::SingleTag,
            topic_sys_flag: Some(0),
            order: Some(false),
            attributes: None,
            force: None,
        }
    }
}

header! {
    /// DELETE_TOPIC_IN_BROKER (215) request.
    pub struct DeleteTopicRequestHeader {
        /// Topic.
        topic: String = "topic",
    }
}

header! {
    /// GET_TOPIC_CONFIG (351) request.
    pub struct GetTopicConfigRequestHeader {
        /// Topic.
        topic: String = "topic",
    }
}

header! {
    /// GET_TOPIC_STATS_INFO (202) request; the reply body is a `TopicStatsTable`.
    pub struct GetTopicStatsInfoRequestHeader {
        /// Topic.
        topic: String = "topic",
    }
}

header! {
    /// GET_SUBSCRIPTIONGROUP_CONFIG (352) request.
    pub struct GetSubscriptionGroupConfigRequestHeader {
        /// Group.
        group: String = "group",
    }
}

header! {
    /// DELETE_SUBSCRIPTIONGROUP (207) request.
    pub struct DeleteSubscriptionGroupRequestHeader {
        /// Group.
        group_name: String = "groupName",
        /// Also delete the group's offsets.
        clean_offset: Option<bool> = "cleanOffset",
    }
}

header! {
    /// GET_CONSUMER_CONNECTION_LIST (203) request.
    pub struct GetConsumerConnectionListRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
    }
}

header! {
    /// QUERY_TOPIC_CONSUME_BY_WHO (300) request.
    pub struct QueryTopicConsumeByWhoRequestHeader {
        /// The topic whose consumer groups are asked for.
        topic: String = "topic",
    }
}

header! {
    /// GET_PRODUCER_CONNECTION_LIST (204) request.
    pub struct GetProducerConnectionListRequestHeader {
        /// Producer group.
        producer_group: String = "producerGroup",
    }
}

header! {
    /// QUERY_CONSUME_QUEUE (321) request.
    pub struct QueryConsumeQueueRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// First queue index.
        index: i64 = "index",
        /// Entries to return.
        count: i32 = "count",
        /// Group whose filter to evaluate.
        consumer_group: Option<String> = "consumerGroup",
    }
}
