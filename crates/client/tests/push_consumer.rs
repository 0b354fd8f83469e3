//! Push consumer end to end against an in-process name server and broker: exactly-once
//! delivery without failures, queue sharing and takeover in a group, ReconsumeLater through
//! the retry topic, the duplicate window after a crash, and orderly consumption.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{cluster, produce, producer, wait_until, T};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, MessageExt, MessageListener, MessageQueue, PullConsumer,
    PullConsumerConfig, PushConsumer, PushConsumerConfig,
};

fn config(ns: SocketAddr, group: &str) -> PushConsumerConfig {
    PushConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        consume_from_where: ConsumeFromWhere::FirstOffset,
        pull_hold: Duration::from_millis(500),
        pull_error_backoff: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(300),
        persist_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_secs(1),
        local_retry_delay: Duration::from_millis(200),
        shutdown_timeout: Duration::from_secs(3),
        ..PushConsumerConfig::default()
    }
}

/// Every delivery: (consumer label, key, queue id, queue offset, reconsume times, topic).
type Log = Arc<Mutex<Vec<(String, String, i32, u64, i32, String)>>>;

fn recording(log: &Log, label: &str) -> MessageListener {
    let log = log.clone();
    let label = label.to_string();
    MessageListener::concurrently(move |msgs: &[MessageExt]| {
        let mut log = log.lock().unwrap();
        for m in msgs {
            log.push(entry(&label, m));
        }
        ConsumeStatus::ConsumeSuccess
    })
}

fn entry(label: &str, m: &MessageExt) -> (String, String, i32, u64, i32, String) {
    (
        label.to_string(),
        m.keys.first().cloned().unwrap_or_default(),
        m.queue_id,
        m.queue_offset,
        m.reconsume_times,
        m.topic.to_string(),
    )
}

fn keys_of(log: &Log, label: Option<&str>) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|e| label.is_none_or(|l| e.0 == l))
        .map(|e| e.1.clone())
        .collect()
}

fn reader(ns: SocketAddr, group: &str) -> PullConsumer {
    PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        pull_timeout: T,
        ..PullConsumerConfig::default()
    })
    .unwrap()
}

