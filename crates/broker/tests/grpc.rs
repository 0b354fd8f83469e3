//! The gRPC v5 endpoint (docs/grpc.md) driven by a tonic client built from ferromq's own
//! generated code, against an in-process broker on OS-chosen ports: routes, Telemetry,
//! Heartbeat, SendMessage (normal, FIFO, GZIP, refusals), the stored messages read back over
//! the remoting pull path, unsupported RPCs refused with UNSUPPORTED and counted, and malformed input.

mod common;

use std::io::Write;
use std::time::Duration;

use common::grpc::{grpc_client, message, resource, send, with_client_id};
use common::{broker, client, pull_command, records, TIMEOUT};
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::telemetry_command::Command;
use ferromq_protocol::grpc::{
    self as pb, Code, Encoding, MessageType, Permission, Resource, SystemProperties,
};
use ferromq_protocol::RecordView;
use tonic::transport::Endpoint;

fn code(status: &Option<pb::Status>) -> i32 {
    status.as_ref().expect("status present").code
}

/// Every record of `topic`/`queue` read over remoting from offset 0.
async fn pulled(addr: std::net::SocketAddr, topic: &str, queue: i32) -> Vec<Vec<u8>> {
    let remoting = client(addr).await;
    let reply = remoting
        .invoke(pull_command(topic, queue, 0, 0, "*"), TIMEOUT)
        .await
        .expect("pull reply");
    records(&reply)
}

