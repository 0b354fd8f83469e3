//! QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15) and the commit piggy-backed on a
//! pull: the protocol edge of the store's offset view.
//!
//! - "No offset" is QUERY_NOT_FOUND, except that a queue still holding its first message
//!   answers 0, as RocketMQ does for `setZeroIfNotFound` — decided from the queue's min offset,
//!   never from what happens to be in memory (offset pitfall B5).
//! - A commit is answered SUCCESS only once durable under the flush policy; a rejected one
//!   gets its own code and a remark saying why (invariant 3).
//! - Negative commits (ali-ons sends -1) are ignored and counted, never stored.
//! - A commit naming an internal group (`%SCHEDULE%`) or a reserved topic is refused with
//!   NO_PERMISSION (`access`), whatever its offset: only the broker moves those offsets.
//! - A backward commit for a group with no online consumer is an offline reset (what Java
//!   mqadmin's offline fallbacks send): recorded as a reset with a new generation.
//! - ferromq extension, wire-compatible: an UPDATE_CONSUMER_OFFSET carrying the ext field
//!   [`CORRECTION_EXT`]`=true` is a consumer's correction after OFFSET_ILLEGAL. It is
//!   recorded as a correction (new generation, reply ext [`GENERATION_EXT`]) only when the
//!   queue's state justifies it — the stored offset lies outside the queue's [min, max] and
//!   the proposed one inside — so a correction can never move a healthy offset; the
//!   group's online consumers (the sender included) are then fenced on the queue like after
//!   a reset, so their in-flight commits of the old generation are rejected until they pull
//!   (offset pitfall C8). RocketMQ clients never send the field, so nothing changes for them.

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

use super::access::{self, Request};
use super::bad_header;
use crate::codes;
use crate::context::BrokerContext;

