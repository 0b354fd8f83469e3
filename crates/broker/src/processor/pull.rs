//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): read a queue from an offset, with a tag
//! filter, the piggy-backed commit, and long polling.
//!
//! Status mapping (reference §9): Found → SUCCESS; nothing new at the tail → hold the request
//! (SUSPEND flag) until a message is dispatched or the hold ends, then PULL_NOT_FOUND; all
//! scanned entries filtered out → PULL_RETRY_IMMEDIATELY; offset below the min or beyond the
//! max → PULL_OFFSET_MOVED with the offset to use. The four required reply fields are always
//! present.
//!
//! A pull by an internal group (`%SCHEDULE%`), and a pull carrying a commit on a reserved
//! topic, are refused with NO_PERMISSION (`access`): the commit would move offsets only the
//! broker moves.

use std::time::Duration;

use bytes::BytesMut;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::{GetResult, GetStatus, TagFilter};

use super::access::{self, Request};
use super::{bad_header, offset};
use crate::context::BrokerContext;
use crate::long_poll;
use crate::topics::PERM_READ;

/// Pull sysFlag: the request carries a commit in `commitOffset`.
pub const PULL_SYSFLAG_COMMIT_OFFSET: i32 = 0x1;
/// Pull sysFlag: the broker may hold the request (long polling).
pub const PULL_SYSFLAG_SUSPEND: i32 = 0x2;
/// Pull sysFlag: the request carries its subscription expression.
pub const PULL_SYSFLAG_SUBSCRIPTION: i32 = 0x4;
/// Most messages one pull returns (RocketMQ's `maxTransferCountOnMessageInMemory` is 32).
const PULL_COUNT_MAX: usize = 64;
/// Longest a pull waits for the dispatcher before answering "offset out of range".
const DISPATCH_CATCH_UP_MAX: Duration = Duration::from_millis(500);
/// Most bytes one pull returns unless the request asks for less.
const PULL_BYTES_MAX: usize = 256 * 1024;

/// Refuses a pull by an internal group, or one whose piggy-backed commit names a reserved
/// topic (reading a readable reserved topic, such as the scheduler's dead letters, is allowed).
fn guard(
    ctx: &BrokerContext,
    header: &PullMessageRequestHeader,
) -> Result<(), super::send::Refusal> {
    access::client_group(ctx, &header.consumer_group, Request::Pull)?;
    if header.sys_flag & PULL_SYSFLAG_COMMIT_OFFSET != 0 {
        access::client_topic(ctx, &header.topic, Request::Pull)?;
    }
    Ok(())
}

