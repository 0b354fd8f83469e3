//! Bounded work (issue 11 item 6): held long-poll pulls and in-flight requests per connection
//! have limits past which the client is answered SYSTEM_BUSY at once; a closed connection's
//! held pulls end at once; hostile numbers in request headers never panic or hang the broker.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{broker_config, pull_command, scrape, value};
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;

const TOPIC: &str = "BoundedTopic";
/// How long the tests' pulls ask to be held: far longer than any wait of the tests.
const HOLD_MS: i64 = 8_000;
/// Bound on a held pull's answer (it is held at most [`HOLD_MS`]).
const HELD_REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on every wait for a gauge or for prompt answers.
const WAIT: Duration = Duration::from_secs(3);

/// The tests' broker with its metrics endpoint, configured by `configure`, with one message
/// in queue 0 of [`TOPIC`] (so the topic exists; pulls at offset 1 are held).
async fn broker(dir: &std::path::Path, configure: impl FnOnce(&mut BrokerConfig)) -> Broker {
    let mut config = BrokerConfig {
        metrics_port: Some(0),
        ..broker_config(dir, true)
    };
    configure(&mut config);
    let broker = Broker::start(config).await.expect("broker starts");
    let client = common::client(broker.local_addr()).await;
    let reply = common::send(&client, TOPIC, 0, b"first", "t").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    broker
}

async fn client(broker: &Broker) -> Arc<RemotingClient> {
    Arc::new(common::client(broker.local_addr()).await)
}

/// Starts `count` pulls of queue 0 at offset 1 on `client`, each held up to [`HOLD_MS`].
fn held_pulls(
    client: &Arc<RemotingClient>,
    count: usize,
) -> Vec<tokio::task::JoinHandle<RemotingCommand>> {
    (0..count)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .invoke(pull_command(TOPIC, 0, 1, HOLD_MS, "*"), HELD_REPLY_TIMEOUT)
                    .await
                    .expect("pull reply")
            })
        })
        .collect()
}

