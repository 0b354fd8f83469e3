//! CONSUMER_SEND_MSG_BACK (36) and delayed delivery.
//!
//! A message a consumer failed to process goes to the group's retry topic `%RETRY%<group>`
//! after a delay that grows with each attempt (level `3 + reconsumeTimes` unless the client
//! names one), and to the dead-letter topic `%DLQ%<group>` once it has been delivered
//! `maxReconsumeTimes` times or the client asks for it (negative level).
//!
//! Retries are delayed through the scheduler (`scheduler`).
//!
//! The request names a message by CommitLog offset and a group: a negative offset, an
//! internal or invalid group, or a message of a reserved topic (a delayed copy, an offset
//! record) is refused, so send-back cannot copy broker records into a client-visible topic.
//! The copy's `reconsumeTimes` saturates at `i32::MAX` rather than wrapping.

use ferromq_protocol::names;
use ferromq_protocol::{property_names, DraftRecord, MessageId, Properties, RecordView};
use ferromq_store::PutReceipt;

use super::access::{self, Request};
use super::error::{Refusal, RefusalKind, SendError};
use super::scheduler::schedule;
use super::send::{put, PROPERTY_DELAY};
use crate::catalog::groups::GroupError;
use crate::catalog::topics::{topic_with_queues, TopicError, DLQ_PREFIX, RETRY_PREFIX};
use crate::context::BrokerContext;

const PROPERTY_RETRY_TOPIC: &str = "RETRY_TOPIC";
const PROPERTY_ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
const PROPERTY_DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
const PROPERTY_DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
/// Delay level of a retry before its first attempt (RocketMQ: `3 + reconsumeTimes`).
const RETRY_FIRST_LEVEL: u32 = 3;

/// Where a sent-back message goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redelivery {
    /// Straight to the dead-letter topic (the client asked for it).
    DeadLetter,
    /// After this delay level.
    Level(u32),
    /// After the default delay of its attempt (`3 + reconsumeTimes`).
    Default,
}

/// A consumer's request to redeliver a message it failed to process.
#[derive(Debug, Clone)]
pub struct SendBackRequest {
    /// The consumer group.
    pub group: String,
    /// The message's CommitLog offset.
    pub phys_offset: u64,
    /// Where it goes next.
    pub redelivery: Redelivery,
    /// The original message id the client knows it by.
    pub origin_msg_id: Option<String>,
    /// The client's max reconsume times (the group's when absent).
    pub max_reconsume_times: Option<i32>,
    /// The consumer's address, for logs.
    pub peer: std::net::SocketAddr,
}

