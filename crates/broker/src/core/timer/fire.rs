//! Firing due timer messages, writing op records, and rebuilding the table from the log.
//!
//! A due message goes to its real topic and queue (checked again: the topic may have been
//! deleted or made read-only meanwhile) in the same append as its `fired` op record; one whose
//! target is refused goes to the scheduler's dead-letter topic with the reason (as a delayed
//! message does) and gets a `dead` op record. Only a failure of the store itself leaves a
//! message pending, to be fired on a later tick.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::{DraftRecord, Properties, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::TagFilter;

use super::table::TimerTable;
use super::{
    now_ms, with_loaded, with_table, TimerError, FIRE_BATCH_MAX, FIRE_TICK, PROPERTY_TIMER_DUE,
    TIMER_GROUP, TIMER_OP_TOPIC, TIMER_TOPIC, WATERMARK_EVERY,
};
use crate::context::BrokerContext;
use crate::core::scheduler::{
    check_target, dead_letter, draft_of, is_permanent, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC,
};
use crate::core::send_back::rewrite_properties;
use crate::core::system_queue::read_queue;

/// Property of an op record naming what settled the timer message.
pub const PROPERTY_TIMER_OP: &str = "FERROMQ_TIMER_OP";
/// Longest wait for the dispatcher before a rebuild reads.
const DISPATCH_WAIT: Duration = Duration::from_secs(5);

/// What settled a timer message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Moved to its topic.
    Fired,
    /// Cancelled by its producer.
    Recalled,
    /// Its target was refused: moved to the dead-letter topic.
    Dead,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Fired => "fired",
            Op::Recalled => "recalled",
            Op::Dead => "dead",
        }
    }
}

/// The op record draft settling timer record `offset`.
fn op_draft<'a>(ctx: &BrokerContext, body: &'a [u8], properties: &'a [u8]) -> DraftRecord<'a> {
    DraftRecord {
        topic: TIMER_OP_TOPIC,
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms(),
        born_host: ctx.broker_addr,
        store_host: ctx.broker_addr,
        reconsume_times: 0,
        prepared_tx_offset: 0,
        body,
        properties,
    }
}

/// Appends the op record settling `offset` (after `with`, a record appended in the same
/// batch: the fired message) and waits for the acknowledgement; then settles the entry.
pub(super) async fn write_op(
    ctx: &BrokerContext,
    offset: u64,
    op: Op,
    with: Option<DraftRecord<'_>>,
) -> Result<(), crate::core::error::WriteError> {
    let body = offset.to_string().into_bytes();
    let properties = Properties::encode([(PROPERTY_TIMER_OP, op.as_str())]);
    let mut drafts: Vec<DraftRecord<'_>> = with.into_iter().collect();
    drafts.push(op_draft(ctx, &body, &properties));
    let receipt = crate::core::ack::put_messages(ctx, &drafts).await?;
    let position = receipt.placements.last().map_or(0, |p| p.queue_offset);
    with_loaded(ctx, |t| t.settle(position, offset));
    count_ops(ctx, 1).await;
    Ok(())
}

/// Counts `n` op records written and commits the watermarks every [`WATERMARK_EVERY`].
async fn count_ops(ctx: &BrokerContext, n: u64) {
    let since = ctx
        .timers
        .ops_since_watermark
        .fetch_add(n, Ordering::Relaxed)
        + n;
    if since >= WATERMARK_EVERY {
        ctx.timers.ops_since_watermark.store(0, Ordering::Relaxed);
        commit_watermarks(ctx).await;
    }
}

/// Fires due timer messages until the broker stops (masters only).
pub async fn run_timer(ctx: Arc<BrokerContext>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(FIRE_TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !ctx.replication.role().is_master() || ctx.store.queue_bounds(TIMER_TOPIC, 0).is_none() {
            continue;
        }
        if let Err(error) = fire_due(&ctx).await {
            tracing::warn!(%error, "firing timer messages failed; retrying on the next tick");
        }
    }
}