/// Waits until the broker holds `held` pulls; panics after [`WAIT`].
async fn wait_held(broker: &Broker, held: usize) {
    let deadline = Instant::now() + WAIT;
    while broker.context().held_pulls.held() != held {
        assert!(
            Instant::now() < deadline,
            "{} pulls held, not {held}, after {WAIT:?}",
            broker.context().held_pulls.held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Takes the answers of `pulls` that arrived within [`WAIT`]; the rest are still held.
async fn answered_promptly(
    pulls: &mut Vec<tokio::task::JoinHandle<RemotingCommand>>,
) -> Vec<RemotingCommand> {
    let deadline = Instant::now() + WAIT;
    let mut answered = Vec::new();
    loop {
        let (done, pending): (Vec<_>, Vec<_>) = pulls.drain(..).partition(|p| p.is_finished());
        *pulls = pending;
        for pull in done {
            answered.push(pull.await.expect("pull task"));
        }
        if Instant::now() >= deadline {
            return answered;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends one message to queue 0, then asserts every held pull completes with it.
async fn held_pulls_complete_on_a_send(
    broker: &Broker,
    held: Vec<tokio::task::JoinHandle<RemotingCommand>>,
) {
    let sender = common::client(broker.local_addr()).await;
    let reply = common::send(&sender, TOPIC, 0, b"second", "t").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    for pull in held {
        let reply = tokio::time::timeout(WAIT, pull)
            .await
            .expect("a held pull answers within the bound after a send")
            .expect("pull task");
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        assert_eq!(common::bodies(&reply), vec![b"second".to_vec()]);
    }
}

fn busy(replies: &[RemotingCommand]) -> usize {
    replies
        .iter()
        .filter(|r| r.code == response::SYSTEM_BUSY)
        .count()
}

async fn busy_metric(broker: &Broker, reason: &str) -> f64 {
    let metrics = scrape(broker.metrics_addr().expect("metrics endpoint")).await;
    value(
        &metrics,
        "ferromq_requests_busy_total",
        &[("reason", reason)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pulls_past_the_broker_limit_are_answered_busy_and_the_held_ones_complete() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.pull_hold_max = 3).await;
    let (a, b) = (client(&broker).await, client(&broker).await);
    let mut pulls = held_pulls(&a, 3);
    wait_held(&broker, 3).await;
    pulls.extend(held_pulls(&b, 2));
    let answered = answered_promptly(&mut pulls).await;
    assert_eq!((answered.len(), busy(&answered)), (2, 2), "{answered:?}");
    assert!(answered[0]
        .remark
        .as_deref()
        .is_some_and(|r| r.contains("pullHoldMax")));
    assert_eq!(busy_metric(&broker, "held_pulls").await, 2.0);
    let metrics = scrape(broker.metrics_addr().unwrap()).await;
    assert_eq!(value(&metrics, "ferromq_held_pulls", &[]), 3.0);
    held_pulls_complete_on_a_send(&broker, pulls).await;
    wait_held(&broker, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connections_held_pulls_are_dropped_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |_| {}).await;
    let a = client(&broker).await;
    let _pulls = held_pulls(&a, 5);
    wait_held(&broker, 5).await;
    let closed_at = Instant::now();
    a.close();
    wait_held(&broker, 0).await;
    assert!(closed_at.elapsed() < Duration::from_millis(HOLD_MS as u64 / 4));
    let metrics = scrape(broker.metrics_addr().unwrap()).await;
    assert_eq!(value(&metrics, "ferromq_held_pulls", &[]), 0.0);
    // The broker keeps serving.
    let b = client(&broker).await;
    let pulls = held_pulls(&b, 1);
    wait_held(&broker, 1).await;
    held_pulls_complete_on_a_send(&broker, pulls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pulls_past_the_connection_limit_are_answered_busy() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.pull_hold_max_per_connection = 2).await;
    let (a, b) = (client(&broker).await, client(&broker).await);
    let mut pulls = held_pulls(&a, 5);
    let answered = answered_promptly(&mut pulls).await;
    assert_eq!((answered.len(), busy(&answered)), (3, 3), "{answered:?}");
    assert_eq!(busy_metric(&broker, "held_pulls_per_connection").await, 3.0);
    // Another connection holds its own.
    pulls.extend(held_pulls(&b, 2));
    wait_held(&broker, 4).await;
    held_pulls_complete_on_a_send(&broker, pulls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_limit_are_answered_busy_and_other_connections_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.max_in_flight_requests_per_connection = 4).await;
    let a = client(&broker).await;
    let mut pulls = held_pulls(&a, 10);
    let answered = answered_promptly(&mut pulls).await;
    assert_eq!((answered.len(), busy(&answered)), (6, 6), "{answered:?}");
    assert!(answered[0]
        .remark
        .as_deref()
        .is_some_and(|r| r.contains("maxInFlightRequestsPerConnection")));
    assert_eq!(busy_metric(&broker, "in_flight_per_connection").await, 6.0);
    // The full connection refuses even a send; another connection is served.
    let refused = common::send(&a, TOPIC, 1, b"x", "t").await;
    assert_eq!(refused.code, response::SYSTEM_BUSY, "{:?}", refused.remark);
    // A one-way commit refused there gets no reply, so it is counted as a failed one-way.
    let mut commit = hostile_commit(0, 1);
    commit.set_oneway(true);
    a.invoke_oneway(commit).await.unwrap();
    let failed = || {
        broker
            .context()
            .metrics
            .oneway_failed_count("UPDATE_CONSUMER_OFFSET")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while failed() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failed(), 1);
    assert_eq!(busy_metric(&broker, "in_flight_per_connection").await, 8.0);
    let b = common::client(broker.local_addr()).await;
    let reply = common::send(&b, TOPIC, 1, b"other", "t").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    held_pulls_complete_on_a_send(&broker, pulls).await;
    // Its places are free again once the held pulls are answered.
    let reply = common::send(&a, TOPIC, 1, b"again", "t").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// A pull of group G with every numeric field given.
fn hostile_pull(
    queue_id: i32,
    offset: i64,
    nums: i32,
    commit: i64,
    suspend: i64,
) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: "G".into(),
        topic: TOPIC.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: nums,
        sys_flag: 0x1 | 0x2 | 0x4,
        commit_offset: commit,
        suspend_timeout_millis: suspend,
        subscription: Some("*".into()),
        sub_version: i64::MIN,
        expression_type: Some("TAG".into()),
        max_msg_bytes: Some(nums),
        ..Default::default()
    };
    RemotingCommand::request_with_header(request::PULL_MESSAGE, &header)
}

/// A send with hostile numbers in its header and properties.
fn hostile_send(queue_id: i32, number: i64, delay: &str) -> RemotingCommand {
    let properties = format!("DELAY\u{1}{delay}\u{2}TAGS\u{1}t\u{2}");
    let header = SendMessageRequestHeaderV2 {
        d: queue_id,
        e: queue_id,
        f: queue_id,
        g: number,
        h: queue_id,
        i: Some(properties.into()),
        j: Some(queue_id),
        ..common::header_v2(TOPIC)
    };
    RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header).with_body(b"h".to_vec())
}

fn hostile_commit(queue_id: i32, offset: i64) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: TOPIC.into(),
        queue_id,
        commit_offset: offset,
    };
    RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_numbers_in_headers_get_an_answer_and_the_broker_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.broker_suspend_max_time_millis = 200).await;
    let a = common::client(broker.local_addr()).await;
    let extremes = [i64::MAX, i64::MIN, i32::MAX as i64, i32::MIN as i64, -1, 0];
    let narrow = [i32::MAX, i32::MIN, -1, 0];
    let mut requests = Vec::new();
    for &n in &extremes {
        for &q in &[0, i32::MAX, i32::MIN, -1] {
            requests.push(hostile_commit(q, n));
        }
        for &m in &narrow {
            requests.push(hostile_pull(0, n, m, n, n));
            requests.push(hostile_pull(m, n, m, -n.saturating_add(1), n));
            requests.push(hostile_send(m, n, &n.to_string()));
        }
        requests.push(hostile_send(0, n, "2147483648"));
    }
    for command in requests {
        let shown = format!("{:?}", command.ext_fields);
        a.invoke(command, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("no answer to {shown}: {e}"));
    }
    let reply = common::send(&a, TOPIC, 0, b"after", "t").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let reply = common::query(&a, TOPIC, 0).await;
    assert!(reply.code == response::SUCCESS || reply.code == response::QUERY_NOT_FOUND);
}
