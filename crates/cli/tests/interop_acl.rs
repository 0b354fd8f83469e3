//! ACL and TLS with real RocketMQ clients: `ferromq standalone --acl-file` and the clients'
//! own signing — PyPI `rocketmq` 0.4.4 (C++ core, `set_session_credentials`) and npm `ali-ons`
//! 3.12.0 (`accessKeyId`/`accessKeySecret`), driven through `scripts/interop/py_remoting.py`
//! and `scripts/interop/ali_ons.js`. With credentials they produce and consume; without them
//! (or with a wrong secret) every send is refused. `ferromq admin` creates the topic with
//! `--access-key/--secret-key` and is refused without them.
//!
//! The clients are plugged in through [`AclClient`]: a client is a program plus the argument
//! lists for "produce N messages" and "consume until N arrived", with or without
//! credentials, printing the JSON summary line `scripts/interop/*` print (`sent`, `failed`,
//! `received`, `ok`; a driver that prints one line per delivery instead of `distinct` gets it
//! counted from those lines). The official Java client is the third implementation
//! ([`Java`]: `scripts/interop/java`'s driver run once per command, `AclClientRPCHook`,
//! rocketmq-client 4.9.8). With ACL on, the consumers' commits appear in `ferromq admin
//! offsetHistory` under the access key they signed with.
//!
//! TLS: the Java client 5.5.0 with `-Dtls.enable=true` produces and consumes through
//! `ferromq standalone --tls-mode enforcing` (name server and broker TLS only); the same
//! client without TLS is refused.
//!
//! Clients live in `target/interop/` (scripts/interop/install.sh, and install-java.sh for
//! Java). Missing clients skip the test with a printed reason unless
//! `FERROMQ_INTEROP_REQUIRED` is set, which fails it.
//! Every child is killed on drop, every wait has a deadline, every address is 127.0.0.1.

mod common;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long `ferromq standalone` may take to print its ports.
const STANDALONE_READY: Duration = Duration::from_secs(20);
/// Bound on one client run (start, work, shutdown).
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);
/// Messages per produce run.
const COUNT: u32 = 30;

const ACCOUNTS: &str = "\
accounts:
  - accessKey: admin01
    secretKey: adminsecret
    admin: true
  - accessKey: user01
    secretKey: usersecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclTopic=PUB|SUB
    groupPerms:
      - AclProducers=PUB|SUB
      - AclConsumers=SUB
";

/// Credentials as the clients take them.
#[derive(Debug, Clone, Copy)]
struct Keys {
    access: &'static str,
    secret: &'static str,
}

const USER: Keys = Keys {
    access: "user01",
    secret: "usersecret",
};
const WRONG: Keys = Keys {
    access: "user01",
    secret: "not-the-secret",
};
const ADMIN: Keys = Keys {
    access: "admin01",
    secret: "adminsecret",
};

/// A real client driven by a script that prints one JSON summary as its last stdout line.
trait AclClient {
    /// Short name for logs.
    fn name(&self) -> &'static str;
    /// The file whose presence says the client's install script ran.
    fn stamp(&self) -> PathBuf {
        interop_dir().join("installed.stamp")
    }
    /// Whether its consumer surely commits its offsets to the broker before its run ends (so
    /// the offset history must show a commit signed by its access key).
    fn commits_before_exit(&self) -> bool {
        false
    }
    /// Whether its produce summary's `first_error` carries the broker's refusal (code and
    /// remark) when a send is refused.
    fn reports_refusal(&self) -> bool {
        false
    }
    /// Program and leading arguments, or why the client is not installed.
    fn program(&self) -> Result<(PathBuf, Vec<String>), String>;
    /// Arguments to send `count` messages to `topic` as producer group `group`.
    fn produce(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        count: u32,
        keys: Option<Keys>,
    ) -> Vec<String>;
    /// Arguments to consume `topic` as `group` until `expect` messages arrived or `timeout_s`.
    fn consume(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        expect: u32,
        timeout_s: u32,
        keys: Option<Keys>,
    ) -> Vec<String>;
}

