//! Master/slave replication in process: slaves follow a master's HA port, hold its log,
//! queues and offsets, refuse writes, and SYNC_MASTER acknowledges only what every in-sync
//! slave holds.

mod common;

use std::time::{Duration, Instant};

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::ha::{HaCodec, HaFrame, Hello, RecordSample};
use ferromq_protocol::remoting::codes::response;
use futures_util::{SinkExt, StreamExt};

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
    // The commit created its group, whose catalog record the master appends on its own
    // schedule: wait until that record is acknowledged too, so the log end read below holds
    // only acknowledged records.
    ferromq_broker::core::catalog::published(master.context())
        .await
        .expect("catalog acknowledged");
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
    // Metrics and brokerStatus show the in-sync set, the watermark and the bytes moved.
    let ctx = master.context();
    let metrics = common::parse(&ctx.metrics.render(ctx));
    assert_eq!(
        common::value(&metrics, "ferromq_replication_in_sync_members", &[]),
        3.0
    );
    assert!(
        common::value(&metrics, "ferromq_replication_bytes_streamed_total", &[])
            >= 2.0 * end as f64
    );
    assert_eq!(
        common::value(
            &metrics,
            "ferromq_replication_slave_in_sync",
            &[("slave", "1")]
        ),
        1.0
    );
    let info = ctx.stats.runtime_info(ctx);
    assert_eq!(info["brokerRole"], "SYNC_MASTER");
    assert_eq!(info["haInSyncMembers"], "3");
    let slave_info = slaves[0].context().stats.runtime_info(slaves[0].context());
    assert_eq!(slave_info["brokerRole"], "SLAVE");
    assert!(slave_info["haBytesReceived"].parse::<u64>().unwrap() >= end);
    let status = replication.runtime();
    assert_eq!(status.slaves.len(), 2);
    assert!(status.slaves.iter().all(|s| s.in_sync && s.acked >= end));
    let _ = TIMEOUT;
    for slave in slaves {
        slave.shutdown().await.unwrap();
    }
    master.shutdown().await.unwrap();
}

async fn start_pair(role: &str, dirs: &[tempfile::TempDir]) -> (Broker, Broker) {
    let master = Broker::start(master_config(dirs[0].path(), role))
        .await
        .unwrap();
    let slave = Broker::start(slave_config(dirs[1].path(), 1, &master))
        .await
        .unwrap();
    let replication = master.context().replication.clone();
    eventually("the slave in sync", || {
        replication.runtime().in_sync_members == 2
    })
    .await;
    (master, slave)
}

/// A3: a reset is a log record like any other, so the slave's offset view, generation and
/// fences are the master's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_the_master_reaches_the_slaves_view_with_its_generation_and_fences() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (master, slave) = start_pair("SYNC_MASTER", &dirs).await;
    let producer = client(master.local_addr()).await;
    for i in 0..10 {
        let reply = send(&producer, "T", 0, format!("m{i}").as_bytes(), "a").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    common::join_group(&producer, "consumer-1", "T").await;
    assert_eq!(commit(&producer, "T", 0, 8).await.code, response::SUCCESS);
    let reply = common::reset_queue(&producer, "T", 0, 3).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let end = master.context().store.committed_end();
    let store = slave.context().store.clone();
    eventually("slave dispatch", || store.stats().dispatched_end >= end).await;
    let (m, s) = (master.context().store.clone(), store);
    let (mv, sv) = (
        m.offset_view().await.unwrap(),
        s.offset_view().await.unwrap(),
    );
    let stored = sv
        .consumer_offset("G", "T", 0)
        .expect("offset on the slave");
    assert_eq!(stored.offset, 3);
    assert_eq!(Some(stored), mv.consumer_offset("G", "T", 0));
    assert_eq!(s.offset_fences().unwrap(), m.offset_fences().unwrap());
    slave.shutdown().await.unwrap();
    master.shutdown().await.unwrap();
}

