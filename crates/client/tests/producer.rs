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
        let messages = common::pull_all(&c, q, "*").await;
        assert_eq!(messages.len(), 25, "round robin spreads evenly");
        for m in messages {
            let (i, r) = &sent[&m.msg_id];
            assert_eq!(&*m.topic, "PROD");
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
            assert_eq!(&*m.broker_name, r.queue.broker_name);
            assert_eq!(m.queue_offset, r.queue_offset);
            assert_eq!(m.offset_msg_id(), r.offset_msg_id);
            got += 1;
        }
        let even = common::pull_all(&c, q, "even").await;
        assert!(even.iter().all(|m| m.tags.as_deref() == Some("even")));
        evens += even.len();
    }
    assert_eq!(got, 100);
    assert_eq!(evens, 50, "the tag filter returns exactly the even half");
    b.shutdown().await.unwrap();
}

/// "Aa" and "BB" share a Java hash code, the only thing a ConsumeQueue entry keeps of a tag:
/// a pull for one of them gets exactly its messages (ferromq's broker compares the tag
/// itself; the client does too, for brokers that compare only the hash, as RocketMQ's does),
/// and `*` keeps every message in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_sharing_a_hash_code_with_another_is_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "HASHTAG", 1).await;
    wait_route(ns.addr, "HASHTAG", 1).await;
    let p = producer_with(ns.addr, 2);
    for i in 0..40 {
        let tag = if i % 4 == 0 { "Aa" } else { "BB" };
        p.send(Message::new("HASHTAG", format!("m{i}")).with_tags(tag))
            .await
            .unwrap();
    }
    let c = consumer(ns.addr);
    let queue = &c.fetch_queues("HASHTAG").await.unwrap()[0];
    let bodies = |messages: &[MessageExt]| -> Vec<String> {
        messages
            .iter()
            .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
            .collect()
    };
    let aa = common::pull_all(&c, queue, "Aa").await;
    let expected: Vec<String> = (0..40).step_by(4).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&aa), expected);
    let all = common::pull_all(&c, queue, "*").await;
    let expected: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&all), expected);
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
    let messages = common::pull_all(&c, &q, "batch").await;
    assert_eq!(messages.len(), 10);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.queue_offset, 1 + i as u64);
        assert_eq!(m.msg_id, r.msg_ids[i]);
        assert_eq!(m.offset_msg_id(), r.offset_msg_ids[i]);
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
        for m in common::pull_all(&c, &q, "ow || late").await {
            match m.tags.as_deref() {
                Some("ow") => oneway = m.body == "oneway".as_bytes(),
                Some("late") => {
                    delayed = m.body == "delayed".as_bytes();
                    assert_eq!(&*m.topic, "BATCH");
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

/// Starts an in-process broker named `name` that creates topics on first send, with
/// `default_topic_queue_nums` as its cap on auto-created queues.
async fn auto_create_broker(
    dir: &std::path::Path,
    namesrv: std::net::SocketAddr,
    name: &str,
) -> ferromq_broker::Broker {
    ferromq_broker::Broker::start(ferromq_broker::BrokerConfig {
        broker_name: name.into(),
        listen_port: 0,
        namesrv_addr: namesrv.to_string(),
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "ASYNC_FLUSH".into(),
        auto_create_topic_enable: true,
        default_topic_queue_nums: 8,
        mapped_file_size_commit_log: 4 << 20,
        max_message_size: 256 * 1024,
        ..ferromq_broker::BrokerConfig::default()
    })
    .await
    .expect("broker starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_topic_is_created_through_the_tbw102_route_with_default_queue_nums() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = auto_create_broker(dir.path(), ns.addr, "broker-auto").await;
    wait_route(ns.addr, "TBW102", 1).await;
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        default_topic_queue_nums: 3,
        route_max_age: Duration::from_secs(600),
        ..ProducerConfig::default()
    })
    .unwrap();
    let first = p.send(Message::new("AUTO_NEW", "hello")).await.unwrap();
    assert_eq!(first.queue.broker_name, "broker-auto");
    let derived = p.routes().cached("AUTO_NEW").expect("route cached");
    assert_eq!(derived.template.as_deref(), Some("TBW102"));
    assert_eq!(
        derived.write_queues.len(),
        3,
        "min(defaultTopicQueueNums, TBW102's)"
    );
    for i in 0..5 {
        p.send(Message::new("AUTO_NEW", format!("m{i}")))
            .await
            .unwrap();
    }
    // The broker created the topic with the requested 3 queues and published it.
    let route = p
        .routes()
        .refresh("AUTO_NEW")
        .await
        .expect("published route");
    assert_eq!(route.template, None);
    assert_eq!(route.write_queues.len(), 3);
    let c = consumer(ns.addr);
    let mut bodies = Vec::new();
    for q in c.fetch_queues("AUTO_NEW").await.unwrap() {
        bodies.extend(
            common::pull_all(&c, &q, "*")
                .await
                .into_iter()
                .map(|m| m.body),
        );
    }
    assert_eq!(bodies.len(), 6);
    p.shutdown();
    c.shutdown().await.ok();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_topic_without_auto_create_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    // This broker does not allow automatic creation, so it registers no TBW102.
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "KNOWN", 2).await;
    wait_route(ns.addr, "KNOWN", 1).await;
    let p = producer_with(ns.addr, 2);
    let err = p.send(Message::new("NOPE", "x")).await.unwrap_err();
    assert!(matches!(err, ClientError::NoRoute { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("NOPE"), "{text}");
    assert!(text.contains("automatic topic creation"), "{text}");
    assert!(text.contains("TBW102"), "{text}");
    b.shutdown().await.unwrap();
}

/// What a [`recording_broker`] received: every command, in arrival order.
type Received = Arc<std::sync::Mutex<Vec<ferromq_protocol::remoting::RemotingCommand>>>;

/// A fake broker that records every request and answers SUCCESS (sends get a send response
/// header with a growing queue offset).
async fn recording_broker() -> (std::net::SocketAddr, Received) {
    use ferromq_protocol::remoting::codes::{request, response};
    use ferromq_protocol::remoting::headers::send::SendMessageResponseHeader;

    let received: Received = Arc::default();
    let log = received.clone();
    let offsets = std::sync::atomic::AtomicI64::new(0);
    let addr = common::answering_broker(move |cmd| {
        log.lock().unwrap().push(cmd.clone());
        let reply = cmd.reply(response::SUCCESS, None);
        if cmd.code != request::SEND_MESSAGE_V2 {
            return reply;
        }
        reply.with_header(&SendMessageResponseHeader {
            msg_id: "7F00000100002A9F0000000000000000".into(),
            queue_id: cmd.ext_fields["e"].parse().unwrap(),
            queue_offset: offsets.fetch_add(1, Ordering::SeqCst),
            ..Default::default()
        })
    })
    .await;
    (addr, received)
}

fn codes_of(received: &Received, code: i32) -> Vec<ferromq_protocol::remoting::RemotingCommand> {
    received
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.code == code)
        .cloned()
        .collect()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_heartbeats_its_brokers_and_unregisters_on_close() {
    use ferromq_protocol::remoting::body::heartbeat::HeartbeatData;
    use ferromq_protocol::remoting::codes::request;

    let ns = namesrv().await;
    let (fake, received) = recording_broker().await;
    common::register_fake_broker(&ns, "broker-fake", fake, "HB");
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG-HB".into(),
        heartbeat_interval: Duration::from_millis(100),
        ..ProducerConfig::default()
    })
    .unwrap();
    let id = p.client_id().to_string();
    assert!(
        id.starts_with(&format!("127.0.0.1@{}#", std::process::id())),
        "client id is <local ip toward the name server>@<pid>#<nanos>: {id}"
    );
    p.send(Message::new("HB", "x")).await.unwrap();
    // The first send registers the producer, then the interval keeps it registered.
    wait_for("three heartbeats", || {
        codes_of(&received, request::HEART_BEAT).len() >= 3
    })
    .await;
    for hb in codes_of(&received, request::HEART_BEAT) {
        let data: HeartbeatData = serde_json::from_slice(hb.body.as_deref().unwrap()).unwrap();
        assert_eq!(data.client_id, id);
        assert_eq!(data.producer_data_set.len(), 1);
        assert_eq!(data.producer_data_set[0].group_name, "PG-HB");
        assert!(data.consumer_data_set.is_empty());
    }
    assert!(p.stats().heartbeats_ok >= 3, "{:?}", p.stats());
    p.close().await.unwrap();
    let unregister = codes_of(&received, request::UNREGISTER_CLIENT);
    assert_eq!(unregister.len(), 1);
    assert_eq!(unregister[0].ext_fields["clientID"], id);
    assert_eq!(unregister[0].ext_fields["producerGroup"], "PG-HB");
    // Closed means closed: no more heartbeats, and sends are refused.
    let beats = codes_of(&received, request::HEART_BEAT).len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(codes_of(&received, request::HEART_BEAT).len(), beats);
    let err = p.send(Message::new("HB", "x")).await.unwrap_err();
    assert!(matches!(err, ClientError::Shutdown), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_threshold_go_out_compressed_with_sysflag_zlib() {
    use ferromq_protocol::remoting::codes::request;

    let ns = namesrv().await;
    let (fake, received) = recording_broker().await;
    common::register_fake_broker(&ns, "broker-fake", fake, "ZIP");
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        compress_over_bytes: 1024,
        ..ProducerConfig::default()
    })
    .unwrap();
    let big = text_body(8 * 1024);
    p.send(Message::new("ZIP", big.clone())).await.unwrap();
    p.send(Message::new("ZIP", vec![b'a'; 1024])).await.unwrap();
    p.send_batch(vec![Message::new("ZIP", big.clone())])
        .await
        .ok();
    let sends = codes_of(&received, request::SEND_MESSAGE_V2);
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[0].ext_fields["f"], "769", "COMPRESSED | ZLIB (0x301)");
    assert_eq!(
        sends[0].serialize_type,
        ferromq_protocol::remoting::SerializeType::RocketMq,
        "sends use the binary header by default"
    );
    assert!(sends[0].body.as_ref().unwrap().len() < big.len() / 2);
    assert_eq!(
        sends[1].ext_fields["f"], "0",
        "at the threshold: not compressed"
    );
    assert_eq!(sends[1].body.as_ref().unwrap().len(), 1024);
    let batches = codes_of(&received, request::SEND_BATCH_MESSAGE);
    assert_eq!(batches.len(), 1);
    assert_eq!(
        batches[0].ext_fields["f"], "0",
        "batches are never compressed"
    );
    p.shutdown();
}

