//! What the interop tests of the official RocketMQ 5.x gRPC clients share
//! (`interop_grpc.rs`: Python, `interop_go_grpc.rs`: Go, `interop_node_grpc.rs`: Node.js):
//! `ferromq standalone` with its gRPC address, the skip rule, running a driver with a deadline,
//! a FIFO (orderly) consumer group, and the checks of the Go and Node drivers' common scenario
//! (`scripts/interop/go-grpc/main.go`, `scripts/interop/node_grpc.js`).
//!
//! The scenario: the producer sends `COUNT` messages (odd ones FIFO in 4 message groups, tag,
//! two keys, user properties, body "<prefix>:<i>"), `DELAYED` DELAY messages due 2 s after
//! their send, `TRANSACTIONS` committed TRANSACTION messages, one rolled back and one left
//! undecided for the broker's check-back (the checker commits it). A consumer must then
//! receive every message but the rolled-back one exactly once, with its fields, on its
//! first attempt, no DELAY message before its time, and each message group in send order.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Normal and FIFO messages the drivers send.
pub const COUNT: usize = 1_000;
/// DELAY messages.
pub const DELAYED: usize = 3;
/// How far ahead the DELAY messages are due, ms.
pub const DELAY_MS: u64 = 2_000;
/// Committed TRANSACTION messages (plus one rolled back and one decided by a check-back).
pub const TRANSACTIONS: usize = 3;
/// FIFO message groups.
pub const FIFO_GROUPS: usize = 4;
/// How long `ferromq standalone` may take to print its addresses.
const STANDALONE_READY: Duration = Duration::from_secs(20);
/// Lines kept from one driver run (one per message, a few more).
const MAX_LINES: usize = 10_000;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

pub fn interop_dir() -> PathBuf {
    repo_root().join("target").join("interop")
}

/// Whether `FERROMQ_INTEROP_REQUIRED` is set (as `scripts/test` does): then a missing client
/// fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `Some(())` when `ok`; else says why and returns `None` (skip), or panics when
/// [`required`].
pub fn present_or_skip(test: &str, ok: bool, why: &str, install: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    if required() {
        panic!("{test}: {why} and FERROMQ_INTEROP_REQUIRED is set: run {install}");
    }
    eprintln!("SKIPPED {test}: {why}; run {install} (or scripts/test)");
    None
}

