//! A push consumer (the role of RocketMQ's `DefaultMQPushConsumer`): the client pulls with
//! long polling on behalf of the application and hands messages to a listener.
//!
//! - **Models**: [`MessageModel::Clustering`] (queues are shared out among the group's
//!   members, offsets live on the broker through [`BrokerOffsetStore`]) and
//!   [`MessageModel::Broadcasting`] (every member gets every queue, offsets live in a
//!   [`LocalFileOffsetStore`] under [`PushConsumerConfig::local_offset_dir`]).
//! - **Listeners** ([`MessageListener`]) are synchronous closures run on tokio's blocking
//!   pool (`spawn_blocking`), so a slow or blocking listener never stalls the runtime:
//!   - [`MessageListener::Concurrently`]: batches of up to
//!     [`PushConsumerConfig::consume_batch_max`] messages, at most
//!     [`PushConsumerConfig::consume_threads`] batches at a time;
//!   - [`MessageListener::Orderly`]: one message at a time per queue, in queue order; in
//!     clustering the queue is consumed only while this client holds the broker's queue lock
//!     (LOCK_BATCH_MQ), renewed every [`PushConsumerConfig::lock_renew_interval`].
//!
//!   A listener that panics counts as [`ConsumeStatus::ReconsumeLater`].
//! - **Rebalance** (clustering): average allocation of the sorted queues over the sorted
//!   consumer ids (GET_CONSUMER_LIST_BY_GROUP), at start, on NOTIFY_CONSUMER_IDS_CHANGED and
//!   every [`PushConsumerConfig::rebalance_interval`]. A queue leaving this member stops
//!   pulling, has its offset persisted, and is forgotten by the store (orderly: after its
//!   consumer stopped, then the lock is released).
//! - **Offsets** (at-least-once): a queue's committed offset is the smallest offset still in
//!   flight (pulled, not yet acknowledged), or the next offset to pull when none is; the
//!   [`Persister`] writes them every [`PushConsumerConfig::persist_interval`]. The duplicate
//!   window after a crash is therefore the messages in flight or acknowledged since the last
//!   acknowledged persist (pitfalls C5, C9).
//! - **Uncommitted window**: a queue pulled [`PushConsumerConfig::max_uncommitted_per_queue`]
//!   offsets past the last commit its store acknowledged stops pulling and wakes the
//!   persister, until a commit lands ([`PushConsumerStats::commit_window_pauses`]). While
//!   commits fail (a deposed master answering NOT_MASTER until the route names its successor)
//!   the consumer therefore reads at most that much (plus one pull) that a restart, rebalance
//!   or failover would deliver again; without it `ferromq chaos` saw a consumer read ~300
//!   messages per queue past a refused commit, all delivered again.
//! - **Identified commits**: a ferromq broker refuses a commit from a connection that has not
//!   said which client it serves (no heartbeat yet, e.g. a new connection to a new master) on a
//!   queue a reset fences. The persister then heartbeats to every master and persists the
//!   refused queues once more in the same round ([`crate::offset_store::PersistHooks`]).
//!   Heartbeats go to all masters at once, so a dead or paused one never delays them.
//! - **Start offset**: the store's offset; [`ConsumeFromWhere`] only when the store answers
//!   `Ok(None)`; when it answers `Err` (broker unreachable) the queue waits and retries —
//!   it never guesses (pitfall C6). The retry topic always starts at its first offset.
//! - **OFFSET_ILLEGAL**: the queue adopts the broker's suggested offset, persists it at once
//!   with [`OffsetStore::correct`], and starts a new generation: results of messages pulled
//!   before the correction are dropped and counted, never committed over it (pitfall C8).
//! - **Offset reset** (RESET_CONSUMER_CLIENT_OFFSET, pitfall C11): the queues named by the
//!   broker's push drop their cached messages, start a new generation (in-flight results are
//!   not committed over the reset), interrupt the pull in flight and resume at the reset
//!   offset, which becomes the store's in-memory offset. The broker's reset fence refuses
//!   this client's older commits anyway until it pulls the queue.
//! - **Stale batches are never delivered**: right before the listener is called (on the
//!   blocking pool, in both listener kinds) the batch's queue must still be owned (not
//!   stopped by a rebalance or shutdown, not dropped) and at the generation the batch was
//!   pulled in (no reset or correction since). Otherwise the batch is discarded without a
//!   call ([`PushConsumerStats::batches_discarded`]) and is read again from the queue's new
//!   position, or by its next owner. A batch whose listener call had already begun when the
//!   queue moved finishes, but its result is neither committed nor sent back.
//! - **ReconsumeLater** (clustering): each message is sent back with CONSUMER_SEND_MSG_BACK;
//!   the broker stores it in `%RETRY%<group>` (to which this consumer also subscribes) or,
//!   after [`PushConsumerConfig::max_reconsume_times`], in `%DLQ%<group>`. A message whose
//!   send-back fails stays in flight and is consumed again locally after
//!   [`PushConsumerConfig::local_retry_delay`]. Broadcasting retries locally up to
//!   `max_reconsume_times`, then drops the message (counted).
//! - **Running info** (GET_CONSUMER_RUNNING_INFO, forwarded by the broker for `mqadmin
//!   consumerStatus`): answered with [`PushConsumer::running_info`] (`running_info`).
//! - **Shutdown** ([`PushConsumer::shutdown`]) stops pulling, waits (bounded) for running
//!   listeners, persists every offset, releases orderly locks, unregisters from every
//!   broker, and reports every failure.