/// Ext fields of a correction (request) and of its SUCCESS reply (the new generation).
pub use ferromq_protocol::remoting::extensions::{CORRECTION_EXT, GENERATION_EXT};

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
    if let Err(refusal) =
        access::client_offsets(ctx, &header.consumer_group, &header.topic, Request::Commit)
    {
        return refusal.reply(command);
    }
    if header.commit_offset < 0 || header.queue_id < 0 {
        ctx.counters
            .negative_commits_ignored
            .fetch_add(1, Ordering::Relaxed);
        ctx.metrics
            .commit(crate::metrics::CommitCount::NegativeIgnored);
        return command.reply(response::SUCCESS, Some("negative offset ignored".into()));
    }
    if ctx.topics.get(&header.topic).is_none() {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {} does not exist", header.topic)),
        );
    }
    if let Err(error) = ctx.groups.ensure(&header.consumer_group) {
        return command.reply(response::INVALID_PARAMETER, Some(error.to_string()));
    }
    let (group, topic, queue_id) = (
        header.consumer_group.as_str(),
        header.topic.as_str(),
        header.queue_id as u32,
    );
    let offset = header.commit_offset as u64;
    // Read before the fences: a reset appended after this read makes the store reject the
    // commit as stale, one appended before it has fenced this connection (`reset_fence`).
    let generation = ctx.store.offset_generation(group, topic);
    let stored = ctx
        .store
        .consumer_offset(group, topic, queue_id)
        .map(|s| s.offset);
    if let Some(fence) = ctx.fences.blocks_commit(group, topic, queue_id, channel.id) {
        if stored == Some(offset) && !is_correction(command) {
            // Changes nothing: a consumer that followed the reset push commits the reset
            // offset before it pulls again.
            return command.reply(response::SUCCESS, None);
        }
        let (reset_offset, generation) = (fence.offset, fence.generation);
        ctx.counters
            .commits_rejected
            .fetch_add(1, Ordering::Relaxed);
        ctx.metrics
            .commit(crate::metrics::CommitCount::StaleGeneration);
        return command.reply(
            codes::COMMIT_STALE_GENERATION,
            Some(format!(
                "commit of {offset} was made before the reset of {group} on {topic}/{queue_id} to \
                 {reset_offset} (generation {generation}); pull the queue to follow the reset"
            )),
        );
    }
    if is_correction(command) {
        return correct(
            ctx, channel, command, group, topic, queue_id, offset, stored,
        )
        .await;
    }
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
    // A backward commit of an offline group is a reset (next generation); a commit carries the
    // generation read above.
    let generation = (!offline_backward).then_some(generation);
    let outcome = commit(
        &ctx.store, kind, group, client_id, topic, queue_id, offset, generation,
    )
    .await;
    match outcome {
        Ok(outcome) => {
            if offline_backward {
                ctx.counters.offline_resets.fetch_add(1, Ordering::Relaxed);
                ctx.metrics
                    .count_offset_move(OffsetKind::Reset, "offline_commit");
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

fn is_correction(command: &RemotingCommand) -> bool {
    command
        .ext_fields
        .get(CORRECTION_EXT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// What a correction request amounts to, given the queue's state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CorrectionJudgement {
    /// The stored offset is outside the queue and the proposal inside: record a correction.
    Correct,
    /// Nothing to correct (no stored offset, or already there): an ordinary commit.
    Commit,
    /// Not justified by the queue's state: refused with this code and remark.
    Refuse(i32, String),
}

/// Judges a correction of the stored offset `stored` to `offset` on a queue holding
/// `[min, max]` (max = next offset to be written). Pure; see the module header.
fn judge_correction(
    stored: Option<u64>,
    (min, max): (u64, u64),
    offset: u64,
) -> CorrectionJudgement {
    if offset > max {
        return CorrectionJudgement::Refuse(
            codes::COMMIT_PAST_MAX,
            format!("correction to {offset} is past the queue's max offset {max}"),
        );
    }
    if offset < min {
        return CorrectionJudgement::Refuse(
            codes::COMMIT_REJECTED,
            format!("correction to {offset} is below the queue's min offset {min}"),
        );
    }
    match stored {
        None => CorrectionJudgement::Commit,
        Some(s) if s == offset => CorrectionJudgement::Commit,
        Some(s) if s < min || s > max => CorrectionJudgement::Correct,
        Some(s) => CorrectionJudgement::Refuse(
            if offset < s {
                codes::COMMIT_REGRESSION
            } else {
                codes::COMMIT_REJECTED
            },
            format!(
                "correction to {offset} is not justified: the stored offset {s} lies inside the \
                 queue's range [{min}, {max}]"
            ),
        ),
    }
}

/// A correction request (see the module header).
#[allow(clippy::too_many_arguments)]
async fn correct(
    ctx: &BrokerContext,
    channel: &crate::clients::ClientChannel,
    command: &RemotingCommand,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    stored: Option<u64>,
) -> RemotingCommand {
    let bounds = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
    let judgement = judge_correction(stored, bounds, offset);
    let outcome = match judgement {
        CorrectionJudgement::Refuse(code, remark) => {
            ctx.counters
                .commits_rejected
                .fetch_add(1, Ordering::Relaxed);
            ctx.metrics
                .commit(crate::metrics::CommitCount::of_code(code));
            tracing::info!(%group, %topic, queue_id, ?stored, offset, ?bounds, %remark, "correction refused");
            return command.reply(code, Some(remark));
        }
        CorrectionJudgement::Commit => {
            commit(
                &ctx.store,
                OffsetKind::Commit,
                group,
                "correction",
                topic,
                queue_id,
                offset,
                None,
            )
            .await
        }
        CorrectionJudgement::Correct => {
            let store = ctx.store.clone();
            let correction = single(
                OffsetKind::Correction,
                group,
                "correction",
                topic,
                queue_id,
                offset,
            );
            // The store re-checks `stored` under its append lock (a commit racing with this
            // judgement is never undone) and waits for durability: keep it off the workers.
            match tokio::task::spawn_blocking(move || store.correct_offsets(&correction, &[stored]))
                .await
            {
                Ok(result) => result,
                Err(join) => Err(StoreError::Durability(
                    ferromq_store::DurabilityError::FlushFailed(join.to_string()),
                )),
            }
        }
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            return command.reply(
                codes::NOT_DURABLE,
                Some(format!("correction not stored durably: {error}")),
            )
        }
    };
    let mut reply = verdict_reply(ctx, command, &outcome);
    let applied = outcome.verdicts.first() == Some(&Verdict::Applied);
    if judgement == CorrectionJudgement::Correct && applied {
        let generation = outcome.generation.unwrap_or(0);
        tracing::warn!(%group, %topic, queue_id, ?stored, new = offset, generation, ?bounds,
            "consumer offset corrected into the queue's range");
        ctx.metrics
            .count_offset_move(OffsetKind::Correction, "offset_outside_queue");
        // Every consumer online now (the sender included) may still commit results of the
        // old generation: fence them on this queue until they pull it (`reset_fence`).
        let mut online: Vec<u64> = ctx
            .clients
            .consumers(group)
            .iter()
            .map(|c| c.channel.id)
            .collect();
        online.push(channel.id);
        ctx.fences
            .install(group, topic, queue_id, offset, generation, online);
        reply
            .ext_fields
            .insert(GENERATION_EXT.into(), generation.to_string());
    }
    reply
}

/// Applies the commit a pull carries; its outcome only reaches the log and the counters,
/// because the pull reply has no place for it.
pub(super) fn commit_from_pull(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: i64,
    generation: u64,
) {
    if offset < 0 {
        ctx.counters
            .negative_commits_ignored
            .fetch_add(1, Ordering::Relaxed);
        ctx.metrics
            .commit(crate::metrics::CommitCount::NegativeIgnored);
        return;
    }
    let store = ctx.store.clone();
    let mut command = single(
        OffsetKind::Commit,
        group,
        "pull",
        topic,
        queue_id,
        offset as u64,
    );
    command.generation = Some(generation);
    let metrics = ctx.metrics.clone();
    let rejected =
        tokio::task::spawn_blocking(move || metrics.count_outcome(store.commit_offsets(&command)));
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

/// Writes one offset entry; `generation` (for commits) makes the store reject it as stale
/// when a reset or correction was appended since the caller read it.
#[allow(clippy::too_many_arguments)]
async fn commit(
    store: &Arc<MessageStore>,
    kind: OffsetKind,
    group: &str,
    client_id: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    generation: Option<u64>,
) -> Result<CommitOutcome, StoreError> {
    let store = store.clone();
    let mut command = single(kind, group, client_id, topic, queue_id, offset);
    command.generation = generation;
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
    ctx.metrics.commit_verdicts(&outcome.verdicts);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correction_is_justified_only_by_a_stored_offset_outside_the_queue() {
        use CorrectionJudgement::*;
        // Trimmed: stored 3 is below min 10; the suggestion (min) and anything in range land.
        assert_eq!(judge_correction(Some(3), (10, 50), 10), Correct);
        assert_eq!(judge_correction(Some(3), (10, 50), 50), Correct);
        // Truncated: stored 80 is past max 50; a backward correction into range lands.
        assert_eq!(judge_correction(Some(80), (10, 50), 50), Correct);
        // Nothing to correct: first offset, or already there.
        assert_eq!(judge_correction(None, (10, 50), 20), Commit);
        assert_eq!(judge_correction(Some(20), (10, 50), 20), Commit);
        // Unjustified: the stored offset is healthy, or the proposal leaves the queue.
        let refused = |j: CorrectionJudgement| match j {
            Refuse(code, _) => code,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            refused(judge_correction(Some(30), (10, 50), 20)),
            codes::COMMIT_REGRESSION
        );
        assert_eq!(
            refused(judge_correction(Some(30), (10, 50), 40)),
            codes::COMMIT_REJECTED
        );
        assert_eq!(
            refused(judge_correction(Some(3), (10, 50), 9)),
            codes::COMMIT_REJECTED
        );
        assert_eq!(
            refused(judge_correction(Some(80), (10, 50), 51)),
            codes::COMMIT_PAST_MAX
        );
        assert_eq!(
            refused(judge_correction(None, (10, 50), 5)),
            codes::COMMIT_REJECTED
        );
    }
}