/// A fresh log directory `target/interop/runs/<test>`.
pub fn log_dir(test: &str) -> PathBuf {
    let dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A child killed when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `ferromq standalone` with its addresses.
pub struct GrpcStandalone {
    pub guard: Guard,
    pub namesrv: String,
    pub broker: String,
    pub grpc: String,
}

/// Starts `ferromq standalone` on free ports with `extra` flags; returns once it printed its
/// name server, broker and gRPC addresses (stdout and stderr lines), logging into `log_dir`.
pub fn start_standalone(data: &Path, log_dir: &Path, extra: &[&str]) -> GrpcStandalone {
    let stderr_path = log_dir.join("standalone.stderr");
    let stdout_path = log_dir.join("standalone.stdout");
    let child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["standalone", "--namesrv-port", "0", "--broker-port", "0"])
        .args(extra)
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawning ferromq standalone");
    let mut guard = Guard(child);
    let started = Instant::now();
    loop {
        let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
        let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
        let addresses = stdout.lines().find_map(|l| {
            let words: Vec<&str> = l
                .strip_prefix("ferromq standalone: namesrv ")?
                .split_whitespace()
                .collect();
            (words.get(1) == Some(&"broker")).then(|| (words[0].to_string(), words[2].to_string()))
        });
        let grpc = stderr.lines().find_map(|l| {
            l.strip_prefix("ferromq standalone: grpc ")
                .and_then(|rest| rest.split_whitespace().next())
        });
        if let (Some((namesrv, broker)), Some(grpc)) = (addresses, grpc) {
            return GrpcStandalone {
                guard,
                namesrv,
                broker,
                grpc: grpc.to_string(),
            };
        }
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("standalone exited ({status}) before printing its ports:\n{stderr}");
        }
        assert!(
            started.elapsed() < STANDALONE_READY,
            "standalone did not print its addresses in time:\n{stdout}\n{stderr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `command` (bounded by `deadline`) with stdout and stderr in `log_dir/<name>.*`; its
/// JSON lines. Panics when it fails, overruns, or prints a line that is not JSON.
pub fn run_driver(
    mut command: Command,
    log_dir: &Path,
    name: &str,
    deadline: Duration,
) -> Vec<Value> {
    let stdout_path = log_dir.join(format!("{name}.stdout"));
    let stderr_path = log_dir.join(format!("{name}.stderr"));
    let child = command
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
    let mut guard = Guard(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().expect("waiting for a driver") {
            break status;
        }
        assert!(
            started.elapsed() < deadline,
            "{name} still running after {deadline:?}; stdout tail:\n{}\nstderr tail:\n{}",
            tail(&stdout_path),
            tail(&stderr_path)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    assert!(
        status.success(),
        "{name} failed ({status}) after {:.1} s; stdout tail:\n{}\nstderr tail:\n{}\n(logs in {})",
        started.elapsed().as_secs_f64(),
        tail(&stdout_path),
        tail(&stderr_path),
        log_dir.display()
    );
    stdout
        .lines()
        .take(MAX_LINES)
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {line}"))
        })
        .collect()
}

/// The last lines of a file.
fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Makes `group` a FIFO (orderly) consumer group on the broker at `broker`
/// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with `consumeMessageOrderly`), so gRPC consumers of it
/// are told `fifo` and get each queue in order.
pub fn orderly_group(broker: &str, group: &str) {
    use ferromq_protocol::remoting::codes::{request, response};
    use ferromq_protocol::remoting::RemotingCommand;
    let body = serde_json::json!({
        "groupName": group,
        "consumeEnable": true,
        "consumeFromMinEnable": true,
        "consumeBroadcastEnable": false,
        "consumeMessageOrderly": true,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": true,
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = super::remoting::client(broker.parse().unwrap()).await;
        let command = RemotingCommand::new_request(
            request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            Default::default(),
        )
        .with_body(serde_json::to_vec(&body).unwrap());
        let reply = super::remoting::invoke(&client, command).await;
        assert_eq!(
            reply.code,
            response::SUCCESS,
            "create orderly group {group}: {}",
            super::remoting::remark(&reply)
        );
    });
}

/// One message a driver reported sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub kind: String,
    pub index: usize,
    pub tag: String,
    pub keys: BTreeSet<String>,
    pub group: Option<String>,
    pub properties: BTreeMap<String, String>,
    pub message_id: String,
    pub deliver_at_ms: Option<i64>,
    pub decision: Option<String>,
}

/// What a driver's produce run reported.
#[derive(Debug)]
pub struct Produced {
    /// Every acknowledged send, by body.
    pub sent: BTreeMap<String, Sent>,
    /// Bodies the checker was asked about, with its answer.
    pub checks: Vec<(String, String)>,
}

impl Produced {
    /// The bodies a consumer must receive: all but the rolled-back one.
    pub fn expected(&self) -> BTreeMap<&str, &Sent> {
        self.sent
            .iter()
            .filter(|(_, s)| s.decision.as_deref() != Some("rollback"))
            .map(|(b, s)| (b.as_str(), s))
            .collect()
    }
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

/// Reads the produce lines of the scenario (module doc); asserts every send was acknowledged
/// and the undecided transaction was checked back and committed.
pub fn produced(test: &str, lines: &[Value], prefix: &str) -> Produced {
    let mut sent = BTreeMap::new();
    let mut checks = Vec::new();
    let mut summary = None;
    for value in lines {
        if let Some(s) = value.get("summary") {
            summary = Some(s.clone());
            continue;
        }
        assert!(
            value.get("error").is_none(),
            "{test}: a send failed: {value}"
        );
        if let Some(body) = value.get("checked") {
            checks.push((
                body.as_str().unwrap().to_string(),
                value["resolution"].as_str().unwrap().to_string(),
            ));
            continue;
        }
        let body = value["body"].as_str().unwrap().to_string();
        let one = Sent {
            kind: value["kind"].as_str().unwrap().to_string(),
            index: value["index"].as_u64().unwrap() as usize,
            tag: value["tag"].as_str().unwrap().to_string(),
            keys: strings(&value["keys"]),
            group: value["group"].as_str().map(str::to_string),
            properties: string_map(&value["properties"]),
            message_id: value["message_id"].as_str().unwrap().to_string(),
            deliver_at_ms: value["deliver_at_ms"].as_i64(),
            decision: value["decision"].as_str().map(str::to_string),
        };
        assert!(!one.message_id.is_empty(), "{test}: no message id: {value}");
        assert!(
            sent.insert(body.clone(), one).is_none(),
            "{test}: {body} reported twice"
        );
    }
    let total = COUNT + DELAYED + TRANSACTIONS + 2;
    let summary = summary.unwrap_or_else(|| panic!("{test}: no summary line"));
    assert_eq!(summary["sent"], total, "{test}: {summary}");
    assert_eq!(summary["failed"], 0, "{test}: {summary}");
    assert_eq!(sent.len(), total, "{test}: one line per send");
    let kinds = |k: &str| sent.values().filter(|s| s.kind == k).count();
    assert_eq!(
        (
            kinds("normal"),
            kinds("fifo"),
            kinds("delay"),
            kinds("transaction")
        ),
        (COUNT / 2, COUNT / 2, DELAYED, TRANSACTIONS + 2),
        "{test}: kinds sent"
    );
    let orphan = format!("{prefix}:tx-orphan");
    assert!(
        checks.iter().any(|(b, r)| *b == orphan && r == "commit"),
        "{test}: the broker never checked back the undecided transaction: {checks:?}"
    );
    let rollback = format!("{prefix}:tx-rollback");
    assert_eq!(
        sent[&rollback].decision.as_deref(),
        Some("rollback"),
        "{test}"
    );
    Produced { sent, checks }
}

/// What one consumer run showed.
#[derive(Debug, Default)]
pub struct Consumed {
    /// Deliveries checked.
    pub received: usize,
    /// Latest delivery of a DELAY message after its due time, ms.
    pub delay_lateness_max_ms: i64,
    /// Earliest (the margin by which none came early), ms.
    pub delay_lateness_min_ms: i64,
}

/// Checks a consumer's lines against what was produced (module doc): every expected body
/// exactly once with its tag, keys, user properties, message id, message group and delivery
/// time, first attempt; the rolled-back one never; DELAY ones not before their time; each
/// FIFO message group in send order (the lines' order is the order the listener or the
/// receive loop saw them).
pub fn check_consumed(test: &str, label: &str, lines: &[Value], produced: &Produced) -> Consumed {
    let expected = produced.expected();
    let mut seen = BTreeSet::new();
    let mut order: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut out = Consumed {
        delay_lateness_min_ms: i64::MAX,
        ..Consumed::default()
    };
    let mut summary = None;
    for value in lines {
        if let Some(s) = value.get("summary") {
            summary = Some(s.clone());
            continue;
        }
        assert!(
            value.get("ack_error").is_none() && value.get("extra").is_none(),
            "{test} {label}: {value}"
        );
        let body = value["body"].as_str().unwrap().to_string();
        let sent = *expected.get(body.as_str()).unwrap_or_else(|| {
            panic!("{test} {label}: unexpected body {body} (rolled back or never sent): {value}")
        });
        assert!(
            seen.insert(body.clone()),
            "{test} {label}: {body} delivered twice"
        );
        assert_eq!(
            value["tag"],
            sent.tag.as_str(),
            "{test} {label}: tag of {body}"
        );
        assert_eq!(
            strings(&value["keys"]),
            sent.keys,
            "{test} {label}: keys of {body}"
        );
        assert_eq!(
            string_map(&value["properties"]),
            sent.properties,
            "{test} {label}: user properties of {body}"
        );
        assert_eq!(
            value["message_id"],
            sent.message_id.as_str(),
            "{test} {label}: message id of {body}"
        );
        assert_eq!(
            value["group"].as_str(),
            sent.group.as_deref(),
            "{test} {label}: message group of {body}"
        );
        assert_eq!(
            value["attempt"], 1,
            "{test} {label}: first delivery of {body}"
        );
        assert_eq!(
            value["delivery_timestamp_ms"].as_i64(),
            sent.deliver_at_ms,
            "{test} {label}: delivery timestamp of {body} ({})",
            sent.kind
        );
        if let Some(due) = sent.deliver_at_ms {
            let at = value["received_at_ms"].as_i64().unwrap();
            assert!(
                at >= due,
                "{test} {label}: {body} came {} ms before its delivery time",
                due - at
            );
            out.delay_lateness_max_ms = out.delay_lateness_max_ms.max(at - due);
            out.delay_lateness_min_ms = out.delay_lateness_min_ms.min(at - due);
        }
        if let Some(group) = &sent.group {
            order.entry(group.clone()).or_default().push(sent.index);
        }
    }
    let summary = summary.unwrap_or_else(|| panic!("{test} {label}: no summary line"));
    assert_eq!(
        summary["received"],
        expected.len(),
        "{test} {label}: {summary}"
    );
    assert_eq!(
        summary["extra"], 0,
        "{test} {label}: an acked message came back: {summary}"
    );
    assert_eq!(
        seen.len(),
        expected.len(),
        "{test} {label}: every message once"
    );
    assert_eq!(order.len(), FIFO_GROUPS, "{test} {label}: FIFO groups seen");
    for (group, indexes) in &order {
        let mut sorted = indexes.clone();
        sorted.sort_unstable();
        assert_eq!(
            indexes, &sorted,
            "{test} {label}: message group {group} out of send order"
        );
    }
    out.received = seen.len();
    out
}
