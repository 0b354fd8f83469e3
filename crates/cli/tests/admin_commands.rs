//! `ferromq admin` against a running `ferromq standalone`: every command's human and JSON
//! output, resets of an offline group (with `consumerProgress` and `offsetHistory` showing
//! their effect), a reset under a running push consumer, message queries, group connections
//! and clones, lag of a scripted run, and bad input (one `error:` line, non-zero exit).
//! Every command runs with `TZ=UTC0` (POSIX form: no zone database needed) unless a test
//! says otherwise.

mod common;

use std::time::{Duration, Instant};

use common::{admin_in_zone, create_topic, fails, ok, ok_json, start, wait_route};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::extensions::COMMIT_STALE_GENERATION;
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeader;
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(addr: &str) -> RemotingClient {
    RemotingClient::connect(addr.parse().unwrap(), TIMEOUT)
        .await
        .unwrap()
}

/// Sends one message to a queue; returns its offset message id.
async fn send(client: &RemotingClient, topic: &str, queue_id: i32, body: &str) -> String {
    let header = SendMessageRequestHeader {
        producer_group: "admin-test-producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: 0,
        flag: 0,
        properties: Some("TAGS\u{1}tagA\u{2}KEYS\u{1}key1\u{2}".into()),
        reconsume_times: None,
        unit_mode: None,
        batch: None,
        max_reconsume_times: None,
        broker_name: None,
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    reply.ext_fields["msgId"].clone()
}

async fn commit(client: &RemotingClient, group: &str, topic: &str, queue_id: i32, offset: i64) {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn queue(value: &Value, queue_id: i64) -> &Value {
    value["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queueId"].as_i64() == Some(queue_id))
        .unwrap_or_else(|| panic!("no queue {queue_id} in {value}"))
}

#[test]
fn topic_group_and_cluster_commands() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();

    let human = ok(&[
        "updateTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic",
        "-r",
        "2",
        "-w",
        "2",
    ]);
    assert!(
        human.contains(&format!("create topic to {b} success.")),
        "{human}"
    );
    let json = ok_json(&[
        "updateTopic",
        "-n",
        n,
        "-b",
        b,
        "-t",
        "AdminTopic2",
        "-r",
        "3",
        "-w",
        "3",
        "-p",
        "6",
    ]);
    assert_eq!(json["topic"]["readQueueNums"], 3, "{json}");
    assert_eq!(json["brokers"][0]["addr"], b, "{json}");
    assert_eq!(json["brokers"][0]["brokerName"], "broker-a", "{json}");
    wait_route(n, "AdminTopic");
    wait_route(n, "AdminTopic2");

    let route = ok_json(&["topicRoute", "-n", n, "-t", "AdminTopic"]);
    assert_eq!(route["brokerDatas"][0]["brokerAddrs"]["0"], b, "{route}");
    assert_eq!(route["queueDatas"][0]["readQueueNums"], 2, "{route}");
    let human = ok(&["topicRoute", "-n", n, "-t", "AdminTopic"]);
    assert!(human.contains("\"brokerName\": \"broker-a\""), "{human}");

    let list = ok_json(&["topicList", "-n", n]);
    let topics: Vec<&str> = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        topics.contains(&"AdminTopic") && topics.contains(&"AdminTopic2"),
        "{list}"
    );
    let human = ok(&["topicList", "-n", n]);
    assert!(human.lines().any(|l| l == "AdminTopic"), "{human}");

    let clusters = ok_json(&["clusterList", "-n", n]);
    assert_eq!(
        clusters["brokers"][0]["cluster"], "DefaultCluster",
        "{clusters}"
    );
    assert_eq!(clusters["brokers"][0]["brokerId"], 0, "{clusters}");
    assert_eq!(clusters["brokers"][0]["addr"], b, "{clusters}");
    let human = ok(&["clusterList", "-n", n]);
    assert!(human.starts_with("#Cluster Name"), "{human}");
    assert!(
        human
            .lines()
            .any(|l| l.contains("DefaultCluster") && l.contains(b)),
        "{human}"
    );

    let rt = runtime();
    let msg_id = rt.block_on(async {
        let client = connect(b).await;
        let id = send(&client, "AdminTopic", 1, "hello admin").await;
        send(&client, "AdminTopic", 1, "second").await;
        id
    });
    let status = ok_json(&["topicStatus", "-n", n, "-t", "AdminTopic"]);
    assert_eq!(queue(&status, 0)["maxOffset"], 0, "{status}");
    assert_eq!(queue(&status, 1)["maxOffset"], 2, "{status}");
    assert_eq!(queue(&status, 1)["minOffset"], 0, "{status}");
    assert!(
        queue(&status, 1)["lastUpdateTimestamp"].as_i64().unwrap() > 0,
        "{status}"
    );
    let human = ok(&["topicStatus", "-n", n, "-t", "AdminTopic"]);
    assert!(
        human.starts_with("#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated"),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("broker-a") && l.split_whitespace().nth(3) == Some("2")),
        "{human}"
    );

    let message = ok_json(&["queryMsgById", "-n", n, "-i", &msg_id]);
    assert_eq!(message["topic"], "AdminTopic", "{message}");
    assert_eq!(message["body"], "hello admin", "{message}");
    assert_eq!(message["tags"], "tagA", "{message}");
    assert_eq!(message["queueId"], 1, "{message}");
    assert_eq!(message["queueOffset"], 0, "{message}");
    assert_eq!(message["msgId"], msg_id.as_str(), "{message}");
    assert_eq!(message["offsetMsgId"], msg_id.as_str(), "{message}");
    assert_eq!(message["brokerName"], "broker-a", "{message}");
    let human = ok(&["queryMsgById", "-n", n, "-i", &msg_id]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("Message Body:") && l.ends_with("hello admin")),
        "{human}"
    );

    let human = ok(&["updateSubGroup", "-n", n, "-b", b, "-g", "AdminGroup"]);
    assert!(human.contains("create subscription group to"), "{human}");
    let json = ok_json(&[
        "updateSubGroup",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-g",
        "AdminGroup2",
        "-r",
        "3",
    ]);
    assert_eq!(json["group"]["retryMaxTimes"], 3, "{json}");
    let progress = ok_json(&[
        "consumerProgress",
        "-n",
        n,
        "-g",
        "AdminGroup",
        "-t",
        "AdminTopic",
    ]);
    assert_eq!(progress["totalLag"], 2, "{progress}");
    let json = ok_json(&["deleteSubGroup", "-n", n, "-b", b, "-g", "AdminGroup2"]);
    assert_eq!(json["deletedFrom"][0]["addr"], b, "{json}");
    let human = ok(&[
        "deleteSubGroup",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-g",
        "AdminGroup",
    ]);
    assert!(
        human.contains("delete subscription group [AdminGroup]"),
        "{human}"
    );
    let line = fails(&["deleteSubGroup", "-n", n, "-b", b, "-g", "AdminGroup"], 1);
    assert!(
        line.starts_with("error: ") && line.contains("does not exist"),
        "{line}"
    );

    let json = ok_json(&[
        "deleteTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic2",
    ]);
    assert_eq!(json["deletedFrom"][0]["addr"], b, "{json}");
    let human = ok(&[
        "deleteTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic",
    ]);
    assert!(
        human.contains("delete topic [AdminTopic] from broker"),
        "{human}"
    );
    let line = fails(&["topicRoute", "-n", n, "-t", "AdminTopic"], 1);
    assert!(line.contains("topic AdminTopic does not exist"), "{line}");
}

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

