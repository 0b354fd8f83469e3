//! `ferromq controller` as processes: three nodes form a group, the leader is killed with
//! SIGKILL, and a new leader answers `getControllerMetaData`; the admin commands print the
//! controller's error code and remark and exit non-zero; bad settings name their keys.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{admin, signal, wait_exit};
use serde_json::Value;

/// Bound on a leader emerging (or re-emerging after a kill).
const LEADER_WAIT: Duration = Duration::from_secs(30);

/// Kills the child on drop so a failed test leaves no process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three free ports on 127.0.0.1 (bound at once, then released for the controllers).
fn free_addrs() -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn start_node(dir: &std::path::Path, id: usize, peers: &str) -> Running {
    start_node_with(dir, id, peers, &[])
}

fn start_node_with(dir: &std::path::Path, id: usize, peers: &str, extra: &[&str]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args([
            "controller",
            "--controllerDLegerPeers",
            peers,
            "--controllerDLegerSelfId",
            &format!("n{id}"),
            "--controllerStorePath",
        ])
        .arg(dir.join(format!("n{id}")))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = common::first_line(&mut child).expect("controller printed its line within 30 s");
    assert!(
        line.starts_with("ferromq controller: listening on 127.0.0.1:"),
        "{line}"
    );
    assert!(
        line.contains(&format!(" self n{id} peers {peers}")),
        "{line}"
    );
    Running(child)
}

/// `getControllerMetaData --json` against one address; `None` if it fails.
fn metadata(addr: SocketAddr) -> Option<Value> {
    let out = admin(&["getControllerMetaData", "-a", &addr.to_string(), "--json"]);
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last()?).ok()
}

