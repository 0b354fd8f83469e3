//! Offset pitfall C8 on the wire: a consumer's correction after OFFSET_ILLEGAL.
//!
//! In RocketMQ a consumer whose offset fell out of its queue (trimmed by retention, or cut by
//! a truncating failover) adopts the broker's suggested offset and commits it; results still
//! in flight from before then commit their old offsets over it (#7634). ferromq's broker
//! refuses backward commits while the group is online, so a plain commit cannot carry a
//! correction; the client marks it instead with the ext field `ferromqCorrection=true`.
//!
//! Steps and assertions:
//! 1. A correction the queue's state does not justify (the stored offset is healthy, or the
//!    proposal lies outside the queue) is refused with its own code and changes nothing.
//! 2. After retention trims the queue past the stored offset, a correction to the broker's
//!    suggestion lands as a correction record with a new generation (reply ext
//!    `ferromqGeneration`), and every online consumer's later stale commit is refused as
//!    stale until it pulls the queue (a pull elsewhere is moved to the correction).

mod common;

use std::time::Duration;

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::offsets::OffsetKind;

const TIMEOUT: Duration = Duration::from_secs(5);
const TOPIC: &str = "CT";

async fn broker(dir: &std::path::Path) -> Broker {
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        auto_create_topic_enable: true,
        default_topic_queue_nums: 1,
        // Small segments and no time-based retention grace, so a test can trim the queue.
        mapped_file_size_commit_log: 64 * 1024,
        max_message_size: 16 * 1024,
        file_reserved_time: 0,
        ..BrokerConfig::default()
    };
    Broker::start(config).await.expect("broker starts")
}

async fn client(broker: &Broker) -> RemotingClient {
    RemotingClient::connect(broker.local_addr(), TIMEOUT)
        .await
        .expect("connect")
}

