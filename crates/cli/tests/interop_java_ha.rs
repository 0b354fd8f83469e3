//! The official Java tools and client against a ferromq controller-mode cluster
//! (`ferromq cluster`: a name server, three controllers and one broker group of two SYNC_MASTER
//! replicas, child processes on 127.0.0.1 with OS-chosen ports), driven through
//! `scripts/interop/java` (5.5.0; one JVM per test, see `common/java.rs`). Skipped with a
//! printed reason when the Java driver is missing, unless `FERROMQ_INTEROP_REQUIRED` is set.
//!
//! - `java5_mqadmin_ha_commands_against_a_controller_cluster`: mqadmin `getControllerMetaData`,
//!   `getSyncStateSet` and `getBrokerEpoch` print the controller group, its leader, the
//!   master, the in-sync set and the epochs that ferromq's own controller protocol reports.

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
            .filter(|l| l.trim_start().starts_with("#Epoch:"))
            .last()
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
