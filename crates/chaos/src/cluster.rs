//! A replicated ferromq cluster for chaos runs: name servers, controllers and broker groups in
//! controller mode, as child processes, with a [`FaultProxy`] on every link a fault can cut.
//!
//! Links and their proxies (see [`Link`]):
//! - *client → broker*: one proxy per broker; the broker registers the proxy's port
//!   (`brokerAdvertisedPort`), so producers, consumers and admin reach it only through it;
//! - *slave → master HA*: one proxy per broker in front of its HA listener, registered with
//!   the controller (`haAdvertisedPort`), so every slave of a master replicates through it;
//! - *broker → controller*: one proxy per (broker, controller); the broker's `controllerAddr`
//!   lists its own proxies;
//! - *controller → controller*: one proxy per ordered pair; each controller's
//!   `controllerDLegerPeers` names its peers at its own proxies (a controller dials peers at the
//!   addresses its config gives);
//! - *broker → name server*: one proxy per (broker, name server); the broker's `namesrvAddr`
//!   lists its own proxies.
//!
//! Brokers register with the name servers every second (`registerNameServerPeriod`), so a
//! restarted name server knows the routes again within a second (RocketMQ's 30 s would leave
//! admin commands without a route that long after every name-server kill).
//!
//! Clients reach the name servers directly (a name-server kill is a fault of its own). The
//! harness asks the controllers directly (never through a proxy) who is master and leader.
//!
//! Invariants:
//! 1. Every wait is bounded: node starts by [`NODE_READY`], restarts by
//!    [`RESTART_ATTEMPTS_MAX`] attempts, controller calls by [`CONTROLLER_CALL_TIMEOUT`].
//! 2. No orphan: nodes are killed when the cluster is dropped ([`Node`]'s drop), proxies stop
//!    with their [`FaultProxy`].
//! 3. A fault is resolved to a node when it strikes, from the controllers' answer at that
//!    moment; a node already down or paused is never picked again until it is healed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{ControllerMetadata, GetReplicaInfoRequest, ReplicaInfo};
use ferromq_protocol::remoting::codes::request;

use crate::history::NodeRole;
use crate::nodes::{Flush, Node, NodeError};
use crate::proxy::{FaultProxy, ProxyMode};
use crate::topology::{Link, MasterMode, Topology, Victim};

/// How long one node may take to start (store recovery and controller registration
/// included).
pub const NODE_READY: Duration = Duration::from_secs(40);
/// Starts of a restart tried before giving up (ports may linger, controllers may be away).
pub const RESTART_ATTEMPTS_MAX: u32 = 4;
/// Bound on one question to the controllers.
pub const CONTROLLER_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for every group to have a master with a full in-sync set after the start.
pub const SETTLE_WAIT: Duration = Duration::from_secs(60);

/// `resetWaitAfterPromotionMillis` of the brokers: the workload's consumers heartbeat every
/// second, so a new master knows them all well within this.
pub const RESET_WAIT_AFTER_PROMOTION: Duration = Duration::from_secs(3);

/// The cluster name every broker registers.
pub const CLUSTER_NAME: &str = "ChaosCluster";

/// What to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSpec {
    /// `replicated` or `ha` (`single` is [`crate::nodes::Standalone`]).
    pub topology: Topology,
    /// How masters acknowledge.
    pub master: MasterMode,
    /// How each broker flushes.
    pub flush: Flush,
}

/// Why the cluster could not be set up or healed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A file, port or proxy could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A node did not start.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The cluster did not settle in time.
    #[error("cluster not ready within {SETTLE_WAIT:?}: {0}")]
    NotSettled(String),
}

/// A node of the cluster, by kind and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRef {
    /// `brokers[i]`.
    Broker(usize),
    /// `controllers[i]`.
    Controller(usize),
    /// `namesrvs[i]`.
    Namesrv(usize),
}

struct BrokerNode {
    group: usize,
    node: Node,
    client: FaultProxy,
    ha: FaultProxy,
    to_controllers: Vec<FaultProxy>,
    to_namesrvs: Vec<FaultProxy>,
}

