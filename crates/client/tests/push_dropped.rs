//! Batches of a queue the consumer no longer reads from are never handed to the application.
//!
//! A push consumer pulls ahead: a pull of 32 messages becomes several listener batches, and
//! the batches behind a slow one wait for a consume slot. When the queue moves meanwhile —
//! an administrator's offset reset (RESET_CONSUMER_CLIENT_OFFSET), a rebalance away, a
//! shutdown — those waiting batches are stale: delivering them would show the application
//! an old message after it already followed the reset (the chaos checker's K7 poll skip:
//! "followed a reset to 579, then delivered 682"). RocketMQ's Java client checks
//! `processQueue.isDropped()` before calling the listener; here each batch checks that its
//! queue is still owned and at the generation it was pulled in.
//!
//! Each test blocks the listener on its first batch, moves the queue while it is blocked,
//! unblocks it, and checks what reaches the listener afterwards. The lite pull consumer is
//! held to the same rule for `poll`: nothing fetched before a reset or a seek is returned
//! after it.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{producer, reset_offsets_by_time, Cluster};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, LitePullConsumer, LitePullConsumerConfig, Message, MessageExt,
    MessageListener, PushConsumer, PushConsumerConfig, StartPosition,
};

const TOPIC: &str = "DroppedT";
const COUNT: u64 = 40;

/// One broker, a one-queue topic holding `COUNT` messages (offsets 0..COUNT).
async fn cluster() -> Cluster {
    let c = common::cluster(TOPIC, 1).await;
    let producer = producer(c.ns.addr, "DroppedPG");
    for i in 0..COUNT {
        producer
            .send(Message::new(TOPIC, format!("m{i}")))
            .await
            .expect("send");
    }
    c
}

impl Cluster {
    /// The group's offset of queue 0 as the broker stores it.
    fn stored(&self, group: &str) -> Option<u64> {
        self.broker
            .context()
            .store
            .consumer_offset(group, TOPIC, 0)
            .expect("offset view")
            .map(|s| s.offset)
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Listener calls in order, each as the queue offsets it was given.
type Calls = Arc<Mutex<Vec<Vec<u64>>>>;

/// A listener that records every call and blocks its first call until `release` is sent
/// (bounded: it gives up after 15 s, failing the test's later assertions).
fn blocking_listener(orderly: bool, calls: Calls) -> (MessageListener, mpsc::Sender<()>) {
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let f = move |msgs: &[MessageExt]| {
        let first = {
            let mut calls = calls.lock().unwrap();
            calls.push(msgs.iter().map(|m| m.queue_offset).collect());
            calls.len() == 1
        };
        if first {
            let _ = released
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(15));
        }
        ConsumeStatus::ConsumeSuccess
    };
    let listener = if orderly {
        MessageListener::orderly(f)
    } else {
        MessageListener::concurrently(f)
    };
    (listener, release)
}

fn push_config(ns: SocketAddr, group: &str) -> PushConsumerConfig {
    PushConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        consume_from_where: ConsumeFromWhere::FirstOffset,
        // One batch at a time: the batches behind the blocked one wait for its slot.
        consume_threads: 1,
        consume_batch_max: 4,
        pull_batch_size: 32,
        pull_hold: Duration::from_millis(500),
        pull_error_backoff: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(300),
        persist_interval: Duration::from_millis(100),
        heartbeat_interval: Duration::from_secs(1),
        lock_renew_interval: Duration::from_millis(200),
        shutdown_timeout: Duration::from_secs(3),
        ..PushConsumerConfig::default()
    }
}

