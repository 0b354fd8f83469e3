//! Helpers shared by the broker's integration tests: an in-process broker on an OS-chosen
//! port, a raw remoting client, the requests the tests send (send, pull, commit, query), and
//! the Prometheus endpoint scraped over real TCP and parsed, and a self-signed certificate
//! for the TLS tests.

#![allow(dead_code)] // Each test file uses part of these helpers.

pub mod grpc;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{Properties, RecordView};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on every request of the tests.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The tests' broker configuration: SYNC_FLUSH, 1 MiB segments, 64 KiB messages, topics of
/// two queues created on first send when `auto_create`.
pub fn broker_config(dir: &std::path::Path, auto_create: bool) -> BrokerConfig {
    BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        auto_create_topic_enable: auto_create,
        default_topic_queue_nums: 2,
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        ..BrokerConfig::default()
    }
}

/// A broker with [`broker_config`].
pub async fn broker(dir: &std::path::Path, auto_create: bool) -> Broker {
    Broker::start(broker_config(dir, auto_create))
        .await
        .expect("broker starts")
}

/// A raw remoting client connected to `addr`.
pub async fn client(addr: SocketAddr) -> RemotingClient {
    RemotingClient::connect(addr, TIMEOUT)
        .await
        .expect("connect")
}

/// SEND_MESSAGE_V2 of one message with a tag and key `k1`.
pub async fn send(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tag: &str,
) -> RemotingCommand {
    send_to(
        client,
        topic,
        queue_id,
        body,
        &[("TAGS", tag), ("KEYS", "k1")],
    )
    .await
}

/// SEND_MESSAGE_V2 of one message with the given properties.
pub async fn send_to(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    properties: &[(&str, &str)],
) -> RemotingCommand {
    let properties = String::from_utf8(Properties::encode(properties.iter().copied())).unwrap();
    let header = SendMessageRequestHeaderV2 {
        e: queue_id,
        i: Some(properties.into()),
        ..header_v2(topic)
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.to_vec());
    client.invoke(command, TIMEOUT).await.expect("send reply")
}

/// A send header of producer group PG to `topic`, queue 0, no properties.
pub fn header_v2(topic: &str) -> SendMessageRequestHeaderV2 {
    SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 4,
        e: 0,
        g: 1,
        ..Default::default()
    }
}

/// PULL_MESSAGE of group G (at most 32 messages), held `suspend_ms` when nothing is there.
pub fn pull_command(
    topic: &str,
    queue_id: i32,
    offset: i64,
    suspend_ms: i64,
    expression: &str,
) -> RemotingCommand {
    pull_request("G", topic, queue_id, offset, suspend_ms, expression, None)
}

/// PULL_MESSAGE of `group` (at most 32 messages), held `suspend_ms` when nothing is there;
/// `commit` adds a piggy-backed commit of that offset.
pub fn pull_request(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    suspend_ms: i64,
    expression: &str,
    commit: Option<i64>,
) -> RemotingCommand {
    let suspend = if suspend_ms > 0 { 0x2 } else { 0 };
    let header = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: 0x4 | suspend | if commit.is_some() { 0x1 } else { 0 },
        commit_offset: commit.unwrap_or(0),
        suspend_timeout_millis: suspend_ms,
        subscription: Some(expression.into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request_with_header(request::PULL_MESSAGE, &header)
}

/// The records of a pull reply's body, whole.
pub fn records(reply: &RemotingCommand) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = reply.body.as_deref().unwrap_or_default();
    while !rest.is_empty() {
        let view = RecordView::parse(rest).expect("pull body holds whole records");
        out.push(view.as_bytes().to_vec());
        rest = &rest[view.total_size()..];
    }
    out
}

/// The bodies of the records in a pull reply.
pub fn bodies(reply: &RemotingCommand) -> Vec<Vec<u8>> {
    records(reply)
        .iter()
        .map(|record| RecordView::parse(record).expect("verified").body.to_vec())
        .collect()
}

