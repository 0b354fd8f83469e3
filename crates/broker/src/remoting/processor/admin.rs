//! Queue bounds and lookups (GET_MAX_OFFSET 30, GET_MIN_OFFSET 31, SEARCH_OFFSET_BY_TIMESTAMP
//! 29, GET_EARLIEST_MSG_STORETIME 32, VIEW_MESSAGE_BY_ID 33) and topic and group
//! administration (17, 215, 21, 351, 202, 200, 207, 208).
//!
//! Reserved topics and internal groups (`access`) cannot be created, updated or deleted here
//! (NO_PERMISSION); a negative CommitLog offset in VIEW_MESSAGE_BY_ID is INVALID_PARAMETER.

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::mq_map::{
    encode_fastjson, ConsumeStats, MqMap, OffsetWrapper, TopicOffset, TopicStatsTable,
};
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::admin::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, DeleteTopicRequestHeader,
    GetSubscriptionGroupConfigRequestHeader, GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
};
use ferromq_protocol::remoting::headers::client::ViewMessageRequestHeader;
use ferromq_protocol::remoting::headers::enums::BoundaryType;
use ferromq_protocol::remoting::headers::offset::{
    GetConsumeStatsRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader, GetMinOffsetResponseHeader, SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::RecordView;
use ferromq_store::{TagFilter, TimeBoundary};

use super::{bad_header, success};
use crate::catalog::groups::SubscriptionGroupConfig;
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::catalog::{self, TopicSpec};

/// Longest an admin query waits for the dispatcher to cover acknowledged records.
const CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_millis(500);

fn queue_of(command: &RemotingCommand, queue_id: i32) -> Result<u32, RemotingCommand> {
    u32::try_from(queue_id).map_err(|_| {
        command.reply(
            response::INVALID_PARAMETER,
            Some(format!("queueId {queue_id} is negative")),
        )
    })
}

pub(super) async fn max_offset(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    // Answer with every record acknowledged before the request.
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let header = match command.decode_header::<GetMaxOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let queue_id = match queue_of(command, header.queue_id) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let max = ctx
        .store
        .queue_bounds(&header.topic, queue_id)
        .map_or(0, |(_, max)| max);
    success(command).with_header(&GetMaxOffsetResponseHeader { offset: max as i64 })
}

pub(super) fn min_offset(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetMinOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let queue_id = match queue_of(command, header.queue_id) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let min = ctx
        .store
        .queue_bounds(&header.topic, queue_id)
        .map_or(0, |(min, _)| min);
    success(command).with_header(&GetMinOffsetResponseHeader { offset: min as i64 })
}

pub(super) fn search_offset(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<SearchOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let queue_id = match queue_of(command, header.queue_id) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let boundary = match header.boundary_type {
        Some(BoundaryType::Upper) => TimeBoundary::Upper,
        _ => TimeBoundary::Lower,
    };
    match ctx
        .store
        .offset_by_time(&header.topic, queue_id, header.timestamp, boundary)
    {
        Ok(offset) => success(command).with_header(&SearchOffsetResponseHeader {
            offset: offset as i64,
        }),
        Err(error) => command.reply(response::SYSTEM_ERROR, Some(error.to_string())),
    }
}

pub(super) fn earliest_store_time(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<GetEarliestMsgStoretimeRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let queue_id = match queue_of(command, header.queue_id) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let Some((min, _)) = ctx.store.queue_bounds(&header.topic, queue_id) else {
        return command.reply(
            response::SYSTEM_ERROR,
            Some(format!("queue {}/{queue_id} has no message", header.topic)),
        );
    };
    match store_time_at(ctx, &header.topic, queue_id, min) {
        Some(timestamp) => {
            success(command).with_header(&GetEarliestMsgStoretimeResponseHeader { timestamp })
        }
        None => command.reply(
            response::SYSTEM_ERROR,
            Some(format!("queue {}/{queue_id} has no message", header.topic)),
        ),
    }
}

fn store_time_at(ctx: &BrokerContext, topic: &str, queue_id: u32, offset: u64) -> Option<i64> {
    let result = ctx
        .store
        .get_messages(topic, queue_id, offset, 1, usize::MAX, &TagFilter::All)
        .ok()?;
    let message = result.messages.first()?;
    RecordView::parse(&message.bytes)
        .ok()
        .map(|v| v.store_timestamp_ms)
}

pub(super) async fn view_message(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<ViewMessageRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let phys_offset = match access::commitlog_offset(ctx, header.offset, Request::ViewMessage) {
        Ok(offset) => offset,
        Err(refusal) => return super::code_map::error_reply(command, &refusal),
    };
    match crate::core::lookup::message_at(ctx, phys_offset).await {
        Ok(bytes) => {
            let mut reply = success(command);
            // A half message says so, with its state (`queryMsgById` shows it).
            if let Ok(view) = ferromq_protocol::RecordView::parse(&bytes) {
                if view.topic_str() == crate::core::transactions::TRANS_HALF_TOPIC {
                    let state = crate::core::transactions::status::half_state(ctx, &view).await;
                    reply
                        .ext_fields
                        .insert(crate::codes::TRANSACTION_STATE_EXT, state);
                }
            }
            reply.with_body(bytes)
        }
        Err(refusal) => super::code_map::error_reply(command, &refusal),
    }
}

pub(super) async fn create_topic(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<CreateTopicRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let spec = TopicSpec {
        name: header.topic,
        read_queue_nums: header.read_queue_nums,
        write_queue_nums: header.write_queue_nums,
        perm: header.perm,
        order: header.order.unwrap_or(false),
        topic_sys_flag: header.topic_sys_flag.unwrap_or(0),
    };
    answer(ctx, command, catalog::upsert_topic(ctx, &spec)).await
}

pub(super) async fn delete_topic(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    match command.decode_header::<DeleteTopicRequestHeader>() {
        Ok(header) => answer(ctx, command, catalog::delete_topic(ctx, &header.topic)).await,
        Err(error) => bad_header(command, error),
    }
}

/// SUCCESS, or the refusal's code and remark.
/// The reply to a catalog change: success once the change is in the log (the catalog record
/// acknowledged, so slaves follow it), else the refusal or write error.
async fn answer(
    ctx: &BrokerContext,
    command: &RemotingCommand,
    result: Result<(), crate::core::error::Refusal>,
) -> RemotingCommand {
    if let Err(refusal) = result {
        return super::code_map::error_reply(command, &refusal);
    }
    match catalog::published(ctx).await {
        Ok(()) => success(command),
        Err(error) => super::code_map::error_reply(command, &error),
    }
}

pub(super) fn all_topic_config(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    success(command).with_body(serde_json::to_vec(&ctx.topics.snapshot()).unwrap_or_default())
}

pub(super) fn topic_config(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetTopicConfigRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    match ctx.topics.get(&header.topic) {
        Some(config) => success(command).with_body(serde_json::to_vec(&config).unwrap_or_default()),
        None => command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {} does not exist", header.topic)),
        ),
    }
}