pub(super) async fn handle(
    ctx: &BrokerContext,
    channel: &crate::clients::ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<PullMessageRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let topic = header.topic.as_str();
    if let Err(refusal) = guard(ctx, &header) {
        return refusal.reply(command);
    }
    let Some(config) = ctx.topics.get(topic) else {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {topic} does not exist")),
        );
    };
    if config.perm & PERM_READ == 0 {
        return command.reply(
            response::NO_PERMISSION,
            Some(format!("topic {topic} is not readable")),
        );
    }
    if header.queue_id < 0 || header.queue_id >= config.read_queue_nums {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!(
                "queueId {} is outside the {} read queues of {topic}",
                header.queue_id, config.read_queue_nums
            )),
        );
    }
    if let Err(error) = ctx.groups.ensure(&header.consumer_group) {
        return command.reply(response::INVALID_PARAMETER, Some(error.to_string()));
    }
    let queue_id = header.queue_id as u32;
    let group = header.consumer_group.as_str();
    // A connection fenced by a reset may not commit, and learns the reset offset now. The
    // generation is read before the fences (see `reset_fence`).
    let generation = match ctx.store.offset_view().await {
        Ok(view) => view.generation(group, topic),
        Err(error) => return command.reply(response::SYSTEM_BUSY, Some(error.to_string())),
    };
    let fenced = ctx
        .fences
        .blocks_commit(group, topic, queue_id, channel.id)
        .is_some();
    if header.sys_flag & PULL_SYSFLAG_COMMIT_OFFSET != 0 && !fenced {
        offset::commit_from_pull(
            ctx,
            group,
            topic,
            queue_id,
            header.commit_offset,
            generation,
        );
    } else if header.sys_flag & PULL_SYSFLAG_COMMIT_OFFSET != 0 {
        ctx.counters
            .commits_rejected
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ctx.metrics
            .commit(crate::metrics::CommitCount::StaleGeneration);
    }
    // After the commit above: the view must include it.
    let view = match ctx.store.offset_view().await {
        Ok(view) => view,
        Err(error) => return command.reply(response::SYSTEM_BUSY, Some(error.to_string())),
    };
    if let Some(moved) = ctx.fences.on_pull(
        group,
        topic,
        queue_id,
        channel.id,
        header.queue_offset.max(0) as u64,
        || {
            view.consumer_offset(group, topic, queue_id)
                .map(|s| s.offset)
        },
    ) {
        let (min, max) = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
        tracing::info!(%group, %topic, queue_id, from = header.queue_offset, to = moved.offset,
            "consumer moved to the group's offset after a reset");
        return command
            .reply(
                response::PULL_OFFSET_MOVED,
                Some("the group's offset was reset".into()),
            )
            .with_header(&PullMessageResponseHeader {
                suggest_which_broker_id: 0,
                next_begin_offset: moved.offset as i64,
                min_offset: min as i64,
                max_offset: max as i64,
                offset_delta: None,
                topic_sys_flag: None,
                group_sys_flag: None,
                forbidden_type: None,
            });
    }
    let filter = match filter_of(ctx, &header) {
        Ok(filter) => filter,
        Err(remark) => return command.reply(response::SUBSCRIPTION_PARSE_FAILED, Some(remark)),
    };
    let max_count = (header.max_msg_nums.max(1) as usize).min(PULL_COUNT_MAX);
    let max_bytes = header
        .max_msg_bytes
        .map_or(PULL_BYTES_MAX, |b| (b.max(1) as usize).min(PULL_BYTES_MAX));
    let offset = header.queue_offset.max(0) as u64;
    let hold = (header.sys_flag & PULL_SYSFLAG_SUSPEND != 0).then(|| {
        Duration::from_millis(
            (header.suspend_timeout_millis.max(0) as u64)
                .min(ctx.runtime_config.broker_suspend_max_time_millis()),
        )
    });
    let mut result = match read(ctx, topic, queue_id, offset, max_count, max_bytes, &filter) {
        Ok(result) => result,
        Err(reply) => return reply.reply(command),
    };
    if past_the_end(&result, offset) {
        // The queue may be behind only because a record acknowledged a moment ago is still
        // being dispatched: catch up before telling the client its offset is out of range.
        ctx.store.dispatch_caught_up(DISPATCH_CATCH_UP_MAX).await;
        result = match read(ctx, topic, queue_id, offset, max_count, max_bytes, &filter) {
            Ok(result) => result,
            Err(reply) => return reply.reply(command),
        };
    }
    if let (true, Some(hold)) = (nothing_new(&result, offset), hold) {
        match hold_pull(ctx, channel, topic, queue_id, offset, hold).await {
            Held::Arrived => {
                result = match read(ctx, topic, queue_id, offset, max_count, max_bytes, &filter) {
                    Ok(result) => result,
                    Err(reply) => return reply.reply(command),
                };
            }
            Held::TimedOut => {}
            Held::Busy(remark) => return command.reply(response::SYSTEM_BUSY, Some(remark)),
            // Nobody reads the answer: end now and free the hold.
            Held::ConnectionClosed => return command.reply(response::SYSTEM_BUSY, None),
        }
    }
    if matches!(
        result.status,
        GetStatus::Found | GetStatus::NoMatchedMessage
    ) {
        // For consumerProgress: in-flight = where this pull ended - the committed offset.
        ctx.clients.record_pull(
            group,
            topic,
            queue_id,
            result.next_begin_offset,
            result.messages.len(),
        );
    }
    ctx.metrics
        .record_pull(group, topic, queue_id, offset, &result);
    reply_for(ctx, command, offset, result)
}

/// How a long-poll hold ended.
enum Held {
    /// A message arrived in the queue.
    Arrived,
    /// The hold time passed with nothing new.
    TimedOut,
    /// A hold limit was reached; the remark says which.
    Busy(String),
    /// The pull's connection closed while it was held.
    ConnectionClosed,
}