mod queue;
mod running_info;
mod session;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;

use crate::connections::ConnectionPool;
use crate::error::{ClientError, OffsetError};
use crate::message::MessageExt;
use crate::offset_store::{
    BrokerOffsetStore, Identify, LocalFileOffsetStore, OffsetStore, OffsetStoreStats, PersistHooks,
    PersistReport, Persister,
};
use crate::pull_consumer::{PullConsumer, PullConsumerConfig};
use crate::route::RouteCache;

pub use crate::rebalance::allocate_averagely;

use queue::ProcessQueue;

/// Prefix of a group's retry topic.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// What a listener says about the messages it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// All messages are processed; their offsets may be committed.
    ConsumeSuccess,
    /// Deliver them again later (clustering: through the retry topic; orderly: the queue is
    /// suspended for [`PushConsumerConfig::orderly_suspend`] and the message is retried).
    ReconsumeLater,
}

/// A synchronous message listener (run on tokio's blocking pool).
pub type ListenerFn = Arc<dyn Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync>;

/// How messages are handed to the application.
#[derive(Clone)]
pub enum MessageListener {
    /// Batches of up to `consume_batch_max` messages, several batches in parallel.
    Concurrently(ListenerFn),
    /// One message at a time per queue, in queue order (broker queue locks in clustering).
    Orderly(ListenerFn),
}

impl MessageListener {
    /// A concurrent listener from a closure.
    pub fn concurrently(
        f: impl Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static,
    ) -> Self {
        MessageListener::Concurrently(Arc::new(f))
    }

    /// An orderly listener from a closure.
    pub fn orderly(f: impl Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static) -> Self {
        MessageListener::Orderly(Arc::new(f))
    }

    fn is_orderly(&self) -> bool {
        matches!(self, MessageListener::Orderly(_))
    }

    fn function(&self) -> &ListenerFn {
        match self {
            MessageListener::Concurrently(f) | MessageListener::Orderly(f) => f,
        }
    }
}

impl std::fmt::Debug for MessageListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_orderly() {
            "MessageListener::Orderly"
        } else {
            "MessageListener::Concurrently"
        })
    }
}

/// Clustering (queues shared out in the group) or broadcasting (every member gets all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageModel {
    /// Queues are allocated among the group's members; offsets on the broker.
    Clustering,
    /// Every member consumes every queue; offsets in a local file.
    Broadcasting,
}

