//! Producer end to end: fields survive a send/pull round trip, queue selection, retries on
//! another broker, the body size check before any traffic, batches, one-way and delayed
//! sends, and the pull result mapping.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{broker, create_topic, namesrv, silent_server, wait_route};
use ferromq_client::{
    ClientError, Message, MessageExt, MessageQueue, Producer, ProducerConfig, PullConsumer,
    PullConsumerConfig, PullResult, QueueSelection, QueueSelector,
};

fn producer_with(namesrv: std::net::SocketAddr, retries_max: u32) -> Producer {
    Producer::start(ProducerConfig {
        namesrv_addrs: vec![namesrv],
        group: "PG".into(),
        send_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        retries_max,
        max_body_bytes: 64 * 1024,
        route_max_age: Duration::from_secs(600),
        ..ProducerConfig::default()
    })
    .unwrap()
}

fn consumer(namesrv: std::net::SocketAddr) -> PullConsumer {
    PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: "CG".into(),
        ..PullConsumerConfig::default()
    })
    .unwrap()
}

async fn pull_all(c: &PullConsumer, q: &MessageQueue, expression: &str) -> Vec<MessageExt> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        match c.pull(q, expression, offset, 32).await.unwrap() {
            PullResult::Found {
                messages,
                next_offset,
            } => {
                out.extend(messages);
                offset = next_offset;
            }
            PullResult::NoMatchedMessage { next_offset } => offset = next_offset,
            PullResult::NoNewMessage { .. } => return out,
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_100_with_keys_tags_properties_and_pull_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "PROD", 4).await;
    wait_route(ns.addr, "PROD", 1).await;
    let p = producer_with(ns.addr, 2);
    let mut sent = HashMap::new();
    for i in 0..100 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        let m = Message::new("PROD", format!("body-{i}"))
            .with_tags(tag)
            .with_key(format!("k{i}"))
            .with_key("shared")
            .with_property("idx", i.to_string());
        let r = p.send(m).await.unwrap();
        assert_eq!(r.msg_id.len(), 32);
        assert_eq!(r.attempts, 1);
        sent.insert(r.msg_id.clone(), (i, r));
    }
    assert_eq!(sent.len(), 100, "UNIQ_KEYs are unique");
    let c = consumer(ns.addr);
    let queues = c.fetch_queues("PROD").await.unwrap();
    assert_eq!(queues.len(), 4);
    let (mut got, mut evens) = (0, 0);
    for q in &queues {
        let messages = pull_all(&c, q, "*").await;
        assert_eq!(messages.len(), 25, "round robin spreads evenly");
        for m in messages {
            let (i, r) = &sent[&m.msg_id];
            assert_eq!(m.topic, "PROD");
            assert_eq!(m.body, format!("body-{i}").as_bytes());
            assert_eq!(
                m.tags.as_deref(),
                Some(if i % 2 == 0 { "even" } else { "odd" })
            );
            assert_eq!(m.keys, vec![format!("k{i}"), "shared".to_string()]);
            assert_eq!(
                m.properties,
                BTreeMap::from([("idx".to_string(), i.to_string())])
            );
            assert_eq!(m.queue_id, r.queue.queue_id);
            assert_eq!(&m.broker_name, &r.queue.broker_name);
            assert_eq!(m.queue_offset, r.queue_offset);
            assert_eq!(m.offset_msg_id, r.offset_msg_id);
            got += 1;
        }
        let even = pull_all(&c, q, "even").await;
        assert!(even.iter().all(|m| m.tags.as_deref() == Some("even")));
        evens += even.len();
    }
    assert_eq!(got, 100);
    assert_eq!(evens, 50, "the tag filter returns exactly the even half");
    b.shutdown().await.unwrap();
}

