//! [`LitePullConsumer`]: subscribe (cluster rebalance) or assign queues, then `poll`; the
//! consumer pulls ahead into a bounded buffer per queue (RocketMQ's
//! `DefaultLitePullConsumer` role, without its silent failures).
//!
//! Invariants:
//! - the committed position of a queue is the offset after the last message `poll` returned
//!   (or, when the queue's buffer is empty, the next offset the broker named), so a commit
//!   never covers a message the application has not been given;
//! - `commit` is request/response through the [`BrokerOffsetStore`](crate::BrokerOffsetStore) and returns `Err` when any
//!   queue failed; background auto-commit failures are counted and retrievable
//!   ([`LitePullStats`], [`LitePullConsumer::last_auto_commit_error`]);
//! - a queue without a stored offset starts at the configured [`StartPosition`]; when the
//!   broker cannot be asked (offset read, min/max, timestamp search) the queue waits and
//!   retries — it never guesses a position;
//! - a seek discards the queue's buffer and any pull in flight (per-queue epoch), so no
//!   message from before the seek is returned after it;
//! - each queue's buffer holds at most `buffer_per_queue` messages; a paused queue is neither
//!   fetched nor polled;
//! - rebalance (subscribe mode) uses average allocation over the sorted consumer ids the
//!   broker reports (GET_CONSUMER_LIST_BY_GROUP); when the list cannot be fetched the current
//!   assignment is kept and the failure counted; a queue leaving the assignment has its
//!   position committed first (failures counted);
//! - OFFSET_ILLEGAL moves the queue to the broker's suggestion and persists it at once as a
//!   correction ([`OffsetStore::correct`](crate::OffsetStore::correct)); a refused or failed
//!   correction is counted ([`LitePullStats::correction_failures`]) and the position still
//!   follows the broker;
//! - a RESET_CONSUMER_CLIENT_OFFSET push (an administrator's reset, pitfall C11) discards the
//!   buffers of the reset queues and any pull in flight, and moves their positions to the
//!   reset offsets: messages polled before it are never committed over the reset (the
//!   broker's fence refuses such commits anyway until the queue is pulled);
//!   NOTIFY_CONSUMER_IDS_CHANGED triggers a rebalance;
//! - with an offset store that fences owners (the PostgreSQL store,
//!   `LitePullConsumer::start_postgres`) every queue entering the assignment is claimed
//!   from the store (a new owner generation) and starts where the store says; a broker reset
//!   is written to the store under a new generation before the queue resumes; and
//!   `consume_transactionally` (feature `postgres`, `transactional`) commits each batch's
//!   offsets in the application's database transaction, never a polled position;
//! - every wait is bounded (pull hold + request timeout, `poll`'s timeout, retry delays).
//!
//! Layout: the consumer (this module), its configuration and stats (`config`), the shared
//! state behind the lock (`state`), positions and commits (`positions`), the assignment and
//! subscribe-mode rebalance (`assignment`), the per-queue fetch task (`fetch`), broker
//! pushes (`server_requests`), and exactly-once consumption into PostgreSQL
//! (`transactional`, feature `postgres`).

mod assignment;
mod config;
mod fetch;
mod positions;
mod server_requests;
mod state;
#[cfg(feature = "postgres")]
mod transactional;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::RemotingCommand;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::connections::ConnectionPool;
use crate::error::{ClientError, OffsetError};
use crate::message::MessageExt;
use crate::offset_store::{BrokerOffsetStore, OffsetStore, PersistReport, ReadMode};
use crate::pull_consumer::{PullConsumer, PullConsumerConfig};
use crate::route::RouteCache;
use assignment::{apply_assignment, rebalance};
use fetch::spawn_fetch;
use positions::{commit_all, offset_for_timestamp, stage_positions};
use server_requests::on_server_request;
use state::{bump, Assignment, Counters, Shared};

pub use config::{LitePullConsumerConfig, LitePullStats, StartPosition};
#[cfg(feature = "postgres")]
pub use transactional::{TransactionalBatch, TransactionalError};

/// RocketMQ's `AllocateMessageQueueAveragely`: contiguous blocks, the first
/// `queues % members` members getting one extra queue. Both lists must be sorted. The same
/// function as [`crate::rebalance::allocate_averagely`], kept under this name.
pub use crate::rebalance::allocate_averagely as allocate_average;