/// `len` bytes of words: compressible, but not trivially.
fn text_body(len: usize) -> Vec<u8> {
    let words = [
        "ferromq ", "offsets ", "never ", "lie ", "queue ", "broker ",
    ];
    let mut x: u32 = 12345;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        out.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out
}

/// Pulls `queue` from offset 0 with a raw PULL_MESSAGE and returns the stored records'
/// (sysFlag, stored body length).
async fn raw_stored_records(
    broker: std::net::SocketAddr,
    queue: &MessageQueue,
) -> Vec<(i32, usize)> {
    use ferromq_protocol::remoting::codes::{request, response};
    use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
    use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
    use ferromq_protocol::RecordView;

    let client = RemotingClient::connect(broker, common::T).await.unwrap();
    let header = PullMessageRequestHeader {
        consumer_group: "RAW".into(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        queue_offset: 0,
        max_msg_nums: 32,
        sys_flag: 0,
        ..PullMessageRequestHeader::default()
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
            common::T,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let body = reply.body.unwrap();
    let mut rest = &body[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let view = RecordView::parse_structure(rest).unwrap();
        out.push((view.sys_flag, view.body.len()));
        rest = &rest[view.total_size()..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_kib_body_round_trips_compressed_and_a_corrupt_one_is_a_clear_error() {
    use ferromq_protocol::remoting::codes::{request, response};
    use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
    use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};

    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "ZIPPED", 1).await;
    wait_route(ns.addr, "ZIPPED", 1).await;
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        ..ProducerConfig::default()
    })
    .unwrap();
    let big = text_body(64 * 1024);
    let sent = p
        .send(Message::new("ZIPPED", big.clone()).with_key("big"))
        .await
        .unwrap();
    // The broker stored the compressed bytes with the flag untouched.
    let stored = raw_stored_records(b.local_addr(), &sent.queue).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].0 & 0x1, 0x1, "stored sysFlag {:#x}", stored[0].0);
    assert_eq!(stored[0].0 & 0x700, 0x300, "zlib type");
    assert!(stored[0].1 < big.len() / 2, "stored {} bytes", stored[0].1);
    // A pull consumer gets the original body.
    let c = consumer(ns.addr);
    let got = common::pull_all(&c, &sent.queue, "*").await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.len(), big.len());
    assert!(got[0].body == big, "decompressed body equals the sent one");
    assert_eq!(got[0].keys, vec!["big".to_string()]);
    assert_eq!(
        got[0].sys_flag & 0x1,
        0,
        "the compressed bit is cleared after decoding"
    );

    // A record that claims compression but holds garbage: an error naming it, no panic.
    let raw = RemotingClient::connect(b.local_addr(), common::T)
        .await
        .unwrap();
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: "ZIPPED".into(),
        c: "TBW102".into(),
        d: 4,
        e: 0,
        f: 0x1,
        g: 0,
        h: 0,
        i: Some(String::new().into()),
        ..Default::default()
    };
    let reply = raw
        .invoke(
            RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
                .with_body(&b"this is not zlib"[..]),
            common::T,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // Dispatch to the consume queue is asynchronous: pull until the record shows up.
    let deadline = Instant::now() + common::T;
    let err = loop {
        match c.pull(&sent.queue, "*", 1, 32).await {
            Err(err) => break err,
            Ok(PullResult::NoNewMessage { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(other) => panic!("the corrupt record was delivered: {other:?}"),
        }
    };
    assert!(matches!(err, ClientError::Decode { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("corrupt"), "{text}");
    assert!(text.contains("queue offset 1"), "{text}");
    p.shutdown();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_refresh_sees_new_queues_and_keeps_the_last_route_when_the_namesrv_dies() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "GROWS", 2).await;
    wait_route(ns.addr, "GROWS", 1).await;
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        route_max_age: Duration::from_secs(600),
        poll_name_server_interval: Duration::from_millis(100),
        send_timeout: Duration::from_secs(1),
        ..ProducerConfig::default()
    })
    .unwrap();
    p.send(Message::new("GROWS", "x")).await.unwrap();
    assert_eq!(p.routes().cached("GROWS").unwrap().write_queues.len(), 2);
    // The topic grows to 6 queues; no send and no restart is needed to see it.
    create_topic(b.local_addr(), "GROWS", 6).await;
    wait_for("the refreshed route with 6 queues", || {
        p.routes()
            .cached("GROWS")
            .is_some_and(|r| r.write_queues.len() == 6)
    })
    .await;
    assert!(p.stats().route_refreshes_ok > 0);
    // The name server goes away: refreshes fail, are counted, and the route stays.
    drop(ns);
    let failures = p.stats().route_refresh_failures;
    wait_for("failed refreshes", || {
        p.stats().route_refresh_failures >= failures + 2
    })
    .await;
    assert_eq!(p.routes().cached("GROWS").unwrap().write_queues.len(), 6);
    let r = p.send(Message::new("GROWS", "still")).await.unwrap();
    assert_eq!(r.attempts, 1);
    p.shutdown();
    // The broker cannot unregister from the stopped name server; that error is expected.
    let _ = b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_and_async_handles_report_every_send() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let b = broker(dir.path(), ns.addr, "broker-a", 0).await;
    create_topic(b.local_addr(), "CB", 2).await;
    wait_route(ns.addr, "CB", 1).await;
    let p = producer_with(ns.addr, 2);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..200 {
        let tx = tx.clone();
        p.send_with_callback(Message::new("CB", format!("m{i}")), move |r| {
            let _ = tx.send(r);
        })
        .await
        .unwrap();
    }
    let handles: Vec<_> = futures_handles(&p, 50).await;
    let mut positions = std::collections::HashSet::new();
    for _ in 0..200 {
        let r = tokio::time::timeout(common::T, rx.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(positions.insert((r.queue.queue_id, r.queue_offset)));
    }
    for h in handles {
        let r = h.await.unwrap();
        assert!(positions.insert((r.queue.queue_id, r.queue_offset)));
    }
    assert_eq!(
        positions.len(),
        250,
        "every send got its own queue position"
    );
    assert_eq!(p.stats().async_sends_outstanding, 0);
    let err = p
        .send_with_callback(Message::new("bad topic", "x"), |_| panic!("not called"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidMessage(_)), "{err:?}");
    p.shutdown();
    b.shutdown().await.unwrap();
}

async fn futures_handles(p: &Producer, n: usize) -> Vec<ferromq_client::producer::SendHandle> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(
            p.send_async(Message::new("CB", format!("a{i}")))
                .await
                .unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outstanding_async_sends_are_bounded() {
    let ns = namesrv().await;
    // A broker that accepts connections and never answers: sends stay outstanding.
    let (silent, _) = silent_server().await;
    common::register_fake_broker(&ns, "broker-silent", silent, "SLOW");
    let p = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "PG".into(),
        async_sends_max: 2,
        send_timeout: Duration::from_millis(500),
        retries_max: 3,
        ..ProducerConfig::default()
    })
    .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..2 {
        let tx = tx.clone();
        p.send_with_callback(Message::new("SLOW", "x"), move |r| {
            let _ = tx.send(r);
        })
        .await
        .unwrap();
    }
    assert_eq!(p.stats().async_sends_outstanding, 2);
    let started = Instant::now();
    let err = p
        .send_with_callback(Message::new("SLOW", "x"), |_| panic!("not called"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::AsyncSendsFull { max: 2, .. }),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(450));
    // The outstanding sends end in their callbacks, as errors.
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(r, Err(ClientError::RetriesExhausted { .. })),
            "{r:?}"
        );
    }
    assert_eq!(p.stats().async_sends_outstanding, 0);
    p.shutdown();
}
