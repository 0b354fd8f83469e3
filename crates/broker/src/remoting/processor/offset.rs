//! QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15): decode, call the core
//! (`core::offsets`, where every rule lives), answer.
//!
//! Protocol translation only:
//! - RocketMQ's magic values exist only here (invariant 7): a negative commit (ali-ons sends
//!   -1) is answered SUCCESS, counted and never reaches the core; "no offset" is
//!   QUERY_NOT_FOUND.
//! - The ext field `ferromqReplicaRead=true` on a query asks a replica for its own view (a
//!   diagnostic read; see `core::offsets::query`).
//! - The ext field [`CORRECTION_EXT`]`=true` marks ferromq's correction after OFFSET_ILLEGAL;
//!   its SUCCESS reply carries [`GENERATION_EXT`] (also on an offline reset's).

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use super::bad_header;
use super::code_map::error_reply;
use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::core::offsets::{self, CommitKind, CommitRequest, Committed};
use crate::sessions::registry::ClientChannel;

use ferromq_protocol::remoting::extensions::REPLICA_READ_EXT;
/// Ext fields of a correction (request) and of its SUCCESS reply (the new generation).
pub use ferromq_protocol::remoting::extensions::{CORRECTION_EXT, GENERATION_EXT};

pub(super) async fn query(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<QueryConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let Ok(queue_id) = u32::try_from(header.queue_id) else {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!("queueId {} is negative", header.queue_id)),
        );
    };
    let zero_if_not_found = header.set_zero_if_not_found != Some(false);
    let replica_read = command
        .ext_fields
        .get(REPLICA_READ_EXT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    match offsets::query(
        ctx,
        offsets::QueryTarget {
            group: &header.consumer_group,
            topic: &header.topic,
            queue_id,
        },
        zero_if_not_found,
        replica_read,
    )
    .await
    {
        Ok(offset) => {
            command
                .reply(response::SUCCESS, None)
                .with_header(&QueryConsumerOffsetResponseHeader {
                    offset: offset as i64,
                })
        }
        Err(error) => error_reply(command, &error),
    }
}

pub(super) async fn update(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    principal: &Principal,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<UpdateConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    if let Err(refusal) = crate::core::access::client_offsets(
        ctx,
        &header.consumer_group,
        &header.topic,
        crate::core::access::Request::Commit,
    ) {
        return error_reply(command, &refusal);
    }
    let (Ok(offset), Ok(queue_id)) = (
        u64::try_from(header.commit_offset),
        u32::try_from(header.queue_id),
    ) else {
        offsets::count_negative_commit(ctx);
        return command.reply(response::SUCCESS, Some("negative offset ignored".into()));
    };
    let request = CommitRequest {
        group: header.consumer_group,
        topic: header.topic,
        queue_id,
        offset,
        kind: if is_correction(command) {
            CommitKind::Correction
        } else {
            CommitKind::Update
        },
    };
    let caller = ctx.sessions.caller(channel.id).granted(principal);
    match offsets::commit(ctx, &caller, &request).await {
        Ok(Committed::Stored) => command.reply(response::SUCCESS, None),
        Ok(Committed::OfflineReset { .. }) => command.reply(response::SUCCESS, None),
        Ok(Committed::Corrected { generation }) => {
            let mut reply = command.reply(response::SUCCESS, None);
            reply
                .ext_fields
                .insert(GENERATION_EXT, generation.to_string());
            reply
        }
        Err(error) => error_reply(command, &error),
    }
}

fn is_correction(command: &RemotingCommand) -> bool {
    command
        .ext_fields
        .get(CORRECTION_EXT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