fn with_keys(mut args: Vec<String>, keys: Option<Keys>) -> Vec<String> {
    if let Some(keys) = keys {
        args.extend(["--access-key", keys.access, "--secret-key", keys.secret].map(String::from));
    }
    args
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Produce and consume arguments shared by both scripts (same flags).
fn script_produce(
    namesrv: &str,
    topic: &str,
    group: &str,
    count: u32,
    keys: Option<Keys>,
) -> Vec<String> {
    let count = count.to_string();
    let args = strings(&[
        "produce",
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--group",
        group,
        "--count",
        &count,
        "--prefix",
        "acl",
        "--max-failures",
        "3",
    ]);
    with_keys(args, keys)
}

fn script_consume(
    namesrv: &str,
    topic: &str,
    group: &str,
    expect: u32,
    timeout_s: u32,
    keys: Option<Keys>,
) -> Vec<String> {
    let (expect, timeout) = (expect.to_string(), timeout_s.to_string());
    let args = strings(&[
        "consume",
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--group",
        group,
        "--expect",
        &expect,
        "--timeout",
        &timeout,
    ]);
    with_keys(args, keys)
}

/// PyPI `rocketmq` 0.4.4 (C++ core).
struct CppCore;

impl AclClient for CppCore {
    fn name(&self) -> &'static str {
        "cpp-core"
    }
    fn program(&self) -> Result<(PathBuf, Vec<String>), String> {
        let python = interop_dir().join("venv-remoting/bin/python");
        if !python.exists() {
            return Err(format!("{} is missing", python.display()));
        }
        let script = repo_root().join("scripts/interop/py_remoting.py");
        Ok((python, vec![script.display().to_string()]))
    }
    fn produce(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        count: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        script_produce(namesrv, topic, group, count, keys)
    }
    fn consume(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        expect: u32,
        timeout_s: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        script_consume(namesrv, topic, group, expect, timeout_s, keys)
    }
}

/// npm `ali-ons` 3.12.0.
struct AliOns;

impl AclClient for AliOns {
    fn name(&self) -> &'static str {
        "ali-ons"
    }
    fn program(&self) -> Result<(PathBuf, Vec<String>), String> {
        let module = interop_dir().join("node/node_modules/ali-ons/package.json");
        if !module.exists() {
            return Err(format!("{} is missing", module.display()));
        }
        let script = repo_root().join("scripts/interop/ali_ons.js");
        Ok((PathBuf::from("node"), vec![script.display().to_string()]))
    }
    fn produce(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        count: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        script_produce(namesrv, topic, group, count, keys)
    }
    fn consume(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        expect: u32,
        timeout_s: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        script_consume(namesrv, topic, group, expect, timeout_s, keys)
    }
}

/// The official Java remoting client through `scripts/interop/java`'s driver, one JVM per run
/// (`Driver [--access-key K --secret-key S] [--tls] produce|lite-pull ...`), signing with
/// `AclClientRPCHook`, TLS by `-Dtls.enable=true` and `ClientConfig.setUseTLS`.
struct Java {
    /// rocketmq-client release (`common::java::V4` or `V5`).
    version: &'static str,
    /// Connect with TLS (name server and brokers).
    tls: bool,
}

/// Java 4.9.8, plain TCP: the ACL scenario's client.
const JAVA_ACL: Java = Java {
    version: common::java::V4,
    tls: false,
};

impl Java {
    fn args(&self, namesrv: &str, keys: Option<Keys>, command: &[&str]) -> Vec<String> {
        let mut args = strings(&["--namesrv", namesrv]);
        if self.tls {
            args.push("--tls".into());
        }
        if let Some(keys) = keys {
            args.extend(strings(&[
                "--access-key",
                keys.access,
                "--secret-key",
                keys.secret,
            ]));
        }
        args.extend(strings(command));
        args
    }
}

impl AclClient for Java {
    fn name(&self) -> &'static str {
        "java"
    }
    fn stamp(&self) -> PathBuf {
        common::java::java_dir().join("installed.stamp")
    }
    fn commits_before_exit(&self) -> bool {
        // lite-pull commits, and the consumer's shutdown persists the offsets.
        true
    }
    fn reports_refusal(&self) -> bool {
        // MQBrokerException's text: "CODE: 16  DESC: <the broker's remark>".
        true
    }
    fn program(&self) -> Result<(PathBuf, Vec<String>), String> {
        java_program(self.version)
    }
    fn produce(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        count: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        let count = count.to_string();
        let command = [
            "produce", "--topic", topic, "--group", group, "--count", &count, "--prefix", "acl",
        ];
        self.args(namesrv, keys, &command)
    }
    fn consume(
        &self,
        namesrv: &str,
        topic: &str,
        group: &str,
        expect: u32,
        timeout_s: u32,
        keys: Option<Keys>,
    ) -> Vec<String> {
        let (expect, timeout) = (expect.to_string(), timeout_s.to_string());
        let command = [
            "lite-pull",
            "--topic",
            topic,
            "--group",
            group,
            "--expect",
            &expect,
            "--timeout",
            &timeout,
        ];
        self.args(namesrv, keys, &command)
    }
}

