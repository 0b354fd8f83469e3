//! [`Persister`]: the background task that persists every offset of a store on an interval,
//! at once when woken ([`Persister::wake`]), and identifies its client before persisting again
//! when a broker refused a commit from an unidentified connection ([`PersistHooks::identify`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::{BoxFuture, OffsetStore, PersistReport};
use crate::error::{ClientError, OffsetError};

/// Identifies the consumer to its brokers (a heartbeat), so that a broker fencing a reset
/// queue accepts its commits: a ferromq broker refuses a commit on such a queue from a
/// connection that has not said which client it serves (see [`OffsetError::is_unidentified`]).
pub type Identify = Arc<dyn Fn() -> BoxFuture<'static, Result<(), ClientError>> + Send + Sync>;

/// What a [`Persister`] may call besides its store.
#[derive(Clone, Default)]
pub struct PersistHooks {
    /// Called when a round's refusals include an unidentified commit; the refused queues are
    /// then persisted once more in the same round.
    pub identify: Option<Identify>,
    /// Notified to persist before the interval ends (e.g. a queue paused on its uncommitted
    /// window). A wake during a backoff persists at once as well.
    pub wake: Arc<Notify>,
}

impl std::fmt::Debug for PersistHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistHooks")
            .field("identify", &self.identify.is_some())
            .finish_non_exhaustive()
    }
}

/// A background task persisting every offset of a store on an interval, backing off
/// (doubling up to `max_backoff`) while persists fail.
#[derive(Debug)]
pub struct Persister {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    store: Arc<dyn OffsetStore>,
    hooks: PersistHooks,
}

impl Persister {
    /// Starts persisting `store` every `interval` on the current runtime.
    pub fn spawn(store: Arc<dyn OffsetStore>, interval: Duration, max_backoff: Duration) -> Self {
        Self::spawn_with(store, interval, max_backoff, PersistHooks::default())
    }

    /// As [`Persister::spawn`], with `hooks`.
    pub fn spawn_with(
        store: Arc<dyn OffsetStore>,
        interval: Duration,
        max_backoff: Duration,
        hooks: PersistHooks,
    ) -> Self {
        let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
        let task_store = store.clone();
        let task_hooks = hooks.clone();
        let interval = interval.max(Duration::from_millis(1));
        let task = tokio::spawn(async move {
            let mut wait = interval;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = task_hooks.wake.notified() => {}
                    _ = stop_rx.changed() => return,
                }
                let ok = match persist_round(task_store.as_ref(), &task_hooks).await {
                    Ok(report) => {
                        for (queue, error) in &report.failed {
                            tracing::warn!(?queue, %error, "background offset persist failed; will retry");
                        }
                        report.is_complete()
                    }
                    Err(error) => {
                        tracing::warn!(%error, "background offset persist failed; will retry");
                        false
                    }
                };
                wait = if ok {
                    interval
                } else {
                    (wait * 2).min(max_backoff.max(interval))
                };
            }
        });
        Persister {
            stop,
            task,
            store,
            hooks,
        }
    }

    /// Persists at once instead of at the end of the interval (or of a backoff).
    pub fn wake(&self) {
        self.hooks.wake.notify_one();
    }

    /// Stops the task and persists every offset one last time.
    ///
    /// # Errors
    /// The final `persist_all`'s error; per-queue failures are in the report.
    pub async fn shutdown(self) -> Result<PersistReport, OffsetError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        persist_round(self.store.as_ref(), &self.hooks).await
    }
}

