//! `ferromq bench rss`: the broker's resident memory with many topics and many idle
//! connections.
//!
//! Starts `ferromq standalone` as a child process (ASYNC_FLUSH, scratch directory, free
//! ports), creates `--topics` topics of `--queues` queues each through UPDATE_AND_CREATE_TOPIC
//! (as `mqadmin updateTopic` and `ensure_topic` do), then opens `--connections` TCP
//! connections to the broker's remoting port and leaves them silent. It reads VmRSS and VmHWM
//! from `/proc/<pid>/status` at the idle start, after the topics and after the connections,
//! and the broker's CPU time over `--idle-seconds` before the connections and again with every
//! connection open. Memory and CPU per idle connection are checked against
//! [`RSS_PER_CONNECTION_MAX`] and [`IDLE_CPU_MAX`] once there are at least
//! [`BOUND_MIN_CONNECTIONS`] connections (below that, allocator noise dominates the
//! per-connection figure).
//!
//! Descriptors: this process raises its soft open-file limit to the hard one and refuses to
//! run when the hard limit cannot hold the connections; the child raises its own at start
//! (`fd_limit`), and the bench refuses when the broker's connection limit, derived from the
//! child's soft limit as the broker derives it, is below `--connections`.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::value_parser;
use ferromq_client::ConnectionPool;
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::limits::{DEFAULT_MAX_CONNECTIONS, FD_RESERVE_MIN};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

/// Descriptors this process needs besides the idle connections (stdio, the admin
/// connection, the runtime's own).
const FD_HEADROOM: u64 = 256;
/// Bound on the child's start (it prints its addresses once both servers listen).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on the broker accepting every connection.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on each UPDATE_AND_CREATE_TOPIC.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Topic creations in flight at once.
const CREATE_WINDOW: usize = 8;
/// Pause before each memory reading, so background work started by the phase settles.
const SETTLE: Duration = Duration::from_secs(1);
/// Bound on the child's clean stop after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Resident memory an idle connection may cost the broker: its read buffer
/// (`READ_CHUNK`, 8 KiB) plus the task, socket and bookkeeping around it, with room for
/// allocator rounding.
pub const RSS_PER_CONNECTION_MAX: u64 = 24 * 1024;
/// CPU the broker may spend while every connection is idle, as a share of one core.
pub const IDLE_CPU_MAX: f64 = 0.05;
/// Connections from which the bounds are enforced.
pub const BOUND_MIN_CONNECTIONS: u64 = 1_000;
/// Share of the soft open-file limit the broker keeps for the store (mirrors
/// `connection_limit` in ferromq-protocol: a quarter, at least `FD_RESERVE_MIN`).
const FD_RESERVE_DIVISOR: u64 = 4;

/// Flags of `ferromq bench rss`.
#[derive(Debug, Clone, clap::Args)]
pub struct RssArgs {
    /// Topics to create.
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = value_parser!(u32).range(1..=100_000))]
    topics: u32,
    /// Queues per topic (read and write).
    #[arg(long, value_name = "Q", default_value_t = 8, value_parser = value_parser!(i32).range(1..=1024))]
    queues: i32,
    /// Idle connections to open to the broker's remoting port.
    #[arg(long, value_name = "C", default_value_t = 10_000, value_parser = value_parser!(u64).range(0..=u64::from(DEFAULT_MAX_CONNECTIONS)))]
    connections: u64,
    /// Seconds over which the broker's CPU time is measured with every connection idle.
    #[arg(long, value_name = "S", default_value_t = 5, value_parser = value_parser!(u64).range(1..=600))]
    idle_seconds: u64,
    /// Parent of the scratch directory (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// Memory of the broker process at one point, KiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    rss_kib: u64,
    hwm_kib: u64,
}

