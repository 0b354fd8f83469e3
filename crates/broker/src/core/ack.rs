//! The one acknowledgement path. Every write the broker answers — a message, a batch, an
//! offset commit, a reset, a correction, the delay scheduler's progress — is appended to the
//! store and then awaits [`acknowledged`], so all of them are bounded by the same flush
//! timeout and fail with the same [`WriteError`] kinds (invariant 2). Replication plugs in
//! here, in this one place: a broker that is not master refuses every write before it is
//! appended (R3), SYNC_MASTER refuses below `minInSyncReplicas` and waits until every
//! in-sync replica holds the write. Consumer progress (commits, resets, corrections) waits for
//! the in-sync replicas under ASYNC_MASTER too: offsets always take the synchronous path.

use ferromq_protocol::DraftRecord;
use ferromq_store::offsets::OffsetCommand;
use ferromq_store::{AckTicket, CommitOutcome, PutReceipt};

use super::error::WriteError;
use crate::context::BrokerContext;

/// Refuses a write of `what` this broker may not accept now: not master, or (SYNC_MASTER)
/// too few in-sync replicas.
pub fn check_writable(ctx: &BrokerContext, what: &'static str) -> Result<(), WriteError> {
    ctx.replication.check_writable(what)?;
    ctx.replication.check_in_sync(what)
}

/// Resolves once everything below `ticket` may be acknowledged — under the flush policy and,
/// for SYNC_MASTER, on every in-sync replica — or with the reason it may not (each wait
/// bounded by `syncFlushTimeout`). `what` names the write in the error.
pub async fn acknowledged(
    ctx: &BrokerContext,
    ticket: AckTicket,
    what: &'static str,
) -> Result<(), WriteError> {
    durable(ctx, ticket, what).await?;
    ctx.replication.replicated(ticket.end, what).await
}

/// Like [`acknowledged`] for consumer progress (commits, resets, corrections): under
/// ASYNC_MASTER too it waits for the in-sync replicas (see `Replication::replicated_progress`).
async fn acknowledged_progress(
    ctx: &BrokerContext,
    ticket: AckTicket,
    what: &'static str,
) -> Result<(), WriteError> {
    durable(ctx, ticket, what).await?;
    ctx.replication.replicated_progress(ticket.end, what).await
}

/// Waits for the flush policy to cover `ticket`.
async fn durable(
    ctx: &BrokerContext,
    ticket: AckTicket,
    what: &'static str,
) -> Result<(), WriteError> {
    ctx.store
        .acknowledged(ticket)
        .await
        .map_err(|cause| WriteError::from_durability(what, cause))
}

/// Appends message records as one batch and waits for their acknowledgement.
pub async fn put_messages(
    ctx: &BrokerContext,
    drafts: &[DraftRecord<'_>],
) -> Result<PutReceipt, WriteError> {
    check_writable(ctx, "message")?;
    let receipt = ctx
        .store
        .append(drafts)
        .map_err(|error| WriteError::from_append("message", error))?;
    acknowledged(ctx, receipt.ticket(), "message").await?;
    Ok(receipt)
}

/// Appends an offset command (judged by the store's offset rules under its append lock) and
/// waits for the acknowledgement of what its verdicts rest on: its record, or, when nothing
/// was written, everything appended before the judgement. Always, also when the local flush
/// covers it already: the in-sync replicas must hold it too.
pub async fn put_offsets(
    ctx: &BrokerContext,
    command: &OffsetCommand,
) -> Result<CommitOutcome, WriteError> {
    let what = what_of(command);
    check_writable(ctx, what)?;
    let (outcome, ticket) = ctx
        .store
        .append_offsets(command)
        .map_err(|error| WriteError::from_store(what, error))?;
    acknowledged_progress(ctx, ticket, what).await?;
    Ok(outcome)
}

/// Like [`put_offsets`] for a correction judged against `expected` stored offsets (see
/// `MessageStore::append_correction`).
pub async fn put_correction(
    ctx: &BrokerContext,
    command: &OffsetCommand,
    expected: &[Option<u64>],
) -> Result<CommitOutcome, WriteError> {
    check_writable(ctx, "correction")?;
    let (outcome, ticket) = ctx
        .store
        .append_correction(command, expected)
        .map_err(|error| WriteError::from_store("correction", error))?;
    acknowledged_progress(ctx, ticket, "correction").await?;
    Ok(outcome)
}

fn what_of(command: &OffsetCommand) -> &'static str {
    match command.kind {
        ferromq_store::offsets::OffsetKind::Commit => "commit",
        ferromq_store::offsets::OffsetKind::Reset => "reset",
        ferromq_store::offsets::OffsetKind::Correction => "correction",
    }
}
