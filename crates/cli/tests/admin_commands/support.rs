//! Helpers the admin command tests share: a runtime, remoting calls made the way a client
//! makes them (send, commit, heartbeat, pull), the client library's producer, and JSON
//! accessors.

use std::time::Duration;

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeader;
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
use serde_json::Value;

pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) async fn connect(addr: &str) -> RemotingClient {
    RemotingClient::connect(addr.parse().unwrap(), TIMEOUT)
        .await
        .unwrap()
}

/// Sends one message to a queue; returns its offset message id.
pub(crate) async fn send(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    body: &str,
) -> String {
    let header = SendMessageRequestHeader {
        producer_group: "admin-test-producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: 0,
        flag: 0,
        properties: Some("TAGS\u{1}tagA\u{2}KEYS\u{1}key1\u{2}".into()),
        reconsume_times: None,
        unit_mode: None,
        batch: None,
        max_reconsume_times: None,
        broker_name: None,
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    reply.ext_fields["msgId"].to_string()
}

pub(crate) async fn commit(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub(crate) fn queue(value: &Value, queue_id: i64) -> &Value {
    value["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queueId"].as_i64() == Some(queue_id))
        .unwrap_or_else(|| panic!("no queue {queue_id} in {value}"))
}

/// Registers `client` as an online consumer of `group` on `topic` (one heartbeat).
pub(crate) async fn heartbeat(client: &RemotingClient, client_id: &str, group: &str, topic: &str) {
    let body = serde_json::json!({
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0}],
            "unitMode": false,
        }],
    });
    let command = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(serde_json::to_vec(&body).unwrap());
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// A producer of the client library, through the name server.
pub(crate) fn producer(namesrv: &str) -> ferromq_client::Producer {
    ferromq_client::Producer::start(ferromq_client::ProducerConfig {
        namesrv_addrs: vec![namesrv.parse().unwrap()],
        group: "AdminTestProducer".into(),
        send_timeout: TIMEOUT,
        ..ferromq_client::ProducerConfig::default()
    })
    .unwrap()
}

/// Sends one message with a key and a tag to one queue; returns (unique key, queue offset).
pub(crate) async fn send_keyed(
    producer: &ferromq_client::Producer,
    topic: &str,
    queue_id: i32,
    key: &str,
    tag: &str,
    body: &str,
) -> (String, u64) {
    let queue = ferromq_client::MessageQueue {
        topic: topic.into(),
        broker_name: "broker-a".into(),
        queue_id,
    };
    let message = ferromq_client::Message::new(topic, body.to_string())
        .with_key(key)
        .with_tags(tag);
    let sent = producer.send_to_queue(message, &queue).await.unwrap();
    (sent.msg_id, sent.queue_offset)
}

pub(crate) fn utc(ms: i64, pattern: &str) -> String {
    use chrono::TimeZone;
    chrono::Utc
        .timestamp_millis_opt(ms)
        .unwrap()
        .format(pattern)
        .to_string()
}

/// Commits through UPDATE_CONSUMER_OFFSET and returns the reply code (rejections included).
pub(crate) async fn commit_code(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> i32 {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    client.invoke(command, TIMEOUT).await.unwrap().code
}

/// Pulls up to `count` messages of a queue as `group` (no commit, no hold); returns how many
/// came back.
pub(crate) async fn pull_count(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    count: i32,
) -> usize {
    use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
    let header = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: count,
        sys_flag: 0,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: None,
        sub_version: 0,
        expression_type: None,
        max_msg_bytes: None,
        request_source: None,
        proxy_forward_client_id: None,
    };
    let command = RemotingCommand::request_with_header(request::PULL_MESSAGE, &header);
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let mut body = reply.body.as_deref().unwrap_or_default();
    let mut pulled = 0;
    while !body.is_empty() {
        let view = ferromq_protocol::RecordView::parse(body).unwrap();
        body = &body[view.total_size()..];
        pulled += 1;
    }
    pulled
}