/// Where a queue without a stored offset starts (used only when the store says `Ok(None)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeFromWhere {
    /// At the queue's current max offset (only new messages).
    LastOffset,
    /// At the queue's min offset.
    FirstOffset,
    /// At the first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// Push consumer settings.
#[derive(Debug, Clone)]
pub struct PushConsumerConfig {
    /// Name servers.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Consumer group.
    pub group: String,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Start position of a queue the store has no offset for.
    pub consume_from_where: ConsumeFromWhere,
    /// Stop pulling a queue while it holds more in-flight messages than this.
    pub max_cached_messages_per_queue: usize,
    /// Stop pulling a queue while its in-flight bodies exceed this many bytes.
    pub max_cached_bytes_per_queue: usize,
    /// Largest batch given to a concurrent listener.
    pub consume_batch_max: usize,
    /// Concurrent listener batches running at once.
    pub consume_threads: usize,
    /// Messages asked for per pull.
    pub pull_batch_size: u32,
    /// Long-poll hold of a pull.
    pub pull_hold: Duration,
    /// Pause after a failed pull or an unanswered offset read.
    pub pull_error_backoff: Duration,
    /// Periodic rebalance.
    pub rebalance_interval: Duration,
    /// Periodic offset persist.
    pub persist_interval: Duration,
    /// Stop pulling a queue while it is this many offsets past the last commit its store
    /// acknowledged (pulled, whether consumed or not, but not durably committed), and persist
    /// at once. This bounds what a restart, a rebalance or a failover can deliver again when
    /// commits fail (an unreachable or deposed master): without it a consumer whose commits
    /// are refused consumes on without limit and all of it comes back. Only stores that report
    /// [`OffsetStore::acknowledged`] are bounded.
    pub max_uncommitted_per_queue: u64,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Deliveries before the broker moves a message to the DLQ.
    pub max_reconsume_times: i32,
    /// Delay level of send-backs; 0 lets the broker choose (`3 + reconsumeTimes`).
    pub send_back_delay_level: i32,
    /// Pause before a message is consumed again locally (failed send-back, broadcasting).
    pub local_retry_delay: Duration,
    /// Pause of an orderly queue after `ReconsumeLater`.
    pub orderly_suspend: Duration,
    /// Orderly: how often queue locks are renewed (and missing ones retried).
    pub lock_renew_interval: Duration,
    /// Orderly: how long a granted lock is trusted without renewal (below the broker's 60 s).
    pub lock_max_live: Duration,
    /// Timeout of every request other than pulls (and added to a pull's hold).
    pub request_timeout: Duration,
    /// Bound on waiting for running listeners during shutdown or a queue's removal.
    pub shutdown_timeout: Duration,
    /// Broadcasting: directory of the local offset file (required in that model).
    pub local_offset_dir: Option<PathBuf>,
    /// ACL credentials every request is signed with (`None`: unsigned, for brokers without
    /// ACL).
    pub credentials: Option<ferromq_protocol::remoting::acl::Credentials>,
    /// TLS (`None`: plain TCP) of every connection, name servers and brokers: trusts the CA
    /// file it was built from.
    pub tls: Option<ferromq_protocol::remoting::tls::ClientTls>,
    /// Pull requests carry RocketMQ's compact binary header instead of JSON
    /// (`PullConsumerConfig::binary_header`).
    pub binary_header: bool,
}

impl Default for PushConsumerConfig {
    fn default() -> Self {
        PushConsumerConfig {
            namesrv_addrs: Vec::new(),
            group: String::new(),
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::LastOffset,
            max_cached_messages_per_queue: 1000,
            max_cached_bytes_per_queue: 100 << 20,
            consume_batch_max: 1,
            consume_threads: 20,
            pull_batch_size: 32,
            pull_hold: Duration::from_secs(15),
            pull_error_backoff: Duration::from_secs(1),
            rebalance_interval: Duration::from_secs(20),
            persist_interval: Duration::from_secs(5),
            max_uncommitted_per_queue: 10_000,
            heartbeat_interval: Duration::from_secs(30),
            max_reconsume_times: 16,
            send_back_delay_level: 0,
            local_retry_delay: Duration::from_secs(5),
            orderly_suspend: Duration::from_secs(1),
            lock_renew_interval: Duration::from_secs(20),
            lock_max_live: Duration::from_secs(30),
            request_timeout: Duration::from_secs(3),
            shutdown_timeout: Duration::from_secs(10),
            local_offset_dir: None,
            credentials: None,
            tls: None,
            binary_header: true,
        }
    }
}

