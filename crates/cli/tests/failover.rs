//! Automatic failover with real processes: `ferromq namesrv`, `ferromq controller` (a Raft
//! group on openraft) and `ferromq broker` in controller mode, on 127.0.0.1 with OS-chosen
//! ports. Each offset pitfall of `reference/offset-pitfalls.md` §3 (R1–R9) has a test named
//! after it that fails if the property breaks; the kill -9, partition and controller-loss
//! scenarios of the failover issue follow. Every wait is bounded; every process is killed on
//! drop. Measured figures are printed (`--nocapture` shows them).

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::remoting::*;
use ferromq_broker::codes::NOT_MASTER;
use ferromq_chaos::proxy::{FaultProxy, ProxyMode};
use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{
    ControllerMetadata, GetReplicaInfoRequest, GetSyncStateDataRequest, ReplicaInfo, SyncStateData,
};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};

const CLUSTER: &str = "FC";
const TOPIC: &str = "FailoverTopic";
const GROUP: &str = "FailoverGroup";
const QUEUES: i32 = 4;
/// Sends the master appends while its slaves are stopped (R2): together far more than the
/// HA stream's unacknowledged window (8 MiB) and the socket buffers hold.
const UNREPLICATED_SENDS: usize = 40;
/// Body bytes of each.
const UNREPLICATED_BODY: usize = 640 * 1024;

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{what} exited ({status}) before listening on {addr}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {addr} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_logged(args: &[String], log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let err = out.try_clone().unwrap();
    Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap()
}

/// A controller group of `ferromq controller` processes, killed on drop.
struct Controllers {
    addrs: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
    configs: Vec<PathBuf>,
    logs: Vec<PathBuf>,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Controllers {
    fn start(dir: &Path, n: usize, unclean: bool) -> Controllers {
        Controllers::start_with(dir, n, unclean, "")
    }

    /// [`Controllers::start`] with `extra` lines in every controller config.
    fn start_with(dir: &Path, n: usize, unclean: bool, extra: &str) -> Controllers {
        let addrs: Vec<SocketAddr> = (0..n).map(|_| free_port()).collect();
        let peers: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}-{a}"))
            .collect();
        let mut controllers = Controllers {
            addrs: addrs.clone(),
            children: Vec::new(),
            configs: Vec::new(),
            logs: Vec::new(),
        };
        for i in 0..n {
            let base = dir.join(format!("controller-n{i}"));
            std::fs::create_dir_all(&base).unwrap();
            let config = base.join("controller.toml");
            std::fs::write(
                &config,
                format!(
                    "controllerDLegerGroup = \"fc\"\ncontrollerDLegerPeers = \"{}\"\n\
                     controllerDLegerSelfId = \"n{i}\"\ncontrollerStorePath = \"{}\"\n\
                     enableElectUncleanMaster = {unclean}\n{extra}",
                    peers.join(";"),
                    base.join("store").display()
                ),
            )
            .unwrap();
            controllers.configs.push(config);
            controllers.logs.push(base.join("controller.log"));
            controllers.children.push(None);
            controllers.restart(i);
        }
        controllers
    }

    fn restart(&mut self, i: usize) {
        assert!(self.children[i].is_none(), "controller n{i} runs");
        let args = vec![
            "controller".to_string(),
            "-c".into(),
            self.configs[i].display().to_string(),
        ];
        let mut child = spawn_logged(&args, &self.logs[i]);
        wait_listening(
            self.addrs[i],
            &mut child,
            &format!("controller n{i}"),
            &self.logs[i],
        );
        self.children[i] = Some(child);
    }

    fn kill(&mut self, i: usize) {
        let mut child = self.children[i].take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn addr_list(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        addrs.join(";")
    }

    fn client(&self) -> ControllerClient {
        ControllerClient::new(self.addrs.clone())
    }

    /// The index of the Raft leader, once one answers as leader.
    async fn leader(&self, secs: u64) -> usize {
        let client = self.client();
        let mut found: Option<usize>;
        eventually!(secs, "a controller leader", {
            let meta: Result<ControllerMetadata, _> = client
                .call(
                    request::CONTROLLER_GET_METADATA_INFO,
                    &serde_json::json!({}),
                    Duration::from_secs(2),
                )
                .await;
            found = meta.ok().and_then(|m| {
                let addr = m.controller_leader_address?;
                self.addrs.iter().position(|a| a.to_string() == addr)
            });
            found.is_some()
        });
        found.unwrap()
    }
}

/// One broker in controller mode, killed on drop.
struct Broker {
    child: Option<Child>,
    name: String,
    addr: SocketAddr,
    config: PathBuf,
    store: PathBuf,
    log: PathBuf,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How a broker is configured.
#[derive(Clone)]
struct BrokerSpec {
    role: &'static str,
    namesrv: String,
    controllers: String,
    extra: Vec<String>,
}

impl Broker {
    fn start(dir: &Path, name: &str, spec: &BrokerSpec) -> Broker {
        let base = dir.join(name);
        std::fs::create_dir_all(&base).unwrap();
        let store = base.join("store");
        let config = base.join("broker.toml");
        let listen = free_port();
        let ha = free_port();
        let mut text = format!(
            "brokerClusterName = \"{CLUSTER}\"\nbrokerName = \"fb\"\nbrokerIP1 = \"127.0.0.1\"\n\
             listenPort = {}\ngrpcListenPort = -1\nhaListenPort = {}\nnamesrvAddr = \"{}\"\n\
             storePathRootDir = \"{}\"\nbrokerRole = \"{}\"\nflushDiskType = \"ASYNC_FLUSH\"\n\
             enableControllerMode = true\ncontrollerAddr = \"{}\"\n\
             haSendHeartbeatInterval = 100\nhaMaxTimeSlaveNotCatchup = 1500\n\
             mappedFileSizeCommitLog = 16777216\n",
            listen.port(),
            ha.port(),
            spec.namesrv,
            store.display(),
            spec.role,
            spec.controllers,
        );
        for line in &spec.extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&config, text).unwrap();
        let mut broker = Broker {
            child: None,
            name: name.into(),
            addr: listen,
            config,
            store,
            log: base.join("broker.log"),
        };
        broker.restart();
        broker
    }

