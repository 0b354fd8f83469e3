//! One send's attempts: validation, encoding once (`Prepared`), the route to publish
//! through (auto-create template included), bounded retries over queues chosen by `pick`,
//! and the SEND_MESSAGE command of one attempt.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use bytes::Bytes;
use ferromq_protocol::java_string_hash;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::SendMessageResponseHeader;
use ferromq_protocol::remoting::{ExtFields, RemotingCommand, SerializeType};

use super::config::QueueSelection;
use super::Producer;
use crate::compression;
use crate::error::ClientError;
use crate::message::Message;
use crate::route::TopicRoute;

/// A send prepared once and sent as is by every attempt: body encoded (compressed or
/// batched), properties encoded.
pub(super) struct Prepared {
    pub(super) topic: String,
    pub(super) code: i32,
    pub(super) body: Bytes,
    pub(super) sys_flag: i32,
    pub(super) flag: i32,
    pub(super) properties: Option<String>,
    pub(super) batch: bool,
    pub(super) delay: bool,
}

/// Pause between route fetches while a send waits for its broker group's new master.
pub(super) const FAILOVER_POLL: Duration = crate::route::FAILOVER_REFRESH_MIN_INTERVAL;

/// Bound on route polls per failed attempt while waiting for a new master (with
/// [`FAILOVER_POLL`], 5 s; the send's own deadline usually ends it first).
pub(super) const FAILOVER_POLLS_MAX: u32 = 50;

/// Polls after which a route still naming the failed master (restarting at the same
/// address, or not yet replaced) lets the retry go to it anyway.
pub(super) const FAILOVER_SAME_MASTER_POLLS: u32 = 3;

/// Least time one attempt is given, even at the end of the send's total bound.
const MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(100);

/// The broker group and master address of a failed attempt.
pub(super) struct FailedAttempt {
    pub(super) broker: String,
    pub(super) addr: std::net::SocketAddr,
}

/// A successful attempt: the broker's reply header and the queue it stored into.
pub(super) struct Sent {
    pub(super) header: SendMessageResponseHeader,
    pub(super) queue: MessageQueue,
}

