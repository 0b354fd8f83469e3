//! A hostile client against the broker over the remoting protocol: writes through the delay
//! scheduler, commits of the broker's own `%SCHEDULE%` group, admin changes of system topics
//! and internal groups, and the smaller edge cases (a full disk on a new group's first pull,
//! properties at the limit, `reconsumeTimes` at `i32::MAX`, negative CommitLog offsets).

mod common;
mod hostile;

use std::time::Duration;

use ferromq_broker::core::scheduler::{
    PROPERTY_DEAD_LETTER_REASON, SCHEDULE_DLQ_TOPIC, SCHEDULE_GROUP, SCHEDULE_TOPIC,
};
use ferromq_protocol::message::record::{CLIENT_PROPERTIES_LEN_MAX, PROPERTIES_LEN_MAX};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, DeleteTopicRequestHeader,
};
use ferromq_protocol::remoting::headers::client::{
    ConsumerSendMsgBackRequestHeader, ViewMessageRequestHeader,
};
use ferromq_protocol::remoting::headers::offset::{
    CloneGroupOffsetRequestHeader, ResetOffsetRequestHeader,
};
use ferromq_protocol::remoting::headers::send::SendMessageResponseHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{MessageId, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, OFFSET_TOPIC};
use hostile::*;

/// Bound of a delayed delivery (levels are 1 s; the scheduler ticks every 100 ms).
const DELIVERY_BOUND: Duration = Duration::from_secs(10);

