//! Consumers across a broker restart (in-process broker stopped and started on the same port
//! and data directory).
//!
//! - Offset pitfall C6: RocketMQ clients have turned "could not read the offset" into "no
//!   offset" and rewound to the queue's min (or jumped to its max). The first poll after the
//!   restart must start exactly at the committed offset: no rewind, no skip.
//!   A consumer started while the broker is down waits (its offset reads fail, counted) and
//!   then starts at the committed offset too.
//! - A push consumer running through the restart resumes by itself; nothing is lost and the
//!   duplicates are bounded by the messages in flight since the last acknowledged commit
//!   (counted and asserted).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{cluster, produce, producer, wait_route, BrokerProc, Cluster};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, LitePullConsumer, LitePullConsumerConfig, MessageExt,
    MessageListener, PushConsumer, PushConsumerConfig, StartPosition,
};

fn stored(broker: &BrokerProc, group: &str, topic: &str) -> BTreeMap<i32, Option<u64>> {
    let ctx = broker.context();
    (0..2)
        .map(|q| {
            (
                q as i32,
                ctx.store
                    .consumer_offset(group, topic, q)
                    .expect("offset view")
                    .map(|s| s.offset),
            )
        })
        .collect()
}

async fn restart(
    broker: BrokerProc,
    dir: &std::path::Path,
    ns: SocketAddr,
    topic: &str,
) -> BrokerProc {
    let port = broker.local_addr().port();
    broker.shutdown().await.expect("broker stops cleanly");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let broker = common::broker(dir, ns, "b0", port).await;
    wait_route(ns, topic, 1).await;
    broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_poll_after_a_broker_restart_starts_at_the_committed_offset() {
    let topic = "RestartLite";
    let group = "RestartLiteG";
    let Cluster {
        ns,
        mut broker,
        dir,
    } = cluster(topic, 2).await;
    produce(&producer(ns.addr, "RestartPG"), topic, 0, 40).await;
    let config = LitePullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: group.into(),
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        retry_delay: Duration::from_millis(50),
        buffer_per_queue: 4,
        max_poll_messages: 4,
        ..LitePullConsumerConfig::default()
    };
    // A consumes part of each queue from the start and commits where it stands.
    let a = LitePullConsumer::start(LitePullConsumerConfig {
        start_position: StartPosition::First,
        ..config.clone()
    })
    .unwrap();
    let queues = a.pull_consumer().fetch_queues(topic).await.unwrap();
    a.assign(queues.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut taken = 0;
    let mut seen = BTreeSet::new();
    // At least 12, from both queues (how they split depends on timing).
    while taken < 12 || seen.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "A got only {taken} from {seen:?}"
        );
        let polled = a.poll(Duration::from_millis(100)).await.unwrap();
        taken += polled.len();
        seen.extend(polled.iter().map(|m| m.queue_id));
    }
    assert!(a
        .shutdown()
        .await
        .expect("A commits and stops")
        .is_complete());
    let committed = stored(&broker, group, topic);
    assert!(
        committed
            .values()
            .all(|c| c.is_some_and(|c| c > 0 && c < 20)),
        "mid-queue commits: {committed:?}"
    );

    broker = restart(broker, dir.path(), ns.addr, topic).await;
    assert_eq!(
        stored(&broker, group, topic),
        committed,
        "recovered as acknowledged"
    );
    // B would start at the queue's end if it took "could not read" for "no offset", and at
    // 0 if it rewound: it must start exactly at the committed offsets.
    let b = LitePullConsumer::start(LitePullConsumerConfig {
        start_position: StartPosition::Last,
        ..config
    })
    .unwrap();
    b.assign(queues).await.unwrap();
    let mut first: BTreeMap<i32, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "B polled nothing from some queue: {first:?}"
        );
        for m in b.poll(Duration::from_millis(100)).await.unwrap() {
            first.entry(m.queue_id).or_insert(m.queue_offset);
        }
    }
    let expected: BTreeMap<i32, u64> = committed
        .iter()
        .map(|(q, c)| (*q, c.expect("committed")))
        .collect();
    assert_eq!(first, expected, "first poll per queue = committed offset");
    assert!(b.shutdown().await.expect("B stops").is_complete());
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_consumer_resumes_after_a_broker_restart_with_bounded_duplicates() {
    let topic = "RestartPush";
    let group = "RestartPushG";
    let Cluster {
        ns,
        mut broker,
        dir,
    } = cluster(topic, 2).await;
    let p = producer(ns.addr, "RestartPG");
    produce(&p, topic, 0, 200).await;
    // (key, queue, offset) of every delivery.
    let log: Arc<Mutex<Vec<(String, i32, u64)>>> = Arc::default();
    let listener = {
        let log = log.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            std::thread::sleep(Duration::from_millis(3));
            let mut log = log.lock().unwrap();
            for m in msgs {
                let key = m.keys.first().cloned().unwrap_or_default();
                log.push((key, m.queue_id, m.queue_offset));
            }
            ConsumeStatus::ConsumeSuccess
        })
    };
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            namesrv_addrs: vec![ns.addr],
            group: group.into(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            consume_threads: 2,
            pull_batch_size: 8,
            pull_hold: Duration::from_millis(300),
            pull_error_backoff: Duration::from_millis(100),
            rebalance_interval: Duration::from_millis(300),
            persist_interval: Duration::from_millis(100),
            heartbeat_interval: Duration::from_millis(300),
            request_timeout: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(3),
            ..PushConsumerConfig::default()
        },
        vec![(topic.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while log.lock().unwrap().len() < 80 {
        assert!(Instant::now() < deadline, "consumption never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Commits only grow, so the window measured now bounds the one at the stop.
    let committed = stored(&broker, group, topic);
    broker = restart(broker, dir.path(), ns.addr, topic).await;
    let consumed_before: Vec<(String, i32, u64)> = log.lock().unwrap().clone();
    let window = consumed_before
        .iter()
        .filter(|(_, q, o)| committed[q].is_none_or(|c| *o >= c))
        .count();
    produce(&p, topic, 200, 100).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys: HashSet<String> = log.lock().unwrap().iter().map(|e| e.0.clone()).collect();
        if (0..300).all(|i| keys.contains(&format!("k{i}"))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing may be lost: {} of 300 consumed",
            keys.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deliveries = log.lock().unwrap().clone();
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for (key, _, _) in &deliveries {
        *per_key.entry(key.as_str()).or_default() += 1;
    }
    let duplicates: usize = per_key.values().map(|n| n - 1).sum();
    println!(
        "broker restart: consumed {} before, committed {committed:?}, in-flight window {window}, \
         duplicates {duplicates}, offset store {:?}",
        consumed_before.len(),
        consumer.offset_stats()
    );
    assert!(
        duplicates <= window,
        "{duplicates} duplicates > in-flight window {window}"
    );
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    let ends: BTreeMap<i32, Option<u64>> = (0..2)
        .map(|q| {
            (
                q as i32,
                broker.context().store.queue_bounds(topic, q).map(|b| b.1),
            )
        })
        .collect();
    assert_eq!(stored(&broker, group, topic), ends, "commits reach the end");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_started_while_the_broker_is_down_waits_then_starts_at_the_committed_offset() {
    let topic = "DownLite";
    let group = "DownLiteG";
    let Cluster { ns, broker, dir } = cluster(topic, 2).await;
    let port = broker.local_addr().port();
    produce(&producer(ns.addr, "RestartPG"), topic, 0, 40).await;
    let config = LitePullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: group.into(),
        start_position: StartPosition::Last,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        route_max_age: Duration::from_secs(600),
        retry_delay: Duration::from_millis(50),
        ..LitePullConsumerConfig::default()
    };
    let a = LitePullConsumer::start(config.clone()).unwrap();
    let queues = a.pull_consumer().fetch_queues(topic).await.unwrap();
    for q in &queues {
        a.pull_consumer()
            .commit(q, 7)
            .await
            .expect("commit mid-queue");
    }
    drop(a);
    // The broker dies; the name server forgets it with its connection, so publish its route
    // again as it was (a name server that has not noticed yet).
    let addr = broker.local_addr();
    drop(broker);
    tokio::time::sleep(Duration::from_millis(200)).await;
    common::register_fake_broker(&ns, "b0", addr, topic);
    let b = LitePullConsumer::start(config).unwrap();
    b.assign(queues).await.unwrap();
    // Every offset read fails while the broker is down: B must wait, not guess.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.stats().start_lookup_failures < 4 {
        assert!(
            Instant::now() < deadline,
            "B never tried to read its offsets"
        );
        assert!(b.poll(Duration::from_millis(50)).await.unwrap().is_empty());
    }
    let broker = common::broker(dir.path(), ns.addr, "b0", port).await;
    let mut first: BTreeMap<i32, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "B polled nothing from some queue: {first:?}"
        );
        for m in b.poll(Duration::from_millis(100)).await.unwrap() {
            first.entry(m.queue_id).or_insert(m.queue_offset);
        }
    }
    println!(
        "broker down at start: {} failed offset lookups, then first polls {first:?}",
        b.stats().start_lookup_failures
    );
    assert_eq!(
        first,
        BTreeMap::from([(0, 7), (1, 7)]),
        "no rewind to min, no jump to max"
    );
    assert!(b.shutdown().await.expect("B stops").is_complete());
    broker.shutdown().await.unwrap();
}
