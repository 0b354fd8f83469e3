//! Consumer offsets: every rule of invariant 3 ("progress never moves backwards by accident")
//! that the broker adds to the store's, in one place.
//!
//! 1. **Reads never lie.** In controller mode only the broker that may accept commits now
//!    answers (the master holding its lease): a deposed master, back as a slave, misses what
//!    its successor acknowledged until it catches up, and a route may still name it for a
//!    moment (offset pitfall R2; `ferromq chaos` caught one serving a commit older than its
//!    successor's), so every slave and lease-less master refuses with NOT_MASTER and the
//!    client asks the master. (A slave with a fixed master, outside controller mode, answers
//!    from its replicated view: its master is the only broker that takes commits.) An offset
//!    is read from the store's view only once it covers every
//!    acknowledged write ([`super::view`]); otherwise the read fails (never "no offset"). "No
//!    offset" is [`QueryError::NotFound`], except that a queue still holding its first message
//!    answers 0 when the client allows it (RocketMQ's `setZeroIfNotFound`), decided from the
//!    queue's min offset, never from what happens to be in memory (offset pitfall B5).
//! 2. **Fenced clients cannot undo a reset** ([`super::fences`]): a commit from a client that
//!    was online at a reset of the queue and has not pulled it since is refused, unless it
//!    equals the stored offset; so is one from an unidentified connection while the queue
//!    fences anyone. The generation is read before the fences, so a reset appended after the
//!    read makes the store refuse the commit as stale.
//! 3. **The store's rules** judge everything else: regression, stale generation, past max.
//! 4. **An offline group's backward commit is a reset** (what Java mqadmin's offline
//!    fallbacks send) — but only when it cannot be a stale consumer's: the caller is not a
//!    registered consumer of the group, the group has no member now, and it has had none for
//!    a whole `channelExpiredTimeout` of this broker's life (so right after a restart, before
//!    heartbeats arrive, a backward commit is a regression, not a reset). It is judged before
//!    the fences: they guard against the group's consumers, and none is registered then. A
//!    commit carried by a pull, and a gRPC UpdateOffset ([`CommitKind::Progress`]), are a
//!    consumer's and never an offline move.
//! 5. **Corrections** (ferromq's `ferromqCorrection` after OFFSET_ILLEGAL) are recorded only
//!    when the queue's state justifies them — the stored offset lies outside the queue's
//!    [min, max] and the proposal inside ([`judge_correction`]) — and fence the group's
//!    online clients (the sender included) like a reset.
//! 6. Every accepted commit records the caller's client id and, with ACL on, the access key
//!    the request was granted to, so the log says who moved what (and a commit from a fenced
//!    client that followed lifts its recorded fence).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, Verdict};
use ferromq_store::CommitOutcome;

use super::access::{self, Request};
use super::error::{CommitError, CorrectionRefusal, QueryError, Refusal, RefusalKind};
use super::{ack, view};
use crate::context::BrokerContext;
use crate::observability::metrics::CommitCount;
use crate::sessions::identity::Caller;

/// A consumer's commit of its next offset on one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
    /// The next offset to consume.
    pub offset: u64,
    /// Where the commit comes from.
    pub kind: CommitKind,
}

/// Where a commit comes from, which decides the rules it may fall under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitKind {
    /// A commit request (UPDATE_CONSUMER_OFFSET): progress, or an administrator's offline
    /// move of the group (rule 4).
    Update,
    /// A correction after OFFSET_ILLEGAL (rule 5).
    Correction,
    /// The commit a pull carries: a consumer's progress, never an offline move.
    CarriedByPull,
    /// A consumer's explicit commit of its own progress over a protocol no administrator's
    /// tool commits through (gRPC UpdateOffset): never an offline move (rule 4), so a
    /// backward one is always a regression. (gRPC consumers are not in the remoting client
    /// table rule 4 consults, so a stale one would otherwise pass for an administrator.)
    Progress,
}

impl CommitRequest {
    /// (group, topic, queue, offset).
    fn parts(&self) -> (&str, &str, u32, u64) {
        (&self.group, &self.topic, self.queue_id, self.offset)
    }
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// Stored (or already stored: it changed nothing).
    Stored,
    /// A backward commit of an offline group, recorded as a reset with this generation.
    OfflineReset {
        /// The generation the reset established.
        generation: u64,
    },
    /// A correction, recorded with this generation.
    Corrected {
        /// The generation the correction established.
        generation: u64,
    },
}

