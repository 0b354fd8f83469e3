//! The pull consumer's OFFSET_ILLEGAL correction (offset pitfalls C7, C8) and its
//! piggy-backed commit, against an in-process broker whose queue retention can be forced.
//!
//! RocketMQ's consumers adopt the broker's suggested offset after OFFSET_ILLEGAL, but results
//! in flight from before then commit their old offsets over it (#7634), and a store that does
//! not persist the correction at once re-reads the bad offset forever (#7740). Here the
//! correction goes through the offset store at once, marked as a correction, and lands on
//! the broker as a new generation only when the queue's state justifies it; older commits
//! are refused until the consumer follows it.

mod common;

use std::time::{Duration, Instant};

use common::{broker_config, broker_with, create_topic, namesrv, wait_route, BrokerProc, T};
use ferromq_client::{
    Message, OffsetError, Producer, ProducerConfig, PullConsumer, PullConsumerConfig, PullResult,
    ReadMode, RejectReason,
};

const TOPIC: &str = "CorrT";

async fn trimmable_broker(dir: &std::path::Path, ns: std::net::SocketAddr) -> BrokerProc {
    let config = ferromq_broker::BrokerConfig {
        mapped_file_size_commit_log: 64 * 1024,
        max_message_size: 16 * 1024,
        file_reserved_time: 0,
        ..broker_config(dir, ns, "b0", 0)
    };
    let broker = broker_with(config).await;
    create_topic(broker.local_addr(), TOPIC, 1).await;
    wait_route(ns, TOPIC, 1).await;
    broker
}

async fn produce(p: &Producer, count: usize) {
    for _ in 0..count {
        p.send(Message::new(TOPIC, vec![b'x'; 1024]))
            .await
            .expect("send");
    }
}

fn consumer(ns: std::net::SocketAddr) -> PullConsumer {
    PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: "CorrG".into(),
        pull_timeout: T,
        ..PullConsumerConfig::default()
    })
    .unwrap()
}

fn stored(broker: &BrokerProc) -> Option<(u64, u64)> {
    broker
        .context()
        .store
        .consumer_offset("CorrG", TOPIC, 0)
        .expect("offset view")
        .map(|s| (s.offset, s.generation))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_consumer_corrects_a_trimmed_offset_and_stale_commits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = trimmable_broker(dir.path(), ns.addr).await;
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "CorrPG".into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap();
    let c = consumer(ns.addr);
    c.set_correct_offset_illegal(true);
    let q = c.fetch_queues(TOPIC).await.unwrap().remove(0);
    produce(&producer, 4).await;
    c.commit(&q, 2).await.expect("first commit");
    // Retention trims the queue past the committed offset 2.
    produce(&producer, 200).await;
    broker
        .context()
        .store
        .delete_expired_segments()
        .expect("retention");
    let (min, _) = broker.context().store.queue_bounds(TOPIC, 0).unwrap();
    assert!(min > 2, "queue min {min}");
    let (_, generation) = stored(&broker).unwrap();

    // The pull at 2 is illegal; the consumer corrects through its store before returning.
    let result = c.pull(&q, "*", 2, 8).await.expect("pull");
    assert_eq!(
        result,
        PullResult::OffsetIllegal {
            suggested_offset: min
        }
    );
    assert_eq!(
        stored(&broker),
        Some((min, generation + 1)),
        "persisted as a correction"
    );
    assert_eq!(
        c.offset_store().read(&q, ReadMode::Store).await.unwrap(),
        Some(min)
    );
    // A late result from before the correction cannot overwrite it.
    let stale = c.commit(&q, min + 3).await.unwrap_err();
    assert!(
        matches!(
            stale,
            OffsetError::Rejected {
                reason: RejectReason::StaleGeneration,
                ..
            }
        ),
        "{stale}"
    );
    assert_eq!(stored(&broker), Some((min, generation + 1)));
    // Following the correction (a pull at it) lifts the fence.
    match c
        .pull(&q, "*", min, 8)
        .await
        .expect("pull at the correction")
    {
        PullResult::Found { messages, .. } => assert_eq!(messages[0].queue_offset, min),
        other => panic!("expected messages at {min}, got {other:?}"),
    }
    c.commit(&q, min + 1).await.expect("commit after following");
    // A correction the queue does not justify is refused and leaves memory as it was.
    let refused = c.offset_store().correct(&q, min).await.unwrap_err();
    assert!(
        matches!(
            refused,
            OffsetError::Rejected {
                reason: RejectReason::Regression,
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!(
        c.offset_store().read(&q, ReadMode::Memory).await.unwrap(),
        Some(min + 1)
    );
    assert_eq!(stored(&broker), Some((min + 1, generation + 1)));
    c.shutdown().await.unwrap().into_result().unwrap();
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_carries_the_in_memory_offset_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = trimmable_broker(dir.path(), ns.addr).await;
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "CorrPG".into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap();
    produce(&producer, 10).await;
    let c = consumer(ns.addr);
    let q = c.fetch_queues(TOPIC).await.unwrap().remove(0);
    // Off (the default): the pull commits nothing.
    c.offset_store().update(&q, 3);
    assert!(matches!(
        c.pull(&q, "*", 3, 2).await.unwrap(),
        PullResult::Found { .. }
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stored(&broker), None);
    // On: the broker stores the piggy-backed offset (asynchronously, unacknowledged).
    c.set_commit_on_pull(true);
    c.offset_store().update(&q, 4);
    assert!(matches!(
        c.pull(&q, "*", 4, 2).await.unwrap(),
        PullResult::Found { .. }
    ));
    let deadline = Instant::now() + T;
    while stored(&broker).map(|s| s.0) != Some(4) {
        assert!(
            Instant::now() < deadline,
            "piggy-backed commit never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.shutdown().await.unwrap();
}
