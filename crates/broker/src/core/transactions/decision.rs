//! END_TRANSACTION: commit, rollback or unknown for one half message, from its producer or
//! answering a check-back.
//!
//! Invariants:
//! 1. The END must name a tracked half exactly: its queue offset (`tranStateTableOffset`),
//!    its CommitLog offset and its producer group all match, else it is refused (no half,
//!    wrong group), counted and logged — nothing is written.
//! 2. A commit writes the real message (its topic, queue, body and properties without
//!    `REAL_TOPIC`/`REAL_QID`, sysFlag commit type, `prepared_tx_offset` = the half's CommitLog
//!    offset) and the op record in one append; a rollback writes the op record only. The table
//!    says `Decided` only after the append is acknowledged; a failed append puts the half back
//!    to `Pending` and the error goes to the caller.
//! 3. A repeated END with the same decision, or an "unknown" for a decided half, changes
//!    nothing and succeeds; the other decision is refused as a conflict.
//! 4. "Unknown" is recorded (an op record) at most once per half between two check-backs, so
//!    a flood of unknowns writes at most `transactionCheckMax + 1` records per half.

use ferromq_protocol::remoting::headers::transaction::{
    TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK,
};
use ferromq_protocol::{DraftRecord, RecordView};

use super::load::LoadError;
use super::op::{Op, OpRecord};
use super::table::{Decision, HalfEntry, HalfState};
use super::{with_table, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};
use crate::context::BrokerContext;
use crate::core::error::{Refusal, RefusalKind, WriteError};
use crate::core::scheduler::{check_target, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC};
use crate::core::send_back::rewrite_properties;

/// One END_TRANSACTION, as the wire adapter read it.
#[derive(Debug, Clone, Copy)]
pub struct EndRequest<'a> {
    /// `producerGroup`.
    pub producer_group: &'a str,
    /// `tranStateTableOffset`: the half's queue offset.
    pub half_queue_offset: i64,
    /// `commitLogOffset`: the half's CommitLog offset.
    pub half_phys_offset: i64,
    /// `commitOrRollback`.
    pub commit_or_rollback: i32,
    /// `fromTransactionCheck`.
    pub from_check: bool,
}

/// What an END did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    /// The decision was recorded now.
    Decided(Decision),
    /// The half was already decided this way (or the END said "unknown"): nothing changed.
    AlreadyDecided(Decision),
    /// "Unknown" for a pending half: noted; the half will be checked back.
    Unknown,
}

/// Why an END was refused.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    /// A bad argument (negative offset, unknown `commitOrRollback`).
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// No half message matches the END.
    #[error("END_TRANSACTION names no half message: {detail}")]
    NoHalf {
        /// What did not match.
        detail: String,
    },
    /// The half belongs to another producer group.
    #[error("the half message at tranStateTableOffset {queue_offset} belongs to producer group {owner}, not {asked}")]
    WrongGroup {
        /// The half's queue offset.
        queue_offset: u64,
        /// Its group.
        owner: String,
        /// The END's group.
        asked: String,
    },
    /// The half was decided the other way.
    #[error("the half message at tranStateTableOffset {queue_offset} was already decided ({decided}); {asked} cannot change that")]
    Conflict {
        /// The half's queue offset.
        queue_offset: u64,
        /// Its decision.
        decided: &'static str,
        /// The END's.
        asked: &'static str,
    },
    /// Another decision of the half is being written now.
    #[error("a decision for the half message at tranStateTableOffset {queue_offset} is being written now; retry")]
    Busy {
        /// The half's queue offset.
        queue_offset: u64,
    },
    /// The decision could not be made durable (or this broker is not master).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The table could not be rebuilt from the log.
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl EndError {
    /// The metric label of a refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            EndError::Refused(r) if r.kind == RefusalKind::NotMaster => "not_master",
            EndError::Refused(_) => "bad_argument",
            EndError::NoHalf { .. } => "no_half",
            EndError::WrongGroup { .. } => "wrong_group",
            EndError::Conflict { .. } => "conflict",
            EndError::Busy { .. } => "busy",
            EndError::Write(WriteError::NotMaster { .. } | WriteError::LeaseExpired { .. }) => {
                "not_master"
            }
            EndError::Write(_) | EndError::Load(_) => "not_durable",
        }
    }
}

/// What the END asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Decide(Decision),
    Unknown,
}

