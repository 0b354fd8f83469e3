//! The official Java tools and client against a ferromq controller-mode cluster
//! (`ferromq cluster`: a name server, three controllers and one broker group of two SYNC_MASTER
//! replicas, child processes on 127.0.0.1 with OS-chosen ports), driven through
//! `scripts/interop/java` (5.5.0; one JVM per test, see `common/java.rs`). Skipped with a
//! printed reason when the Java driver is missing, unless `FERROMQ_INTEROP_REQUIRED` is set.
//!
//! - `java5_mqadmin_ha_commands_against_a_controller_cluster`: mqadmin `getControllerMetaData`,
//!   `getSyncStateSet` and `getBrokerEpoch` print the controller group, its leader, the
//!   master, the in-sync set and the epochs that ferromq's own controller protocol reports.
//! - `java5_push_consumer_keeps_consuming_through_a_master_kill`: a 5.5.0 `DefaultMQPushConsumer`
//!   keeps consuming through a kill -9 of the SYNC_MASTER and the automatic failover: every
//!   acknowledged message (before the kill and after the failover) is consumed, duplicates stay
//!   within the in-flight bound, and no committed offset on the new master is below what the
//!   old master acknowledged.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::java::{self, Driver, V5};
use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{ControllerMetadata, GetReplicaInfoRequest, ReplicaInfo};
use ferromq_protocol::remoting::codes::request;
use serde_json::Value;

