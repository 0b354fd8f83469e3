//! Controller mode (`enableControllerMode`): the broker's side of automatic failover.
//!
//! A broker in controller mode does not choose its role. It registers with the controller
//! group (`controllerAddr`) and gets a broker id, kept in its store directory
//! ([`BrokerIdentity`]). It then heartbeats to the controller leader every
//! `brokerHeartbeatInterval`; each confirmed heartbeat renews its lease (see [`super::lease`])
//! and carries the group's state ([`ReplicaInfo`]), which [`decide`] turns into a role
//! change: promote this broker at the controller's epoch, follow another master, or stop
//! acting as master when the group has none. A NOTIFY_BROKER_ROLE_CHANGED from a controller
//! only wakes the loop for an immediate heartbeat — the notice itself is never trusted, so a
//! forged one cannot demote or promote anybody.
//!
//! As master, the broker keeps the controller's in-sync set (its SyncStateSet) as the set it
//! waits for (`in_sync` rule 5) and asks the controller to change it
//! (CONTROLLER_ALTER_SYNC_STATE_SET) whenever its local set differs: a shrink takes effect
//! only once the controller confirmed it, so every acknowledged write is held by every member
//! an election may pick from.
//!
//! [`decide`] is pure; the loop only moves messages between the controller, the clock and
//! [`Replication`], so the simulation can drive the same decisions.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferromq_protocol::controller::client::{ControllerCallError, ControllerClient};
use ferromq_protocol::controller::{
    AlterSyncStateSetReply, AlterSyncStateSetRequest, ElectMasterRequest, HeartbeatReply,
    HeartbeatRequest, RegisterBrokerReply, RegisterBrokerRequest, ReplicaInfo, TermRenewal,
};
use ferromq_protocol::remoting::{request, response};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};

use super::{BrokerRole, Replication};

/// The file in the store directory that keeps the controller-assigned broker id.
pub const IDENTITY_FILE: &str = "brokerIdentity.json";

/// How long one registration attempt may take.
const REGISTER_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// Most a promotion waits for the dispatcher to expose the whole log first.
const PROMOTION_DISPATCH_WAIT: Duration = Duration::from_secs(10);
/// Pause between registration attempts.
const REGISTER_RETRY: Duration = Duration::from_millis(200);

/// The controller-mode keys of `broker.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerModeSettings {
    /// `controllerAddr`, parsed.
    pub controllers: Vec<SocketAddr>,
    /// `brokerHeartbeatInterval`.
    pub heartbeat_interval: Duration,
    /// `brokerElectionPriority` (lower is preferred).
    pub election_priority: u32,
    /// The master role this broker takes when elected (`brokerRole`: SYNC_MASTER or
    /// ASYNC_MASTER).
    pub master_role: BrokerRole,
    /// How long start-up waits for a first registration (`controllerRegisterTimeoutMills`).
    pub register_timeout: Duration,
    /// How long a master refuses offset resets after the controller made it master
    /// (`resetWaitAfterPromotionMillis`).
    pub reset_wait_after_promotion: Duration,
}

/// The broker id a controller assigned, kept across restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerIdentity {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The assigned id.
    pub broker_id: u64,
}

/// Why controller mode could not start or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlledError {
    /// The identity file could not be read or written.
    #[error("broker identity file {path}: {reason}")]
    Identity {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// No controller registered this broker in time.
    #[error("cannot register with the controllers {controllers:?} within {waited:?}: {last}")]
    Register {
        /// `controllerAddr`.
        controllers: Vec<SocketAddr>,
        /// How long it tried.
        waited: Duration,
        /// The last failure.
        #[source]
        last: ControllerCallError,
    },
}

