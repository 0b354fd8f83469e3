//! Server processes the harness starts and hurts: start, kill -9, SIGSTOP/SIGCONT, stop.
//!
//! A [`Node`] is one child process with a fixed command line (a `ferromq` subcommand). It is
//! generic over what it runs so that a cluster (name servers, several brokers) is a list of
//! nodes; [`Standalone`] wraps the node of `ferromq standalone` and knows its announcement.
//!
//! Invariants:
//! 1. Every wait is bounded: readiness by the caller's timeout, exits by [`EXIT_WAIT`].
//! 2. No orphan: a node's child is killed (SIGKILL) when the node is dropped, whatever the
//!    path out (error, panic unwinding, Ctrl-C dropping the run), and `kill_on_drop` backs
//!    that up. SIGKILL also ends a SIGSTOPped process.
//! 3. Signals go only to the node's own child, by pid, through the `kill` utility (no new
//!    dependency, no `unsafe`).
//! 4. A node's stderr is appended to its log file across restarts, so a failure can quote it.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Longest wait for a killed or stopped process to exit.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Lines of a node's log quoted in an error.
const LOG_TAIL_LINES: usize = 15;

/// What can go wrong with a node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The process could not be spawned or signalled.
    #[error("node {node}: {action}: {source}")]
    Io {
        /// The node's name.
        node: String,
        /// What was being done.
        action: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The process exited (or closed stdout) before announcing itself.
    #[error("node {node} exited before it was ready ({status}); log tail: {log_tail}")]
    Exited {
        /// The node's name.
        node: String,
        /// Exit status, as text.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The process did not announce itself in time; it was killed.
    #[error("node {node} was not ready within {after:?}; log tail: {log_tail}")]
    NotReady {
        /// The node's name.
        node: String,
        /// The timeout.
        after: Duration,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The announcement could not be understood.
    #[error("node {node} announced {line:?}, expected {expected}")]
    BadAnnouncement {
        /// The node's name.
        node: String,
        /// The line it printed.
        line: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An operation needs a running process.
    #[error("node {node} is not running")]
    NotRunning {
        /// The node's name.
        node: String,
    },
}

/// One server process: its command line, and the child while it runs.
#[derive(Debug)]
pub struct Node {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// A node named `name` that runs `program args`, stderr appended to `log`. Not started.
    pub fn new(name: &str, program: &Path, args: Vec<OsString>, log: PathBuf) -> Node {
        Node {
            name: name.to_string(),
            program: program.to_path_buf(),
            args,
            log,
            child: None,
            paused: false,
        }
    }

    /// The node's name (used in fault records).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Replaces the command line used by the next start (e.g. to pin the ports chosen by
    /// the first one).
    pub fn set_args(&mut self, args: Vec<OsString>) {
        self.args = args;
    }

    /// True while a child runs (paused or not).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// True while the child is SIGSTOPped.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Starts the process and returns the first line it prints on stdout (its announcement),
    /// waiting at most `ready`. The rest of stdout is read and discarded.
    ///
    /// # Errors
    /// [`NodeError::Exited`] or [`NodeError::NotReady`] (the child is killed) with the tail
    /// of its log; [`NodeError::Io`] when it cannot be spawned.
    pub async fn start(&mut self, ready: Duration) -> Result<String, NodeError> {
        if self.child.is_some() {
            self.kill().await?;
        }
        let io = |action| {
            let node = self.name.clone();
            move |source| NodeError::Io {
                node,
                action,
                source,
            }
        };
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io("opening the log"))?;
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(io("spawning"))?;
        let stdout = child.stdout.take();
        self.child = Some(child);
        self.paused = false;
        let Some(stdout) = stdout else {
            return Err(self.failed_start(None).await);
        };
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(ready, async {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) if line.trim().is_empty() => continue,
                    Ok(Some(line)) => return Some(line),
                    Ok(None) | Err(_) => return None,
                }
            }
        })
        .await;
        match first {
            Ok(Some(line)) => {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Ok(line)
            }
            Ok(None) => Err(self.failed_start(None).await),
            Err(_) => Err(self.failed_start(Some(ready)).await),
        }
    }

    async fn failed_start(&mut self, timed_out: Option<Duration>) -> NodeError {
        let status = match self.child.take() {
            Some(mut child) => {
                let _ = child.start_kill();
                match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "did not exit".to_string(),
                }
            }
            None => "not started".to_string(),
        };
        let log_tail = log_tail(&self.log);
        match timed_out {
            Some(after) => NodeError::NotReady {
                node: self.name.clone(),
                after,
                log_tail,
            },
            None => NodeError::Exited {
                node: self.name.clone(),
                status,
                log_tail,
            },
        }
    }

    /// kill -9: SIGKILL, then waits (bounded) for the exit. A node not running is left alone.
    ///
    /// # Errors
    /// [`NodeError::Io`] when the signal cannot be sent or the process does not exit.
    pub async fn kill(&mut self) -> Result<(), NodeError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        self.paused = false;
        let node = self.name.clone();
        child.start_kill().map_err(|source| NodeError::Io {
            node: node.clone(),
            action: "sending SIGKILL",
            source,
        })?;
        match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(NodeError::Io {
                node,
                action: "waiting for the exit after SIGKILL",
                source,
            }),
            Err(_) => Err(NodeError::Io {
                node,
                action: "waiting for the exit after SIGKILL",
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, "still running"),
            }),
        }
    }

    /// SIGTERM (after SIGCONT if paused), waits up to [`EXIT_WAIT`] for a clean exit, then
    /// SIGKILL. A node not running is left alone.
    ///
    /// # Errors
    /// As [`Node::kill`].
    pub async fn stop(&mut self) -> Result<(), NodeError> {
        if self.child.is_none() {
            return Ok(());
        }
        if self.paused {
            self.resume().await?;
        }
        self.signal("TERM").await?;
        let exited = match self.child.as_mut() {
            Some(child) => tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_ok(),
            None => true,
        };
        if exited {
            self.child = None;
            Ok(())
        } else {
            self.kill().await
        }
    }

    /// SIGSTOP: the process freezes with its sockets open.
    ///
    /// # Errors
    /// [`NodeError::NotRunning`], or [`NodeError::Io`] when `kill -STOP` fails.
    pub async fn pause(&mut self) -> Result<(), NodeError> {
        self.signal("STOP").await?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after [`Node::pause`].
    ///
    /// # Errors
    /// As [`Node::pause`].
    pub async fn resume(&mut self) -> Result<(), NodeError> {
        self.signal("CONT").await?;
        self.paused = false;
        Ok(())
    }

    /// Sends `SIG<name>` to the child through `kill -<name> <pid>`.
    async fn signal(&mut self, name: &str) -> Result<(), NodeError> {
        let pid = self
            .child
            .as_ref()
            .and_then(Child::id)
            .ok_or_else(|| NodeError::NotRunning {
                node: self.name.clone(),
            })?;
        let io = |source| NodeError::Io {
            node: self.name.clone(),
            action: "running kill",
            source,
        };
        let status = tokio::time::timeout(
            EXIT_WAIT,
            Command::new("kill")
                .arg(format!("-{name}"))
                .arg(pid.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .status(),
        )
        .await
        .map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "kill hung",
            ))
        })?
        .map_err(io)?;
        if status.success() {
            Ok(())
        } else {
            Err(io(std::io::Error::other(format!(
                "kill -{name} {pid} exited with {status}"
            ))))
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            // SIGKILL ends a stopped process too; tokio reaps it in the background.
            let _ = child.start_kill();
        }
    }
}

