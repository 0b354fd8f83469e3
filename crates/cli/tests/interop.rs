//! Interop with real RocketMQ remoting clients: PyPI `rocketmq` 0.4.4 (C++ core) and npm
//! `ali-ons` 3.12.0, driven through `scripts/interop/py_remoting.py` and
//! `scripts/interop/ali_ons.js` against `ferromq standalone`.
//!
//! The clients live in `target/interop/` (repository root), installed by
//! `scripts/interop/install.sh`. When they are missing the tests print why and pass, unless
//! `FERROMQ_INTEROP_REQUIRED` is set (as `scripts/test` does after installing): then a missing
//! install fails the test.
//!
//! Deliveries are observed through the clients' JSON output; after each scenario the test also
//! asks the name server (GET_ROUTEINFO_BY_TOPIC) and the broker (GET_MAX_OFFSET,
//! QUERY_CONSUMER_OFFSET) directly, through `ferromq_protocol`'s `RemotingClient`, that the
//! group's committed offsets reached the end of every queue.
//! Client logs, stderr and the standalone's stderr are kept in `target/interop/runs/<test>/`
//! for post-mortem; the clients run with `HOME` there (the C++ core logs to
//! `$HOME/logs/rocketmq-cpp/`). Every child is killed when its guard drops, every wait has a
//! deadline, and every address is 127.0.0.1.
//!
//! Broker behaviour these tests rely on (standard RocketMQ): topics are auto-created on the first
//! send; QUERY_CONSUMER_OFFSET for a group with no committed offset on a queue whose minimum
//! offset is 0 answers 0 (the C++ push consumer uses CONSUME_FROM_LAST_OFFSET and cannot be told
//! otherwise, so a new group only sees messages sent before it started thanks to that rule;
//! ali-ons is set to CONSUME_FROM_FIRST_OFFSET).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long `ferromq standalone` may take to print its ports.
const STANDALONE_READY: Duration = Duration::from_secs(20);
/// Deadline for producing a batch (1,000 sync sends take about a second on loopback).
const PRODUCE_DEADLINE: Duration = Duration::from_secs(120);
/// The consumers' own timeout; the harness allows this plus `SHUTDOWN_SLACK`.
const CONSUME_TIMEOUT_S: u64 = 90;
const SHUTDOWN_SLACK: Duration = Duration::from_secs(30);
/// Both clients rebalance every 10 s (C++ core: timer of 10 s; ali-ons: rebalanceInterval).
const REBALANCE_SETTLE: Duration = Duration::from_secs(12);
/// Messages re-delivered after kill -9 of the broker that the restart test tolerates.
const MAX_REDELIVERED_AFTER_CRASH: u64 = 100;
/// Messages seen by both consumers of one group that the two-consumer test tolerates.
const MAX_OVERLAP: usize = 50;

// ---------------------------------------------------------------------------------------------
// Locations and the skip rule

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn interop_dir() -> PathBuf {
    repo_root().join("target").join("interop")
}

fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// PyPI `rocketmq` 0.4.4: the C++ core through ctypes.
    Python,
    /// npm `ali-ons` 3.12.0.
    Node,
}

impl Client {
    fn label(self) -> &'static str {
        match self {
            Client::Python => "py",
            Client::Node => "node",
        }
    }

    /// The program and leading arguments, or why they are not usable.
    fn command_line(self) -> Result<(PathBuf, Vec<PathBuf>), String> {
        let dir = interop_dir();
        let scripts = repo_root().join("scripts").join("interop");
        match self {
            Client::Python => {
                let python = dir.join("venv-remoting").join("bin").join("python");
                let package = dir.join("venv-remoting").join("lib");
                if !python.exists() || !package.exists() {
                    return Err(format!("{} is missing", python.display()));
                }
                Ok((python, vec![scripts.join("py_remoting.py")]))
            }
            Client::Node => {
                let module = dir.join("node/node_modules/ali-ons/package.json");
                if !module.exists() {
                    return Err(format!("{} is missing", module.display()));
                }
                Ok((PathBuf::from("node"), vec![scripts.join("ali_ons.js")]))
            }
        }
    }
}

/// The client's command line, or `None` (after saying why) when the test should be skipped.
/// Panics when the clients are missing and `FERROMQ_INTEROP_REQUIRED` is set.
fn client_or_skip(client: Client, test: &str) -> Option<(PathBuf, Vec<PathBuf>)> {
    let stamp = interop_dir().join("installed.stamp");
    let found = if stamp.exists() {
        client.command_line()
    } else {
        Err(format!("{} is missing", stamp.display()))
    };
    match found {
        Ok(cmd) => Some(cmd),
        Err(why) if required() => panic!(
            "{test}: interop clients are not installed ({why}) and FERROMQ_INTEROP_REQUIRED is set: \
             run scripts/interop/install.sh"
        ),
        Err(why) => {
            eprintln!(
                "SKIPPED {test}: interop clients not installed ({why}); run scripts/interop/install.sh \
                 (or scripts/test, which installs them and sets FERROMQ_INTEROP_REQUIRED=1)"
            );
            None
        }
    }
}

/// A fresh `target/interop/runs/<test>/` for logs and the clients' HOME.
fn run_dir(test: &str) -> PathBuf {
    let dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("home")).expect("creating the run directory");
    dir
}

fn tail(path: &Path, max: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("({} not readable)", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max as u64);
    let _ = file.seek(SeekFrom::Start(start));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    if text.trim().is_empty() {
        "(empty)".to_string()
    } else {
        text
    }
}

fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
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

// ---------------------------------------------------------------------------------------------
// ferromq standalone

/// A running `ferromq standalone`; killed (SIGKILL) when dropped.
struct Standalone {
    child: Child,
    namesrv: String,
    broker: String,
    namesrv_port: u16,
    broker_port: u16,
    stderr_path: PathBuf,
    // Held open: a standalone that stops on end of input must not see one.
    _stdin: Option<std::process::ChildStdin>,
    _stdout: Receiver<String>,
}