impl BrokerIdentity {
    /// Reads the identity kept in `root`, if any; one of another cluster or broker name is an
    /// error (the directory belongs to another broker).
    pub fn load(root: &Path, cluster: &str, name: &str) -> Result<Option<u64>, ControlledError> {
        let path = root.join(IDENTITY_FILE);
        let bad = |reason: String| ControlledError::Identity {
            path: path.clone(),
            reason,
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(e.to_string())),
        };
        let identity: BrokerIdentity = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("not a broker identity: {e}")))?;
        if identity.cluster_name != cluster || identity.broker_name != name {
            return Err(bad(format!(
                "it belongs to {}/{}, but this broker is {cluster}/{name}",
                identity.cluster_name, identity.broker_name
            )));
        }
        if identity.broker_id == 0 {
            return Err(bad("broker id 0 is never a controller-assigned id".into()));
        }
        Ok(Some(identity.broker_id))
    }

    /// Keeps the identity in `root` (write-temp + fsync + rename + fsync(dir)).
    pub fn save(&self, root: &Path) -> Result<(), ControlledError> {
        let path = root.join(IDENTITY_FILE);
        let bytes = serde_json::to_vec_pretty(self).expect("identity serialises");
        ferromq_store::fsutil::write_atomic(&path, &bytes).map_err(|e| ControlledError::Identity {
            path: path.clone(),
            reason: e.to_string(),
        })
    }
}

/// What a broker must do about the group state a controller sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleAction {
    /// Nothing: the role matches.
    Keep,
    /// Become master at this epoch.
    Promote {
        /// The master epoch the controller elected this broker at.
        epoch: u64,
    },
    /// Follow this master (its HA address) of this epoch.
    Follow {
        /// The master's broker id.
        master_id: u64,
        /// The master's HA address.
        master_ha: SocketAddr,
        /// Its epoch.
        epoch: u64,
    },
    /// The group has no master: stop acting as one (writes are refused until one is
    /// elected).
    StepDown,
    /// The controller names this broker master of the epoch its own log already ends with:
    /// it led that epoch before a restart the controller did not notice. A term is never
    /// resumed (its unreplicated tail would become visible while in-sync replicas lack it,
    /// and replicas that received a tail it lost would be refused forever): ask the
    /// controller to end the term and elect afresh (`ElectMasterRequest::renew`).
    Renew {
        /// The epoch to end.
        epoch: u64,
    },
}

/// What this broker is doing now, as [`decide`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acting {
    /// This broker's id.
    pub me: u64,
    /// Whether it acts as master.
    pub master: bool,
    /// The epoch of the group state it last acted on.
    pub epoch: u64,
    /// The master it follows, when a slave.
    pub following: Option<u64>,
    /// The newest epoch of its own log's epoch entries.
    pub log_epoch: u64,
}

/// Turns the controller's group state into a role change. Pure.
///
/// A state older than the one acted on (lower master epoch) is ignored: replies may arrive
/// late, and the epoch only rises. A master named without a usable HA address cannot be
/// followed yet ([`RoleAction::Keep`] until the controller knows it).
pub fn decide(acting: Acting, info: &ReplicaInfo) -> RoleAction {
    if info.master_epoch < acting.epoch {
        return RoleAction::Keep;
    }
    match info.master_broker_id {
        Some(id) if id == acting.me => {
            if acting.master && acting.epoch == info.master_epoch {
                RoleAction::Keep
            } else if info.master_epoch == acting.log_epoch {
                RoleAction::Renew {
                    epoch: info.master_epoch,
                }
            } else {
                RoleAction::Promote {
                    epoch: info.master_epoch,
                }
            }
        }
        Some(id) => {
            let Some(master_ha) = info
                .master_ha_address
                .as_deref()
                .and_then(|a| a.parse::<SocketAddr>().ok())
            else {
                return RoleAction::Keep;
            };
            let same =
                !acting.master && acting.following == Some(id) && acting.epoch == info.master_epoch;
            if same {
                RoleAction::Keep
            } else {
                RoleAction::Follow {
                    master_id: id,
                    master_ha,
                    epoch: info.master_epoch,
                }
            }
        }
        None if acting.master => RoleAction::StepDown,
        None => RoleAction::Keep,
    }
}

/// What the master should ask the controller's in-sync set to become, if anything: the
/// master and its local members, when that differs from the controller's set. Pure.
pub fn wanted_sync_state_set(me: u64, local: &[u64], controller_set: &[u64]) -> Option<Vec<u64>> {
    let mut wanted: Vec<u64> = local.iter().copied().filter(|id| *id != me).collect();
    wanted.push(me);
    wanted.sort_unstable();
    wanted.dedup();
    let mut current = controller_set.to_vec();
    current.sort_unstable();
    current.dedup();
    (wanted != current).then_some(wanted)
}

