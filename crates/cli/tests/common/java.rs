//! The Java interop harness: the skip rule, a `ferromq standalone` that can be killed with -9
//! and restarted on the same ports and data, and the long-lived Java driver
//! (`scripts/interop/java`, built by `scripts/interop/install-java.sh`) spoken to over
//! stdin/stdout JSON lines. Every wait is bounded.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The two pinned releases of the official remoting client (see install-java.sh).
pub const V4: &str = "4.9.8";
pub const V5: &str = "5.5.0";
/// How long `ferromq standalone` may take to print its ports.
const STANDALONE_READY: Duration = Duration::from_secs(30);
/// How long the JVM may take to print its `ready` line.
const DRIVER_READY: Duration = Duration::from_secs(60);
/// Lines of driver output kept; a run that prints more is a bug in the test.
const MAX_LINES: usize = 200_000;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

pub fn java_dir() -> PathBuf {
    repo_root().join("target/interop/java")
}

pub fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The driver's classpath for `version`, or `None` (after saying why) when the test should be
/// skipped. Panics when it is missing and `FERROMQ_INTEROP_REQUIRED` is set.
pub fn classpath_or_skip(version: &str, test: &str) -> Option<String> {
    let dir = java_dir().join(format!("v{version}"));
    let found = (|| {
        if !java_dir().join("installed.stamp").exists() {
            return Err(format!(
                "{} is missing",
                java_dir().join("installed.stamp").display()
            ));
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
        Ok(cp) => Some(cp),
        Err(why) if required() => panic!(
            "{test}: the Java driver is not installed ({why}) and FERROMQ_INTEROP_REQUIRED is \
             set: run scripts/interop/install-java.sh"
        ),
        Err(why) => {
            eprintln!(
                "SKIPPED {test}: Java driver not installed ({why}); run \
                 scripts/interop/install-java.sh (scripts/test does, and sets \
                 FERROMQ_INTEROP_REQUIRED=1)"
            );
            None
        }
    }
}

/// A fresh `target/interop/java/runs/<test>/` for logs, data and the JVM's home.
pub fn run_dir(test: &str) -> PathBuf {
    let dir = java_dir().join("runs").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("home")).expect("creating the run directory");
    dir
}

pub fn tail(path: &Path, max: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("({} not readable)", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max as u64)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    text
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

// ---------------------------------------------------------------------------------------------
// ferromq standalone on fixed ports

/// A `ferromq standalone`; SIGKILLed when dropped.
pub struct Server {
    child: Child,
    pub namesrv: String,
    pub broker: String,
    pub ports: (u16, u16),
    pub data: PathBuf,
    pub stderr_path: PathBuf,
    extra: Vec<String>,
    runs: u32,
    _stdin: Option<ChildStdin>,
}

impl Server {
    /// Starts standalone in `dir/data` on OS-chosen ports.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Server::spawn(dir.join("data"), (0, 0), extra, 1)
    }

    fn spawn(data: PathBuf, ports: (u16, u16), extra: Vec<String>, runs: u32) -> Server {
        let stderr_path = data.with_file_name(format!("standalone-{runs}.stderr"));
        let stderr = File::create(&stderr_path).expect("standalone stderr file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .arg("standalone")
            .arg("--data-dir")
            .arg(&data)
            .args(["--namesrv-port", &ports.0.to_string()])
            .args(["--broker-port", &ports.1.to_string()])
            .args(["--grpc-port", "0"])
            .args(&extra)
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
        let lines = line_reader(child.stdout.take().expect("stdout"));
        let deadline = Instant::now() + STANDALONE_READY;
        loop {
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    if words.get(2) == Some(&"namesrv") && words.get(4) == Some(&"broker") {
                        let namesrv = words[3].to_string();
                        let broker = words[5].to_string();
                        let port = |a: &str| a.rsplit(':').next().unwrap().parse().unwrap();
                        return Server {
                            ports: (port(&namesrv), port(&broker)),
                            namesrv,
                            broker,
                            child,
                            data,
                            stderr_path,
                            extra,
                            runs,
                            _stdin: stdin,
                        };
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => thread::sleep(Duration::from_millis(100)),
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "standalone exited ({status}) before printing its ports:\n{}",
                    tail(&stderr_path, 3000)
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "standalone printed no ports line within {} s:\n{}",
                    STANDALONE_READY.as_secs(),
                    tail(&stderr_path, 3000)
                );
            }
        }
    }

    /// kill -9 (no checkpoint, no clean shutdown) and reap.
    pub fn kill9(mut self) -> (PathBuf, (u16, u16), Vec<String>, u32) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (
            self.data.clone(),
            self.ports,
            std::mem::take(&mut self.extra),
            self.runs,
        )
    }

    /// kill -9, then a new standalone on the same data and ports after `pause`.
    pub fn kill9_and_restart(self, pause: Duration) -> Server {
        let (data, ports, extra, runs) = self.kill9();
        thread::sleep(pause);
        Server::restart(data, ports, extra, runs)
    }

    /// Starts again on `data` and `ports` (from [`Server::kill9`]).
    pub fn restart(data: PathBuf, ports: (u16, u16), extra: Vec<String>, runs: u32) -> Server {
        Server::spawn(data, ports, extra, runs + 1)
    }

    pub fn stderr_tail(&self) -> String {
        format!(
            "standalone stderr ({}):\n{}",
            self.stderr_path.display(),
            tail(&self.stderr_path, 3000)
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// The Java driver

/// One JVM running `ferromq.interop.Driver serve`; SIGKILLed when dropped.
pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every event line (deliveries, check-backs) seen so far, in order.
    pub events: Vec<Value>,
    seq: u64,
    pub version: String,
    pub stderr_path: PathBuf,
}

impl Driver {
    /// Starts the driver for `namesrv` with the given global flags; waits for `ready`.
    pub fn start(classpath: &str, dir: &Path, namesrv: &str, global: &[&str]) -> Driver {
        let stderr_path = dir.join("driver.stderr");
        let stderr = File::create(&stderr_path).expect("driver stderr file");
        let home = dir.join("home");
        // 4.9.x mqadmin configures its logging from `<rocketmq.home.dir>/conf/
        // logback_tools.xml` and does not run a command without it: give it a quiet one.
        let rocketmq_home = dir.join("rocketmq-home");
        std::fs::create_dir_all(rocketmq_home.join("conf")).expect("rocketmq home");
        std::fs::write(
            rocketmq_home.join("conf/logback_tools.xml"),
            "<configuration><root level=\"OFF\"/></configuration>\n",
        )
        .expect("logback_tools.xml");
        let mut child = Command::new("java")
            .args([
                "-Xmx512m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xss512k",
            ])
            .arg(format!("-Duser.home={}", home.display()))
            .arg(format!("-Drocketmq.home.dir={}", rocketmq_home.display()))
            .arg(format!(
                "-Drocketmq.client.logRoot={}",
                home.join("logs").display()
            ))
            .args([
                "-cp",
                classpath,
                "ferromq.interop.Driver",
                "--namesrv",
                namesrv,
            ])
            .args(global)
            .arg("serve")
            // Files a tool writes relative to its working directory (mqadmin consumerStatus
            // writes one per client) land in the run directory, not the source tree.
            .current_dir(dir)
            .env("HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawning java (is a JDK on PATH?)");
        let stdin = child.stdin.take().expect("driver stdin");
        let lines = line_reader(child.stdout.take().expect("driver stdout"));
        let mut driver = Driver {
            child,
            stdin,
            lines,
            events: Vec::new(),
            seq: 0,
            version: String::new(),
            stderr_path,
        };
        let ready = driver.wait_line(DRIVER_READY, |v| v["event"] == "ready");
        driver.version = ready["version"].as_str().unwrap_or("?").to_string();
        eprintln!("java driver up: rocketmq-client {}", driver.version);
        driver
    }

    /// Reads lines until one satisfies `pred` (returned) or `timeout` passes (panic); other
    /// JSON lines are kept in `events`.
    fn wait_line(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => {
                    let Ok(value) = serde_json::from_str::<Value>(&line) else {
                        continue; // a client library's own stdout line
                    };
                    if pred(&value) {
                        return value;
                    }
                    assert!(
                        self.events.len() < MAX_LINES,
                        "driver printed over {MAX_LINES} events"
                    );
                    self.events.push(value);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "java driver exited; stderr:\n{}",
                        tail(&self.stderr_path, 4000)
                    )
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "java driver: nothing matched within {} s; stderr:\n{}",
                    timeout.as_secs(),
                    tail(&self.stderr_path, 4000)
                );
            }
        }
    }

    /// Sends one command line and returns its reply (bounded by `timeout`).
    pub fn call(&mut self, command: &str, timeout: Duration) -> Value {
        self.seq += 1;
        let seq = self.seq;
        writeln!(self.stdin, "{command}").expect("writing to the java driver");
        self.stdin
            .flush()
            .expect("flushing the java driver's stdin");
        let reply = self.wait_line(timeout, |v| v["seq"] == seq);
        eprintln!("java> {command}\njava< {}", abbreviate(&reply));
        reply
    }

    /// [`Driver::call`], asserting `"ok": true`.
    pub fn ok(&mut self, command: &str, timeout: Duration) -> Value {
        let reply = self.call(command, timeout);
        assert!(
            reply["ok"] == true,
            "java driver `{command}` failed: {reply}\nstderr:\n{}",
            tail(&self.stderr_path, 3000)
        );
        reply
    }

    /// Moves the lines printed so far into `events` without blocking.
    pub fn pump(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            if let Ok(value) = serde_json::from_str::<Value>(&line) {
                self.events.push(value);
            }
        }
    }

    /// Waits until `done(events)` holds, pumping lines; false after `timeout`.
    pub fn wait_events(&mut self, timeout: Duration, done: impl Fn(&[Value]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.pump();
            if done(&self.events) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Deliveries (`event: msg`) of consumer `name`.
    pub fn deliveries<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.events
            .iter()
            .filter(move |e| e["event"] == "msg" && e["consumer"] == name)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn abbreviate(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 600 {
        format!("{}…", text.chars().take(600).collect::<String>())
    } else {
        text
    }
}
