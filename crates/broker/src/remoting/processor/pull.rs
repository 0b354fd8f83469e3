//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): decode, call `core::pull` (where every rule
//! lives), answer.
//!
//! Status mapping (reference §9): Found → SUCCESS; nothing new at the tail (after any hold) →
//! PULL_NOT_FOUND; all scanned entries filtered out → PULL_RETRY_IMMEDIATELY; offset below the
//! min or beyond the max, or a reset to follow → PULL_OFFSET_MOVED with the offset to use.
//! The four required reply fields are always present. RocketMQ's sysFlag bits and negative
//! "none" values end here.
//!
//! With `transferMsgByHeap=false` on a plain TCP connection the messages are read as file
//! regions and the reply's records go out with zero copy (`remoting::zero_copy`), unless the
//! store finds them small and apart (one `sendfile` call each would cost more than a copy):
//! then, as otherwise (the default, TLS, or `sendfile` found unusable), they are read and
//! verified into the body, a damaged record quarantined and reported as MESSAGE_DAMAGED.

use std::time::Duration;

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::{GetResult, GetStatus, Sendable, StoredMessage};

use super::bad_header;
use super::code_map::error_reply;
use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::core::pull::{
    self, PullRead, PullRequest, Pulled, Subscription, PULL_BYTES_MAX, PULL_COUNT_MAX,
};
use crate::observability::transfer::Fallback;
use crate::remoting::outbound::{Outbound, RecordsReply, RegionReply};
use crate::sessions::registry::ClientChannel;

/// Pull sysFlag: the request carries a commit in `commitOffset`.
pub const PULL_SYSFLAG_COMMIT_OFFSET: i32 = 0x1;
/// Pull sysFlag: the broker may hold the request (long polling).
pub const PULL_SYSFLAG_SUSPEND: i32 = 0x2;
/// Pull sysFlag: the request carries its subscription expression.
pub const PULL_SYSFLAG_SUBSCRIPTION: i32 = 0x4;

pub(super) async fn handle(
    ctx: &std::sync::Arc<BrokerContext>,
    channel: &ClientChannel,
    principal: &Principal,
    command: &RemotingCommand,
) -> Outbound {
    let header = match command.decode_header::<PullMessageRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error).into(),
    };
    let request = request_of(ctx, header);
    match transfer_of(ctx, channel) {
        Transfer::ZeroCopy => {
            match pull_with::<Sendable>(ctx, channel, principal, command, &request).await {
                Ok((head, messages)) if messages.is_empty() => head.into(),
                Ok((head, messages)) => sendable_reply(ctx, command, head, messages),
                Err(reply) => reply.into(),
            }
        }
        Transfer::Heap(fallback) => {
            match pull_with::<StoredMessage>(ctx, channel, principal, command, &request).await {
                Ok((head, messages)) if messages.is_empty() => head.into(),
                Ok((head, messages)) => {
                    let transfer = &ctx.metrics.transfer;
                    transfer.reply(false);
                    if let Some(reason) = fallback {
                        transfer.fallback(reason, "transferMsgByHeap=false");
                    }
                    let records = messages.into_iter().map(|m| m.bytes).collect();
                    Outbound::Records(RecordsReply::new(head, records))
                }
                Err(reply) => reply.into(),
            }
        }
    }
}

/// The reply to a zero-copy pull: its regions for the writer to send (counted there, as it
/// may still have to copy), or, when the store found the records small and apart
/// (`ferromq_store::ZERO_COPY_SEND_BYTES_MIN`), the records it read and verified instead,
/// counted as copied. The store decides once per read, so the messages are all of one kind;
/// anything else would be a store defect, refused as SYSTEM_ERROR rather than half sent.
fn sendable_reply(
    ctx: &BrokerContext,
    command: &RemotingCommand,
    head: RemotingCommand,
    messages: Vec<Sendable>,
) -> Outbound {
    let count = messages.len();
    if matches!(messages.first(), Some(Sendable::Copied(_))) {
        let records: Vec<_> = messages
            .into_iter()
            .filter_map(|m| match m {
                Sendable::Copied(m) => Some(m.bytes),
                Sendable::Region(_) => None,
            })
            .collect();
        if records.len() == count {
            let transfer = &ctx.metrics.transfer;
            transfer.reply(false);
            transfer.fallback(Fallback::SmallRecords, "a pull of small, scattered records");
            return Outbound::Records(RecordsReply::new(head, records));
        }
    } else {
        let regions: Vec<_> = messages
            .into_iter()
            .filter_map(|m| match m {
                Sendable::Region(m) => Some(m),
                Sendable::Copied(_) => None,
            })
            .collect();
        if regions.len() == count {
            return Outbound::Regions(RegionReply::new(head, regions));
        }
    }
    command
        .reply(
            response::SYSTEM_ERROR,
            Some("a zero-copy read mixed copied records and file regions".into()),
        )
        .into()
}

