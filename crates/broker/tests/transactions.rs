//! Transactional messages over real TCP with a raw remoting client: half messages invisible
//! to pulls and queries, END commit / rollback / unknown, idempotent and refused ENDs (bad
//! offsets, wrong group, negative offsets, an END flood), check-backs to a live producer
//! connection, discards after `transactionCheckMax`, decisions and checker progress across a
//! restart, on a slave and across a failover.

mod common;

use std::time::{Duration, Instant};

use ferromq_broker::replication::BrokerRole;
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::client::QueryMessageRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageResponseHeader;
use ferromq_protocol::remoting::headers::transaction::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{MessageId, RecordView};

use common::{bodies, broker_config, client, pull_command, send_to, TIMEOUT};

const COMMIT: i32 = 8;
const ROLLBACK: i32 = 12;
const UNKNOWN: i32 = 0;

/// Transactions with checks every 100 ms after `timeout_ms`, at most `check_max` times.
fn config(dir: &std::path::Path, timeout_ms: u64, check_max: u32) -> BrokerConfig {
    BrokerConfig {
        transaction_time_out: timeout_ms,
        transaction_check_interval: 100,
        transaction_check_max: check_max,
        ..broker_config(dir, true)
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A half message's place: (tranStateTableOffset, commitLogOffset).
type Half = (i64, i64);

/// Sends a half message of group PG to `topic` queue 0 with key `key`.
async fn half(client: &RemotingClient, topic: &str, body: &str, key: &str) -> Half {
    let reply = send_to(
        client,
        topic,
        0,
        body.as_bytes(),
        &[
            ("TRAN_MSG", "true"),
            ("PGROUP", "PG"),
            ("KEYS", key),
            ("UNIQ_KEY", &format!("U-{key}")),
        ],
    )
    .await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let header: SendMessageResponseHeader = reply.decode_header().unwrap();
    let phys = MessageId::decode(&header.msg_id).unwrap().phys_offset;
    (header.queue_offset, phys as i64)
}

fn end_command(
    group: &str,
    (queue_offset, phys): Half,
    kind: i32,
    from_check: bool,
) -> RemotingCommand {
    let header = EndTransactionRequestHeader {
        producer_group: group.into(),
        tran_state_table_offset: queue_offset,
        commit_log_offset: phys,
        commit_or_rollback: kind,
        from_transaction_check: Some(from_check),
        msg_id: None,
        transaction_id: None,
    };
    RemotingCommand::request_with_header(request::END_TRANSACTION, &header)
}

async fn end(client: &RemotingClient, half: Half, kind: i32) -> RemotingCommand {
    client
        .invoke(end_command("PG", half, kind, false), TIMEOUT)
        .await
        .unwrap()
}

/// Bodies a consumer pulls from `topic` queue 0 now.
async fn pulled(broker: &Broker, topic: &str) -> Vec<String> {
    broker.context().store.dispatch_caught_up(TIMEOUT).await;
    let reader = client(broker.local_addr()).await;
    let reply = reader
        .invoke(pull_command(topic, 0, 0, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert!(
        [response::SUCCESS, response::PULL_NOT_FOUND].contains(&reply.code),
        "pull of {topic}: {} {:?}",
        reply.code,
        reply.remark
    );
    bodies(&reply)
        .into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect()
}

/// Bodies QUERY_MESSAGE finds for `key` in `topic`.
async fn queried(client: &RemotingClient, topic: &str, key: &str) -> Vec<String> {
    let header = QueryMessageRequestHeader {
        topic: topic.into(),
        key: key.into(),
        max_num: 32,
        begin_timestamp: 0,
        end_timestamp: i64::MAX,
    };
    let command = RemotingCommand::request_with_header(request::QUERY_MESSAGE, &header);
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    bodies(&reply)
        .into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_is_consumed_once_and_rollback_is_never_pulled_or_queried() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 60_000, 15)).await.unwrap();
    let producer = client(broker.local_addr()).await;
    let committed = half(&producer, "T", "kept", "k-commit").await;
    let rolled_back = half(&producer, "T", "dropped", "k-rollback").await;
    assert!(
        pulled(&broker, "T").await.is_empty(),
        "a half is invisible to pulls"
    );
    assert!(
        queried(&producer, "T", "k-commit").await.is_empty(),
        "and to queries"
    );
    assert_eq!(broker.context().metrics.transactions.pending(), 2);

    let reply = end(&producer, committed, COMMIT).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let reply = end(&producer, rolled_back, ROLLBACK).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(pulled(&broker, "T").await, vec!["kept"]);

    // Repeated and late ENDs: the same decision is idempotent, the other one a conflict.
    let again = end(&producer, committed, COMMIT).await;
    assert_eq!(again.code, response::SUCCESS);
    assert!(again.remark.unwrap().contains("already decided"));
    let flip = end(&producer, committed, ROLLBACK).await;
    assert_eq!(flip.code, response::TRANSACTION_FAILED, "{:?}", flip.remark);
    let flip = end(&producer, rolled_back, COMMIT).await;
    assert_eq!(flip.code, response::TRANSACTION_FAILED, "{:?}", flip.remark);
    assert_eq!(
        end(&producer, rolled_back, UNKNOWN).await.code,
        response::SUCCESS
    );

    assert_eq!(
        pulled(&broker, "T").await,
        vec!["kept"],
        "committed exactly once"
    );
    assert_eq!(queried(&producer, "T", "k-commit").await, vec!["kept"]);
    assert!(queried(&producer, "T", "k-rollback").await.is_empty());
    let tx = &broker.context().metrics.transactions;
    assert_eq!((tx.decisions("commit"), tx.decisions("rollback")), (1, 1));
    assert_eq!(tx.pending(), 0);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_naming_no_half_is_refused_counted_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 60_000, 15)).await.unwrap();
    let producer = client(broker.local_addr()).await;
    let pending = half(&producer, "T", "pending", "k1").await;

    let unknown_offset = end(&producer, (pending.0 + 7, pending.1), COMMIT).await;
    assert_eq!(
        unknown_offset.code,
        response::TRANSACTION_FAILED,
        "{:?}",
        unknown_offset.remark
    );
    let wrong_phys = end(&producer, (pending.0, pending.1 + 1), COMMIT).await;
    assert_eq!(wrong_phys.code, response::TRANSACTION_FAILED);
    let reply = producer
        .invoke(end_command("OTHER", pending, COMMIT, false), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        reply.code,
        response::TRANSACTION_STATE_GROUP_WRONG,
        "{:?}",
        reply.remark
    );
    assert!(reply
        .remark
        .unwrap()
        .contains("belongs to producer group PG"));
    let negative = end(&producer, (-1, pending.1), COMMIT).await;
    assert_eq!(
        negative.code,
        response::INVALID_PARAMETER,
        "{:?}",
        negative.remark
    );
    let negative = end(&producer, (pending.0, -5), ROLLBACK).await;
    assert_eq!(negative.code, response::INVALID_PARAMETER);
    assert_eq!(
        end(&producer, pending, 5).await.code,
        response::INVALID_PARAMETER
    );

    // A flood: thousands of bad and "unknown" ENDs, one-way as Java sends them.
    let op_end_before = op_queue_end(&broker);
    for i in 0..2_000i64 {
        let kind = if i % 2 == 0 { UNKNOWN } else { COMMIT };
        let target = if i % 2 == 0 {
            pending
        } else {
            (pending.0 + 1 + i, i)
        };
        let mut command = end_command("PG", target, kind, false);
        command.set_oneway(true);
        producer.invoke_oneway(command).await.unwrap();
    }
    let tx = broker.context().metrics.transactions.clone();
    eventually("every refused END counted", || {
        tx.end_refusals("no_half") >= 1_002
    })
    .await;
    assert_eq!(tx.end_refusals("wrong_group"), 1);
    assert_eq!(tx.end_refusals("bad_argument"), 3);
    assert_eq!(
        op_queue_end(&broker) - op_end_before,
        1,
        "1,000 unknowns write one record"
    );
    assert_eq!(tx.decisions("commit"), 0);
    assert!(pulled(&broker, "T").await.is_empty());
    // The half is still pending and can be committed.
    assert_eq!(
        end(&producer, pending, COMMIT).await.code,
        response::SUCCESS
    );
    assert_eq!(pulled(&broker, "T").await, vec!["pending"]);
    broker.shutdown().await.unwrap();
}