pub(super) async fn topic_stats(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    // Answer with every record acknowledged before the request.
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let header = match command.decode_header::<GetTopicStatsInfoRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let Some(config) = ctx.topics.get(&header.topic) else {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {} does not exist", header.topic)),
        );
    };
    let mut table = TopicStatsTable::default();
    for queue_id in 0..config.write_queue_nums.max(config.read_queue_nums).max(0) as u32 {
        let (min, max) = ctx
            .store
            .queue_bounds(&header.topic, queue_id)
            .unwrap_or((0, 0));
        let last = if max > 0 {
            store_time_at(ctx, &header.topic, queue_id, max - 1).unwrap_or(0)
        } else {
            0
        };
        table.offset_table.0.insert(
            MessageQueue {
                topic: header.topic.clone(),
                broker_name: ctx.config.broker_name.clone(),
                queue_id: queue_id as i32,
            },
            TopicOffset {
                min_offset: min as i64,
                max_offset: max as i64,
                last_update_timestamp: last,
            },
        );
    }
    success(command).with_body(encode_fastjson(&table))
}

pub(super) async fn create_group(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    let config: SubscriptionGroupConfig =
        match decode_json(command.body.as_deref().unwrap_or_default()) {
            Ok(config) => config,
            Err(error) => {
                return command.reply(
                    response::INVALID_PARAMETER,
                    Some(format!("bad subscription group body: {error}")),
                )
            }
        };
    answer(ctx, command, catalog::upsert_group(ctx, config)).await
}

