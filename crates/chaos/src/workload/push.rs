//! A chaos push consumer session: a [`PushConsumer`] whose listener records deliveries and
//! whose offset store records starts, stops and commits ([`super::offsets::RecordingStore`]).
//!
//! One listener batch runs at a time (`consume_threads = 1`), so a queue's messages reach the
//! listener in queue order and a session's deliveries of a queue are contiguous — the poll
//! order property K7 stays checkable for push consumers as well as pull ones.

use std::sync::Arc;
use std::time::Duration;

use ferromq_client::{
    BrokerOffsetStore, ClientError, ConsumeFromWhere, ConsumeStatus, MessageListener, PushConsumer,
    PushConsumerConfig,
};

use super::offsets::RecordingStore;
use super::{record_delivery, Active, Shared, Target, REQUEST_TIMEOUT};
use crate::history::ConsumerId;
use crate::recorder::Recorder;

/// A push session's gate: true while the session is alive. A crash closes it before the
/// consumer is dropped, so no delivery of the dead session is recorded after the crash.
pub type Alive = Arc<std::sync::Mutex<bool>>;

/// Largest in-flight backlog per queue (bounds the duplicates of a crash).
pub const CACHED_MESSAGES_MAX: usize = 64;

/// Starts push consumer session `consumer` of `target.group`.
///
/// # Errors
/// The client's configuration errors.
pub async fn start(
    consumer: ConsumerId,
    target: &Target,
    recorder: Arc<Recorder>,
    shared: Arc<Shared>,
    active: Active,
    alive: Alive,
) -> Result<PushConsumer, ClientError> {
    let config = PushConsumerConfig {
        namesrv_addrs: target.namesrvs.clone(),
        group: target.group.clone(),
        consume_from_where: ConsumeFromWhere::FirstOffset,
        max_cached_messages_per_queue: CACHED_MESSAGES_MAX,
        consume_batch_max: 16,
        consume_threads: 1,
        pull_batch_size: 32,
        pull_hold: Duration::from_secs(2),
        pull_error_backoff: Duration::from_millis(200),
        rebalance_interval: Duration::from_secs(1),
        persist_interval: Duration::from_millis(500),
        max_uncommitted_per_queue: super::pull::UNCOMMITTED_MAX,
        heartbeat_interval: Duration::from_secs(1),
        request_timeout: REQUEST_TIMEOUT,
        shutdown_timeout: Duration::from_secs(5),
        ..PushConsumerConfig::default()
    };
    let listener_recorder = recorder.clone();
    let gate = alive.clone();
    let listener = MessageListener::concurrently(move |messages| {
        // Deliveries are recorded under the gate: once a crash closed it, a listener call
        // still in flight on the blocking pool is not a delivery (the process is gone).
        let open = alive.lock().unwrap_or_else(|poison| poison.into_inner());
        if *open {
            for message in messages {
                record_delivery(&listener_recorder, &shared, consumer, message);
            }
        }
        ConsumeStatus::ConsumeSuccess
    });
    let topic = target.topic.clone();
    PushConsumer::start_with_store(
        config,
        vec![(target.topic.clone(), "*".into())],
        listener,
        move |group, routes, pool, timeout| {
            Arc::new(RecordingStore::new(
                BrokerOffsetStore::new(group, routes, pool, timeout),
                &topic,
                consumer,
                recorder,
                active,
                gate,
            ))
        },
    )
    .await
}
