//! Client sessions, not connections (issue 11 items 4 and 5): a consumer fenced by a reset
//! stays fenced when it reconnects (same client id, new connection) and when the broker
//! restarts between the reset and its stale commit; a backward commit right after a restart
//! is never taken for an offline reset.

mod common;

use std::time::Duration;

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::QueryConsumerOffsetResponseHeader;
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;

use common::{client, commit, join_group, pull_request, query, reset_queue, send, TIMEOUT};

const TOPIC: &str = "S";
const CONSUMER: &str = "10.0.0.7@stale";

fn config(dir: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        channel_expired_timeout: 1000,
        ..common::broker_config(dir, true)
    }
}

async fn stored_offset(client: &ferromq_protocol::remoting::client::RemotingClient) -> i64 {
    let reply = query(client, TOPIC, 0).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    reply
        .decode_header::<QueryConsumerOffsetResponseHeader>()
        .unwrap()
        .offset
}

/// Ten messages on S/0, consumer CONSUMER online with progress 8, then reset to 2.
async fn consumer_reset_to_2(broker: &Broker) {
    let producer = client(broker.local_addr()).await;
    for i in 0..10 {
        send(&producer, TOPIC, 0, format!("m{i}").as_bytes(), "a").await;
    }
    let consumer = client(broker.local_addr()).await;
    join_group(&consumer, CONSUMER, TOPIC).await;
    assert_eq!(commit(&consumer, TOPIC, 0, 8).await.code, response::SUCCESS);
    let reply = reset_queue(&producer, TOPIC, 0, 2).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    drop(consumer);
}

/// The stale consumer on a new connection: its old progress is refused until it pulls, the
/// pull moves it to the reset offset, and then it commits normally.
async fn stale_consumer_cannot_undo_the_reset(broker: &Broker) {
    let again = client(broker.local_addr()).await;
    // Before it identifies itself: an unidentified connection on a fenced queue is refused.
    let reply = commit(&again, TOPIC, 0, 9).await;
    assert_eq!(
        reply.code,
        codes::COMMIT_STALE_GENERATION,
        "{:?}",
        reply.remark
    );
    join_group(&again, CONSUMER, TOPIC).await;
    let reply = commit(&again, TOPIC, 0, 9).await;
    assert_eq!(
        reply.code,
        codes::COMMIT_STALE_GENERATION,
        "same client id, new connection: still fenced ({:?})",
        reply.remark
    );
    assert_eq!(stored_offset(&again).await, 2, "the reset stands");
    let pull = pull_request("G", TOPIC, 0, 9, 0, "*", None);
    let reply = again.invoke(pull, TIMEOUT).await.unwrap();
    assert_eq!(
        reply.code,
        response::PULL_OFFSET_MOVED,
        "{:?}",
        reply.remark
    );
    let header: PullMessageResponseHeader = reply.decode_header().unwrap();
    assert_eq!(header.next_begin_offset, 2);
    assert_eq!(commit(&again, TOPIC, 0, 3).await.code, response::SUCCESS);
    assert_eq!(stored_offset(&again).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_stale_consumer_cannot_undo_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    consumer_reset_to_2(&broker).await;
    stale_consumer_cannot_undo_the_reset(&broker).await;
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_consumer_stays_fenced_across_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    consumer_reset_to_2(&broker).await;
    broker.shutdown().await.unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    stale_consumer_cannot_undo_the_reset(&broker).await;
    broker.shutdown().await.unwrap();
    // A consumer that committed after following the reset is no longer fenced after the next
    // restart: the log recorded that it followed.
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let again = client(broker.local_addr()).await;
    join_group(&again, CONSUMER, TOPIC).await;
    assert_eq!(commit(&again, TOPIC, 0, 4).await.code, response::SUCCESS);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_commit_right_after_a_restart_is_a_regression_not_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let producer = client(broker.local_addr()).await;
    for i in 0..10 {
        send(&producer, TOPIC, 0, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(commit(&producer, TOPIC, 0, 8).await.code, response::SUCCESS);
    broker.shutdown().await.unwrap();

    let broker = Broker::start(config(dir.path())).await.unwrap();
    // A consumer with stale progress reconnects before its heartbeat (or any other member's)
    // has arrived: the group looks offline, but the broker has not been up for a channel
    // expiry, so the backward commit is refused, not recorded as a reset.
    let stale = client(broker.local_addr()).await;
    let reply = commit(&stale, TOPIC, 0, 3).await;
    assert_eq!(reply.code, codes::COMMIT_REGRESSION, "{:?}", reply.remark);
    assert_eq!(stored_offset(&stale).await, 8);
    // A registered consumer of the group never makes an offline reset, however long it waits.
    join_group(&stale, CONSUMER, TOPIC).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reply = commit(&stale, TOPIC, 0, 3).await;
    assert_eq!(reply.code, codes::COMMIT_REGRESSION, "{:?}", reply.remark);
    assert_eq!(stored_offset(&stale).await, 8);
    broker.shutdown().await.unwrap();

    // Once up longer than the expiry with the group memberless, an administrator's offline
    // tool (not a registered consumer) moves the offset back: a reset.
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let admin = client(broker.local_addr()).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(commit(&admin, TOPIC, 0, 3).await.code, response::SUCCESS);
    assert_eq!(stored_offset(&admin).await, 3);
    let store = &broker.context().store;
    assert_eq!(
        store.offset_generation("G", TOPIC).unwrap(),
        1,
        "recorded as a reset"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_reset_still_works_on_a_queue_whose_fenced_consumer_never_came_back() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    consumer_reset_to_2(&broker).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while broker.context().clients.has_online_consumers("G") {
        assert!(std::time::Instant::now() < deadline, "the consumer left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let admin = client(broker.local_addr()).await;
    // The fenced consumer never returns; the group stays memberless past the expiry.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A forward commit from an unidentified connection is refused (it may be the fenced
    // consumer, reconnected)...
    let reply = commit(&admin, TOPIC, 0, 9).await;
    assert_eq!(
        reply.code,
        codes::COMMIT_STALE_GENERATION,
        "{:?}",
        reply.remark
    );
    // ... but an administrator's offline backward move is a reset, as before the fence.
    assert_eq!(commit(&admin, TOPIC, 0, 1).await.code, response::SUCCESS);
    assert_eq!(stored_offset(&admin).await, 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_commit_carried_by_a_pull_is_never_an_offline_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path())).await.unwrap();
    let producer = client(broker.local_addr()).await;
    for i in 0..10 {
        send(&producer, TOPIC, 0, format!("m{i}").as_bytes(), "a").await;
    }
    assert_eq!(commit(&producer, TOPIC, 0, 8).await.code, response::SUCCESS);
    // Memberless for longer than the expiry, and the puller is not a registered consumer:
    // a commit request would be an offline reset, a pull's commit is only progress.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pull = pull_request("G", TOPIC, 0, 3, 0, "*", Some(3));
    let reply = producer.invoke(pull, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // The carried commit runs in the background: give it time, then the offset stands.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stored_offset(&producer).await, 8);
    assert_eq!(
        broker
            .context()
            .store
            .offset_generation("G", TOPIC)
            .unwrap(),
        0,
        "no reset was recorded"
    );
    broker.shutdown().await.unwrap();
}
