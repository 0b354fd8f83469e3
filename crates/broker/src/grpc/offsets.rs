//! PullMessage, UpdateOffset, GetOffset and QueryOffset: translations to and from
//! `core::pull`, `core::offsets` and the store's queue bounds (docs/grpc.md, reference
//! §4.12). Every rule of progress lives in the core; this file only maps fields and outcomes.
//!
//! Rules of this adapter:
//! 1. **One view of a group's offsets.** UpdateOffset is a commit through
//!    `core::offsets::commit` (an offset-commit record in the log, acknowledged per the
//!    durability policy: invariants 1 and 2) and GetOffset reads `core::offsets::query`, so a
//!    remoting consumer of the same group sees what a gRPC one committed, and the reverse.
//! 2. **Progress is monotone.** An UpdateOffset is a consumer's own progress
//!    (`CommitKind::Progress`): one lower than the stored offset is rejected with
//!    PRECONDITION_FAILED (42800) and the store's remark, and counted; it is never taken for
//!    an administrator's offline reset (invariant 3).
//! 3. **"No offset" is not "could not read".** GetOffset with nothing stored answers
//!    NOT_FOUND (40400) — OFFSET_NOT_FOUND (40404) is not safe for released clients — and an
//!    unreadable view INTERNAL_SERVER_ERROR (invariant 7). The `offset` field means something
//!    only with OK; there are no magic values.
//! 4. **A PullMessage stream** is `status`, the messages (each with its `queue_offset`), then
//!    `next_offset` whenever the queue was read. A refused request (no group, unknown topic,
//!    queue out of range, bad batch size) is its status alone. Nothing new, or nothing
//!    matching the filter, is MESSAGE_NOT_FOUND (40401) with the offset to continue from. An
//!    offset outside the queue, or a reset of the group to follow, is BAD_REQUEST (ILLEGAL_OFFSET
//!    40019 is not safe) with `next_offset` saying where to continue.
//! 5. **Identity.** UpdateOffset and PullMessage are a client's acts on the group's progress
//!    (fences follow clients, commits record who moved them), so they need the
//!    `x-mq-client-id` header (CLIENT_ID_REQUIRED otherwise). A held pull counts against its
//!    client's share of `pullHoldMaxPerConnection` and the broker's `pullHoldMax`.
//! 6. **QueryOffset** answers from the store: BEGINNING the queue's min offset, END its max
//!    (the next to be written, once dispatch covers every acknowledged record), TIMESTAMP the
//!    first offset stored at or after the time (the max when none is).

use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::grpc::pull_message_response::Content;
use ferromq_protocol::grpc::{self as pb, Code, FilterType, QueryOffsetPolicy};
use ferromq_store::{GetResult, GetStatus, TimeBoundary};
use tokio::sync::watch;

use super::consume::{duration, resource_name, stored_message_of, Placement, DEADLINE_HEADROOM};
use super::status::{commit_code, ok, pull_code, query_code, status};
use crate::context::BrokerContext;
use crate::core::offsets::{self, CommitKind, CommitRequest, QueryTarget};
use crate::core::pull::{self, PullRequest, Pulled, Subscription, PULL_BYTES_MAX, PULL_COUNT_MAX};
use crate::sessions::identity::Caller;

/// The connection id of every gRPC caller: tonic does not expose connections, and remoting
/// connections count from 1, so 0 names none of them (logs show the client id instead).
pub const GRPC_CONNECTION: u64 = 0;

/// Longest QueryOffset END waits for dispatch to cover the records acknowledged before it.
const CATCH_UP_MAX: Duration = Duration::from_millis(500);

/// The (group, topic, queue) an offset request names, or the status refusing it.
fn target(
    group: Option<&pb::Resource>,
    queue: Option<&pb::MessageQueue>,
) -> Result<(String, String, u32), pb::Status> {
    let group = resource_name(group, Code::IllegalConsumerGroup, "group")?;
    let (topic, queue_id) = queue_of(queue)?;
    Ok((group, topic, queue_id))
}

/// The topic and queue id of a required `message_queue`.
fn queue_of(queue: Option<&pb::MessageQueue>) -> Result<(String, u32), pb::Status> {
    let queue = queue.ok_or_else(|| status(Code::BadRequest, "message_queue is required"))?;
    let topic = resource_name(
        queue.topic.as_ref(),
        Code::IllegalTopic,
        "message_queue.topic",
    )?;
    let queue_id = u32::try_from(queue.id).map_err(|_| {
        status(
            Code::BadRequest,
            format!("message_queue.id {} is not a queue id", queue.id),
        )
    })?;
    Ok((topic, queue_id))
}