    fn restart(&mut self) {
        assert!(self.child.is_none(), "{} runs", self.name);
        let args = vec![
            "broker".to_string(),
            "-c".into(),
            self.config.display().to_string(),
        ];
        let mut child = spawn_logged(&args, &self.log);
        wait_listening(self.addr, &mut child, &self.name, &self.log);
        self.child = Some(child);
    }

    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Controller queries
// ---------------------------------------------------------------------------------------------

async fn replica_info(controller: &ControllerClient) -> Option<ReplicaInfo> {
    controller
        .call(
            request::CONTROLLER_GET_REPLICA_INFO,
            &GetReplicaInfoRequest {
                broker_name: "fb".into(),
            },
            Duration::from_secs(2),
        )
        .await
        .ok()
}

/// Waits for a master of at least `min_epoch` whose in-sync set has `members` members.
async fn wait_master(
    controller: &ControllerClient,
    min_epoch: u64,
    members: usize,
    secs: u64,
) -> ReplicaInfo {
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(info) = replica_info(controller).await {
            if info.master_broker_id.is_some()
                && info.master_epoch >= min_epoch
                && info.sync_state_set.len() >= members
                && acts_as_master(&info).await
            {
                return info;
            }
            last = Some(info);
        }
        assert!(
            Instant::now() < deadline,
            "no master of epoch >= {min_epoch} with {members} in sync within {secs} s; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the broker the controller names master already serves as master of that epoch:
/// it has taken the role and holds a controller lease, so it accepts writes (a master promoted
/// by a registration's or renewal's reply holds no lease until its next heartbeat is
/// confirmed).
async fn acts_as_master(info: &ReplicaInfo) -> bool {
    let Some(addr) = info
        .master_address
        .as_deref()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        return false;
    };
    master_of_epoch(addr, info.master_epoch).await && lease_held(addr).await
}

/// Waits for a master of epoch `min_epoch` or later to take its role, then for its lease;
/// the group state and how long after the role (first seen) the lease was.
async fn wait_role_then_lease(
    controller: &ControllerClient,
    min_epoch: u64,
    secs: u64,
) -> (ReplicaInfo, Duration) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last = None;
    let (info, addr, role_at) = loop {
        if let Some(info) = replica_info(controller).await {
            let addr = info.master_address.as_deref().and_then(|a| a.parse().ok());
            if let Some(addr) = addr.filter(|_| info.master_epoch >= min_epoch) {
                if master_of_epoch(addr, info.master_epoch).await {
                    break (info, addr, Instant::now());
                }
            }
            last = Some(info);
        }
        assert!(
            Instant::now() < deadline,
            "no master of epoch >= {min_epoch} took its role within {secs} s; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    while !lease_held(addr).await {
        assert!(
            Instant::now() < deadline,
            "the master of epoch {} at {addr} got no lease within {secs} s",
            info.master_epoch
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (info, role_at.elapsed())
}

/// Whether the broker at `addr` has taken the master role of `epoch` (its HA status).
async fn master_of_epoch(addr: SocketAddr, epoch: u64) -> bool {
    let Some(reply) = admin_request(addr, request::GET_BROKER_HA_STATUS).await else {
        return false;
    };
    let status: Option<ferromq_protocol::remoting::body::ha_runtime::HaRuntimeInfo> =
        ferromq_protocol::remoting::body::decode_json(reply.body.as_deref().unwrap_or_default())
            .ok();
    status.is_some_and(|s| s.master && s.master_epoch == Some(epoch as i64))
}

/// Whether the broker at `addr` holds a controller lease now (`leaseRemainingMs` of its
/// runtime table).
async fn lease_held(addr: SocketAddr) -> bool {
    let Some(reply) = admin_request(addr, request::GET_BROKER_RUNTIME_INFO).await else {
        return false;
    };
    let table: Option<ferromq_protocol::remoting::body::misc::KvTable> =
        ferromq_protocol::remoting::body::decode_json(reply.body.as_deref().unwrap_or_default())
            .ok();
    table
        .and_then(|t| t.table.get("leaseRemainingMs")?.parse::<u64>().ok())
        .is_some_and(|ms| ms > 0)
}

/// A request without header or body to `addr`; `None` when it cannot be connected or answered.
async fn admin_request(
    addr: SocketAddr,
    code: i32,
) -> Option<ferromq_protocol::remoting::RemotingCommand> {
    let client = RemotingClient::connect(addr, Duration::from_secs(1))
        .await
        .ok()?;
    client
        .invoke(
            ferromq_protocol::remoting::RemotingCommand::new_request(code, Default::default()),
            Duration::from_secs(2),
        )
        .await
        .ok()
}

/// The broker serving `info`'s master address.
fn master_of<'a>(brokers: &'a mut [Broker], info: &ReplicaInfo) -> &'a mut Broker {
    let addr = info.master_address.clone().expect("a master address");
    brokers
        .iter_mut()
        .find(|b| b.addr.to_string() == addr)
        .unwrap_or_else(|| panic!("no broker at the master address {addr}"))
}

async fn sync_state_data(controller: &ControllerClient) -> SyncStateData {
    controller
        .call(
            request::CONTROLLER_GET_SYNC_STATE_DATA,
            &GetSyncStateDataRequest {
                broker_names: vec!["fb".into()],
            },
            Duration::from_secs(2),
        )
        .await
        .expect("sync state data")
}

// ---------------------------------------------------------------------------------------------
// A cluster
// ---------------------------------------------------------------------------------------------

/// A test's directory: removed on drop, unless `FERROMQ_KEEP_TEST_DIRS` is set (then its path
/// is printed, for reading the nodes' logs after a failure).
struct TestDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl TestDir {
    fn new() -> TestDir {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        if std::env::var_os("FERROMQ_KEEP_TEST_DIRS").is_some() {
            println!("test dir kept: {}", path.display());
            return TestDir {
                dir: None,
                path: dir.keep(),
            };
        }
        TestDir {
            dir: Some(dir),
            path,
        }
    }

    fn path(&self) -> &Path {
        let _ = &self.dir;
        &self.path
    }
}

struct Cluster {
    dir: TestDir,
    _namesrv: Namesrv,
    controllers: Controllers,
    brokers: Vec<Broker>,
    spec: BrokerSpec,
}

impl Cluster {
    /// A name server, `controllers` controllers and `replicas` brokers of one group; the
    /// first broker started becomes master at epoch 1. Returns once every broker is in the
    /// in-sync set.
    async fn start(
        controllers: usize,
        replicas: usize,
        role: &'static str,
        unclean: bool,
    ) -> Cluster {
        Cluster::start_with(controllers, replicas, role, unclean, Vec::new()).await
    }

    /// [`Cluster::start`] with extra `key = value` lines in every broker config.
    async fn start_with(
        controllers: usize,
        replicas: usize,
        role: &'static str,
        unclean: bool,
        extra: Vec<String>,
    ) -> Cluster {
        Cluster::start_full(controllers, replicas, role, unclean, extra, "").await
    }

    /// [`Cluster::start_with`] with `controller_extra` lines in every controller config.
    async fn start_full(
        controllers: usize,
        replicas: usize,
        role: &'static str,
        unclean: bool,
        extra: Vec<String>,
        controller_extra: &str,
    ) -> Cluster {
        let dir = TestDir::new();
        let namesrv = namesrv();
        let ctl = Controllers::start_with(dir.path(), controllers, unclean, controller_extra);
        let spec = BrokerSpec {
            role,
            namesrv: namesrv.addr.clone(),
            controllers: ctl.addr_list(),
            extra,
        };
        let mut cluster = Cluster {
            dir,
            _namesrv: namesrv,
            controllers: ctl,
            brokers: Vec::new(),
            spec,
        };
        let client = cluster.controllers.client();
        for i in 0..replicas {
            cluster.add_broker(&format!("b{i}"));
            if i == 0 {
                let info = wait_master(&client, 1, 1, 30).await;
                assert_eq!(
                    info.master_epoch, 1,
                    "the first broker is master of epoch 1"
                );
            }
        }
        wait_master(&client, 1, replicas, 30).await;
        cluster
    }

    fn add_broker(&mut self, name: &str) {
        let broker = Broker::start(self.dir.path(), name, &self.spec);
        self.brokers.push(broker);
    }

    fn broker(&mut self, name: &str) -> &mut Broker {
        self.brokers.iter_mut().find(|b| b.name == name).unwrap()
    }
}

async fn connect(addr: SocketAddr) -> RemotingClient {
    RemotingClient::connect(addr, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// Commits `offset` for (GROUP, TOPIC, queue) on `addr`; the reply code.
async fn commit_on(addr: SocketAddr, queue: i32, offset: i64) -> i32 {
    let client = connect(addr).await;
    commit(&client, GROUP, TOPIC, queue, offset).await.code
}

/// Every queue's stored offset of GROUP on `addr`.
async fn offsets_on(addr: SocketAddr) -> BTreeMap<i32, Option<i64>> {
    let client = connect(addr).await;
    let mut out = BTreeMap::new();
    for queue in 0..QUEUES {
        out.insert(queue, query_offset(&client, GROUP, TOPIC, queue).await);
    }
    out
}

/// Every queue's max offset on `addr`.
async fn max_offsets_on(addr: SocketAddr) -> BTreeMap<i32, i64> {
    let client = connect(addr).await;
    let mut out = BTreeMap::new();
    for queue in 0..QUEUES {
        out.insert(
            queue,
            max_offset(&client, TOPIC, queue).await.expect("max offset"),
        );
    }
    out
}

/// Every message of every queue on `addr`: (queue, queue offset) → body.
async fn messages_on(addr: SocketAddr) -> BTreeMap<(i32, u64), Vec<u8>> {
    let client = connect(addr).await;
    let mut out = BTreeMap::new();
    for queue in 0..QUEUES {
        let max = max_offset(&client, TOPIC, queue).await.expect("max offset");
        for (offset, body) in pull_range(&client, TOPIC, queue, 0, max).await {
            out.insert((queue, offset), body);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Load that follows the master
// ---------------------------------------------------------------------------------------------

/// What a load run saw: acknowledged and attempted bodies, acknowledged commits.
#[derive(Default)]
struct Ledger {
    attempted: Mutex<BTreeSet<Vec<u8>>>,
    acked: Mutex<BTreeSet<Vec<u8>>>,
    /// Highest acknowledged commit per queue.
    commits: Mutex<BTreeMap<i32, i64>>,
    /// Sends retried after an error (each may duplicate if the first landed).
    send_retries: AtomicU64,
    /// Requests sent per load body (every attempt that reached `invoke`): a body may be
    /// stored at most this often. Bodies sent outside the load count once.
    sends: Mutex<BTreeMap<Vec<u8>, usize>>,
    /// Commits refused with another code than NOT_MASTER (a regression would show here).
    commits_refused: AtomicU64,
    stop: AtomicBool,
}

/// The master's remoting address as the controller names it now.
async fn master_addr(controller: &ControllerClient) -> Option<SocketAddr> {
    replica_info(controller).await?.master_address?.parse().ok()
}

/// Sends numbered bodies to `queue` one at a time through whichever broker the controller
/// names master, retrying a body until acknowledged (or the load stops).
async fn produce(queue: i32, controllers: Vec<SocketAddr>, ledger: Arc<Ledger>) {
    let controller = ControllerClient::new(controllers);
    let mut connection: Option<(SocketAddr, RemotingClient)> = None;
    let mut n = 0u64;
    while !ledger.stop.load(Ordering::Relaxed) {
        let body = format!("q{queue}-{n}").into_bytes();
        ledger.attempted.lock().unwrap().insert(body.clone());
        let mut tries = 0;
        loop {
            if ledger.stop.load(Ordering::Relaxed) {
                return;
            }
            tries += 1;
            if tries > 1 {
                ledger.send_retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if connection.as_ref().is_none_or(|(_, c)| c.is_closed()) {
                let Some(addr) = master_addr(&controller).await else {
                    continue;
                };
                match RemotingClient::connect(addr, Duration::from_secs(1)).await {
                    Ok(client) => connection = Some((addr, client)),
                    Err(_) => continue,
                }
            }
            let (_, client) = connection.as_ref().unwrap();
            *ledger
                .sends
                .lock()
                .unwrap()
                .entry(body.clone())
                .or_default() += 1;
            match client
                .invoke(send_command(TOPIC, queue, &body), Duration::from_secs(3))
                .await
            {
                Ok(reply) if reply.code == response::SUCCESS => {
                    ledger.acked.lock().unwrap().insert(body.clone());
                    break;
                }
                // NOT_MASTER, NOT_DURABLE, a closed connection, a timeout: find the master again.
                _ => connection = None,
            }
        }
        n += 1;
    }
}

/// Commits rising offsets on every queue (one more each round) through the master the
/// controller names; records each acknowledged commit.
async fn commit_rounds(controllers: Vec<SocketAddr>, ledger: Arc<Ledger>) {
    let controller = ControllerClient::new(controllers);
    let mut next: BTreeMap<i32, i64> = (0..QUEUES).map(|q| (q, 1)).collect();
    while !ledger.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let Some(addr) = master_addr(&controller).await else {
            continue;
        };
        let Ok(client) = RemotingClient::connect(addr, Duration::from_secs(1)).await else {
            continue;
        };
        for queue in 0..QUEUES {
            // Never past what the queue holds: a commit past the max is refused.
            let Ok(reply) = client
                .invoke(
                    ferromq_protocol::remoting::RemotingCommand::request_with_header(
                        request::GET_MAX_OFFSET,
                        &ferromq_protocol::remoting::headers::offset::GetMaxOffsetRequestHeader {
                            topic: TOPIC.into(),
                            queue_id: queue,
                            committed: None,
                        },
                    ),
                    Duration::from_secs(2),
                )
                .await
            else {
                break;
            };
            let Ok(max) = reply
                .decode_header::<ferromq_protocol::remoting::headers::offset::GetMaxOffsetResponseHeader>()
                .map(|h| h.offset)
            else {
                break;
            };
            let offset = next[&queue].min(max);
            if offset == 0 {
                continue;
            }
            let Ok(reply) = client
                .invoke(
                    commit_command(GROUP, TOPIC, queue, offset),
                    Duration::from_secs(3),
                )
                .await
            else {
                break;
            };
            match reply.code {
                response::SUCCESS => {
                    let mut commits = ledger.commits.lock().unwrap();
                    let entry = commits.entry(queue).or_insert(0);
                    *entry = (*entry).max(offset);
                    next.insert(queue, offset + 1);
                }
                NOT_MASTER => break,
                _ => {
                    ledger.commits_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Load: one producer per queue and one committer, until [`Load::finish`].
struct Load {
    ledger: Arc<Ledger>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Starts the load; `seeded` are values sent before it (they count as attempted).
    fn start(controllers: &[SocketAddr], seeded: Vec<Vec<u8>>) -> Load {
        let ledger = Arc::new(Ledger::default());
        ledger.attempted.lock().unwrap().extend(seeded);
        let mut tasks = Vec::new();
        for queue in 0..QUEUES {
            tasks.push(tokio::spawn(produce(
                queue,
                controllers.to_vec(),
                ledger.clone(),
            )));
        }
        tasks.push(tokio::spawn(commit_rounds(
            controllers.to_vec(),
            ledger.clone(),
        )));
        Load { ledger, tasks }
    }

    fn acked(&self) -> usize {
        self.ledger.acked.lock().unwrap().len()
    }

    async fn finish(self) -> Arc<Ledger> {
        self.ledger.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("load task stops")
                .unwrap();
        }
        self.ledger
    }
}

/// Asserts nothing acknowledged is missing on `addr`, no (queue, offset) holds a value never
/// sent, and every acknowledged commit is held; returns (messages, duplicates).
async fn assert_nothing_lost(addr: SocketAddr, ledger: &Ledger) -> (usize, usize) {
    let messages = messages_on(addr).await;
    let attempted = ledger.attempted.lock().unwrap().clone();
    let mut seen: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for body in messages.values() {
        assert!(
            attempted.contains(body),
            "unexpected value {:?} on {addr}",
            String::from_utf8_lossy(body)
        );
        *seen.entry(body.clone()).or_default() += 1;
    }
    let acked = ledger.acked.lock().unwrap().clone();
    let lost: Vec<_> = acked.iter().filter(|b| !seen.contains_key(*b)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged sends lost on {addr}, e.g. {:?}",
        lost.len(),
        lost.iter()
            .take(5)
            .map(|b| String::from_utf8_lossy(b))
            .collect::<Vec<_>>()
    );
    // At-least-once: a body stored more than once was sent more than once (a reply lost to
    // the kill, or an error reply such as NOT_DURABLE for a record that was stored), and
    // never stored more often than it was sent.
    let sends = ledger.sends.lock().unwrap().clone();
    for (body, copies) in &seen {
        let sent = sends.get(body).copied().unwrap_or(1);
        assert!(
            *copies <= sent,
            "{:?} stored {copies} times on {addr} but sent {sent} times",
            String::from_utf8_lossy(body)
        );
    }
    let duplicates = seen.values().map(|n| n - 1).sum();
    let offsets = offsets_on(addr).await;
    for (queue, committed) in ledger.commits.lock().unwrap().iter() {
        let stored = offsets[queue].unwrap_or(-1);
        assert!(
            stored >= *committed,
            "queue {queue}: acknowledged commit {committed} but {addr} holds {stored} (a regression)"
        );
    }
    (messages.len(), duplicates)
}

/// Waits until `a` and `b` hold the same log end, then compares their CommitLogs byte for
/// byte; returns the bytes compared.
async fn assert_same_log(a: &Broker, b: &Broker) -> u64 {
    let (ca, cb) = (connect(a.addr).await, connect(b.addr).await);
    let mut end: i64;
    eventually!(30, format!("{} and {} at one log end", a.name, b.name), {
        let ea = ha_status(&ca).await.master_commit_log_max_offset;
        let eb = ha_status(&cb).await.master_commit_log_max_offset;
        end = ea;
        ea == eb && ea > 0
    });
    let compared = common::remoting::assert_same_commitlog(
        &a.store.join("commitlog"),
        &b.store.join("commitlog"),
        end as u64,
    );
    assert!(compared > 0);
    compared
}

// ---------------------------------------------------------------------------------------------
// Helpers of the scenarios
// ---------------------------------------------------------------------------------------------

/// Creates TOPIC on the master and sends `per_queue` messages to each queue; returns the
/// bodies.
async fn seed(master: SocketAddr, per_queue: usize, tag: &str) -> Vec<Vec<u8>> {
    let client = connect(master).await;
    create_topic(&client, TOPIC, QUEUES).await;
    let mut bodies = Vec::new();
    for queue in 0..QUEUES {
        for n in 0..per_queue {
            let body = format!("{tag}-q{queue}-{n}").into_bytes();
            let reply = send(&client, TOPIC, queue, &body).await;
            assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
            bodies.push(body);
        }
    }
    bodies
}

fn stop_signal(broker: &Broker, name: &str) {
    common::signal(broker.child.as_ref().expect("running"), name);
}

/// Kills the current master; returns its index in `brokers` and the time of the kill.
fn kill_master(cluster: &mut Cluster, info: &ReplicaInfo) -> (String, Instant) {
    let master = master_of(&mut cluster.brokers, info);
    let name = master.name.clone();
    master.kill();
    (name, Instant::now())
}

// ---------------------------------------------------------------------------------------------
// R1–R9
// ---------------------------------------------------------------------------------------------

/// R1 (and R8 for SYNC_MASTER): after the master is killed and a slave promoted, every commit
/// the old master acknowledged is on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r1_every_commit_the_old_master_acknowledged_is_on_the_new_master() {
    let mut cluster = Cluster::start(1, 3, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 20, "r1").await;
    let mut acked = BTreeMap::new();
    for queue in 0..QUEUES {
        let offset = 5 + queue as i64 * 4;
        assert_eq!(commit_on(master, queue, offset).await, response::SUCCESS);
        acked.insert(queue, Some(offset));
    }
    let (killed, at) = kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    println!(
        "r1: killed {killed}; epoch {} master {:?} after {:?}",
        new.master_epoch,
        new.master_broker_id,
        at.elapsed()
    );
    assert_eq!(new.master_epoch, 2);
    assert_ne!(new.master_broker_id, info.master_broker_id);
    let new_master: SocketAddr = new.master_address.unwrap().parse().unwrap();
    let mut offsets: BTreeMap<i32, Option<i64>>;
    eventually!(10, "the new master serving offsets", {
        offsets = offsets_on(new_master).await;
        offsets.values().all(Option::is_some)
    });
    assert_eq!(
        offsets, acked,
        "every acknowledged commit is on the new master"
    );
}

/// A master killed and restarted within the controller's heartbeat timeout (the controller
/// never saw it die) does not resume its epoch: it asks for a new term, the controller elects
/// at epoch 2 among the in-sync members, and the group is whole again — every acknowledged
/// message and commit is on the master, writes are acknowledged, all replicas rejoin. Resuming
/// used to expose the restarted master's unreplicated tail to consumers, and to strand
/// replicas that had received a tail it lost (refused "ahead of master" forever), as the
/// deterministic simulation showed (`crates/sim/tests/renewal.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_restarted_before_the_controller_noticed_begins_a_new_term() {
    // A long heartbeat timeout: the restart surely completes before the controller could
    // notice the death, so only the renewal can begin epoch 2. Brokers heartbeat every
    // `HEARTBEAT` (leases last three of them), so a new master that waited for its next
    // heartbeat to get a lease would show it.
    const HEARTBEAT: Duration = Duration::from_secs(2);
    let mut cluster = Cluster::start_full(
        1,
        3,
        "SYNC_MASTER",
        false,
        vec![format!(
            "brokerHeartbeatInterval = {}",
            HEARTBEAT.as_millis()
        )],
        &format!(
            "controllerHeartBeatTimeoutMills = 20000\nbrokerLeaseMillis = {}\n",
            3 * HEARTBEAT.as_millis()
        ),
    )
    .await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    let bodies = seed(master, 10, "renew").await;
    let mut acked = BTreeMap::new();
    for queue in 0..QUEUES {
        let offset = 3 + i64::from(queue);
        assert_eq!(commit_on(master, queue, offset).await, response::SUCCESS);
        acked.insert(queue, Some(offset));
    }
    let restarted_at = Instant::now();
    let old = master_of(&mut cluster.brokers, &info);
    old.kill();
    old.restart();
    let (new, role_to_lease) = wait_role_then_lease(&controller, 2, 30).await;
    println!(
        "renewal: epoch {} master {:?} set {:?}, {:?} after the kill, lease {role_to_lease:?} \
         after the role",
        new.master_epoch,
        new.master_broker_id,
        new.sync_state_set,
        restarted_at.elapsed()
    );
    assert_eq!(new.master_epoch, 2, "a new term, not the resumed epoch 1");
    // A master promoted by the renewal's reply holds no lease and refuses every write until a
    // heartbeat is confirmed: it heartbeats at once, not a `HEARTBEAT` later.
    assert!(
        role_to_lease < HEARTBEAT / 3,
        "the new master got its lease {role_to_lease:?} after taking the role"
    );
    let old = master_of(&mut cluster.brokers, &info);
    let log = old.log_text();
    assert!(
        log.contains("asking the controller for a new term"),
        "the restarted master asked for a new term:\n{log}"
    );
    if new.master_broker_id == info.master_broker_id {
        assert!(
            log.contains("promoted without a controller lease"),
            "the restarted master, elected again, heartbeat at once:\n{log}"
        );
    }
    let controller_log = std::fs::read_to_string(&cluster.controllers.logs[0]).unwrap();
    assert!(
        controller_log.contains("Renewal"),
        "the controller elected for a renewal:\n{controller_log}"
    );
    assert!(
        restarted_at.elapsed() < Duration::from_secs(20),
        "sanity: the restart completed within the heartbeat timeout"
    );
    let new_master: SocketAddr = new.master_address.clone().unwrap().parse().unwrap();
    let mut offsets: BTreeMap<i32, Option<i64>>;
    eventually!(10, "the new term's master serving offsets", {
        offsets = offsets_on(new_master).await;
        offsets.values().all(Option::is_some)
    });
    assert_eq!(offsets, acked, "every acknowledged commit is kept");
    let held: BTreeSet<Vec<u8>> = messages_on(new_master).await.into_values().collect();
    for body in &bodies {
        assert!(
            held.contains(body),
            "{} lost",
            String::from_utf8_lossy(body)
        );
    }
    seed(new_master, 2, "after-renew").await;
    let whole = wait_master(&controller, 2, 3, 30).await;
    assert_eq!(whole.master_epoch, 2);
}

/// R8 under ASYNC_MASTER: every offset the old master served (so replicated: consumers read
/// only below the watermark) is on the new master after a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r8_offsets_the_async_master_served_survive_the_failover() {
    let mut cluster = Cluster::start(1, 2, "ASYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 2, 30).await;
    let master = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 10, "r8").await;
    for queue in 0..QUEUES {
        assert_eq!(
            commit_on(master, queue, 3 + queue as i64).await,
            response::SUCCESS
        );
    }
    let mut served: BTreeMap<i32, Option<i64>>;
    eventually!(10, "the commits served by the master", {
        served = offsets_on(master).await;
        served.values().all(Option::is_some)
    });
    kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    let new_master: SocketAddr = new.master_address.unwrap().parse().unwrap();
    let mut offsets: BTreeMap<i32, Option<i64>>;
    eventually!(10, "the new master serving offsets", {
        offsets = offsets_on(new_master).await;
        offsets.values().all(Option::is_some)
    });
    for (queue, before) in &served {
        assert!(
            offsets[queue] >= *before,
            "queue {queue}: the old master served {before:?}, the new one {:?}",
            offsets[queue]
        );
    }
}

/// R2, R5 and R9: the master appends far more than its stalled slaves can receive, is
/// killed, and a slave is promoted and writes new messages (at queue offsets the old
/// master's unreplicated records had) and commits. The old master returns: it truncates its
/// divergent suffix (killed right after the cut and restarted, the cut tail does not come
/// back), then holds exactly the new master's messages at every (queue, offset), and serves
/// exactly the commits the new master acknowledged — never an older offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r2_r5_r9_a_returning_master_truncates_for_good_and_never_serves_older_offsets() {
    let mut cluster = Cluster::start(1, 3, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master_addr: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master_addr, 5, "before").await;
    for queue in 0..QUEUES {
        assert_eq!(commit_on(master_addr, queue, 2).await, response::SUCCESS);
    }
    let old_name = master_of(&mut cluster.brokers, &info).name.clone();
    let slaves: Vec<String> = cluster
        .brokers
        .iter()
        .filter(|b| b.name != old_name)
        .map(|b| b.name.clone())
        .collect();
    let client = connect(master_addr).await;
    let start = ha_status(&client).await.master_commit_log_max_offset;
    // Stall both slaves, then append far more than the HA window and socket buffers hold:
    // the master's tail beyond what reaches the slaves exists on the master only.
    for name in &slaves {
        stop_signal(cluster.broker(name), "STOP");
    }
    let mut pending = Vec::new();
    for i in 0..UNREPLICATED_SENDS {
        let mut body = format!("cut-{i}-").into_bytes();
        body.resize(UNREPLICATED_BODY, b'c');
        let command = send_command(TOPIC, i as i32 % QUEUES, &body);
        let c = connect(master_addr).await;
        pending.push(tokio::spawn(async move {
            c.invoke(command, Duration::from_secs(20)).await
        }));
    }
    let c = connect(master_addr).await;
    let commit_cut = commit_command(GROUP, TOPIC, 0, 6);
    pending.push(tokio::spawn(async move {
        c.invoke(commit_cut, Duration::from_secs(20)).await
    }));
    let wanted = start + (UNREPLICATED_SENDS * UNREPLICATED_BODY) as i64 * 9 / 10;
    eventually!(20, "the unreplicated writes appended on the master", {
        ha_status(&client).await.master_commit_log_max_offset >= wanted
    });
    cluster.broker(&old_name).kill();
    for name in &slaves {
        stop_signal(cluster.broker(name), "CONT");
    }
    for task in pending {
        let outcome = task.await.unwrap();
        assert!(
            outcome
                .as_ref()
                .map_or(true, |r| r.code != response::SUCCESS),
            "a write no slave held was acknowledged: {outcome:?}"
        );
    }
    let new = wait_master(&controller, 2, 1, 30).await;
    let new_addr: SocketAddr = new.master_address.as_ref().unwrap().parse().unwrap();
    // The new master writes at queue offsets some cut records had (R5) and commits.
    let new_client = connect(new_addr).await;
    let mut acked_commits = BTreeMap::new();
    for queue in 0..QUEUES {
        let body = format!("after-q{queue}").into_bytes();
        let reply = send(&new_client, TOPIC, queue, &body).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
        let max = max_offset(&new_client, TOPIC, queue).await.unwrap();
        let reply = commit(&new_client, GROUP, TOPIC, queue, max).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
        acked_commits.insert(queue, Some(max));
    }
    // The old master returns, truncates, and is killed right after the cut (R9).
    cluster.broker(&old_name).restart();
    let old = cluster.broker(&old_name);
    eventually!(30, "the old master truncating its divergent suffix", {
        old.log_text().contains("CommitLog truncated")
    });
    old.kill();
    old.restart();
    let old_addr = old.addr;
    // Rejoined as a slave of the new epoch: the same log, messages and offsets.
    wait_master(&controller, 2, 3, 60).await;
    let new_broker = cluster.brokers.iter().find(|b| b.addr == new_addr).unwrap();
    let old_broker = cluster.brokers.iter().find(|b| b.name == old_name).unwrap();
    let compared = assert_same_log(new_broker, old_broker).await;
    let on_new = messages_on(new_addr).await;
    let on_old = messages_on(old_addr).await;
    assert_eq!(
        on_old.len(),
        on_new.len(),
        "the returning master holds another set of (queue, offset)s"
    );
    for (at, body) in &on_new {
        assert_eq!(
            on_old.get(at),
            Some(body),
            "{at:?} holds another message on the returning master (R5)"
        );
    }
    // Offsets are log records: the equal logs above carry the acknowledged commits. As a
    // slave the returning master never answers for them (a route may still name it for a
    // moment, and its view trails its successor's): it refuses with NOT_MASTER.
    let client = connect(old_addr).await;
    for queue in 0..QUEUES {
        let code = query_offset_code(&client, GROUP, TOPIC, queue).await;
        assert_eq!(
            code, NOT_MASTER,
            "queue {queue}: the returning master answered"
        );
    }
    assert_eq!(offsets_on(new_addr).await, acked_commits);
    // Its own view (a replica read) holds them too.
    let mut old_offsets: BTreeMap<i32, Option<i64>>;
    eventually!(10, "the returning master's offsets", {
        old_offsets = offsets_on(old_addr).await;
        old_offsets == acked_commits
    });
    println!(
        "r2: old master cut from >= {wanted}; {compared} log bytes equal after the rejoin; {} messages",
        on_new.len()
    );
}

/// Found by `ferromq chaos`: a reset taken by a master elected moments earlier fenced nobody
/// (no consumer had heartbeated to it yet), and a consumer went on committing from its old
/// position, undoing the reset. A new master refuses resets for
/// `resetWaitAfterPromotionMillis` (SYSTEM_BUSY, a remark naming the key), then takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_master_refuses_resets_until_it_can_know_the_online_consumers() {
    let extra = vec!["resetWaitAfterPromotionMillis = 8000".to_string()];
    let mut cluster = Cluster::start_with(1, 2, "SYNC_MASTER", false, extra).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 2, 30).await;
    let master = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 3, "reset").await;
    assert_eq!(commit_on(master, 0, 3).await, response::SUCCESS);
    let namesrv = cluster._namesrv.addr.clone();
    let reset = move || {
        common::admin(&[
            "resetOffsetByTime",
            "-n",
            &namesrv,
            "-g",
            GROUP,
            "-t",
            TOPIC,
            "-s",
            "0",
        ])
    };
    kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    let promoted = Instant::now();
    let new_addr: SocketAddr = new.master_address.unwrap().parse().unwrap();
    // Wait for the route to name the new master, so the reset reaches it.
    eventually!(10, "the route naming the new master", {
        let route = common::admin(&["topicRoute", "-n", &cluster._namesrv.addr, "-t", TOPIC]);
        String::from_utf8_lossy(&route.stdout).contains(&new_addr.to_string())
    });
    let refused = reset.clone()();
    assert!(
        promoted.elapsed() < Duration::from_secs(7),
        "the first reset came too late to test the refusal"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a reset right after promotion was taken"
    );
    assert!(
        stderr.contains("resetWaitAfterPromotionMillis"),
        "the refusal names the key: {stderr}"
    );
    eventually!(20, "the reset taken once the wait is over", {
        reset.clone()().status.success()
    });
    assert!(promoted.elapsed() >= Duration::from_secs(8));
    assert_eq!(offsets_on(new_addr).await[&0], Some(0));
}

/// R3: a commit sent to a slave is refused with NOT_MASTER, before and after a failover
/// (the deposed master, back as a slave, refuses too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r3_a_commit_sent_to_a_slave_is_refused_not_master() {
    let mut cluster = Cluster::start(1, 2, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 2, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 3, "r3").await;
    let slave = cluster
        .brokers
        .iter()
        .find(|b| b.addr != master)
        .unwrap()
        .addr;
    assert_eq!(commit_on(slave, 0, 1).await, NOT_MASTER);
    let (old, _) = kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    assert_eq!(new.master_address.unwrap(), slave.to_string());
    cluster.broker(&old).restart();
    wait_master(&controller, 2, 2, 60).await;
    let old_addr = cluster.broker(&old).addr;
    assert_eq!(commit_on(old_addr, 0, 1).await, NOT_MASTER);
    assert_eq!(commit_on(slave, 0, 2).await, response::SUCCESS);
    assert_eq!(offsets_on(slave).await[&0], Some(2));
}

/// R4: with enableElectUncleanMaster, a replica outside the in-sync set becomes master; every
/// committed offset it serves is within its queues, its offset view equals a replay of its
/// log (the same after a kill -9 and restart), and the returning old master truncates to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r4_an_unclean_election_keeps_offsets_within_the_new_masters_queues() {
    let mut cluster = Cluster::start(1, 2, "ASYNC_MASTER", true).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 2, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 5, "in-sync").await;
    for queue in 0..QUEUES {
        assert_eq!(commit_on(master, queue, 3).await, response::SUCCESS);
    }
    let master_name = master_of(&mut cluster.brokers, &info).name.clone();
    let slave_name = cluster
        .brokers
        .iter()
        .find(|b| b.name != master_name)
        .unwrap()
        .name
        .clone();
    let client = connect(master).await;
    eventually!(10, "the slave holding the commits", {
        offsets_on(master).await.values().all(|o| *o == Some(3))
    });
    cluster.broker(&slave_name).kill();
    // Writes and commits the slave never gets; the in-sync set shrinks to the master.
    for queue in 0..QUEUES {
        for n in 0..5 {
            let reply = send(
                &client,
                TOPIC,
                queue,
                format!("lost-{queue}-{n}").as_bytes(),
            )
            .await;
            assert_eq!(reply.code, response::SUCCESS);
        }
        assert_eq!(commit_on(master, queue, 9).await, response::SUCCESS);
    }
    eventually!(20, "the in-sync set shrinking to the master", {
        replica_info(&controller)
            .await
            .is_some_and(|i| i.sync_state_set.len() == 1)
    });
    cluster.broker(&master_name).kill();
    cluster.broker(&slave_name).restart();
    let new = wait_master(&controller, 2, 1, 30).await;
    let new_addr: SocketAddr = new.master_address.as_ref().unwrap().parse().unwrap();
    assert_eq!(
        new_addr,
        cluster.broker(&slave_name).addr,
        "the unclean replica"
    );
    let mut offsets: BTreeMap<i32, Option<i64>>;
    eventually!(10, "offsets on the new master", {
        offsets = offsets_on(new_addr).await;
        offsets.values().all(Option::is_some)
    });
    let maxes = max_offsets_on(new_addr).await;
    for queue in 0..QUEUES {
        let committed = offsets[&queue].unwrap();
        assert!(
            committed <= maxes[&queue],
            "queue {queue}: committed {committed} past the new master's max {}",
            maxes[&queue]
        );
        assert_eq!(committed, 3, "the commits the unclean replica held");
    }
    // The offset view equals a replay of the surviving log.
    cluster.broker(&slave_name).kill();
    cluster.broker(&slave_name).restart();
    let again = wait_master(&controller, new.master_epoch, 1, 30).await;
    let again_addr: SocketAddr = again.master_address.unwrap().parse().unwrap();
    let mut replayed: BTreeMap<i32, Option<i64>>;
    eventually!(10, "offsets after the replay", {
        replayed = offsets_on(again_addr).await;
        replayed.values().all(Option::is_some)
    });
    assert_eq!(replayed, offsets, "offset view == replay of the log");
    // The old master returns and truncates its writes the new master never had.
    cluster.broker(&master_name).restart();
    wait_master(&controller, again.master_epoch, 2, 60).await;
    let old_addr = cluster.broker(&master_name).addr;
    let mut old_offsets: BTreeMap<i32, Option<i64>>;
    eventually!(30, "the old master holding the new master's offsets", {
        old_offsets = offsets_on(old_addr).await;
        old_offsets == offsets
    });
    assert!(!messages_on(old_addr)
        .await
        .values()
        .any(|v| v.starts_with(b"lost-")));
}

/// R6: a master cut off from every controller stops acknowledging writes and stops exposing
/// new ones within its lease; a new master is elected; after the partition heals nothing
/// acknowledged is missing and the old master follows the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r6_a_master_cut_off_from_the_controllers_stops_within_its_lease() {
    let dir = TestDir::new();
    let ns = namesrv();
    let controllers = Controllers::start(dir.path(), 1, false);
    let proxy = FaultProxy::start(controllers.addrs[0]).await.unwrap();
    let spec = BrokerSpec {
        role: "SYNC_MASTER",
        namesrv: ns.addr.clone(),
        controllers: controllers.addr_list(),
        extra: Vec::new(),
    };
    let isolated_spec = BrokerSpec {
        controllers: proxy.local_addr().to_string(),
        ..spec.clone()
    };
    let controller = controllers.client();
    let mut b0 = Broker::start(dir.path(), "b0", &isolated_spec);
    let info = wait_master(&controller, 1, 1, 30).await;
    assert_eq!(
        info.master_address.as_deref(),
        Some(b0.addr.to_string().as_str())
    );
    let _b1 = Broker::start(dir.path(), "b1", &spec);
    let _b2 = Broker::start(dir.path(), "b2", &spec);
    wait_master(&controller, 1, 3, 30).await;
    let seeded = seed(b0.addr, 1, "r6").await;
    let load = Load::start(&controllers.addrs, seeded);
    eventually!(10, "load on the master", load.acked() > 50);
    let client = connect(b0.addr).await;
    proxy.set_mode(ProxyMode::Drop);
    let cut = Instant::now();
    // Within the lease (600 ms) plus a heartbeat, the isolated master refuses writes.
    let mut refused_after: Option<Duration> = None;
    let mut probes = 0;
    eventually!(5, "the isolated master refusing writes", {
        // Probes acknowledged before the lease ran out are acknowledged writes like any.
        probes += 1;
        let probe = format!("probe-{probes}").into_bytes();
        load.ledger.attempted.lock().unwrap().insert(probe.clone());
        let reply = client
            .invoke(send_command(TOPIC, 0, &probe), Duration::from_secs(5))
            .await
            .unwrap();
        if reply.code == response::SUCCESS {
            load.ledger.acked.lock().unwrap().insert(probe);
        }
        if reply.code == NOT_MASTER {
            refused_after = Some(cut.elapsed());
            // It held a lease before the cut: the remark says how long ago one was confirmed.
            assert!(
                remark(&reply).contains("lease") && remark(&reply).contains(" ms)"),
                "{}",
                remark(&reply)
            );
        }
        reply.code == NOT_MASTER
    });
    let refused_after = refused_after.unwrap();
    let exposed = max_offsets_on(b0.addr).await;
    let new = wait_master(&controller, 2, 1, 30).await;
    let elected_after = cut.elapsed();
    assert_ne!(
        new.master_address.as_deref(),
        Some(b0.addr.to_string().as_str())
    );
    // Nothing new becomes visible on the isolated master.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        max_offsets_on(b0.addr).await,
        exposed,
        "the isolated master exposed more"
    );
    println!("r6: refusing after {refused_after:?}, new master after {elected_after:?}");
    assert!(
        refused_after < elected_after,
        "the old master must stop before a new one starts"
    );
    let before_heal = load.acked();
    eventually!(
        20,
        "load continuing on the new master",
        load.acked() > before_heal + 50
    );
    proxy.set_mode(ProxyMode::Pass);
    let ledger = load.finish().await;
    let new_addr: SocketAddr = new.master_address.unwrap().parse().unwrap();
    let (messages, duplicates) = assert_nothing_lost(new_addr, &ledger).await;
    println!("r6: {messages} messages, {duplicates} duplicates");
    // The old master follows the new epoch and holds the same log.
    wait_master(&controller, 2, 3, 60).await;
    let mut b_new = if _b1.addr == new_addr { _b1 } else { _b2 };
    assert_same_log(&b_new, &b0).await;
    b_new.kill();
    b0.kill();
    drop(proxy);
}

