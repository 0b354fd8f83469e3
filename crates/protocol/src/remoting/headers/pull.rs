//! Headers of PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361).

header! {
    /// PULL_MESSAGE request header, Java's `PullMessageRequestHeader`.
    pub struct PullMessageRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// First queue offset wanted.
        queue_offset: i64 = "queueOffset",
        /// Most messages to return.
        max_msg_nums: i32 = "maxMsgNums",
        /// Pull sysFlag: 0x1 commit offset, 0x2 suspend, 0x4 subscription, 0x8 class filter,
        /// 0x10 lite pull.
        sys_flag: i32 = "sysFlag",
        /// Piggy-backed commit, valid when sysFlag bit 0 is set.
        commit_offset: i64 = "commitOffset",
        /// Longest the broker may hold the request when nothing is found.
        suspend_timeout_millis: i64 = "suspendTimeoutMillis",
        /// Filter expression (`*`, `TagA || TagB` or SQL92).
        subscription: Option<String> = "subscription",
        /// Subscription version.
        sub_version: i64 = "subVersion",
        /// `TAG` or `SQL92`.
        expression_type: Option<String> = "expressionType",
        /// Most bytes to return.
        max_msg_bytes: Option<i32> = "maxMsgBytes",
        /// Request source (proxy).
        request_source: Option<i32> = "requestSource",
        /// Proxied client id (Java's spelling).
        proxy_forward_client_id: Option<String> = "proxyFrowardClientId",
    }
}

header! {
    /// PULL_MESSAGE reply header, Java's `PullMessageResponseHeader`. The four required fields
    /// must be present on every reply or the Java client fails unboxing them.
    pub struct PullMessageResponseHeader {
        /// Broker id the client should pull from next.
        suggest_which_broker_id: i64 = "suggestWhichBrokerId",
        /// Offset to pull next.
        next_begin_offset: i64 = "nextBeginOffset",
        /// Queue minimum offset.
        min_offset: i64 = "minOffset",
        /// Queue maximum offset (exclusive).
        max_offset: i64 = "maxOffset",
        /// Offset delta (static topics).
        offset_delta: Option<i64> = "offsetDelta",
        /// Topic sysFlag.
        topic_sys_flag: Option<i32> = "topicSysFlag",
        /// Group sysFlag.
        group_sys_flag: Option<i32> = "groupSysFlag",
        /// Forbidden type.
        forbidden_type: Option<i32> = "forbiddenType",
    }
}