/// The replicas the master must wait for (`in_sync` rules 5 and 6): the controller's set and,
/// while a change it asked for is unanswered, the replicas it asked for. Pure.
pub fn members_to_wait_for(controller_set: &[u64], requested: Option<&[u64]>) -> Vec<u64> {
    let mut members: Vec<u64> = controller_set
        .iter()
        .chain(requested.unwrap_or_default())
        .copied()
        .collect();
    members.sort_unstable();
    members.dedup();
    members
}

/// Counters of controller mode (metrics, `brokerStatus`).
#[derive(Debug, Default)]
pub struct ControlledCounters {
    /// Heartbeats the controller confirmed.
    pub heartbeats_confirmed: AtomicU64,
    /// Heartbeats that failed (no leader, timeout, refusal).
    pub heartbeats_failed: AtomicU64,
    /// Times this broker became master.
    pub promotions: AtomicU64,
    /// Promotions that found no lease (a registration's or renewal's reply, not a confirmed
    /// heartbeat, made this broker master), each followed by a heartbeat at once.
    pub promotions_without_lease: AtomicU64,
    /// Times it started following another master (or stepped down).
    pub demotions: AtomicU64,
    /// In-sync set changes asked of the controller.
    pub alter_requests: AtomicU64,
    /// In-sync set changes the controller refused or that failed.
    pub alter_failures: AtomicU64,
    /// Role-change notices received from controllers.
    pub notices: AtomicU64,
    /// Term renewals asked of the controller after a restart ([`RoleAction::Renew`]).
    pub renewals: AtomicU64,
    /// Term renewals that failed (no leader, timeout, refusal).
    pub renewal_failures: AtomicU64,
}

/// A broker's link to its controller group.
#[derive(Debug)]
pub struct ControllerLink {
    settings: ControllerModeSettings,
    client: ControllerClient,
    replication: Arc<Replication>,
    cluster: String,
    broker_name: String,
    broker_addr: SocketAddr,
    ha_addr: SocketAddr,
    wake: Notify,
    state: Mutex<LinkState>,
    /// This link, for the tasks it spawns.
    this: std::sync::Weak<ControllerLink>,
    /// Counters.
    pub counters: ControlledCounters,
}

#[derive(Debug, Default)]
struct LinkState {
    /// The group state last acted on.
    known: Option<ReplicaInfo>,
    /// The master this broker follows, when a slave.
    following: Option<u64>,
    /// The in-sync set change in flight, if any (`in_sync` rule 6).
    requested: Option<Vec<u64>>,
}

