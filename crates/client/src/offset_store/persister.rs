//! [`Persister`]: the background task that persists every offset of a store on an interval.

use std::sync::Arc;
use std::time::Duration;

use super::{OffsetStore, PersistReport};
use crate::error::OffsetError;

/// A background task persisting every offset of a store on an interval, backing off
/// (doubling up to `max_backoff`) while persists fail.
#[derive(Debug)]
pub struct Persister {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    store: Arc<dyn OffsetStore>,
}

impl Persister {
    /// Starts persisting `store` every `interval` on the current runtime.
    pub fn spawn(store: Arc<dyn OffsetStore>, interval: Duration, max_backoff: Duration) -> Self {
        let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
        let task_store = store.clone();
        let interval = interval.max(Duration::from_millis(1));
        let task = tokio::spawn(async move {
            let mut wait = interval;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop_rx.changed() => return,
                }
                let ok = match task_store.persist_all().await {
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
        Persister { stop, task, store }
    }

    /// Stops the task and persists every offset one last time.
    ///
    /// # Errors
    /// The final `persist_all`'s error; per-queue failures are in the report.
    pub async fn shutdown(self) -> Result<PersistReport, OffsetError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.store.persist_all().await
    }
}