/// Fires the messages due now (at most [`FIRE_BATCH_MAX`]): those whose target is fine in one
/// append (each real message followed by its op record: one acknowledgement for the batch),
/// the rest one by one ([`fire_one`]: dead letters, and every message of a batch a permanent
/// error refused, so one bad message cannot hold back the others).
async fn fire_due(ctx: &BrokerContext) -> Result<(), String> {
    let due = with_table(ctx, |t| t.take_due(now_ms(), FIRE_BATCH_MAX))
        .await
        .map_err(|e| e.to_string())?;
    let single = match fire_batch(ctx, &due).await {
        Ok(single) => single,
        Err(error) => {
            with_loaded(ctx, |t| due.iter().for_each(|o| t.release(*o)));
            return Err(error);
        }
    };
    for (index, offset) in single.iter().enumerate() {
        if let Err(error) = fire_one(ctx, *offset).await {
            with_loaded(ctx, |t| single[index..].iter().for_each(|o| t.release(*o)));
            return Err(error);
        }
    }
    Ok(())
}

/// Fires the due messages whose target is fine in one append; returns the offsets left to
/// [`fire_one`]. `Err` (nothing fired) for a failure worth retrying.
async fn fire_batch(ctx: &BrokerContext, due: &[u64]) -> Result<Vec<u64>, String> {
    let mut single = Vec::new();
    let mut read = Vec::new();
    for offset in due {
        let got = ctx
            .store
            .get_messages(TIMER_TOPIC, 0, *offset, 1, usize::MAX, &TagFilter::All)
            .map_err(|e| e.to_string())?;
        match got.messages.into_iter().find(|m| m.queue_offset == *offset) {
            Some(message) => read.push((*offset, message.bytes)),
            None => single.push(*offset),
        }
    }
    let mut parts = Vec::new();
    for (offset, bytes) in &read {
        let Ok(view) = RecordView::parse(bytes) else {
            single.push(*offset);
            continue;
        };
        let topic = view
            .properties
            .get_str(PROPERTY_REAL_TOPIC)
            .unwrap_or_default();
        let queue = view
            .properties
            .get_str(PROPERTY_REAL_QUEUE_ID)
            .unwrap_or_default();
        if check_target(ctx, topic, queue).is_err() {
            single.push(*offset);
            continue;
        }
        let properties = rewrite_properties(
            &view.properties,
            &[
                PROPERTY_REAL_TOPIC,
                PROPERTY_REAL_QUEUE_ID,
                PROPERTY_TIMER_DUE,
            ],
            &[],
        );
        let op_body = offset.to_string().into_bytes();
        let op_properties = Properties::encode([(PROPERTY_TIMER_OP, Op::Fired.as_str())]);
        parts.push((
            *offset,
            view,
            topic,
            queue,
            properties,
            op_body,
            op_properties,
        ));
    }
    if parts.is_empty() {
        return Ok(single);
    }
    let mut drafts = Vec::with_capacity(parts.len() * 2);
    for (_, view, topic, queue, properties, op_body, op_properties) in &parts {
        drafts.push(DraftRecord {
            topic,
            queue_id: queue.parse().unwrap_or_default(),
            properties,
            ..draft_of(ctx, view)
        });
        drafts.push(op_draft(ctx, op_body, op_properties));
    }
    match crate::core::ack::put_messages(ctx, &drafts).await {
        Ok(receipt) => {
            with_loaded(ctx, |t| {
                for (part, pair) in parts.iter().zip(receipt.placements.chunks(2)) {
                    t.settle(pair[1].queue_offset, part.0);
                }
            });
            ctx.timers
                .fired
                .fetch_add(parts.len() as u64, Ordering::Relaxed);
            count_ops(ctx, parts.len() as u64).await;
            Ok(single)
        }
        Err(error) => {
            let error = crate::core::error::SendError::Write(error);
            if !is_permanent(&error) {
                return Err(error.to_string());
            }
            // A message the store refuses for what it is: fire each alone to isolate it.
            single.extend(parts.iter().map(|p| p.0));
            Ok(single)
        }
    }
}

