//! The broker's Prometheus endpoint over real TCP: scraped and parsed after sends, pulls and
//! commits, the per-topic counters, the lag gauge, the rejected-commit counter and the
//! correction counter move as they must; bad HTTP gets 400/404/431 and the endpoint keeps
//! serving. Also: no endpoint unless `metricsPort` is set.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{http, scrape, value};

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;

const TIMEOUT: Duration = Duration::from_secs(5);
const TOPIC: &str = "MetricsTopic";
const GROUP: &str = "MetricsGroup";

async fn broker(dir: &std::path::Path, metrics_port: Option<u16>) -> Broker {
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        default_topic_queue_nums: 2,
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        metrics_port,
        // The offline-reset rule needs the group memberless for this long.
        channel_expired_timeout: 1000,
        ..BrokerConfig::default()
    };
    Broker::start(config).await.expect("broker starts")
}

async fn send(client: &RemotingClient, body: &str) {
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: TOPIC.into(),
        c: "TBW102".into(),
        d: 2,
        e: 0,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = client.invoke(command, TIMEOUT).await.expect("send reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

async fn commit(client: &RemotingClient, offset: i64) -> i32 {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: 0,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    client.invoke(command, TIMEOUT).await.expect("commit").code
}

async fn pull(client: &RemotingClient, offset: i64) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: 0,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::PULL_MESSAGE, &header);
    client.invoke(command, TIMEOUT).await.expect("pull reply")
}

/// Registers a consumer of the group on this connection, so the group is online.
async fn heartbeat(client: &RemotingClient) {
    let body = serde_json::json!({
        "clientID": "127.0.0.1@metrics",
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": GROUP,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{
                "topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0,
            }],
            "unitMode": false,
        }],
    })
    .to_string();
    let command = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(body.into_bytes());
    let reply = client.invoke(command, TIMEOUT).await.expect("heartbeat");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_lag_and_rejections_move_with_sends_pulls_and_commits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), Some(0)).await;
    let addr = broker.metrics_addr().expect("metrics endpoint is on");
    let client = RemotingClient::connect(broker.local_addr(), TIMEOUT)
        .await
        .expect("connect");
    let topic = [("topic", TOPIC)];
    let lag = [("group", GROUP), ("topic", TOPIC), ("queue", "0")];

    let before = scrape(addr).await;
    assert_eq!(value(&before, "ferromq_messages_in_total", &topic), 0.0);

    let bodies = ["one", "two", "three", "four", "five"];
    for body in bodies {
        send(&client, body).await;
    }
    let bytes: usize = bodies.iter().map(|b| b.len()).sum();
    let after_sends = scrape(addr).await;
    assert_eq!(
        value(&after_sends, "ferromq_messages_in_total", &topic),
        5.0
    );
    assert_eq!(
        value(&after_sends, "ferromq_bytes_in_total", &topic),
        bytes as f64
    );
    assert!(
        value(&after_sends, "ferromq_flush_latency_seconds_count", &[]) >= 1.0,
        "SYNC_FLUSH sends fsync"
    );
    assert!(value(&after_sends, "ferromq_commitlog_max_offset", &[]) > 0.0);
    // The connection has carried requests, so the broker has counted it.
    assert!(value(&after_sends, "ferromq_client_connections", &[]) >= 1.0);
    assert!(after_sends.contains_key(&("ferromq_dispatch_behind_bytes".into(), BTreeMap::new())));

    assert_eq!(commit(&client, 3).await, response::SUCCESS);
    let reply = pull(&client, 0).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let after_commit = scrape(addr).await;
    assert_eq!(value(&after_commit, "ferromq_consumer_lag", &lag), 2.0);
    assert_eq!(
        value(&after_commit, "ferromq_messages_out_total", &topic),
        5.0
    );
    let out_bytes = value(&after_commit, "ferromq_bytes_out_total", &topic);
    assert!(out_bytes > bytes as f64, "whole records: {out_bytes}");
    assert_eq!(
        value(&after_commit, "ferromq_commits_accepted_total", &[]),
        1.0
    );

    // No consumer of the group has been online for channelExpiredTimeout: a backward commit
    // is an offline reset.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(commit(&client, 2).await, response::SUCCESS);
    let after_reset = scrape(addr).await;
    assert_eq!(value(&after_reset, "ferromq_consumer_lag", &lag), 3.0);
    let resets = [("cause", "offline_commit")];
    assert_eq!(
        value(&after_reset, "ferromq_offset_resets_total", &resets),
        1.0
    );

    // With a consumer online, a regressing commit is rejected and counted; the lag stays.
    heartbeat(&client).await;
    assert_eq!(commit(&client, 1).await, codes::COMMIT_REGRESSION);
    assert_eq!(commit(&client, -1).await, response::SUCCESS);
    let after_reject = scrape(addr).await;
    let rejected = |reason| {
        value(
            &after_reject,
            "ferromq_commits_rejected_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(rejected("regression"), 1.0);
    assert_eq!(rejected("negative_ignored"), 1.0);
    assert_eq!(rejected("past_max"), 0.0);
    assert_eq!(value(&after_reject, "ferromq_consumer_lag", &lag), 3.0);

    // Progress to the end empties the lag; a pull far past the end is a correction.
    assert_eq!(commit(&client, 5).await, response::SUCCESS);
    assert_eq!(pull(&client, 100).await.code, response::PULL_OFFSET_MOVED);
    let at_end = scrape(addr).await;
    assert_eq!(value(&at_end, "ferromq_consumer_lag", &lag), 0.0);
    assert_eq!(
        value(
            &at_end,
            "ferromq_offset_corrections_total",
            &[("cause", "pull_out_of_range")]
        ),
        1.0
    );
    assert_eq!(value(&at_end, "ferromq_commits_accepted_total", &[]), 3.0);

    drop(client);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_gets_an_error_status_and_the_endpoint_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), Some(0)).await;
    let addr = broker.metrics_addr().expect("metrics endpoint is on");

    let garbage = http(addr, b"\x00\x01 not http at all\r\n\r\n").await;
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    let missing = http(addr, b"GET /nothing HTTP/1.1\r\n\r\n").await;
    assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
    let post = http(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 16 * 1024));
    let too_large = http(addr, &huge).await;
    assert!(too_large.starts_with("HTTP/1.1 431 "), "{too_large}");
    // A head cut short by the end of the stream is malformed.
    let half = http(addr, b"GET /metr").await;
    assert!(half.starts_with("HTTP/1.1 400 "), "{half}");

    let metrics = scrape(addr).await;
    assert!(metrics.contains_key(&("ferromq_client_connections".into(), BTreeMap::new())));
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_endpoint_unless_metrics_port_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), None).await;
    assert_eq!(broker.metrics_addr(), None);
    broker.shutdown().await.expect("clean shutdown");
}
