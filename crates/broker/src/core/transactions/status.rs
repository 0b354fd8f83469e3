//! What an administrator is told about one half message (`queryMsgById` on a half): its state
//! as this broker's table or log says.
//!
//! Invariants:
//! 1. Only a master answers from its table; a slave says it cannot tell (its table is not
//!    kept, the master's is authoritative) rather than guess.
//! 2. A half below the low watermark is reported from the kept decision, else from the log
//!    (committed when its real message is there), never as pending.

use ferromq_protocol::RecordView;

use super::table::{Decision, HalfState};
use super::with_table;
use crate::context::BrokerContext;

/// The state of the half message `view` (a record of `RMQ_SYS_TRANS_HALF_TOPIC`).
pub async fn half_state(ctx: &BrokerContext, view: &RecordView<'_>) -> String {
    if !ctx.replication.role().is_master() {
        return "unknown on this broker (a slave): ask the master".into();
    }
    let (queue_offset, phys_offset) = (view.queue_offset, view.phys_offset);
    let looked_up = with_table(ctx, |table| match table.get(queue_offset) {
        Some(entry) if entry.phys_offset == phys_offset => Some(match entry.state {
            HalfState::Pending | HalfState::Deciding(_) => {
                format!("pending, {} check-backs", entry.checks)
            }
            HalfState::Decided(decision) => described(decision).to_string(),
        }),
        _ => table
            .forgotten(queue_offset)
            .map(|decision| described(decision).to_string()),
    })
    .await;
    match looked_up {
        Ok(Some(state)) => state,
        Ok(None) => {
            let topic = view
                .properties
                .get_str(crate::core::scheduler::PROPERTY_REAL_TOPIC)
                .unwrap_or_default();
            match super::decision::already_committed(ctx, view, topic, phys_offset).await {
                Ok(true) => "committed".into(),
                Ok(false) => "rolled back or discarded".into(),
                Err(refusal) => format!("unknown: {refusal}"),
            }
        }
        Err(error) => format!("unknown: {error}"),
    }
}

fn described(decision: Decision) -> &'static str {
    match decision {
        Decision::Commit => "committed",
        Decision::Rollback => "rolled back",
        Decision::Discard => "discarded after transactionCheckMax check-backs",
    }
}