/// The (group, topic, queue) an offset query names.
#[derive(Debug, Clone, Copy)]
pub struct QueryTarget<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// Queue.
    pub queue_id: u32,
}

/// The group's stored offset of a queue (see rule 1). `replica_read` is a diagnostic read of
/// this broker's own view, answered by a slave too.
pub async fn query(
    ctx: &BrokerContext,
    target: QueryTarget<'_>,
    zero_if_not_found: bool,
    replica_read: bool,
) -> Result<u64, QueryError> {
    let QueryTarget {
        group,
        topic,
        queue_id,
    } = target;
    if ctx.controller.is_some() && !replica_read {
        ctx.replication.check_writable("offset query")?;
    }
    let offsets = view::offsets(&ctx.store).await?;
    if let Some(offset) = offsets.stored(group, topic, queue_id) {
        return Ok(offset);
    }
    let untrimmed = ctx
        .store
        .queue_bounds(topic, queue_id)
        .is_none_or(|(min, _)| min == 0);
    if zero_if_not_found && untrimmed {
        return Ok(0);
    }
    Err(QueryError::NotFound {
        group: group.to_string(),
        topic: topic.to_string(),
        queue_id,
    })
}

/// Refuses a commit naming what a client may not commit, a missing topic or a bad group.
fn admit(ctx: &BrokerContext, group: &str, topic: &str) -> Result<(), Refusal> {
    access::client_offsets(ctx, group, topic, Request::Commit)?;
    if ctx.topics.get(topic).is_none() {
        return Err(Refusal::new(
            RefusalKind::TopicMissing,
            format!("topic {topic} does not exist"),
        ));
    }
    ctx.groups
        .ensure(group)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?;
    Ok(())
}

/// A consumer's commit (rules 2–6).
pub async fn commit(
    ctx: &BrokerContext,
    caller: &Caller,
    request: &CommitRequest,
) -> Result<Committed, CommitError> {
    let (group, topic, queue_id, offset) = request.parts();
    // A slave refuses a commit before judging it (R3): its answer must not depend on the
    // request being well formed.
    super::ack::check_writable(ctx, "commit")?;
    admit(ctx, group, topic)?;
    let (generation, stored) = {
        let offsets = view::offsets(&ctx.store).await?;
        (
            offsets.generation(group, topic),
            offsets.stored(group, topic, queue_id),
        )
    };
    // An administrator's offline move comes first: fences guard against the group's own
    // consumers, and the offline rule admits no registered consumer (rule 4).
    if request.kind == CommitKind::Update
        && offline_reset_allowed(ctx, caller, group, stored, offset)
    {
        return offline_reset(ctx, caller, request, stored).await;
    }
    if let Some(blocked) =
        ctx.fences
            .blocks_commit(group, topic, queue_id, caller.client_id.as_deref())
    {
        if stored == Some(offset) && request.kind != CommitKind::Correction {
            // Changes nothing: a consumer that followed the reset push commits the reset
            // offset before it pulls again.
            return Ok(Committed::Stored);
        }
        count_rejection(ctx, CommitCount::StaleGeneration);
        return Err(match caller.client_id {
            None => CommitError::Unidentified {
                group: group.to_string(),
                topic: topic.to_string(),
                queue_id,
                proposed: offset,
            },
            Some(_) => CommitError::Fenced {
                group: group.to_string(),
                topic: topic.to_string(),
                queue_id,
                proposed: offset,
                reset_offset: blocked.offset,
                generation: blocked.generation,
            },
        });
    }
    if request.kind == CommitKind::Correction {
        return correct(ctx, caller, request, stored).await;
    }
    let mut command = single(OffsetKind::Commit, caller, request);
    command.generation = Some(generation);
    let outcome = ack::put_offsets(ctx, &command).await?;
    judge(ctx, &outcome).map(|()| Committed::Stored)
}

/// Rule 4: whether a backward commit of `group` is an administrator's offline reset.
fn offline_reset_allowed(
    ctx: &BrokerContext,
    caller: &Caller,
    group: &str,
    stored: Option<u64>,
    offset: u64,
) -> bool {
    if stored.is_none_or(|s| offset >= s) || ctx.clients.has_online_consumers(group) {
        return false;
    }
    if caller
        .client_id
        .as_deref()
        .is_some_and(|id| ctx.clients.is_consumer_of(group, id))
    {
        return false;
    }
    let expiry = Duration::from_millis(ctx.runtime_config.channel_expired_timeout());
    ctx.sessions.memberless_for(group, Instant::now()) >= expiry
}

