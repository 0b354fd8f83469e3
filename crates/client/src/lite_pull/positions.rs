//! Positions: where a queue starts (stored offset, else the configured start position), how
//! polled positions reach the offset store and are committed, and OFFSET_ILLEGAL corrections.

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::enums::BoundaryType;
use ferromq_protocol::remoting::headers::offset::{
    SearchOffsetRequestHeader, SearchOffsetResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use super::config::StartPosition;
use super::state::{bump, Shared};
use crate::error::{ClientError, OffsetError};
use crate::offset_store::PersistReport;

/// Copies every assigned queue's polled position into the offset store's memory (nothing
/// when consuming transactionally: only committed transactions move the store).
pub(super) fn stage_positions(shared: &Shared) {
    if shared.is_transactional() {
        return;
    }
    let positions: Vec<(MessageQueue, u64)> = shared
        .lock()
        .queues
        .iter()
        .filter_map(|(q, s)| s.consumed.map(|o| (q.clone(), o)))
        .collect();
    let store = shared.pull.offset_store();
    for (queue, offset) in positions {
        store.update(&queue, offset);
    }
}

/// Stages every polled position and persists them all; `Err` when any queue failed.
pub(super) async fn commit_all(shared: &Shared) -> Result<PersistReport, OffsetError> {
    stage_positions(shared);
    let report = shared.pull.offset_store().persist_all().await?;
    if report.is_complete() {
        return Ok(report);
    }
    let first = report
        .failed
        .first()
        .map(|(queue, error)| format!("{queue:?}: {error}"))
        .unwrap_or_default();
    Err(OffsetError::PersistFailed {
        failed: report.failed.len(),
        total: report.failed.len() + report.persisted.len(),
        first,
    })
}

/// The first offset of `queue` stored at or after `timestamp_ms`
/// (SEARCH_OFFSET_BY_TIMESTAMP, lower boundary).
pub(super) async fn offset_for_timestamp(
    shared: &Shared,
    queue: &MessageQueue,
    timestamp_ms: i64,
) -> Result<u64, ClientError> {
    let addr = shared
        .pull
        .routes()
        .master_addr(&queue.topic, &queue.broker_name)
        .await?;
    let header = SearchOffsetRequestHeader {
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        timestamp: timestamp_ms,
        boundary_type: Some(BoundaryType::Lower),
    };
    let cmd = RemotingCommand::request_with_header(request::SEARCH_OFFSET_BY_TIMESTAMP, &header);
    let reply = shared
        .pool
        .invoke_success(addr, cmd, shared.config.request_timeout)
        .await?;
    let h: SearchOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
    ClientError::non_negative_offset(addr, h.offset)
}

/// Persists an OFFSET_ILLEGAL correction at once; a failure is counted (the position follows
/// the broker's suggestion either way, and the next commit retries it).
pub(super) async fn correct(shared: &Shared, queue: &MessageQueue, offset: u64) {
    if let Err(error) = shared.pull.offset_store().correct(queue, offset).await {
        bump(&shared.counters.correction_failures);
        tracing::warn!(?queue, offset, %error, "persisting the correction failed");
    }
}

/// Where a queue starts, with the owner generation the store granted: a pending broker
/// reset is written to the store first (stores that fence owners); otherwise the queue is
/// claimed and starts at the stored offset, or at the configured start position when the
/// store positively has none.
pub(super) async fn start_offset(
    shared: &Shared,
    queue: &MessageQueue,
    pending_reset: Option<u64>,
) -> Result<(u64, Option<u64>), ClientError> {
    let store = shared.pull.offset_store();
    let claim = match pending_reset {
        Some(offset) => store.reset_to(queue, offset).await?,
        None => store.claim(queue).await?,
    };
    if let Some(offset) = claim.offset {
        return Ok((offset, claim.generation));
    }
    let offset = match shared.config.start_position {
        StartPosition::First => shared.pull.min_offset(queue).await?,
        StartPosition::Last => shared.pull.max_offset(queue).await?,
        StartPosition::Timestamp(ts) => offset_for_timestamp(shared, queue, ts).await?,
    };
    Ok((offset, claim.generation))
}
