//! Headers of SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).
//!
//! V2 is V1 with one-letter keys (`a`..`n`); the broker converts it to V1 and handles one form.
//! The conversions are lossless both ways.
//!
//! Their text fields are [`ExtText`]s, not `String`s: short texts (groups, topics, broker
//! names, regions) stay inline, so decoding a send's header and encoding its reply allocate
//! only for long values (the properties, the message ids).

use crate::remoting::ext::ExtText;

header! {
    /// SEND_MESSAGE (10) request header, Java's `SendMessageRequestHeader`.
    pub struct SendMessageRequestHeader {
        /// Producer group.
        producer_group: ExtText = "producerGroup",
        /// Target topic.
        topic: ExtText = "topic",
        /// Template topic for auto-creation (`TBW102`).
        default_topic: ExtText = "defaultTopic",
        /// Queue count of an auto-created topic.
        default_topic_queue_nums: i32 = "defaultTopicQueueNums",
        /// Target queue.
        queue_id: i32 = "queueId",
        /// Message sysFlag (compression, transaction, batch bits).
        sys_flag: i32 = "sysFlag",
        /// Producer clock at send, ms.
        born_timestamp: i64 = "bornTimestamp",
        /// User flag.
        flag: i32 = "flag",
        /// Properties in the `name 0x01 value 0x02` encoding.
        properties: Option<ExtText> = "properties",
        /// Delivery attempts so far (set by retries).
        reconsume_times: Option<i32> = "reconsumeTimes",
        /// Unit mode.
        unit_mode: Option<bool> = "unitMode",
        /// Body is a batch (320).
        batch: Option<bool> = "batch",
        /// Maximum deliveries before the dead-letter queue.
        max_reconsume_times: Option<i32> = "maxReconsumeTimes",
        /// Broker name (inherited RPC field `bname`).
        broker_name: Option<ExtText> = "bname",
    }
}

header! {
    /// SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) request header, Java's
    /// `SendMessageRequestHeaderV2`: the V1 fields under one-letter keys.
    pub struct SendMessageRequestHeaderV2 {
        /// `producerGroup`.
        a: ExtText = "a",
        /// `topic`.
        b: ExtText = "b",
        /// `defaultTopic`.
        c: ExtText = "c",
        /// `defaultTopicQueueNums`.
        d: i32 = "d",
        /// `queueId`.
        e: i32 = "e",
        /// `sysFlag`.
        f: i32 = "f",
        /// `bornTimestamp`.
        g: i64 = "g",
        /// `flag`.
        h: i32 = "h",
        /// `properties`.
        i: Option<ExtText> = "i",
        /// `reconsumeTimes`.
        j: Option<i32> = "j",
        /// `unitMode`.
        k: Option<bool> = "k",
        /// `maxReconsumeTimes` (Java calls it consumeRetryTimes).
        l: Option<i32> = "l",
        /// `batch`.
        m: Option<bool> = "m",
        /// `brokerName`.
        n: Option<ExtText> = "n",
    }
}

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v2: SendMessageRequestHeaderV2) -> Self {
        SendMessageRequestHeader {
            producer_group: v2.a,
            topic: v2.b,
            default_topic: v2.c,
            default_topic_queue_nums: v2.d,
            queue_id: v2.e,
            sys_flag: v2.f,
            born_timestamp: v2.g,
            flag: v2.h,
            properties: v2.i,
            reconsume_times: v2.j,
            unit_mode: v2.k,
            max_reconsume_times: v2.l,
            batch: v2.m,
            broker_name: v2.n,
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    fn from(v1: SendMessageRequestHeader) -> Self {
        SendMessageRequestHeaderV2 {
            a: v1.producer_group,
            b: v1.topic,
            c: v1.default_topic,
            d: v1.default_topic_queue_nums,
            e: v1.queue_id,
            f: v1.sys_flag,
            g: v1.born_timestamp,
            h: v1.flag,
            i: v1.properties,
            j: v1.reconsume_times,
            k: v1.unit_mode,
            l: v1.max_reconsume_times,
            m: v1.batch,
            n: v1.broker_name,
        }
    }
}

header! {
    /// Reply header of a send, Java's `SendMessageResponseHeader`, plus the two ext keys the
    /// Java client reads from every send reply. A SUCCESS reply must carry a non-null ext map.
    pub struct SendMessageResponseHeader {
        // Declared in key (byte) order, as every send carries it: writing it appends each
        // field, and reading it finds each field right after the previous one.
        /// Broker region (`MSG_REGION`).
        msg_region: Option<ExtText> = "MSG_REGION",
        /// Trace switch (`TRACE_ON`, "true"/"false").
        trace_on: Option<ExtText> = "TRACE_ON",
        /// Unique ids of a batch.
        batch_uniq_id: Option<ExtText> = "batchUniqId",
        /// Offset message id (store host + CommitLog offset, uppercase hex).
        msg_id: ExtText = "msgId",
        /// Queue the message went to.
        queue_id: i32 = "queueId",
        /// Queue offset of the (first) message.
        queue_offset: i64 = "queueOffset",
        /// Handle to recall a delayed message.
        recall_handle: Option<ExtText> = "recallHandle",
        /// Transaction id of a half message.
        transaction_id: Option<ExtText> = "transactionId",
    }
}