/// R7: a slave that lags never corrects a consumer backwards: a pull past its end gets
/// PULL_NOT_FOUND at the requested offset, not OFFSET_MOVED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r7_a_lagging_slave_never_moves_a_consumer_backwards() {
    let mut cluster = Cluster::start(1, 2, "ASYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 2, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 3, "r7").await;
    let slave_name = cluster
        .brokers
        .iter()
        .find(|b| b.addr != master)
        .unwrap()
        .name
        .clone();
    let slave_addr = cluster.broker(&slave_name).addr;
    let slave = connect(slave_addr).await;
    eventually!(10, "the slave holding the seed", {
        max_offset(&slave, TOPIC, 0).await == Some(3)
    });
    stop_signal(cluster.broker(&slave_name), "STOP");
    let client = connect(master).await;
    for n in 0..5 {
        send(&client, TOPIC, 0, format!("ahead-{n}").as_bytes()).await;
    }
    stop_signal(cluster.broker(&slave_name), "CONT");
    let reply = pull(&slave, TOPIC, 0, 8, 4, None).await;
    assert_ne!(
        reply.code,
        response::PULL_OFFSET_MOVED,
        "a lagging slave corrected a consumer: {}",
        remark(&reply)
    );
    assert!(
        reply.code == response::PULL_NOT_FOUND || reply.code == response::SUCCESS,
        "code {} {}",
        reply.code,
        remark(&reply)
    );
}