/// The name server of the bad-input table: nothing listens on port 1.
const UNREACHABLE: &str = "127.0.0.1:1";

/// Bad input for every command, old and new: a missing flag (clap's usage error, status 2),
/// an unknown topic or group, an unreachable name server or broker, a bad value (status 1).
/// Each failure is exactly one stderr line and never a panic or a backtrace.
#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    create_topic(n, b, "BadTopic", "1");
    // A group that exists (it committed) but has no member online.
    runtime().block_on(async {
        let client = connect(b).await;
        send(&client, "BadTopic", 0, "m").await;
        commit(&client, "KnownGroup", "BadTopic", 0, 1).await;
    });

    // Missing flags: clap's usage error, status 2.
    let missing: Vec<Vec<&str>> = vec![
        vec!["updateTopic", "-n", n, "-t", "X"],
        vec!["updateTopic", "-n", n, "-c", "DefaultCluster"],
        vec!["deleteTopic", "-n", n, "-t", "X"],
        vec!["topicRoute", "-n", n],
        vec!["topicStatus", "-n", n],
        vec!["updateSubGroup", "-n", n, "-g", "G"],
        vec!["deleteSubGroup", "-n", n, "-b", b],
        vec!["resetOffsetByTime", "-n", n, "-g", "G"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "BadTopic",
            "-o",
            "3",
        ],
        vec!["skipAccumulatedMessage", "-n", n, "-g", "G"],
        vec!["offsetHistory", "-n", n, "-t", "BadTopic"],
        vec!["queryMsgById", "-n", n],
        vec!["queryMsgByKey", "-n", n, "-t", "BadTopic"],
        vec!["queryMsgByUniqueKey", "-n", n, "-t", "BadTopic"],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "BadTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
        ],
        vec!["printMsg", "-n", n],
        vec!["consumerConnection", "-n", n],
        vec!["cloneGroupOffset", "-n", n, "-s", "A", "-t", "BadTopic"],
        vec!["consumerProgress", "-n", n, "-g"],
        vec!["updateBrokerConfig", "-n", n, "-v", "x"],
        vec!["brokerStatus", "-n", n, "-b", b, "-c", "DefaultCluster"],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "BadTopic",
            "-b",
            "broker-a",
            "-i",
            "x",
            "-o",
            "0",
        ],
    ];
    for args in &missing {
        let line = fails(args, 2);
        assert!(
            line.contains("required")
                || line.contains("--queue")
                || line.contains("value")
                || line.contains("cannot be used with"),
            "{args:?}: {line}"
        );
    }
    // Unknown topic.
    let unknown_topic: Vec<Vec<&str>> = vec![
        vec!["topicStatus", "-n", n, "-t", "NoSuchTopic"],
        vec!["topicRoute", "-n", n, "-t", "NoSuchTopic"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "NoSuchTopic",
            "-s",
            "now",
        ],
        vec![
            "skipAccumulatedMessage",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "NoSuchTopic",
        ],
        vec!["offsetHistory", "-n", n, "-g", "G", "-t", "NoSuchTopic"],
        vec![
            "consumerProgress",
            "-n",
            n,
            "-g",
            "KnownGroup",
            "-t",
            "NoSuchTopic",
        ],
        vec!["queryMsgByKey", "-n", n, "-t", "NoSuchTopic", "-k", "k"],
        vec![
            "queryMsgByUniqueKey",
            "-n",
            n,
            "-t",
            "NoSuchTopic",
            "-i",
            "u",
        ],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "NoSuchTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "0",
        ],
        vec!["printMsg", "-n", n, "-t", "NoSuchTopic"],
        vec![
            "cloneGroupOffset",
            "-n",
            n,
            "-s",
            "KnownGroup",
            "-d",
            "D",
            "-t",
            "NoSuchTopic",
        ],
    ];
    for args in &unknown_topic {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchTopic does not exist"),
            "{args:?}: {line}"
        );
    }
    // Unknown group (and a known one that is not online, for consumerConnection).
    let unknown_group: Vec<Vec<&str>> = vec![
        vec!["consumerProgress", "-n", n, "-g", "NoSuchGroup"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
            "-s",
            "now",
        ],
        vec![
            "skipAccumulatedMessage",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
        ],
        vec![
            "offsetHistory",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
        ],
        vec!["deleteSubGroup", "-n", n, "-b", b, "-g", "NoSuchGroup"],
        vec![
            "cloneGroupOffset",
            "-n",
            n,
            "-s",
            "NoSuchGroup",
            "-d",
            "D",
            "-t",
            "BadTopic",
        ],
    ];
    for args in &unknown_group {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchGroup does not exist"),
            "{args:?}: {line}"
        );
    }
    for group in ["NoSuchGroup", "KnownGroup"] {
        let line = fails(&["consumerConnection", "-n", n, "-g", group], 1);
        assert!(
            line.starts_with("error: ") && line.contains(&format!("{group} is not online")),
            "{line}"
        );
    }
    // Bad values: time formats, ids, offsets, charsets.
    for time in ["yesterday", "2026-01-01 00:00:00", "-5y"] {
        for args in [
            vec![
                "resetOffsetByTime",
                "-n",
                n,
                "-g",
                "G",
                "-t",
                "BadTopic",
                "-s",
                time,
            ],
            vec!["printMsg", "-n", n, "-t", "BadTopic", "-b", time],
            vec![
                "queryMsgByKey",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-k",
                "k",
                "-e",
                time,
            ],
            vec![
                "offsetHistory",
                "-n",
                n,
                "-g",
                "G",
                "-t",
                "BadTopic",
                "--since",
                time,
            ],
        ] {
            let line = fails(&args, 1);
            assert!(
                line.starts_with("error: bad time format"),
                "{args:?}: {line}"
            );
        }
    }
    let bad_values: Vec<(Vec<&str>, &str)> = vec![
        (vec!["queryMsgById", "-n", n, "-i", "XYZ"], "bad message id"),
        (
            vec![
                "queryMsgByOffset",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-b",
                "broker-a",
                "-i",
                "0",
                "-o",
                "-1",
            ],
            "must not be negative",
        ),
        (
            vec![
                "queryMsgByOffset",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-b",
                "broker-a",
                "-i",
                "5",
                "-o",
                "0",
            ],
            "queue",
        ),
        (
            vec![
                "queryMsgByKey",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-k",
                "k",
                "-m",
                "0",
            ],
            "maxNum",
        ),
        (
            vec![
                "printMsg", "-n", n, "-t", "BadTopic", "-b", "now", "-e", "-1h",
            ],
            "begin time is after the end time",
        ),
        (
            vec![
                "cloneGroupOffset",
                "-n",
                n,
                "-s",
                "A",
                "-d",
                "A",
                "-t",
                "BadTopic",
            ],
            "are the same",
        ),
        (vec!["topicList"], "no name server"),
    ];
    for (args, what) in &bad_values {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains(what),
            "{args:?}: {line}"
        );
    }

    // An unreachable name server: every command that asks it says so.
    let unreachable: Vec<Vec<&str>> = vec![
        vec!["updateTopic", "-c", "DefaultCluster", "-t", "T"],
        vec!["deleteTopic", "-c", "DefaultCluster", "-t", "T"],
        vec!["topicList"],
        vec!["topicRoute", "-t", "T"],
        vec!["topicStatus", "-t", "T"],
        vec!["updateSubGroup", "-c", "DefaultCluster", "-g", "G"],
        vec!["deleteSubGroup", "-c", "DefaultCluster", "-g", "G"],
        vec!["consumerProgress", "-g", "G"],
        vec!["consumerProgress"],
        vec!["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now"],
        vec!["skipAccumulatedMessage", "-g", "G", "-t", "T"],
        vec!["offsetHistory", "-g", "G", "-t", "T"],
        vec!["clusterList"],
        vec!["queryMsgByKey", "-t", "T", "-k", "k"],
        vec!["queryMsgByUniqueKey", "-t", "T", "-i", "u"],
        vec![
            "queryMsgByOffset",
            "-t",
            "T",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "0",
        ],
        vec!["printMsg", "-t", "T"],
        vec!["consumerConnection", "-g", "G"],
        vec!["cloneGroupOffset", "-s", "A", "-d", "B", "-t", "T"],
        vec!["brokerStatus"],
        vec!["brokerStatus", "-c", "DefaultCluster"],
        vec!["getBrokerConfig"],
        vec![
            "updateBrokerConfig",
            "-k",
            "flushDiskType",
            "-v",
            "SYNC_FLUSH",
        ],
    ];
    for args in &unreachable {
        let mut all = args.clone();
        all.extend(["-n", UNREACHABLE]);
        let line = fails(&all, 1);
        assert!(
            line.starts_with(&format!("error: name server {UNREACHABLE}"))
                && line.contains("cannot connect"),
            "{all:?}: {line}"
        );
    }
    // An unreachable broker: a message id naming it, or -b.
    let id = ferromq_protocol::MessageId {
        store_host: UNREACHABLE.parse().unwrap(),
        phys_offset: 0,
    }
    .encode();
    for args in [
        vec!["queryMsgById", "-i", id.as_str()],
        vec!["consumerConnection", "-g", "G", "-b", UNREACHABLE],
        vec!["updateSubGroup", "-g", "G", "-b", UNREACHABLE],
    ] {
        let line = fails(&args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("cannot connect"),
            "{args:?}: {line}"
        );
    }
}

