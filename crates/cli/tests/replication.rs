//! Master/slave replication with real processes: `ferromq namesrv` and `ferromq broker`
//! (SYNC_MASTER, ASYNC_MASTER, SLAVE) on 127.0.0.1 with OS-chosen ports, talked to over the
//! remoting protocol and the HA wire format. Every wait is bounded; every process is killed
//! on drop. Measured figures are printed (`--nocapture` shows them).

#[macro_use]
mod common;

use common::remoting::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ferromq_broker::codes::{NOT_DURABLE, NOT_MASTER};
use ferromq_protocol::ha::{HaCodec, HaFrame, Hello, RecordSample, RefusalCode, HA_VERSION};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::DeleteTopicRequestHeader;
use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder};

const CLUSTER: &str = "RC";
const GROUP_NAME: &str = "rb";
/// `haSendHeartbeatInterval` of every broker, ms.
const HEARTBEAT_MS: u64 = 100;
/// Default `haMaxTimeSlaveNotCatchup`, ms.
const MAX_LAG_MS: u64 = 1500;

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// What a broker is started with.
#[derive(Clone)]
struct Spec {
    role: &'static str,
    id: u64,
    broker_name: &'static str,
    namesrv: Option<String>,
    master_ha: Option<String>,
    min_in_sync: u32,
    sync_flush_timeout_ms: u64,
    max_lag_ms: u64,
    segment_bytes: u64,
}

impl Spec {
    fn master(role: &'static str) -> Spec {
        Spec {
            role,
            id: 0,
            broker_name: GROUP_NAME,
            namesrv: None,
            master_ha: None,
            min_in_sync: 1,
            sync_flush_timeout_ms: 5_000,
            max_lag_ms: MAX_LAG_MS,
            segment_bytes: SEGMENT_BYTES,
        }
    }

    fn slave(id: u64, master_ha: Option<SocketAddr>) -> Spec {
        Spec {
            role: "SLAVE",
            id,
            master_ha: master_ha.map(|a| a.to_string()),
            ..Spec::master("SLAVE")
        }
    }

    /// The same broker, registering with the name server at `addr`.
    fn with_namesrv(self, addr: &str) -> Spec {
        Spec {
            namesrv: Some(addr.to_string()),
            ..self
        }
    }

    fn toml(&self, store: &Path) -> String {
        let mut text = format!(
            "brokerClusterName = \"{CLUSTER}\"\nbrokerName = \"{}\"\nbrokerRole = \"{}\"\n\
             brokerId = {}\nlistenPort = 0\nstorePathRootDir = \"{}\"\n\
             flushDiskType = \"ASYNC_FLUSH\"\nhaSendHeartbeatInterval = {HEARTBEAT_MS}\n\
             haMaxTimeSlaveNotCatchup = {}\nminInSyncReplicas = {}\nsyncFlushTimeout = {}\n\
             mappedFileSizeCommitLog = {}\nmaxMessageSize = 1048576\n",
            self.broker_name,
            self.role,
            self.id,
            store.display(),
            self.max_lag_ms,
            self.min_in_sync,
            self.sync_flush_timeout_ms,
            self.segment_bytes,
        );
        if let Some(ns) = &self.namesrv {
            text.push_str(&format!("namesrvAddr = \"{ns}\"\n"));
        }
        if let Some(ha) = &self.master_ha {
            text.push_str(&format!("haMasterAddress = \"{ha}\"\n"));
        }
        text
    }
}

