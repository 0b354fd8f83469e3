//! What a client or an administrator may name: the guard every request passes before it
//! touches a topic or a group.
//!
//! - A name that breaks RocketMQ's rules ([`ferromq_protocol::names::validate`]) is refused
//!   before anything is created from it.
//! - A reserved topic ([`names::is_reserved_topic`]: the delay scheduler's, the transaction
//!   topics, the offsets topic, RocketMQ's system topics) is written, committed, reset, cloned,
//!   updated and deleted by the broker only: a client send to it, or an offset operation or
//!   admin change naming it, is refused with NO_PERMISSION (16). Otherwise a client could
//!   write through the scheduler to any queue, or forge offset records.
//! - An internal group ([`names::is_internal_group`]: `%SCHEDULE%`, RocketMQ's
//!   `CID_RMQ_SYS_` groups) is committed by the broker only, through the store directly; a
//!   client commit, pull, reset, clone or deletion naming it is refused with NO_PERMISSION.
//!   A client commit of `%SCHEDULE%` would silently drop acknowledged delayed messages.
//!
//! Every refusal carries a remark saying why and is counted in
//! `ferromq_requests_refused_total{reason,request}`. A bad name in a send is an invalid
//! message (Java producers expect MESSAGE_ILLEGAL); elsewhere it is an invalid name.

use ferromq_protocol::names::{self, NameError};

use super::error::{Refusal, RefusalKind};
use crate::context::BrokerContext;

/// The operation a refused request asked for: the `request` label of the refusal counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE.
    Send,
    /// CONSUMER_SEND_MSG_BACK.
    SendBack,
    /// UPDATE_CONSUMER_OFFSET (commits, offline resets, corrections).
    Commit,
    /// PULL_MESSAGE and LITE_PULL_MESSAGE (and their piggy-backed commit).
    Pull,
    /// INVOKE_BROKER_TO_RESET_OFFSET.
    Reset,
    /// CLONE_GROUP_OFFSET.
    Clone,
    /// DELETE_TOPIC_IN_BROKER.
    DeleteTopic,
    /// UPDATE_AND_CREATE_TOPIC.
    UpdateTopic,
    /// DELETE_SUBSCRIPTIONGROUP.
    DeleteGroup,
    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP.
    UpdateGroup,
    /// VIEW_MESSAGE_BY_ID.
    ViewMessage,
    /// A delayed message's target, checked when it is accepted.
    Schedule,
    /// QUERY_CONSUMER_OFFSET.
    QueryOffset,
    /// GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME.
    QueueInfo,
    /// QUERY_MESSAGE (by key or unique key).
    QueryMessage,
    /// HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK/UNLOCK_BATCH_MQ.
    Client,
    /// END_TRANSACTION.
    EndTransaction,
    /// Every other administrators' request (topic, group and broker listings and stats,
    /// broker config, offset history, damaged records, role changes).
    Admin,
    /// Not a request: a connection refused before its first request (a failed TLS
    /// handshake, a plain client under `enforcing`).
    Connection,
}

impl Request {
    /// The label value (one of [`crate::observability::metrics::REFUSED_REQUESTS`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Request::Send => "send",
            Request::SendBack => "send_back",
            Request::Commit => "commit",
            Request::Pull => "pull",
            Request::Reset => "reset",
            Request::Clone => "clone",
            Request::DeleteTopic => "delete_topic",
            Request::UpdateTopic => "update_topic",
            Request::DeleteGroup => "delete_group",
            Request::UpdateGroup => "update_group",
            Request::ViewMessage => "view_message",
            Request::Schedule => "schedule",
            Request::QueryOffset => "query_offset",
            Request::QueueInfo => "queue_info",
            Request::QueryMessage => "query_message",
            Request::Client => "client",
            Request::EndTransaction => "end_transaction",
            Request::Admin => "admin",
            Request::Connection => "connection",
        }
    }

    /// What the request does to a name, for remarks.
    fn verb(self) -> &'static str {
        match self {
            Request::Send | Request::SendBack | Request::Schedule => "written by clients",
            Request::Commit | Request::Pull => "committed by clients",
            Request::Reset => "reset",
            Request::Clone => "cloned",
            Request::DeleteTopic | Request::DeleteGroup => "deleted",
            Request::UpdateTopic | Request::UpdateGroup => "created or updated",
            Request::ViewMessage | Request::QueryMessage => "viewed",
            Request::QueryOffset | Request::QueueInfo => "queried",
            Request::Client | Request::EndTransaction | Request::Admin | Request::Connection => {
                "used"
            }
        }
    }
}

