//! Interop with the official RocketMQ 5.x Rust gRPC client, crates.io `rocketmq` 5.0.0
//! (apache/rocketmq-clients `rust/`), against `ferromq standalone`'s gRPC endpoint, through
//! the driver `scripts/interop/rust-grpc/` built by `scripts/interop/install-rust-grpc.sh`
//! into `target/interop/rust-grpc/release/ferromq-rust-grpc-interop` (a cargo project of its
//! own, outside the workspace, so its dependency tree stays out of ferromq's builds).
//!
//! A Producer sends 1,000 messages (half FIFO over four message groups; tag, keys, user
//! properties, body `<prefix>:<i>`); a SimpleConsumer receives and acks them all, then one
//! more receive must find nothing. Every body must arrive exactly once with the tag, keys,
//! properties, message id and message group the producer sent, on its first attempt.
//!
//! When the driver is missing the test prints why and passes, unless `FERROMQ_INTEROP_REQUIRED`
//! is set (as `scripts/test` does after installing): then a missing driver fails the test.
//! Logs (stdout and stderr of every process; the client logs to stderr) are kept in
//! `target/interop/runs-rust-grpc/<test>/`; every child is killed when its guard drops and
//! every wait has a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Messages the producer sends.
const COUNT: usize = 1_000;
/// FIFO message groups among them (the odd indexes).
const FIFO_GROUPS: usize = 4;
/// How long `ferromq standalone` may take to print its ports.
const STANDALONE_READY: Duration = Duration::from_secs(20);
/// Deadline for the producer run.
const PRODUCE_DEADLINE: Duration = Duration::from_secs(60);
/// The consumer's own budget for receiving everything (`--timeout`).
const CONSUME_TIMEOUT_S: u64 = 45;
/// The consumer's long-polling timeout (`--long-polling`): the final, empty receive is held
/// this long.
const LONG_POLLING_S: u64 = 5;
/// Deadline for the consumer run: its budget, the final receive and start/shutdown.
const CONSUME_DEADLINE: Duration = Duration::from_secs(CONSUME_TIMEOUT_S + 20);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The driver, or `None` (after saying why) when the test should be skipped. Panics when it
/// is missing and `FERROMQ_INTEROP_REQUIRED` is set.
fn driver_or_skip(test: &str) -> Option<PathBuf> {
    let dir = repo_root().join("target/interop/rust-grpc");
    let driver = dir.join("release/ferromq-rust-grpc-interop");
    let stamp = dir.join("installed.stamp");
    let stamp_ok = fs::read_to_string(&stamp).is_ok_and(|s| s.contains("rocketmq=5.0.0"));
    if driver.exists() && stamp_ok {
        return Some(driver);
    }
    let why = format!(
        "{} or a stamp naming rocketmq=5.0.0 in {} is missing",
        driver.display(),
        stamp.display()
    );
    assert!(
        !required(),
        "{test}: {why} and FERROMQ_INTEROP_REQUIRED is set: run scripts/interop/install-rust-grpc.sh"
    );
    eprintln!(
        "SKIPPED {test}: {why}; run scripts/interop/install-rust-grpc.sh (or scripts/test, \
         which builds it and sets FERROMQ_INTEROP_REQUIRED=1)"
    );
    None
}