impl ControllerLink {
    /// A link for the broker owning `replication`.
    pub fn new(
        settings: ControllerModeSettings,
        replication: Arc<Replication>,
        broker_addr: SocketAddr,
        ha_addr: SocketAddr,
    ) -> Arc<ControllerLink> {
        let identity = replication.identity().clone();
        replication.enter_controller_mode();
        Arc::new_cyclic(|this| ControllerLink {
            this: this.clone(),
            client: ControllerClient::new(settings.controllers.clone()),
            settings,
            replication,
            cluster: identity.cluster,
            broker_name: identity.broker_name,
            broker_addr,
            ha_addr,
            wake: Notify::new(),
            state: Mutex::default(),
            counters: ControlledCounters::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &ControllerModeSettings {
        &self.settings
    }

    /// The group state last acted on.
    pub fn known(&self) -> Option<ReplicaInfo> {
        self.state().known.clone()
    }

    /// The controller last seen as leader.
    pub fn controller_leader(&self) -> Option<SocketAddr> {
        self.client.leader()
    }

    /// A controller says the group changed: heartbeat now.
    pub fn notice(&self) {
        self.counters.notices.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// A master without a lease (promoted by a registration's or a term renewal's reply, not
    /// by a confirmed heartbeat) refuses every write until a heartbeat is confirmed: heartbeat
    /// at once rather than after `brokerHeartbeatInterval`. Counted.
    fn heartbeat_soon_without_lease(&self) {
        if self.replication.lease_remaining() == Some(Duration::ZERO) {
            self.counters
                .promotions_without_lease
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!("promoted without a controller lease: heartbeating at once to get one");
            self.wake.notify_one();
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().expect("controller link lock")
    }

    /// Registers with the controller group (keeping the id in `root`), retrying until
    /// `controllerRegisterTimeoutMills`, and acts on the group state it returns.
    ///
    /// # Errors
    /// No controller registered the broker in time, or the identity file is unusable.
    pub async fn register(&self, root: &Path) -> Result<u64, ControlledError> {
        let kept = BrokerIdentity::load(root, &self.cluster, &self.broker_name)?;
        let started = Instant::now();
        let reply = loop {
            match self.register_once(kept).await {
                Ok(reply) => break reply,
                Err(last) if started.elapsed() >= self.settings.register_timeout => {
                    return Err(ControlledError::Register {
                        controllers: self.settings.controllers.clone(),
                        waited: started.elapsed(),
                        last,
                    })
                }
                Err(error) => {
                    tracing::debug!(%error, "registration with the controller failed; retrying");
                    tokio::time::sleep(REGISTER_RETRY).await;
                }
            }
        };
        if kept != Some(reply.broker_id) {
            BrokerIdentity {
                cluster_name: self.cluster.clone(),
                broker_name: self.broker_name.clone(),
                broker_id: reply.broker_id,
            }
            .save(root)?;
        }
        self.replication.set_broker_id(reply.broker_id);
        tracing::info!(broker_id = reply.broker_id, master = ?reply.replica_info.master_broker_id,
            epoch = reply.replica_info.master_epoch, "registered with the controller");
        self.act(&reply.replica_info).await;
        Ok(reply.broker_id)
    }

    async fn register_once(
        &self,
        kept: Option<u64>,
    ) -> Result<RegisterBrokerReply, ControllerCallError> {
        let store = self.replication.store();
        let request = RegisterBrokerRequest {
            cluster_name: self.cluster.clone(),
            broker_name: self.broker_name.clone(),
            broker_id: kept.or_else(|| {
                let id = self.replication.broker_id();
                (id != 0).then_some(id)
            }),
            broker_address: self.broker_addr.to_string(),
            ha_address: self.ha_addr.to_string(),
            election_priority: self.settings.election_priority,
            epoch: self.replication.epoch(),
            max_offset: store.committed_end(),
        };
        self.client
            .call(
                request::CONTROLLER_REGISTER_BROKER,
                &request,
                REGISTER_ATTEMPT_TIMEOUT,
            )
            .await
    }

    /// Heartbeats until `stop`: every `brokerHeartbeatInterval`, or at once after a notice.
    pub async fn run(self: Arc<Self>, root: PathBuf, mut stop: watch::Receiver<bool>) {
        let interval = self.settings.heartbeat_interval;
        let mut failures = 0u64;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = self.wake.notified() => {}
                _ = stop.changed() => return,
            }
            match self.heartbeat().await {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures += 1;
                    self.counters
                        .heartbeats_failed
                        .fetch_add(1, Ordering::Relaxed);
                    if error.code() == Some(response::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED) {
                        tracing::warn!(
                            "the controller does not know this broker; registering again"
                        );
                        if let Err(error) = self.register(&root).await {
                            tracing::warn!(%error, "registering again failed");
                        }
                    } else if failures.is_power_of_two() {
                        tracing::warn!(%error, failures, "heartbeat to the controller failed");
                    }
                }
            }
        }
    }

    /// One heartbeat: on confirmation the lease is renewed from the moment it was sent, then
    /// the group state is acted on.
    async fn heartbeat(&self) -> Result<(), ControllerCallError> {
        let store = self.replication.store();
        let request = HeartbeatRequest {
            cluster_name: self.cluster.clone(),
            broker_name: self.broker_name.clone(),
            broker_id: self.replication.broker_id(),
            broker_address: self.broker_addr.to_string(),
            epoch: self.replication.epoch(),
            max_offset: store.committed_end(),
            confirm_offset: store.stats().dispatched_end,
            election_priority: self.settings.election_priority,
        };
        let timeout = self.call_timeout();
        let sent_at = Instant::now();
        let reply: HeartbeatReply = self
            .client
            .call(request::BROKER_HEARTBEAT, &request, timeout)
            .await?;
        self.counters
            .heartbeats_confirmed
            .fetch_add(1, Ordering::Relaxed);
        let info = &reply.replica_info;
        if info.master_broker_id == Some(self.replication.broker_id()) {
            self.replication.note_heartbeat_confirmed(sent_at);
            self.replication
                .renew_lease(sent_at, Duration::from_millis(reply.lease_millis));
        }
        self.act(info).await;
        Ok(())
    }

    /// How long one heartbeat or renewal may take: three heartbeat intervals, within
    /// 100 ms..3 s.
    fn call_timeout(&self) -> Duration {
        (self.settings.heartbeat_interval * 3)
            .clamp(Duration::from_millis(100), Duration::from_secs(3))
    }

    /// Asks the controller to end term `epoch`, which it still names this restarted broker
    /// master of ([`RoleAction::Renew`]); the group's new state, or `None` when the request
    /// failed (logged and counted; the next heartbeat asks again).
    async fn renew_term(&self, epoch: u64) -> Option<ReplicaInfo> {
        self.counters.renewals.fetch_add(1, Ordering::Relaxed);
        let broker_id = self.replication.broker_id();
        tracing::warn!(
            epoch,
            broker_id,
            "named master of the epoch this broker led before it restarted: asking the \
             controller for a new term instead of resuming"
        );
        let request = ElectMasterRequest {
            cluster_name: self.cluster.clone(),
            broker_name: self.broker_name.clone(),
            broker_id: None,
            renew: Some(TermRenewal {
                broker_id,
                master_epoch: epoch,
            }),
        };
        let timeout = self.call_timeout();
        match self
            .client
            .call::<_, ReplicaInfo>(request::CONTROLLER_ELECT_MASTER, &request, timeout)
            .await
        {
            Ok(info) => Some(info),
            Err(error) => {
                self.counters
                    .renewal_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(epoch, %error, "term renewal failed; the next heartbeat asks again");
                None
            }
        }
    }

    /// Acts on a group state: role change, then (as master) the in-sync set.
    async fn act(&self, info: &ReplicaInfo) {
        let acting = {
            let state = self.state();
            Acting {
                me: self.replication.broker_id(),
                master: self.replication.role().is_master(),
                epoch: state.known.as_ref().map_or(0, |k| k.master_epoch),
                following: state.following,
                log_epoch: self.replication.epoch(),
            }
        };
        match decide(acting, info) {
            RoleAction::Keep => {}
            RoleAction::Promote { epoch } => {
                let role = self.settings.master_role;
                let dispatched = self
                    .replication
                    .expose_whole_log(PROMOTION_DISPATCH_WAIT)
                    .await;
                tracing::info!(
                    dispatched,
                    "the whole log is dispatched; taking the master role"
                );
                match self.replication.promote(epoch, role) {
                    Ok(start) => {
                        self.counters.promotions.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            epoch,
                            start,
                            role = role.as_str(),
                            "master by the controller's election"
                        );
                        self.state().following = None;
                        self.heartbeat_soon_without_lease();
                    }
                    Err(error) => {
                        // `known` is not updated, so the next heartbeat tries again.
                        tracing::error!(epoch, %error, "promotion failed");
                        return;
                    }
                }
            }
            RoleAction::Follow {
                master_id,
                master_ha,
                epoch,
            } => {
                self.replication.revoke_lease();
                self.replication.demote(master_ha, epoch);
                self.counters.demotions.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(master_id, master = %master_ha, epoch, "following the master the controller names");
                self.state().following = Some(master_id);
            }
            RoleAction::Renew { epoch } => {
                // `known` is not updated: until the controller elects at a new epoch, the next
                // heartbeat asks again.
                if let Some(next) = self.renew_term(epoch).await {
                    if next.master_epoch > epoch {
                        Box::pin(self.act(&next)).await;
                    }
                }
                return;
            }
            RoleAction::StepDown => {
                self.replication.revoke_lease();
                self.replication.step_down();
                self.counters.demotions.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    epoch = info.master_epoch,
                    "the controller names no master: no longer acting as master"
                );
                self.state().following = None;
            }
        }
        let requested = {
            let mut state = self.state();
            state.known = Some(info.clone());
            state.requested.clone()
        };
        if self.replication.role().is_master() {
            let members = members_to_wait_for(&info.sync_state_set, requested.as_deref());
            self.replication.set_controlled_set(&members);
            self.reconcile_sync_state_set(info);
        }
    }