/// Registers `client` as an online consumer of `group` on `topic` (one heartbeat).
async fn heartbeat(client: &RemotingClient, client_id: &str, group: &str, topic: &str) {
    let body = serde_json::json!({
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0}],
            "unitMode": false,
        }],
    });
    let command = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(serde_json::to_vec(&body).unwrap());
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
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

/// A producer of the client library, through the name server.
fn producer(namesrv: &str) -> ferromq_client::Producer {
    ferromq_client::Producer::start(ferromq_client::ProducerConfig {
        namesrv_addrs: vec![namesrv.parse().unwrap()],
        group: "AdminTestProducer".into(),
        send_timeout: TIMEOUT,
        ..ferromq_client::ProducerConfig::default()
    })
    .unwrap()
}

/// Sends one message with a key and a tag to one queue; returns (unique key, queue offset).
async fn send_keyed(
    producer: &ferromq_client::Producer,
    topic: &str,
    queue_id: i32,
    key: &str,
    tag: &str,
    body: &str,
) -> (String, u64) {
    let queue = ferromq_client::MessageQueue {
        topic: topic.into(),
        broker_name: "broker-a".into(),
        queue_id,
    };
    let message = ferromq_client::Message::new(topic, body.to_string())
        .with_key(key)
        .with_tags(tag);
    let sent = producer.send_to_queue(message, &queue).await.unwrap();
    (sent.msg_id, sent.queue_offset)
}

fn utc(ms: i64, pattern: &str) -> String {
    use chrono::TimeZone;
    chrono::Utc
        .timestamp_millis_opt(ms)
        .unwrap()
        .format(pattern)
        .to_string()
}

fn messages(value: &Value) -> &Vec<Value> {
    value["messages"].as_array().unwrap()
}