/// The caller `client_id` names (rule 5).
fn caller(client_id: String) -> Caller {
    Caller {
        connection: GRPC_CONNECTION,
        client_id: Some(client_id),
        access_key: None,
    }
}

/// An offset from the wire, or BAD_REQUEST for a negative one.
fn offset_of(offset: i64) -> Result<u64, pb::Status> {
    u64::try_from(offset)
        .map_err(|_| status(Code::BadRequest, format!("offset {offset} is negative")))
}

/// UpdateOffset (rules 1, 2): the status of the commit.
pub async fn update_offset(
    ctx: &BrokerContext,
    client_id: String,
    request: &pb::UpdateOffsetRequest,
) -> pb::Status {
    let commit = || -> Result<CommitRequest, pb::Status> {
        let (group, topic, queue_id) =
            target(request.group.as_ref(), request.message_queue.as_ref())?;
        Ok(CommitRequest {
            group,
            topic,
            queue_id,
            offset: offset_of(request.offset)?,
            kind: CommitKind::Progress,
        })
    };
    let commit = match commit() {
        Ok(commit) => commit,
        Err(refused) => return refused,
    };
    match offsets::commit(ctx, &caller(client_id), &commit).await {
        Ok(_) => ok(),
        Err(error) => status(commit_code(&error), error.to_string()),
    }
}

/// GetOffset (rules 1, 3).
pub async fn get_offset(
    ctx: &BrokerContext,
    request: &pb::GetOffsetRequest,
) -> pb::GetOffsetResponse {
    let refused = |status| pb::GetOffsetResponse {
        status: Some(status),
        offset: 0,
    };
    let (group, topic, queue_id) =
        match target(request.group.as_ref(), request.message_queue.as_ref()) {
            Ok(target) => target,
            Err(status) => return refused(status),
        };
    let target = QueryTarget {
        group: &group,
        topic: &topic,
        queue_id,
    };
    // No "0 when nothing is stored" (RocketMQ's setZeroIfNotFound): gRPC clients get "no
    // offset" as such.
    match offsets::query(ctx, target, false, false).await {
        Ok(offset) => pb::GetOffsetResponse {
            status: Some(ok()),
            offset: offset as i64,
        },
        Err(error) => refused(status(query_code(&error), error.to_string())),
    }
}

/// QueryOffset (rule 6).
pub async fn query_offset(
    ctx: &BrokerContext,
    request: &pb::QueryOffsetRequest,
) -> pb::QueryOffsetResponse {
    let answer = match queue_offset(ctx, request).await {
        Ok(offset) => (ok(), offset),
        Err(status) => (status, 0),
    };
    pb::QueryOffsetResponse {
        status: Some(answer.0),
        offset: answer.1 as i64,
    }
}

async fn queue_offset(
    ctx: &BrokerContext,
    request: &pb::QueryOffsetRequest,
) -> Result<u64, pb::Status> {
    let (topic, queue_id) = queue_of(request.message_queue.as_ref())?;
    let config = ctx
        .topics
        .get(&topic)
        .ok_or_else(|| status(Code::TopicNotFound, format!("topic {topic} does not exist")))?;
    if i64::from(queue_id) >= i64::from(config.read_queue_nums) {
        return Err(status(
            Code::BadRequest,
            format!(
                "queue {queue_id} is outside the {} read queues of {topic}",
                config.read_queue_nums
            ),
        ));
    }
    let policy = QueryOffsetPolicy::try_from(request.query_offset_policy).map_err(|_| {
        status(
            Code::BadRequest,
            format!(
                "query_offset_policy {} is not BEGINNING, END or TIMESTAMP",
                request.query_offset_policy
            ),
        )
    })?;
    let bounds = |ctx: &BrokerContext| ctx.store.queue_bounds(&topic, queue_id).unwrap_or((0, 0));
    match policy {
        QueryOffsetPolicy::Beginning => Ok(bounds(ctx).0),
        QueryOffsetPolicy::End => {
            ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
            Ok(bounds(ctx).1)
        }
        QueryOffsetPolicy::Timestamp => {
            let at = request
                .timestamp
                .as_ref()
                .ok_or_else(|| status(Code::BadRequest, "timestamp is required with TIMESTAMP"))?;
            let millis = at
                .seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(at.nanos) / 1_000_000);
            ctx.store
                .offset_by_time(&topic, queue_id, millis, TimeBoundary::Lower)
                .map_err(|error| status(Code::InternalServerError, error.to_string()))
        }
    }
}