/// `java` with the driver's classpath for rocketmq-client `version`: small heap, quick start,
/// the client's logs under `target/interop/java/runs/`.
fn java_program(version: &str) -> Result<(PathBuf, Vec<String>), String> {
    if Command::new("java").arg("-version").output().is_err() {
        return Err("no `java` on PATH".into());
    }
    let dir = common::java::java_dir().join(format!("v{version}"));
    let deps = fs::read_to_string(dir.join("classpath.txt"))
        .map_err(|e| format!("{}: {e}", dir.join("classpath.txt").display()))?;
    let home = common::java::java_dir().join("runs").join("acl-home");
    fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let args = vec![
        "-Xmx256m".to_string(),
        "-XX:+UseSerialGC".into(),
        "-XX:TieredStopAtLevel=1".into(),
        "-Xss512k".into(),
        format!("-Duser.home={}", home.display()),
        format!("-Drocketmq.client.logRoot={}", home.join("logs").display()),
        "-cp".into(),
        format!("{}:{}", dir.join("build/classes").display(), deps.trim()),
        "ferromq.interop.Driver".into(),
    ];
    Ok((PathBuf::from("java"), args))
}

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

/// The client's program, or `None` after saying why the test is skipped.
fn program_or_skip(client: &dyn AclClient, test: &str) -> Option<(PathBuf, Vec<String>)> {
    let stamp = client.stamp();
    let found = if stamp.exists() {
        client.program()
    } else {
        Err(format!("{} is missing", stamp.display()))
    };
    match found {
        Ok(program) => Some(program),
        Err(why) if required() => panic!(
            "{test}: interop clients are not installed ({why}) and FERROMQ_INTEROP_REQUIRED is set"
        ),
        Err(why) => {
            eprintln!(
                "SKIPPED {test}: {why}; run scripts/interop/install.sh (install-java.sh for Java)"
            );
            None
        }
    }
}

/// A child process killed (SIGKILL) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn line_reader(stdout: impl Read + Send + 'static) -> Receiver<String> {
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

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.chars()
        .rev()
        .take(3000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// `ferromq standalone --acl-file`; its name server and broker addresses.
struct Standalone {
    _guard: Guard,
    _lines: Receiver<String>,
    namesrv: String,
    broker: String,
    stderr: PathBuf,
}

fn standalone(dir: &Path, extra: &[&std::ffi::OsStr]) -> Standalone {
    let stderr = dir.join("standalone.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args([
            "standalone",
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--data-dir",
        ])
        .arg(dir.join("data"))
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(File::create(&stderr).unwrap()))
        .spawn()
        .expect("spawning ferromq standalone");
    let lines = line_reader(child.stdout.take().unwrap());
    let guard = Guard(child);
    let deadline = Instant::now() + STANDALONE_READY;
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = |word: &str| {
                words
                    .iter()
                    .position(|w| *w == word)
                    .map(|i| words[i + 1].to_string())
            };
            if let (Some(namesrv), Some(broker)) = (at("namesrv"), at("broker")) {
                return Standalone {
                    _guard: guard,
                    _lines: lines,
                    namesrv,
                    broker,
                    stderr,
                };
            }
        }
    }
    panic!("standalone did not start: {}", tail(&stderr));
}

