//! Storing a timer message, and recalling one before it is due.

use std::sync::atomic::Ordering;

use ferromq_protocol::{DraftRecord, Properties};
use ferromq_store::PutReceipt;

use super::{now_ms, with_loaded, with_table, PROPERTY_TIMER_DUE, TIMER_TOPIC};
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::error::{Refusal, RefusalKind, SendError, WriteError};
use crate::core::scheduler::{check_target, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC};
use crate::core::send::check_properties_len;
use crate::core::send_back::rewrite_properties;

/// First word of a recall handle (format 1).
const RECALL_TAG: &str = "fmqt1";

/// The handle a producer recalls a timer message with: the timer record's queue offset.
pub fn recall_handle(timer_offset: u64) -> String {
    format!("{RECALL_TAG} {timer_offset}")
}

/// The timer record offset a recall handle names.
pub fn parse_recall_handle(handle: &str) -> Option<u64> {
    handle
        .strip_prefix(RECALL_TAG)
        .and_then(|rest| rest.strip_prefix(' '))
        .and_then(|n| n.parse::<u64>().ok())
}

/// Stores `draft` for delivery to its topic and queue at `due_ms`, once its target passed
/// `check_target`; the receipt names the timer record.
pub(crate) async fn schedule(
    ctx: &BrokerContext,
    draft: &DraftRecord<'_>,
    due_ms: i64,
) -> Result<PutReceipt, SendError> {
    let queue = draft.queue_id.to_string();
    if let Err(error) = check_target(ctx, draft.topic, &queue) {
        return Err(access::refuse(
            ctx,
            "schedule_target",
            Request::Schedule,
            error.kind(),
            format!("timer message refused: {error}"),
        )
        .into());
    }
    let real = [
        (PROPERTY_REAL_TOPIC, draft.topic.to_string()),
        (PROPERTY_REAL_QUEUE_ID, queue),
        (PROPERTY_TIMER_DUE, due_ms.to_string()),
    ];
    let properties = rewrite_properties(&Properties(draft.properties), &[], &real);
    check_properties_len(&properties).map_err(|refusal| {
        Refusal::new(
            refusal.kind,
            format!(
                "timer message refused: with REAL_TOPIC, REAL_QID and the due time, {}",
                refusal.remark
            ),
        )
    })?;
    let stored = DraftRecord {
        topic: TIMER_TOPIC,
        queue_id: 0,
        properties: &properties,
        ..draft.clone()
    };
    crate::core::ack::check_writable(ctx, "message")?;
    let appended = with_table(ctx, |t| {
        if !t.has_room() {
            return None;
        }
        let receipt = ctx.store.append(std::slice::from_ref(&stored));
        if let Ok(receipt) = &receipt {
            t.insert(receipt.placements[0].queue_offset, due_ms);
        }
        Some(receipt)
    })
    .await
    .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
    let Some(appended) = appended else {
        ctx.timers.refused_full.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal::new(
            RefusalKind::Busy,
            format!(
                "{} timer messages are pending (timerTrackedMax); retry later",
                ctx.timers.settings.tracked_max
            ),
        )
        .into());
    };
    let receipt = appended.map_err(|error| WriteError::from_append("message", error))?;
    let offset = receipt.placements[0].queue_offset;
    if let Err(error) = crate::core::ack::acknowledged(ctx, receipt.ticket(), "message").await {
        with_loaded(ctx, |t| t.forget(offset));
        return Err(error.into());
    }
    Ok(receipt)
}

/// Why a recall failed.
#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    /// The handle is not one this broker wrote.
    #[error("{0:?} is not a ferromq recall handle")]
    Malformed(String),
    /// The message is not pending: fired, recalled, or never a timer message here.
    #[error("timer message {0} is not pending: already delivered, recalled, or unknown")]
    NotPending(u64),
    /// The recall could not be written or the table not used.
    #[error("{0}")]
    Failed(String),
}

/// Cancels the pending timer message `handle` names, before it is due; returns its message id
/// (`UNIQ_KEY`) when it has one.
///
/// # Errors
/// [`RecallError`].
pub async fn recall(ctx: &BrokerContext, handle: &str) -> Result<Option<String>, RecallError> {
    let offset = parse_recall_handle(handle)
        .ok_or_else(|| RecallError::Malformed(handle.chars().take(64).collect()))?;
    crate::core::ack::check_writable(ctx, "recall")
        .map_err(|e| RecallError::Failed(e.to_string()))?;
    let claimed = with_table(ctx, |t| t.claim(offset))
        .await
        .map_err(|e| RecallError::Failed(e.to_string()))?;
    if !claimed {
        return Err(RecallError::NotPending(offset));
    }
    // The timer record was acknowledged; its ConsumeQueue entry may lag a moment.
    ctx.store
        .dispatch_caught_up(std::time::Duration::from_millis(500))
        .await;
    let message_id = ctx
        .store
        .get_messages(
            TIMER_TOPIC,
            0,
            offset,
            1,
            usize::MAX,
            &ferromq_store::TagFilter::All,
        )
        .ok()
        .and_then(|read| read.messages.into_iter().find(|m| m.queue_offset == offset))
        .and_then(|m| {
            let view = ferromq_protocol::RecordView::parse(&m.bytes).ok()?;
            let id = view
                .properties
                .get_str(ferromq_protocol::property_names::UNIQ_KEY)?;
            Some(id.to_string())
        });
    match super::fire::write_op(ctx, offset, super::fire::Op::Recalled, None).await {
        Ok(()) => {
            ctx.timers.recalled.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(offset, at = now_ms(), "timer message recalled");
            Ok(message_id)
        }
        Err(error) => {
            with_loaded(ctx, |t| t.release(offset));
            Err(RecallError::Failed(error.to_string()))
        }
    }
}