/// The last [`LOG_TAIL_LINES`] lines of `path`, joined with ` | ` (empty if unreadable).
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join(" | ")
}

/// Flush policy of a broker (`--flush`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// SYNC_FLUSH: acknowledged once fsynced.
    Sync,
    /// ASYNC_FLUSH: acknowledged once written; a kill -9 may lose the unflushed tail.
    Async,
}

impl Flush {
    /// The flag value (`sync`, `async`).
    pub fn name(self) -> &'static str {
        match self {
            Flush::Sync => "sync",
            Flush::Async => "async",
        }
    }
}

/// `ferromq standalone` (name server + broker in one process) as a node.
#[derive(Debug)]
pub struct Standalone {
    node: Node,
    data_dir: PathBuf,
    flush: Flush,
    advertise: SocketAddr,
    /// The name server's address (fixed after the first start).
    pub namesrv: SocketAddr,
    /// The broker's listen address (fixed after the first start).
    pub broker: SocketAddr,
}

/// How long a standalone start (store recovery included) may take.
pub const STANDALONE_READY: Duration = Duration::from_secs(30);

/// Starts of a restart tried before giving up (the old ports may linger a moment).
const RESTART_ATTEMPTS_MAX: u32 = 5;

impl Standalone {
    /// Starts `program standalone` on OS-chosen ports, data under `data_dir`, registering
    /// `advertise` as the broker address; stderr goes to `log`.
    ///
    /// # Errors
    /// As [`Node::start`], or [`NodeError::BadAnnouncement`].
    pub async fn start(
        program: &Path,
        data_dir: &Path,
        flush: Flush,
        advertise: SocketAddr,
        log: PathBuf,
    ) -> Result<Standalone, NodeError> {
        let args = standalone_args(data_dir, 0, 0, flush, advertise);
        let mut node = Node::new("standalone", program, args, log);
        let line = node.start(STANDALONE_READY).await?;
        let (namesrv, broker) = parse_announcement(&line).ok_or(NodeError::BadAnnouncement {
            node: "standalone".into(),
            line,
            expected: "ferromq standalone: namesrv ADDR broker ADDR data DIR",
        })?;
        node.set_args(standalone_args(
            data_dir,
            namesrv.port(),
            broker.port(),
            flush,
            advertise,
        ));
        Ok(Standalone {
            node,
            data_dir: data_dir.to_path_buf(),
            flush,
            advertise,
            namesrv,
            broker,
        })
    }

