//! Request processors, one module per request family, and the dispatch by request code.
//!
//! Every request gets exactly one reply (one-way requests get none): a processor never
//! panics on client input; a header it cannot read is INVALID_PARAMETER with a remark naming
//! the field, an unknown code REQUEST_CODE_NOT_SUPPORTED naming the code.

mod admin;
mod authorise;
mod batch;
mod broker_info;
mod client;
mod clone;
pub mod code_map;
mod connection;
mod consumed_by;
mod damaged;
mod history;
mod offset;
mod pull;
mod query;
mod reset;
mod running_info;
mod send;
mod send_back;
mod transaction;

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::{request_code_name, HeaderError, RemotingCommand};

use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::remoting::outbound::Outbound;
use crate::sessions::registry::ClientChannel;

pub use crate::core::scheduler::{
    run_scheduler, PROPERTY_DEAD_LETTER_REASON, SCHEDULE_DLQ_TOPIC, SCHEDULE_GROUP, SCHEDULE_TOPIC,
};
pub use pull::PULL_SYSFLAG_COMMIT_OFFSET;

/// Handles one request and builds its reply: a frame, or a pull reply whose records go out
/// from the files (`transferMsgByHeap=false`, see `super::zero_copy`).
pub async fn handle(
    ctx: &std::sync::Arc<BrokerContext>,
    channel: &ClientChannel,
    command: RemotingCommand,
) -> Outbound {
    if ctx.store.is_closed() {
        // Never answer from a stopped store: "no offset" and "could not read" must not mix.
        return command
            .reply(
                response::SERVICE_NOT_AVAILABLE,
                Some("the broker is shutting down".into()),
            )
            .into();
    }
    // ACL: every request kind, once, before anything else reads it.
    let principal = match authorise::check(ctx, channel.peer.ip(), &command) {
        Ok(principal) => principal,
        Err(refused) => return refused.into(),
    };
    if matches!(
        command.code,
        request::PULL_MESSAGE | request::LITE_PULL_MESSAGE
    ) {
        return pull::handle(ctx, channel, &principal, &command).await;
    }
    dispatch(ctx, channel, principal, command).await.into()
}

/// Every request but pulls, by code.
async fn dispatch(
    ctx: &std::sync::Arc<BrokerContext>,
    channel: &ClientChannel,
    principal: Principal,
    command: RemotingCommand,
) -> RemotingCommand {
    match command.code {
        request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
            send::handle(ctx, channel, &command).await
        }
        request::QUERY_CONSUMER_OFFSET => offset::query(ctx, &command).await,
        request::UPDATE_CONSUMER_OFFSET => offset::update(ctx, channel, &principal, &command).await,
        request::GET_MAX_OFFSET => admin::max_offset(ctx, &command).await,
        request::GET_MIN_OFFSET => admin::min_offset(ctx, &command),
        request::SEARCH_OFFSET_BY_TIMESTAMP => admin::search_offset(ctx, &command),
        request::GET_EARLIEST_MSG_STORETIME => admin::earliest_store_time(ctx, &command),
        request::VIEW_MESSAGE_BY_ID => admin::view_message(ctx, &command).await,
        request::HEART_BEAT => client::heartbeat(ctx, channel, &command),
        request::UNREGISTER_CLIENT => client::unregister(ctx, &command),
        request::GET_CONSUMER_LIST_BY_GROUP => client::consumer_list(ctx, &command),
        request::LOCK_BATCH_MQ => client::lock_batch(ctx, &command),
        request::UNLOCK_BATCH_MQ => client::unlock_batch(ctx, &command),
        request::CONSUMER_SEND_MSG_BACK => send_back::handle(ctx, channel, &command).await,
        request::END_TRANSACTION => transaction::handle(ctx, &command).await,
        request::UPDATE_AND_CREATE_TOPIC => admin::create_topic(ctx, &command).await,
        request::DELETE_TOPIC_IN_BROKER => admin::delete_topic(ctx, &command).await,
        request::GET_ALL_TOPIC_CONFIG => admin::all_topic_config(ctx, &command),
        request::GET_TOPIC_CONFIG => admin::topic_config(ctx, &command),
        request::GET_TOPIC_STATS_INFO => admin::topic_stats(ctx, &command).await,
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => admin::create_group(ctx, &command).await,
        request::DELETE_SUBSCRIPTIONGROUP => admin::delete_group(ctx, &command).await,
        request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => admin::all_groups(ctx, &command),
        request::GET_SUBSCRIPTIONGROUP_CONFIG => admin::group_config(ctx, &command),
        request::GET_CONSUME_STATS => admin::consume_stats(ctx, &command).await,
        request::INVOKE_BROKER_TO_RESET_OFFSET => reset::handle(ctx, &principal, &command).await,
        crate::codes::OFFSET_HISTORY => history::handle(ctx, &command).await,
        crate::codes::QUARANTINE_LIST => damaged::list(ctx, &command),
        crate::codes::SKIP_DAMAGED_MESSAGE => damaged::skip(ctx, &principal, &command).await,
        request::GET_BROKER_RUNTIME_INFO => broker_info::runtime_info(ctx, &command),
        request::GET_BROKER_CONFIG => broker_info::get_config(ctx, &command),
        request::GET_BROKER_HA_STATUS => broker_info::ha_status(ctx, &command),
        request::GET_BROKER_EPOCH_CACHE => broker_info::epoch_cache(ctx, &command),
        request::UPDATE_BROKER_CONFIG => broker_info::update_config(ctx, &command),
        request::NOTIFY_BROKER_ROLE_CHANGED => broker_info::role_changed(ctx, &command),
        request::QUERY_MESSAGE => query::handle(ctx, &command).await,
        request::CLONE_GROUP_OFFSET => clone::handle(ctx, &principal, &command).await,
        request::GET_CONSUMER_CONNECTION_LIST => connection::handle(ctx, &command),
        request::QUERY_TOPIC_CONSUME_BY_WHO => consumed_by::handle(ctx, &command).await,
        request::GET_CONSUMER_RUNNING_INFO => running_info::handle(ctx, &command).await,
        code => unsupported(ctx, &command, code),
    }
}

/// REQUEST_CODE_NOT_SUPPORTED naming the code, counted in
/// `ferromq_requests_unsupported_total`.
fn unsupported(ctx: &BrokerContext, command: &RemotingCommand, code: i32) -> RemotingCommand {
    ctx.metrics.unsupported(code);
    command.reply(
        response::REQUEST_CODE_NOT_SUPPORTED,
        Some(format!(
            "request code {code} ({}) is not supported by ferromq",
            request_code_name(code).unwrap_or("unknown")
        )),
    )
}

/// The reply to a request whose header could not be read.
pub(crate) fn bad_header(command: &RemotingCommand, error: HeaderError) -> RemotingCommand {
    command.reply(
        response::INVALID_PARAMETER,
        Some(format!("bad request header: {error}")),
    )
}

/// A SUCCESS reply (always with a non-null ext map, which Java clients read unchecked).
pub(crate) fn success(command: &RemotingCommand) -> RemotingCommand {
    command.reply(response::SUCCESS, None)
}
