//! Where and how long a gRPC ReceiveMessage waits (docs/grpc.md, "Consuming"), found with the
//! official Go client (`rocketmq-clients/golang/v5` 5.1.4, crates/cli/tests/interop_go_grpc.rs):
//!
//! - its SimpleConsumer names the route's queues in turn and sends no long-polling timeout;
//!   a receive naming a drained queue held for 20 s while other queues had messages, past the
//!   client's 5 s deadline, so consumption stalled on DEADLINE_EXCEEDED. A receive is now
//!   served from any queue of the topic on this broker (the Java proxy's broker-acting queue),
//!   and
//! - never held past its gRPC deadline (`grpc-timeout`): it answers MESSAGE_NOT_FOUND before.

mod common;

use std::time::{Duration, Instant};

use common::grpc::{message, resource, send, with_client_id};
use common::{broker, TIMEOUT};
use ferromq_broker::catalog::groups::SubscriptionGroupConfig;
use ferromq_broker::Broker;
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::receive_message_response::Content;
use ferromq_protocol::grpc::{self as pb, Code, SystemProperties};
use tonic::transport::{Channel, Endpoint};

/// A client without a channel-wide timeout, so each request carries only the deadline its
/// test gives it.
async fn grpc_client(broker: &Broker) -> MessagingServiceClient<Channel> {
    let addr = broker.grpc_addr().expect("gRPC endpoint on");
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect to the gRPC endpoint");
    MessagingServiceClient::new(channel)
}

fn topic(broker: &Broker, name: &str, queues: u32) {
    let config = ferromq_broker::catalog::topics::topic_with_queues(name, queues);
    broker.context().topics.upsert(config).unwrap();
}

fn orderly_group(broker: &Broker, name: &str) {
    broker
        .context()
        .groups
        .upsert(SubscriptionGroupConfig {
            group_name: name.into(),
            consume_message_orderly: true,
            ..Default::default()
        })
        .unwrap();
}

fn millis(ms: u64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// What one ReceiveMessage answered.
#[derive(Debug)]
struct Received {
    /// The gRPC status of the call (OK unless the transport failed, e.g. the deadline).
    transport: tonic::Code,
    /// The stream's status code.
    code: Option<i32>,
    /// Bodies and queue ids of the messages.
    messages: Vec<(String, i32)>,
    /// Their receipt handles.
    handles: Vec<String>,
    /// How long the call took.
    took: Duration,
}

/// ReceiveMessage of at most `batch` messages naming queue `queue` of `topic`, with
/// `long_polling_ms` (none: `None`) and the call's deadline `deadline`.
async fn receive(
    grpc: &mut MessagingServiceClient<Channel>,
    (group, topic, queue): (&str, &str, i32),
    batch: i32,
    long_polling_ms: Option<u64>,
    deadline: Duration,
) -> Received {
    let mut request = with_client_id(pb::ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(pb::MessageQueue {
            topic: resource(topic),
            id: queue,
            ..Default::default()
        }),
        batch_size: batch,
        invisible_duration: millis(20_000),
        long_polling_timeout: long_polling_ms.and_then(millis),
        ..Default::default()
    });
    request.set_timeout(deadline);
    let started = Instant::now();
    let mut received = Received {
        transport: tonic::Code::Ok,
        code: None,
        messages: Vec::new(),
        handles: Vec::new(),
        took: Duration::ZERO,
    };
    match grpc.receive_message(request).await {
        Err(status) => received.transport = status.code(),
        Ok(reply) => {
            let mut stream = reply.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(item)) => match item.content.expect("content") {
                        Content::Status(s) => received.code = Some(s.code),
                        Content::Message(m) => {
                            let system = m.system_properties.as_ref().unwrap();
                            received
                                .handles
                                .push(system.receipt_handle.clone().unwrap());
                            received.messages.push((
                                String::from_utf8(m.body.clone()).unwrap(),
                                system.queue_id,
                            ));
                        }
                        Content::DeliveryTimestamp(_) => {}
                    },
                    Ok(None) => break,
                    Err(status) => {
                        received.transport = status.code();
                        break;
                    }
                }
            }
        }
    }
    received.took = started.elapsed();
    received
}

/// Sends `n` NORMAL messages "m<i>" (round robin over the queues) and FIFO ones of group
/// `fifo_group` when given.
async fn send_bodies(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    n: usize,
    fifo_group: Option<&str>,
) {
    let messages = (0..n)
        .map(|i| {
            let system = SystemProperties {
                message_group: fifo_group.map(str::to_string),
                message_type: if fifo_group.is_some() {
                    pb::MessageType::Fifo as i32
                } else {
                    pb::MessageType::Normal as i32
                },
                ..Default::default()
            };
            let message_type = system.message_type;
            let mut m = message(
                topic,
                &format!("ID{i:04}"),
                format!("m{i}").as_bytes(),
                system,
            );
            // `message` makes NORMAL ones; keep the type asked for.
            m.system_properties.as_mut().unwrap().message_type = message_type;
            m
        })
        .collect();
    let reply = send(grpc, messages).await;
    assert_eq!(reply.status.unwrap().code, Code::Ok as i32);
}