/// Counters of a push consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushConsumerStats {
    /// Messages acknowledged by the listener.
    pub consumed_ok: u64,
    /// Messages the listener asked to reconsume.
    pub reconsume_later: u64,
    /// Messages sent back to the broker (retry topic or DLQ).
    pub sent_back: u64,
    /// Send-backs that failed (the message is retried locally).
    pub send_back_failed: u64,
    /// Broadcasting messages dropped after `max_reconsume_times` local attempts.
    pub dropped_after_retries: u64,
    /// Results discarded because the queue was corrected or removed meanwhile (C8).
    pub stale_results: u64,
    /// Listener calls not made because the batch's queue was reset, corrected, removed or
    /// stopped after the batch was pulled: the batch was discarded undelivered (orderly:
    /// one per message, each being its own call).
    pub batches_discarded: u64,
    /// OFFSET_ILLEGAL corrections.
    pub corrections: u64,
    /// Times a queue's pulling paused for flow control.
    pub flow_control_pauses: u64,
    /// Times a queue's pulling paused because it reached `max_uncommitted_per_queue` past its
    /// last acknowledged commit.
    pub commit_window_pauses: u64,
    /// Rebalances run.
    pub rebalances: u64,
    /// Queues moved by a RESET_CONSUMER_CLIENT_OFFSET push.
    pub resets_applied: u64,
}

#[derive(Debug, Default)]
struct Counters {
    consumed_ok: AtomicU64,
    reconsume_later: AtomicU64,
    sent_back: AtomicU64,
    send_back_failed: AtomicU64,
    dropped_after_retries: AtomicU64,
    stale_results: AtomicU64,
    batches_discarded: AtomicU64,
    corrections: AtomicU64,
    flow_control_pauses: AtomicU64,
    commit_window_pauses: AtomicU64,
    rebalances: AtomicU64,
    resets_applied: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PushConsumerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PushConsumerStats {
            consumed_ok: get(&self.consumed_ok),
            reconsume_later: get(&self.reconsume_later),
            sent_back: get(&self.sent_back),
            send_back_failed: get(&self.send_back_failed),
            dropped_after_retries: get(&self.dropped_after_retries),
            stale_results: get(&self.stale_results),
            batches_discarded: get(&self.batches_discarded),
            corrections: get(&self.corrections),
            flow_control_pauses: get(&self.flow_control_pauses),
            commit_window_pauses: get(&self.commit_window_pauses),
            rebalances: get(&self.rebalances),
            resets_applied: get(&self.resets_applied),
        }
    }
}

/// What [`PushConsumer::shutdown`] did; every failure is listed.
#[derive(Debug)]
#[must_use = "a shutdown report may list failures"]
pub struct ShutdownReport {
    /// The final persist of every offset.
    pub offsets: PersistReport,
    /// Listener batches still running when the wait ended (their results are not committed).
    pub listeners_still_running: usize,
    /// Orderly queue unlocks that failed (the broker frees them after its lock lifetime).
    pub unlock_failures: Vec<(String, ClientError)>,
    /// UNREGISTER_CLIENT requests that failed, per broker.
    pub unregister_failures: Vec<(SocketAddr, ClientError)>,
}

impl ShutdownReport {
    /// True when every offset was persisted, every listener finished, and every broker
    /// acknowledged the unlock and the unregister.
    pub fn is_complete(&self) -> bool {
        self.offsets.is_complete()
            && self.listeners_still_running == 0
            && self.unlock_failures.is_empty()
            && self.unregister_failures.is_empty()
    }
}

