//! A damaged record in the middle of the log, as consumers and administrators meet it: a pull
//! returns the good records before it, then MESSAGE_DAMAGED naming its offsets (never
//! SYSTEM_ERROR for the whole batch, never a silent skip); QUARANTINE_LIST lists it; and
//! SKIP_DAMAGED_MESSAGE moves a group past it as a recorded reset, refused for a record that
//! is not damaged. The same holds for zero-copy pulls (`transferMsgByHeap=false`) whose
//! small, scattered records are read and verified instead of sent with `sendfile`.

mod common;

use std::path::Path;

use ferromq_broker::codes;
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::QueryConsumerOffsetResponseHeader;
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;
use ferromq_protocol::remoting::{ExtFields, RemotingCommand};

use ferromq_broker::observability::transfer::Fallback;
use ferromq_broker::{Broker, BrokerConfig};

use common::{bodies, broker, client, pull_command, query, send, TIMEOUT};

fn body(i: usize) -> Vec<u8> {
    format!("damage-test message {i:03} {}", "x".repeat(200)).into_bytes()
}

/// Flips one byte inside message `i`'s body in the CommitLog files.
fn damage_message(root: &Path, i: usize) {
    let dir = root.join("commitlog");
    let needle = body(i);
    for item in std::fs::read_dir(&dir).expect("list commitlog") {
        let path = item.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("read segment");
        if let Some(at) = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
        {
            bytes[at + 30] ^= 0x20;
            std::fs::write(&path, bytes).expect("write segment");
            return;
        }
    }
    panic!("message {i} not found in {}", dir.display());
}

/// A queue id and the body of its `i`th message.
type QueueBodies = (i32, fn(usize) -> Vec<u8>);

/// Sends `queues`' bodies for i in 0..10 (queue by queue for each i, so several queues'
/// records interleave in the log), stops the broker cleanly, and damages message 4 of queue 0.
async fn fill_and_damage(dir: &Path, queues: &[QueueBodies]) {
    {
        let broker = broker(dir, true).await;
        let producer = client(broker.local_addr()).await;
        for i in 0..10 {
            for (queue, body_of) in queues {
                let reply = send(&producer, "T", *queue, &body_of(i), "a").await;
                assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
            }
        }
        broker.shutdown().await.expect("clean stop");
    }
    damage_message(dir, 4);
}

