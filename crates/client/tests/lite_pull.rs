//! LitePullConsumer end to end against an in-process name server and broker on 127.0.0.1:
//! exactly-once delivery of a produced set, resuming at committed positions, seek, pause and
//! resume, timestamp lookup, and commits that fail loudly while the broker is down.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{broker, create_topic, namesrv, producer, wait_route, T};
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, Message, MessageExt, MessageQueue, OffsetError,
    Producer, StartPosition,
};

fn config(namesrv: SocketAddr, group: &str) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: group.into(),
        start_position: StartPosition::First,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        route_max_age: Duration::from_secs(600),
        rebalance_interval: Duration::from_millis(300),
        retry_delay: Duration::from_millis(50),
        ..LitePullConsumerConfig::default()
    }
}

/// Polls until `want` messages arrived (panics after 20 s).
async fn poll_n(c: &LitePullConsumer, want: usize) -> Vec<MessageExt> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "only {} of {want} messages arrived",
            got.len()
        );
        got.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    got
}

/// Polls for `wait` and returns whatever arrived.
async fn poll_for(c: &LitePullConsumer, wait: Duration) -> Vec<MessageExt> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    while Instant::now() < deadline {
        got.extend(c.poll(Duration::from_millis(50)).await.unwrap());
    }
    got
}

async fn produce(p: &Producer, topic: &str, n: usize, prefix: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let r = p
            .send(Message::new(topic, format!("{prefix}{i}")).with_tags("t"))
            .await
            .unwrap();
        ids.push(r.msg_id);
    }
    ids
}

