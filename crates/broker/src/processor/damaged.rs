//! Damaged records: listing the store's quarantine (QUARANTINE_LIST) and moving a consumer
//! group past one damaged record (SKIP_DAMAGED_MESSAGE), both ferromq's own request codes.
//!
//! A pull that reaches a damaged record gets MESSAGE_DAMAGED and stays there: skipping a
//! message is never implicit. The skip is an administrator's explicit act, accepted only for
//! a record that really fails verification, and written as an ordinary reset record (so
//! `offsetHistory` shows who moved the group, when, and from where).

use ferromq_protocol::remoting::body::mq_map::encode_fastjson;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::{ExtFieldsExt, HeaderError, RemotingCommand};
use ferromq_store::offsets::OffsetEntry;
use ferromq_store::{ReadError, TagFilter};

use super::access::{self, Request};
use super::reset::{apply, known_group, ResetPlan};
use super::{bad_header, success};
use crate::context::BrokerContext;

/// Client id recorded on the reset record a skip writes.
const SKIP_CLIENT_ID: &str = "admin-skip-damaged";

/// QUARANTINE_LIST: the store's quarantined ranges as JSON.
pub(super) fn list(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let snapshot = ctx.store.quarantined();
    let ranges: Vec<serde_json::Value> = snapshot
        .ranges
        .iter()
        .map(|range| {
            serde_json::json!({
                "physOffset": range.phys_offset,
                "len": range.len,
                "kind": range.kind.as_str(),
                "reason": range.reason,
            })
        })
        .collect();
    let body = serde_json::json!({
        "total": snapshot.total,
        "notListed": snapshot.not_listed,
        "ranges": ranges,
    });
    success(command).with_body(body.to_string().into_bytes())
}

/// The fields of a SKIP_DAMAGED_MESSAGE request.
struct SkipRequest {
    group: String,
    topic: String,
    queue_id: u32,
    queue_offset: u64,
}

fn parse_skip(command: &RemotingCommand) -> Result<Result<SkipRequest, String>, HeaderError> {
    let ext = &command.ext_fields;
    let group = ext.get_str("group")?.to_string();
    let topic = ext.get_str("topic")?.to_string();
    let queue_id = ext.get_i32("queueId")?;
    let queue_offset = ext.get_i64("queueOffset")?;
    if queue_id < 0 || queue_offset < 0 {
        return Ok(Err(format!(
            "queueId {queue_id} and queueOffset {queue_offset} must not be negative"
        )));
    }
    Ok(Ok(SkipRequest {
        group,
        topic,
        queue_id: queue_id as u32,
        queue_offset: queue_offset as u64,
    }))
}

/// SKIP_DAMAGED_MESSAGE: reset (group, topic, queue) to `queueOffset + 1`, only when the
/// record at `queueOffset` is damaged.
pub(super) async fn skip(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let request = match parse_skip(command) {
        Ok(Ok(request)) => request,
        Ok(Err(remark)) => return command.reply(response::INVALID_PARAMETER, Some(remark)),
        Err(error) => return bad_header(command, error),
    };
    let SkipRequest {
        group,
        topic,
        queue_id,
        queue_offset,
    } = &request;
    // A skip is a reset: never of an internal group or a reserved topic.
    if let Err(refusal) = access::client_offsets(ctx, group, topic, Request::Reset) {
        return refusal.reply(command);
    }
    if ctx.topics.get(topic).is_none() {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {topic} does not exist")),
        );
    }
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
    let phys_offset = match damaged_at(ctx, topic, *queue_id, *queue_offset).await {
        Ok(phys_offset) => phys_offset,
        Err(remark) => return command.reply(response::INVALID_PARAMETER, Some(remark)),
    };
    let plan = ResetPlan {
        group,
        topic,
        entries: vec![OffsetEntry {
            topic: topic.clone(),
            queue_id: *queue_id,
            offset: queue_offset + 1,
        }],
        client_id: SKIP_CLIENT_ID,
        cause: format!(
            "admin skipped the damaged record at queue offset {queue_offset} \
             (CommitLog offset {phys_offset})"
        ),
        timestamp: 0,
        cpp_request: false,
    };
    match apply(ctx, plan).await {
        Ok(done) => {
            let mut reply = success(command).with_body(encode_fastjson(&done.body));
            reply
                .ext_fields
                .insert("generation".into(), done.generation.to_string());
            reply
                .ext_fields
                .insert("physOffset".into(), phys_offset.to_string());
            reply
        }
        Err((code, remark)) => command.reply(code, Some(remark)),
    }
}

/// The CommitLog offset of the damaged record at `queue_offset`, or why there is none.
async fn damaged_at(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
) -> Result<u64, String> {
    let store = ctx.store.clone();
    let owned_topic = topic.to_string();
    // Reading the log is blocking I/O; keep it off the async workers.
    let read = tokio::task::spawn_blocking(move || {
        store.get_messages(
            &owned_topic,
            queue_id,
            queue_offset,
            1,
            usize::MAX,
            &TagFilter::All,
        )
    })
    .await
    .map_err(|join| format!("the read of {topic}/{queue_id} failed: {join}"))?;
    match read {
        Err(ReadError::Damaged {
            queue_offset: damaged,
            phys_offset,
            ..
        }) if damaged == queue_offset => Ok(phys_offset),
        Err(error) => Err(format!(
            "cannot tell whether {topic}/{queue_id} offset {queue_offset} is damaged: {error}"
        )),
        Ok(result) if result.messages.first().map(|m| m.queue_offset) == Some(queue_offset) => {
            Err(format!(
                "the record at {topic}/{queue_id} offset {queue_offset} is not damaged (it reads \
                 and verifies); move consumers with resetOffsetByTime instead"
            ))
        }
        Ok(result) => Err(format!(
            "{topic}/{queue_id} has no record at offset {queue_offset} (queue range [{}, {}))",
            result.min_offset, result.max_offset
        )),
    }
}
