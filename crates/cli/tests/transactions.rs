//! Transactional messages across a `kill -9` of `ferromq standalone`: decisions acknowledged
//! just before the kill hold after the restart, a half left pending is checked back again by
//! the restarted broker (and only it), and nothing is delivered twice.
//!
//! Steps: send three halves; commit the first and roll back the second (both acknowledged);
//! SIGKILL the process; restart it on the same data; a producer of the group connects; the
//! broker checks back the third half only; the producer commits it; consumers see the first
//! and third messages, once each.
//!
//! A torn write (power loss with an unflushed tail) can keep a commit's real message but not
//! its decision record: the test cuts the CommitLog at the op record, and the restarted broker
//! checks the half again and, on commit, records the decision without a second copy.

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::transaction::CheckTransactionStateRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::MessageId;

use common::remoting::{
    client, end_transaction, invoke, producer_heartbeat, pull, records, remark, send_half, Half,
};

const TX_FLAGS: &[&str] = &[
    "--transaction-timeout-ms",
    "300",
    "--transaction-check-interval-ms",
    "200",
    "--transaction-check-max",
    "50",
];

async fn half(conn: &ferromq_protocol::remoting::client::RemotingClient, body: &str) -> Half {
    send_half(conn, "PG", "TX", 0, body).await
}

fn end(half: Half, kind: i32, from_check: bool) -> RemotingCommand {
    end_transaction("PG", half, kind, from_check)
}

