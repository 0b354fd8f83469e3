//! [`PullConsumer`]: the application chooses queues and offsets, pulls, and commits through
//! its offset store (RocketMQ's `DefaultMQPullConsumer` role, without its silent failures).
//!
//! Invariants:
//! - `pull` maps wire codes exactly (reference §9): 0 → `Found`, 19 → `NoNewMessage`,
//!   20 → `NoMatchedMessage`, 21 → `OffsetIllegal` with the broker's suggested offset; any
//!   other code is an `Err` carrying the code and remark; a negative offset from the broker is
//!   a decode error, never passed on;
//! - by default the pull itself never commits: progress moves only through the offset
//!   store, whose failures reach the caller (offset pitfalls C1, C2). With
//!   [`PullConsumer::set_commit_on_pull`] a pull also carries the store's in-memory offset of
//!   the queue (sysFlag COMMIT_OFFSET, as Java's push consumer does); that commit is never
//!   acknowledged, so it only ever saves a later explicit persist some work;
//! - with [`PullConsumer::set_correct_offset_illegal`], an OFFSET_ILLEGAL answer is corrected
//!   through the offset store ([`OffsetStore::correct`], persisted at once) before `pull`
//!   returns it; a failed correction is the pull's error;
//! - server-initiated requests (RESET_CONSUMER_CLIENT_OFFSET, NOTIFY_CONSUMER_IDS_CHANGED)
//!   reach the handler set with [`PullConsumer::set_server_request_handler`]; without one
//!   they are refused as unsupported;
//! - `commit` is `update` + `persist` and returns the store's error; `read_offset` returns
//!   `Ok(None)` only when the store has no offset, `Err` when it cannot be asked (C3, C6);
//! - pulls go to the queue's master. After a transport failure of the master (not a broker
//!   error code), pulls of its broker group go to the group's first slave (lowest broker id)
//!   and the master is probed again at most every [`crate::read_failover::MASTER_RETRY`]
//!   (a failed probe falls back to the slave in the same pull); any answer from the master
//!   returns reads to it. A pull served by a slave never carries a commit (sysFlag
//!   COMMIT_OFFSET cleared, as Java does), and a slave's OFFSET_ILLEGAL is an error, never a
//!   correction: a slave may lag the master. `suggestWhichBrokerId` is not followed;
//! - commits, offset queries and heartbeats go to masters only: with the master unreachable
//!   a commit fails ([`OffsetError::Unreachable`]) and is never sent to a slave;
//! - failover: a pull or offset request whose master fails (connection) or answers
//!   NOT_MASTER fetches the route at once (rate limited, see
//!   [`RouteCache::master_failed`]); while reads go to a slave, each pull asks again, so
//!   reads move to a new master (id 0 at another address) as soon as the name servers
//!   publish it, and commits go to it (see [`BrokerOffsetStore`]);
//! - blocking pulls are bounded: the broker holds at most `hold`, the client waits
//!   `hold + pull_timeout`;
//! - the consumer heartbeats to every known master so the broker knows the group is online
//!   (a commit lower than the stored offset is then a stale commit, not an offline reset).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_protocol::java_string_hash;
use ferromq_protocol::remoting::body::encode_json;
use ferromq_protocol::remoting::body::heartbeat::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, SubscriptionData,
};
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::{
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
};
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::{RemotingCommand, SerializeType};
use ferromq_protocol::tags::{TagExpression, ALL_TAGS};

use crate::connections::ConnectionPool;
use crate::error::{ClientError, OffsetError};
use crate::message::{decode_pull_body, MessageExt};
use crate::offset_store::{BrokerOffsetStore, OffsetStore, PersistReport, ReadMode};
use crate::read_failover::{MasterState, ReadFailover};
use crate::route::RouteCache;

/// Which member of a broker group a pull goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Master,
    Slave,
}

/// Pull sysFlag bits (reference §9).
const SYSFLAG_COMMIT_OFFSET: i32 = 0x1;
const SYSFLAG_SUSPEND: i32 = 0x2;
const SYSFLAG_SUBSCRIPTION: i32 = 0x4;

