//! The offset-based pull consumer's RPCs over the gRPC v5 endpoint (`grpc::offsets`), driven
//! by a tonic client against an in-process broker: UpdateOffset and GetOffset as one view
//! with remoting's commits and queries, a lower commit rejected (also for a group idle long
//! enough that a remoting backward commit would be an offline reset), "no offset" apart from
//! errors, QueryOffset BEGINNING / END / TIMESTAMP, and PullMessage streams (messages from an
//! offset, then next_offset; tag filters; long polling; offsets outside the queue; refusals).

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::grpc::{grpc_client, resource, with_client_id};
use common::{broker, broker_config, client, commit, query, send, TIMEOUT};
use ferromq_broker::grpc::consume::DEADLINE_HEADROOM;
use ferromq_broker::Broker;
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::pull_message_response::Content;
use ferromq_protocol::grpc::{self as pb, Code, FilterType, QueryOffsetPolicy};
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::QueryConsumerOffsetResponseHeader;
use tonic::transport::Channel;

type Grpc = MessagingServiceClient<Channel>;

const GROUP: &str = "G";

fn queue(topic: &str, id: i32) -> Option<pb::MessageQueue> {
    Some(pb::MessageQueue {
        topic: resource(topic),
        id,
        ..Default::default()
    })
}

fn code(status: &Option<pb::Status>) -> i32 {
    status.as_ref().expect("status present").code
}

fn message(status: &Option<pb::Status>) -> String {
    status.as_ref().expect("status present").message.clone()
}