/// SYNC_MASTER below `minInSyncReplicas` refuses writes (RocketMQ's
/// IN_SYNC_REPLICAS_NOT_ENOUGH, never a success), and accepts them once a slave joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_master_below_the_minimum_refuses_writes_until_a_slave_joins() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let master = Broker::start(BrokerConfig {
        min_in_sync_replicas: 2,
        ..master_config(dirs[0].path(), "SYNC_MASTER")
    })
    .await
    .unwrap();
    let producer = client(master.local_addr()).await;
    let reply = send(&producer, "T", 0, b"early", "a").await;
    assert_eq!(reply.code, response::SYSTEM_ERROR);
    let remark = reply.remark.unwrap_or_default();
    assert!(
        remark.starts_with("in-sync replicas not enough"),
        "{remark}"
    );
    let reply = commit(&producer, "T", 0, 0).await;
    assert_ne!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let slave = Broker::start(slave_config(dirs[1].path(), 1, &master))
        .await
        .unwrap();
    let replication = master.context().replication.clone();
    eventually("the slave in sync", || {
        replication.runtime().in_sync_members == 2
    })
    .await;
    let reply = send(&producer, "T", 0, b"later", "a").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // The end of the acknowledged record itself: the master's log end may already hold a
    // later record of its own (the catalog of the auto-created topic), not yet replicated.
    let store = master.context().store.clone();
    eventually("the record dispatched on the master", || {
        store.queue_bounds("T", 0).is_some_and(|(_, max)| max == 1)
    })
    .await;
    let stored = store
        .get_messages("T", 0, 0, 1, 1 << 20, &Default::default())
        .unwrap();
    let record = &stored.messages[0];
    let end = record.phys_offset + record.bytes.len() as u64;
    assert!(slave.context().store.appended_end() >= end);
    slave.shutdown().await.unwrap();
    master.shutdown().await.unwrap();
}

/// A hand-made slave on the master's HA port: says Hello with the master's own tail (so it
/// passes the prefix check), then acknowledges only what it is told to.
struct FakeSlave {
    reader: tokio_util::codec::FramedRead<tokio::net::tcp::OwnedReadHalf, HaCodec>,
    writer: tokio_util::codec::FramedWrite<tokio::net::tcp::OwnedWriteHalf, HaCodec>,
}

impl FakeSlave {
    async fn join(master: &Broker, id: u64) -> FakeSlave {
        let store = master.context().store.clone();
        let (log_end, samples) = tokio::task::spawn_blocking(move || store.log_tail())
            .await
            .unwrap()
            .unwrap();
        let socket = tokio::net::TcpStream::connect(master.ha_addr())
            .await
            .unwrap();
        let (read, write) = socket.into_split();
        let mut fake = FakeSlave {
            reader: tokio_util::codec::FramedRead::new(read, HaCodec::default()),
            writer: tokio_util::codec::FramedWrite::new(write, HaCodec::default()),
        };
        let hello = Hello {
            version: ferromq_protocol::ha::HA_VERSION,
            cluster: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: id,
            log_end,
            epoch: 0,
            epochs: Vec::new(),
            segment_size: 1 << 20,
            samples: samples
                .iter()
                .map(|s| RecordSample {
                    offset: s.offset,
                    size: s.size,
                    crc: s.crc,
                })
                .collect(),
        };
        fake.writer.send(HaFrame::Hello(hello)).await.unwrap();
        match fake.reader.next().await {
            Some(Ok(HaFrame::Welcome(welcome))) => assert_eq!(welcome.start, log_end),
            other => panic!("no Welcome: {other:?}"),
        }
        fake.ack(log_end).await;
        fake
    }

    async fn ack(&mut self, log_end: u64) {
        self.writer.send(HaFrame::Ack { log_end }).await.unwrap();
    }
}