/// Blocks the first listener call, resets the group to offset 0 while it is blocked, then
/// checks that every later call continues from the reset offset, contiguously: no batch
/// pulled before the reset reaches the listener once the consumer applied it.
async fn push_consumer_discards_batches_pulled_before_a_reset(orderly: bool) {
    let c = cluster().await;
    let group = if orderly {
        "DroppedOrderly"
    } else {
        "DroppedConcurrent"
    };
    let calls: Calls = Arc::default();
    let (listener, release) = blocking_listener(orderly, calls.clone());
    let consumer = PushConsumer::start(
        push_config(c.ns.addr, group),
        vec![(TOPIC.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    wait_until("the first batch is in the listener", || {
        !calls.lock().unwrap().is_empty()
    })
    .await;
    let first = calls.lock().unwrap()[0].clone();
    assert_eq!(first.first(), Some(&0), "starts at the first offset");

    reset_offsets_by_time(c.broker.local_addr(), group, TOPIC, 0).await;
    assert_eq!(c.stored(group), Some(0), "reset recorded");
    wait_until("the consumer applied the reset", || {
        consumer.stats().resets_applied >= 1
    })
    .await;
    // Everything the listener sees from now on was decided after the reset.
    release.send(()).expect("listener waiting");

    wait_until("every message delivered again and committed", || {
        let calls = calls.lock().unwrap();
        calls[1..].iter().flatten().any(|o| *o == COUNT - 1) && c.stored(group) == Some(COUNT)
    })
    .await;
    let after: Vec<u64> = calls.lock().unwrap()[1..]
        .iter()
        .flatten()
        .copied()
        .collect();
    let expected: Vec<u64> = (0..COUNT).collect();
    assert_eq!(
        after, expected,
        "after the reset the listener reads from the reset offset on, contiguously (first call \
         {first:?}); a stale batch shows up as offsets past the blocked call's"
    );
    let stats = consumer.stats();
    assert!(
        stats.batches_discarded >= 1,
        "the batches queued behind the blocked one were discarded: {stats:?}"
    );
    assert!(
        stats.stale_results >= first.len() as u64,
        "the blocked call's result was not committed over the reset: {stats:?}"
    );
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(c.stored(group), Some(COUNT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_listener_gets_no_batch_pulled_before_a_reset() {
    push_consumer_discards_batches_pulled_before_a_reset(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orderly_listener_gets_no_message_pulled_before_a_reset() {
    push_consumer_discards_batches_pulled_before_a_reset(true).await;
}

/// A shutdown begun while the listener is blocked lets that call finish, hands out nothing
/// more, and commits only what was consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_hands_out_no_further_batch() {
    let c = cluster().await;
    let group = "DroppedShutdown";
    let calls: Calls = Arc::default();
    let (listener, release) = blocking_listener(false, calls.clone());
    let consumer = PushConsumer::start(
        push_config(c.ns.addr, group),
        vec![(TOPIC.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    wait_until("the first batch is in the listener", || {
        !calls.lock().unwrap().is_empty()
    })
    .await;
    let shutdown = tokio::spawn(consumer.shutdown());
    // Shutdown stops every queue at once, then waits for the running call.
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.send(()).expect("listener waiting");
    let report = tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("shutdown ends")
        .expect("shutdown task")
        .expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        1,
        "no batch after the shutdown began: {calls:?}"
    );
    assert_eq!(
        c.stored(group),
        Some(calls[0].len() as u64),
        "the finished call is committed, nothing beyond it"
    );
}

fn lite_config(ns: SocketAddr, group: &str) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        start_position: StartPosition::First,
        pull_batch: 4,
        buffer_per_queue: 12,
        max_poll_messages: 4,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        rebalance_interval: Duration::from_millis(300),
        retry_delay: Duration::from_millis(50),
        ..LitePullConsumerConfig::default()
    }
}

/// Polls until offset `COUNT - 1` was returned; the offsets in order.
async fn poll_to_end(c: &LitePullConsumer) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    while !got.contains(&(COUNT - 1)) {
        assert!(Instant::now() < deadline, "only {got:?} arrived");
        let polled = c.poll(Duration::from_millis(100)).await.unwrap();
        got.extend(polled.iter().map(|m| m.queue_offset));
    }
    got
}

/// Polls once and waits until the buffer is full behind it (the fetch task idles).
async fn poll_once_and_fill(c: &LitePullConsumer) -> Vec<u64> {
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while first.is_empty() {
        assert!(Instant::now() < deadline, "nothing arrived");
        first = c
            .poll(Duration::from_millis(100))
            .await
            .unwrap()
            .iter()
            .map(|m| m.queue_offset)
            .collect();
    }
    // buffer_per_queue (12) messages are fetched ahead within a few pulls.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first
}

/// A reset pushed while messages are buffered and a pull is in flight: `poll` returns
/// nothing fetched before it, only the reset offset on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lite_pull_poll_returns_nothing_fetched_before_a_reset() {
    let c = cluster().await;
    let group = "DroppedLite";
    let consumer = LitePullConsumer::start(lite_config(c.ns.addr, group)).unwrap();
    consumer.subscribe(TOPIC, "*").await.unwrap();
    let first = poll_once_and_fill(&consumer).await;
    assert_eq!(first, vec![0, 1, 2, 3]);

    reset_offsets_by_time(c.broker.local_addr(), group, TOPIC, 0).await;
    wait_until("the consumer applied the reset", || {
        consumer.stats().resets_applied >= 1
    })
    .await;
    let after = poll_to_end(&consumer).await;
    assert_eq!(
        after,
        (0..COUNT).collect::<Vec<u64>>(),
        "from the reset offset on, contiguously; nothing buffered before the reset"
    );
    assert!(consumer.commit().await.expect("commit").is_complete());
    assert_eq!(c.stored(group), Some(COUNT));
    assert!(consumer.shutdown().await.expect("shutdown").is_complete());
}

/// Seeks back and forth while the buffer is full: every `poll` after a seek starts exactly
/// at the sought offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lite_pull_poll_returns_nothing_fetched_before_a_seek() {
    let c = cluster().await;
    let consumer = LitePullConsumer::start(lite_config(c.ns.addr, "DroppedSeek")).unwrap();
    consumer.subscribe(TOPIC, "*").await.unwrap();
    let queue = consumer.assignment()[0].clone();
    let first = poll_once_and_fill(&consumer).await;
    assert_eq!(first, vec![0, 1, 2, 3]);
    let mut seen = BTreeSet::new();
    for target in [30_u64, 2, 17, 9] {
        consumer.seek(&queue, target).expect("seek");
        let polled = poll_once_and_fill(&consumer).await;
        assert_eq!(
            polled,
            (target..target + 4).collect::<Vec<u64>>(),
            "after seeking to {target}"
        );
        seen.insert(target);
    }
    assert_eq!(seen.len(), 4);
    assert_eq!(consumer.position(&queue), Some(13));
    drop(consumer);
}