async fn consumed(broker: SocketAddr) -> Vec<String> {
    let conn = client(broker).await;
    let reply = pull(&conn, "TX", 0, 0, 32, None).await;
    records(&reply)
        .into_iter()
        .map(|(_, b)| String::from_utf8(b).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_hold_and_pending_halves_are_checked_again_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let standalone = common::start_in(&data, TX_FLAGS);
    let broker: SocketAddr = standalone.broker.parse().unwrap();
    let conn = client(broker).await;
    let committed = half(&conn, "committed").await;
    let rolled_back = half(&conn, "rolled-back").await;
    let pending = half(&conn, "pending").await;
    assert_eq!(
        invoke(&conn, end(committed, 8, false)).await.code,
        response::SUCCESS
    );
    assert_eq!(
        invoke(&conn, end(rolled_back, 12, false)).await.code,
        response::SUCCESS
    );
    drop(conn);
    drop(standalone); // SIGKILL: no checkpoint, no clean close.

    let standalone = common::start_in(&data, TX_FLAGS);
    let broker: SocketAddr = standalone.broker.parse().unwrap();
    let producer = client(broker).await;
    let mut checks = producer.take_server_requests().unwrap();
    producer_heartbeat(&producer, "127.0.0.1@restarted", "PG").await;
    let check = tokio::time::timeout(Duration::from_secs(20), checks.recv())
        .await
        .expect("a check-back within 20 s")
        .unwrap();
    assert_eq!(check.code, request::CHECK_TRANSACTION_STATE);
    let header: CheckTransactionStateRequestHeader = check.decode_header().unwrap();
    assert_eq!(
        (header.tran_state_table_offset, header.commit_log_offset),
        pending,
        "only the undecided half is checked"
    );
    assert_eq!(consumed(broker).await, vec!["committed"]);
    let reply = invoke(&producer, end(pending, 8, true)).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    eventually!(
        10,
        "the checked half delivered",
        consumed(broker).await.len() == 2
    );
    assert_eq!(consumed(broker).await, vec!["committed", "pending"]);

    let again = invoke(&producer, end(committed, 8, false)).await;
    assert_eq!(again.code, response::SUCCESS, "{}", remark(&again));
    assert!(remark(&again).contains("already decided"));
    let flip = invoke(&producer, end(rolled_back, 8, false)).await;
    assert_eq!(flip.code, response::TRANSACTION_FAILED, "{}", remark(&flip));
    // No check of a decided half ever comes.
    let late = tokio::time::timeout(Duration::from_millis(800), checks.recv()).await;
    if let Ok(Some(late)) = late {
        let header: CheckTransactionStateRequestHeader = late.decode_header().unwrap();
        assert_eq!(
            (header.tran_state_table_offset, header.commit_log_offset),
            pending,
            "a decided half was checked"
        );
    }
    assert_eq!(
        consumed(broker).await,
        vec!["committed", "pending"],
        "nothing delivered twice"
    );
    standalone.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_msg_by_id_on_a_half_says_it_is_a_half_and_its_state() {
    let standalone = common::start_with(TX_FLAGS);
    let broker: SocketAddr = standalone.broker.parse().unwrap();
    let conn = client(broker).await;
    let pending = half(&conn, "pending").await;
    let committed = half(&conn, "committed").await;
    assert_eq!(
        invoke(&conn, end(committed, 8, false)).await.code,
        response::SUCCESS
    );
    let n = standalone.namesrv.as_str();
    let id = |half: (i64, i64)| {
        MessageId {
            store_host: broker,
            phys_offset: half.1 as u64,
        }
        .encode()
    };
    let shown = common::ok_json(&["queryMsgById", "-n", n, "-i", &id(pending)]);
    assert_eq!(shown["topic"], "RMQ_SYS_TRANS_HALF_TOPIC");
    assert_eq!(shown["transaction"]["halfMessage"], true);
    let state = shown["transaction"]["state"].as_str().unwrap();
    assert!(state.starts_with("pending, "), "{state}");
    let shown = common::ok_json(&["queryMsgById", "-n", n, "-i", &id(committed)]);
    assert_eq!(shown["transaction"]["state"], "committed");
    let human = common::ok(&["queryMsgById", "-n", n, "-i", &id(committed)]);
    assert!(
        human.contains("Transaction:        half message (prepared), committed"),
        "{human}"
    );
    let status = common::ok_json(&["brokerStatus", "-b", &standalone.broker]).to_string();
    for entry in [
        r#""transactionHalfPending":"1""#,
        r#""transactionCommitsTotal":"1""#,
        r#""transactionRollbacksTotal":"0""#,
    ] {
        assert!(status.contains(entry), "{entry} in {status}");
    }
    standalone.stop();
}

/// The commit op record's property, as stored (`key\u{1}value\u{2}`).
const COMMIT_OP_NEEDLE: &[u8] = b"FERROMQ_TX_OP\x01commit";

/// Cuts the CommitLog at the start of the record holding the commit op record, as a power
/// loss that kept the real message but not its decision would: that record and everything
/// after it in the segment is zeroed. Returns the cut position.
fn tear_at_commit_op(data: &Path, real_body: &[u8]) -> usize {
    for item in std::fs::read_dir(data.join("commitlog")).unwrap() {
        let path = item.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let Some(needle) = bytes
            .windows(COMMIT_OP_NEEDLE.len())
            .position(|w| w == COMMIT_OP_NEEDLE)
        else {
            continue;
        };
        // Walk the records by their TOTALSIZE to the one holding the needle.
        let mut start = 0usize;
        loop {
            let size = u32::from_be_bytes(bytes[start..start + 4].try_into().unwrap()) as usize;
            assert!(size > 0, "no record holds the op record at {needle}");
            if needle < start + size {
                break;
            }
            start += size;
        }
        let real = bytes
            .windows(real_body.len())
            .position(|w| w == real_body)
            .expect("the real message is in the same segment");
        assert!(real < start, "the real message lies before the cut");
        bytes[start..].fill(0);
        std::fs::write(&path, bytes).unwrap();
        return start;
    }
    panic!("no commit op record in {}", data.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_write_that_kept_the_real_message_but_not_the_decision_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let standalone = common::start_in(&data, TX_FLAGS);
    let broker: SocketAddr = standalone.broker.parse().unwrap();
    let conn = client(broker).await;
    let torn = half(&conn, "torn-commit").await;
    let reply = invoke(&conn, end(torn, 8, false)).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    assert_eq!(consumed(broker).await, vec!["torn-commit"]);
    drop(conn);
    drop(standalone); // SIGKILL
    let cut = tear_at_commit_op(&data, b"torn-commit");
    assert!(cut > 0);

    let standalone = common::start_in(&data, TX_FLAGS);
    let broker: SocketAddr = standalone.broker.parse().unwrap();
    assert_eq!(
        consumed(broker).await,
        vec!["torn-commit"],
        "the real message survived the cut"
    );
    let producer = client(broker).await;
    let mut checks = producer.take_server_requests().unwrap();
    producer_heartbeat(&producer, "127.0.0.1@torn", "PG").await;
    let check = tokio::time::timeout(Duration::from_secs(20), checks.recv())
        .await
        .expect("the undecided half is checked again within 20 s")
        .unwrap();
    let header: CheckTransactionStateRequestHeader = check.decode_header().unwrap();
    assert_eq!(
        (header.tran_state_table_offset, header.commit_log_offset),
        torn
    );
    let reply = invoke(&producer, end(torn, 8, true)).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    // The decision is recorded: no further check comes, and no second copy is delivered.
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Ok(Some(late)) = tokio::time::timeout_at(deadline.into(), checks.recv()).await {
        // A check sent before the decision was recorded may still arrive; nothing after.
        let header: CheckTransactionStateRequestHeader = late.decode_header().unwrap();
        assert_eq!(
            (header.tran_state_table_offset, header.commit_log_offset),
            torn
        );
    }
    let again = tokio::time::timeout(Duration::from_millis(1_500), checks.recv()).await;
    assert!(
        again.is_err(),
        "a decided half was checked again: {again:?}"
    );
    assert_eq!(
        consumed(broker).await,
        vec!["torn-commit"],
        "the committed copy is not written twice"
    );
    standalone.stop();
}
