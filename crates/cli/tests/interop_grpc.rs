//! Interop with the official RocketMQ 5.x gRPC client: PyPI `rocketmq-python-client` 5.1.2,
//! driven through `scripts/interop/py_grpc.py`, produces 1,000 messages (normal and FIFO, with
//! tag, keys and user properties) through `ferromq standalone`'s gRPC endpoint; ferromq's
//! Rust client (`LitePullConsumer`, remoting) then consumes them all and checks every body,
//! key, tag and property, and that each FIFO group stayed on one queue in send order.
//!
//! The client lives in `target/interop/venv-grpc`, installed by `scripts/interop/install.sh`.
//! When it is missing the test prints why and passes, unless `FERROMQ_INTEROP_REQUIRED` is set
//! (as `scripts/test` does after installing): then a missing install fails the test. Logs are
//! kept in `target/interop/runs/<test>/`; every child is killed when its guard drops and
//! every wait has a deadline.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::grpc_interop::{self, interop_dir, present_or_skip, repo_root, Guard};
use serde_json::Value;

/// Messages the Python producer sends.
const COUNT: usize = 1_000;
/// Deadline for the Python producer.
const PRODUCE_DEADLINE: Duration = Duration::from_secs(180);
/// Deadline for consuming everything back.
const CONSUME_DEADLINE: Duration = Duration::from_secs(90);

/// The venv's python, or `None` (after saying why) when the test should be skipped. Panics
/// when it is missing and `FERROMQ_INTEROP_REQUIRED` is set.
fn python_or_skip(test: &str) -> Option<PathBuf> {
    let python = interop_dir().join("venv-grpc").join("bin").join("python");
    let stamp = interop_dir().join("installed.stamp");
    let stamp_ok = fs::read_to_string(&stamp).is_ok_and(|s| s.contains("rocketmq-python-client"));
    let why = format!(
        "{} or a stamp naming rocketmq-python-client in {} is missing",
        python.display(),
        stamp.display()
    );
    present_or_skip(
        test,
        python.exists() && stamp_ok,
        &why,
        "scripts/interop/install.sh",
    )?;
    Some(python)
}

/// Starts `ferromq standalone` on free ports; returns it with its name server and gRPC
/// addresses.
fn start_standalone(data: &Path, log_dir: &Path) -> (Guard, String, String) {
    let standalone = grpc_interop::start_standalone(data, log_dir, &[]);
    (standalone.guard, standalone.namesrv, standalone.grpc)
}

/// What the producer says it sent, by body.
#[derive(Debug, Clone)]
struct Sent {
    index: usize,
    tag: String,
    keys: BTreeSet<String>,
    group: Option<String>,
    properties: BTreeMap<String, String>,
    message_id: String,
}