/// A master started with `config` holding `messages` messages on T/0 (visible), and a
/// [`FakeSlave`] in its in-sync set; with a producer connection to the master.
async fn master_with_fake_slave(
    config: BrokerConfig,
    messages: u64,
) -> (
    Broker,
    ferromq_protocol::remoting::RemotingClient,
    FakeSlave,
) {
    let master = Broker::start(config).await.unwrap();
    let producer = client(master.local_addr()).await;
    for i in 0..messages {
        let reply = send(&producer, "T", 0, format!("m{i}").as_bytes(), "a").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    let store = master.context().store.clone();
    eventually("the messages visible", || {
        store.queue_bounds("T", 0) == Some((0, messages))
    })
    .await;
    // Let the catalog record of the new topic land before the slave describes the tail.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slave = FakeSlave::join(&master, 7).await;
    let replication = master.context().replication.clone();
    eventually("the fake slave in sync", || {
        replication.runtime().in_sync_members == 2
    })
    .await;
    (master, producer, slave)
}

/// Invariant 4 under ASYNC_MASTER: a send is acknowledged after the local flush, but
/// consumers see it only once the in-sync slave holds it, or once that slave has left the
/// in-sync set for lagging `haMaxTimeSlaveNotCatchup`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_master_exposes_only_what_the_in_sync_slave_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (master, producer, mut slave) =
        master_with_fake_slave(master_config(dir.path(), "ASYNC_MASTER"), 1).await;
    let store = master.context().store.clone();
    let replication = master.context().replication.clone();
    let held_at = replication.watermark();
    let joined = Instant::now();
    let reply = send(&producer, "T", 0, b"not replicated", "a").await;
    assert_eq!(
        reply.code,
        response::SUCCESS,
        "ASYNC_MASTER acknowledges locally"
    );
    let reader = client(master.local_addr()).await;
    let pulled = reader
        .invoke(common::pull_command("T", 0, 1, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        pulled.code,
        response::PULL_NOT_FOUND,
        "nothing past the watermark"
    );
    assert_eq!(store.queue_bounds("T", 0), Some((0, 1)));
    assert_eq!(replication.watermark(), held_at);
    // The slave keeps talking but never catches up: it leaves after the lag time, and the
    // master alone bounds the watermark again.
    let keep_talking = async {
        loop {
            slave.ack(held_at).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        _ = keep_talking => {}
        _ = eventually("the slave leaves the in-sync set", || replication.runtime().in_sync_members == 1) => {}
    }
    assert!(
        joined.elapsed() >= Duration::from_millis(900),
        "{:?}",
        joined.elapsed()
    );
    eventually("the message visible once the master is alone", || {
        store.queue_bounds("T", 0) == Some((0, 2))
    })
    .await;
    master.shutdown().await.unwrap();
}

/// Offsets always travel the synchronous path (both master roles): a commit is acknowledged
/// only once the in-sync slave holds what its verdict rests on. Also a commit that writes
/// nothing because an earlier, not yet replicated record holds its value already ("unchanged")
/// — once the local write of that record is done. `ferromq chaos` seed 2006 caught two
/// consumers' commits acknowledged in a millisecond that way while the slave was paused:
/// held by no replica, invisible to offset reads for 1.3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_resting_on_an_unreplicated_record_waits_for_the_in_sync_slave() {
    for role in ["SYNC_MASTER", "ASYNC_MASTER"] {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig {
            flush_disk_type: "ASYNC_FLUSH".into(),
            ..master_config(dir.path(), role)
        };
        let (master, producer, mut slave) = master_with_fake_slave(config, 3).await;
        let store = master.context().store.clone();

        let held = store.committed_end();
        let spawn_commit = || {
            let addr = master.local_addr();
            tokio::spawn(async move {
                let committer = client(addr).await;
                commit(&committer, "T", 0, 2).await
            })
        };
        let first = spawn_commit();
        // The slave keeps talking (a silent one is dropped from the set) but holds nothing
        // new; meanwhile the first commit's record is written locally.
        let mut second = None;
        for round in 0..8 {
            slave.ack(held).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            if round == 3 {
                second = Some(spawn_commit());
            }
        }
        let second = second.unwrap();
        assert!(
            store.committed_end() > held,
            "{role}: the record is written locally"
        );
        for (name, pending) in [("first", &first), ("second (unchanged)", &second)] {
            assert!(
                !pending.is_finished(),
                "{role}: the {name} commit was answered while no replica held its record"
            );
        }
        slave.ack(store.committed_end()).await;
        for pending in [first, second] {
            let reply = tokio::time::timeout(Duration::from_secs(5), pending)
                .await
                .expect("the commit completes once the slave holds it")
                .unwrap();
            assert_eq!(reply.code, response::SUCCESS, "{role}: {:?}", reply.remark);
        }
        let read = common::query(&producer, "T", 0).await;
        assert_eq!(read.code, response::SUCCESS, "{role}: {:?}", read.remark);
        let header = read
            .decode_header::<ferromq_protocol::remoting::headers::offset::QueryConsumerOffsetResponseHeader>()
            .unwrap();
        assert_eq!(header.offset, 2, "{role}: readable once acknowledged");
        master.shutdown().await.unwrap();
    }
}

/// R7: a slave behind a consumer's committed offset answers "not found" at that offset,
/// never an offset correction that would move the consumer back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_slave_never_corrects_a_consumer_backwards() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (master, slave) = start_pair("ASYNC_MASTER", &dirs).await;
    let producer = client(master.local_addr()).await;
    for i in 0..5 {
        send(&producer, "T", 0, format!("m{i}").as_bytes(), "a").await;
    }
    let end = master.context().store.committed_end();
    let slave_store = slave.context().store.clone();
    eventually("slave dispatch", || {
        slave_store.stats().dispatched_end >= end
    })
    .await;
    drop(slave_store);
    slave.shutdown().await.unwrap();
    for i in 5..10 {
        send(&producer, "T", 0, format!("m{i}").as_bytes(), "a").await;
    }
    // The slave comes back pointed at nowhere: it stays behind at 5 messages.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = dead.local_addr().unwrap();
    drop(dead);
    let slave = Broker::start(BrokerConfig {
        ha_master_address: Some(nowhere.to_string()),
        ..slave_config(dirs[1].path(), 1, &master)
    })
    .await
    .unwrap();
    let reader = client(slave.local_addr()).await;
    eventually("the slave knows the topic", || {
        slave.context().topics.get("T").is_some()
    })
    .await;
    let reply = reader
        .invoke(common::pull_command("T", 0, 9, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::PULL_NOT_FOUND, "{:?}", reply.remark);
    let header: ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader =
        reply.decode_header().unwrap();
    assert_eq!(header.next_begin_offset, 9, "no correction backwards");
    assert_eq!(header.max_offset, 5);
    slave.shutdown().await.unwrap();
    master.shutdown().await.unwrap();
}

/// Two masters with one `brokerName`: the name server refuses the second registration and
/// that broker does not start, with an error naming the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_master_of_a_broker_name_does_not_start() {
    let namesrv = ferromq_namesrv::NameServer::bind(ferromq_namesrv::NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    })
    .await
    .unwrap();
    let namesrv_addr = namesrv.local_addr().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(namesrv.run(async {
        let _ = stopped.await;
    }));
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let with_namesrv = |dir: &std::path::Path| BrokerConfig {
        namesrv_addr: namesrv_addr.clone(),
        ..master_config(dir, "ASYNC_MASTER")
    };
    let first = Broker::start(with_namesrv(dirs[0].path())).await.unwrap();
    let second = Broker::start(with_namesrv(dirs[1].path())).await;
    let error = second
        .err()
        .expect("the second master is refused")
        .to_string();
    assert!(error.starts_with("brokerName, brokerId:"), "{error}");
    assert!(error.contains("already has a live master"), "{error}");
    first.shutdown().await.unwrap();
    let _ = stop.send(());
    serving.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_publishes_of_one_catalog_change_append_one_record() {
    use ferromq_broker::replication::catalog_log::CATALOG_TOPIC;
    let dir = tempfile::tempdir().unwrap();
    let master = Broker::start(master_config(dir.path(), "ASYNC_MASTER"))
        .await
        .unwrap();
    let ctx = master.context();
    ferromq_broker::core::catalog::published(ctx)
        .await
        .expect("the start catalog acknowledged");
    let store = ctx.store.clone();
    let records = || {
        store
            .queue_bounds(CATALOG_TOPIC, 0)
            .map_or(0, |(_, max)| max)
    };
    eventually("the start catalog dispatched", || records() >= 1).await;
    let before = records();
    // One change; the publisher loop wakes on it while an admin reply and two more callers
    // publish at the same time, as an admin change racing the loop does.
    let fresh = ferromq_protocol::remoting::body::topic::TopicConfig::new("Fresh");
    assert!(ctx.topics.upsert(fresh).unwrap());
    let published = ferromq_broker::core::catalog::published;
    let (a, b, c) = tokio::join!(published(ctx), published(ctx), published(ctx));
    for result in [a, b, c] {
        result.expect("the change acknowledged");
    }
    eventually("the change's record dispatched", || records() > before).await;
    // Give the publisher loop several polls to append a duplicate, if it were to.
    tokio::time::sleep(ferromq_broker::replication::catalog_log::CATALOG_POLL * 4).await;
    assert_eq!(records(), before + 1, "one record for one catalog change");
}
