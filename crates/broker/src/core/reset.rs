//! Administrators' moves of a group's offsets: resets (to a time, to the max offset, to an
//! explicit offset), clones of another group's offsets, and skips of a damaged record. All of
//! them end in [`apply`], so every admin move has the same guarantees:
//!
//! - The new offsets of one (group, topic) are written as ONE reset record through the log,
//!   starting a new generation; the answer comes only once that record is acknowledged, so an
//!   acknowledged reset survives a crash.
//! - The group's consumers online now are fenced ([`super::fences`]) *before* the record is
//!   appended, and the record names them, so the fences hold across reconnects, restarts and
//!   (later) failovers: a running consumer cannot undo the reset (invariant 3).
//! - Every moved queue is logged with group, topic, queue, old and new offset and the cause;
//!   with ACL on, the record names the access key of the administrator's request
//!   ([`Principal`]), so `offsetHistory` says which account moved the offsets.
//! - An internal group or a reserved topic is refused (`access`): only the broker moves
//!   their offsets. A reset never creates a group by a typo ([`known_group`]).
//!
//! Telling the consumers (RocketMQ's RESET_CONSUMER_CLIENT_OFFSET push) is the wire adapter's
//! part: it pushes [`ResetDone::moved`] to the online consumers in its protocol's form.

use std::collections::BTreeMap;
use std::time::Duration;

use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, Verdict};
use ferromq_store::{ReadError, TagFilter, TimeBoundary};

use super::access::{self, Request};
use super::authorisation::Principal;
use super::error::{Refusal, RefusalKind, ResetError};
use super::{ack, view};
use crate::context::BrokerContext;

/// Longest a reset waits for the dispatcher to cover acknowledged messages before it computes
/// offsets by time.
const CATCH_UP_MAX: Duration = Duration::from_millis(500);

/// Client id recorded on resets an administrator asks for.
pub const ADMIN_CLIENT_ID: &str = "admin-reset";
/// Client id recorded on the reset records a clone writes.
pub const CLONE_CLIENT_ID: &str = "admin-clone";
/// Client id recorded on the reset a skip of a damaged record writes.
pub const SKIP_CLIENT_ID: &str = "admin-skip-damaged";

/// Where a reset moves each queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    /// The first message stored at or after this store time (ms).
    Time(i64),
    /// The queue's max offset (skip the backlog).
    Max,
    /// This offset, for one queue.
    Offset(u64),
}

/// A reset of one (group, topic) to explicit per-queue offsets, and why.
#[derive(Debug, Clone)]
pub struct ResetPlan {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// The new offset of each queue.
    pub entries: Vec<OffsetEntry>,
    /// Client id recorded on the reset record.
    pub client_id: &'static str,
    /// The access key the administrator's request was granted to (ACL on), recorded on the
    /// reset record.
    pub access_key: Option<String>,
    /// Logged with every moved queue.
    pub cause: String,
}

/// What [`apply`] did.
#[derive(Debug, Clone)]
pub struct ResetDone {
    /// The generation the reset record established.
    pub generation: u64,
    /// Each queue's stored offset before the reset (`None`: there was none).
    pub old: BTreeMap<u32, Option<u64>>,
    /// The new offset of each moved queue.
    pub moved: BTreeMap<u32, u64>,
}

/// Whether `group` exists for an administrator's move of its offsets: configured, online,
/// or holding offsets.
pub async fn known_group(ctx: &BrokerContext, group: &str) -> Result<bool, ResetError> {
    if ctx.groups.get(group).is_some() || ctx.clients.has_online_consumers(group) {
        return Ok(true);
    }
    Ok(view::offsets(&ctx.store).await?.has_group(group))
}

async fn admit(
    ctx: &BrokerContext,
    group: &str,
    topic: &str,
    request: Request,
) -> Result<(), ResetError> {
    access::client_offsets(ctx, group, topic, request)?;
    if ctx.topics.get(topic).is_none() {
        return Err(Refusal::new(
            RefusalKind::TopicMissing,
            format!("topic {topic} does not exist"),
        )
        .into());
    }
    if !known_group(ctx, group).await? {
        return Err(Refusal::new(
            RefusalKind::GroupMissing,
            format!("subscription group {group} does not exist"),
        )
        .into());
    }
    Ok(())
}