    /// Asks the controller to make its in-sync set this master's local one, if they differ
    /// and no change is in flight; on success the master takes the confirmed set.
    ///
    /// The request runs in a task of its own: a slow controller never holds back the
    /// heartbeats that keep the lease.
    fn reconcile_sync_state_set(&self, info: &ReplicaInfo) {
        let me = self.replication.broker_id();
        let (local, _) = self.replication.in_sync_sets();
        let Some(wanted) = wanted_sync_state_set(me, &local, &info.sync_state_set) else {
            return;
        };
        {
            let mut state = self.state();
            if state.requested.is_some() {
                return;
            }
            state.requested = Some(wanted.clone());
        }
        // From now on the controller may apply the change: wait for the replicas asked for.
        let members = members_to_wait_for(&info.sync_state_set, Some(&wanted));
        self.replication.set_controlled_set(&members);
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let info = info.clone();
        tokio::spawn(async move { this.alter_sync_state_set(&info, wanted).await });
    }

    /// One CONTROLLER_ALTER_SYNC_STATE_SET; on success the master takes the confirmed set.
    async fn alter_sync_state_set(&self, info: &ReplicaInfo, wanted: Vec<u64>) {
        let me = self.replication.broker_id();
        self.counters.alter_requests.fetch_add(1, Ordering::Relaxed);
        let request = AlterSyncStateSetRequest {
            cluster_name: self.cluster.clone(),
            broker_name: self.broker_name.clone(),
            master_broker_id: me,
            master_epoch: info.master_epoch,
            new_sync_state_set: wanted.clone(),
            sync_state_set_epoch: info.sync_state_set_epoch,
        };
        let outcome: Result<AlterSyncStateSetReply, _> = self
            .client
            .call(
                request::CONTROLLER_ALTER_SYNC_STATE_SET,
                &request,
                REGISTER_ATTEMPT_TIMEOUT,
            )
            .await;
        match outcome {
            Ok(reply) => {
                tracing::info!(set = ?reply.sync_state_set, epoch = reply.sync_state_set_epoch,
                    "the controller changed the in-sync set");
                self.replication.set_controlled_set(&reply.sync_state_set);
                let mut state = self.state();
                if let Some(known) = state.known.as_mut() {
                    if known.master_epoch == info.master_epoch {
                        known.sync_state_set = reply.sync_state_set;
                        known.sync_state_set_epoch = reply.sync_state_set_epoch;
                    }
                }
            }
            Err(error) => {
                self.counters.alter_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, wanted = ?wanted, "the controller did not change the in-sync set");
            }
        }
        self.state().requested = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(master: Option<u64>, epoch: u64) -> ReplicaInfo {
        ReplicaInfo {
            cluster_name: "c".into(),
            broker_name: "b".into(),
            master_broker_id: master,
            master_address: master.map(|id| format!("127.0.0.1:{}", 10_000 + id)),
            master_ha_address: master.map(|id| format!("127.0.0.1:{}", 20_000 + id)),
            master_epoch: epoch,
            sync_state_set: master.into_iter().collect(),
            sync_state_set_epoch: epoch,
        }
    }