fn assert_dense_per_queue(messages: &[MessageExt]) {
    let mut last: BTreeMap<i32, u64> = BTreeMap::new();
    for m in messages {
        if let Some(prev) = last.insert(m.queue_id, m.queue_offset) {
            assert_eq!(
                m.queue_offset,
                prev + 1,
                "queue {} out of order",
                m.queue_id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_polls_all_300_messages_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LP300", 4).await;
    wait_route(ns.addr, "LP300", 1).await;
    let sent = produce(&producer(ns.addr, "PG"), "LP300", 300, "m").await;

    let c = LitePullConsumer::start(config(ns.addr, "G300")).unwrap();
    c.subscribe("LP300", "*").await.unwrap();
    assert_eq!(c.assignment().len(), 4, "a lone member owns every queue");
    let got = poll_n(&c, 300).await;
    let extra = poll_for(&c, Duration::from_millis(500)).await;
    assert!(extra.is_empty(), "{} duplicate deliveries", extra.len());
    let ids: HashSet<String> = got.iter().map(|m| m.msg_id.clone()).collect();
    assert_eq!(ids.len(), 300, "no duplicates");
    assert_eq!(ids, sent.into_iter().collect::<HashSet<_>>());
    assert_dense_per_queue(&got);
    let report = c.shutdown().await.unwrap();
    assert!(report.is_complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_then_new_consumer_resumes_exactly_at_committed_positions() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LPRES", 2).await;
    wait_route(ns.addr, "LPRES", 1).await;
    let sent = produce(&producer(ns.addr, "PG"), "LPRES", 100, "r").await;

    let queues: Vec<MessageQueue> = {
        let probe = LitePullConsumer::start(config(ns.addr, "GPROBE")).unwrap();
        let mut qs = probe.pull_consumer().fetch_queues("LPRES").await.unwrap();
        qs.sort();
        qs
    };
    let mut cfg = config(ns.addr, "GRES");
    cfg.max_poll_messages = 10;
    let c1 = LitePullConsumer::start(cfg.clone()).unwrap();
    c1.assign(queues.clone()).await.unwrap();
    let mut first = poll_n(&c1, 40).await;
    // Every queue must have been polled from: a queue still at its start (0, which the broker
    // already reports for a group without an offset) has nothing new to commit. How the 40
    // split between the queues depends on timing.
    let deadline = Instant::now() + Duration::from_secs(20);
    while queues
        .iter()
        .any(|q| !first.iter().any(|m| m.queue_id == q.queue_id))
    {
        assert!(Instant::now() < deadline, "a queue was never polled from");
        first.extend(c1.poll(Duration::from_millis(200)).await.unwrap());
    }
    let _ = c1.commit().await.expect("commit succeeds");
    let mut committed = BTreeMap::new();
    for q in &queues {
        let position = c1.position(q).expect("position known");
        assert_eq!(c1.committed(q).await.unwrap(), Some(position));
        committed.insert(q.queue_id, position);
    }
    // Every polled message is below its queue's committed position.
    for m in &first {
        assert!(m.queue_offset < committed[&m.queue_id]);
    }
    drop(c1);

    let c2 = LitePullConsumer::start(cfg).unwrap();
    c2.assign(queues.clone()).await.unwrap();
    let rest = poll_n(&c2, 100 - first.len()).await;
    assert!(poll_for(&c2, Duration::from_millis(300)).await.is_empty());
    for q in &queues {
        let start = rest
            .iter()
            .filter(|m| m.queue_id == q.queue_id)
            .map(|m| m.queue_offset)
            .min();
        if let Some(start) = start {
            assert_eq!(
                start, committed[&q.queue_id],
                "queue {} resumes",
                q.queue_id
            );
        }
    }
    let all: Vec<String> = first
        .iter()
        .chain(&rest)
        .map(|m| m.msg_id.clone())
        .collect();
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "no duplicates across the restart");
    assert_eq!(unique.len(), sent.len());
    assert!(c2.shutdown().await.unwrap().is_complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_backwards_rereads_and_seek_to_end_skips() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LPSEEK", 1).await;
    wait_route(ns.addr, "LPSEEK", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "LPSEEK", 20, "s").await;

    let c = LitePullConsumer::start(config(ns.addr, "GSEEK")).unwrap();
    c.subscribe("LPSEEK", "*").await.unwrap();
    let q = c.assignment().pop().expect("one queue");
    let got = poll_n(&c, 20).await;
    assert_eq!(got.last().unwrap().queue_offset, 19);

    c.seek(&q, 5).unwrap();
    let again = poll_n(&c, 15).await;
    let offsets: Vec<u64> = again.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, (5..20).collect::<Vec<_>>());
    assert_eq!(again[0].body, got[5].body);

    c.seek_to_begin(&q).await.unwrap();
    assert_eq!(poll_n(&c, 20).await[0].queue_offset, 0);
    c.seek_to_end(&q).await.unwrap();
    assert!(poll_for(&c, Duration::from_millis(300)).await.is_empty());
    produce(&p, "LPSEEK", 1, "late").await;
    assert_eq!(poll_n(&c, 1).await[0].queue_offset, 20);
    assert!(
        c.seek(&MessageQueue::default(), 0).is_err(),
        "unassigned queue"
    );
    assert!(c.shutdown().await.unwrap().is_complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_a_queue_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LPPAUSE", 2).await;
    wait_route(ns.addr, "LPPAUSE", 1).await;
    let p = producer(ns.addr, "PG");
    let c = LitePullConsumer::start(config(ns.addr, "GPAUSE")).unwrap();
    c.subscribe("LPPAUSE", "*").await.unwrap();
    let mut qs = c.assignment();
    qs.sort();
    assert_eq!(qs.len(), 2);
    for q in &qs {
        for i in 0..10 {
            p.send_to_queue(Message::new("LPPAUSE", format!("p{i}")), q)
                .await
                .unwrap();
        }
    }
    c.pause(&qs[..1]);
    assert!(c.is_paused(&qs[0]));
    let got = poll_n(&c, 10).await;
    assert!(got.iter().all(|m| m.queue_id == qs[1].queue_id));
    assert!(
        poll_for(&c, Duration::from_millis(500)).await.is_empty(),
        "a paused queue delivers nothing"
    );
    c.resume(&qs[..1]);
    let resumed = poll_n(&c, 10).await;
    assert!(resumed.iter().all(|m| m.queue_id == qs[0].queue_id));
    let offsets: Vec<u64> = resumed.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    assert!(c.shutdown().await.unwrap().is_complete());
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_for_timestamp_finds_the_first_message_at_or_after_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LPTIME", 1).await;
    wait_route(ns.addr, "LPTIME", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "LPTIME", 10, "before").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t = now_ms();
    tokio::time::sleep(Duration::from_millis(30)).await;
    produce(&p, "LPTIME", 10, "after").await;

    let c = LitePullConsumer::start(config(ns.addr, "GTIME")).unwrap();
    c.subscribe("LPTIME", "*").await.unwrap();
    let q = c.assignment().pop().unwrap();
    assert_eq!(c.offset_for_timestamp(&q, t).await.unwrap(), 10);
    assert_eq!(c.offset_for_timestamp(&q, 0).await.unwrap(), 0);
    assert!(c.shutdown().await.unwrap().is_complete());

    // The same time as a start position for a group without offsets.
    let mut cfg = config(ns.addr, "GTIME2");
    cfg.start_position = StartPosition::Timestamp(t);
    let c = LitePullConsumer::start(cfg).unwrap();
    c.subscribe("LPTIME", "*").await.unwrap();
    let got = poll_n(&c, 10).await;
    assert_eq!(got[0].queue_offset, 10);
    assert_eq!(&got[0].body[..], b"after0");
    assert!(c.shutdown().await.unwrap().is_complete());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_with_the_broker_down_returns_err_and_auto_commit_counts_failures() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "LPDOWN", 2).await;
    wait_route(ns.addr, "LPDOWN", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "LPDOWN", 20, "d").await;

    let mut cfg = config(ns.addr, "GDOWN");
    cfg.auto_commit_interval = Some(Duration::from_millis(100));
    let c = LitePullConsumer::start(cfg).unwrap();
    c.subscribe("LPDOWN", "*").await.unwrap();
    poll_n(&c, 20).await;
    let _ = c.commit().await.expect("commit while the broker is up");
    assert!(c.last_auto_commit_error().is_none());

    b.shutdown().await.unwrap();
    // Move the position so the commit has something to write.
    let q = c.assignment().pop().unwrap();
    let before = c.position(&q).unwrap();
    c.seek(&q, before.saturating_sub(1)).unwrap();
    let error = c.commit().await.expect_err("commit with the broker down");
    assert!(
        matches!(error, OffsetError::PersistFailed { failed: 1, .. }),
        "{error}"
    );

    let deadline = Instant::now() + T;
    while c.stats().auto_commit_failures == 0 {
        assert!(
            Instant::now() < deadline,
            "auto-commit failure never counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.last_auto_commit_error().is_some());
    assert!(
        c.shutdown().await.is_err(),
        "shutdown reports the failed commit"
    );
}
