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
//! - every wait is bounded (pull hold + request timeout, `poll`'s timeout, retry delays).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::enums::BoundaryType;
use ferromq_protocol::remoting::headers::offset::{
    SearchOffsetRequestHeader, SearchOffsetResponseHeader,
};
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::connections::ConnectionPool;
use crate::error::{ClientError, OffsetError};
use crate::message::MessageExt;
use crate::offset_store::{PersistReport, ReadMode};
use crate::pull_consumer::{PullConsumer, PullConsumerConfig, PullResult};
use crate::rebalance::fetch_consumer_ids;

/// Where a queue with no stored offset starts (RocketMQ's `ConsumeFromWhere`), used only
/// when the broker positively answered that the group has no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The queue's smallest stored offset.
    First,
    /// The queue's max offset (only messages produced from now on).
    #[default]
    Last,
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// Lite pull consumer settings.
#[derive(Debug, Clone)]
pub struct LitePullConsumerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Consumer group.
    pub group: String,
    /// Start of a queue the group has no offset for.
    pub start_position: StartPosition,
    /// Messages asked for by one pull.
    pub pull_batch: u32,
    /// Most messages buffered per queue (pull-ahead bound).
    pub buffer_per_queue: usize,
    /// Most messages one `poll` returns.
    pub max_poll_messages: usize,
    /// How long the broker may hold a pull on an empty queue (long polling).
    pub pull_hold: Duration,
    /// Bound on every request other than the long-polling part of a pull.
    pub request_timeout: Duration,
    /// Bound on connecting to a server.
    pub connect_timeout: Duration,
    /// A cached route older than this is refreshed before use.
    pub route_max_age: Duration,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Rebalance period in subscribe mode (one also runs at `subscribe`).
    pub rebalance_interval: Duration,
    /// Pause after a failed pull or start-position lookup before the queue retries.
    pub retry_delay: Duration,
    /// Commit every assigned queue's polled position on this interval (`None`: only explicit
    /// commits).
    pub auto_commit_interval: Option<Duration>,
    /// Tag expression of queues given to [`LitePullConsumer::assign`].
    pub assign_expression: String,
}

impl Default for LitePullConsumerConfig {
    fn default() -> Self {
        LitePullConsumerConfig {
            namesrv_addrs: Vec::new(),
            group: String::new(),
            start_position: StartPosition::Last,
            pull_batch: 32,
            buffer_per_queue: 1024,
            max_poll_messages: 256,
            pull_hold: Duration::from_millis(500),
            request_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            rebalance_interval: Duration::from_secs(5),
            retry_delay: Duration::from_millis(200),
            auto_commit_interval: None,
            assign_expression: "*".into(),
        }
    }
}

/// Counters of a lite pull consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LitePullStats {
    /// Background auto-commits that succeeded for every queue.
    pub auto_commits_ok: u64,
    /// Background auto-commits where at least one queue failed.
    pub auto_commit_failures: u64,
    /// Commits of a queue leaving the assignment that failed.
    pub release_commit_failures: u64,
    /// Rebalances that could not run (route or consumer list unavailable).
    pub rebalance_failures: u64,
    /// Pulls that failed (each retried after `retry_delay`).
    pub pull_errors: u64,
    /// Start-position lookups that failed (each retried after `retry_delay`).
    pub start_lookup_failures: u64,
    /// OFFSET_ILLEGAL corrections the offset store could not persist (refused or failed).
    pub correction_failures: u64,
    /// Queues moved by a RESET_CONSUMER_CLIENT_OFFSET push.
    pub resets_applied: u64,
}