#[test]
fn message_queries_by_key_unique_key_offset_and_time_range() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    create_topic(n, b, "MsgTopic", "2");
    let rt = runtime();
    let (early, middle, late) = rt.block_on(async {
        let producer = producer(n);
        let mut early = Vec::new();
        for i in 0..3 {
            early.push(
                send_keyed(
                    &producer,
                    "MsgTopic",
                    i % 2,
                    "order-1",
                    "tagA",
                    &format!("early-{i}"),
                )
                .await,
            );
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let middle = now_ms();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut late = Vec::new();
        for i in 0..4 {
            late.push(
                send_keyed(
                    &producer,
                    "MsgTopic",
                    i % 2,
                    "order-2",
                    if i % 2 == 0 { "tagA" } else { "tagB" },
                    &format!("late-{i}"),
                )
                .await,
            );
        }
        producer.shutdown();
        (early, middle, late)
    });

    // By key: every message with the key, bodies and positions as sent.
    let found = ok_json(&["queryMsgByKey", "-n", n, "-t", "MsgTopic", "-k", "order-1"]);
    let list = messages(&found);
    assert_eq!(list.len(), 3, "{found}");
    let mut bodies: Vec<&str> = list.iter().map(|m| m["body"].as_str().unwrap()).collect();
    bodies.sort();
    assert_eq!(bodies, ["early-0", "early-1", "early-2"], "{found}");
    for message in list {
        assert_eq!(message["keys"], "order-1", "{found}");
        assert_eq!(message["tags"], "tagA", "{found}");
        assert_eq!(message["brokerName"], "broker-a", "{found}");
        let sent = early
            .iter()
            .find(|(id, _)| message["msgId"] == id.as_str())
            .unwrap_or_else(|| panic!("unknown msgId in {found}"));
        assert_eq!(message["queueOffset"], sent.1, "{found}");
    }
    let human = ok(&["queryMsgByKey", "-n", n, "-t", "MsgTopic", "-k", "order-2"]);
    assert!(human.starts_with("#Message ID"), "{human}");
    let (id, offset) = &late[1];
    let row: Vec<&str> = human
        .lines()
        .find(|l| l.starts_with(id.as_str()))
        .unwrap_or_else(|| panic!("{human}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row[1..6],
        ["broker-a", "1", &offset.to_string(), "order-2", "tagB"],
        "{human}"
    );
    assert_eq!(row.last(), Some(&"late-1"), "{human}");
    // A time range: only messages stored in it.
    let line = fails(
        &[
            "queryMsgByKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-k",
            "order-2",
            "--end",
            &middle.to_string(),
        ],
        1,
    );
    assert!(
        line.starts_with("error: no message of topic MsgTopic has key order-2"),
        "{line}"
    );
    let after = ok_json(&[
        "queryMsgByKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-k",
        "order-1",
        "-b",
        "-1h",
        "-e",
        &middle.to_string(),
    ]);
    assert_eq!(messages(&after).len(), 3, "{after}");
    let none = fails(
        &[
            "queryMsgByKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-k",
            "order-1",
            "-b",
            &middle.to_string(),
        ],
        1,
    );
    assert!(none.contains("no message"), "{none}");

    // By unique key: the detail block, and JSON.
    let (unique, unique_offset) = &late[2];
    let found = ok_json(&[
        "queryMsgByUniqueKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-i",
        unique,
    ]);
    assert_eq!(messages(&found).len(), 1, "{found}");
    let message = &messages(&found)[0];
    assert_eq!(message["body"], "late-2", "{found}");
    assert_eq!(message["queueId"], 0, "{found}");
    assert_eq!(message["queueOffset"], *unique_offset, "{found}");
    assert_eq!(message["msgId"], unique.as_str(), "{found}");
    let store_time = message["storeTimestamp"].as_i64().unwrap();
    assert!(store_time > middle, "{found}");
    let human = ok(&[
        "queryMsgByUniqueKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-i",
        unique,
    ]);
    let field = |name: &str| -> String {
        human
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {human}"))[name.len()..]
            .trim()
            .to_string()
    };
    assert_eq!(field("Message Body:"), "late-2", "{human}");
    assert_eq!(field("Keys:"), "[order-2]", "{human}");
    assert_eq!(field("Queue Offset:"), unique_offset.to_string(), "{human}");
    // Times print in the local zone: TZ=UTC here.
    assert_eq!(
        field("Store Timestamp:"),
        utc(store_time, "%Y-%m-%d %H:%M:%S%.3f"),
        "{human}"
    );
    let line = fails(
        &[
            "queryMsgByUniqueKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-i",
            "0A0B0C",
        ],
        1,
    );
    assert!(
        line.contains("no message of topic MsgTopic has unique key 0A0B0C"),
        "{line}"
    );

    // By offset: the message at (broker, queue, offset); past the end is an error.
    let at = ok_json(&[
        "queryMsgByOffset",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        "broker-a",
        "-i",
        "1",
        "-o",
        "1",
    ]);
    assert_eq!(at["queueId"], 1, "{at}");
    assert_eq!(at["queueOffset"], 1, "{at}");
    assert_eq!(at["body"], "late-1", "{at}");
    let human = ok(&[
        "queryMsgByOffset",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        "broker-a",
        "-i",
        "0",
        "-o",
        "0",
    ]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("Message Body:") && l.ends_with("early-0")),
        "{human}"
    );
    let line = fails(
        &[
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "9",
        ],
        1,
    );
    assert!(
        line.contains("no message at offset 9") && line.contains("[0, 4)"),
        "{line}"
    );
    let line = fails(
        &[
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-b",
            "broker-z",
            "-i",
            "0",
            "-o",
            "0",
        ],
        1,
    );
    assert!(
        line.contains("broker broker-z does not serve topic MsgTopic"),
        "{line}"
    );

    // printMsg: every queue in a store-time range, with a tag filter.
    let all = ok_json(&["printMsg", "-n", n, "-t", "MsgTopic"]);
    assert_eq!(messages(&all).len(), 7, "{all}");
    let late_only = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
    ]);
    let mut bodies: Vec<&str> = messages(&late_only)
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["late-0", "late-1", "late-2", "late-3"],
        "{late_only}"
    );
    let early_only = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-e",
        &middle.to_string(),
    ]);
    assert_eq!(messages(&early_only).len(), 3, "{early_only}");
    let tagged = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
        "-s",
        "tagB",
    ]);
    let bodies: Vec<&str> = messages(&tagged)
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["late-1", "late-3"], "{tagged}");
    let human = ok(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
    ]);
    assert!(
        human.starts_with("#Message ID  ")
            && human.contains("#Store Time")
            && human.contains("#Body"),
        "{human}"
    );
    assert_eq!(
        human.lines().filter(|l| l.contains("late-")).count(),
        4,
        "{human}"
    );
    let row = human.lines().find(|l| l.ends_with("late-2")).unwrap();
    assert!(
        row.contains(&utc(store_time, "%Y-%m-%d %H:%M:%S%.3f")),
        "{row}"
    );
    let hidden = ok(&["printMsg", "-n", n, "-t", "MsgTopic", "-d", "false"]);
    assert!(
        !hidden.contains("early-0") && hidden.contains("NOT PRINT BODY"),
        "{hidden}"
    );
    let line = fails(&["printMsg", "-n", n, "-t", "MsgTopic", "-c", "GBK"], 1);
    assert!(line.contains("charset GBK is not supported"), "{line}");
}

