//! Push consumer start offsets and corrections: an unanswered offset read makes the queue
//! wait instead of guessing (pitfall C6), OFFSET_ILLEGAL is corrected and persisted at once
//! (C7/C8), and broadcasting keeps its local offsets across a restart.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{broker, create_topic, namesrv, produce, producer, wait_route, wait_until};
use ferromq_client::offset_store::BoxFuture;
use ferromq_client::{
    BrokerOffsetStore, ConsumeFromWhere, ConsumeStatus, MessageExt, MessageListener, MessageModel,
    MessageQueue, OffsetError, OffsetStore, OffsetStoreStats, PersistReport, PullConsumer,
    PullConsumerConfig, PushConsumer, PushConsumerConfig, ReadMode,
};

/// A broker store whose reads of `topic` can fail or lie, recording corrections.
#[derive(Debug)]
struct Faulty {
    inner: BrokerOffsetStore,
    topic: String,
    failing_reads: AtomicUsize,
    failed_reads: AtomicUsize,
    lie_once: Mutex<Option<u64>>,
    corrections: Mutex<Vec<(MessageQueue, u64)>>,
}

impl OffsetStore for Faulty {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.inner.update(queue, offset)
    }
    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        self.corrections
            .lock()
            .unwrap()
            .push((queue.clone(), offset));
        self.inner.correct(queue, offset)
    }
    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        self.inner.persist(queue)
    }
    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        self.inner.persist_all()
    }
    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        if queue.topic == self.topic {
            if self
                .failing_reads
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                self.failed_reads.fetch_add(1, Ordering::SeqCst);
                let error = OffsetError::Unexpected {
                    queue: queue.clone(),
                    addr: "127.0.0.1:1".parse().unwrap(),
                    code: 1,
                    remark: "injected: broker cannot be asked".into(),
                };
                return Box::pin(async move { Err(error) });
            }
            if let Some(lie) = self.lie_once.lock().unwrap().take() {
                return Box::pin(async move { Ok(Some(lie)) });
            }
        }
        self.inner.read(queue, mode)
    }
    fn remove(&self, queue: &MessageQueue) {
        self.inner.remove(queue)
    }
    fn stats(&self) -> OffsetStoreStats {
        self.inner.stats()
    }
}

fn config(ns: SocketAddr, group: &str) -> PushConsumerConfig {
    PushConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        consume_from_where: ConsumeFromWhere::LastOffset,
        pull_hold: Duration::from_millis(300),
        pull_error_backoff: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(300),
        persist_interval: Duration::from_millis(200),
        shutdown_timeout: Duration::from_secs(3),
        ..PushConsumerConfig::default()
    }
}

type Offsets = Arc<Mutex<Vec<(u64, String)>>>;

fn recording(log: &Offsets) -> MessageListener {
    let log = log.clone();
    MessageListener::concurrently(move |msgs: &[MessageExt]| {
        let mut log = log.lock().unwrap();
        for m in msgs {
            log.push((m.queue_offset, m.keys.first().cloned().unwrap_or_default()));
        }
        ConsumeStatus::ConsumeSuccess
    })
}

