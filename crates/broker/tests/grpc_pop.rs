//! Receive / ack consumption over the gRPC v5 endpoint (`core::pop`), driven by a tonic client
//! against an in-process broker: message fields, acks, stale handles, redelivery after the
//! invisibility with the attempt counted, a broker restart that keeps acks and redelivers the
//! rest, FIFO groups, the dead-letter queue after the last attempt, a reset voiding handles,
//! and the group's offset committed for the acked prefix (one view with remoting).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::grpc::{grpc_client, message, resource, send, with_client_id};
use common::{broker, broker_config, client, pull_request, query, records, reset_queue, TIMEOUT};
use ferromq_broker::catalog::groups::SubscriptionGroupConfig;
use ferromq_broker::Broker;
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::receive_message_response::Content;
use ferromq_protocol::grpc::{self as pb, Code, SystemProperties};
use ferromq_protocol::RecordView;
use tonic::transport::Channel;

const GROUP: &str = "G";

fn duration(ms: u64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// One received message: its body, attempt, handle, queue, offset and the whole message.
#[derive(Debug, Clone)]
struct Got {
    body: Vec<u8>,
    attempt: i32,
    handle: String,
    queue: i32,
    offset: i64,
    message: pb::Message,
}

/// ReceiveMessage; the stream's status code and messages.
async fn receive(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    queue: i32,
    batch: i32,
    invisible_ms: u64,
    wait_ms: u64,
) -> (i32, Vec<Got>) {
    let request = pb::ReceiveMessageRequest {
        group: resource(GROUP),
        message_queue: Some(pb::MessageQueue {
            topic: resource(topic),
            id: queue,
            ..Default::default()
        }),
        batch_size: batch,
        invisible_duration: duration(invisible_ms),
        long_polling_timeout: duration(wait_ms),
        ..Default::default()
    };
    let mut stream = grpc
        .receive_message(with_client_id(request))
        .await
        .expect("transport OK")
        .into_inner();
    let mut code = None;
    let mut got = Vec::new();
    let mut ended_with_timestamp = false;
    while let Some(item) = stream.message().await.expect("stream item") {
        match item.content.expect("content") {
            Content::Status(s) => code = Some(s.code),
            Content::Message(m) => {
                let system = m.system_properties.clone().expect("system properties");
                got.push(Got {
                    body: m.body.clone(),
                    attempt: system.delivery_attempt.expect("attempt"),
                    handle: system.receipt_handle.clone().expect("handle"),
                    queue: system.queue_id,
                    offset: system.queue_offset.expect("offset"),
                    message: m,
                })
            }
            Content::DeliveryTimestamp(_) => ended_with_timestamp = true,
        }
    }
    assert!(
        ended_with_timestamp,
        "the stream ends with delivery_timestamp"
    );
    (code.expect("status first"), got)
}

/// Receives until `want` messages came or the time is up (each receive holds at most 1 s).
async fn receive_n(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    want: usize,
    invisible_ms: u64,
) -> Vec<Got> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut all = Vec::new();
    while all.len() < want && tokio::time::Instant::now() < deadline {
        let (_, got) = receive(grpc, topic, -1, 32, invisible_ms, 1_000).await;
        all.extend(got);
    }
    all
}

async fn ack(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    handles: &[&str],
) -> pb::AckMessageResponse {
    grpc.ack_message(with_client_id(pb::AckMessageRequest {
        group: resource(GROUP),
        topic: resource(topic),
        entries: handles
            .iter()
            .map(|h| pb::AckMessageEntry {
                message_id: String::new(),
                receipt_handle: h.to_string(),
                lite_topic: None,
            })
            .collect(),
    }))
    .await
    .expect("transport OK")
    .into_inner()
}

async fn change_invisible(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    handle: &str,
    ms: u64,
) -> pb::ChangeInvisibleDurationResponse {
    grpc.change_invisible_duration(with_client_id(pb::ChangeInvisibleDurationRequest {
        group: resource(GROUP),
        topic: resource(topic),
        receipt_handle: handle.into(),
        invisible_duration: duration(ms),
        message_id: String::new(),
        lite_topic: None,
        suspend: None,
    }))
    .await
    .expect("transport OK")
    .into_inner()
}

fn topic(broker: &Broker, name: &str, queues: u32) {
    let config = ferromq_broker::catalog::topics::topic_with_queues(name, queues);
    broker.context().topics.upsert(config).unwrap();
}

