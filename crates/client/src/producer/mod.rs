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
//!
//! Layout: the producer and its lifecycle (this module), its configuration (`config`),
//! what sends report (`outcome`), the send API (`send`), one send's attempts (`attempt`),
//! and broker registration (`registration`).

mod attempt;
mod config;
mod outcome;
mod registration;
mod send;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::connections::{self, ConnectionPool};
use crate::error::ClientError;
use crate::route::RouteCache;
use ferromq_protocol::remoting::ClientOptions;
use registration::Registration;

pub use config::{ProducerConfig, QueueSelection, QueueSelector, AUTO_CREATE_TOPIC_KEY};
pub use outcome::{BatchSendResult, ProducerStats, SendHandle, SendResult};

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
    /// Send attempts made after a failed one (see [`ProducerStats::send_retries`]).
    send_retries: std::sync::atomic::AtomicU64,
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
            reply_spin: config.reply_spin,
            ..connections::options(
                config.connect_timeout,
                config.credentials.as_ref(),
                config.tls.as_ref(),
            )
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
                send_retries: std::sync::atomic::AtomicU64::new(0),
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

    /// The connection pool (shared with anything built from this producer).
    pub(crate) fn pool(&self) -> &Arc<ConnectionPool> {
        &self.inner.pool
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &ProducerConfig {
        &self.inner.config
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
            send_retries: self.inner.send_retries.load(Ordering::Relaxed),
            failover_route_fetches: routes.failover_fetches,
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
}
