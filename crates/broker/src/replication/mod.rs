//! Master/slave replication: offsets travel with the log.
//!
//! A slave connects to its master's HA port, says who it is and where its log ends
//! ([`handshake`]), and receives raw CommitLog bytes from there ([`master`], [`slave`]). It
//! appends them byte for byte at the same offsets and runs the same dispatcher, so its
//! ConsumeQueues, key index, consumer offsets, resets, corrections, fences and the delay
//! scheduler's progress are the master's, with no side channel and no timer (R1, R8, A3).
//!
//! The master tracks each slave's acknowledged end in the [`in_sync`] set. Its high watermark
//! — the smallest acknowledged end over the set, the master included — caps what the
//! dispatcher exposes on the master and, through the stream, on every slave (invariant 4).
//! SYNC_MASTER acknowledges a write only once every member holds it
//! ([`Replication::replicated`], called from the core's one acknowledgement path).
//!
//! [`Replication`] is the one shared handle: role (which may change at run time, for
//! failover), in-sync state, counters and status. The state machines ([`in_sync`],
//! [`handshake`], [`stream`], [`follower`]) are pure or reach the log through a trait
//! (`handshake::LogPrefix`, `follower::ReplicaLog`) and take the clock as an argument; the
//! tasks in [`master`] and [`slave`] only move bytes between them, the sockets and the store.

pub mod catalog_log;
pub mod controlled;
pub mod follower;
pub mod handshake;
pub mod in_sync;
pub mod lease;
pub mod master;
pub mod role_change;
pub mod settings;
pub mod slave;
pub mod status;
pub mod stream;
pub mod waiters;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferromq_store::MessageStore;
use tokio::sync::watch;

use crate::core::error::{ControllerSilence, WriteError};
use handshake::GroupIdentity;
use in_sync::{InSyncSet, InSyncSettings, Replicated};
pub use settings::{BrokerRole, ReplicationSettings};
use waiters::SyncWaiters;

