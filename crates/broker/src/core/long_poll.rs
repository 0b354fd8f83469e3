//! Long polling: a pull that finds no new message waits for the dispatcher instead of
//! returning at once, and is answered within milliseconds of a new message or at its timeout.
//!
//! A held pull registers for its own queue with the store (`MessageStore::wait_for_queue`),
//! which wakes it only when the dispatcher appends to that queue (or the store closes): pulls
//! held on quiet queues cost nothing while other topics are busy. Every hold is bounded by the
//! request's `suspendTimeoutMillis` and the broker's `brokerSuspendMaxTimeMillis`, and the
//! number of held pulls by `pullHoldMax`.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use ferromq_store::queue_waiters::QueueWait;
use ferromq_store::MessageStore;
use tokio::sync::futures::Notified;

/// Waits until the queue's max offset passes `queue_offset` or `timeout` elapses; returns
/// whether new messages arrived.
pub async fn wait_for_messages(
    store: &MessageStore,
    topic: &str,
    queue_id: u32,
    queue_offset: u64,
    timeout: Duration,
) -> bool {
    let arrived = || {
        store
            .queue_bounds(topic, queue_id)
            .is_some_and(|(_, max)| max > queue_offset)
    };
    let wait = store.wait_for_queue(topic, queue_id);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Enabled before the check: an entry dispatched after it wakes this wait.
        let mut woken = std::pin::pin!(wait.notified());
        woken.as_mut().enable();
        if arrived() {
            return true;
        }
        if store.is_closed() || tokio::time::timeout_at(deadline, woken).await.is_err() {
            return arrived();
        }
    }
}

/// The next wake-up of each of several queues, enabled now: a dispatch to any of them after
/// this call (and before [`any`] resolves) is not lost.
pub fn enabled<'a>(waits: &'a [QueueWait<'_>]) -> Vec<Pin<Box<Notified<'a>>>> {
    waits
        .iter()
        .map(|wait| {
            let mut woken = Box::pin(wait.notified());
            woken.as_mut().enable();
            woken
        })
        .collect()
}

/// Resolves when any of `woken` is woken (never, for none).
pub async fn any(woken: &mut [Pin<Box<Notified<'_>>>]) {
    std::future::poll_fn(|cx| {
        for one in woken.iter_mut() {
            if one.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await
}