struct QueueEntry {
    pq: Arc<ProcessQueue>,
    task: JoinHandle<()>,
}

struct Inner {
    config: PushConsumerConfig,
    /// (topic, expression), including the retry topic in clustering.
    subscriptions: Vec<(String, String)>,
    listener: MessageListener,
    pull: PullConsumer,
    pool: Arc<ConnectionPool>,
    routes: Arc<RouteCache>,
    offsets: Arc<dyn OffsetStore>,
    queues: Mutex<BTreeMap<MessageQueue, QueueEntry>>,
    stop: watch::Sender<bool>,
    rebalance_now: Notify,
    rebalance_serial: tokio::sync::Mutex<()>,
    permits: Arc<Semaphore>,
    counters: Counters,
    server_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// When the consumer started, ms since the epoch (GET_CONSUMER_RUNNING_INFO).
    started_ms: i64,
    /// Wakes the persister (a queue paused on its uncommitted window).
    persist_now: Arc<Notify>,
}

impl Inner {
    fn queues(&self) -> MutexGuard<'_, BTreeMap<MessageQueue, QueueEntry>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`; true when the consumer stopped meanwhile.
    async fn sleep_or_stop(&self, d: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(d) => self.is_stopped(),
            _ = stop.wait_for(|s| *s) => true,
        }
    }

    fn clustering(&self) -> bool {
        self.config.message_model == MessageModel::Clustering
    }

    fn orderly_locks(&self) -> bool {
        self.clustering() && self.listener.is_orderly()
    }
}

/// A running push consumer. Dropping it without [`PushConsumer::shutdown`] stops its tasks
/// without persisting (as a crash would, apart from the process surviving).
pub struct PushConsumer {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
    persister: Option<Persister>,
}

impl std::fmt::Debug for PushConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConsumer")
            .field("group", &self.inner.config.group)
            .field("client_id", &self.inner.pull.client_id())
            .finish_non_exhaustive()
    }
}

impl PushConsumer {
    /// Starts a push consumer of `subscriptions` (`(topic, tag expression)`, e.g. `"*"` or
    /// `"a || b"`): heartbeats, a first rebalance, then background pulling.
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group, no subscription, no name server, or
    /// broadcasting without `local_offset_dir` (or an unreadable local offset file).
    pub async fn start(
        config: PushConsumerConfig,
        subscriptions: Vec<(String, String)>,
        listener: MessageListener,
    ) -> Result<PushConsumer, ClientError> {
        let local: Option<Arc<dyn OffsetStore>> = match config.message_model {
            MessageModel::Clustering => None,
            MessageModel::Broadcasting => {
                let dir = config.local_offset_dir.clone().ok_or_else(|| {
                    ClientError::Config("broadcasting needs local_offset_dir".into())
                })?;
                let store = LocalFileOffsetStore::open(dir, &config.group)
                    .map_err(|e| ClientError::Config(format!("local offset store: {e}")))?;
                Some(Arc::new(store))
            }
        };
        Self::start_with_store(
            config,
            subscriptions,
            listener,
            |group, routes, pool, timeout| match local {
                Some(store) => store,
                None => Arc::new(BrokerOffsetStore::new(group, routes, pool, timeout)),
            },
        )
        .await
    }

