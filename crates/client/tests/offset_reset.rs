//! Offset pitfall C11: a broker-side reset is observed by every consumer kind.
//!
//! In RocketMQ `resetOffsetByTime` has no effect on `DefaultLitePullConsumer` (#5318, #9059),
//! and the client reset is a one-way push that a running consumer may never act on. Here the
//! broker records the reset, fences the group's online connections and pushes
//! RESET_CONSUMER_CLIENT_OFFSET (220). Each consumer kind below first consumes and commits
//! everything, then the group is reset to the beginning; the property checked is that its
//! next pulls of the queue start at the reset offset (every message is delivered again from
//! offset 0) and that its commits afterwards land (the stored offsets reach the end again,
//! never left behind by a stale commit).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{producer, reset_offsets_by_time, Cluster, T};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, LitePullConsumer, LitePullConsumerConfig, Message, MessageExt,
    MessageListener, PullConsumer, PullConsumerConfig, PullResult, PushConsumer,
    PushConsumerConfig, StartPosition,
};

const TOPIC: &str = "ResetT";
const COUNT: usize = 20;

async fn cluster() -> Cluster {
    let c = common::cluster(TOPIC, 2).await;
    let producer = producer(c.ns.addr, "ResetPG");
    for i in 0..COUNT {
        producer
            .send(Message::new(TOPIC, format!("m{i}")))
            .await
            .expect("send");
    }
    c
}

/// The group's stored offset of both queues.
fn stored(c: &Cluster, group: &str) -> Vec<Option<u64>> {
    let ctx = c.broker.context();
    (0..2)
        .map(|q| {
            ctx.store
                .consumer_offset(group, TOPIC, q)
                .expect("offset view")
                .map(|s| s.offset)
        })
        .collect()
}

fn queue_ends(c: &Cluster) -> Vec<Option<u64>> {
    let ctx = c.broker.context();
    (0..2)
        .map(|q| ctx.store.queue_bounds(TOPIC, q).map(|(_, max)| max))
        .collect()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resets `group` to the beginning of every queue and checks the broker stored it.
async fn reset_to_beginning(c: &Cluster, group: &str) {
    reset_offsets_by_time(c.broker.local_addr(), group, TOPIC, 0).await;
    assert_eq!(stored(c, group), vec![Some(0), Some(0)], "reset recorded");
}

fn lite_config(ns: SocketAddr, group: &str) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        start_position: StartPosition::First,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        rebalance_interval: Duration::from_millis(300),
        retry_delay: Duration::from_millis(50),
        ..LitePullConsumerConfig::default()
    }
}

/// Polls until every (queue, offset) of the topic was returned at least once.
async fn poll_all(c: &LitePullConsumer) -> Vec<MessageExt> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got: Vec<MessageExt> = Vec::new();
    loop {
        let seen: BTreeSet<(i32, u64)> = got.iter().map(|m| (m.queue_id, m.queue_offset)).collect();
        if seen.len() >= COUNT {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {COUNT} arrived",
            seen.len()
        );
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
}