/// The index of the node that says it is leader and that the others name, within the bound.
fn wait_for_leader(addrs: &[SocketAddr], alive: &[bool]) -> usize {
    let deadline = Instant::now() + LEADER_WAIT;
    loop {
        let answers: Vec<Option<Value>> = addrs
            .iter()
            .zip(alive)
            .map(|(a, up)| if *up { metadata(*a) } else { None })
            .collect();
        let leader = answers.iter().position(|m| {
            m.as_ref()
                .is_some_and(|m| m["isLeader"] == Value::Bool(true))
        });
        if let Some(i) = leader {
            let agreed = answers
                .iter()
                .zip(alive)
                .filter(|(_, up)| **up)
                .all(|(m, _)| {
                    m.as_ref()
                        .is_some_and(|m| m["controllerLeaderId"] == serde_json::json!(i))
                });
            if agreed {
                return i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader within {LEADER_WAIT:?}: {answers:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn after_kill_9_of_the_leader_a_new_leader_answers_get_controller_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs();
    let peers = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("n{i}-{a}"))
        .collect::<Vec<_>>()
        .join(";");
    let mut nodes: Vec<Option<Running>> = (0..3)
        .map(|i| Some(start_node(dir.path(), i, &peers)))
        .collect();
    let mut alive = vec![true; 3];
    let leader = wait_for_leader(&addrs, &alive);
    let before = metadata(addrs[leader]).unwrap();
    assert_eq!(before["group"], "DefaultControllerGroup");
    assert_eq!(before["peers"].as_array().unwrap().len(), 3);
    assert_eq!(before["metrics"]["raftState"], "Leader");

    signal(&nodes[leader].as_ref().unwrap().0, "KILL");
    let mut killed = nodes[leader].take().unwrap();
    let _ = wait_exit(&mut killed.0);
    alive[leader] = false;
    let new_leader = wait_for_leader(&addrs, &alive);
    assert_ne!(new_leader, leader);
    let after = metadata(addrs[new_leader]).unwrap();
    assert!(
        after["term"].as_u64().unwrap() > before["term"].as_u64().unwrap(),
        "{after}"
    );
    // Every address given, the dead one first: the command still answers.
    let all = addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>();
    let mut ordered = vec![all[leader].clone()];
    ordered.extend(
        all.iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .map(|(_, a)| a.clone()),
    );
    let out = admin(&["getControllerMetaData", "-a", &ordered.join(";")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("ControllerLeaderId: n{new_leader}")),
        "{text}"
    );

    // A controller's refusal prints its code and remark and exits 1.
    let out = admin(&[
        "electMaster",
        "-a",
        &all[new_leader],
        "-c",
        "DefaultCluster",
        "-bn",
        "no-such-broker",
        "-b",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2008") && stderr.contains("no-such-broker"),
        "{stderr}"
    );

    for node in nodes.iter_mut().flatten() {
        signal(&node.0, "TERM");
        assert!(wait_exit(&mut node.0).success());
    }
}

#[test]
fn a_lease_too_close_to_the_heartbeat_timeout_is_refused_naming_the_keys() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args([
            "controller",
            "--brokerLeaseMillis",
            "900",
            "--controllerStorePath",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("brokerLeaseMillis") && stderr.contains("controllerHeartBeatTimeoutMills"),
        "{stderr}"
    );
}

#[test]
fn a_namesrv_can_embed_a_controller_on_its_own_port() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addrs()[0];
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args([
                "namesrv",
                "--listen",
                "127.0.0.1:0",
                "--enable-controller-in-namesrv",
            ])
            .args([
                "--controllerDLegerPeers",
                &format!("n0-{addr}"),
                "--controllerDLegerSelfId",
                "n0",
            ])
            .arg("--controllerStorePath")
            .arg(dir.path().join("controller"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = common::first_line(&mut child.0).expect("namesrv line");
    assert!(line.starts_with("ferromq namesrv: listening on"), "{line}");
    let leader = wait_for_leader(&[addr], &[true]);
    assert_eq!(leader, 0);
    signal(&child.0, "TERM");
    assert!(wait_exit(&mut child.0).success());
}

/// Registers brokers 1 and 2 of `broker-a` with the controller at `addr`, as brokers would.
fn register_two_brokers(addr: SocketAddr) {
    use ferromq_protocol::controller::client::ControllerClient;
    use ferromq_protocol::controller::{RegisterBrokerReply, RegisterBrokerRequest};
    use ferromq_protocol::remoting::codes::request;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = ControllerClient::new(vec![addr]);
        for port in [10911u16, 10921] {
            let reply: RegisterBrokerReply = client
                .call(
                    request::CONTROLLER_REGISTER_BROKER,
                    &RegisterBrokerRequest {
                        cluster_name: "DefaultCluster".into(),
                        broker_name: "broker-a".into(),
                        broker_address: format!("127.0.0.1:{port}"),
                        ha_address: format!("127.0.0.1:{}", port + 1),
                        ..RegisterBrokerRequest::default()
                    },
                    Duration::from_secs(10),
                )
                .await
                .expect("register");
            assert!(reply.broker_id >= 1);
        }
    });
}

#[test]
fn sync_state_set_elect_master_and_clean_broker_metadata_drive_one_controller() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addrs()[0];
    // Brokers registered here never heartbeat: a long timeout keeps them alive throughout.
    let _node = start_node_with(
        dir.path(),
        0,
        &format!("n0-{addr}"),
        &["--controllerHeartBeatTimeoutMills", "60000"],
    );
    wait_for_leader(&[addr], &[true]);
    register_two_brokers(addr);
    let a = addr.to_string();

    let data = common::ok_json(&["getSyncStateSet", "-a", &a, "-b", "broker-a"]);
    let group = &data["groups"][0];
    assert_eq!(group["replicaInfo"]["masterBrokerId"], 1, "{data}");
    assert_eq!(group["members"].as_array().unwrap().len(), 2, "{data}");
    // -i intervalSec prints again every interval until interrupted.
    let mut watching = Running(
        Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args([
                "admin",
                "getSyncStateSet",
                "-a",
                &a,
                "-b",
                "broker-a",
                "-i",
                "1",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = watching.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let started = std::time::Instant::now();
    for round in 0..2 {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("getSyncStateSet -i 1 printed no round {round}"));
        let printed: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(printed["groups"][0]["replicaInfo"]["masterBrokerId"], 1);
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    drop(watching);
    let table = common::ok(&["getSyncStateSet", "-a", &a, "-c", "DefaultCluster"]);
    assert!(table.starts_with("#Cluster"), "{table}");
    assert!(
        table.contains("MASTER") && table.contains("SLAVE"),
        "{table}"
    );

    // Broker 2 is alive (grace after registration) but not in sync: refused with why.
    let line = common::fails(
        &[
            "electMaster",
            "-a",
            &a,
            "-c",
            "DefaultCluster",
            "-bn",
            "broker-a",
            "-b",
            "2",
        ],
        1,
    );
    assert!(line.contains("2012") && line.contains("in-sync"), "{line}");

    // Cleaning a living broker needs -l.
    let line = common::fails(
        &[
            "cleanBrokerMetadata",
            "-a",
            &a,
            "-c",
            "DefaultCluster",
            "-bn",
            "broker-a",
            "-b",
            "2",
        ],
        1,
    );
    assert!(
        line.contains("2009") && line.contains("cleanLivingBroker"),
        "{line}"
    );
    let cleaned = common::ok_json(&[
        "cleanBrokerMetadata",
        "-a",
        &a,
        "-c",
        "DefaultCluster",
        "-bn",
        "broker-a",
        "-b",
        "2",
        "-l",
    ]);
    assert_eq!(
        cleaned["cleanedBrokerIds"],
        serde_json::json!([2]),
        "{cleaned}"
    );
    let data = common::ok_json(&["getSyncStateSet", "-a", &a]);
    assert_eq!(
        data["groups"][0]["members"].as_array().unwrap().len(),
        1,
        "{data}"
    );
}

#[test]
fn a_controller_reads_its_toml_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addrs()[0];
    let file = dir.path().join("controller.toml");
    std::fs::write(
        &file,
        format!(
            "controllerDLegerGroup = \"G1\"\ncontrollerDLegerPeers = \"n0-{addr}\"\n\
             controllerDLegerSelfId = \"n0\"\ncontrollerStorePath = \"{}\"\n\
             controllerHeartBeatTimeoutMills = 2000\nbrokerLeaseMillis = 1500\n",
            dir.path().join("store").display()
        ),
    )
    .unwrap();
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(["controller", "-c"])
            .arg(&file)
            .args(["--controllerDLegerGroup", "G2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = common::first_line(&mut child.0).expect("controller line");
    assert_eq!(
        line.trim_end(),
        format!("ferromq controller: listening on {addr} self n0 peers n0-{addr}")
    );
    wait_for_leader(&[addr], &[true]);
    assert_eq!(metadata(addr).unwrap()["group"], "G2");
    signal(&child.0, "TERM");
    assert!(wait_exit(&mut child.0).success());

    // An unknown key is named.
    std::fs::write(&file, "controllerDLegerPeerz = \"x\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["controller", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("controllerDLegerPeerz"), "{stderr}");
}
