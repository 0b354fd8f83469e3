//! [`Producer`]: sends messages to the brokers that master a topic's writable queues.
//!
//! Invariants:
//! - a message is validated and its body size checked before any network traffic; an
//!   oversized body is [`ClientError::BodyTooLarge`] and contacts nobody;
//! - `send` and `send_batch` return `Ok` only after the broker answered SUCCESS (which a
//!   ferromq broker sends only once the message is durable under its policy);
//! - retries are bounded by `retries_max` (so at most `retries_max + 1` attempts), happen only
//!   for retriable errors, and with round-robin selection prefer a queue on a broker that has
//!   not failed in this send; a retry after a timeout may duplicate the message
//!   (at-least-once), and the result reports how many attempts were made;
//! - every message carries a fresh `UNIQ_KEY` (the same one across retries of one send, so a
//!   duplicate is recognisable);
//! - every wait is bounded by `send_timeout` per attempt;
//! - a topic the name server does not know is sent through the brokers of the auto-create
//!   template (`TBW102`) with `defaultTopic`/`defaultTopicQueueNums` set, as Java does, so a
//!   broker with `autoCreateTopicEnable` creates it; with neither route the send fails with
//!   [`ClientError::NoRoute`] naming both;
//! - a single message whose body is larger than `compress_over_bytes` is sent zlib-compressed
//!   with sysFlag `COMPRESSED | ZLIB` (batches never are, as in RocketMQ); the size limit
//!   applies to the body the caller gave;
//! - at most `async_sends_max` sends started by [`Producer::send_async`] and
//!   [`Producer::send_with_callback`] are outstanding at once; past that, those calls wait
//!   (backpressure) and fail with [`ClientError::AsyncSendsFull`] after `send_timeout`;
//! - the producer heartbeats each broker the first time it sends to it and every known broker
//!   each `heartbeat_interval`; [`Producer::close`] unregisters it from every broker it
//!   registered with. Routes of topics in use are refreshed every
//!   `poll_name_server_interval` in the background.

mod registration;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ferromq_protocol::java_string_hash;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand, SerializeType};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::compression;
use crate::connections::{self, ConnectionPool};
use crate::error::ClientError;
use crate::message::{encode_batch, new_uniq_key, Message};
use crate::route::{RouteCache, TopicRoute};

use registration::Registration;

/// Topic Java producers name as the template of auto-created topics.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Producer group.
    pub group: String,
    /// Instance name in the client id (`<ip>@<instance name>`); `None` for `<pid>#<nanos>`,
    /// which differs between producers of one process.
    pub instance_name: Option<String>,
    /// Bound on one send attempt (connect included).
    pub send_timeout: Duration,
    /// Extra attempts after a retriable failure (RocketMQ's `retryTimesWhenSendFailed`, 2).
    pub retries_max: u32,
    /// Largest body (or encoded batch) accepted (RocketMQ's `maxMessageSize`, 4 MiB).
    pub max_body_bytes: usize,
    /// Bound on connecting to a server.
    pub connect_timeout: Duration,
    /// A cached route older than this is refreshed before use.
    pub route_max_age: Duration,
    /// Interval of the background refresh of the routes in use (Java's
    /// `pollNameServerInterval`, 30 s).
    pub poll_name_server_interval: Duration,
    /// Interval of heartbeats to every known broker (Java's `heartbeatBrokerInterval`, 30 s).
    pub heartbeat_interval: Duration,
    /// Template topic whose brokers auto-create unknown topics (Java's `createTopicKey`).
    pub create_topic_key: String,
    /// Queues the broker creates for a topic auto-created by a send.
    pub default_topic_queue_nums: i32,
    /// Single-message bodies larger than this are zlib-compressed (Java's
    /// `compressMsgBodyOverHowmuch`, 4 KiB). `usize::MAX` disables compression.
    pub compress_over_bytes: usize,
    /// zlib level, 0–9 (Java's `compressLevel`, 5).
    pub compress_level: u32,
    /// Bound on outstanding [`Producer::send_async`] / [`Producer::send_with_callback`]
    /// sends (Java's `backPressureForAsyncSendNum`, 10000).
    pub async_sends_max: usize,
    /// Send requests carry RocketMQ's compact binary header (serialize type `ROCKETMQ`, what
    /// Java clients send with `rocketmq.serialize.type=ROCKETMQ`) instead of JSON. Every
    /// RocketMQ broker reads both and answers in the request's type; the binary form saves
    /// the JSON encode and parse of the send header and its reply on both sides. A header the
    /// binary form cannot carry exactly (an empty value) goes as JSON.
    pub binary_header: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            namesrv_addrs: Vec::new(),
            group: "DEFAULT_PRODUCER".into(),
            instance_name: None,
            send_timeout: Duration::from_secs(3),
            retries_max: 2,
            max_body_bytes: 4 * 1024 * 1024,
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            poll_name_server_interval: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            create_topic_key: AUTO_CREATE_TOPIC_KEY.into(),
            default_topic_queue_nums: 4,
            compress_over_bytes: compression::COMPRESS_OVER_BYTES_DEFAULT,
            compress_level: compression::COMPRESS_LEVEL_DEFAULT,
            async_sends_max: 10_000,
            binary_header: true,
        }
    }
}

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
}

