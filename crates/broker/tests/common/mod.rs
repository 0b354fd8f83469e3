//! Helpers shared by the broker's protocol tests: an in-process broker on an OS-chosen port,
//! a raw remoting client, and the requests the tests send (send, pull, commit, query).

#![allow(dead_code)] // Each test file uses part of these helpers.

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
        i: Some(properties),
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
    let header = PullMessageRequestHeader {
        consumer_group: "G".into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: if suspend_ms > 0 { 0x2 | 0x4 } else { 0x4 },
        commit_offset: 0,
        suspend_timeout_millis: suspend_ms,
        subscription: Some(expression.into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request_with_header(request::PULL_MESSAGE, &header)
}

/// The bodies of the records in a pull reply.
pub fn bodies(reply: &RemotingCommand) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = reply.body.as_deref().unwrap_or_default();
    while !rest.is_empty() {
        let view = RecordView::parse(rest).expect("pull body holds whole records");
        out.push(view.body.to_vec());
        rest = &rest[view.total_size()..];
    }
    out
}

/// UPDATE_CONSUMER_OFFSET of group G.
pub async fn commit(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
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