// ---------------------------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------------------------

/// kill -9 of the SYNC_MASTER (two slaves, three controllers) under produce and commit load:
/// a new master accepts writes, nothing acknowledged is lost, no acknowledged commit
/// regresses, no body is stored more often than it was sent (one send in flight per producer;
/// a duplicate is a retried send whose earlier attempt was stored: its reply lost to the
/// kill, or an error reply for a stored record, such as NOT_DURABLE while the new master's
/// remaining slave is not yet in sync), and the
/// old master rejoins as a slave holding the new master's log, whose offset view equals a
/// replay of that log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_of_the_master_under_load_loses_nothing_and_the_old_master_rejoins() {
    let mut cluster = Cluster::start(3, 3, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master = info.master_address.as_ref().unwrap().parse().unwrap();
    let seeded = seed(master, 1, "seed").await;
    let load = Load::start(&cluster.controllers.addrs, seeded);
    eventually!(20, "load flowing", load.acked() > 200);
    let (old, killed_at) = kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    let elected = killed_at.elapsed();
    let at_kill = load.acked();
    eventually!(
        30,
        "writes acknowledged by the new master",
        load.acked() > at_kill + 200
    );
    let ledger = load.finish().await;
    let new_addr: SocketAddr = new.master_address.unwrap().parse().unwrap();
    let (messages, duplicates) = assert_nothing_lost(new_addr, &ledger).await;
    println!(
        "kill9: elected after {elected:?}; {messages} messages, {} acked, {duplicates} duplicates, {} retries, {} commits refused",
        ledger.acked.lock().unwrap().len(),
        ledger.send_retries.load(Ordering::Relaxed),
        ledger.commits_refused.load(Ordering::Relaxed)
    );
    // Each duplicate is a retried send (checked body by body in `assert_nothing_lost`).
    let retries = ledger.send_retries.load(Ordering::Relaxed);
    assert!(
        duplicates as u64 <= retries,
        "{duplicates} duplicates but only {retries} retried sends"
    );
    assert_eq!(ledger.commits_refused.load(Ordering::Relaxed), 0);
    // The old master rejoins as a slave.
    cluster.broker(&old).restart();
    wait_master(&controller, 2, 3, 60).await;
    let new_name = cluster
        .brokers
        .iter()
        .find(|b| b.addr == new_addr)
        .unwrap()
        .name
        .clone();
    let compared = assert_same_log(
        cluster.brokers.iter().find(|b| b.name == new_name).unwrap(),
        cluster.brokers.iter().find(|b| b.name == old).unwrap(),
    )
    .await;
    let old_addr = cluster.broker(&old).addr;
    let view = offsets_on(old_addr).await;
    assert_eq!(
        view,
        offsets_on(new_addr).await,
        "the rejoined master's offsets"
    );
    let data = sync_state_data(&controller).await;
    let group = &data.groups[0];
    assert_eq!(group.members.len(), 3, "{data:?}");
    assert!(group.members.iter().all(|m| m.alive), "{data:?}");
    assert_eq!(group.replica_info.sync_state_set.len(), 3, "{data:?}");
    // Its offset view equals a replay of its log.
    cluster.broker(&old).kill();
    cluster.broker(&old).restart();
    let mut replayed: BTreeMap<i32, Option<i64>>;
    eventually!(30, "the old master's offsets after a replay", {
        replayed = offsets_on(old_addr).await;
        replayed == view
    });
    println!("kill9: {compared} log bytes equal after the rejoin");
}