fn faulty(
    topic: &str,
    failing_reads: usize,
    lie_once: Option<u64>,
    store: BrokerOffsetStore,
) -> Arc<Faulty> {
    Arc::new(Faulty {
        inner: store,
        topic: topic.to_string(),
        failing_reads: AtomicUsize::new(failing_reads),
        failed_reads: AtomicUsize::new(0),
        lie_once: Mutex::new(lie_once),
        corrections: Mutex::new(Vec::new()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unanswered_offset_read_waits_and_never_falls_back_to_consume_from_where() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(b.local_addr(), "PO1", 1).await;
    wait_route(ns.addr, "PO1", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "PO1", 0, 10).await;
    // The group's stored offset is 5.
    let reader = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PGO1".into(),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    let queue = reader.routes().read_queues("PO1").await.unwrap()[0].clone();
    reader.commit(&queue, 5).await.unwrap();

    let log: Offsets = Arc::default();
    let mut handle = None;
    let consumer = PushConsumer::start_with_store(
        config(ns.addr, "PGO1"),
        vec![("PO1".into(), "*".into())],
        recording(&log),
        |g, r, pool, t| {
            let store = faulty("PO1", 3, None, BrokerOffsetStore::new(g, r, pool, t));
            handle = Some(store.clone());
            store
        },
    )
    .await
    .unwrap();
    let store = handle.unwrap();
    wait_until("k5..k9", Duration::from_secs(10), || {
        log.lock().unwrap().len() >= 5
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut got: Vec<u64> = log.lock().unwrap().iter().map(|e| e.0).collect();
    got.sort_unstable();
    assert_eq!(got, vec![5, 6, 7, 8, 9], "started at the stored offset");
    assert_eq!(store.failed_reads.load(Ordering::SeqCst), 3);
    let report = consumer.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        reader
            .offset_store()
            .read(&queue, ReadMode::Store)
            .await
            .unwrap(),
        Some(10)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offset_illegal_is_corrected_and_persisted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(b.local_addr(), "PO2", 1).await;
    wait_route(ns.addr, "PO2", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "PO2", 0, 10).await;
    let log: Offsets = Arc::default();
    let mut handle = None;
    let consumer = PushConsumer::start_with_store(
        config(ns.addr, "PGO2"),
        vec![("PO2".into(), "*".into())],
        recording(&log),
        |g, r, pool, t| {
            let store = faulty("PO2", 0, Some(1000), BrokerOffsetStore::new(g, r, pool, t));
            handle = Some(store.clone());
            store
        },
    )
    .await
    .unwrap();
    let store = handle.unwrap();
    wait_until("the correction", Duration::from_secs(10), || {
        !store.corrections.lock().unwrap().is_empty()
    })
    .await;
    let corrections = store.corrections.lock().unwrap().clone();
    assert_eq!(corrections.len(), 1, "{corrections:?}");
    assert_eq!(corrections[0].1, 10, "corrected to the broker's suggestion");
    // Persisted at once: the broker has it before any message is consumed.
    let reader = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PGO2".into(),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    assert_eq!(
        reader.read_offset(&corrections[0].0).await.unwrap(),
        Some(10)
    );
    produce(&p, "PO2", 10, 5).await;
    wait_until("k10..k14", Duration::from_secs(10), || {
        log.lock().unwrap().len() >= 5
    })
    .await;
    let mut got: Vec<u64> = log.lock().unwrap().iter().map(|e| e.0).collect();
    got.sort_unstable();
    assert_eq!(got, vec![10, 11, 12, 13, 14]);
    assert_eq!(consumer.stats().corrections, 1);
    let report = consumer.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broadcasting_members_each_get_everything_and_resume_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(b.local_addr(), "PO3", 2).await;
    wait_route(ns.addr, "PO3", 1).await;
    let p = producer(ns.addr, "PG");
    produce(&p, "PO3", 0, 40).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let broadcast = |dir: &tempfile::TempDir| PushConsumerConfig {
        message_model: MessageModel::Broadcasting,
        consume_from_where: ConsumeFromWhere::FirstOffset,
        local_offset_dir: Some(dir.path().to_path_buf()),
        ..config(ns.addr, "PGO3")
    };
    let (log_a, log_b): (Offsets, Offsets) = (Arc::default(), Arc::default());
    let subs = || vec![("PO3".to_string(), "*".to_string())];
    let a = PushConsumer::start(broadcast(&dir_a), subs(), recording(&log_a))
        .await
        .unwrap();
    let b2 = PushConsumer::start(broadcast(&dir_b), subs(), recording(&log_b))
        .await
        .unwrap();
    wait_until("both get 40", Duration::from_secs(10), || {
        log_a.lock().unwrap().len() >= 40 && log_b.lock().unwrap().len() >= 40
    })
    .await;
    let report = a.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    produce(&p, "PO3", 40, 10).await;
    let log_a2: Offsets = Arc::default();
    let a = PushConsumer::start(broadcast(&dir_a), subs(), recording(&log_a2))
        .await
        .unwrap();
    wait_until("the 10 new ones", Duration::from_secs(10), || {
        log_a2.lock().unwrap().len() >= 10 && log_b.lock().unwrap().len() >= 50
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut keys: Vec<String> = log_a2.lock().unwrap().iter().map(|e| e.1.clone()).collect();
    keys.sort();
    let mut want: Vec<String> = (40..50).map(|i| format!("k{i}")).collect();
    want.sort();
    assert_eq!(keys, want, "resumed from the local offsets");
    let per_key: BTreeMap<String, usize> =
        log_b
            .lock()
            .unwrap()
            .iter()
            .fold(BTreeMap::new(), |mut m, e| {
                *m.entry(e.1.clone()).or_default() += 1;
                m
            });
    assert_eq!(per_key.len(), 50);
    assert!(per_key.values().all(|n| *n == 1));
    for c in [a, b2] {
        let report = c.shutdown().await.unwrap();
        assert!(report.is_complete(), "{report:?}");
    }
}