/// Chooses a queue for a message among the topic's writable queues.
pub trait QueueSelector: Send + Sync + std::fmt::Debug {
    /// Index into `queues` (taken modulo its length). `queues` is never empty.
    fn select(&self, queues: &[MessageQueue], message: &Message) -> usize;
}

/// How a send picks its queue.
#[derive(Debug, Clone, Default)]
pub enum QueueSelection {
    /// Round robin over writable queues; a retry moves to a queue on another broker.
    #[default]
    RoundRobin,
    /// `|java_hash(key)| mod queue count`: the same key always lands on the same queue while
    /// the route is unchanged. Retries stay on that queue.
    HashKey(String),
    /// A user selector. Retries stay on the queue it picks.
    Custom(Arc<dyn QueueSelector>),
}

/// A producer. Cheap to clone; clones share connections, routes and background tasks.
///
/// Start it within a tokio runtime: it runs a heartbeat task and a route refresh task there,
/// which end when the last clone is dropped or [`Producer::shutdown`] is called.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    client_id: String,
    pool: Arc<ConnectionPool>,
    routes: Arc<RouteCache>,
    next_queue: AtomicUsize,
    registration: Registration,
    heartbeat_body: Bytes,
    async_sends: Arc<Semaphore>,
    closed: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

/// A send prepared once and sent as is by every attempt: body encoded (compressed or
/// batched), properties encoded.
struct Prepared {
    topic: String,
    code: i32,
    body: Bytes,
    sys_flag: i32,
    flag: i32,
    properties: Option<String>,
    batch: bool,
    delay: bool,
}

struct Sent {
    header: SendMessageResponseHeader,
    queue: MessageQueue,
}