fn op_queue_end(broker: &Broker) -> u64 {
    broker
        .context()
        .store
        .queue_bounds("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)
        .map_or(0, |(_, max)| max)
}

/// A connection registered as a producer of group PG.
async fn producer_connection(broker: &Broker) -> RemotingClient {
    let conn = client(broker.local_addr()).await;
    let body = r#"{"clientID":"127.0.0.1@tx","producerDataSet":[{"groupName":"PG"}],"consumerDataSet":[]}"#;
    let beat = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(body.as_bytes().to_vec());
    assert_eq!(
        conn.invoke(beat, TIMEOUT).await.unwrap().code,
        response::SUCCESS
    );
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_back_reaches_a_live_producer_and_its_answer_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 300, 15)).await.unwrap();
    let sender = client(broker.local_addr()).await;
    let sent = half(&sender, "T", "checked", "k-check").await;
    // The producer that sent it is gone; another producer of the group is online.
    drop(sender);
    let producer = producer_connection(&broker).await;
    let mut requests = producer.take_server_requests().unwrap();
    let check = tokio::time::timeout(Duration::from_secs(10), requests.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(check.code, request::CHECK_TRANSACTION_STATE);
    let header: CheckTransactionStateRequestHeader = check.decode_header().unwrap();
    assert_eq!(
        (header.tran_state_table_offset, header.commit_log_offset),
        sent
    );
    assert_eq!(header.msg_id.as_deref(), Some("U-k-check"));
    let body = check.body.as_deref().unwrap();
    let view = RecordView::parse(body).unwrap();
    assert_eq!(
        (view.topic_str(), view.queue_id, view.body),
        ("T", 0, &b"checked"[..])
    );
    assert_eq!(
        view.properties.get_str("TRANSACTION_CHECK_TIMES"),
        Some("1")
    );
    assert!(pulled(&broker, "T").await.is_empty());

    let reply = producer
        .invoke(end_command("PG", sent, COMMIT, true), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(pulled(&broker, "T").await, vec!["checked"]);
    assert!(broker.context().metrics.transactions.checks() >= 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_half_is_checked_up_to_the_limit_then_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 0, 3)).await.unwrap();
    let producer = client(broker.local_addr()).await;
    half(&producer, "T", "orphan", "k-orphan").await;
    let tx = broker.context().metrics.transactions.clone();
    eventually("the half discarded", || tx.discards() == 1).await;
    assert_eq!(
        tx.checks(),
        3,
        "checked transactionCheckMax times, then discarded"
    );
    assert_eq!(tx.decisions("discard"), 1);
    assert_eq!(tx.pending(), 0);
    assert!(pulled(&broker, "T").await.is_empty());
    let discarded = pulled(&broker, "TRANS_CHECK_MAX_TIME_TOPIC").await;
    assert_eq!(discarded, vec!["orphan"]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        (tx.checks(), tx.discards()),
        (3, 1),
        "nothing more after the discard"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_check_counts_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let slow = BrokerConfig {
        transaction_check_interval: 400,
        ..config(dir.path(), 0, 2)
    };
    let broker = Broker::start(slow.clone()).await.unwrap();
    let producer = client(broker.local_addr()).await;
    let committed = half(&producer, "T", "c", "k-c").await;
    let rolled_back = half(&producer, "T", "r", "k-r").await;
    let pending = half(&producer, "T", "p", "k-p").await;
    assert_eq!(
        end(&producer, committed, COMMIT).await.code,
        response::SUCCESS
    );
    assert_eq!(
        end(&producer, rolled_back, ROLLBACK).await.code,
        response::SUCCESS
    );
    let tx = broker.context().metrics.transactions.clone();
    eventually("one check of the pending half", || tx.checks() >= 1).await;
    broker.shutdown().await.unwrap();

    let broker = Broker::start(slow).await.unwrap();
    let producer = client(broker.local_addr()).await;
    let again = end(&producer, committed, COMMIT).await;
    assert_eq!(again.code, response::SUCCESS);
    assert!(
        again.remark.unwrap().contains("already decided"),
        "the commit held"
    );
    assert_eq!(
        end(&producer, rolled_back, COMMIT).await.code,
        response::TRANSACTION_FAILED
    );
    let tx = broker.context().metrics.transactions.clone();
    // transactionCheckMax is 2 and one check was recorded before the restart: one more check,
    // then the discard.
    eventually("the pending half discarded", || tx.discards() == 1).await;
    assert_eq!(tx.checks(), 1, "the count continued from the log");
    assert_eq!(
        pulled(&broker, "T").await,
        vec!["c"],
        "nothing delivered twice"
    );
    assert_eq!(
        end(&producer, pending, COMMIT).await.code,
        response::TRANSACTION_FAILED
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slave_refuses_end_and_a_promoted_slave_keeps_the_decisions() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ha = |dir: &std::path::Path, role: &str, id: u64, master: Option<String>| BrokerConfig {
        broker_role: role.into(),
        broker_id: id,
        ha_master_address: master,
        ha_send_heartbeat_interval: 100,
        ha_max_time_slave_not_catchup: 1_000,
        sync_flush_timeout: 3_000,
        ..config(dir, 60_000, 15)
    };
    let a = Broker::start(ha(dir_a.path(), "SYNC_MASTER", 0, None))
        .await
        .unwrap();
    a.context()
        .replication
        .promote(1, BrokerRole::SyncMaster)
        .unwrap();
    let b = Broker::start(ha(dir_b.path(), "SLAVE", 1, Some(a.ha_addr().to_string())))
        .await
        .unwrap();
    let ra = a.context().replication.clone();
    eventually("B in sync", || ra.runtime().in_sync_members == 2).await;

    let producer = client(a.local_addr()).await;
    let committed = half(&producer, "T", "c", "k-c").await;
    let pending = half(&producer, "T", "p", "k-p").await;
    assert_eq!(
        end(&producer, committed, COMMIT).await.code,
        response::SUCCESS
    );
    let on_slave = client(b.local_addr()).await;
    let refused = end(&on_slave, pending, ROLLBACK).await;
    assert_eq!(
        refused.code,
        ferromq_broker::codes::NOT_MASTER,
        "{:?}",
        refused.remark
    );
    let end_a = a.context().store.committed_end();
    let store_b = b.context().store.clone();
    eventually("B holds the decision", || {
        store_b.locally_acknowledgeable_end() >= end_a
    })
    .await;
    drop(store_b);
    let topics_b = &b.context().topics;
    eventually("B knows the topic", || topics_b.get("T").is_some()).await;
    a.shutdown().await.unwrap();

    b.context()
        .replication
        .promote(2, BrokerRole::AsyncMaster)
        .unwrap();
    let producer = client(b.local_addr()).await;
    let again = end(&producer, committed, COMMIT).await;
    assert_eq!(again.code, response::SUCCESS, "{:?}", again.remark);
    assert!(again.remark.unwrap().contains("already decided"));
    assert_eq!(
        end(&producer, pending, ROLLBACK).await.code,
        response::SUCCESS
    );
    assert_eq!(pulled(&b, "T").await, vec!["c"]);
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_cannot_be_a_batch_or_delayed_and_needs_a_real_target() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 60_000, 15)).await.unwrap();
    let producer = client(broker.local_addr()).await;
    let delayed = send_to(
        &producer,
        "T",
        0,
        b"x",
        &[("TRAN_MSG", "true"), ("DELAY", "2")],
    )
    .await;
    assert_eq!(
        delayed.code,
        response::MESSAGE_ILLEGAL,
        "{:?}",
        delayed.remark
    );
    let reserved = send_to(
        &producer,
        "SCHEDULE_TOPIC_XXXX",
        0,
        b"x",
        &[("TRAN_MSG", "true")],
    )
    .await;
    assert_eq!(
        reserved.code,
        response::NO_PERMISSION,
        "{:?}",
        reserved.remark
    );
    let tracked = BrokerConfig {
        transaction_tracked_max: 1,
        ..config(dir.path(), 60_000, 15)
    };
    broker.shutdown().await.unwrap();
    let broker = Broker::start(tracked).await.unwrap();
    let producer = client(broker.local_addr()).await;
    half(&producer, "T", "one", "k1").await;
    let full = send_to(&producer, "T", 0, b"two", &[("TRAN_MSG", "true")]).await;
    assert_eq!(full.code, response::SYSTEM_BUSY, "{:?}", full.remark);
    assert!(full.remark.unwrap().contains("transactionTrackedMax"));
    broker.shutdown().await.unwrap();
}