/// `count` messages on `topic`/0.
async fn fill(client: &RemotingClient, topic: &str, count: usize) {
    for i in 0..count {
        let reply = send(client, topic, format!("m{i}").as_bytes(), &[]).await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
}

fn offset_of(broker: &ferromq_broker::Broker, group: &str, topic: &str, queue: u32) -> Option<u64> {
    broker
        .context()
        .store
        .consumer_offset(group, topic, queue)
        .expect("offset view")
        .map(|s| s.offset)
}

fn forged_bodies() -> Vec<Vec<u8>> {
    let entry = |offset| OffsetEntry {
        topic: "Orders".into(),
        queue_id: 0,
        offset,
    };
    let command = |kind, group: &str, generation, offset| OffsetCommand {
        kind,
        group: group.into(),
        client_id: "forger".into(),
        generation,
        entries: vec![entry(offset)],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    [
        command(OffsetKind::Commit, "G", None, 9),
        command(OffsetKind::Reset, "G", Some(1), 1),
        command(OffsetKind::Commit, "Forged", None, 7),
    ]
    .iter()
    .map(|c| c.encode().unwrap())
    .collect()
}

fn assert_refused(reply: &RemotingCommand, code: i32, remark_has: &str) {
    assert_eq!(reply.code, code, "{:?}", reply.remark);
    let remark = reply.remark.as_deref().unwrap_or_default();
    assert!(
        remark.contains(remark_has),
        "{remark:?} lacks {remark_has:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_offset_records_through_the_scheduler_move_no_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    fill(&c, "Orders", 10).await;
    assert_eq!(
        commit(&c, "G", "Orders", 0, 5).await.code,
        response::SUCCESS
    );

    let to_offsets = [("REAL_TOPIC", OFFSET_TOPIC), ("REAL_QID", "0")];
    let mut refused = 0;
    for body in forged_bodies() {
        for reply in [
            send(&c, SCHEDULE_TOPIC, &body, &to_offsets).await,
            send_v1(&c, SCHEDULE_TOPIC, &body, &to_offsets).await,
            send_batch(&c, SCHEDULE_TOPIC, &body, &to_offsets).await,
            send(&c, OFFSET_TOPIC, &body, &[]).await,
            send(&c, "RMQ_SYS_TRANS_HALF_TOPIC", &body, &to_offsets).await,
            send(&c, "RMQ_SYS_TRANS_OP_HALF_TOPIC", &body, &[]).await,
            send(
                &c,
                "Orders",
                &body,
                &[("DELAY", "1"), ("REAL_TOPIC", OFFSET_TOPIC)],
            )
            .await,
        ] {
            if reply.code == response::NO_PERMISSION {
                refused += 1;
                assert!(reply.remark.unwrap().contains("reserved"));
            } else {
                // The delayed send to Orders is accepted: it is delivered to Orders, whatever
                // REAL_TOPIC the client wrote.
                assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
            }
        }
    }
    assert_eq!(refused, 18);
    assert_eq!(broker.context().metrics.refused_count("reserved_topic"), 18);
    // Three delayed copies reach Orders (10 + 3), and nothing else moves.
    let store = broker.context().store.clone();
    wait_until(DELIVERY_BOUND, "the delayed sends arrive", || {
        store.queue_bounds("Orders", 0) == Some((0, 13))
    })
    .await;
    store.dispatch_caught_up(TIMEOUT).await;
    assert_eq!(offset_of(&broker, "G", "Orders", 0), Some(5));
    assert_eq!(
        store.offset_generation("G", "Orders").expect("offset view"),
        0,
        "no reset"
    );
    assert!(!store
        .groups()
        .expect("offset view")
        .iter()
        .any(|g| g == "Forged"));
    broker.shutdown().await.unwrap();
}

async fn create_topic(c: &RemotingClient, topic: &str, perm: i32) -> RemotingCommand {
    let header = CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 2,
        write_queue_nums: 2,
        perm,
        ..Default::default()
    };
    invoke(
        c,
        RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header),
    )
    .await
}

/// Writes a delayed message straight into the store, as an old broker that did not check
/// targets wrote it.
fn inject_delayed(broker: &ferromq_broker::Broker, body: &[u8], target: &str, queue: &str) {
    let props = ferromq_protocol::Properties::encode([
        ("REAL_TOPIC", target),
        ("REAL_QID", queue),
        ("DELAY", "1"),
    ]);
    broker
        .context()
        .store
        .put(&[raw_draft(SCHEDULE_TOPIC, 0, body, &props)])
        .expect("stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_topics_and_hidden_queues_are_refused_when_sent_and_when_fired() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    fill(&c, "Orders", 1).await;
    assert_eq!(
        commit(&c, "G", "Orders", 0, 1).await.code,
        response::SUCCESS
    );
    assert_eq!(create_topic(&c, "RO", 4).await.code, response::SUCCESS);

    // When sent: through the scheduler's topic, or with DELAY to a read-only topic.
    let reply = send(
        &c,
        SCHEDULE_TOPIC,
        b"x",
        &[("REAL_TOPIC", "RO"), ("REAL_QID", "0")],
    )
    .await;
    assert_refused(&reply, response::NO_PERMISSION, "reserved");
    let reply = send(
        &c,
        SCHEDULE_TOPIC,
        b"x",
        &[("REAL_TOPIC", "Orders"), ("REAL_QID", "99999")],
    )
    .await;
    assert_refused(&reply, response::NO_PERMISSION, "reserved");
    let reply = send(&c, "RO", b"x", &[("DELAY", "1")]).await;
    assert_refused(&reply, response::NO_PERMISSION, "not writable");

    // When fired: a log that already holds such messages.
    inject_delayed(&broker, b"to-read-only", "RO", "0");
    inject_delayed(&broker, b"to-hidden-queue", "Orders", "99999");
    inject_delayed(&broker, &forged_bodies()[1], OFFSET_TOPIC, "0");
    inject_delayed(&broker, b"fine", "Orders", "1");
    let ctx = broker.context().clone();
    wait_until(DELIVERY_BOUND, "three dead letters", || {
        ctx.metrics.scheduler_dead_letters() == 3
    })
    .await;
    let fine = pull_until(&c, "Orders", 1, 0, DELIVERY_BOUND).await;
    assert_eq!(RecordView::parse(&fine[0]).unwrap().body, b"fine");
    let store = &ctx.store;
    wait_until(DELIVERY_BOUND, "the scheduler moves past all four", || {
        offset_of(&broker, SCHEDULE_GROUP, SCHEDULE_TOPIC, 0) == Some(4)
    })
    .await;
    store.dispatch_caught_up(TIMEOUT).await;
    assert_eq!(
        store.queue_bounds("RO", 0),
        None,
        "the read-only topic got nothing"
    );
    assert_eq!(store.queue_bounds("Orders", 99999), None, "no hidden queue");
    assert_eq!(offset_of(&broker, "G", "Orders", 0), Some(1));
    assert_eq!(
        store.offset_generation("G", "Orders").expect("offset view"),
        0
    );
    let dead = pull_until(&c, SCHEDULE_DLQ_TOPIC, 0, 0, TIMEOUT).await;
    let reasons: Vec<String> = dead
        .iter()
        .map(|r| {
            let view = RecordView::parse(r).unwrap();
            view.properties
                .get_str(PROPERTY_DEAD_LETTER_REASON)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(reasons.len(), 3);
    assert!(reasons[0].contains("not writable"), "{}", reasons[0]);
    assert!(reasons[1].contains("queue \"99999\""), "{}", reasons[1]);
    assert!(reasons[2].contains("reserved"), "{}", reasons[2]);
    // Clients cannot write the dead-letter topic.
    let reply = send(&c, SCHEDULE_DLQ_TOPIC, b"x", &[]).await;
    assert_eq!(reply.code, response::NO_PERMISSION);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_and_overlong_targets_create_nothing_and_never_stop_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let long = "t".repeat(300);
    for target in ["../../x", long.as_str()] {
        let reply = send(
            &c,
            SCHEDULE_TOPIC,
            b"x",
            &[("REAL_TOPIC", target), ("REAL_QID", "0")],
        )
        .await;
        assert_refused(&reply, response::NO_PERMISSION, "reserved");
        let reply = send(&c, target, b"x", &[]).await;
        assert_refused(&reply, response::MESSAGE_ILLEGAL, "invalid topic name");
    }
    inject_delayed(&broker, b"p1", "../../x", "0");
    inject_delayed(&broker, b"p2", &long, "0");
    let ctx = broker.context().clone();
    wait_until(DELIVERY_BOUND, "two dead letters", || {
        ctx.metrics.scheduler_dead_letters() == 2
    })
    .await;
    wait_until(DELIVERY_BOUND, "the scheduler moves past both", || {
        offset_of(&broker, SCHEDULE_GROUP, SCHEDULE_TOPIC, 0) == Some(2)
    })
    .await;
    fill(&c, "After", 1).await;
    assert_eq!(pull_until(&c, "After", 0, 0, TIMEOUT).await.len(), 1);
    // The new topic's catalog record may still be on its way to the dispatcher.
    wait_until(DELIVERY_BOUND, "dispatch catches up", || {
        let stats = ctx.store.stats();
        stats.dispatched_end == stats.written_end
    })
    .await;
    let stats = ctx.store.stats();
    assert_eq!(stats.undispatchable_records, 0);
    // Each poison was moved once, never re-appended to the scheduler's topic.
    assert_eq!(ctx.store.queue_bounds(SCHEDULE_TOPIC, 0), Some((0, 2)));
    drop(ctx);
    broker.shutdown().await.unwrap();
    assert_eq!(entries(dir.path()), vec!["data".to_string()]);

    // The store opens again; nothing is delivered twice.
    let broker = hostile::broker(dir.path()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.context().metrics.scheduler_dead_letters(), 0);
    assert_eq!(
        broker.context().store.queue_bounds(SCHEDULE_DLQ_TOPIC, 0),
        Some((0, 2))
    );
    broker.shutdown().await.unwrap();
    assert_eq!(entries(dir.path()), vec!["data".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_commit_the_schedule_group_and_delayed_messages_still_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let reply = send(&c, "Later", b"tick", &[("DELAY", "3")]).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // What made the hostile commit land before: the scheduler's topic in the topic table.
    let reply = create_topic(&c, SCHEDULE_TOPIC, 6).await;
    assert_refused(&reply, response::NO_PERMISSION, "reserved");
    // Level 3 is queue 2 of the scheduler's topic.
    let refused = [
        commit(&c, SCHEDULE_GROUP, SCHEDULE_TOPIC, 2, 1).await,
        commit(&c, SCHEDULE_GROUP, SCHEDULE_TOPIC, 2, -1).await,
        commit(&c, "G", SCHEDULE_TOPIC, 2, 1).await,
        commit(&c, "CID_RMQ_SYS_TRANS", "Later", 0, 0).await,
        invoke(
            &c,
            pull_command(SCHEDULE_GROUP, SCHEDULE_TOPIC, 2, 0, Some(1)),
        )
        .await,
        invoke(&c, pull_command(SCHEDULE_GROUP, "Later", 0, 0, None)).await,
    ];
    for reply in &refused {
        assert_eq!(reply.code, response::NO_PERMISSION, "{:?}", reply.remark);
    }
    assert!(refused[0]
        .remark
        .as_deref()
        .unwrap()
        .contains("internal to the broker"));
    assert!(refused[2].remark.as_deref().unwrap().contains("reserved"));
    let mut correction = commit_command(SCHEDULE_GROUP, SCHEDULE_TOPIC, 2, 1);
    correction.ext_fields.insert("ferromqCorrection", "true");
    assert_eq!(invoke(&c, correction).await.code, response::NO_PERMISSION);

    let records = pull_until(&c, "Later", 0, 0, DELIVERY_BOUND).await;
    assert_eq!(RecordView::parse(&records[0]).unwrap().body, b"tick");
    wait_until(TIMEOUT, "the scheduler commits its own progress", || {
        offset_of(&broker, SCHEDULE_GROUP, SCHEDULE_TOPIC, 2) == Some(1)
    })
    .await;
    assert_eq!(broker.context().metrics.refused_count("internal_group"), 6);
    broker.shutdown().await.unwrap();
}

fn commit_command(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let header = ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_requests_cannot_move_or_delete_internal_groups_and_system_topics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    fill(&c, "Orders", 3).await;
    assert_eq!(
        commit(&c, "G", "Orders", 0, 2).await.code,
        response::SUCCESS
    );
    let reset = |group: &str, topic: &str| {
        let header = ResetOffsetRequestHeader {
            group: group.into(),
            topic: topic.into(),
            queue_id: Some(0),
            offset: Some(0),
            timestamp: 0,
            is_force: true,
        };
        RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &header)
    };
    let clone = |src: &str, dest: &str, topic: Option<&str>| {
        let header = CloneGroupOffsetRequestHeader {
            src_group: src.into(),
            dest_group: dest.into(),
            topic: topic.map(Into::into),
            offline: Some(true),
        };
        RemotingCommand::request_with_header(request::CLONE_GROUP_OFFSET, &header)
    };
    let delete_group = |group: &str| {
        let header = DeleteSubscriptionGroupRequestHeader {
            group_name: group.into(),
            clean_offset: None,
        };
        RemotingCommand::request_with_header(request::DELETE_SUBSCRIPTIONGROUP, &header)
    };
    let delete_topic = |topic: &str| {
        let header = DeleteTopicRequestHeader {
            topic: topic.into(),
        };
        RemotingCommand::request_with_header(request::DELETE_TOPIC_IN_BROKER, &header)
    };
    let update_group = RemotingCommand::new_request(
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        Default::default(),
    )
    .with_body(br#"{"groupName":"%SCHEDULE%","consumeEnable":false}"#.to_vec());
    for command in [
        reset(SCHEDULE_GROUP, SCHEDULE_TOPIC),
        reset(SCHEDULE_GROUP, "Orders"),
        reset("G", SCHEDULE_TOPIC),
        reset("G", OFFSET_TOPIC),
        clone("G", SCHEDULE_GROUP, None),
        clone(SCHEDULE_GROUP, "G2", None),
        clone("G", "G2", Some(SCHEDULE_TOPIC)),
        delete_group(SCHEDULE_GROUP),
        delete_topic(SCHEDULE_TOPIC),
        delete_topic(OFFSET_TOPIC),
        delete_topic("TBW102"),
        update_group,
    ] {
        let reply = invoke(&c, command).await;
        assert_eq!(reply.code, response::NO_PERMISSION, "{:?}", reply.remark);
    }
    for topic in [
        SCHEDULE_TOPIC,
        OFFSET_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "TBW102",
    ] {
        assert_refused(
            &create_topic(&c, topic, 6).await,
            response::NO_PERMISSION,
            topic,
        );
    }
    // Ordinary admin work still goes through.
    assert_eq!(
        invoke(&c, reset("G", "Orders")).await.code,
        response::SUCCESS
    );
    assert_eq!(
        create_topic(&c, "RMQ_SYS_TRACE_TOPIC", 6).await.code,
        response::SUCCESS
    );
    assert_eq!(offset_of(&broker, "G", "Orders", 0), Some(0));
    assert!(broker.context().topics.get("TBW102").is_some());
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_groups_first_pull_succeeds_when_the_group_table_cannot_be_saved() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    fill(&c, "Orders", 1).await;
    // The table file cannot be replaced (as on a full disk): a directory stands in its way.
    let file = data_dir(dir.path())
        .join("config")
        .join("subscriptionGroup.json");
    std::fs::create_dir_all(&file).unwrap();
    let reply = invoke(&c, pull_command("NewGroup", "Orders", 0, 0, None)).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(records(&reply).len(), 1);
    let ctx = broker.context().clone();
    wait_until(TIMEOUT, "the failed save is counted", || {
        ctx.groups.save_failures() >= 1
    })
    .await;
    assert!(ctx.groups.last_save_error().is_some());
    assert!(ctx.groups.is_dirty());
    let scrape = ctx.metrics.render(&ctx);
    assert!(
        scrape.contains("ferromq_config_save_failures_total{file=\"subscriptionGroup.json\"}"),
        "{scrape}"
    );
    // Retried until it succeeds once the obstacle is gone.
    std::fs::remove_dir(&file).unwrap();
    wait_until(TIMEOUT, "the table is saved on retry", || {
        !ctx.groups.is_dirty()
    })
    .await;
    assert!(ctx.groups.last_save_error().is_none());
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("NewGroup"), "{saved}");
    broker.shutdown().await.unwrap();
}

fn properties_of_len(len: usize) -> String {
    // "K" 0x01 value 0x02: the value fills the rest.
    let value = "v".repeat(len - 3);
    properties(&[("K", &value)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_are_counted_as_the_client_sent_them() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    assert_eq!(CLIENT_PROPERTIES_LEN_MAX, 32_747);
    let fits = properties_of_len(CLIENT_PROPERTIES_LEN_MAX);
    let reply = send_raw(&c, "Props", 0, b"m", fits).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let stored = pull_until(&c, "Props", 0, 0, TIMEOUT).await;
    let view = RecordView::parse(&stored[0]).unwrap();
    // What a Java client's MessageDecoder reads as a signed short.
    assert_eq!(view.properties.0.len(), PROPERTIES_LEN_MAX);
    for len in [CLIENT_PROPERTIES_LEN_MAX + 1, 32_767] {
        let reply = send_raw(&c, "Props", 0, b"m", properties_of_len(len)).await;
        assert_refused(
            &reply,
            response::MESSAGE_ILLEGAL,
            &format!("message properties are {len} bytes; at most 32747 fit"),
        );
    }
    // A delayed message also carries the scheduler's REAL_TOPIC, REAL_QID and DELAY.
    let delay = properties(&[("DELAY", "1")]);
    let near_full = properties_of_len(CLIENT_PROPERTIES_LEN_MAX - delay.len()) + &delay;
    assert_eq!(near_full.len(), CLIENT_PROPERTIES_LEN_MAX);
    let reply = send_raw(&c, "Props", 0, b"m", near_full).await;
    assert_refused(
        &reply,
        response::MESSAGE_ILLEGAL,
        "with the scheduler's REAL_TOPIC",
    );
    let entry = batch_entry(b"m", properties_of_len(32_767).as_bytes());
    let header = ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2 {
        m: Some(true),
        ..header_v2("Props")
    };
    let batch =
        RemotingCommand::request_with_header(request::SEND_BATCH_MESSAGE, &header).with_body(entry);
    assert_refused(
        &invoke(&c, batch).await,
        response::MESSAGE_ILLEGAL,
        "are 32767 bytes",
    );
    broker.shutdown().await.unwrap();
}

async fn send_back(c: &RemotingClient, offset: i64, max_times: Option<i32>) -> RemotingCommand {
    let header = ConsumerSendMsgBackRequestHeader {
        offset,
        group: "G".into(),
        delay_level: 0,
        max_reconsume_times: max_times,
        ..Default::default()
    };
    invoke(
        c,
        RemotingCommand::request_with_header(request::CONSUMER_SEND_MSG_BACK, &header),
    )
    .await
}

fn phys_offset_of(reply: &RemotingCommand) -> i64 {
    let id = reply
        .decode_header::<SendMessageResponseHeader>()
        .unwrap()
        .msg_id;
    MessageId::decode(&id).unwrap().phys_offset as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconsume_times_saturate_in_the_dead_letter_copy() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let header = ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2 {
        j: Some(i32::MAX),
        ..header_v2("Work")
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(b"job".to_vec());
    let reply = invoke(&c, command).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let reply = send_back(&c, phys_offset_of(&reply), Some(16)).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let dead = pull_until(&c, "%DLQ%G", 0, 0, TIMEOUT).await;
    let view = RecordView::parse(&dead[0]).unwrap();
    assert_eq!(view.body, b"job");
    assert_eq!(view.reconsume_times, i32::MAX);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_commitlog_offsets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let reply = send(&c, "Work", b"first", &[]).await;
    let phys = phys_offset_of(&reply);
    let view = |offset| {
        let header = ViewMessageRequestHeader {
            offset,
            topic: None,
        };
        RemotingCommand::request_with_header(request::VIEW_MESSAGE_BY_ID, &header)
    };
    assert_refused(
        &invoke(&c, view(-1)).await,
        response::INVALID_PARAMETER,
        "-1 is negative",
    );
    assert_eq!(invoke(&c, view(phys)).await.code, response::SUCCESS);
    assert_refused(
        &send_back(&c, -5, None).await,
        response::INVALID_PARAMETER,
        "-5 is negative",
    );
    assert_eq!(broker.context().store.queue_bounds("%RETRY%G", 0), None);
    assert_eq!(
        broker
            .context()
            .metrics
            .refused_count("bad_commitlog_offset"),
        2
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_dead_letter_topics_keep_working_for_real_clients() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let reply = send(&c, "Work", b"job", &[]).await;
    let phys = phys_offset_of(&reply);
    // The broker's send-back path writes %RETRY%G (delayed) and %DLQ%G.
    assert_eq!(send_back(&c, phys, None).await.code, response::SUCCESS);
    let retried = pull_until(&c, "%RETRY%G", 0, 0, DELIVERY_BOUND).await;
    let retry = RecordView::parse(&retried[0]).unwrap();
    assert_eq!(retry.reconsume_times, 1);
    assert_eq!(
        send_back(&c, retry.phys_offset as i64, Some(1)).await.code,
        response::SUCCESS
    );
    assert_eq!(pull_until(&c, "%DLQ%G", 0, 0, TIMEOUT).await.len(), 1);
    // A Java client whose send-back failed sends to %RETRY%G itself, with a delay.
    let reply = send(
        &c,
        "%RETRY%G",
        b"fallback",
        &[("DELAY", "1"), ("RETRY_TOPIC", "Work")],
    )
    .await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(
        pull_until(&c, "%RETRY%G", 0, 1, DELIVERY_BOUND).await.len(),
        1
    );
    // Sending back a record of a reserved topic (a delayed copy) is refused.
    let delayed = broker
        .context()
        .store
        .get_messages(
            SCHEDULE_TOPIC,
            0,
            0,
            1,
            usize::MAX,
            &ferromq_store::TagFilter::All,
        )
        .unwrap();
    let delayed_phys = delayed.messages[0].phys_offset as i64;
    assert_refused(
        &send_back(&c, delayed_phys, None).await,
        response::NO_PERMISSION,
        "reserved",
    );
    broker.shutdown().await.unwrap();
}

/// Flips one byte inside the record holding `needle` in the CommitLog files of `root`.
fn damage_record(root: &std::path::Path, needle: &[u8]) {
    let dir = root.join("commitlog");
    for item in std::fs::read_dir(&dir).unwrap() {
        let path = item.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + needle.len() / 2] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("{needle:?} not found in {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_moves_past_a_damaged_delayed_record() {
    let dir = tempfile::tempdir().unwrap();
    let body = |i: usize| format!("delayed {i} {}", "x".repeat(100)).into_bytes();
    {
        // Delays of an hour: nothing fires before the restart.
        let mut config = config(dir.path());
        config.message_delay_level = "1h".into();
        let broker = ferromq_broker::Broker::start(config).await.unwrap();
        let c = client(broker.local_addr()).await;
        fill(&c, "Target", 1).await;
        for i in 0..3 {
            let reply = send(&c, "Target", &body(i), &[("DELAY", "1")]).await;
            assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        }
        broker.shutdown().await.unwrap();
    }
    damage_record(&data_dir(dir.path()), &body(1));
    let broker = hostile::broker(dir.path()).await;
    let c = client(broker.local_addr()).await;
    let ctx = broker.context().clone();
    wait_until(DELIVERY_BOUND, "the scheduler moves past all three", || {
        offset_of(&broker, SCHEDULE_GROUP, SCHEDULE_TOPIC, 0) == Some(3)
    })
    .await;
    assert_eq!(ctx.metrics.scheduler_dead_letters(), 1);
    let delivered = pull_until(&c, "Target", 0, 1, TIMEOUT).await;
    let bodies: Vec<Vec<u8>> = delivered
        .iter()
        .map(|r| RecordView::parse(r).unwrap().body.to_vec())
        .collect();
    assert_eq!(bodies, vec![body(0), body(2)]);
    drop(ctx);
    broker.shutdown().await.unwrap();
}