/// Commits through UPDATE_CONSUMER_OFFSET and returns the reply code (rejections included).
async fn commit_code(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> i32 {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    let command = RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
    client.invoke(command, TIMEOUT).await.unwrap().code
}

#[test]
fn consumer_connection_and_clone_group_offset() {
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "CloneTopic", "2");
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&b).await;
        for i in 0..8 {
            send(&client, "CloneTopic", i % 2, "m").await;
        }
        // The source group: offline, with progress.
        commit(&client, "CloneSrc", "CloneTopic", 0, 3).await;
        commit(&client, "CloneSrc", "CloneTopic", 1, 4).await;
        // The destination group: online on its own connection, with older progress.
        let dest = connect(&b).await;
        heartbeat(&dest, "127.0.0.1@clone-dest", "CloneDest", "CloneTopic").await;
        commit(&dest, "CloneDest", "CloneTopic", 0, 1).await;

        // consumerConnection: the destination's member, JSON and human.
        let n2 = n.clone();
        let (json, human) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&["consumerConnection", "-n", &n2, "-g", "CloneDest"]),
                ok(&["consumerConnection", "-n", &n2, "-g", "CloneDest"]),
            )
        })
        .await
        .unwrap();
        let connection = &json["connectionSet"][0];
        assert_eq!(connection["clientId"], "127.0.0.1@clone-dest", "{json}");
        assert_eq!(connection["language"], "RUST", "{json}");
        assert_eq!(connection["version"], 479, "{json}");
        assert_eq!(connection["versionDesc"], "V5_3_3", "{json}");
        assert!(
            connection["clientAddr"]
                .as_str()
                .unwrap()
                .starts_with("127.0.0.1:"),
            "{json}"
        );
        assert_eq!(
            json["subscriptionTable"][0]["topic"], "CloneTopic",
            "{json}"
        );
        assert_eq!(json["subscriptionTable"][0]["subString"], "*", "{json}");
        assert_eq!(json["consumeType"], "CONSUME_PASSIVELY", "{json}");
        assert_eq!(json["messageModel"], "CLUSTERING", "{json}");
        assert_eq!(
            json["consumeFromWhere"], "CONSUME_FROM_LAST_OFFSET",
            "{json}"
        );
        assert!(human.starts_with("#ClientId"), "{human}");
        assert!(
            human.lines().any(|l| l.starts_with("127.0.0.1@clone-dest")
                && l.contains("RUST")
                && l.ends_with("V5_3_3")),
            "{human}"
        );
        assert!(human.contains("Below is subscription:"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["CloneTopic", "*"]),
            "{human}"
        );
        assert!(human.contains("ConsumeType: CONSUME_PASSIVELY"), "{human}");
        assert!(human.contains("MessageModel: CLUSTERING"), "{human}");

        // cloneGroupOffset: per queue old -> new, as a reset of the destination.
        let n2 = n.clone();
        let (json, human) = tokio::task::spawn_blocking(move || {
            let json = ok_json(&[
                "cloneGroupOffset",
                "-n",
                &n2,
                "-s",
                "CloneSrc",
                "-d",
                "CloneDest",
                "-t",
                "CloneTopic",
            ]);
            let human = ok(&[
                "cloneGroupOffset",
                "-n",
                &n2,
                "-s",
                "CloneSrc",
                "-d",
                "CloneDest2",
                "-t",
                "CloneTopic",
                "-o",
                "true",
            ]);
            (json, human)
        })
        .await
        .unwrap();
        assert_eq!(queue(&json, 0)["oldOffset"], 1, "{json}");
        assert_eq!(queue(&json, 0)["newOffset"], 3, "{json}");
        assert_eq!(queue(&json, 1)["oldOffset"], Value::Null, "{json}");
        assert_eq!(queue(&json, 1)["newOffset"], 4, "{json}");
        let generation = json["generation"].as_u64().unwrap();
        assert!(generation > 0, "{json}");
        assert!(human.starts_with("#brokerName  #topic"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["broker-a", "CloneTopic", "1", "-", "4"]),
            "{human}"
        );
        assert!(
            human
                .contains("clone consumer offset from group CloneSrc to group CloneDest2 success."),
            "{human}"
        );

        // The running destination member is fenced like after any reset: its stale commit
        // is rejected and the clone stands.
        assert_eq!(
            commit_code(&dest, "CloneDest", "CloneTopic", 0, 2).await,
            COMMIT_STALE_GENERATION
        );
        let n2 = n.clone();
        let (progress, history) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&[
                    "consumerProgress",
                    "-n",
                    &n2,
                    "-g",
                    "CloneDest",
                    "-t",
                    "CloneTopic",
                ]),
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n2,
                    "-g",
                    "CloneDest",
                    "-t",
                    "CloneTopic",
                    "-q",
                    "0",
                ]),
            )
        })
        .await
        .unwrap();
        assert_eq!(queue(&progress, 0)["consumerOffset"], 3, "{progress}");
        assert_eq!(queue(&progress, 1)["consumerOffset"], 4, "{progress}");
        // A destination that never consumed becomes a known group with the copied offsets.
        let n2 = n.clone();
        let groups = tokio::task::spawn_blocking(move || {
            ok_json(&["consumerProgress", "-n", &n2, "-t", "CloneTopic"])
        })
        .await
        .unwrap();
        let fresh = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == "CloneDest2")
            .unwrap_or_else(|| panic!("{groups}"));
        assert_eq!(fresh["diffTotal"], 8 - 3 - 4, "{groups}");
        assert_eq!(fresh["count"], 0, "{groups}");
        assert_eq!(fresh["versionDesc"], "OFFLINE", "{groups}");
        let events = history["events"].as_array().unwrap();
        let kinds: Vec<(&str, u64, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["kind"].as_str().unwrap(),
                    e["offset"].as_u64().unwrap(),
                    e["clientId"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds[kinds.len() - 1],
            ("reset", 3, "admin-clone"),
            "{history}"
        );
        assert_eq!(kinds[0].0, "commit", "{history}");
        assert_eq!(
            events.last().unwrap()["generation"],
            generation,
            "{history}"
        );
    });

    // Unknown groups, nothing to clone, and the source equal to the destination.
    let line = fails(&["consumerConnection", "-n", &n, "-g", "NoSuchGroup"], 1);
    assert!(
        line.contains("consumer group NoSuchGroup is not online"),
        "{line}"
    );
    let line = fails(&["consumerConnection", "-n", &n, "-g", "CloneSrc"], 1);
    assert!(line.contains("CloneSrc is not online"), "{line}");
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "NoSuchGroup",
            "-d",
            "X",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("consumer group NoSuchGroup does not exist"),
        "{line}"
    );
    ok(&["updateSubGroup", "-n", &n, "-b", &b, "-g", "EmptyGroup"]);
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "EmptyGroup",
            "-d",
            "X",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("EmptyGroup has no committed offset on topic CloneTopic"),
        "{line}"
    );
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "CloneSrc",
            "-d",
            "CloneSrc",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(line.contains("are the same"), "{line}");
    // An online source that subscribes to other topics only: skipped unless -o true.
    let rt = runtime();
    let other = rt.block_on(async {
        let other = connect(&b).await;
        heartbeat(&other, "127.0.0.1@other-src", "OtherSrc", "OtherTopic").await;
        commit(&other, "OtherSrc", "CloneTopic", 1, 2).await;
        other
    });
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "OtherSrc",
            "-d",
            "OtherDest",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("OtherSrc is online but does not subscribe to topic CloneTopic")
            && line.contains("-o true"),
        "{line}"
    );
    let json = ok_json(&[
        "cloneGroupOffset",
        "-n",
        &n,
        "-s",
        "OtherSrc",
        "-d",
        "OtherDest",
        "-t",
        "CloneTopic",
        "-o",
        "true",
    ]);
    assert_eq!(queue(&json, 1)["newOffset"], 2, "{json}");
    drop(other);
}

/// Pulls up to `count` messages of a queue as `group` (no commit, no hold); returns how many
/// came back.
async fn pull_count(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    count: i32,
) -> usize {
    use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
    let header = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: count,
        sys_flag: 0,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: None,
        sub_version: 0,
        expression_type: None,
        max_msg_bytes: None,
        request_source: None,
        proxy_forward_client_id: None,
    };
    let command = RemotingCommand::request_with_header(request::PULL_MESSAGE, &header);
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let mut body = reply.body.as_deref().unwrap_or_default();
    let mut pulled = 0;
    while !body.is_empty() {
        let view = ferromq_protocol::RecordView::parse(body).unwrap();
        body = &body[view.total_size()..];
        pulled += 1;
    }
    pulled
}

