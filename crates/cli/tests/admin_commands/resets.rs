//! Resets of an offline group (seen through `consumerProgress` and `offsetHistory`) and the
//! RESET_CONSUMER_CLIENT_OFFSET push that tells online consumers of a reset.

use std::time::Duration;

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::Value;

use crate::common::{create_topic, ok, ok_json, start};
use crate::support::{commit, connect, heartbeat, now_ms, queue, runtime, send, TIMEOUT};

#[test]
fn resets_of_an_offline_group_show_in_progress_and_history() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    create_topic(n, b, "ResetTopic", "2");
    let rt = runtime();
    let middle = rt.block_on(async {
        let client = connect(b).await;
        for i in 0..3 {
            send(&client, "ResetTopic", 0, &format!("early-{i}")).await;
            send(&client, "ResetTopic", 1, &format!("early-{i}")).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let middle = now_ms();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 0..3 {
            send(&client, "ResetTopic", 0, &format!("late-{i}")).await;
            send(&client, "ResetTopic", 1, &format!("late-{i}")).await;
        }
        // An offline group's progress, committed as a consumer would.
        commit(&client, "ResetGroup", "ResetTopic", 0, 5).await;
        commit(&client, "ResetGroup", "ResetTopic", 1, 6).await;
        middle
    });

    let progress = ok_json(&["consumerProgress", "-n", n, "-g", "ResetGroup"]);
    assert_eq!(queue(&progress, 0)["brokerOffset"], 6, "{progress}");
    assert_eq!(queue(&progress, 0)["consumerOffset"], 5, "{progress}");
    assert_eq!(queue(&progress, 0)["lag"], 1, "{progress}");
    assert_eq!(queue(&progress, 1)["consumerOffset"], 6, "{progress}");
    assert_eq!(progress["totalLag"], 1, "{progress}");
    let human = ok(&[
        "consumerProgress",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
    ]);
    assert!(human.starts_with("#Topic"), "{human}");
    assert!(human.contains("Consume Diff Total: 1"), "{human}");

    // Back to the middle of the topic by time.
    let reset = ok_json(&[
        "resetOffsetByTime",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
        "-s",
        &middle.to_string(),
    ]);
    assert_eq!(queue(&reset, 0)["oldOffset"], 5, "{reset}");
    assert_eq!(queue(&reset, 0)["newOffset"], 3, "{reset}");
    assert_eq!(queue(&reset, 1)["oldOffset"], 6, "{reset}");
    assert_eq!(queue(&reset, 1)["newOffset"], 3, "{reset}");
    let first_generation = reset["generation"].as_u64().unwrap();
    let progress = ok_json(&[
        "consumerProgress",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
    ]);
    assert_eq!(queue(&progress, 0)["consumerOffset"], 3, "{progress}");
    assert_eq!(queue(&progress, 1)["consumerOffset"], 3, "{progress}");
    assert_eq!(progress["totalLag"], 6, "{progress}");

    // One queue to an explicit offset (human output), even to 0.
    let human = ok(&[
        "resetOffsetByTime",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
        "-q",
        "0",
        "-o",
        "0",
        "-s",
        "now",
    ]);
    assert!(
        human.starts_with("#brokerName  #queueId  #oldOffset  #newOffset"),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["broker-a", "0", "3", "0"]),
        "{human}"
    );
    // Relative time: an hour ago is before every message.
    let reset = ok_json(&[
        "resetOffsetByTime",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
        "-s",
        "-1h",
    ]);
    assert_eq!(queue(&reset, 1)["newOffset"], 0, "{reset}");
    // Skip the backlog.
    let skip = ok_json(&[
        "skipAccumulatedMessage",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
    ]);
    assert_eq!(queue(&skip, 0)["newOffset"], 6, "{skip}");
    assert_eq!(queue(&skip, 1)["newOffset"], 6, "{skip}");
    let last_generation = skip["generation"].as_u64().unwrap();
    assert!(last_generation > first_generation, "{skip}");
    let human = ok(&[
        "skipAccumulatedMessage",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
    ]);
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["broker-a", "1", "6", "6"]),
        "{human}"
    );
    let progress = ok_json(&["consumerProgress", "-n", n, "-g", "ResetGroup"]);
    assert_eq!(progress["totalLag"], 0, "{progress}");

    // The history of queue 0: the commit, then every reset with rising generations.
    let history = ok_json(&[
        "offsetHistory",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
        "-q",
        "0",
    ]);
    let events = history["events"].as_array().unwrap();
    let summary: Vec<(String, u64)> = events
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["offset"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = [
        ("commit", 5),
        ("reset", 3),
        ("reset", 0),
        ("reset", 0),
        ("reset", 6),
        ("reset", 6),
    ]
    .iter()
    .map(|(k, o)| (k.to_string(), *o))
    .collect();
    assert_eq!(summary, expected, "{history}");
    assert!(events.iter().all(|e| e["queueId"] == 0), "{history}");
    let generations: Vec<u64> = events[1..]
        .iter()
        .map(|e| e["generation"].as_u64().unwrap())
        .collect();
    assert!(generations.windows(2).all(|w| w[0] < w[1]), "{history}");
    assert_eq!(generations[0], first_generation, "{history}");
    let commit_generation = events[0]["generation"].as_u64().unwrap_or(0);
    assert!(commit_generation < first_generation, "{history}");
    assert_eq!(events[1]["clientId"], "admin-reset", "{history}");
    let human = ok(&[
        "offsetHistory",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
    ]);
    assert!(human.starts_with("#Time"), "{human}");
    assert_eq!(
        human.lines().filter(|l| l.contains(" commit ")).count(),
        2,
        "{human}"
    );
    assert_eq!(
        human.lines().filter(|l| l.contains(" reset ")).count(),
        9,
        "{human}"
    );
    // --since leaves older events out.
    let later = ok_json(&[
        "offsetHistory",
        "-n",
        n,
        "-g",
        "ResetGroup",
        "-t",
        "ResetTopic",
        "--since",
        &(now_ms() + 60_000).to_string(),
    ]);
    assert_eq!(later["events"].as_array().unwrap().len(), 0, "{later}");
}