/// Moves one due message (module doc); `Err` only for a store failure worth retrying.
async fn fire_one(ctx: &BrokerContext, offset: u64) -> Result<(), String> {
    let read = ctx
        .store
        .get_messages(TIMER_TOPIC, 0, offset, 1, usize::MAX, &TagFilter::All)
        .map_err(|e| e.to_string())?;
    let Some(message) = read.messages.iter().find(|m| m.queue_offset == offset) else {
        if offset < read.min_offset {
            tracing::error!(
                offset,
                "a pending timer message is gone from the log (retention); dropped"
            );
            with_loaded(ctx, |t| t.forget(offset));
            return Ok(());
        }
        // Acknowledged but not dispatched yet: fire it on a later tick.
        return Err(format!("timer record {offset} is not dispatched yet"));
    };
    let view = RecordView::parse(&message.bytes).map_err(|e| e.to_string())?;
    let topic = view
        .properties
        .get_str(PROPERTY_REAL_TOPIC)
        .unwrap_or_default();
    let queue = view
        .properties
        .get_str(PROPERTY_REAL_QUEUE_ID)
        .unwrap_or_default();
    let reason = match check_target(ctx, topic, queue) {
        Ok(()) => {
            let properties = rewrite_properties(
                &view.properties,
                &[
                    PROPERTY_REAL_TOPIC,
                    PROPERTY_REAL_QUEUE_ID,
                    PROPERTY_TIMER_DUE,
                ],
                &[],
            );
            let real = DraftRecord {
                topic,
                queue_id: queue.parse().unwrap_or_default(),
                properties: &properties,
                ..draft_of(ctx, &view)
            };
            match write_op(ctx, offset, Op::Fired, Some(real)).await {
                Ok(()) => {
                    ctx.timers.fired.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(error) => {
                    let error = crate::core::error::SendError::Write(error);
                    if !is_permanent(&error) {
                        return Err(error.to_string());
                    }
                    error.to_string()
                }
            }
        }
        Err(error) => error.to_string(),
    };
    dead_letter(ctx, &view, offset, &reason).await?;
    write_op(ctx, offset, Op::Dead, None)
        .await
        .map_err(|e| e.to_string())
}

/// Commits where a rebuild may start reading both queues.
async fn commit_watermarks(ctx: &BrokerContext) {
    let mut lows = None;
    with_loaded(ctx, |t| lows = Some((t.timer_low(), t.op_low())));
    let Some((timer_low, op_low)) = lows else {
        return;
    };
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: TIMER_GROUP.into(),
        client_id: "timer".into(),
        generation: None,
        entries: vec![
            OffsetEntry {
                topic: TIMER_TOPIC.into(),
                queue_id: 0,
                offset: timer_low,
            },
            OffsetEntry {
                topic: TIMER_OP_TOPIC.into(),
                queue_id: 0,
                offset: op_low,
            },
        ],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    if let Err(error) = crate::core::ack::put_offsets(ctx, &command).await {
        tracing::warn!(timer_low, op_low, %error, "timer watermark commit failed; the next one retries");
    }
}

/// Rebuilds the table from the log: the timer queue from its watermark, then the op queue.
pub(super) async fn rebuild(ctx: &BrokerContext) -> Result<TimerTable, TimerError> {
    ctx.store.dispatch_caught_up(DISPATCH_WAIT).await;
    let (timer_low, op_low) = {
        let offsets = crate::core::view::offsets(&ctx.store).await?;
        (
            offsets.stored(TIMER_GROUP, TIMER_TOPIC, 0).unwrap_or(0),
            offsets.stored(TIMER_GROUP, TIMER_OP_TOPIC, 0).unwrap_or(0),
        )
    };
    let mut table = TimerTable::new(timer_low, op_low, ctx.timers.settings.tracked_max);
    read_queue(ctx, TIMER_TOPIC, timer_low, |message| {
        let due = RecordView::parse(&message.bytes).ok().and_then(|view| {
            view.properties
                .get_str(PROPERTY_TIMER_DUE)
                .and_then(|d| d.parse::<i64>().ok())
        });
        match due {
            Some(due) => table.insert_recovered(message.queue_offset, due),
            None => tracing::error!(
                queue_offset = message.queue_offset,
                "a timer record without a readable due time; skipped by the rebuild"
            ),
        }
    })
    .await?;
    read_queue(ctx, TIMER_OP_TOPIC, op_low, |message| {
        let settled = RecordView::parse(&message.bytes)
            .ok()
            .and_then(|view| std::str::from_utf8(view.body).ok()?.parse::<u64>().ok());
        match settled {
            Some(offset) => table.settle(message.queue_offset, offset),
            None => tracing::error!(
                queue_offset = message.queue_offset,
                "an unreadable timer op record; skipped by the rebuild"
            ),
        }
    })
    .await?;
    tracing::info!(
        pending = table.len(),
        timer_low,
        op_low,
        "timer table rebuilt from the log"
    );
    Ok(table)
}