/// The child `ferromq standalone`; killed when dropped unless stopped cleanly first.
struct Broker {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Broker {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits (bounded) for the clean stop; kills it past the bound.
    fn stop(mut self) -> Result<()> {
        let pid = libc::pid_t::try_from(self.child.id()).context("child pid")?;
        // SAFETY: kill(2) with a pid of our own child, which has not been waited for (so the
        // pid cannot have been reused), and a valid signal number.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().context("waiting for the broker")? {
                if !status.success() {
                    bail!("the broker stopped with {status}");
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the broker did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed")
    }
}

/// Runs `ferromq bench rss`.
pub fn run(args: &RssArgs) -> Result<()> {
    let own = crate::fd_limit::raise_to_hard().context("raising this process's open-file limit")?;
    let needed = args.connections + FD_HEADROOM;
    if own.soft < needed {
        bail!(
            "the hard open-file limit (ulimit -Hn) of {} is below the {needed} descriptors {} \
             connections need; raise it or pass fewer --connections",
            own.hard,
            args.connections
        );
    }
    let scratch = super::ScratchDir::create(args.dir.as_deref())?;
    let broker = start_broker(scratch.path())?;
    check_broker_limit(broker.pid(), args.connections)?;
    let runtime = crate::runtime()?;
    std::thread::sleep(SETTLE);
    let idle = memory(broker.pid())?;
    let started = Instant::now();
    runtime.block_on(create_topics(broker.addr, args.topics, args.queues))?;
    let topics_took = started.elapsed();
    std::thread::sleep(SETTLE);
    let topics = memory(broker.pid())?;
    let idle_cpu_before = cpu_share(broker.pid(), args.idle_seconds)?;
    let base_fds = open_fds(broker.pid())?;
    let started = Instant::now();
    let streams = open_connections(broker.addr, args.connections)?;
    wait_accepted(broker.pid(), base_fds + args.connections)?;
    let connect_took = started.elapsed();
    std::thread::sleep(SETTLE);
    let idle_cpu = cpu_share(broker.pid(), args.idle_seconds)?;
    let connected = memory(broker.pid())?;
    drop(streams);
    drop(runtime);
    broker.stop()?;
    let figures = Figures {
        idle,
        topics,
        connected,
        idle_cpu_before,
        idle_cpu,
        topics_took,
        connect_took,
    };
    report(args, &figures);
    figures.check(args)
}

/// What the run measured.
struct Figures {
    idle: Memory,
    topics: Memory,
    connected: Memory,
    /// Broker CPU seconds per second after the topics, before any connection.
    idle_cpu_before: f64,
    /// Broker CPU seconds per second with every connection idle.
    idle_cpu: f64,
    topics_took: Duration,
    connect_took: Duration,
}

impl Figures {
    fn per_connection_bytes(&self, connections: u64) -> Option<u64> {
        (connections > 0).then(|| {
            self.connected.rss_kib.saturating_sub(self.topics.rss_kib) * 1024 / connections
        })
    }

    fn per_queue_bytes(&self, args: &RssArgs) -> u64 {
        let queues = u64::from(args.topics) * args.queues as u64;
        self.topics.rss_kib.saturating_sub(self.idle.rss_kib) * 1024 / queues.max(1)
    }

