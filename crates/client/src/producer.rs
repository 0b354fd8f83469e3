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
//! - every wait is bounded by `send_timeout` per attempt.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_protocol::java_string_hash;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand};

use crate::connections::ConnectionPool;
use crate::error::ClientError;
use crate::message::{encode_batch, new_uniq_key, Message};
use crate::route::RouteCache;

/// Topic Java producers name as the template of auto-created topics.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Producer group.
    pub group: String,
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
    /// Queues the broker creates for a topic auto-created by a send.
    pub default_topic_queue_nums: i32,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            namesrv_addrs: Vec::new(),
            group: "DEFAULT_PRODUCER".into(),
            send_timeout: Duration::from_secs(3),
            retries_max: 2,
            max_body_bytes: 4 * 1024 * 1024,
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            default_topic_queue_nums: 4,
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

/// A producer. Cheap to clone; clones share connections and routes.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    pool: Arc<ConnectionPool>,
    routes: Arc<RouteCache>,
    next_queue: AtomicUsize,
}

enum Payload {
    Single(Message),
    Batch(Vec<Message>),
}

struct Sent {
    header: SendMessageResponseHeader,
    queue: MessageQueue,
}

impl Producer {
    /// Checks the configuration and prepares connections (none is opened until a send).
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty group, no name server, a zero timeout or a zero
    /// body limit.
    pub fn start(config: ProducerConfig) -> Result<Producer, ClientError> {
        if config.group.is_empty() {
            return Err(ClientError::Config("producer group is empty".into()));
        }
        if config.send_timeout.is_zero() || config.max_body_bytes == 0 {
            return Err(ClientError::Config(
                "send_timeout and max_body_bytes must be positive".into(),
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
        Ok(Producer {
            inner: Arc::new(Inner {
                config,
                pool,
                routes,
                next_queue: AtomicUsize::new(0),
            }),
        })
    }

    /// The route cache (shared with anything built from this producer).
    pub fn routes(&self) -> &Arc<RouteCache> {
        &self.inner.routes
    }

    /// Sends `message` to a round-robin queue and waits for the broker's answer.
    ///
    /// # Errors
    /// [`ClientError::InvalidMessage`] / [`ClientError::BodyTooLarge`] before any traffic;
    /// a non-retriable broker answer at once; [`ClientError::RetriesExhausted`] when every
    /// attempt failed.
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
        let properties = message.encode_properties(&uniq);
        let payload = Payload::Single(message);
        let (sent, attempts) = self
            .send_retrying(&payload, selection, &[properties])
            .await?;
        Ok(SendResult {
            msg_id: uniq,
            offset_msg_id: sent.header.msg_id,
            queue: sent.queue,
            queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
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
        let queues = self.inner.routes.write_queues(&message.topic).await?;
        let index = self.inner.next_queue.fetch_add(1, Ordering::Relaxed) % queues.len();
        let queue = &queues[index];
        let addr = self
            .inner
            .routes
            .master_addr(&message.topic, &queue.broker_name)
            .await?;
        let properties = message.encode_properties(&new_uniq_key());
        let cmd = self.command(&Payload::Single(message), queue, &[properties])?;
        self.inner
            .pool
            .invoke_oneway(addr, cmd, self.inner.config.send_timeout)
            .await
    }

    /// Sends `messages` as one SEND_BATCH_MESSAGE to one round-robin queue; they get
    /// consecutive queue offsets. All must share a topic; delay levels are not allowed.
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
        let properties: Vec<String> = messages
            .iter()
            .zip(&ids)
            .map(|(m, id)| m.encode_properties(id))
            .collect();
        let payload = Payload::Batch(messages);
        // Size check before any traffic.
        let body = self.body(&payload, &properties)?;
        if body.len() > self.inner.config.max_body_bytes {
            return Err(ClientError::BodyTooLarge {
                size: body.len(),
                max: self.inner.config.max_body_bytes,
            });
        }
        let (sent, attempts) = self
            .send_retrying(&payload, &QueueSelection::RoundRobin, &properties)
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

    /// Closes every connection. Sends in progress fail with a transport error.
    pub fn shutdown(&self) {
        self.inner.pool.close_all();
    }

    fn check(&self, message: &Message) -> Result<(), ClientError> {
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

    async fn send_retrying(
        &self,
        payload: &Payload,
        selection: &QueueSelection,
        properties: &[String],
    ) -> Result<(Sent, u32), ClientError> {
        let topic = match payload {
            Payload::Single(m) => m.topic.as_str(),
            Payload::Batch(ms) => ms[0].topic.as_str(),
        };
        let attempts_max = self.inner.config.retries_max.saturating_add(1);
        let start = self.inner.next_queue.fetch_add(1, Ordering::Relaxed);
        let mut failed_brokers: Vec<String> = Vec::new();
        let mut last_error = None;
        for attempt in 0..attempts_max {
            let result = async {
                let queues = self
                    .inner
                    .routes
                    .write_queues(topic)
                    .await
                    .map_err(|e| (e, None))?;
                let queue = pick(
                    &queues,
                    selection,
                    payload,
                    start.wrapping_add(attempt as usize),
                    &failed_brokers,
                );
                self.send_once(payload, &queue, properties).await
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
        payload: &Payload,
        queue: &MessageQueue,
        properties: &[String],
    ) -> Result<Sent, (ClientError, Option<String>)> {
        let broker = Some(queue.broker_name.clone());
        let addr = self
            .inner
            .routes
            .master_addr(&queue.topic, &queue.broker_name)
            .await
            .map_err(|e| (e, broker.clone()))?;
        let cmd = self
            .command(payload, queue, properties)
            .map_err(|e| (e, None))?;
        let reply = self
            .inner
            .pool
            .invoke(addr, cmd, self.inner.config.send_timeout)
            .await
            .map_err(|e| (e, broker.clone()))?;
        if reply.code != response::SUCCESS {
            return Err((
                ClientError::Broker {
                    addr,
                    code: reply.code,
                    remark: reply.remark.unwrap_or_default(),
                },
                broker,
            ));
        }
        let header: SendMessageResponseHeader = reply.decode_header().map_err(|e| {
            (
                ClientError::Decode {
                    addr,
                    reason: e.to_string(),
                },
                None,
            )
        })?;
        let queue = MessageQueue {
            queue_id: header.queue_id,
            ..queue.clone()
        };
        Ok(Sent { header, queue })
    }

    fn body(&self, payload: &Payload, properties: &[String]) -> Result<Vec<u8>, ClientError> {
        match payload {
            Payload::Single(m) => Ok(m.body.to_vec()),
            Payload::Batch(ms) => {
                let entries: Vec<(&Message, String)> =
                    ms.iter().zip(properties.iter().cloned()).collect();
                encode_batch(&entries).map_err(ClientError::InvalidMessage)
            }
        }
    }

    fn command(
        &self,
        payload: &Payload,
        queue: &MessageQueue,
        properties: &[String],
    ) -> Result<RemotingCommand, ClientError> {
        let born = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let (code, flag, props, batch) = match payload {
            Payload::Single(m) => (
                request::SEND_MESSAGE_V2,
                m.flag,
                properties.first().cloned(),
                None,
            ),
            Payload::Batch(_) => (request::SEND_BATCH_MESSAGE, 0, None, Some(true)),
        };
        let header = SendMessageRequestHeaderV2 {
            a: self.inner.config.group.clone(),
            b: queue.topic.clone(),
            c: AUTO_CREATE_TOPIC_KEY.into(),
            d: self.inner.config.default_topic_queue_nums,
            e: queue.queue_id,
            f: 0,
            g: born,
            h: flag,
            i: props,
            j: Some(0),
            k: Some(false),
            l: None,
            m: batch,
            n: Some(queue.broker_name.clone()),
        };
        let body = self.body(payload, properties)?;
        Ok(RemotingCommand::request_with_header(code, &header).with_body(body))
    }
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn pick(
    queues: &[MessageQueue],
    selection: &QueueSelection,
    payload: &Payload,
    counter: usize,
    failed_brokers: &[String],
) -> MessageQueue {
    let n = queues.len();
    match selection {
        QueueSelection::RoundRobin => {
            for step in 0..n {
                let q = &queues[counter.wrapping_add(step) % n];
                if !failed_brokers.contains(&q.broker_name) {
                    return q.clone();
                }
            }
            queues[counter % n].clone()
        }
        QueueSelection::HashKey(key) => {
            let hash = java_string_hash(key).unsigned_abs() as usize;
            queues[hash % n].clone()
        }
        QueueSelection::Custom(selector) => {
            let message = match payload {
                Payload::Single(m) => m,
                Payload::Batch(ms) => &ms[0],
            };
            queues[selector.select(queues, message) % n].clone()
        }
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
        let m = Payload::Single(Message::new("T", "x"));
        let q = pick(&qs, &QueueSelection::RoundRobin, &m, 0, &["a".into()]);
        assert_eq!(q.broker_name, "b");
        let q = pick(&qs, &QueueSelection::RoundRobin, &m, 1, &[]);
        assert_eq!(q, qs[1]);
        let h = QueueSelection::HashKey("order-42".into());
        let first = pick(&qs, &h, &m, 0, &[]);
        for c in 1..10 {
            assert_eq!(pick(&qs, &h, &m, c, &[]), first);
        }
    }
}
