//! The broker over real TCP with a raw remoting client: sends, pulls with long polling,
//! offsets (stale, past-max and negative commits), and bad input that must not hurt other
//! clients.

mod common;

use std::time::{Duration, Instant};

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::RecordView;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{
    bodies, broker, client, commit, header_v2, join_group, pull_command, query, reset_queue, send,
    send_to, TIMEOUT,
};

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
    // Acknowledged records become visible to pulls within a dispatcher tick.
    broker.context().store.dispatch_caught_up(TIMEOUT).await;
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
    let config = BrokerConfig {
        channel_expired_timeout: 1000,
        ..common::broker_config(dir.path(), true)
    };
    let broker = Broker::start(config).await.unwrap();
    let client = client(broker.local_addr()).await;
    for i in 0..5 {
        send(&client, "R", 0, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(commit(&client, "R", 0, 4).await.code, response::SUCCESS);
    // Up for less than channelExpiredTimeout: the broker cannot know the group is offline
    // (its consumers' heartbeats may not have arrived yet), so this is a regression.
    assert_eq!(
        commit(&client, "R", 0, 1).await.code,
        codes::COMMIT_REGRESSION,
        "too early to call the group offline"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        commit(&client, "R", 0, 1).await.code,
        response::SUCCESS,
        "no consumer online: a reset"
    );
    let store = &broker.context().store;
    assert_eq!(
        store
            .consumer_offset("G", "R", 0)
            .expect("offset view")
            .unwrap()
            .offset,
        1
    );
    assert_eq!(store.offset_generation("G", "R").expect("offset view"), 1);
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
    // Request shapes the official Java client and mqadmin send that ferromq does not serve
    // (crates/cli/tests/interop_java.rs, docs/compat.md): a clear code, a remark naming the
    // request, a counter, and the connection stays open.
    // mqadmin consumerStatus for a client that is not online: a clear error naming it,
    // counted, and the connection stays open (the served path is tested below).
    let mut header = ferromq_protocol::remoting::ExtFields::new();
    header.insert("consumerGroup".to_string(), "G".to_string());
    header.insert("clientId".to_string(), "127.0.0.1@1".to_string());
    header.insert("jstackEnable".to_string(), "false".to_string());
    let reply = good
        .invoke(
            RemotingCommand::new_request(request::GET_CONSUMER_RUNNING_INFO, header),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SYSTEM_ERROR);
    let remark = reply.remark.unwrap_or_default();
    assert!(
        remark.contains("127.0.0.1@1") && remark.contains("not online"),
        "{remark}"
    );
    assert_eq!(
        broker
            .context()
            .metrics
            .refused_count("consumer_not_online"),
        1
    );
    assert_eq!(
        broker.context().metrics.unsupported_count("unknown"),
        1,
        "code 9999 counted"
    );
    // QUERY_TOPIC_CONSUME_BY_WHO (mqadmin queryMsgBy*) without its topic: INVALID_PARAMETER.
    let reply = good
        .invoke(
            RemotingCommand::new_request(request::QUERY_TOPIC_CONSUME_BY_WHO, Default::default()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::INVALID_PARAMETER);
    assert!(reply.remark.unwrap_or_default().contains("topic"));
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

/// A heartbeat as rocketmq-client-go v2 writes it for a tag subscription (`codeSet` items are
/// strings) with `code_set` substituted.
fn go_heartbeat(client_id: &str, code_set: &str) -> Vec<u8> {
    format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[],"consumerDataSet":[{{"groupName":"G",
        "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",
        "consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{
        "classFilterMode":false,"topic":"T","subString":"TagA","tagsSet":["TagA"],
        "codeSet":{code_set},"subVersion":1764686371000000000,"expressionType":"TAG"}}],
        "unitMode":false}}]}}"#
    )
    .into_bytes()
}