/// Why a role change failed.
#[derive(Debug, thiserror::Error)]
pub enum RoleChangeError {
    /// A promotion asked for a role that is not a master's.
    #[error("cannot promote to {0}: not a master role")]
    NotAMasterRole(&'static str),
    /// The store refused to begin the epoch.
    #[error("cannot begin the master epoch: {0}")]
    Epoch(#[from] ferromq_store::EpochError),
}

/// Why an appended write's wait ended without replication: the set shrank below the minimum.
fn shrunk(members: usize, needed: usize) -> String {
    format!(
        "the in-sync set fell to {members} member(s), the master included, below \
         minInSyncReplicas {needed}, before every member held it"
    )
}

/// Counters of the replication paths (`brokerStatus`, metrics, tests).
#[derive(Debug, Default)]
pub struct ReplicationCounters {
    /// Log bytes a master sent to its slaves.
    pub bytes_streamed: AtomicU64,
    /// Log bytes a slave appended from its master.
    pub bytes_received: AtomicU64,
    /// HA connections closed for a malformed or unexpected frame.
    pub malformed_frames: AtomicU64,
    /// Hellos refused (wrong group, ahead of the master, diverged, ...).
    pub peers_refused: AtomicU64,
    /// Slaves disconnected for a bad acknowledgement (past the master's end).
    pub bad_acks: AtomicU64,
    /// Writes refused because this broker is not master.
    pub not_master_refusals: AtomicU64,
    /// Pull-carried commits a slave did not apply (the pull itself was served).
    pub carried_commits_refused: AtomicU64,
    /// SYNC_MASTER writes refused below `minInSyncReplicas`.
    pub in_sync_not_enough: AtomicU64,
    /// SYNC_MASTER writes appended but not held by every in-sync replica (in time, or before
    /// the set shrank below the minimum): answered NOT_DURABLE.
    pub replication_timeouts: AtomicU64,
    /// Replicated chunks a slave refused (bad record, not at its end).
    pub chunks_refused: AtomicU64,
    /// Writes refused (or acknowledgements withheld) because the master held no controller
    /// lease.
    pub lease_refusals: AtomicU64,
}

/// What a slave knows of its master (for `haStatus`).
#[derive(Debug, Clone, Default)]
pub struct FollowerStatus {
    /// The master's HA address it follows (or tries to).
    pub master_addr: Option<SocketAddr>,
    /// Whether the HA connection is up and accepted.
    pub connected: bool,
    /// The master's end as of its last frame.
    pub master_end: u64,
    /// The master's watermark as of its last frame.
    pub watermark: u64,
    /// When the last frame from the master arrived.
    pub last_read: Option<Instant>,
    /// When the last acknowledgement went out.
    pub last_write: Option<Instant>,
    /// Why the master refused this slave, while it does.
    pub refusal: Option<String>,
}

/// The shared replication state of one broker.
#[derive(Debug)]
pub struct Replication {
    settings: ReplicationSettings,
    identity: GroupIdentity,
    role: watch::Sender<BrokerRole>,
    store: Arc<MessageStore>,
    in_sync: Mutex<InSyncSet>,
    /// Bumped whenever an acknowledgement or tick changed the in-sync state (the master's
    /// streams send the new watermark).
    changed: watch::Sender<u64>,
    /// A slave's master HA address, as configured or learned from the name servers.
    master_addr: watch::Sender<Option<SocketAddr>>,
    follower: Mutex<FollowerStatus>,
    /// SYNC_MASTER writes waiting for their replicas (taken inside the in-sync lock).
    waiters: Mutex<SyncWaiters>,
    /// Bytes sent to each connected slave, by broker id.
    streamed_by_replica: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// How long a SYNC_MASTER write waits for its replicas (`syncFlushTimeout`).
    sync_timeout: Duration,
    /// The lowest master epoch this broker may follow (set by [`Replication::demote`]): a
    /// Welcome from an older master is not streamed from.
    min_master_epoch: AtomicU64,
    /// This broker's id: `brokerId` from the config, or the one a controller assigned.
    broker_id: AtomicU64,
    /// Controller mode: writes need a valid [`lease::Lease`].
    controller_mode: std::sync::atomic::AtomicBool,
    /// The lease from the controller (controller mode only).
    lease: Mutex<lease::Lease>,
    /// When the last heartbeat the controller confirmed was sent.
    last_heartbeat_ok: Mutex<Option<Instant>>,
    /// When the controller last made this broker master (a promotion, or its own epoch
    /// taken back after a restart); `None` when it never did in this process.
    master_since: Mutex<Option<Instant>>,
    /// Counters.
    pub counters: ReplicationCounters,
}

impl Replication {
    /// The replication state of a broker opening `store` with these settings.
    pub fn new(
        settings: ReplicationSettings,
        identity: GroupIdentity,
        store: Arc<MessageStore>,
        sync_timeout: Duration,
    ) -> Arc<Replication> {
        let in_sync = InSyncSet::new(
            InSyncSettings {
                max_lag: settings.max_lag,
                min_in_sync_replicas: settings.min_in_sync_replicas as usize,
            },
            store.stats().dispatched_end,
        );
        let replication = Arc::new(Replication {
            role: watch::Sender::new(settings.role),
            master_addr: watch::Sender::new(settings.master_address),
            identity,
            store,
            in_sync: Mutex::new(in_sync),
            changed: watch::Sender::new(0),
            follower: Mutex::new(FollowerStatus::default()),
            waiters: Mutex::default(),
            streamed_by_replica: Mutex::default(),
            sync_timeout,
            min_master_epoch: AtomicU64::new(0),
            broker_id: AtomicU64::new(settings.broker_id),
            controller_mode: Default::default(),
            lease: Mutex::default(),
            last_heartbeat_ok: Mutex::default(),
            master_since: Mutex::default(),
            counters: ReplicationCounters::default(),
            settings,
        });
        if replication.role().is_master() {
            replication.apply_bound();
        } else {
            // A slave shows what it showed before it stopped, until its master's watermark
            // arrives over the stream.
            let visible = replication.store.stats().dispatched_end;
            replication.store.set_replication_bound(Some(visible));
        }
        replication
    }

    /// The settings.
    pub fn settings(&self) -> &ReplicationSettings {
        &self.settings
    }

    /// Who this broker group is.
    pub fn identity(&self) -> &GroupIdentity {
        &self.identity
    }

    /// The current role.
    pub fn role(&self) -> BrokerRole {
        *self.role.borrow()
    }

    /// Watches the role (tasks that serve one role stop when it changes).
    pub fn subscribe_role(&self) -> watch::Receiver<BrokerRole> {
        self.role.subscribe()
    }

    /// Changes the role at run time (failover). A master that becomes a slave stops
    /// accepting writes at once; its slave task starts following `master_addr`.
    pub fn set_role(&self, role: BrokerRole) {
        self.role.send_replace(role);
        self.apply_bound();
    }

    /// This broker's own id (`brokerId`, or the one a controller assigned; a master in
    /// controller mode keeps its own id here and registers with name servers under 0).
    pub fn broker_id(&self) -> u64 {
        self.broker_id.load(Ordering::Acquire)
    }

    /// Sets the id a controller assigned.
    pub fn set_broker_id(&self, id: u64) {
        self.broker_id.store(id, Ordering::Release);
    }

    /// The id to register with name servers under: 0 (RocketMQ's MASTER_ID) while master,
    /// the broker's own id otherwise.
    pub fn registered_broker_id(&self) -> u64 {
        if self.role().is_master() {
            0
        } else {
            self.broker_id()
        }
    }

    /// The master epoch: the store's last epoch (0 for a log written before epochs).
    pub fn epoch(&self) -> u64 {
        self.store.last_epoch()
    }

    /// The lowest master epoch the slave task follows (see [`Replication::demote`]).
    pub fn min_master_epoch(&self) -> u64 {
        self.min_master_epoch.load(Ordering::Acquire)
    }

    /// Makes this broker the master of `epoch` (failover): stops following — no replicated
    /// byte is appended after this returns, because `begin_epoch` fences the store against
    /// every master of an older epoch under the writer lock — records `(epoch, log end)`
    /// durably in the epoch file, and switches the role to `flavor` (SYNC_MASTER or
    /// ASYNC_MASTER) with the master's dispatch bound. Returns the epoch's start offset.
    ///
    /// # Errors
    /// `flavor` is not a master role, or the store refused the epoch (not above its last
    /// one, I/O); the role is then unchanged, though following has stopped (the caller
    /// retries or demotes).
    pub fn promote(&self, epoch: u64, flavor: BrokerRole) -> Result<u64, RoleChangeError> {
        if !flavor.is_master() {
            return Err(RoleChangeError::NotAMasterRole(flavor.as_str()));
        }
        // No reconnect to the old master from here on.
        self.master_addr.send_replace(None);
        let start = self.store.begin_epoch(epoch)?;
        // A new term: the watermark restarts at the log end (`in_sync` rule 7).
        self.lock().begin_term(start);
        self.role.send_replace(flavor);
        self.note_master_since();
        self.apply_bound();
        tracing::warn!(epoch, start, role = flavor.as_str(), "promoted to master");
        Ok(start)
    }

    /// Makes this broker a slave of the master at `master_ha_addr`, of epoch `epoch` or
    /// newer (failover): stops accepting writes at once and follows that address (the watch
    /// is set even when no `haMasterAddress` was configured). The slave task's handshake then
    /// cuts whatever suffix diverges from the new master (invariant 6). The dispatch cap
    /// stops at what is visible now until the new master's watermark arrives.
    pub fn demote(&self, master_ha_addr: SocketAddr, epoch: u64) {
        self.min_master_epoch.fetch_max(epoch, Ordering::AcqRel);
        self.freeze_bound();
        self.role.send_replace(BrokerRole::Slave);
        self.master_addr.send_replace(Some(master_ha_addr));
        tracing::warn!(master = %master_ha_addr, epoch, "demoted to slave");
    }

    /// Records that the controller made this broker master now.
    fn note_master_since(&self) {
        *self.master_since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// How long ago the controller made this broker master (`None`: it never did in this
    /// process, or the broker is not master now).
    pub fn master_for(&self) -> Option<std::time::Duration> {
        if !self.role().is_master() {
            return None;
        }
        self.master_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|since| since.elapsed())
    }

    /// The store this replication state belongs to.
    pub fn store(&self) -> &Arc<MessageStore> {
        &self.store
    }

    /// A slave's master HA address (configured, or learned from a registration reply).
    pub fn master_addr(&self) -> watch::Receiver<Option<SocketAddr>> {
        self.master_addr.subscribe()
    }

    /// Records the master HA address a name server returned, unless `haMasterAddress` fixes
    /// it.
    pub fn learn_master_addr(&self, addr: SocketAddr) {
        // Controller mode: only the controller names the master.
        if self.settings.master_address.is_some() || self.controller_mode() {
            return;
        }
        self.master_addr.send_if_modified(|current| {
            let changed = *current != Some(addr);
            if changed {
                tracing::info!(master = %addr, "master HA address learned from a name server");
            }
            *current = Some(addr);
            changed
        });
    }

    /// Puts this broker in controller mode: from now on a master acknowledges writes only
    /// while it holds a lease ([`Replication::renew_lease`]), and its in-sync set follows the
    /// controller's ([`Replication::set_controlled_set`]).
    pub fn enter_controller_mode(&self) {
        self.controller_mode.store(true, Ordering::Release);
    }

    /// Whether this broker runs in controller mode.
    pub fn controller_mode(&self) -> bool {
        self.controller_mode.load(Ordering::Acquire)
    }

    /// A heartbeat sent at `sent_at` was confirmed by the controller with this lease.
    pub fn renew_lease(&self, sent_at: Instant, lease: Duration) {
        self.lease.lock().expect("lease lock").renew(sent_at, lease);
    }

    /// Drops the lease (the controller says this broker is no longer master).
    pub fn revoke_lease(&self) {
        self.lease.lock().expect("lease lock").revoke();
    }

    /// How long the lease still holds (`None` outside controller mode).
    pub fn lease_remaining(&self) -> Option<Duration> {
        self.controller_mode().then(|| {
            self.lease
                .lock()
                .expect("lease lock")
                .remaining(Instant::now())
        })
    }

    /// Outside controller mode: `Ok`. In it: the lease holds, or the error (counted) of a
    /// write a master without a lease must not acknowledge.
    fn check_lease(&self, what: &'static str) -> Result<(), WriteError> {
        if !self.controller_mode() {
            return Ok(());
        }
        let now = Instant::now();
        let mut lease = self.lease.lock().expect("lease lock");
        if lease.valid(now) {
            return Ok(());
        }
        let seen = lease.note_expired();
        drop(lease);
        self.counters.lease_refusals.fetch_add(1, Ordering::Relaxed);
        if seen.is_power_of_two() {
            tracing::warn!(what, refusals = seen, "write refused: no controller lease");
        }
        Err(WriteError::LeaseExpired {
            what,
            broker: self.identity.broker_name.clone(),
            broker_id: self.broker_id(),
            silence: self
                .last_heartbeat_ok
                .lock()
                .expect("heartbeat lock")
                .map_or(ControllerSilence::NeverConfirmed, |t| {
                    ControllerSilence::For {
                        millis: now.saturating_duration_since(t).as_millis() as u64,
                    }
                }),
        })
    }

    /// Records when the last heartbeat the controller confirmed was sent.
    pub fn note_heartbeat_confirmed(&self, sent_at: Instant) {
        let mut last = self.last_heartbeat_ok.lock().expect("heartbeat lock");
        if last.is_none_or(|t| t < sent_at) {
            *last = Some(sent_at);
        }
    }

    /// Controller mode: the controller's in-sync set now (the master's own id among them is
    /// ignored). The master counts its members until the controller confirms a smaller set
    /// (`in_sync` rule 5).
    pub fn set_controlled_set(&self, set: &[u64]) {
        let me = self.broker_id();
        self.update(|s| s.set_controlled(set.iter().copied().filter(|id| *id != me)));
    }

    /// The replicas of the local in-sync set (what the controller's set should become) and
    /// those of the controller's set as this master holds it.
    pub fn in_sync_sets(&self) -> (Vec<u64>, Option<Vec<u64>>) {
        let set = self.lock();
        (set.local_members(), set.controlled())
    }

    /// Refuses a write when this broker is not a master (R3), or is a master without a
    /// controller lease (controller mode). `what` names the write.
    pub fn check_writable(&self, what: &'static str) -> Result<(), WriteError> {
        let role = self.role();
        if role.is_master() {
            return self.check_lease(what);
        }
        self.counters
            .not_master_refusals
            .fetch_add(1, Ordering::Relaxed);
        Err(WriteError::NotMaster {
            what,
            broker: self.identity.broker_name.clone(),
            broker_id: self.broker_id(),
            role: role.as_str(),
        })
    }

    /// SYNC_MASTER: refuses a write before it is appended when the in-sync set is below
    /// `minInSyncReplicas` (nothing could acknowledge it).
    pub fn check_in_sync(&self, what: &'static str) -> Result<(), WriteError> {
        if self.role() != BrokerRole::SyncMaster {
            return Ok(());
        }
        match self.lock().replicated(0) {
            Replicated::NotEnough { members, needed } => {
                Err(self.not_enough(what, (members, needed)))
            }
            _ => Ok(()),
        }
    }

    /// SYNC_MASTER: resolves once every in-sync replica holds everything below `end`, or
    /// fails — below the minimum, or not within `syncFlushTimeout`. Other roles: at once.
    pub async fn replicated(&self, end: u64, what: &'static str) -> Result<(), WriteError> {
        self.replicated_when(end, what, BrokerRole::SyncMaster == self.role())
            .await
    }

    /// Like [`Replication::replicated`] for consumer progress (commits, resets, corrections)
    /// under either master role: offsets always travel the synchronous path. An ASYNC_MASTER
    /// exposes offset records, like messages, only below the in-sync watermark, so a commit it
    /// acknowledged at once would stay invisible to offset reads — and a reset would not yet
    /// redirect the consumers it fences, which could then undo it (`ferromq chaos` found
    /// both). Waiting makes an acknowledged offset readable at once and lets a failover to an
    /// in-sync replica keep it.
    pub async fn replicated_progress(
        &self,
        end: u64,
        what: &'static str,
    ) -> Result<(), WriteError> {
        self.replicated_when(end, what, self.role().is_master())
            .await
    }

    async fn replicated_when(
        &self,
        end: u64,
        what: &'static str,
        wait: bool,
    ) -> Result<(), WriteError> {
        let outcome = if wait {
            self.wait_replicated(end, what).await
        } else {
            Ok(())
        };
        // Appended already: a lease that ran out meanwhile makes it "maybe stored".
        let outcome = outcome.and_then(|()| {
            self.check_lease(what).map_err(|error| {
                self.not_replicated(what, format!("acknowledgement withheld: {error}"))
            })
        });
        if outcome.is_ok() && wait {
            self.refresh_bound(end);
        }
        outcome
    }

    /// Moves the dispatch cap up to `end` if the in-sync set holds it but the cap lags: the
    /// slaves may have acknowledged `end` before the master's own flush reached it, so the
    /// cap computed then stopped short. Without this a write just acknowledged could stay
    /// invisible to its writer's next read until the next acknowledgement or tick.
    ///
    /// Only after a wait for the replicas: an ASYNC_MASTER acknowledges messages before its
    /// slaves hold them, so its cap moves with their acknowledgements, not with every write
    /// (a hot path).
    fn refresh_bound(&self, end: u64) {
        if self
            .store
            .replication_bound()
            .is_some_and(|bound| bound < end)
        {
            self.update(|_| ());
        }
    }

    async fn wait_replicated(&self, end: u64, what: &'static str) -> Result<(), WriteError> {
        let receiver = {
            let set = self.lock();
            match set.replicated(end) {
                Replicated::Yes => return Ok(()),
                // Appended already: not "not stored", but not known to be replicated.
                Replicated::NotEnough { members, needed } => {
                    return Err(self.not_replicated(what, shrunk(members, needed)))
                }
                // Registered under the in-sync lock, which `update` holds while releasing:
                // no acknowledgement can slip between the check and the registration.
                Replicated::Pending => self.waiters().add(end),
            }
        };
        let timed_out = || {
            format!(
                "not every in-sync replica held it within {} ms",
                self.sync_timeout.as_millis()
            )
        };
        let released = match receiver {
            Some(receiver) => tokio::time::timeout(self.sync_timeout, receiver).await,
            None => {
                let reason = format!("{} writes wait already", waiters::SYNC_WAITERS_MAX);
                return Err(self.not_replicated(what, reason));
            }
        };
        match released {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err((members, needed)))) => {
                Err(self.not_replicated(what, shrunk(members, needed)))
            }
            Ok(Err(_)) | Err(_) => Err(self.not_replicated(what, timed_out())),
        }
    }