/// Pull consumer settings.
#[derive(Debug, Clone)]
pub struct PullConsumerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Consumer group.
    pub group: String,
    /// Bound on a non-blocking pull and on offset requests.
    pub pull_timeout: Duration,
    /// Bound on connecting to a server.
    pub connect_timeout: Duration,
    /// A cached route older than this is refreshed before use.
    pub route_max_age: Duration,
    /// Heartbeat period (the broker forgets a silent client after 120 s by default).
    pub heartbeat_interval: Duration,
    /// ACL credentials every request is signed with (`None`: unsigned, for brokers without
    /// ACL).
    pub credentials: Option<ferromq_protocol::remoting::acl::Credentials>,
    /// TLS (`None`: plain TCP) of every connection, name servers and brokers: trusts the CA
    /// file it was built from.
    pub tls: Option<ferromq_protocol::remoting::tls::ClientTls>,
    /// Pull requests carry RocketMQ's compact binary header (serialize type `ROCKETMQ`, what
    /// Java clients send with `rocketmq.serialize.type=ROCKETMQ`) instead of JSON. Every
    /// RocketMQ broker reads both and answers in the request's type, so the pull's reply
    /// header is binary too: this saves the JSON encode and parse of both headers of every
    /// pull on both sides (the producer's `binary_header` does the same for sends).
    pub binary_header: bool,
}

impl Default for PullConsumerConfig {
    fn default() -> Self {
        PullConsumerConfig {
            namesrv_addrs: Vec::new(),
            group: String::new(),
            pull_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            credentials: None,
            tls: None,
            binary_header: true,
        }
    }
}

/// Outcome of one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullResult {
    /// Messages at and after the requested offset (tags re-checked client-side, so the list
    /// may be shorter than what the broker sent, even empty).
    Found {
        /// Messages in queue order.
        messages: Vec<MessageExt>,
        /// Offset to pull next.
        next_offset: u64,
    },
    /// No message at the requested offset yet (the queue's tail).
    NoNewMessage {
        /// Offset to pull next.
        next_offset: u64,
    },
    /// The offset is outside the queue; the broker suggests where to continue.
    OffsetIllegal {
        /// The broker's suggested next offset.
        suggested_offset: u64,
    },
    /// Messages were scanned but none matched the expression.
    NoMatchedMessage {
        /// Offset to pull next.
        next_offset: u64,
    },
}

/// Receives the server-initiated requests of a consumer's broker connections (e.g.
/// RESET_CONSUMER_CLIENT_OFFSET 220); returns true when it handled the request (a two-way
/// request is then answered SUCCESS, otherwise REQUEST_CODE_NOT_SUPPORTED). Called on a
/// tokio task, one request at a time per connection; it must not block.
pub type ServerRequestHandler = Arc<dyn Fn(&RemotingCommand) -> bool + Send + Sync>;

/// A pull consumer. Cheap to clone; clones share connections, routes and the offset store.
#[derive(Debug, Clone)]
pub struct PullConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: PullConsumerConfig,
    client_id: String,
    pool: Arc<ConnectionPool>,
    routes: Arc<RouteCache>,
    offsets: Arc<dyn OffsetStore>,
    topics: Mutex<BTreeSet<String>>,
    heartbeat_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    options: Mutex<PullOptions>,
    /// Tasks relaying server requests to the handler, one per connection.
    server_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Masters found unreachable, whose groups' pulls go to a slave for a while.
    failover: ReadFailover,
}

#[derive(Default)]
struct PullOptions {
    commit_on_pull: bool,
    correct_offset_illegal: bool,
    server_requests: Option<ServerRequestHandler>,
}

impl std::fmt::Debug for PullOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullOptions")
            .field("commit_on_pull", &self.commit_on_pull)
            .field("correct_offset_illegal", &self.correct_offset_illegal)
            .field("server_requests", &self.server_requests.is_some())
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .server_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        if let Some(task) = self
            .heartbeat_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

impl PullConsumer {
    /// Starts a consumer whose offsets live on the brokers ([`BrokerOffsetStore`]).
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group or no name server.
    pub fn start(config: PullConsumerConfig) -> Result<PullConsumer, ClientError> {
        Self::start_with(config, |group, routes, pool, timeout| {
            Arc::new(BrokerOffsetStore::new(group, routes, pool, timeout))
        })
    }