    /// A broker whose log ends with the epoch it last acted on.
    fn acting(me: u64, master: bool, epoch: u64, following: Option<u64>) -> Acting {
        Acting {
            me,
            master,
            epoch,
            following,
            log_epoch: epoch,
        }
    }

    #[test]
    fn a_restarted_master_named_for_its_own_epoch_renews_the_term_instead_of_resuming() {
        // Restarted: it has acted on nothing yet, and its log ends with epoch 3.
        let restarted = Acting {
            log_epoch: 3,
            ..acting(1, false, 0, None)
        };
        assert_eq!(
            decide(restarted, &info(Some(1), 3)),
            RoleAction::Renew { epoch: 3 }
        );
        // The renewal elected it again at a new epoch: a new term begins.
        assert_eq!(
            decide(restarted, &info(Some(1), 4)),
            RoleAction::Promote { epoch: 4 }
        );
        // Or elected a replica holding more: it follows.
        assert!(matches!(
            decide(restarted, &info(Some(2), 4)),
            RoleAction::Follow {
                master_id: 2,
                epoch: 4,
                ..
            }
        ));
    }

    #[test]
    fn a_broker_named_master_promotes_once_per_epoch() {
        assert_eq!(
            decide(acting(2, false, 1, Some(1)), &info(Some(2), 2)),
            RoleAction::Promote { epoch: 2 }
        );
        assert_eq!(
            decide(acting(2, true, 2, None), &info(Some(2), 2)),
            RoleAction::Keep
        );
        // Re-elected at a later epoch (another master came and went): a new term.
        assert_eq!(
            decide(acting(2, true, 2, None), &info(Some(2), 4)),
            RoleAction::Promote { epoch: 4 }
        );
    }