async fn lite_consumer_follows_a_reset(assign: bool) {
    let c = cluster().await;
    let group = if assign {
        "ResetLiteAssign"
    } else {
        "ResetLiteSub"
    };
    let consumer = LitePullConsumer::start(lite_config(c.ns.addr, group)).unwrap();
    if assign {
        let queues = consumer.pull_consumer().fetch_queues(TOPIC).await.unwrap();
        consumer.assign(queues).await.unwrap();
    } else {
        consumer.subscribe(TOPIC, "*").await.unwrap();
    }
    let first = poll_all(&consumer).await;
    assert_eq!(first.len(), COUNT, "exactly once before the reset");
    assert!(consumer.commit().await.expect("commit").is_complete());
    assert_eq!(stored(&c, group), queue_ends(&c));

    reset_to_beginning(&c, group).await;
    let again = poll_all(&consumer).await;
    let starts: BTreeSet<(i32, u64)> = again
        .iter()
        .map(|m| (m.queue_id, m.queue_offset))
        .filter(|(_, o)| *o == 0)
        .collect();
    assert_eq!(starts.len(), 2, "both queues restart at offset 0");
    assert!(consumer
        .commit()
        .await
        .expect("commit after the reset")
        .is_complete());
    assert_eq!(
        stored(&c, group),
        queue_ends(&c),
        "commits land after the reset"
    );
    assert!(
        consumer.stats().resets_applied >= 1,
        "the 220 push reached the consumer: {:?}",
        consumer.stats()
    );
    assert!(consumer.shutdown().await.expect("shutdown").is_complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lite_pull_subscribe_follows_a_broker_reset() {
    lite_consumer_follows_a_reset(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lite_pull_assign_follows_a_broker_reset() {
    lite_consumer_follows_a_reset(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_consumer_follows_a_broker_reset() {
    let c = cluster().await;
    let group = "ResetPush";
    let log: Arc<Mutex<Vec<(i32, u64)>>> = Arc::default();
    let listener = {
        let log = log.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            let mut log = log.lock().unwrap();
            log.extend(msgs.iter().map(|m| (m.queue_id, m.queue_offset)));
            ConsumeStatus::ConsumeSuccess
        })
    };
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            namesrv_addrs: vec![c.ns.addr],
            group: group.into(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            pull_hold: Duration::from_millis(500),
            pull_error_backoff: Duration::from_millis(100),
            rebalance_interval: Duration::from_millis(300),
            persist_interval: Duration::from_millis(100),
            heartbeat_interval: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(3),
            ..PushConsumerConfig::default()
        },
        vec![(TOPIC.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    let ends = queue_ends(&c);
    wait_until("everything consumed and committed", || {
        log.lock().unwrap().len() >= COUNT && stored(&c, group) == ends
    })
    .await;
    let before = log.lock().unwrap().len();
    assert_eq!(before, COUNT, "exactly once before the reset");

    reset_to_beginning(&c, group).await;
    wait_until("every message delivered again", || {
        let log = log.lock().unwrap();
        let again: BTreeSet<(i32, u64)> = log[before..].iter().copied().collect();
        again.len() >= COUNT
    })
    .await;
    wait_until("commits reach the end again", || stored(&c, group) == ends).await;
    assert!(
        consumer.stats().resets_applied >= 1,
        "the 220 push reached the consumer: {:?}",
        consumer.stats()
    );
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pull_consumer_follows_a_broker_reset_on_its_next_pull() {
    let c = cluster().await;
    let group = "ResetPull";
    let consumer = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![c.ns.addr],
        group: group.into(),
        pull_timeout: T,
        ..PullConsumerConfig::default()
    })
    .unwrap();
    consumer.set_correct_offset_illegal(true);
    let queues = consumer.fetch_queues(TOPIC).await.unwrap();
    let mut positions = Vec::new();
    for q in &queues {
        let mut offset = 0;
        loop {
            match consumer.pull(q, "*", offset, 32).await.unwrap() {
                PullResult::Found { next_offset, .. } => offset = next_offset,
                PullResult::NoNewMessage { .. } => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        consumer.commit(q, offset).await.expect("commit");
        positions.push(offset);
    }
    assert_eq!(stored(&c, group), queue_ends(&c));

    reset_to_beginning(&c, group).await;
    for (q, position) in queues.iter().zip(&positions) {
        // The next pull at the old position is moved to the reset offset, and the consumer
        // persists where it now stands.
        assert_eq!(
            consumer.pull(q, "*", *position, 32).await.unwrap(),
            PullResult::OffsetIllegal {
                suggested_offset: 0
            },
            "{q:?}"
        );
        match consumer.pull(q, "*", 0, 32).await.unwrap() {
            PullResult::Found { messages, .. } => assert_eq!(messages[0].queue_offset, 0),
            other => panic!("expected messages from 0, got {other:?}"),
        }
        consumer
            .commit(q, *position)
            .await
            .expect("commit after following");
    }
    assert_eq!(stored(&c, group), queue_ends(&c));
    consumer.shutdown().await.unwrap().into_result().unwrap();
}

/// Found by `ferromq chaos` on a replicated cluster: after a failover a pull consumer reached
/// the new master on a new connection, before its next periodic heartbeat; the queue was
/// fenced by an earlier reset, so the broker refused its commits from that unidentified
/// connection (stale generation, "send a heartbeat first"), the consumer restarted the queue
/// from its last commit and delivered ~60 messages again. `PullConsumer::commit` now
/// identifies itself with a heartbeat and sends such a refused commit once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pull_consumer_commits_on_a_fenced_queue_from_a_connection_not_yet_identified() {
    let c = cluster().await;
    let group = "ResetUnidentified";
    let config = PullConsumerConfig {
        namesrv_addrs: vec![c.ns.addr],
        group: group.into(),
        pull_timeout: T,
        // No periodic heartbeat during the test: only the ones the consumer sends itself.
        heartbeat_interval: Duration::from_secs(600),
        ..PullConsumerConfig::default()
    };
    let first = PullConsumer::start(config.clone()).unwrap();
    let queues = first.fetch_queues(TOPIC).await.unwrap();
    for q in &queues {
        first.commit(q, 1).await.expect("commit");
    }
    // The reset fences the group's online client (`first`).
    reset_to_beginning(&c, group).await;

    // A second consumer of the group that never fetched queues has sent no heartbeat: its
    // connection is unidentified, and the queues are fenced.
    let second = PullConsumer::start(config).unwrap();
    let queue = queues[0].clone();
    second
        .commit(&queue, 3)
        .await
        .expect("the commit lands after the consumer identifies itself");
    assert_eq!(stored(&c, group)[queue.queue_id as usize], Some(3));
    second.shutdown().await.unwrap().into_result().unwrap();
    let _ = first.shutdown().await.unwrap();
}