/// The core's pull of a PullMessage, or the status refusing it.
fn pull_request(
    ctx: &BrokerContext,
    request: &pb::PullMessageRequest,
) -> Result<PullRequest, pb::Status> {
    let group = resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group")?;
    let queue = request
        .message_queue
        .as_ref()
        .ok_or_else(|| status(Code::BadRequest, "message_queue is required"))?;
    let topic = resource_name(
        queue.topic.as_ref(),
        Code::IllegalTopic,
        "message_queue.topic",
    )?;
    let offset = offset_of(request.offset)?;
    let max_count = usize::try_from(request.batch_size)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            status(
                Code::BadRequest,
                format!("batch_size {} is not positive", request.batch_size),
            )
        })?
        .min(PULL_COUNT_MAX);
    let subscription = match &request.filter_expression {
        None => Subscription::Tags("*".into()),
        Some(f) if f.r#type == FilterType::Sql as i32 => Subscription::Unsupported("SQL92".into()),
        Some(f) if f.expression.trim().is_empty() => Subscription::Tags("*".into()),
        Some(f) => Subscription::Tags(f.expression.clone()),
    };
    let hold = match &request.long_polling_timeout {
        None => None,
        Some(d) => {
            let wait = duration(d).ok_or_else(|| {
                status(Code::IllegalPollingTime, "long_polling_timeout is negative")
            })?;
            let most = Duration::from_millis(ctx.runtime_config.broker_suspend_max_time_millis());
            Some(wait.min(most))
        }
    };
    Ok(PullRequest {
        group,
        topic,
        queue_id: u32::try_from(queue.id).ok(),
        offset,
        max_count,
        max_bytes: PULL_BYTES_MAX,
        hold,
        subscription,
        commit: None,
    })
}

/// PullMessage (rules 4, 5): the whole reply stream. `held_pulls` counts the client's held
/// pulls; a hold ends early when `stop` turns true, and [`DEADLINE_HEADROOM`] before the
/// call's `deadline` (the time it has left, `consume::grpc_timeout`), as a receive's does:
/// past it the transport cancels the call and the client gets DEADLINE_EXCEEDED instead of
/// MESSAGE_NOT_FOUND.
pub async fn pull_message(
    ctx: &Arc<BrokerContext>,
    client_id: String,
    held_pulls: Arc<std::sync::atomic::AtomicUsize>,
    request: &pb::PullMessageRequest,
    deadline: Option<Duration>,
    stop: watch::Receiver<bool>,
) -> Vec<pb::PullMessageResponse> {
    let pull = match pull_request(ctx, request) {
        Ok(mut pull) => {
            if let (Some(hold), Some(left)) = (pull.hold, deadline) {
                pull.hold = Some(hold.min(left.saturating_sub(DEADLINE_HEADROOM)));
            }
            pull
        }
        Err(refused) => return stream(vec![Content::Status(refused)]),
    };
    let outcome = pull::pull(ctx, &caller(client_id), &pull, &held_pulls, stopped(stop)).await;
    let pulled = match outcome {
        Ok(pulled) => pulled,
        Err(error) => {
            return stream(vec![Content::Status(status(
                pull_code(&error),
                error.to_string(),
            ))])
        }
    };
    let at = Placement {
        topic: &pull.topic,
        // Admitted by the core: the id is a queue of the topic.
        queue_id: pull.queue_id.unwrap_or_default(),
    };
    let (code, remark, next, result) = match pulled {
        Pulled::Read(result) => {
            let (code, remark, next) = read_outcome(&result, pull.offset);
            (code, remark, next, Some(result))
        }
        Pulled::Moved { offset, min, max } => (
            Code::BadRequest,
            format!(
                "the group's offset of {}/{} was reset: continue from {offset} (the queue holds \
                 [{min}, {max}))",
                at.topic, at.queue_id
            ),
            offset,
            None,
        ),
    };
    let mut out = vec![Content::Status(status(code, remark))];
    if let Some(result) = result.filter(|_| code == Code::Ok) {
        out.extend(
            result
                .messages
                .iter()
                .filter_map(|m| stored_message_of(ctx, m, at, None, None))
                .map(Content::Message),
        );
    }
    out.push(Content::NextOffset(next as i64));
    stream(out)
}