/// Regression: concurrent halves finish out of order; a later half decided before an earlier
/// one was tracked moved the watermark past it, and its commit was answered "already decided
/// (rollback)" (seen in `ferromq bench transaction`, 56 of 55,810 transactions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_all_commit_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), 60_000, 15)).await.unwrap();
    let addr = broker.local_addr();
    let mut tasks = Vec::new();
    for task in 0..8 {
        tasks.push(tokio::spawn(async move {
            let producer = client(addr).await;
            for i in 0..50 {
                let key = format!("k{task}-{i}");
                let sent = half(&producer, "T", &key, &key).await;
                let reply = end(&producer, sent, COMMIT).await;
                assert_eq!(reply.code, response::SUCCESS, "{key}: {:?}", reply.remark);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    broker.context().store.dispatch_caught_up(TIMEOUT).await;
    let reader = client(addr).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut offset = 0;
    loop {
        let reply = reader
            .invoke(pull_command("T", 0, offset, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        let got = bodies(&reply);
        if got.is_empty() {
            break;
        }
        offset += got.len() as i64;
        for body in got {
            assert!(seen.insert(body), "delivered twice");
        }
    }
    assert_eq!(seen.len(), 400);
    let tx = &broker.context().metrics.transactions;
    assert_eq!((tx.decisions("commit"), tx.pending()), (400, 0));
    assert_eq!(tx.end_refusals("conflict") + tx.end_refusals("no_half"), 0);
    broker.shutdown().await.unwrap();
}
