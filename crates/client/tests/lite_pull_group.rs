//! Several lite pull consumers in one group (subscribe mode): the queues are rebalanced as
//! members join and leave, every message is consumed at least once, and once the group
//! settles no queue is owned by two members and none by nobody.
//!
//! RocketMQ's lite pull consumer rebalances on a timer only; ferromq's also rebalances on
//! NOTIFY_CONSUMER_IDS_CHANGED. A member leaving commits its positions first, so the next
//! owner resumes there.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{broker, create_topic, namesrv, wait_route, T};
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, Message, MessageQueue, Producer, ProducerConfig,
    StartPosition,
};
use tokio::task::JoinHandle;

const TOPIC: &str = "LiteGroupT";
const GROUP: &str = "LiteGroupG";
const QUEUES: i32 = 6;

/// Every delivery: (member, key).
type Log = Arc<Mutex<Vec<(String, String)>>>;

struct Member {
    name: String,
    consumer: Arc<LitePullConsumer>,
    stop: Arc<AtomicBool>,
    commit_failures: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

async fn join(ns: SocketAddr, name: &str, log: &Log) -> Member {
    let consumer = LitePullConsumer::start(LitePullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: GROUP.into(),
        start_position: StartPosition::First,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        rebalance_interval: Duration::from_millis(300),
        heartbeat_interval: Duration::from_millis(500),
        retry_delay: Duration::from_millis(50),
        ..LitePullConsumerConfig::default()
    })
    .unwrap();
    consumer.subscribe(TOPIC, "*").await.unwrap();
    let consumer = Arc::new(consumer);
    let stop = Arc::new(AtomicBool::new(false));
    let commit_failures = Arc::new(AtomicU64::new(0));
    let task = {
        let (consumer, stop, failures) = (consumer.clone(), stop.clone(), commit_failures.clone());
        let (log, name) = (log.clone(), name.to_string());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let messages = consumer.poll(Duration::from_millis(50)).await.unwrap();
                if messages.is_empty() {
                    continue;
                }
                log.lock().unwrap().extend(
                    messages
                        .iter()
                        .map(|m| (name.clone(), m.keys.first().cloned().unwrap_or_default())),
                );
                // A queue that moved to another member may refuse a commit as stale; the
                // messages are then delivered again (at least once).
                if consumer.commit().await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    Member {
        name: name.to_string(),
        consumer,
        stop,
        commit_failures,
        task,
    }
}

async fn leave(member: Member) {
    member.stop.store(true, Ordering::SeqCst);
    member.task.await.unwrap();
    let consumer = Arc::try_unwrap(member.consumer).expect("the poll task is gone");
    // The final commit may race with a rebalance; a refusal is at-least-once, not loss.
    if let Err(error) = consumer.shutdown().await {
        println!("{} left with a failed final commit: {error}", member.name);
    }
}

/// Waits until the members' assignments are disjoint and cover every queue.
async fn settled(members: &[&Member]) -> Vec<Vec<MessageQueue>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let assignments: Vec<Vec<MessageQueue>> =
            members.iter().map(|m| m.consumer.assignment()).collect();
        let total: usize = assignments.iter().map(Vec::len).sum();
        let distinct: BTreeSet<&MessageQueue> = assignments.iter().flatten().collect();
        let fair = assignments.iter().all(|a| !a.is_empty());
        if total == QUEUES as usize && distinct.len() == QUEUES as usize && fair {
            return assignments;
        }
        assert!(
            Instant::now() < deadline,
            "never settled: {:?}",
            assignments
                .iter()
                .map(|a| a.iter().map(|q| q.queue_id).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn produce(p: &Producer, from: usize, n: usize) {
    for i in from..from + n {
        p.send(Message::new(TOPIC, format!("m{i}")).with_key(format!("k{i}")))
            .await
            .expect("send");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_joining_and_leaving_share_the_queues_and_consume_everything() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(broker.local_addr(), TOPIC, QUEUES).await;
    wait_route(ns.addr, TOPIC, 1).await;
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "LiteGroupPG".into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap();
    let log: Log = Arc::default();
    produce(&p, 0, 120).await;

    let a = join(ns.addr, "a", &log).await;
    assert_eq!(settled(&[&a]).await[0].len(), QUEUES as usize);
    let b = join(ns.addr, "b", &log).await;
    let two = settled(&[&a, &b]).await;
    assert_eq!((two[0].len(), two[1].len()), (3, 3), "average allocation");
    produce(&p, 120, 120).await;
    let c = join(ns.addr, "c", &log).await;
    let three = settled(&[&a, &b, &c]).await;
    assert!(three.iter().all(|q| q.len() == 2), "{three:?}");
    produce(&p, 240, 120).await;
    leave(b).await;
    settled(&[&a, &c]).await;
    produce(&p, 360, 120).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys: HashSet<String> = log.lock().unwrap().iter().map(|e| e.1.clone()).collect();
        let missing = (0..480)
            .filter(|i| !keys.contains(&format!("k{i}")))
            .count();
        if missing == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{missing} of 480 never consumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let final_assignment = settled(&[&a, &c]).await;
    let deliveries = log.lock().unwrap().len();
    let by_member = |name: &str| log.lock().unwrap().iter().filter(|e| e.0 == name).count();
    println!(
        "lite group: {deliveries} deliveries of 480 messages (a {}, b {}, c {}), commit failures \
         a {} c {}, final assignment {:?}",
        by_member("a"),
        by_member("b"),
        by_member("c"),
        a.commit_failures.load(Ordering::Relaxed),
        c.commit_failures.load(Ordering::Relaxed),
        final_assignment
            .iter()
            .map(|a| a.iter().map(|q| q.queue_id).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    assert!(
        by_member("b") > 0 && by_member("c") > 0,
        "every member took part"
    );
    leave(a).await;
    leave(c).await;
    broker.shutdown().await.unwrap();
}
