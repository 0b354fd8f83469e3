//! The official RocketMQ 5.x Java gRPC client (`org.apache.rocketmq:rocketmq-client-java`
//! 5.0.8) against `ferromq standalone`'s gRPC endpoint, driven through
//! `scripts/interop/java-grpc` (one JVM per step): the 5.x `Producer` sends 1,000 messages
//! (normal and FIFO in four message groups, each with a tag, two keys and user properties),
//! the 5.x `SimpleConsumer` receives and acks them all, and two 5.x `PushConsumer`s (a normal
//! group and an orderly one) consume them all again answering SUCCESS. Every body, tag, key,
//! property, message id, message group and delivery attempt is checked for each consumer, the
//! orderly group's deliveries of each message group come in send order, and every group's
//! committed offset reaches the end of every queue (the acks were durable).
//!
//! Built by `scripts/interop/install-java.sh` into `target/interop/java-grpc/`; skipped with a
//! printed reason when missing, unless `FERROMQ_INTEROP_REQUIRED` is set (as `scripts/test`
//! does): then a missing build fails the test. Logs stay in
//! `target/interop/java-grpc/runs/<test>/`; every child is killed when its guard drops and
//! every wait has a deadline.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::java::{self, Server};
use common::remoting;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::{json, Value};

/// The pinned gRPC client release (see install-java.sh).
const CLIENT_VERSION: &str = "5.0.8";
/// Messages the producer sends.
const COUNT: usize = 1_000;
/// Queues of the test topic.
const QUEUES: i32 = 4;
/// FIFO message groups the producer uses (the driver's `FIFO_GROUPS`).
const MESSAGE_GROUPS: usize = 4;
/// Bound on one driver run (the JVM, the client's start and its work).
const STEP_DEADLINE: Duration = Duration::from_secs(75);
/// What the consumers are given to receive everything, in seconds (within [`STEP_DEADLINE`];
/// a push consumer's close then waits out its receives still held, up to the 20 s long
/// polling the broker tells consumers).
const CONSUME_SECONDS: &str = "40";
/// How long `ferromq standalone` may take to print its gRPC address.
const GRPC_READY: Duration = Duration::from_secs(30);
/// How long the groups' committed offsets may take to reach the end of the queues.
const OFFSETS_SETTLE: Duration = Duration::from_secs(15);

fn grpc_dir() -> PathBuf {
    java::repo_root().join("target/interop/java-grpc")
}

/// The driver's classpath, or `None` (after saying why) when the test should be skipped.
/// Panics when it is missing and `FERROMQ_INTEROP_REQUIRED` is set.
fn classpath_or_skip(test: &str) -> Option<String> {
    let dir = grpc_dir().join(format!("v{CLIENT_VERSION}"));
    let found = (|| {
        let stamp = grpc_dir().join("installed.stamp");
        if !stamp.exists() {
            return Err(format!("{} is missing", stamp.display()));
        }
        if Command::new("java").arg("-version").output().is_err() {
            return Err("no `java` on PATH".to_string());
        }
        let deps = fs::read_to_string(dir.join("classpath.txt"))
            .map_err(|e| format!("{}: {e}", dir.join("classpath.txt").display()))?;
        Ok(format!(
            "{}:{}",
            dir.join("build/classes").display(),
            deps.trim()
        ))
    })();
    match found {
        Ok(classpath) => Some(classpath),
        Err(why) if java::required() => panic!(
            "{test}: the Java gRPC driver is not installed ({why}) and FERROMQ_INTEROP_REQUIRED \
             is set: run scripts/interop/install-java.sh"
        ),
        Err(why) => {
            eprintln!(
                "SKIPPED {test}: Java gRPC driver not installed ({why}); run \
                 scripts/interop/install-java.sh (scripts/test does, and sets \
                 FERROMQ_INTEROP_REQUIRED=1)"
            );
            None
        }
    }
}