/// UPDATE_CONSUMER_OFFSET of group G.
pub async fn commit(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> RemotingCommand {
    let command = commit_request(topic, queue_id, offset, false);
    client.invoke(command, TIMEOUT).await.expect("commit reply")
}

/// QUERY_CONSUMER_OFFSET of group G.
pub async fn query(client: &RemotingClient, topic: &str, queue_id: i32) -> RemotingCommand {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: topic.into(),
        queue_id,
        set_zero_if_not_found: Some(false),
    };
    client
        .invoke(
            RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header),
            TIMEOUT,
        )
        .await
        .expect("query reply")
}

/// Bound on one exchange with the metrics endpoint.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends raw bytes to the endpoint and returns everything it answers before closing.
pub async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect to metrics");
        stream.write_all(request).await.expect("write request");
        stream.shutdown().await.expect("half-close");
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.expect("read reply");
        String::from_utf8(reply).expect("UTF-8 reply")
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .expect("the endpoint answers and closes within 5 s")
}

/// One parsed sample line: metric name and labels.
pub type Series = (String, BTreeMap<String, String>);

/// GET /metrics, parsed: every sample line as (name, labels) -> value.
pub async fn scrape(addr: SocketAddr) -> BTreeMap<Series, f64> {
    let reply = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await;
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    parse(body)
}

/// Parses the Prometheus text format: `name{k="v",...} value` lines; `#` lines skipped.
pub fn parse(body: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample and a value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                let labels = inner
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, quoted) = pair.split_once('=').expect("label=value");
                        let value = quoted.trim_matches('"');
                        (key.to_string(), value.to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        assert!(
            out.insert((name, labels), value).is_none(),
            "duplicate series: {line}"
        );
    }
    out
}

/// The value of `name` with exactly `labels`, 0 when the series is absent.
pub fn value(metrics: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    metrics
        .get(&(name.to_string(), labels))
        .copied()
        .unwrap_or(0.0)
}

/// A HEART_BEAT body of consumer `client_id` in group G subscribed to `topic`.
pub fn heartbeat_body(client_id: &str, topic: &str) -> Vec<u8> {
    format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[],"consumerDataSet":[{{"groupName":"G","consumeType":1,"messageModel":1,"consumeFromWhere":0,"subscriptionDataSet":[{{"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":"0"}}],"unitMode":false}}]}}"#
    )
    .into_bytes()
}

/// Joins group G as consumer `client_id` of `topic` on this connection (a heartbeat).
pub async fn join_group(client: &RemotingClient, client_id: &str, topic: &str) {
    let beat = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(heartbeat_body(client_id, topic));
    let reply = client.invoke(beat, TIMEOUT).await.expect("heartbeat reply");
    assert_eq!(reply.code, 0, "{:?}", reply.remark);
}

/// An administrator's reset of group G on `topic`/`queue_id` to `offset`; the reply.
pub async fn reset_queue(
    admin: &RemotingClient,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> RemotingCommand {
    let header = ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader {
        group: "G".into(),
        topic: topic.into(),
        queue_id: Some(queue_id),
        offset: Some(offset),
        timestamp: 0,
        is_force: true,
    };
    admin
        .invoke(
            RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &header),
            TIMEOUT,
        )
        .await
        .expect("reset reply")
}

/// A SEND_BATCH_MESSAGE body of `(body, UNIQ_KEY)` messages, flag = index (reference §8.6).
pub fn batch_body(messages: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, (payload, key)) in messages.iter().enumerate() {
        let props = Properties::encode([("UNIQ_KEY", *key)]);
        let total = 20 + payload.len() + 2 + props.len();
        for value in [total as i32, 0, 0, i as i32, payload.len() as i32] {
            body.extend_from_slice(&value.to_be_bytes());
        }
        body.extend_from_slice(payload.as_bytes());
        body.extend_from_slice(&(props.len() as u16).to_be_bytes());
        body.extend_from_slice(&props);
    }
    body
}

/// UPDATE_CONSUMER_OFFSET of group G, marked as ferromq's correction when `correction`.
pub fn commit_request(
    topic: &str,
    queue_id: i32,
    offset: i64,
    correction: bool,
) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let mut command =
        RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    if correction {
        command
            .ext_fields
            .insert(ferromq_broker::codes::CORRECTION_EXT, "true");
    }
    command
}

#[path = "../../../../test-support/certificate.rs"]
mod certificate;
#[allow(unused_imports)] // not every test file of the crate uses it
pub use certificate::certificate;