/// Runs a client to the end (bounded); returns its last JSON line.
fn run(program: &(PathBuf, Vec<String>), args: &[String], dir: &Path, name: &str) -> Value {
    let stderr = dir.join(format!("{name}.stderr"));
    let mut child = Command::new(&program.0)
        .args(&program.1)
        .args(args)
        .env("HOME", dir.join("home"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(File::create(&stderr).unwrap()))
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", program.0.display()));
    let lines = line_reader(child.stdout.take().unwrap());
    let mut guard = Guard(child);
    let deadline = Instant::now() + CLIENT_DEADLINE;
    let mut last = None;
    // Keys of per-delivery lines (`{"event":"msg","keys":...}`), for drivers that print them.
    let mut delivered = BTreeSet::new();
    // Lines that are not JSON are a client library's own output (the Java client logs to
    // stdout); the summary is the last JSON line.
    let mut keep = |line: String, last: &mut Option<String>| {
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            return;
        };
        if value["event"] == "msg" {
            if delivered.len() < 100_000 {
                delivered.insert(value["keys"].to_string());
            }
            return;
        }
        *last = Some(line);
    };
    loop {
        while let Ok(line) = lines.try_recv() {
            keep(line, &mut last);
        }
        if let Ok(Some(_)) = guard.0.try_wait() {
            while let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
                keep(line, &mut last);
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} still running after {CLIENT_DEADLINE:?}; stderr:\n{}",
            tail(&stderr)
        );
        thread::sleep(Duration::from_millis(50));
    }
    let last =
        last.unwrap_or_else(|| panic!("{name} printed no JSON line; stderr:\n{}", tail(&stderr)));
    let mut summary: Value = serde_json::from_str(&last).unwrap_or_else(|e| {
        panic!(
            "{name}: last line {last:?} is not JSON ({e}); stderr:\n{}",
            tail(&stderr)
        )
    });
    if summary.get("distinct").is_none() {
        summary["distinct"] = Value::from(delivered.len());
    }
    summary
}

/// `ferromq admin updateTopic` with or without credentials; (exit success, output).
fn admin_update_topic(server: &Standalone, topic: &str, keys: Option<Keys>) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferromq"));
    command.args([
        "admin",
        "updateTopic",
        "-n",
        &server.namesrv,
        "-b",
        &server.broker,
        "-t",
        topic,
    ]);
    command
        .env_remove("FERROMQ_ACCESS_KEY")
        .env_remove("FERROMQ_SECRET_KEY");
    if let Some(keys) = keys {
        // The secret through the environment, as a user would keep it out of `ps`.
        command
            .args(["--access-key", keys.access])
            .env("FERROMQ_SECRET_KEY", keys.secret);
    }
    let output = command.output().expect("running ferromq admin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// `ferromq admin offsetHistory` of the consumers' group: every commit names `access` (the
/// key the client signed with), and there is one when the client commits before it exits.
fn assert_commits_signed_by(server: &Standalone, client: &dyn AclClient, access: &str) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferromq"));
    command
        .args([
            "admin",
            "offsetHistory",
            "-n",
            &server.namesrv,
            "-b",
            &server.broker,
        ])
        .args(["-g", "AclConsumers", "-t", "AclTopic", "--json"])
        .args(["--access-key", ADMIN.access, "--secret-key", ADMIN.secret])
        .env_remove("FERROMQ_ACCESS_KEY")
        .env_remove("FERROMQ_SECRET_KEY");
    let output = command
        .output()
        .expect("running ferromq admin offsetHistory");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "offsetHistory: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let history: Value = serde_json::from_str(&text).expect("offsetHistory --json");
    let commits: Vec<&Value> = history["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "commit")
        .collect();
    assert!(
        commits.iter().all(|e| e["accessKey"] == access),
        "{}: commits not all signed by {access}: {history}",
        client.name()
    );
    assert!(
        !client.commits_before_exit() || !commits.is_empty(),
        "{}: no commit in the history: {history}",
        client.name()
    );
}

fn scenario(client: &dyn AclClient, test: &str) {
    let Some(program) = program_or_skip(client, test) else {
        return;
    };
    let dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("home")).unwrap();
    let accounts = dir.join("plain_acl.yml");
    fs::write(&accounts, ACCOUNTS).unwrap();
    let server = standalone(&dir, &["--acl-file".as_ref(), accounts.as_os_str()]);
    let topic = "AclTopic";
    // ferromq admin: refused without credentials, served with an admin account.
    let (ok, text) = admin_update_topic(&server, topic, None);
    assert!(!ok && text.contains("not signed"), "unsigned admin: {text}");
    let (ok, text) = admin_update_topic(&server, topic, Some(USER));
    assert!(!ok && text.contains("not an admin"), "non-admin: {text}");
    let (ok, text) = admin_update_topic(&server, topic, Some(ADMIN));
    assert!(
        ok,
        "admin updateTopic failed: {text}\n{}",
        tail(&server.stderr)
    );
    // Without credentials, and with a wrong secret: nothing is sent.
    for (keys, label, remark) in [
        (None, "unsigned", "not signed"),
        (Some(WRONG), "wrong-secret", "signature"),
    ] {
        let args = client.produce(&server.namesrv, topic, "AclProducers", 3, keys);
        let summary = run(&program, &args, &dir, &format!("produce-{label}"));
        assert_eq!(summary["sent"], 0, "{} {label}: {summary}", client.name());
        // A client that reports the broker's refusal (Java) shows NO_PERMISSION.
        if client.reports_refusal() {
            let error = summary["first_error"].as_str().unwrap_or_default();
            assert!(
                error.contains("CODE: 16") && error.contains(remark),
                "{} {label}: {summary}",
                client.name()
            );
        }
    }
    // With credentials: produced and consumed.
    let args = client.produce(&server.namesrv, topic, "AclProducers", COUNT, Some(USER));
    let summary = run(&program, &args, &dir, "produce");
    assert_eq!(
        summary["sent"],
        COUNT,
        "{}: {summary}\n{}",
        client.name(),
        tail(&server.stderr)
    );
    let args = client.consume(
        &server.namesrv,
        topic,
        "AclConsumers",
        COUNT,
        60,
        Some(USER),
    );
    let summary = run(&program, &args, &dir, "consume");
    assert_eq!(
        summary["distinct"],
        COUNT,
        "{}: {summary}\n{}",
        client.name(),
        tail(&server.stderr)
    );
    assert_commits_signed_by(&server, client, USER.access);
    // Without credentials the consumer gets nothing.
    let args = client.consume(&server.namesrv, topic, "AclConsumers", COUNT, 8, None);
    let summary = run(&program, &args, &dir, "consume-unsigned");
    // Either the consumer starts and receives nothing (the C++ core), or its start is
    // refused with the broker's remark (ali-ons fails on its first refused heartbeat).
    let refused_at_start = summary["ok"] == false
        && summary["error"]
            .as_str()
            .is_some_and(|e| e.contains("not signed"));
    assert!(
        summary["received"] == 0 || refused_at_start,
        "{} unsigned consume: {summary}",
        client.name()
    );
}

