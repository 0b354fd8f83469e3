//! Interop with the official Go remoting client, `github.com/apache/rocketmq-client-go/v2`
//! (pinned in `scripts/interop/go/go.mod`), through the driver `scripts/interop/go/main.go`
//! built by `scripts/interop/install-go.sh` into `target/interop/go/bin/ferromq-go-interop`,
//! against `ferromq standalone`.
//!
//! When the driver is missing the tests print why and pass, unless `FERROMQ_INTEROP_REQUIRED`
//! is set (as `scripts/test` does after installing): then a missing driver fails the test.
//!
//! Deliveries are observed through the driver's JSON lines; after each scenario the test asks
//! the name server (GET_ROUTEINFO_BY_TOPIC) and the broker (GET_MAX_OFFSET,
//! QUERY_CONSUMER_OFFSET) directly that the group's committed offsets reached the end of every
//! queue. Logs (the Go client's own log, stderr of every process) are kept in
//! `target/interop/runs-go/<test>/`. Every child is killed when its guard drops, every wait
//! has a deadline, and every address is 127.0.0.1.
//!
//! The Go producer relies on auto-creation: the first send to a new topic finds no route, the
//! client falls back to the TBW102 route and the broker creates the topic (4 queues).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use common::LoggedStandalone;
use serde_json::Value;

/// Deadline for one producer run.
const PRODUCE_DEADLINE: Duration = Duration::from_secs(90);
/// The consumers' own timeout; the harness allows this plus `SHUTDOWN_SLACK`.
const CONSUME_TIMEOUT_S: u64 = 90;
const SHUTDOWN_SLACK: Duration = Duration::from_secs(30);
/// How long committed offsets may take to reach the end of every queue after the consumers
/// stopped (the Go client persists offsets every 5 s and on Shutdown).
const OFFSETS_SETTLE: Duration = Duration::from_secs(15);
/// Bound on one request of the offset check.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages seen by both consumers of one group that the two-consumer test tolerates (a queue
/// moving between them during a rebalance is re-read from its last commit).
const MAX_OVERLAP: usize = 200;
/// Time for the members of a group to rebalance after one joins (the broker sends
/// NOTIFY_CONSUMER_IDS_CHANGED; the Go client rebalances on it at once).
const REBALANCE_SETTLE: Duration = Duration::from_secs(5);
/// Bound on the lines kept from one child's stdout (one per delivery plus a summary).
const MAX_LINES: usize = 20_000;

// ---------------------------------------------------------------------------------------------
// Locations and the skip rule

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn driver_path() -> PathBuf {
    repo_root().join("target/interop/go/bin/ferromq-go-interop")
}

fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The driver, or `None` (after saying why) when the test should be skipped. Panics when it is
/// missing and `FERROMQ_INTEROP_REQUIRED` is set.
fn driver_or_skip(test: &str) -> Option<PathBuf> {
    let driver = driver_path();
    let stamp = repo_root().join("target/interop/go/installed.stamp");
    if driver.exists() && stamp.exists() {
        return Some(driver);
    }
    let why = format!("{} or {} is missing", driver.display(), stamp.display());
    assert!(
        !required(),
        "{test}: the Go interop driver is not built ({why}) and FERROMQ_INTEROP_REQUIRED is set: \
         run scripts/interop/install-go.sh"
    );
    eprintln!(
        "SKIPPED {test}: Go interop driver not built ({why}); run scripts/interop/install-go.sh \
         (or scripts/test, which builds it and sets FERROMQ_INTEROP_REQUIRED=1)"
    );
    None
}