/// Runs `py_grpc.py` with `args` (bounded by [`PRODUCE_DEADLINE`]); its JSON lines. Panics
/// when it fails.
fn run_script(python: &Path, args: &[&str], log_dir: &Path, name: &str) -> Vec<Value> {
    let script = repo_root().join("scripts/interop/py_grpc.py");
    let stdout_path = log_dir.join(format!("{name}.stdout"));
    let stderr_path = log_dir.join(format!("{name}.stderr"));
    let child = Command::new(python)
        .arg(&script)
        .args(args)
        .env("HOME", log_dir)
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawning py_grpc.py");
    let mut guard = Guard(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().expect("waiting for py_grpc.py") {
            break status;
        }
        assert!(
            started.elapsed() < PRODUCE_DEADLINE,
            "py_grpc.py {name} still running after {PRODUCE_DEADLINE:?}; stderr:\n{}",
            fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    assert!(
        status.success(),
        "py_grpc.py {name} failed ({status}):\n{stdout}\n{stderr}"
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn produce(python: &Path, endpoints: &str, topic: &str, log_dir: &Path) -> BTreeMap<String, Sent> {
    produce_n(python, endpoints, topic, log_dir, COUNT)
}

/// Produces `n` messages with `py_grpc.py` (see its header); what it says it sent, by body.
fn produce_n(
    python: &Path,
    endpoints: &str,
    topic: &str,
    log_dir: &Path,
    n: usize,
) -> BTreeMap<String, Sent> {
    let count = n.to_string();
    let lines = run_script(
        python,
        &[
            "--endpoints",
            endpoints,
            "--topic",
            topic,
            "--count",
            &count,
        ],
        log_dir,
        "py_grpc_produce",
    );
    let mut sent = BTreeMap::new();
    for value in lines {
        if value.get("summary").is_some() {
            assert_eq!(value["summary"]["sent"], n, "{value}");
            continue;
        }
        assert!(value.get("error").is_none(), "a send failed: {value}");
        let strings = |v: &Value| -> BTreeSet<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect()
        };
        let body = value["body"].as_str().unwrap().to_string();
        let previous = sent.insert(
            body.clone(),
            Sent {
                index: value["index"].as_u64().unwrap() as usize,
                tag: value["tag"].as_str().unwrap().to_string(),
                keys: strings(&value["keys"]),
                group: value["group"].as_str().map(str::to_string),
                properties: value["properties"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect(),
                message_id: value["message_id"].as_str().unwrap().to_string(),
            },
        );
        assert!(previous.is_none(), "{body} reported twice");
    }
    assert_eq!(sent.len(), n, "one line per message");
    sent
}

#[test]
fn python_grpc_client_produces_1000_and_rust_client_reads_them_over_remoting() {
    use ferromq_client::{LitePullConsumer, LitePullConsumerConfig, MessageExt, StartPosition};
    let test = "python_grpc_client_produces_1000_and_rust_client_reads_them_over_remoting";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let log_dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&log_dir);
    fs::create_dir_all(&log_dir).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (standalone, namesrv, grpc) = start_standalone(data.path(), &log_dir);
    let topic = "InteropGrpcPy";
    let started = Instant::now();
    let sent = produce(&python, &grpc, topic, &log_dir);
    eprintln!(
        "{test}: {COUNT} messages sent over gRPC in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let received: Vec<MessageExt> = runtime.block_on(async {
        let consumer = LitePullConsumer::start(LitePullConsumerConfig {
            namesrv_addrs: vec![namesrv.parse().unwrap()],
            group: "CG_rust_from_py_grpc".into(),
            start_position: StartPosition::First,
            ..LitePullConsumerConfig::default()
        })
        .expect("lite pull consumer starts");
        consumer.subscribe(topic, "*").await.expect("subscribe");
        let mut received = Vec::new();
        let deadline = Instant::now() + CONSUME_DEADLINE;
        while received.len() < COUNT && Instant::now() < deadline {
            received.extend(
                consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .expect("poll"),
            );
        }
        let closed = consumer.shutdown().await.expect("shutdown");
        assert!(closed.is_complete(), "{closed:?}");
        received
    });
    assert_eq!(received.len(), COUNT, "{test}: every message once");
    let mut fifo_queues: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    let mut fifo_order: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for message in &received {
        let body = String::from_utf8(message.body.to_vec()).expect("UTF-8 body");
        let expected = sent
            .get(&body)
            .unwrap_or_else(|| panic!("{test}: unexpected body {body}"));
        assert!(seen.insert(body.clone()), "{test}: {body} delivered twice");
        assert_eq!(
            message.tags.as_deref(),
            Some(expected.tag.as_str()),
            "tag of {body}"
        );
        let keys: BTreeSet<String> = message.keys.iter().cloned().collect();
        assert_eq!(keys, expected.keys, "keys of {body}");
        for (name, value) in &expected.properties {
            assert_eq!(
                message.properties.get(name),
                Some(value),
                "{name} of {body}"
            );
        }
        // The client's message id is UNIQ_KEY: the id the gRPC client generated.
        assert_eq!(message.msg_id, expected.message_id, "message id of {body}");
        assert_eq!(
            message.properties.get("__SHARDINGKEY"),
            expected.group.as_ref()
        );
        if let Some(group) = &expected.group {
            fifo_queues
                .entry(group.clone())
                .or_default()
                .insert(message.queue_id);
            fifo_order
                .entry(group.clone())
                .or_default()
                .push((message.queue_offset, expected.index));
        }
    }
    assert_eq!(fifo_queues.len(), 4, "four FIFO groups");
    for (group, queues) in &fifo_queues {
        assert_eq!(
            queues.len(),
            1,
            "{test}: group {group} spread over {queues:?}"
        );
    }
    for (group, mut order) in fifo_order {
        order.sort();
        let indexes: Vec<usize> = order.iter().map(|(_, index)| *index).collect();
        let mut sorted = indexes.clone();
        sorted.sort();
        assert_eq!(
            indexes, sorted,
            "{test}: group {group} stored out of send order"
        );
    }
    eprintln!("{test}: {COUNT} messages read back with identical body, tag, keys and properties");
    drop(standalone);
}

#[test]
fn python_grpc_simple_consumer_receives_and_acks_1000() {
    let test = "python_grpc_simple_consumer_receives_and_acks_1000";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let log_dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&log_dir);
    fs::create_dir_all(&log_dir).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (standalone, _namesrv, grpc) = start_standalone(data.path(), &log_dir);
    let topic = "InteropGrpcPySimple";
    let sent = produce(&python, &grpc, topic, &log_dir);
    let count = COUNT.to_string();
    let started = Instant::now();
    let lines = run_script(
        &python,
        &[
            "--endpoints",
            &grpc,
            "--topic",
            topic,
            "--count",
            &count,
            "--consume",
            "CG_py_simple",
        ],
        &log_dir,
        "py_grpc_consume",
    );
    eprintln!(
        "{test}: {COUNT} messages received and acked over gRPC in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut seen = BTreeSet::new();
    for value in &lines {
        if let Some(summary) = value.get("summary") {
            assert_eq!(summary["received"], COUNT, "{value}");
            assert_eq!(summary["extra"], 0, "an acked message came back: {value}");
            continue;
        }
        let body = value["body"].as_str().unwrap().to_string();
        let expected = sent
            .get(&body)
            .unwrap_or_else(|| panic!("{test}: unexpected body {body}"));
        assert!(seen.insert(body.clone()), "{test}: {body} delivered twice");
        assert_eq!(value["tag"], expected.tag.as_str(), "tag of {body}");
        let keys: BTreeSet<String> = value["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, expected.keys, "keys of {body}");
        for (name, v) in &expected.properties {
            assert_eq!(value["properties"][name], v.as_str(), "{name} of {body}");
        }
        assert_eq!(
            value["message_id"],
            expected.message_id.as_str(),
            "id of {body}"
        );
        assert_eq!(
            value["group"].as_str(),
            expected.group.as_deref(),
            "group of {body}"
        );
        assert_eq!(value["attempt"], 1, "first delivery of {body}");
    }
    assert_eq!(seen.len(), COUNT, "{test}: every message once");
    drop(standalone);
}

/// Messages for the delay / transaction / push test.
const SMALL: usize = 1_000;

#[test]
fn python_grpc_delay_and_transaction_messages_reach_simple_and_push_consumers() {
    let test = "python_grpc_delay_and_transaction_messages_reach_simple_and_push_consumers";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let log_dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&log_dir);
    fs::create_dir_all(&log_dir).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (standalone, _namesrv, grpc) = start_standalone(data.path(), &log_dir);
    let topic = "InteropGrpcPySpecial";
    let sent = produce_n(&python, &grpc, topic, &log_dir, SMALL);
    let specials = run_script(
        &python,
        &["--endpoints", &grpc, "--topic", topic, "--specials"],
        &log_dir,
        "py_grpc_specials",
    );
    let mut deliver_at: BTreeMap<String, i64> = BTreeMap::new();
    let mut expected: BTreeSet<String> = sent.keys().cloned().collect();
    let mut rolled_back = BTreeSet::new();
    for value in &specials {
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
    assert_eq!(
        (deliver_at.len(), rolled_back.len()),
        (3, 1),
        "{specials:?}"
    );
    assert_eq!(expected.len(), SMALL + 5);
    let count = expected.len().to_string();
    for (mode, group) in [
        ("--consume", "CG_py_special_simple"),
        ("--push", "CG_py_special_push"),
    ] {
        let lines = run_script(
            &python,
            &[
                "--endpoints",
                &grpc,
                "--topic",
                topic,
                "--count",
                &count,
                mode,
                group,
            ],
            &log_dir,
            &format!("py_grpc{}", mode.replace('-', "_")),
        );
        let mut seen = BTreeSet::new();
        for value in &lines {
            if let Some(summary) = value.get("summary") {
                assert_eq!(summary["extra"], 0, "{mode}: a message came twice: {value}");
                continue;
            }
            let body = value["body"].as_str().unwrap().to_string();
            assert!(
                !rolled_back.contains(&body),
                "{mode}: rolled back {body} delivered"
            );
            assert!(expected.contains(&body), "{mode}: unexpected {body}");
            assert!(seen.insert(body.clone()), "{mode}: {body} twice");
            if let Some(at) = deliver_at.get(&body) {
                let received = value["received_ms"].as_i64().unwrap();
                assert!(
                    received >= at - 50,
                    "{mode}: {body} received {} ms early",
                    at - received
                );
            }
        }
        assert_eq!(seen, expected, "{mode}: every message exactly once");
        eprintln!("{test}: {mode} got all {} messages", seen.len());
    }
    drop(standalone);
}