/// Request shapes the Go client and rocketmq-dashboard send, each with the answer it must get:
/// what ferromq supports succeeds, a malformed body is INVALID_PARAMETER naming what is wrong,
/// an unsupported code is REQUEST_CODE_NOT_SUPPORTED naming it and counted in
/// `ferromq_requests_unsupported_total`; the connection keeps serving throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_client_and_dashboard_request_shapes_get_clear_answers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let c = client(broker.local_addr()).await;
    let beat = |body: Vec<u8>| {
        RemotingCommand::new_request(request::HEART_BEAT, Default::default()).with_body(body)
    };
    let code_only = |code: i32| RemotingCommand::new_request(code, Default::default());
    let table: Vec<(&str, RemotingCommand, i32, &str)> = vec![
        (
            "Go heartbeat, codeSet as strings",
            beat(go_heartbeat("127.0.0.1@go", r#"["2598919"]"#)),
            response::SUCCESS,
            "",
        ),
        (
            "heartbeat, codeSet not a number",
            beat(go_heartbeat("127.0.0.1@bad", r#"["TagA"]"#)),
            response::INVALID_PARAMETER,
            "HeartbeatData",
        ),
        (
            "heartbeat, codeSet out of range",
            beat(go_heartbeat("127.0.0.1@bad", r#"["4294967296"]"#)),
            response::INVALID_PARAMETER,
            "32-bit integer",
        ),
        (
            "dashboard resend (CONSUME_MESSAGE_DIRECTLY)",
            code_only(request::CONSUME_MESSAGE_DIRECTLY),
            response::REQUEST_CODE_NOT_SUPPORTED,
            "CONSUME_MESSAGE_DIRECTLY",
        ),
        (
            "a code RocketMQ does not define",
            code_only(9998),
            response::REQUEST_CODE_NOT_SUPPORTED,
            "9998",
        ),
    ];
    for (what, command, code, remark) in table {
        let reply = c.invoke(command, TIMEOUT).await.expect(what);
        let text = reply.remark.clone().unwrap_or_default();
        assert_eq!(reply.code, code, "{what}: {text}");
        assert!(text.contains(remark), "{what}: remark {text:?}");
    }
    let metrics = &broker.context().metrics;
    assert_eq!(metrics.unsupported_count("CONSUME_MESSAGE_DIRECTLY"), 1);
    assert_eq!(metrics.unsupported_count("unknown"), 1);
    // The Go client's heartbeat registered it in G with its tag subscription.
    let header = ferromq_protocol::remoting::headers::client::GetConsumerListByGroupRequestHeader {
        consumer_group: "G".into(),
    };
    let reply = c
        .invoke(
            RemotingCommand::request_with_header(request::GET_CONSUMER_LIST_BY_GROUP, &header),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let body = String::from_utf8(reply.body.unwrap_or_default().to_vec()).unwrap();
    assert!(
        body.contains("127.0.0.1@go") && !body.contains("@bad"),
        "{body}"
    );
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

async fn send_with(
    client: &RemotingClient,
    topic: &str,
    body: &[u8],
    properties: &[(&str, &str)],
) -> RemotingCommand {
    send_to(client, topic, 0, body, properties).await
}

/// Pulls `topic`/0 from `offset`, holding up to `hold`, and returns the parsed records' bytes.
async fn pull_records(
    client: &RemotingClient,
    topic: &str,
    offset: i64,
    hold: Duration,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + hold;
    loop {
        let reply = client
            .invoke(pull_command(topic, 0, offset, 500, "*"), TIMEOUT)
            .await
            .unwrap();
        if reply.code == response::SUCCESS {
            let mut out = Vec::new();
            let mut rest = reply.body.as_deref().unwrap_or_default();
            while !rest.is_empty() {
                let view = RecordView::parse(rest).unwrap();
                out.push(view.as_bytes().to_vec());
                rest = &rest[view.total_size()..];
            }
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "nothing in {topic} within {hold:?}: last code {}",
            reply.code
        );
    }
}

async fn send_back(
    client: &RemotingClient,
    phys_offset: u64,
    delay_level: i32,
    max_times: Option<i32>,
) -> RemotingCommand {
    let header = ferromq_protocol::remoting::headers::client::ConsumerSendMsgBackRequestHeader {
        offset: phys_offset as i64,
        group: "G".into(),
        delay_level,
        max_reconsume_times: max_times,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::CONSUMER_SEND_MSG_BACK, &header);
    client.invoke(command, TIMEOUT).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_messages_go_to_the_retry_topic_after_a_delay_then_to_the_dlq() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    let reply = send_with(&client, "Work", b"job-1", &[("TAGS", "a"), ("KEYS", "job")]).await;
    assert_eq!(reply.code, response::SUCCESS);
    let msg_id = reply
        .decode_header::<SendMessageResponseHeader>()
        .unwrap()
        .msg_id;
    let phys = ferromq_protocol::MessageId::decode(&msg_id)
        .unwrap()
        .phys_offset;

    // Level 1 is one second: not in the retry topic at once, there after the delay.
    let sent_back_at = Instant::now();
    assert_eq!(
        send_back(&client, phys, 1, None).await.code,
        response::SUCCESS
    );
    let early = client
        .invoke(pull_command("%RETRY%G", 0, 0, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_ne!(early.code, response::SUCCESS, "the retry is delayed");
    let retried = pull_records(&client, "%RETRY%G", 0, Duration::from_secs(10)).await;
    assert!(
        sent_back_at.elapsed() >= Duration::from_millis(900),
        "delivered after {:?}",
        sent_back_at.elapsed()
    );
    let view = RecordView::parse(&retried[0]).unwrap();
    assert_eq!(view.body, b"job-1");
    assert_eq!(view.reconsume_times, 1);
    assert_eq!(view.properties.get_str("RETRY_TOPIC"), Some("Work"));
    assert_eq!(view.properties.get_str("KEYS"), Some("job"));

    // Out of attempts: straight to the dead-letter topic.
    assert_eq!(
        send_back(&client, view.phys_offset, 0, Some(1)).await.code,
        response::SUCCESS
    );
    let dead = pull_records(&client, "%DLQ%G", 0, Duration::from_secs(5)).await;
    let view = RecordView::parse(&dead[0]).unwrap();
    assert_eq!(view.body, b"job-1");
    assert_eq!(view.properties.get_str("DLQ_ORIGIN_TOPIC"), Some("Work"));
    broker.shutdown().await.unwrap();
}

/// The broker's `maxReconsumeTimes` is the `retryMaxTimes` of the groups it creates itself:
/// at 0, a send-back without its own `maxReconsumeTimes` goes straight to the dead-letter
/// topic; the header's value still takes precedence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_max_reconsume_times_sets_the_retries_of_groups_it_creates() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        max_reconsume_times: 0,
        ..common::broker_config(dir.path(), true)
    };
    let broker = Broker::start(config).await.unwrap();
    let client = client(broker.local_addr()).await;
    let mut phys = Vec::new();
    for body in [&b"job-1"[..], b"job-2"] {
        let reply = send_with(&client, "Work", body, &[("TAGS", "a")]).await;
        assert_eq!(reply.code, response::SUCCESS);
        let msg_id = reply
            .decode_header::<SendMessageResponseHeader>()
            .unwrap()
            .msg_id;
        phys.push(
            ferromq_protocol::MessageId::decode(&msg_id)
                .unwrap()
                .phys_offset,
        );
    }
    assert_eq!(
        send_back(&client, phys[0], 0, None).await.code,
        response::SUCCESS
    );
    let group = broker
        .context()
        .groups
        .get("G")
        .expect("created by the send-back");
    assert_eq!(group.retry_max_times, 0);
    let dead = pull_records(&client, "%DLQ%G", 0, Duration::from_secs(5)).await;
    assert_eq!(RecordView::parse(&dead[0]).unwrap().body, b"job-1");
    // The header's own limit wins over the group's: one more attempt, so a retry (level 1:
    // one second).
    assert_eq!(
        send_back(&client, phys[1], 1, Some(1)).await.code,
        response::SUCCESS
    );
    let retried = pull_records(&client, "%RETRY%G", 0, Duration::from_secs(10)).await;
    assert_eq!(RecordView::parse(&retried[0]).unwrap().body, b"job-2");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_send_is_delivered_after_its_level() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    let sent_at = Instant::now();
    let reply = send_with(&client, "Later", b"tick", &[("DELAY", "1")]).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let records = pull_records(&client, "Later", 0, Duration::from_secs(10)).await;
    assert!(
        sent_at.elapsed() >= Duration::from_millis(900),
        "delivered after {:?}",
        sent_at.elapsed()
    );
    let view = RecordView::parse(&records[0]).unwrap();
    assert_eq!(view.body, b"tick");
    assert_eq!(
        view.properties.get_str("DELAY"),
        None,
        "the delay property is consumed"
    );
    // The scheduler's progress is an offset in the log like any other; it commits it just
    // after the delivery a consumer may already see, so wait for it (bounded).
    let store = &broker.context().store;
    let deadline = Instant::now() + TIMEOUT;
    let progress = || {
        store
            .consumer_offset("%SCHEDULE%", "SCHEDULE_TOPIC_XXXX", 0)
            .expect("offset view")
            .map(|stored| stored.offset)
    };
    while progress() != Some(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(progress(), Some(1));
    broker.shutdown().await.unwrap();
}

async fn lock(client: &RemotingClient, client_id: &str, queue_id: i32) -> Vec<i32> {
    let body = format!(
        r#"{{"consumerGroup":"G","clientId":"{client_id}","onlyThisBroker":false,"mqSet":[{{"topic":"O","brokerName":"broker-a","queueId":{queue_id}}}]}}"#
    );
    let reply = client
        .invoke(
            RemotingCommand::new_request(request::LOCK_BATCH_MQ, Default::default())
                .with_body(body.into_bytes()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS);
    let body: serde_json::Value = serde_json::from_slice(reply.body.as_deref().unwrap()).unwrap();
    body["lockOKMQSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queueId"].as_i64().unwrap() as i32)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_listed_notified_of_changes_and_queue_locks_are_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let a = client(broker.local_addr()).await;
    let mut a_pushes = a.take_server_requests().unwrap();
    let beat = |body: Vec<u8>| {
        RemotingCommand::new_request(request::HEART_BEAT, Default::default()).with_body(body)
    };
    // C++-style heartbeat: enums as ordinals, subVersion as a string.
    let reply = a
        .invoke(beat(common::heartbeat_body("10.0.0.1@a", "O")), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(
        reply
            .ext_fields
            .get("IS_SUPPORT_HEART_BEAT_V2")
            .map(|v| v.as_str()),
        Some("false")
    );
    let b = client(broker.local_addr()).await;
    assert_eq!(
        b.invoke(beat(common::heartbeat_body("10.0.0.1@b", "O")), TIMEOUT)
            .await
            .unwrap()
            .code,
        response::SUCCESS
    );
    let push = tokio::time::timeout(TIMEOUT, a_pushes.recv())
        .await
        .expect("a is notified")
        .unwrap();
    assert_eq!(push.code, request::NOTIFY_CONSUMER_IDS_CHANGED);
    assert_eq!(
        push.ext_fields.get("consumerGroup").map(|v| v.as_str()),
        Some("G")
    );
    let header = ferromq_protocol::remoting::headers::client::GetConsumerListByGroupRequestHeader {
        consumer_group: "G".into(),
    };
    let list = a
        .invoke(
            RemotingCommand::request_with_header(request::GET_CONSUMER_LIST_BY_GROUP, &header),
            TIMEOUT,
        )
        .await
        .unwrap();
    let ids: serde_json::Value = serde_json::from_slice(list.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        ids["consumerIdList"],
        serde_json::json!(["10.0.0.1@a", "10.0.0.1@b"])
    );

    assert_eq!(lock(&a, "10.0.0.1@a", 0).await, vec![0]);
    assert!(
        lock(&b, "10.0.0.1@b", 0).await.is_empty(),
        "a holds queue 0"
    );
    assert_eq!(
        lock(&a, "10.0.0.1@a", 0).await,
        vec![0],
        "renewal by the holder"
    );
    // b leaves by closing its connection: a is told, and the list shrinks.
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), a_pushes.recv()).await
    {
    }
    b.close();
    let push = tokio::time::timeout(TIMEOUT, a_pushes.recv())
        .await
        .expect("a is notified again")
        .unwrap();
    assert_eq!(push.code, request::NOTIFY_CONSUMER_IDS_CHANGED);
    assert_eq!(
        broker.context().clients.consumer_ids("G"),
        vec!["10.0.0.1@a".to_string()]
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_send_stores_each_message_with_consecutive_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    let body = common::batch_body(&[("batch-0", "u1"), ("batch-1", "u2"), ("batch-2", "u3")]);
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: "B".into(),
        c: "TBW102".into(),
        d: 1,
        e: 0,
        g: 1,
        m: Some(true),
        ..Default::default()
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::SEND_BATCH_MESSAGE, &header)
                .with_body(body),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let header: SendMessageResponseHeader = reply.decode_header().unwrap();
    assert_eq!(header.msg_id.split(',').count(), 3, "one id per message");
    let records = pull_records(&client, "B", 0, Duration::from_secs(5)).await;
    let views: Vec<_> = records
        .iter()
        .map(|r| RecordView::parse(r).unwrap())
        .collect();
    let summary: Vec<(u64, Vec<u8>, i32, Option<&str>)> = views
        .iter()
        .map(|v| {
            (
                v.queue_offset,
                v.body.to_vec(),
                v.flag,
                v.properties.get_str("UNIQ_KEY"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, b"batch-0".to_vec(), 0, Some("u1")),
            (1, b"batch-1".to_vec(), 1, Some("u2")),
            (2, b"batch-2".to_vec(), 2, Some("u3")),
        ]
    );
    // A damaged batch is refused as a whole.
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::SEND_BATCH_MESSAGE, &header_v2("B"))
                .with_body(vec![0, 0, 0, 99, 1]),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::MESSAGE_ILLEGAL);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_stats_report_broker_offset_consumer_offset_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..7 {
        send(&client, "S", i % 2, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(commit(&client, "S", 0, 3).await.code, response::SUCCESS);
    let header = ferromq_protocol::remoting::headers::offset::GetConsumeStatsRequestHeader {
        consumer_group: "G".into(),
        topic: Some("S".into()),
        topic_list: None,
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::GET_CONSUME_STATS, &header),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let stats: ferromq_protocol::remoting::body::mq_map::ConsumeStats =
        ferromq_protocol::remoting::body::decode_json(reply.body.as_deref().unwrap()).unwrap();
    let table: Vec<(i32, i64, i64)> = stats
        .offset_table
        .0
        .iter()
        .map(|(q, o)| (q.queue_id, o.broker_offset, o.consumer_offset))
        .collect();
    // Queue 0 got messages 0, 2, 4, 6; queue 1 got 1, 3, 5; only queue 0 has a commit.
    assert_eq!(table, vec![(0, 4, 3), (1, 3, 0)]);
    let unknown = ferromq_protocol::remoting::headers::offset::GetConsumeStatsRequestHeader {
        consumer_group: "Nobody".into(),
        topic: None,
        topic_list: None,
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::GET_CONSUME_STATS, &unknown),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUBSCRIPTION_GROUP_NOT_EXIST);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_client_connections_instead_of_answering_from_a_closed_store() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    send(&client, "Q", 0, b"m", "a").await;
    assert_eq!(commit(&client, "Q", 0, 1).await.code, response::SUCCESS);
    broker.shutdown().await.unwrap();
    assert!(
        client.closed(TIMEOUT).await,
        "the broker closed the connection"
    );
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: "Q".into(),
        queue_id: 0,
        set_zero_if_not_found: Some(false),
    };
    let query = client
        .invoke(
            RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header),
            TIMEOUT,
        )
        .await;
    assert!(
        query.is_err(),
        "a stopped broker never answers 'no offset': {query:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_commit_under_async_flush_goes_through_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.path().to_path_buf(),
        flush_disk_type: "ASYNC_FLUSH".into(),
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config).await.unwrap();
    let client = client(broker.local_addr()).await;
    for i in 0..3 {
        send(&client, "A", 0, format!("m{i}").as_bytes(), "a").await;
    }
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: "A".into(),
        queue_id: 0,
        commit_offset: 2,
    };
    let mut command =
        RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    command.set_oneway(true);
    client.invoke_oneway(command).await.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reply = query(&client, "A", 0).await;
        if reply.code == response::SUCCESS {
            assert_eq!(
                reply
                    .decode_header::<QueryConsumerOffsetResponseHeader>()
                    .unwrap()
                    .offset,
                2
            );
            break;
        }
        assert!(Instant::now() < deadline, "the one-way commit never landed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let history = broker
        .context()
        .store
        .offset_history("G", "A", Some(0))
        .unwrap();
    assert_eq!(history.len(), 1, "the commit is a record in the log");
    broker.shutdown().await.unwrap();
}

/// A one-way UPDATE_CONSUMER_OFFSET frame for group "G".
fn one_way_commit(topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let mut command = common::commit_request(topic, queue_id, offset, false);
    command.set_oneway(true);
    command
}

/// The stored offset of G on `topic`/`queue_id`, polled until it is `expected` (bounded).
async fn wait_offset(client: &RemotingClient, topic: &str, queue_id: i32, expected: i64) {
    let deadline = Instant::now() + TIMEOUT;
    let mut last = None;
    while Instant::now() < deadline {
        let reply = query(client, topic, queue_id).await;
        if reply.code == response::SUCCESS {
            let offset = reply
                .decode_header::<QueryConsumerOffsetResponseHeader>()
                .unwrap()
                .offset;
            if offset == expected {
                return;
            }
            last = Some(offset);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{topic}/{queue_id}: stored offset {last:?}, expected {expected}");
}

/// C++ and Java consumers commit one-way at shutdown and close the connection right after:
/// commits read before the connection ends are applied even though it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_commits_sent_right_before_the_connection_closes_land() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let reader = client(broker.local_addr()).await;
    for queue_id in 0..2 {
        for i in 0..3 {
            send(&reader, "C", queue_id, format!("m{i}").as_bytes(), "a").await;
        }
    }
    let mut frames = bytes::BytesMut::new();
    for queue_id in 0..2 {
        one_way_commit("C", queue_id, 3)
            .encode(&mut frames, 1 << 20)
            .unwrap();
    }
    let mut raw = tokio::net::TcpStream::connect(broker.local_addr())
        .await
        .unwrap();
    raw.write_all(&frames).await.unwrap();
    drop(raw);
    for queue_id in 0..2 {
        wait_offset(&reader, "C", queue_id, 3).await;
    }
    assert_eq!(
        broker
            .context()
            .metrics
            .oneway_failed_count("UPDATE_CONSUMER_OFFSET"),
        0
    );
    broker.shutdown().await.unwrap();
}

/// A one-way request's reply is never sent: when it fails, a counter says so (a commit
/// refused as a regression, one naming a missing topic, a send to an invalid topic), and the
/// successful ones are not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_one_way_requests_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..3 {
        send(&client, "O", 0, format!("m{i}").as_bytes(), "a").await;
    }
    let failed = |name| broker.context().metrics.oneway_failed_count(name);
    client
        .invoke_oneway(one_way_commit("O", 0, 3))
        .await
        .unwrap();
    wait_offset(&client, "O", 0, 3).await;
    assert_eq!(failed("UPDATE_CONSUMER_OFFSET"), 0, "a stored commit");
    // A regression and a missing topic: refused, so counted; the stored offset stays.
    client
        .invoke_oneway(one_way_commit("O", 0, 1))
        .await
        .unwrap();
    client
        .invoke_oneway(one_way_commit("Missing", 0, 1))
        .await
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while failed("UPDATE_CONSUMER_OFFSET") < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failed("UPDATE_CONSUMER_OFFSET"), 2);
    wait_offset(&client, "O", 0, 3).await;
    // A one-way send (sendOneway) to a topic whose name is invalid.
    let header = common::header_v2("bad topic!");
    let mut send = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(b"x".to_vec());
    send.set_oneway(true);
    client.invoke_oneway(send).await.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while failed("SEND_MESSAGE_V2") + failed("SEND_MESSAGE") == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failed("SEND_MESSAGE_V2") + failed("SEND_MESSAGE"), 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_consumer_cannot_undo_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let consumer = client(broker.local_addr()).await;
    let mut pushes = consumer.take_server_requests().unwrap();
    for i in 0..6 {
        send(&consumer, "O", 0, format!("m{i}").as_bytes(), "a").await;
    }
    join_group(&consumer, "10.0.0.1@a", "O").await;
    assert_eq!(commit(&consumer, "O", 0, 4).await.code, response::SUCCESS);

    // An administrator moves the group back to offset 1 while the consumer runs.
    let admin = client(broker.local_addr()).await;
    assert_eq!(reset_queue(&admin, "O", 0, 1).await.code, response::SUCCESS);
    let push = loop {
        let push = tokio::time::timeout(TIMEOUT, pushes.recv())
            .await
            .expect("reset pushed")
            .unwrap();
        if push.code == request::RESET_CONSUMER_CLIENT_OFFSET {
            break push;
        }
    };
    assert!(push.is_oneway());

    // Its in-flight commit from before the reset is stale, though higher: rejected.
    let stale = commit(&consumer, "O", 0, 5).await;
    assert_eq!(
        stale.code,
        codes::COMMIT_STALE_GENERATION,
        "{:?}",
        stale.remark
    );
    // Its next pull, still at the old position, is moved to the reset offset.
    let moved = consumer
        .invoke(pull_command("O", 0, 4, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(moved.code, response::PULL_OFFSET_MOVED);
    assert_eq!(
        moved
            .decode_header::<PullMessageResponseHeader>()
            .unwrap()
            .next_begin_offset,
        1
    );
    // From there on it commits normally.
    assert_eq!(commit(&consumer, "O", 0, 2).await.code, response::SUCCESS);
    let store = &broker.context().store;
    assert_eq!(
        store
            .consumer_offset("G", "O", 0)
            .expect("offset view")
            .unwrap()
            .offset,
        2
    );
    let kinds: Vec<(String, u64)> = store
        .offset_history("G", "O", Some(0))
        .unwrap()
        .iter()
        .map(|e| (e.kind.as_str().to_string(), e.offset))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("commit".into(), 4),
            ("reset".into(), 1),
            ("commit".into(), 2)
        ]
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_member_taking_over_a_queue_follows_the_group_not_the_old_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let owner = client(broker.local_addr()).await;
    let idle = client(broker.local_addr()).await;
    for i in 0..8 {
        send(&owner, "O", 0, format!("m{i}").as_bytes(), "a").await;
    }
    join_group(&owner, "10.0.0.1@owner", "O").await;
    join_group(&idle, "10.0.0.2@idle", "O").await;
    assert_eq!(commit(&owner, "O", 0, 6).await.code, response::SUCCESS);

    let admin = client(broker.local_addr()).await;
    assert_eq!(reset_queue(&admin, "O", 0, 1).await.code, response::SUCCESS);
    // The owner follows the reset and makes progress past it.
    let pulled = owner
        .invoke(pull_command("O", 0, 1, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(pulled.code, response::SUCCESS, "{:?}", pulled.remark);
    assert_eq!(commit(&owner, "O", 0, 3).await.code, response::SUCCESS);

    // The idle member was online at the reset: a commit that would move the queue is stale,
    // one that changes nothing is accepted (nothing is written).
    assert_eq!(
        commit(&idle, "O", 0, 5).await.code,
        codes::COMMIT_STALE_GENERATION
    );
    assert_eq!(commit(&idle, "O", 0, 3).await.code, response::SUCCESS);
    // It takes the queue over, reads the group's offset (3) and pulls there: served, not sent
    // back to the reset offset 1.
    let taken = idle
        .invoke(pull_command("O", 0, 3, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(taken.code, response::SUCCESS, "{:?}", taken.remark);
    assert_eq!(bodies(&taken).first().map(Vec::as_slice), Some(&b"m3"[..]));
    assert_eq!(commit(&idle, "O", 0, 5).await.code, response::SUCCESS);
    let kinds: Vec<(String, u64)> = broker
        .context()
        .store
        .offset_history("G", "O", Some(0))
        .unwrap()
        .iter()
        .map(|e| (e.kind.as_str().to_string(), e.offset))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("commit".into(), 6),
            ("reset".into(), 1),
            ("commit".into(), 3),
            ("commit".into(), 5)
        ]
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_racing_with_a_reset_never_land_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let consumer = std::sync::Arc::new(client(broker.local_addr()).await);
    for i in 0..400 {
        send(&consumer, "O", 0, format!("m{i}").as_bytes(), "a").await;
    }
    join_group(&consumer, "10.0.0.1@racer", "O").await;
    let admin = client(broker.local_addr()).await;
    let store = broker.context().store.clone();
    // Each round: the consumer (online) commits rising offsets as fast as it can while the
    // administrator resets the queue to 0. Once the reset is acknowledged and the racing
    // commits have been answered, the queue must hold the reset offset: every commit either
    // landed before the reset record or was rejected.
    for round in 0..8i64 {
        // Follow the previous reset (a pull at the group's offset lifts the fence).
        let pulled = consumer
            .invoke(pull_command("O", 0, 0, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(pulled.code, response::SUCCESS, "{:?}", pulled.remark);
        let start = 1 + round * 40;
        assert_eq!(
            commit(&consumer, "O", 0, start).await.code,
            response::SUCCESS,
            "round {round}"
        );
        let racer = {
            let consumer = consumer.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for offset in start + 1..start + 40 {
                    answers.push(commit(&consumer, "O", 0, offset).await.code);
                }
                answers
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(round as u64 % 4)).await;
        assert_eq!(reset_queue(&admin, "O", 0, 0).await.code, response::SUCCESS);
        let answers = racer.await.unwrap();
        assert!(answers
            .iter()
            .all(|code| [response::SUCCESS, codes::COMMIT_STALE_GENERATION].contains(code)));
        assert_eq!(
            store
                .consumer_offset("G", "O", 0)
                .expect("offset view")
                .unwrap()
                .offset,
            0,
            "round {round}: a commit landed after the reset ({answers:?})"
        );
    }
    broker.shutdown().await.unwrap();
}

/// A send names a queue the topic does not have (a stale route): refused as RocketMQ refuses
/// it, never wrapped into another queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_to_a_queue_the_topic_does_not_have_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let client = client(broker.local_addr()).await;
    // Auto-created with two queues.
    assert_eq!(
        send(&client, "Q2", 1, b"in range", "a").await.code,
        response::SUCCESS
    );
    let reply = send(&client, "Q2", 2, b"out of range", "a").await;
    assert_eq!(reply.code, response::SYSTEM_ERROR, "{:?}", reply.remark);
    assert!(
        reply
            .remark
            .as_deref()
            .unwrap_or_default()
            .contains("queueId[2] is illegal"),
        "{:?}",
        reply.remark
    );
    assert_eq!(
        broker.context().store.queue_bounds("Q2", 0),
        None,
        "nothing wrapped into 0"
    );
    assert_eq!(
        send(&client, "Q2", -1, b"any", "a").await.code,
        response::SUCCESS
    );
    broker.shutdown().await.unwrap();
}

/// The next GET_CONSUMER_RUNNING_INFO among a member's server requests (membership
/// notifications are skipped).
async fn next_running_info_request(
    asked: &mut tokio::sync::mpsc::Receiver<RemotingCommand>,
) -> RemotingCommand {
    loop {
        let next = tokio::time::timeout(TIMEOUT, asked.recv())
            .await
            .expect("forwarded in time")
            .expect("a request");
        if next.code != request::NOTIFY_CONSUMER_IDS_CHANGED {
            return next;
        }
    }
}

fn running_info_request(client_id: &str) -> RemotingCommand {
    let mut header = ferromq_protocol::remoting::ExtFields::new();
    header.insert("consumerGroup".to_string(), "G".to_string());
    header.insert("clientId".to_string(), client_id.to_string());
    header.insert("jstackEnable".to_string(), "false".to_string());
    RemotingCommand::new_request(request::GET_CONSUMER_RUNNING_INFO, header)
}

/// GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus) is forwarded to the named member's own
/// connection and its reply relayed as it is; a member whose connection closes before it
/// answers gives a clear error, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_running_info_is_asked_of_the_client_and_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true).await;
    let member = client(broker.local_addr()).await;
    let mut asked = member.take_server_requests().unwrap();
    common::join_group(&member, "10.0.0.1@a", "T").await;
    let tool = std::sync::Arc::new(client(broker.local_addr()).await);
    let ask = tokio::spawn({
        let tool = tool.clone();
        async move {
            tool.invoke(running_info_request("10.0.0.1@a"), TIMEOUT)
                .await
        }
    });
    let forwarded = next_running_info_request(&mut asked).await;
    assert_eq!(forwarded.code, request::GET_CONSUMER_RUNNING_INFO);
    assert!(!forwarded.is_oneway());
    assert_eq!(forwarded.ext_fields["clientId"], "10.0.0.1@a");
    assert_eq!(forwarded.ext_fields["consumerGroup"], "G");
    let body = br#"{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},"mqTable":{}}"#;
    member
        .reply(
            forwarded
                .reply(response::SUCCESS, None)
                .with_body(body.to_vec()),
        )
        .await
        .unwrap();
    let reply = ask.await.unwrap().unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(reply.body.as_deref(), Some(&body[..]));

    // The member's connection closes while the broker waits for it.
    let ask = tokio::spawn({
        let tool = tool.clone();
        async move {
            tool.invoke(running_info_request("10.0.0.1@a"), TIMEOUT)
                .await
        }
    });
    let forwarded = next_running_info_request(&mut asked).await;
    assert_eq!(forwarded.code, request::GET_CONSUMER_RUNNING_INFO);
    drop(asked);
    member.close();
    let reply = ask.await.unwrap().unwrap();
    assert_eq!(reply.code, response::SYSTEM_ERROR, "{:?}", reply.remark);
    let remark = reply.remark.unwrap_or_default();
    assert!(remark.contains("10.0.0.1@a"), "{remark}");
    assert_eq!(
        broker.context().metrics.refused_count("consumer_no_answer"),
        1
    );
}