fn user_queues(c: &PushConsumer, topic: &str) -> Vec<MessageQueue> {
    c.assigned_queues()
        .into_iter()
        .filter(|q| q.topic == topic)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_consumer_gets_500_exactly_once_and_commits_reach_the_end() {
    let c = cluster("PT1", 4).await;
    let p = producer(c.ns.addr, "PG");
    produce(&p, "PT1", 0, 500).await;
    let log: Log = Arc::default();
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            consume_batch_max: 8,
            ..config(c.ns.addr, "PG1")
        },
        vec![("PT1".into(), "*".into())],
        recording(&log, "a"),
    )
    .await
    .unwrap();
    wait_until("500 messages", Duration::from_secs(10), || {
        log.lock().unwrap().len() >= 500
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = keys_of(&log, None);
    assert_eq!(keys.len(), 500, "no duplicate");
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 500);
    let stats = consumer.stats();
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(stats.consumed_ok, 500);
    let r = reader(c.ns.addr, "PG1");
    let queues = r.routes().read_queues("PT1").await.unwrap();
    let mut total = 0;
    for q in &queues {
        let committed = r.read_offset(q).await.unwrap();
        let max = r.max_offset(q).await.unwrap();
        assert_eq!(committed, Some(max), "{q:?}");
        total += max;
    }
    assert_eq!(total, 500);
    drop(c.broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_consumers_split_the_queues_and_one_takes_over() {
    let c = cluster("PT2", 4).await;
    let p = producer(c.ns.addr, "PG");
    let log: Log = Arc::default();
    let a = PushConsumer::start(
        config(c.ns.addr, "PG2"),
        vec![("PT2".into(), "*".into())],
        recording(&log, "a"),
    )
    .await
    .unwrap();
    let b = PushConsumer::start(
        config(c.ns.addr, "PG2"),
        vec![("PT2".into(), "*".into())],
        recording(&log, "b"),
    )
    .await
    .unwrap();
    wait_until("a 2/2 split", Duration::from_secs(10), || {
        let (qa, qb) = (user_queues(&a, "PT2"), user_queues(&b, "PT2"));
        qa.len() == 2 && qb.len() == 2 && qa.iter().all(|q| !qb.contains(q))
    })
    .await;
    produce(&p, "PT2", 0, 200).await;
    wait_until("200 messages", Duration::from_secs(10), || {
        log.lock().unwrap().len() >= 200
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (ka, kb) = (keys_of(&log, Some("a")), keys_of(&log, Some("b")));
    let sa: HashSet<&String> = ka.iter().collect();
    let sb: HashSet<&String> = kb.iter().collect();
    println!("split: a got {}, b got {}", ka.len(), kb.len());
    assert_eq!(sa.intersection(&sb).count(), 0, "overlap in steady state");
    assert_eq!(ka.len() + kb.len(), 200, "each message once");
    assert!(!ka.is_empty() && !kb.is_empty());

    let report = a.shutdown().await.expect("shutdown a");
    assert!(report.is_complete(), "{report:?}");
    wait_until("b owns all 4 queues", Duration::from_secs(10), || {
        user_queues(&b, "PT2").len() == 4
    })
    .await;
    produce(&p, "PT2", 200, 100).await;
    wait_until("b gets the new messages", Duration::from_secs(10), || {
        let kb: HashSet<String> = keys_of(&log, Some("b")).into_iter().collect();
        (200..300).all(|i| kb.contains(&format!("k{i}")))
    })
    .await;
    let all: HashSet<String> = keys_of(&log, None).into_iter().collect();
    assert_eq!(all.len(), 300);
    let report = b.shutdown().await.expect("shutdown b");
    assert!(report.is_complete(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconsume_later_goes_through_the_retry_topic_then_is_acknowledged() {
    let c = cluster("PT3", 2).await;
    let p = producer(c.ns.addr, "PG");
    produce(&p, "PT3", 0, 20).await;
    let log: Log = Arc::default();
    let listener = {
        let log = log.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            let mut log = log.lock().unwrap();
            for m in msgs {
                log.push(entry("a", m));
            }
            if msgs
                .iter()
                .any(|m| m.keys.first().is_some_and(|k| k == "k7") && m.reconsume_times == 0)
            {
                ConsumeStatus::ReconsumeLater
            } else {
                ConsumeStatus::ConsumeSuccess
            }
        })
    };
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            send_back_delay_level: 1, // 1 s
            ..config(c.ns.addr, "PG3")
        },
        vec![("PT3".into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    wait_until("the redelivery of k7", Duration::from_secs(15), || {
        log.lock().unwrap().iter().any(|e| e.1 == "k7" && e.4 == 1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deliveries: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.1 == "k7")
        .cloned()
        .collect();
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    assert_eq!(deliveries[1].4, 1, "reconsume times");
    assert_eq!(deliveries[1].5, "PT3", "shown with its original topic");
    assert_eq!(keys_of(&log, None).len(), 21);
    let stats = consumer.stats();
    assert_eq!(stats.sent_back, 1, "{stats:?}");
    assert_eq!(stats.reconsume_later, 1, "{stats:?}");
    let report = consumer.shutdown().await.expect("shutdown");
    assert!(report.is_complete(), "{report:?}");
    // The retry queue's offset is committed past the redelivered message.
    let r = reader(c.ns.addr, "PG3");
    let retry = r.routes().read_queues("%RETRY%PG3").await.unwrap();
    let mut committed = 0;
    for q in &retry {
        committed += r.read_offset(q).await.unwrap().unwrap_or(0);
    }
    assert_eq!(committed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_and_restart_duplicates_stay_within_the_in_flight_window() {
    let c = cluster("PT4", 4).await;
    let p = producer(c.ns.addr, "PG");
    produce(&p, "PT4", 0, 400).await;
    let log: Log = Arc::default();
    let slow = {
        let log = log.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            std::thread::sleep(Duration::from_millis(5));
            let mut log = log.lock().unwrap();
            for m in msgs {
                log.push(entry("a", m));
            }
            ConsumeStatus::ConsumeSuccess
        })
    };
    // Consumer A runs on its own runtime: dropping the runtime is its crash.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let a = runtime
        .spawn(PushConsumer::start(
            PushConsumerConfig {
                consume_threads: 2,
                persist_interval: Duration::from_millis(100),
                ..config(c.ns.addr, "PG4")
            },
            vec![("PT4".into(), "*".into())],
            slow,
        ))
        .await
        .unwrap()
        .unwrap();
    wait_until("A consumed 150", Duration::from_secs(10), || {
        log.lock().unwrap().len() >= 150
    })
    .await;
    runtime.shutdown_background();
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await; // running listeners finish
    let consumed_by_a: Vec<(i32, u64, String)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.2, e.3, e.1.clone()))
        .collect();
    // The last acknowledged commits.
    let r = reader(c.ns.addr, "PG4");
    let mut committed: HashMap<i32, u64> = HashMap::new();
    for q in r.routes().read_queues("PT4").await.unwrap() {
        committed.insert(q.queue_id, r.read_offset(&q).await.unwrap().unwrap_or(0));
    }
    let window = consumed_by_a
        .iter()
        .filter(|(q, off, _)| *off >= committed[q])
        .count();

    let log_b: Log = Arc::default();
    let b = PushConsumer::start(
        config(c.ns.addr, "PG4"),
        vec![("PT4".into(), "*".into())],
        recording(&log_b, "b"),
    )
    .await
    .unwrap();
    let a_keys: HashSet<String> = consumed_by_a.iter().map(|e| e.2.clone()).collect();
    wait_until("every message consumed", Duration::from_secs(15), || {
        let b_keys: HashSet<String> = keys_of(&log_b, None).into_iter().collect();
        (0..400).all(|i| {
            let k = format!("k{i}");
            a_keys.contains(&k) || b_keys.contains(&k)
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b_keys = keys_of(&log_b, None);
    let duplicates = b_keys.iter().filter(|k| a_keys.contains(*k)).count();
    println!(
        "crash: A consumed {}, committed {:?}, in-flight window {}, duplicates after restart {}",
        consumed_by_a.len(),
        committed,
        window,
        duplicates
    );
    let committed_total: u64 = committed.values().sum();
    assert!(committed_total > 0, "some commit landed before the crash");
    assert!(window < consumed_by_a.len(), "the window is not everything");
    assert!(
        duplicates <= window,
        "{duplicates} duplicates > window {window}"
    );
    assert_eq!(b_keys.len(), b_keys.iter().collect::<HashSet<_>>().len());
    let report = b.shutdown().await.expect("shutdown b");
    assert!(report.is_complete(), "{report:?}");
}

/// Orderly deliveries: (consumer label, queue id, queue offset, acknowledged).
type Deliveries = Arc<Mutex<Vec<(String, i32, u64, bool)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orderly_listener_gets_each_queue_in_order() {
    let c = cluster("PT5", 4).await;
    let p = producer(c.ns.addr, "PG");
    produce(&p, "PT5", 0, 200).await;
    let deliveries: Deliveries = Arc::default();
    let orderly = |label: &'static str| {
        let deliveries = deliveries.clone();
        MessageListener::orderly(move |msgs: &[MessageExt]| {
            assert_eq!(msgs.len(), 1, "one message at a time");
            let m = &msgs[0];
            // Refuse offset 5 of every queue once: the queue must wait for it.
            let ok = !(m.queue_offset == 5 && m.reconsume_times == 0);
            deliveries
                .lock()
                .unwrap()
                .push((label.to_string(), m.queue_id, m.queue_offset, ok));
            if ok {
                ConsumeStatus::ConsumeSuccess
            } else {
                ConsumeStatus::ReconsumeLater
            }
        })
    };
    let cfg = PushConsumerConfig {
        lock_renew_interval: Duration::from_millis(200),
        orderly_suspend: Duration::from_millis(100),
        ..config(c.ns.addr, "PG5")
    };
    let a = PushConsumer::start(cfg.clone(), vec![("PT5".into(), "*".into())], orderly("a"))
        .await
        .unwrap();
    let b = PushConsumer::start(cfg, vec![("PT5".into(), "*".into())], orderly("b"))
        .await
        .unwrap();
    wait_until("200 acknowledged", Duration::from_secs(15), || {
        deliveries.lock().unwrap().iter().filter(|d| d.3).count() >= 200
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let all = deliveries.lock().unwrap().clone();
    let mut per_queue: BTreeMap<i32, Vec<(u64, bool)>> = BTreeMap::new();
    for (_, q, off, ok) in &all {
        per_queue.entry(*q).or_default().push((*off, *ok));
    }
    for (q, seq) in &per_queue {
        // Acknowledged offsets are consecutive from 0; a refused message is retried before
        // any later one of its queue.
        let acked: Vec<u64> = seq.iter().filter(|d| d.1).map(|d| d.0).collect();
        assert_eq!(
            acked,
            (0..acked.len() as u64).collect::<Vec<_>>(),
            "queue {q}"
        );
        for w in seq.windows(2) {
            assert!(
                w[1].0 == w[0].0 + 1 || (w[1].0 == w[0].0 && !w[0].1),
                "queue {q}: {seq:?}"
            );
        }
    }
    assert_eq!(all.iter().filter(|d| d.3).count(), 200, "no duplicate");
    let ra = a.shutdown().await.expect("shutdown a");
    let rb = b.shutdown().await.expect("shutdown b");
    assert!(ra.is_complete() && rb.is_complete(), "{ra:?} {rb:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn always_failing_message_ends_in_the_dlq_after_max_reconsume_times() {
    let c = cluster("PT6", 1).await;
    let p = producer(c.ns.addr, "PG");
    produce(&p, "PT6", 0, 5).await;
    let log: Log = Arc::default();
    let listener = {
        let log = log.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            let mut log = log.lock().unwrap();
            for m in msgs {
                log.push(entry("a", m));
            }
            if msgs
                .iter()
                .any(|m| m.keys.first().is_some_and(|k| k == "k3"))
            {
                ConsumeStatus::ReconsumeLater
            } else {
                ConsumeStatus::ConsumeSuccess
            }
        })
    };
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            send_back_delay_level: 1,
            max_reconsume_times: 1,
            ..config(c.ns.addr, "PG6")
        },
        vec![("PT6".into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    wait_until("two sends back", Duration::from_secs(15), || {
        consumer.stats().sent_back >= 2
    })
    .await;
    let r = reader(c.ns.addr, "PG6-reader");
    let deadline = Instant::now() + T;
    let dlq_queue = loop {
        match r.routes().refresh("%DLQ%PG6").await {
            Ok(route) if !route.data.queue_datas.is_empty() => {
                break r.routes().read_queues("%DLQ%PG6").await.unwrap()[0].clone()
            }
            _ => {
                assert!(Instant::now() < deadline, "no DLQ route");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let found = match r.pull(&dlq_queue, "*", 0, 32).await.unwrap() {
        ferromq_client::PullResult::Found { messages, .. } => messages,
        other => panic!("DLQ empty: {other:?}"),
    };
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].keys, vec!["k3".to_string()]);
    let k3: Vec<i32> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.1 == "k3")
        .map(|e| e.4)
        .collect();
    assert_eq!(
        k3,
        vec![0, 1],
        "original delivery, one redelivery, then the DLQ"
    );
    let report = consumer.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
}