/// Acks every message of `got`; asserts OK.
async fn ack_all(
    grpc: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    got: &Received,
) {
    let entries = got
        .handles
        .iter()
        .map(|handle| pb::AckMessageEntry {
            receipt_handle: handle.clone(),
            ..Default::default()
        })
        .collect();
    let reply = grpc
        .ack_message(with_client_id(pb::AckMessageRequest {
            group: resource(group),
            topic: resource(topic),
            entries,
        }))
        .await
        .expect("transport OK")
        .into_inner();
    assert_eq!(reply.status.unwrap().code, Code::Ok as i32);
}

#[tokio::test]
async fn a_receive_naming_a_drained_queue_is_served_from_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "RecvAny", 4);
    let mut grpc = grpc_client(&broker).await;
    // One message: it lands on one queue, and three of the four queues stay empty.
    send_bodies(&mut grpc, "RecvAny", 1, None).await;
    let mut queues = Vec::new();
    for queue in 0..4 {
        // A fresh group per queue: each must get the message at once, whichever queue its
        // receive names, without waiting out the 5 s long polling.
        let group = format!("G{queue}");
        let got = receive(
            &mut grpc,
            (group.as_str(), "RecvAny", queue),
            32,
            Some(5_000),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(got.code, Some(Code::Ok as i32), "queue {queue}: {got:?}");
        assert_eq!(got.messages.len(), 1, "queue {queue}: {got:?}");
        assert_eq!(got.messages[0].0, "m0");
        assert!(
            got.took < Duration::from_secs(2),
            "queue {queue}: served at once, not after the long polling: {got:?}"
        );
        queues.push(got.messages[0].1);
    }
    queues.dedup();
    assert_eq!(queues.len(), 1, "one stored message, one queue: {queues:?}");
    // A queue outside the topic is still refused.
    let got = receive(
        &mut grpc,
        ("G9", "RecvAny", 7),
        32,
        Some(0),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(got.code, Some(Code::BadRequest as i32), "{got:?}");
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_fifo_group_naming_any_queue_still_gets_each_queue_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "RecvFifo", 4);
    orderly_group(&broker, "GF");
    let mut grpc = grpc_client(&broker).await;
    send_bodies(&mut grpc, "RecvFifo", 6, Some("order-1")).await;
    let mut seen = Vec::new();
    for round in 0..3 {
        // Each receive names another queue (batches of two); the group's messages come in
        // order whichever queue is named.
        let queue = round % 4;
        let got = receive(
            &mut grpc,
            ("GF", "RecvFifo", queue),
            2,
            Some(1_000),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(got.code, Some(Code::Ok as i32), "round {round}: {got:?}");
        let queue_id = got.messages[0].1;
        // Nothing more from that queue while its delivery is invisible.
        let blocked = receive(
            &mut grpc,
            ("GF", "RecvFifo", queue_id),
            2,
            Some(200),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            blocked.code,
            Some(Code::MessageNotFound as i32),
            "round {round}: {blocked:?}"
        );
        seen.extend(got.messages.iter().map(|(b, _)| b.clone()));
        ack_all(&mut grpc, "GF", "RecvFifo", &got).await;
    }
    assert_eq!(seen, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_receive_never_holds_past_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "RecvDeadline", 2);
    let mut grpc = grpc_client(&broker).await;
    // No long-polling timeout (as the Go SimpleConsumer sends): held until 1 s before the
    // 3 s deadline, then MESSAGE_NOT_FOUND, not the transport's DEADLINE_EXCEEDED.
    let got = receive(
        &mut grpc,
        ("GD", "RecvDeadline", 0),
        32,
        None,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.transport, tonic::Code::Ok, "{got:?}");
    assert_eq!(got.code, Some(Code::MessageNotFound as i32), "{got:?}");
    assert!(
        got.took >= Duration::from_millis(1_800) && got.took < Duration::from_millis(2_900),
        "held until the deadline less the headroom: {got:?}"
    );
    // A long polling longer than the deadline is cut the same way.
    let got = receive(
        &mut grpc,
        ("GD", "RecvDeadline", -1),
        32,
        Some(20_000),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(got.transport, tonic::Code::Ok, "{got:?}");
    assert_eq!(got.code, Some(Code::MessageNotFound as i32), "{got:?}");
    assert!(got.took < Duration::from_millis(1_900), "{got:?}");
    // A held receive still wakes for a message sent during the hold.
    let mut sender = grpc.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        send_bodies(&mut sender, "RecvDeadline", 1, None).await;
    });
    let got = receive(
        &mut grpc,
        ("GD", "RecvDeadline", 1),
        32,
        None,
        Duration::from_secs(5),
    )
    .await;
    late.await.unwrap();
    assert_eq!(got.code, Some(Code::Ok as i32), "{got:?}");
    assert_eq!(got.messages.len(), 1, "{got:?}");
    assert!(got.took < Duration::from_secs(2), "{got:?}");
    broker.shutdown().await.unwrap();
}