/// Counts a refusal and builds it.
pub fn refuse(
    ctx: &BrokerContext,
    reason: &'static str,
    request: Request,
    kind: RefusalKind,
    remark: String,
) -> Refusal {
    ctx.metrics.refused(reason, request.as_str());
    tracing::debug!(reason, request = request.as_str(), %remark, "request refused");
    Refusal::new(kind, remark)
}

/// A name that breaks the rules (an invalid message when it is a send's topic).
pub fn invalid_name(ctx: &BrokerContext, request: Request, error: NameError) -> Refusal {
    let kind = match request {
        Request::Send => RefusalKind::InvalidMessage,
        _ => RefusalKind::InvalidName,
    };
    refuse(ctx, "invalid_name", request, kind, error.to_string())
}

/// Refuses a topic a client or administrator may not name in `request`: an invalid name, or a
/// reserved topic.
pub fn client_topic(ctx: &BrokerContext, topic: &str, request: Request) -> Result<(), Refusal> {
    names::validate_topic(topic).map_err(|e| invalid_name(ctx, request, e))?;
    reserved_topic(ctx, topic, request)
}

/// Refuses a reserved topic only (a deletion may name a topic stored before names were
/// checked: it must stay deletable).
pub fn reserved_topic(ctx: &BrokerContext, topic: &str, request: Request) -> Result<(), Refusal> {
    if names::is_reserved_topic(topic) {
        let remark = format!(
            "topic {topic} is reserved for the broker's own use (delay scheduler, transactions, \
             consumer offsets, system topics): it cannot be {}",
            request.verb()
        );
        return Err(refuse(
            ctx,
            "reserved_topic",
            request,
            RefusalKind::Forbidden,
            remark,
        ));
    }
    Ok(())
}

/// Refuses a group a client or administrator may not name in `request`: an invalid name, or
/// an internal group.
pub fn client_group(ctx: &BrokerContext, group: &str, request: Request) -> Result<(), Refusal> {
    names::validate_group(group).map_err(|e| invalid_name(ctx, request, e))?;
    internal_group(ctx, group, request)
}

/// Refuses an internal group only (a deletion may name a group stored before names were
/// checked: it must stay deletable).
pub fn internal_group(ctx: &BrokerContext, group: &str, request: Request) -> Result<(), Refusal> {
    if names::is_internal_group(group) {
        let remark = format!(
            "group {group} is internal to the broker (its offsets record the broker's own \
             progress): it cannot be {}",
            request.verb()
        );
        return Err(refuse(
            ctx,
            "internal_group",
            request,
            RefusalKind::Forbidden,
            remark,
        ));
    }
    Ok(())
}

/// [`client_group`] then [`client_topic`]: the guard of every offset operation.
pub fn client_offsets(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    request: Request,
) -> Result<(), Refusal> {
    client_group(ctx, group, request)?;
    client_topic(ctx, topic, request)
}

/// A CommitLog offset from a request: negative ones are refused (they used to read as 0).
pub fn commitlog_offset(
    ctx: &BrokerContext,
    offset: i64,
    request: Request,
) -> Result<u64, Refusal> {
    u64::try_from(offset).map_err(|_| {
        refuse(
            ctx,
            "bad_commitlog_offset",
            request,
            RefusalKind::InvalidArgument,
            format!("CommitLog offset {offset} is negative"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_label_is_one_the_metrics_sum() {
        let all = [
            Request::Send,
            Request::SendBack,
            Request::Commit,
            Request::Pull,
            Request::Reset,
            Request::Clone,
            Request::DeleteTopic,
            Request::UpdateTopic,
            Request::DeleteGroup,
            Request::UpdateGroup,
            Request::ViewMessage,
            Request::Schedule,
            Request::QueryOffset,
            Request::QueueInfo,
            Request::QueryMessage,
            Request::Client,
            Request::EndTransaction,
            Request::Admin,
            Request::Connection,
        ];
        for request in all {
            assert!(
                crate::observability::metrics::REFUSED_REQUESTS.contains(&request.as_str()),
                "{request:?}"
            );
        }
        assert_eq!(
            all.len(),
            crate::observability::metrics::REFUSED_REQUESTS.len()
        );
    }
}