/// How a pull reply carries its messages.
enum Transfer {
    /// Read into memory and verified; `Some`: zero copy was asked for but cannot be used.
    Heap(Option<Fallback>),
    /// File regions sent by the connection's writer.
    ZeroCopy,
}

/// `transferMsgByHeap` now, for this connection.
fn transfer_of(ctx: &BrokerContext, channel: &ClientChannel) -> Transfer {
    if ctx.runtime_config.transfer_msg_by_heap() {
        Transfer::Heap(None)
    } else if !channel.plain_tcp {
        Transfer::Heap(Some(Fallback::Tls))
    } else if ctx.metrics.transfer.sendfile_unusable() {
        Transfer::Heap(Some(Fallback::SendfileUnsupported))
    } else {
        Transfer::ZeroCopy
    }
}

/// Runs the pull through the core, reading messages as `M`; the reply without its body and
/// the messages it carries (none unless SUCCESS), or the whole reply of a refusal or move.
async fn pull_with<M: PullRead>(
    ctx: &std::sync::Arc<BrokerContext>,
    channel: &ClientChannel,
    principal: &Principal,
    command: &RemotingCommand,
    request: &PullRequest,
) -> Result<(RemotingCommand, Vec<M>), RemotingCommand> {
    let caller = ctx.sessions.caller(channel.id).granted(principal);
    // The writer of a closed connection drops its receiver.
    let closed = channel.tx.closed();
    match pull::pull::<M>(ctx, &caller, request, &channel.held_pulls, closed).await {
        Ok(Pulled::Read(result)) => {
            let suggest = pull::suggested_broker(ctx, &result);
            Ok(reply_for(command, request.offset, result, suggest))
        }
        Ok(Pulled::Moved { offset, min, max }) => Err(command
            .reply(
                response::PULL_OFFSET_MOVED,
                Some("the group's offset was reset".into()),
            )
            .with_header(&response_header(offset, min, max, 0))),
        Err(error) => Err(error_reply(command, &error)),
    }
}

/// The core's request from the wire header (its strings moved, not copied).
fn request_of(ctx: &BrokerContext, header: PullMessageRequestHeader) -> PullRequest {
    let hold = (header.sys_flag & PULL_SYSFLAG_SUSPEND != 0).then(|| {
        Duration::from_millis(
            (header.suspend_timeout_millis.max(0) as u64)
                .min(ctx.runtime_config.broker_suspend_max_time_millis()),
        )
    });
    let expression_type = header.expression_type.as_deref().unwrap_or("TAG");
    let subscription = if !expression_type.eq_ignore_ascii_case("TAG") {
        Subscription::Unsupported(expression_type.to_string())
    } else {
        match header.subscription {
            Some(expression) if header.sys_flag & PULL_SYSFLAG_SUBSCRIPTION != 0 => {
                Subscription::Tags(expression)
            }
            _ => Subscription::Registered,
        }
    };
    PullRequest {
        group: header.consumer_group,
        topic: header.topic,
        queue_id: u32::try_from(header.queue_id).ok(),
        offset: header.queue_offset.max(0) as u64,
        max_count: (header.max_msg_nums.max(1) as usize).min(PULL_COUNT_MAX),
        max_bytes: header
            .max_msg_bytes
            .map_or(PULL_BYTES_MAX, |b| (b.max(1) as usize).min(PULL_BYTES_MAX)),
        hold,
        subscription,
        commit: (header.sys_flag & PULL_SYSFLAG_COMMIT_OFFSET != 0)
            .then(|| u64::try_from(header.commit_offset).ok()),
    }
}

fn response_header(next: u64, min: u64, max: u64, suggest: u64) -> PullMessageResponseHeader {
    PullMessageResponseHeader {
        suggest_which_broker_id: suggest as i64,
        next_begin_offset: next as i64,
        min_offset: min as i64,
        max_offset: max as i64,
        offset_delta: None,
        topic_sys_flag: None,
        group_sys_flag: None,
        forbidden_type: None,
    }
}

/// The reply to a read, without its body, and the messages its body carries (none unless
/// SUCCESS).
fn reply_for<M>(
    command: &RemotingCommand,
    offset: u64,
    result: GetResult<M>,
    suggest: u64,
) -> (RemotingCommand, Vec<M>) {
    let (code, next) = match result.status {
        GetStatus::Found => (response::SUCCESS, result.next_begin_offset),
        GetStatus::NoMatchedMessage => (response::PULL_RETRY_IMMEDIATELY, result.next_begin_offset),
        GetStatus::OffsetOverflowOne => (response::PULL_NOT_FOUND, offset),
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if offset == 0 => {
            (response::PULL_NOT_FOUND, 0)
        }
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => {
            (response::PULL_OFFSET_MOVED, 0)
        }
        GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly => {
            (response::PULL_OFFSET_MOVED, result.next_begin_offset)
        }
    };
    let header = response_header(next, result.min_offset, result.max_offset, suggest);
    let reply = command.reply(code, None).with_owned_header(header);
    if code == response::SUCCESS {
        (reply, result.messages)
    } else {
        (reply, Vec::new())
    }
}
