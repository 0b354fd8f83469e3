//! Damaged records: listing the store's quarantine (QUARANTINE_LIST) and moving a consumer
//! group past one damaged record (SKIP_DAMAGED_MESSAGE), both ferromq's own request codes.
//!
//! A pull that reaches a damaged record gets MESSAGE_DAMAGED and stays there: skipping a
//! message is never implicit. The skip is an administrator's explicit act, accepted only for
//! a record that really fails verification, and written as an ordinary reset record (so
//! `offsetHistory` shows who moved the group, when, and from where).

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::{ExtFieldsExt, HeaderError, RemotingCommand};

use super::code_map::error_reply;
use super::{bad_header, success};
use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::core::reset;

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
/// record at `queueOffset` is damaged (`core::reset::skip_damaged`).
pub(super) async fn skip(
    ctx: &BrokerContext,
    principal: &Principal,
    command: &RemotingCommand,
) -> RemotingCommand {
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
    match reset::skip_damaged(ctx, principal, group, topic, *queue_id, *queue_offset).await {
        Ok((done, phys_offset)) => {
            let body = super::reset::notify_reset(ctx, group, topic, &done, 0, false);
            let mut reply = super::reset::reset_reply(command, &body, done.generation);
            reply
                .ext_fields
                .insert("physOffset", phys_offset.to_string());
            reply
        }
        Err(error) => error_reply(command, &error),
    }
}