/// A lite pull consumer. Dropping it stops its tasks without committing: call
/// [`LitePullConsumer::shutdown`] to commit.
#[derive(Debug)]
pub struct LitePullConsumer {
    shared: Arc<Shared>,
    background: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for LitePullConsumer {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

impl LitePullConsumer {
    /// Starts a consumer whose offsets live on the brokers.
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group, no name server, or zero buffer sizes.
    pub fn start(config: LitePullConsumerConfig) -> Result<LitePullConsumer, ClientError> {
        Self::start_with(config, |group, routes, pool, timeout| {
            Arc::new(BrokerOffsetStore::new(group, routes, pool, timeout))
        })
    }

    /// Starts a consumer with the offset store `make` builds from the group, route cache,
    /// connection pool and request timeout (as [`PullConsumer::start_with`]). A store that
    /// fences owners ([`OffsetStore::fences_owners`](crate::OffsetStore::fences_owners)) is
    /// claimed on every assignment and receives broker resets through
    /// [`OffsetStore::reset_to`](crate::OffsetStore::reset_to).
    ///
    /// # Errors
    /// As [`LitePullConsumer::start`].
    pub fn start_with(
        config: LitePullConsumerConfig,
        make: impl FnOnce(&str, Arc<RouteCache>, Arc<ConnectionPool>, Duration) -> Arc<dyn OffsetStore>,
    ) -> Result<LitePullConsumer, ClientError> {
        if config.buffer_per_queue == 0 || config.max_poll_messages == 0 || config.pull_batch == 0 {
            return Err(ClientError::Config(
                "buffer_per_queue, max_poll_messages and pull_batch must be positive".into(),
            ));
        }
        let pull = PullConsumer::start_with(
            PullConsumerConfig {
                namesrv_addrs: config.namesrv_addrs.clone(),
                group: config.group.clone(),
                pull_timeout: config.request_timeout,
                connect_timeout: config.connect_timeout,
                route_max_age: config.route_max_age,
                heartbeat_interval: config.heartbeat_interval,
                credentials: config.credentials.clone(),
                tls: config.tls.clone(),
                binary_header: config.binary_header,
            },
            make,
        )?;
        let pool = ConnectionPool::new(crate::connections::options(
            config.connect_timeout,
            config.credentials.as_ref(),
            config.tls.as_ref(),
        ));
        let shared = Arc::new(Shared {
            config,
            pull,
            pool,
            state: Mutex::new(Assignment::default()),
            data: Notify::new(),
            rebalance_now: Notify::new(),
            counters: Counters::default(),
            last_auto_commit_error: Mutex::new(None),
            epochs: AtomicU64::new(0),
            transactional: AtomicBool::new(false),
            #[cfg(feature = "postgres")]
            postgres: std::sync::OnceLock::new(),
            #[cfg(feature = "postgres")]
            last_mirror: Mutex::new(None),
        });
        let weak = Arc::downgrade(&shared);
        shared
            .pull
            .set_server_request_handler(Arc::new(move |cmd: &RemotingCommand| {
                weak.upgrade()
                    .is_some_and(|shared| on_server_request(&shared, cmd))
            }));
        let consumer = LitePullConsumer {
            shared,
            background: Mutex::new(Vec::new()),
        };
        if let Some(interval) = consumer.shared.config.auto_commit_interval {
            let weak = Arc::downgrade(&consumer.shared);
            let interval = interval.max(Duration::from_millis(10));
            consumer.spawn_background(async move {
                loop {
                    tokio::time::sleep(interval).await;
                    let Some(shared) = weak.upgrade() else { return };
                    match commit_all(&shared).await {
                        Ok(_) => bump(&shared.counters.auto_commits_ok),
                        Err(error) => {
                            bump(&shared.counters.auto_commit_failures);
                            tracing::warn!(%error, "auto-commit failed; will retry");
                            *shared
                                .last_auto_commit_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
                        }
                    }
                }
            });
        }
        Ok(consumer)
    }

    /// Starts a consumer whose offsets live in PostgreSQL (`db`, a checked table): the
    /// database is the source of truth, claimed on every assignment, and committed offsets
    /// are mirrored to the brokers for monitoring. Consume with
    /// [`LitePullConsumer::consume_transactionally`].
    ///
    /// # Errors
    /// As [`LitePullConsumer::start`].
    #[cfg(feature = "postgres")]
    pub fn start_postgres(
        config: LitePullConsumerConfig,
        db: crate::offset_store::postgres::PostgresOffsets,
    ) -> Result<LitePullConsumer, ClientError> {
        use crate::offset_store::postgres::PostgresOffsetStore;
        let slot: Arc<Mutex<Option<Arc<PostgresOffsetStore>>>> = Arc::default();
        let made = slot.clone();
        let consumer = Self::start_with(config, move |group, routes, pool, timeout| {
            let mirror = BrokerOffsetStore::new(group, routes, pool, timeout);
            let store = Arc::new(PostgresOffsetStore::new(db, group).with_mirror(mirror));
            *made.lock().unwrap_or_else(|e| e.into_inner()) = Some(store.clone());
            store
        })?;
        let store = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let store = store.ok_or_else(|| ClientError::Config("offset store not built".into()))?;
        store.set_owner(consumer.shared.pull.client_id());
        let _ = consumer.shared.postgres.set(store);
        Ok(consumer)
    }

    fn spawn_background(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tokio::spawn(task));
    }

    /// The underlying pull consumer (routes, offset store, client id).
    pub fn pull_consumer(&self) -> &PullConsumer {
        &self.shared.pull
    }

    /// Subscribes to `topic` with a tag `expression` (`*`, or `a || b`): queues are assigned by
    /// average allocation among the group's live consumers, now and every
    /// `rebalance_interval`.
    ///
    /// # Errors
    /// [`ClientError::Config`] after [`LitePullConsumer::assign`]; otherwise the first
    /// rebalance's error (route or consumer list unavailable): the subscription is kept and
    /// the periodic rebalance retries it.
    pub async fn subscribe(&self, topic: &str, expression: &str) -> Result<(), ClientError> {
        let first = {
            let mut state = self.shared.lock();
            if state.assigned {
                return Err(ClientError::Config(
                    "subscribe after assign: a consumer uses one mode or the other".into(),
                ));
            }
            let first = state.subscriptions.is_empty();
            state
                .subscriptions
                .insert(topic.to_string(), expression.to_string());
            first
        };
        if first {
            let weak = Arc::downgrade(&self.shared);
            let period = self
                .shared
                .config
                .rebalance_interval
                .max(Duration::from_millis(10));
            let wake = self.shared.clone();
            self.spawn_background(async move {
                let wake = Arc::downgrade(&wake);
                loop {
                    let Some(notify) = wake.upgrade() else { return };
                    let notified = async move {
                        notify.rebalance_now.notified().await;
                    };
                    let _ = tokio::time::timeout(period, notified).await;
                    let Some(shared) = weak.upgrade() else { return };
                    if let Err(error) = rebalance(&shared).await {
                        tracing::warn!(%error, "rebalance failed; keeping the current assignment");
                    }
                }
            });
        }
        rebalance(&self.shared).await
    }

    /// Assigns `queues` to this consumer (no rebalance), replacing the previous assignment;
    /// queues leaving it have their positions committed first.
    ///
    /// # Errors
    /// [`ClientError::Config`] after [`LitePullConsumer::subscribe`]; a route error while
    /// registering the topics in the heartbeat.
    pub async fn assign(&self, queues: Vec<MessageQueue>) -> Result<(), ClientError> {
        {
            let mut state = self.shared.lock();
            if !state.subscriptions.is_empty() {
                return Err(ClientError::Config(
                    "assign after subscribe: a consumer uses one mode or the other".into(),
                ));
            }
            state.assigned = true;
        }
        let topics: BTreeSet<String> = queues.iter().map(|q| q.topic.clone()).collect();
        for topic in &topics {
            self.shared.pull.fetch_queues(topic).await?;
        }
        let expression = self.shared.config.assign_expression.clone();
        let wanted = queues
            .into_iter()
            .map(|q| (q, expression.clone()))
            .collect();
        apply_assignment(&self.shared, wanted, None).await;
        Ok(())
    }

    /// The queues currently assigned.
    pub fn assignment(&self) -> Vec<MessageQueue> {
        self.shared.lock().queues.keys().cloned().collect()
    }

    /// Returns buffered messages (at most `max_poll_messages`), waiting up to `timeout` for
    /// some to arrive. An empty list means none arrived in time.
    ///
    /// # Errors
    /// None today: pull failures are retried per queue and counted in [`LitePullStats`]; the
    /// `Result` leaves room for fatal conditions.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<MessageExt>, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.data.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = self.take_buffered();
            if !taken.is_empty() {
                return Ok(taken);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    fn take_buffered(&self) -> Vec<MessageExt> {
        let max = self.shared.config.max_poll_messages;
        let mut out = Vec::new();
        let mut state = self.shared.lock();
        let count = state.queues.len();
        if count == 0 {
            return out;
        }
        let start = state.next_poll % count;
        state.next_poll = state.next_poll.wrapping_add(1);
        let mut keys: Vec<MessageQueue> = state.queues.keys().cloned().collect();
        keys.rotate_left(start);
        for key in keys {
            if out.len() >= max {
                break;
            }
            let Some(queue) = state.queues.get_mut(&key) else {
                continue;
            };
            let n = (max - out.len()).min(queue.buffer.len());
            if queue.paused || n == 0 {
                continue;
            }
            out.extend(queue.buffer.drain(..n));
            if let Some(last) = out.last() {
                queue.consumed = Some(last.queue_offset + 1);
            }
            queue.settle();
            queue.wake.notify_one();
        }
        out
    }

    /// Commits the polled position of every assigned queue and waits for the brokers.
    ///
    /// # Errors
    /// [`OffsetError::PersistFailed`] when any queue failed (use
    /// [`LitePullConsumer::commit_report`] for the per-queue outcome).
    pub async fn commit(&self) -> Result<PersistReport, OffsetError> {
        commit_all(&self.shared).await
    }

    /// As [`LitePullConsumer::commit`], returning the per-queue report even when some queues
    /// failed.
    ///
    /// # Errors
    /// The store's `persist_all` error.
    pub async fn commit_report(&self) -> Result<PersistReport, OffsetError> {
        stage_positions(&self.shared);
        self.shared.pull.offset_store().persist_all().await
    }

    /// The position a commit would write for `queue` (`None` until its start is known or when
    /// it is not assigned).
    pub fn position(&self, queue: &MessageQueue) -> Option<u64> {
        self.shared
            .lock()
            .queues
            .get(queue)
            .and_then(|q| q.consumed)
    }

    /// The group's committed offset of `queue` as the broker stores it.
    ///
    /// # Errors
    /// The broker could not be asked.
    pub async fn committed(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        self.shared
            .pull
            .offset_store()
            .read(queue, ReadMode::Store)
            .await
    }

    /// Moves `queue` to `offset`: buffered messages and any pull in flight are discarded, the
    /// next `poll` returns messages from `offset`. An offset outside the queue is corrected
    /// by the broker's OFFSET_ILLEGAL suggestion. Committing a position below the group's
    /// stored offset while the group is online may be refused by a ferromq broker as a
    /// regression ([`OffsetError::Rejected`]); use an offset reset to rewind the group.
    ///
    /// # Errors
    /// [`ClientError::Config`] when `queue` is not assigned.
    pub fn seek(&self, queue: &MessageQueue, offset: u64) -> Result<(), ClientError> {
        let mut state = self.shared.lock();
        let Some(q) = state.queues.get_mut(queue) else {
            return Err(ClientError::Config(format!(
                "cannot seek {queue:?}: it is not assigned to this consumer"
            )));
        };
        q.epoch = self.shared.next_epoch();
        q.buffer.clear();
        q.fetch_offset = Some(offset);
        q.consumed = Some(offset);
        if let Some(task) = q.task.take() {
            task.abort();
        }
        q.task = Some(spawn_fetch(&self.shared, queue.clone(), q.epoch));
        Ok(())
    }

    /// Seeks `queue` to its smallest stored offset.
    ///
    /// # Errors
    /// The broker could not be asked, or the queue is not assigned.
    pub async fn seek_to_begin(&self, queue: &MessageQueue) -> Result<(), ClientError> {
        let offset = self.shared.pull.min_offset(queue).await?;
        self.seek(queue, offset)
    }

    /// Seeks `queue` to its max offset (only new messages).
    ///
    /// # Errors
    /// The broker could not be asked, or the queue is not assigned.
    pub async fn seek_to_end(&self, queue: &MessageQueue) -> Result<(), ClientError> {
        let offset = self.shared.pull.max_offset(queue).await?;
        self.seek(queue, offset)
    }

    /// The offset of the first message of `queue` stored at or after `timestamp_ms` (the
    /// queue's max offset when there is none) — SEARCH_OFFSET_BY_TIMESTAMP.
    ///
    /// # Errors
    /// Route and transport errors, or the broker's failure code.
    pub async fn offset_for_timestamp(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
    ) -> Result<u64, ClientError> {
        offset_for_timestamp(&self.shared, queue, timestamp_ms).await
    }

    /// Stops fetching and polling `queues` (buffered messages are kept).
    pub fn pause(&self, queues: &[MessageQueue]) {
        let mut state = self.shared.lock();
        for queue in queues {
            if let Some(q) = state.queues.get_mut(queue) {
                q.paused = true;
            }
        }
    }

    /// Resumes `queues` paused by [`LitePullConsumer::pause`].
    pub fn resume(&self, queues: &[MessageQueue]) {
        let mut state = self.shared.lock();
        for queue in queues {
            if let Some(q) = state.queues.get_mut(queue) {
                q.paused = false;
                q.wake.notify_one();
            }
        }
        drop(state);
        self.shared.data.notify_waiters();
    }

    /// True when `queue` is paused.
    pub fn is_paused(&self, queue: &MessageQueue) -> bool {
        self.shared
            .lock()
            .queues
            .get(queue)
            .is_some_and(|q| q.paused)
    }

    /// Counters.
    pub fn stats(&self) -> LitePullStats {
        let c = &self.shared.counters;
        LitePullStats {
            auto_commits_ok: c.auto_commits_ok.load(Ordering::Relaxed),
            auto_commit_failures: c.auto_commit_failures.load(Ordering::Relaxed),
            release_commit_failures: c.release_commit_failures.load(Ordering::Relaxed),
            rebalance_failures: c.rebalance_failures.load(Ordering::Relaxed),
            pull_errors: c.pull_errors.load(Ordering::Relaxed),
            start_lookup_failures: c.start_lookup_failures.load(Ordering::Relaxed),
            correction_failures: c.correction_failures.load(Ordering::Relaxed),
            resets_applied: c.resets_applied.load(Ordering::Relaxed),
        }
    }

    /// The last background auto-commit failure, as text.
    pub fn last_auto_commit_error(&self) -> Option<String> {
        self.shared
            .last_auto_commit_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stop_tasks(&self) {
        for task in self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        for q in self.shared.lock().queues.values_mut() {
            if let Some(task) = q.task.take() {
                task.abort();
            }
        }
    }

    /// Stops fetching, rebalancing and auto-committing, commits every queue's polled
    /// position, and closes the consumer.
    ///
    /// # Errors
    /// [`OffsetError::PersistFailed`] when any queue's final commit failed.
    pub async fn shutdown(self) -> Result<PersistReport, OffsetError> {
        self.stop_tasks();
        let result = commit_all(&self.shared).await;
        let closed = self.shared.pull.shutdown().await;
        self.shared.pool.close_all();
        let report = result?;
        closed?.into_result()?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|i| MessageQueue {
                topic: "T".into(),
                broker_name: "b".into(),
                queue_id: i,
            })
            .collect()
    }

    #[test]
    fn average_allocation_covers_every_queue_once() {
        for nq in 0..10 {
            for nc in 1..5 {
                let qs = queues(nq);
                let members: Vec<String> = (0..nc).map(|i| format!("c{i}")).collect();
                let mut all = Vec::new();
                for m in &members {
                    all.extend(allocate_average(&qs, &members, m));
                }
                all.sort();
                assert_eq!(all, qs, "{nq} queues, {nc} members");
            }
        }
        let qs = queues(8);
        let members = vec!["a".to_string(), "b".into(), "c".into()];
        assert_eq!(allocate_average(&qs, &members, "a").len(), 3);
        assert_eq!(allocate_average(&qs, &members, "c").len(), 2);
        assert!(allocate_average(&qs, &members, "z").is_empty());
    }
}
