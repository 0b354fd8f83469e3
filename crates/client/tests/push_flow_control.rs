//! Push consumer flow control: with a slow listener, a queue's cache (pulled, not yet
//! acknowledged) never grows past `max_cached_messages_per_queue` / `max_cached_bytes_per_queue`
//! by more than one pull, and everything is still consumed. Without the bound a slow listener
//! lets the client buffer the whole backlog in memory.
//!
//! The cache is sampled every few milliseconds through `PushConsumer::cached_per_queue` while
//! the backlog drains; the maximum seen is printed and asserted.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{broker, create_topic, namesrv, wait_route, T};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageListener, Producer,
    ProducerConfig, PushConsumer, PushConsumerConfig,
};

const BODY_BYTES: usize = 1024;
const PULL_BATCH: u32 = 8;

/// Runs a slow consumer of `count` 1 KiB messages with the given cache bounds; returns the
/// largest (messages, bytes) cached by one queue, and the flow-control pause count.
async fn drain_with_limits(
    topic: &str,
    count: usize,
    max_messages: usize,
    max_bytes: usize,
) -> ((usize, usize), u64) {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(broker.local_addr(), topic, 2).await;
    wait_route(ns.addr, topic, 1).await;
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "FlowPG".into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap();
    for i in 0..count {
        let mut body = format!("{i:08}").into_bytes();
        body.resize(BODY_BYTES, b'.');
        producer
            .send(Message::new(topic, body))
            .await
            .expect("send");
    }
    let seen: Arc<Mutex<HashSet<(i32, u64)>>> = Arc::default();
    let listener = {
        let seen = seen.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            std::thread::sleep(Duration::from_millis(20));
            let mut seen = seen.lock().unwrap();
            seen.extend(msgs.iter().map(|m| (m.queue_id, m.queue_offset)));
            ConsumeStatus::ConsumeSuccess
        })
    };
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            namesrv_addrs: vec![ns.addr],
            group: format!("Flow{topic}"),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            max_cached_messages_per_queue: max_messages,
            max_cached_bytes_per_queue: max_bytes,
            // Many listener slots, so only the cache bound holds pulling back.
            consume_threads: 64,
            consume_batch_max: 1,
            pull_batch_size: PULL_BATCH,
            pull_hold: Duration::from_millis(300),
            rebalance_interval: Duration::from_millis(300),
            persist_interval: Duration::from_millis(200),
            shutdown_timeout: Duration::from_secs(3),
            ..PushConsumerConfig::default()
        },
        vec![(topic.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut peak = (0, 0);
    let mut samples = 0;
    while seen.lock().unwrap().len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} of {count} consumed",
            seen.lock().unwrap().len()
        );
        for (_, (messages, bytes)) in consumer.cached_per_queue() {
            peak = (peak.0.max(messages), peak.1.max(bytes));
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let pauses = consumer.stats().flow_control_pauses;
    println!(
        "flow control: limits ({max_messages} msgs, {max_bytes} B), peak cached per queue {peak:?} \
         over {samples} samples, {pauses} pauses"
    );
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    broker.shutdown().await.unwrap();
    (peak, pauses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_listener_never_caches_more_than_max_cached_messages() {
    let max_messages = 20;
    let ((messages, _), pauses) = drain_with_limits("FlowMsgs", 600, max_messages, 100 << 20).await;
    assert!(pauses > 0, "the bound was reached and pulling paused");
    assert!(
        messages >= max_messages / 2,
        "the cache filled up (peak {messages}): the sampling saw the bound at work"
    );
    assert!(
        messages <= max_messages + PULL_BATCH as usize,
        "peak {messages} cached > {max_messages} + one pull of {PULL_BATCH}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_listener_never_caches_more_than_max_cached_bytes() {
    let max_bytes = 12 * BODY_BYTES;
    let ((_, bytes), pauses) = drain_with_limits("FlowBytes", 600, 10_000, max_bytes).await;
    assert!(pauses > 0, "the bound was reached and pulling paused");
    assert!(
        bytes <= max_bytes + PULL_BATCH as usize * BODY_BYTES,
        "peak {bytes} B cached > {max_bytes} B + one pull of {PULL_BATCH} messages"
    );
}
