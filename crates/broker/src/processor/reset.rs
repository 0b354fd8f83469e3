//! INVOKE_BROKER_TO_RESET_OFFSET (222): an administrator moves a group's offsets on a topic
//! (to a time, to the max offset, or to an explicit offset for one queue).
//!
//! - The new offsets are written as ONE reset record through the log, which starts a new
//!   generation of (group, topic); the reply is sent only once that record is durable, so an
//!   acknowledged reset survives a crash. Consumers online at the time are fenced
//!   (`reset_fence`): their commits are rejected as stale until they pull the queue and follow
//!   the reset, so a running consumer cannot undo it (invariant 3).
//! - Online consumers of the group are told with the one-way RESET_CONSUMER_CLIENT_OFFSET
//!   (220) push; the body has the list form C++ clients read when the admin request is marked
//!   CPP (as Java's broker decides) or the consumer's connection is a C++ one (reference §5.5).
//! - The reply is always SUCCESS with a `ResetOffsetBody` (Java's admin throws on a bodyless
//!   SUCCESS), plus ferromq's ext fields `generation` and `oldOffsets`
//!   (`queueId:offset,...`, `-1` for a queue without a stored offset) for `ferromq admin`.
//! - Every moved queue is logged with group, topic, queue, old and new offset and the cause.
//! - An internal group (`%SCHEDULE%`) or a reserved topic is refused with NO_PERMISSION
//!   (`access`): only the broker moves their offsets.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::mq_map::{encode_fastjson, MqMap, ResetOffsetBody};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
use ferromq_protocol::remoting::{LanguageCode, RemotingCommand};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, Verdict};
use ferromq_store::{CommitOutcome, MessageStore, StoreError, TimeBoundary};

use super::access::{self, Request};
use super::{bad_header, success};
use crate::context::BrokerContext;

/// Longest the reset waits for the dispatcher to cover acknowledged messages before it
/// computes offsets by time.
const CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// Client id recorded on resets made through 222.
const ADMIN_CLIENT_ID: &str = "admin-reset";

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<ResetOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let (group, topic) = (header.group.as_str(), header.topic.as_str());
    if let Err(refusal) = access::client_offsets(ctx, group, topic, Request::Reset) {
        return refusal.reply(command);
    }
    let Some(config) = ctx.topics.get(topic) else {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {topic} does not exist")),
        );
    };
    match known_group(ctx, group).await {
        Ok(true) => {}
        Ok(false) => {
            return command.reply(
                response::SUBSCRIPTION_GROUP_NOT_EXIST,
                Some(format!("subscription group {group} does not exist")),
            )
        }
        Err(error) => return command.reply(response::SYSTEM_BUSY, Some(error.to_string())),
    }
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let queue_count = config.read_queue_nums.max(config.write_queue_nums).max(0) as u32;
    let queues: Vec<u32> = match header.queue_id {
        Some(q) if q >= 0 => {
            if q as u32 >= queue_count {
                return command.reply(
                    response::INVALID_PARAMETER,
                    Some(format!(
                        "topic {topic} has no queue {q} ({queue_count} queues)"
                    )),
                );
            }
            vec![q as u32]
        }
        _ => (0..queue_count).collect(),
    };
    let explicit = header.offset.filter(|o| *o >= 0);
    if explicit.is_some() && queues.len() != 1 {
        return command.reply(
            response::INVALID_PARAMETER,
            Some("an explicit offset needs one queue (queueId)".into()),
        );
    }
    let cause = match explicit {
        Some(offset) => format!("admin reset to explicit offset {offset}"),
        None if header.timestamp < 0 => "admin reset to the max offset (skip backlog)".into(),
        None => format!("admin reset to store time {} ms", header.timestamp),
    };
    let mut entries = Vec::with_capacity(queues.len());
    for queue_id in queues {
        let (min, max) = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
        let offset = match explicit {
            Some(offset) => {
                let offset = offset as u64;
                if offset < min || offset > max {
                    return command.reply(
                        response::INVALID_PARAMETER,
                        Some(format!(
                            "offset {offset} is outside queue {topic}/{queue_id}'s range [{min}, {max}]"
                        )),
                    );
                }
                offset
            }
            None if header.timestamp < 0 => max,
            None => match ctx.store.offset_by_time(
                topic,
                queue_id,
                header.timestamp,
                TimeBoundary::Lower,
            ) {
                Ok(offset) => offset,
                Err(error) => {
                    return command.reply(
                        response::SYSTEM_ERROR,
                        Some(format!(
                            "cannot search queue {topic}/{queue_id} by time: {error}"
                        )),
                    )
                }
            },
        };
        entries.push(OffsetEntry {
            topic: topic.to_string(),
            queue_id,
            offset,
        });
    }
    let plan = ResetPlan {
        group,
        topic,
        entries,
        client_id: ADMIN_CLIENT_ID,
        cause,
        timestamp: header.timestamp,
        // Java's broker picks the list form when the admin request is marked CPP.
        cpp_request: command.language == LanguageCode::Cpp,
    };
    let done = match apply(ctx, plan).await {
        Ok(done) => done,
        Err((code, remark)) => return command.reply(code, Some(remark)),
    };
    let old_text = done
        .old
        .iter()
        .map(|(q, o)| format!("{q}:{}", o.map_or(-1, |o| o as i64)))
        .collect::<Vec<_>>()
        .join(",");
    let mut reply = success(command).with_body(encode_fastjson(&done.body));
    reply
        .ext_fields
        .insert("generation".into(), done.generation.to_string());
    reply.ext_fields.insert("oldOffsets".into(), old_text);
    reply
}