    /// As [`PushConsumer::start`], with the offset store built by `make` from the group,
    /// the consumer's route cache, connection pool and request timeout (e.g. to wrap the
    /// broker store, or to plug in another store).
    ///
    /// # Errors
    /// As [`PushConsumer::start`].
    pub async fn start_with_store(
        config: PushConsumerConfig,
        subscriptions: Vec<(String, String)>,
        listener: MessageListener,
        make: impl FnOnce(&str, Arc<RouteCache>, Arc<ConnectionPool>, Duration) -> Arc<dyn OffsetStore>,
    ) -> Result<PushConsumer, ClientError> {
        if config.group.is_empty() {
            return Err(ClientError::Config("consumer group is empty".into()));
        }
        if subscriptions.is_empty() {
            return Err(ClientError::Config("no subscription".into()));
        }
        let mut captured_pool = None;
        let pull = PullConsumer::start_with(
            PullConsumerConfig {
                namesrv_addrs: config.namesrv_addrs.clone(),
                group: config.group.clone(),
                pull_timeout: config.request_timeout,
                connect_timeout: config.request_timeout,
                // This consumer sends its own (CONSUME_PASSIVELY) heartbeats.
                heartbeat_interval: Duration::from_secs(365 * 24 * 3600),
                credentials: config.credentials.clone(),
                tls: config.tls.clone(),
                binary_header: config.binary_header,
                ..PullConsumerConfig::default()
            },
            |group, routes, pool, timeout| {
                captured_pool = Some(pool.clone());
                make(group, routes, pool, timeout)
            },
        )?;
        let pool = captured_pool
            .ok_or_else(|| ClientError::Config("pull consumer did not build a store".into()))?;
        let mut subscriptions = subscriptions;
        if config.message_model == MessageModel::Clustering {
            let retry = format!("{RETRY_TOPIC_PREFIX}{}", config.group);
            if !subscriptions.iter().any(|(t, _)| *t == retry) {
                subscriptions.push((retry, "*".into()));
            }
        }
        let offsets = pull.offset_store().clone();
        let routes = pull.routes().clone();
        let permits = Arc::new(Semaphore::new(config.consume_threads.max(1)));
        let inner = Arc::new(Inner {
            subscriptions,
            listener,
            pull,
            pool,
            routes,
            offsets: offsets.clone(),
            queues: Mutex::new(BTreeMap::new()),
            stop: watch::channel(false).0,
            rebalance_now: Notify::new(),
            rebalance_serial: tokio::sync::Mutex::new(()),
            permits,
            counters: Counters::default(),
            server_tasks: Mutex::new(Vec::new()),
            started_ms: queue::now_ms(),
            persist_now: Arc::new(Notify::new()),
            config,
        });
        for (topic, _) in &inner.subscriptions {
            if let Err(error) = inner.routes.route(topic).await {
                tracing::warn!(%topic, %error, "no route yet for a subscribed topic");
            }
        }
        if let Err(error) = session::heartbeat(&inner).await {
            tracing::warn!(%error, "first heartbeat failed");
        }
        session::rebalance(&inner).await;
        let persister = Persister::spawn_with(
            offsets,
            inner.config.persist_interval,
            inner.config.persist_interval * 8,
            PersistHooks {
                identify: Some(identify_hook(&inner)),
                wake: inner.persist_now.clone(),
            },
        );
        let mut tasks = vec![
            tokio::spawn(session::heartbeat_loop(inner.clone())),
            tokio::spawn(session::rebalance_loop(inner.clone())),
        ];
        if inner.orderly_locks() {
            tasks.push(tokio::spawn(session::lock_loop(inner.clone())));
        }
        Ok(PushConsumer {
            inner,
            tasks,
            persister: Some(persister),
        })
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.config.group
    }

    /// This client's id as the brokers see it.
    pub fn client_id(&self) -> &str {
        self.inner.pull.client_id()
    }

    /// The offset store (broker store in clustering, local file in broadcasting).
    pub fn offset_store(&self) -> &Arc<dyn OffsetStore> {
        &self.inner.offsets
    }

    /// Offset store counters.
    pub fn offset_stats(&self) -> OffsetStoreStats {
        self.inner.offsets.stats()
    }

    /// This consumer's state as it answers GET_CONSUMER_RUNNING_INFO (`mqadmin
    /// consumerStatus`): settings, subscriptions, and per assigned queue its processing state.
    pub fn running_info(
        &self,
    ) -> ferromq_protocol::remoting::body::running_info::ConsumerRunningInfo {
        running_info::running_info(&self.inner)
    }

    /// Consumer counters.
    pub fn stats(&self) -> PushConsumerStats {
        self.inner.counters.snapshot()
    }