#[derive(Debug)]
struct Last;
impl QueueSelector for Last {
    fn select(&self, queues: &[MessageQueue], _: &Message) -> usize {
        queues.len() - 1
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_key_and_custom_selectors_pick_stable_queues() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "SEL", 4).await;
    wait_route(ns.addr, "SEL", 1).await;
    let p = producer_with(ns.addr, 0);
    let by_key = QueueSelection::HashKey("order-17".into());
    let first = p
        .send_with(Message::new("SEL", "a"), &by_key)
        .await
        .unwrap();
    for i in 0..5 {
        let r = p
            .send_with(Message::new("SEL", format!("a{i}")), &by_key)
            .await
            .unwrap();
        assert_eq!(r.queue, first.queue);
        assert_eq!(r.queue_offset, first.queue_offset + 1 + i);
    }
    let custom = QueueSelection::Custom(Arc::new(Last));
    let r = p
        .send_with(Message::new("SEL", "c"), &custom)
        .await
        .unwrap();
    assert_eq!(r.queue.queue_id, 3);
    let q0 = MessageQueue {
        topic: "SEL".into(),
        broker_name: "broker-a".into(),
        queue_id: 0,
    };
    let r = p
        .send_to_queue(Message::new("SEL", "q"), &q0)
        .await
        .unwrap();
    assert_eq!(r.queue, q0);
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_retries_on_another_broker_when_one_is_down() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ns = namesrv().await;
    let a = broker(dir_a.path(), ns.addr, "broker-a", 0).await;
    let b = broker(dir_b.path(), ns.addr, "broker-b", 0).await;
    create_topic(a.local_addr(), "RETRY", 2).await;
    create_topic(b.local_addr(), "RETRY", 2).await;
    wait_route(ns.addr, "RETRY", 2).await;
    let retrying = producer_with(ns.addr, 2);
    let single_shot = producer_with(ns.addr, 0);
    // Warm both route caches while both brokers are up.
    assert_eq!(
        retrying.routes().write_queues("RETRY").await.unwrap().len(),
        4
    );
    assert_eq!(
        single_shot
            .routes()
            .write_queues("RETRY")
            .await
            .unwrap()
            .len(),
        4
    );

    a.shutdown().await.unwrap();
    let mut retried = 0;
    for i in 0..8 {
        let r = retrying
            .send(Message::new("RETRY", format!("m{i}")))
            .await
            .expect("a retry on broker-b succeeds");
        assert_eq!(r.queue.broker_name, "broker-b");
        if r.attempts > 1 {
            retried += 1;
        }
    }
    assert!(retried >= 1, "some sends first picked broker-a and retried");

    // Without retries, a round over all four queues hits broker-a and fails with the cause.
    let mut failures = 0;
    for i in 0..4 {
        match single_shot
            .send(Message::new("RETRY", format!("s{i}")))
            .await
        {
            Ok(r) => assert_eq!(r.queue.broker_name, "broker-b"),
            Err(ClientError::RetriesExhausted { attempts, last }) => {
                assert_eq!(attempts, 1);
                assert!(matches!(*last, ClientError::Transport { .. }), "{last:?}");
                failures += 1;
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert!(failures >= 1);
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_is_refused_before_any_traffic() {
    let (silent, accepted) = silent_server().await;
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![silent],
        group: "PG".into(),
        max_body_bytes: 1024,
        ..ProducerConfig::default()
    })
    .unwrap();
    let err = p
        .send(Message::new("BIG", vec![7u8; 1025]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::BodyTooLarge {
                size: 1025,
                max: 1024
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing was sent"), "{err}");
    let err = p
        .send_batch(
            (0..3)
                .map(|_| Message::new("BIG", vec![1u8; 400]))
                .collect(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BodyTooLarge { max: 1024, .. }),
        "{err:?}"
    );
    let err = p.send(Message::new("bad topic", "x")).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidMessage(_)), "{err:?}");
    let err = p
        .send_oneway(Message::new("BIG", vec![0u8; 2048]))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::BodyTooLarge { .. }), "{err:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_oneway_and_delayed_sends_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "BATCH", 1).await;
    wait_route(ns.addr, "BATCH", 1).await;
    let p = producer_with(ns.addr, 2);
    p.send(Message::new("BATCH", "before")).await.unwrap();
    let batch: Vec<Message> = (0..10)
        .map(|i| {
            Message::new("BATCH", format!("b{i}"))
                .with_key(format!("bk{i}"))
                .with_tags("batch")
        })
        .collect();
    let r = p.send_batch(batch).await.unwrap();
    assert_eq!(r.first_queue_offset, 1);
    assert_eq!(r.msg_ids.len(), 10);
    assert_eq!(r.offset_msg_ids.len(), 10);
    let err = p
        .send_batch(vec![Message::new("BATCH", "x"), Message::new("OTHER", "y")])
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidMessage(_)), "{err:?}");