/// Handles one END; refusals are counted and logged (Java sends END one-way).
pub async fn end(ctx: &BrokerContext, request: &EndRequest<'_>) -> Result<EndOutcome, EndError> {
    let result = end_inner(ctx, request).await;
    if let Err(error) = &result {
        ctx.metrics.transactions.end_refused(error.reason());
        ctx.transactions
            .log_refusal(error.reason(), &error.to_string());
    }
    result
}

async fn end_inner(ctx: &BrokerContext, request: &EndRequest<'_>) -> Result<EndOutcome, EndError> {
    let (ask, queue_offset, phys_offset) = parse(request)?;
    crate::core::ack::check_writable(ctx, "transaction decision")?;
    let group = request.producer_group.to_string();
    let claimed = with_table(ctx, |table| -> Result<Claim, EndError> {
        let Some(entry) = table.get_mut(queue_offset) else {
            return Ok(Claim::Untracked(
                table.forgotten(queue_offset),
                table.half_low,
            ));
        };
        claim(entry, queue_offset, phys_offset, &group, ask)
    })
    .await??;
    match claimed {
        Claim::Done(outcome) => Ok(outcome),
        Claim::Untracked(forgotten, half_low) => {
            untracked(ctx, queue_offset, phys_offset, forgotten, half_low, ask).await
        }
        Claim::RecordUnknown(entry) => {
            let op = OpRecord {
                half_queue_offset: queue_offset,
                half_phys_offset: entry.phys_offset,
                op: Op::Unknown,
            };
            let written = write_ops(ctx, &[op]).await;
            if written.is_err() {
                let _ = with_table(ctx, |t| {
                    t.get_mut(queue_offset).map(|e| e.unknown_recorded = false)
                })
                .await;
            }
            written?;
            ctx.metrics.transactions.decided("unknown");
            Ok(EndOutcome::Unknown)
        }
        Claim::Write(entry, decision) => {
            decide(ctx, queue_offset, &entry, decision).await?;
            Ok(EndOutcome::Decided(decision))
        }
    }
}

/// Reads the END's fields (negative offsets and unknown values refused).
fn parse(request: &EndRequest<'_>) -> Result<(Ask, u64, u64), EndError> {
    let ask = match request.commit_or_rollback {
        TRANSACTION_COMMIT_TYPE => Ask::Decide(Decision::Commit),
        TRANSACTION_ROLLBACK_TYPE => Ask::Decide(Decision::Rollback),
        TRANSACTION_NOT_TYPE => Ask::Unknown,
        other => {
            return Err(Refusal::new(
                RefusalKind::InvalidArgument,
                format!("commitOrRollback {other} is not 8 (commit), 12 (rollback) or 0 (unknown)"),
            )
            .into())
        }
    };
    let (Ok(queue_offset), Ok(phys_offset)) = (
        u64::try_from(request.half_queue_offset),
        u64::try_from(request.half_phys_offset),
    ) else {
        return Err(Refusal::new(
            RefusalKind::InvalidArgument,
            format!(
                "tranStateTableOffset {} and commitLogOffset {} must not be negative",
                request.half_queue_offset, request.half_phys_offset
            ),
        )
        .into());
    };
    Ok((ask, queue_offset, phys_offset))
}

/// What the table says to do with an END.
enum Claim {
    Done(EndOutcome),
    Untracked(Option<Decision>, u64),
    RecordUnknown(HalfEntry),
    Write(HalfEntry, Decision),
}