/// Sends `bodies` to `topic`/`queue_id` over remoting (tag = the body), each acknowledged.
async fn send_all(broker: &Broker, topic: &str, queue_id: i32, bodies: &[&str]) {
    let remoting = client(broker.local_addr()).await;
    for body in bodies {
        let reply = send(&remoting, topic, queue_id, body.as_bytes(), body).await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
}

async fn update(grpc: &mut Grpc, topic: &str, queue_id: i32, offset: i64) -> pb::Status {
    grpc.update_offset(with_client_id(pb::UpdateOffsetRequest {
        group: resource(GROUP),
        message_queue: queue(topic, queue_id),
        offset,
    }))
    .await
    .expect("transport OK")
    .into_inner()
    .status
    .expect("status present")
}

async fn get(grpc: &mut Grpc, topic: &str, queue_id: i32) -> pb::GetOffsetResponse {
    grpc.get_offset(with_client_id(pb::GetOffsetRequest {
        group: resource(GROUP),
        message_queue: queue(topic, queue_id),
    }))
    .await
    .expect("transport OK")
    .into_inner()
}

async fn query_offset(
    grpc: &mut Grpc,
    topic: &str,
    queue_id: i32,
    policy: QueryOffsetPolicy,
    timestamp: Option<prost_types::Timestamp>,
) -> pb::QueryOffsetResponse {
    grpc.query_offset(with_client_id(pb::QueryOffsetRequest {
        message_queue: queue(topic, queue_id),
        query_offset_policy: policy as i32,
        timestamp,
    }))
    .await
    .expect("transport OK")
    .into_inner()
}

/// Group G's offset of `topic`/`queue_id` as a remoting consumer reads it (`None`: none).
async fn remoting_offset(broker: &Broker, topic: &str, queue_id: i32) -> Option<i64> {
    let remoting = client(broker.local_addr()).await;
    let reply = query(&remoting, topic, queue_id).await;
    (reply.code == response::SUCCESS).then(|| {
        reply
            .decode_header::<QueryConsumerOffsetResponseHeader>()
            .expect("offset header")
            .offset
    })
}

/// One pull stream, read whole: the status, the messages and next_offset, in the order they
/// came (checked: status first, next_offset last).
#[derive(Debug)]
struct Pull {
    status: pb::Status,
    messages: Vec<pb::Message>,
    next_offset: Option<i64>,
}

fn pull_of(topic: &str, queue_id: i32, offset: i64, batch: i32) -> pb::PullMessageRequest {
    pb::PullMessageRequest {
        group: resource(GROUP),
        message_queue: queue(topic, queue_id),
        offset,
        batch_size: batch,
        filter_expression: None,
        long_polling_timeout: None,
    }
}

async fn pull(grpc: &mut Grpc, request: tonic::Request<pb::PullMessageRequest>) -> Pull {
    let mut stream = grpc
        .pull_message(request)
        .await
        .expect("transport OK")
        .into_inner();
    let mut items = Vec::new();
    while let Some(item) = tokio::time::timeout(TIMEOUT, stream.message())
        .await
        .expect("stream item in time")
        .expect("stream item")
    {
        items.push(item.content.expect("content"));
    }
    let mut items = items.into_iter();
    let Some(Content::Status(status)) = items.next() else {
        panic!("a pull stream starts with its status");
    };
    let mut messages = Vec::new();
    let mut next_offset = None;
    for item in items {
        assert!(next_offset.is_none(), "next_offset comes last");
        match item {
            Content::Message(m) => messages.push(m),
            Content::NextOffset(n) => next_offset = Some(n),
            Content::Status(s) => panic!("a second status {s:?}"),
        }
    }
    Pull {
        status,
        messages,
        next_offset,
    }
}

fn bodies(messages: &[pb::Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| String::from_utf8(m.body.clone()).unwrap())
        .collect()
}

/// The max offset of `topic`/`queue_id` once it reaches `want` (QueryOffset END waits for
/// dispatch to cover acknowledged sends; bounded retries in case it is still behind).
async fn wait_max(grpc: &mut Grpc, topic: &str, queue_id: i32, want: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let end = query_offset(grpc, topic, queue_id, QueryOffsetPolicy::End, None).await;
        assert_eq!(code(&end.status), Code::Ok as i32, "{:?}", end.status);
        if end.offset >= want || tokio::time::Instant::now() >= deadline {
            return end.offset;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn update_offset_and_get_offset_are_one_view_with_remoting() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TOff", 0, &["m0", "m1", "m2", "m3", "m4"]).await;
    assert_eq!(wait_max(&mut grpc, "TOff", 0, 5).await, 5);

    // Nothing stored yet: NOT_FOUND, not an error and not a made-up 0.
    let none = get(&mut grpc, "TOff", 0).await;
    assert_eq!(code(&none.status), Code::NotFound as i32);
    assert!(
        message(&none.status).contains("no offset stored for group G on TOff/0"),
        "{:?}",
        none.status
    );
    assert_eq!(remoting_offset(&broker, "TOff", 0).await, None);

    let stored = update(&mut grpc, "TOff", 0, 3).await;
    assert_eq!(stored.code, Code::Ok as i32, "{stored:?}");
    let read = get(&mut grpc, "TOff", 0).await;
    assert_eq!(
        (code(&read.status), read.offset),
        (Code::Ok as i32, 3),
        "{read:?}"
    );
    assert_eq!(remoting_offset(&broker, "TOff", 0).await, Some(3));

    // The other way round: a remoting commit is what GetOffset answers.
    let remoting = client(broker.local_addr()).await;
    assert_eq!(
        commit(&remoting, "TOff", 0, 4).await.code,
        response::SUCCESS
    );
    assert_eq!(get(&mut grpc, "TOff", 0).await.offset, 4);
    // The other queue still has none.
    assert_eq!(
        code(&get(&mut grpc, "TOff", 1).await.status),
        Code::NotFound as i32
    );

    // Past the queue's max, negative, or nameless: BAD_REQUEST / ILLEGAL_*, nothing stored.
    let past = update(&mut grpc, "TOff", 0, 50).await;
    assert_eq!(past.code, Code::BadRequest as i32, "{past:?}");
    assert!(
        past.message.contains("past the queue's max offset 5"),
        "{past:?}"
    );
    let negative = update(&mut grpc, "TOff", 0, -1).await;
    assert_eq!(negative.code, Code::BadRequest as i32);
    let missing_topic = update(&mut grpc, "NoSuchTopic", 0, 1).await;
    assert_eq!(missing_topic.code, Code::TopicNotFound as i32);
    let nameless = grpc
        .update_offset(with_client_id(pb::UpdateOffsetRequest {
            group: None,
            message_queue: queue("TOff", 0),
            offset: 5,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&nameless.status), Code::IllegalConsumerGroup as i32);
    let anonymous = grpc
        .update_offset(pb::UpdateOffsetRequest {
            group: resource(GROUP),
            message_queue: queue("TOff", 0),
            offset: 5,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&anonymous.status), Code::ClientIdRequired as i32);
    assert_eq!(get(&mut grpc, "TOff", 0).await.offset, 4);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_lower_update_offset_is_rejected_and_the_stored_offset_stays() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TLow", 0, &["a", "b", "c", "d", "e"]).await;
    assert_eq!(wait_max(&mut grpc, "TLow", 0, 5).await, 5);
    assert_eq!(update(&mut grpc, "TLow", 0, 4).await.code, Code::Ok as i32);
    let rejected_before = broker
        .context()
        .counters
        .commits_rejected
        .load(Ordering::Relaxed);

    let lower = update(&mut grpc, "TLow", 0, 2).await;
    assert_eq!(lower.code, Code::PreconditionFailed as i32, "{lower:?}");
    assert!(
        lower.message.contains("below the stored offset 4"),
        "{lower:?}"
    );
    assert_eq!(
        broker
            .context()
            .counters
            .commits_rejected
            .load(Ordering::Relaxed),
        rejected_before + 1,
        "the rejection is counted"
    );
    assert_eq!(get(&mut grpc, "TLow", 0).await.offset, 4);
    assert_eq!(remoting_offset(&broker, "TLow", 0).await, Some(4));
    // The same offset again changes nothing and is fine.
    assert_eq!(update(&mut grpc, "TLow", 0, 4).await.code, Code::Ok as i32);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

/// With no member for a whole `channelExpiredTimeout`, a remoting backward commit is an
/// administrator's offline reset (core rule 4); a gRPC UpdateOffset is a consumer's progress
/// and stays a rejected regression.
#[tokio::test]
async fn a_backward_update_offset_of_an_idle_group_is_a_regression_not_an_offline_reset() {
    let dir = tempfile::tempdir().unwrap();
    let config = ferromq_broker::BrokerConfig {
        channel_expired_timeout: 1000,
        ..broker_config(dir.path(), true)
    };
    let broker = Broker::start(config).await.expect("broker starts");
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TIdle", 0, &["a", "b", "c", "d", "e"]).await;
    send_all(&broker, "TIdle", 1, &["a", "b", "c", "d", "e"]).await;
    assert_eq!(wait_max(&mut grpc, "TIdle", 0, 5).await, 5);
    assert_eq!(wait_max(&mut grpc, "TIdle", 1, 5).await, 5);
    assert_eq!(update(&mut grpc, "TIdle", 0, 4).await.code, Code::Ok as i32);
    assert_eq!(update(&mut grpc, "TIdle", 1, 4).await.code, Code::Ok as i32);
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let lower = update(&mut grpc, "TIdle", 0, 1).await;
    assert_eq!(lower.code, Code::PreconditionFailed as i32, "{lower:?}");
    assert_eq!(get(&mut grpc, "TIdle", 0).await.offset, 4);
    // The setup is one where the offline rule applies: remoting's backward commit moves.
    let remoting = client(broker.local_addr()).await;
    assert_eq!(
        commit(&remoting, "TIdle", 1, 1).await.code,
        response::SUCCESS
    );
    assert_eq!(get(&mut grpc, "TIdle", 1).await.offset, 1);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

fn now_timestamp() -> prost_types::Timestamp {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    prost_types::Timestamp {
        seconds: now.as_secs() as i64,
        nanos: now.subsec_nanos() as i32,
    }
}

#[tokio::test]
async fn query_offset_answers_beginning_end_and_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TQ", 0, &["a", "b", "c"]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between = now_timestamp();
    tokio::time::sleep(Duration::from_millis(50)).await;
    send_all(&broker, "TQ", 0, &["d", "e"]).await;

    let end = query_offset(&mut grpc, "TQ", 0, QueryOffsetPolicy::End, None).await;
    assert_eq!((code(&end.status), end.offset), (Code::Ok as i32, 5));
    let beginning = query_offset(&mut grpc, "TQ", 0, QueryOffsetPolicy::Beginning, None).await;
    assert_eq!(
        (code(&beginning.status), beginning.offset),
        (Code::Ok as i32, 0)
    );
    let at = query_offset(
        &mut grpc,
        "TQ",
        0,
        QueryOffsetPolicy::Timestamp,
        Some(between),
    )
    .await;
    assert_eq!(
        (code(&at.status), at.offset),
        (Code::Ok as i32, 3),
        "the first message stored after the time"
    );
    let after_all = query_offset(
        &mut grpc,
        "TQ",
        0,
        QueryOffsetPolicy::Timestamp,
        Some(now_timestamp()),
    )
    .await;
    assert_eq!(after_all.offset, 5, "none stored after: the max");
    // The other queue is empty.
    let empty = query_offset(&mut grpc, "TQ", 1, QueryOffsetPolicy::End, None).await;
    assert_eq!((code(&empty.status), empty.offset), (Code::Ok as i32, 0));

    let no_time = query_offset(&mut grpc, "TQ", 0, QueryOffsetPolicy::Timestamp, None).await;
    assert_eq!(code(&no_time.status), Code::BadRequest as i32);
    let missing = query_offset(&mut grpc, "NoSuchTopic", 0, QueryOffsetPolicy::End, None).await;
    assert_eq!(code(&missing.status), Code::TopicNotFound as i32);
    let outside = query_offset(&mut grpc, "TQ", 9, QueryOffsetPolicy::End, None).await;
    assert_eq!(code(&outside.status), Code::BadRequest as i32);
    assert!(message(&outside.status).contains("outside the 2 read queues"));
    let bad_policy = grpc
        .query_offset(pb::QueryOffsetRequest {
            message_queue: queue("TQ", 0),
            query_offset_policy: 7,
            timestamp: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&bad_policy.status), Code::BadRequest as i32);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn pull_message_streams_messages_from_an_offset_then_next_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TPull", 0, &["a", "b", "a", "b", "a"]).await;
    assert_eq!(wait_max(&mut grpc, "TPull", 0, 5).await, 5);

    let got = pull(&mut grpc, with_client_id(pull_of("TPull", 0, 1, 2))).await;
    assert_eq!(got.status.code, Code::Ok as i32, "{got:?}");
    assert_eq!(bodies(&got.messages), ["b", "a"]);
    let system: Vec<_> = got
        .messages
        .iter()
        .map(|m| m.system_properties.clone().expect("system properties"))
        .collect();
    assert_eq!(
        system.iter().map(|s| s.queue_offset).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
    assert!(system.iter().all(|s| s.receipt_handle.is_none()));
    assert!(system.iter().all(|s| s.queue_id == 0));
    assert_eq!(system[0].tag.as_deref(), Some("b"));
    assert_eq!(
        system[0].body_digest.as_ref().map(|d| d.checksum.as_str()),
        Some("92EB5FFEE6AE2FEC3AD71C777531578F"),
        "uppercase MD5 of b"
    );
    assert_eq!(system[0].delivery_attempt, Some(1));
    assert_eq!(
        got.messages[0].topic.as_ref().map(|t| t.name.as_str()),
        Some("TPull")
    );
    assert_eq!(got.next_offset, Some(3));

    // A tag filter: only the matching ones, next_offset past what was scanned.
    let mut tagged = pull_of("TPull", 0, 0, 32);
    tagged.filter_expression = Some(pb::FilterExpression {
        r#type: FilterType::Tag as i32,
        expression: "b".into(),
    });
    let got = pull(&mut grpc, with_client_id(tagged)).await;
    assert_eq!(got.status.code, Code::Ok as i32);
    assert_eq!(bodies(&got.messages), ["b", "b"]);
    assert_eq!(got.next_offset, Some(5));

    // At the end, nothing new: MESSAGE_NOT_FOUND, stay there.
    let tail = pull(&mut grpc, with_client_id(pull_of("TPull", 0, 5, 32))).await;
    assert_eq!(tail.status.code, Code::MessageNotFound as i32);
    assert!(tail.messages.is_empty());
    assert_eq!(tail.next_offset, Some(5));

    // Past the end: BAD_REQUEST (ILLEGAL_OFFSET is not safe), and where to continue.
    let past = pull(&mut grpc, with_client_id(pull_of("TPull", 0, 50, 32))).await;
    assert_eq!(past.status.code, Code::BadRequest as i32, "{past:?}");
    assert!(past
        .status
        .message
        .contains("past the queue's max offset 5"));
    assert!(past.messages.is_empty());
    assert_eq!(past.next_offset, Some(5));

    // Long polling: a message sent while the pull is held is returned by it.
    let mut held = pull_of("TPull", 0, 5, 32);
    held.long_polling_timeout = Some(prost_types::Duration {
        seconds: 4,
        nanos: 0,
    });
    let sender = {
        let addr = broker.local_addr();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let remoting = client(addr).await;
            send(&remoting, "TPull", 0, b"late", "late").await.code
        })
    };
    let started = tokio::time::Instant::now();
    let got = pull(&mut grpc, with_client_id(held)).await;
    assert_eq!(got.status.code, Code::Ok as i32, "{got:?}");
    assert_eq!(bodies(&got.messages), ["late"]);
    assert_eq!(got.next_offset, Some(6));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woken by the send"
    );
    assert_eq!(sender.await.unwrap(), response::SUCCESS);
    drop(grpc);
    broker.shutdown().await.unwrap();
}

/// A held pull answers [`DEADLINE_HEADROOM`] before the call's deadline (`grpc-timeout`) when
/// the deadline comes before its long-polling timeout, instead of running into it (found
/// with the Rust client 5.0.0, whose deadline is its long-polling timeout, on receives).
#[tokio::test]
async fn a_held_pull_answers_before_the_call_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TPullDeadline", 0, &["a"]).await;
    assert_eq!(wait_max(&mut grpc, "TPullDeadline", 0, 1).await, 1);
    let call = Duration::from_secs(3);
    let mut held = pull_of("TPullDeadline", 0, 1, 32);
    held.long_polling_timeout = Some(prost_types::Duration {
        seconds: 4,
        nanos: 0,
    });
    let mut request = with_client_id(held);
    request.set_timeout(call);
    let started = tokio::time::Instant::now();
    let got = pull(&mut grpc, request).await;
    let elapsed = started.elapsed();
    assert_eq!(got.status.code, Code::MessageNotFound as i32, "{got:?}");
    assert_eq!(got.next_offset, Some(1));
    assert!(
        elapsed >= call - DEADLINE_HEADROOM - Duration::from_millis(100) && elapsed < call,
        "held {elapsed:?} of a {call:?} call"
    );
    drop(grpc);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn pull_message_refusals_are_a_clear_status_alone() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let mut grpc = grpc_client(&broker).await;
    send_all(&broker, "TBad", 0, &["a"]).await;

    let cases: Vec<(&str, tonic::Request<pb::PullMessageRequest>, Code, &str)> = vec![
        (
            "unknown topic",
            with_client_id(pull_of("NoSuchTopic", 0, 0, 8)),
            Code::TopicNotFound,
            "topic NoSuchTopic does not exist",
        ),
        (
            "queue out of range",
            with_client_id(pull_of("TBad", 7, 0, 8)),
            Code::BadRequest,
            "queueId 7 is outside the 2 read queues of TBad",
        ),
        (
            "negative queue",
            with_client_id(pull_of("TBad", -1, 0, 8)),
            Code::BadRequest,
            "outside the 2 read queues",
        ),
        (
            "missing group",
            with_client_id(pb::PullMessageRequest {
                group: None,
                ..pull_of("TBad", 0, 0, 8)
            }),
            Code::IllegalConsumerGroup,
            "group.name is required",
        ),
        (
            "missing queue",
            with_client_id(pb::PullMessageRequest {
                message_queue: None,
                ..pull_of("TBad", 0, 0, 8)
            }),
            Code::BadRequest,
            "message_queue is required",
        ),
        (
            "negative offset",
            with_client_id(pull_of("TBad", 0, -3, 8)),
            Code::BadRequest,
            "offset -3 is negative",
        ),
        (
            "zero batch",
            with_client_id(pull_of("TBad", 0, 0, 0)),
            Code::BadRequest,
            "batch_size 0 is not positive",
        ),
        (
            "SQL filter",
            with_client_id(pb::PullMessageRequest {
                filter_expression: Some(pb::FilterExpression {
                    r#type: FilterType::Sql as i32,
                    expression: "a > 1".into(),
                }),
                ..pull_of("TBad", 0, 0, 8)
            }),
            Code::IllegalFilterExpression,
            "not supported; use TAG",
        ),
        (
            "no client id",
            tonic::Request::new(pull_of("TBad", 0, 0, 8)),
            Code::ClientIdRequired,
            "x-mq-client-id",
        ),
    ];
    for (case, request, want, remark) in cases {
        let got = pull(&mut grpc, request).await;
        assert_eq!(got.status.code, want as i32, "{case}: {got:?}");
        assert!(
            got.status.message.contains(remark),
            "{case}: {:?}",
            got.status
        );
        assert!(
            got.messages.is_empty() && got.next_offset.is_none(),
            "{case}: a refusal is its status alone"
        );
    }
    drop(grpc);
    broker.shutdown().await.unwrap();
}