/// Plans and applies an administrator's reset of (group, topic) — every queue, or
/// `queue_id` only — to `target`.
pub async fn reset(
    ctx: &BrokerContext,
    by: &Principal,
    group: &str,
    topic: &str,
    queue_id: Option<u32>,
    target: ResetTarget,
) -> Result<ResetDone, ResetError> {
    super::ack::check_writable(ctx, "reset")?;
    admit(ctx, group, topic, Request::Reset).await?;
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let config = ctx.topics.get(topic).ok_or_else(|| {
        Refusal::new(
            RefusalKind::TopicMissing,
            format!("topic {topic} does not exist"),
        )
    })?;
    let queue_count = config.read_queue_nums.max(config.write_queue_nums).max(0) as u32;
    let queues: Vec<u32> = match queue_id {
        Some(q) if q >= queue_count => {
            return Err(invalid(format!(
                "topic {topic} has no queue {q} ({queue_count} queues)"
            )))
        }
        Some(q) => vec![q],
        None => (0..queue_count).collect(),
    };
    if matches!(target, ResetTarget::Offset(_)) && queues.len() != 1 {
        return Err(invalid(
            "an explicit offset needs one queue (queueId)".into(),
        ));
    }
    let cause = match target {
        ResetTarget::Offset(offset) => format!("admin reset to explicit offset {offset}"),
        ResetTarget::Max => "admin reset to the max offset (skip backlog)".into(),
        ResetTarget::Time(ms) => format!("admin reset to store time {ms} ms"),
    };
    let mut entries = Vec::with_capacity(queues.len());
    for queue_id in queues {
        entries.push(OffsetEntry {
            topic: topic.to_string(),
            queue_id,
            offset: target_offset(ctx, topic, queue_id, target)?,
        });
    }
    let plan = ResetPlan {
        group: group.to_string(),
        topic: topic.to_string(),
        entries,
        client_id: ADMIN_CLIENT_ID,
        access_key: by.access_key.clone(),
        cause,
    };
    apply(ctx, plan).await
}

fn invalid(remark: String) -> ResetError {
    Refusal::new(RefusalKind::InvalidArgument, remark).into()
}

fn target_offset(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    target: ResetTarget,
) -> Result<u64, ResetError> {
    let (min, max) = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
    match target {
        ResetTarget::Offset(offset) if offset < min || offset > max => Err(invalid(format!(
            "offset {offset} is outside queue {topic}/{queue_id}'s range [{min}, {max}]"
        ))),
        ResetTarget::Offset(offset) => Ok(offset),
        ResetTarget::Max => Ok(max),
        ResetTarget::Time(ms) => ctx
            .store
            .offset_by_time(topic, queue_id, ms, TimeBoundary::Lower)
            .map_err(|error| {
                Refusal::new(
                    RefusalKind::Internal,
                    format!("cannot search queue {topic}/{queue_id} by time: {error}"),
                )
                .into()
            }),
    }
}