/// A child killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ferromq standalone` on free ports; returns it with its gRPC address (read from the
/// "ferromq standalone: grpc ADDR" line of its stderr).
fn start_standalone(data: &Path, log_dir: &Path) -> (Guard, String) {
    let stderr_path = log_dir.join("standalone.stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["standalone", "--namesrv-port", "0", "--broker-port", "0"])
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(File::create(log_dir.join("standalone.stdout")).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawning ferromq standalone");
    let mut guard = Guard(child);
    let started = Instant::now();
    loop {
        let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
        let grpc = stderr.lines().find_map(|l| {
            l.strip_prefix("ferromq standalone: grpc ")
                .and_then(|rest| rest.split_whitespace().next())
        });
        if let Some(grpc) = grpc {
            return (guard, grpc.to_string());
        }
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("standalone exited ({status}) before printing its ports:\n{stderr}");
        }
        assert!(
            started.elapsed() < STANDALONE_READY,
            "standalone did not print its gRPC address in time:\n{stderr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tail(path: &Path, max: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

/// Runs the driver with `args` (killed after `deadline`); its JSON lines. Panics when it
/// fails or prints something that is not JSON.
fn run_driver(
    driver: &Path,
    args: &[&str],
    log_dir: &Path,
    name: &str,
    deadline: Duration,
) -> Vec<Value> {
    let stdout_path = log_dir.join(format!("{name}.stdout"));
    let stderr_path = log_dir.join(format!("{name}.stderr"));
    let child = Command::new(driver)
        .args(args)
        .current_dir(log_dir)
        .env("HOME", log_dir)
        .env("NO_PROXY", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", driver.display()));
    let mut guard = Guard(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().expect("waiting for the driver") {
            break status;
        }
        assert!(
            started.elapsed() < deadline,
            "driver {name} still running after {deadline:?}; stderr:\n{}\nstandalone:\n{}",
            tail(&stderr_path, 4000),
            tail(&log_dir.join("standalone.stderr"), 3000)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    assert!(
        status.success(),
        "driver {name} failed ({status}):\n{}\nstderr:\n{}\nstandalone:\n{}",
        tail(&stdout_path, 3000),
        tail(&stderr_path, 4000),
        tail(&log_dir.join("standalone.stderr"), 3000)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}: {line:?}")))
        .collect()
}

/// What the producer says it sent, by body.
#[derive(Debug, Clone)]
struct Sent {
    tag: String,
    keys: BTreeSet<String>,
    properties: BTreeMap<String, String>,
    group: Option<String>,
    message_id: String,
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("an array: {value}"))
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("an object: {value}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// Produces [`COUNT`] messages; what the driver says it sent, by body.
fn produce(
    driver: &Path,
    grpc: &str,
    topic: &str,
    prefix: &str,
    log_dir: &Path,
) -> BTreeMap<String, Sent> {
    let count = COUNT.to_string();
    let groups = FIFO_GROUPS.to_string();
    let lines = run_driver(
        driver,
        &[
            "produce",
            "--endpoints",
            grpc,
            "--topic",
            topic,
            "--prefix",
            prefix,
            "--count",
            &count,
            "--fifo-groups",
            &groups,
        ],
        log_dir,
        "produce",
        PRODUCE_DEADLINE,
    );
    let mut sent = BTreeMap::new();
    let mut summary = None;
    for value in lines {
        if let Some(s) = value.get("summary") {
            summary = Some(s.clone());
            continue;
        }
        assert!(value.get("error").is_none(), "a send failed: {value}");
        let body = value["body"].as_str().unwrap().to_string();
        let message_id = value["message_id"].as_str().unwrap().to_string();
        assert!(!message_id.is_empty(), "empty message id: {value}");
        let previous = sent.insert(
            body.clone(),
            Sent {
                tag: value["tag"].as_str().unwrap().to_string(),
                keys: strings(&value["keys"]),
                properties: string_map(&value["properties"]),
                group: value["group"].as_str().map(str::to_string),
                message_id,
            },
        );
        assert!(previous.is_none(), "{body} reported twice");
    }
    let summary = summary.expect("a produce summary");
    assert_eq!(summary["sent"], COUNT, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["shutdown_error"], Value::Null, "{summary}");
    assert_eq!(sent.len(), COUNT, "one line per message");
    eprintln!(
        "produce: {COUNT} messages sent in {:.1} s",
        summary["elapsed_s"].as_f64().unwrap_or(f64::NAN)
    );
    sent
}

/// Runs the driver's `consume` of `count` messages; its JSON lines.
fn consume(
    driver: &Path,
    grpc: &str,
    topic: &str,
    group: &str,
    count: usize,
    log_dir: &Path,
) -> Vec<Value> {
    let count = count.to_string();
    let timeout = CONSUME_TIMEOUT_S.to_string();
    let polling = LONG_POLLING_S.to_string();
    run_driver(
        driver,
        &[
            "consume",
            "--endpoints",
            grpc,
            "--topic",
            topic,
            "--group",
            group,
            "--count",
            &count,
            "--timeout",
            &timeout,
            "--long-polling",
            &polling,
        ],
        log_dir,
        &format!("consume-{group}"),
        CONSUME_DEADLINE,
    )
}

/// Checks a consume summary: `count` received, no duplicate, no error, and a final receive
/// that found nothing after holding for the long-polling timeout yet answered before the
/// client's deadline (which the client sets to the same timeout). How long it held.
fn check_consume_summary(summary: Option<Value>, count: usize) -> f64 {
    let summary = summary.expect("a consume summary");
    assert_eq!(summary["received"], count, "{summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");
    assert_eq!(summary["receive_errors"], 0, "{summary}");
    assert_eq!(summary["ack_errors"], 0, "{summary}");
    assert_eq!(summary["final_error"], Value::Null, "{summary}");
    assert_eq!(summary["final_empty"], true, "{summary}");
    assert_eq!(summary["shutdown_error"], Value::Null, "{summary}");
    let held = summary["final_receive_s"].as_f64().unwrap();
    assert!(
        held > LONG_POLLING_S as f64 - 2.0 && held < LONG_POLLING_S as f64 + 1.0,
        "the final receive took {held:.1} s: {summary}"
    );
    held
}

#[test]
fn rust_grpc_client_produces_receives_and_acks_1000() {
    let test = "rust_grpc_client_produces_receives_and_acks_1000";
    let Some(driver) = driver_or_skip(test) else {
        return;
    };
    let log_dir = repo_root().join("target/interop/runs-rust-grpc").join(test);
    let _ = fs::remove_dir_all(&log_dir);
    fs::create_dir_all(&log_dir).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (standalone, grpc) = start_standalone(data.path(), &log_dir);
    eprintln!("{test}: standalone gRPC at {grpc}");
    let topic = "InteropRustGrpc";
    let started = Instant::now();
    let sent = produce(&driver, &grpc, topic, "rs", &log_dir);
    let groups: BTreeSet<&str> = sent.values().filter_map(|s| s.group.as_deref()).collect();
    assert_eq!(groups.len(), FIFO_GROUPS, "{groups:?}");

    let consume_started = Instant::now();
    let lines = consume(&driver, &grpc, topic, "CG_rust_grpc", COUNT, &log_dir);
    let mut seen = BTreeSet::new();
    let mut summary = None;
    for value in &lines {
        if let Some(s) = value.get("summary") {
            summary = Some(s.clone());
            continue;
        }
        assert!(
            value.get("extra").is_none(),
            "the final receive got {value}"
        );
        assert!(
            value.get("receive_error").is_none(),
            "a receive failed: {value}"
        );
        let body = value["body"].as_str().unwrap().to_string();
        let expected = sent
            .get(&body)
            .unwrap_or_else(|| panic!("{test}: unexpected body {body}"));
        assert!(seen.insert(body.clone()), "{test}: {body} delivered twice");
        assert_eq!(value["topic"], topic, "topic of {body}");
        assert_eq!(value["tag"], expected.tag.as_str(), "tag of {body}");
        assert_eq!(strings(&value["keys"]), expected.keys, "keys of {body}");
        assert_eq!(
            string_map(&value["properties"]),
            expected.properties,
            "user properties of {body}"
        );
        assert_eq!(
            value["message_id"],
            expected.message_id.as_str(),
            "message id of {body}"
        );
        assert_eq!(
            value["group"].as_str(),
            expected.group.as_deref(),
            "message group of {body}"
        );
        assert_eq!(value["attempt"], 1, "first delivery of {body}");
        assert_eq!(value["acked"], true, "ack of {body}");
    }
    let held = check_consume_summary(summary, COUNT);
    assert_eq!(seen.len(), COUNT, "{test}: every message once");
    eprintln!(
        "{test}: {COUNT} received and acked in {:.1} s (final empty receive {held:.1} s); \
         total {:.1} s",
        consume_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(standalone);
}

/// Normal messages sent next to the special ones.
const PLAIN: usize = 20;

#[test]
fn rust_grpc_delay_and_transaction_messages_reach_the_simple_consumer() {
    let test = "rust_grpc_delay_and_transaction_messages_reach_the_simple_consumer";
    let Some(driver) = driver_or_skip(test) else {
        return;
    };
    let log_dir = repo_root().join("target/interop/runs-rust-grpc").join(test);
    let _ = fs::remove_dir_all(&log_dir);
    fs::create_dir_all(&log_dir).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (standalone, grpc) = start_standalone(data.path(), &log_dir);
    let topic = "InteropRustGrpcSpecial";
    let plain = PLAIN.to_string();
    let lines = run_driver(
        &driver,
        &[
            "produce",
            "--endpoints",
            &grpc,
            "--topic",
            topic,
            "--prefix",
            "plain",
            "--count",
            &plain,
            "--fifo-groups",
            "0",
        ],
        &log_dir,
        "produce",
        PRODUCE_DEADLINE,
    );
    let mut expected: BTreeSet<String> = lines
        .iter()
        .filter_map(|v| v["body"].as_str().map(str::to_string))
        .collect();
    assert_eq!(expected.len(), PLAIN, "{lines:?}");
    let specials = run_driver(
        &driver,
        &[
            "specials",
            "--endpoints",
            &grpc,
            "--topic",
            topic,
            "--prefix",
            "sp",
            "--delay",
            "3",
        ],
        &log_dir,
        "specials",
        PRODUCE_DEADLINE,
    );
    let mut deliver_at = BTreeMap::new();
    let mut rolled_back = BTreeSet::new();
    for value in &specials {
        if let Some(summary) = value.get("summary") {
            assert_eq!(summary["sent"], 6, "{value}");
            assert_eq!(summary["failed"], 0, "{value}");
            continue;
        }
        assert!(
            value.get("error").is_none(),
            "a special send failed: {value}"
        );
        let body = value["body"].as_str().unwrap().to_string();
        match value["kind"].as_str().unwrap() {
            "delay" => {
                deliver_at.insert(body.clone(), value["deliver_ms"].as_i64().unwrap());
                expected.insert(body);
            }
            "commit" => {
                expected.insert(body);
            }
            _ => {
                rolled_back.insert(body);
            }
        }
    }
    assert_eq!(
        (deliver_at.len(), rolled_back.len()),
        (3, 1),
        "{specials:?}"
    );
    assert_eq!(expected.len(), PLAIN + 5);

    let lines = consume(
        &driver,
        &grpc,
        topic,
        "CG_rust_grpc_special",
        expected.len(),
        &log_dir,
    );
    let mut seen = BTreeSet::new();
    let mut summary = None;
    for value in &lines {
        if let Some(s) = value.get("summary") {
            summary = Some(s.clone());
            continue;
        }
        assert!(
            value.get("extra").is_none(),
            "the final receive got {value}"
        );
        assert!(value.get("receive_error").is_none(), "{value}");
        let body = value["body"].as_str().unwrap().to_string();
        assert!(!rolled_back.contains(&body), "rolled back {body} delivered");
        assert!(expected.contains(&body), "unexpected {body}");
        assert!(seen.insert(body.clone()), "{body} twice");
        assert_eq!(value["acked"], true, "ack of {body}");
        if let Some(at) = deliver_at.get(&body) {
            let received = value["received_ms"].as_i64().unwrap();
            assert!(
                received >= at - 50,
                "{body} received {} ms before its time",
                at - received
            );
        }
    }
    check_consume_summary(summary, expected.len());
    assert_eq!(seen, expected, "every message exactly once");
    eprintln!(
        "{test}: {PLAIN} normal, 3 delayed and 2 committed received once; the rolled-back one never"
    );
    drop(standalone);
}
