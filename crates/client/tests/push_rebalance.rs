//! Rebalance with orderly consumers: 3 members, 8 queues, members join and leave while
//! messages keep arriving; every message is consumed at least once, each queue's order is
//! kept across owners (broker queue locks), and after settling no queue is owned twice.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{broker, create_topic, namesrv, wait_route, wait_until, T};
use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageListener, Producer,
    ProducerConfig, PushConsumer, PushConsumerConfig,
};

/// Acknowledged deliveries in call order: (member, queue id, queue offset).
type Acks = Arc<Mutex<Vec<(&'static str, i32, u64)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_orderly_members_join_and_leave_over_eight_queues() {
    const TOTAL: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(b.local_addr(), "PR1", 8).await;
    wait_route(ns.addr, "PR1", 1).await;
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap();
    let sending = tokio::spawn(async move {
        for i in 0..TOTAL {
            producer
                .send(Message::new("PR1", format!("body-{i}")).with_key(format!("k{i}")))
                .await
                .expect("send");
            if i % 20 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let acks: Acks = Arc::default();
    let member = |name: &'static str| {
        let acks = acks.clone();
        MessageListener::orderly(move |msgs: &[MessageExt]| {
            for m in msgs {
                acks.lock()
                    .unwrap()
                    .push((name, m.queue_id, m.queue_offset));
            }
            ConsumeStatus::ConsumeSuccess
        })
    };
    let cfg = PushConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PGR1".into(),
        consume_from_where: ConsumeFromWhere::FirstOffset,
        pull_hold: Duration::from_millis(300),
        pull_error_backoff: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(300),
        persist_interval: Duration::from_millis(200),
        lock_renew_interval: Duration::from_millis(100),
        shutdown_timeout: Duration::from_secs(3),
        ..PushConsumerConfig::default()
    };
    let subs = || vec![("PR1".to_string(), "*".to_string())];
    let a = PushConsumer::start(cfg.clone(), subs(), member("a"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let bm = PushConsumer::start(cfg.clone(), subs(), member("b"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let c = PushConsumer::start(cfg.clone(), subs(), member("c"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let report = bm.shutdown().await.unwrap();
    println!("phase: b shutdown {:?}", t0.elapsed());
    assert!(report.is_complete(), "{report:?}");
    sending.await.unwrap();
    println!("phase: sending done {:?}", t0.elapsed());

    // Settled: a and c own disjoint halves of the 8 queues.
    wait_until("a 4/4 split", Duration::from_secs(10), || {
        let qa: BTreeSet<_> = a
            .assigned_queues()
            .into_iter()
            .filter(|q| q.topic == "PR1")
            .collect();
        let qc: BTreeSet<_> = c
            .assigned_queues()
            .into_iter()
            .filter(|q| q.topic == "PR1")
            .collect();
        qa.len() == 4 && qc.len() == 4 && qa.is_disjoint(&qc)
    })
    .await;
    println!("phase: settled {:?}", t0.elapsed());
    wait_until("every message", Duration::from_secs(15), || {
        let acks = acks.lock().unwrap();
        let distinct: BTreeSet<(i32, u64)> = acks.iter().map(|e| (e.1, e.2)).collect();
        distinct.len() >= TOTAL
    })
    .await;
    println!("phase: all consumed {:?}", t0.elapsed());
    let acks = acks.lock().unwrap().clone();
    let mut per_queue: BTreeMap<i32, Vec<(&str, u64)>> = BTreeMap::new();
    for (who, q, off) in &acks {
        per_queue.entry(*q).or_default().push((who, *off));
    }
    let mut duplicates = 0;
    for (q, seq) in &per_queue {
        let mut expected = 0;
        for (who, off) in seq {
            // In order across owners: never skips ahead; a replay may only restart at an
            // earlier offset when the owner changed.
            assert!(
                *off <= expected,
                "queue {q}: {who} got {off}, expected {expected}"
            );
            if *off < expected {
                duplicates += 1;
            }
            expected = expected.max(off + 1);
        }
        let owners: BTreeSet<&str> = seq.iter().map(|e| e.0).collect();
        println!("queue {q}: {} acks, owners {owners:?}", seq.len());
    }
    println!("rebalance: {} acks, {duplicates} duplicates", acks.len());
    assert_eq!(
        per_queue.values().map(|s| s.len()).sum::<usize>() - duplicates,
        TOTAL
    );
    for consumer in [a, c] {
        let report = consumer.shutdown().await.unwrap();
        assert!(report.is_complete(), "{report:?}");
    }
}
