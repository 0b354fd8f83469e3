//! Headers of the offset requests (reference §5.5): query, update, min/max, search by time,
//! earliest store time, consume stats, reset and clone.

use super::enums::BoundaryType;

header! {
    /// QUERY_CONSUMER_OFFSET (14) request.
    pub struct QueryConsumerOffsetRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// Answer 0 instead of QUERY_NOT_FOUND when the queue still starts at 0.
        set_zero_if_not_found: Option<bool> = "setZeroIfNotFound",
    }
}

header! {
    /// QUERY_CONSUMER_OFFSET (14) reply.
    pub struct QueryConsumerOffsetResponseHeader {
        /// Stored offset.
        offset: i64 = "offset",
    }
}

header! {
    /// UPDATE_CONSUMER_OFFSET (15) request; the reply has no header.
    pub struct UpdateConsumerOffsetRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// Next offset to consume (ali-ons sends -1 for "none").
        commit_offset: i64 = "commitOffset",
    }
}

header! {
    /// GET_MAX_OFFSET (30) request.
    pub struct GetMaxOffsetRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// Committed (replicated) maximum only; absent means true.
        committed: Option<bool> = "committed",
    }
}

header! {
    /// GET_MAX_OFFSET (30) reply.
    pub struct GetMaxOffsetResponseHeader {
        /// Next queue offset to be written (exclusive maximum).
        offset: i64 = "offset",
    }
}

header! {
    /// GET_MIN_OFFSET (31) request.
    pub struct GetMinOffsetRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
    }
}

header! {
    /// GET_MIN_OFFSET (31) reply.
    pub struct GetMinOffsetResponseHeader {
        /// Smallest queue offset still stored.
        offset: i64 = "offset",
    }
}

header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP (29) request.
    pub struct SearchOffsetRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
        /// Store time to look for, ms.
        timestamp: i64 = "timestamp",
        /// Which match to return; absent means LOWER.
        boundary_type: Option<BoundaryType> = "boundaryType",
    }
}

header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP (29) reply.
    pub struct SearchOffsetResponseHeader {
        /// Found queue offset.
        offset: i64 = "offset",
    }
}

header! {
    /// GET_EARLIEST_MSG_STORETIME (32) request.
    pub struct GetEarliestMsgStoretimeRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Queue.
        queue_id: i32 = "queueId",
    }
}

header! {
    /// GET_EARLIEST_MSG_STORETIME (32) reply.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        /// Store time of the oldest stored message, ms.
        timestamp: i64 = "timestamp",
    }
}

header! {
    /// GET_CONSUME_STATS (208) request.
    pub struct GetConsumeStatsRequestHeader {
        /// Consumer group.
        consumer_group: String = "consumerGroup",
        /// One topic; absent means all topics of the group.
        topic: Option<String> = "topic",
        /// Several topics, `;`-separated.
        topic_list: Option<String> = "topicList",
    }
}

header! {
    /// INVOKE_BROKER_TO_RESET_OFFSET (222) request, and the header of the one-way
    /// RESET_CONSUMER_CLIENT_OFFSET (220) push (Java's `ResetOffsetRequestHeader`).
    pub struct ResetOffsetRequestHeader {
        /// Consumer group.
        group: String = "group",
        /// Topic.
        topic: String = "topic",
        /// Queue; absent or -1 means all queues.
        queue_id: Option<i32> = "queueId",
        /// Explicit offset; absent or -1 means "use the timestamp".
        offset: Option<i64> = "offset",
        /// Target store time, ms; negative means the maximum offset.
        timestamp: i64 = "timestamp",
        /// Move offsets forward as well as backward (legacy path).
        is_force: bool = "isForce",
    }
}

header! {
    /// CLONE_GROUP_OFFSET (314) request.
    pub struct CloneGroupOffsetRequestHeader {
        /// Group to copy from.
        src_group: String = "srcGroup",
        /// Group to copy to (its map is replaced).
        dest_group: String = "destGroup",
        /// One topic; absent or blank means all topics of `src_group`.
        topic: Option<String> = "topic",
        /// Copy even when the source group is offline.
        offline: Option<bool> = "offline",
    }
}

header! {
    /// QUERY_CORRECTION_OFFSET (308) request.
    pub struct QueryCorrectionOffsetHeader {
        /// Groups to compare against, comma-separated.
        filter_groups: Option<String> = "filterGroups",
        /// Group whose offsets are corrected.
        compare_group: String = "compareGroup",
        /// Topic.
        topic: String = "topic",
    }
}
