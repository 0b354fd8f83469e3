//! Rebuilding the pop table from the log: the pop records from the watermark the broker last
//! committed for [`POP_GROUP`], applied in log order against the offset view (the reset
//! generation and committed offset of each queue), then the gaps filled (table invariant 3).
//!
//! The rebuild reads only what the log holds below the dispatch point it waited for, so the
//! rebuilt table holds every change that was answered; a record that does not decode is
//! logged and skipped (it was never written by this module).

use std::time::Duration;

use ferromq_protocol::RecordView;

use super::record::PopRecord;
use super::table::Table;
use super::{PopError, POP_GROUP, POP_QUEUES_MAX, POP_TOPIC, POP_WINDOW_MAX};
use crate::context::BrokerContext;
use crate::core::system_queue::read_queue;

/// Longest wait for the dispatcher before a rebuild reads.
const DISPATCH_WAIT: Duration = Duration::from_secs(5);

/// Rebuilds the table of master term `epoch` from the log.
pub async fn rebuild(ctx: &BrokerContext, epoch: u64) -> Result<Table, PopError> {
    ctx.store.dispatch_caught_up(DISPATCH_WAIT).await;
    let low = crate::core::view::offsets(&ctx.store)
        .await?
        .stored(POP_GROUP, POP_TOPIC, 0)
        .unwrap_or(0);
    let mut records = Vec::new();
    read_queue(ctx, POP_TOPIC, low, |message| {
        let decoded = RecordView::parse(&message.bytes)
            .map_err(|e| e.to_string())
            .and_then(|view| PopRecord::decode(view.body).map_err(|e| e.to_string()));
        match decoded {
            Ok(record) => records.push((message.queue_offset, record)),
            Err(error) => tracing::error!(
                queue_offset = message.queue_offset,
                %error,
                "unreadable pop record skipped by the rebuild"
            ),
        }
    })
    .await?;
    let offsets = crate::core::view::offsets(&ctx.store).await?;
    let mut table = Table::new(epoch, low, POP_WINDOW_MAX, POP_QUEUES_MAX);
    for (position, record) in &records {
        let generation = offsets.generation(&record.group, &record.topic);
        let committed = offsets
            .stored(&record.group, &record.topic, record.queue_id)
            .unwrap_or_else(|| queue_start(ctx, &record.topic, record.queue_id));
        table.replay(*position, record, generation, committed);
    }
    table.fill_gaps();
    tracing::info!(
        queues = table.len(),
        records = records.len(),
        from = low,
        "pop table rebuilt from the log"
    );
    Ok(table)
}

/// Where a group without a committed offset starts: the queue's first offset.
pub(crate) fn queue_start(ctx: &BrokerContext, topic: &str, queue_id: u32) -> u64 {
    ctx.store
        .queue_bounds(topic, queue_id)
        .map_or(0, |(min, _)| min)
}