/// Judges an END against a tracked half and claims the half for the decision (invariants 1–4).
fn claim(
    entry: &mut HalfEntry,
    queue_offset: u64,
    phys_offset: u64,
    group: &str,
    ask: Ask,
) -> Result<Claim, EndError> {
    if entry.phys_offset != phys_offset {
        return Err(EndError::NoHalf {
            detail: format!(
                "tranStateTableOffset {queue_offset} is the half at commitLogOffset {}, not {phys_offset}",
                entry.phys_offset
            ),
        });
    }
    if entry.producer_group != group {
        return Err(EndError::WrongGroup {
            queue_offset,
            owner: entry.producer_group.clone(),
            asked: group.to_string(),
        });
    }
    match (entry.state, ask) {
        (HalfState::Decided(done), Ask::Unknown) => {
            Ok(Claim::Done(EndOutcome::AlreadyDecided(done)))
        }
        (HalfState::Decided(done), Ask::Decide(asked)) if done == asked => {
            Ok(Claim::Done(EndOutcome::AlreadyDecided(done)))
        }
        (HalfState::Decided(done), Ask::Decide(asked)) => Err(EndError::Conflict {
            queue_offset,
            decided: done.as_str(),
            asked: asked.as_str(),
        }),
        (HalfState::Deciding(_), _) => Err(EndError::Busy { queue_offset }),
        (HalfState::Pending, Ask::Unknown) if entry.unknown_recorded => {
            Ok(Claim::Done(EndOutcome::Unknown))
        }
        (HalfState::Pending, Ask::Unknown) => {
            entry.unknown_recorded = true;
            Ok(Claim::RecordUnknown(entry.clone()))
        }
        (HalfState::Pending, Ask::Decide(decision)) => {
            entry.state = HalfState::Deciding(decision);
            Ok(Claim::Write(entry.clone(), decision))
        }
    }
}

/// An END for a half the table does not track: below the low watermark (decided), or none.
/// A forgotten half's decision is the kept one, else read from the log: committed if its
/// real message is there (by `UNIQ_KEY` and `prepared_tx_offset`), else never exposed
/// (rolled back or discarded).
async fn untracked(
    ctx: &BrokerContext,
    queue_offset: u64,
    phys_offset: u64,
    forgotten: Option<Decision>,
    half_low: u64,
    ask: Ask,
) -> Result<EndOutcome, EndError> {
    if queue_offset >= half_low {
        return Err(EndError::NoHalf {
            detail: format!("no half message at tranStateTableOffset {queue_offset}"),
        });
    }
    let no_half = |detail: &str| EndError::NoHalf {
        detail: format!(
            "tranStateTableOffset {queue_offset} (commitLogOffset {phys_offset}): {detail}"
        ),
    };
    let bytes = crate::core::lookup::message_at(ctx, phys_offset)
        .await
        .map_err(|_| no_half("no half message at that commitLogOffset"))?;
    let view = RecordView::parse(&bytes).map_err(|_| no_half("the record there is unreadable"))?;
    if view.topic_str() != TRANS_HALF_TOPIC || view.queue_offset != queue_offset {
        return Err(no_half("the record there is not that half message"));
    }
    let done = match forgotten {
        Some(done) => done,
        None => {
            let topic = view
                .properties
                .get_str(PROPERTY_REAL_TOPIC)
                .unwrap_or_default();
            if already_committed(ctx, &view, topic, phys_offset).await? {
                Decision::Commit
            } else {
                Decision::Rollback
            }
        }
    };
    match ask {
        Ask::Decide(asked)
            if asked != done && (asked == Decision::Commit || done == Decision::Commit) =>
        {
            Err(EndError::Conflict {
                queue_offset,
                decided: done.as_str(),
                asked: asked.as_str(),
            })
        }
        _ => Ok(EndOutcome::AlreadyDecided(done)),
    }
}

/// Writes a claimed decision and applies it to the table; on failure the half is pending
/// again (invariant 2).
pub(super) async fn decide(
    ctx: &BrokerContext,
    queue_offset: u64,
    entry: &HalfEntry,
    decision: Decision,
) -> Result<(), EndError> {
    let op = OpRecord {
        half_queue_offset: queue_offset,
        half_phys_offset: entry.phys_offset,
        op: Op::Decided(decision),
    };
    let written = match decision {
        Decision::Commit => commit(ctx, entry, &op).await,
        Decision::Rollback => write_ops(ctx, &[op]).await.map_err(EndError::from),
        Decision::Discard => super::check::discard(ctx, entry, &op).await,
    };
    let pending = with_table(ctx, |table| {
        match &written {
            Ok(op_offset) => {
                table.note_op(queue_offset, *op_offset);
                table.decide(queue_offset, decision);
                table.forget_decided_prefix();
            }
            Err(_) => {
                if let Some(e) = table.get_mut(queue_offset) {
                    e.state = HalfState::Pending;
                }
            }
        }
        table.pending_count()
    })
    .await;
    if let Ok(pending) = pending {
        ctx.metrics.transactions.set_pending(pending);
    }
    written?;
    ctx.metrics.transactions.decided(decision.as_str());
    Ok(())
}

