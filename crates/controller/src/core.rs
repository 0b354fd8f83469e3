//! The running controller node's shared core: Raft handle, applied state, liveness table,
//! metrics, and the election procedure used by the failure detector, registration and
//! `electMaster`.
//!
//! Invariants:
//! 1. Elections are decided only on the leader, from the applied state and the leader's
//!    liveness table, and proposed with the master epoch they were decided at; apply
//!    re-checks it (`state`), so a decision made on stale state never applies.
//! 2. Locks (`std::sync::Mutex`) are never held across an await.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferromq_protocol::controller::{ControllerMetadata, ControllerPeer, ReplicaInfo, TermRenewal};
use ferromq_protocol::remoting::response;
use openraft::error::{ClientWriteError, RaftError};
use openraft::ServerState;

use crate::config::ControllerConfig;
use crate::election::{self, Choice, Decision};
use crate::liveness::Liveness;
use crate::metrics::ElectionMetrics;
use crate::notify::Notifier;
use crate::raft_types::ControllerRaft;
use crate::sm_store::StateMachineStore;
use crate::state::{ApplyOutcome, Command, GroupRecord};

/// Bound on a linearizable read (a quorum round) before answering NOT_LEADER.
pub const LINEARIZABLE_READ_TIMEOUT: Duration = Duration::from_millis(1000);
/// Bound on one proposal through Raft before answering an error.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_millis(3000);

/// A refusal with a controller response code and a remark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Response code.
    pub code: i32,
    /// Why.
    pub remark: String,
    /// For NOT_LEADER: the leader's address, if known.
    pub leader_address: Option<String>,
}

impl Refusal {
    /// A refusal with `code` and `remark`.
    pub fn new(code: i32, remark: impl Into<String>) -> Refusal {
        Refusal {
            code,
            remark: remark.into(),
            leader_address: None,
        }
    }
}

/// Why an election was started (for logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionOrigin {
    /// The failure detector found the master dead or absent.
    FailureDetector,
    /// A broker registered in a group without a master.
    Registration,
    /// An admin's `electMaster`.
    Admin,
    /// A master that restarted within the heartbeat timeout ended its term
    /// (`election::decide_renewal`; `designated` is ignored).
    Renewal(TermRenewal),
}

/// The shared core of a running controller node.
pub struct Core {
    /// Settings.
    pub config: ControllerConfig,
    /// This node's id.
    pub self_id: u64,
    /// Peers by id (the own entry holds the bound address).
    pub peers: BTreeMap<u64, SocketAddr>,
    /// openraft.
    pub raft: ControllerRaft,
    /// Applied state.
    pub state_machine: StateMachineStore,
    /// Heartbeats heard as leader.
    pub liveness: Mutex<Liveness>,
    /// Election counters.
    pub metrics: Mutex<ElectionMetrics>,
    /// Role-change notices.
    pub notifier: Notifier,
    /// The listener's connection limits.
    pub connection_guard: std::sync::Arc<ferromq_protocol::remoting::limits::ConnectionGuard>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("self_id", &self.self_id)
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// The leader's id and address as this node knows them.
    pub fn leader(&self) -> (Option<u64>, Option<String>) {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader;
        let address = leader.and_then(|id| {
            metrics
                .membership_config
                .membership()
                .get_node(&id)
                .map(|node| node.addr.clone())
                .or_else(|| self.peers.get(&id).map(|a| a.to_string()))
        });
        (leader, address)
    }

    /// A NOT_LEADER refusal naming the leader when known.
    pub fn not_leader(&self, why: impl Into<String>) -> Refusal {
        let (leader_id, address) = self.leader();
        Refusal {
            code: response::CONTROLLER_NOT_LEADER,
            remark: format!(
                "controller n{} is not the leader ({}); leader: {}",
                self.self_id,
                why.into(),
                leader_id.map_or("unknown".into(), |id| format!("n{id}"))
            ),
            leader_address: address,
        }
    }

