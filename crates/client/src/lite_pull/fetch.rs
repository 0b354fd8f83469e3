//! The per-queue fetch task: pulls ahead into the queue's bounded buffer, follows
//! OFFSET_ILLEGAL, and retries failures after `retry_delay`; a task whose epoch is stale
//! never buffers what it pulled. When the route names a new master for the queue's broker
//! group (failover), the task drops its buffer and positions and starts again from the
//! offset committed on the new master (offset pitfall R1).

use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::positions::{correct, start_offset};
use super::state::{bump, Shared};
use crate::error::ClientError;
use crate::pull_consumer::PullResult;

/// Starts the fetch task of `queue` for `epoch`.
pub(super) fn spawn_fetch(shared: &Arc<Shared>, queue: MessageQueue, epoch: u64) -> JoinHandle<()> {
    let shared = shared.clone();
    tokio::spawn(async move { fetch_loop(shared, queue, epoch).await })
}

/// What a pull's answer leaves to do once the state lock is released.
pub(super) enum AfterPull {
    Done,
    Failed(ClientError),
    /// OFFSET_ILLEGAL: persist the correction to this offset.
    Correct(u64),
}

/// What a fetch task does next, decided under the state lock.
pub(super) enum Step {
    /// Nothing to do until woken (paused or buffer full).
    Wait(Arc<Notify>),
    /// The start position is unknown (with a broker reset still to write to the store).
    Start(Option<u64>),
    /// Pull from this offset, at most this many messages.
    Pull(u64, u32, String),
    /// The queue left the assignment or was re-seeked: this task ends.
    Stop,
}

/// Fills one queue's buffer until aborted.
pub(super) async fn fetch_loop(shared: Arc<Shared>, queue: MessageQueue, epoch: u64) {
    let config = &shared.config;
    let routes = shared.pull.routes().clone();
    loop {
        let generation = routes.master_generation(&queue.broker_name);
        let followed = match shared.lock().queues.get_mut(&queue) {
            Some(q) if q.epoch == epoch => q.follow_new_master(generation),
            _ => false,
        };
        if followed {
            // The polled position not yet committed is dropped with the rest: what the new
            // master holds is the truth (those messages are delivered again).
            shared.pull.offset_store().remove(&queue);
            tracing::info!(
                ?queue,
                generation,
                "new master for the queue's broker group; resuming from its committed offset"
            );
        }
        let step = {
            let state = shared.lock();
            match state.queues.get(&queue) {
                None => Step::Stop,
                Some(q) if q.epoch != epoch => Step::Stop,
                Some(q) if q.paused || q.buffer.len() >= config.buffer_per_queue => {
                    Step::Wait(q.wake.clone())
                }
                Some(q) => match q.fetch_offset {
                    None => Step::Start(q.pending_reset),
                    Some(offset) => {
                        let room = config.buffer_per_queue - q.buffer.len();
                        let max = (config.pull_batch as usize).min(room) as u32;
                        Step::Pull(offset, max, q.expression.clone())
                    }
                },
            }
        };
        match step {
            Step::Stop => return,
            Step::Wait(wake) => {
                // Woken by poll, resume or seek; the bound guards against a lost wake-up.
                let _ = tokio::time::timeout(Duration::from_millis(200), wake.notified()).await;
            }
            Step::Start(pending_reset) => {
                match start_offset(&shared, &queue, pending_reset).await {
                    Ok((offset, owner_generation)) => {
                        let mut state = shared.lock();
                        if let Some(q) = state.queues.get_mut(&queue) {
                            // A failover during the lookup: look up again on the new master.
                            if q.epoch == epoch
                                && q.fetch_offset.is_none()
                                && q.master_generation == generation
                            {
                                q.fetch_offset = Some(offset);
                                q.consumed = Some(offset);
                                q.owner_generation = owner_generation;
                                q.pending_reset = None;
                            }
                        }
                    }
                    Err(error) => {
                        bump(&shared.counters.start_lookup_failures);
                        tracing::warn!(?queue, %error, "cannot determine the start offset; retrying");
                        tokio::time::sleep(config.retry_delay).await;
                    }
                }
            }
            Step::Pull(offset, max, expression) => {
                let result = shared
                    .pull
                    .pull_blocking(&queue, &expression, offset, max, config.pull_hold)
                    .await;
                // The pull itself may have found the new master (a failover): its answer at
                // the old in-memory position is dropped; the loop re-reads the position.
                let generation_after = routes.master_generation(&queue.broker_name);
                let failed = {
                    let mut state = shared.lock();
                    let Some(q) = state.queues.get_mut(&queue) else {
                        return;
                    };
                    if q.epoch != epoch
                        || q.fetch_offset != Some(offset)
                        || q.master_generation != generation_after
                    {
                        continue;
                    }
                    match result {
                        Ok(PullResult::Found {
                            messages,
                            next_offset,
                        }) => {
                            let any = !messages.is_empty();
                            q.buffer.extend(messages);
                            q.fetch_offset = Some(next_offset);
                            q.settle();
                            drop(state);
                            if any {
                                shared.data.notify_waiters();
                            }
                            AfterPull::Done
                        }
                        Ok(PullResult::NoNewMessage { next_offset })
                        | Ok(PullResult::NoMatchedMessage { next_offset }) => {
                            q.fetch_offset = Some(next_offset);
                            q.settle();
                            AfterPull::Done
                        }
                        Ok(PullResult::OffsetIllegal { suggested_offset }) => {
                            tracing::warn!(
                                ?queue,
                                offset,
                                suggested_offset,
                                "offset illegal; moving to the broker's suggestion"
                            );
                            q.buffer.clear();
                            q.fetch_offset = Some(suggested_offset);
                            q.consumed = Some(suggested_offset);
                            AfterPull::Correct(suggested_offset)
                        }
                        Err(error) => AfterPull::Failed(error),
                    }
                };
                if let AfterPull::Correct(offset) = failed {
                    correct(&shared, &queue, offset).await;
                } else if let AfterPull::Failed(error) = failed {
                    bump(&shared.counters.pull_errors);
                    tracing::warn!(?queue, %error, "pull failed; retrying");
                    tokio::time::sleep(config.retry_delay).await;
                }
            }
        }
    }
}
