//! Helpers of the hostile-client tests (`data_safety`, `access_property`): an in-process
//! broker on 127.0.0.1 (OS-chosen port) whose data directory sits alone in a temp dir, and the
//! requests a hostile client sends (any group, any topic, any properties). Every wait is
//! bounded by [`TIMEOUT`] or its caller's bound.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeader, SendMessageRequestHeaderV2,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{DraftRecord, Properties};

pub use crate::common::{client, header_v2, records, TIMEOUT};

/// A broker whose data directory is `<dir>/data`, so a test can check that nothing appears
/// beside it; delay levels of one second each.
pub async fn broker(dir: &Path) -> Broker {
    Broker::start(config(dir)).await.expect("broker starts")
}

/// The test broker's configuration (see [`broker`]).
pub fn config(dir: &Path) -> BrokerConfig {
    BrokerConfig {
        message_delay_level: "1s 1s 1s".into(),
        ..crate::common::broker_config(&data_dir(dir), true)
    }
}

/// The data directory of a broker started by [`broker`] in `dir`.
pub fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// Everything directly under `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn properties(pairs: &[(&str, &str)]) -> String {
    String::from_utf8(Properties::encode(pairs.iter().copied())).unwrap()
}

pub async fn invoke(client: &RemotingClient, command: RemotingCommand) -> RemotingCommand {
    client.invoke(command, TIMEOUT).await.expect("a reply")
}

/// SEND_MESSAGE_V2 to `topic`/0 with `pairs` as properties.
pub async fn send(
    client: &RemotingClient,
    topic: &str,
    body: &[u8],
    pairs: &[(&str, &str)],
) -> RemotingCommand {
    send_raw(client, topic, 0, body, properties(pairs)).await
}

/// SEND_MESSAGE_V2 with properties given as an encoded string.
pub async fn send_raw(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    properties: String,
) -> RemotingCommand {
    let header = SendMessageRequestHeaderV2 {
        e: queue_id,
        i: Some(properties.into()),
        ..header_v2(topic)
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.to_vec());
    invoke(client, command).await
}

/// SEND_MESSAGE (the V1 header).
pub async fn send_v1(
    client: &RemotingClient,
    topic: &str,
    body: &[u8],
    pairs: &[(&str, &str)],
) -> RemotingCommand {
    let header: SendMessageRequestHeader = SendMessageRequestHeaderV2 {
        i: Some(properties(pairs).into()),
        ..header_v2(topic)
    }
    .into();
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE, &header)
        .with_body(body.to_vec());
    invoke(client, command).await
}

/// One entry of a SEND_BATCH_MESSAGE body.
pub fn batch_entry(body: &[u8], properties: &[u8]) -> Vec<u8> {
    let total = 20 + body.len() + 2 + properties.len();
    let mut out = Vec::new();
    for value in [total as i32, 0, 0, 0, body.len() as i32] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    out.extend_from_slice(body);
    out.extend_from_slice(&(properties.len() as u16).to_be_bytes());
    out.extend_from_slice(properties);
    out
}

/// SEND_BATCH_MESSAGE of one message.
pub async fn send_batch(
    client: &RemotingClient,
    topic: &str,
    body: &[u8],
    pairs: &[(&str, &str)],
) -> RemotingCommand {
    let entry = batch_entry(body, properties(pairs).as_bytes());
    let header = SendMessageRequestHeaderV2 {
        m: Some(true),
        ..header_v2(topic)
    };
    let command =
        RemotingCommand::request_with_header(request::SEND_BATCH_MESSAGE, &header).with_body(entry);
    invoke(client, command).await
}

/// UPDATE_CONSUMER_OFFSET.
pub async fn commit(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    invoke(client, command).await
}

/// A PULL_MESSAGE of `group` on `topic`/`queue_id` from `offset`, not held; `commit` adds a
/// piggy-backed commit of that offset.
pub fn pull_command(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    commit: Option<i64>,
) -> RemotingCommand {
    crate::common::pull_request(group, topic, queue_id, offset, 0, "*", commit)
}

/// Pulls `topic`/`queue_id` from `offset` as group `G` until a message arrives, at most `hold`.
pub async fn pull_until(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    offset: i64,
    hold: Duration,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + hold;
    loop {
        let reply = invoke(client, pull_command("G", topic, queue_id, offset, None)).await;
        if reply.code == response::SUCCESS {
            return records(&reply);
        }
        assert!(
            Instant::now() < deadline,
            "nothing in {topic}/{queue_id} within {hold:?}: last code {} {:?}",
            reply.code,
            reply.remark
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most `bound`) until `done` holds; panics naming `what` otherwise.
pub async fn wait_until(bound: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A draft for writing straight into the store, bypassing the broker's checks (how an old
/// log came to hold what the checks now refuse).
pub fn raw_draft<'a>(
    topic: &'a str,
    queue_id: u32,
    body: &'a [u8],
    properties: &'a [u8],
) -> DraftRecord<'a> {
    let host = SocketAddr::from(([127, 0, 0, 1], 40_000));
    DraftRecord::plain(topic, queue_id, body, properties, host, 1_700_000_000_000)
}