    /// Fails when a bound is passed (with enough connections for the figure to mean it).
    fn check(&self, args: &RssArgs) -> Result<()> {
        if args.connections < BOUND_MIN_CONNECTIONS {
            return Ok(());
        }
        let per_connection = self.per_connection_bytes(args.connections).unwrap_or(0);
        if per_connection > RSS_PER_CONNECTION_MAX {
            bail!(
                "an idle connection costs the broker {per_connection} B of RSS, over the bound \
                 of {RSS_PER_CONNECTION_MAX} B"
            );
        }
        if self.idle_cpu > IDLE_CPU_MAX {
            bail!(
                "the broker spent {:.1}% of a core with {} idle connections, over the bound of \
                 {:.1}%",
                self.idle_cpu * 100.0,
                args.connections,
                IDLE_CPU_MAX * 100.0
            );
        }
        Ok(())
    }
}

/// Starts `ferromq standalone` and reads its address line (bounded).
fn start_broker(scratch: &Path) -> Result<Broker> {
    let exe = std::env::current_exe().context("finding the ferromq binary")?;
    let log_path = scratch.join("broker.log");
    let log = std::fs::File::create(&log_path).context("creating the broker's log")?;
    let mut child = Command::new(exe)
        .arg("standalone")
        .arg("--data-dir")
        .arg(scratch.join("store"))
        .args([
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--grpc-port",
            "-1",
        ])
        .args(["--flush", "async"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting ferromq standalone")?;
    let stdout = child.stdout.take().context("the child's stdout")?;
    // The broker is killed on every error path from here on.
    let mut broker = Broker {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(read.map(|_| line));
    });
    let line = match receiver.recv_timeout(START_TIMEOUT) {
        Ok(Ok(line)) => line,
        Ok(Err(error)) => return Err(error).context("reading the broker's stdout"),
        Err(_) => bail!(
            "ferromq standalone did not start within {START_TIMEOUT:?}; its log: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        ),
    };
    broker.addr = broker_addr(&line).ok_or_else(|| {
        anyhow!(
            "unexpected first line from ferromq standalone: {line:?}; its log: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    })?;
    Ok(broker)
}

/// The broker address of `ferromq standalone: namesrv A broker B data D`.
fn broker_addr(line: &str) -> Option<SocketAddr> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == "broker")?;
    words.next()?.parse().ok()
}

/// Refuses when the broker's connection limit, derived from its soft open-file limit as
/// `connection_limit` derives it, cannot admit `connections`.
fn check_broker_limit(pid: u32, connections: u64) -> Result<()> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .context("reading the broker's limits")?;
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .context("no 'Max open files' in the broker's limits")?;
    let Ok(soft) = soft.parse::<u64>() else {
        return Ok(()); // "unlimited"
    };
    let usable = soft.saturating_sub((soft / FD_RESERVE_DIVISOR).max(FD_RESERVE_MIN));
    if usable < connections {
        bail!(
            "the broker's open-file limit of {soft} admits {usable} connections (it keeps a \
             quarter for the store), fewer than --connections {connections}; raise the hard \
             limit (ulimit -Hn) to at least {}",
            connections * FD_RESERVE_DIVISOR / (FD_RESERVE_DIVISOR - 1) + 1
        );
    }
    Ok(())
}

/// Creates `topics` topics on the broker, [`CREATE_WINDOW`] at a time.
async fn create_topics(broker: SocketAddr, topics: u32, queues: i32) -> Result<()> {
    let pool = Arc::new(ConnectionPool::new(Default::default()));
    let next = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CREATE_WINDOW {
        let (pool, next) = (pool.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= topics {
                    return Ok::<(), anyhow::Error>(());
                }
                let topic = format!("RssBench{n:05}");
                let header = CreateTopicRequestHeader::as_java_sends(
                    &topic,
                    queues,
                    queues,
                    perm::READ | perm::WRITE,
                );
                let cmd =
                    RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header);
                let reply = pool
                    .invoke(broker, cmd, ADMIN_TIMEOUT)
                    .await
                    .with_context(|| format!("creating topic {topic}"))?;
                if reply.code != response::SUCCESS {
                    bail!(
                        "the broker refused to create {topic}: code {} {}",
                        reply.code,
                        reply.remark.unwrap_or_default()
                    );
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.context("a topic creation task failed")??;
    }
    // The admin connection must not count among the idle ones.
    pool.close_all();
    Ok(())
}

/// Opens `count` connections (blocking connects; loopback answers at once).
fn open_connections(broker: SocketAddr, count: u64) -> Result<Vec<TcpStream>> {
    let mut streams = Vec::new();
    for n in 0..count {
        let stream = TcpStream::connect_timeout(&broker, Duration::from_secs(5))
            .with_context(|| format!("opening connection {n} of {count}"))?;
        streams.push(stream);
    }
    Ok(streams)
}

/// Waits (bounded) until the broker holds at least `fds` descriptors: the connections were
/// accepted (a connection over its limit would be closed, and the count never reached).
fn wait_accepted(pid: u32, fds: u64) -> Result<()> {
    let deadline = Instant::now() + ACCEPT_TIMEOUT;
    loop {
        let now = open_fds(pid)?;
        if now >= fds {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the broker holds {now} descriptors after {ACCEPT_TIMEOUT:?}, expected {fds}: \
                 it did not accept every connection (see its log)"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn open_fds(pid: u32) -> Result<u64> {
    let entries =
        std::fs::read_dir(format!("/proc/{pid}/fd")).context("listing the broker's descriptors")?;
    Ok(entries.count() as u64)
}

/// VmRSS and VmHWM of `pid`.
fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("reading the broker's /proc status")?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok(Memory {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}

/// The share of one core `pid` uses over `seconds`.
fn cpu_share(pid: u32, seconds: u64) -> Result<f64> {
    let before = cpu_ticks(pid)?;
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let after = cpu_ticks(pid)?;
    Ok(ticks_to_seconds(after.saturating_sub(before)) / window.elapsed().as_secs_f64())
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .context("reading the broker's /proc stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12th and 13th after the name.
    let parse = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .context("malformed /proc stat")
    };
    Ok(parse(11)? + parse(12)?)
}

fn ticks_to_seconds(ticks: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / per_second.max(1) as f64
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(args: &RssArgs, f: &Figures) {
    let queues = u64::from(args.topics) * args.queues as u64;
    println!(
        "bench rss: {} topics x {} queues, {} idle connections, allocator {}",
        args.topics,
        args.queues,
        args.connections,
        broker_allocator()
    );
    println!("{:<28} {:>10} {:>10}", "point", "VmRSS MiB", "VmHWM MiB");
    for (name, m) in [
        ("idle start", f.idle),
        ("after topics", f.topics),
        ("after connections", f.connected),
    ] {
        println!(
            "{name:<28} {:>10.1} {:>10.1}",
            mib(m.rss_kib),
            mib(m.hwm_kib)
        );
    }
    println!(
        "per queue      : {} B of RSS ({queues} queues created in {:.2} s)",
        f.per_queue_bytes(args),
        f.topics_took.as_secs_f64()
    );
    match f.per_connection_bytes(args.connections) {
        Some(bytes) => println!(
            "per connection : {bytes} B of RSS (bound {RSS_PER_CONNECTION_MAX} B from {BOUND_MIN_CONNECTIONS} connections; opened in {:.2} s)",
            f.connect_took.as_secs_f64()
        ),
        None => println!("per connection : no connections opened"),
    }
    println!(
        "idle CPU       : {:.2}% of a core over {} s before the connections",
        f.idle_cpu_before * 100.0,
        args.idle_seconds
    );
    println!(
        "idle CPU       : {:.2}% of a core over {} s with every connection open (bound {:.0}%)",
        f.idle_cpu * 100.0,
        args.idle_seconds,
        IDLE_CPU_MAX * 100.0
    );
    if args.json {
        let out = json!({
            "bench": "rss",
            "allocator": broker_allocator(),
            "topics": args.topics,
            "queues": args.queues,
            "connections": args.connections,
            "idle_rss_kib": f.idle.rss_kib,
            "idle_hwm_kib": f.idle.hwm_kib,
            "topics_rss_kib": f.topics.rss_kib,
            "topics_hwm_kib": f.topics.hwm_kib,
            "connections_rss_kib": f.connected.rss_kib,
            "connections_hwm_kib": f.connected.hwm_kib,
            "rss_per_queue_bytes": f.per_queue_bytes(args),
            "rss_per_connection_bytes": f.per_connection_bytes(args.connections),
            "idle_cpu_share_before_connections": super::client::round(f.idle_cpu_before, 4),
            "idle_cpu_share": super::client::round(f.idle_cpu, 4),
            "topics_seconds": super::client::round(f.topics_took.as_secs_f64(), 3),
            "connect_seconds": super::client::round(f.connect_took.as_secs_f64(), 3),
        });
        println!("{out}");
    }
}

/// The allocator the child runs on: it inherits `FERROMQ_ALLOCATOR` from this process.
fn broker_allocator() -> &'static str {
    match crate::allocator::selection() {
        crate::allocator::Selection::Chosen(choice) => choice.name(),
        crate::allocator::Selection::Invalid => "invalid",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_address_is_read_from_the_standalone_line() {
        let line = "ferromq standalone: namesrv 127.0.0.1:9876 broker 127.0.0.1:10911 data /d\n";
        assert_eq!(
            broker_addr(line),
            Some(SocketAddr::from(([127, 0, 0, 1], 10911)))
        );
        assert_eq!(broker_addr("something else"), None);
    }

    #[test]
    fn cpu_time_is_read_from_this_process_stat() {
        let ticks = cpu_ticks(std::process::id()).unwrap();
        let later = cpu_ticks(std::process::id()).unwrap();
        assert!(later >= ticks);
    }
}