async fn offline_reset(
    ctx: &BrokerContext,
    caller: &Caller,
    request: &CommitRequest,
    stored: Option<u64>,
) -> Result<Committed, CommitError> {
    let command = single(OffsetKind::Reset, caller, request);
    let outcome = ack::put_offsets(ctx, &command).await?;
    judge(ctx, &outcome)?;
    let generation = outcome.generation.unwrap_or(0);
    ctx.counters.offline_resets.fetch_add(1, Ordering::Relaxed);
    ctx.metrics
        .count_offset_move(OffsetKind::Reset, "offline_commit");
    tracing::warn!(group = %request.group, topic = %request.topic, queue_id = request.queue_id,
        old = ?stored, new = request.offset, generation, client = %caller.label(),
        "backward commit of an offline group recorded as a reset");
    Ok(Committed::OfflineReset { generation })
}

/// What a correction request amounts to, given the queue's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorrectionJudgement {
    /// The stored offset is outside the queue and the proposal inside: record a correction.
    Correct,
    /// Nothing to correct (no stored offset, or already there): an ordinary commit.
    Commit,
    /// Not justified by the queue's state.
    Refuse(CorrectionRefusal),
}

/// Judges a correction of the stored offset `stored` to `offset` on a queue holding
/// `[min, max]` (max = next offset to be written). Pure; see rule 5.
pub fn judge_correction(
    stored: Option<u64>,
    (min, max): (u64, u64),
    offset: u64,
) -> CorrectionJudgement {
    if offset > max {
        return CorrectionJudgement::Refuse(CorrectionRefusal::PastMax { offset, max });
    }
    if offset < min {
        return CorrectionJudgement::Refuse(CorrectionRefusal::BelowMin { offset, min });
    }
    match stored {
        None => CorrectionJudgement::Commit,
        Some(s) if s == offset => CorrectionJudgement::Commit,
        Some(s) if s < min || s > max => CorrectionJudgement::Correct,
        Some(stored) => CorrectionJudgement::Refuse(CorrectionRefusal::Healthy {
            offset,
            stored,
            min,
            max,
        }),
    }
}

async fn correct(
    ctx: &BrokerContext,
    caller: &Caller,
    request: &CommitRequest,
    stored: Option<u64>,
) -> Result<Committed, CommitError> {
    let (group, topic, queue_id, offset) = request.parts();
    let bounds = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
    match judge_correction(stored, bounds, offset) {
        CorrectionJudgement::Refuse(refusal) => {
            count_rejection(ctx, CommitCount::of_correction(&refusal));
            tracing::info!(%group, %topic, queue_id, ?stored, offset, ?bounds, %refusal, "correction refused");
            Err(CommitError::CorrectionRefused(refusal))
        }
        CorrectionJudgement::Commit => {
            let command = single(OffsetKind::Commit, caller, request);
            let outcome = ack::put_offsets(ctx, &command).await?;
            judge(ctx, &outcome).map(|()| Committed::Stored)
        }
        CorrectionJudgement::Correct => {
            // Every consumer online now (the sender included) may still commit results of the
            // old generation: fence them on this queue until they pull it.
            let mut online = ctx.clients.consumer_ids(group);
            // An unidentified sender cannot be told apart later, so it is not fenced by name
            // (any fence of the queue refuses its commits anyway).
            if let Some(id) = &caller.client_id {
                online.push(id.clone());
            }
            let (token, fenced) =
                ctx.fences
                    .install_pending(group, topic, &[(queue_id, offset)], &online);
            let mut command = single(OffsetKind::Correction, caller, request);
            command.fenced_clients = fenced;
            // The store re-checks `stored` under its append lock: a commit racing with this
            // judgement is never undone.
            let outcome = match ack::put_correction(ctx, &command, &[stored]).await {
                Ok(outcome) => outcome,
                Err(error) => {
                    // The record may still become durable: keep the fence, lifting on pulls
                    // towards whatever the stored offset turns out to be (generation unknown:
                    // 0 in remarks).
                    ctx.fences.activate(token, 0);
                    return Err(error.into());
                }
            };
            if outcome.verdicts.first() != Some(&Verdict::Applied) {
                ctx.fences.withdraw(token);
                return judge(ctx, &outcome).map(|()| Committed::Stored);
            }
            let generation = outcome.generation.unwrap_or(0);
            ctx.fences.activate(token, generation);
            ctx.metrics.commit_verdicts(&outcome.verdicts);
            tracing::warn!(%group, %topic, queue_id, ?stored, new = offset, generation, ?bounds,
                "consumer offset corrected into the queue's range");
            ctx.metrics
                .count_offset_move(OffsetKind::Correction, "offset_outside_queue");
            Ok(Committed::Corrected { generation })
        }
    }
}