/// A `ferromq broker -c broker.toml` with its stderr in a file; killed on drop.
struct Node {
    child: Option<Child>,
    addr: SocketAddr,
    ha: SocketAddr,
    config: PathBuf,
    store: PathBuf,
    log: PathBuf,
    name: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Node {
    /// Starts a broker whose files live under `dir/name`.
    fn start(dir: &Path, name: &str, spec: &Spec) -> Node {
        let base = dir.join(name);
        std::fs::create_dir_all(&base).unwrap();
        let store = base.join("store");
        let config = base.join("broker.toml");
        std::fs::write(&config, spec.toml(&store)).unwrap();
        let mut node = Node {
            child: None,
            addr: "0.0.0.0:0".parse().unwrap(),
            ha: "0.0.0.0:0".parse().unwrap(),
            config,
            store,
            log: base.join("broker.log"),
            name: name.to_string(),
        };
        node.spawn();
        node
    }

    /// Starts another spec on this node's store (e.g. a stopped master's data as a SLAVE).
    fn reconfigure(&mut self, spec: &Spec) {
        assert!(self.child.is_none(), "{} still runs", self.name);
        std::fs::write(&self.config, spec.toml(&self.store)).unwrap();
        self.spawn();
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(["broker", "-c"])
            .arg(&self.config)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let Some(line) = common::first_line(&mut child) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "broker {} printed no address line within 30 s: {}",
                self.name,
                self.stderr()
            );
        };
        // ferromq broker: listening on ADDR (ha HA, ROLE brokerId N)
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            line.starts_with("ferromq broker: listening on ") && words.len() >= 10,
            "broker {}: first line {line:?}; stderr: {}",
            self.name,
            self.stderr()
        );
        self.addr = words[4].parse().unwrap();
        self.ha = words[6].trim_end_matches(',').parse().unwrap();
        self.child = Some(child);
        println!("{}: {}", self.name, line.trim());
    }

    /// SIGKILL, and waits for the exit.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM (clean stop), asserting it exits 0 within 30 s.
    fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        common::signal(&child, "TERM");
        let status = common::wait_exit(&mut child);
        assert!(status.success(), "{} exited with {status}", self.name);
    }

    /// Starts it again on the same configuration and data.
    fn restart(&mut self) {
        assert!(self.child.is_none(), "{} still runs", self.name);
        self.spawn();
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn addr_str(&self) -> String {
        self.addr.to_string()
    }

    fn commitlog_dir(&self) -> PathBuf {
        self.store.join("commitlog")
    }

    /// Where the stopped node's log ends, as its files say (a full check of its store).
    fn log_end_on_disk(&self) -> i64 {
        assert!(self.child.is_none(), "{} still runs", self.name);
        let mut config = ferromq_store::StoreConfig::new(&self.store);
        config.segment_size_bytes = SEGMENT_BYTES;
        config.max_message_size_bytes = 1 << 20;
        let report = ferromq_store::check_store(&config, ferromq_store::CheckScope::Full)
            .expect("check the stopped node's store");
        assert_eq!(report.would_cut, None, "a clean stop leaves no torn tail");
        report.scan.end as i64
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_and_two_slaves_hold_the_same_log_queues_and_offsets_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv();
    let master = Node::start(
        dir.path(),
        "master",
        &Spec::master("SYNC_MASTER").with_namesrv(&ns.addr),
    );
    // Slave 1 is told the master's HA address; slave 2 learns it from the name server.
    let slave1 = Node::start(
        dir.path(),
        "slave1",
        &Spec::slave(1, Some(master.ha)).with_namesrv(&ns.addr),
    );
    let slave2 = Node::start(
        dir.path(),
        "slave2",
        &Spec::slave(2, None).with_namesrv(&ns.addr),
    );
    let m = client(master.addr).await;
    let s1 = client(slave1.addr).await;
    let s2 = client(slave2.addr).await;
    let joined = wait_in_sync(&m, 2, 30).await;
    println!("both slaves in sync {joined:?} after start");
    let learned = ha_status(&s2).await.ha_client_runtime_info;
    assert_eq!(learned.master_addr, master.ha.to_string(), "{learned:?}");
    assert!(learned.is_activated, "{learned:?}");

    const QUEUES: i32 = 4;
    const PER_QUEUE: i64 = 800;
    let unknown = pull(&s1, "T", 0, 0, 1, None).await;
    assert_eq!(
        unknown.code,
        response::TOPIC_NOT_EXIST,
        "{}",
        remark(&unknown)
    );
    create_topic(&m, "T", QUEUES).await;
    // Slaves register under their broker ids: the topic's route and clusterList show them.
    eventually!(10, "the route lists the master and both slaves", {
        let route = common::ok_json(&["topicRoute", "-n", &ns.addr, "-t", "T"]).to_string();
        [&master, &slave1, &slave2]
            .iter()
            .all(|node| route.contains(&node.addr_str()))
    });
    let clusters = common::ok_json(&["clusterList", "-n", &ns.addr]).to_string();
    assert!(
        clusters.contains("\"SLAVE\"") && clusters.contains("\"MASTER\""),
        "{clusters}"
    );
    // The topic reaches the slaves as a log record.
    let created = Instant::now();
    eventually!(5, "T on both slaves", {
        pull(&s1, "T", QUEUES - 1, 0, 1, None).await.code == response::PULL_NOT_FOUND
            && pull(&s2, "T", QUEUES - 1, 0, 1, None).await.code == response::PULL_NOT_FOUND
    });
    let topic_lag = created.elapsed();
    println!("topic T known on both slaves {topic_lag:?} after its creation on the master");
    assert!(topic_lag < Duration::from_secs(2), "{topic_lag:?}");
    let started = Instant::now();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..QUEUES).map(|_| AtomicU64::new(0)).collect());
    let mut producers = Vec::new();
    for queue in 0..QUEUES {
        let acked = acked.clone();
        let addr = master.addr;
        producers.push(tokio::spawn(async move {
            let c = client(addr).await;
            for i in 0..PER_QUEUE {
                let body = format!("q{queue}-m{i}-{}", "x".repeat((i as usize * 7) % 900));
                let reply = send(&c, "T", queue, body.as_bytes()).await;
                assert_eq!(
                    reply.code,
                    response::SUCCESS,
                    "send {i}: {}",
                    remark(&reply)
                );
                acked[queue as usize].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Commits while producing: half of what each queue acknowledged so far.
    let done = Arc::new(AtomicBool::new(false));
    let committer = {
        let (acked, done, addr) = (acked.clone(), done.clone(), master.addr);
        tokio::spawn(async move {
            let c = client(addr).await;
            let mut commits = 0u64;
            while !done.load(Ordering::Relaxed) {
                for queue in 0..QUEUES {
                    let offset = acked[queue as usize].load(Ordering::Relaxed) as i64 / 2;
                    let reply = commit(&c, "G", "T", queue, offset).await;
                    assert_eq!(reply.code, response::SUCCESS, "commit: {}", remark(&reply));
                    commits += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            commits
        })
    };
    for producer in producers {
        producer.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let commits = committer.await.unwrap();
    let elapsed = started.elapsed();
    let total = PER_QUEUE * QUEUES as i64;
    println!(
        "produced {total} messages over {QUEUES} queues in {elapsed:?} ({:.0} msg/s) with {commits} commits",
        total as f64 / elapsed.as_secs_f64()
    );
    for queue in 0..QUEUES {
        let reply = commit(&m, "G", "T", queue, PER_QUEUE - 10 * queue as i64).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    let end = wait_caught_up(&m, &[&s1, &s2], 30).await;
    println!("log end {end} on the master and both slaves");

    for (name, s) in [("slave1", &s1), ("slave2", &s2)] {
        eventually!(20, format!("{name}'s queues and offsets"), {
            let mut same = true;
            for queue in 0..QUEUES {
                same &= max_offset(s, "T", queue).await == Some(PER_QUEUE);
                same &=
                    query_offset(s, "G", "T", queue).await == Some(PER_QUEUE - 10 * queue as i64);
            }
            same
        });
    }
    for queue in 0..QUEUES {
        let on_master = max_offset(&m, "T", queue).await;
        assert_eq!(on_master, Some(PER_QUEUE));
        let offsets = [
            query_offset(&m, "G", "T", queue).await,
            query_offset(&s1, "G", "T", queue).await,
            query_offset(&s2, "G", "T", queue).await,
        ];
        assert!(
            offsets
                .iter()
                .all(|o| *o == Some(PER_QUEUE - 10 * queue as i64)),
            "{offsets:?}"
        );
        let expected: Vec<Vec<u8>> = (0..PER_QUEUE)
            .map(|i| format!("q{queue}-m{i}-{}", "x".repeat((i as usize * 7) % 900)).into_bytes())
            .collect();
        for (name, c) in [("master", &m), ("slave1", &s1), ("slave2", &s2)] {
            let got = pull_range(c, "T", queue, 0, PER_QUEUE).await;
            let offsets: Vec<u64> = got.iter().map(|(o, _)| *o).collect();
            assert_eq!(
                offsets,
                (0..PER_QUEUE as u64).collect::<Vec<_>>(),
                "{name} queue {queue}"
            );
            let bodies: Vec<Vec<u8>> = got.into_iter().map(|(_, b)| b).collect();
            assert!(
                bodies == expected,
                "{name} queue {queue}: bodies differ from what was sent"
            );
        }
        println!("queue {queue}: max offset {PER_QUEUE}, consumer offset {:?}, bodies equal on 3 brokers", offsets[0]);
    }
    // The CommitLog files, byte for byte, up to the slaves' committed end.
    let end = wait_caught_up(&m, &[&s1, &s2], 10).await as u64;
    for slave in [&slave1, &slave2] {
        let compared = assert_same_commitlog(&master.commitlog_dir(), &slave.commitlog_dir(), end);
        assert!(compared > 0 && compared <= end, "{compared} of {end}");
        println!(
            "{}: CommitLog byte-identical to the master's over {compared} bytes",
            slave.name
        );
    }
    // brokerStatus carries the replication keys.
    let status = common::ok_json(&["brokerStatus", "-b", &slave2.addr_str()]);
    let text = status.to_string();
    for key in [
        "brokerRole",
        "haWatermark",
        "haBytesReceived",
        "commitLogMaxOffset",
    ] {
        assert!(text.contains(key), "{key} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_master_waits_for_a_killed_slave_then_continues_and_refuses_below_the_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(
        dir.path(),
        "master",
        &Spec {
            min_in_sync: 2,
            sync_flush_timeout_ms: 6_000,
            ..Spec::master("SYNC_MASTER")
        },
    );
    let mut slave1 = Node::start(dir.path(), "slave1", &Spec::slave(1, Some(master.ha)));
    let mut slave2 = Node::start(dir.path(), "slave2", &Spec::slave(2, Some(master.ha)));
    let m = client(master.addr).await;
    wait_in_sync(&m, 2, 30).await;
    create_topic(&m, "T", 2).await;
    for i in 0..20 {
        let reply = send(&m, "T", i % 2, format!("warm-{i}").as_bytes()).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }

    // Kill -9 slave 2 while four producers send: sends stall until it leaves the in-sync set.
    let load_until = Instant::now() + Duration::from_millis(300 + MAX_LAG_MS + 1500);
    let mut senders = Vec::new();
    for queue in 0..4 {
        let addr = master.addr;
        senders.push(tokio::spawn(async move {
            let c = client(addr).await;
            let (mut sent, mut worst, mut failed) = (0u64, Duration::ZERO, Vec::new());
            while Instant::now() < load_until || sent < 5 {
                let t = Instant::now();
                let reply = send(
                    &c,
                    "T",
                    queue % 2,
                    format!("load-{queue}-{sent}").as_bytes(),
                )
                .await;
                if reply.code != response::SUCCESS {
                    failed.push((reply.code, remark(&reply)));
                }
                worst = worst.max(t.elapsed());
                sent += 1;
            }
            (sent, worst, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    slave2.kill();
    let (mut sent, mut worst, mut failed) = (0, Duration::ZERO, Vec::new());
    for sender in senders {
        let (n, w, f) = sender.await.unwrap();
        sent += n;
        worst = worst.max(w);
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "sends failed after one slave was killed: {failed:?}"
    );
    println!("one slave killed under load: {sent} sends by 4 producers, all acknowledged, longest stall {worst:?}");
    assert!(
        worst < Duration::from_millis(MAX_LAG_MS + 1000),
        "stall {worst:?} exceeds haMaxTimeSlaveNotCatchup + 1 s"
    );
    let info = ha_status(&m).await;
    assert_eq!(info.in_sync_slave_nums, 1, "{info:?}");
    assert_eq!(in_sync_of(&info, 1), Some(true), "{info:?}");
    assert_ne!(in_sync_of(&info, 2), Some(true), "{info:?}");
    let json = admin_ha_status(&master.addr_str());
    println!("haStatus after the first kill: {json}");
    let connections = json["haConnectionInfo"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        connections
            .iter()
            .any(|c| c["brokerId"] == 1 && c["inSync"] == true),
        "{json}"
    );
    assert!(
        !connections
            .iter()
            .any(|c| c["brokerId"] == 2 && c["inSync"] == true),
        "{json}"
    );

    // Kill the second slave: below minInSyncReplicas = 2, sends fail with SYSTEM_ERROR.
    slave1.kill();
    let killed = Instant::now();
    let mut first_refusal = None;
    let mut outcomes: BTreeMap<i32, usize> = BTreeMap::new();
    let mut refusals_after = 0;
    while refusals_after < 10 {
        assert!(
            killed.elapsed() < Duration::from_millis(MAX_LAG_MS + 8_000),
            "no stable refusal within {:?}: {outcomes:?}",
            killed.elapsed()
        );
        let reply = send(&m, "T", 1, b"below-minimum").await;
        *outcomes.entry(reply.code).or_default() += 1;
        assert_ne!(
            reply.code,
            response::SUCCESS,
            "a send succeeded with no slave in sync"
        );
        if reply.code == response::SYSTEM_ERROR {
            assert!(
                remark(&reply).starts_with("in-sync replicas not enough"),
                "{}",
                remark(&reply)
            );
            first_refusal.get_or_insert(killed.elapsed());
            refusals_after += 1;
        } else {
            assert!(
                first_refusal.is_none(),
                "code {} after a refusal: {}",
                reply.code,
                remark(&reply)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let first_refusal = first_refusal.unwrap();
    println!("both slaves killed: first 'in-sync replicas not enough' after {first_refusal:?}; outcomes {outcomes:?}");
    assert!(
        first_refusal < Duration::from_millis(MAX_LAG_MS + 1500),
        "{first_refusal:?}"
    );
    let info = ha_status(&m).await;
    assert_eq!(info.in_sync_slave_nums, 0, "{info:?}");

    // Restart slave 1 on its data: it rejoins, catches up, and sends succeed again.
    let restarted = Instant::now();
    slave1.restart();
    let rejoined = wait_in_sync(&m, 1, 30).await;
    println!(
        "slave1 restarted and in sync after {:?} (wait {rejoined:?})",
        restarted.elapsed()
    );
    for i in 0..10 {
        let reply = send(&m, "T", 0, format!("rejoined-{i}").as_bytes()).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    let s1 = client(slave1.addr).await;
    let end = wait_caught_up(&m, &[&s1], 20).await;
    // Killed with SIGKILL and restarted on its data: its CommitLog is the master's.
    let compared =
        assert_same_commitlog(&master.commitlog_dir(), &slave1.commitlog_dir(), end as u64);
    println!("restarted slave1: CommitLog byte-identical over {compared} of {end} bytes");
    let info = ha_status(&m).await;
    assert_eq!(in_sync_of(&info, 1), Some(true), "{info:?}");
    assert_ne!(in_sync_of(&info, 2), Some(true), "{info:?}");
    let acked = info
        .ha_connection_info
        .iter()
        .find(|c| c.broker_id == Some(1))
        .unwrap()
        .slave_ack_offset;
    assert_eq!(acked, end, "{info:?}");
    println!("slave1 acknowledged the master's end {end}");
    let json = admin_ha_status(&master.addr_str());
    let connections = json["haConnectionInfo"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        connections
            .iter()
            .any(|c| c["brokerId"] == 1 && c["inSync"] == true && c["slaveAckOffset"] == end),
        "{json}"
    );
    assert!(
        !connections
            .iter()
            .any(|c| c["brokerId"] == 2 && c["inSync"] == true),
        "{json}"
    );
    assert_eq!(json["inSyncSlaveNums"], 1, "{json}");
    // Slave 2, killed mid-stream under load, restarts on its data and rejoins too.
    slave2.restart();
    wait_in_sync(&m, 2, 30).await;
    for i in 0..5 {
        let reply = send(&m, "T", 1, format!("both-back-{i}").as_bytes()).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    let s2 = client(slave2.addr).await;
    let end = wait_caught_up(&m, &[&s1, &s2], 20).await as u64;
    let compared = assert_same_commitlog(&master.commitlog_dir(), &slave2.commitlog_dir(), end);
    println!("slave2 (killed under load) rejoined: CommitLog byte-identical over {compared} of {end} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_write_is_refused_on_a_slave_and_reads_survive_the_master_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let mut master = Node::start(dir.path(), "master", &Spec::master("SYNC_MASTER"));
    let slave = Node::start(dir.path(), "slave", &Spec::slave(1, Some(master.ha)));
    let m = client(master.addr).await;
    let s = client(slave.addr).await;
    wait_in_sync(&m, 1, 30).await;
    create_topic(&m, "T", 2).await;
    for i in 0..10 {
        for queue in 0..2 {
            let reply = send(&m, "T", queue, format!("q{queue}-m{i}").as_bytes()).await;
            assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
        }
    }
    let reply = commit(&m, "G", "T", 0, 3).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    eventually!(20, "the slave holds T and G's offset", {
        max_offset(&s, "T", 0).await == Some(10)
            && max_offset(&s, "T", 1).await == Some(10)
            && query_offset(&s, "G", "T", 0).await == Some(3)
    });

    let not_master = |what: &str, reply: &RemotingCommand| {
        println!(
            "{what} on the slave: code {} remark {:?}",
            reply.code, reply.remark
        );
        assert_eq!(reply.code, NOT_MASTER, "{what}: {}", remark(reply));
        assert!(
            remark(reply).starts_with("not master"),
            "{what}: {}",
            remark(reply)
        );
    };
    not_master("send", &send(&s, "T", 0, b"to-a-slave").await);
    not_master("commit", &commit(&s, "G", "T", 0, 8).await);
    // Both forms of a reset: one queue to an explicit offset, every queue by time.
    for (queue_id, offset) in [(Some(0), Some(0)), (None, None)] {
        let reset = ResetOffsetRequestHeader {
            group: "G".into(),
            topic: "T".into(),
            queue_id,
            offset,
            timestamp: 0,
            is_force: true,
        };
        let command =
            RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &reset);
        not_master("reset", &invoke(&s, command).await);
    }
    let out = common::admin(&[
        "resetOffsetByTime",
        "-b",
        &slave.addr_str(),
        "-g",
        "G",
        "-t",
        "T",
        "-s",
        "0",
    ]);
    println!(
        "admin resetOffsetByTime on the slave: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert!(
        !out.status.success(),
        "resetOffsetByTime on a slave succeeded"
    );
    not_master(
        "updateTopic",
        &invoke(&s, create_topic_command("T2", 2)).await,
    );
    let delete = DeleteTopicRequestHeader { topic: "T".into() };
    not_master(
        "deleteTopic",
        &invoke(
            &s,
            RemotingCommand::request_with_header(request::DELETE_TOPIC_IN_BROKER, &delete),
        )
        .await,
    );
    let out = common::admin(&[
        "updateTopic",
        "-b",
        &slave.addr_str(),
        "-t",
        "T3",
        "-r",
        "2",
        "-w",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    println!(
        "admin updateTopic on the slave: {:?} {}",
        out.status,
        stderr.trim()
    );
    assert!(!out.status.success(), "updateTopic on a slave succeeded");
    assert!(
        stderr.contains("not master") || stderr.contains("2111"),
        "{stderr}"
    );
    // A pull carrying a commit is served, its commit not applied.
    let carried = pull(&s, "T", 0, 3, 32, Some(9)).await;
    assert_eq!(carried.code, response::SUCCESS, "{}", remark(&carried));
    assert_eq!(records(&carried).len(), 7, "pull from 3 on the slave");
    // Nothing changed on the slave (nor on the master).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(max_offset(&s, "T", 0).await, Some(10));
    assert_eq!(query_offset(&s, "G", "T", 0).await, Some(3));
    assert_eq!(
        pull(&s, "T", 0, 0, 32, None).await.code,
        response::SUCCESS,
        "T still readable"
    );
    for (name, c) in [("slave", &s), ("master", &m)] {
        for topic in ["T2", "T3"] {
            let reply = pull(c, topic, 0, 0, 32, None).await;
            assert_ne!(
                reply.code,
                response::SUCCESS,
                "{topic} exists on the {name}"
            );
        }
    }

    // Commit on the master, then kill it: the slave serves the committed offset and what follows.
    for (queue, offset) in [(0, 6), (1, 4)] {
        let reply = commit(&m, "G", "T", queue, offset).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    eventually!(20, "the slave holds the new commits", {
        query_offset(&s, "G", "T", 0).await == Some(6)
            && query_offset(&s, "G", "T", 1).await == Some(4)
    });
    master.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (queue, committed) in [(0, 6i64), (1, 4)] {
        let resumed = query_offset(&s, "G", "T", queue).await;
        assert_eq!(resumed, Some(committed), "queue {queue}");
        let got = pull_range(&s, "T", queue, committed, 10).await;
        let expected: Vec<(u64, Vec<u8>)> = (committed..10)
            .map(|i| (i as u64, format!("q{queue}-m{i}").into_bytes()))
            .collect();
        assert_eq!(got, expected, "queue {queue} from the slave");
        for offset in [10, 1_000] {
            let past = pull(&s, "T", queue, offset, 32, None).await;
            assert_eq!(
                past.code,
                response::PULL_NOT_FOUND,
                "pull at {offset} past the slave's end: {}",
                remark(&past)
            );
        }
        println!("master killed: the slave resumes queue {queue} at {committed}, next {} messages served", got.len());
    }
    not_master(
        "send after the master died",
        &send(&s, "T", 0, b"late").await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_slave_catches_up_a_large_log() {
    const TARGET_BYTES: u64 = 1 << 30;
    const PRODUCE_BUDGET: Duration = Duration::from_secs(40);
    const BODY: usize = 256 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(
        dir.path(),
        "master",
        &Spec {
            segment_bytes: 64 << 20,
            ..Spec::master("ASYNC_MASTER")
        },
    );
    let m = client(master.addr).await;
    create_topic(&m, "T", 4).await;
    let written = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut producers = Vec::new();
    for queue in 0..4 {
        let (written, addr) = (written.clone(), master.addr);
        producers.push(tokio::spawn(async move {
            let c = client(addr).await;
            let body = vec![b'a' + queue as u8; BODY];
            let mut count = 0u64;
            while written.load(Ordering::Relaxed) < TARGET_BYTES
                && started.elapsed() < PRODUCE_BUDGET
            {
                let reply = send(&c, "T", queue, &body).await;
                assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
                written.fetch_add(BODY as u64, Ordering::Relaxed);
                count += 1;
            }
            count
        }));
    }
    let mut messages = 0;
    for producer in producers {
        messages += producer.await.unwrap();
    }
    let produced = started.elapsed();
    let end = ha_status(&m).await.master_commit_log_max_offset as u64;
    println!(
        "master log: {messages} messages of 256 KiB, {:.1} MiB in {produced:?} ({:.1} MB/s produce)",
        end as f64 / (1 << 20) as f64,
        end as f64 / 1e6 / produced.as_secs_f64()
    );
    assert!(
        end >= 256 << 20,
        "at least 256 MiB written in {PRODUCE_BUDGET:?} (got {end})"
    );

    let started = Instant::now();
    // The slave mirrors the master's CommitLog, so it has the same segment size.
    let slave = Node::start(
        dir.path(),
        "slave",
        &Spec {
            segment_bytes: 64 << 20,
            ..Spec::slave(1, Some(master.ha))
        },
    );
    let s = client(slave.addr).await;
    let mut progress = Vec::new();
    loop {
        let at = ha_status(&s).await.ha_client_runtime_info.max_offset as u64;
        if at == end {
            break;
        }
        if progress
            .last()
            .is_none_or(|(t, _): &(Duration, u64)| started.elapsed() >= *t + Duration::from_secs(5))
        {
            progress.push((started.elapsed(), at));
            println!(
                "  catch-up at {:?}: slave log end {at} of {end}",
                started.elapsed()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the slave did not catch up {end} bytes within 120 s: {progress:?} (last {at})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    println!(
        "empty slave caught up {:.1} MiB in {took:?}: {:.1} MB/s (including its start)",
        end as f64 / (1 << 20) as f64,
        end as f64 / 1e6 / took.as_secs_f64()
    );
    for queue in 0..4 {
        let on_master = max_offset(&m, "T", queue).await;
        eventually!(
            30,
            "slave dispatch",
            max_offset(&s, "T", queue).await == on_master
        );
    }
    let compared = assert_same_commitlog(&master.commitlog_dir(), &slave.commitlog_dir(), end);
    println!("CommitLog byte-identical over {compared} bytes");
    assert!(compared > end - (64 << 20), "{compared} of {end}");
}

/// One raw HA exchange: writes `bytes`, returns the first frame the master answers, or `None`
/// when it closed the connection without one. Asserts the connection is closed after a
/// Refused, and that nothing is left hanging (5 s bound).
async fn ha_exchange(ha: SocketAddr, bytes: &[u8]) -> (Option<HaFrame>, bool) {
    let mut stream = tokio::net::TcpStream::connect(ha).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut codec = HaCodec::default();
    let mut buf = BytesMut::new();
    let mut first = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await;
        match read {
            Err(_) => return (first, false), // still open after 5 s
            Ok(Err(_)) | Ok(Ok(0)) => return (first, true),
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                while let Some(frame) = codec
                    .decode(&mut buf)
                    .expect("the master sends valid frames")
                {
                    if first.is_none() {
                        first = Some(frame);
                    } else if matches!(first, Some(HaFrame::Welcome(_))) {
                        // A welcomed peer: streaming goes on; we have what we need.
                        return (first, false);
                    }
                }
            }
        }
    }
}

fn hello_bytes(hello: Hello) -> Vec<u8> {
    let mut out = BytesMut::new();
    HaCodec::default()
        .encode(HaFrame::Hello(hello), &mut out)
        .unwrap();
    out.to_vec()
}

/// The tests' default `mappedFileSizeCommitLog`.
const SEGMENT_BYTES: u64 = 4 << 20;

fn hello(log_end: u64, samples: Vec<RecordSample>) -> Hello {
    Hello {
        version: HA_VERSION,
        cluster: CLUSTER.into(),
        broker_name: GROUP_NAME.into(),
        broker_id: 7,
        log_end,
        epoch: 0,
        epochs: Vec::new(),
        segment_size: SEGMENT_BYTES,
        samples,
    }
}

/// The first records of a CommitLog segment that carry a sealed CRC: (offset, size, crc).
fn sealed_records(segment: &Path, count: usize) -> Vec<RecordSample> {
    use ferromq_protocol::message::record::sealed_crc;
    let bytes = std::fs::read(segment).unwrap();
    let mut out = Vec::new();
    let mut pos = 0usize;
    while out.len() < count && pos + 8 <= bytes.len() {
        let size = ferromq_protocol::peek_total_size(&bytes[pos..]).unwrap();
        if size == 0 || ferromq_protocol::peek_magic(&bytes[pos..]) == ferromq_protocol::BLANK_MAGIC
        {
            break;
        }
        if let Some(crc) = sealed_crc(&bytes[pos..pos + size]) {
            out.push(RecordSample {
                offset: pos as u64,
                size: size as u32,
                crc,
            });
        }
        pos += size;
    }
    out
}

fn refusal(outcome: &(Option<HaFrame>, bool)) -> (RefusalCode, Option<u64>) {
    match outcome {
        (Some(HaFrame::Refused(r)), closed) => {
            assert!(*closed, "the master keeps a refused connection open");
            println!(
                "  refused: {} differs_at {:?}: {}",
                r.code, r.differs_at, r.reason
            );
            (r.code, r.differs_at)
        }
        other => panic!("expected a Refused frame and a close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_ha_peers_are_refused_and_clients_are_not_disturbed() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(dir.path(), "master", &Spec::master("ASYNC_MASTER"));
    let m = client(master.addr).await;
    create_topic(&m, "T", 1).await;
    for i in 0..200 {
        let reply = send(
            &m,
            "T",
            0,
            format!("first-{i}-{}", "y".repeat(500)).as_bytes(),
        )
        .await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    // A producer keeps sending meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, addr, acknowledged) = (stop.clone(), master.addr, acknowledged.clone());
        tokio::spawn(async move {
            let c = client(addr).await;
            let (mut ok, mut failed, mut worst) = (0u64, Vec::new(), Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let reply = send(&c, "T", 0, format!("during-{ok}").as_bytes()).await;
                worst = worst.max(t.elapsed());
                if reply.code == response::SUCCESS {
                    ok += 1;
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.push((reply.code, remark(&reply)));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (ok, failed, worst)
        })
    };
    let end = ha_status(&m).await.master_commit_log_max_offset as u64;
    let first_segment = master.commitlog_dir().join(format!("{:020}", 0));
    let samples = sealed_records(&first_segment, 2);
    assert_eq!(
        samples.len(),
        2,
        "two sealed records in {}",
        first_segment.display()
    );
    println!("master end {end}; sample records {samples:?}");

    println!("Hello past the master's end:");
    let ahead = ha_exchange(
        master.ha,
        &hello_bytes(hello(end + (1 << 20), samples.clone())),
    )
    .await;
    assert_eq!(refusal(&ahead).0, RefusalCode::AheadOfMaster);
    println!("Hello of another broker group:");
    let other = Hello {
        broker_name: "someone-else".into(),
        ..hello(0, Vec::new())
    };
    assert_eq!(
        refusal(&ha_exchange(master.ha, &hello_bytes(other)).await).0,
        RefusalCode::WrongGroup
    );
    println!("Hello with brokerId 0:");
    let zero = Hello {
        broker_id: 0,
        ..hello(0, Vec::new())
    };
    assert_eq!(
        refusal(&ha_exchange(master.ha, &hello_bytes(zero)).await).0,
        RefusalCode::BadHello
    );
    println!("Hello whose second sample has the wrong CRC:");
    let mut wrong = samples.clone();
    wrong[1].crc ^= 0x5a5a_5a5a;
    let log_end = wrong[1].offset + u64::from(wrong[1].size);
    let diverged = ha_exchange(master.ha, &hello_bytes(hello(log_end, wrong))).await;
    assert_eq!(
        refusal(&diverged),
        (RefusalCode::Diverged, Some(samples[1].offset))
    );
    println!("Hello whose two samples both differ (CRC, then size):");
    let mut both = samples.clone();
    both[0].crc ^= 1;
    both[1].size += 1;
    let diverged = ha_exchange(master.ha, &hello_bytes(hello(log_end, both))).await;
    assert_eq!(
        refusal(&diverged),
        (RefusalCode::Diverged, Some(samples[0].offset))
    );
    for (what, bytes) in [
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("unknown kind 99", vec![0, 0, 0, 1, 99]),
        (
            "a Data frame first",
            vec![
                0, 0, 0, 25, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0,
            ],
        ),
    ] {
        let (frame, closed) = ha_exchange(master.ha, &bytes).await;
        println!("{what}: closed {closed}, frame {frame:?}");
        assert!(closed, "the master keeps the connection open after {what}");
        assert!(
            frame.is_none() || matches!(frame, Some(HaFrame::Refused(_))),
            "{what}: {frame:?}"
        );
    }
    // Positive control: the same samples with their real CRCs are welcomed.
    let (welcome, _) = ha_exchange(master.ha, &hello_bytes(hello(log_end, samples.clone()))).await;
    match welcome {
        Some(HaFrame::Welcome(w)) => assert_eq!(w.start, log_end, "{w:?}"),
        other => panic!("a correct Hello was not welcomed: {other:?}"),
    }

    // A real slave whose data dir holds another log: a second master's, written then stopped.
    let mut other = Node::start(dir.path(), "other", &Spec::master("ASYNC_MASTER"));
    let o = client(other.addr).await;
    create_topic(&o, "T", 1).await;
    for i in 0..5 {
        let reply = send(&o, "T", 0, format!("other-{i}").as_bytes()).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    drop(o);
    other.stop();
    // Read from its files once stopped: an automatic catalog change is published up to
    // `CATALOG_POLL` after the sends, so the end a status gave right after them could still
    // grow (it did once, by a 295-byte catalog record).
    let other_end = other.log_end_on_disk();
    let master_end = ha_status(&m).await.master_commit_log_max_offset;
    assert!(
        other_end < master_end,
        "the other log ({other_end}) is shorter than the master's ({master_end})"
    );
    other.reconfigure(&Spec::slave(1, Some(master.ha)));
    let o = client(other.addr).await;
    eventually!(
        15,
        "the refusal in the slave's log",
        other.stderr().contains("the master refused this slave")
    );
    let log = other.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("the master refused this slave"))
        .unwrap();
    println!("diverged slave log: {line}");
    assert!(line.contains("diverged"), "{line}");
    let info = ha_status(&o).await;
    let json = admin_ha_status(&other.addr_str());
    println!("diverged slave haStatus: {json}");
    assert!(!info.ha_client_runtime_info.is_activated, "{info:?}");
    assert_eq!(
        info.ha_client_runtime_info.max_offset, other_end,
        "the refused slave's log untouched"
    );
    let on_master = ha_status(&m).await;
    assert_ne!(in_sync_of(&on_master, 1), Some(true), "{on_master:?}");
    assert_eq!(on_master.in_sync_slave_nums, 0, "{on_master:?}");
    let status = common::ok_json(&["brokerStatus", "-b", &other.addr_str()]).to_string();
    let refusal = info
        .ha_client_runtime_info
        .refusal
        .clone()
        .unwrap_or_default();
    assert!(
        refusal.starts_with("diverged"),
        "haStatus names the refusal: {info:?}"
    );
    assert!(
        status.contains("haRefusal") && status.contains("diverged"),
        "{status}"
    );
    assert!(line.contains(&format!("master={}", master.ha)), "{line}");

    eventually!(
        10,
        "50 sends acknowledged meanwhile",
        acknowledged.load(Ordering::Relaxed) >= 50
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, failed, worst) = producer.await.unwrap();
    println!(
        "producer meanwhile: {ok} sends acknowledged, {} failed, slowest {worst:?}",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert!(ok >= 50, "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_between_master_and_slaves_stops_the_watermark_and_loses_nothing() {
    use ferromq_chaos::proxy::{FaultProxy, ProxyMode};
    const SYNC_FLUSH_TIMEOUT_MS: u64 = 800;
    const LAG_MS: u64 = 2_500;
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(
        dir.path(),
        "master",
        &Spec {
            min_in_sync: 2,
            sync_flush_timeout_ms: SYNC_FLUSH_TIMEOUT_MS,
            max_lag_ms: LAG_MS,
            ..Spec::master("SYNC_MASTER")
        },
    );
    let proxy = FaultProxy::start(master.ha).await.unwrap();
    let slaves = [1, 2].map(|id| {
        Node::start(
            dir.path(),
            &format!("slave{id}"),
            &Spec {
                max_lag_ms: LAG_MS,
                ..Spec::slave(id, Some(proxy.local_addr()))
            },
        )
    });
    let m = client(master.addr).await;
    wait_in_sync(&m, 2, 30).await;
    create_topic(&m, "T", 1).await;
    let mut acked: Vec<Vec<u8>> = Vec::new();
    for i in 0..20 {
        let body = format!("before-{i}").into_bytes();
        let reply = send(&m, "T", 0, &body).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
        acked.push(body);
    }
    let clients = [client(slaves[0].addr).await, client(slaves[1].addr).await];
    // Reset connections first, then a silent partition (connections kept open, nothing flows).
    for (round, mode) in [ProxyMode::Drop, ProxyMode::Stall].into_iter().enumerate() {
        println!("partition round {round}: proxy mode {}", mode.name());
        let before = ha_status(&m).await;
        let queue_end = max_offset(&m, "T", 0).await.unwrap();
        proxy.set_mode(mode);
        let cut = Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let watermark_at_cut = ha_status(&m).await.watermark.unwrap();
        assert!(watermark_at_cut >= before.watermark.unwrap());
        let mut outcomes = Vec::new();
        while cut.elapsed() < Duration::from_millis(LAG_MS + 3_000) {
            let t = Instant::now();
            let body = format!("cut{round}-{}", outcomes.len()).into_bytes();
            let reply = send(&m, "T", 0, &body).await;
            if reply.code == response::SUCCESS {
                acked.push(body);
            }
            outcomes.push((cut.elapsed(), t.elapsed(), reply.code, remark(&reply)));
        }
        for (at, took, code, remark) in outcomes.iter().take(3).chain(outcomes.iter().rev().take(2))
        {
            println!("  send at {at:?} took {took:?}: code {code} {remark:?}");
        }
        let first_refusal = outcomes
            .iter()
            .find(|o| o.2 == response::SYSTEM_ERROR)
            .map(|o| o.0);
        println!(
        "partition: {} sends, {} NOT_DURABLE, {} refused (first at {first_refusal:?}), {} acknowledged",
        outcomes.len(),
        outcomes.iter().filter(|o| o.2 == NOT_DURABLE).count(),
        outcomes.iter().filter(|o| o.2 == response::SYSTEM_ERROR).count(),
        outcomes.iter().filter(|o| o.2 == response::SUCCESS).count(),
    );
        assert!(
            outcomes.iter().all(|o| o.2 != response::SUCCESS),
            "a send was acknowledged during the partition"
        );
        let (_, took, code, ref text) = outcomes[0];
        if mode == ProxyMode::Drop {
            // The proxy resets the HA connections: a closed connection leaves the in-sync
            // set at once, so sends are refused from the start, never left waiting.
            assert!(
                code == response::SYSTEM_ERROR || code == NOT_DURABLE,
                "first send during the partition: {code} {text}"
            );
        } else {
            // A silent partition: the first send waits for the slaves until they are taken
            // for gone (three silent heartbeat intervals) or syncFlushTimeout passes, and is
            // then refused or reported not durable — never acknowledged.
            assert!(
                code == response::SYSTEM_ERROR || code == NOT_DURABLE,
                "first send during the partition: {code} {text}"
            );
            assert!(
                took >= Duration::from_millis(50),
                "the first send was answered after {took:?}, without waiting for the slaves"
            );
        }
        let last = outcomes.last().unwrap();
        assert_eq!(last.2, response::SYSTEM_ERROR, "{last:?}");
        assert!(
            last.3.starts_with("in-sync replicas not enough"),
            "{last:?}"
        );
        assert!(
            first_refusal.unwrap() < Duration::from_millis(LAG_MS + 1_500),
            "{first_refusal:?}"
        );
        let during = ha_status(&m).await;
        println!(
            "watermark {} at the cut, {:?} after {:?}; master log end {}",
            watermark_at_cut,
            during.watermark,
            cut.elapsed(),
            during.master_commit_log_max_offset
        );
        assert_eq!(
            during.watermark,
            Some(watermark_at_cut),
            "the watermark moved during the partition"
        );
        if mode == ProxyMode::Stall {
            // Sends that timed out (NOT_DURABLE) were appended: the log runs past the
            // watermark, and consumers must not see that suffix.
            assert!(
                during.master_commit_log_max_offset > watermark_at_cut,
                "unacknowledged writes are in the master's log"
            );
        } else {
            // Every send was refused before it was appended.
            assert!(during.master_commit_log_max_offset >= watermark_at_cut);
        }
        assert_eq!(during.in_sync_slave_nums, 0, "{during:?}");
        let committed_max = max_offset(&m, "T", 0).await;
        println!("master's committed max offset of T/0 during the partition: {committed_max:?}");
        assert_eq!(
            committed_max,
            Some(queue_end),
            "GET_MAX_OFFSET past the watermark"
        );
        let past = pull(&m, "T", 0, queue_end, 32, None).await;
        println!(
            "pull past the watermark on the master: code {} {:?}",
            past.code, past.remark
        );
        assert!(
            records(&past).is_empty(),
            "a consumer saw messages past the watermark"
        );
        assert_ne!(past.code, response::SUCCESS);

        proxy.set_mode(ProxyMode::Pass);
        let healed = Instant::now();
        let rejoined = wait_in_sync(&m, 2, 30).await;
        println!("healed: both slaves in sync after {rejoined:?}");
        for i in 0..10 {
            let body = format!("after{round}-{i}").into_bytes();
            let reply = send(&m, "T", 0, &body).await;
            assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
            acked.push(body);
        }
        let log_end = wait_caught_up(&m, &[&clients[0], &clients[1]], 30).await as u64;
        for slave in &slaves {
            let compared =
                assert_same_commitlog(&master.commitlog_dir(), &slave.commitlog_dir(), log_end);
            println!(
                "{}: CommitLog byte-identical over {compared} of {log_end} bytes",
                slave.name
            );
        }
        let end = max_offset(&m, "T", 0).await.unwrap();
        let on_master = pull_range(&m, "T", 0, 0, end).await;
        for (name, c) in [("slave1", &clients[0]), ("slave2", &clients[1])] {
            eventually!(
                20,
                format!("{name} dispatch"),
                max_offset(c, "T", 0).await == Some(end)
            );
            let got = pull_range(c, "T", 0, 0, end).await;
            assert_eq!(got, on_master, "{name} holds the master's queue");
        }
        let bodies: Vec<&Vec<u8>> = on_master.iter().map(|(_, b)| b).collect();
        let missing: Vec<String> = acked
            .iter()
            .filter(|b| !bodies.contains(b))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        println!(
        "after healing ({:?}): {} acknowledged sends, queue holds {end} messages on master and both slaves",
        healed.elapsed(),
        acked.len()
    );
        assert!(missing.is_empty(), "acknowledged but missing: {missing:?}");
    }
}

/// A slave configured with another `mappedFileSizeCommitLog` than its master cannot hold the
/// master's CommitLog offsets (a record that fits the master's segment crosses the slave's):
/// the master refuses its Hello naming the key, and the slave's haStatus shows the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slave_with_another_segment_size_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let master = Node::start(
        dir.path(),
        "master",
        &Spec {
            segment_bytes: 64 << 20,
            ..Spec::master("ASYNC_MASTER")
        },
    );
    let m = client(master.addr).await;
    create_topic(&m, "T", 1).await;
    let body = vec![b'z'; 256 * 1024];
    for _ in 0..24 {
        let reply = send(&m, "T", 0, &body).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    let slave = Node::start(dir.path(), "slave", &Spec::slave(1, Some(master.ha)));
    let s = client(slave.addr).await;
    let started = Instant::now();
    let mut info = ha_status(&s).await;
    while info.ha_client_runtime_info.refusal.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no refusal: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        info = ha_status(&s).await;
    }
    let refusal = info.ha_client_runtime_info.refusal.clone().unwrap();
    println!("slave with 4 MiB segments next to a 64 MiB master: {refusal}");
    assert!(refusal.contains("mappedFileSizeCommitLog"), "{refusal}");
    assert_eq!(
        info.ha_client_runtime_info.max_offset, 0,
        "nothing appended"
    );
    assert!(!info.ha_client_runtime_info.is_activated);
}

/// The brief's third scenario through the real client: a `LitePullConsumer` (ferromq-client)
/// reading a queue keeps reading from the slave, in order and without rewinding, once the
/// master is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lite_pull_consumer_reads_on_from_the_slave_when_the_master_is_killed() {
    use ferromq_client::{LitePullConsumer, LitePullConsumerConfig, MessageQueue, StartPosition};
    const MESSAGES: i64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv();
    let mut master = Node::start(
        dir.path(),
        "master",
        &Spec::master("SYNC_MASTER").with_namesrv(&ns.addr),
    );
    let slave = Node::start(
        dir.path(),
        "slave",
        &Spec::slave(1, Some(master.ha)).with_namesrv(&ns.addr),
    );
    let m = client(master.addr).await;
    let s = client(slave.addr).await;
    wait_in_sync(&m, 1, 30).await;
    create_topic(&m, "T", 1).await;
    for i in 0..MESSAGES {
        let reply = send(&m, "T", 0, format!("m{i}").as_bytes()).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    let reply = commit(&m, "LG", "T", 0, 6).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    common::wait_route(&ns.addr, "T");
    eventually!(20, "the slave holds LG's offset", {
        query_offset(&s, "LG", "T", 0).await == Some(6)
    });
    let consumer = LitePullConsumer::start(LitePullConsumerConfig {
        namesrv_addrs: vec![ns.addr.parse().unwrap()],
        group: "LG".into(),
        start_position: StartPosition::First,
        pull_batch: 4,
        buffer_per_queue: 4,
        max_poll_messages: 4,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .unwrap();
    let queue = MessageQueue {
        topic: "T".into(),
        broker_name: GROUP_NAME.into(),
        queue_id: 0,
    };
    consumer.assign(vec![queue.clone()]).await.unwrap();
    let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 8 {
        assert!(
            Instant::now() < deadline,
            "polled only {got:?} from the master"
        );
        for message in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            got.push((message.queue_offset, message.body.to_vec()));
        }
    }
    let before_kill = got.len();
    let served_by_slave_before = common::ok_json(&["brokerStatus", "-b", &slave.addr_str()])
        ["brokers"][0]["table"]["msgGetTotalTodayNow"]
        .as_str()
        .unwrap_or("0")
        .parse::<u64>()
        .unwrap_or(0);
    master.kill();
    let killed = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < (MESSAGES - 6) as usize {
        assert!(
            Instant::now() < deadline,
            "after the master was killed the consumer got {} more ({:?}); stats {:?}",
            got.len() - before_kill,
            got.last(),
            consumer.stats()
        );
        for message in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            got.push((message.queue_offset, message.body.to_vec()));
        }
    }
    let resumed = killed.elapsed();
    let expected: Vec<(u64, Vec<u8>)> = (6..MESSAGES)
        .map(|i| (i as u64, format!("m{i}").into_bytes()))
        .collect();
    assert_eq!(
        got, expected,
        "in order from the committed offset, nothing rewound or skipped"
    );
    let served_by_slave = common::ok_json(&["brokerStatus", "-b", &slave.addr_str()])["brokers"][0]
        ["table"]["msgGetTotalTodayNow"]
        .as_str()
        .unwrap_or("0")
        .parse::<u64>()
        .unwrap_or(0);
    println!(
        "consumer: {before_kill} messages from the master, {} more after the kill within {resumed:?}; \
         slave served {} messages (msgGetTotalTodayNow {served_by_slave_before} -> {served_by_slave}); stats {:?}",
        got.len() - before_kill,
        served_by_slave - served_by_slave_before,
        consumer.stats()
    );
    assert!(
        served_by_slave > served_by_slave_before,
        "the slave served none of the pulls after the kill"
    );
    drop(consumer);
}