    /// The error (counted) of a write refused below `minInSyncReplicas`.
    fn not_enough(&self, what: &'static str, (members, needed): (usize, usize)) -> WriteError {
        self.counters
            .in_sync_not_enough
            .fetch_add(1, Ordering::Relaxed);
        WriteError::InSyncReplicasNotEnough {
            what,
            members,
            needed,
        }
    }

    /// The error (counted) of an appended write the in-sync replicas did not all hold.
    fn not_replicated(&self, what: &'static str, reason: String) -> WriteError {
        self.counters
            .replication_timeouts
            .fetch_add(1, Ordering::Relaxed);
        WriteError::NotReplicated { what, reason }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, SyncWaiters> {
        self.waiters.lock().expect("waiters lock")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InSyncSet> {
        self.in_sync.lock().expect("in-sync lock")
    }

    /// Runs `change` on the in-sync set, then moves the store's dispatch cap to the new
    /// watermark and wakes SYNC_MASTER waiters — in that order, so an acknowledged write is
    /// visible to consumers by the time its writer hears of it.
    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut InSyncSet) -> T) -> T {
        let out = {
            let mut set = self.lock();
            let out = change(&mut set);
            self.bound_locked(&mut set);
            self.waiters().release(set.replicated_end());
            out
        };
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        out
    }