impl Producer {
    /// Refuses a send after shutdown and a message that fails validation or is too large,
    /// before any traffic.
    pub(super) fn check(&self, message: &Message) -> Result<(), ClientError> {
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
    pub(super) fn prepare_single(&self, message: &Message, uniq: &str) -> Prepared {
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
    pub(super) async fn publish_route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
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

    /// Sends `prepared` with at most `retries_max + 1` attempts (Java's
    /// `retryTimesWhenSendFailed`, 2 by default), retrying only retriable errors and, with
    /// round-robin, preferring brokers that have not failed in this send.
    ///
    /// Failover: a failed attempt fetches the topic's route at once
    /// ([`RouteCache::master_failed`](crate::route::RouteCache::master_failed), rate limited);
    /// when no other broker group of the topic can take the message, the next attempt waits
    /// (polling the route every [`FAILOVER_POLL`], at most [`FAILOVER_POLLS_MAX`] times) until
    /// the group's route names a master again (see `await_master`), so a send that was going
    /// to the old master is stored by the new one within the retry budget. The whole send is
    /// bounded by `send_timeout × (retries_max + 1)`; each attempt by `send_timeout` and what
    /// is left of that bound (at least [`MIN_ATTEMPT_TIMEOUT`]); no retry starts past it.
    ///
    /// # Duplicates
    /// A retry after a timeout or a closed connection may store the message twice: the
    /// failed attempt may have been stored (and replicated) before the master went away.
    /// Retries are counted ([`ProducerStats::send_retries`](super::ProducerStats::send_retries)).
    pub(super) async fn send_retrying(
        &self,
        prepared: &Prepared,
        selection: &QueueSelection,
        first: &Message,
    ) -> Result<(Sent, u32), ClientError> {
        let topic = prepared.topic.as_str();
        let attempts_max = self.inner.config.retries_max.saturating_add(1);
        let deadline = Instant::now() + self.inner.config.send_timeout.saturating_mul(attempts_max);
        let start = self.inner.next_queue.fetch_add(1, Ordering::Relaxed);
        let mut failed_brokers: Vec<String> = Vec::new();
        let mut last_error = None;
        let mut attempts_made = 0;
        for attempt in 0..attempts_max {
            attempts_made = attempt + 1;
            let result = async {
                let route = self.publish_route(topic).await.map_err(|e| (e, None))?;
                let index = pick(
                    &route.write_queues,
                    selection,
                    first,
                    start.wrapping_add(attempt as usize),
                    &failed_brokers,
                );
                self.send_once(prepared, &route.write_queues[index], &route, deadline)
                    .await
            }
            .await;
            // Read the clock only when the attempt failed (a clock read per send showed in
            // profiles of windowed sends).
            let out_of_time = || Instant::now() >= deadline;
            match result {
                Ok(sent) => return Ok((sent, attempt + 1)),
                Err((error, failed))
                    if error.is_retriable() && attempt + 1 < attempts_max && !out_of_time() =>
                {
                    tracing::warn!(%topic, attempt = attempt + 1, %error, "send failed; retrying");
                    self.inner.send_retries.fetch_add(1, Ordering::Relaxed);
                    self.inner.routes.invalidate(topic);
                    if let Some(failed) = failed {
                        let signal = error.signals_master_change();
                        self.await_master(topic, &failed, signal, &failed_brokers, deadline)
                            .await;
                        failed_brokers.push(failed.broker);
                    }
                    last_error = Some(error);
                }
                Err((error, _)) if error.is_retriable() => {
                    last_error = Some(error);
                    if out_of_time() {
                        break;
                    }
                }
                Err((error, _)) => return Err(error),
            }
        }
        Err(ClientError::RetriesExhausted {
            attempts: attempts_made,
            last: Box::new(
                last_error
                    .unwrap_or_else(|| ClientError::Config("retries_max allows no attempt".into())),
            ),
        })
    }

    /// After a retriable failure of `failed`: fetches the route at once and, unless another
    /// broker group of the topic can take the send, polls it while the group has no master
    /// (a failover in progress: the old master left, the new one has not registered yet).
    /// It returns as soon as the group has a master other than the failed address; when the
    /// route still names the failed one, at once for an ordinary error, and for a failover
    /// signal (`signal`: NOT_MASTER, connection failure) after [`FAILOVER_SAME_MASTER_POLLS`]
    /// polls (a master restarting in place, or not replaced yet). Bounded by `deadline` and
    /// [`FAILOVER_POLLS_MAX`].
    async fn await_master(
        &self,
        topic: &str,
        failed: &FailedAttempt,
        signal: bool,
        failed_brokers: &[String],
        deadline: Instant,
    ) {
        let routes = &self.inner.routes;
        for poll in 0..FAILOVER_POLLS_MAX {
            if let Some(new_master) = routes
                .master_failed(topic, &failed.broker, failed.addr)
                .await
            {
                tracing::info!(%topic, broker = %failed.broker, old_master = %failed.addr,
                    %new_master, "the broker group has a new master; retrying the send there");
                return;
            }
            let route = routes.cached(topic);
            let other_group = route.as_ref().is_some_and(|r| {
                r.write_queues.iter().any(|q| {
                    q.broker_name != failed.broker && !failed_brokers.contains(&q.broker_name)
                })
            });
            let same_master = route
                .as_ref()
                .and_then(|r| r.master_addr(&failed.broker))
                .is_some();
            if other_group || (same_master && (!signal || poll >= FAILOVER_SAME_MASTER_POLLS)) {
                return;
            }
            let now = Instant::now();
            if now + FAILOVER_POLL >= deadline {
                return;
            }
            tokio::time::sleep(FAILOVER_POLL).await;
        }
    }

    /// One attempt: SEND_MESSAGE to the master of `queue`, SUCCESS or an error.
    pub(super) async fn send_once(
        &self,
        prepared: &Prepared,
        queue: &MessageQueue,
        route: &TopicRoute,
        deadline: Instant,
    ) -> Result<Sent, (ClientError, Option<FailedAttempt>)> {
        let addr = match route.master_addr(&queue.broker_name) {
            Some(addr) => addr,
            None => self
                .inner
                .routes
                .master_addr(&queue.topic, &queue.broker_name)
                .await
                .map_err(|e| (e, None))?,
        };
        let broker = || {
            Some(FailedAttempt {
                broker: queue.broker_name.clone(),
                addr,
            })
        };
        self.register_on_first_contact(addr);
        let cmd = self.command(prepared, queue);
        let timeout = self
            .inner
            .config
            .send_timeout
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(MIN_ATTEMPT_TIMEOUT);
        let reply = self
            .inner
            .pool
            .invoke(addr, cmd, timeout)
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

    /// The SEND_MESSAGE (or batch) command of one attempt of `prepared` to `queue`.
    pub(super) fn command(&self, prepared: &Prepared, queue: &MessageQueue) -> RemotingCommand {
        let born = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let config = &self.inner.config;
        let ext = send_fields(config, prepared, queue, born);
        debug_assert!(!(prepared.batch && prepared.delay));
        let mut cmd =
            RemotingCommand::new_request(prepared.code, ext).with_body(prepared.body.clone());
        if config.binary_header {
            cmd.serialize_type = SerializeType::RocketMq;
        }
        cmd
    }
}

/// The ext fields of a send: those of `SendMessageRequestHeaderV2` (the test
/// `send_fields_are_the_v2_header` holds them equal), written from borrowed text. A short
/// value is stored inline, so only long ones (the properties) allocate. Every send names the
/// template, as Java's do: a broker creates an unknown topic from it (when allowed) and
/// ignores it for a known one.
fn send_fields(
    config: &super::ProducerConfig,
    prepared: &Prepared,
    queue: &MessageQueue,
    born: i64,
) -> ExtFields {
    // Written in key order from borrowed text and integers: each field is appended with its
    // texts written in place (`ExtFields::insert_str`).
    let mut ext = ExtFields::with_capacity(14);
    ext.insert_str("a", &config.group);
    ext.insert_str("b", &queue.topic);
    ext.insert_str("c", &config.create_topic_key);
    ext.insert_int("d", config.default_topic_queue_nums);
    ext.insert_int("e", queue.queue_id);
    ext.insert_int("f", prepared.sys_flag);
    ext.insert_int("g", born);
    ext.insert_int("h", prepared.flag);
    if let Some(properties) = &prepared.properties {
        ext.insert_str("i", properties);
    }
    ext.insert_str("j", "0");
    ext.insert_str("k", "false");
    if prepared.batch {
        ext.insert_str("m", "true");
    }
    ext.insert_str("n", &queue.broker_name);
    ext
}

/// A wire offset as `u64` (a negative one, which a broker never sends, as 0).
pub(super) fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Index of the queue a send attempt uses; `queues` is never empty.
pub(super) fn pick(
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

    #[test]
    fn send_fields_are_the_v2_header() {
        use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
        use ferromq_protocol::remoting::CommandHeader;
        let config = super::super::ProducerConfig {
            group: "a-producer-group-longer-than-24".into(),
            ..Default::default()
        };
        let queue = MessageQueue {
            topic: "T".into(),
            broker_name: "broker-a".into(),
            queue_id: 5,
        };
        for (batch, properties) in [
            (false, Some("UNIQ_KEY\u{1}k\u{2}".to_string())),
            (true, None),
        ] {
            let prepared = Prepared {
                topic: "T".into(),
                code: request::SEND_MESSAGE_V2,
                body: Bytes::from_static(b"x"),
                sys_flag: 4,
                flag: -3,
                properties: properties.clone(),
                batch,
                delay: false,
            };
            let header = SendMessageRequestHeaderV2 {
                a: config.group.clone().into(),
                b: queue.topic.clone().into(),
                c: config.create_topic_key.clone().into(),
                d: config.default_topic_queue_nums,
                e: queue.queue_id,
                f: prepared.sys_flag,
                g: 1_700_000_000_123,
                h: prepared.flag,
                i: properties.map(Into::into),
                j: Some(0),
                k: Some(false),
                l: None,
                m: batch.then_some(true),
                n: Some(queue.broker_name.clone().into()),
            };
            assert_eq!(
                send_fields(&config, &prepared, &queue, 1_700_000_000_123),
                header.into_ext()
            );
        }
    }

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