/// The outcome of [`Producer::send_async`]: a future that resolves when the send finishes.
/// The send runs on its own task whether or not this is polled.
///
/// # Cancel safety
/// Dropping it does not cancel the send; only its result is lost.
#[derive(Debug)]
pub struct SendHandle {
    task: JoinHandle<Result<SendResult, ClientError>>,
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

impl Producer {
    /// Checks the configuration, prepares connections (none is opened until a send) and
    /// starts the heartbeat and route refresh tasks.
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group, no name server, a zero timeout, interval
    /// or bound, or when called outside a tokio runtime.
    pub fn start(config: ProducerConfig) -> Result<Producer, ClientError> {
        if config.group.is_empty() {
            return Err(ClientError::Config("producer group is empty".into()));
        }
        if config.send_timeout.is_zero() || config.max_body_bytes == 0 {
            return Err(ClientError::Config(
                "send_timeout and max_body_bytes must be positive".into(),
            ));
        }
        if config.heartbeat_interval.is_zero()
            || config.poll_name_server_interval.is_zero()
            || config.async_sends_max == 0
        {
            return Err(ClientError::Config(
                "heartbeat_interval, poll_name_server_interval and async_sends_max must be positive"
                    .into(),
            ));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ClientError::Config(
                "Producer::start must be called within a tokio runtime".into(),
            ));
        }
        let pool = Arc::new(ConnectionPool::new(ClientOptions {
            connect_timeout: config.connect_timeout,
            ..ClientOptions::default()
        }));
        let routes = Arc::new(RouteCache::new(
            config.namesrv_addrs.clone(),
            pool.clone(),
            config.send_timeout,
            config.route_max_age,
        )?);
        let client_id =
            connections::client_id(&config.namesrv_addrs, config.instance_name.as_deref());
        let producer = Producer {
            inner: Arc::new(Inner {
                heartbeat_body: registration::heartbeat_body(&client_id, &config.group),
                async_sends: Arc::new(Semaphore::new(config.async_sends_max)),
                client_id,
                pool,
                routes: routes.clone(),
                next_queue: AtomicUsize::new(0),
                registration: Registration::default(),
                closed: AtomicBool::new(false),
                tasks: Mutex::new(Vec::new()),
                config,
            }),
        };
        let refresher = routes.spawn_refresher(producer.inner.config.poll_name_server_interval);
        let heartbeats = producer.spawn_heartbeats();
        producer.tasks().extend([refresher, heartbeats]);
        Ok(producer)
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn_heartbeats(&self) -> JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let period = self.inner.config.heartbeat_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if let Err(error) = (Producer { inner }).heartbeat().await {
                    tracing::warn!(%error, "producer heartbeat failed; retrying next interval");
                }
            }
        })
    }

    /// This producer's client id, `<ip>@<instance>`, where `ip` is the local address that
    /// reaches the name server.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The route cache (shared with anything built from this producer).
    pub fn routes(&self) -> &Arc<RouteCache> {
        &self.inner.routes
    }

    /// Counters of heartbeats, route refreshes and outstanding asynchronous sends.
    pub fn stats(&self) -> ProducerStats {
        let routes = self.inner.routes.stats();
        let r = &self.inner.registration;
        ProducerStats {
            heartbeats_ok: r.heartbeats_ok.load(Ordering::Relaxed),
            heartbeat_failures: r.heartbeat_failures.load(Ordering::Relaxed),
            route_refreshes_ok: routes.refreshes_ok,
            route_refresh_failures: routes.refresh_failures,
            async_sends_outstanding: self.inner.config.async_sends_max
                - self.inner.async_sends.available_permits(),
        }
    }

    /// Sends a heartbeat naming this producer's group to every broker known from the routes.
    ///
    /// # Errors
    /// The first broker's failure (every broker is still tried).
    pub async fn heartbeat(&self) -> Result<(), ClientError> {
        let mut first_error = None;
        for addr in self.inner.routes.known_masters() {
            self.inner.registration.first_contact(addr);
            let outcome = self.heartbeat_one(addr).await;
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn heartbeat_one(&self, addr: SocketAddr) -> Result<(), ClientError> {
        let outcome = registration::heartbeat(
            &self.inner.pool,
            addr,
            self.inner.heartbeat_body.clone(),
            self.inner.config.send_timeout,
        )
        .await;
        self.inner.registration.count(&outcome);
        outcome
    }

    /// Registers with `addr` in the background the first time this producer sends to it.
    fn register_on_first_contact(&self, addr: SocketAddr) {
        if !self.inner.registration.first_contact(addr) {
            return;
        }
        let producer = self.clone();
        tokio::spawn(async move {
            if let Err(error) = producer.heartbeat_one(addr).await {
                tracing::warn!(broker = %addr, %error, "first producer heartbeat failed; retrying next interval");
            }
        });
    }

    /// Sends `message` to a round-robin queue and waits for the broker's answer.
    ///
    /// # Durability
    /// `Ok` means the broker acknowledged the message, which a ferromq broker does only once
    /// it is durable under its flush and replication policy.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the send: the message may or may not have been stored.
    /// Use [`Producer::send_async`] for a send that finishes on its own.
    ///
    /// # Errors
    /// [`ClientError::InvalidMessage`] / [`ClientError::BodyTooLarge`] before any traffic;
    /// a non-retriable broker answer at once; [`ClientError::RetriesExhausted`] when every
    /// attempt failed; [`ClientError::Shutdown`] after [`Producer::shutdown`].
    pub async fn send(&self, message: Message) -> Result<SendResult, ClientError> {
        self.send_with(message, &QueueSelection::RoundRobin).await
    }

    /// Sends `message` to the queue `selection` picks.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_with(
        &self,
        message: Message,
        selection: &QueueSelection,
    ) -> Result<SendResult, ClientError> {
        self.check(&message)?;
        let uniq = new_uniq_key();
        let prepared = self.prepare_single(&message, &uniq);
        let (sent, attempts) = self.send_retrying(&prepared, selection, &message).await?;
        Ok(SendResult {
            msg_id: uniq,
            offset_msg_id: sent.header.msg_id,
            queue: sent.queue,
            queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
    }

    /// Starts sending `message` (round robin) on a task of its own and returns a handle that
    /// resolves to the result. Waits for a slot when `async_sends_max` sends are outstanding.
    ///
    /// # Errors
    /// Validation errors at once; [`ClientError::AsyncSendsFull`] when no slot frees up within
    /// `send_timeout`. Errors of the send itself come from the handle.
    pub async fn send_async(&self, message: Message) -> Result<SendHandle, ClientError> {
        let permit = self.async_slot(&message).await?;
        let producer = self.clone();
        let task = tokio::spawn(async move {
            let result = producer.send(message).await;
            drop(permit);
            result
        });
        Ok(SendHandle { task })
    }

    /// Starts sending `message` (round robin) on a task of its own and calls `callback` with
    /// the result when it finishes (Java's `send(msg, SendCallback)`). Waits for a slot when
    /// `async_sends_max` sends are outstanding, which bounds the memory held by sends in
    /// flight.
    ///
    /// `callback` runs on a runtime worker: it should return quickly.
    ///
    /// # Errors
    /// Validation errors at once (the callback is not called); [`ClientError::AsyncSendsFull`]
    /// when no slot frees up within `send_timeout`. Every other outcome goes to `callback`.
    pub async fn send_with_callback<F>(
        &self,
        message: Message,
        callback: F,
    ) -> Result<(), ClientError>
    where
        F: FnOnce(Result<SendResult, ClientError>) + Send + 'static,
    {
        let permit = self.async_slot(&message).await?;
        let producer = self.clone();
        tokio::spawn(async move {
            let result = producer.send(message).await;
            // Free the slot before the callback, so a callback that sends again finds one.
            drop(permit);
            callback(result);
        });
        Ok(())
    }

    async fn async_slot(&self, message: &Message) -> Result<OwnedSemaphorePermit, ClientError> {
        self.check(message)?;
        let wait = self.inner.config.send_timeout;
        match tokio::time::timeout(wait, self.inner.async_sends.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::AsyncSendsFull {
                max: self.inner.config.async_sends_max,
                waited: wait,
            }),
        }
    }

    /// Sends `message` to exactly `queue`, retrying on that queue only.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_to_queue(
        &self,
        message: Message,
        queue: &MessageQueue,
    ) -> Result<SendResult, ClientError> {
        #[derive(Debug)]
        struct Fixed(MessageQueue);
        impl QueueSelector for Fixed {
            fn select(&self, queues: &[MessageQueue], _: &Message) -> usize {
                queues.iter().position(|q| *q == self.0).unwrap_or(0)
            }
        }
        if message.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "message topic {} differs from the queue's topic {}",
                message.topic, queue.topic
            )));
        }
        let selection = QueueSelection::Custom(Arc::new(Fixed(queue.clone())));
        self.send_with(message, &selection).await
    }

    /// Sends `message` one-way to a round-robin queue: returns once the request is queued for
    /// writing, without any answer from the broker and without retries.
    ///
    /// # Errors
    /// Validation errors, route errors, and [`ClientError::Transport`] when the request could
    /// not be queued.
    pub async fn send_oneway(&self, message: Message) -> Result<(), ClientError> {
        self.check(&message)?;
        let prepared = self.prepare_single(&message, &new_uniq_key());
        let route = self.publish_route(&message.topic).await?;
        let index =
            self.inner.next_queue.fetch_add(1, Ordering::Relaxed) % route.write_queues.len();
        let queue = &route.write_queues[index];
        let addr = self
            .inner
            .routes
            .master_addr(&message.topic, &queue.broker_name)
            .await?;
        self.register_on_first_contact(addr);
        let cmd = self.command(&prepared, queue);
        self.inner
            .pool
            .invoke_oneway(addr, cmd, self.inner.config.send_timeout)
            .await
    }

    /// Sends `messages` as one SEND_BATCH_MESSAGE to one round-robin queue; they get
    /// consecutive queue offsets. All must share a topic; delay levels are not allowed.
    /// Batch bodies are never compressed (as in RocketMQ).
    ///
    /// # Errors
    /// [`ClientError::InvalidMessage`] for an empty batch, mixed topics or a delay level;
    /// [`ClientError::BodyTooLarge`] when the encoded batch exceeds `max_body_bytes`; else
    /// as [`Producer::send`].
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<BatchSendResult, ClientError> {
        let Some(first) = messages.first() else {
            return Err(ClientError::InvalidMessage("empty batch".into()));
        };
        let topic = first.topic.clone();
        for (i, m) in messages.iter().enumerate() {
            m.validate()
                .map_err(|e| ClientError::InvalidMessage(format!("batch message {i}: {e}")))?;
            if m.topic != topic {
                return Err(ClientError::InvalidMessage(format!(
                    "batch message {i} has topic {}, the batch's is {topic}",
                    m.topic
                )));
            }
            if m.delay_level.is_some() {
                return Err(ClientError::InvalidMessage(format!(
                    "batch message {i} has a delay level; batches cannot be delayed"
                )));
            }
        }
        let ids: Vec<String> = messages.iter().map(|_| new_uniq_key()).collect();
        let entries: Vec<(&Message, String)> = messages
            .iter()
            .zip(&ids)
            .map(|(m, id)| (m, m.encode_properties(id)))
            .collect();
        let body = encode_batch(&entries).map_err(ClientError::InvalidMessage)?;
        // Size check before any traffic.
        if body.len() > self.inner.config.max_body_bytes {
            return Err(ClientError::BodyTooLarge {
                size: body.len(),
                max: self.inner.config.max_body_bytes,
            });
        }
        let prepared = Prepared {
            topic,
            code: request::SEND_BATCH_MESSAGE,
            body: Bytes::from(body),
            sys_flag: 0,
            flag: 0,
            properties: None,
            batch: true,
            delay: false,
        };
        let (sent, attempts) = self
            .send_retrying(&prepared, &QueueSelection::RoundRobin, &messages[0])
            .await?;
        let offset_msg_ids: Vec<String> =
            sent.header.msg_id.split(',').map(str::to_string).collect();
        Ok(BatchSendResult {
            msg_ids: ids,
            offset_msg_ids,
            queue: sent.queue,
            first_queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
    }

    /// Unregisters this producer from every broker it registered with (UNREGISTER_CLIENT),
    /// then [`Producer::shutdown`]s it. The producer is shut down whatever the outcome.
    ///
    /// # Errors
    /// The first broker that could not be told (every broker is still tried). Brokers also
    /// drop a producer whose connection closed, so a failure here only delays that.
    pub async fn close(&self) -> Result<(), ClientError> {
        self.inner.closed.store(true, Ordering::Release);
        self.stop_tasks();
        let mut first_error = None;
        for addr in self.inner.registration.brokers() {
            let outcome = registration::unregister(
                &self.inner.pool,
                addr,
                &self.inner.client_id,
                &self.inner.config.group,
                self.inner.config.send_timeout,
            )
            .await;
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
        }
        self.shutdown();
        first_error.map_or(Ok(()), Err)
    }

    /// Stops the background tasks and closes every connection, without unregistering (see
    /// [`Producer::close`]). Sends in progress fail with a transport error; later sends fail
    /// with [`ClientError::Shutdown`].
    pub fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.stop_tasks();
        self.inner.async_sends.close();
        self.inner.pool.close_all();
    }

    fn stop_tasks(&self) {
        for task in self.tasks().drain(..) {
            task.abort();
        }
    }

    fn check(&self, message: &Message) -> Result<(), ClientError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Shutdown);
        }
        message.validate().map_err(ClientError::InvalidMessage)?;
        if message.body.is_empty() {
            return Err(ClientError::InvalidMessage("message body is empty".into()));
        }
        if message.body.len() > self.inner.config.max_body_bytes {
            return Err(ClientError::BodyTooLarge {
                size: message.body.len(),
                max: self.inner.config.max_body_bytes,
            });
        }
        Ok(())
    }

    /// Encodes a single message once: properties with `uniq` as `UNIQ_KEY`, and the body
    /// compressed when it is over the threshold and compression makes it smaller.
    fn prepare_single(&self, message: &Message, uniq: &str) -> Prepared {
        let config = &self.inner.config;
        let (body, sys_flag) = match message.body.len() > config.compress_over_bytes {
            true => match compression::compress(&message.body, config.compress_level) {
                Some(packed) => (
                    Bytes::from(packed),
                    compression::COMPRESSED_FLAG | compression::COMPRESSION_ZLIB,
                ),
                None => (message.body.clone(), 0),
            },
            false => (message.body.clone(), 0),
        };
        Prepared {
            topic: message.topic.clone(),
            code: request::SEND_MESSAGE_V2,
            body,
            sys_flag,
            flag: message.flag,
            properties: Some(message.encode_properties(uniq)),
            batch: false,
            delay: message.delay_level.is_some(),
        }
    }

    /// The route sends to `topic` use: the published one, or one derived from the
    /// auto-create template.
    async fn publish_route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        let config = &self.inner.config;
        let route = self
            .inner
            .routes
            .publish_route(
                topic,
                &config.create_topic_key,
                config.default_topic_queue_nums,
            )
            .await?;
        if route.write_queues.is_empty() {
            return Err(ClientError::NoQueue {
                topic: topic.to_string(),
                kind: "writable",
            });
        }
        Ok(route)
    }

    async fn send_retrying(
        &self,
        prepared: &Prepared,
        selection: &QueueSelection,
        first: &Message,
    ) -> Result<(Sent, u32), ClientError> {
        let topic = prepared.topic.as_str();
        let attempts_max = self.inner.config.retries_max.saturating_add(1);
        let start = self.inner.next_queue.fetch_add(1, Ordering::Relaxed);
        let mut failed_brokers: Vec<String> = Vec::new();
        let mut last_error = None;
        for attempt in 0..attempts_max {
            let result = async {
                let route = self.publish_route(topic).await.map_err(|e| (e, None))?;
                let index = pick(
                    &route.write_queues,
                    selection,
                    first,
                    start.wrapping_add(attempt as usize),
                    &failed_brokers,
                );
                self.send_once(prepared, &route.write_queues[index], &route)
                    .await
            }
            .await;
            match result {
                Ok(sent) => return Ok((sent, attempt + 1)),
                Err((error, broker)) if error.is_retriable() && attempt + 1 < attempts_max => {
                    tracing::warn!(%topic, attempt = attempt + 1, %error, "send failed; retrying");
                    if let Some(broker) = broker {
                        failed_brokers.push(broker);
                    }
                    self.inner.routes.invalidate(topic);
                    last_error = Some(error);
                }
                Err((error, _)) if error.is_retriable() => {
                    last_error = Some(error);
                }
                Err((error, _)) => return Err(error),
            }
        }
        Err(ClientError::RetriesExhausted {
            attempts: attempts_max,
            last: Box::new(
                last_error
                    .unwrap_or_else(|| ClientError::Config("retries_max allows no attempt".into())),
            ),
        })
    }

    async fn send_once(
        &self,
        prepared: &Prepared,
        queue: &MessageQueue,
        route: &TopicRoute,
    ) -> Result<Sent, (ClientError, Option<String>)> {
        let broker = || Some(queue.broker_name.clone());
        let addr = match route.master_addr(&queue.broker_name) {
            Some(addr) => addr,
            None => self
                .inner
                .routes
                .master_addr(&queue.topic, &queue.broker_name)
                .await
                .map_err(|e| (e, broker()))?,
        };
        self.register_on_first_contact(addr);
        let cmd = self.command(prepared, queue);
        let reply = self
            .inner
            .pool
            .invoke(addr, cmd, self.inner.config.send_timeout)
            .await
            .map_err(|e| (e, broker()))?;
        if reply.code != response::SUCCESS {
            return Err((
                ClientError::Broker {
                    addr,
                    code: reply.code,
                    remark: reply.remark.unwrap_or_default(),
                },
                broker(),
            ));
        }
        let header: SendMessageResponseHeader =
            ClientError::decode_header(addr, &reply).map_err(|e| (e, None))?;
        let queue = MessageQueue {
            queue_id: header.queue_id,
            ..queue.clone()
        };
        Ok(Sent { header, queue })
    }

    fn command(&self, prepared: &Prepared, queue: &MessageQueue) -> RemotingCommand {
        let born = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let config = &self.inner.config;
        // Every send names the template, as Java's do: a broker creates an unknown topic from
        // it (when allowed) and ignores it for a known one.
        let header = SendMessageRequestHeaderV2 {
            a: config.group.clone(),
            b: queue.topic.clone(),
            c: config.create_topic_key.clone(),
            d: config.default_topic_queue_nums,
            e: queue.queue_id,
            f: prepared.sys_flag,
            g: born,
            h: prepared.flag,
            i: prepared.properties.clone(),
            j: Some(0),
            k: Some(false),
            l: None,
            m: prepared.batch.then_some(true),
            n: Some(queue.broker_name.clone()),
        };
        debug_assert!(!(prepared.batch && prepared.delay));
        let mut cmd = RemotingCommand::request_with_header(prepared.code, &header)
            .with_body(prepared.body.clone());
        if config.binary_header {
            cmd.serialize_type = SerializeType::RocketMq;
        }
        cmd
    }
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Index of the queue a send attempt uses; `queues` is never empty.
fn pick(
    queues: &[MessageQueue],
    selection: &QueueSelection,
    message: &Message,
    counter: usize,
    failed_brokers: &[String],
) -> usize {
    let n = queues.len();
    debug_assert!(n > 0);
    match selection {
        QueueSelection::RoundRobin => (0..n)
            .map(|step| counter.wrapping_add(step) % n)
            .find(|&i| !failed_brokers.contains(&queues[i].broker_name))
            .unwrap_or(counter % n),
        QueueSelection::HashKey(key) => java_string_hash(key).unsigned_abs() as usize % n,
        QueueSelection::Custom(selector) => selector.select(queues, message) % n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues() -> Vec<MessageQueue> {
        ["a", "a", "b", "b"]
            .iter()
            .enumerate()
            .map(|(i, b)| MessageQueue {
                topic: "T".into(),
                broker_name: b.to_string(),
                queue_id: (i % 2) as i32,
            })
            .collect()
    }

    #[test]
    fn round_robin_skips_failed_brokers_and_hash_is_stable() {
        let qs = queues();
        let m = Message::new("T", "x");
        let q = pick(&qs, &QueueSelection::RoundRobin, &m, 0, &["a".into()]);
        assert_eq!(qs[q].broker_name, "b");
        let q = pick(&qs, &QueueSelection::RoundRobin, &m, 1, &[]);
        assert_eq!(q, 1);
        let h = QueueSelection::HashKey("order-42".into());
        let first = pick(&qs, &h, &m, 0, &[]);
        for c in 1..10 {
            assert_eq!(pick(&qs, &h, &m, c, &[]), first);
        }
    }
}