/// The commit a pull carries: applied in the background (the pull reply has no place for its
/// outcome), judged by the same rules as any commit; its outcome reaches the log, the
/// counters and the debug log.
pub fn commit_from_pull(
    ctx: &std::sync::Arc<BrokerContext>,
    caller: Caller,
    request: CommitRequest,
) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        match commit(&ctx, &caller, &request).await {
            Ok(_) => {}
            Err(CommitError::Write(error)) => {
                tracing::warn!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, %error, "piggy-backed commit failed")
            }
            Err(error) => {
                tracing::debug!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, %error, "piggy-backed commit rejected")
            }
        }
    });
}

/// A pull of `queue_id` at `offset` by `caller`: lifts the caller's fence (rule 2) and says
/// where it must move instead when it pulled anywhere but the group's stored offset.
pub async fn follow_on_pull(
    ctx: &BrokerContext,
    caller: &Caller,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
) -> Result<Option<u64>, super::error::ViewError> {
    let Some(reset_offset) =
        ctx.fences
            .lift_on_pull(group, topic, queue_id, caller.client_id.as_deref())
    else {
        return Ok(None);
    };
    let stored = view::offsets(&ctx.store)
        .await?
        .stored(group, topic, queue_id);
    let target = stored.unwrap_or(reset_offset);
    if offset == target {
        return Ok(None);
    }
    tracing::info!(%group, %topic, queue_id, from = offset, to = target, client = %caller.label(),
        "consumer moved to the group's offset after a reset");
    Ok(Some(target))
}

/// A negative commit (RocketMQ's "none", ali-ons sends -1): ignored and counted, never
/// stored. The wire adapters call it for the magic values they translate.
pub fn count_negative_commit(ctx: &BrokerContext) {
    ctx.counters
        .negative_commits_ignored
        .fetch_add(1, Ordering::Relaxed);
    ctx.metrics.commit(CommitCount::NegativeIgnored);
}

/// Whether a pull's piggy-backed commit would be refused by a fence (counted as stale).
pub fn pull_commit_fenced(
    ctx: &BrokerContext,
    caller: &Caller,
    group: &str,
    topic: &str,
    queue_id: u32,
) -> bool {
    let fenced = ctx
        .fences
        .blocks_commit(group, topic, queue_id, caller.client_id.as_deref())
        .is_some();
    if fenced {
        count_rejection(ctx, CommitCount::StaleGeneration);
    }
    fenced
}

/// The first entry's verdict as the commit's result, counted.
fn judge(ctx: &BrokerContext, outcome: &CommitOutcome) -> Result<(), CommitError> {
    ctx.metrics.commit_verdicts(&outcome.verdicts);
    match outcome.verdicts.first() {
        Some(Verdict::Rejected(rejection)) => {
            ctx.counters
                .commits_rejected
                .fetch_add(1, Ordering::Relaxed);
            Err(CommitError::Rejected(*rejection))
        }
        _ => Ok(()),
    }
}

fn count_rejection(ctx: &BrokerContext, count: CommitCount) {
    ctx.counters
        .commits_rejected
        .fetch_add(1, Ordering::Relaxed);
    ctx.metrics.commit(count);
}

/// A one-entry command of `kind` from `caller`.
fn single(kind: OffsetKind, caller: &Caller, request: &CommitRequest) -> OffsetCommand {
    OffsetCommand {
        kind,
        group: request.group.clone(),
        client_id: caller.label(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: request.topic.clone(),
            queue_id: request.queue_id,
            offset: request.offset,
        }],
        fenced_clients: Vec::new(),
        access_key: caller.access_key.clone(),
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
        assert_eq!(
            judge_correction(Some(30), (10, 50), 20),
            Refuse(CorrectionRefusal::Healthy {
                offset: 20,
                stored: 30,
                min: 10,
                max: 50
            })
        );
        assert_eq!(
            judge_correction(Some(3), (10, 50), 9),
            Refuse(CorrectionRefusal::BelowMin { offset: 9, min: 10 })
        );
        assert_eq!(
            judge_correction(Some(80), (10, 50), 51),
            Refuse(CorrectionRefusal::PastMax {
                offset: 51,
                max: 50
            })
        );
        assert_eq!(
            judge_correction(None, (10, 50), 5),
            Refuse(CorrectionRefusal::BelowMin { offset: 5, min: 10 })
        );
    }
}
