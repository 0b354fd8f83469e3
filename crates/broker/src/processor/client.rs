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

use super::{bad_header, success};
use crate::clients::ClientChannel;
use crate::context::BrokerContext;
use crate::topics::{topic_with_queues, RETRY_PREFIX};

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
    for consumer in &data.consumer_data_set {
        let group = &consumer.group_name;
        let retry = match ctx.groups.ensure(group) {
            Ok(config) => config.retry_queue_nums.max(1) as u32,
            Err(error) => {
                return command.reply(response::INVALID_PARAMETER, Some(error.to_string()))
            }
        };
        // Consumers subscribe to their retry topic; it must have a route.
        let retry_topic = format!("{RETRY_PREFIX}{group}");
        if ctx.topics.get(&retry_topic).is_none() {
            if let Err(error) = ctx
                .topics
                .put_if_absent(topic_with_queues(&retry_topic, retry))
            {
                return command.reply(response::SYSTEM_ERROR, Some(error.to_string()));
            }
            ctx.register_now.notify_one();
        }
    }
    if !data.client_id.is_empty() {
        ctx.sessions.bind(channel.id, &data.client_id);
    }
    let changed = ctx.clients.heartbeat(&channel, &data);
    ctx.notify_ids_changed(&changed);
    success(command).with_header(&HeartbeatResponseHeader {
        is_support_heart_beat_v2: Some(false),
        is_sub_change: Some(!changed.is_empty()),
    })
}

pub(super) fn unregister(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<UnregisterClientRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let changed = ctx.clients.unregister(
        &header.client_id,
        header.producer_group.as_deref(),
        header.consumer_group.as_deref(),
    );
    ctx.notify_ids_changed(&changed);
    success(command)
}

pub(super) fn consumer_list(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetConsumerListByGroupRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let ids = ctx.clients.consumer_ids(&header.consumer_group);
    if ids.is_empty() {
        return command.reply(
            response::SYSTEM_ERROR,
            Some(format!("no consumer for group {}", header.consumer_group)),
        );
    }
    success(command).with_body(encode_json(&ConsumerListBody {
        consumer_id_list: ids,
    }))
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
    let granted = ctx
        .locks
        .lock(&body.consumer_group, &body.client_id, &queues);
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
    ctx.locks
        .unlock(&body.consumer_group, &body.client_id, &queues);
    success(command)
}
