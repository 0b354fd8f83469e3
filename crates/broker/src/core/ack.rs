//! The one acknowledgement path. Every write the broker answers — a message, a batch, an
//! offset commit, a reset, a correction, the delay scheduler's progress — is appended to the
//! store and then awaits [`acknowledged`], so all of them are bounded by the same flush
//! timeout and fail with the same [`WriteError`] kinds (invariant 2). Replication's wait for
//! in-sync replicas (SYNC_MASTER) belongs here, in this one place.

use ferromq_protocol::DraftRecord;
use ferromq_store::offsets::OffsetCommand;
use ferromq_store::{AckTicket, CommitOutcome, MessageStore, PutReceipt};

use super::error::WriteError;

/// Resolves once everything below `ticket` may be acknowledged under the flush policy, or
/// with the reason it may not (bounded by the store's flush timeout). `what` names the write
/// in the error.
pub async fn acknowledged(
    store: &MessageStore,
    ticket: AckTicket,
    what: &'static str,
) -> Result<(), WriteError> {
    store
        .acknowledged(ticket)
        .await
        .map_err(|cause| WriteError::from_durability(what, cause))
}

/// Appends message records as one batch and waits for their acknowledgement.
pub async fn put_messages(
    store: &MessageStore,
    drafts: &[DraftRecord<'_>],
) -> Result<PutReceipt, WriteError> {
    let receipt = store
        .append(drafts)
        .map_err(|error| WriteError::from_append("message", error))?;
    acknowledged(store, receipt.ticket(), "message").await?;
    Ok(receipt)
}

/// Appends an offset command (judged by the store's offset rules under its append lock) and
/// waits for the acknowledgement of its record, if one was written.
pub async fn put_offsets(
    store: &MessageStore,
    command: &OffsetCommand,
) -> Result<CommitOutcome, WriteError> {
    let what = what_of(command);
    let (outcome, ticket) = store
        .append_offsets(command)
        .map_err(|error| WriteError::from_store(what, error))?;
    if let Some(ticket) = ticket {
        acknowledged(store, ticket, what).await?;
    }
    Ok(outcome)
}

/// Like [`put_offsets`] for a correction judged against `expected` stored offsets (see
/// `MessageStore::append_correction`).
pub async fn put_correction(
    store: &MessageStore,
    command: &OffsetCommand,
    expected: &[Option<u64>],
) -> Result<CommitOutcome, WriteError> {
    let (outcome, ticket) = store
        .append_correction(command, expected)
        .map_err(|error| WriteError::from_store("correction", error))?;
    if let Some(ticket) = ticket {
        acknowledged(store, ticket, "correction").await?;
    }
    Ok(outcome)
}

fn what_of(command: &OffsetCommand) -> &'static str {
    match command.kind {
        ferromq_store::offsets::OffsetKind::Commit => "commit",
        ferromq_store::offsets::OffsetKind::Reset => "reset",
        ferromq_store::offsets::OffsetKind::Correction => "correction",
    }
}
