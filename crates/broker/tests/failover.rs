//! Failover mechanics in process: a slave promoted to a new epoch, the old master demoted to
//! follow it, and the truncating handshake that cuts the old master's divergent suffix —
//! log, ConsumeQueue and offset view together (R2, R4, R5; invariants 1 and 6).

mod common;

use std::time::{Duration, Instant};

use ferromq_broker::replication::BrokerRole;
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::controller::BrokerEpochCache;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::{EpochEntry, MessageStore};

use common::{broker_config, client, commit, send};

fn config(dir: &std::path::Path, role: &str, id: u64, master: Option<String>) -> BrokerConfig {
    BrokerConfig {
        broker_role: role.into(),
        broker_id: id,
        ha_master_address: master,
        ha_send_heartbeat_interval: 100,
        ha_max_time_slave_not_catchup: 1_000,
        sync_flush_timeout: 3_000,
        ..broker_config(dir, true)
    }
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The whole committed log of a store, read through the replication path.
fn log_bytes(store: &MessageStore) -> Vec<u8> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(chunk) = store.replication_chunk(from, 1 << 20).unwrap() {
        // Segment tails (end-of-segment markers) are part of the log: kept as read.
        out.extend_from_slice(&chunk.bytes);
        from = chunk.next;
    }
    out
}

/// The message bodies of T/`queue` from 0.
fn bodies(store: &MessageStore, queue: u32) -> Vec<Vec<u8>> {
    let got = store
        .get_messages("T", queue, 0, 1024, 16 << 20, &Default::default())
        .unwrap();
    got.messages
        .iter()
        .map(|m| {
            let view = ferromq_protocol::RecordView::parse(&m.bytes).unwrap();
            view.body.to_vec()
        })
        .collect()
}