#[test]
fn consumer_progress_lag_is_produced_minus_consumed() {
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "LagTopic", "3");
    // Produced per queue, pulled per queue, committed per queue.
    let produced = [7_i64, 5, 0];
    let pulled = [5_i64, 5, 0];
    let committed = [4_i64, 2, 0];
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&b).await;
        for (queue_id, count) in produced.iter().enumerate() {
            for i in 0..*count {
                send(
                    &client,
                    "LagTopic",
                    queue_id as i32,
                    &format!("q{queue_id}-{i}"),
                )
                .await;
            }
        }
        heartbeat(&client, "127.0.0.1@lag-test", "LagGroup", "LagTopic").await;
        for queue_id in 0..3 {
            if pulled[queue_id] > 0 {
                let got = pull_count(
                    &client,
                    "LagGroup",
                    "LagTopic",
                    queue_id as i32,
                    0,
                    pulled[queue_id] as i32,
                )
                .await;
                assert_eq!(got as i64, pulled[queue_id]);
            }
            if committed[queue_id] > 0 {
                commit(
                    &client,
                    "LagGroup",
                    "LagTopic",
                    queue_id as i32,
                    committed[queue_id],
                )
                .await;
            }
        }
        let n2 = n.clone();
        let (json, human, all, all_human, of_topic) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&["consumerProgress", "-n", &n2, "-g", "LagGroup"]),
                ok(&[
                    "consumerProgress",
                    "-n",
                    &n2,
                    "-g",
                    "LagGroup",
                    "-t",
                    "LagTopic",
                ]),
                ok_json(&["consumerProgress", "-n", &n2]),
                ok(&["consumerProgress", "-n", &n2]),
                ok_json(&["consumerProgress", "-n", &n2, "-t", "LagTopic"]),
            )
        })
        .await
        .unwrap();
        let mut total = 0;
        for queue_id in 0..3 {
            let q = queue(&json, queue_id as i64);
            let lag = produced[queue_id] - committed[queue_id];
            total += lag;
            assert_eq!(q["brokerOffset"], produced[queue_id], "{json}");
            assert_eq!(q["consumerOffset"], committed[queue_id], "{json}");
            assert_eq!(q["lag"], lag, "{json}");
            assert_eq!(q["diff"], lag, "{json}");
            assert_eq!(
                q["inflight"],
                pulled[queue_id] - committed[queue_id],
                "{json}"
            );
        }
        assert_eq!(json["totalLag"], total, "{json}");
        assert_eq!(json["diffTotal"], total, "{json}");
        assert_eq!(json["totalInflight"], 1 + 3, "{json}");
        assert!(json["consumeTps"].as_f64().unwrap() > 0.0, "{json}");
        // Last consume time: the store time of the message just before the committed offset.
        let last = queue(&json, 0)["lastTimestamp"].as_i64().unwrap();
        let n2 = n.clone();
        let at = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "queryMsgByOffset",
                "-n",
                &n2,
                "-t",
                "LagTopic",
                "-b",
                "broker-a",
                "-i",
                "0",
                "-o",
                "3",
            ])
        })
        .await
        .unwrap();
        assert_eq!(at["storeTimestamp"], last, "{at}");
        assert_eq!(queue(&json, 2)["lastTimestamp"], 0, "{json}");
        assert_eq!(
            queue(&json, 0)["lastTime"],
            utc(last, "%Y-%m-%d %H:%M:%S"),
            "{json}"
        );

        assert!(human.starts_with("#Topic  "), "{human}");
        let row: Vec<&str> = human
            .lines()
            .find(|l| l.starts_with("LagTopic") && l.split_whitespace().nth(2) == Some("0"))
            .unwrap()
            .split_whitespace()
            .collect();
        let last_utc = utc(last, "%Y-%m-%d %H:%M:%S");
        let expected: Vec<&str> = ["LagTopic", "broker-a", "0", "7", "4", "3", "1"]
            .into_iter()
            .chain(last_utc.split(' '))
            .collect();
        assert_eq!(row, expected, "{human}");
        assert!(
            human.contains(&format!("Consume Diff Total: {total}")),
            "{human}"
        );
        assert!(human.contains("Consume Inflight Total: 4"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.starts_with("LagTopic") && l.ends_with("N/A")),
            "{human}"
        );

        // Without -g: one line per group, with its members and total lag.
        let line = all["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == "LagGroup")
            .unwrap_or_else(|| panic!("{all}"));
        assert_eq!(line["count"], 1, "{all}");
        assert_eq!(line["versionDesc"], "V5_3_3", "{all}");
        assert_eq!(line["consumeType"], "CONSUME_PASSIVELY", "{all}");
        assert_eq!(line["messageModel"], "CLUSTERING", "{all}");
        assert_eq!(line["diffTotal"], total, "{all}");
        assert!(line["consumeTps"].as_f64().unwrap() > 0.0, "{all}");
        assert!(
            all["groups"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["group"] != "TOOLS_CONSUMER"),
            "{all}"
        );
        let of_topic: Vec<&str> = of_topic["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["group"].as_str().unwrap())
            .collect();
        assert_eq!(of_topic, ["LagGroup"], "groups of LagTopic");
        assert!(all_human.starts_with("#Group  "), "{all_human}");
        let row: Vec<&str> = all_human
            .lines()
            .find(|l| l.starts_with("LagGroup"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(
            row[..5],
            ["LagGroup", "1", "V5_3_3", "PUSH", "CLUSTERING"],
            "{all_human}"
        );
        assert_eq!(row[6], total.to_string(), "{all_human}");
    });

    // A reset makes pulled positions of the old generation meaningless: nothing is in flight
    // until the group pulls again.
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-s",
        "-1h",
    ]);
    let after = ok_json(&["consumerProgress", "-n", &n, "-g", "LagGroup"]);
    assert_eq!(queue(&after, 0)["consumerOffset"], 0, "{after}");
    assert_eq!(after["totalInflight"], 0, "{after}");
    assert_eq!(after["totalLag"], 12, "{after}");
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-q",
        "0",
        "-o",
        "4",
        "-s",
        "now",
    ]);
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-q",
        "1",
        "-o",
        "2",
        "-s",
        "now",
    ]);

    // Times follow TZ: the same LastTime eight hours later in UTC-8's reading of the clock.
    let utc_human = ok(&[
        "consumerProgress",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
    ]);
    let shifted = admin_in_zone(
        &[
            "consumerProgress",
            "-n",
            &n,
            "-g",
            "LagGroup",
            "-t",
            "LagTopic",
        ],
        "XXX-8",
    );
    assert!(shifted.status.success(), "{shifted:?}");
    let shifted = String::from_utf8(shifted.stdout).unwrap();
    let time_of = |text: &str| -> String {
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("LagTopic") && l.split_whitespace().nth(2) == Some("0"))
            .unwrap()
            .split_whitespace()
            .collect();
        row[7..].join(" ")
    };
    let parse = |t: &str| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").unwrap();
    assert_eq!(
        parse(&time_of(&shifted)) - parse(&time_of(&utc_human)),
        chrono::TimeDelta::hours(8),
        "{utc_human}\n{shifted}"
    );
}

/// Every delivery to the push consumer: (queue id, queue offset).
type Deliveries = std::sync::Arc<std::sync::Mutex<Vec<(i32, u64)>>>;

fn delivered(log: &Deliveries, queue_id: i32, offset: u64) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|d| **d == (queue_id, offset))
        .count()
}