    #[test]
    fn a_deposed_master_follows_the_new_one_and_stale_states_are_ignored() {
        let follow = decide(acting(1, true, 1, None), &info(Some(2), 2));
        assert_eq!(
            follow,
            RoleAction::Follow {
                master_id: 2,
                master_ha: "127.0.0.1:20002".parse().unwrap(),
                epoch: 2
            }
        );
        assert_eq!(
            decide(acting(1, false, 2, Some(2)), &info(Some(2), 2)),
            RoleAction::Keep,
            "already following it"
        );
        assert_eq!(
            decide(acting(1, false, 3, Some(3)), &info(Some(2), 2)),
            RoleAction::Keep,
            "a late reply from an older epoch changes nothing"
        );
        let mut no_ha = info(Some(2), 3);
        no_ha.master_ha_address = None;
        assert_eq!(
            decide(acting(1, false, 2, Some(2)), &no_ha),
            RoleAction::Keep
        );
    }

    #[test]
    fn a_master_steps_down_when_the_group_has_none() {
        assert_eq!(
            decide(acting(1, true, 1, None), &info(None, 1)),
            RoleAction::StepDown
        );
        assert_eq!(
            decide(acting(1, false, 1, None), &info(None, 1)),
            RoleAction::Keep
        );
    }

    #[test]
    fn the_wanted_set_is_the_master_and_its_local_members() {
        assert_eq!(wanted_sync_state_set(1, &[2, 3], &[1, 2, 3]), None);
        assert_eq!(wanted_sync_state_set(1, &[3], &[1, 2, 3]), Some(vec![1, 3]));
        assert_eq!(wanted_sync_state_set(1, &[2, 3], &[1]), Some(vec![1, 2, 3]));
        assert_eq!(wanted_sync_state_set(1, &[], &[3, 1]), Some(vec![1]));
    }

    #[test]
    fn a_requested_change_is_waited_for_until_answered() {
        assert_eq!(members_to_wait_for(&[1, 3], None), vec![1, 3]);
        assert_eq!(members_to_wait_for(&[1], Some(&[1, 2])), vec![1, 2]);
        assert_eq!(
            members_to_wait_for(&[1, 2, 3], Some(&[1, 3])),
            vec![1, 2, 3],
            "a shrink takes effect only once the controller confirms it"
        );
    }

    #[test]
    fn the_identity_is_kept_and_another_brokers_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(BrokerIdentity::load(dir.path(), "c", "b").unwrap(), None);
        BrokerIdentity {
            cluster_name: "c".into(),
            broker_name: "b".into(),
            broker_id: 3,
        }
        .save(dir.path())
        .unwrap();
        assert_eq!(BrokerIdentity::load(dir.path(), "c", "b").unwrap(), Some(3));
        let error = BrokerIdentity::load(dir.path(), "c", "other").unwrap_err();
        assert!(error.to_string().contains("belongs to c/b"), "{error}");
        std::fs::write(dir.path().join(IDENTITY_FILE), b"garbage").unwrap();
        assert!(BrokerIdentity::load(dir.path(), "c", "b").is_err());
    }
}
