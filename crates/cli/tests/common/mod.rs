//! Helpers shared by the `ferromq` process tests: a `ferromq standalone` killed on drop, its
//! address line read with a bound, and `ferromq admin` runs (bounded, `TZ=UTC0` so times are
//! read and printed in UTC unless a test names another zone), `ferromq bench` runs read as
//! JSON, and a self-signed certificate for the TLS tests.

#![allow(dead_code)] // Each test file uses part of these helpers.

/// Waits (bounded) until `$cond` (which may `.await`) holds.
#[allow(unused_macros)]
macro_rules! eventually {
    ($secs:expr, $what:expr, $cond:expr) => {{
        let deadline = Instant::now() + Duration::from_secs($secs);
        loop {
            if $cond {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {} s waiting for {}",
                $secs,
                $what
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }};
}

pub mod grpc_interop;
pub mod java;
pub mod remoting;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A standalone server, killed on drop.
pub struct Standalone {
    child: Child,
    pub namesrv: String,
    pub broker: String,
    _dir: Option<tempfile::TempDir>,
}

impl Standalone {
    /// Stops it with SIGTERM (a clean stop: checkpoint, no abort marker) and asserts it
    /// exits 0 within 30 s.
    pub fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "standalone exited with {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "standalone did not stop within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ferromq standalone` on OS-chosen ports with a fresh data directory; returns once
/// it printed its address line (panics after 30 s without one).
pub fn start() -> Standalone {
    start_with(&[])
}

/// [`start`] with extra standalone flags (e.g. `["--flush", "async"]`).
pub fn start_with(extra: &[&str]) -> Standalone {
    let dir = tempfile::tempdir().unwrap();
    let mut standalone = start_in(&dir.path().join("data"), extra);
    standalone._dir = Some(dir);
    standalone
}

/// [`start_with`] on a data directory the caller keeps (to restart on the same data).
pub fn start_in(data_dir: &std::path::Path, extra: &[&str]) -> Standalone {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["standalone", "--namesrv-port", "0", "--broker-port", "0"])
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let Some(line) = first_line(&mut child) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("standalone printed no address line within 30 s");
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(2), Some(&"namesrv"), "{line}");
    Standalone {
        namesrv: words[3].to_string(),
        broker: words[5].to_string(),
        child,
        _dir: None,
    }
}

/// The first line `child` prints on its (piped) stdout, or `None` when none came within 30 s.
pub fn first_line(child: &mut Child) -> Option<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(Duration::from_secs(30)).ok()
}

/// Runs `ferromq admin args` with `TZ=UTC0`.
pub fn admin(args: &[&str]) -> Output {
    admin_in_zone(args, "UTC0")
}

/// Runs `ferromq admin` with `TZ` set (times are read and printed in that zone); panics when
/// it does not finish within 60 s.
pub fn admin_in_zone(args: &[&str], zone: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferromq"));
    command.arg("admin").args(args).env("TZ", zone);
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

/// Asserts `ferromq admin args` succeeds; returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = admin(args);
    assert!(
        out.status.success(),
        "ferromq admin {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `ferromq admin args --json`; returns the last stdout line parsed.
pub fn ok_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let stdout = ok(&all);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{args:?}: last line {last:?}: {e}"))
}

/// Asserts a failure with the given exit code and one stderr line; returns that line.
pub fn fails(args: &[&str], code: i32) -> String {
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

/// Sends signal `name` (`TERM`, `INT`, ...) to `child` by pid through the `kill` utility.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for `child` to exit; panics after 30 s.
pub fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `ferromq standalone` started through `bash -c` (so a test can lower its limits first,
/// e.g. `ulimit -n 256`), on OS-chosen ports with its metrics endpoint, its stderr kept in
/// a file; killed on drop.
pub struct LoggedStandalone {
    child: Child,
    pub namesrv: String,
    pub broker: String,
    /// `host:port` of the metrics endpoint.
    pub metrics: String,
    log: std::path::PathBuf,
}

impl Drop for LoggedStandalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LoggedStandalone {
    /// Starts it on `data_dir` after running the shell commands `prelude` (`""` for none);
    /// stderr goes to `log`. Returns once it printed its address line (panics after 30 s).
    pub fn start(prelude: &str, data_dir: &std::path::Path, log: &std::path::Path) -> Self {
        let script = format!("{prelude}\nexec \"$0\" \"$@\"");
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_ferromq"))
            .args(["standalone", "--namesrv-port", "0", "--broker-port", "0"])
            .args(["--metrics-port", "0", "--data-dir"])
            .arg(data_dir)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let Some(line) = first_line(&mut child) else {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = std::fs::read_to_string(log).unwrap_or_default();
            panic!("standalone printed no address line within 30 s: {stderr}");
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.get(2), Some(&"namesrv"), "{line}");
        let stderr = std::fs::read_to_string(log).unwrap();
        let metrics = stderr
            .lines()
            .find_map(|l| l.strip_prefix("ferromq standalone: metrics http://"))
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no metrics address on stderr: {stderr}"))
            .to_string();
        LoggedStandalone {
            namesrv: words[3].to_string(),
            broker: words[5].to_string(),
            metrics,
            child,
            log: log.to_path_buf(),
        }
    }

    /// Its process id (the shell `exec`s into `ferromq`, so this is the server itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then its exit status and whole stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        signal(&self.child, "TERM");
        let status = wait_exit(&mut self.child);
        (status, self.stderr())
    }

    /// The value of one sample of its metrics (`name` or `name{label="value"}`, exactly as
    /// the endpoint prints it); `None` when absent.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = http_get(&self.metrics, "/metrics");
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }
}

/// GET `path` from `addr` over plain HTTP/1.1; the whole response (panics after 10 s).
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// Creates `topic` on `broker` with `queues` read and write queues (`updateTopic`) and waits
/// until the name server routes it.
pub fn create_topic(namesrv: &str, broker: &str, topic: &str, queues: &str) {
    ok(&[
        "updateTopic",
        "-n",
        namesrv,
        "-b",
        broker,
        "-t",
        topic,
        "-r",
        queues,
        "-w",
        queues,
    ]);
    wait_route(namesrv, topic);
}

/// Waits (bounded) until the name server serves the topic's route.
pub fn wait_route(namesrv: &str, topic: &str) {
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

/// Runs `ferromq bench <args>` with the environment variables `env` added (e.g.
/// `FERROMQ_ALLOCATOR`) and returns its last stdout line as JSON; panics, with both outputs,
/// when it fails or that line is not JSON.
pub fn bench(env: &[(&str, &str)], args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .envs(env.iter().copied())
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

#[path = "../../../../test-support/certificate.rs"]
mod certificate;
#[allow(unused_imports)] // not every test file of the crate uses it
pub use certificate::certificate;

/// Asserts that a bench report's p50-to-baseline ratio is the one its own figures give:
/// `report[ratio] == report[p50] / report[base_p50]`, with a positive baseline p50 no greater
/// than its p99 (`report[base_p99]`).
pub fn assert_p50_ratio(report: &Value, ratio: &str, p50: &str, base_p50: &str, base_p99: &str) {
    let figure = |key: &str| {
        report[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {report}"))
    };
    let base = figure(base_p50);
    assert!(base > 0.0, "{base_p50}: {report}");
    assert!(
        figure(base_p99) >= base,
        "{base_p99} below {base_p50}: {report}"
    );
    let expected = figure(p50) / base;
    let actual = figure(ratio);
    assert!(
        (actual - expected).abs() < 1e-3 * expected.max(1.0),
        "{ratio} {actual} vs {p50} / {base_p50} = {expected}: {report}"
    );
}