    /// The dispatch cap of the current role: the watermark on a master; on a slave, the
    /// watermark its master last sent (set by the slave task).
    fn apply_bound(&self) {
        if self.role().is_master() {
            let mut set = self.lock();
            self.bound_locked(&mut set);
        }
    }

    fn bound_locked(&self, set: &mut InSyncSet) {
        if !self.role().is_master() {
            return;
        }
        // Controller mode: a master without a lease exposes nothing new (R6): a new master
        // may be elected that lacks what it would expose.
        if self.controller_mode() && !self.lease.lock().expect("lease lock").valid(Instant::now()) {
            return;
        }
        let bound = set.bound(self.store.locally_acknowledgeable_end());
        self.store.set_replication_bound(bound);
    }

    /// The master's watermark now (what it tells slaves).
    pub fn watermark(&self) -> u64 {
        let mut set = self.lock();
        set.bound(self.store.locally_acknowledgeable_end());
        set.watermark()
    }

    /// A slave's status, updated by the slave task.
    pub(crate) fn follower(&self) -> std::sync::MutexGuard<'_, FollowerStatus> {
        self.follower.lock().expect("follower lock")
    }

    /// Adds `bytes` streamed to replica `id`.
    pub(crate) fn note_streamed(&self, id: u64, bytes: u64) {
        self.counters
            .bytes_streamed
            .fetch_add(bytes, Ordering::Relaxed);
        *self
            .streamed_by_replica
            .lock()
            .expect("streamed lock")
            .entry(id)
            .or_default() += bytes;
    }

    /// Bytes streamed to replica `id` so far.
    pub(crate) fn streamed_to(&self, id: u64) -> u64 {
        self.streamed_by_replica
            .lock()
            .expect("streamed lock")
            .get(&id)
            .copied()
            .unwrap_or(0)
    }

    /// Runs the in-sync tick (`haMaxTimeSlaveNotCatchup`) until `stop`.
    pub async fn run_ticks(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let period =
            (self.settings.max_lag / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {
                    if self.role().is_master() {
                        let end = self.store.committed_end();
                        self.update(|set| set.tick(end, Instant::now()));
                    }
                }
                _ = stop.changed() => return,
            }
        }
    }
}
