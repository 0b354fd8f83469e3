//! Master/slave replication in process: slaves follow a master's HA port, hold its log,
//! queues and offsets, refuse writes, and SYNC_MASTER acknowledges only what every in-sync
//! slave holds.

mod common;

use std::time::{Duration, Instant};

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::codes::response;

use common::{broker_config, client, commit, send, TIMEOUT};

fn master_config(dir: &std::path::Path, role: &str) -> BrokerConfig {
    BrokerConfig {
        broker_role: role.into(),
        ha_send_heartbeat_interval: 100,
        ha_max_time_slave_not_catchup: 1_000,
        sync_flush_timeout: 3_000,
        ..broker_config(dir, true)
    }
}

fn slave_config(dir: &std::path::Path, id: u64, master: &Broker) -> BrokerConfig {
    BrokerConfig {
        broker_role: "SLAVE".into(),
        broker_id: id,
        ha_master_address: Some(master.ha_addr().to_string()),
        ha_send_heartbeat_interval: 100,
        ha_max_time_slave_not_catchup: 1_000,
        ..broker_config(dir, true)
    }
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slaves_hold_the_masters_log_queues_and_offsets_and_refuse_writes() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let master = Broker::start(master_config(dirs[0].path(), "SYNC_MASTER"))
        .await
        .unwrap();
    let slaves = [
        Broker::start(slave_config(dirs[1].path(), 1, &master))
            .await
            .unwrap(),
        Broker::start(slave_config(dirs[2].path(), 2, &master))
            .await
            .unwrap(),
    ];
    let replication = master.context().replication.clone();
    eventually("both slaves in sync", || {
        replication.runtime().in_sync_members == 3
    })
    .await;
    let producer = client(master.local_addr()).await;
    for i in 0..50 {
        let reply = send(&producer, "T", i % 2, format!("m{i}").as_bytes(), "a").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    let reply = commit(&producer, "T", 0, 10).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // SYNC_MASTER acknowledged: every slave holds everything, byte for byte.
    let master_store = master.context().store.clone();
    let end = master_store.committed_end();
    for slave in &slaves {
        let store = slave.context().store.clone();
        assert!(
            store.appended_end() >= end,
            "slave holds the acknowledged log"
        );
        eventually("slave dispatch", || store.stats().dispatched_end >= end).await;
        for queue in 0..2 {
            assert_eq!(
                store.queue_bounds("T", queue),
                master_store.queue_bounds("T", queue)
            );
            let a = master_store
                .get_messages("T", queue, 0, 64, 1 << 20, &Default::default())
                .unwrap();
            let b = store
                .get_messages("T", queue, 0, 64, 1 << 20, &Default::default())
                .unwrap();
            assert_eq!(
                a.messages.iter().map(|m| &m.bytes).collect::<Vec<_>>(),
                b.messages.iter().map(|m| &m.bytes).collect::<Vec<_>>()
            );
        }
        let view = store.offset_view().await.unwrap();
        assert_eq!(
            view.consumer_offset("G", "T", 0).map(|o| o.offset),
            Some(10)
        );
        // Every write is refused on a slave.
        let writer = client(slave.local_addr()).await;
        let refused = send(&writer, "T", 0, b"x", "a").await;
        assert_eq!(
            refused.code,
            ferromq_broker::codes::NOT_MASTER,
            "{:?}",
            refused.remark
        );
        let refused = commit(&writer, "T", 0, 20).await;
        assert_eq!(
            refused.code,
            ferromq_broker::codes::NOT_MASTER,
            "{:?}",
            refused.remark
        );
    }
    // Slaves serve pulls of the replicated queues (the catalog came with the log).
    for slave in &slaves {
        let reader = client(slave.local_addr()).await;
        eventually("the slave knows the topic", || {
            slave.context().topics.get("T").is_some()
        })
        .await;
        let reply = reader
            .invoke(common::pull_command("T", 0, 0, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        assert_eq!(common::bodies(&reply).len(), 25);
        // A pull-carried commit on a slave is not applied.
        let carried = common::pull_request("G", "T", 0, 25, 0, "*", Some(25));
        let reply = reader.invoke(carried, TIMEOUT).await.unwrap();
        assert_eq!(reply.code, response::PULL_NOT_FOUND, "{:?}", reply.remark);
        assert_eq!(
            slave
                .context()
                .replication
                .counters
                .carried_commits_refused
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
    // A topic deleted on the master disappears from every slave.
    let delete = ferromq_protocol::remoting::RemotingCommand::request_with_header(
        ferromq_protocol::remoting::codes::request::DELETE_TOPIC_IN_BROKER,
        &ferromq_protocol::remoting::headers::admin::DeleteTopicRequestHeader { topic: "T".into() },
    );
    let reply = producer.invoke(delete, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    for slave in &slaves {
        eventually("the slave drops the deleted topic", || {
            slave.context().topics.get("T").is_none()
        })
        .await;
    }
    let status = replication.runtime();
    assert_eq!(status.slaves.len(), 2);
    assert!(status.slaves.iter().all(|s| s.in_sync && s.acked >= end));
    let _ = TIMEOUT;
    for slave in slaves {
        slave.shutdown().await.unwrap();
    }
    master.shutdown().await.unwrap();
}