fn highest(log: &Deliveries, queue_id: i32) -> Option<u64> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|d| d.0 == queue_id)
        .map(|d| d.1)
        .max()
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The issue's end-to-end reset: `resetOffsetByTime` (the binary) moves a running push
/// consumer back to an earlier time while its listener holds messages of the old position.
/// The consumer continues from the reset offset (it receives those messages again); its
/// in-flight work from before the reset never lands: the results of the old generation are
/// dropped (`stale_results`) and every commit it sends before it has pulled at the reset
/// offset is refused by the broker's fence (`stale_rejections`, counted by its offset store);
/// `offsetHistory` shows the commits, the reset, and the commits after it from the reset
/// offset up. (A consumer that ignores the reset push is covered by
/// `reset_fences_the_commits_of_a_consumer_that_ignores_the_push`.)
#[test]
fn reset_under_a_running_push_consumer_is_followed_and_fences_stale_commits() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use ferromq_client::{
        ConsumeFromWhere, ConsumeStatus, MessageExt, MessageListener, PushConsumer,
        PushConsumerConfig,
    };

    const PER_PHASE: u64 = 15;
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "LiveTopic", "2");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let producer = producer(&n);
        for i in 0..PER_PHASE * 2 {
            send_keyed(
                &producer,
                "LiveTopic",
                (i % 2) as i32,
                "early",
                "t",
                &format!("early-{i}"),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let middle = now_ms();
        tokio::time::sleep(Duration::from_millis(60)).await;
        for i in 0..PER_PHASE * 2 {
            send_keyed(
                &producer,
                "LiveTopic",
                (i % 2) as i32,
                "late",
                "t",
                &format!("late-{i}"),
            )
            .await;
        }
        producer.shutdown();

        // A slow listener that the test can hold, so that the reset lands mid-run.
        let log: Deliveries = Arc::new(Mutex::new(Vec::new()));
        let hold = Arc::new(AtomicBool::new(false));
        let listener = {
            let (log, hold) = (log.clone(), hold.clone());
            MessageListener::concurrently(move |msgs: &[MessageExt]| {
                let deadline = Instant::now() + Duration::from_secs(20);
                while hold.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(25));
                let mut log = log.lock().unwrap();
                for m in msgs {
                    log.push((m.queue_id, m.queue_offset));
                }
                ConsumeStatus::ConsumeSuccess
            })
        };
        let config = PushConsumerConfig {
            namesrv_addrs: vec![n.parse().unwrap()],
            group: "LiveGroup".into(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            consume_threads: 1,
            pull_hold: Duration::from_secs(3),
            pull_error_backoff: Duration::from_millis(100),
            rebalance_interval: Duration::from_secs(5),
            persist_interval: Duration::from_millis(50),
            heartbeat_interval: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(3),
            ..PushConsumerConfig::default()
        };
        let consumer =
            PushConsumer::start(config, vec![("LiveTopic".into(), "*".into())], listener)
                .await
                .unwrap();

        // Mid-run: both queues are past the reset point; hold the listener and reset.
        wait_for(
            "consumption past the reset point",
            Duration::from_secs(20),
            || (0..2).all(|q| highest(&log, q).is_some_and(|o| o >= PER_PHASE + 3)),
        )
        .await;
        hold.store(true, Ordering::SeqCst);
        let first_pass = log.lock().unwrap().len();
        assert!(
            first_pass < (PER_PHASE * 4) as usize,
            "the run ended before the reset"
        );
        let n2 = n.clone();
        let reset = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "resetOffsetByTime",
                "-n",
                &n2,
                "-g",
                "LiveGroup",
                "-t",
                "LiveTopic",
                "-s",
                &middle.to_string(),
            ])
        })
        .await
        .unwrap();
        hold.store(false, Ordering::SeqCst);
        let generation = reset["generation"].as_u64().unwrap();
        for q in 0..2 {
            assert_eq!(queue(&reset, q)["newOffset"], PER_PHASE, "{reset}");
            assert!(
                queue(&reset, q)["oldOffset"].as_u64().unwrap() > PER_PHASE,
                "{reset}"
            );
        }

        // The consumer follows the reset: the first late message of each queue comes again,
        // and everything is consumed and committed in the end.
        wait_for(
            "re-delivery from the reset offset",
            Duration::from_secs(20),
            || (0..2).all(|q| delivered(&log, q, PER_PHASE) >= 2),
        )
        .await;
        let n2 = n.clone();
        let mut progress = Value::Null;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let n3 = n2.clone();
            progress = tokio::task::spawn_blocking(move || {
                ok_json(&[
                    "consumerProgress",
                    "-n",
                    &n3,
                    "-g",
                    "LiveGroup",
                    "-t",
                    "LiveTopic",
                ])
            })
            .await
            .unwrap();
            if progress["totalLag"] == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(progress["totalLag"], 0, "{progress}");
        for q in 0..2 {
            assert_eq!(
                queue(&progress, q)["consumerOffset"],
                PER_PHASE * 2,
                "{progress}"
            );
        }
        // After the reset every queue is consumed from the reset offset on, never below it.
        let after_reset: Vec<(i32, u64)> = log.lock().unwrap()[first_pass..].to_vec();
        for q in 0..2 {
            let offsets: std::collections::BTreeSet<u64> = after_reset
                .iter()
                .filter(|d| d.0 == q)
                .map(|d| d.1)
                .collect();
            assert!(
                (PER_PHASE..PER_PHASE * 2).all(|o| offsets.contains(&o)),
                "queue {q} after the reset: {offsets:?}"
            );
            assert!(
                offsets.iter().all(|o| *o >= PER_PHASE),
                "queue {q} after the reset: {offsets:?}"
            );
        }
        // The results in flight at the reset belong to the old generation: the consumer drops
        // them instead of committing them (its commits of the reset offset itself are accepted
        // as changing nothing); a consumer that does send them is refused by the broker's fence
        // (`reset_fences_the_commits_of_a_consumer_that_ignores_the_push`).
        let rejected = consumer.offset_stats().stale_rejections;
        let stats = consumer.stats();
        println!("reset under a running consumer: {rejected} stale commits rejected; {stats:?}");
        assert!(
            stats.stale_results + stats.batches_discarded >= 1,
            "old-generation results dropped: {stats:?}"
        );
        let report = consumer.shutdown().await.unwrap();
        assert!(report.is_complete(), "{report:?}");

        // The history of each queue: commits, the reset, then commits from the reset offset
        // up, never a stale one.
        for q in 0..2 {
            let n3 = n.clone();
            let history = tokio::task::spawn_blocking(move || {
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n3,
                    "-g",
                    "LiveGroup",
                    "-t",
                    "LiveTopic",
                    "-q",
                    &q.to_string(),
                ])
            })
            .await
            .unwrap();
            let events = history["events"].as_array().unwrap();
            let at = events
                .iter()
                .position(|e| e["kind"] == "reset")
                .unwrap_or_else(|| panic!("no reset in {history}"));
            assert_eq!(events[at]["offset"], PER_PHASE, "{history}");
            assert_eq!(events[at]["generation"], generation, "{history}");
            assert!(
                events[..at].iter().any(|e| e["kind"] == "commit"),
                "{history}"
            );
            let after: Vec<u64> = events[at + 1..]
                .iter()
                .map(|e| {
                    // A consumer that missed the push follows PULL_OFFSET_MOVED instead and
                    // may record a correction; either way it never goes below the reset.
                    assert!(
                        e["kind"] == "commit" || e["kind"] == "correction",
                        "{history}"
                    );
                    e["offset"].as_u64().unwrap()
                })
                .collect();
            assert!(!after.is_empty(), "{history}");
            assert!(after[0] >= PER_PHASE, "{history}");
            assert!(after.windows(2).all(|w| w[0] <= w[1]), "{history}");
            assert_eq!(*after.last().unwrap(), PER_PHASE * 2, "{history}");
        }
    });
}

