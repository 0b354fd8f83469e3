//! Requests the broker forwards to one consumer client and whose reply it relays as it is,
//! as RocketMQ's broker does:
//! - GET_CONSUMER_RUNNING_INFO (307, `mqadmin consumerStatus`): forwarded unchanged (header,
//!   ext fields, body); the client answers a `ConsumerRunningInfo` body;
//! - CONSUME_MESSAGE_DIRECTLY (309, `mqadmin queryMsgById -g -d`, the dashboard's resend): the
//!   broker reads the message its offset message id names and forwards it as the body, with
//!   `brokerName` set to its own; the client consumes it and answers a
//!   `ConsumeMessageDirectlyResult` body. A message id that does not name a stored message is
//!   refused before anything is forwarded.
//!
//! Refusals, each with a remark naming the group and client, counted in
//! `ferromq_requests_refused_total{request="client"}`:
//! - the client is not a live member of the group: SYSTEM_ERROR, `consumer_not_online`;
//! - the client does not answer within [`CONSUMER_CALL_TIMEOUT`]: CONSUME_MSG_TIMEOUT,
//!   `consumer_no_answer`;
//! - its connection closes, or too many calls wait on it (`sessions::calls`): SYSTEM_ERROR,
//!   `consumer_no_answer`.

use std::time::Duration;

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::client::{
    ConsumeMessageDirectlyRequestHeader, GetConsumerRunningInfoRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use super::bad_header;
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::sessions::calls::CallError;

/// How long the broker waits for a client's answer (RocketMQ's broker waits 10 s as well).
pub const CONSUMER_CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetConsumerRunningInfoRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let forward = RemotingCommand::new_request(
        request::GET_CONSUMER_RUNNING_INFO,
        command.ext_fields.clone(),
    );
    let forward = match &command.body {
        Some(body) => forward.with_body(body.clone()),
        None => forward,
    };
    call_consumer(
        ctx,
        command,
        &header.consumer_group,
        &header.client_id,
        forward,
    )
    .await
}

/// CONSUME_MESSAGE_DIRECTLY (309).
pub(super) async fn consume_directly(
    ctx: &BrokerContext,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<ConsumeMessageDirectlyRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let Some(offset) = offset_of_msg_id(&header.msg_id) else {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!(
                "msgId {} is not an offset message id (hex, its CommitLog offset in the last 16 digits)",
                header.msg_id
            )),
        );
    };
    let phys_offset = match access::commitlog_offset(ctx, offset, Request::ViewMessage) {
        Ok(offset) => offset,
        Err(refusal) => return super::code_map::error_reply(command, &refusal),
    };
    let message = match crate::core::lookup::message_at(ctx, phys_offset).await {
        Ok(bytes) => bytes,
        Err(refusal) => return super::code_map::error_reply(command, &refusal),
    };
    let mut ext = command.ext_fields.clone();
    ext.insert("brokerName".into(), ctx.config.broker_name.clone());
    let forward =
        RemotingCommand::new_request(request::CONSUME_MESSAGE_DIRECTLY, ext).with_body(message);
    call_consumer(
        ctx,
        command,
        &header.consumer_group,
        &header.client_id,
        forward,
    )
    .await
}

/// The CommitLog offset an offset message id names: its last 16 hex digits (IPv4 and IPv6
/// store hosts alike); `None` when it is not hex of a valid length.
fn offset_of_msg_id(msg_id: &str) -> Option<i64> {
    let id = msg_id.trim();
    if !(id.len() == 32 || id.len() == 56) || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let offset = u64::from_str_radix(&id[id.len() - 16..], 16).ok()?;
    i64::try_from(offset).ok()
}

/// Sends `forward` to `client` of `group` on its own connection and relays its reply to
/// `command`, or refuses (not online, no answer) with a remark naming both, counted.
async fn call_consumer(
    ctx: &BrokerContext,
    command: &RemotingCommand,
    group: &str,
    client: &str,
    forward: RemotingCommand,
) -> RemotingCommand {
    let Some(member) = ctx
        .clients
        .consumers(group)
        .into_iter()
        .find(|c| c.client_id == client)
    else {
        ctx.metrics
            .refused("consumer_not_online", Request::Client.as_str());
        return command.reply(
            response::SYSTEM_ERROR,
            Some(format!(
                "consumer {client} of group {group} is not online on this broker"
            )),
        );
    };
    let channel = &member.channel;
    match channel
        .calls
        .call(&channel.tx, forward, CONSUMER_CALL_TIMEOUT)
        .await
    {
        Ok(reply) => relay(command, reply),
        Err(error) => {
            ctx.metrics
                .refused("consumer_no_answer", Request::Client.as_str());
            let code = match error {
                CallError::Timeout(_) => response::CONSUME_MSG_TIMEOUT,
                _ => response::SYSTEM_ERROR,
            };
            command.reply(
                code,
                Some(format!(
                    "consumer {client} of group {group} did not answer: {error}"
                )),
            )
        }
    }
}

/// The client's reply, re-addressed to the tool's request (its opaque), code, remark, ext
/// fields and body kept.
fn relay(command: &RemotingCommand, reply: RemotingCommand) -> RemotingCommand {
    let mut out = command.reply(reply.code, reply.remark);
    out.ext_fields = reply.ext_fields;
    out.body = reply.body;
    out
}

#[cfg(test)]
mod tests {
    use super::offset_of_msg_id;

    #[test]
    fn offset_message_ids_name_their_commitlog_offset() {
        // IPv4 store host (8 bytes) + offset (8 bytes), as hex.
        assert_eq!(
            offset_of_msg_id("7F00000100002A9F00000000000004D2"),
            Some(1234)
        );
        // IPv6 store host (20 bytes) + offset.
        let v6 = format!("{}{:016X}", "0".repeat(40), 77);
        assert_eq!(offset_of_msg_id(&v6), Some(77));
        assert_eq!(offset_of_msg_id("not hex at all, but 32 chars!!!!"), None);
        assert_eq!(offset_of_msg_id("ABCDEF"), None);
        assert_eq!(
            offset_of_msg_id("7F00000100002A9FFFFFFFFFFFFFFFFF"),
            None,
            "an offset past i64"
        );
    }
}