/// The batch covering the damage returns the four good records before it; the next pulls
/// name the damage, and keep naming it: nothing is skipped silently.
async fn pulls_stop_at_the_damage(consumer: &RemotingClient) {
    let reply = consumer
        .invoke(pull_command("T", 0, 0, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(bodies(&reply), (0..4).map(body).collect::<Vec<_>>());
    let header: PullMessageResponseHeader = reply.decode_header().unwrap();
    assert_eq!(header.next_begin_offset, 4);
    for _ in 0..2 {
        let reply = consumer
            .invoke(pull_command("T", 0, 4, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, codes::MESSAGE_DAMAGED, "{:?}", reply.remark);
        let remark = reply.remark.clone().unwrap_or_default();
        assert!(remark.contains("queue offset 4 of T/0"), "{remark}");
        assert!(remark.contains("CommitLog offset"), "{remark}");
    }
}

fn skip_request(queue_offset: u64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("group", "G");
    ext.insert("topic", "T");
    ext.insert("queueId", "0");
    ext.insert("queueOffset", queue_offset.to_string());
    RemotingCommand::new_request(codes::SKIP_DAMAGED_MESSAGE, ext)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_stops_at_a_damaged_record_until_an_admin_skips_it() {
    let dir = tempfile::tempdir().unwrap();
    fill_and_damage(dir.path(), &[(0, body)]).await;

    let broker = broker(dir.path(), true).await;
    let consumer = client(broker.local_addr()).await;
    pulls_stop_at_the_damage(&consumer).await;
    // A consumer whose filter matches the record's indexed tag meets it too; one whose
    // filter never matched it is not stopped by it.
    let reply = consumer
        .invoke(pull_command("T", 0, 4, 0, "a"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, codes::MESSAGE_DAMAGED, "{:?}", reply.remark);
    let reply = consumer
        .invoke(pull_command("T", 0, 4, 0, "b"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        reply.code,
        response::PULL_RETRY_IMMEDIATELY,
        "{:?}",
        reply.remark
    );

    let list = consumer
        .invoke(
            RemotingCommand::new_request(codes::QUARANTINE_LIST, ExtFields::new()),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(list.code, response::SUCCESS);
    let listed: serde_json::Value = serde_json::from_slice(list.body.as_deref().unwrap()).unwrap();
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["ranges"][0]["kind"], "damaged", "{listed}");
    let damaged_phys = listed["ranges"][0]["physOffset"].as_u64().unwrap();

    // A good record cannot be skipped this way, nor a missing one.
    for offset in [5, 99] {
        let refused = consumer
            .invoke(skip_request(offset), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            refused.code,
            response::INVALID_PARAMETER,
            "{:?}",
            refused.remark
        );
    }
    assert_eq!(
        query(&consumer, "T", 0).await.code,
        response::QUERY_NOT_FOUND
    );

    let skipped = consumer.invoke(skip_request(4), TIMEOUT).await.unwrap();
    assert_eq!(skipped.code, response::SUCCESS, "{:?}", skipped.remark);
    assert_eq!(
        skipped.ext_fields.get("physOffset").map(|v| v.as_str()),
        Some(damaged_phys.to_string().as_str())
    );
    let stored = query(&consumer, "T", 0).await;
    assert_eq!(stored.code, response::SUCCESS);
    let stored: QueryConsumerOffsetResponseHeader = stored.decode_header().unwrap();
    assert_eq!(
        stored.offset, 5,
        "the group moved past the damaged record only"
    );

    // The move is recorded: offsetHistory shows a reset by the skip.
    let mut ext = ExtFields::new();
    ext.insert("group", "G");
    ext.insert("topic", "T");
    let history = consumer
        .invoke(
            RemotingCommand::new_request(codes::OFFSET_HISTORY, ext),
            TIMEOUT,
        )
        .await
        .unwrap();
    let events: serde_json::Value =
        serde_json::from_slice(history.body.as_deref().unwrap()).unwrap();
    let last = events.as_array().and_then(|e| e.last()).cloned().unwrap();
    assert_eq!(last["kind"], "reset", "{events}");
    assert_eq!(last["clientId"], "admin-skip-damaged", "{events}");
    assert_eq!(last["offset"], 5, "{events}");

    let reply = consumer
        .invoke(pull_command("T", 0, 5, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(bodies(&reply), (5..10).map(body).collect::<Vec<_>>());

    let metrics = broker.context().metrics.render(broker.context());
    assert!(
        metrics.contains("ferromq_damaged_reads_total 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferromq_quarantined_ranges 1"),
        "{metrics}"
    );
    broker.shutdown().await.expect("clean stop");
}

/// Message `i` of queue 1, told apart from queue 0's.
fn other_body(i: usize) -> Vec<u8> {
    format!("other queue message {i:03} {}", "y".repeat(180)).into_bytes()
}

/// A zero-copy pull of small records of a queue whose records lie between another queue's is
/// read and verified instead of sent with `sendfile` (one call per record would cost more):
/// a damaged record there is met as on the copying path — the good records before it, then
/// MESSAGE_DAMAGED, quarantined and counted — never SYSTEM_ERROR for the whole batch, nor a
/// record with a bad CRC sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_copy_pull_of_scattered_small_records_stops_at_a_damaged_one_too() {
    let dir = tempfile::tempdir().unwrap();
    fill_and_damage(dir.path(), &[(0, body), (1, other_body)]).await;

    let config = BrokerConfig {
        transfer_msg_by_heap: false,
        ..common::broker_config(dir.path(), true)
    };
    let broker = Broker::start(config).await.expect("broker starts");
    let consumer = client(broker.local_addr()).await;
    pulls_stop_at_the_damage(&consumer).await;
    // The other queue's records are whole and still served.
    let reply = consumer
        .invoke(pull_command("T", 1, 0, 0, "*"), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(bodies(&reply), (0..10).map(other_body).collect::<Vec<_>>());

    let transfer = &broker.context().metrics.transfer;
    assert_eq!(transfer.replies(true), 0, "nothing went with sendfile");
    assert_eq!(transfer.fallbacks(Fallback::SmallRecords), 2);
    let quarantined = broker.context().store.quarantined();
    assert_eq!(quarantined.ranges.len(), 1, "{quarantined:?}");
    let metrics = broker.context().metrics.render(broker.context());
    assert!(
        metrics.contains("ferromq_damaged_reads_total 2"),
        "{metrics}"
    );
    broker.shutdown().await.expect("clean stop");
}
