//! QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15) and the commit piggy-backed on a
//! pull: the protocol edge of the store's offset view.
//!
//! - "No offset" is QUERY_NOT_FOUND, except that a queue still holding its first message
//!   answers 0, as RocketMQ does for `setZeroIfNotFound` — decided from the queue's min offset,
//!   never from what happens to be in memory (offset pitfall B5).
//! - A commit is answered SUCCESS only once durable under the flush policy; a rejected one
//!   gets its own code and a remark saying why (invariant 3).
//! - Negative commits (ali-ons sends -1) are ignored and counted, never stored.
//! - A backward commit for a group with no online consumer is an offline reset (what Java
//!   mqadmin's offline fallbacks send): recorded as a reset with a new generation.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::offsets::{CommitRejection, OffsetCommand, OffsetEntry, OffsetKind, Verdict};
use ferromq_store::{CommitOutcome, MessageStore, StoreError};

use super::bad_header;
use crate::codes;
use crate::context::BrokerContext;

pub(super) fn query(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<QueryConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    if header.queue_id < 0 {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!("queueId {} is negative", header.queue_id)),
        );
    }
    let queue_id = header.queue_id as u32;
    let offset = match ctx
        .store
        .consumer_offset(&header.consumer_group, &header.topic, queue_id)
    {
        Some(stored) => stored.offset,
        None => {
            let untrimmed = ctx
                .store
                .queue_bounds(&header.topic, queue_id)
                .is_none_or(|(min, _)| min == 0);
            if header.set_zero_if_not_found == Some(false) || !untrimmed {
                return command.reply(
                    response::QUERY_NOT_FOUND,
                    Some(format!(
                        "no offset stored for group {} on {}/{queue_id}",
                        header.consumer_group, header.topic
                    )),
                );
            }
            0
        }
    };
    command
        .reply(response::SUCCESS, None)
        .with_header(&QueryConsumerOffsetResponseHeader {
            offset: offset as i64,
        })
}

pub(super) async fn update(
    ctx: &BrokerContext,
    channel: &crate::clients::ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<UpdateConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    if header.commit_offset < 0 || header.queue_id < 0 {
        ctx.counters
            .negative_commits_ignored
            .fetch_add(1, Ordering::Relaxed);
        return command.reply(response::SUCCESS, Some("negative offset ignored".into()));
    }
    if ctx.topics.get(&header.topic).is_none() {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {} does not exist", header.topic)),
        );
    }
    if let Err(error) = ctx.groups.ensure(&header.consumer_group) {
        return command.reply(response::SYSTEM_ERROR, Some(error.to_string()));
    }
    let (group, topic, queue_id) = (
        header.consumer_group.as_str(),
        header.topic.as_str(),
        header.queue_id as u32,
    );
    let offset = header.commit_offset as u64;
    if let Some((reset_offset, generation)) =
        ctx.fences.blocks_commit(group, topic, queue_id, channel.id)
    {
        ctx.counters
            .commits_rejected
            .fetch_add(1, Ordering::Relaxed);
        return command.reply(
            codes::COMMIT_STALE_GENERATION,
            Some(format!(
                "commit of {offset} was made before the reset of {group} on {topic}/{queue_id} to \
                 {reset_offset} (generation {generation}); pull the queue to follow the reset"
            )),
        );
    }
    let stored = ctx
        .store
        .consumer_offset(group, topic, queue_id)
        .map(|s| s.offset);
    let offline_backward =
        stored.is_some_and(|s| offset < s) && !ctx.clients.has_online_consumers(group);
    let kind = if offline_backward {
        OffsetKind::Reset
    } else {
        OffsetKind::Commit
    };
    let client_id = if offline_backward {
        "offline-reset"
    } else {
        "remoting"
    };
    let outcome = commit(&ctx.store, kind, group, client_id, topic, queue_id, offset).await;
    match outcome {
        Ok(outcome) => {
            if offline_backward {
                ctx.counters.offline_resets.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%group, %topic, queue_id, old = ?stored, new = offset, generation = ?outcome.generation,
                    "backward commit of an offline group recorded as a reset");
            }
            verdict_reply(ctx, command, &outcome)
        }
        Err(error) => command.reply(
            codes::NOT_DURABLE,
            Some(format!("commit not stored durably: {error}")),
        ),
    }
}

/// Applies the commit a pull carries; its outcome only reaches the log and the counters,
/// because the pull reply has no place for it.
pub(super) fn commit_from_pull(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: i64,
) {
    if offset < 0 {
        ctx.counters
            .negative_commits_ignored
            .fetch_add(1, Ordering::Relaxed);
        return;
    }
    let store = ctx.store.clone();
    let command = single(
        OffsetKind::Commit,
        group,
        "pull",
        topic,
        queue_id,
        offset as u64,
    );
    let rejected = tokio::task::spawn_blocking(move || store.commit_offsets(&command));
    let (group, topic) = (group.to_string(), topic.to_string());
    tokio::spawn(async move {
        match rejected.await {
            Ok(Ok(outcome)) if !outcome.all_accepted() => {
                tracing::debug!(%group, %topic, queue_id, offset, verdicts = ?outcome.verdicts, "piggy-backed commit rejected");
            }
            Ok(Err(error)) => {
                tracing::warn!(%group, %topic, queue_id, %error, "piggy-backed commit failed")
            }
            _ => {}
        }
    });
}

async fn commit(
    store: &Arc<MessageStore>,
    kind: OffsetKind,
    group: &str,
    client_id: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
) -> Result<CommitOutcome, StoreError> {
    let store = store.clone();
    let command = single(kind, group, client_id, topic, queue_id, offset);
    // The store waits for durability on this thread; keep it off the async workers.
    match tokio::task::spawn_blocking(move || store.commit_offsets(&command)).await {
        Ok(result) => result,
        Err(join) => Err(StoreError::Durability(
            ferromq_store::DurabilityError::FlushFailed(join.to_string()),
        )),
    }
}

fn single(
    kind: OffsetKind,
    group: &str,
    client_id: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
) -> OffsetCommand {
    OffsetCommand {
        kind,
        group: group.to_string(),
        client_id: client_id.to_string(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: topic.to_string(),
            queue_id,
            offset,
        }],
    }
}

fn verdict_reply(
    ctx: &BrokerContext,
    command: &RemotingCommand,
    outcome: &CommitOutcome,
) -> RemotingCommand {
    match outcome.verdicts.first() {
        Some(Verdict::Applied) | Some(Verdict::Unchanged) | None => {
            command.reply(response::SUCCESS, None)
        }
        Some(Verdict::Rejected(rejection)) => {
            ctx.counters
                .commits_rejected
                .fetch_add(1, Ordering::Relaxed);
            let code = match rejection {
                CommitRejection::Regression { .. } => codes::COMMIT_REGRESSION,
                CommitRejection::StaleGeneration { .. } => codes::COMMIT_STALE_GENERATION,
                CommitRejection::PastMax { .. } => codes::COMMIT_PAST_MAX,
                _ => codes::COMMIT_REJECTED,
            };
            command.reply(code, Some(format!("commit rejected: {rejection}")))
        }
    }
}
