//! Looking up one stored message by its CommitLog offset (VIEW_MESSAGE_BY_ID, send-back).
//! The read is blocking I/O (and waits for the dispatcher to cover acknowledged records), so
//! it runs on the blocking pool, never on a runtime worker.

use bytes::Bytes;
use ferromq_protocol::MessageId;

use super::error::{Refusal, RefusalKind};
use crate::context::BrokerContext;

/// The whole record stored at `phys_offset`.
pub async fn message_at(ctx: &BrokerContext, phys_offset: u64) -> Result<Bytes, Refusal> {
    let id = MessageId {
        store_host: ctx.broker_addr,
        phys_offset,
    }
    .encode();
    let store = ctx.store.clone();
    let found = tokio::task::spawn_blocking(move || store.message_by_id(&id))
        .await
        .map_err(|join| {
            Refusal::new(
                RefusalKind::Internal,
                format!("the read of CommitLog offset {phys_offset} failed: {join}"),
            )
        })?;
    match found {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(Refusal::new(
            RefusalKind::Internal,
            format!("no message at CommitLog offset {phys_offset}"),
        )),
        Err(error) => Err(Refusal::new(RefusalKind::Internal, error.to_string())),
    }
}