fn stream(contents: Vec<Content>) -> Vec<pb::PullMessageResponse> {
    contents
        .into_iter()
        .map(|content| pb::PullMessageResponse {
            content: Some(content),
        })
        .collect()
}

/// Resolves once `stop` turns true (or its sender is gone): a held pull then ends.
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// The status code, remark and next offset of a read of a queue from `offset` (rule 4).
/// Pure: the gRPC twin of the remoting pull reply's status mapping.
pub fn read_outcome(result: &GetResult, offset: u64) -> (Code, String, u64) {
    let (min, max) = (result.min_offset, result.max_offset);
    match result.status {
        GetStatus::Found => (Code::Ok, "OK".into(), result.next_begin_offset),
        GetStatus::NoMatchedMessage => (
            Code::MessageNotFound,
            format!(
                "no message from offset {offset} matches the filter; continue from {}",
                result.next_begin_offset
            ),
            result.next_begin_offset,
        ),
        GetStatus::OffsetOverflowOne => (Code::MessageNotFound, "no new message".into(), offset),
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if offset == 0 => {
            (Code::MessageNotFound, "no new message".into(), 0)
        }
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => (
            Code::BadRequest,
            format!("offset {offset} is past the end of an empty queue; continue from 0"),
            0,
        ),
        GetStatus::OffsetTooSmall => (
            Code::BadRequest,
            format!(
                "offset {offset} is below the queue's min offset {min}; continue from {}",
                result.next_begin_offset
            ),
            result.next_begin_offset,
        ),
        GetStatus::OffsetOverflowBadly => (
            Code::BadRequest,
            format!(
                "offset {offset} is past the queue's max offset {max}; continue from {}",
                result.next_begin_offset
            ),
            result.next_begin_offset,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: GetStatus, next: u64, (min, max): (u64, u64)) -> GetResult {
        GetResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
        }
    }

    #[test]
    fn reads_map_to_statuses_and_the_offset_to_continue_from() {
        let found = read_outcome(&result(GetStatus::Found, 7, (0, 9)), 3);
        assert_eq!((found.0, found.2), (Code::Ok, 7));
        let tail = read_outcome(&result(GetStatus::OffsetOverflowOne, 9, (0, 9)), 9);
        assert_eq!((tail.0, tail.2), (Code::MessageNotFound, 9));
        let filtered = read_outcome(&result(GetStatus::NoMatchedMessage, 6, (0, 9)), 2);
        assert_eq!((filtered.0, filtered.2), (Code::MessageNotFound, 6));
        let small = read_outcome(&result(GetStatus::OffsetTooSmall, 4, (4, 9)), 1);
        assert_eq!((small.0, small.2), (Code::BadRequest, 4));
        assert!(
            small.1.contains("below the queue's min offset 4"),
            "{}",
            small.1
        );
        let past = read_outcome(&result(GetStatus::OffsetOverflowBadly, 9, (0, 9)), 50);
        assert_eq!((past.0, past.2), (Code::BadRequest, 9));
        let empty_at_zero = read_outcome(&result(GetStatus::NoMessageInQueue, 0, (0, 0)), 0);
        assert_eq!(empty_at_zero.0, Code::MessageNotFound);
        let empty_past = read_outcome(&result(GetStatus::NoMessageInQueue, 0, (0, 0)), 5);
        assert_eq!((empty_past.0, empty_past.2), (Code::BadRequest, 0));
    }

    #[test]
    fn offset_requests_name_what_is_missing() {
        let queue = pb::MessageQueue {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            id: 1,
            ..Default::default()
        };
        let group = pb::Resource {
            resource_namespace: String::new(),
            name: "G".into(),
        };
        assert_eq!(
            target(Some(&group), Some(&queue)).unwrap(),
            ("G".to_string(), "T".to_string(), 1)
        );
        assert_eq!(
            target(None, Some(&queue)).unwrap_err().code,
            Code::IllegalConsumerGroup as i32
        );
        assert_eq!(
            target(Some(&group), None).unwrap_err().code,
            Code::BadRequest as i32
        );
        let negative = pb::MessageQueue { id: -1, ..queue };
        assert_eq!(
            target(Some(&group), Some(&negative)).unwrap_err().code,
            Code::BadRequest as i32
        );
        assert_eq!(offset_of(-1).unwrap_err().code, Code::BadRequest as i32);
        assert_eq!(offset_of(5).unwrap(), 5);
    }
}