    let c = consumer(ns.addr);
    let q = c.fetch_queues("BATCH").await.unwrap()[0].clone();
    let messages = pull_all(&c, &q, "batch").await;
    assert_eq!(messages.len(), 10);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.queue_offset, 1 + i as u64);
        assert_eq!(m.msg_id, r.msg_ids[i]);
        assert_eq!(m.offset_msg_id, r.offset_msg_ids[i]);
        assert_eq!(m.keys, vec![format!("bk{i}")]);
        assert_eq!(m.body, format!("b{i}").as_bytes());
    }

    p.send_oneway(Message::new("BATCH", "oneway").with_tags("ow"))
        .await
        .unwrap();
    p.send(
        Message::new("BATCH", "delayed")
            .with_tags("late")
            .with_delay_level(1),
    )
    .await
    .unwrap();
    // Both arrive: one-way without an answer, the delayed one after its level (1 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut oneway, mut delayed) = (false, false);
    while !(oneway && delayed) {
        assert!(
            Instant::now() < deadline,
            "oneway {oneway}, delayed {delayed}"
        );
        for m in pull_all(&c, &q, "ow || late").await {
            match m.tags.as_deref() {
                Some("ow") => oneway = m.body == "oneway".as_bytes(),
                Some("late") => {
                    delayed = m.body == "delayed".as_bytes();
                    assert_eq!(m.topic, "BATCH");
                }
                other => panic!("filtered tag {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_maps_offset_illegal_no_new_message_and_long_polls() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "PULL", 1).await;
    wait_route(ns.addr, "PULL", 1).await;
    let p = producer_with(ns.addr, 2);
    for i in 0..3 {
        p.send(Message::new("PULL", format!("m{i}")).with_tags("a"))
            .await
            .unwrap();
    }
    let c = consumer(ns.addr);
    let q = c.fetch_queues("PULL").await.unwrap()[0].clone();
    assert_eq!(c.max_offset(&q).await.unwrap(), 3);
    assert_eq!(c.min_offset(&q).await.unwrap(), 0);
    assert_eq!(
        c.pull(&q, "*", 100, 32).await.unwrap(),
        PullResult::OffsetIllegal {
            suggested_offset: 3
        }
    );
    assert_eq!(
        c.pull(&q, "*", 3, 32).await.unwrap(),
        PullResult::NoNewMessage { next_offset: 3 }
    );
    match c.pull(&q, "zzz", 0, 32).await.unwrap() {
        PullResult::NoMatchedMessage { next_offset } => assert_eq!(next_offset, 3),
        PullResult::Found { messages, .. } => assert!(messages.is_empty()),
        other => panic!("{other:?}"),
    }

    let waiter = {
        let c = c.clone();
        let q = q.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c
                .pull_blocking(&q, "*", 3, 32, Duration::from_secs(8))
                .await
                .unwrap();
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.send(Message::new("PULL", "wake")).await.unwrap();
    let (r, waited) = waiter.await.unwrap();
    match r {
        PullResult::Found {
            messages,
            next_offset,
        } => {
            assert_eq!(messages.len(), 1);
            assert_eq!(messages[0].body, "wake".as_bytes());
            assert_eq!(next_offset, 4);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        waited < Duration::from_secs(4),
        "woken by the send, not the timeout: {waited:?}"
    );
    // With nothing new, the hold ends at the requested time.
    let started = Instant::now();
    assert_eq!(
        c.pull_blocking(&q, "*", 4, 32, Duration::from_millis(300))
            .await
            .unwrap(),
        PullResult::NoNewMessage { next_offset: 4 }
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    b.shutdown().await.unwrap();
}