/// Whether `group` exists for an administrator's move of its offsets: configured, online,
/// or holding offsets. A reset never creates a group by a typo.
///
/// # Errors
/// The offset view could not catch up, so "holds no offsets" is not known.
pub(super) async fn known_group(
    ctx: &BrokerContext,
    group: &str,
) -> Result<bool, ferromq_store::ReadError> {
    if ctx.groups.get(group).is_some() || ctx.clients.has_online_consumers(group) {
        return Ok(true);
    }
    Ok(!ctx
        .store
        .offset_view()
        .await?
        .group_offsets(group)
        .is_empty())
}

/// A reset of one (group, topic) to explicit per-queue offsets, and why.
pub(super) struct ResetPlan<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// The new offset of each queue.
    pub entries: Vec<OffsetEntry>,
    /// Client id recorded on the reset record.
    pub client_id: &'a str,
    /// Logged with every moved queue.
    pub cause: String,
    /// Time put in the RESET_CONSUMER_CLIENT_OFFSET push (negative: max offset).
    pub timestamp: i64,
    /// Push the C++ list form to every consumer.
    pub cpp_request: bool,
}

/// What [`apply`] did.
pub(super) struct ResetDone {
    /// The generation the reset record established.
    pub generation: u64,
    /// Each queue's stored offset before the reset (`None`: there was none).
    pub old: BTreeMap<u32, Option<u64>>,
    /// The new offsets, as told to the consumers.
    pub body: ResetOffsetBody,
}