#[derive(Debug, Default)]
struct Counters {
    auto_commits_ok: AtomicU64,
    auto_commit_failures: AtomicU64,
    release_commit_failures: AtomicU64,
    rebalance_failures: AtomicU64,
    pull_errors: AtomicU64,
    start_lookup_failures: AtomicU64,
    correction_failures: AtomicU64,
    resets_applied: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[derive(Debug)]
struct QueueState {
    expression: String,
    buffer: VecDeque<MessageExt>,
    /// Next offset to pull; `None` until the start position is known.
    fetch_offset: Option<u64>,
    /// Offset after the last polled message: the position a commit writes.
    consumed: Option<u64>,
    /// Identifies the fetch task allowed to fill `buffer`; a seek, a reset or a new
    /// assignment of the queue takes a fresh one ([`Shared::next_epoch`]), so a pull answered
    /// for an older position — even one of an earlier assignment of the same queue — is
    /// never buffered, and `poll` never returns it.
    epoch: u64,
    paused: bool,
    wake: Arc<Notify>,
    task: Option<JoinHandle<()>>,
}

impl QueueState {
    /// Keeps `consumed` at the fetch position while nothing is buffered (messages filtered
    /// out by tag are never delivered, so skipping them is safe).
    fn settle(&mut self) {
        if self.buffer.is_empty() {
            if let Some(fetch) = self.fetch_offset {
                self.consumed = Some(fetch);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Assignment {
    queues: BTreeMap<MessageQueue, QueueState>,
    /// Subscribe mode: topic → tag expression.
    subscriptions: BTreeMap<String, String>,
    /// True once `assign` was used (the two modes do not mix).
    assigned: bool,
    next_poll: usize,
}

#[derive(Debug)]
struct Shared {
    config: LitePullConsumerConfig,
    pull: PullConsumer,
    pool: ConnectionPool,
    state: Mutex<Assignment>,
    data: Notify,
    /// Wakes the rebalance loop early (NOTIFY_CONSUMER_IDS_CHANGED).
    rebalance_now: Notify,
    counters: Counters,
    last_auto_commit_error: Mutex<Option<String>>,
    /// Source of [`QueueState::epoch`] values, unique for the consumer's life.
    epochs: AtomicU64,
}

impl Shared {
    /// A queue epoch never used before by this consumer.
    fn next_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn lock(&self) -> MutexGuard<'_, Assignment> {
        // Every critical section is a short, non-blocking map update.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

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
        if config.buffer_per_queue == 0 || config.max_poll_messages == 0 || config.pull_batch == 0 {
            return Err(ClientError::Config(
                "buffer_per_queue, max_poll_messages and pull_batch must be positive".into(),
            ));
        }
        let pull = PullConsumer::start(PullConsumerConfig {
            namesrv_addrs: config.namesrv_addrs.clone(),
            group: config.group.clone(),
            pull_timeout: config.request_timeout,
            connect_timeout: config.connect_timeout,
            route_max_age: config.route_max_age,
            heartbeat_interval: config.heartbeat_interval,
        })?;
        let pool = ConnectionPool::new(ClientOptions {
            connect_timeout: config.connect_timeout,
            ..ClientOptions::default()
        });
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

/// Copies every assigned queue's polled position into the offset store's memory.
fn stage_positions(shared: &Shared) {
    let positions: Vec<(MessageQueue, u64)> = shared
        .lock()
        .queues
        .iter()
        .filter_map(|(q, s)| s.consumed.map(|o| (q.clone(), o)))
        .collect();
    let store = shared.pull.offset_store();
    for (queue, offset) in positions {
        store.update(&queue, offset);
    }
}

async fn commit_all(shared: &Shared) -> Result<PersistReport, OffsetError> {
    stage_positions(shared);
    let report = shared.pull.offset_store().persist_all().await?;
    if report.is_complete() {
        return Ok(report);
    }
    let first = report
        .failed
        .first()
        .map(|(queue, error)| format!("{queue:?}: {error}"))
        .unwrap_or_default();
    Err(OffsetError::PersistFailed {
        failed: report.failed.len(),
        total: report.failed.len() + report.persisted.len(),
        first,
    })
}

async fn offset_for_timestamp(
    shared: &Shared,
    queue: &MessageQueue,
    timestamp_ms: i64,
) -> Result<u64, ClientError> {
    let addr = shared
        .pull
        .routes()
        .master_addr(&queue.topic, &queue.broker_name)
        .await?;
    let header = SearchOffsetRequestHeader {
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        timestamp: timestamp_ms,
        boundary_type: Some(BoundaryType::Lower),
    };
    let cmd = RemotingCommand::request_with_header(request::SEARCH_OFFSET_BY_TIMESTAMP, &header);
    let reply = shared
        .pool
        .invoke_success(addr, cmd, shared.config.request_timeout)
        .await?;
    let h: SearchOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
    ClientError::non_negative_offset(addr, h.offset)
}

/// Replaces the assignment with `wanted`; with `only_topics`, queues of other topics are
/// left alone (subscribe mode rebalances per subscribed topic).
async fn apply_assignment(
    shared: &Arc<Shared>,
    wanted: BTreeMap<MessageQueue, String>,
    only_topics: Option<&BTreeSet<String>>,
) {
    let mut released = Vec::new();
    {
        let mut state = shared.lock();
        let gone: Vec<MessageQueue> = state
            .queues
            .keys()
            .filter(|q| only_topics.is_none_or(|t| t.contains(&q.topic)))
            .filter(|q| !wanted.contains_key(*q))
            .cloned()
            .collect();
        for queue in gone {
            if let Some(mut q) = state.queues.remove(&queue) {
                if let Some(task) = q.task.take() {
                    task.abort();
                }
                released.push((queue, q.consumed));
            }
        }
        for (queue, expression) in wanted {
            if state.queues.contains_key(&queue) {
                continue;
            }
            let epoch = shared.next_epoch();
            let task = spawn_fetch(shared, queue.clone(), epoch);
            state.queues.insert(
                queue,
                QueueState {
                    expression,
                    buffer: VecDeque::new(),
                    fetch_offset: None,
                    consumed: None,
                    epoch,
                    paused: false,
                    wake: Arc::new(Notify::new()),
                    task: Some(task),
                },
            );
        }
    }
    let store = shared.pull.offset_store();
    for (queue, consumed) in released {
        if let Some(offset) = consumed {
            store.update(&queue, offset);
            if let Err(error) = store.persist(&queue).await {
                bump(&shared.counters.release_commit_failures);
                tracing::warn!(?queue, %error, "commit of a released queue failed");
            }
        }
        store.remove(&queue);
    }
}

/// One rebalance of every subscribed topic (average allocation).
async fn rebalance(shared: &Arc<Shared>) -> Result<(), ClientError> {
    let result = rebalance_inner(shared).await;
    if result.is_err() {
        bump(&shared.counters.rebalance_failures);
    }
    result
}

async fn rebalance_inner(shared: &Arc<Shared>) -> Result<(), ClientError> {
    let subscriptions = shared.lock().subscriptions.clone();
    let mut wanted = BTreeMap::new();
    let mut topics = BTreeSet::new();
    for (topic, expression) in &subscriptions {
        let mut queues = shared.pull.fetch_queues(topic).await?;
        queues.sort();
        // Keep the broker's view of this member fresh before asking for the member list.
        shared.pull.heartbeat().await?;
        let mut members = consumer_list(shared, &queues).await?;
        members.sort();
        let mine = allocate_average(&queues, &members, shared.pull.client_id());
        wanted.extend(mine.into_iter().map(|q| (q, expression.clone())));
        topics.insert(topic.clone());
    }
    apply_assignment(shared, wanted, Some(&topics)).await;
    Ok(())
}

/// The group's live consumer ids, from the first broker of `queues` that answers.
async fn consumer_list(
    shared: &Shared,
    queues: &[MessageQueue],
) -> Result<Vec<String>, ClientError> {
    let topic = queues.first().map(|q| q.topic.clone()).unwrap_or_default();
    let brokers: BTreeSet<&str> = queues.iter().map(|q| q.broker_name.as_str()).collect();
    fetch_consumer_ids(
        &shared.pool,
        shared.pull.routes(),
        &shared.config.group,
        &topic,
        brokers,
        shared.config.request_timeout,
    )
    .await
    .map_err(|last_error| {
        last_error.unwrap_or(ClientError::NoQueue {
            topic,
            kind: "readable",
        })
    })
}

/// RocketMQ's `AllocateMessageQueueAveragely`: contiguous blocks, the first
/// `queues % members` members getting one extra queue. Both lists must be sorted. The same
/// function as [`crate::rebalance::allocate_averagely`], kept under this name.
pub use crate::rebalance::allocate_averagely as allocate_average;

fn spawn_fetch(shared: &Arc<Shared>, queue: MessageQueue, epoch: u64) -> JoinHandle<()> {
    let shared = shared.clone();
    tokio::spawn(async move { fetch_loop(shared, queue, epoch).await })
}

/// What a pull's answer leaves to do once the state lock is released.
enum AfterPull {
    Done,
    Failed(ClientError),
    /// OFFSET_ILLEGAL: persist the correction to this offset.
    Correct(u64),
}

enum Step {
    /// Nothing to do until woken (paused or buffer full).
    Wait(Arc<Notify>),
    /// The start position is unknown.
    Start,
    /// Pull from this offset, at most this many messages.
    Pull(u64, u32, String),
    /// The queue left the assignment or was re-seeked: this task ends.
    Stop,
}

/// Fills one queue's buffer until aborted.
async fn fetch_loop(shared: Arc<Shared>, queue: MessageQueue, epoch: u64) {
    let config = &shared.config;
    loop {
        let step = {
            let state = shared.lock();
            match state.queues.get(&queue) {
                None => Step::Stop,
                Some(q) if q.epoch != epoch => Step::Stop,
                Some(q) if q.paused || q.buffer.len() >= config.buffer_per_queue => {
                    Step::Wait(q.wake.clone())
                }
                Some(q) => match q.fetch_offset {
                    None => Step::Start,
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
            Step::Start => match start_offset(&shared, &queue).await {
                Ok(offset) => {
                    let mut state = shared.lock();
                    if let Some(q) = state.queues.get_mut(&queue) {
                        if q.epoch == epoch && q.fetch_offset.is_none() {
                            q.fetch_offset = Some(offset);
                            q.consumed = Some(offset);
                        }
                    }
                }
                Err(error) => {
                    bump(&shared.counters.start_lookup_failures);
                    tracing::warn!(?queue, %error, "cannot determine the start offset; retrying");
                    tokio::time::sleep(config.retry_delay).await;
                }
            },
            Step::Pull(offset, max, expression) => {
                let result = shared
                    .pull
                    .pull_blocking(&queue, &expression, offset, max, config.pull_hold)
                    .await;
                let failed = {
                    let mut state = shared.lock();
                    let Some(q) = state.queues.get_mut(&queue) else {
                        return;
                    };
                    if q.epoch != epoch || q.fetch_offset != Some(offset) {
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

/// Persists an OFFSET_ILLEGAL correction at once; a failure is counted (the position follows
/// the broker's suggestion either way, and the next commit retries it).
async fn correct(shared: &Shared, queue: &MessageQueue, offset: u64) {
    if let Err(error) = shared.pull.offset_store().correct(queue, offset).await {
        bump(&shared.counters.correction_failures);
        tracing::warn!(?queue, offset, %error, "persisting the correction failed");
    }
}

/// Server-initiated requests of the consumer's broker connections.
fn on_server_request(shared: &Arc<Shared>, cmd: &RemotingCommand) -> bool {
    match cmd.code {
        request::NOTIFY_CONSUMER_IDS_CHANGED => {
            shared.rebalance_now.notify_one();
            true
        }
        request::RESET_CONSUMER_CLIENT_OFFSET => match crate::reset_push::parse(cmd) {
            Ok(reset) if reset.group == shared.config.group => {
                apply_reset(shared, &reset.offsets);
                true
            }
            Ok(reset) => {
                tracing::warn!(group = %reset.group, "offset reset for another group ignored");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "malformed offset reset push ignored");
                false
            }
        },
        _ => false,
    }
}

/// Moves every assigned queue named by a reset to its reset offset: the buffer and any pull
/// in flight are discarded (new epoch), and the position a commit writes is the reset offset.
fn apply_reset(shared: &Arc<Shared>, offsets: &[(MessageQueue, u64)]) {
    let store = shared.pull.offset_store();
    let mut state = shared.lock();
    for (queue, offset) in offsets {
        let Some(q) = state.queues.get_mut(queue) else {
            continue;
        };
        tracing::info!(?queue, offset, "offset reset by the broker; following it");
        q.epoch = shared.next_epoch();
        q.buffer.clear();
        q.fetch_offset = Some(*offset);
        q.consumed = Some(*offset);
        if let Some(task) = q.task.take() {
            task.abort();
        }
        q.task = Some(spawn_fetch(shared, queue.clone(), q.epoch));
        // Forget what was persisted: the broker's offset moved, so the next commit must be
        // sent even if it repeats a value acknowledged before the reset.
        store.remove(queue);
        store.update(queue, *offset);
        bump(&shared.counters.resets_applied);
    }
}

/// The stored offset, or the configured start position when the broker positively has none.
async fn start_offset(shared: &Shared, queue: &MessageQueue) -> Result<u64, ClientError> {
    let stored = shared
        .pull
        .offset_store()
        .read(queue, ReadMode::Store)
        .await?;
    if let Some(offset) = stored {
        return Ok(offset);
    }
    match shared.config.start_position {
        StartPosition::First => shared.pull.min_offset(queue).await,
        StartPosition::Last => shared.pull.max_offset(queue).await,
        StartPosition::Timestamp(ts) => offset_for_timestamp(shared, queue, ts).await,
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
