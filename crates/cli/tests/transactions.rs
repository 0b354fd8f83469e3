//! Transactional messages across a `kill -9` of `ferromq standalone`: decisions acknowledged
//! just before the kill hold after the restart, a half left pending is checked back again by
//! the restarted broker (and only it), and nothing is delivered twice.
//!
//! Steps: send three halves; commit the first and roll back the second (both acknowledged);
//! SIGKILL the process; restart it on the same data; a producer of the group connects; the
//! broker checks back the third half only; the producer commits it; consumers see the first
//! and third messages, once each.

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::headers::transaction::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{MessageId, Properties};

use common::remoting::{client, invoke, pull, records, remark};

const TX_FLAGS: &[&str] = &[
    "--transaction-timeout-ms",
    "300",
    "--transaction-check-interval-ms",
    "200",
    "--transaction-check-max",
    "50",
];

async fn half(conn: &ferromq_protocol::remoting::client::RemotingClient, body: &str) -> (i64, i64) {
    let properties =
        Properties::encode([("TRAN_MSG", "true"), ("PGROUP", "PG"), ("UNIQ_KEY", body)]);
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: "TX".into(),
        c: "TBW102".into(),
        d: 1,
        e: 0,
        g: 1,
        i: Some(String::from_utf8(properties).unwrap()),
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = invoke(conn, command).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    let header: SendMessageResponseHeader = reply.decode_header().unwrap();
    let phys = MessageId::decode(&header.msg_id).unwrap().phys_offset as i64;
    (header.queue_offset, phys)
}

fn end(half: (i64, i64), kind: i32, from_check: bool) -> RemotingCommand {
    let header = EndTransactionRequestHeader {
        producer_group: "PG".into(),
        tran_state_table_offset: half.0,
        commit_log_offset: half.1,
        commit_or_rollback: kind,
        from_transaction_check: Some(from_check),
        msg_id: None,
        transaction_id: None,
    };
    RemotingCommand::request_with_header(request::END_TRANSACTION, &header)
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
    let body = r#"{"clientID":"127.0.0.1@restarted","producerDataSet":[{"groupName":"PG"}],"consumerDataSet":[]}"#;
    let beat = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(body.as_bytes().to_vec());
    assert_eq!(invoke(&producer, beat).await.code, response::SUCCESS);
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
