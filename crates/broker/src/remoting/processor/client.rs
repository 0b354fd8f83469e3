//! Client bookkeeping: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP
//! (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42).

use ferromq_protocol::remoting::body::heartbeat::HeartbeatData;
use ferromq_protocol::remoting::body::misc::{
    ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody,
};
use ferromq_protocol::remoting::body::{decode_json, encode_json};
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::client::{
    GetConsumerListByGroupRequestHeader, HeartbeatResponseHeader, UnregisterClientRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use super::code_map::error_reply;
use super::{bad_header, success};
use crate::context::BrokerContext;
use crate::core::membership;
use crate::sessions::registry::ClientChannel;

pub(super) fn heartbeat(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let body = command.body.as_deref().unwrap_or_default();
    let data: HeartbeatData = match decode_json(body) {
        Ok(data) => data,
        Err(error) => {
            return command.reply(
                response::INVALID_PARAMETER,
                Some(format!("bad heartbeat body: {error}")),
            )
        }
    };
    let channel = ClientChannel {
        language: command.language,
        version: command.version,
        ..channel.clone()
    };
    match membership::heartbeat(ctx, &channel, &data) {
        Ok(changed) => success(command).with_header(&HeartbeatResponseHeader {
            is_support_heart_beat_v2: Some(false),
            is_sub_change: Some(changed),
        }),
        Err(refusal) => error_reply(command, &refusal),
    }
}

pub(super) fn unregister(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<UnregisterClientRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    membership::unregister(
        ctx,
        &header.client_id,
        header.producer_group.as_deref(),
        header.consumer_group.as_deref(),
    );
    success(command)
}

pub(super) fn consumer_list(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetConsumerListByGroupRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    match membership::consumer_ids(ctx, &header.consumer_group) {
        Ok(ids) => success(command).with_body(encode_json(&ConsumerListBody {
            consumer_id_list: ids,
        })),
        Err(refusal) => error_reply(command, &refusal),
    }
}

pub(super) fn lock_batch(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let body: LockBatchRequestBody = match decode_json(command.body.as_deref().unwrap_or_default())
    {
        Ok(body) => body,
        Err(error) => {
            return command.reply(
                response::INVALID_PARAMETER,
                Some(format!("bad lock body: {error}")),
            )
        }
    };
    let queues: Vec<_> = body.mq_set.into_iter().collect();
    let granted = membership::lock(ctx, &body.consumer_group, &body.client_id, &queues);
    success(command).with_body(encode_json(&LockBatchResponseBody {
        lock_ok_mq_set: granted.into_iter().collect(),
    }))
}

pub(super) fn unlock_batch(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let body: LockBatchRequestBody = match decode_json(command.body.as_deref().unwrap_or_default())
    {
        Ok(body) => body,
        Err(error) => {
            return command.reply(
                response::INVALID_PARAMETER,
                Some(format!("bad unlock body: {error}")),
            )
        }
    };
    let queues: Vec<_> = body.mq_set.into_iter().collect();
    membership::unlock(ctx, &body.consumer_group, &body.client_id, &queues);
    success(command)
}
