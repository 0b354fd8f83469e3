//! `ferromq admin` against a running `ferromq standalone`: every command's human and JSON
//! output, resets of an offline group (with `consumerProgress` and `offsetHistory` showing
//! their effect), and bad input (one `error:` line, non-zero exit).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::UpdateConsumerOffsetRequestHeader;
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeader;
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A standalone server, killed on drop.
struct Standalone {
    child: Child,
    namesrv: String,
    broker: String,
    _dir: tempfile::TempDir,
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Standalone {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args([
            "standalone",
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--data-dir",
        ])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("standalone printed no address line within 30 s");
        }
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(2), Some(&"namesrv"), "{line}");
    Standalone {
        namesrv: words[3].to_string(),
        broker: words[5].to_string(),
        child,
        _dir: dir,
    }
}

fn admin(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferromq"));
    command.arg("admin").args(args);
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferromq admin {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = admin(args);
    assert!(
        out.status.success(),
        "ferromq admin {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ok_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let stdout = ok(&all);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{args:?}: last line {last:?}: {e}"))
}

/// Asserts a failure with the given exit code and one stderr line; returns that line.
fn fails(args: &[&str], code: i32) -> String {
    let out = admin(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "ferromq admin {args:?}: {out:?}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one stderr line expected: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

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

/// Waits (bounded) until the name server serves the topic's route.
fn wait_route(namesrv: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if admin(&["topicRoute", "-n", namesrv, "-t", topic])
            .status
            .success()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no route for {topic} within 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
    ok(&[
        "updateTopic",
        "-n",
        n,
        "-b",
        b,
        "-t",
        "ResetTopic",
        "-r",
        "2",
        "-w",
        "2",
    ]);
    wait_route(n, "ResetTopic");
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

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    ok(&[
        "updateTopic",
        "-n",
        n,
        "-b",
        b,
        "-t",
        "BadTopic",
        "-r",
        "1",
        "-w",
        "1",
    ]);
    wait_route(n, "BadTopic");

    // Missing flags: clap's usage error, status 2.
    for args in [
        vec!["resetOffsetByTime", "-n", n, "-g", "G"],
        vec!["consumerProgress", "-n", n],
        vec!["updateTopic", "-n", n, "-t", "X"],
        vec!["offsetHistory", "-n", n, "-t", "BadTopic"],
        vec!["queryMsgById", "-n", n],
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
    ] {
        let line = fails(&args, 2);
        assert!(
            line.contains("required") || line.contains("--queue"),
            "{args:?}: {line}"
        );
    }
    // Unknown topic.
    for args in [
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
        vec!["offsetHistory", "-n", n, "-g", "G", "-t", "NoSuchTopic"],
    ] {
        let line = fails(&args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchTopic does not exist"),
            "{args:?}: {line}"
        );
    }
    // Unknown group.
    for args in [
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
            "offsetHistory",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
        ],
    ] {
        let line = fails(&args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchGroup does not exist"),
            "{args:?}: {line}"
        );
    }
    // Bad time format.
    for time in ["yesterday", "2026-01-01 00:00:00", "-5y"] {
        let line = fails(
            &[
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
            1,
        );
        assert!(line.starts_with("error: bad time format"), "{line}");
    }
    // A bad message id, a queue the topic lacks, no name server at all.
    let line = fails(&["queryMsgById", "-n", n, "-i", "XYZ"], 1);
    assert!(line.starts_with("error: bad message id"), "{line}");
    let line = fails(&["topicList"], 1);
    assert!(line.contains("no name server"), "{line}");

    // An unreachable name server: a port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    for args in [
        vec!["topicList", "-n", &closed],
        vec!["clusterList", "-n", &closed],
        vec!["consumerProgress", "-n", &closed, "-g", "G"],
        vec![
            "resetOffsetByTime",
            "-n",
            &closed,
            "-g",
            "G",
            "-t",
            "T",
            "-s",
            "now",
        ],
    ] {
        let line = fails(&args, 1);
        assert!(
            line.starts_with("error: name server ") && line.contains("cannot connect"),
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
    ok(&[
        "updateTopic",
        "-n",
        &n,
        "-b",
        &b,
        "-t",
        "PushTopic",
        "-r",
        "2",
        "-w",
        "2",
    ]);
    wait_route(&n, "PushTopic");
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