async fn send_n(broker: &Broker, tag: &str, range: std::ops::Range<u32>) {
    let producer = client(broker.local_addr()).await;
    for i in range {
        let reply = send(&producer, "T", 0, format!("{tag}-{i}").as_bytes(), "a").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
}

async fn commit_at(broker: &Broker, offset: i64) {
    let c = client(broker.local_addr()).await;
    let reply = commit(&c, "T", 0, offset).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// R2: A master (epoch 1) with slave B; A writes messages and a commit B does not get; B is
/// promoted (epoch 2) and takes new messages and a commit; A is demoted to follow B. A cuts
/// its divergent suffix and ends byte-identical to B, with B's offset view: it never serves
/// the deposed commit, and the queue offsets of its cut records now hold B's messages (R5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_a_returning_master_truncates_to_the_new_masters_log_and_offsets() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Broker::start(config(dir_a.path(), "ASYNC_MASTER", 0, None))
        .await
        .unwrap();
    let ra = a.context().replication.clone();
    // A master writes its catalog at start: epoch 1 starts after it (its log is epoch 0
    // before).
    let epoch_one = ra.promote(1, BrokerRole::AsyncMaster).unwrap();
    assert!(epoch_one <= a.context().store.committed_end());
    assert_eq!(ra.epoch(), 1);
    let b = Broker::start(config(
        dir_b.path(),
        "SLAVE",
        1,
        Some(a.ha_addr().to_string()),
    ))
    .await
    .unwrap();
    eventually("B in sync", || ra.runtime().in_sync_members == 2).await;

    // The shared history: 20 messages, commit 10; B holds it all.
    send_n(&a, "shared", 0..20).await;
    commit_at(&a, 10).await;
    let shared_end = a.context().store.committed_end();
    let store_b = b.context().store.clone();
    eventually("B holds the shared history", || {
        store_b.locally_acknowledgeable_end() >= shared_end
    })
    .await;
    assert_eq!(
        store_b.epochs(),
        vec![EpochEntry {
            epoch: 1,
            start: epoch_one
        }]
    );
    drop(store_b);
    b.shutdown().await.unwrap();

    // A's divergent suffix: 10 messages (T/0 offsets 20..30) and commit 25, B never sees.
    send_n(&a, "deposed", 20..30).await;
    commit_at(&a, 25).await;
    let a_end = a.context().store.committed_end();
    assert!(a_end > shared_end);

    // B comes back alone, is promoted to epoch 2 and takes 5 messages and commit 22.
    let b = Broker::start(config(dir_b.path(), "SLAVE", 1, None))
        .await
        .unwrap();
    let rb = b.context().replication.clone();
    let start = rb.promote(2, BrokerRole::AsyncMaster).unwrap();
    assert_eq!(start, shared_end, "epoch 2 starts at B's log end");
    assert_eq!(rb.role(), BrokerRole::AsyncMaster);
    send_n(&b, "new", 20..25).await;
    commit_at(&b, 22).await;
    let store_b = b.context().store.clone();

    // A is demoted to follow B: the handshake cuts A's suffix, then A streams B's.
    ra.set_broker_id(2);
    ra.demote(b.ha_addr(), 2);
    let store_a = a.context().store.clone();
    let refused = client(a.local_addr()).await;
    let reply = send(&refused, "T", 0, b"late", "a").await;
    assert_eq!(reply.code, ferromq_broker::codes::NOT_MASTER);
    eventually("A caught up with B", || {
        store_a.committed_end() == store_b.committed_end()
            && store_a.stats().bytes_cut >= a_end - shared_end
    })
    .await;
    assert_eq!(
        log_bytes(&store_a),
        log_bytes(&store_b),
        "A's log is B's, byte for byte"
    );
    assert_eq!(
        store_a.epochs(),
        vec![
            EpochEntry {
                epoch: 1,
                start: epoch_one
            },
            EpochEntry {
                epoch: 2,
                start: shared_end
            }
        ]
    );
    assert_eq!(ra.epoch(), 2);
    let end = store_b.committed_end();
    eventually("A dispatched B's log", || {
        store_a.stats().dispatched_end >= end
    })
    .await;
    assert_eq!(store_a.queue_bounds("T", 0), store_b.queue_bounds("T", 0));
    assert_eq!(store_a.queue_bounds("T", 0).map(|b| b.1), Some(25));
    // R5: offsets 20..25 hold B's messages on both; the deposed ones are gone.
    let (on_a, on_b) = (bodies(&store_a, 0), bodies(&store_b, 0));
    assert_eq!(on_a, on_b);
    assert_eq!(on_a[20], b"new-20".to_vec());
    assert!(on_a.iter().all(|body| !body.starts_with(b"deposed")));
    // R2/R4: A's offset view is B's: commit 22, never the deposed 25.
    let view_a = store_a.offset_view().await.unwrap();
    let view_b = store_b.offset_view().await.unwrap();
    assert_eq!(
        view_a.consumer_offset("G", "T", 0).map(|o| o.offset),
        Some(22)
    );
    assert_eq!(
        view_a.consumer_offset("G", "T", 0),
        view_b.consumer_offset("G", "T", 0)
    );
    // GET_BROKER_EPOCH_CACHE (1007) and haStatus show the epochs.
    let c = client(a.local_addr()).await;
    let reply = c
        .invoke(
            RemotingCommand::new_request(request::GET_BROKER_EPOCH_CACHE, Default::default()),
            common::TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let cache: BrokerEpochCache = serde_json::from_slice(reply.body.as_deref().unwrap()).unwrap();
    assert_eq!(cache.broker_id, 2);
    assert_eq!(cache.max_offset, end);
    let entries: Vec<_> = cache
        .epochs
        .iter()
        .map(|e| (e.epoch, e.start_offset, e.end_offset))
        .collect();
    assert_eq!(
        entries,
        vec![(1, epoch_one, shared_end), (2, shared_end, end)]
    );
    let runtime = ra.runtime();
    assert_eq!((runtime.epoch, runtime.epoch_entries), (2, 2));
    let info = ferromq_broker::replication::status::ha_runtime_info(&runtime, Instant::now());
    assert_eq!(info.master_epoch, Some(2));
    assert_eq!(info.epoch_entries, Some(2));
    // A follows on: B's next write reaches it.
    send_n(&b, "after", 25..26).await;
    let end = store_b.committed_end();
    eventually("A follows B", || store_a.committed_end() == end).await;
    assert_eq!(log_bytes(&store_a), log_bytes(&store_b));
    drop((store_a, store_b, ra, rb));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A promoted slave appends nothing more from its old master, and promotion refuses an
/// epoch that is not new; a demoted broker refuses writes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_fences_the_old_stream_and_refuses_stale_epochs() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Broker::start(config(dir_a.path(), "ASYNC_MASTER", 0, None))
        .await
        .unwrap();
    let ra = a.context().replication.clone();
    ra.promote(3, BrokerRole::AsyncMaster).unwrap();
    assert!(ra.promote(3, BrokerRole::AsyncMaster).is_err(), "not new");
    assert!(
        ra.promote(4, BrokerRole::Slave).is_err(),
        "not a master role"
    );
    let b = Broker::start(config(
        dir_b.path(),
        "SLAVE",
        1,
        Some(a.ha_addr().to_string()),
    ))
    .await
    .unwrap();
    eventually("B in sync", || ra.runtime().in_sync_members == 2).await;
    send_n(&a, "x", 0..5).await;
    let rb = b.context().replication.clone();
    let store_b = b.context().store.clone();
    let end = a.context().store.committed_end();
    eventually("B holds A's log", || store_b.committed_end() >= end).await;
    let start = rb.promote(4, BrokerRole::SyncMaster).unwrap();
    assert_eq!(rb.role(), BrokerRole::SyncMaster);
    // A keeps writing (nobody demoted it in this test): B takes none of it.
    send_n(&a, "y", 5..10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store_b.committed_end() >= start);
    let on_b = bodies(&store_b, 0);
    assert_eq!(on_b.len(), 5, "B holds A's first 5 messages only");
    assert!(on_b.iter().all(|body| body.starts_with(b"x")));
    assert_eq!(
        store_b.epochs().last().map(|e| (e.epoch, e.start)),
        Some((4, start))
    );
    assert_eq!(rb.epoch(), 4);
    drop((ra, rb, store_b));
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

/// gRPC receive / ack state across a failover (issue 17, item 2): a SYNC_MASTER hands out ten
/// messages and records six acks; its slave, promoted, rebuilds the pop table from the
/// replicated records: it accepts an ack of a delivery the old master made, never hands out an
/// acked message, and redelivers the rest after their invisibility with the attempt counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_state_survives_a_failover_to_the_slave() {
    use common::grpc::{grpc_client, message, resource, send as grpc_send, with_client_id};
    use ferromq_protocol::grpc::{self as pb, Code};

    async fn receive_all(
        grpc: &mut ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient<
            tonic::transport::Channel,
        >,
        want: usize,
        invisible_s: i64,
    ) -> Vec<(Vec<u8>, String, i32)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < want && Instant::now() < deadline {
            let request = pb::ReceiveMessageRequest {
                group: resource("G"),
                message_queue: Some(pb::MessageQueue {
                    topic: resource("PopF"),
                    id: -1,
                    ..Default::default()
                }),
                batch_size: 32,
                invisible_duration: Some(prost_types::Duration {
                    seconds: invisible_s,
                    nanos: 0,
                }),
                long_polling_timeout: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                ..Default::default()
            };
            let mut stream = grpc
                .receive_message(with_client_id(request))
                .await
                .unwrap()
                .into_inner();
            while let Some(item) = stream.message().await.unwrap() {
                if let Some(pb::receive_message_response::Content::Message(m)) = item.content {
                    let system = m.system_properties.unwrap();
                    got.push((
                        m.body,
                        system.receipt_handle.unwrap(),
                        system.delivery_attempt.unwrap(),
                    ));
                }
            }
        }
        got
    }
    async fn ack(
        grpc: &mut ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient<
            tonic::transport::Channel,
        >,
        handles: &[String],
    ) -> i32 {
        grpc.ack_message(with_client_id(pb::AckMessageRequest {
            group: resource("G"),
            topic: resource("PopF"),
            entries: handles
                .iter()
                .map(|h| pb::AckMessageEntry {
                    message_id: String::new(),
                    receipt_handle: h.clone(),
                    lite_topic: None,
                })
                .collect(),
        }))
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
        .code
    }

    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Broker::start(config(dir_a.path(), "SYNC_MASTER", 0, None))
        .await
        .unwrap();
    let ra = a.context().replication.clone();
    ra.promote(1, BrokerRole::SyncMaster).unwrap();
    let b = Broker::start(config(
        dir_b.path(),
        "SLAVE",
        1,
        Some(a.ha_addr().to_string()),
    ))
    .await
    .unwrap();
    eventually("B in sync", || ra.runtime().in_sync_members == 2).await;
    let topic = ferromq_broker::catalog::topics::topic_with_queues("PopF", 2);
    a.context().topics.upsert(topic.clone()).unwrap();

    let mut grpc_a = grpc_client(&a).await;
    let messages = (0..10)
        .map(|i| {
            message(
                "PopF",
                &format!("F{i}"),
                format!("f{i}").as_bytes(),
                Default::default(),
            )
        })
        .collect();
    assert_eq!(
        grpc_send(&mut grpc_a, messages).await.status.unwrap().code,
        Code::Ok as i32
    );
    let got = receive_all(&mut grpc_a, 10, 3).await;
    assert_eq!(got.len(), 10);
    let handles: Vec<String> = got.iter().map(|g| g.1.clone()).collect();
    assert_eq!(ack(&mut grpc_a, &handles[..6]).await, Code::Ok as i32);
    // SYNC_MASTER: every answered receive and ack is on B already.
    drop(grpc_a);
    a.shutdown().await.unwrap();

    let rb = b.context().replication.clone();
    rb.promote(2, BrokerRole::AsyncMaster).unwrap();
    b.context().topics.upsert(topic).unwrap();
    let mut grpc_b = grpc_client(&b).await;
    // A delivery the old master made is still the current one: its ack is accepted.
    assert_eq!(ack(&mut grpc_b, &handles[6..7]).await, Code::Ok as i32);
    assert_eq!(
        ack(&mut grpc_b, &handles[..1]).await,
        Code::InvalidReceiptHandle as i32,
        "acked before the failover"
    );
    let again = receive_all(&mut grpc_b, 3, 30).await;
    let mut bodies: Vec<Vec<u8>> = again.iter().map(|g| g.0.clone()).collect();
    bodies.sort();
    let mut expected: Vec<Vec<u8>> = got[7..].iter().map(|g| g.0.clone()).collect();
    expected.sort();
    assert_eq!(bodies, expected, "exactly the three never acked");
    assert!(
        again.iter().all(|g| g.2 == 2),
        "second attempt after the failover"
    );
    b.shutdown().await.unwrap();
}
