//! Rebuilding the table of tracked halves from the log (invariant 3 of the module): the
//! half queue from the checker's half watermark, then the op queue from its op watermark,
//! applying each op record to its half.
//!
//! Invariants:
//! 1. The rebuild reads only what the log holds below the dispatch point it waited for, so a
//!    rebuilt table equals the table the previous master held for everything acknowledged.
//! 2. Reads go through `core::system_queue::read_queue`: a damaged (quarantined) record is
//!    logged and skipped, every other read failure is the caller's error — the table is never
//!    built from a partial read.

use std::time::Duration;

use ferromq_protocol::remoting::headers::transaction::{
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, PROPERTY_PRODUCER_GROUP,
};
use ferromq_protocol::{Properties, RecordView};
use ferromq_store::StoredMessage;

use super::op::{Op, OpRecord};
use super::table::{HalfEntry, HalfState, Table};
use super::{TransactionSettings, TRANSACTION_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};
use crate::context::BrokerContext;
use crate::core::error::ViewError;
use crate::core::system_queue::{read_queue, QueueReadError};

/// Longest wait for the dispatcher before a rebuild reads.
const DISPATCH_WAIT: Duration = Duration::from_secs(5);

/// Why the table could not be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A queue could not be read.
    #[error("rebuilding the transaction table: {0}")]
    Read(#[from] QueueReadError),
    /// The checker's watermarks could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
    /// The master term changed during the rebuild.
    #[error("the broker's master term changed while the transaction table was rebuilt")]
    TermChanged,
}

/// Rebuilds the table from the log.
pub async fn rebuild(ctx: &BrokerContext) -> Result<Table, LoadError> {
    ctx.store.dispatch_caught_up(DISPATCH_WAIT).await;
    let (half_low, op_low) = {
        let offsets = crate::core::view::offsets(&ctx.store).await?;
        (
            offsets
                .stored(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0)
                .unwrap_or(0),
            offsets
                .stored(TRANSACTION_GROUP, TRANS_OP_HALF_TOPIC, 0)
                .unwrap_or(0),
        )
    };
    let settings = ctx.transactions.settings;
    let mut table = Table::new(half_low, op_low, settings.tracked_max);
    let half_end = read_queue(ctx, TRANS_HALF_TOPIC, half_low, |message| {
        if let Some(entry) = half_entry(&settings, message) {
            table.insert(message.queue_offset, entry);
        }
    })
    .await?;
    read_queue(ctx, TRANS_OP_HALF_TOPIC, op_low, |message| {
        apply_op(&mut table, message);
    })
    .await?;
    table.advance(half_end);
    tracing::info!(
        tracked = table.len(),
        pending = table.pending_count(),
        half_low = table.half_low,
        op_low = table.op_low,
        "transaction table rebuilt from the log"
    );
    Ok(table)
}

/// The table entry of a stored half.
pub(crate) fn half_entry(
    settings: &TransactionSettings,
    message: &StoredMessage,
) -> Option<HalfEntry> {
    let view = match RecordView::parse(&message.bytes) {
        Ok(view) => view,
        Err(error) => {
            tracing::error!(phys_offset = message.phys_offset, %error, "unreadable half message skipped");
            return None;
        }
    };
    Some(HalfEntry {
        phys_offset: message.phys_offset,
        producer_group: view
            .properties
            .get_str(PROPERTY_PRODUCER_GROUP)
            .unwrap_or_default()
            .to_string(),
        store_timestamp_ms: view.store_timestamp_ms,
        immunity_ms: immunity_ms(settings, &view.properties),
        checks: 0,
        last_check_ms: 0,
        state: HalfState::Pending,
        first_op_offset: None,
        recovered: true,
        unknown_recorded: false,
    })
}

/// The time a half is not checked after it was stored: its `CHECK_IMMUNITY_TIME_IN_SECONDS`,
/// else `transactionTimeOut`.
pub(crate) fn immunity_ms(settings: &TransactionSettings, properties: &Properties<'_>) -> u64 {
    properties
        .get_str(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(settings.timeout_ms, |seconds| seconds.saturating_mul(1_000))
}

/// Applies one op record to the table.
fn apply_op(table: &mut Table, message: &StoredMessage) {
    let Ok(view) = RecordView::parse(&message.bytes) else {
        tracing::error!(
            phys_offset = message.phys_offset,
            "unreadable op record skipped"
        );
        return;
    };
    let Some(record) = OpRecord::parse(&view) else {
        tracing::warn!(
            phys_offset = message.phys_offset,
            "op record of an unknown form skipped"
        );
        return;
    };
    table.note_op(record.half_queue_offset, message.queue_offset);
    match record.op {
        Op::Decided(decision) => table.decide(record.half_queue_offset, decision),
        Op::Check(n) => {
            if let Some(entry) = table.get_mut(record.half_queue_offset) {
                entry.checks = entry.checks.max(n);
                entry.last_check_ms = entry.last_check_ms.max(view.store_timestamp_ms);
                entry.unknown_recorded = false;
            }
        }
        Op::Unknown => {
            if let Some(entry) = table.get_mut(record.half_queue_offset) {
                entry.unknown_recorded = true;
            }
        }
    }
}