/// Bound on the cluster printing its ready line.
const READY_WAIT: Duration = Duration::from_secs(60);
/// Bound on the controller naming a master with a full in-sync set.
const MASTER_WAIT: Duration = Duration::from_secs(60);
/// Bound on one mqadmin command.
const ADMIN: Duration = Duration::from_secs(120);
/// The broker group `ferromq cluster` starts.
const GROUP: &str = "broker-0";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A `ferromq cluster` process and what its ready line says; stopped (SIGTERM, which stops
/// every node, then SIGKILL after a bounded wait) on drop.
struct HaCluster {
    child: Child,
    namesrv: String,
    controllers: Vec<SocketAddr>,
    /// (name, kind, address, pid) per node.
    nodes: Vec<(String, String, String, u32)>,
}

impl HaCluster {
    fn start(dir: &Path, replicas: usize) -> HaCluster {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(["cluster", "--controllers", "3", "--replicas"])
            .arg(replicas.to_string())
            .args(["--role", "sync", "--namesrv-port", "0", "--dir"])
            .arg(dir.join("cluster"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning ferromq cluster");
        let stdout = child.stdout.take().expect("cluster stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + READY_WAIT;
        let ready: Value = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("ferromq cluster not ready within {READY_WAIT:?}"));
            if let Some(json) = line.strip_prefix("ferromq cluster: ready ") {
                break serde_json::from_str(json).expect("ready JSON");
            }
        };
        let nodes = ready["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap_or_default().to_string(),
                    n["kind"].as_str().unwrap_or_default().to_string(),
                    n["addr"].as_str().unwrap_or_default().to_string(),
                    n["pid"].as_u64().unwrap_or_default() as u32,
                )
            })
            .collect();
        HaCluster {
            child,
            namesrv: ready["namesrv"].as_str().expect("namesrv").to_string(),
            controllers: ControllerClient::parse_addrs(
                ready["controllers"].as_str().expect("controllers"),
            )
            .expect("controller addresses"),
            nodes,
        }
    }

    fn controller(&self) -> ControllerClient {
        ControllerClient::new(self.controllers.clone())
    }

    /// The group's state once it has a master and `members` in-sync replicas.
    fn wait_master(&self, min_epoch: u64, members: usize) -> ReplicaInfo {
        let controller = self.controller();
        let deadline = Instant::now() + MASTER_WAIT;
        runtime().block_on(async {
            loop {
                let info: Option<ReplicaInfo> = controller
                    .call(
                        request::CONTROLLER_GET_REPLICA_INFO,
                        &GetReplicaInfoRequest {
                            broker_name: GROUP.into(),
                        },
                        Duration::from_secs(2),
                    )
                    .await
                    .ok();
                if let Some(info) = info {
                    if info.master_address.is_some()
                        && info.master_epoch >= min_epoch
                        && info.sync_state_set.len() >= members
                    {
                        return info;
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "no master of {GROUP} at epoch >= {min_epoch} with {members} in sync"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    fn metadata(&self) -> ControllerMetadata {
        let controller = self.controller();
        runtime()
            .block_on(controller.call(
                request::CONTROLLER_GET_METADATA_INFO,
                &serde_json::json!({}),
                Duration::from_secs(5),
            ))
            .expect("controller metadata")
    }

    /// Waits (bounded by `MASTER_WAIT`) until the controller at `addr` itself names `leader`
    /// as the controller leader. A follower learns the leader from the leader's first append
    /// or heartbeat, which may come after the group's master was elected; mqadmin asks that
    /// one controller, so the test must not ask it before it knows.
    fn wait_leader_known_by(&self, addr: std::net::SocketAddr, leader: &str) {
        let one = ControllerClient::new(vec![addr]);
        let deadline = Instant::now() + MASTER_WAIT;
        runtime().block_on(async {
            loop {
                let seen: Option<ControllerMetadata> = one
                    .call(
                        request::CONTROLLER_GET_METADATA_INFO,
                        &serde_json::json!({}),
                        Duration::from_secs(2),
                    )
                    .await
                    .ok();
                let seen = seen.and_then(|m| m.controller_leader_address);
                if seen.as_deref() == Some(leader) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "controller {addr} still names leader {seen:?}, expected {leader}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// Broker remoting addresses.
    fn brokers(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.1 == "broker")
            .map(|n| n.2.clone())
            .collect()
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for (_, _, _, pid) in &self.nodes {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn setup(test: &str, replicas: usize) -> Option<(PathBuf, HaCluster, Driver)> {
    let classpath = java::classpath_or_skip(V5, test)?;
    let dir = java::run_dir(test);
    let cluster = HaCluster::start(&dir, replicas);
    let driver = Driver::start(&classpath, &dir, &cluster.namesrv, &[]);
    Some((dir, cluster, driver))
}

fn stdout(reply: &Value) -> String {
    reply["stdout"].as_str().unwrap_or_default().to_string()
}

/// The value after `#key\t` on its own line of mqadmin's output.
fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("#{key}\t");
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(prefix.as_str()))
        .map(str::trim)
}

#[test]
fn java5_mqadmin_ha_commands_against_a_controller_cluster() {
    let test = "java5_mqadmin_ha_commands_against_a_controller_cluster";
    let Some((dir, cluster, mut driver)) = setup(test, 2) else {
        return;
    };
    let started = Instant::now();
    let info = cluster.wait_master(1, 2);
    let master = info.master_address.clone().expect("master address");
    let master_id = info.master_broker_id.expect("master id");
    let metadata = cluster.metadata();
    let leader = metadata
        .controller_leader_address
        .clone()
        .expect("a controller leader");
    let d = &mut driver;

    // getControllerMetaData: group, leader and every peer, from any controller.
    let asked = cluster.controllers[2];
    cluster.wait_leader_known_by(asked, &leader);
    let reply = d.ok(&format!("mqadmin getControllerMetaData -a {asked}"), ADMIN);
    let out = stdout(&reply);
    eprintln!("getControllerMetaData:\n{out}");
    assert_eq!(
        field(&out, "ControllerGroup"),
        Some(metadata.group.as_str()),
        "{reply}"
    );
    assert_eq!(
        field(&out, "ControllerLeaderAddress"),
        Some(leader.as_str()),
        "{reply}"
    );
    let peers: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#Peer:"))
        .map(str::trim)
        .collect();
    assert_eq!(peers.len(), 3, "{reply}");
    for controller in &cluster.controllers {
        assert!(
            peers.iter().any(|p| p.ends_with(&controller.to_string())),
            "peer {controller} missing: {reply}"
        );
    }

    // getSyncStateSet: master id, address and epoch, set epoch, both replicas in sync and
    // alive.
    let reply = d.ok(
        &format!("mqadmin getSyncStateSet -a {asked} -b {GROUP}"),
        ADMIN,
    );
    let out = stdout(&reply);
    eprintln!("getSyncStateSet:\n{out}");
    let info = cluster.wait_master(1, 2);
    assert_eq!(field(&out, "brokerName"), Some(GROUP), "{reply}");
    assert_eq!(field(&out, "MasterAddr"), Some(master.as_str()), "{reply}");
    assert_eq!(
        field(&out, "MasterBrokerId"),
        Some(master_id.to_string().as_str()),
        "{reply}"
    );
    assert_eq!(
        field(&out, "MasterEpoch"),
        Some(info.master_epoch.to_string().as_str()),
        "{reply}"
    );
    assert_eq!(
        field(&out, "SyncStateSetEpoch"),
        Some(info.sync_state_set_epoch.to_string().as_str()),
        "{reply}"
    );
    assert_eq!(field(&out, "SyncStateSetNums"), Some("2"), "{reply}");
    let in_sync: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("InSyncReplica:"))
        .collect();
    assert_eq!(in_sync.len(), 2, "{reply}");
    // 5.5.0 prints the member's liveness inside its toString (`alive=true`).
    assert!(in_sync.iter().all(|l| l.contains("alive=true")), "{reply}");
    for broker in cluster.brokers() {
        assert!(
            in_sync.iter().any(|l| l.contains(&broker)),
            "{broker} not listed in sync: {reply}"
        );
    }
    assert!(
        in_sync
            .iter()
            .any(|l| l.contains(&master) && l.contains(&format!("brokerId={master_id}"))),
        "the master {master} (id {master_id}) not in sync: {reply}"
    );

    // getBrokerEpoch: every replica's epoch entries, the current epoch last.
    let ns = &cluster.namesrv;
    let reply = d.ok(&format!("mqadmin getBrokerEpoch -n {ns} -b {GROUP}"), ADMIN);
    let out = stdout(&reply);
    eprintln!("getBrokerEpoch:\n{out}");
    let blocks: Vec<&str> = out.split("#clusterName").skip(1).collect();
    assert_eq!(blocks.len(), 2, "one block per replica: {reply}");
    for broker in cluster.brokers() {
        let block = blocks
            .iter()
            .find(|b| field(b, "brokerAddr") == Some(broker.as_str()))
            .unwrap_or_else(|| panic!("no epoch block for {broker}: {reply}"));
        assert_eq!(field(block, "brokerName"), Some(GROUP), "{reply}");
        if broker == master {
            assert_eq!(
                field(block, "brokerId"),
                Some(master_id.to_string().as_str()),
                "{reply}"
            );
        }
        let last = block
            .lines()
            .rfind(|l| l.trim_start().starts_with("#Epoch:"))
            .unwrap_or_else(|| panic!("{broker} lists no epoch: {reply}"));
        assert!(
            last.contains(&format!("epoch={}", info.master_epoch)),
            "{broker}'s last epoch is not {}: {last}",
            info.master_epoch
        );
    }
    eprintln!(
        "{test}: done in {:.1} s; run dir {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
}

// ---------------------------------------------------------------------------------------------
// A Java push consumer through a master kill -9

/// Queues of the failover test's topic.
const QUEUES: i32 = 4;
/// Messages acknowledged before the kill, and after the failover.
const BEFORE: u32 = 1500;
const AFTER: u32 = 400;
/// The consumer's pace: one thread, 10 ms a message, so about this many a second...
const RATE: f64 = 100.0;
/// Offsets the old master must have acknowledged before the kill (the Java client's first
/// persist runs 10 s after it starts), so the no-rewind check has something to hold.
const COMMITTED_BEFORE_KILL: i64 = 300;
/// ...and it persists offsets every second.
const PERSIST: Duration = Duration::from_secs(1);
/// Bound on waiting for deliveries.
const CONSUME: Duration = Duration::from_secs(120);

fn socket(addr: &str) -> SocketAddr {
    addr.parse().expect("socket address")
}

/// The committed offset of every queue of `topic` for `group`, as `broker` stores it (`None`
/// for a queue without one, or when the broker cannot be asked).
fn committed(broker: &str, group: &str, topic: &str) -> Vec<Option<i64>> {
    runtime().block_on(async {
        let connect = ferromq_protocol::remoting::client::RemotingClient::connect(
            socket(broker),
            Duration::from_secs(2),
        )
        .await;
        let Ok(client) = connect else {
            return vec![None; QUEUES as usize];
        };
        let mut out = Vec::new();
        for q in 0..QUEUES {
            out.push(common::remoting::query_offset(&client, group, topic, q).await);
        }
        client.close();
        out
    })
}

/// Waits (bounded) until the name server routes `topic` to `master` as broker id 0.
fn wait_route_to(namesrv: &str, topic: &str, master: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = common::admin(&["topicRoute", "-n", namesrv, "-t", topic]);
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.contains(master) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the route of {topic} does not name {master}: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kill9(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -9 {pid}");
}

#[test]
fn java5_push_consumer_keeps_consuming_through_a_master_kill() {
    let test = "java5_push_consumer_keeps_consuming_through_a_master_kill";
    let Some((dir, cluster, mut driver)) = setup(test, 2) else {
        return;
    };
    let info = cluster.wait_master(1, 2);
    let master = info.master_address.clone().expect("master address");
    let ns = cluster.namesrv.clone();
    common::create_topic(&ns, &master, "JF", &QUEUES.to_string());
    let d = &mut driver;
    let sent = d.ok(
        &format!("produce --topic JF --count {BEFORE} --prefix f"),
        CONSUME,
    );
    assert_eq!(sent["sent"], BEFORE, "{sent}");
    d.ok(
        "push-start --name f1 --topic JF --group G_fo --threads 1 --sleep-ms 10 --persist-ms 1000",
        CONSUME,
    );
    let reached = d.wait_events(CONSUME, |ev| {
        ev.iter().filter(|e| e["consumer"] == "f1").count() >= 200
    });
    assert!(reached, "the consumer did not reach 200 deliveries");

    // What the master acknowledged (SYNC_MASTER: held by the in-sync replica too) just before
    // it dies, once it is at least COMMITTED_BEFORE_KILL. Commits in flight may land after this
    // read: it is a lower bound.
    let deadline = Instant::now() + CONSUME;
    let before = loop {
        let now = committed(&master, "G_fo", "JF");
        if now.iter().map(|o| o.unwrap_or(0)).sum::<i64>() >= COMMITTED_BEFORE_KILL {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the master never acknowledged {COMMITTED_BEFORE_KILL} offsets: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    d.pump();
    let delivered_at_kill = d.deliveries("f1").count();
    let pid = cluster
        .nodes
        .iter()
        .find(|n| n.2 == master)
        .map(|n| n.3)
        .expect("the master's pid");
    kill9(pid);
    let killed = Instant::now();
    let after_info = cluster.wait_master(info.master_epoch + 1, 1);
    let new_master = after_info.master_address.clone().expect("new master");
    assert_ne!(new_master, master, "the dead broker is master again");
    let failover = killed.elapsed();

    // No committed offset rewinds: the new master holds at least what the old one had.
    let check_no_rewind = |now: &[Option<i64>], when: &str| {
        for (q, (b, n)) in before.iter().zip(now).enumerate() {
            if let Some(b) = b {
                assert!(
                    n.is_some_and(|n| n >= *b),
                    "{when}: queue {q} committed {n:?} on the new master, below {b} acknowledged \
                     by the old one (before {before:?}, now {now:?})"
                );
            }
        }
    };
    check_no_rewind(
        &committed(&new_master, "G_fo", "JF"),
        "right after the failover",
    );

    wait_route_to(&ns, "JF", &new_master);
    let sent = d.ok(
        &format!("produce --topic JF --count {AFTER} --prefix g"),
        CONSUME,
    );
    assert_eq!(sent["sent"], AFTER, "{sent}");

    let mut want: std::collections::BTreeSet<String> =
        (0..BEFORE).map(|i| format!("f:{i}")).collect();
    want.extend((0..AFTER).map(|i| format!("g:{i}")));
    let done = d.wait_events(CONSUME, |ev| {
        let seen: std::collections::BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "f1")
            .filter_map(|e| e["body"].as_str())
            .collect();
        want.iter().all(|b| seen.contains(b.as_str()))
    });
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for e in d.deliveries("f1") {
        *counts
            .entry(e["body"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    let missing: Vec<&String> = want.iter().filter(|b| !counts.contains_key(*b)).collect();
    assert!(
        done && missing.is_empty(),
        "{} acknowledged messages never consumed after the failover, e.g. {:?}",
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    let delivered: u64 = counts.values().sum();
    let duplicates = delivered - counts.len() as u64;
    // In flight at the kill: what the consumer can repeat is what it consumed after its last
    // acknowledged persist, and until its first persist to the new master: at its rate, one
    // persist interval plus the failover plus one more interval.
    let bound = (RATE * (2 * PERSIST + failover).as_secs_f64()).ceil() as u64;
    eprintln!(
        "{test}: master {master} killed after {delivered_at_kill} deliveries; new master \
         {new_master} after {:.1} s; committed before the kill {before:?}; {} delivered, \
         {duplicates} duplicates (bound {bound}); run dir {}",
        failover.as_secs_f64(),
        delivered,
        dir.display()
    );
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates through the failover, bound {bound}"
    );

    // The committed offsets reach the end of every queue on the new master, never below
    // what the old master acknowledged.
    let deadline = Instant::now() + Duration::from_secs(30);
    let total = i64::from(BEFORE + AFTER);
    let end = loop {
        let now = committed(&new_master, "G_fo", "JF");
        check_no_rewind(&now, "while settling");
        let sum: i64 = now.iter().map(|o| o.unwrap_or(0)).sum();
        if sum == total || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let sum: i64 = end.iter().map(|o| o.unwrap_or(0)).sum();
    assert_eq!(
        sum, total,
        "committed offsets on the new master {end:?} do not add up to every message"
    );
    d.ok("push-stop --name f1", CONSUME);
}