/// The controller group: kill -9 of the controller leader together with the broker master
/// (an election during a leader change) still elects; with one of three controllers left no
/// election happens and brokers keep their roles; a second controller back restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_group_elects_through_a_leader_kill_and_not_without_a_quorum() {
    let mut cluster = Cluster::start(3, 3, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let leader = cluster.controllers.leader(10).await;
    cluster.controllers.kill(leader);
    let (first_killed, at) = kill_master(&mut cluster, &info);
    let first = wait_master(&controller, 2, 1, 30).await;
    println!(
        "controllers: elected through a leader kill after {:?}",
        at.elapsed()
    );
    assert_ne!(first.master_broker_id, info.master_broker_id);
    // Two of three controllers left: once the third broker is back in the in-sync set, a
    // second kill is still elected over.
    let new = wait_master(&controller, 2, 2, 30).await;
    let (second_killed, _) = kill_master(&mut cluster, &new);
    let newer = wait_master(&controller, 3, 1, 30).await;
    assert_ne!(newer.master_broker_id, new.master_broker_id);
    // One controller left: no quorum, no election; the last broker keeps its role.
    let leader = cluster.controllers.leader(10).await;
    cluster.controllers.kill(leader);
    let last = cluster
        .brokers
        .iter()
        .find(|b| b.child.is_some())
        .unwrap()
        .addr;
    cluster.broker(&first_killed).restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        replica_info(&controller).await.is_none(),
        "one controller of three answered as leader"
    );
    let client = connect(last).await;
    let role = ha_status(&client).await;
    println!("controllers: without quorum, {last} reports {role:?}");
    // The survivor (master of epoch 3) kept its role but, without a lease, refuses writes.
    let reply = send(&client, TOPIC, 0, b"no-quorum").await;
    assert_eq!(reply.code, NOT_MASTER, "{}", remark(&reply));
    // A controller back: quorum again, the group continues.
    let down: Vec<usize> = (0..3)
        .filter(|i| cluster.controllers.children[*i].is_none())
        .collect();
    cluster.controllers.restart(down[0]);
    let back = wait_master(&controller, 3, 1, 30).await;
    assert!(back.master_epoch >= 3);
    drop(second_killed);
}

