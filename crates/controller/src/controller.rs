//! [`Controller`]: one controller node's lifecycle.
//!
//! [`Controller::bind`] binds the listener (port 0 lets the OS choose, so tests bind every
//! node first and learn the addresses); [`BoundController::start`] opens the store, starts
//! openraft, bootstraps the group on a pristine node, and spawns the listener and the
//! failure detector; [`Controller::shutdown`] stops them all.
//!
//! Bootstrap: every pristine node calls openraft's `initialize` with the full peer list.
//! The membership entry it writes is identical on every node (same log id, same members),
//! so nodes that all do it at once agree; a node that already holds a log skips it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferromq_protocol::controller::ControllerMetadata;
use ferromq_protocol::remoting::limits::{self, Acceptor, ConnectionGuard, LimitSettings};
use ferromq_protocol::remoting::DEFAULT_MAX_FRAME_LENGTH;
use openraft::{BasicNode, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{ControllerConfig, Peer};
use crate::core::Core;
use crate::error::ControllerError;
use crate::liveness::Liveness;
use crate::log_store::LogStore;
use crate::metrics::ElectionMetrics;
use crate::network::NetworkFactory;
use crate::notify::Notifier;
use crate::raft_types::ControllerRaft;
use crate::server;
use crate::sm_store::StateMachineStore;
use crate::state::ControllerState;

/// Most connections one controller serves at once.
pub const CONNECTIONS_MAX: u32 = 4096;

/// A controller node whose listener is bound but which is not running yet.
#[derive(Debug)]
pub struct BoundController {
    listener: TcpListener,
    local_addr: SocketAddr,
    config: ControllerConfig,
}

impl BoundController {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts with `config.peers` (where the own entry is replaced by the bound address).
    ///
    /// # Errors
    /// Invalid settings, an unreadable store, or openraft refusing to start.
    pub async fn start(self) -> Result<Controller, ControllerError> {
        let peers = self.config.peers.clone();
        self.start_with_peers(peers).await
    }

    /// Starts with the given peer list (e.g. learned after binding every node at port 0).
    ///
    /// # Errors
    /// As [`BoundController::start`].
    pub async fn start_with_peers(
        mut self,
        peers: Vec<Peer>,
    ) -> Result<Controller, ControllerError> {
        self.config.peers = peers;
        self.config.validate()?;
        let mut peer_addrs: BTreeMap<u64, SocketAddr> =
            self.config.peers.iter().map(|p| (p.id, p.addr)).collect();
        peer_addrs.insert(self.config.self_id, self.local_addr);
        let raft_dir = self.config.store_path.join("raft");
        let log_store = LogStore::open(&raft_dir)?;
        let state_machine = StateMachineStore::open(&raft_dir)?;
        let raft_config = raft_config(&self.config)?;
        let network = NetworkFactory {
            rpc_timeout: self.config.raft_rpc_timeout,
            dial: peer_addrs.clone(),
        };
        let raft = ControllerRaft::new(
            self.config.self_id,
            raft_config,
            network,
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| ControllerError::Raft(format!("openraft did not start: {e}")))?;
        bootstrap(&raft, &peer_addrs).await?;
        let guard = connection_guard()?;
        let core = Arc::new(Core {
            self_id: self.config.self_id,
            peers: peer_addrs,
            liveness: Mutex::new(Liveness::new(self.config.heartbeat_timeout, Instant::now())),
            metrics: Mutex::new(ElectionMetrics::default()),
            notifier: Notifier::default(),
            connection_guard: guard.clone(),
            config: self.config,
            raft,
            state_machine,
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let acceptor = Acceptor::new(self.listener, guard);
        let server = tokio::spawn(server::serve(acceptor, core.clone(), shutdown_rx.clone()));
        let detector = tokio::spawn(failure_detector(core.clone(), shutdown_rx));
        tracing::info!(self_id = core.self_id, addr = %self.local_addr,
            group = %core.config.group, "controller started");
        Ok(Controller {
            core,
            local_addr: self.local_addr,
            shutdown: shutdown_tx,
            tasks: vec![server, detector],
        })
    }
}

fn raft_config(config: &ControllerConfig) -> Result<Arc<openraft::Config>, ControllerError> {
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let raft_config = openraft::Config {
        cluster_name: config.group.clone(),
        heartbeat_interval: millis(config.raft_heartbeat_interval),
        election_timeout_min: millis(config.raft_election_timeout_min),
        election_timeout_max: millis(config.raft_election_timeout_min) * 2,
        install_snapshot_timeout: millis(config.raft_rpc_timeout) * 4,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_logs_max),
        max_in_snapshot_log_to_keep: config.snapshot_logs_max,
        // JSON encodes snapshot bytes as numbers (up to 4 characters each): keep a chunk's
        // frame well under the remoting frame limit.
        snapshot_max_chunk_size: (DEFAULT_MAX_FRAME_LENGTH / 8) as u64,
        ..openraft::Config::default()
    };
    raft_config
        .validate()
        .map(Arc::new)
        .map_err(|e| ControllerError::Config(format!("raft settings: {e}")))
}

fn connection_guard() -> Result<Arc<ConnectionGuard>, ControllerError> {
    let settings = LimitSettings {
        max_connections: CONNECTIONS_MAX,
        idle_timeout: limits::DEFAULT_IDLE_TIMEOUT,
        frame_read_timeout: limits::DEFAULT_FRAME_READ_TIMEOUT,
        partial_frame_budget_bytes: limits::DEFAULT_PARTIAL_FRAME_BUDGET,
        max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
    };
    settings.validate()?;
    let limit = limits::connection_limit(settings.max_connections)?;
    Ok(ConnectionGuard::new(settings, limit.limit))
}

/// Initializes the group's membership on a pristine node (see the module documentation).
async fn bootstrap(
    raft: &ControllerRaft,
    peers: &BTreeMap<u64, SocketAddr>,
) -> Result<(), ControllerError> {
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| ControllerError::Raft(e.to_string()))?;
    if initialized {
        return Ok(());
    }
    let members: BTreeMap<u64, BasicNode> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr.to_string())))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        Err(openraft::error::RaftError::APIError(
            openraft::error::InitializeError::NotAllowed(_),
        )) => Ok(()),
        Err(error) => Err(ControllerError::Raft(format!(
            "cannot initialize the group: {error}"
        ))),
    }
}

