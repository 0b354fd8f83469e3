//! The push consumer's uncommitted window: while commits fail (a deposed or unreachable
//! master), a queue is pulled at most `max_uncommitted_per_queue` (plus one pull batch) past
//! its last acknowledged commit, so a restart or failover can deliver at most that much again;
//! once commits land again it resumes.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{broker, create_topic, namesrv, produce, producer, wait_route, wait_until};
use ferromq_client::offset_store::BoxFuture;
use ferromq_client::{
    BrokerOffsetStore, ConsumeFromWhere, ConsumeStatus, MessageExt, MessageListener, MessageQueue,
    OffsetError, OffsetStore, OffsetStoreStats, PersistReport, PullConsumer, PullConsumerConfig,
    PushConsumer, PushConsumerConfig, ReadMode,
};

/// A broker store whose commits are refused while `refusing` is set.
#[derive(Debug)]
struct Refusing {
    inner: BrokerOffsetStore,
    refusing: AtomicBool,
    known: Mutex<BTreeSet<MessageQueue>>,
}

impl Refusing {
    fn refusal(queue: &MessageQueue) -> OffsetError {
        OffsetError::Unexpected {
            queue: queue.clone(),
            addr: "127.0.0.1:1".parse().unwrap(),
            code: 2111,
            remark: "injected: the master was deposed".into(),
        }
    }
}

impl OffsetStore for Refusing {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.known.lock().unwrap().insert(queue.clone());
        self.inner.update(queue, offset)
    }
    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        self.inner.correct(queue, offset)
    }
    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        if self.refusing.load(Ordering::SeqCst) {
            let error = Self::refusal(queue);
            return Box::pin(async move { Err(error) });
        }
        self.inner.persist(queue)
    }
    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        if !self.refusing.load(Ordering::SeqCst) {
            return self.inner.persist_all();
        }
        let mut report = PersistReport::default();
        for queue in self.known.lock().unwrap().iter() {
            report.record(queue.clone(), Err(Self::refusal(queue)));
        }
        Box::pin(async move { Ok(report) })
    }
    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        self.inner.read(queue, mode)
    }
    fn remove(&self, queue: &MessageQueue) {
        self.inner.remove(queue)
    }
    fn stats(&self) -> OffsetStoreStats {
        self.inner.stats()
    }
    fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        self.inner.acknowledged(queue)
    }
    fn reports_acknowledged(&self) -> bool {
        self.inner.reports_acknowledged()
    }
}

const WINDOW: u64 = 20;
const BATCH: u32 = 4;

fn config(ns: std::net::SocketAddr, group: &str) -> PushConsumerConfig {
    PushConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        consume_from_where: ConsumeFromWhere::FirstOffset,
        pull_batch_size: BATCH,
        pull_hold: Duration::from_millis(300),
        pull_error_backoff: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(300),
        persist_interval: Duration::from_millis(100),
        max_uncommitted_per_queue: WINDOW,
        shutdown_timeout: Duration::from_secs(3),
        ..PushConsumerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_commits_stop_pulling_at_the_window_and_it_resumes_when_they_land() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(b.local_addr(), "CW", 1).await;
    wait_route(ns.addr, "CW", 1).await;
    let p = producer(ns.addr, "PCW");
    produce(&p, "CW", 0, 100).await;

    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let log = seen.clone();
    let listener = MessageListener::concurrently(move |msgs: &[MessageExt]| {
        log.lock()
            .unwrap()
            .extend(msgs.iter().map(|m| m.queue_offset));
        ConsumeStatus::ConsumeSuccess
    });
    let mut handle = None;
    let consumer = PushConsumer::start_with_store(
        config(ns.addr, "GCW"),
        vec![("CW".into(), "*".into())],
        listener,
        |g, r, pool, t| {
            let store = Arc::new(Refusing {
                inner: BrokerOffsetStore::new(g, r, pool, t),
                refusing: AtomicBool::new(true),
                known: Mutex::default(),
            });
            handle = Some(store.clone());
            store
        },
    )
    .await
    .unwrap();
    let store = handle.unwrap();

    wait_until("the window to fill", Duration::from_secs(10), || {
        consumer.stats().commit_window_pauses >= 1
    })
    .await;
    // Long enough for many pulls had the window not held.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let consumed = seen.lock().unwrap().len() as u64;
    assert!(
        (WINDOW..WINDOW + u64::from(BATCH)).contains(&consumed),
        "pulled {consumed} past a commit that never landed (window {WINDOW}, batch {BATCH})"
    );
    assert_eq!(
        store.acknowledged(&consumer.assigned_queues()[0]),
        None,
        "nothing was acknowledged"
    );

    store.refusing.store(false, Ordering::SeqCst);
    wait_until("everything consumed", Duration::from_secs(15), || {
        seen.lock().unwrap().len() >= 100
    })
    .await;
    let mut got = seen.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..100).collect::<Vec<u64>>(),
        "each once, none skipped"
    );
    let report = consumer.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    let reader = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "GCW".into(),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    let queue = reader.routes().read_queues("CW").await.unwrap()[0].clone();
    assert_eq!(
        reader
            .offset_store()
            .read(&queue, ReadMode::Store)
            .await
            .unwrap(),
        Some(100)
    );
    b.shutdown().await.unwrap();
}
