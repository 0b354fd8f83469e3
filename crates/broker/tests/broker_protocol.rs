//! The broker over real TCP with a raw remoting client: sends, pulls with long polling,
//! offsets (stale, past-max and negative commits), and bad input that must not hurt other
//! clients.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{Properties, RecordView};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(5);

async fn broker(dir: &std::path::Path, auto_create: bool) -> Broker {
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        auto_create_topic_enable: auto_create,
        default_topic_queue_nums: 2,
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        ..BrokerConfig::default()
    };
    Broker::start(config).await.expect("broker starts")
}

async fn client(addr: SocketAddr) -> RemotingClient {
    RemotingClient::connect(addr, TIMEOUT)
        .await
        .expect("connect")
}

async fn send(
    client: &RemotingClient,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tag: &str,
) -> RemotingCommand {
    let properties =
        String::from_utf8(Properties::encode([("TAGS", tag), ("KEYS", "k1")])).unwrap();
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 4,
        e: queue_id,
        f: 0,
        g: 1,
        h: 0,
        i: Some(properties),
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.to_vec());
    client.invoke(command, TIMEOUT).await.expect("send reply")
}

fn pull_command(
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

fn bodies(reply: &RemotingCommand) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = reply.body.as_deref().unwrap_or_default();
    while !rest.is_empty() {
        let view = RecordView::parse(rest).expect("pull body holds whole records");
        out.push(view.body.to_vec());
        rest = &rest[view.total_size()..];
    }
    out
}