/// Writes `plan` as one reset record (a new generation) and waits until it is durable, logs
/// every moved queue, fences the consumers online now and tells them (the 220 push). Any
/// other writer of offsets on behalf of an administrator (CLONE_GROUP_OFFSET) goes through
/// here, so every admin move of offsets has the same guarantees.
///
/// # Errors
/// `(response code, remark)`: not durable (NOT_DURABLE) or refused by the offset rules
/// (COMMIT_REJECTED); nothing was acknowledged.
pub(super) async fn apply(
    ctx: &BrokerContext,
    plan: ResetPlan<'_>,
) -> Result<ResetDone, (i32, String)> {
    let (group, topic) = (plan.group, plan.topic);
    let view = ctx.store.offset_view().await.map_err(|error| {
        (
            response::SYSTEM_BUSY,
            format!("reset not applied, offsets unknown: {error}"),
        )
    })?;
    let old: BTreeMap<u32, Option<u64>> = plan
        .entries
        .iter()
        .map(|entry| {
            let stored = view.consumer_offset(group, topic, entry.queue_id);
            (entry.queue_id, stored.map(|s| s.offset))
        })
        .collect();
    // Fence the consumers online now before the record is appended: a commit that arrives
    // while the reset becomes durable must not land after it (see `reset_fence`).
    let online: Vec<u64> = ctx
        .clients
        .consumers(group)
        .iter()
        .map(|c| c.channel.id)
        .collect();
    let queues: Vec<(u32, u64)> = plan
        .entries
        .iter()
        .map(|entry| (entry.queue_id, entry.offset))
        .collect();
    let token = ctx.fences.install_pending(group, topic, &queues, &online);
    let reset = OffsetCommand {
        kind: OffsetKind::Reset,
        group: group.to_string(),
        client_id: plan.client_id.to_string(),
        generation: None,
        entries: plan.entries.clone(),
    };
    let outcome = match write(&ctx.store, reset).await {
        Ok(outcome) => outcome,
        Err(error) => {
            // The record may still become durable: keep the fences, and let pulls lift them
            // towards whatever the stored offset turns out to be. The generation only labels
            // the fences' replies (not an offset answer): 0, "unknown", as while pending,
            // when the view cannot catch up.
            let generation = match ctx.store.offset_view().await {
                Ok(view) => view.generation(group, topic),
                Err(_) => 0,
            };
            ctx.fences.activate(token, generation);
            return Err((
                crate::codes::NOT_DURABLE,
                format!("reset not stored durably: {error}"),
            ));
        }
    };
    let cause = &plan.cause;
    let mut body = ResetOffsetBody {
        offset_table: MqMap::default(),
    };
    let mut rejected = Vec::new();
    for (entry, verdict) in plan.entries.iter().zip(&outcome.verdicts) {
        let previous = old.get(&entry.queue_id).copied().flatten();
        match verdict {
            Verdict::Applied | Verdict::Unchanged => {
                tracing::info!(%group, %topic, queue_id = entry.queue_id, old = ?previous, new = entry.offset,
                    generation = ?outcome.generation, %cause, "consumer offset reset");
                ctx.metrics.count_offset_move(OffsetKind::Reset, "admin");
                body.offset_table.0.insert(
                    MessageQueue {
                        topic: topic.to_string(),
                        broker_name: ctx.config.broker_name.clone(),
                        queue_id: entry.queue_id as i32,
                    },
                    entry.offset as i64,
                );
            }
            Verdict::Rejected(why) => {
                rejected.push(format!("queue {}: {why}", entry.queue_id));
            }
        }
    }
    if !rejected.is_empty() {
        // Queues the record did move keep their fences; a record that moved nothing leaves
        // none behind.
        if rejected.len() == plan.entries.len() {
            ctx.fences.withdraw(token);
        } else {
            ctx.fences
                .activate(token, outcome.generation.unwrap_or_default());
        }
        return Err((
            crate::codes::COMMIT_REJECTED,
            format!("reset rejected: {}", rejected.join("; ")),
        ));
    }
    ctx.fences.activate(token, outcome.generation.unwrap_or(0));
    // Pulled positions from before the reset no longer say what is in flight.
    ctx.clients.forget_pulls(group, topic);
    let push_header = ResetOffsetRequestHeader {
        group: group.to_string(),
        topic: topic.to_string(),
        queue_id: None,
        offset: None,
        timestamp: plan.timestamp,
        is_force: true,
    };
    notify_consumers(ctx, &push_header, &body, plan.cpp_request);
    Ok(ResetDone {
        generation: outcome.generation.unwrap_or(0),
        old,
        body,
    })
}

async fn write(
    store: &Arc<MessageStore>,
    command: OffsetCommand,
) -> Result<CommitOutcome, StoreError> {
    let store = store.clone();
    // The store waits for durability on this thread; keep it off the async workers.
    match tokio::task::spawn_blocking(move || store.commit_offsets(&command)).await {
        Ok(result) => result,
        Err(join) => Err(StoreError::Durability(
            ferromq_store::DurabilityError::FlushFailed(join.to_string()),
        )),
    }
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
        if consumer.channel.tx.try_send(push).is_err() {
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