/// Writes the real message and the commit op record in one append; returns the op's queue
/// offset.
async fn commit(ctx: &BrokerContext, entry: &HalfEntry, op: &OpRecord) -> Result<u64, EndError> {
    let bytes = crate::core::lookup::message_at(ctx, entry.phys_offset).await?;
    let view = RecordView::parse(&bytes).map_err(|e| {
        Refusal::new(
            RefusalKind::Internal,
            format!(
                "the half message at {} is unreadable: {e}",
                entry.phys_offset
            ),
        )
    })?;
    let (topic, queue) = crate::core::scheduler::real_target(&view);
    check_target(ctx, topic, queue).map_err(|e| {
        Refusal::new(
            RefusalKind::InvalidArgument,
            format!("commit refused; the half stays pending: {e}"),
        )
    })?;
    let properties = rewrite_properties(
        &view.properties,
        &[PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID],
        &[],
    );
    let real = DraftRecord {
        topic,
        queue_id: queue.parse().unwrap_or_default(),
        flag: view.flag,
        sys_flag: (view.sys_flag & !TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms: view.born_timestamp_ms,
        born_host: view.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: view.reconsume_times,
        prepared_tx_offset: entry.phys_offset as i64,
        body: view.body,
        properties: &properties,
    };
    if entry.recovered && already_committed(ctx, &view, topic, entry.phys_offset).await? {
        tracing::info!(half_phys_offset = entry.phys_offset, %topic,
            "the committed copy of a half message is already in the log; recording the decision only");
        return Ok(write_ops(ctx, &[*op]).await?);
    }
    let (op_body, op_properties) = (op.body(), op.properties());
    let op_draft = op_draft(ctx, &op_body, &op_properties);
    let receipt = crate::core::send::put(ctx, &[real, op_draft])
        .await
        .map_err(|e| match e {
            crate::core::error::SendError::Refused(r) => EndError::Refused(r),
            crate::core::error::SendError::Write(w) => EndError::Write(w),
        })?;
    Ok(receipt.placements.last().map_or(0, |p| p.queue_offset))
}

/// Whether the real message of a half was written already (looked up by `UNIQ_KEY`).
///
/// # Errors
/// A [`Refusal`] (internal) when the key index cannot be read: answering "not written" then
/// could write a second copy of a committed message, so the caller must not decide.
pub(super) async fn already_committed(
    ctx: &BrokerContext,
    half: &RecordView<'_>,
    topic: &str,
    phys_offset: u64,
) -> Result<bool, Refusal> {
    let Some(uniq) = half.properties.get_str("UNIQ_KEY").map(str::to_string) else {
        return Ok(false);
    };
    let (store, topic) = (ctx.store.clone(), topic.to_string());
    let unreadable = |error: String| {
        Refusal::new(
            RefusalKind::Internal,
            format!(
                "could not look for the committed copy of the half at {phys_offset}: {error}; \
                 the half stays undecided"
            ),
        )
    };
    let copies =
        tokio::task::spawn_blocking(move || store.messages_by_unique_key(&topic, &uniq, 16))
            .await
            .map_err(|e| unreadable(e.to_string()))?
            .map_err(|e| unreadable(e.to_string()))?;
    Ok(copies.iter().any(|bytes| {
        RecordView::parse(bytes).is_ok_and(|v| v.prepared_tx_offset == phys_offset as i64)
    }))
}

/// An op record's draft.
pub(super) fn op_draft<'a>(
    ctx: &BrokerContext,
    body: &'a [u8],
    properties: &'a [u8],
) -> DraftRecord<'a> {
    DraftRecord {
        topic: TRANS_OP_HALF_TOPIC,
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: super::now_ms(),
        born_host: ctx.broker_addr,
        store_host: ctx.broker_addr,
        reconsume_times: 0,
        prepared_tx_offset: 0,
        body,
        properties,
    }
}

/// Appends op records as one batch; returns the last one's queue offset.
pub(super) async fn write_ops(ctx: &BrokerContext, ops: &[OpRecord]) -> Result<u64, WriteError> {
    let encoded: Vec<(Vec<u8>, Vec<u8>)> =
        ops.iter().map(|op| (op.body(), op.properties())).collect();
    let drafts: Vec<DraftRecord<'_>> = encoded.iter().map(|(b, p)| op_draft(ctx, b, p)).collect();
    let receipt = crate::core::ack::put_messages(ctx, &drafts).await?;
    Ok(receipt.placements.last().map_or(0, |p| p.queue_offset))
}