async fn heartbeat(client: &RemotingClient, id: &str) {
    let body = format!(
        r#"{{"clientID":"{id}","producerDataSet":[],"consumerDataSet":[{{"groupName":"G","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{TOPIC}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":0}}],"unitMode":false}}]}}"#
    );
    let reply = client
        .invoke(
            RemotingCommand::new_request(request::HEART_BEAT, Default::default())
                .with_body(body.into_bytes()),
            TIMEOUT,
        )
        .await
        .expect("heartbeat reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

async fn send(client: &RemotingClient, count: usize) {
    let body = vec![b'x'; 1024];
    for _ in 0..count {
        let header = SendMessageRequestHeaderV2 {
            a: "PG".into(),
            b: TOPIC.into(),
            c: "TBW102".into(),
            d: 1,
            e: 0,
            g: 1,
            ..Default::default()
        };
        let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
            .with_body(body.clone());
        let reply = client.invoke(command, TIMEOUT).await.expect("send reply");
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
}

/// UPDATE_CONSUMER_OFFSET of queue 0, marked as a correction when `correction`.
async fn commit(client: &RemotingClient, offset: u64, correction: bool) -> RemotingCommand {
    let command = common::commit_request(TOPIC, 0, offset as i64, correction);
    client.invoke(command, TIMEOUT).await.expect("commit reply")
}

/// PULL_MESSAGE of queue 0 at `offset`: (code, nextBeginOffset).
async fn pull(client: &RemotingClient, offset: u64) -> (i32, i64) {
    let header = PullMessageRequestHeader {
        consumer_group: "G".into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset: offset as i64,
        max_msg_nums: 4,
        sys_flag: 0x4,
        subscription: Some("*".into()),
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
            TIMEOUT,
        )
        .await
        .expect("pull reply");
    let next = reply
        .decode_header::<PullMessageResponseHeader>()
        .expect("pull header")
        .next_begin_offset;
    (reply.code, next)
}

fn stored(broker: &Broker) -> (u64, u64) {
    let s = broker
        .context()
        .store
        .consumer_offset("G", TOPIC, 0)
        .expect("offset view")
        .expect("an offset is stored");
    (s.offset, s.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unjustified_corrections_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let a = client(&broker).await;
    heartbeat(&a, "127.0.0.1@a").await;
    send(&a, 10).await;
    assert_eq!(commit(&a, 5, false).await.code, response::SUCCESS);
    let before = stored(&broker);
    // The stored offset 5 lies inside the queue [0, 10]: nothing justifies moving it.
    let backward = commit(&a, 3, true).await;
    assert_eq!(
        backward.code,
        codes::COMMIT_REGRESSION,
        "{:?}",
        backward.remark
    );
    assert!(backward.remark.unwrap().contains("not justified"));
    let forward = commit(&a, 8, true).await;
    assert_eq!(forward.code, codes::COMMIT_REJECTED, "{:?}", forward.remark);
    let past = commit(&a, 11, true).await;
    assert_eq!(past.code, codes::COMMIT_PAST_MAX, "{:?}", past.remark);
    assert_eq!(stored(&broker), before, "offset and generation unchanged");
    assert!(!backward.ext_fields.contains_key("ferromqGeneration"));
    // A correction to where the offset already is, or of a queue with no offset, is an
    // ordinary commit: accepted, no new generation.
    assert_eq!(commit(&a, 5, true).await.code, response::SUCCESS);
    assert_eq!(stored(&broker), before);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn justified_correction_starts_a_generation_and_fences_stale_commits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let a = client(&broker).await;
    let b = client(&broker).await;
    heartbeat(&a, "127.0.0.1@a").await;
    heartbeat(&b, "127.0.0.1@b").await;
    send(&a, 4).await;
    assert_eq!(commit(&a, 2, false).await.code, response::SUCCESS);
    // Fill several 64 KiB segments and let retention trim the queue past offset 2.
    send(&a, 200).await;
    // (The broker's own retention may have run first; either way the queue is trimmed.)
    broker
        .context()
        .store
        .delete_expired_segments()
        .expect("retention runs");
    let (min, max) = broker.context().store.queue_bounds(TOPIC, 0).unwrap();
    assert!(min > 2 && max == 204, "queue is [{min}, {max}]");
    let (old_offset, old_generation) = stored(&broker);
    assert_eq!(old_offset, 2);

    // The consumer at 2 is told its offset is illegal and where to go.
    assert_eq!(pull(&a, 2).await, (response::PULL_OFFSET_MOVED, min as i64));
    // Only the queue's range is acceptable.
    let below = commit(&a, min - 1, true).await;
    assert_eq!(below.code, codes::COMMIT_REJECTED, "{:?}", below.remark);
    assert_eq!(stored(&broker), (2, old_generation));

    let corrected = commit(&a, min, true).await;
    assert_eq!(corrected.code, response::SUCCESS, "{:?}", corrected.remark);
    let generation = old_generation + 1;
    assert_eq!(
        corrected
            .ext_fields
            .get("ferromqGeneration")
            .map(|v| v.as_str()),
        Some(generation.to_string().as_str())
    );
    assert_eq!(stored(&broker), (min, generation));
    let history = broker
        .context()
        .store
        .offset_history("G", TOPIC, Some(0))
        .unwrap();
    let last = history.last().expect("the correction is in the log");
    assert_eq!(
        (last.kind, last.offset, last.generation),
        (OffsetKind::Correction, min, Some(generation))
    );

    // In-flight results of the old generation, from the corrector or any other online
    // member, are stale until that connection pulls the queue.
    let stale_a = commit(&a, min + 5, false).await;
    assert_eq!(
        stale_a.code,
        codes::COMMIT_STALE_GENERATION,
        "{:?}",
        stale_a.remark
    );
    let stale_b = commit(&b, min + 7, false).await;
    assert_eq!(
        stale_b.code,
        codes::COMMIT_STALE_GENERATION,
        "{:?}",
        stale_b.remark
    );
    assert_eq!(stored(&broker), (min, generation), "the correction stands");

    // The corrector pulls at the corrected offset: it follows, so it may commit again.
    assert_eq!(pull(&a, min).await.0, response::SUCCESS);
    assert_eq!(commit(&a, min + 1, false).await.code, response::SUCCESS);
    // The other member pulls where it was: moved to the group's offset (the correction and
    // the progress made since), then free.
    assert_eq!(
        pull(&b, 2).await,
        (response::PULL_OFFSET_MOVED, (min + 1) as i64)
    );
    assert_eq!(commit(&b, min + 2, false).await.code, response::SUCCESS);
    assert_eq!(stored(&broker), (min + 2, generation));

    // The same correction replayed later is no longer justified and cannot rewind progress.
    let replay = commit(&a, min, true).await;
    assert_eq!(replay.code, codes::COMMIT_REGRESSION, "{:?}", replay.remark);
    assert_eq!(stored(&broker), (min + 2, generation));
    broker.shutdown().await.unwrap();
}