struct ControllerNode {
    node: Node,
    /// Proxies this controller dials its peers through, one per other controller (both
    /// directions of a pair are cut by cutting the proxies of both ends).
    to_peers: Vec<(usize, FaultProxy)>,
}

/// The running cluster.
pub struct ChaosCluster {
    spec: ClusterSpec,
    namesrvs: Vec<(Node, SocketAddr)>,
    controllers: Vec<ControllerNode>,
    brokers: Vec<BrokerNode>,
    controller_client: Arc<ControllerClient>,
}

/// Every address, chosen before anything starts.
struct Plan {
    namesrvs: Vec<SocketAddr>,
    controllers: Vec<SocketAddr>,
    brokers: Vec<BrokerPlan>,
}

/// One broker's place and ports.
#[derive(Debug, Clone, Copy)]
struct BrokerPlan {
    group: usize,
    replica: usize,
    listen: SocketAddr,
    ha: SocketAddr,
}

/// Lowest port [`PortPicker`] hands out (below it live well-known services).
const PICK_FLOOR: u16 = 10_000;
/// Random ports [`PortPicker`] tries before it takes one the OS chooses.
const PICK_ATTEMPTS_MAX: usize = 2_000;
/// The start of the kernel's ephemeral range when it cannot be read.
const EPHEMERAL_LOW_DEFAULT: u16 = 32_768;

/// The first port of the kernel's ephemeral range (the local ports of outgoing connections).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_LOW_DEFAULT)
}

/// Hands out distinct free loopback ports for the nodes: every port it picked stays bound
/// until the picker is dropped, so it never hands out one port twice while a plan is made
/// (seed 2006 once got one port for a broker's listen and HA addresses). The ports come from
/// below the kernel's ephemeral range: a node restarted after a kill must bind its port
/// again, and a port of the ephemeral range may meanwhile have become the local port of some
/// outgoing connection (replicated seed 2013 lost its run to "address already in use" on a
/// restarted broker's HA port). Only when that range leaves no room does it take a port the
/// OS chooses.
#[derive(Default)]
struct PortPicker {
    held: Vec<TcpListener>,
}

impl PortPicker {
    fn pick(&mut self) -> Result<SocketAddr, ClusterError> {
        let io = |source| ClusterError::Io {
            what: "finding a free port".into(),
            source,
        };
        let listener = match Self::below_ephemeral() {
            Some(listener) => listener,
            None => TcpListener::bind("127.0.0.1:0").map_err(io)?,
        };
        let addr = listener.local_addr().map_err(io)?;
        self.held.push(listener);
        Ok(addr)
    }

    /// A listener on a random free port in `PICK_FLOOR..` the ephemeral range.
    fn below_ephemeral() -> Option<TcpListener> {
        use rand::Rng;
        let high = ephemeral_low();
        if high <= PICK_FLOOR + 1_000 {
            return None;
        }
        let mut rng = rand::thread_rng();
        (0..PICK_ATTEMPTS_MAX).find_map(|_| {
            let port = rng.gen_range(PICK_FLOOR..high);
            TcpListener::bind(("127.0.0.1", port)).ok()
        })
    }

    fn pick_n(&mut self, n: usize) -> Result<Vec<SocketAddr>, ClusterError> {
        (0..n).map(|_| self.pick()).collect()
    }
}

async fn proxy_to(target: SocketAddr) -> Result<FaultProxy, ClusterError> {
    FaultProxy::start(target)
        .await
        .map_err(|source| ClusterError::Io {
            what: format!("starting a proxy to {target}"),
            source,
        })
}