async fn commit(
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

async fn query(client: &RemotingClient, topic: &str, queue_id: i32) -> RemotingCommand {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_then_pull_returns_stored_records_filtered_by_tag() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..6 {
        let reply = send(
            &client,
            "T",
            0,
            format!("m{i}").as_bytes(),
            if i % 2 == 0 { "a" } else { "b" },
        )
        .await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        let header: SendMessageResponseHeader = reply.decode_header().unwrap();
        assert_eq!(header.queue_offset, i);
        assert_eq!(header.msg_id.len(), 32);
    }
    let reply = client
        .invoke(pull_command("T", 0, 0, 0, "a"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS);
    assert_eq!(
        bodies(&reply),
        vec![b"m0".to_vec(), b"m2".to_vec(), b"m4".to_vec()]
    );
    let header: PullMessageResponseHeader = reply.decode_header().unwrap();
    assert_eq!(
        (
            header.next_begin_offset,
            header.min_offset,
            header.max_offset
        ),
        (6, 0, 6)
    );
    let past = client
        .invoke(pull_command("T", 0, 9, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(past.code, response::PULL_OFFSET_MOVED);
    assert_eq!(
        past.decode_header::<PullMessageResponseHeader>()
            .unwrap()
            .next_begin_offset,
        6
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_within_milliseconds_of_a_send_and_times_out_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let consumer = client(broker.local_addr()).await;
    let producer = client(broker.local_addr()).await;
    assert_eq!(
        send(&producer, "LP", 0, b"first", "a").await.code,
        response::SUCCESS
    );
    // Nothing at offset 1: the pull is held until the send below.
    let held = tokio::spawn(async move {
        let started = Instant::now();
        let reply = consumer
            .invoke(
                pull_command("LP", 0, 1, 10_000, "*"),
                Duration::from_secs(15),
            )
            .await
            .unwrap();
        (reply, started.elapsed(), consumer)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent_at = Instant::now();
    assert_eq!(
        send(&producer, "LP", 0, b"second", "a").await.code,
        response::SUCCESS
    );
    let (reply, waited, consumer) = held.await.unwrap();
    assert_eq!(reply.code, response::SUCCESS);
    assert_eq!(bodies(&reply), vec![b"second".to_vec()]);
    assert!(waited < Duration::from_secs(5), "held {waited:?}");
    let latency = sent_at.elapsed();
    assert!(
        latency < Duration::from_millis(200),
        "answered {latency:?} after the send"
    );
    // With nothing new, the hold ends at the requested timeout with PULL_NOT_FOUND.
    let started = Instant::now();
    let reply = consumer
        .invoke(pull_command("LP", 0, 2, 400, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::PULL_NOT_FOUND);
    let held_for = started.elapsed();
    assert!(
        held_for >= Duration::from_millis(350) && held_for < Duration::from_secs(3),
        "{held_for:?}"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_monotone_bounded_and_ignore_negative_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..5 {
        send(&client, "C", 0, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(
        query(&client, "C", 0).await.code,
        response::QUERY_NOT_FOUND,
        "no offset is QUERY_NOT_FOUND"
    );
    // A consumer of the group is online, so backward commits are stale, not resets.
    let heartbeat = br#"{"clientID":"127.0.0.1@test","producerDataSet":[],"consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"C","subString":"*","tagsSet":[],"codeSet":[],"subVersion":0}],"unitMode":false}]}"#;
    let reply = client
        .invoke(
            RemotingCommand::new_request(request::HEART_BEAT, Default::default())
                .with_body(heartbeat.to_vec()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(commit(&client, "C", 0, 4).await.code, response::SUCCESS);
    let stale = commit(&client, "C", 0, 2).await;
    assert_eq!(stale.code, codes::COMMIT_REGRESSION);
    assert!(stale.remark.unwrap().contains("below the stored offset 4"));
    let past = commit(&client, "C", 0, 9).await;
    assert_eq!(past.code, codes::COMMIT_PAST_MAX);
    let negative = commit(&client, "C", 0, -1).await;
    assert_eq!(negative.code, response::SUCCESS);
    let stored = query(&client, "C", 0).await;
    assert_eq!(stored.code, response::SUCCESS);
    assert_eq!(
        stored
            .decode_header::<QueryConsumerOffsetResponseHeader>()
            .unwrap()
            .offset,
        4
    );
    let counters = &broker.context().counters;
    assert_eq!(
        counters
            .negative_commits_ignored
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        counters
            .commits_rejected
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backward_commit_of_an_offline_group_is_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..5 {
        send(&client, "R", 0, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(commit(&client, "R", 0, 4).await.code, response::SUCCESS);
    assert_eq!(
        commit(&client, "R", 0, 1).await.code,
        response::SUCCESS,
        "no consumer online: a reset"
    );
    let store = &broker.context().store;
    assert_eq!(store.consumer_offset("G", "R", 0).unwrap().offset, 1);
    assert_eq!(store.offset_generation("G", "R"), 1);
    let history = store.offset_history("G", "R", Some(0)).unwrap();
    let kinds: Vec<_> = history
        .iter()
        .map(|e| (e.kind.as_str(), e.offset))
        .collect();
    assert_eq!(kinds, vec![("commit", 4), ("reset", 1)]);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_errors_and_the_broker_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    let addr = broker.local_addr();
    let good = client(addr).await;
    // Unknown request code.
    let reply = good
        .invoke(
            RemotingCommand::new_request(9999, Default::default()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::REQUEST_CODE_NOT_SUPPORTED);
    assert!(reply.remark.unwrap().contains("9999"));
    // A topic that does not exist, auto-create off.
    let reply = send(&good, "Missing", 0, b"x", "a").await;
    assert_eq!(reply.code, response::TOPIC_NOT_EXIST);
    assert!(reply.remark.unwrap().contains("autoCreateTopicEnable"));
    // A header missing required fields.
    let reply = good
        .invoke(
            RemotingCommand::new_request(request::PULL_MESSAGE, Default::default()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::INVALID_PARAMETER);
    // Raw garbage, an oversized frame and a non-JSON header each close only their connection.
    for frame in [
        vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8],
        [0x7f_u8, 0xff, 0xff, 0xff, 0, 0, 0, 0].to_vec(),
        {
            let header = b"this is not json";
            let mut f = ((4 + header.len()) as u32).to_be_bytes().to_vec();
            f.extend_from_slice(&(header.len() as u32).to_be_bytes());
            f.extend_from_slice(header);
            f
        },
    ] {
        let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
        raw.write_all(&frame).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(TIMEOUT, raw.read(&mut buf))
            .await
            .expect("closed in time");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "connection closed after a bad frame"
        );
    }
    // The good client is unaffected.
    let reply = good
        .invoke(
            RemotingCommand::new_request(9999, Default::default()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::REQUEST_CODE_NOT_SUPPORTED);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_is_refused_with_message_illegal() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    let reply = send(&client, "Big", 0, &vec![0u8; 65 * 1024], "a").await;
    assert_eq!(reply.code, response::MESSAGE_ILLEGAL);
    assert!(reply.remark.unwrap().contains("exceeds the limit"));
    broker.shutdown().await.unwrap();
}