/// Copies the message to the group's retry topic (through the scheduler) or its dead-letter
/// topic, and waits for the acknowledgement.
pub async fn send_back(
    ctx: &BrokerContext,
    header: &SendBackRequest,
) -> Result<PutReceipt, SendError> {
    let phys_offset = header.phys_offset;
    access::client_group(ctx, &header.group, Request::SendBack)?;
    let group = ctx
        .groups
        .ensure(&header.group)
        .map_err(|e| group_refusal(ctx, e))?;
    let bytes = super::lookup::message_at(ctx, phys_offset).await?;
    let id = MessageId {
        store_host: ctx.broker_addr,
        phys_offset,
    }
    .encode();
    let original = RecordView::parse(&bytes)
        .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
    refuse_reserved_record(ctx, &original)?;
    let max_times = header.max_reconsume_times.unwrap_or(group.retry_max_times);
    let attempts = original.reconsume_times.max(0);
    let origin_topic = original
        .properties
        .get_str(PROPERTY_RETRY_TOPIC)
        .unwrap_or_else(|| original.topic_str())
        .to_string();
    let origin_id = header.origin_msg_id.clone().unwrap_or(id);
    let to_dlq = header.redelivery == Redelivery::DeadLetter || attempts >= max_times;
    let (topic, mut extra) = if to_dlq {
        let topic = format!("{DLQ_PREFIX}{}", header.group);
        ensure_topic(ctx, &topic, 1)?;
        (
            topic,
            vec![
                (PROPERTY_DLQ_ORIGIN_TOPIC, origin_topic.clone()),
                (PROPERTY_DLQ_ORIGIN_MESSAGE_ID, origin_id.clone()),
            ],
        )
    } else {
        let topic = format!("{RETRY_PREFIX}{}", header.group);
        ensure_topic(ctx, &topic, group.retry_queue_nums.max(1) as u32)?;
        (topic, vec![(PROPERTY_RETRY_TOPIC, origin_topic.clone())])
    };
    extra.push((PROPERTY_ORIGIN_MESSAGE_ID, origin_id));
    let properties = rewrite_properties(
        &original.properties,
        &[PROPERTY_RETRY_TOPIC, PROPERTY_DELAY],
        &extra,
    );
    let draft = DraftRecord {
        topic: &topic,
        queue_id: 0,
        flag: original.flag,
        sys_flag: original.sys_flag,
        born_timestamp_ms: original.born_timestamp_ms,
        born_host: original.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: attempts.saturating_add(1),
        prepared_tx_offset: 0,
        body: original.body,
        properties: &properties,
    };
    tracing::debug!(group = %header.group, %origin_topic, attempts, to_dlq, peer = %header.peer, "message sent back");
    if to_dlq {
        put(ctx, &[draft]).await
    } else {
        let level = match header.redelivery {
            Redelivery::Level(level) => level,
            _ => RETRY_FIRST_LEVEL.saturating_add(attempts as u32),
        };
        schedule(ctx, &draft, level).await
    }
}

/// Refuses to copy a record of a reserved topic: a consumer never received one, so sending
/// one back can only be an attempt to surface a broker record (an offset record, a delayed
/// copy) in a client topic.
fn refuse_reserved_record(ctx: &BrokerContext, original: &RecordView<'_>) -> Result<(), Refusal> {
    let topic = original.topic_str();
    if !names::is_reserved_topic(topic) {
        return Ok(());
    }
    Err(access::refuse(
        ctx,
        "reserved_record",
        Request::SendBack,
        RefusalKind::Forbidden,
        format!(
            "the message at CommitLog offset {} belongs to topic {topic}, which is reserved for \
             the broker: it cannot be sent back",
            original.phys_offset
        ),
    ))
}

/// The refusal for a group that cannot be created.
fn group_refusal(ctx: &BrokerContext, error: GroupError) -> Refusal {
    match error {
        GroupError::InvalidName(name) => access::invalid_name(ctx, Request::SendBack, name),
        other => Refusal::new(RefusalKind::Internal, other.to_string()),
    }
}

/// Creates the group's retry or dead-letter topic unless it exists; a group whose name makes
/// it too long is refused with INVALID_PARAMETER.
fn ensure_topic(ctx: &BrokerContext, topic: &str, queues: u32) -> Result<(), Refusal> {
    if ctx.topics.get(topic).is_none() {
        ctx.topics
            .put_if_absent(topic_with_queues(topic, queues))
            .map_err(|e| match e {
                TopicError::InvalidName(name) => Refusal::new(
                    RefusalKind::InvalidArgument,
                    format!("the group's retry or dead-letter topic cannot exist: {name}"),
                ),
                other => Refusal::new(RefusalKind::Internal, other.to_string()),
            })?;
        ctx.register_now.notify_one();
    }
    Ok(())
}

/// Re-encodes properties without the record CRC, without `drop`, and with `add` appended.
pub fn rewrite_properties(
    properties: &Properties<'_>,
    drop: &[&str],
    add: &[(&str, String)],
) -> Vec<u8> {
    let kept = properties.iter().filter_map(|(name, value)| {
        let name = std::str::from_utf8(name).ok()?;
        let value = std::str::from_utf8(value).ok()?;
        let dropped = name == property_names::CRC32
            || drop.contains(&name)
            || add.iter().any(|(n, _)| *n == name);
        (!dropped).then_some((name, value))
    });
    Properties::encode(kept.chain(add.iter().map(|(n, v)| (*n, v.as_str()))))
}