    /// Starts a consumer with the offset store `make` builds from the group, route cache,
    /// connection pool and request timeout (e.g. a [`crate::LocalFileOffsetStore`] for
    /// broadcasting, or a user store).
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group or no name server.
    pub fn start_with(
        config: PullConsumerConfig,
        make: impl FnOnce(&str, Arc<RouteCache>, Arc<ConnectionPool>, Duration) -> Arc<dyn OffsetStore>,
    ) -> Result<PullConsumer, ClientError> {
        if config.group.is_empty() {
            return Err(ClientError::Config("consumer group is empty".into()));
        }
        let pool = Arc::new(ConnectionPool::new(crate::connections::options(
            config.connect_timeout,
            config.credentials.as_ref(),
            config.tls.as_ref(),
        )));
        let routes = Arc::new(RouteCache::new(
            config.namesrv_addrs.clone(),
            pool.clone(),
            config.pull_timeout,
            config.route_max_age,
        )?);
        let offsets = make(
            &config.group,
            routes.clone(),
            pool.clone(),
            config.pull_timeout,
        );
        let client_id = crate::connections::client_id(&config.namesrv_addrs, None);
        let consumer = PullConsumer {
            inner: Arc::new(Inner {
                config,
                client_id,
                pool,
                routes,
                offsets,
                topics: Mutex::new(BTreeSet::new()),
                heartbeat_task: Mutex::new(None),
                options: Mutex::new(PullOptions::default()),
                server_tasks: Mutex::new(Vec::new()),
                failover: ReadFailover::default(),
            }),
        };
        let weak = Arc::downgrade(&consumer.inner);
        let period = consumer
            .inner
            .config
            .heartbeat_interval
            .max(Duration::from_millis(10));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let consumer = PullConsumer { inner };
                if let Err(error) = consumer.heartbeat().await {
                    tracing::warn!(%error, "consumer heartbeat failed");
                }
            }
        });
        *consumer
            .inner
            .heartbeat_task
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(task);
        Ok(consumer)
    }

    fn options(&self) -> std::sync::MutexGuard<'_, PullOptions> {
        // Every critical section is a plain read or write of the options.
        self.inner.options.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// With `on`, every pull carries the offset store's in-memory offset of its queue as a
    /// piggy-backed commit (sysFlag COMMIT_OFFSET and `commitOffset`, as Java's push consumer
    /// sends them); nothing is added when memory has no offset for the queue.
    ///
    /// # Durability
    /// The pull reply has no field for the commit's outcome, so a piggy-backed commit is
    /// never acknowledged: it may be lost or refused (a ferromq broker refuses stale ones as
    /// it refuses UPDATE_CONSUMER_OFFSET). Only [`PullConsumer::commit`] and the store's
    /// `persist` say whether progress is stored.
    pub fn set_commit_on_pull(&self, on: bool) {
        self.options().commit_on_pull = on;
    }

    /// With `on`, a pull answered OFFSET_ILLEGAL first corrects the queue's offset to the
    /// broker's suggestion through the offset store ([`OffsetStore::correct`]: in memory and
    /// persisted at once; a ferromq broker records it as a correction with a new generation
    /// when the queue's state justifies it), then returns [`PullResult::OffsetIllegal`].
    ///
    /// # Errors
    /// A pull whose correction failed returns [`ClientError::Offset`] with the store's
    /// error; the caller may pull again (the broker suggests the same offset) to retry.
    pub fn set_correct_offset_illegal(&self, on: bool) {
        self.options().correct_offset_illegal = on;
    }

    /// Routes the server-initiated requests of this consumer's broker connections to
    /// `handler` (connections opened by later heartbeats included). Only one consumer may
    /// take a connection's requests: set it before the first heartbeat.
    pub fn set_server_request_handler(&self, handler: ServerRequestHandler) {
        self.options().server_requests = Some(handler);
    }

    /// Starts relaying `addr`'s server requests to the handler, once per connection.
    async fn take_server_requests(&self, addr: SocketAddr) -> Result<(), ClientError> {
        let Some(handler) = self.options().server_requests.clone() else {
            return Ok(());
        };
        let conn = self
            .inner
            .pool
            .get(addr, self.inner.config.pull_timeout)
            .await?;
        let Some(mut requests) = conn.take_server_requests() else {
            return Ok(());
        };
        let task = tokio::spawn(async move {
            while let Some(cmd) = requests.recv().await {
                let handled = handler(&cmd);
                if !cmd.is_oneway() {
                    let code = if handled {
                        response::SUCCESS
                    } else {
                        response::REQUEST_CODE_NOT_SUPPORTED
                    };
                    if let Err(error) = conn.reply(cmd.reply(code, None)).await {
                        tracing::debug!(%error, "reply to a server request failed");
                    }
                }
            }
        });
        let mut tasks = self
            .inner
            .server_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
        Ok(())
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.config.group
    }

    /// This client's id as sent in heartbeats.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The offset store.
    pub fn offset_store(&self) -> &Arc<dyn OffsetStore> {
        &self.inner.offsets
    }

    /// The route cache.
    pub fn routes(&self) -> &Arc<RouteCache> {
        &self.inner.routes
    }

    /// The readable queues of `topic` (route refreshed when stale), and registers the topic in
    /// this consumer's heartbeat subscriptions.
    ///
    /// # Errors
    /// Route errors, or [`ClientError::NoQueue`].
    pub async fn fetch_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, ClientError> {
        let queues = self.inner.routes.read_queues(topic).await?;
        let new = self
            .inner
            .topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(topic.to_string());
        if new {
            if let Err(error) = self.heartbeat().await {
                tracing::warn!(%error, "consumer heartbeat failed");
            }
        }
        Ok(queues)
    }

    /// Sends a heartbeat naming this consumer's group and subscriptions to every known
    /// master.
    ///
    /// # Errors
    /// The first broker that did not accept it (the others are still tried).
    pub async fn heartbeat(&self) -> Result<(), ClientError> {
        let subscriptions = self
            .inner
            .topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|topic| SubscriptionData {
                topic: topic.clone(),
                sub_string: ALL_TAGS.into(),
                expression_type: Some("TAG".into()),
                ..SubscriptionData::default()
            })
            .collect();
        let data = HeartbeatData {
            client_id: self.inner.client_id.clone(),
            producer_data_set: Vec::new(),
            consumer_data_set: vec![ConsumerData {
                group_name: self.inner.config.group.clone(),
                consume_type: ConsumeType::ConsumeActively,
                message_model: MessageModel::Clustering,
                consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                subscription_data_set: subscriptions,
                unit_mode: false,
            }],
            heartbeat_fingerprint: None,
            without_sub: None,
        };
        let body = encode_json(&data);
        let mut first_error = None;
        for addr in self.inner.routes.known_masters() {
            if let Err(error) = self.take_server_requests(addr).await {
                first_error.get_or_insert(error);
                continue;
            }
            let cmd = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
                .with_body(body.clone());
            let result = self
                .inner
                .pool
                .invoke(addr, cmd, self.inner.config.pull_timeout)
                .await
                .and_then(|reply| match reply.code {
                    response::SUCCESS => Ok(()),
                    code => Err(ClientError::Broker {
                        addr,
                        code,
                        remark: reply.remark.unwrap_or_default(),
                    }),
                });
            if let Err(error) = result {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Pulls up to `max` messages of `queue` from `offset` matching the tag `expression`;
    /// answers at once when there is nothing.
    ///
    /// # Errors
    /// Route and transport errors, [`ClientError::Broker`] for codes other than 0/19/20/21,
    /// [`ClientError::Decode`] for a malformed reply.
    pub async fn pull(
        &self,
        queue: &MessageQueue,
        expression: &str,
        offset: u64,
        max: u32,
    ) -> Result<PullResult, ClientError> {
        let result = self.pull_inner(queue, expression, offset, max, None).await;
        self.after_pull(queue, result).await
    }

    /// As [`PullConsumer::pull`], but the broker holds the request up to `hold` (long
    /// polling) when there is no message at `offset` yet.
    ///
    /// # Errors
    /// As [`PullConsumer::pull`].
    pub async fn pull_blocking(
        &self,
        queue: &MessageQueue,
        expression: &str,
        offset: u64,
        max: u32,
        hold: Duration,
    ) -> Result<PullResult, ClientError> {
        let result = self
            .pull_inner(queue, expression, offset, max, Some(hold))
            .await;
        self.after_pull(queue, result).await
    }

    /// Applies [`PullConsumer::set_correct_offset_illegal`] to a pull's result.
    async fn after_pull(
        &self,
        queue: &MessageQueue,
        result: Result<PullResult, ClientError>,
    ) -> Result<PullResult, ClientError> {
        let Ok(PullResult::OffsetIllegal { suggested_offset }) = result else {
            return result;
        };
        if !self.options().correct_offset_illegal {
            return result;
        }
        tracing::warn!(group = %self.inner.config.group, ?queue, suggested_offset,
            "OFFSET_ILLEGAL; correcting the stored offset to the broker's suggestion");
        self.inner.offsets.correct(queue, suggested_offset).await?;
        result
    }

    /// Picks the pull's target (see the module invariants) and pulls.
    async fn pull_inner(
        &self,
        queue: &MessageQueue,
        expression: &str,
        offset: u64,
        max: u32,
        hold: Option<Duration>,
    ) -> Result<PullResult, ClientError> {
        let routes = &self.inner.routes;
        let failover = &self.inner.failover;
        let broker = queue.broker_name.as_str();
        let master = routes.master_addr(&queue.topic, broker).await;
        let replicas = routes.known_replicas(broker);
        let slave = replicas
            .as_ref()
            .and_then(|r| r.first_slave())
            .map(|(_, addr)| addr);
        let state = failover.state(broker, replicas.and_then(|r| r.master));
        if let Ok(addr) = master {
            if state != MasterState::Down || slave.is_none() {
                let result = self
                    .pull_from(addr, Target::Master, queue, expression, offset, max, hold)
                    .await;
                if let Err(error) = &result {
                    if error.signals_master_change() {
                        // Failover: ask the name servers now, not at the next timer refresh.
                        routes.master_failed(&queue.topic, broker, addr).await;
                    }
                }
                match result {
                    Err(error) if error.is_transport() => {
                        failover.master_failed(broker, addr);
                        // A failed probe of a master already known down reads on from the
                        // slave rather than failing once a second; a first failure is this
                        // pull's error and the next pull goes to the slave.
                        if state != MasterState::Probe || slave.is_none() {
                            return Err(error);
                        }
                    }
                    other => {
                        failover.master_answered(broker);
                        return other;
                    }
                }
            }
        }
        if let (Ok(failed), MasterState::Down) = (&master, state) {
            // Reading from a slave: ask the name servers (rate limited) whether a failover
            // gave the group a new master, and read from it as soon as one is named.
            if let Some(new_master) = routes.master_failed(&queue.topic, broker, *failed).await {
                return self
                    .pull_from(
                        new_master,
                        Target::Master,
                        queue,
                        expression,
                        offset,
                        max,
                        hold,
                    )
                    .await;
            }
        }
        let failed_master = master.as_ref().ok().copied();
        match (slave, master) {
            (Some(addr), _) => {
                tracing::debug!(?queue, slave = %addr, "pulling from a slave: master unreachable");
                let result = self
                    .pull_from(addr, Target::Slave, queue, expression, offset, max, hold)
                    .await;
                if let (Ok(PullResult::Found { .. }), Some(failed)) = (&result, failed_master) {
                    // Data from the slave: if a failover made a new master meanwhile (perhaps
                    // this very broker), the route's master generation moves now, so a
                    // consumer can tell the answer came after the switch.
                    routes.confirm_master(&queue.topic, broker, failed).await;
                }
                result
            }
            (None, Err(error)) => Err(error),
            (None, Ok(addr)) => Err(ClientError::NoBrokerAddress {
                broker_name: format!("{broker} (master {addr} unreachable, no slave)"),
            }),
        }
    }

    /// One pull from `addr`. A slave's pull carries no commit and its OFFSET_ILLEGAL is an
    /// error.
    #[allow(clippy::too_many_arguments)]
    async fn pull_from(
        &self,
        addr: SocketAddr,
        target: Target,
        queue: &MessageQueue,
        expression: &str,
        offset: u64,
        max: u32,
        hold: Option<Duration>,
    ) -> Result<PullResult, ClientError> {
        let wire_offset = i64::try_from(offset)
            .map_err(|_| ClientError::InvalidMessage(format!("offset {offset} exceeds i64")))?;
        let subscription = TagExpression::subscription_text(expression);
        let expression = TagExpression::parse_subscription(expression);
        let commit_offset = if target == Target::Master && self.options().commit_on_pull {
            self.inner
                .offsets
                .read(queue, ReadMode::Memory)
                .await
                .ok()
                .flatten()
                .and_then(|o| i64::try_from(o).ok())
        } else {
            None
        };
        let (sys_flag, suspend_ms, timeout) = match hold {
            Some(hold) => (
                SYSFLAG_SUBSCRIPTION | SYSFLAG_SUSPEND,
                hold.as_millis().min(i64::MAX as u128) as i64,
                hold + self.inner.config.pull_timeout,
            ),
            None => (SYSFLAG_SUBSCRIPTION, 0, self.inner.config.pull_timeout),
        };
        let header = PullMessageRequestHeader {
            consumer_group: self.inner.config.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: wire_offset,
            max_msg_nums: max.clamp(1, i32::MAX as u32) as i32,
            sys_flag: if commit_offset.is_some() {
                sys_flag | SYSFLAG_COMMIT_OFFSET
            } else {
                sys_flag
            },
            commit_offset: commit_offset.unwrap_or(0),
            suspend_timeout_millis: suspend_ms,
            subscription: Some(subscription),
            sub_version: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            expression_type: Some("TAG".into()),
            ..PullMessageRequestHeader::default()
        };
        let mut cmd = RemotingCommand::request_with_owned_header(request::PULL_MESSAGE, header);
        if self.inner.config.binary_header {
            cmd.serialize_type = SerializeType::RocketMq;
        }
        let reply = self.inner.pool.invoke(addr, cmd, timeout).await?;
        let code = reply.code;
        if target == Target::Slave && code == response::PULL_OFFSET_MOVED {
            return Err(ClientError::Broker {
                addr,
                code,
                remark: format!(
                    "slave answered OFFSET_ILLEGAL for {queue:?} at {offset}; not followed (a \
                     slave may lag its master): {}",
                    reply.remark.unwrap_or_default()
                ),
            });
        }
        if !matches!(
            code,
            response::SUCCESS
                | response::PULL_NOT_FOUND
                | response::PULL_RETRY_IMMEDIATELY
                | response::PULL_OFFSET_MOVED
        ) {
            return Err(ClientError::Broker {
                addr,
                code,
                remark: reply.remark.unwrap_or_default(),
            });
        }
        let decode = |reason: String| ClientError::Decode { addr, reason };
        let h: PullMessageResponseHeader =
            reply.decode_header().map_err(|e| decode(e.to_string()))?;
        let next = u64::try_from(h.next_begin_offset).map_err(|_| {
            decode(format!(
                "negative nextBeginOffset {} for {queue:?}",
                h.next_begin_offset
            ))
        })?;
        Ok(match code {
            response::SUCCESS => {
                let mut messages = decode_pull_body(
                    reply.body.as_ref().unwrap_or(&bytes::Bytes::new()),
                    &queue.broker_name,
                )
                .map_err(decode)?;
                // A `*` subscription keeps every message: no pass over them.
                if !expression.is_all() {
                    messages.retain(|m| expression.matches_tag(m.tags.as_deref()));
                }
                PullResult::Found {
                    messages,
                    next_offset: next,
                }
            }
            response::PULL_NOT_FOUND => PullResult::NoNewMessage { next_offset: next },
            response::PULL_RETRY_IMMEDIATELY => PullResult::NoMatchedMessage { next_offset: next },
            _ => PullResult::OffsetIllegal {
                suggested_offset: next,
            },
        })
    }

    /// The next offset to be written in `queue` (its max, exclusive).
    ///
    /// # Errors
    /// Route and transport errors, or the broker's failure code.
    pub async fn max_offset(&self, queue: &MessageQueue) -> Result<u64, ClientError> {
        let header = GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            committed: Some(true),
        };
        let (addr, reply) = self
            .offset_request(
                queue,
                RemotingCommand::request_with_header(request::GET_MAX_OFFSET, &header),
            )
            .await?;
        let h: GetMaxOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
        ClientError::non_negative_offset(addr, h.offset)
    }

    /// The smallest offset still stored in `queue`.
    ///
    /// # Errors
    /// Route and transport errors, or the broker's failure code.
    pub async fn min_offset(&self, queue: &MessageQueue) -> Result<u64, ClientError> {
        let header = GetMinOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        };
        let (addr, reply) = self
            .offset_request(
                queue,
                RemotingCommand::request_with_header(request::GET_MIN_OFFSET, &header),
            )
            .await?;
        let h: GetMinOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
        ClientError::non_negative_offset(addr, h.offset)
    }

    async fn offset_request(
        &self,
        queue: &MessageQueue,
        cmd: RemotingCommand,
    ) -> Result<(SocketAddr, RemotingCommand), ClientError> {
        let routes = &self.inner.routes;
        let addr = routes.master_addr(&queue.topic, &queue.broker_name).await?;
        let timeout = self.inner.config.pull_timeout;
        match self
            .inner
            .pool
            .invoke_success(addr, cmd.clone(), timeout)
            .await
        {
            Ok(reply) => Ok((addr, reply)),
            Err(error) if error.signals_master_change() => {
                // Failover: once more on the new master, if the refreshed route names one.
                let Some(next) = routes
                    .master_failed(&queue.topic, &queue.broker_name, addr)
                    .await
                else {
                    return Err(error);
                };
                let reply = self.inner.pool.invoke_success(next, cmd, timeout).await?;
                Ok((next, reply))
            }
            Err(error) => Err(error),
        }
    }

    /// Records `offset` (the next offset to consume) for `queue` and persists it, waiting for
    /// the store's acknowledgement.
    ///
    /// A commit refused as of a stale generation is sent once more after a heartbeat: on a
    /// queue fenced by a reset, ferromq refuses commits from a connection whose client it does
    /// not know yet (a new connection after a failover or a reconnect, before the next
    /// periodic heartbeat), with that code. A commit that really is stale is refused again.
    ///
    /// # Errors
    /// The store's [`OffsetError`]; the value stays in memory for a later `persist`.
    pub async fn commit(&self, queue: &MessageQueue, offset: u64) -> Result<(), OffsetError> {
        // An explicit commit is always sent, even when it repeats the last acknowledged
        // value: the broker's offset may have moved since (a reset), and `Ok` must mean the
        // broker holds `offset` now.
        self.inner.offsets.remove(queue);
        self.inner.offsets.update(queue, offset);
        let result = self.inner.offsets.persist(queue).await;
        if !result.as_ref().is_err_and(OffsetError::is_unidentified) {
            return result;
        }
        if let Err(error) = self.heartbeat().await {
            tracing::debug!(%error, "heartbeat before a commit retry failed");
            return result;
        }
        self.inner.offsets.remove(queue);
        self.inner.offsets.update(queue, offset);
        self.inner.offsets.persist(queue).await
    }

    /// The offset to resume `queue` from: memory first, then the store. `Ok(None)` means the
    /// group has no offset for the queue; the caller decides where to start.
    ///
    /// # Errors
    /// The store could not be asked.
    pub async fn read_offset(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        self.inner
            .offsets
            .read(queue, ReadMode::MemoryFirstThenStore)
            .await
    }

    /// Persists every offset, stops the heartbeat and closes connections.
    ///
    /// # Errors
    /// The store's `persist_all` error; per-queue failures are listed in the report.
    pub async fn shutdown(&self) -> Result<PersistReport, OffsetError> {
        let report = self.inner.offsets.persist_all().await;
        if let Some(task) = self
            .inner
            .heartbeat_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
        self.inner.pool.close_all();
        report
    }
}

/// Java hash of a tag, as brokers store it in the ConsumeQueue (exposed for filters).
pub fn tag_hash(tag: &str) -> i64 {
    i64::from(java_string_hash(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions() {
        let all = TagExpression::parse_subscription(" * ");
        assert!(all.matches_tag(None) && all.matches_tag(Some("x")));
        let some = TagExpression::parse_subscription("a || b");
        assert_eq!(some.tags(), ["a", "b"]);
        assert!(some.matches_tag(Some("b")));
        assert!(!some.matches_tag(Some("c")));
        assert!(!some.matches_tag(None));
    }
}
