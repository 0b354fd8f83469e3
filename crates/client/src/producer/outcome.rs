//! What sends report: [`SendResult`], [`BatchSendResult`], the [`SendHandle`] of an
//! asynchronous send, and the producer's counters ([`ProducerStats`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio::task::JoinHandle;

use crate::error::ClientError;

/// What a successful send reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// Client message id (`UNIQ_KEY`).
    pub msg_id: String,
    /// Broker message id (store address + CommitLog offset).
    pub offset_msg_id: String,
    /// Queue the message went to.
    pub queue: MessageQueue,
    /// Its offset in the queue.
    pub queue_offset: u64,
    /// Attempts made (1 when the first attempt succeeded).
    pub attempts: u32,
}

/// What a successful batch send reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSendResult {
    /// Client message ids, in message order.
    pub msg_ids: Vec<String>,
    /// Broker message ids, in message order.
    pub offset_msg_ids: Vec<String>,
    /// Queue the batch went to.
    pub queue: MessageQueue,
    /// Queue offset of the first message; the others follow consecutively.
    pub first_queue_offset: u64,
    /// Attempts made.
    pub attempts: u32,
}

/// Counters of a producer's background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProducerStats {
    /// Heartbeats brokers accepted.
    pub heartbeats_ok: u64,
    /// Heartbeats that failed (logged; the next interval tries again).
    pub heartbeat_failures: u64,
    /// Background route refreshes that succeeded.
    pub route_refreshes_ok: u64,
    /// Background route refreshes that failed (the last good route was kept).
    pub route_refresh_failures: u64,
    /// Asynchronous sends outstanding now.
    pub async_sends_outstanding: usize,
    /// Send attempts made after a failed attempt (within `retries_max`). A retry after a
    /// timeout or a closed connection may have stored a duplicate.
    pub send_retries: u64,
    /// Route fetches made at once after a failed send attempt (NOT_MASTER, connection
    /// failure, or another retriable failure), rate limited per topic.
    pub failover_route_fetches: u64,
}

/// The outcome of [`Producer::send_async`](super::Producer::send_async): a future that resolves when the send finishes.
/// The send runs on its own task whether or not this is polled.
///
/// # Cancel safety
/// Dropping it does not cancel the send; only its result is lost.
#[derive(Debug)]
pub struct SendHandle {
    pub(super) task: JoinHandle<Result<SendResult, ClientError>>,
}

impl Future for SendHandle {
    type Output = Result<SendResult, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(result) => result,
                // The task never panics by design and is never aborted; a runtime shutting down
                // is the only way here.
                Err(error) => Err(ClientError::Config(format!(
                    "the send task did not finish: {error}"
                ))),
            })
    }
}
