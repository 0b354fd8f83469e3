//! Reading a queue for a pull: what the store's read errors mean to a consumer. The fences a
//! pull lifts and the commit it carries are `offsets`' rules.

use ferromq_store::{GetResult, ReadError, TagFilter};

use super::error::PullError;
use crate::context::BrokerContext;

/// Reads up to `max_count` records (`max_bytes`) of `topic`/`queue_id` from `offset` that
/// match `filter`. A damaged record is [`PullError::Damaged`] (counted): the consumer is never
/// moved past it silently.
pub fn read(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    offset: u64,
    max_count: usize,
    max_bytes: usize,
    filter: &TagFilter,
) -> Result<GetResult, PullError> {
    ctx.store
        .get_messages(topic, queue_id, offset, max_count, max_bytes, filter)
        .map_err(|error| match error {
            ReadError::DispatchStalled(_) => PullError::DispatchStalled(error),
            ReadError::Damaged { .. } => {
                ctx.metrics.damaged_read();
                PullError::Damaged(error)
            }
            cause => PullError::Failed {
                topic: topic.to_string(),
                queue_id,
                cause,
            },
        })
}