/// Holds the pull until a message passes `offset`, `hold` elapses or the connection closes,
/// within the broker's and the connection's hold limits (`work_limits`).
async fn hold_pull(
    ctx: &BrokerContext,
    channel: &crate::clients::ClientChannel,
    topic: &str,
    queue_id: u32,
    offset: u64,
    hold: Duration,
) -> Held {
    if hold.is_zero() {
        return Held::TimedOut;
    }
    let _permit = match ctx.held_pulls.try_hold(&channel.held_pulls, &ctx.metrics) {
        Ok(permit) => permit,
        Err(remark) => return Held::Busy(remark),
    };
    tokio::select! {
        arrived = long_poll::wait_for_messages(&ctx.store, topic, queue_id, offset, hold) => {
            if arrived { Held::Arrived } else { Held::TimedOut }
        }
        // The writer of a closed connection drops its receiver.
        () = channel.tx.closed() => Held::ConnectionClosed,
    }
}

/// True when the answer would be "offset out of range" beyond the queue's end.
fn past_the_end(result: &GetResult, offset: u64) -> bool {
    match result.status {
        GetStatus::OffsetOverflowBadly => true,
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => offset > 0,
        _ => false,
    }
}

/// True when the queue has no message at `offset` yet (the request may be held).
fn nothing_new(result: &GetResult, offset: u64) -> bool {
    match result.status {
        GetStatus::OffsetOverflowOne => true,
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => offset == 0,
        _ => false,
    }
}

fn read(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    offset: u64,
    max_count: usize,
    max_bytes: usize,
    filter: &TagFilter,
) -> Result<GetResult, super::send::Refusal> {
    ctx.store
        .get_messages(topic, queue_id, offset, max_count, max_bytes, filter)
        .map_err(|error| match error {
            ferromq_store::ReadError::DispatchStalled(_) => {
                super::send::Refusal::new(response::SYSTEM_BUSY, error.to_string())
            }
            ferromq_store::ReadError::Damaged { .. } => {
                ctx.metrics.damaged_read();
                super::send::Refusal::new(crate::codes::MESSAGE_DAMAGED, error.to_string())
            }
            error => super::send::Refusal::new(
                response::SYSTEM_ERROR,
                format!("reading {topic}/{queue_id}: {error}"),
            ),
        })
}

fn reply_for(
    ctx: &BrokerContext,
    command: &RemotingCommand,
    offset: u64,
    result: GetResult,
) -> RemotingCommand {
    let (code, next) = match result.status {
        GetStatus::Found => (response::SUCCESS, result.next_begin_offset),
        GetStatus::NoMatchedMessage => (response::PULL_RETRY_IMMEDIATELY, result.next_begin_offset),
        GetStatus::OffsetOverflowOne => (response::PULL_NOT_FOUND, offset),
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if offset == 0 => {
            (response::PULL_NOT_FOUND, 0)
        }
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => {
            (response::PULL_OFFSET_MOVED, 0)
        }
        GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly => {
            (response::PULL_OFFSET_MOVED, result.next_begin_offset)
        }
    };
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: next as i64,
        min_offset: result.min_offset as i64,
        max_offset: result.max_offset as i64,
        offset_delta: None,
        topic_sys_flag: None,
        group_sys_flag: None,
        forbidden_type: None,
    };
    let mut reply = command.reply(code, None).with_header(&header);
    if code == response::SUCCESS {
        let size = result.messages.iter().map(|m| m.bytes.len()).sum();
        let mut body = BytesMut::with_capacity(size);
        for message in &result.messages {
            body.extend_from_slice(&message.bytes);
        }
        ctx.counters.messages_pulled.fetch_add(
            result.messages.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        reply = reply.with_body(body.freeze());
    }
    reply
}

/// The request's tag filter: its own expression, else the group's registered subscription,
/// else everything.
fn filter_of(ctx: &BrokerContext, header: &PullMessageRequestHeader) -> Result<TagFilter, String> {
    let expression_type = header.expression_type.as_deref().unwrap_or("TAG");
    if !expression_type.eq_ignore_ascii_case("TAG") {
        return Err(format!(
            "expression type {expression_type} is not supported; use TAG"
        ));
    }
    if header.sys_flag & PULL_SYSFLAG_SUBSCRIPTION != 0 {
        if let Some(expression) = &header.subscription {
            return Ok(TagFilter::parse(expression));
        }
    }
    Ok(ctx
        .clients
        .subscription(&header.consumer_group, &header.topic)
        .map_or(TagFilter::All, |s| TagFilter::parse(&s.sub_string)))
}