/// `ferromq cluster` starts a name server, controllers and a broker group as child
/// processes, prints every node and a ready line; a kill -9 of the master it names is failed
/// over; SIGTERM stops every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ferromq_cluster_starts_every_node_fails_over_and_stops_them_all() {
    let dir = TestDir::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args([
            "cluster",
            "--controllers",
            "1",
            "--replicas",
            "2",
            "--namesrv-port",
            "0",
            "--dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
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
    let mut nodes = Vec::new();
    let ready = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a ready line within 60 s");
        if let Some(json) = line.strip_prefix("ferromq cluster: ready ") {
            break serde_json::from_str::<serde_json::Value>(json).unwrap();
        }
        nodes.push(line);
    };
    assert_eq!(
        nodes.len(),
        4,
        "namesrv, a controller and two brokers: {nodes:?}"
    );
    let pids: Vec<(String, u32)> = ready["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["addr"].as_str().unwrap().to_string(),
                n["pid"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    let controllers: Vec<SocketAddr> = ready["controllers"]
        .as_str()
        .unwrap()
        .split(';')
        .map(|a| a.parse().unwrap())
        .collect();
    let controller = ControllerClient::new(controllers);
    let info = wait_master_of(&controller, "broker-0", 1, 2).await;
    let master = info.master_address.clone().unwrap();
    let pid = pids.iter().find(|(a, _)| *a == master).unwrap().1;
    assert!(Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let new = wait_master_of(&controller, "broker-0", 2, 1).await;
    assert_ne!(new.master_address.unwrap(), master);
    common::signal(&child, "TERM");
    let status = common::wait_exit(&mut child);
    assert!(status.success(), "ferromq cluster exited with {status}");
    for (addr, pid) in pids {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(
            !alive,
            "node {addr} (pid {pid}) still runs after the cluster stopped"
        );
    }
}

/// `wait_master` for a group of another name.
async fn wait_master_of(
    controller: &ControllerClient,
    broker_name: &str,
    min_epoch: u64,
    members: usize,
) -> ReplicaInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info: Option<ReplicaInfo> = controller
            .call(
                request::CONTROLLER_GET_REPLICA_INFO,
                &GetReplicaInfoRequest {
                    broker_name: broker_name.into(),
                },
                Duration::from_secs(2),
            )
            .await
            .ok();
        if let Some(info) = info {
            if info.master_epoch >= min_epoch
                && info.sync_state_set.len() >= members
                && acts_as_master(&info).await
            {
                return info;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no master of {broker_name} at epoch {min_epoch}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Item 5 end to end: a Rust producer and a lite-pull consumer that commits keep working
/// across a controller failover: the producer's sends land on the new master within its
/// retry budget, the consumer resumes from the committed offsets the new master holds, and
/// every acknowledged message is delivered (duplicates only from the in-flight window).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rust_client_follows_a_controller_failover() {
    use ferromq_client::{
        LitePullConsumer, LitePullConsumerConfig, Message, Producer, ProducerConfig, StartPosition,
    };
    let mut cluster = Cluster::start(1, 3, "SYNC_MASTER", false).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 1, "seed").await;
    let namesrv: SocketAddr = cluster._namesrv.addr.parse().unwrap();
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![namesrv],
        group: "rust-failover".into(),
        ..ProducerConfig::default()
    })
    .unwrap();
    let consumer = LitePullConsumer::start(LitePullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: "rust-failover-consumer".into(),
        start_position: StartPosition::First,
        ..LitePullConsumerConfig::default()
    })
    .unwrap();
    consumer.subscribe(TOPIC, "*").await.unwrap();
    let mut acked = BTreeSet::new();
    let mut failed = 0;
    let mut delivered: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    let mut last_offsets: BTreeMap<i32, u64> = BTreeMap::new();
    let mut killed = None;
    let started = Instant::now();
    for n in 0..400u32 {
        if n == 150 {
            killed = Some(kill_master(&mut cluster, &info));
        }
        let body = format!("rust-{n}").into_bytes();
        match producer.send(Message::new(TOPIC, body.clone())).await {
            Ok(_) => {
                acked.insert(body);
            }
            Err(_) => failed += 1,
        }
        if n % 10 == 0 {
            for message in consumer.poll(Duration::from_millis(50)).await.unwrap() {
                let queue = message.queue_id;
                if let Some(last) = last_offsets.get(&queue) {
                    assert!(
                        message.queue_offset <= last + 1,
                        "queue {queue}: polled {} after {last} (a skip)",
                        message.queue_offset
                    );
                }
                last_offsets.insert(queue, message.queue_offset);
                *delivered.entry(message.body.to_vec()).or_default() += 1;
            }
            let _ = consumer.commit().await;
        }
    }
    let (victim, at) = killed.unwrap();
    let new = wait_master(&controller, 2, 1, 30).await;
    println!(
        "rust client: {} acked, {failed} failed sends across the kill of {victim} ({:?} ago, run {:?})",
        acked.len(),
        at.elapsed(),
        started.elapsed()
    );
    assert!(
        failed <= 2,
        "{failed} sends failed: the producer did not follow the new master within its budget"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !acked.iter().all(|b| delivered.contains_key(b)) {
        assert!(
            Instant::now() < deadline,
            "acknowledged messages never delivered after the failover: {}",
            acked.iter().filter(|b| !delivered.contains_key(*b)).count()
        );
        for message in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            *delivered.entry(message.body.to_vec()).or_default() += 1;
        }
    }
    let report = consumer.commit().await.expect("a commit on the new master");
    assert!(
        report.failed.is_empty(),
        "commits failed: {:?}",
        report.failed
    );
    let duplicates: usize = delivered.values().map(|n| n - 1).sum();
    println!("rust client: {duplicates} duplicates");
    let new_addr: SocketAddr = new.master_address.unwrap().parse().unwrap();
    let stored = offsets_on_group(new_addr, "rust-failover-consumer").await;
    assert!(stored.values().any(|o| o.unwrap_or(0) > 0), "{stored:?}");
    producer.shutdown();
    let _ = consumer.shutdown().await;
}

