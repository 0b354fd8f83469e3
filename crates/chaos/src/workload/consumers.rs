//! The run's consumers: numbered slots, each a pull or a push consumer, each restartable as a
//! new session (the `restart-consumer` fault).
//!
//! Slot `i` is a pull consumer when `i` is even and a push consumer when it is odd, so any
//! run with two or more consumers has both kinds in the one group. A restart ends the current
//! session like a crash — no final commit: a pull session's task is aborted, a push consumer
//! is dropped without `shutdown` — records `QueueStop` for the session's queues, and starts
//! session `n + 1`.

use std::sync::Arc;
use std::time::Duration;

use ferromq_client::{ClientError, PushConsumer};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::pull::PullSession;
use super::{push, ActiveQueues, Shared, Target};
use crate::history::{ConsumerId, ConsumerKind, Fault, Op};
use crate::recorder::Recorder;

/// Longest wait for a graceful stop of one consumer.
const STOP_WAIT: Duration = Duration::from_secs(10);

enum Running {
    Pull {
        stop: watch::Sender<bool>,
        task: JoinHandle<()>,
    },
    Push(PushConsumer, push::Alive),
}

struct Slot {
    id: ConsumerId,
    kind: ConsumerKind,
    active: Arc<ActiveQueues>,
    running: Option<Running>,
}

/// Every consumer of the run.
pub struct Consumers {
    target: Target,
    recorder: Arc<Recorder>,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
}

impl Consumers {
    /// Starts `count` consumers (even slots pull, odd slots push), session 0 each.
    ///
    /// # Errors
    /// The client's configuration errors.
    pub async fn start(
        count: u32,
        target: &Target,
        recorder: Arc<Recorder>,
        shared: Arc<Shared>,
    ) -> Result<Consumers, ClientError> {
        let mut consumers = Consumers {
            target: target.clone(),
            recorder,
            shared,
            slots: Vec::new(),
        };
        for index in 0..count {
            let kind = if index % 2 == 0 {
                ConsumerKind::Pull
            } else {
                ConsumerKind::Push
            };
            let mut slot = Slot {
                id: ConsumerId {
                    consumer: index,
                    session: 0,
                },
                kind,
                active: Arc::default(),
                running: None,
            };
            slot.running = Some(consumers.launch(&slot).await?);
            consumers.slots.push(slot);
        }
        Ok(consumers)
    }

    /// Number of consumers.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when there is no consumer.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The kind of consumer `index`.
    pub fn kind(&self, index: u32) -> Option<ConsumerKind> {
        self.slots.get(index as usize).map(|slot| slot.kind)
    }

    async fn launch(&self, slot: &Slot) -> Result<Running, ClientError> {
        match slot.kind {
            ConsumerKind::Pull => {
                let session = PullSession::new(
                    slot.id,
                    &self.target,
                    self.recorder.clone(),
                    self.shared.clone(),
                    slot.active.clone(),
                )?;
                let (stop, stop_rx) = watch::channel(false);
                let task = tokio::spawn(session.run(stop_rx));
                Ok(Running::Pull { stop, task })
            }
            ConsumerKind::Push => {
                let alive: push::Alive = Arc::new(std::sync::Mutex::new(true));
                let consumer = push::start(
                    slot.id,
                    &self.target,
                    self.recorder.clone(),
                    self.shared.clone(),
                    slot.active.clone(),
                    alive.clone(),
                )
                .await?;
                Ok(Running::Push(consumer, alive))
            }
        }
    }

    /// Crashes consumer `index` (no final commit), records the `RestartConsumer` fault once the
    /// old session can record no more deliveries, and starts its next session.
    ///
    /// # Errors
    /// The new session's configuration error (the slot is then left stopped).
    pub async fn restart(&mut self, index: u32) -> Result<(), ClientError> {
        let position = index as usize;
        if position >= self.slots.len() {
            return Ok(());
        }
        let running = self.slots[position].running.take();
        match running {
            Some(Running::Pull { task, .. }) => {
                task.abort();
                let _ = tokio::time::timeout(STOP_WAIT, task).await;
            }
            Some(Running::Push(consumer, alive)) => {
                *alive.lock().unwrap_or_else(|poison| poison.into_inner()) = false;
                drop(consumer);
            }
            None => {}
        }
        self.recorder
            .record(Op::Fault(Fault::RestartConsumer { consumer: index }));
        let slot = &mut self.slots[position];
        slot.active.stop_all(&self.recorder, slot.id);
        slot.id.session += 1;
        // A fresh set: late deliveries of the old session cannot touch the new one's.
        slot.active = Arc::default();
        let slot = &self.slots[position];
        let running = self.launch(slot).await?;
        self.slots[position].running = Some(running);
        Ok(())
    }

    /// Stops every consumer gracefully (pull: after its current pull; push: `shutdown`, which
    /// persists its offsets), each bounded by a timeout.
    pub async fn shutdown(mut self) {
        for slot in &mut self.slots {
            match slot.running.take() {
                Some(Running::Pull { stop, mut task }) => {
                    let _ = stop.send(true);
                    if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
                        task.abort();
                    }
                }
                Some(Running::Push(consumer, _)) => {
                    match tokio::time::timeout(STOP_WAIT, consumer.shutdown()).await {
                        Ok(Ok(report)) if !report.is_complete() => {
                            tracing::warn!(?report, "push consumer shutdown was incomplete")
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(%error, "push consumer shutdown failed")
                        }
                        _ => {}
                    }
                }
                None => {}
            }
            slot.active.stop_all(&self.recorder, slot.id);
        }
    }
}

impl Drop for Consumers {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(Running::Pull { task, .. }) = slot.running.take() {
                task.abort();
            }
        }
    }
}
