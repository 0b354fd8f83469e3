//! In-process three-node controller groups on 127.0.0.1 with OS-chosen ports: leader
//! election, broker registration and heartbeats through a leader-following client, master
//! failover, fencing, loss of quorum, and recovery from disk. Every wait is bounded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_controller::{Controller, ControllerConfig, Peer};
use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{
    AlterSyncStateSetReply, AlterSyncStateSetRequest, ElectMasterRequest, GetReplicaInfoRequest,
    HeartbeatReply, HeartbeatRequest, RegisterBrokerReply, RegisterBrokerRequest, ReplicaInfo,
};
use ferromq_protocol::remoting::{request, response, ExtFields, RemotingClient, RemotingCommand};

/// Bound on a leader emerging.
const LEADER_WAIT: Duration = Duration::from_secs(15);
/// Bound on one call through the client.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Heartbeat timeout used by these tests (the default).
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1000);
/// A heartbeat timeout no test outlives: brokers never die on their own.
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);
/// Slack on top of the heartbeat timeout for a failover (scan interval, Raft commit, CI).
const FAILOVER_MARGIN: Duration = Duration::from_millis(2500);

fn config(dir: &std::path::Path, id: u64, listen: SocketAddr) -> ControllerConfig {
    ControllerConfig {
        self_id: id,
        peers: vec![Peer { id, addr: listen }],
        listen: Some(listen),
        store_path: dir.join(format!("n{id}")),
        heartbeat_timeout: HEARTBEAT_TIMEOUT,
        ..ControllerConfig::default()
    }
}

/// Binds every node (port 0 the first time), then starts them with the learned peers.
async fn start_group(
    dir: &std::path::Path,
    addrs: Option<&[SocketAddr]>,
) -> Vec<Option<Controller>> {
    start_group_with(dir, addrs, HEARTBEAT_TIMEOUT).await
}

/// [`start_group`] with another broker heartbeat timeout (a long one keeps the failure
/// detector from changing state a test compares).
async fn start_group_with(
    dir: &std::path::Path,
    addrs: Option<&[SocketAddr]>,
    heartbeat_timeout: Duration,
) -> Vec<Option<Controller>> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut bound = Vec::new();
    for id in 0..3u64 {
        let listen = addrs.map_or(any, |a| a[id as usize]);
        let config = ControllerConfig {
            heartbeat_timeout,
            ..config(dir, id, listen)
        };
        bound.push(Controller::bind(config).await.expect("bind"));
    }
    let peers: Vec<Peer> = bound
        .iter()
        .enumerate()
        .map(|(id, b)| Peer {
            id: id as u64,
            addr: b.local_addr(),
        })
        .collect();
    let mut nodes = Vec::new();
    for b in bound {
        nodes.push(Some(
            b.start_with_peers(peers.clone()).await.expect("start"),
        ));
    }
    nodes
}

fn addrs(nodes: &[Option<Controller>]) -> Vec<SocketAddr> {
    nodes.iter().flatten().map(Controller::local_addr).collect()
}