impl Standalone {
    /// Starts standalone on `data_dir` with the given ports (0 = any) and waits for the line
    /// `ferromq standalone: namesrv 127.0.0.1:<port> broker 127.0.0.1:<port> data <dir>`.
    fn start(data_dir: &Path, ports: (u16, u16), log_dir: &Path, run: u32) -> Standalone {
        Standalone::start_with(data_dir, ports, log_dir, run, &[])
    }

    /// [`Standalone::start`] with extra standalone flags.
    fn start_with(
        data_dir: &Path,
        ports: (u16, u16),
        log_dir: &Path,
        run: u32,
        extra: &[&str],
    ) -> Standalone {
        let stderr_path = log_dir.join(format!("standalone-{run}.stderr"));
        let stderr = File::create(&stderr_path).expect("creating the standalone stderr file");
        let args = [
            "standalone".to_string(),
            "--data-dir".to_string(),
            data_dir.display().to_string(),
            "--namesrv-port".to_string(),
            ports.0.to_string(),
            "--broker-port".to_string(),
            ports.1.to_string(),
            // Restarts reuse fixed ports, with which gRPC would default to 8081: parallel
            // tests would contend for it. These tests use remoting only.
            "--grpc-port=-1".to_string(),
        ];
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(&args)
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawning ferromq standalone");
        let stdin = child.stdin.take();
        let lines = spawn_line_reader(child.stdout.take().expect("standalone stdout"));
        let started = Instant::now();
        let mut seen = Vec::new();
        let mut guard = Standalone {
            child,
            namesrv: String::new(),
            broker: String::new(),
            namesrv_port: 0,
            broker_port: 0,
            stderr_path,
            _stdin: stdin,
            _stdout: lines,
        };
        loop {
            match guard._stdout.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some((namesrv, broker)) = parse_ports_line(&line) {
                        guard.namesrv_port = port_of(&namesrv);
                        guard.broker_port = port_of(&broker);
                        guard.namesrv = namesrv;
                        guard.broker = broker;
                        eprintln!(
                            "standalone #{run} up in {:.1} s: namesrv {} broker {} (args: {})",
                            started.elapsed().as_secs_f64(),
                            guard.namesrv,
                            guard.broker,
                            args.join(" ")
                        );
                        return guard;
                    }
                    seen.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    thread::sleep(Duration::from_millis(200));
                }
            }
            if let Ok(Some(status)) = guard.child.try_wait() {
                panic!(
                    "ferromq {} exited ({status}) before printing its ports; does standalone \
                     support --data-dir/--namesrv-port/--broker-port yet?\nstdout: {:?}\nstderr \
                     ({}):\n{}",
                    args.join(" "),
                    seen,
                    guard.stderr_path.display(),
                    tail(&guard.stderr_path, 4000)
                );
            }
            if started.elapsed() > STANDALONE_READY {
                panic!(
                    "standalone did not print its ports within {} s (expected a stdout line \
                     `ferromq standalone: namesrv 127.0.0.1:<port> broker 127.0.0.1:<port> data \
                     <dir>`)\nargs: {}\nstdout so far: {:?}\nstderr ({}):\n{}",
                    STANDALONE_READY.as_secs(),
                    args.join(" "),
                    seen,
                    guard.stderr_path.display(),
                    tail(&guard.stderr_path, 4000)
                );
            }
        }
    }

    /// kill -9, and reap.
    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM; asserts a clean exit within 15 s.
    fn stop_clean(mut self) {
        send_signal(self.child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "standalone exited with {status} after SIGTERM; stderr:\n{}",
                    tail(&self.stderr_path, 3000)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "standalone still running 15 s after SIGTERM; stderr:\n{}",
                tail(&self.stderr_path, 3000)
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr_tail(&self) -> String {
        format!(
            "standalone stderr ({}):\n{}",
            self.stderr_path.display(),
            tail(&self.stderr_path, 3000)
        )
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_ports_line(line: &str) -> Option<(String, String)> {
    let rest = line.trim().strip_prefix("ferromq standalone:")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let namesrv = words.iter().position(|w| *w == "namesrv")?;
    let broker = words.iter().position(|w| *w == "broker")?;
    let namesrv = words.get(namesrv + 1)?.to_string();
    let broker = words.get(broker + 1)?.to_string();
    for addr in [&namesrv, &broker] {
        assert!(
            addr.starts_with("127.0.0.1:") && addr[10..].parse::<u16>().is_ok(),
            "standalone printed {addr:?} in {line:?}; expected 127.0.0.1:<port>"
        );
    }
    Some((namesrv, broker))
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port")
}

// ---------------------------------------------------------------------------------------------
// Client processes

/// The environment every client run shares.
struct Ctx {
    client: Client,
    program: PathBuf,
    leading: Vec<PathBuf>,
    dir: PathBuf,
    runs: u32,
    /// Topics created explicitly (ali-ons cannot auto-create, see `ensure_topic`).
    created: BTreeSet<String>,
}

impl Ctx {
    fn new(client: Client, test: &str) -> Option<Ctx> {
        let (program, leading) = client_or_skip(client, test)?;
        Some(Ctx {
            client,
            program,
            leading,
            dir: run_dir(test),
            runs: 0,
            created: BTreeSet::new(),
        })
    }

    fn spawn(&mut self, name: &str, args: &[String]) -> ClientProc {
        self.runs += 1;
        let stderr_path = self.dir.join(format!("{:02}-{name}.stderr", self.runs));
        let stderr = File::create(&stderr_path).expect("creating a client stderr file");
        let mut command = Command::new(&self.program);
        command
            .args(&self.leading)
            .args(args)
            .env("HOME", self.dir.join("home"))
            .env("NO_PROXY", "127.0.0.1")
            .env("no_proxy", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "spawning {} {:?}: {e} (is {} installed?)",
                self.program.display(),
                self.leading,
                self.program.display()
            )
        });
        let lines = spawn_line_reader(child.stdout.take().expect("client stdout"));
        ClientProc {
            name: format!("{} {name}", self.client.label()),
            child,
            lines,
            output: Vec::new(),
            eof: false,
            stderr_path,
        }
    }

    /// ali-ons 3.12.0 cannot auto-create a topic: on TOPIC_NOT_EXIST from the name server its
    /// send() throws instead of falling back to the TBW102 route. So before its first send to a
    /// topic, `ali_ons.js create-topic` sends UPDATE_AND_CREATE_TOPIC (as `mqadmin updateTopic`
    /// does) and waits until the name server routes the topic. The C++ client relies on
    /// auto-create on first send.
    fn ensure_topic(&mut self, server: &Standalone, topic: &str) {
        if self.client != Client::Node || self.created.contains(topic) {
            return;
        }
        let args: Vec<String> = [
            "create-topic",
            "--namesrv",
            &server.namesrv,
            "--broker",
            &server.broker,
            "--topic",
            topic,
            "--wait",
            "40",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = self.spawn(&format!("create-{topic}"), &args);
        let summary = proc.finish(Duration::from_secs(60));
        assert!(
            summary["ok"] == true,
            "{}: creating {topic} failed: {summary}\n{}\n{}",
            proc.name,
            proc.stderr_tail(),
            server.stderr_tail()
        );
        eprintln!(
            "{}: created {topic}, routed by the name server after {} s",
            proc.name, summary["elapsed_s"]
        );
        self.created.insert(topic.to_string());
    }

    /// Sends `count` messages (`{prefix}:{i}`, key `{prefix}-{i}`, tag `tag`) and asserts that all
    /// were acknowledged.
    fn produce(&mut self, server: &Standalone, topic: &str, tag: &str, prefix: &str, count: u32) {
        self.produce_with(server, topic, tag, prefix, count, &[]);
    }

    /// [`Ctx::produce`] with extra producer flags (e.g. `--half`).
    fn produce_with(
        &mut self,
        server: &Standalone,
        topic: &str,
        tag: &str,
        prefix: &str,
        count: u32,
        extra: &[&str],
    ) {
        self.ensure_topic(server, topic);
        let namesrv = server.namesrv.as_str();
        let group = format!("PG_{}_{prefix}", self.client.label());
        let args = [
            "produce",
            "--namesrv",
            namesrv,
            "--topic",
            topic,
            "--group",
            &group,
            "--tag",
            tag,
            "--prefix",
            prefix,
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--count".to_string(), count.to_string()]);
        args.extend(["--instance".to_string(), format!("producer-{prefix}")]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut proc = self.spawn(&format!("produce-{prefix}"), &args);
        let summary = proc.finish(PRODUCE_DEADLINE);
        let sent = summary["sent"].as_u64().unwrap_or(0);
        assert!(
            sent == u64::from(count) && summary["failed"].as_u64() == Some(0),
            "{}: sent {sent} of {count}, first error {}; summary {summary}\n{}",
            proc.name,
            summary["first_error"],
            proc.stderr_tail()
        );
        eprintln!(
            "{}: sent {count} to {topic} in {} s",
            proc.name, summary["elapsed_s"]
        );
    }

    /// Starts a push consumer printing one event per delivery.
    fn consumer(
        &mut self,
        namesrv: &str,
        topic: &str,
        group: &str,
        instance: &str,
        extra: &[&str],
    ) -> ClientProc {
        let mut args: Vec<String> = [
            "consume",
            "--namesrv",
            namesrv,
            "--topic",
            topic,
            "--group",
            group,
            "--instance",
            instance,
            "--events",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        if !extra.contains(&"--timeout") {
            args.extend(["--timeout".to_string(), CONSUME_TIMEOUT_S.to_string()]);
        }
        self.spawn(&format!("consume-{instance}"), &args)
    }
}

/// A client process; killed (SIGKILL) when dropped.
struct ClientProc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    output: Vec<Value>,
    eof: bool,
    stderr_path: PathBuf,
}

impl ClientProc {
    /// Moves the lines printed so far into `output`.
    fn pump(&mut self) {
        loop {
            match self.lines.try_recv() {
                Ok(line) => self.output.push(
                    serde_json::from_str(&line).unwrap_or_else(|_| Value::String(line.clone())),
                ),
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

    /// Bodies of the `msg` events so far, with how often each arrived.
    fn bodies(&mut self) -> BTreeMap<String, u64> {
        self.pump();
        let mut bodies = BTreeMap::new();
        for v in &self.output {
            if v["event"] == "msg" {
                if let Some(body) = v["body"].as_str() {
                    *bodies.entry(body.to_string()).or_insert(0) += 1;
                }
            }
        }
        bodies
    }

    fn has_event(&mut self, event: &str) -> bool {
        self.pump();
        self.output.iter().any(|v| v["event"] == event)
    }

    /// Waits until `done` holds, failing with `what` at the deadline or if the client exits.
    fn wait_until(
        &mut self,
        what: &str,
        deadline: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) {
        let start = Instant::now();
        loop {
            if done(self) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                thread::sleep(Duration::from_millis(100));
                self.pump();
                if done(self) {
                    return;
                }
                panic!(
                    "{}: exited ({status}) while waiting for {what}; last output: {:?}\n{}",
                    self.name,
                    self.output.iter().rev().take(3).collect::<Vec<_>>(),
                    self.stderr_tail()
                );
            }
            if start.elapsed() > deadline {
                panic!(
                    "{}: no {what} within {} s; last output: {:?}\n{}",
                    self.name,
                    deadline.as_secs(),
                    self.output.iter().rev().take(3).collect::<Vec<_>>(),
                    self.stderr_tail()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit on its own and returns its summary (the last JSON object
    /// without an `event` field).
    fn finish(&mut self, deadline: Duration) -> Value {
        let start = Instant::now();
        loop {
            self.pump();
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if exited && self.eof {
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
        let status = self.child.wait().expect("reaping a client");
        match self
            .output
            .iter()
            .rev()
            .find(|v| v.is_object() && v.get("event").is_none())
        {
            Some(summary) if summary.get("error").is_none() => summary.clone(),
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

    /// SIGTERM (the scripts then shut their consumer down cleanly, committing offsets) and the
    /// summary.
    fn stop(&mut self) -> Value {
        send_signal(self.child.id(), "TERM");
        self.finish(SHUTDOWN_SLACK)
    }
}

impl Drop for ClientProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that a consumer summary saw only well-formed messages: body `{p}:{i}`, key `{p}-{i}`,
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

fn expected_bodies(prefix: &str, count: u32) -> BTreeSet<String> {
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

fn with_prefix(bodies: &BTreeMap<String, u64>, prefix: &str) -> BTreeSet<String> {
    let p = format!("{prefix}:");
    bodies
        .keys()
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

/// How long the committed offsets may take to reach the end of every queue once a consumer
/// has stopped (both clients commit on clean shutdown; the C++ core also every ~5 s, ali-ons on
/// its own timer).
const OFFSETS_SETTLE: Duration = Duration::from_secs(15);
const OFFSETS_POLL: Duration = Duration::from_millis(500);
/// Bound on one request to the name server or broker.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One queue of a topic as the broker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct QueueProgress {
    queue_id: i32,
    /// GET_MAX_OFFSET: the next queue offset to be written.
    max_offset: i64,
    /// QUERY_CONSUMER_OFFSET with setZeroIfNotFound=false; `None` on QUERY_NOT_FOUND.
    committed: Option<i64>,
}

impl QueueProgress {
    /// The group has consumed and committed everything in the queue. A queue that never held a
    /// message needs no commit.
    fn at_end(&self) -> bool {
        self.committed == Some(self.max_offset)
            || (self.max_offset == 0 && self.committed.is_none())
    }
}

fn progress_table(topic: &str, group: &str, queues: &[QueueProgress]) -> String {
    let mut out = format!("  {topic} / {group}\n  queue  max_offset  committed  lag\n");
    for q in queues {
        let committed = q
            .committed
            .map_or_else(|| "none".to_string(), |c| c.to_string());
        let lag = q.committed.map_or_else(
            || q.max_offset.to_string(),
            |c| (q.max_offset - c).to_string(),
        );
        out.push_str(&format!(
            "  {:>5}  {:>10}  {:>9}  {:>3}\n",
            q.queue_id, q.max_offset, committed, lag
        ));
    }
    out
}

fn socket_addr(addr: &str) -> std::net::SocketAddr {
    addr.parse()
        .unwrap_or_else(|e| panic!("address {addr:?}: {e}"))
}

/// Asks the name server for the topic's route, then the broker for every queue's maximum
/// offset and the group's committed offset.
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

    let ns = RemotingClient::connect(socket_addr(namesrv), ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("name server {namesrv}: {e}"))?;
    let reply = ns
        .invoke(
            RemotingCommand::request_with_header(
                request::GET_ROUTEINFO_BY_TOPIC,
                &GetRouteInfoRequestHeader {
                    topic: topic.to_string(),
                    accept_standard_json_only: Some(true),
                },
            ),
            ADMIN_TIMEOUT,
        )
        .await
        .map_err(|e| format!("GET_ROUTEINFO_BY_TOPIC {topic}: {e}"))?;
    ns.close();
    if reply.code != response::SUCCESS {
        return Err(format!(
            "GET_ROUTEINFO_BY_TOPIC {topic}: code {} ({:?})",
            reply.code, reply.remark
        ));
    }
    let route: TopicRouteData = decode_json(reply.body.as_deref().unwrap_or_default())
        .map_err(|e| format!("route of {topic}: {e}"))?;
    let [queue_data] = route.queue_datas.as_slice() else {
        return Err(format!(
            "route of {topic}: expected one broker group, got {:?}",
            route.queue_datas
        ));
    };
    let routed = route
        .broker_datas
        .iter()
        .find(|b| b.broker_name == queue_data.broker_name)
        .and_then(|b| b.master_addr());
    if routed != Some(broker) {
        return Err(format!(
            "route of {topic}: master of {} is {routed:?}, expected {broker}",
            queue_data.broker_name
        ));
    }
    let queues = queue_data.read_queue_nums.max(queue_data.write_queue_nums);

    let client = RemotingClient::connect(socket_addr(broker), ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("broker {broker}: {e}"))?;
    let mut table = Vec::new();
    for queue_id in 0..queues {
        let reply = client
            .invoke(
                RemotingCommand::request_with_header(
                    request::GET_MAX_OFFSET,
                    &GetMaxOffsetRequestHeader {
                        topic: topic.to_string(),
                        queue_id,
                        committed: None,
                    },
                ),
                ADMIN_TIMEOUT,
            )
            .await
            .map_err(|e| format!("GET_MAX_OFFSET {topic}/{queue_id}: {e}"))?;
        if reply.code != response::SUCCESS {
            return Err(format!(
                "GET_MAX_OFFSET {topic}/{queue_id}: code {} ({:?})",
                reply.code, reply.remark
            ));
        }
        let max_offset = reply
            .decode_header::<GetMaxOffsetResponseHeader>()
            .map_err(|e| format!("GET_MAX_OFFSET {topic}/{queue_id} reply: {e}"))?
            .offset;

        let reply = client
            .invoke(
                RemotingCommand::request_with_header(
                    request::QUERY_CONSUMER_OFFSET,
                    &QueryConsumerOffsetRequestHeader {
                        consumer_group: group.to_string(),
                        topic: topic.to_string(),
                        queue_id,
                        set_zero_if_not_found: Some(false),
                    },
                ),
                ADMIN_TIMEOUT,
            )
            .await
            .map_err(|e| format!("QUERY_CONSUMER_OFFSET {group} {topic}/{queue_id}: {e}"))?;
        let committed = match reply.code {
            response::SUCCESS => Some(
                reply
                    .decode_header::<QueryConsumerOffsetResponseHeader>()
                    .map_err(|e| format!("QUERY_CONSUMER_OFFSET {topic}/{queue_id} reply: {e}"))?
                    .offset,
            ),
            response::QUERY_NOT_FOUND => None,
            code => {
                return Err(format!(
                    "QUERY_CONSUMER_OFFSET {group} {topic}/{queue_id}: code {code} ({:?})",
                    reply.remark
                ))
            }
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
/// queue of the topic (bounded by `OFFSETS_SETTLE`), prints the per-queue table and asserts it.
/// `expected_total` is the number of messages the topic holds; `run_dir` is the test run's
/// directory (the C++ client's logs are under it).
fn assert_offsets_at_end(
    test: &str,
    run_dir: &Path,
    server: &Standalone,
    topic: &str,
    group: &str,
    expected_total: i64,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let last = loop {
        let result = runtime.block_on(query_progress(
            &server.namesrv,
            &server.broker,
            topic,
            group,
        ));
        let done = result
            .as_ref()
            .is_ok_and(|q| !q.is_empty() && q.iter().all(QueueProgress::at_end));
        if done || started.elapsed() >= OFFSETS_SETTLE {
            break result;
        }
        thread::sleep(OFFSETS_POLL);
    };
    let queues = last.unwrap_or_else(|e| {
        panic!(
            "{test}: cannot read the broker's offsets of {group} on {topic}: {e}\n{}",
            server.stderr_tail()
        )
    });
    let table = progress_table(topic, group, &queues);
    let total: i64 = queues.iter().map(|q| q.max_offset).sum();
    let done = !queues.is_empty() && queues.iter().all(QueueProgress::at_end);
    eprintln!(
        "{test}: broker offsets after {:.1} s ({} queues, {total} messages):\n{table}",
        started.elapsed().as_secs_f64(),
        queues.len()
    );
    assert_eq!(
        total, expected_total,
        "{test}: the queues of {topic} hold {total} messages, expected {expected_total}\n{table}"
    );
    assert!(
        done,
        "{test}: committed offsets of {group} did not reach the end of every queue of {topic} \
         within {} s:\n{table}\n{}\n{}",
        OFFSETS_SETTLE.as_secs(),
        client_offset_lines(run_dir),
        server.stderr_tail()
    );
}

/// The C++ client's log lines about offsets (the commits it says it sent, one-way, at
/// shutdown among them), the last [`CLIENT_LOG_LINES`] of every log under the run's
/// `$HOME/logs/rocketmq-cpp/`: what a failed offset check needs to tell a commit the client
/// never sent from one the broker did not apply. Empty for other clients.
fn client_offset_lines(dir: &Path) -> String {
    let logs = dir.join("home").join("logs").join("rocketmq-cpp");
    let Ok(entries) = fs::read_dir(&logs) else {
        return String::new();
    };
    let mut out = String::new();
    for entry in entries.flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("ffset")).collect();
        let tail = &lines[lines.len().saturating_sub(CLIENT_LOG_LINES)..];
        out.push_str(&format!(
            "client log {} (last {} offset lines):\n{}\n",
            entry.path().display(),
            tail.len(),
            tail.join("\n")
        ));
    }
    out
}

/// Most offset lines shown per client log.
const CLIENT_LOG_LINES: usize = 40;

// ---------------------------------------------------------------------------------------------
// Scenarios

/// Produce 1,000 tagged messages with keys (plus 100 with another tag), push-consume them in a
/// cluster-mode group subscribed to the first tag: every body once at least, keys and tags
/// intact, nothing of the other tag; the broker's committed offsets for the group reach the end
/// of every queue. Then SIGTERM stops standalone cleanly.
fn produce_and_consume(client: Client, test: &str) {
    let Some(mut ctx) = Ctx::new(client, test) else {
        return;
    };
    let data = tempfile::tempdir().expect("temp data dir");
    let broker = Standalone::start(data.path(), (0, 0), &ctx.dir, 1);
    let topic = format!("Interop_{}_basic", client.label());

    // The other tag goes first. Filtered-out messages at the head of a queue are skipped by the
    // next_begin_offset of the pull that finds the first match, so the commit passes them; at
    // the tail of a queue (standard RocketMQ behaviour) a client only commits past them after a
    // long-poll hold expires with nothing in flight, which the short linger never waits for.
    ctx.produce(&broker, &topic, "TagB", "x", 100);
    ctx.produce(&broker, &topic, "TagA", "m", 1000);

    let group = format!("CG_{}_basic", client.label());
    let mut consumer = ctx.consumer(
        &broker.namesrv,
        &topic,
        &group,
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
    let bodies = consumer.bodies();
    let got = with_prefix(&bodies, "m");
    let expected = expected_bodies("m", 1000);
    assert!(
        got == expected,
        "{}: {}; summary {summary}\n{}\n{}",
        consumer.name,
        describe_missing(&expected, &got),
        consumer.stderr_tail(),
        broker.stderr_tail()
    );
    assert_clean(&consumer.name, &summary);
    let other = with_prefix(&bodies, "x");
    assert!(
        other.is_empty(),
        "{}: subscribed to TagA but got {} TagB messages, e.g. {:?}",
        consumer.name,
        other.len(),
        other.iter().next()
    );
    eprintln!(
        "{test}: consumed 1000 of 1000 in {} s (first after {} s), {} duplicates",
        summary["elapsed_s"], summary["first_msg_s"], summary["duplicates"]
    );
    // 1,100 messages in the topic: the TagB ones are filtered out but committed past.
    assert_offsets_at_end(test, &ctx.dir, &broker, &topic, &group, 1100);
    broker.stop_clean();
}

/// Produce 1,000, consume them all (lingering so periodic commits land), stop the consumer
/// cleanly, kill -9 the broker, restart it on the same data dir and ports, send 10 more, and
/// consume with the same group: the 10 new ones arrive and at most a few old ones come back.
fn restart_redelivery(client: Client, test: &str) {
    let Some(mut ctx) = Ctx::new(client, test) else {
        return;
    };
    let data = tempfile::tempdir().expect("temp data dir");
    let first = Standalone::start(data.path(), (0, 0), &ctx.dir, 1);
    let namesrv = first.namesrv.clone();
    let ports = (first.namesrv_port, first.broker_port);
    let topic = format!("Interop_{}_restart", client.label());
    let group = format!("CG_{}_restart", client.label());

    ctx.produce(&first, &topic, "TagR", "r", 1000);
    let mut consumer = ctx.consumer(
        &namesrv,
        &topic,
        &group,
        "before",
        &["--expect-tag", "TagR", "--expect", "1000", "--linger", "6"],
    );
    let summary = consumer.finish(Duration::from_secs(CONSUME_TIMEOUT_S) + SHUTDOWN_SLACK);
    let got = with_prefix(&consumer.bodies(), "r");
    let expected = expected_bodies("r", 1000);
    assert!(
        got == expected,
        "{} (before the crash): {}; summary {summary}\n{}\n{}",
        consumer.name,
        describe_missing(&expected, &got),
        consumer.stderr_tail(),
        first.stderr_tail()
    );
    assert_clean(&consumer.name, &summary);
    drop(consumer);
    // The consumer stopped cleanly: its commits are on the broker before the crash.
    assert_offsets_at_end(test, &ctx.dir, &first, &topic, &group, 1000);

    first.kill9();
    let second = Standalone::start(data.path(), ports, &ctx.dir, 2);
    assert_eq!(
        (second.namesrv_port, second.broker_port),
        ports,
        "standalone restarted on other ports than asked"
    );

    ctx.produce(&second, &topic, "TagR", "n", 10);
    let mut again = ctx.consumer(
        &namesrv,
        &topic,
        &group,
        "after",
        &[
            "--expect-tag",
            "TagR",
            "--idle-exit",
            "10",
            "--timeout",
            "60",
        ],
    );
    let summary = again.finish(Duration::from_secs(60) + SHUTDOWN_SLACK);
    let bodies = again.bodies();
    let new = with_prefix(&bodies, "n");
    let expected_new = expected_bodies("n", 10);
    assert!(
        new == expected_new,
        "{} (after kill -9 and restart): messages sent after the restart: {}; summary {summary}\n{}\n{}",
        again.name,
        describe_missing(&expected_new, &new),
        again.stderr_tail(),
        second.stderr_tail()
    );
    assert_clean(&again.name, &summary);
    let redelivered: u64 = bodies
        .iter()
        .filter(|(b, _)| b.starts_with("r:"))
        .map(|(_, n)| *n)
        .sum();
    eprintln!(
        "{test}: redelivered after kill -9: {redelivered} (of 1000 consumed and committed before \
         the crash; group {group}; allowed {MAX_REDELIVERED_AFTER_CRASH})"
    );
    assert!(
        redelivered <= MAX_REDELIVERED_AFTER_CRASH,
        "{test}: {redelivered} of 1000 committed messages came back after kill -9 (allowed \
         {MAX_REDELIVERED_AFTER_CRASH}): consumer offsets were lost\n{}",
        second.stderr_tail()
    );
    assert_offsets_at_end(test, &ctx.dir, &second, &topic, &group, 1010);
}

/// Two consumers in one group share the queues: 1,000 messages, each consumed by one of them
/// (overlap counted); then one stops and the other gets all of 200 more.
fn two_consumers(client: Client, test: &str) {
    let Some(mut ctx) = Ctx::new(client, test) else {
        return;
    };
    let data = tempfile::tempdir().expect("temp data dir");
    let broker = Standalone::start(data.path(), (0, 0), &ctx.dir, 1);
    let namesrv = broker.namesrv.clone();
    let topic = format!("Interop_{}_group", client.label());
    let group = format!("CG_{}_group", client.label());

    // The topic must exist before the consumers start (they refresh routes every 30 s only).
    ctx.produce(&broker, &topic, "TagG", "w", 16);
    let long = ["--expect-tag", "TagG", "--timeout", "300"];
    let mut a = ctx.consumer(&namesrv, &topic, &group, "A", &long);
    a.wait_until("first warm-up message", Duration::from_secs(60), |p| {
        !with_prefix(&p.bodies(), "w").is_empty()
    });
    let mut b = ctx.consumer(&namesrv, &topic, &group, "B", &long);
    b.wait_until("start", Duration::from_secs(30), |p| p.has_event("started"));
    // Let both rebalance at least once with two members.
    thread::sleep(REBALANCE_SETTLE);

    ctx.produce(&broker, &topic, "TagG", "g", 1000);
    let expected = expected_bodies("g", 1000);
    let union_complete = |a: &mut ClientProc, b: &mut ClientProc| {
        let mut union = with_prefix(&a.bodies(), "g");
        union.extend(with_prefix(&b.bodies(), "g"));
        union
    };
    let deadline = Instant::now() + Duration::from_secs(CONSUME_TIMEOUT_S);
    loop {
        let union = union_complete(&mut a, &mut b);
        if union == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: the two consumers together: {}\n{}\n{}\n{}",
            describe_missing(&expected, &union),
            a.stderr_tail(),
            b.stderr_tail(),
            broker.stderr_tail()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let got_a = with_prefix(&a.bodies(), "g");
    let got_b = with_prefix(&b.bodies(), "g");
    let overlap = got_a.intersection(&got_b).count();
    eprintln!(
        "{test}: 1000 messages split A {} / B {}, {overlap} consumed by both (allowed {MAX_OVERLAP})",
        got_a.len(),
        got_b.len()
    );
    assert!(
        !got_a.is_empty() && !got_b.is_empty(),
        "{test}: one consumer got everything (A {}, B {}): the group's queues were not shared",
        got_a.len(),
        got_b.len()
    );
    assert!(
        overlap <= MAX_OVERLAP,
        "{test}: {overlap} messages consumed by both members of the group (allowed {MAX_OVERLAP})"
    );

    // A leaves (clean shutdown: offsets committed, client unregistered); B takes over its queues.
    let summary_a = a.stop();
    assert_clean(&a.name, &summary_a);
    let b_before: BTreeMap<String, u64> = b.bodies();
    let started = Instant::now();
    ctx.produce(&broker, &topic, "TagG", "h", 200);
    let expected_h = expected_bodies("h", 200);
    let wait = Duration::from_secs(60);
    loop {
        let got = with_prefix(&b.bodies(), "h");
        if got == expected_h {
            break;
        }
        assert!(
            started.elapsed() < wait,
            "{test}: after A stopped, B: {} within {} s\n{}\n{}",
            describe_missing(&expected_h, &got),
            wait.as_secs(),
            b.stderr_tail(),
            broker.stderr_tail()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let b_after = b.bodies();
    let replayed: u64 = b_after
        .iter()
        .filter(|(body, _)| body.starts_with("g:"))
        .map(|(body, n)| n - b_before.get(body).copied().unwrap_or(0))
        .sum();
    eprintln!(
        "{test}: after A stopped, B got all 200 new messages {:.1} s after the first send, and \
         {replayed} old ones again",
        started.elapsed().as_secs_f64()
    );
    let summary_b = b.stop();
    assert_clean(&b.name, &summary_b);
    // 16 warm-up + 1,000 + 200, all consumed by A or B, committed on their clean shutdowns.
    assert_offsets_at_end(test, &ctx.dir, &broker, &topic, &group, 1216);
}

/// Messages cross client implementations both ways: 200 produced by the real client are
/// consumed by the Rust client (ferromq-client `LitePullConsumer`) with identical body, keys
/// and tag; 200 produced by the Rust `Producer` are push-consumed by the real client, which
/// checks each key and tag against the body.
fn cross_client(client: Client, test: &str) {
    use ferromq_client::{
        LitePullConsumer, LitePullConsumerConfig, Message, Producer, ProducerConfig, StartPosition,
    };
    const COUNT: u32 = 200;
    let Some(mut ctx) = Ctx::new(client, test) else {
        return;
    };
    let data = tempfile::tempdir().expect("temp data dir");
    let broker = Standalone::start(data.path(), (0, 0), &ctx.dir, 1);
    let namesrv = socket_addr(&broker.namesrv);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    // Real client → Rust client.
    let from_real = format!("Interop_{}_to_rust", client.label());
    ctx.produce(&broker, &from_real, "TagR", "r", COUNT);
    let received = runtime.block_on(async {
        let consumer = LitePullConsumer::start(LitePullConsumerConfig {
            namesrv_addrs: vec![namesrv],
            group: format!("CG_rust_from_{}", client.label()),
            start_position: StartPosition::First,
            ..LitePullConsumerConfig::default()
        })
        .expect("lite pull consumer starts");
        consumer
            .subscribe(&from_real, "*")
            .await
            .expect("subscribe");
        let mut received = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while received.len() < COUNT as usize && Instant::now() < deadline {
            for m in consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll")
            {
                let body = String::from_utf8(m.body.to_vec()).expect("UTF-8 body");
                received.insert(body, (m.keys.clone(), m.tags.clone()));
            }
        }
        let committed = consumer.commit().await.expect("commit");
        assert!(committed.is_complete(), "{committed:?}");
        let closed = consumer.shutdown().await.expect("shutdown");
        assert!(closed.is_complete(), "{closed:?}");
        received
    });
    assert_eq!(received.len(), COUNT as usize, "{test}: distinct bodies");
    for i in 0..COUNT {
        let body = format!("r:{i}");
        let (keys, tags) = received
            .get(&body)
            .unwrap_or_else(|| panic!("{test}: {body} never arrived"));
        assert_eq!(keys, &vec![format!("r-{i}")], "{test}: keys of {body}");
        assert_eq!(tags.as_deref(), Some("TagR"), "{test}: tag of {body}");
    }

    // Rust client → real client.
    let to_real = format!("Interop_rust_to_{}", client.label());
    ctx.ensure_topic(&broker, &to_real);
    runtime.block_on(async {
        let producer = Producer::start(ProducerConfig {
            namesrv_addrs: vec![namesrv],
            group: "PG_rust_interop".into(),
            ..ProducerConfig::default()
        })
        .expect("producer starts");
        for i in 0..COUNT {
            let message = Message::new(to_real.clone(), format!("s:{i}"))
                .with_tags("TagS")
                .with_key(format!("s-{i}"));
            producer.send(message).await.expect("send");
        }
        producer.close().await.expect("close");
    });
    let group = format!("CG_{}_from_rust", client.label());
    let mut consumer = ctx.consumer(
        &broker.namesrv,
        &to_real,
        &group,
        "from-rust",
        &[
            "--expect-tag",
            "TagS",
            "--expect",
            &COUNT.to_string(),
            "--linger",
            "1",
        ],
    );
    let summary = consumer.finish(Duration::from_secs(CONSUME_TIMEOUT_S) + SHUTDOWN_SLACK);
    let got = with_prefix(&consumer.bodies(), "s");
    let expected = expected_bodies("s", COUNT);
    assert!(
        got == expected,
        "{}: {}; summary {summary}\n{}",
        consumer.name,
        describe_missing(&expected, &got),
        consumer.stderr_tail()
    );
    assert_clean(&consumer.name, &summary);
    eprintln!("{test}: {COUNT} messages each way with identical body, keys and tag");
    broker.stop_clean();
}

// ---------------------------------------------------------------------------------------------

#[test]
fn python_cpp_produce_and_push_consume_1000() {
    produce_and_consume(Client::Python, "python_cpp_produce_and_push_consume_1000");
}

#[test]
fn python_cpp_kill9_restart_redelivers_little() {
    restart_redelivery(Client::Python, "python_cpp_kill9_restart_redelivers_little");
}

#[test]
fn python_cpp_two_consumers_share_and_take_over() {
    two_consumers(
        Client::Python,
        "python_cpp_two_consumers_share_and_take_over",
    );
}

#[test]
fn node_ali_ons_produce_and_push_consume_1000() {
    produce_and_consume(Client::Node, "node_ali_ons_produce_and_push_consume_1000");
}

#[test]
fn node_ali_ons_kill9_restart_redelivers_little() {
    restart_redelivery(Client::Node, "node_ali_ons_kill9_restart_redelivers_little");
}

#[test]
fn node_ali_ons_two_consumers_share_and_take_over() {
    two_consumers(
        Client::Node,
        "node_ali_ons_two_consumers_share_and_take_over",
    );
}

#[test]
fn python_cpp_and_rust_client_read_each_others_messages() {
    cross_client(
        Client::Python,
        "python_cpp_and_rust_client_read_each_others_messages",
    );
}

#[test]
fn node_ali_ons_and_rust_client_read_each_others_messages() {
    cross_client(
        Client::Node,
        "node_ali_ons_and_rust_client_read_each_others_messages",
    );
}

/// The C++ core (PyPI `rocketmq` 0.4.4) sends transaction half messages (`TRAN_MSG=true`,
/// `PGROUP`) and exits before any END, as a producer that crashed after the half would. Its
/// push consumer must see none of them until the broker's check-back is answered: a Rust
/// `TransactionProducer` of the same group commits the even ones and rolls back the odd ones,
/// and the C++ consumer then receives exactly the even ones, once each. (0.4.4 wraps no
/// `TransactionMQProducer` and its library exports none in its C API, so END and the
/// check-back answer cannot come from the C++ core itself.)
#[test]
fn python_cpp_half_messages_wait_for_the_check_back_decision() {
    use ferromq_client::{MessageExt, ProducerConfig, TransactionProducer, TransactionState};
    use std::sync::atomic::{AtomicU32, Ordering};
    const COUNT: u32 = 20;
    let test = "python_cpp_half_messages_wait_for_the_check_back_decision";
    let Some(mut ctx) = Ctx::new(Client::Python, test) else {
        return;
    };
    let data = tempfile::tempdir().expect("temp data dir");
    // Checked every 200 ms while no producer of the group is online: a high check limit keeps
    // the halves from being discarded before the Rust producer connects.
    let flags = [
        "--transaction-timeout-ms",
        "500",
        "--transaction-check-interval-ms",
        "200",
        "--transaction-check-max",
        "10000",
    ];
    let broker = Standalone::start_with(data.path(), (0, 0), &ctx.dir, 1, &flags);
    let topic = "Interop_py_tx";
    let group = format!("PG_{}_h", Client::Python.label());
    ctx.produce_with(&broker, topic, "TagH", "h", COUNT, &["--half"]);
    let expected: BTreeSet<String> = (0..COUNT).step_by(2).map(|i| format!("h:{i}")).collect();
    let mut consumer = ctx.consumer(
        &broker.namesrv,
        topic,
        "CG_py_tx",
        "tx",
        &[
            "--expect-tag",
            "TagH",
            "--expect",
            &expected.len().to_string(),
            "--linger",
            "3",
        ],
    );
    std::thread::sleep(REBALANCE_SETTLE);
    assert!(
        with_prefix(&consumer.bodies(), "h").is_empty(),
        "{test}: a half message reached a consumer before any decision"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let answered = std::sync::Arc::new(AtomicU32::new(0));
    let count = answered.clone();
    let namesrv = socket_addr(&broker.namesrv);
    runtime.block_on(async {
        let config = ProducerConfig {
            namesrv_addrs: vec![namesrv],
            group: group.clone(),
            heartbeat_interval: Duration::from_millis(500),
            ..ProducerConfig::default()
        };
        let producer = TransactionProducer::start(config, move |half: &MessageExt| {
            count.fetch_add(1, Ordering::SeqCst);
            let body = String::from_utf8_lossy(&half.body).to_string();
            let i: u32 = body.trim_start_matches("h:").parse().unwrap_or(1);
            if i.is_multiple_of(2) {
                TransactionState::Commit
            } else {
                TransactionState::Rollback
            }
        })
        .expect("transaction producer starts");
        producer
            .producer()
            .routes()
            .route(topic)
            .await
            .expect("route");
        let deadline = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::SeqCst) < COUNT && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        producer.producer().close().await.expect("close");
    });
    assert!(
        answered.load(Ordering::SeqCst) >= COUNT,
        "{test}: every half checked back"
    );
    let summary = consumer.finish(Duration::from_secs(CONSUME_TIMEOUT_S) + SHUTDOWN_SLACK);
    let bodies = consumer.bodies();
    let got = with_prefix(&bodies, "h");
    assert!(
        got == expected,
        "{}: {}; summary {summary}\n{}",
        consumer.name,
        describe_missing(&expected, &got),
        consumer.stderr_tail()
    );
    for body in &expected {
        assert_eq!(
            bodies.get(body),
            Some(&1),
            "{test}: {body} delivered more than once"
        );
    }
    assert_clean(&consumer.name, &summary);
    broker.stop_clean();
}

#[test]
fn ports_line_is_parsed() {
    assert_eq!(
        parse_ports_line(
            "ferromq standalone: namesrv 127.0.0.1:9876 broker 127.0.0.1:10911 data /tmp/x"
        ),
        Some(("127.0.0.1:9876".to_string(), "127.0.0.1:10911".to_string()))
    );
    assert_eq!(parse_ports_line("store opened"), None);
}