fn group(broker: &Broker, orderly: bool, retry_max_times: i32) {
    broker
        .context()
        .groups
        .upsert(SubscriptionGroupConfig {
            group_name: GROUP.into(),
            consume_message_orderly: orderly,
            retry_max_times,
            ..Default::default()
        })
        .unwrap();
}

async fn send_bodies(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    n: usize,
    group: Option<&str>,
) {
    let messages = (0..n)
        .map(|i| {
            let system = SystemProperties {
                tag: Some("TagA".into()),
                keys: vec![format!("k{i}")],
                message_group: group.map(str::to_string),
                ..Default::default()
            };
            let mut m = message(
                topic,
                &format!("ID{i:04}"),
                format!("m{i}").as_bytes(),
                system,
            );
            if group.is_some() {
                m.system_properties.as_mut().unwrap().message_type = pb::MessageType::Fifo as i32;
            }
            m
        })
        .collect();
    let reply = send(grpc, messages).await;
    assert_eq!(reply.status.unwrap().code, Code::Ok as i32);
}

fn bodies(got: &[Got]) -> BTreeSet<String> {
    got.iter()
        .map(|g| String::from_utf8(g.body.clone()).unwrap())
        .collect()
}

/// The group's committed offset of `topic`/`queue` over remoting (`None`: none stored).
async fn committed(addr: std::net::SocketAddr, topic: &str, queue: i32) -> Option<i64> {
    let remoting = client(addr).await;
    let reply = query(&remoting, topic, queue).await;
    (reply.code == 0).then(|| {
        reply
            .ext_fields
            .get("offset")
            .expect("offset field")
            .parse()
            .unwrap()
    })
}

#[tokio::test]
async fn receive_ack_nack_and_redelivery_follow_the_receipt_handles() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopT", 2);
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "PopT", 10, None).await;

    let got = receive_n(&mut grpc, "PopT", 10, 1_000).await;
    assert_eq!(got.len(), 10, "every message once");
    assert_eq!(bodies(&got).len(), 10);
    for g in &got {
        assert_eq!(g.attempt, 1);
        let system = g.message.system_properties.as_ref().unwrap();
        let digest = system.body_digest.as_ref().unwrap();
        assert_eq!(digest.r#type, pb::DigestType::Md5 as i32);
        assert_eq!(digest.checksum, format!("{:032X}", md5_of(&g.body)));
        assert_eq!(system.body_encoding, pb::Encoding::Identity as i32);
        assert_eq!(system.tag.as_deref(), Some("TagA"));
        assert!(system.message_id.starts_with("ID"));
        assert!(system.store_timestamp.is_some() && system.born_timestamp.is_some());
    }
    let (code, none) = receive(&mut grpc, "PopT", -1, 32, 1_000, 300).await;
    assert_eq!(
        (code, none.len()),
        (Code::MessageNotFound as i32, 0),
        "all invisible"
    );

    // Ack six, nack one (invisible 0), leave three to expire.
    let handles: Vec<&str> = got.iter().map(|g| g.handle.as_str()).collect();
    let acked = ack(&mut grpc, "PopT", &handles[..6]).await;
    assert_eq!(acked.status.unwrap().code, Code::Ok as i32);
    assert_eq!(acked.entries.len(), 6);
    let renewed = change_invisible(&mut grpc, "PopT", handles[6], 0).await;
    assert_eq!(renewed.status.unwrap().code, Code::Ok as i32);
    assert_ne!(renewed.receipt_handle, handles[6], "a new handle");
    let stale = ack(&mut grpc, "PopT", &[handles[6], handles[0], "garbage"]).await;
    assert_eq!(stale.status.unwrap().code, Code::MultipleResults as i32);
    for entry in &stale.entries {
        assert_eq!(
            entry.status.as_ref().unwrap().code,
            Code::InvalidReceiptHandle as i32
        );
    }

    let again = receive_n(&mut grpc, "PopT", 4, 5_000).await;
    assert_eq!(again.len(), 4, "the nacked one and the three expired");
    let expected: BTreeSet<String> = got[6..]
        .iter()
        .map(|g| String::from_utf8(g.body.clone()).unwrap())
        .collect();
    assert_eq!(bodies(&again), expected);
    assert!(again.iter().all(|g| g.attempt == 2), "{again:?}");
    let handles: Vec<&str> = again.iter().map(|g| g.handle.as_str()).collect();
    assert_eq!(
        ack(&mut grpc, "PopT", &handles).await.status.unwrap().code,
        Code::Ok as i32
    );

    let (code, _) = receive(&mut grpc, "PopT", -1, 32, 1_000, 300).await;
    assert_eq!(code, Code::MessageNotFound as i32);
    // Invariant 3: the acked prefix is the group's offset, read over remoting.
    let addr = broker.local_addr();
    let mut total = 0;
    for queue in 0..2 {
        let max = got
            .iter()
            .filter(|g| g.queue == queue)
            .map(|g| g.offset + 1)
            .max()
            .unwrap_or(0);
        assert_eq!(
            committed(addr, "PopT", queue).await.unwrap_or(0),
            max,
            "queue {queue}"
        );
        total += max;
    }
    assert_eq!(total, 10);
    broker.shutdown().await.unwrap();
}

