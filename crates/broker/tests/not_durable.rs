//! NOT_DURABLE proven at the broker (issue 11 item 7): with the store's fault hooks armed, a
//! send, a batch, a commit and a reset whose fsync fails each get NOT_DURABLE (2110) with a
//! remark; every later write of any kind gets the poisoned store's one answer,
//! SERVICE_NOT_AVAILABLE (14), naming the failure; reads keep working; nothing panics.

mod common;

use ferromq_broker::replication::catalog_log;
use ferromq_broker::{codes, Broker};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;

use common::{bodies, broker, client, commit, pull_command, query, reset_queue, TIMEOUT};

const TOPIC: &str = "Durable";

/// The write kinds a broker acknowledges.
#[derive(Debug, Clone, Copy)]
enum Write {
    Send,
    Batch,
    Commit,
    Reset,
}

const ALL: [Write; 4] = [Write::Send, Write::Batch, Write::Commit, Write::Reset];

async fn send_one(client: &RemotingClient, body: &str) -> RemotingCommand {
    common::send(client, TOPIC, 0, body.as_bytes(), "t").await
}

async fn send_batch(client: &RemotingClient) -> RemotingCommand {
    let body = common::batch_body(&[("batch-0", "b1"), ("batch-1", "b2")]);
    let header = SendMessageRequestHeaderV2 {
        m: Some(true),
        ..common::header_v2(TOPIC)
    };
    let command =
        RemotingCommand::request_with_header(request::SEND_BATCH_MESSAGE, &header).with_body(body);
    client.invoke(command, TIMEOUT).await.expect("batch reply")
}

async fn write(client: &RemotingClient, kind: Write, round: i64) -> RemotingCommand {
    match kind {
        Write::Send => send_one(client, "after").await,
        Write::Batch => send_batch(client).await,
        // Forward commits: each is a change the store must write.
        Write::Commit => commit(client, TOPIC, 0, 2 + round).await,
        Write::Reset => reset_queue(client, TOPIC, 0, 1).await,
    }
}

/// A broker with four messages on Durable/0 and group G's offset at 1.
async fn prepared(dir: &std::path::Path) -> (Broker, RemotingClient) {
    let broker = broker(dir, true).await;
    let client = client(broker.local_addr()).await;
    for i in 0..4 {
        assert_eq!(
            send_one(&client, &format!("m{i}")).await.code,
            response::SUCCESS
        );
    }
    assert_eq!(commit(&client, TOPIC, 0, 1).await.code, response::SUCCESS);
    // The topic and group were created automatically: the catalog publisher appends its
    // record in the background. Wait for it, or it could meet the fault armed next and poison
    // the store before the write under test does.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !catalog_log::is_published(broker.context()) {
        assert!(
            std::time::Instant::now() < deadline,
            "catalog not published"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    (broker, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_is_not_durable_for_every_write_kind_and_poisons_all_later_writes() {
    for first in ALL {
        let dir = tempfile::tempdir().unwrap();
        let (broker, client) = prepared(dir.path()).await;
        broker.context().store.faults().arm(0, 1);
        let reply = write(&client, first, 0).await;
        assert_eq!(
            reply.code,
            codes::NOT_DURABLE,
            "{first:?} whose fsync fails: {:?}",
            reply.remark
        );
        let remark = reply.remark.unwrap_or_default();
        assert!(remark.contains("may not be durable"), "{first:?}: {remark}");
        for (round, later) in ALL.into_iter().enumerate() {
            let reply = write(&client, later, round as i64).await;
            assert_eq!(
                reply.code,
                response::SERVICE_NOT_AVAILABLE,
                "{later:?} after a failed {first:?}: {:?}",
                reply.remark
            );
            let remark = reply.remark.unwrap_or_default();
            assert!(remark.contains("refuses writes"), "{later:?}: {remark}");
        }
        // Reads keep working: the acknowledged messages and the acknowledged offset.
        let reply = client
            .invoke(pull_command(TOPIC, 0, 0, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        let read = bodies(&reply);
        assert!(read.len() >= 4, "{first:?}: {} records", read.len());
        assert_eq!(read[0], b"m0");
        assert_eq!(query(&client, TOPIC, 0).await.code, response::SUCCESS);
        drop(client);
        let error = broker.shutdown().await.expect_err("poisoned");
        assert!(error.to_string().contains("poisoned"), "{error}");
    }
}

/// A send whose flush never completes (the fsync stalls) times out with the same answer, in
/// the same bound, as a commit whose flush never completes: both end in the one
/// acknowledgement wait, bounded by `syncFlushTimeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_and_a_commit_whose_flush_stalls_time_out_alike() {
    let dir = tempfile::tempdir().unwrap();
    let config = ferromq_broker::BrokerConfig {
        sync_flush_timeout: 300,
        ..common::broker_config(dir.path(), true)
    };
    let broker = Broker::start(config).await.unwrap();
    let client = client(broker.local_addr()).await;
    for i in 0..2 {
        assert_eq!(
            send_one(&client, &format!("m{i}")).await.code,
            response::SUCCESS
        );
    }
    broker.context().store.faults().stall_syncs(true);
    let mut answers = Vec::new();
    for kind in [Write::Send, Write::Commit] {
        let started = std::time::Instant::now();
        let reply = write(&client, kind, 0).await;
        let took = started.elapsed();
        assert_eq!(
            reply.code,
            codes::NOT_DURABLE,
            "{kind:?}: {:?}",
            reply.remark
        );
        let remark = reply.remark.unwrap_or_default();
        assert!(remark.contains("300 ms"), "{kind:?}: {remark}");
        assert!(
            took >= std::time::Duration::from_millis(290)
                && took < std::time::Duration::from_secs(3),
            "{kind:?} took {took:?}"
        );
        answers.push(reply.code);
    }
    assert_eq!(answers[0], answers[1]);
    broker.context().store.faults().stall_syncs(false);
    drop(client);
    let _ = broker.shutdown().await;
}