    /// Messages and body bytes cached (pulled, not yet acknowledged) per assigned queue; the
    /// flow control keeps them under `max_cached_messages_per_queue` plus one pull batch,
    /// and under `max_cached_bytes_per_queue` plus one pull's bytes.
    pub fn cached_per_queue(&self) -> BTreeMap<MessageQueue, (usize, usize)> {
        self.inner
            .queues()
            .iter()
            .map(|(q, e)| (q.clone(), e.pq.cached()))
            .collect()
    }

    /// Queues currently assigned to this member (sorted).
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.inner.queues().keys().cloned().collect()
    }

    /// Runs a rebalance now (it also runs periodically and on membership changes).
    pub async fn rebalance(&self) {
        session::rebalance(&self.inner).await;
    }

    /// Stops pulling, waits up to `shutdown_timeout` for running listeners, persists every
    /// offset, releases orderly queue locks, and unregisters from every broker.
    ///
    /// # Errors
    /// The final `persist_all`'s own error; per-queue and per-broker failures are listed in
    /// the report.
    pub async fn shutdown(mut self) -> Result<ShutdownReport, OffsetError> {
        let inner = self.inner.clone();
        // `send_replace`: the flag sticks even when no task is subscribed right now.
        inner.stop.send_replace(true);
        // No rebalance or lock renewal is running past this point (a renewal sent after the
        // final unlock would keep the queues locked for the broker's lock lifetime).
        let _serial = inner.rebalance_serial.lock().await;
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let entries: Vec<(MessageQueue, QueueEntry)> =
            std::mem::take(&mut *inner.queues()).into_iter().collect();
        for (_, entry) in &entries {
            entry.pq.stop();
        }
        let deadline = tokio::time::Instant::now() + inner.config.shutdown_timeout;
        for (_, entry) in entries.iter() {
            let _ = tokio::time::timeout_at(deadline, async {
                while !entry.task.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
        }
        let threads = inner.config.consume_threads.max(1);
        let listeners_still_running =
            match tokio::time::timeout_at(deadline, inner.permits.acquire_many(threads as u32))
                .await
            {
                Ok(Ok(permits)) => {
                    permits.forget();
                    0
                }
                _ => threads.saturating_sub(inner.permits.available_permits()),
            };
        for (_, entry) in &entries {
            entry.task.abort();
            entry.pq.drop_results();
        }
        let offsets = match self.persister.take() {
            Some(persister) => persister.shutdown().await,
            None => inner.offsets.persist_all().await,
        };
        let mut unlock_failures = Vec::new();
        if inner.orderly_locks() {
            let queues: Vec<MessageQueue> = entries.iter().map(|(q, _)| q.clone()).collect();
            unlock_failures = session::unlock(&inner, &queues).await;
        }
        let unregister_failures = session::unregister(&inner).await;
        for task in inner
            .server_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        inner.pool.close_all();
        Ok(ShutdownReport {
            offsets: offsets?,
            listeners_still_running,
            unlock_failures,
            unregister_failures,
        })
    }
}

/// Heartbeats to every known master before the persister retries a commit refused as
/// unidentified (a connection opened after the last heartbeat, e.g. to a new master after a
/// failover, on a queue a reset fences). Holds the consumer weakly: the persister must not
/// keep a dropped consumer alive.
fn identify_hook(inner: &Arc<Inner>) -> Identify {
    let weak = Arc::downgrade(inner);
    Arc::new(move || {
        let weak = weak.clone();
        Box::pin(async move {
            match weak.upgrade() {
                Some(inner) => session::heartbeat(&inner).await,
                None => Err(ClientError::Config("the consumer was dropped".into())),
            }
        })
    })
}

impl Drop for PushConsumer {
    fn drop(&mut self) {
        self.inner.stop.send_replace(true);
        for task in self.tasks.drain(..) {
            task.abort();
        }
        for (_, entry) in std::mem::take(&mut *self.inner.queues()) {
            entry.pq.stop();
            entry.pq.drop_results();
            entry.task.abort();
        }
        for task in self
            .inner
            .server_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}
