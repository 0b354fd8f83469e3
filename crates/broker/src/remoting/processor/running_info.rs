//! GET_CONSUMER_RUNNING_INFO (307): `mqadmin consumerStatus` asks the broker, and the broker
//! forwards the request unchanged (header, ext fields, body) to the named client's own
//! connection and relays the client's reply (a `ConsumerRunningInfo` body) as it is, as
//! RocketMQ's broker does.
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
use ferromq_protocol::remoting::headers::client::GetConsumerRunningInfoRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::bad_header;
use crate::context::BrokerContext;
use crate::core::access::Request;
use crate::sessions::calls::CallError;

/// How long the broker waits for a client's answer (RocketMQ's broker waits 10 s as well).
pub const CONSUMER_CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetConsumerRunningInfoRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let group = &header.consumer_group;
    let client = &header.client_id;
    let Some(member) = ctx
        .clients
        .consumers(group)
        .into_iter()
        .find(|c| c.client_id == *client)
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
    let mut forward = RemotingCommand::new_request(
        request::GET_CONSUMER_RUNNING_INFO,
        command.ext_fields.clone(),
    );
    if let Some(body) = &command.body {
        forward = forward.with_body(body.clone());
    }
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
                    "consumer {client} of group {group} gave no running info: {error}"
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