    /// Whether this node believes it is leader (cheap; not a quorum check).
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Confirms leadership with a quorum after the call started (a linearizable read).
    pub async fn ensure_leader(&self) -> Result<(), Refusal> {
        match tokio::time::timeout(LINEARIZABLE_READ_TIMEOUT, self.raft.ensure_linearizable()).await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(self.not_leader(error.to_string())),
            Err(_) => Err(self.not_leader(format!(
                "leadership not confirmed by a quorum within {LINEARIZABLE_READ_TIMEOUT:?}"
            ))),
        }
    }

    /// Proposes `command` through Raft and returns its apply outcome.
    pub async fn propose(&self, command: Command) -> Result<ApplyOutcome, Refusal> {
        match tokio::time::timeout(PROPOSE_TIMEOUT, self.raft.client_write(command)).await {
            Ok(Ok(written)) => Ok(written.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Err(self.not_leader("proposal forwarded"))
            }
            Ok(Err(error)) => Err(Refusal::new(
                response::CONTROLLER_JRAFT_INTERNAL_ERROR,
                format!("raft proposal failed: {error}"),
            )),
            Err(_) => Err(Refusal::new(
                response::CONTROLLER_JRAFT_INTERNAL_ERROR,
                format!("raft proposal not committed within {PROPOSE_TIMEOUT:?}"),
            )),
        }
    }

    /// A copy of one group's applied record.
    pub fn group(&self, broker_name: &str) -> Option<GroupRecord> {
        self.state_machine.read().state.group(broker_name).cloned()
    }

    /// Elects a master for `broker_name` (`designated`: an admin's choice) and notifies the
    /// members when an election applied.
    ///
    /// # Errors
    /// CONTROLLER_ELECT_MASTER_FAILED with why, MASTER_STILL_EXIST, or a Raft refusal.
    pub async fn elect(
        &self,
        broker_name: &str,
        designated: Option<u64>,
        origin: ElectionOrigin,
    ) -> Result<ReplicaInfo, Refusal> {
        let group = self.group(broker_name).ok_or_else(|| {
            Refusal::new(
                response::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                format!("broker group {broker_name} is not known to the controller"),
            )
        })?;
        let now = Instant::now();
        let candidates = self
            .liveness
            .lock()
            .expect("liveness lock")
            .candidates(&group, now);
        let decision = match origin {
            ElectionOrigin::Renewal(renewal) => election::decide_renewal(
                &group,
                &candidates,
                renewal.broker_id,
                renewal.master_epoch,
            ),
            _ => election::decide(
                &group,
                &candidates,
                designated,
                self.config.enable_elect_unclean_master,
            ),
        };
        let (new_master, unclean) = match decision {
            Decision::Elect { broker_id, unclean } => (Some(broker_id), unclean),
            Decision::ClearMaster => {
                self.count_no_candidate();
                (None, false)
            }
            Decision::Refuse { code, remark } => {
                if code == response::CONTROLLER_ELECT_MASTER_FAILED && designated.is_none() {
                    self.count_no_candidate();
                }
                return Err(Refusal::new(code, remark));
            }
        };
        let command = Command::Elect {
            cluster_name: group.cluster_name.clone(),
            broker_name: broker_name.to_owned(),
            new_master,
            expected_master_epoch: group.master_epoch,
        };
        let outcome = self.propose(command).await;
        self.record_election(broker_name, &group, new_master, unclean, origin, outcome)
    }

    fn count_no_candidate(&self) {
        let mut metrics = self.metrics.lock().expect("metrics lock");
        metrics.counters.elections_no_candidate += 1;
    }

    /// Counts, logs and notifies the outcome of a proposed election.
    fn record_election(
        &self,
        broker_name: &str,
        group: &GroupRecord,
        new_master: Option<u64>,
        unclean: bool,
        origin: ElectionOrigin,
        outcome: Result<ApplyOutcome, Refusal>,
    ) -> Result<ReplicaInfo, Refusal> {
        let mut metrics = self.metrics.lock().expect("metrics lock");
        match outcome {
            Ok(ApplyOutcome::Elected { replica_info }) => {
                match new_master {
                    Some(_) => metrics.elected(broker_name, unclean, Instant::now()),
                    None => metrics.counters.elections_no_master += 1,
                }
                drop(metrics);
                tracing::info!(broker_name, ?origin, master = ?replica_info.master_broker_id,
                    epoch = replica_info.master_epoch, unclean, "election applied");
                let addresses = group
                    .members
                    .values()
                    .map(|m| m.broker_address.clone())
                    .collect();
                self.notifier.notify(&replica_info, addresses);
                Ok(replica_info)
            }
            Ok(ApplyOutcome::Rejected { code, remark }) => {
                if code == response::CONTROLLER_FENCED_MASTER_EPOCH {
                    metrics.counters.elections_fenced += 1;
                } else {
                    metrics.counters.elections_failed += 1;
                }
                Err(Refusal::new(code, remark))
            }
            Ok(other) => {
                metrics.counters.elections_failed += 1;
                Err(Refusal::new(
                    response::CONTROLLER_JRAFT_INTERNAL_ERROR,
                    format!("election applied as {other:?}"),
                ))
            }
            Err(refusal) => {
                metrics.counters.elections_failed += 1;
                Err(refusal)
            }
        }
    }

    /// One failure-detector pass (leader only): elects for every group whose master is dead
    /// or absent while an eligible member is alive; a dead master with no candidate is
    /// removed (the group has no master until one returns).
    pub async fn scan_groups(&self) {
        if !self.is_leader() {
            return;
        }
        let groups: Vec<GroupRecord> = self
            .state_machine
            .read()
            .state
            .groups
            .values()
            .cloned()
            .collect();
        let now = Instant::now();
        for group in groups {
            let candidates = self
                .liveness
                .lock()
                .expect("liveness lock")
                .candidates(&group, now);
            if !election::needs_election(&group, &candidates) {
                continue;
            }
            let first = self
                .metrics
                .lock()
                .expect("metrics lock")
                .detected(&group.broker_name, now);
            let choice = election::choose_master(
                &group,
                &candidates,
                self.config.enable_elect_unclean_master,
            );
            if choice == Choice::NoCandidate && group.master_id.is_none() {
                self.metrics
                    .lock()
                    .expect("metrics lock")
                    .counters
                    .elections_no_candidate += 1;
                if first {
                    tracing::warn!(broker_name = %group.broker_name, set = ?group.sync_state_set,
                        "group has no master and no eligible alive member; retrying every scan");
                }
                continue;
            }
            if let Err(refusal) = self
                .elect(&group.broker_name, None, ElectionOrigin::FailureDetector)
                .await
            {
                tracing::info!(broker_name = %group.broker_name, code = refusal.code,
                    remark = %refusal.remark, "failure-detector election did not apply");
            }
        }
    }

    /// Metadata of the controller group as this node sees it.
    pub fn metadata(&self) -> ControllerMetadata {
        let raft_metrics = self.raft.metrics().borrow().clone();
        let (leader_id, leader_address) = self.leader();
        let mut counters = self.metrics.lock().expect("metrics lock").counters.clone();
        counters.raft_state = format!("{:?}", raft_metrics.state);
        counters.last_applied_index = raft_metrics.last_applied.map(|l| l.index);
        ControllerMetadata {
            group: self.config.group.clone(),
            controller_leader_id: leader_id,
            controller_leader_address: leader_address,
            is_leader: raft_metrics.state == ServerState::Leader,
            peers: self
                .peers
                .iter()
                .map(|(id, addr)| ControllerPeer {
                    id: *id,
                    address: addr.to_string(),
                })
                .collect(),
            self_id: self.self_id,
            term: raft_metrics.current_term,
            metrics: Some(counters),
        }
    }
}
