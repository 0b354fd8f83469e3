//! INVOKE_BROKER_TO_RESET_OFFSET (222): an administrator moves a group's offsets on a topic
//! (to a time, to the max offset, or to an explicit offset for one queue). The rules —
//! one durable reset record, fences, logging, refusals — are `core::reset`'s; this adapter
//! translates RocketMQ's magic values (a negative queue id is every queue, a negative offset
//! none, a negative timestamp the max offset) and answers:
//!
//! - Online consumers of the group are told with the one-way RESET_CONSUMER_CLIENT_OFFSET
//!   (220) push; the body has the list form C++ clients read when the admin request is marked
//!   CPP (as Java's broker decides) or the consumer's connection is a C++ one (reference §5.5).
//! - The reply is always SUCCESS with a `ResetOffsetBody` (Java's admin throws on a bodyless
//!   SUCCESS), plus ferromq's ext fields `generation` and `oldOffsets`
//!   (`queueId:offset,...`, `-1` for a queue without a stored offset) for `ferromq admin`.

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::mq_map::{encode_fastjson, MqMap, ResetOffsetBody};
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
use ferromq_protocol::remoting::{LanguageCode, RemotingCommand};

use super::code_map::error_reply;
use super::{bad_header, success};
use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::core::reset::{self, ResetDone, ResetTarget};

pub(super) async fn handle(
    ctx: &BrokerContext,
    principal: &Principal,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<ResetOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    // RocketMQ's magic values end here: a negative queue id is "every queue", a negative
    // offset "none", a negative timestamp "the max offset".
    let queue_id = header.queue_id.and_then(|q| u32::try_from(q).ok());
    let target = match header.offset.and_then(|o| u64::try_from(o).ok()) {
        Some(offset) => ResetTarget::Offset(offset),
        None if header.timestamp < 0 => ResetTarget::Max,
        None => ResetTarget::Time(header.timestamp),
    };
    let done = match reset::reset(
        ctx,
        principal,
        &header.group,
        &header.topic,
        queue_id,
        target,
    )
    .await
    {
        Ok(done) => done,
        Err(error) => return error_reply(command, &error),
    };
    // Java's broker picks the list form when the admin request is marked CPP.
    let body = notify_reset(
        ctx,
        &header.group,
        &header.topic,
        &done,
        header.timestamp,
        command.language == LanguageCode::Cpp,
    );
    let old_text = done
        .old
        .iter()
        .map(|(q, o)| format!("{q}:{}", o.map_or(-1, |o| o as i64)))
        .collect::<Vec<_>>()
        .join(",");
    let mut reply = reset_reply(command, &body, done.generation);
    reply
        .ext_fields
        .insert(crate::codes::RESET_OLD_OFFSETS_EXT, old_text);
    reply
}

/// The SUCCESS reply of an applied reset: the `ResetOffsetBody` (Java's admin throws on a
/// bodyless SUCCESS) and ferromq's `generation` ext field.
pub(super) fn reset_reply(
    command: &RemotingCommand,
    body: &ResetOffsetBody,
    generation: u64,
) -> RemotingCommand {
    let mut reply = success(command).with_body(encode_fastjson(body));
    reply
        .ext_fields
        .insert(crate::codes::RESET_GENERATION_EXT, generation.to_string());
    reply
}

/// Tells the group's online consumers about an applied reset (the 220 push, timestamp
/// `timestamp`; `cpp_request` pushes the C++ list form to everyone) and returns the body.
pub(super) fn notify_reset(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    done: &ResetDone,
    timestamp: i64,
    cpp_request: bool,
) -> ResetOffsetBody {
    let mut body = ResetOffsetBody {
        offset_table: MqMap::default(),
    };
    for (queue_id, offset) in &done.moved {
        body.offset_table.0.insert(
            MessageQueue {
                topic: topic.to_string(),
                broker_name: ctx.config.broker_name.clone(),
                queue_id: *queue_id as i32,
            },
            *offset as i64,
        );
    }
    let push_header = ResetOffsetRequestHeader {
        group: group.to_string(),
        topic: topic.to_string(),
        queue_id: None,
        offset: None,
        timestamp,
        is_force: true,
    };
    notify_consumers(ctx, &push_header, &body, cpp_request);
    body
}

/// Pushes RESET_CONSUMER_CLIENT_OFFSET (220) one-way to every online consumer of the group; a
/// full or closed connection is skipped (the generation rule protects the reset anyway).
fn notify_consumers(
    ctx: &BrokerContext,
    header: &ResetOffsetRequestHeader,
    body: &ResetOffsetBody,
    cpp_request: bool,
) {
    let consumers = ctx.clients.consumers(&header.group);
    if consumers.is_empty() {
        return;
    }
    let push_header = ResetOffsetRequestHeader {
        group: header.group.clone(),
        topic: header.topic.clone(),
        queue_id: None,
        offset: None,
        timestamp: header.timestamp,
        is_force: true,
    };
    let java_body = encode_fastjson(body);
    let cpp_body = cpp_body(body);
    for consumer in consumers {
        let mut push = RemotingCommand::request_with_header(
            request::RESET_CONSUMER_CLIENT_OFFSET,
            &push_header,
        );
        push.set_oneway(true);
        let payload = if cpp_request || consumer.channel.language == LanguageCode::Cpp {
            cpp_body.clone()
        } else {
            java_body.clone()
        };
        let push = push.with_body(payload);
        if consumer.channel.tx.try_send(push.into()).is_err() {
            tracing::debug!(group = %header.group, client = %consumer.client_id,
                "could not push the offset reset to a consumer");
        }
    }
}

/// The C++ client's form: `{"offsetTable":[{"topic","brokerName","queueId","offset"}]}`.
fn cpp_body(body: &ResetOffsetBody) -> Vec<u8> {
    let list: Vec<serde_json::Value> = body
        .offset_table
        .0
        .iter()
        .map(|(mq, offset)| {
            serde_json::json!({
                "topic": mq.topic,
                "brokerName": mq.broker_name,
                "queueId": mq.queue_id,
                "offset": offset,
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "offsetTable": list })).unwrap_or_default()
}