fn write_file(path: &Path, text: &str) -> Result<(), ClusterError> {
    std::fs::write(path, text).map_err(|source| ClusterError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

fn joined(proxies: &[FaultProxy]) -> String {
    let addrs: Vec<String> = proxies.iter().map(|p| p.local_addr().to_string()).collect();
    addrs.join(";")
}

impl Plan {
    fn new(topology: Topology) -> Result<Plan, ClusterError> {
        let mut ports = PortPicker::default();
        let mut brokers = Vec::new();
        for group in 0..topology.groups() {
            for replica in 0..topology.replicas() {
                brokers.push(BrokerPlan {
                    group,
                    replica,
                    listen: ports.pick()?,
                    ha: ports.pick()?,
                });
            }
        }
        Ok(Plan {
            namesrvs: ports.pick_n(topology.namesrvs())?,
            controllers: ports.pick_n(topology.controllers())?,
            brokers,
        })
    }
}

impl ChaosCluster {
    /// Starts name servers, controllers and brokers under `dir` with `program`, and waits
    /// until every group has a master whose in-sync set holds every replica.
    ///
    /// # Errors
    /// [`ClusterError`]; whatever started is killed.
    pub async fn start(
        program: &Path,
        dir: &Path,
        spec: ClusterSpec,
    ) -> Result<ChaosCluster, ClusterError> {
        let plan = Plan::new(spec.topology)?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|source| ClusterError::Io {
            what: "creating the log directory".into(),
            source,
        })?;
        let mut cluster = ChaosCluster {
            spec,
            namesrvs: Vec::new(),
            controllers: Vec::new(),
            brokers: Vec::new(),
            controller_client: Arc::new(ControllerClient::new(plan.controllers.clone())),
        };
        for (i, addr) in plan.namesrvs.iter().enumerate() {
            let args = vec!["namesrv".into(), "--listen".into(), addr.to_string().into()];
            let name = format!("namesrv-{i}");
            let mut node = Node::new(&name, program, args, logs.join(format!("{name}.log")));
            node.start(NODE_READY).await?;
            cluster.namesrvs.push((node, *addr));
        }
        cluster.start_controllers(program, dir, &plan).await?;
        for broker in &plan.brokers {
            let broker = cluster.start_broker(program, dir, &plan, broker).await?;
            cluster.brokers.push(broker);
        }
        cluster.settle(SETTLE_WAIT).await?;
        Ok(cluster)
    }

    async fn start_controllers(
        &mut self,
        program: &Path,
        dir: &Path,
        plan: &Plan,
    ) -> Result<(), ClusterError> {
        let count = plan.controllers.len();
        for i in 0..count {
            let mut to_peers = Vec::new();
            let mut peers = Vec::new();
            for (j, addr) in plan.controllers.iter().enumerate() {
                if i == j {
                    peers.push(format!("n{j}-{addr}"));
                } else {
                    let proxy = proxy_to(*addr).await?;
                    peers.push(format!("n{j}-{}", proxy.local_addr()));
                    to_peers.push((j, proxy));
                }
            }
            let name = format!("controller-{i}");
            let config = dir.join(format!("{name}.toml"));
            let store = dir.join("controllers").join(&name);
            write_file(
                &config,
                &format!(
                    "controllerDLegerGroup = \"chaos-controllers\"\n\
                     controllerDLegerPeers = \"{}\"\n\
                     controllerDLegerSelfId = \"n{i}\"\n\
                     controllerStorePath = {}\n",
                    peers.join(";"),
                    toml_string(&store),
                ),
            )?;
            let args = vec!["controller".into(), "-c".into(), config.into_os_string()];
            let log = dir.join("logs").join(format!("{name}.log"));
            let node = Node::new(&name, program, args, log);
            self.controllers.push(ControllerNode { node, to_peers });
        }
        // Start all before waiting: a Raft group needs a majority to elect anyone.
        for controller in &mut self.controllers {
            controller.node.start(NODE_READY).await?;
        }
        Ok(())
    }

    async fn start_broker(
        &self,
        program: &Path,
        dir: &Path,
        plan: &Plan,
        broker: &BrokerPlan,
    ) -> Result<BrokerNode, ClusterError> {
        let BrokerPlan {
            group,
            replica,
            listen,
            ha,
        } = *broker;
        let client = proxy_to(listen).await?;
        let ha_proxy = proxy_to(ha).await?;
        let mut to_controllers = Vec::new();
        for addr in &plan.controllers {
            to_controllers.push(proxy_to(*addr).await?);
        }
        let mut to_namesrvs = Vec::new();
        for addr in &plan.namesrvs {
            to_namesrvs.push(proxy_to(*addr).await?);
        }
        let name = broker_node_name(group, replica);
        let config = dir.join(format!("{name}.toml"));
        let flush = match self.spec.flush {
            Flush::Sync => "SYNC_FLUSH",
            Flush::Async => "ASYNC_FLUSH",
        };
        write_file(
            &config,
            &format!(
                "brokerClusterName = \"{CLUSTER_NAME}\"\n\
                 brokerName = \"{}\"\n\
                 brokerIP1 = \"127.0.0.1\"\n\
                 listenPort = {}\n\
                 grpcListenPort = -1\n\
                 brokerAdvertisedPort = {}\n\
                 haListenPort = {}\n\
                 haAdvertisedPort = {}\n\
                 namesrvAddr = \"{}\"\n\
                 storePathRootDir = {}\n\
                 brokerRole = \"{}\"\n\
                 flushDiskType = \"{flush}\"\n\
                 enableControllerMode = true\n\
                 controllerAddr = \"{}\"\n\
                 resetWaitAfterPromotionMillis = {}\n\
                 registerNameServerPeriod = 1000\n",
                group_name(group),
                listen.port(),
                client.local_addr().port(),
                ha.port(),
                ha_proxy.local_addr().port(),
                joined(&to_namesrvs),
                toml_string(&dir.join("data").join(&name)),
                self.spec.master.broker_role(),
                joined(&to_controllers),
                RESET_WAIT_AFTER_PROMOTION.as_millis(),
            ),
        )?;
        let args: Vec<OsString> = vec!["broker".into(), "-c".into(), config.into_os_string()];
        let log = dir.join("logs").join(format!("{name}.log"));
        let mut node = Node::new(&name, program, args, log);
        node.start(NODE_READY).await?;
        Ok(BrokerNode {
            group,
            node,
            client,
            ha: ha_proxy,
            to_controllers,
            to_namesrvs,
        })
    }

    /// Waits until every group has a master whose in-sync set holds all its replicas.
    ///
    /// # Errors
    /// [`ClusterError::NotSettled`] naming the last state seen.
    pub async fn settle(&self, wait: Duration) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + wait;
        let replicas = self.spec.topology.replicas();
        loop {
            let mut last = String::new();
            let mut ready = true;
            for group in 0..self.spec.topology.groups() {
                match self.replica_info(group).await {
                    Ok(info)
                        if info.master_broker_id.is_some()
                            && info.sync_state_set.len() == replicas => {}
                    Ok(info) => {
                        ready = false;
                        last = format!("{info:?}");
                    }
                    Err(error) => {
                        ready = false;
                        last = error;
                    }
                }
            }
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClusterError::NotSettled(last));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The name servers' addresses (clients use them directly).
    pub fn namesrv_addrs(&self) -> Vec<SocketAddr> {
        self.namesrvs.iter().map(|(_, addr)| *addr).collect()
    }

    /// The spec it runs.
    pub fn spec(&self) -> ClusterSpec {
        self.spec
    }

    /// A client of the controllers (direct, not proxied).
    pub fn controller_client(&self) -> Arc<ControllerClient> {
        self.controller_client.clone()
    }

    /// Broker group names (`broker-0`, ...), with the node name behind each registered
    /// (proxied) client address, for the failover watch.
    pub fn broker_addresses(&self) -> (Vec<String>, BTreeMap<String, String>) {
        let groups = (0..self.spec.topology.groups()).map(group_name).collect();
        let names = self
            .brokers
            .iter()
            .map(|b| (b.client.local_addr().to_string(), b.node.name().to_string()))
            .collect();
        (groups, names)
    }

    /// Group `group`'s state as the controllers hold it.
    ///
    /// # Errors
    /// The controller call's error, as text.
    pub async fn replica_info(&self, group: usize) -> Result<ReplicaInfo, String> {
        replica_info(&self.controller_client, &group_name(group)).await
    }

    async fn controller_leader(&self) -> Option<usize> {
        let metadata: ControllerMetadata = self
            .controller_client
            .call(
                request::CONTROLLER_GET_METADATA_INFO,
                &serde_json::json!({}),
                CONTROLLER_CALL_TIMEOUT,
            )
            .await
            .ok()?;
        metadata
            .controller_leader_id
            .and_then(|id| usize::try_from(id).ok())
    }

    fn healthy(&self, node: NodeRef) -> bool {
        let node = self.node_ref(node);
        node.is_running() && !node.is_paused()
    }

    /// The node `victim` names now; `None` when no healthy node fits (all down, no master).
    pub async fn resolve(&self, victim: Victim) -> Option<NodeRef> {
        let chosen = match victim {
            Victim::Standalone => None,
            Victim::Master { group } => self.master_of(group).await,
            Victim::Slave { group, pick } => {
                let master = self.master_of(group).await;
                let slaves: Vec<NodeRef> = (0..self.brokers.len())
                    .filter(|&i| self.brokers[i].group == group)
                    .map(NodeRef::Broker)
                    .filter(|n| Some(*n) != master && self.healthy(*n))
                    .collect();
                pick_one(&slaves, pick)
            }
            Victim::ControllerLeader => self.controller_leader().await.map(NodeRef::Controller),
            Victim::ControllerFollower { pick } => {
                let leader = self.controller_leader().await;
                let followers: Vec<NodeRef> = (0..self.controllers.len())
                    .filter(|i| Some(*i) != leader)
                    .map(NodeRef::Controller)
                    .filter(|n| self.healthy(*n))
                    .collect();
                pick_one(&followers, pick)
            }
            Victim::Namesrv { index } => Some(NodeRef::Namesrv(index % self.namesrvs.len().max(1))),
        };
        chosen.filter(|n| self.healthy(*n))
    }

    async fn master_of(&self, group: usize) -> Option<NodeRef> {
        let info = self.replica_info(group).await.ok()?;
        let address = info.master_address?;
        self.brokers
            .iter()
            .position(|b| b.client.local_addr().to_string() == address)
            .map(NodeRef::Broker)
    }

    /// What `node` is now (for brokers: master or slave, as the controllers say).
    pub async fn role(&self, node: NodeRef) -> NodeRole {
        match node {
            NodeRef::Broker(i) => {
                if self.master_of(self.brokers[i].group).await == Some(node) {
                    NodeRole::Master
                } else {
                    NodeRole::Slave
                }
            }
            NodeRef::Controller(_) => NodeRole::Controller,
            NodeRef::Namesrv(_) => NodeRole::Namesrv,
        }
    }

    fn node_ref(&self, node: NodeRef) -> &Node {
        match node {
            NodeRef::Broker(i) => &self.brokers[i].node,
            NodeRef::Controller(i) => &self.controllers[i].node,
            NodeRef::Namesrv(i) => &self.namesrvs[i].0,
        }
    }

    /// The process of `node`.
    pub fn node(&mut self, node: NodeRef) -> &mut Node {
        match node {
            NodeRef::Broker(i) => &mut self.brokers[i].node,
            NodeRef::Controller(i) => &mut self.controllers[i].node,
            NodeRef::Namesrv(i) => &mut self.namesrvs[i].0,
        }
    }

    /// Starts a killed node again on its config and data, retrying while ports linger or
    /// controllers are away.
    ///
    /// # Errors
    /// The last attempt's error.
    pub async fn restart(&mut self, node: NodeRef) -> Result<(), NodeError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.node(node).start(NODE_READY).await {
                Ok(_) => return Ok(()),
                Err(error) if attempt >= RESTART_ATTEMPTS_MAX => return Err(error),
                Err(error) => {
                    tracing::warn!(%error, attempt, "node restart failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// The proxies `link` of `node` runs through (empty when the node has no such link).
    fn proxies(&self, node: NodeRef, link: Link) -> Vec<&FaultProxy> {
        match (node, link) {
            (NodeRef::Broker(i), Link::ClientBroker) => vec![&self.brokers[i].client],
            (NodeRef::Broker(i), Link::Ha) => vec![&self.brokers[i].ha],
            (NodeRef::Broker(i), Link::BrokerController) => {
                self.brokers[i].to_controllers.iter().collect()
            }
            (NodeRef::Broker(i), Link::BrokerNamesrv) => {
                self.brokers[i].to_namesrvs.iter().collect()
            }
            (NodeRef::Controller(c), Link::ControllerController) => {
                let mut proxies: Vec<&FaultProxy> = self.controllers[c]
                    .to_peers
                    .iter()
                    .map(|(_, p)| p)
                    .collect();
                for other in &self.controllers {
                    proxies.extend(
                        other
                            .to_peers
                            .iter()
                            .filter(|(j, _)| *j == c)
                            .map(|(_, p)| p),
                    );
                }
                proxies
            }
            _ => Vec::new(),
        }
    }

    /// Puts every proxy of `link` of `node` in `mode`; false when the node has no such link.
    pub fn set_link(&self, node: NodeRef, link: Link, mode: ProxyMode) -> bool {
        let proxies = self.proxies(node, link);
        for proxy in &proxies {
            proxy.set_mode(mode);
        }
        !proxies.is_empty()
    }

    /// Every proxy back to `Pass`.
    pub fn heal_links(&self) {
        let all = self
            .brokers
            .iter()
            .flat_map(|b| {
                [&b.client, &b.ha]
                    .into_iter()
                    .chain(&b.to_controllers)
                    .chain(&b.to_namesrvs)
            })
            .chain(
                self.controllers
                    .iter()
                    .flat_map(|c| c.to_peers.iter().map(|(_, p)| p)),
            );
        for proxy in all {
            proxy.set_mode(ProxyMode::Pass);
        }
    }

    /// Every node, for healing and teardown: name servers, controllers, then brokers.
    pub fn nodes(&self) -> Vec<NodeRef> {
        let namesrvs = (0..self.namesrvs.len()).map(NodeRef::Namesrv);
        let controllers = (0..self.controllers.len()).map(NodeRef::Controller);
        let brokers = (0..self.brokers.len()).map(NodeRef::Broker);
        namesrvs.chain(controllers).chain(brokers).collect()
    }

    /// Stops every node: brokers first (they deregister), then controllers and name servers.
    ///
    /// # Errors
    /// The first node that could not be stopped.
    pub async fn stop(&mut self) -> Result<(), NodeError> {
        let mut order = self.nodes();
        order.reverse();
        for node in order {
            self.node(node).stop().await?;
        }
        Ok(())
    }
}

/// `broker-{group}`.
pub fn group_name(group: usize) -> String {
    format!("broker-{group}")
}

/// `broker-{group}-r{replica}`.
pub fn broker_node_name(group: usize, replica: usize) -> String {
    format!("broker-{group}-r{replica}")
}

/// Group `name`'s state from the controllers.
///
/// # Errors
/// The controller call's error, as text.
pub async fn replica_info(client: &ControllerClient, name: &str) -> Result<ReplicaInfo, String> {
    client
        .call(
            request::CONTROLLER_GET_REPLICA_INFO,
            &GetReplicaInfoRequest {
                broker_name: name.to_string(),
            },
            CONTROLLER_CALL_TIMEOUT,
        )
        .await
        .map_err(|e| e.to_string())
}

fn pick_one(nodes: &[NodeRef], pick: usize) -> Option<NodeRef> {
    (!nodes.is_empty()).then(|| nodes[pick % nodes.len()])
}

/// A path as a quoted TOML basic string.
fn toml_string(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ports_are_distinct_and_below_the_ephemeral_range() {
        let mut picker = PortPicker::default();
        let ports: Vec<u16> = picker
            .pick_n(24)
            .unwrap()
            .iter()
            .map(SocketAddr::port)
            .collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        let high = ephemeral_low();
        if high > PICK_FLOOR + 1_000 {
            assert!(
                ports.iter().all(|p| (PICK_FLOOR..high).contains(p)),
                "{ports:?} not in {PICK_FLOOR}..{high}"
            );
        }
    }
}