fn md5_of(bytes: &[u8]) -> u128 {
    use md5::{Digest, Md5};
    u128::from_be_bytes(Md5::digest(bytes).into())
}

#[tokio::test]
async fn a_restart_keeps_acks_and_redelivers_the_rest_with_the_attempt_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopR", 2);
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "PopR", 20, None).await;
    let got = receive_n(&mut grpc, "PopR", 20, 2_000).await;
    assert_eq!(got.len(), 20);
    // Ack all but the messages whose body ends in 3 or 7 (a spread over both queues).
    let (kept, acked): (Vec<&Got>, Vec<&Got>) = got.iter().partition(|g| {
        let body = String::from_utf8(g.body.clone()).unwrap();
        body.ends_with('3') || body.ends_with('7')
    });
    let handles: Vec<&str> = acked.iter().map(|g| g.handle.as_str()).collect();
    assert_eq!(
        ack(&mut grpc, "PopR", &handles).await.status.unwrap().code,
        Code::Ok as i32
    );
    // One un-acked delivery is renewed for long: it must stay invisible across the restart.
    let long = change_invisible(&mut grpc, "PopR", &kept[0].handle, 60_000).await;
    assert_eq!(long.status.unwrap().code, Code::Ok as i32);
    drop(grpc);
    broker.shutdown().await.unwrap();

    let broker = Broker::start(broker_config(dir.path(), false))
        .await
        .unwrap();
    let mut grpc = grpc_client(&broker).await;
    let again = receive_n(&mut grpc, "PopR", kept.len() - 1, 5_000).await;
    let expected: BTreeSet<String> = kept[1..]
        .iter()
        .map(|g| String::from_utf8(g.body.clone()).unwrap())
        .collect();
    assert_eq!(
        bodies(&again),
        expected,
        "exactly the un-acked, expired ones"
    );
    assert!(
        again.iter().all(|g| g.attempt == 2),
        "the attempt counts across the restart"
    );
    let (code, more) = receive(&mut grpc, "PopR", -1, 32, 1_000, 500).await;
    assert_eq!(
        (code, more.len()),
        (Code::MessageNotFound as i32, 0),
        "no acked message returns"
    );
    // The renewed delivery's handle is still valid after the restart.
    let renewed = ack(&mut grpc, "PopR", &[long.receipt_handle.as_str()]).await;
    assert_eq!(renewed.status.unwrap().code, Code::Ok as i32);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_fifo_group_gets_a_queue_in_order_one_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopF", 2);
    group(&broker, true, 16);
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "PopF", 6, Some("order-1")).await;
    let mut seen = Vec::new();
    for round in 0..3 {
        let (code, got) = receive(&mut grpc, "PopF", -1, 2, 5_000, 1_000).await;
        assert_eq!(code, Code::Ok as i32, "round {round}");
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0]
                .message
                .system_properties
                .as_ref()
                .unwrap()
                .message_group
                .as_deref(),
            Some("order-1")
        );
        let (code, _) = receive(&mut grpc, "PopF", -1, 2, 5_000, 200).await;
        assert_eq!(
            code,
            Code::MessageNotFound as i32,
            "nothing while a batch is in flight"
        );
        seen.extend(
            got.iter()
                .map(|g| String::from_utf8(g.body.clone()).unwrap()),
        );
        let handles: Vec<&str> = got.iter().map(|g| g.handle.as_str()).collect();
        assert_eq!(
            ack(&mut grpc, "PopF", &handles).await.status.unwrap().code,
            Code::Ok as i32
        );
    }
    assert_eq!(seen, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_last_attempt_goes_to_the_dead_letter_queue_and_a_reset_voids_handles() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopD", 1);
    group(&broker, false, 1); // two attempts
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "PopD", 1, None).await;
    for attempt in 1..=2 {
        let (_, got) = receive(&mut grpc, "PopD", 0, 1, 5_000, 1_000).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].attempt, attempt);
        let nack = change_invisible(&mut grpc, "PopD", &got[0].handle, 0).await;
        assert_eq!(nack.status.unwrap().code, Code::Ok as i32);
    }
    let (code, got) = receive(&mut grpc, "PopD", 0, 1, 5_000, 300).await;
    assert_eq!(
        (code, got.len()),
        (Code::MessageNotFound as i32, 0),
        "dead-lettered, not delivered"
    );
    let remoting = client(broker.local_addr()).await;
    let reply = remoting
        .invoke(pull_request("G2", "%DLQ%G", 0, 0, 0, "*", None), TIMEOUT)
        .await
        .unwrap();
    let dead = records(&reply);
    assert_eq!(dead.len(), 1, "{:?}", reply.remark);
    assert_eq!(RecordView::parse(&dead[0]).unwrap().body, b"m0");
    assert_eq!(committed(broker.local_addr(), "PopD", 0).await, Some(1));
    let metrics = common::parse(&broker.context().metrics.render(broker.context()));
    assert_eq!(
        common::value(&metrics, "ferromq_pop_dead_lettered_total", &[]),
        1.0,
        "the move to the DLQ is counted and exported"
    );

    // A reset makes the deliveries before it void.
    send_bodies(&mut grpc, "PopD", 1, None).await;
    let (_, got) = receive(&mut grpc, "PopD", 0, 1, 5_000, 1_000).await;
    assert_eq!(got.len(), 1);
    let reset = reset_queue(&remoting, "PopD", 0, 0).await;
    assert_eq!(reset.code, 0, "{:?}", reset.remark);
    let late = ack(&mut grpc, "PopD", &[got[0].handle.as_str()]).await;
    assert_eq!(late.status.unwrap().code, Code::InvalidReceiptHandle as i32);
    let (_, from_start) = receive_n(&mut grpc, "PopD", 2, 5_000)
        .await
        .into_iter()
        .fold((0, Vec::new()), |(n, mut v), g| {
            v.push(g.body);
            (n + 1, v)
        });
    assert_eq!(
        from_start,
        vec![b"m0".to_vec(), b"m0".to_vec()],
        "the reset moved the group back to 0"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_receives_and_acks_are_refused_with_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    let mut grpc = grpc_client(&broker).await;
    let (code, _) = receive(&mut grpc, "NoSuchTopic", -1, 1, 5_000, 0).await;
    assert_eq!(code, Code::TopicNotFound as i32);
    topic(&broker, "PopB", 1);
    let (code, _) = receive(&mut grpc, "PopB", 7, 1, 5_000, 0).await;
    assert_eq!(code, Code::BadRequest as i32, "queue out of range");
    let (code, _) = receive(&mut grpc, "PopB", 0, 1, 10, 0).await;
    assert_eq!(code, Code::IllegalInvisibleTime as i32);
    let reply = ack(&mut grpc, "PopB", &["fmq1 PopB 0 0 99 0"]).await;
    assert_eq!(
        reply.status.unwrap().code,
        Code::InvalidReceiptHandle as i32
    );
    let reply = change_invisible(&mut grpc, "PopB", "not a handle", 1_000).await;
    assert_eq!(
        reply.status.unwrap().code,
        Code::InvalidReceiptHandle as i32
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_receives_are_bounded_answered_and_one_message_goes_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopMany", 2);
    let grpc = grpc_client(&broker).await;
    let mut waiting = Vec::new();
    for _ in 0..1_000 {
        let mut grpc = grpc.clone();
        waiting.push(tokio::spawn(async move {
            receive(&mut grpc, "PopMany", -1, 1, 5_000, 2_000).await
        }));
    }
    // Let the receives arrive, then send one message: exactly one receive gets it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while broker.context().pop.held() < 100 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(broker.context().pop.held() <= ferromq_broker::core::pop::RECEIVES_HELD_MAX);
    let mut sender = grpc.clone();
    send_bodies(&mut sender, "PopMany", 1, None).await;
    let mut delivered = 0;
    for task in waiting {
        let (code, got) = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every receive is answered")
            .unwrap();
        assert!(
            code == Code::Ok as i32 || code == Code::MessageNotFound as i32,
            "code {code}"
        );
        delivered += got.len();
    }
    assert_eq!(delivered, 1, "one message, one delivery");
    assert_eq!(broker.context().pop.held(), 0, "nothing left held");
    broker.shutdown().await.unwrap();
}

/// The Java and Python clients name each queue of the route in turn; RocketMQ's proxy serves
/// any queue of the broker whatever queue is named. A receive naming an empty queue must get
/// the other queues' messages at once, not wait out its long polling (the Java
/// SimpleConsumer took 38 s for 1,000 messages on 8 queues, half of its receives held 2 s).
#[tokio::test]
async fn a_receive_naming_an_empty_queue_gets_the_other_queues_messages_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopQ", 4);
    let remoting = client(broker.local_addr()).await;
    for (queue, body) in [(2, "q2-a"), (2, "q2-b"), (3, "q3-a")] {
        let reply = common::send(&remoting, "PopQ", queue, body.as_bytes(), "TagA").await;
        assert_eq!(reply.code, 0, "{reply:?}");
    }
    let mut grpc = grpc_client(&broker).await;

    // Queue 0 is empty: the receive is served from queues 2 and 3 without waiting 5 s.
    let started = std::time::Instant::now();
    let (code, got) = receive(&mut grpc, "PopQ", 0, 32, 5_000, 5_000).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "held {:?} on an empty queue",
        started.elapsed()
    );
    assert_eq!(code, Code::Ok as i32);
    let queues: BTreeSet<(i32, String)> = got
        .iter()
        .map(|g| (g.queue, String::from_utf8(g.body.clone()).unwrap()))
        .collect();
    assert_eq!(
        queues,
        BTreeSet::from([
            (2, "q2-a".to_string()),
            (2, "q2-b".to_string()),
            (3, "q3-a".to_string())
        ])
    );

    // The named queue is served first: with one message wanted, queue 3's comes before
    // queue 2's.
    for (queue, body) in [(2, "q2-c"), (3, "q3-b")] {
        let reply = common::send(&remoting, "PopQ", queue, body.as_bytes(), "TagA").await;
        assert_eq!(reply.code, 0, "{reply:?}");
    }
    let (_, first) = receive(&mut grpc, "PopQ", 3, 1, 5_000, 1_000).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].queue, first[0].body.as_slice()),
        (3, &b"q3-b"[..])
    );

    // A queue outside the topic is still refused.
    let (code, _) = receive(&mut grpc, "PopQ", 4, 1, 5_000, 0).await;
    assert_eq!(code, Code::BadRequest as i32);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renew_keeps_a_delivery_invisible_while_its_client_lives() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopRenew", 1);
    let mut grpc = grpc_client(&broker).await;
    let beat = grpc
        .heartbeat(with_client_id(pb::HeartbeatRequest {
            group: resource(GROUP),
            client_type: pb::ClientType::PushConsumer as i32,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(beat.status.unwrap().code, Code::Ok as i32);
    send_bodies(&mut grpc, "PopRenew", 2, None).await;
    let receive_renewed = |grpc: &mut MessagingServiceClient<Channel>, auto_renew: bool| {
        let request = pb::ReceiveMessageRequest {
            group: resource(GROUP),
            message_queue: Some(pb::MessageQueue {
                topic: resource("PopRenew"),
                id: 0,
                ..Default::default()
            }),
            batch_size: 1,
            invisible_duration: duration(2_000),
            long_polling_timeout: duration(500),
            auto_renew,
            ..Default::default()
        };
        let mut grpc = grpc.clone();
        async move {
            let mut stream = grpc
                .receive_message(with_client_id(request))
                .await
                .unwrap()
                .into_inner();
            let mut handles = Vec::new();
            while let Some(item) = stream.message().await.unwrap() {
                if let Some(Content::Message(m)) = item.content {
                    handles.push((m.body, m.system_properties.unwrap().receipt_handle.unwrap()));
                }
            }
            handles
        }
    };
    let renewed = receive_renewed(&mut grpc, true).await;
    let plain = receive_renewed(&mut grpc, false).await;
    assert_eq!((renewed.len(), plain.len()), (1, 1));
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    // Past two invisibilities: the plain delivery came back, the renewed one did not.
    let again = receive_renewed(&mut grpc, false).await;
    assert_eq!(
        again.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>(),
        vec![plain[0].0.clone()]
    );
    assert!(
        broker
            .context()
            .pop
            .renewed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    // The renewed delivery's handle is still the client's.
    let acked = ack(&mut grpc, "PopRenew", &[renewed[0].1.as_str()]).await;
    assert_eq!(acked.status.unwrap().code, Code::Ok as i32);
    assert_eq!(
        broker.context().pop.renewals.len(),
        0,
        "an ack ends the renewal"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restart_keeps_a_fifo_groups_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopFR", 2);
    group(&broker, true, 16);
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "PopFR", 6, Some("order-r")).await;
    let (code, first) = receive(&mut grpc, "PopFR", -1, 2, 1_000, 1_000).await;
    assert_eq!((code, first.len()), (Code::Ok as i32, 2));
    assert_eq!(
        bodies(&first),
        BTreeSet::from(["m0".to_string(), "m1".to_string()])
    );
    let m0 = first.iter().find(|g| g.body == b"m0").unwrap();
    assert_eq!(
        ack(&mut grpc, "PopFR", &[m0.handle.as_str()])
            .await
            .status
            .unwrap()
            .code,
        Code::Ok as i32
    );
    drop(grpc);
    broker.shutdown().await.unwrap();

    let broker = Broker::start(broker_config(dir.path(), false))
        .await
        .unwrap();
    let mut grpc = grpc_client(&broker).await;
    let mut order = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while order.len() < 5 && tokio::time::Instant::now() < deadline {
        let (_, got) = receive(&mut grpc, "PopFR", -1, 2, 5_000, 1_500).await;
        for g in &got {
            order.push(String::from_utf8(g.body.clone()).unwrap());
        }
        let handles: Vec<&str> = got.iter().map(|g| g.handle.as_str()).collect();
        if !handles.is_empty() {
            assert_eq!(
                ack(&mut grpc, "PopFR", &handles).await.status.unwrap().code,
                Code::Ok as i32
            );
        }
    }
    assert_eq!(
        order,
        ["m1", "m2", "m3", "m4", "m5"],
        "the un-acked m1 first, then the rest in order"
    );
    broker.shutdown().await.unwrap();
}

/// Item 5 of issue 17, the other way: a message sent over remoting is received over gRPC with
/// its tag, keys, user properties and body, and the group's offset is one view.
#[tokio::test]
async fn a_message_sent_over_remoting_is_received_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopX", 1);
    let remoting = client(broker.local_addr()).await;
    let reply = common::send_to(
        &remoting,
        "PopX",
        0,
        b"from remoting",
        &[
            ("TAGS", "TagR"),
            ("KEYS", "k1 k2"),
            ("color", "blue"),
            ("UNIQ_KEY", "REMOTING01"),
        ],
    )
    .await;
    assert_eq!(reply.code, 0, "{:?}", reply.remark);
    let mut grpc = grpc_client(&broker).await;
    let (code, got) = receive(&mut grpc, "PopX", 0, 4, 5_000, 2_000).await;
    assert_eq!((code, got.len()), (Code::Ok as i32, 1));
    let message = &got[0].message;
    let system = message.system_properties.as_ref().unwrap();
    assert_eq!(message.body, b"from remoting");
    assert_eq!(system.tag.as_deref(), Some("TagR"));
    assert_eq!(system.keys, ["k1", "k2"]);
    assert_eq!(system.message_id, "REMOTING01");
    assert_eq!(
        message.user_properties.get("color").map(|v| v.as_str()),
        Some("blue")
    );
    assert!(
        !message.user_properties.contains_key("TAGS"),
        "system keys stay out"
    );
    assert_eq!(
        ack(&mut grpc, "PopX", &[got[0].handle.as_str()])
            .await
            .status
            .unwrap()
            .code,
        Code::Ok as i32
    );
    assert_eq!(committed(broker.local_addr(), "PopX", 0).await, Some(1));
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_fifo_batch_comes_from_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "PopF1", 4);
    group(&broker, true, 16);
    let mut grpc = grpc_client(&broker).await;
    for g in ["ga", "gb", "gc", "gd"] {
        send_bodies(&mut grpc, "PopF1", 2, Some(g)).await;
    }
    let (code, got) = receive(&mut grpc, "PopF1", -1, 32, 5_000, 1_000).await;
    assert_eq!(code, Code::Ok as i32);
    let queues: BTreeSet<i32> = got.iter().map(|g| g.queue).collect();
    assert_eq!(queues.len(), 1, "one queue per FIFO batch: {got:?}");
    broker.shutdown().await.unwrap();
}