/// A consumer that keeps committing its old positions after a reset (RocketMQ commits carry
/// no generation; a client may miss or ignore the one-way reset push): every such commit is
/// rejected (COMMIT_STALE_GENERATION) and counted here, its next pull is answered
/// PULL_OFFSET_MOVED to the reset offset, and only commits made after it follows are stored.
#[test]
fn reset_fences_the_commits_of_a_consumer_that_ignores_the_push() {
    use ferromq_protocol::remoting::headers::pull::{
        PullMessageRequestHeader, PullMessageResponseHeader,
    };

    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "FenceTopic", "1");
    runtime().block_on(async {
        let consumer = connect(&b).await;
        for i in 0..10 {
            send(&consumer, "FenceTopic", 0, &format!("m{i}")).await;
        }
        heartbeat(&consumer, "127.0.0.1@legacy", "FenceGroup", "FenceTopic").await;
        assert_eq!(
            pull_count(&consumer, "FenceGroup", "FenceTopic", 0, 0, 10).await,
            10
        );
        for offset in [3, 6] {
            assert_eq!(
                commit_code(&consumer, "FenceGroup", "FenceTopic", 0, offset).await,
                0
            );
        }
        let n2 = n.clone();
        let reset = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "resetOffsetByTime",
                "-n",
                &n2,
                "-g",
                "FenceGroup",
                "-t",
                "FenceTopic",
                "-q",
                "0",
                "-o",
                "2",
                "-s",
                "now",
            ])
        })
        .await
        .unwrap();
        assert_eq!(queue(&reset, 0)["oldOffset"], 6, "{reset}");
        assert_eq!(queue(&reset, 0)["newOffset"], 2, "{reset}");

        // The consumer goes on as if nothing happened: every commit of its old positions,
        // forward or not, is refused; one of the reset offset itself changes nothing and is
        // accepted.
        let mut rejected = 0;
        for offset in [8, 9, 10, 3] {
            let code = commit_code(&consumer, "FenceGroup", "FenceTopic", 0, offset).await;
            assert_eq!(
                code, COMMIT_STALE_GENERATION,
                "commit of {offset} after the reset"
            );
            rejected += 1;
        }
        assert_eq!(
            commit_code(&consumer, "FenceGroup", "FenceTopic", 0, 2).await,
            0,
            "a commit equal to the stored offset"
        );
        println!("commits refused after the reset: {rejected}");
        // Its next pull moves it to the reset offset; from there its commits count again.
        let header = PullMessageRequestHeader {
            consumer_group: "FenceGroup".into(),
            topic: "FenceTopic".into(),
            queue_id: 0,
            queue_offset: 10,
            max_msg_nums: 32,
            ..PullMessageRequestHeader::default()
        };
        let reply = consumer
            .invoke(
                RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
                TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::PULL_OFFSET_MOVED,
            "{:?}",
            reply.remark
        );
        let moved: PullMessageResponseHeader = reply.decode_header().unwrap();
        assert_eq!(moved.next_begin_offset, 2);
        assert_eq!(
            pull_count(&consumer, "FenceGroup", "FenceTopic", 0, 2, 3).await,
            3
        );
        assert_eq!(
            commit_code(&consumer, "FenceGroup", "FenceTopic", 0, 5).await,
            0
        );

        let n2 = n.clone();
        let (history, progress) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n2,
                    "-g",
                    "FenceGroup",
                    "-t",
                    "FenceTopic",
                ]),
                ok_json(&["consumerProgress", "-n", &n2, "-g", "FenceGroup"]),
            )
        })
        .await
        .unwrap();
        let events: Vec<(&str, u64)> = history["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["kind"].as_str().unwrap(), e["offset"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            events,
            [("commit", 3), ("commit", 6), ("reset", 2), ("commit", 5)],
            "{history}"
        );
        assert_eq!(queue(&progress, 0)["consumerOffset"], 5, "{progress}");
        assert_eq!(queue(&progress, 0)["lag"], 5, "{progress}");
    });
}

/// The new requests as a Java admin sees them on the wire: QUERY_MESSAGE (12) with Java's
/// header and the unique-key flag, QUERY_NOT_FOUND, GET_CONSUMER_CONNECTION_LIST (203)
/// answering CONSUMER_NOT_ONLINE (206), CLONE_GROUP_OFFSET (314) refusals; bad headers are
/// INVALID_PARAMETER, never a dropped connection.
#[test]
fn wire_replies_of_query_connection_and_clone_requests() {
    use ferromq_protocol::remoting::headers::admin::GetConsumerConnectionListRequestHeader;
    use ferromq_protocol::remoting::headers::client::{
        QueryMessageRequestHeader, QueryMessageResponseHeader,
    };
    use ferromq_protocol::remoting::headers::offset::CloneGroupOffsetRequestHeader;

    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "WireTopic", "1");
    runtime().block_on(async {
        let producer = producer(&n);
        let (unique, _) = send_keyed(&producer, "WireTopic", 0, "wire-key", "t", "wire-body").await;
        send_keyed(&producer, "WireTopic", 0, "wire-key", "t", "wire-body-2").await;
        producer.shutdown();
        let client = connect(&b).await;
        let query = |key: &str, max_num: i32, unique_flag: bool| {
            let header = QueryMessageRequestHeader {
                topic: "WireTopic".into(),
                key: key.into(),
                max_num,
                begin_timestamp: 0,
                end_timestamp: i64::MAX,
            };
            let mut command = RemotingCommand::request_with_header(request::QUERY_MESSAGE, &header);
            if unique_flag {
                command
                    .ext_fields
                    .insert("_UNIQUE_KEY_QUERY".into(), "true".into());
            }
            command
        };
        let records = |reply: &RemotingCommand| -> Vec<String> {
            let mut body = reply.body.as_deref().unwrap_or_default();
            let mut bodies = Vec::new();
            while !body.is_empty() {
                let view = ferromq_protocol::RecordView::parse(body).unwrap();
                bodies.push(String::from_utf8_lossy(view.body).into_owned());
                body = &body[view.total_size()..];
            }
            bodies
        };
        let reply = client
            .invoke(query("wire-key", 1, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        assert_eq!(records(&reply).len(), 1, "maxNum bounds the answer");
        let header: QueryMessageResponseHeader = reply.decode_header().unwrap();
        assert!(header.index_last_update_timestamp > 0, "{header:?}");
        let reply = client
            .invoke(query("wire-key", 32, false), TIMEOUT)
            .await
            .unwrap();
        let mut bodies = records(&reply);
        bodies.sort();
        assert_eq!(bodies, ["wire-body", "wire-body-2"]);
        let reply = client
            .invoke(query(&unique, 32, true), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(records(&reply), ["wire-body"]);
        // The key of a unique-key query is not a KEYS word, and the other way round.
        let reply = client
            .invoke(query(&unique, 32, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::QUERY_NOT_FOUND, "{:?}", reply.remark);
        let reply = client
            .invoke(query("wire-key", 32, true), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::QUERY_NOT_FOUND, "{:?}", reply.remark);
        let reply = client
            .invoke(query("wire-key", 0, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::INVALID_PARAMETER,
            "{:?}",
            reply.remark
        );
        let mut no_key = query("wire-key", 1, false);
        no_key.ext_fields.remove("key");
        let reply = client.invoke(no_key, TIMEOUT).await.unwrap();
        assert_eq!(
            reply.code,
            response::INVALID_PARAMETER,
            "{:?}",
            reply.remark
        );
        assert!(reply.remark.unwrap().contains("key"));

        let header = GetConsumerConnectionListRequestHeader {
            consumer_group: "Nobody".into(),
        };
        let reply = client
            .invoke(
                RemotingCommand::request_with_header(
                    request::GET_CONSUMER_CONNECTION_LIST,
                    &header,
                ),
                TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::CONSUMER_NOT_ONLINE,
            "{:?}",
            reply.remark
        );
        assert!(reply.remark.unwrap().contains("Nobody"));

        let clone = |src: &str, dest: &str, topic: &str| {
            let header = CloneGroupOffsetRequestHeader {
                src_group: src.into(),
                dest_group: dest.into(),
                topic: Some(topic.into()),
                offline: None,
            };
            RemotingCommand::request_with_header(request::CLONE_GROUP_OFFSET, &header)
        };
        commit(&client, "WireSrc", "WireTopic", 0, 1).await;
        for (command, code) in [
            (
                clone("WireSrc", "WireSrc", "WireTopic"),
                response::INVALID_PARAMETER,
            ),
            (
                clone("Nobody", "WireDest", "WireTopic"),
                response::SUBSCRIPTION_GROUP_NOT_EXIST,
            ),
            (
                clone("WireSrc", "WireDest", "NoTopic"),
                response::TOPIC_NOT_EXIST,
            ),
            (clone("WireSrc", "WireDest", "WireTopic"), response::SUCCESS),
        ] {
            let reply = client.invoke(command, TIMEOUT).await.unwrap();
            assert_eq!(reply.code, code, "{:?}", reply.remark);
        }
    });
}