fn tail(path: &Path, max: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    match text[start..].trim() {
        "" => "(empty)".to_string(),
        t => t.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Driver processes

/// One scenario's standalone, run directory and driver.
struct Ctx {
    test: &'static str,
    driver: PathBuf,
    dir: PathBuf,
    runs: u32,
    server: LoggedStandalone,
    _data: tempfile::TempDir,
}

impl Ctx {
    fn new(test: &'static str) -> Option<Ctx> {
        let driver = driver_or_skip(test)?;
        let dir = repo_root().join("target/interop/runs-go").join(test);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating the run directory");
        let data = tempfile::tempdir().expect("temp data dir");
        let server = LoggedStandalone::start("", data.path(), &dir.join("standalone.stderr"));
        eprintln!(
            "{test}: standalone namesrv {} broker {}",
            server.namesrv, server.broker
        );
        Some(Ctx {
            test,
            driver,
            dir,
            runs: 0,
            server,
            _data: data,
        })
    }

    fn spawn(&mut self, name: &str, args: &[String]) -> GoProc {
        self.runs += 1;
        let stem = format!("{:02}-{name}", self.runs);
        let stderr_path = self.dir.join(format!("{stem}.stderr"));
        let stderr = File::create(&stderr_path).expect("creating a stderr file");
        let mut child = Command::new(&self.driver)
            .args(args)
            .arg("--log")
            .arg(self.dir.join(format!("{stem}.client.log")))
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("NO_PROXY", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.driver.display()));
        let lines = spawn_line_reader(child.stdout.take().expect("driver stdout"));
        GoProc {
            name: format!("go {name}"),
            child,
            lines,
            output: Vec::new(),
            eof: false,
            stderr_path,
        }
    }

    /// Sends `count` messages (body `{prefix}:{i}`, key `{prefix}-{i}`, tag `tag`), `batch`
    /// per request, and asserts all were acknowledged.
    fn produce(&mut self, topic: &str, tag: &str, prefix: &str, count: u32, batch: u32) {
        let args = strings(&[
            "produce",
            "--namesrv",
            &self.server.namesrv,
            "--topic",
            topic,
            "--group",
            &format!("PG_go_{prefix}"),
            "--tag",
            tag,
            "--prefix",
            prefix,
            "--count",
            &count.to_string(),
            "--batch",
            &batch.to_string(),
            "--instance",
            &format!("producer-{prefix}"),
        ]);
        let mut proc = self.spawn(&format!("produce-{prefix}"), &args);
        let summary = proc.finish(PRODUCE_DEADLINE);
        assert!(
            summary["sent"].as_u64() == Some(u64::from(count)) && summary["failed"] == 0,
            "{}: summary {summary}\n{}\n{}",
            proc.name,
            proc.stderr_tail(),
            self.stderr_tail()
        );
        let requests = u64::from(count.div_ceil(batch));
        assert_eq!(summary["requests"].as_u64(), Some(requests), "{summary}");
        eprintln!(
            "{}: sent {count} to {topic} in {requests} requests ({batch} a request) in {} s",
            proc.name, summary["elapsed_s"]
        );
    }

    /// Starts a cluster-mode push consumer of `group` printing one event per delivery.
    fn consumer(&mut self, topic: &str, group: &str, instance: &str, extra: &[&str]) -> GoProc {
        let mut args = strings(&[
            "consume",
            "--namesrv",
            &self.server.namesrv,
            "--topic",
            topic,
            "--group",
            group,
            "--instance",
            instance,
            "--events",
            "--timeout",
            &CONSUME_TIMEOUT_S.to_string(),
        ]);
        args.extend(strings(extra));
        self.spawn(&format!("consume-{instance}"), &args)
    }

    fn stderr_tail(&self) -> String {
        format!(
            "standalone stderr ({}):\n{}",
            self.dir.join("standalone.stderr").display(),
            tail(&self.dir.join("standalone.stderr"), 3000)
        )
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Lines of a child's stdout, read on a thread so the pipe never fills.
fn spawn_line_reader(stdout: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A driver process; killed (SIGKILL) when dropped.
struct GoProc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    output: Vec<Value>,
    eof: bool,
    stderr_path: PathBuf,
}

impl GoProc {
    /// Moves the lines printed so far into `output` (at most `MAX_LINES`).
    fn pump(&mut self) {
        loop {
            match self.lines.try_recv() {
                Ok(line) => {
                    assert!(
                        self.output.len() < MAX_LINES,
                        "{}: more than {MAX_LINES} lines of output",
                        self.name
                    );
                    let value = match serde_json::from_str(&line) {
                        Ok(value) => value,
                        Err(_) => Value::String(line),
                    };
                    self.output.push(value);
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }

    fn stderr_tail(&self) -> String {
        format!(
            "{} stderr ({}):\n{}",
            self.name,
            self.stderr_path.display(),
            tail(&self.stderr_path, 3000)
        )
    }

    /// The `msg` events so far.
    fn messages(&mut self) -> Vec<Value> {
        self.pump();
        self.output
            .iter()
            .filter(|v| v["event"] == "msg")
            .cloned()
            .collect()
    }

    /// Bodies of the `msg` events so far, with how often each arrived.
    fn bodies(&mut self) -> BTreeMap<String, u64> {
        let mut bodies = BTreeMap::new();
        for v in self.messages() {
            if let Some(body) = v["body"].as_str() {
                *bodies.entry(body.to_string()).or_insert(0) += 1;
            }
        }
        bodies
    }

    fn has_event(&mut self, event: &str) -> bool {
        self.pump();
        self.output.iter().any(|v| v["event"] == event)
    }

    /// Waits for the process to exit on its own and returns its summary (the last JSON object
    /// without an `event` field).
    fn finish(&mut self, deadline: Duration) -> Value {
        let start = Instant::now();
        loop {
            self.pump();
            if self.eof && matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            if start.elapsed() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{}: did not finish within {} s (killed); last output: {:?}\n{}",
                    self.name,
                    deadline.as_secs(),
                    self.output.iter().rev().take(3).collect::<Vec<_>>(),
                    self.stderr_tail()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        let status = self.child.wait().expect("reaping a driver");
        let summary = self
            .output
            .iter()
            .rev()
            .find(|v| v.is_object() && v.get("event").is_none())
            .cloned();
        match summary {
            Some(summary) if summary.get("error").is_none() => summary,
            Some(summary) => panic!(
                "{}: failed ({status}): {}\n{}",
                self.name,
                summary["error"],
                self.stderr_tail()
            ),
            None => panic!(
                "{}: exited ({status}) without a JSON summary; stdout tail {:?}\n{}",
                self.name,
                self.output.iter().rev().take(3).collect::<Vec<_>>(),
                self.stderr_tail()
            ),
        }
    }

    /// SIGTERM (the driver then shuts the consumer down, persisting its offsets) and the
    /// summary.
    fn stop(&mut self) -> Value {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish(SHUTDOWN_SLACK)
    }
}

impl Drop for GoProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts a consumer summary saw only well-formed messages: body `{p}:{i}`, key `{p}-{i}`,
/// and the expected tag.
fn assert_clean(name: &str, summary: &Value) {
    for field in ["key_mismatches", "tag_mismatches", "bad_bodies"] {
        assert_eq!(
            summary[field].as_u64(),
            Some(0),
            "{name}: {field} in {summary} (examples: {})",
            summary["examples"]
        );
    }
}

/// Asserts every `msg` event carries key `{p}-{i}` for body `{p}:{i}` and the tag `tag`.
fn assert_keys_and_tags(name: &str, messages: &[Value], tag: &str) {
    for m in messages {
        let body = m["body"].as_str().unwrap_or_default();
        let (prefix, index) = body
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{name}: malformed body in {m}"));
        assert_eq!(m["key"], format!("{prefix}-{index}"), "{name}: {m}");
        assert_eq!(m["tag"], tag, "{name}: {m}");
    }
}

fn expected_bodies(prefix: &str, count: u32) -> BTreeSet<String> {
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

fn with_prefix<'a>(bodies: impl IntoIterator<Item = &'a String>, prefix: &str) -> BTreeSet<String> {
    let p = format!("{prefix}:");
    bodies
        .into_iter()
        .filter(|b| b.starts_with(&p))
        .cloned()
        .collect()
}

fn describe_missing(expected: &BTreeSet<String>, got: &BTreeSet<String>) -> String {
    let missing: Vec<&String> = expected.difference(got).take(10).collect();
    let extra: Vec<&String> = got.difference(expected).take(10).collect();
    format!(
        "{} of {} received; first missing {missing:?}; unexpected {extra:?}",
        got.intersection(expected).count(),
        expected.len()
    )
}

// ---------------------------------------------------------------------------------------------
// The broker's view of a group's progress

/// One queue: GET_MAX_OFFSET and the group's committed offset (`None`: QUERY_NOT_FOUND).
#[derive(Debug, Clone, PartialEq, Eq)]
struct QueueProgress {
    queue_id: i32,
    max_offset: i64,
    committed: Option<i64>,
}

impl QueueProgress {
    fn at_end(&self) -> bool {
        self.committed == Some(self.max_offset)
            || (self.max_offset == 0 && self.committed.is_none())
    }
}

/// Asks the name server for the topic's route (its queue count), then the broker for each
/// queue's maximum offset and the group's committed offset.
async fn query_progress(
    namesrv: &str,
    broker: &str,
    topic: &str,
    group: &str,
) -> Result<Vec<QueueProgress>, String> {
    use ferromq_protocol::remoting::body::decode_json;
    use ferromq_protocol::remoting::body::route::TopicRouteData;
    use ferromq_protocol::remoting::headers::namesrv::GetRouteInfoRequestHeader;
    use ferromq_protocol::remoting::headers::offset::{
        GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, QueryConsumerOffsetRequestHeader,
        QueryConsumerOffsetResponseHeader,
    };
    use ferromq_protocol::remoting::{request, response, RemotingClient, RemotingCommand};

    let connect = |addr: &str| {
        let addr: std::net::SocketAddr = addr.parse().expect("a socket address");
        RemotingClient::connect(addr, ADMIN_TIMEOUT)
    };
    let ns = connect(namesrv)
        .await
        .map_err(|e| format!("{namesrv}: {e}"))?;
    let header = GetRouteInfoRequestHeader {
        topic: topic.to_string(),
        accept_standard_json_only: Some(true),
    };
    let reply = ns
        .invoke(
            RemotingCommand::request_with_header(request::GET_ROUTEINFO_BY_TOPIC, &header),
            ADMIN_TIMEOUT,
        )
        .await
        .map_err(|e| format!("GET_ROUTEINFO_BY_TOPIC: {e}"))?;
    ns.close();
    if reply.code != response::SUCCESS {
        return Err(format!(
            "route of {topic}: code {} {:?}",
            reply.code, reply.remark
        ));
    }
    let route: TopicRouteData = decode_json(reply.body.as_deref().unwrap_or_default())
        .map_err(|e| format!("route of {topic}: {e}"))?;
    let queues = route
        .queue_datas
        .iter()
        .map(|q| q.read_queue_nums.max(q.write_queue_nums))
        .max()
        .ok_or_else(|| format!("route of {topic} names no queues"))?;

    let client = connect(broker)
        .await
        .map_err(|e| format!("{broker}: {e}"))?;
    let mut table = Vec::new();
    for queue_id in 0..queues {
        let header = GetMaxOffsetRequestHeader {
            topic: topic.to_string(),
            queue_id,
            committed: None,
        };
        let reply = client
            .invoke(
                RemotingCommand::request_with_header(request::GET_MAX_OFFSET, &header),
                ADMIN_TIMEOUT,
            )
            .await
            .map_err(|e| format!("GET_MAX_OFFSET {queue_id}: {e}"))?;
        let max_offset = reply
            .decode_header::<GetMaxOffsetResponseHeader>()
            .map_err(|e| format!("GET_MAX_OFFSET {queue_id} (code {}): {e}", reply.code))?
            .offset;
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_string(),
            topic: topic.to_string(),
            queue_id,
            set_zero_if_not_found: Some(false),
        };
        let reply = client
            .invoke(
                RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header),
                ADMIN_TIMEOUT,
            )
            .await
            .map_err(|e| format!("QUERY_CONSUMER_OFFSET {queue_id}: {e}"))?;
        let committed = match reply.code {
            response::SUCCESS => Some(
                reply
                    .decode_header::<QueryConsumerOffsetResponseHeader>()
                    .map_err(|e| format!("QUERY_CONSUMER_OFFSET {queue_id}: {e}"))?
                    .offset,
            ),
            response::QUERY_NOT_FOUND => None,
            code => return Err(format!("QUERY_CONSUMER_OFFSET {queue_id}: code {code}")),
        };
        table.push(QueueProgress {
            queue_id,
            max_offset,
            committed,
        });
    }
    client.close();
    Ok(table)
}

/// Polls the broker until the group's committed offset equals the maximum offset on every
/// queue of the topic (bounded by `OFFSETS_SETTLE`) and asserts it, and that the queues hold
/// `expected_total` messages.
fn assert_offsets_at_end(ctx: &Ctx, topic: &str, group: &str, expected_total: i64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let last = loop {
        let result = runtime.block_on(query_progress(
            &ctx.server.namesrv,
            &ctx.server.broker,
            topic,
            group,
        ));
        let done = result
            .as_ref()
            .is_ok_and(|q| !q.is_empty() && q.iter().all(QueueProgress::at_end));
        if done || started.elapsed() >= OFFSETS_SETTLE {
            break result;
        }
        thread::sleep(Duration::from_millis(500));
    };
    let queues = last.unwrap_or_else(|e| panic!("{}: offsets of {group}: {e}", ctx.test));
    let total: i64 = queues.iter().map(|q| q.max_offset).sum();
    eprintln!(
        "{}: broker offsets of {group} on {topic} after {:.1} s: {queues:?}",
        ctx.test,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(total, expected_total, "{}: {queues:?}", ctx.test);
    assert!(
        queues.iter().all(QueueProgress::at_end),
        "{}: committed offsets of {group} did not reach the end of every queue of {topic} \
         within {} s: {queues:?}\n{}",
        ctx.test,
        OFFSETS_SETTLE.as_secs(),
        ctx.stderr_tail()
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// Sync sends (100 of TagB, then 500 of TagA) and batch sends (500 of TagA, 10 a request) to
/// an auto-created topic; a cluster-mode push consumer subscribed to TagA gets all 1,000 TagA
/// bodies with their keys and tags, no TagB one, and its committed offsets reach the end of
/// every queue (1,100 messages: the TagB ones are committed past).
#[test]
fn go_client_sync_and_batch_sends_then_push_consume_with_tags() {
    let test = "go_client_sync_and_batch_sends_then_push_consume_with_tags";
    let Some(mut ctx) = Ctx::new(test) else {
        return;
    };
    let started = Instant::now();
    let topic = "GoInterop_basic";
    ctx.produce(topic, "TagB", "x", 100, 1);
    ctx.produce(topic, "TagA", "s", 500, 1);
    ctx.produce(topic, "TagA", "b", 500, 10);

    let group = "CG_go_basic";
    let mut consumer = ctx.consumer(
        topic,
        group,
        "c1",
        &[
            "--subscribe",
            "TagA",
            "--expect-tag",
            "TagA",
            "--expect",
            "1000",
            "--linger",
            "2",
        ],
    );
    let summary = consumer.finish(Duration::from_secs(CONSUME_TIMEOUT_S) + SHUTDOWN_SLACK);
    assert_clean(&consumer.name, &summary);
    let messages = consumer.messages();
    assert_keys_and_tags(&consumer.name, &messages, "TagA");
    let bodies = consumer.bodies();
    for (prefix, count) in [("s", 500), ("b", 500)] {
        let got = with_prefix(bodies.keys(), prefix);
        let expected = expected_bodies(prefix, count);
        assert!(
            got == expected,
            "{}: {prefix}: {}; summary {summary}\n{}",
            consumer.name,
            describe_missing(&expected, &got),
            consumer.stderr_tail()
        );
    }
    assert!(
        with_prefix(bodies.keys(), "x").is_empty(),
        "{}: subscribed to TagA but got TagB messages",
        consumer.name
    );
    eprintln!(
        "{test}: consumed 1000 in {} s (first after {} s), {} duplicates",
        summary["elapsed_s"], summary["first_msg_s"], summary["duplicates"]
    );
    assert_offsets_at_end(&ctx, topic, group, 1100);
    eprintln!("{test}: took {:.1} s", started.elapsed().as_secs_f64());
}

/// Two push consumers (two processes, two instance names) in one cluster-mode group: 1,000
/// messages sent in batches are all consumed, both instances get a share, few are seen twice,
/// and after both stop the committed offsets reach the end of every queue.
#[test]
fn go_client_two_push_consumers_share_one_group() {
    let test = "go_client_two_push_consumers_share_one_group";
    let Some(mut ctx) = Ctx::new(test) else {
        return;
    };
    let started = Instant::now();
    let topic = "GoInterop_shared";
    // The topic exists (and is routed) before the consumers start, so both rebalance on it.
    ctx.produce(topic, "TagA", "p", 1, 1);
    let group = "CG_go_shared";
    let mut c1 = ctx.consumer(topic, group, "c1", &["--expect-tag", "TagA"]);
    let mut c2 = ctx.consumer(topic, group, "c2", &["--expect-tag", "TagA"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(c1.has_event("started") && c2.has_event("started")) {
        assert!(Instant::now() < deadline, "consumers did not start in 30 s");
        thread::sleep(Duration::from_millis(100));
    }
    // Both joined: the broker notifies the group of the change and each member rebalances.
    thread::sleep(REBALANCE_SETTLE);
    ctx.produce(topic, "TagA", "m", 1000, 25);

    let expected = expected_bodies("m", 1000);
    let deadline = Instant::now() + Duration::from_secs(CONSUME_TIMEOUT_S);
    let (got1, got2) = loop {
        let got1 = with_prefix(c1.bodies().keys(), "m");
        let got2 = with_prefix(c2.bodies().keys(), "m");
        let union: BTreeSet<String> = got1.union(&got2).cloned().collect();
        if union == expected {
            break (got1, got2);
        }
        assert!(
            Instant::now() < deadline,
            "{test}: {} within {CONSUME_TIMEOUT_S} s\n{}\n{}",
            describe_missing(&expected, &union),
            c1.stderr_tail(),
            c2.stderr_tail()
        );
        thread::sleep(Duration::from_millis(100));
    };
    // A short linger lets the last consumed offsets reach the in-memory store before Shutdown
    // persists them.
    thread::sleep(Duration::from_secs(1));
    let s1 = c1.stop();
    let s2 = c2.stop();
    for (proc, summary) in [(&mut c1, &s1), (&mut c2, &s2)] {
        assert_clean(&proc.name, summary);
        let messages = proc.messages();
        assert_keys_and_tags(&proc.name, &messages, "TagA");
    }
    let overlap = got1.intersection(&got2).count();
    eprintln!(
        "{test}: c1 got {}, c2 got {}, {overlap} seen by both",
        got1.len(),
        got2.len()
    );
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "{test}: one consumer got nothing (c1 {}, c2 {}): the group did not share the queues",
        got1.len(),
        got2.len()
    );
    assert!(
        overlap <= MAX_OVERLAP,
        "{test}: {overlap} messages seen by both"
    );
    assert_offsets_at_end(&ctx, topic, group, 1001);
    eprintln!("{test}: took {:.1} s", started.elapsed().as_secs_f64());
}
