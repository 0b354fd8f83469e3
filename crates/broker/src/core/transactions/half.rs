//! Storing a half message: the message goes to `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 with its
//! real topic and queue in `REAL_TOPIC` / `REAL_QID` and its producer group in `PGROUP`, and
//! the transaction bits of its sysFlag cleared (the topic, not the flag, marks a half, as in
//! RocketMQ).
//!
//! Invariants:
//! 1. The real target is checked when the half is accepted (a valid, existing, writable topic
//!    and queue; `scheduler::check_target`), so a commit never finds an invalid target it
//!    could have refused at the send.
//! 2. A batch or a delayed message cannot be a half: refused with MESSAGE_ILLEGAL.
//! 3. The half is tracked only after it is acknowledged; when `transactionTrackedMax` halves
//!    are tracked a new one is refused SYSTEM_BUSY before anything is written.

use ferromq_protocol::remoting::headers::transaction::{
    PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED, TRANSACTION_PREPARED_TYPE,
    TRANSACTION_TYPE_MASK,
};
use ferromq_protocol::{DraftRecord, Properties};
use ferromq_store::PutReceipt;

use super::table::{HalfEntry, HalfState};
use super::{with_table, TRANS_HALF_TOPIC};
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::error::{Refusal, RefusalKind, SendError};
use crate::core::scheduler::{check_target, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC};
use crate::core::send::{check_properties_len, put};
use crate::core::send_back::rewrite_properties;

/// Whether a send is a half message: the prepared sysFlag type, or `TRAN_MSG=true`
/// (`prepared`: the value of its `TRAN_MSG` property, if any).
pub fn is_half(sys_flag: i32, prepared: Option<&str>) -> bool {
    sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE
        || prepared.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Stores `draft` (its real topic and queue) as a half message of `producer_group` and tracks
/// it.
pub async fn store_half(
    ctx: &BrokerContext,
    draft: &DraftRecord<'_>,
    producer_group: &str,
) -> Result<PutReceipt, SendError> {
    let queue = draft.queue_id.to_string();
    if let Err(error) = check_target(ctx, draft.topic, &queue) {
        let remark = format!("half message refused: {error}");
        return Err(access::refuse(
            ctx,
            "transaction_target",
            Request::Send,
            RefusalKind::InvalidArgument,
            remark,
        )
        .into());
    }
    let properties = Properties(draft.properties);
    let group = properties
        .get_str(PROPERTY_PRODUCER_GROUP)
        .filter(|g| !g.is_empty())
        .unwrap_or(producer_group)
        .to_string();
    ferromq_protocol::names::validate_group(&group).map_err(Refusal::from)?;
    let added = [
        (PROPERTY_REAL_TOPIC, draft.topic.to_string()),
        (PROPERTY_REAL_QUEUE_ID, queue),
        (PROPERTY_PRODUCER_GROUP, group.clone()),
        (PROPERTY_TRANSACTION_PREPARED, "true".to_string()),
    ];
    let properties = rewrite_properties(&properties, &[], &added);
    check_properties_len(&properties)?;
    let reserved = with_table(ctx, |table| table.has_room().then(|| table.reserve()))
        .await
        .map_err(|e| Refusal::new(RefusalKind::Busy, e.to_string()))?;
    let Some(floor) = reserved else {
        return Err(Refusal::new(
            RefusalKind::Busy,
            format!(
                "half message refused: the broker tracks transactionTrackedMax ({}) half messages; \
                 end some transactions or retry later",
                ctx.transactions.settings.tracked_max
            ),
        )
        .into());
    };
    let reservation = Reservation {
        ctx,
        epoch: ctx.replication.epoch(),
        floor,
    };
    let half = DraftRecord {
        topic: TRANS_HALF_TOPIC,
        queue_id: 0,
        sys_flag: draft.sys_flag & !TRANSACTION_TYPE_MASK,
        properties: &properties,
        ..draft.clone()
    };
    let receipt = put(ctx, &[half]).await?;
    track(ctx, &receipt, group, &properties).await;
    drop(reservation);
    ctx.metrics.transactions.half_stored();
    Ok(receipt)
}

/// A half being stored (invariant 2 of `table`): released when dropped — tracked, failed, or
/// cancelled — so a reservation never outlives its send.
struct Reservation<'a> {
    ctx: &'a BrokerContext,
    epoch: u64,
    floor: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let floor = self.floor;
        self.ctx.transactions.with_table_now(self.epoch, |table| {
            table.release(floor);
            table.forget_decided_prefix();
        });
    }
}

/// Tracks an acknowledged half. If the table cannot be had now (the term changed), the next
/// rebuild finds the half in the log.
async fn track(ctx: &BrokerContext, receipt: &PutReceipt, group: String, properties: &[u8]) {
    let Some(placement) = receipt.placements.first() else {
        return;
    };
    let immunity_ms = super::load::immunity_ms(&ctx.transactions.settings, &Properties(properties));
    let entry = HalfEntry {
        phys_offset: placement.phys_offset,
        producer_group: group,
        store_timestamp_ms: placement.store_timestamp_ms,
        immunity_ms,
        checks: 0,
        last_check_ms: 0,
        state: HalfState::Pending,
        first_op_offset: None,
        recovered: false,
        unknown_recorded: false,
    };
    let queue_offset = placement.queue_offset;
    let tracked = with_table(ctx, move |table| {
        table.insert(queue_offset, entry);
        table.pending_count()
    })
    .await;
    match tracked {
        Ok(pending) => ctx.metrics.transactions.set_pending(pending),
        Err(error) => {
            tracing::warn!(%error, queue_offset, "half message stored but not tracked now; the next rebuild tracks it")
        }
    }
}
