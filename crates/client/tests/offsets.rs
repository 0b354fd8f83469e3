//! Offset stores end to end: the seed scenario (a commit while the broker is down is an
//! error; the retry lands after restart; a new group member resumes exactly there; no
//! duplicates), "no offset" versus "could not ask", stale commits, and the local file store
//! keeping a correction across a restart (offset pitfalls C1–C4, C6, C7).

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    broker, create_topic, namesrv, producer, register_fake_broker, silent_server, wait_route, T,
};
use ferromq_client::{
    LocalFileOffsetStore, Message, MessageQueue, OffsetError, OffsetStore, Persister, PullConsumer,
    PullConsumerConfig, PullResult, ReadMode, RejectReason,
};

fn consumer(namesrv: std::net::SocketAddr, group: &str, timeout: Duration) -> PullConsumer {
    PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: group.into(),
        pull_timeout: timeout,
        connect_timeout: timeout,
        // Keep using the cached route while the broker is down (it unregisters on shutdown).
        route_max_age: Duration::from_secs(600),
        ..PullConsumerConfig::default()
    })
    .unwrap()
}

/// Pulls `queue` from `from` until the tail; returns the message ids and the next offset.
async fn drain(c: &PullConsumer, queue: &MessageQueue, from: u64) -> (Vec<String>, u64) {
    let mut ids = Vec::new();
    let mut offset = from;
    loop {
        match c.pull(queue, "*", offset, 32).await.expect("pull") {
            PullResult::Found {
                messages,
                next_offset,
            } => {
                for (i, m) in messages.iter().enumerate() {
                    assert_eq!(m.queue_offset, offset + i as u64, "dense offsets");
                }
                ids.extend(messages.into_iter().map(|m| m.msg_id));
                offset = next_offset;
            }
            PullResult::NoNewMessage { next_offset } => return (ids, next_offset),
            other => panic!("unexpected pull result {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_commit_while_broker_down_errs_then_lands_and_new_member_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    let port = b.local_addr().port();
    create_topic(b.local_addr(), "SEED", 2).await;
    wait_route(ns.addr, "SEED", 1).await;

    let p = producer(ns.addr, "PG");
    for i in 0..20 {
        p.send(Message::new("SEED", format!("m{i}")).with_tags("t"))
            .await
            .unwrap();
    }

    let c1 = consumer(ns.addr, "G", Duration::from_secs(1));
    let queues = c1.fetch_queues("SEED").await.unwrap();
    assert_eq!(queues.len(), 2);
    let (q0, q1) = (&queues[0], &queues[1]);
    // A new group has no offset: Ok(None), not an error and not a guess.
    assert_eq!(c1.read_offset(q0).await.unwrap(), None);

    let mut consumed: Vec<String> = Vec::new();
    let PullResult::Found {
        messages,
        next_offset,
    } = c1.pull(q0, "*", 0, 8).await.unwrap()
    else {
        panic!("expected messages");
    };
    assert_eq!((messages.len(), next_offset), (8, 8));
    consumed.extend(messages[..4].iter().map(|m| m.msg_id.clone()));
    c1.commit(q0, 4)
        .await
        .expect("commit while the broker is up");

    // The broker goes away; the consumer processes the other four and commits.
    b.shutdown().await.unwrap();
    consumed.extend(messages[4..].iter().map(|m| m.msg_id.clone()));
    let err = c1
        .commit(q0, 8)
        .await
        .expect_err("commit with the broker down must fail");
    assert!(matches!(err, OffsetError::Unreachable { .. }), "{err:?}");
    assert!(err.is_retriable());
    let err = c1
        .offset_store()
        .persist(q0)
        .await
        .expect_err("persist with the broker down must fail");
    assert!(err.is_retriable(), "{err:?}");
    let report = c1.offset_store().persist_all().await.unwrap();
    assert_eq!(report.failed.len(), 1);
    assert!(report.into_result().is_err());
    assert!(c1.offset_store().stats().persists_failed >= 3);
    // Reading the store while it is down is an error, never "no offset".
    let read = c1.offset_store().read(q0, ReadMode::Store).await;
    assert!(
        matches!(read, Err(OffsetError::Unreachable { .. })),
        "{read:?}"
    );
    assert_eq!(
        c1.offset_store().read(q0, ReadMode::Memory).await.unwrap(),
        Some(8)
    );

    // Same data directory, same port: the retry lands.
    let b = broker(dir.path(), ns.addr, "broker-a", port).await;
    let deadline = Instant::now() + T;
    loop {
        match c1.offset_store().persist(q0).await {
            Ok(()) => break,
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("retry after restart failed: {e}"),
        }
    }
    assert_eq!(
        c1.offset_store().read(q0, ReadMode::Store).await.unwrap(),
        Some(8)
    );
    // Consume the rest; every commit succeeds.
    let (ids, next) = drain(&c1, q0, 8).await;
    consumed.extend(ids);
    c1.commit(q0, next).await.unwrap();
    let (ids, next1) = drain(&c1, q1, 0).await;
    consumed.extend(ids);
    c1.commit(q1, next1).await.unwrap();
    assert_eq!(consumed.len(), 20);

    // More messages arrive; a new member of the group starts exactly at the committed offsets.
    wait_route(ns.addr, "SEED", 1).await;
    for i in 20..30 {
        p.send(Message::new("SEED", format!("m{i}"))).await.unwrap();
    }
    let c2 = consumer(ns.addr, "G", T);
    let queues2 = c2.fetch_queues("SEED").await.unwrap();
    assert_eq!(queues2, queues);
    assert_eq!(c2.read_offset(q0).await.unwrap(), Some(next));
    assert_eq!(c2.read_offset(q1).await.unwrap(), Some(next1));
    for q in &queues2 {
        let from = c2.read_offset(q).await.unwrap().unwrap();
        let (ids, end) = drain(&c2, q, from).await;
        consumed.extend(ids);
        c2.commit(q, end).await.unwrap();
    }
    let distinct: HashSet<&String> = consumed.iter().collect();
    assert_eq!(consumed.len(), 30, "every message consumed");
    assert_eq!(
        distinct.len(),
        30,
        "no duplicates when every commit succeeded"
    );
    let report = c2.shutdown().await.unwrap();
    assert!(report.is_complete());
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_distinguishes_no_offset_from_broker_down_and_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "READ", 2).await;
    wait_route(ns.addr, "READ", 1).await;
    producer(ns.addr, "PG")
        .send(Message::new("READ", "x"))
        .await
        .unwrap();

    let c = consumer(ns.addr, "fresh", Duration::from_millis(500));
    let q = c.fetch_queues("READ").await.unwrap()[0].clone();
    // The queue still holds offset 0; a guessing broker would answer 0 — we must get None.
    assert_eq!(
        c.offset_store().read(&q, ReadMode::Store).await.unwrap(),
        None
    );
    b.shutdown().await.unwrap();
    let err = c
        .offset_store()
        .read(&q, ReadMode::Store)
        .await
        .expect_err("a down broker is an error");
    assert!(matches!(err, OffsetError::Unreachable { .. }), "{err:?}");

    // A broker that accepts but never answers: a timeout is Err, never Ok(None).
    let (silent, accepted) = silent_server().await;
    register_fake_broker(&ns, "silent", silent, "QUIET");
    let c = consumer(ns.addr, "fresh", Duration::from_millis(300));
    let q = c.fetch_queues("QUIET").await.unwrap()[0].clone();
    let started = Instant::now();
    let err = c.read_offset(&q).await.expect_err("a timeout is an error");
    assert!(matches!(err, OffsetError::Unreachable { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "bounded wait");
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let err = c
        .commit(&q, 3)
        .await
        .expect_err("commit timeout is an error");
    assert!(err.is_retriable());
    assert_eq!(c.offset_store().stats().reads_failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_commit_is_rejected_with_its_own_kind_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "STALE", 1).await;
    wait_route(ns.addr, "STALE", 1).await;
    let p = producer(ns.addr, "PG");
    for i in 0..10 {
        p.send(Message::new("STALE", format!("m{i}")))
            .await
            .unwrap();
    }
    let fast = consumer(ns.addr, "G", T);
    let slow = consumer(ns.addr, "G", T);
    let q = fast.fetch_queues("STALE").await.unwrap()[0].clone();
    slow.fetch_queues("STALE").await.unwrap();
    fast.commit(&q, 9).await.unwrap();
    let err = slow
        .commit(&q, 5)
        .await
        .expect_err("a regression is refused");
    match &err {
        OffsetError::Rejected { reason, offset, .. } => {
            assert_eq!(*reason, RejectReason::Regression);
            assert_eq!(*offset, 5);
        }
        other => panic!("expected a stale rejection, got {other:?}"),
    }
    assert!(err.is_stale() && !err.is_retriable());
    assert_eq!(slow.offset_store().stats().stale_rejections, 1);
    let err = slow.commit(&q, 50).await.expect_err("past max is refused");
    assert!(
        matches!(
            err,
            OffsetError::Rejected {
                reason: RejectReason::PastMax,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        fast.offset_store().read(&q, ReadMode::Store).await.unwrap(),
        Some(9)
    );
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn local_file_store_keeps_a_correction_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let q = MessageQueue {
        topic: "B".into(),
        broker_name: "broker-a".into(),
        queue_id: 3,
    };
    {
        let store = LocalFileOffsetStore::open(dir.path(), "broadcast/G").unwrap();
        assert_eq!(
            store
                .read(&q, ReadMode::MemoryFirstThenStore)
                .await
                .unwrap(),
            None
        );
        // A bad offset gets persisted (e.g. from an earlier run) ...
        store.update(&q, 1_000);
        store.persist(&q).await.unwrap();
        // ... OFFSET_ILLEGAL then suggests 42: the correction is written at once.
        store.correct(&q, 42).await.unwrap();
        // Later progress only in memory, then the process dies without persisting.
        store.update(&q, 50);
        assert_eq!(store.stats().persists_ok, 2);
    }
    let store: Arc<dyn OffsetStore> =
        Arc::new(LocalFileOffsetStore::open(dir.path(), "broadcast/G").unwrap());
    assert_eq!(store.read(&q, ReadMode::Store).await.unwrap(), Some(42));
    assert_eq!(
        store
            .read(&q, ReadMode::MemoryFirstThenStore)
            .await
            .unwrap(),
        Some(42)
    );
    // No temp file is left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["broadcast%2FG.offsets.json".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_persister_backs_off_while_the_broker_is_down_then_lands() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    let port = b.local_addr().port();
    create_topic(b.local_addr(), "BG", 1).await;
    wait_route(ns.addr, "BG", 1).await;
    let p = producer(ns.addr, "PG");
    for i in 0..3 {
        p.send(Message::new("BG", format!("m{i}"))).await.unwrap();
    }
    let c = consumer(ns.addr, "G", Duration::from_millis(500));
    let q = c.fetch_queues("BG").await.unwrap()[0].clone();
    b.shutdown().await.unwrap();

    c.offset_store().update(&q, 3);
    let persister = Persister::spawn(
        c.offset_store().clone(),
        Duration::from_millis(50),
        Duration::from_millis(400),
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let failed = c.offset_store().stats().persists_failed;
    assert!(failed >= 1, "the persister tried and counted failures");
    assert!(
        failed <= 8,
        "it backed off instead of retrying every 50 ms: {failed}"
    );

    let b = broker(dir.path(), ns.addr, "broker-a", port).await;
    wait_route(ns.addr, "BG", 1).await;
    let reader = consumer(ns.addr, "G", T);
    reader.fetch_queues("BG").await.unwrap();
    let deadline = Instant::now() + T;
    loop {
        if reader
            .offset_store()
            .read(&q, ReadMode::Store)
            .await
            .unwrap()
            == Some(3)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the background retry never landed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = persister.shutdown().await.unwrap();
    assert!(report.is_complete());
    assert_eq!(report.unchanged, 1);
    b.shutdown().await.unwrap();
}