/// One `persist_all`; when a queue was refused as unidentified and `hooks` can identify the
/// client, identifies it and persists the refused queues once more. The report merges both
/// passes: a queue counts as failed only when its last attempt failed.
async fn persist_round(
    store: &dyn OffsetStore,
    hooks: &PersistHooks,
) -> Result<PersistReport, OffsetError> {
    let mut report = store.persist_all().await?;
    let Some(identify) = &hooks.identify else {
        return Ok(report);
    };
    if !report.failed.iter().any(|(_, e)| e.is_unidentified()) {
        return Ok(report);
    }
    if let Err(error) = identify().await {
        tracing::debug!(%error, "identifying before a commit retry failed");
        return Ok(report);
    }
    let failed = std::mem::take(&mut report.failed);
    for (queue, error) in failed {
        if !error.is_unidentified() {
            report.failed.push((queue, error));
            continue;
        }
        match store.persist(&queue).await {
            Ok(()) => match store.acknowledged(&queue) {
                Some(offset) => report.persisted.push((queue, offset)),
                None => report.unchanged += 1,
            },
            Err(error) => report.failed.push((queue, error)),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    use ferromq_protocol::remoting::body::misc::MessageQueue;

    use super::*;
    use crate::error::RejectReason;
    use crate::offset_store::{OffsetStoreStats, ReadMode};

    /// A store whose persists are refused as unidentified until `identified` is set.
    #[derive(Debug, Default)]
    struct Fenced {
        memory: Mutex<BTreeMap<MessageQueue, u64>>,
        acked: Mutex<BTreeMap<MessageQueue, u64>>,
        identified: AtomicBool,
        rounds: AtomicUsize,
    }

    impl Fenced {
        fn persist_now(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
            let Some(offset) = self.memory.lock().unwrap().get(queue).copied() else {
                return Ok(None);
            };
            if !self.identified.load(Ordering::SeqCst) {
                return Err(OffsetError::Rejected {
                    queue: queue.clone(),
                    offset,
                    reason: RejectReason::StaleGeneration,
                    code: 2102,
                    remark: "connection has not identified its client".into(),
                    addr: "127.0.0.1:1".parse().unwrap(),
                });
            }
            self.acked.lock().unwrap().insert(queue.clone(), offset);
            Ok(Some(offset))
        }
    }

    impl OffsetStore for Fenced {
        fn update(&self, queue: &MessageQueue, offset: u64) {
            self.memory.lock().unwrap().insert(queue.clone(), offset);
        }
        fn correct<'a>(
            &'a self,
            queue: &'a MessageQueue,
            offset: u64,
        ) -> BoxFuture<'a, Result<(), OffsetError>> {
            self.update(queue, offset);
            Box::pin(async move { self.persist_now(queue).map(|_| ()) })
        }
        fn persist<'a>(
            &'a self,
            queue: &'a MessageQueue,
        ) -> BoxFuture<'a, Result<(), OffsetError>> {
            Box::pin(async move { self.persist_now(queue).map(|_| ()) })
        }
        fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
            self.rounds.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let queues: Vec<MessageQueue> =
                    self.memory.lock().unwrap().keys().cloned().collect();
                let mut report = PersistReport::default();
                for queue in queues {
                    let outcome = self.persist_now(&queue);
                    report.record(queue, outcome);
                }
                Ok(report)
            })
        }
        fn read<'a>(
            &'a self,
            queue: &'a MessageQueue,
            _: ReadMode,
        ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
            let offset = self.memory.lock().unwrap().get(queue).copied();
            Box::pin(async move { Ok(offset) })
        }
        fn remove(&self, queue: &MessageQueue) {
            self.memory.lock().unwrap().remove(queue);
        }
        fn stats(&self) -> OffsetStoreStats {
            OffsetStoreStats::default()
        }
        fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
            self.acked.lock().unwrap().get(queue).copied()
        }
        fn reports_acknowledged(&self) -> bool {
            true
        }
    }

    fn queue(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    fn identify_counting(store: &Arc<Fenced>, calls: &Arc<AtomicUsize>) -> Identify {
        let store = store.clone();
        let calls = calls.clone();
        Arc::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            store.identified.store(true, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        })
    }

    #[tokio::test]
    async fn an_unidentified_refusal_is_identified_and_persisted_in_the_same_round() {
        let store = Arc::new(Fenced::default());
        store.update(&queue(0), 7);
        store.update(&queue(1), 9);
        let calls = Arc::new(AtomicUsize::new(0));
        let hooks = PersistHooks {
            identify: Some(identify_counting(&store, &calls)),
            ..PersistHooks::default()
        };
        let report = persist_round(store.as_ref(), &hooks).await.unwrap();
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.persisted, vec![(queue(0), 7), (queue(1), 9)]);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one heartbeat per round");
        assert_eq!(store.acknowledged(&queue(1)), Some(9));
    }

    #[tokio::test]
    async fn without_an_identify_hook_the_refusal_is_reported() {
        let store = Arc::new(Fenced::default());
        store.update(&queue(0), 7);
        let report = persist_round(store.as_ref(), &PersistHooks::default())
            .await
            .unwrap();
        assert_eq!(report.failed.len(), 1);
        assert!(report.failed[0].1.is_unidentified());
        assert_eq!(store.acknowledged(&queue(0)), None);
    }

    #[tokio::test]
    async fn the_final_persist_of_a_shutdown_identifies_too() {
        let store = Arc::new(Fenced::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let hooks = PersistHooks {
            identify: Some(identify_counting(&store, &calls)),
            ..PersistHooks::default()
        };
        let persister = Persister::spawn_with(
            store.clone(),
            Duration::from_secs(3600),
            Duration::from_secs(3600),
            hooks,
        );
        store.update(&queue(3), 30);
        let report = persister.shutdown().await.unwrap();
        assert_eq!(report.persisted, vec![(queue(3), 30)]);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_wake_persists_before_the_interval_ends() {
        let store = Arc::new(Fenced::default());
        store.identified.store(true, Ordering::SeqCst);
        let persister = Persister::spawn_with(
            store.clone(),
            Duration::from_secs(3600),
            Duration::from_secs(3600),
            PersistHooks::default(),
        );
        store.update(&queue(0), 5);
        persister.wake();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while store.acknowledged(&queue(0)) != Some(5) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the wake did not persist"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(store.rounds.load(Ordering::SeqCst), 1);
        let _ = persister.shutdown().await.unwrap();
    }
}