/// A child killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The gRPC address standalone printed on stderr (`ferromq standalone: grpc ADDR`).
fn grpc_addr(server: &Server) -> String {
    let deadline = Instant::now() + GRPC_READY;
    loop {
        let stderr = fs::read_to_string(&server.stderr_path).unwrap_or_default();
        if let Some(addr) = stderr.lines().find_map(|l| {
            l.strip_prefix("ferromq standalone: grpc ")
                .and_then(|rest| rest.split_whitespace().next())
        }) {
            return addr.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "standalone printed no gRPC address:\n{}",
            server.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One driver run: its JSON lines (a line that is not JSON fails the test) and whether it
/// exited 0. Panics when it outlives [`STEP_DEADLINE`].
fn run_driver(classpath: &str, dir: &Path, name: &str, args: &[&str]) -> (Vec<Value>, bool) {
    let stdout_path = dir.join(format!("{name}.stdout"));
    let stderr_path = dir.join(format!("{name}.stderr"));
    let home = dir.join("home");
    fs::create_dir_all(&home).unwrap();
    let child = Command::new("java")
        .args(["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Duser.home={}", home.display()))
        .arg(format!(
            "-Drocketmq.log.root={}",
            dir.join("logs").display()
        ))
        .args(["-cp", classpath, "ferromq.interop.grpc.Driver"])
        .args(args)
        .current_dir(dir)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawning java (is a JDK on PATH?)");
    let mut guard = Guard(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().expect("waiting for the driver") {
            break status;
        }
        assert!(
            started.elapsed() < STEP_DEADLINE,
            "java driver {name} still running after {STEP_DEADLINE:?}; stderr:\n{}",
            java::tail(&stderr_path, 4000)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "java grpc driver {name}: {status} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    let lines = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{name}: a stdout line that is not JSON ({e}): {line}\nstderr:\n{}",
                    java::tail(&stderr_path, 4000)
                )
            })
        })
        .collect::<Vec<Value>>();
    if let Some(fatal) = lines.iter().find(|v| v.get("fatal").is_some()) {
        panic!(
            "{name}: the driver failed: {fatal}\nstderr:\n{}",
            java::tail(&stderr_path, 4000)
        );
    }
    (lines, status.success())
}