/// Waits until one running node is leader and every running node names it (a stable
/// leader, not one about to lose a concurrent election); returns its index.
async fn wait_for_leader(nodes: &[Option<Controller>]) -> usize {
    let deadline = Instant::now() + LEADER_WAIT;
    loop {
        let leader = nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(Controller::is_leader));
        if let Some(i) = leader {
            let id = nodes[i].as_ref().map(Controller::self_id);
            if nodes.iter().flatten().all(|n| n.leader_id() == id) {
                return i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader within {LEADER_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn shutdown_all(nodes: Vec<Option<Controller>>) {
    for node in nodes.into_iter().flatten() {
        node.shutdown().await;
    }
}

fn register_request(broker: u64, max_offset: u64) -> RegisterBrokerRequest {
    RegisterBrokerRequest {
        cluster_name: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        broker_id: None,
        broker_address: format!("127.0.0.1:{}", 1 + broker),
        ha_address: format!("127.0.0.1:{}", 100 + broker),
        election_priority: 0,
        epoch: 0,
        max_offset,
    }
}

async fn register(client: &ControllerClient, broker: u64) -> RegisterBrokerReply {
    client
        .call(
            request::CONTROLLER_REGISTER_BROKER,
            &register_request(broker, 0),
            CALL_TIMEOUT,
        )
        .await
        .expect("register")
}

fn heartbeat_request(id: u64, epoch: u64, max_offset: u64) -> HeartbeatRequest {
    HeartbeatRequest {
        cluster_name: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        broker_id: id,
        broker_address: format!("127.0.0.1:{}", 1 + id),
        epoch,
        max_offset,
        confirm_offset: max_offset,
        election_priority: 0,
    }
}

/// Heartbeats for broker `id` every 200 ms until `stop`.
fn keep_heartbeating(addrs: Vec<SocketAddr>, id: u64, max_offset: u64, stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        let client = ControllerClient::new(addrs);
        while !stop.load(Ordering::Relaxed) {
            let _ = client
                .call::<_, HeartbeatReply>(
                    request::BROKER_HEARTBEAT,
                    &heartbeat_request(id, 1, max_offset),
                    Duration::from_secs(2),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

async fn replica_info(client: &ControllerClient) -> ReplicaInfo {
    client
        .call(
            request::CONTROLLER_GET_REPLICA_INFO,
            &GetReplicaInfoRequest {
                broker_name: "broker-a".into(),
            },
            CALL_TIMEOUT,
        )
        .await
        .expect("replica info")
}

async fn wait_for_master(
    client: &ControllerClient,
    bound: Duration,
    want: impl Fn(&ReplicaInfo) -> bool,
) -> ReplicaInfo {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(info) = client
            .call::<_, ReplicaInfo>(
                request::CONTROLLER_GET_REPLICA_INFO,
                &GetReplicaInfoRequest {
                    broker_name: "broker-a".into(),
                },
                CALL_TIMEOUT,
            )
            .await
        {
            if want(&info) {
                return info;
            }
            assert!(
                Instant::now() < deadline,
                "master not as expected within {bound:?}: {info:?}"
            );
        }
        assert!(
            Instant::now() < deadline,
            "no replica info within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alter_request(master: u64, epoch: u64, set: &[u64], set_epoch: u64) -> AlterSyncStateSetRequest {
    AlterSyncStateSetRequest {
        cluster_name: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        master_broker_id: master,
        master_epoch: epoch,
        new_sync_state_set: set.to_vec(),
        sync_state_set_epoch: set_epoch,
    }
}

/// Sets up brokers 1..=3 with broker 1 master and all three in sync.
async fn three_brokers_in_sync(client: &ControllerClient) {
    let first = register(client, 1).await;
    assert_eq!(first.broker_id, 1);
    assert_eq!(
        first.replica_info.master_broker_id,
        Some(1),
        "first registrant becomes master"
    );
    assert_eq!(first.replica_info.master_epoch, 1);
    assert_eq!(register(client, 2).await.broker_id, 2);
    assert_eq!(register(client, 3).await.broker_id, 3);
    let reply: AlterSyncStateSetReply = client
        .call(
            request::CONTROLLER_ALTER_SYNC_STATE_SET,
            &alter_request(1, 1, &[1, 2, 3], 1),
            CALL_TIMEOUT,
        )
        .await
        .expect("alter");
    assert_eq!(reply.sync_state_set, vec![1, 2, 3]);
    assert_eq!(reply.sync_state_set_epoch, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_heartbeats_follow_the_leader_and_stale_set_epochs_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_group(dir.path(), None).await;
    let leader = wait_for_leader(&nodes).await;
    // Put a follower first so the client must follow a NOT_LEADER redirect.
    let mut order = addrs(&nodes);
    order.rotate_left((leader + 1) % 3);
    let client = ControllerClient::new(order.clone());
    three_brokers_in_sync(&client).await;
    assert_eq!(client.leader(), Some(addrs(&nodes)[leader]));

    let reply: HeartbeatReply = client
        .call(
            request::BROKER_HEARTBEAT,
            &heartbeat_request(2, 1, 10),
            CALL_TIMEOUT,
        )
        .await
        .expect("heartbeat");
    assert_eq!(reply.lease_millis, 600);
    assert_eq!(reply.replica_info.master_broker_id, Some(1));

    // The same request again holds a stale set epoch (1, now 2).
    let stale = client
        .call::<_, AlterSyncStateSetReply>(
            request::CONTROLLER_ALTER_SYNC_STATE_SET,
            &alter_request(1, 1, &[1, 2], 1),
            CALL_TIMEOUT,
        )
        .await
        .unwrap_err();
    assert_eq!(
        stale.code(),
        Some(response::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        "{stale}"
    );
    let fenced = client
        .call::<_, AlterSyncStateSetReply>(
            request::CONTROLLER_ALTER_SYNC_STATE_SET,
            &alter_request(1, 0, &[1, 2], 2),
            CALL_TIMEOUT,
        )
        .await
        .unwrap_err();
    assert_eq!(
        fenced.code(),
        Some(response::CONTROLLER_FENCED_MASTER_EPOCH),
        "{fenced}"
    );

    // electMaster: a designated member that is alive and in sync wins at once; a stranger
    // is refused with the reason.
    let elect = |id: u64| ElectMasterRequest {
        cluster_name: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        broker_id: Some(id),
        renew: None,
    };
    let info: ReplicaInfo = client
        .call(request::CONTROLLER_ELECT_MASTER, &elect(2), CALL_TIMEOUT)
        .await
        .expect("elect 2");
    assert_eq!(info.master_broker_id, Some(2));
    assert_eq!(info.master_epoch, 2);
    assert_eq!(info.sync_state_set, vec![2]);
    let refused = client
        .call::<_, ReplicaInfo>(request::CONTROLLER_ELECT_MASTER, &elect(9), CALL_TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(response::CONTROLLER_ELECT_MASTER_FAILED),
        "{refused}"
    );
    assert!(refused.to_string().contains("not a member"), "{refused}");
    let still = client
        .call::<_, ReplicaInfo>(request::CONTROLLER_ELECT_MASTER, &elect(2), CALL_TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(
        still.code(),
        Some(response::CONTROLLER_MASTER_STILL_EXIST),
        "{still}"
    );

    // An unregistered broker is told to register.
    let unknown = client
        .call::<_, HeartbeatReply>(
            request::BROKER_HEARTBEAT,
            &heartbeat_request(9, 1, 0),
            CALL_TIMEOUT,
        )
        .await
        .unwrap_err();
    assert_eq!(
        unknown.code(),
        Some(response::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
    );

    // A follower answers NOT_LEADER naming the leader; a malformed body is refused.
    let follower = addrs(&nodes)[(leader + 1) % 3];
    let raw = RemotingClient::connect(follower, CALL_TIMEOUT)
        .await
        .unwrap();
    let hb = RemotingCommand::new_request(request::BROKER_HEARTBEAT, ExtFields::new())
        .with_body(serde_json::to_vec(&heartbeat_request(1, 1, 0)).unwrap());
    let answer = raw.invoke(hb, CALL_TIMEOUT).await.unwrap();
    assert_eq!(answer.code, response::CONTROLLER_NOT_LEADER);
    assert_eq!(
        answer.ext_fields.get("leaderAddress").map(|v| v.as_str()),
        Some(addrs(&nodes)[leader].to_string().as_str())
    );
    let leader_raw = RemotingClient::connect(addrs(&nodes)[leader], CALL_TIMEOUT)
        .await
        .unwrap();
    let garbage =
        RemotingCommand::new_request(request::CONTROLLER_REGISTER_BROKER, ExtFields::new())
            .with_body(b"{not json".to_vec());
    let answer = leader_raw.invoke(garbage, CALL_TIMEOUT).await.unwrap();
    assert_eq!(answer.code, response::CONTROLLER_INVALID_REQUEST);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_is_replaced_by_the_best_in_sync_member_then_a_new_leader_keeps_electing() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_group(dir.path(), None).await;
    wait_for_leader(&nodes).await;
    let all = addrs(&nodes);
    let client = ControllerClient::new(all.clone());
    three_brokers_in_sync(&client).await;

    // Broker 1 (master) falls silent; 3 reports the longer log, so 3 must win.
    let stop_2 = Arc::new(AtomicBool::new(false));
    let stop_3 = Arc::new(AtomicBool::new(false));
    keep_heartbeating(all.clone(), 2, 100, stop_2.clone());
    keep_heartbeating(all.clone(), 3, 200, stop_3.clone());
    let info = wait_for_master(&client, HEARTBEAT_TIMEOUT + FAILOVER_MARGIN, |i| {
        i.master_broker_id != Some(1)
    })
    .await;
    assert_eq!(info.master_broker_id, Some(3));
    assert_eq!(info.master_epoch, 2, "one election, one epoch");
    assert_eq!(info.sync_state_set, vec![3]);

    // The leader goes away; the new leader (after its grace period) elects again when
    // master 3 falls silent.
    let leader = wait_for_leader(&nodes).await;
    nodes[leader].take().unwrap().shutdown().await;
    let rest: Vec<SocketAddr> = addrs(&nodes);
    let new_leader = wait_for_leader(&nodes).await;
    assert_ne!(new_leader, leader);
    let client = ControllerClient::new(rest);
    // Broker 2 must be back in the set to be eligible (the master asks for it).
    let _: AlterSyncStateSetReply = client
        .call(
            request::CONTROLLER_ALTER_SYNC_STATE_SET,
            &alter_request(3, 2, &[2, 3], info.sync_state_set_epoch),
            CALL_TIMEOUT,
        )
        .await
        .expect("alter after leader change");
    stop_3.store(true, Ordering::Relaxed);
    let info = wait_for_master(&client, HEARTBEAT_TIMEOUT * 2 + FAILOVER_MARGIN, |i| {
        i.master_broker_id == Some(2)
    })
    .await;
    assert_eq!(info.master_epoch, 3);
    let metadata = nodes[new_leader].as_ref().unwrap().metadata();
    let metrics = metadata.metrics.expect("metrics");
    assert!(metrics.elections_clean >= 1, "{metrics:?}");
    assert!(metrics.election_millis_last.is_some(), "{metrics:?}");
    stop_2.store(true, Ordering::Relaxed);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_three_down_nothing_is_elected_and_the_survivor_answers_not_leader() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_group(dir.path(), None).await;
    wait_for_leader(&nodes).await;
    let all = addrs(&nodes);
    let client = ControllerClient::new(all.clone());
    three_brokers_in_sync(&client).await;

    // Stop the leader and one follower; keep the survivor.
    let leader = wait_for_leader(&nodes).await;
    let survivor = (leader + 1) % 3;
    for (i, slot) in nodes.iter_mut().enumerate() {
        if i != survivor {
            slot.take().unwrap().shutdown().await;
        }
    }
    let before = nodes[survivor].as_ref().unwrap().state();
    // Longer than the heartbeat timeout: a leader would have elected by now.
    tokio::time::sleep(HEARTBEAT_TIMEOUT + FAILOVER_MARGIN).await;
    let survivor_node = nodes[survivor].as_ref().unwrap();
    assert!(!survivor_node.is_leader());
    let group = &survivor_node.state().groups["broker-a"];
    assert_eq!(group.master_epoch, before.groups["broker-a"].master_epoch);
    let raw = RemotingClient::connect(all[survivor], CALL_TIMEOUT)
        .await
        .unwrap();
    for code in [request::BROKER_HEARTBEAT, request::CONTROLLER_ELECT_MASTER] {
        let body = if code == request::BROKER_HEARTBEAT {
            serde_json::to_vec(&heartbeat_request(2, 1, 0)).unwrap()
        } else {
            serde_json::to_vec(&ElectMasterRequest {
                cluster_name: "DefaultCluster".into(),
                broker_name: "broker-a".into(),
                broker_id: Some(2),
                renew: None,
            })
            .unwrap()
        };
        let command = RemotingCommand::new_request(code, ExtFields::new()).with_body(body);
        let answer = raw.invoke(command, CALL_TIMEOUT).await.unwrap();
        assert_eq!(
            answer.code,
            response::CONTROLLER_NOT_LEADER,
            "code {code}: {:?}",
            answer.remark
        );
    }
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_node_recovers_groups_epochs_and_sets_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_group_with(dir.path(), None, QUIET_TIMEOUT).await;
    wait_for_leader(&nodes).await;
    let all = addrs(&nodes);
    let client = ControllerClient::new(all.clone());
    three_brokers_in_sync(&client).await;
    let expected = replica_info(&client).await;
    shutdown_all(nodes).await;
    drop(client);

    let nodes = start_group_with(dir.path(), Some(&all), QUIET_TIMEOUT).await;
    wait_for_leader(&nodes).await;
    let client = ControllerClient::new(all.clone());
    let recovered = replica_info(&client).await;
    assert_eq!(recovered, expected);
    // Ids keep counting after a restart.
    let reply = register(&client, 4).await;
    assert_eq!(reply.broker_id, 4);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_group_elects_itself_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let node = Controller::start(config(dir.path(), 0, any))
        .await
        .expect("start");
    let nodes = vec![Some(node)];
    wait_for_leader(&nodes).await;
    let client = ControllerClient::new(addrs(&nodes));
    let reply = register(&client, 1).await;
    assert_eq!(reply.replica_info.master_broker_id, Some(1));
    let metadata = nodes[0].as_ref().unwrap().metadata();
    assert!(metadata.is_leader);
    assert_eq!(metadata.peers.len(), 1);

    // Malformed bodies for every served code are refused with a code, on a connection that
    // stays usable; the two-step id codes and unknown codes are refused as unsupported.
    let raw = RemotingClient::connect(addrs(&nodes)[0], CALL_TIMEOUT)
        .await
        .unwrap();
    let served = [
        request::BROKER_HEARTBEAT,
        request::CONTROLLER_ALTER_SYNC_STATE_SET,
        request::CONTROLLER_ELECT_MASTER,
        request::CONTROLLER_REGISTER_BROKER,
        request::CONTROLLER_GET_REPLICA_INFO,
        request::CONTROLLER_GET_SYNC_STATE_DATA,
        request::CLEAN_BROKER_DATA,
        ferromq_protocol::controller::RAFT_APPEND_ENTRIES,
        ferromq_protocol::controller::RAFT_VOTE,
        ferromq_protocol::controller::RAFT_INSTALL_SNAPSHOT,
    ];
    for body in [&b"{not json"[..], b"", b"[1,2,3]", b"\xff\xfe"] {
        for code in served {
            let command =
                RemotingCommand::new_request(code, ExtFields::new()).with_body(body.to_vec());
            let answer = raw.invoke(command, CALL_TIMEOUT).await.unwrap();
            assert_eq!(
                answer.code,
                response::CONTROLLER_INVALID_REQUEST,
                "code {code} body {body:?}"
            );
        }
    }
    for code in [
        request::CONTROLLER_GET_NEXT_BROKER_ID,
        request::CONTROLLER_APPLY_BROKER_ID,
        12345,
    ] {
        let answer = raw
            .invoke(
                RemotingCommand::new_request(code, ExtFields::new()),
                CALL_TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(
            answer.code,
            response::REQUEST_CODE_NOT_SUPPORTED,
            "code {code}"
        );
        assert!(answer.remark.is_some_and(|r| !r.is_empty()));
    }
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_bootstrapping_at_once_agrees_on_one_leader_and_one_history() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_group(dir.path(), None).await;
    let leader = wait_for_leader(&nodes).await;
    let term = nodes[leader].as_ref().unwrap().metadata().term;
    for node in nodes.iter().flatten() {
        let metadata = node.metadata();
        assert_eq!(metadata.controller_leader_id, Some(leader as u64));
        assert_eq!(metadata.term, term);
        assert_eq!(metadata.peers.len(), 3);
    }
    let client = ControllerClient::new(addrs(&nodes));
    three_brokers_in_sync(&client).await;
    let expected = nodes[leader].as_ref().unwrap().state();
    let deadline = Instant::now() + LEADER_WAIT;
    while nodes.iter().flatten().any(|n| n.state() != expected) {
        assert!(
            Instant::now() < deadline,
            "followers did not apply the same state"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_purged_logs_catches_up_and_restarts_come_back_from_snapshots() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    // No broker heartbeats here: a long heartbeat timeout keeps the failure detector from
    // changing the state while the test compares copies of it.
    let small_snapshots = |id: u64, listen: SocketAddr| ControllerConfig {
        snapshot_logs_max: 5,
        heartbeat_timeout: Duration::from_secs(60),
        ..config(dir.path(), id, listen)
    };
    let start = |listen: Vec<SocketAddr>| {
        let small_snapshots = &small_snapshots;
        async move {
            let mut bound = Vec::new();
            for (id, addr) in listen.iter().enumerate() {
                bound.push(
                    Controller::bind(small_snapshots(id as u64, *addr))
                        .await
                        .unwrap(),
                );
            }
            let peers: Vec<Peer> = bound
                .iter()
                .enumerate()
                .map(|(id, b)| Peer {
                    id: id as u64,
                    addr: b.local_addr(),
                })
                .collect();
            let mut nodes = Vec::new();
            for b in bound {
                nodes.push(Some(b.start_with_peers(peers.clone()).await.unwrap()));
            }
            nodes
        }
    };
    let mut nodes = start(vec![any; 3]).await;
    let all = addrs(&nodes);
    let leader = wait_for_leader(&nodes).await;
    let lagging = (leader + 1) % 3;
    nodes[lagging].take().unwrap().shutdown().await;
    let client = ControllerClient::new(all.clone());
    for broker in 1..=30 {
        register(&client, broker).await;
    }
    let expected = nodes[leader].as_ref().unwrap().state();
    assert_eq!(expected.groups["broker-a"].members.len(), 30);

    // The lagging node comes back at its address and must reach the same state.
    let config = small_snapshots(lagging as u64, all[lagging]);
    let bound = Controller::bind(config).await.unwrap();
    let peers: Vec<Peer> = all
        .iter()
        .enumerate()
        .map(|(id, addr)| Peer {
            id: id as u64,
            addr: *addr,
        })
        .collect();
    nodes[lagging] = Some(bound.start_with_peers(peers).await.unwrap());
    let deadline = Instant::now() + LEADER_WAIT;
    while nodes[lagging].as_ref().unwrap().state() != expected {
        assert!(
            Instant::now() < deadline,
            "the lagging node did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown_all(nodes).await;
    assert!(dir
        .path()
        .join(format!("n{leader}/raft/snapshot.json"))
        .exists());

    let nodes = start(all.clone()).await;
    wait_for_leader(&nodes).await;
    for node in nodes.iter().flatten() {
        let deadline = Instant::now() + LEADER_WAIT;
        while node.state() != expected {
            assert!(Instant::now() < deadline, "a restarted node lost state");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_election_notifies_the_members_role_change() {
    use tokio::io::AsyncReadExt;

    let dir = tempfile::tempdir().unwrap();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let node = Controller::start(config(dir.path(), 0, any))
        .await
        .expect("start");
    let nodes = vec![Some(node)];
    wait_for_leader(&nodes).await;
    let broker = tokio::net::TcpListener::bind(any).await.unwrap();
    let mut request = register_request(1, 0);
    request.broker_address = broker.local_addr().unwrap().to_string();
    let client = ControllerClient::new(addrs(&nodes));
    let reply: RegisterBrokerReply = client
        .call(request::CONTROLLER_REGISTER_BROKER, &request, CALL_TIMEOUT)
        .await
        .expect("register");
    assert_eq!(reply.replica_info.master_epoch, 1);
    // The notice: a one-way NOTIFY_BROKER_ROLE_CHANGED (1008) with the group as JSON.
    let frame = tokio::time::timeout(CALL_TIMEOUT, async {
        let (mut stream, _) = broker.accept().await.unwrap();
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before a whole frame: {bytes:?}");
            bytes.extend_from_slice(&chunk[..n]);
            if bytes.len() >= 4 {
                let length = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
                if bytes.len() >= 4 + length {
                    bytes.truncate(4 + length);
                    return bytes;
                }
            }
        }
    })
    .await
    .expect("a role-change notice within the bound");
    let notice = RemotingCommand::decode(frame.into()).expect("a remoting frame");
    assert_eq!(notice.code, request::NOTIFY_BROKER_ROLE_CHANGED);
    assert!(notice.is_oneway());
    let info: ReplicaInfo = serde_json::from_slice(notice.body.as_deref().unwrap()).unwrap();
    assert_eq!(info, reply.replica_info);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_grants_no_lease_and_applies_no_election() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_group(dir.path(), None).await;
    let leader = wait_for_leader(&nodes).await;
    let all = addrs(&nodes);
    let client = ControllerClient::new(all.clone());
    three_brokers_in_sync(&client).await;

    // Both followers stop: the leader may still believe it leads, but it cannot confirm it
    // with a quorum, so it must not answer a heartbeat (that would grant a lease).
    for (i, slot) in nodes.iter_mut().enumerate() {
        if i != leader {
            slot.take().unwrap().shutdown().await;
        }
    }
    let before = nodes[leader].as_ref().unwrap().state();
    let raw = RemotingClient::connect(all[leader], CALL_TIMEOUT)
        .await
        .unwrap();
    let hb = RemotingCommand::new_request(request::BROKER_HEARTBEAT, ExtFields::new())
        .with_body(serde_json::to_vec(&heartbeat_request(1, 1, 0)).unwrap());
    let answer = raw.invoke(hb, CALL_TIMEOUT).await.unwrap();
    assert_eq!(
        answer.code,
        response::CONTROLLER_NOT_LEADER,
        "{:?}",
        answer.remark
    );
    // Its failure detector finds master 1 silent, but nothing it proposes can apply.
    tokio::time::sleep(HEARTBEAT_TIMEOUT + FAILOVER_MARGIN).await;
    let after = nodes[leader].as_ref().unwrap().state();
    assert_eq!(after, before);
    shutdown_all(nodes).await;
}

/// A one-node group with broker 1 master and in-sync alone, broker 2 registered but out of
/// the set; only broker 2 heartbeats.
async fn lone_master_goes_silent(unclean: bool) -> LoneMaster {
    let dir = tempfile::tempdir().unwrap();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let config = ControllerConfig {
        enable_elect_unclean_master: unclean,
        ..config(dir.path(), 0, any)
    };
    let nodes = vec![Some(Controller::start(config).await.expect("start"))];
    wait_for_leader(&nodes).await;
    let client = ControllerClient::new(addrs(&nodes));
    assert_eq!(
        register(&client, 1).await.replica_info.master_broker_id,
        Some(1)
    );
    register(&client, 2).await;
    let stop = Arc::new(AtomicBool::new(false));
    keep_heartbeating(addrs(&nodes), 2, 500, stop.clone());
    (dir, nodes, client, stop)
}

/// What [`lone_master_goes_silent`] set up (the directory is removed when dropped).
type LoneMaster = (
    tempfile::TempDir,
    Vec<Option<Controller>>,
    ControllerClient,
    Arc<AtomicBool>,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_unclean_election_a_dead_lone_master_leaves_no_master_until_it_returns() {
    let (_dir, nodes, client, stop) = lone_master_goes_silent(false).await;
    let info = wait_for_master(&client, HEARTBEAT_TIMEOUT + FAILOVER_MARGIN, |i| {
        i.master_broker_id.is_none()
    })
    .await;
    assert_eq!(
        info.master_epoch, 2,
        "clearing the master is an epoch of its own"
    );
    assert_eq!(
        info.sync_state_set,
        vec![1],
        "the set is kept for the members' return"
    );
    let metrics = nodes[0].as_ref().unwrap().metadata().metrics.unwrap();
    assert_eq!(metrics.elections_no_master, 1, "{metrics:?}");
    assert!(metrics.elections_no_candidate >= 1, "{metrics:?}");

    // Broker 1 (in the set) returns: it is elected again, cleanly.
    let back = Arc::new(AtomicBool::new(false));
    keep_heartbeating(addrs(&nodes), 1, 100, back.clone());
    let info = wait_for_master(&client, FAILOVER_MARGIN, |i| i.master_broker_id == Some(1)).await;
    assert_eq!(info.master_epoch, 3);
    stop.store(true, Ordering::Relaxed);
    back.store(true, Ordering::Relaxed);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_unclean_election_an_alive_member_outside_the_set_takes_over() {
    let (_dir, nodes, client, stop) = lone_master_goes_silent(true).await;
    let info = wait_for_master(&client, HEARTBEAT_TIMEOUT + FAILOVER_MARGIN, |i| {
        i.master_broker_id != Some(1)
    })
    .await;
    assert_eq!(info.master_broker_id, Some(2));
    assert_eq!(info.master_epoch, 2);
    assert_eq!(info.sync_state_set, vec![2]);
    let metrics = nodes[0].as_ref().unwrap().metadata().metrics.unwrap();
    assert_eq!(metrics.elections_unclean, 1, "{metrics:?}");
    stop.store(true, Ordering::Relaxed);
    shutdown_all(nodes).await;
}