    /// The process.
    pub fn node(&mut self) -> &mut Node {
        &mut self.node
    }

    /// Starts the process again on the same ports and data directory (after a kill), retrying
    /// a few times while the old ports are still held.
    ///
    /// # Errors
    /// The last start's error.
    pub async fn restart(&mut self) -> Result<(), NodeError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.node.start(STANDALONE_READY).await;
            match result {
                Ok(line) => {
                    return match parse_announcement(&line) {
                        Some((namesrv, broker))
                            if namesrv == self.namesrv && broker == self.broker =>
                        {
                            Ok(())
                        }
                        _ => Err(NodeError::BadAnnouncement {
                            node: self.node.name.clone(),
                            line,
                            expected: "the same addresses as the first start",
                        }),
                    }
                }
                Err(error) if attempt >= RESTART_ATTEMPTS_MAX => return Err(error),
                Err(error) => {
                    tracing::warn!(%error, attempt, "standalone restart failed; retrying");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The flush policy.
    pub fn flush(&self) -> Flush {
        self.flush
    }

    /// The broker address registered with the name server.
    pub fn advertise(&self) -> SocketAddr {
        self.advertise
    }
}

fn standalone_args(
    data_dir: &Path,
    namesrv_port: u16,
    broker_port: u16,
    flush: Flush,
    advertise: SocketAddr,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["standalone".into(), "--data-dir".into()];
    args.push(data_dir.as_os_str().to_owned());
    for (flag, value) in [
        ("--namesrv-port", namesrv_port.to_string()),
        ("--broker-port", broker_port.to_string()),
        // Chaos drives remoting only; several nodes must not contend for gRPC's 8081.
        ("--grpc-port", "-1".to_string()),
        ("--flush", flush.name().to_string()),
        ("--advertise", advertise.to_string()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

/// Parses `ferromq standalone: namesrv ADDR broker ADDR data DIR`.
fn parse_announcement(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = line.trim().strip_prefix("ferromq standalone: namesrv ")?;
    let mut words = rest.split_whitespace();
    let namesrv = words.next()?.parse().ok()?;
    (words.next()? == "broker").then_some(())?;
    let broker = words.next()?.parse().ok()?;
    Some((namesrv, broker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_parse_and_garbage_does_not() {
        let (n, b) = parse_announcement(
            "ferromq standalone: namesrv 127.0.0.1:9876 broker 127.0.0.1:10911 data /tmp/x",
        )
        .unwrap();
        assert_eq!(n.port(), 9876);
        assert_eq!(b.port(), 10911);
        assert!(parse_announcement("ferromq standalone: namesrv x broker y").is_none());
        assert!(parse_announcement("hello").is_none());
    }
}