#[test]
fn cpp_core_signs_and_is_refused_without_credentials() {
    scenario(&CppCore, "acl_cpp_core");
}

#[test]
fn ali_ons_signs_and_is_refused_without_credentials() {
    scenario(&AliOns, "acl_ali_ons");
}

#[test]
fn java_signs_and_is_refused_without_credentials() {
    scenario(&JAVA_ACL, "acl_java");
}

/// TLS with the official Java client 5.5.0 (`-Dtls.enable=true`; its default
/// `tls.test.mode.enable` trusts the self-signed certificate): against `ferromq standalone
/// --tls-mode enforcing` (name server and broker both TLS only) it produces and consumes; the
/// same client without TLS is refused (it gets no route, so it sends nothing).
#[test]
fn java_over_tls_is_served_by_an_enforcing_server_and_a_plain_one_refused() {
    let test = "tls_java";
    let secure = Java {
        version: common::java::V5,
        tls: true,
    };
    let plain = Java {
        version: common::java::V5,
        tls: false,
    };
    let Some(program) = program_or_skip(&secure, test) else {
        return;
    };
    let dir = interop_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("home")).unwrap();
    let (cert, key) = common::certificate(&dir);
    let server = standalone(
        &dir,
        &[
            "--tls-mode".as_ref(),
            "enforcing".as_ref(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    );
    let (topic, count) = ("TlsTopic", 10);
    let args = secure.produce(&server.namesrv, topic, "TlsProducers", count, None);
    let summary = run(&program, &args, &dir, "produce-tls");
    assert_eq!(
        summary["sent"],
        count,
        "{summary}\n{}",
        tail(&server.stderr)
    );
    let args = secure.consume(&server.namesrv, topic, "TlsConsumers", count, 60, None);
    let summary = run(&program, &args, &dir, "consume-tls");
    assert_eq!(
        summary["distinct"],
        count,
        "{summary}\n{}",
        tail(&server.stderr)
    );
    let args = plain.produce(&server.namesrv, topic, "TlsProducers", 3, None);
    let summary = run(&program, &args, &dir, "produce-plain");
    assert_eq!(summary["sent"], 0, "a plain client was served: {summary}");
    let refused = fs::read_to_string(&server.stderr).unwrap_or_default();
    assert!(
        refused.contains("connection refused before its first request"),
        "the server logged no refused plain connection:\n{}",
        tail(&server.stderr)
    );
}