/// Every record of `topic` (two queues), once `expected` are dispatched (bounded wait:
/// dispatch follows the acknowledgement asynchronously).
async fn pulled_all(
    addr: std::net::SocketAddr,
    topic: &str,
    expected: usize,
) -> Vec<(i32, Vec<u8>)> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut all = Vec::new();
        for queue in 0..2 {
            all.extend(
                pulled(addr, topic, queue)
                    .await
                    .into_iter()
                    .map(|r| (queue, r)),
            );
        }
        if all.len() >= expected || tokio::time::Instant::now() >= deadline {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn query_route_lists_every_queue_with_permission_and_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    let mut grpc = grpc_client(&broker).await;
    let endpoints = pb::Endpoints {
        scheme: pb::AddressScheme::IPv4 as i32,
        addresses: vec![pb::Address {
            host: "10.9.8.7".into(),
            port: 8081,
        }],
    };
    let missing = grpc
        .query_route(pb::QueryRouteRequest {
            topic: resource("NoSuchTopic"),
            endpoints: Some(endpoints.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&missing.status), Code::TopicNotFound as i32);
    assert!(missing.message_queues.is_empty());
    let mut config = ferromq_broker::catalog::topics::topic_with_queues("RouteT", 3);
    config.read_queue_nums = 2;
    broker.context().topics.upsert(config).unwrap();
    let route = grpc
        .query_route(pb::QueryRouteRequest {
            topic: resource("RouteT"),
            endpoints: Some(endpoints.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok as i32);
    let ids: Vec<i32> = route.message_queues.iter().map(|q| q.id).collect();
    assert_eq!(ids, vec![0, 1, 2]);
    let permissions: Vec<i32> = route.message_queues.iter().map(|q| q.permission).collect();
    assert_eq!(
        permissions,
        vec![
            Permission::ReadWrite as i32,
            Permission::ReadWrite as i32,
            Permission::Write as i32
        ]
    );
    for queue in &route.message_queues {
        let broker_info = queue.broker.as_ref().unwrap();
        assert_eq!(broker_info.id, 0);
        assert_eq!(broker_info.name, "broker-a");
        assert_eq!(broker_info.endpoints.as_ref(), Some(&endpoints));
        assert_eq!(queue.topic.as_ref().unwrap().name, "RouteT");
        assert_eq!(
            queue.accept_message_types,
            vec![
                MessageType::Normal as i32,
                MessageType::Fifo as i32,
                MessageType::Delay as i32,
                MessageType::Transaction as i32
            ]
        );
    }
    drop(grpc);
    broker.shutdown().await.unwrap();
}

/// Consumers are told the group's own settings (as the Java proxy does): FIFO from its orderly
/// flag, `retryMaxTimes + 1` attempts (the limit the broker dead-letters at), and a receive
/// batch size — without one the Java 5.x push consumer asks for 0 messages per receive and
/// gets one at a time.
#[tokio::test]
async fn telemetry_tells_consumers_their_groups_order_attempts_and_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    broker
        .context()
        .groups
        .upsert(ferromq_broker::catalog::groups::SubscriptionGroupConfig {
            group_name: "GOrderly".into(),
            consume_message_orderly: true,
            retry_max_times: 3,
            ..Default::default()
        })
        .unwrap();
    let mut grpc = grpc_client(&broker).await;
    for (group, fifo, attempts) in [("GOrderly", true, 4), ("GNotMadeYet", false, 17)] {
        let settings = pb::TelemetryCommand {
            status: None,
            command: Some(Command::Settings(pb::Settings {
                client_type: Some(pb::ClientType::PushConsumer as i32),
                pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                    group: Some(Resource {
                        resource_namespace: String::new(),
                        name: group.into(),
                    }),
                    ..Default::default()
                })),
                ..Default::default()
            })),
        };
        let mut replies = grpc
            .telemetry(with_client_id(futures_util::stream::iter([settings])))
            .await
            .expect("stream opens")
            .into_inner();
        let reply = tokio::time::timeout(TIMEOUT, replies.message())
            .await
            .expect("a reply in time")
            .expect("stream OK")
            .expect("a reply, not the end");
        assert_eq!(code(&reply.status), Code::Ok as i32, "{group}");
        let Some(Command::Settings(merged)) = reply.command else {
            panic!("settings expected, got {reply:?}");
        };
        let Some(pb::settings::PubSub::Subscription(subscription)) = merged.pub_sub else {
            panic!("subscription expected");
        };
        assert_eq!(subscription.fifo, Some(fifo), "{group}");
        assert_eq!(subscription.receive_batch_size, Some(32), "{group}");
        assert_eq!(
            subscription.long_polling_timeout.map(|d| d.seconds),
            Some(20),
            "{group}"
        );
        assert_eq!(
            merged.backoff_policy.map(|b| b.max_attempts),
            Some(attempts),
            "{group}: the group's retryMaxTimes + 1"
        );
    }
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn telemetry_answers_every_settings_with_merged_values_and_heartbeat_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let settings = pb::TelemetryCommand {
        status: None,
        command: Some(Command::Settings(pb::Settings {
            client_type: Some(pb::ClientType::Producer as i32),
            pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing {
                topics: vec![Resource {
                    resource_namespace: String::new(),
                    name: "TeleT".into(),
                }],
                max_body_size: 1,
                validate_message_type: false,
            })),
            ..Default::default()
        })),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(settings.clone()).await.unwrap();
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut replies = grpc
        .telemetry(with_client_id(outbound))
        .await
        .expect("stream opens")
        .into_inner();
    for round in 0..2 {
        let reply = tokio::time::timeout(TIMEOUT, replies.message())
            .await
            .expect("a reply in time")
            .expect("stream OK")
            .expect("a reply, not the end");
        assert_eq!(code(&reply.status), Code::Ok as i32, "round {round}");
        let Some(Command::Settings(merged)) = reply.command else {
            panic!("settings expected, got {reply:?}");
        };
        let Some(pb::settings::PubSub::Publishing(publishing)) = merged.pub_sub else {
            panic!("publishing expected");
        };
        assert_eq!(
            publishing.max_body_size,
            64 * 1024,
            "the broker's maxMessageSize"
        );
        assert!(publishing.validate_message_type);
        assert_eq!(merged.backoff_policy.unwrap().max_attempts, 3);
        assert_eq!(merged.metric.map(|m| m.on), Some(false));
        // The client re-sends its settings: the stream stays open and answers again.
        tx.send(settings.clone()).await.unwrap();
    }
    let heartbeat = grpc
        .heartbeat(with_client_id(pb::HeartbeatRequest {
            group: None,
            client_type: pb::ClientType::Producer as i32,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&heartbeat.status), Code::Ok as i32);
    let anonymous = grpc
        .heartbeat(pb::HeartbeatRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&anonymous.status), Code::ClientIdRequired as i32);
    let bye = grpc
        .notify_client_termination(with_client_id(pb::NotifyClientTerminationRequest {
            group: None,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&bye.status), Code::Ok as i32);
    drop(tx);
    drop(replies);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn sent_messages_are_stored_with_mapped_properties_and_read_over_remoting() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let mut normal = message(
        "GrpcT",
        "01NORMAL",
        b"hello",
        SystemProperties {
            tag: Some("TagA".into()),
            keys: vec!["k1".into(), "k2".into()],
            ..Default::default()
        },
    );
    normal.user_properties.insert("color".into(), "red".into());
    let reply = send(&mut grpc, vec![normal]).await;
    assert_eq!(code(&reply.status), Code::Ok as i32, "{reply:?}");
    assert_eq!(reply.entries.len(), 1);
    assert_eq!(reply.entries[0].message_id, "01NORMAL");
    // FIFO: every message of one group lands on one queue, in order.
    let fifo: Vec<pb::Message> = (0..6)
        .map(|i| {
            let mut m = message(
                "GrpcT",
                &format!("01FIFO{i}"),
                format!("fifo-{i}").as_bytes(),
                SystemProperties {
                    message_group: Some("order-7".into()),
                    ..Default::default()
                },
            );
            m.system_properties.as_mut().unwrap().message_type = MessageType::Fifo as i32;
            m
        })
        .collect();
    let reply = send(&mut grpc, fifo).await;
    assert_eq!(code(&reply.status), Code::Ok as i32, "{reply:?}");
    assert_eq!(reply.entries.len(), 6);
    let offsets: Vec<i64> = reply.entries.iter().map(|e| e.offset).collect();
    assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1), "{offsets:?}");
    // GZIP: stored inflated.
    let plain = b"compressible ".repeat(100);
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&plain).unwrap();
    let mut gz = message(
        "GrpcT",
        "01GZIP",
        &encoder.finish().unwrap(),
        Default::default(),
    );
    gz.system_properties.as_mut().unwrap().body_encoding = Encoding::Gzip as i32;
    let reply = send(&mut grpc, vec![gz]).await;
    assert_eq!(code(&reply.status), Code::Ok as i32, "{reply:?}");

    let addr = broker.local_addr();
    let mut all = Vec::new();
    let mut fifo_queues = std::collections::BTreeSet::new();
    for (queue, record) in pulled_all(addr, "GrpcT", 8).await {
        {
            let view = RecordView::parse(&record).unwrap();
            let id = view.properties.get_str("UNIQ_KEY").unwrap().to_string();
            if id.starts_with("01FIFO") {
                fifo_queues.insert(queue);
                assert_eq!(view.properties.get_str("__SHARDINGKEY"), Some("order-7"));
            }
            all.push((id, view.body.to_vec(), record.clone()));
        }
    }
    assert_eq!(all.len(), 8, "every message stored once");
    assert_eq!(fifo_queues.len(), 1, "one FIFO group, one queue");
    let (_, body, record) = all.iter().find(|(id, ..)| id == "01NORMAL").unwrap();
    assert_eq!(body, b"hello");
    let view = RecordView::parse(record).unwrap();
    assert_eq!(view.properties.get_str("TAGS"), Some("TagA"));
    assert_eq!(view.properties.get_str("KEYS"), Some("k1 k2"));
    assert_eq!(view.properties.get_str("color"), Some("red"));
    let (_, body, _) = all.iter().find(|(id, ..)| id == "01GZIP").unwrap();
    assert_eq!(body, &plain, "GZIP body stored inflated");
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn refused_messages_get_their_code_per_entry_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let oversized = message(
        "RefT",
        "01BIG",
        &vec![0u8; 64 * 1024 + 1],
        Default::default(),
    );
    let mut delay = message("RefT", "01DELAY", b"later", Default::default());
    {
        let system = delay.system_properties.as_mut().unwrap();
        system.message_type = MessageType::Delay as i32;
        system.delivery_timestamp = Some(prost_types::Timestamp {
            seconds: 4_000_000_000,
            nanos: 0,
        });
    }
    let mut transaction = message("RefT", "01TX", b"half", Default::default());
    transaction.system_properties.as_mut().unwrap().message_type = MessageType::Transaction as i32;
    let mut fifo_without_group = message("RefT", "01NOGROUP", b"x", Default::default());
    fifo_without_group
        .system_properties
        .as_mut()
        .unwrap()
        .message_type = MessageType::Fifo as i32;
    let bad_topic = message("bad topic!", "01BADTOPIC", b"x", Default::default());
    let ok = message("RefT", "01OK", b"fine", Default::default());
    let reply = send(
        &mut grpc,
        vec![
            oversized,
            delay,
            transaction,
            fifo_without_group,
            bad_topic,
            ok,
        ],
    )
    .await;
    let codes: Vec<i32> = reply.entries.iter().map(|e| code(&e.status)).collect();
    assert_eq!(
        codes,
        vec![
            Code::MessageBodyTooLarge as i32,
            Code::IllegalDeliveryTime as i32,
            Code::Ok as i32,
            Code::MessagePropertyConflictWithType as i32,
            Code::IllegalTopic as i32,
            Code::Ok as i32,
        ],
        "{reply:?}"
    );
    assert_eq!(code(&reply.status), Code::MultipleResults as i32);
    let ids: Vec<&str> = reply
        .entries
        .iter()
        .map(|e| e.message_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "01BIG",
            "01DELAY",
            "01TX",
            "01NOGROUP",
            "01BADTOPIC",
            "01OK"
        ]
    );
    let remark = &reply.entries[1].status.as_ref().unwrap().message;
    assert!(remark.contains("timerMaxDelaySec"), "{remark}");
    let stored = pulled_all(broker.local_addr(), "RefT", 1).await;
    assert_eq!(
        stored.len(),
        1,
        "only the accepted message is stored (the transactional one is a half until committed)"
    );
    assert_eq!(RecordView::parse(&stored[0].1).unwrap().body, b"fine");
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn requests_missing_their_fields_are_refused_and_unhandled_telemetry_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let metrics = &broker.context().metrics;
    let recall = grpc
        .recall_message(with_client_id(pb::RecallMessageRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&recall.status), Code::BadRequest as i32);
    assert!(recall.status.unwrap().message.contains("recall handle"));
    let end = grpc
        .end_transaction(with_client_id(pb::EndTransactionRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        code(&end.status),
        Code::IllegalTopic as i32,
        "served: refused for its topic"
    );
    // A Telemetry command answering a server command ferromq never sent: UNSUPPORTED, counted.
    assert_eq!(metrics.grpc_unsupported_count("Telemetry"), 0);
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::TelemetryCommand>(1);
    tx.send(pb::TelemetryCommand {
        status: None,
        command: Some(Command::ThreadStackTrace(pb::ThreadStackTrace::default())),
    })
    .await
    .unwrap();
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut replies = grpc
        .telemetry(with_client_id(outbound))
        .await
        .unwrap()
        .into_inner();
    let reply = tokio::time::timeout(TIMEOUT, replies.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(code(&reply.status), Code::Unsupported as i32);
    assert_eq!(metrics.grpc_unsupported_count("Telemetry"), 1);
    drop(tx);
    // A receive that names no group is refused with a status, then delivery_timestamp.
    let mut stream = grpc
        .receive_message(with_client_id(pb::ReceiveMessageRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("a status entry");
    let Some(pb::receive_message_response::Content::Status(status)) = first.content else {
        panic!("status first, got {first:?}");
    };
    assert_eq!(status.code, Code::IllegalConsumerGroup as i32);
    assert!(matches!(
        stream.message().await.unwrap().and_then(|m| m.content),
        Some(pb::receive_message_response::Content::DeliveryTimestamp(_))
    ));
    assert!(
        stream.message().await.unwrap().is_none(),
        "then the stream ends"
    );
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_an_error_status_and_the_broker_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let addr = broker.grpc_addr().unwrap();
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    // Garbage bytes where a SendMessageRequest should be: a raw codec-less call.
    let mut raw = tonic::client::Grpc::new(channel.clone());
    raw.ready().await.unwrap();
    let path =
        http::uri::PathAndQuery::from_static("/apache.rocketmq.v2.MessagingService/SendMessage");
    // Field 1 of SendMessageRequest must be a Message; these bytes are not one.
    let result: Result<tonic::Response<pb::SendMessageResponse>, tonic::Status> = raw
        .unary(
            tonic::Request::new(BadBytes(vec![0x0a, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff])),
            path,
            RawCodec,
        )
        .await;
    let error = result.expect_err("a transport error status, not a reply");
    assert_eq!(error.code(), tonic::Code::Internal, "{error:?}");
    // Larger than maxMessageSize + headroom: refused before decoding.
    let mut grpc = MessagingServiceClient::new(channel).max_encoding_message_size(usize::MAX);
    let huge = message(
        "BigT",
        "01HUGE",
        &vec![1u8; 64 * 1024 + (1 << 20) + 1],
        Default::default(),
    );
    let error = grpc
        .send_message(pb::SendMessageRequest {
            messages: vec![huge],
        })
        .await
        .expect_err("too large to decode");
    assert_eq!(error.code(), tonic::Code::OutOfRange, "{error:?}");
    // Missing fields: answered with a status naming them.
    let reply = send(
        &mut grpc,
        vec![pb::Message {
            topic: resource("T"),
            ..Default::default()
        }],
    )
    .await;
    assert_eq!(code(&reply.entries[0].status), Code::BadRequest as i32);
    let empty = send(&mut grpc, Vec::new()).await;
    assert_eq!(code(&empty.status), Code::BadRequest as i32);
    // Still serving.
    let route = grpc
        .query_route(pb::QueryRouteRequest {
            topic: resource("AfterT"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok as i32);
    let own = route.message_queues[0].broker.as_ref().unwrap();
    let own = &own.endpoints.as_ref().unwrap().addresses[0];
    assert_eq!(
        own.port,
        i32::from(addr.port()),
        "no endpoints: the broker's own"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    broker.shutdown().await.unwrap();
}

/// Bytes sent as they are.
#[derive(Debug, Clone)]
struct BadBytes(Vec<u8>);

/// A codec that writes [`BadBytes`] raw and decodes replies as `SendMessageResponse`.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = BadBytes;
    type Decode = pb::SendMessageResponse;
    type Encoder = RawEncoder;
    type Decoder = <tonic_prost::ProstCodec<pb::SendMessageRequest, pb::SendMessageResponse> as tonic::codec::Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic::codec::Codec::decoder(&mut tonic_prost::ProstCodec::<
            pb::SendMessageRequest,
            pb::SendMessageResponse,
        >::default())
    }
}

#[derive(Debug, Clone, Copy)]
struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = BadBytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: BadBytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item.0);
        Ok(())
    }
}

#[tokio::test]
async fn a_client_opening_too_many_telemetry_streams_gets_too_many_requests() {
    use ferromq_broker::grpc::clients::TELEMETRY_STREAMS_PER_CLIENT_MAX;
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let mut open = Vec::new();
    for _ in 0..TELEMETRY_STREAMS_PER_CLIENT_MAX {
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::TelemetryCommand>(1);
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
            );
        let replies = grpc
            .telemetry(with_client_id(outbound))
            .await
            .expect("within the limit")
            .into_inner();
        open.push((tx, replies));
    }
    let (_tx, rx) = tokio::sync::mpsc::channel::<pb::TelemetryCommand>(1);
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut refused = grpc
        .telemetry(with_client_id(outbound))
        .await
        .expect("the refusal travels as a status entry")
        .into_inner();
    let reply = tokio::time::timeout(TIMEOUT, refused.message())
        .await
        .expect("in time")
        .expect("stream OK")
        .expect("one status entry");
    assert_eq!(code(&reply.status), Code::TooManyRequests as i32);
    assert!(
        reply.status.unwrap().message.contains("Telemetry streams"),
        "the remark names the limit"
    );
    let end = tokio::time::timeout(TIMEOUT, refused.message())
        .await
        .expect("in time");
    assert!(matches!(end, Ok(None)), "then the stream closes: {end:?}");
    // Closing one stream makes room again.
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (_tx, rx) = tokio::sync::mpsc::channel::<pb::TelemetryCommand>(1);
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
            );
        let mut stream = grpc
            .telemetry(with_client_id(outbound))
            .await
            .unwrap()
            .into_inner();
        let first = tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
        // An accepted stream sends nothing until the client writes settings.
        if first.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "room never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Streams still open do not hold the broker's shutdown past its grace.
    tokio::time::timeout(Duration::from_secs(10), broker.shutdown())
        .await
        .expect("shutdown bounded with Telemetry streams open")
        .unwrap();
    drop(open);
    drop(grpc);
}

#[tokio::test]
async fn properties_too_large_get_their_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    let mut big = message("PropT", "01BIGPROPS", b"x", Default::default());
    big.user_properties
        .insert("filler".into(), "p".repeat(40 * 1024));
    let reply = send(&mut grpc, vec![big]).await;
    assert_eq!(
        code(&reply.entries[0].status),
        Code::MessagePropertiesTooLarge as i32,
        "{reply:?}"
    );
    broker.shutdown().await.unwrap();
}
