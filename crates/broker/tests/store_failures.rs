//! Store failures as a broker shows them: failed checkpoints (injected, as when the process
//! is out of descriptors) are counted in the metrics while sends keep succeeding, and a
//! poisoned store makes the broker's shutdown fail, naming the poison.

mod common;

use std::time::{Duration, Instant};

use common::{broker_config, client, scrape, value};
use ferromq_broker::{Broker, BrokerConfig, BrokerError};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::RemotingCommand;

/// Bound on every wait for the checkpointer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The tests' broker ([`broker_config`], SYNC_FLUSH) with its metrics endpoint.
async fn broker(dir: &std::path::Path) -> Broker {
    let config = BrokerConfig {
        metrics_port: Some(0),
        ..broker_config(dir, true)
    };
    Broker::start(config).await.expect("broker starts")
}

/// Sends one message; returns the reply.
async fn send(client: &RemotingClient, body: &str) -> RemotingCommand {
    common::send(client, "StoreFailures", 0, body.as_bytes(), "failures").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_checkpoints_are_counted_and_sends_keep_succeeding() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let metrics_addr = broker.metrics_addr().expect("metrics endpoint is on");
    let client = client(broker.local_addr()).await;
    let store = broker.context().store.clone();
    store.faults().fail_checkpoints(2);
    let deadline = Instant::now() + TIMEOUT;
    let mut sent = 0;
    loop {
        let reply = send(&client, &format!("message {sent}")).await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        sent += 1;
        let metrics = scrape(metrics_addr).await;
        let stats = store.stats();
        if value(&metrics, "ferromq_checkpoint_failures_total", &[]) == 2.0
            && stats.last_checkpoint_failure.is_none()
            && stats.checkpoint_position > 0
        {
            assert_eq!(stats.poisoned, None);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two counted failures, then a checkpoint: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = send(&client, "after the failures").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert!(sent >= 1);
    drop(client);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_of_a_poisoned_store_fails_naming_the_poison() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let client = client(broker.local_addr()).await;
    assert_eq!(send(&client, "ok").await.code, response::SUCCESS);
    broker.context().store.faults().arm(0, 1);
    let reply = send(&client, "fsync fails").await;
    assert_ne!(
        reply.code,
        response::SUCCESS,
        "an unflushed send is not acknowledged"
    );
    drop(client);
    let error = broker
        .shutdown()
        .await
        .expect_err("a poisoned store is not stopped cleanly");
    assert!(
        matches!(
            error,
            BrokerError::StoreClose(ferromq_store::StoreError::Poisoned(_))
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("poisoned"), "{error}");
}