/// Refuses a reset on a master the controller made master less than
/// `resetWaitAfterPromotionMillis` ago: the reset must fence the group's online consumers, and
/// this broker knows only those that have heartbeated to it since. A consumer it does not know
/// would go on committing from its old position and undo the reset (`ferromq chaos` found one
/// doing so after a failover).
fn refuse_while_consumers_unknown(ctx: &BrokerContext) -> Result<(), Refusal> {
    let Some(link) = &ctx.controller else {
        return Ok(());
    };
    let wait = link.settings().reset_wait_after_promotion;
    match ctx.replication.master_for() {
        Some(master_for) if master_for < wait => Err(Refusal::new(
            RefusalKind::Busy,
            format!(
                "this broker became master {} ms ago and may not know every online consumer \
                 a reset must fence yet; retry in {} ms (resetWaitAfterPromotionMillis)",
                master_for.as_millis(),
                (wait - master_for).as_millis()
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes `plan` as one reset record (a new generation) and waits for its acknowledgement,
/// fencing the consumers online now (see the module header).
///
/// # Errors
/// Not durable, or refused by the offset rules; nothing was acknowledged.
pub async fn apply(ctx: &BrokerContext, plan: ResetPlan) -> Result<ResetDone, ResetError> {
    refuse_while_consumers_unknown(ctx)?;
    let (group, topic) = (plan.group.as_str(), plan.topic.as_str());
    let old: BTreeMap<u32, Option<u64>> = {
        let offsets = view::offsets(&ctx.store).await?;
        plan.entries
            .iter()
            .map(|entry| (entry.queue_id, offsets.stored(group, topic, entry.queue_id)))
            .collect()
    };
    // Fence the consumers online now before the record is appended: a commit that arrives
    // while the reset becomes durable must not land after it.
    let online = ctx.clients.consumer_ids(group);
    let queues: Vec<(u32, u64)> = plan
        .entries
        .iter()
        .map(|entry| (entry.queue_id, entry.offset))
        .collect();
    let (token, fenced) = ctx.fences.install_pending(group, topic, &queues, &online);
    let reset = OffsetCommand {
        kind: OffsetKind::Reset,
        group: group.to_string(),
        client_id: plan.client_id.to_string(),
        generation: None,
        entries: plan.entries.clone(),
        fenced_clients: fenced,
        access_key: plan.access_key.clone(),
    };
    let outcome = match ack::put_offsets(ctx, &reset).await {
        Ok(outcome) => outcome,
        Err(error) => {
            // The record may still become durable: keep the fences, and let pulls lift them
            // towards whatever the stored offset turns out to be.
            ctx.fences.activate(token, 0);
            return Err(error.into());
        }
    };
    let generation = outcome.generation.unwrap_or(0);
    let mut moved = BTreeMap::new();
    let mut rejected = Vec::new();
    for (entry, verdict) in plan.entries.iter().zip(&outcome.verdicts) {
        let previous = old.get(&entry.queue_id).copied().flatten();
        match verdict {
            Verdict::Applied | Verdict::Unchanged => {
                tracing::info!(%group, %topic, queue_id = entry.queue_id, old = ?previous, new = entry.offset,
                    generation, cause = %plan.cause, "consumer offset reset");
                ctx.metrics.count_offset_move(OffsetKind::Reset, "admin");
                moved.insert(entry.queue_id, entry.offset);
            }
            Verdict::Rejected(why) => rejected.push(format!("queue {}: {why}", entry.queue_id)),
        }
    }
    if !rejected.is_empty() {
        // Queues the record did move keep their fences; a record that moved nothing leaves
        // none behind.
        if moved.is_empty() {
            ctx.fences.withdraw(token);
        } else {
            ctx.fences.activate(token, generation);
        }
        return Err(ResetError::Rejected(rejected));
    }
    ctx.fences.activate(token, generation);
    // Pulled positions from before the reset no longer say what is in flight.
    ctx.clients.forget_pulls(group, topic);
    Ok(ResetDone {
        generation,
        old,
        moved,
    })
}

/// What a clone did.
#[derive(Debug, Default)]
pub struct CloneDone {
    /// `topic/queue:old>new` per cloned queue (`old` -1 when there was none).
    pub cloned: Vec<String>,
    /// Topics skipped (reserved, or not subscribed by the online source group).
    pub skipped: Vec<String>,
    /// The highest generation the clone's resets established.
    pub generation: u64,
    /// Each topic's reset, for telling the destination's consumers.
    pub resets: Vec<(String, ResetDone)>,
}

/// CLONE_GROUP_OFFSET: copies `source`'s stored offsets (of `topic`, or of every topic it
/// holds) to `destination`, one reset per topic. Unless `offline`, topics an online source
/// group does not subscribe to are skipped, as RocketMQ does.
pub async fn clone_group(
    ctx: &BrokerContext,
    by: &Principal,
    source: &str,
    destination: &str,
    topic: Option<&str>,
    offline: bool,
) -> Result<CloneDone, ResetError> {
    super::ack::check_writable(ctx, "reset")?;
    if source.is_empty() || destination.is_empty() || source == destination {
        return Err(invalid(
            "srcGroup and destGroup must be two different, non-empty groups".into(),
        ));
    }
    for group in [source, destination] {
        access::client_group(ctx, group, Request::Clone)?;
    }
    let source_offsets = view::offsets(&ctx.store).await?.group_offsets(source);
    let source_known = !source_offsets.is_empty()
        || ctx.groups.get(source).is_some()
        || ctx.clients.has_online_consumers(source);
    if !source_known {
        return Err(Refusal::new(
            RefusalKind::GroupMissing,
            format!("subscription group {source} does not exist"),
        )
        .into());
    }
    let mut topics: Vec<String> = match topic.map(str::trim) {
        Some(topic) if !topic.is_empty() => {
            access::client_topic(ctx, topic, Request::Clone)?;
            if ctx.topics.get(topic).is_none() {
                return Err(Refusal::new(
                    RefusalKind::TopicMissing,
                    format!("topic {topic} does not exist"),
                )
                .into());
            }
            vec![topic.to_string()]
        }
        _ => source_offsets.iter().map(|(t, _, _)| t.clone()).collect(),
    };
    topics.sort();
    topics.dedup();
    // The destination becomes a known group, as a commit would make it.
    ctx.groups
        .ensure(destination)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?;
    let mut done = CloneDone::default();
    for topic in &topics {
        if ctx.topics.get(topic).is_none() {
            continue;
        }
        if ferromq_protocol::names::is_reserved_topic(topic) {
            tracing::info!(%source, %topic, "clone skipped: the topic is reserved for the broker");
            done.skipped.push(topic.clone());
            continue;
        }
        if !offline
            && ctx.clients.has_online_consumers(source)
            && ctx.clients.subscription(source, topic).is_none()
        {
            tracing::info!(%source, %topic, "clone skipped: the online source group does not subscribe to the topic");
            done.skipped.push(topic.clone());
            continue;
        }
        let entries: Vec<OffsetEntry> = source_offsets
            .iter()
            .filter(|(t, _, _)| t == topic)
            .map(|(_, queue_id, offset)| OffsetEntry {
                topic: topic.clone(),
                queue_id: *queue_id,
                offset: *offset,
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let plan = ResetPlan {
            group: destination.to_string(),
            topic: topic.clone(),
            entries: entries.clone(),
            client_id: CLONE_CLIENT_ID,
            access_key: by.access_key.clone(),
            cause: format!("admin clone of group {source}'s offsets"),
        };
        let applied = apply(ctx, plan).await.map_err(|error| match error {
            ResetError::Rejected(why) => {
                ResetError::Rejected(vec![format!("cloning topic {topic}: {}", why.join("; "))])
            }
            other => other,
        })?;
        done.generation = done.generation.max(applied.generation);
        for entry in &entries {
            let old = applied
                .old
                .get(&entry.queue_id)
                .copied()
                .flatten()
                .map_or(-1, |o| o as i64);
            done.cloned
                .push(format!("{topic}/{}:{old}>{}", entry.queue_id, entry.offset));
        }
        done.resets.push((topic.clone(), applied));
    }
    Ok(done)
}

/// SKIP_DAMAGED_MESSAGE: moves (group, topic, queue) past the record at `queue_offset`, only
/// when that record is damaged. Returns the reset and the record's CommitLog offset.
pub async fn skip_damaged(
    ctx: &BrokerContext,
    by: &Principal,
    group: &str,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
) -> Result<(ResetDone, u64), ResetError> {
    // A skip is a reset: never of an internal group or a reserved topic.
    super::ack::check_writable(ctx, "reset")?;
    admit(ctx, group, topic, Request::Reset).await?;
    let phys_offset = damaged_at(ctx, topic, queue_id, queue_offset)
        .await
        .map_err(invalid)?;
    let plan = ResetPlan {
        group: group.to_string(),
        topic: topic.to_string(),
        entries: vec![OffsetEntry {
            topic: topic.to_string(),
            queue_id,
            offset: queue_offset.saturating_add(1),
        }],
        client_id: SKIP_CLIENT_ID,
        access_key: by.access_key.clone(),
        cause: format!(
            "admin skipped the damaged record at queue offset {queue_offset} \
             (CommitLog offset {phys_offset})"
        ),
    };
    Ok((apply(ctx, plan).await?, phys_offset))
}

/// The CommitLog offset of the damaged record at `queue_offset`, or why there is none.
async fn damaged_at(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
) -> Result<u64, String> {
    let store = ctx.store.clone();
    let owned_topic = topic.to_string();
    // Reading the log is blocking I/O; keep it off the async workers.
    let read = tokio::task::spawn_blocking(move || {
        store.get_messages(
            &owned_topic,
            queue_id,
            queue_offset,
            1,
            usize::MAX,
            &TagFilter::All,
        )
    })
    .await
    .map_err(|join| format!("the read of {topic}/{queue_id} failed: {join}"))?;
    match read {
        Err(ReadError::Damaged {
            queue_offset: damaged,
            phys_offset,
            ..
        }) if damaged == queue_offset => Ok(phys_offset),
        Err(error) => Err(format!(
            "cannot tell whether {topic}/{queue_id} offset {queue_offset} is damaged: {error}"
        )),
        Ok(result) if result.messages.first().map(|m| m.queue_offset) == Some(queue_offset) => {
            Err(format!(
                "the record at {topic}/{queue_id} offset {queue_offset} is not damaged (it reads \
                 and verifies); move consumers with resetOffsetByTime instead"
            ))
        }
        Ok(result) => Err(format!(
            "{topic}/{queue_id} has no record at offset {queue_offset} (queue range [{}, {}))",
            result.min_offset, result.max_offset
        )),
    }
}