/// What the producer sent, by body.
#[derive(Debug, Clone)]
struct Sent {
    index: u64,
    tag: String,
    keys: BTreeSet<String>,
    group: Option<String>,
    properties: BTreeMap<String, String>,
    message_id: String,
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

fn parse_sent(lines: &[Value]) -> BTreeMap<String, Sent> {
    let mut sent = BTreeMap::new();
    for value in lines {
        if let Some(summary) = value.get("summary") {
            assert_eq!(summary["sent"], COUNT, "{value}");
            assert_eq!(summary["failed"], 0, "{value}");
            continue;
        }
        assert!(value.get("error").is_none(), "a send failed: {value}");
        let body = value["body"].as_str().unwrap().to_string();
        let previous = sent.insert(
            body.clone(),
            Sent {
                index: value["index"].as_u64().unwrap(),
                tag: value["tag"].as_str().unwrap().to_string(),
                keys: strings(&value["keys"]),
                group: value["group"].as_str().map(str::to_string),
                properties: string_map(&value["properties"]),
                message_id: value["message_id"].as_str().unwrap().to_string(),
            },
        );
        assert!(previous.is_none(), "{body} reported twice");
    }
    assert_eq!(sent.len(), COUNT, "one line per message");
    let ids: BTreeSet<&str> = sent.values().map(|s| s.message_id.as_str()).collect();
    assert_eq!(ids.len(), COUNT, "distinct message ids");
    sent
}

/// Checks one consumer's deliveries against what was sent: every body exactly once, first
/// attempt, identical tag, keys, properties, message id and message group. Returns the
/// deliveries' indexes per message group, in delivery order.
fn check_deliveries(
    who: &str,
    deliveries: &[&Value],
    sent: &BTreeMap<String, Sent>,
) -> BTreeMap<String, Vec<u64>> {
    let mut seen = BTreeSet::new();
    let mut order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for value in deliveries {
        let body = value["body"].as_str().unwrap().to_string();
        let expected = sent
            .get(&body)
            .unwrap_or_else(|| panic!("{who}: unexpected body {body}"));
        assert!(seen.insert(body.clone()), "{who}: {body} delivered twice");
        assert_eq!(value["tag"], expected.tag.as_str(), "{who}: tag of {body}");
        assert_eq!(
            strings(&value["keys"]),
            expected.keys,
            "{who}: keys of {body}"
        );
        assert_eq!(
            string_map(&value["properties"]),
            expected.properties,
            "{who}: properties of {body}"
        );
        assert_eq!(
            value["message_id"],
            expected.message_id.as_str(),
            "{who}: message id of {body}"
        );
        assert_eq!(
            value["group"].as_str(),
            expected.group.as_deref(),
            "{who}: message group of {body}"
        );
        assert_eq!(value["attempt"], 1, "{who}: first delivery of {body}");
        if let Some(group) = &expected.group {
            order.entry(group.clone()).or_default().push(expected.index);
        }
    }
    assert_eq!(seen.len(), COUNT, "{who}: every message once");
    assert_eq!(order.len(), MESSAGE_GROUPS, "{who}: four message groups");
    order
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Creates `topic` with [`QUEUES`] queues and the subscription groups: (name, orderly —
/// `consumeMessageOrderly`, which FIFO consumption over gRPC follows —, retryMaxTimes).
fn prepare(server: &Server, topic: &str, groups: &[(&str, bool, i32)]) {
    runtime().block_on(async {
        let client = remoting::client(server.broker.parse().unwrap()).await;
        remoting::create_topic(&client, topic, QUEUES).await;
        for (group, orderly, retry_max_times) in groups {
            let body = json!({
                "groupName": group,
                "consumeEnable": true,
                "consumeFromMinEnable": true,
                "consumeBroadcastEnable": false,
                "consumeMessageOrderly": orderly,
                "retryQueueNums": 1,
                "retryMaxTimes": retry_max_times,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": true,
            });
            let command = RemotingCommand::new_request(
                request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                Default::default(),
            )
            .with_body(serde_json::to_vec(&body).unwrap());
            let reply = remoting::invoke(&client, command).await;
            assert_eq!(
                reply.code,
                response::SUCCESS,
                "create group {group}: {}",
                remoting::remark(&reply)
            );
        }
        client.close();
    });
}

/// Waits until each group's committed offset is the max offset of every queue of `topic`,
/// which holds `total` messages.
fn assert_offsets_at_end(server: &Server, topic: &str, groups: &[&str], total_sent: usize) {
    runtime().block_on(async {
        let client = remoting::client(server.broker.parse().unwrap()).await;
        let deadline = Instant::now() + OFFSETS_SETTLE;
        loop {
            let mut behind = Vec::new();
            let mut total = 0;
            for q in 0..QUEUES {
                let max = remoting::max_offset(&client, topic, q).await.unwrap_or(-1);
                total += max.max(0);
                for group in groups {
                    let committed = remoting::query_offset(&client, group, topic, q).await;
                    if committed != Some(max) {
                        behind.push(format!("{group} queue {q}: {committed:?} of {max}"));
                    }
                }
            }
            assert_eq!(total, total_sent as i64, "{topic} holds every message once");
            if behind.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "committed offsets not at the end after {OFFSETS_SETTLE:?}: {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        client.close();
    });
}

#[test]
fn java_grpc_client_produces_and_simple_and_push_consumers_get_all_1000() {
    let test = "java_grpc_client_produces_and_simple_and_push_consumers_get_all_1000";
    let Some(classpath) = classpath_or_skip(test) else {
        return;
    };
    let dir = grpc_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let server = Server::start(&dir, &[]);
    let endpoints = grpc_addr(&server);
    let topic = "InteropJavaGrpc";
    let (simple_group, push_group, fifo_group) =
        ("CG_java_simple", "CG_java_push", "CG_java_push_fifo");
    prepare(
        &server,
        topic,
        &[
            (simple_group, false, 16),
            (push_group, false, 16),
            (fifo_group, true, 16),
        ],
    );
    let count = COUNT.to_string();
    let started = Instant::now();

    // 1. The 5.x Producer.
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "produce",
        &[
            "--endpoints",
            &endpoints,
            "produce",
            "--topic",
            topic,
            "--count",
            &count,
        ],
    );
    assert!(ok, "produce failed:\n{}", server.stderr_tail());
    let sent = parse_sent(&lines);
    let produced = started.elapsed();

    // 2. The 5.x SimpleConsumer receives and acks all.
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "simple",
        &[
            "--endpoints",
            &endpoints,
            "simple",
            "--topic",
            topic,
            "--group",
            simple_group,
            "--count",
            &count,
            "--timeout",
            CONSUME_SECONDS,
        ],
    );
    let summary = lines
        .iter()
        .find_map(|v| v.get("summary"))
        .expect("a summary line");
    assert_eq!(summary["received"], COUNT, "simple consumer: {summary}");
    assert_eq!(
        summary["extra"], 0,
        "simple consumer: an acked message came back: {summary}"
    );
    assert!(ok, "simple consumer failed:\n{}", server.stderr_tail());
    let deliveries: Vec<&Value> = lines.iter().filter(|v| v.get("body").is_some()).collect();
    check_deliveries("simple consumer", &deliveries, &sent);
    let simple_done = started.elapsed();

    // 3. Two 5.x PushConsumers, a normal group and an orderly one, answer SUCCESS.
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "push",
        &[
            "--endpoints",
            &endpoints,
            "push",
            "--topic",
            topic,
            "--group",
            push_group,
            "--group",
            fifo_group,
            "--count",
            &count,
            "--timeout",
            CONSUME_SECONDS,
        ],
    );
    let summary = lines
        .iter()
        .find_map(|v| v.get("summary"))
        .expect("a summary line");
    for group in [push_group, fifo_group] {
        assert_eq!(
            summary["groups"][group]["distinct"], COUNT,
            "push consumer {group}: {summary}"
        );
    }
    assert!(ok, "push consumers failed:\n{}", server.stderr_tail());
    for group in [push_group, fifo_group] {
        let deliveries: Vec<&Value> = lines
            .iter()
            .filter(|v| v["consumer"] == group && v.get("body").is_some())
            .collect();
        let order = check_deliveries(&format!("push consumer {group}"), &deliveries, &sent);
        if group == fifo_group {
            for (message_group, indexes) in order {
                let mut sorted = indexes.clone();
                sorted.sort_unstable();
                assert_eq!(
                    indexes, sorted,
                    "orderly push consumer: message group {message_group} out of send order"
                );
            }
        }
    }
    let push_done = started.elapsed();

    // 4. Every ack was durable: each group's committed offset is at the end of every queue.
    assert_offsets_at_end(
        &server,
        topic,
        &[simple_group, push_group, fifo_group],
        COUNT,
    );
    eprintln!(
        "{test}: produce {:.1} s, simple consumer {:.1} s, push consumers {:.1} s (push \
         consumption {} s, close {} s), {COUNT} messages each",
        produced.as_secs_f64(),
        (simple_done - produced).as_secs_f64(),
        (push_done - simple_done).as_secs_f64(),
        summary["consume_seconds"],
        summary["close_seconds"],
    );
    drop(server);
}

/// Failed messages, with retryMaxTimes 1 (two attempts). A normal group's client nacks a
/// failed message (ChangeInvisibleDuration with the backoff the broker told it) and the broker
/// delivers it again with the attempt counted. An orderly group's client retries locally and,
/// at the group's last attempt, forwards the message to `%DLQ%<group>`
/// (ForwardMessageToDeadLetterQueue), which settles it: that group's offsets reach the end and
/// its DLQ holds exactly the failed bodies.
#[test]
fn java_grpc_push_consumers_retry_failures_and_fifo_dead_letters_them() {
    let test = "java_grpc_push_consumers_retry_failures_and_fifo_dead_letters_them";
    let Some(classpath) = classpath_or_skip(test) else {
        return;
    };
    /// Messages sent; those whose index is a multiple of `FAIL_MOD` always fail.
    const SENT: usize = 20;
    const FAIL_MOD: u64 = 5;
    /// retryMaxTimes 1: two attempts.
    const ATTEMPTS: usize = 2;
    let failing: BTreeSet<u64> = (0..SENT as u64).filter(|i| i % FAIL_MOD == 0).collect();
    let dir = grpc_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let server = Server::start(&dir, &[]);
    let endpoints = grpc_addr(&server);
    let topic = "InteropJavaGrpcRetry";
    let (normal, orderly) = ("CG_java_retry", "CG_java_retry_fifo");
    let retry_max_times = ATTEMPTS as i32 - 1;
    prepare(
        &server,
        topic,
        &[
            (normal, false, retry_max_times),
            (orderly, true, retry_max_times),
        ],
    );
    let count = SENT.to_string();
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "produce",
        &[
            "--endpoints",
            &endpoints,
            "produce",
            "--topic",
            topic,
            "--count",
            &count,
            "--prefix",
            "retry",
        ],
    );
    assert!(ok, "produce failed: {lines:?}");
    let started = Instant::now();
    let deliveries = (SENT + failing.len() * (ATTEMPTS - 1)).to_string();
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "push",
        &[
            "--endpoints",
            &endpoints,
            "push",
            "--topic",
            topic,
            "--group",
            normal,
            "--group",
            orderly,
            "--count",
            &count,
            "--fail-mod",
            &FAIL_MOD.to_string(),
            "--deliveries",
            &deliveries,
            "--timeout",
            CONSUME_SECONDS,
        ],
    );
    assert!(
        ok,
        "push consumers failed: {lines:?}\n{}",
        server.stderr_tail()
    );
    for group in [normal, orderly] {
        let mut attempts: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
        for value in lines
            .iter()
            .filter(|v| v["consumer"] == group && v.get("body").is_some())
        {
            let index: u64 = value["properties"]["index"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            attempts.entry(index).or_default().push((
                value["attempt"].as_u64().unwrap(),
                value["result"].as_str().unwrap().to_string(),
            ));
        }
        assert_eq!(attempts.len(), SENT, "{group}: every message: {attempts:?}");
        for (index, seen) in &attempts {
            let want: Vec<(u64, String)> = if failing.contains(index) {
                (1..=ATTEMPTS as u64)
                    .map(|a| (a, "FAILURE".into()))
                    .collect()
            } else {
                vec![(1, "SUCCESS".into())]
            };
            assert_eq!(seen, &want, "{group}: deliveries of message {index}");
        }
    }
    let dlq = format!("%DLQ%{orderly}");
    let dead: BTreeSet<String> = runtime().block_on(async {
        let client = remoting::client(server.broker.parse().unwrap()).await;
        let deadline = Instant::now() + OFFSETS_SETTLE;
        let end = loop {
            let end = remoting::max_offset(&client, &dlq, 0).await.unwrap_or(0);
            if end >= failing.len() as i64 {
                break end;
            }
            assert!(
                Instant::now() < deadline,
                "{dlq} holds {end} of {} messages after {OFFSETS_SETTLE:?}",
                failing.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let records = remoting::pull_range(&client, &dlq, 0, 0, end).await;
        client.close();
        records
            .into_iter()
            .map(|(_, body)| String::from_utf8(body).unwrap())
            .collect()
    });
    let want: BTreeSet<String> = failing.iter().map(|i| format!("retry:{i}")).collect();
    assert_eq!(dead, want, "{dlq} holds the failed bodies, once each");
    assert_offsets_at_end(&server, topic, &[orderly], SENT);
    eprintln!(
        "{test}: {SENT} messages, {} failed {ATTEMPTS} times, dead-lettered by the orderly \
         group, in {:.1} s",
        failing.len(),
        started.elapsed().as_secs_f64()
    );
    drop(server);
}

#[test]
fn java_grpc_delay_and_transaction_messages_reach_the_simple_consumer() {
    let test = "java_grpc_delay_and_transaction_messages_reach_the_simple_consumer";
    let Some(classpath) = classpath_or_skip(test) else {
        return;
    };
    let dir = grpc_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let server = Server::start(&dir, &[]);
    let endpoints = grpc_addr(&server);
    let topic = "InteropJavaGrpcSpecial";
    let group = "CG_java_special";
    prepare(&server, topic, &[(group, false, 16)]);
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "specials",
        &["--endpoints", &endpoints, "specials", "--topic", topic],
    );
    assert!(ok, "specials failed:\n{lines:?}\n{}", server.stderr_tail());
    let mut deliver_at = BTreeMap::new();
    let mut expected = BTreeSet::new();
    let mut rolled_back = BTreeSet::new();
    for value in &lines {
        let (Some(body), Some(kind)) = (value["body"].as_str(), value["kind"].as_str()) else {
            continue;
        };
        match kind {
            "delay" => {
                deliver_at.insert(body.to_string(), value["deliver_ms"].as_i64().unwrap());
                expected.insert(body.to_string());
            }
            "commit" => {
                expected.insert(body.to_string());
            }
            _ => {
                rolled_back.insert(body.to_string());
            }
        }
    }
    assert_eq!((expected.len(), rolled_back.len()), (5, 1), "{lines:?}");
    let count = expected.len().to_string();
    let (lines, ok) = run_driver(
        &classpath,
        &dir,
        "simple",
        &[
            "--endpoints",
            &endpoints,
            "simple",
            "--topic",
            topic,
            "--group",
            group,
            "--count",
            &count,
        ],
    );
    assert!(ok, "simple failed:\n{lines:?}\n{}", server.stderr_tail());
    let mut seen = BTreeSet::new();
    for value in &lines {
        let Some(body) = value["body"].as_str() else {
            continue;
        };
        assert!(!rolled_back.contains(body), "rolled back {body} delivered");
        assert!(seen.insert(body.to_string()), "{body} twice");
        if let Some(at) = deliver_at.get(body) {
            let received = value["received_ms"].as_i64().unwrap();
            assert!(
                received >= at - 50,
                "{body} received {} ms early",
                at - received
            );
        }
    }
    assert_eq!(seen, expected, "delayed and committed messages, each once");
}