/// Every queue's stored offset of `group` on `addr`.
async fn offsets_on_group(addr: SocketAddr, group: &str) -> BTreeMap<i32, Option<i64>> {
    let client = connect(addr).await;
    let mut out = BTreeMap::new();
    for queue in 0..QUEUES {
        out.insert(queue, query_offset(&client, group, TOPIC, queue).await);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Transactions through a failover
// ---------------------------------------------------------------------------------------------

/// Halves of producer group `TX_GROUP` the transaction failover test decides.
const TX_GROUP: &str = "FailoverTxProducer";

/// Bodies of queue 0 of TOPIC on `addr` from `from` on.
async fn bodies_from(addr: SocketAddr, from: i64) -> Vec<String> {
    let client = connect(addr).await;
    let reply = pull(&client, TOPIC, 0, from, 32, None).await;
    records(&reply)
        .into_iter()
        .map(|(_, body)| String::from_utf8(body).unwrap())
        .collect()
}

/// Transactions through a real controller cluster (3 controllers, 3 SYNC_MASTER replicas):
/// a commit and a rollback the old master acknowledged hold on the new master, the half
/// left pending is checked back by the new master (and only it), its commit is delivered
/// once, and a repeated or contradicting END for a decided half is answered from the
/// replicated decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_decisions_and_pending_halves_fail_over_to_the_new_master() {
    let extra = vec![
        "transactionTimeOut = 300".to_string(),
        "transactionCheckInterval = 200".to_string(),
        "transactionCheckMax = 100".to_string(),
    ];
    let mut cluster = Cluster::start_with(3, 3, "SYNC_MASTER", false, extra).await;
    let controller = cluster.controllers.client();
    let info = wait_master(&controller, 1, 3, 30).await;
    let master: SocketAddr = info.master_address.as_ref().unwrap().parse().unwrap();
    seed(master, 1, "tx").await;
    let from = 1;
    let client = connect(master).await;
    let committed = send_half(&client, TX_GROUP, TOPIC, 0, "tx-committed").await;
    let rolled_back = send_half(&client, TX_GROUP, TOPIC, 0, "tx-rolled-back").await;
    let pending = send_half(&client, TX_GROUP, TOPIC, 0, "tx-pending").await;
    for (half, kind) in [(committed, 8), (rolled_back, 12)] {
        let reply = invoke(&client, end_transaction(TX_GROUP, half, kind, false)).await;
        assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    }
    assert_eq!(bodies_from(master, from).await, vec!["tx-committed"]);
    drop(client);

    let (killed, at) = kill_master(&mut cluster, &info);
    let new = wait_master(&controller, 2, 1, 30).await;
    println!(
        "transactions: killed {killed}; epoch {} after {:?}",
        new.master_epoch,
        at.elapsed()
    );
    let new_master: SocketAddr = new.master_address.unwrap().parse().unwrap();
    assert_ne!(new_master, master);
    let producer = connect(new_master).await;
    let mut checks = producer.take_server_requests().unwrap();
    producer_heartbeat(&producer, "127.0.0.1@tx-failover", TX_GROUP).await;
    let check = tokio::time::timeout(Duration::from_secs(30), checks.recv())
        .await
        .expect("the new master checks the pending half back within 30 s")
        .unwrap();
    assert_eq!(check.code, request::CHECK_TRANSACTION_STATE);
    let header: ferromq_protocol::remoting::headers::transaction::CheckTransactionStateRequestHeader =
        check.decode_header().unwrap();
    assert_eq!(
        (header.tran_state_table_offset, header.commit_log_offset),
        pending,
        "only the undecided half is checked"
    );
    assert_eq!(bodies_from(new_master, from).await, vec!["tx-committed"]);
    let reply = invoke(&producer, end_transaction(TX_GROUP, pending, 8, true)).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    eventually!(10, "the checked half delivered by the new master", {
        bodies_from(new_master, from).await.len() == 2
    });
    assert_eq!(
        bodies_from(new_master, from).await,
        vec!["tx-committed", "tx-pending"]
    );
    let again = invoke(&producer, end_transaction(TX_GROUP, committed, 8, false)).await;
    assert_eq!(again.code, response::SUCCESS, "{}", remark(&again));
    assert!(
        remark(&again).contains("already decided"),
        "{}",
        remark(&again)
    );
    let flip = invoke(&producer, end_transaction(TX_GROUP, rolled_back, 8, false)).await;
    assert_eq!(flip.code, response::TRANSACTION_FAILED, "{}", remark(&flip));
    assert_eq!(
        bodies_from(new_master, from).await,
        vec!["tx-committed", "tx-pending"],
        "nothing delivered twice, the rollback never"
    );
}