pub(super) fn all_groups(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let table: std::collections::BTreeMap<String, SubscriptionGroupConfig> = ctx
        .groups
        .all()
        .into_iter()
        .map(|g| (g.group_name.clone(), g))
        .collect();
    let body = serde_json::json!({ "subscriptionGroupTable": table, "dataVersion": ctx.topics.snapshot().data_version });
    success(command).with_body(serde_json::to_vec(&body).unwrap_or_default())
}

pub(super) fn group_config(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetSubscriptionGroupConfigRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    match ctx.groups.get(&header.group) {
        Some(config) => success(command).with_body(serde_json::to_vec(&config).unwrap_or_default()),
        None => command.reply(
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            Some(format!("group {} does not exist", header.group)),
        ),
    }
}

pub(super) async fn delete_group(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    match command.decode_header::<DeleteSubscriptionGroupRequestHeader>() {
        Ok(header) => answer(ctx, command, catalog::delete_group(ctx, &header.group_name)).await,
        Err(error) => bad_header(command, error),
    }
}

pub(super) async fn consume_stats(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    // Answer with every record acknowledged before the request.
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let header = match command.decode_header::<GetConsumeStatsRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let group = header.consumer_group.as_str();
    let offsets = match crate::core::view::offsets(&ctx.store).await {
        Ok(offsets) => offsets,
        Err(error) => return super::code_map::error_reply(command, &error),
    };
    let mut topics: Vec<String> = match (&header.topic, &header.topic_list) {
        (Some(topic), _) if !topic.is_empty() => vec![topic.clone()],
        (_, Some(list)) if !list.is_empty() => list.split(';').map(str::to_string).collect(),
        _ => offsets
            .group_offsets(group)
            .into_iter()
            .map(|(topic, _, _)| topic)
            .collect(),
    };
    topics.sort();
    topics.dedup();
    let mut stats = ConsumeStats {
        consume_tps: 0.0,
        offset_table: MqMap::default(),
    };
    for topic in &topics {
        stats.consume_tps += ctx.clients.consume_tps(group, topic);
        let queues = ctx
            .topics
            .get(topic)
            .map_or(0, |c| c.read_queue_nums.max(0) as u32);
        for queue_id in 0..queues {
            let broker_offset = ctx
                .store
                .queue_bounds(topic, queue_id)
                .map_or(0, |(_, max)| max);
            let consumer_offset = offsets.stored(group, topic, queue_id).unwrap_or(0);
            let last = if consumer_offset > 0 {
                store_time_at(ctx, topic, queue_id, consumer_offset - 1).unwrap_or(0)
            } else {
                0
            };
            stats.offset_table.0.insert(
                MessageQueue {
                    topic: topic.clone(),
                    broker_name: ctx.config.broker_name.clone(),
                    queue_id: queue_id as i32,
                },
                OffsetWrapper {
                    broker_offset: broker_offset as i64,
                    consumer_offset: consumer_offset as i64,
                    // Pulled but not committed yet: the in-flight span.
                    pull_offset: ctx
                        .clients
                        .pulled_offset(group, topic, queue_id)
                        .map_or(consumer_offset, |pulled| pulled.max(consumer_offset))
                        as i64,
                    last_timestamp: last,
                },
            );
        }
    }
    if stats.offset_table.0.is_empty()
        && !ctx.clients.has_online_consumers(group)
        && ctx.groups.get(group).is_none()
    {
        return command.reply(
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            Some(format!("group {group} does not exist")),
        );
    }
    success(command).with_body(encode_fastjson(&stats))
}
