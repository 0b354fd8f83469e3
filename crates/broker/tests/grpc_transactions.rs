//! Transactions over gRPC (`grpc::transaction` over `core::transactions`): a TRANSACTION message
//! is a half until EndTransaction commits it, a rollback never delivers it, a wrong topic or a
//! foreign transaction id is refused, and an orphaned half is checked back on the producer's
//! Telemetry stream (RecoverOrphanedTransactionCommand) and committed by the answer.

mod common;

use std::time::Duration;

use common::grpc::{grpc_client, message, resource, send, with_client_id};
use common::{broker_config, client, pull_command, records, TIMEOUT};
use ferromq_broker::Broker;
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::telemetry_command::Command;
use ferromq_protocol::grpc::{self as pb, Code, MessageType, SystemProperties};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::RecordView;
use tonic::transport::Channel;

async fn start(check_ms: u64) -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(ferromq_broker::BrokerConfig {
        transaction_time_out: check_ms,
        transaction_check_interval: check_ms,
        ..broker_config(dir.path(), false)
    })
    .await
    .unwrap();
    let config = ferromq_broker::catalog::topics::topic_with_queues("TxT", 1);
    broker.context().topics.upsert(config).unwrap();
    (dir, broker)
}

fn transactional(id: &str, body: &[u8]) -> pb::Message {
    let mut m = message("TxT", id, body, SystemProperties::default());
    m.system_properties.as_mut().unwrap().message_type = MessageType::Transaction as i32;
    m
}

async fn end(
    grpc: &mut MessagingServiceClient<Channel>,
    topic: &str,
    transaction_id: &str,
    resolution: pb::TransactionResolution,
    source: pb::TransactionSource,
) -> i32 {
    grpc.end_transaction(with_client_id(pb::EndTransactionRequest {
        topic: resource(topic),
        message_id: String::new(),
        transaction_id: transaction_id.into(),
        resolution: resolution as i32,
        source: source as i32,
        trace_context: String::new(),
    }))
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
    .code
}

async fn bodies(remoting: &RemotingClient) -> Vec<Vec<u8>> {
    let reply = remoting
        .invoke(pull_command("TxT", 0, 0, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    records(&reply)
        .iter()
        .map(|r| RecordView::parse(r).unwrap().body.to_vec())
        .collect()
}

async fn until_bodies(remoting: &RemotingClient, want: &[&[u8]]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = bodies(remoting).await;
        if got.len() >= want.len() {
            let want: Vec<Vec<u8>> = want.iter().map(|b| b.to_vec()).collect();
            assert_eq!(got, want);
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn end_transaction_commits_or_rolls_back_a_half() {
    let (_dir, broker) = start(60_000).await;
    let mut grpc = grpc_client(&broker).await;
    let remoting = client(broker.local_addr()).await;
    let reply = send(
        &mut grpc,
        vec![
            transactional("TX1", b"commit me"),
            transactional("TX2", b"roll me back"),
        ],
    )
    .await;
    assert_eq!(reply.status.unwrap().code, Code::Ok as i32);
    let ids: Vec<String> = reply
        .entries
        .iter()
        .map(|e| e.transaction_id.clone())
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("fmqx1 ")), "{ids:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        bodies(&remoting).await.is_empty(),
        "halves are not delivered"
    );

    use pb::TransactionResolution::{Commit, Rollback};
    use pb::TransactionSource::SourceClient;
    assert_eq!(
        end(&mut grpc, "Other", &ids[0], Commit, SourceClient).await,
        Code::InvalidTransactionId as i32,
        "wrong topic"
    );
    assert_eq!(
        end(&mut grpc, "TxT", "not-an-id", Commit, SourceClient).await,
        Code::InvalidTransactionId as i32
    );
    assert_eq!(
        end(&mut grpc, "TxT", &ids[0], Commit, SourceClient).await,
        Code::Ok as i32
    );
    assert_eq!(
        end(&mut grpc, "TxT", &ids[0], Commit, SourceClient).await,
        Code::Ok as i32,
        "repeated END is idempotent"
    );
    assert_eq!(
        end(&mut grpc, "TxT", &ids[1], Rollback, SourceClient).await,
        Code::Ok as i32
    );
    assert_eq!(
        end(&mut grpc, "TxT", &ids[1], Commit, SourceClient).await,
        Code::InvalidTransactionId as i32,
        "conflicting decision"
    );
    until_bodies(&remoting, &[b"commit me"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        bodies(&remoting).await,
        vec![b"commit me".to_vec()],
        "the rolled back one never comes"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_orphaned_half_is_checked_back_over_telemetry_and_committed_by_the_answer() {
    let (_dir, broker) = start(300).await;
    let mut grpc = grpc_client(&broker).await;
    let remoting = client(broker.local_addr()).await;
    // The producer's Telemetry stream, publishing TxT.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::TelemetryCommand {
        status: None,
        command: Some(Command::Settings(pb::Settings {
            client_type: Some(pb::ClientType::Producer as i32),
            pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing {
                topics: vec![resource("TxT").unwrap()],
                max_body_size: 0,
                validate_message_type: true,
            })),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut telemetry = grpc
        .telemetry(with_client_id(futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
        )))
        .await
        .unwrap()
        .into_inner();
    let settings = telemetry.message().await.unwrap().unwrap();
    assert_eq!(settings.status.unwrap().code, Code::Ok as i32);

    let reply = send(&mut grpc, vec![transactional("ORPHAN", b"orphan")]).await;
    let id = reply.entries[0].transaction_id.clone();
    let check = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let command = telemetry.message().await.unwrap().expect("stream open");
            if let Some(Command::RecoverOrphanedTransactionCommand(check)) = command.command {
                return check;
            }
        }
    })
    .await
    .expect("a check-back within 5 s");
    assert_eq!(check.transaction_id, id);
    let message = check.message.unwrap();
    assert_eq!(message.body, b"orphan");
    let system = message.system_properties.unwrap();
    assert_eq!(system.message_id, "ORPHAN");
    assert_eq!(system.message_type, MessageType::Transaction as i32);
    assert_eq!(message.topic.unwrap().name, "TxT");
    let code = end(
        &mut grpc,
        "TxT",
        &check.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_eq!(code, Code::Ok as i32);
    until_bodies(&remoting, &[b"orphan"]).await;
    drop(tx);
    broker.shutdown().await.unwrap();
}