/// Watches for leadership changes (granting the liveness grace period) and scans groups
/// every `scanNotActiveBrokerInterval` while leader.
///
/// Invariant: a scan runs only after this loop has seen the current leadership and granted
/// its grace period, so a new leader never judges members by an older term's heartbeats.
async fn failure_detector(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = core.raft.metrics();
    let mut scan = tokio::time::interval(core.config.scan_interval);
    scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leader_term: Option<u64> = None;
    loop {
        let scan_due = tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
                false
            }
            changed = metrics.changed() => {
                if changed.is_err() {
                    return;
                }
                false
            }
            _ = scan.tick() => true,
        };
        let (state, term) = {
            let now = metrics.borrow_and_update();
            (now.state, now.current_term)
        };
        let leading = (state == ServerState::Leader).then_some(term);
        if leading.is_some() && leading != leader_term {
            tracing::info!(self_id = core.self_id, term, "became controller leader");
            core.liveness
                .lock()
                .expect("liveness lock")
                .became_leader(Instant::now());
            core.metrics.lock().expect("metrics lock").became_leader();
        }
        leader_term = leading;
        if scan_due && leader_term.is_some() {
            core.scan_groups().await;
        }
    }
}

/// A running controller node.
#[derive(Debug)]
pub struct Controller {
    core: Arc<Core>,
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Controller {
    /// Binds the listener: `config.listen`, else the own entry of `controllerDLegerPeers`.
    ///
    /// # Errors
    /// The own id is not among the peers, or the address cannot be bound.
    pub async fn bind(config: ControllerConfig) -> Result<BoundController, ControllerError> {
        let addr = match config.listen {
            Some(addr) => addr,
            None => config.self_peer().map(|p| p.addr).ok_or_else(|| {
                ControllerError::Config(format!(
                    "controllerDLegerSelfId n{} is not in controllerDLegerPeers",
                    config.self_id
                ))
            })?,
        };
        let bind_error = |source| ControllerError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(BoundController {
            listener,
            local_addr,
            config,
        })
    }

    /// Binds and starts with `config` (see [`BoundController::start`]).
    ///
    /// # Errors
    /// As [`Controller::bind`] and [`BoundController::start`].
    pub async fn start(config: ControllerConfig) -> Result<Controller, ControllerError> {
        Controller::bind(config).await?.start().await
    }

    /// The listener's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's Raft id.
    pub fn self_id(&self) -> u64 {
        self.core.self_id
    }

    /// The controller group as this node sees it (leader, term, peers, metrics).
    pub fn metadata(&self) -> ControllerMetadata {
        self.core.metadata()
    }

    /// Whether this node is the Raft leader now.
    pub fn is_leader(&self) -> bool {
        self.core.is_leader()
    }

    /// The leader's node id as this node knows it.
    pub fn leader_id(&self) -> Option<u64> {
        self.core.leader().0
    }

    /// A copy of the applied state.
    pub fn state(&self) -> ControllerState {
        self.core.state_machine.read().state.clone()
    }

    /// Stops the listener, the failure detector and Raft; returns when they stopped.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Err(error) = self.core.raft.shutdown().await {
            tracing::warn!(%error, "raft did not shut down cleanly");
        }
        tracing::info!(self_id = self.core.self_id, "controller stopped");
    }
}