/// The next RESET_CONSUMER_CLIENT_OFFSET push, skipping other pushes (e.g. rebalance notices).
async fn next_reset_push(
    pushes: &mut tokio::sync::mpsc::Receiver<RemotingCommand>,
) -> RemotingCommand {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let push = tokio::time::timeout_at(deadline, pushes.recv())
            .await
            .expect("a reset push within 10 s")
            .expect("the connection stays open");
        if push.code == request::RESET_CONSUMER_CLIENT_OFFSET {
            return push;
        }
    }
}

#[test]
fn online_consumers_are_told_of_a_reset() {
    use ferromq_protocol::remoting::body::decode_json;
    use ferromq_protocol::remoting::body::mq_map::ResetOffsetBody;
    use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
    use ferromq_protocol::remoting::LanguageCode;

    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "PushTopic", "2");
    let rt = runtime();
    rt.block_on(async {
        let consumer = connect(&b).await;
        let mut pushes = consumer.take_server_requests().unwrap();
        for i in 0..4 {
            send(&consumer, "PushTopic", i % 2, "m").await;
        }
        heartbeat(&consumer, "127.0.0.1@push-test", "PushGroup", "PushTopic").await;
        commit(&consumer, "PushGroup", "PushTopic", 0, 2).await;

        // Through the CLI (a Java-form request): the consumer gets the ResetOffsetBody map.
        let n2 = n.clone();
        let reset = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "resetOffsetByTime",
                "-n",
                &n2,
                "-g",
                "PushGroup",
                "-t",
                "PushTopic",
                "-s",
                "-1h",
            ])
        })
        .await
        .unwrap();
        assert_eq!(queue(&reset, 0)["oldOffset"], 2, "{reset}");
        assert_eq!(queue(&reset, 0)["newOffset"], 0, "{reset}");
        let push = next_reset_push(&mut pushes).await;
        assert!(push.is_oneway(), "{push:?}");
        assert_eq!(push.ext_fields["group"], "PushGroup");
        assert_eq!(push.ext_fields["topic"], "PushTopic");
        let body: ResetOffsetBody = decode_json(push.body.as_deref().unwrap()).unwrap();
        let offsets: Vec<(i32, i64)> = body
            .offset_table
            .0
            .iter()
            .map(|(mq, o)| (mq.queue_id, *o))
            .collect();
        assert_eq!(offsets, vec![(0, 0), (1, 0)]);

        // A request marked CPP: the list form C++ clients read; the reply still has a body.
        let admin = connect(&b).await;
        let header = ResetOffsetRequestHeader {
            group: "PushGroup".into(),
            topic: "PushTopic".into(),
            queue_id: None,
            offset: None,
            timestamp: -1,
            is_force: true,
        };
        let mut request =
            RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &header);
        request.language = LanguageCode::Cpp;
        let reply = admin.invoke(request, TIMEOUT).await.unwrap();
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        let body: ResetOffsetBody = decode_json(reply.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body.offset_table.0.values().copied().collect::<Vec<_>>(),
            vec![2, 2]
        );
        let push = next_reset_push(&mut pushes).await;
        let list: Value = serde_json::from_slice(push.body.as_deref().unwrap()).unwrap();
        assert_eq!(list["offsetTable"][0]["queueId"], 0, "{list}");
        assert_eq!(list["offsetTable"][1]["offset"], 2, "{list}");
        assert_eq!(list["offsetTable"][1]["brokerName"], "broker-a", "{list}");
    });
}
