//! The workload of a chaos run: producers sending `producer:counter` values and consumers of
//! one cluster-mode group (pull with explicit commits, and push) recording what they see.
//!
//! Every producer and consumer records into the run's [`Recorder`]; none of them ever retries
//! in a way that would hide an outcome: a send is recorded as acknowledged, failed or
//! indeterminate, a commit as acknowledged or failed, every message handed to consumer code as
//! a delivery.

pub mod consumers;
pub mod membership;
pub mod offsets;
pub mod producer;
pub mod pull;
pub mod push;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferromq_client::{MessageExt, MessageQueue, OffsetError};

use crate::history::{ConsumerId, Op, Queue, Value};
use crate::recorder::Recorder;

/// Where the workload runs and what it touches.
#[derive(Debug, Clone)]
pub struct Target {
    /// Name server addresses (clients find the brokers, through their proxies, from them).
    pub namesrvs: Vec<SocketAddr>,
    /// The topic every producer sends to.
    pub topic: String,
    /// The consumer group of every consumer.
    pub group: String,
}

/// Client timeouts of the workload: short, so faults show up as errors quickly.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Route refresh period: routes follow a restarted broker quickly.
pub const ROUTE_MAX_AGE: Duration = Duration::from_secs(2);

/// The history's name for a client queue.
pub fn queue_of(queue: &MessageQueue) -> Queue {
    Queue {
        broker: queue.broker_name.clone(),
        queue_id: u32::try_from(queue.queue_id).unwrap_or(u32::MAX),
    }
}

/// The history operation for the outcome of `consumer`'s commit of `offset` on `queue`:
/// `CommitOk` when the broker acknowledged it, `CommitFail` with the error otherwise.
/// `sent_ms` is the run time at which the commit was sent (see [`Op::CommitOk`]).
pub fn commit_op(
    consumer: ConsumerId,
    queue: &MessageQueue,
    offset: u64,
    sent_ms: Option<u64>,
    result: &Result<(), OffsetError>,
) -> Op {
    match result {
        Ok(()) => Op::CommitOk {
            consumer,
            queue: queue_of(queue),
            offset,
            sent_ms,
        },
        Err(error) => Op::CommitFail {
            consumer,
            queue: queue_of(queue),
            offset,
            error: error.to_string(),
        },
    }
}

/// Asks a background task to stop (`stop` set to true) and waits up to `grace` for it to
/// finish what it is doing; a task still running after that is aborted.
pub async fn stop_task(
    stop: &tokio::sync::watch::Sender<bool>,
    task: &mut Option<tokio::task::JoinHandle<()>>,
    grace: Duration,
) {
    let _ = stop.send(true);
    if let Some(mut task) = task.take() {
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// State shared by the workload's tasks besides the recorder.
#[derive(Debug, Default)]
pub struct Shared {
    /// Messages on the topic whose body is not a chaos value (never expected).
    pub foreign_messages: AtomicU64,
}

/// Records the delivery of `message` to `consumer`; a body that is not a value is counted
/// in `shared.foreign_messages` instead (and logged).
pub fn record_delivery(
    recorder: &Recorder,
    shared: &Shared,
    consumer: ConsumerId,
    message: &MessageExt,
) {
    let parsed = std::str::from_utf8(&message.body)
        .ok()
        .and_then(|text| text.parse::<Value>().ok());
    match parsed {
        Some(value) => recorder.record(Op::Deliver {
            consumer,
            queue: Queue {
                broker: message.broker_name.to_string(),
                queue_id: u32::try_from(message.queue_id).unwrap_or(u32::MAX),
            },
            offset: message.queue_offset,
            value,
        }),
        None => {
            shared.foreign_messages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(msg_id = %message.msg_id, "a message that is no chaos value was delivered");
        }
    }
}

/// The queues a consumer session has started and not stopped, so the session's end can
/// record a `QueueStop` for each, whoever ends it.
#[derive(Debug, Default)]
pub struct ActiveQueues(Mutex<std::collections::BTreeSet<Queue>>);

impl ActiveQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<Queue>> {
        // Single insert/remove/drain operations: never left half-done.
        self.0.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Records `QueueStart` and marks the queue active.
    pub fn start(
        &self,
        recorder: &Recorder,
        consumer: ConsumerId,
        kind: crate::history::ConsumerKind,
        queue: Queue,
        offset: u64,
    ) {
        let mut active = self.lock();
        active.insert(queue.clone());
        recorder.record(Op::QueueStart {
            consumer,
            kind,
            queue,
            offset,
        });
    }

    /// Records `QueueStop` if the queue was active.
    pub fn stop(&self, recorder: &Recorder, consumer: ConsumerId, queue: &Queue) {
        let mut active = self.lock();
        if active.remove(queue) {
            recorder.record(Op::QueueStop {
                consumer,
                queue: queue.clone(),
            });
        }
    }

    /// Records `QueueStop` for every active queue (the session ended).
    pub fn stop_all(&self, recorder: &Recorder, consumer: ConsumerId) {
        let mut active = self.lock();
        for queue in std::mem::take(&mut *active) {
            recorder.record(Op::QueueStop { consumer, queue });
        }
    }

    /// True while `queue` is active.
    pub fn contains(&self, queue: &Queue) -> bool {
        self.lock().contains(queue)
    }
}

/// Shared handle type of [`ActiveQueues`].
pub type Active = Arc<ActiveQueues>;
