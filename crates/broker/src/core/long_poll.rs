//! Long polling: a pull that finds no new message waits for the dispatcher instead of
//! returning at once, and is answered within milliseconds of a new message or at its timeout.
//!
//! The store publishes its dispatched end on a watch channel; a held pull re-checks its own
//! queue each time that end moves. Every hold is bounded by the request's
//! `suspendTimeoutMillis` and the broker's `brokerSuspendMaxTimeMillis`.

use std::time::Duration;

use ferromq_store::MessageStore;

/// Waits until the queue's max offset passes `queue_offset` or `timeout` elapses; returns
/// whether new messages arrived.
pub async fn wait_for_messages(
    store: &MessageStore,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
    timeout: Duration,
) -> bool {
    let mut dispatched = store.subscribe_dispatched();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if store
            .queue_bounds(topic, queue_id)
            .is_some_and(|(_, max)| max > queue_offset)
        {
            return true;
        }
        match tokio::time::timeout_at(deadline, dispatched.changed()).await {
            Ok(Ok(())) => continue,
            // The store closed or the time is up.
            Ok(Err(_)) | Err(_) => {
                return store
                    .queue_bounds(topic, queue_id)
                    .is_some_and(|(_, max)| max > queue_offset);
            }
        }
    }
}
