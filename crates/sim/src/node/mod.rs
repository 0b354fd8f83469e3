//! One replica of the broker group in controller mode, driving the production state
//! machines: `controlled::decide` and `wanted_sync_state_set` (role changes and in-sync set
//! requests), `Lease` (may a master acknowledge), `InSyncSet` (members, acks, watermark),
//! `StreamState` (what a master sends a slave next), `judge_hello` (the master's verdict on a
//! Hello, truncation included) and `Follower` (a slave's appends through `ReplicaLog`).
//!
//! What is modelled rather than called: the glue of the production tokio tasks
//! (`ControllerLink::act`, `master::serve_replica`/`stream`, `slave::follow`/`receive`,
//! `Replication::{promote, demote, step_down, replicated}`): which message goes where, and
//! when. Each handler below names the production function it mirrors. Timeouts are scaled
//! down (production's 3–5 s become 1 s) so a run's virtual seconds see several failovers.
//!
//! Invariants:
//! 1. A master acknowledges a write only when its local flush holds it, every member of the
//!    in-sync set holds it (`InSyncSet::replicated`) and its lease is valid at that instant.
//! 2. A master exposes (dispatches) only up to the watermark, and only while its lease holds.
//! 3. Every volatile field is lost at a crash; only the [`SimLog`]'s disk survives.

mod master;
mod slave;

use std::collections::BTreeMap;
use std::time::Duration;

use ferromq_broker::replication::controlled::{self, Acting, RoleAction};
use ferromq_broker::replication::follower::{Follower, MasterTerm};
use ferromq_broker::replication::handshake::GroupIdentity;
use ferromq_broker::replication::in_sync::{InSyncSet, InSyncSettings};
use ferromq_broker::replication::lease::Lease;
use ferromq_broker::replication::stream::StreamState;
use ferromq_protocol::controller::{
    AlterSyncStateSetRequest, ElectMasterRequest, HeartbeatRequest, ReplicaInfo, TermRenewal,
};

use crate::clock::instant;
use crate::controller::{BROKER_NAME, CLUSTER};
use crate::log::{RecordMeta, SimLog};
use crate::msg::Msg;
use crate::net::NodeId;
use crate::InjectedBug;

/// The controller's node id.
pub const CONTROLLER: NodeId = 0;
/// Heartbeats to the controller and HA heartbeats, virtual ms.
pub const HEARTBEAT_INTERVAL_MS: u64 = 100;
/// `haMaxTimeSlaveNotCatchup`, virtual ms.
pub const MAX_LAG_MS: u64 = 1_000;
/// How long a SYNC_MASTER write waits for its replicas (`syncFlushTimeout`), virtual ms.
pub const SYNC_TIMEOUT_MS: u64 = 2_000;
/// How long a slave waits for a Welcome, virtual ms.
pub const WELCOME_TIMEOUT_MS: u64 = 1_000;
/// A slave's reconnect delay after a broken connection, virtual ms.
pub const BACKOFF_MS: u64 = 100;
/// A slave's reconnect delay after a refusal, virtual ms.
pub const REFUSED_BACKOFF_MS: u64 = 1_000;
/// Most writes a master holds waiting for replication (`SYNC_WAITERS_MAX` in production).
pub const PENDING_WRITES_MAX: usize = 1_024;
/// How long a master waits for the controller's answer to a set change (production: the
/// controller call's timeout), virtual ms.
pub const ALTER_TIMEOUT_MS: u64 = 3_000;
/// Most messages one pull returns.
pub const PULL_MESSAGES_MAX: usize = 16;
/// The segment size both sides announce (one segment: no end-of-segment markers).
pub const SEGMENT_SIZE_BYTES: u64 = 1 << 30;

/// What a handler asks of the world.
#[derive(Debug, Default)]
pub struct Out {
    /// Messages to send (from this node).
    pub sends: Vec<(NodeId, Msg)>,
    /// A flush to complete after this many virtual ms.
    pub flush_in_ms: Option<u64>,
    /// Facts for the checker.
    pub notes: Vec<Note>,
}

/// A fact a broker reports to the checker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A write (message or offset record) was acknowledged to its client.
    Acked {
        /// The record.
        record: RecordMeta,
    },
    /// Messages were served to a consumer; `limit` is the master's watermark then.
    Served {
        /// The records.
        records: Vec<RecordMeta>,
        /// The watermark (or durable end when the master alone bounds it).
        limit: u64,
    },
    /// A divergent suffix was cut.
    Truncated {
        /// The cut.
        to: u64,
        /// Dispatched (visible) end before the cut.
        dispatched_before: u64,
    },
    /// The broker took the master role at this epoch.
    Promoted {
        /// The epoch.
        epoch: u64,
    },
    /// An fsync failed: the broker poisons itself (the world crashes it).
    Poisoned {
        /// Why.
        reason: String,
    },
}

/// The role the broker acts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// SYNC_MASTER.
    Master,
    /// A slave (following `following`, or nobody).
    Slave,
}

/// A write waiting for replication.
#[derive(Debug, Clone)]
struct PendingWrite {
    client: NodeId,
    req: u64,
    /// The write's record; `None` for an offset command that wrote nothing (its verdict
    /// rests on everything appended before it, up to `end`).
    record: Option<RecordMeta>,
    /// What must be durable and replicated before the reply.
    end: u64,
    deadline_ms: u64,
    is_message: bool,
}

/// A master's stream to one slave.
#[derive(Debug, Clone)]
struct MasterStream {
    conn: u64,
    state: StreamState,
    last_heard_ms: u64,
}

/// Where a slave's connection stands.
#[derive(Debug, Clone)]
enum LinkPhase {
    AwaitingWelcome {
        sent_ms: u64,
    },
    Streaming {
        term: MasterTerm,
        follower: Follower,
    },
}

/// A slave's connection to its master.
#[derive(Debug, Clone)]
struct SlaveLink {
    master: u64,
    conn: u64,
    start: u64,
    phase: LinkPhase,
    last_read_ms: u64,
}

/// One replica.
#[derive(Debug)]
pub struct Broker {
    /// Its broker id (also its node id).
    pub id: u64,
    /// The log and its disk.
    pub log: SimLog,
    /// The role.
    pub role: Role,
    /// The lease.
    pub lease: Lease,
    /// The in-sync set (meaningful as master).
    pub in_sync: InSyncSet,
    known: Option<ReplicaInfo>,
    following: Option<u64>,
    min_master_epoch: u64,
    streams: BTreeMap<u64, MasterStream>,
    link: Option<SlaveLink>,
    reconnect_at_ms: u64,
    next_conn: u64,
    pending: Vec<PendingWrite>,
    flushing: Option<u64>,
    /// The in-sync set change asked of the controller and not yet answered.
    requested: Option<Vec<u64>>,
    requested_at_ms: u64,
    bug: InjectedBug,
}

impl Broker {
    /// A broker (re)started on `log`, a slave following nobody until the controller speaks.
    pub fn new(id: u64, log: SimLog, min_in_sync_replicas: usize, bug: InjectedBug) -> Broker {
        let settings = InSyncSettings {
            max_lag: Duration::from_millis(MAX_LAG_MS),
            min_in_sync_replicas,
        };
        // Production `Replication::new`: a broker that is not master shows what it showed
        // before it stopped (its dispatched end) until a master's watermark arrives.
        let visible = log.dispatched_end();
        log.set_replication_bound(Some(visible));
        Broker {
            id,
            in_sync: InSyncSet::new(settings, visible),
            log,
            role: Role::Slave,
            lease: Lease::default(),
            known: None,
            following: None,
            min_master_epoch: 0,
            streams: BTreeMap::new(),
            link: None,
            reconnect_at_ms: 0,
            next_conn: 0,
            pending: Vec::new(),
            flushing: None,
            requested: None,
            requested_at_ms: 0,
            bug,
        }
    }

    fn identity() -> GroupIdentity {
        GroupIdentity {
            cluster: CLUSTER.into(),
            broker_name: BROKER_NAME.into(),
            segment_size: SEGMENT_SIZE_BYTES,
        }
    }

    /// Whether it acts as master and may acknowledge now (role and lease).
    pub fn acknowledging(&self, now_ms: u64) -> bool {
        self.role == Role::Master && self.lease.valid(instant(now_ms))
    }

    /// The periodic work (production: `ControllerLink::run`'s heartbeat, `run_ticks`, the
    /// HA heartbeats and silence checks of both sides).
    pub fn tick(&mut self, now_ms: u64, out: &mut Out) {
        self.heartbeat(now_ms, out);
        match self.role {
            Role::Master => self.master_tick(now_ms, out),
            Role::Slave => self.slave_tick(now_ms, out),
        }
    }

    /// One BROKER_HEARTBEAT to the controller (production `ControllerLink::heartbeat`).
    fn heartbeat(&mut self, now_ms: u64, out: &mut Out) {
        let request = HeartbeatRequest {
            cluster_name: CLUSTER.into(),
            broker_name: BROKER_NAME.into(),
            broker_id: self.id,
            broker_address: String::new(),
            epoch: self.log.newest_epoch(),
            max_offset: self.log.end(),
            confirm_offset: self.log.dispatched_end(),
            election_priority: 0,
        };
        out.sends.push((
            CONTROLLER,
            Msg::Heartbeat {
                request,
                sent_at_ms: now_ms,
            },
        ));
    }

    /// One message from another node.
    pub fn on_message(&mut self, now_ms: u64, from: NodeId, msg: &Msg, out: &mut Out) {
        match msg {
            Msg::HeartbeatReply { reply, sent_at_ms } => {
                let info = &reply.replica_info;
                self.on_heartbeat_reply(now_ms, info, reply.lease_millis, *sent_at_ms, out);
            }
            Msg::AlterReply {
                master_epoch,
                outcome,
            } => self.on_alter_reply(now_ms, *master_epoch, outcome, out),
            // Production `ControllerLink::renew_term`: act on the new state only when the
            // controller elected at a new epoch; otherwise the next heartbeat asks again.
            Msg::RenewReply {
                epoch,
                outcome: Ok(info),
            } if info.master_epoch > *epoch => self.act(now_ms, info, out),
            // Production: a notice only wakes the heartbeat loop.
            Msg::Notice => self.heartbeat(now_ms, out),
            Msg::Ha { conn, frame } => self.on_ha(now_ms, from, *conn, frame, out),
            Msg::HaClosed { conn } => self.on_closed(now_ms, from, *conn, out),
            Msg::Send {
                req,
                msg_id,
                padding,
            } => self.on_send(now_ms, from, *req, *msg_id, *padding, out),
            Msg::Pull {
                req,
                from: queue_offset,
            } => self.on_pull(from, *req, *queue_offset, out),
            Msg::Offsets { req, command } => self.on_offsets(now_ms, from, *req, command, out),
            _ => {}
        }
    }

    /// A confirmed heartbeat (production `ControllerLink::heartbeat`): the lease is renewed
    /// from the send time when the reply names this broker master, then the state is acted on.
    pub fn on_heartbeat_reply(
        &mut self,
        now_ms: u64,
        info: &ReplicaInfo,
        lease_millis: u64,
        sent_at_ms: u64,
        out: &mut Out,
    ) {
        if info.master_broker_id == Some(self.id) {
            self.lease
                .renew(instant(sent_at_ms), Duration::from_millis(lease_millis));
        }
        self.act(now_ms, info, out);
    }

    /// Production `ControllerLink::act`: `controlled::decide`, then (as master) the
    /// controller's set and the set this master wants.
    fn act(&mut self, now_ms: u64, info: &ReplicaInfo, out: &mut Out) {
        let acting = Acting {
            me: self.id,
            master: self.role == Role::Master,
            epoch: self.known.as_ref().map_or(0, |k| k.master_epoch),
            following: self.following,
            log_epoch: self.log.newest_epoch(),
        };
        match controlled::decide(acting, info) {
            RoleAction::Keep => {}
            RoleAction::Renew { epoch } => {
                out.sends.push((
                    CONTROLLER,
                    Msg::Renew(ElectMasterRequest {
                        cluster_name: CLUSTER.into(),
                        broker_name: BROKER_NAME.into(),
                        broker_id: None,
                        renew: Some(TermRenewal {
                            broker_id: self.id,
                            master_epoch: epoch,
                        }),
                    }),
                ));
                return;
            }
            RoleAction::Promote { epoch } => {
                if !self.promote(now_ms, epoch, out) {
                    return;
                }
                // Production `heartbeat_soon_without_lease`: a master promoted by a renewal's
                // reply holds no lease yet, so it heartbeats at once.
                if !self.lease.valid(instant(now_ms)) {
                    self.heartbeat(now_ms, out);
                }
            }
            RoleAction::Follow {
                master_id, epoch, ..
            } => self.demote(now_ms, Some(master_id), epoch, out),
            RoleAction::StepDown => self.demote(now_ms, None, info.master_epoch, out),
        }
        self.known = Some(info.clone());
        if self.role == Role::Master {
            let requested = match self.bug {
                InjectedBug::GrowthNotWaitedFor => None,
                _ => self.requested.as_deref(),
            };
            let members = controlled::members_to_wait_for(&info.sync_state_set, requested);
            self.set_controlled(&members);
            self.reconcile_set(now_ms, info, out);
            self.refresh(now_ms, out);
        }
    }

    /// Production `Replication::set_controlled_set`: the master's own id is dropped.
    fn set_controlled(&mut self, members: &[u64]) {
        let me = self.id;
        self.in_sync
            .set_controlled(members.iter().copied().filter(|id| *id != me));
    }

    /// Production `reconcile_sync_state_set`: one request in flight at a time, and the
    /// replicas it asks for are waited for from the moment it is sent (`in_sync` rule 6).
    fn reconcile_set(&mut self, now_ms: u64, info: &ReplicaInfo, out: &mut Out) {
        let local = self.in_sync.local_members();
        let Some(wanted) = controlled::wanted_sync_state_set(self.id, &local, &info.sync_state_set)
        else {
            return;
        };
        if self.requested.is_some() {
            return;
        }
        self.requested = Some(wanted.clone());
        self.requested_at_ms = now_ms;
        if self.bug != InjectedBug::GrowthNotWaitedFor {
            let members = controlled::members_to_wait_for(&info.sync_state_set, Some(&wanted));
            self.set_controlled(&members);
        }
        out.sends.push((
            CONTROLLER,
            Msg::Alter(AlterSyncStateSetRequest {
                cluster_name: CLUSTER.into(),
                broker_name: BROKER_NAME.into(),
                master_broker_id: self.id,
                master_epoch: info.master_epoch,
                new_sync_state_set: wanted,
                sync_state_set_epoch: info.sync_state_set_epoch,
            }),
        ));
    }

    /// Production `alter_sync_state_set`'s reply handling.
    pub fn on_alter_reply(
        &mut self,
        now_ms: u64,
        master_epoch: u64,
        outcome: &Result<ferromq_protocol::controller::AlterSyncStateSetReply, String>,
        out: &mut Out,
    ) {
        self.requested = None;
        let Ok(reply) = outcome else {
            return;
        };
        if self.role != Role::Master {
            return;
        }
        self.set_controlled(&reply.sync_state_set);
        if let Some(known) = self.known.as_mut() {
            if known.master_epoch == master_epoch {
                known.sync_state_set = reply.sync_state_set.clone();
                known.sync_state_set_epoch = reply.sync_state_set_epoch;
            }
        }
        self.refresh(now_ms, out);
    }

    /// Production `Replication::promote`, after `expose_whole_log`. False when the epoch
    /// file refused the term.
    fn promote(&mut self, now_ms: u64, epoch: u64, out: &mut Out) -> bool {
        self.link = None;
        self.following = None;
        self.log.set_replication_bound(Some(self.log.end()));
        // Production logs the failure and leaves `known` as it was: the next heartbeat
        // tries again.
        let Ok(start) = self.log.begin_epoch(epoch) else {
            return false;
        };
        if self.bug != InjectedBug::StaleWatermarkAcrossTerms {
            self.in_sync.begin_term(start);
        }
        self.close_streams(out);
        self.role = Role::Master;
        out.notes.push(Note::Promoted { epoch });
        self.refresh(now_ms, out);
        true
    }

    /// Production `demote` / `step_down`: the lease goes, nothing new becomes visible, the
    /// streams close, waiting writes fail, and the slave follows `master` (if any).
    fn demote(&mut self, now_ms: u64, master: Option<u64>, epoch: u64, out: &mut Out) {
        self.lease.revoke();
        self.min_master_epoch = self.min_master_epoch.max(epoch);
        let visible = self.log.dispatched_end();
        let frozen = self
            .log
            .replication_bound()
            .map_or(visible, |b| b.min(visible));
        self.log.set_replication_bound(Some(frozen));
        self.close_streams(out);
        self.fail_pending("no longer master", out);
        self.role = Role::Slave;
        self.following = master;
        // A new master (or epoch) means a new connection and a new handshake.
        if let Some(link) = self.link.take() {
            out.sends
                .push((link.master as NodeId, Msg::HaClosed { conn: link.conn }));
        }
        self.reconnect_at_ms = now_ms;
    }

    /// Requests a flush if the log has unsynced bytes and none is running.
    fn request_flush(&mut self, out: &mut Out) {
        if self.flushing.is_some() || self.log.end() <= self.log.durable_end() {
            return;
        }
        self.flushing = Some(self.log.end());
        out.flush_in_ms = Some(self.log.with_disk(|d| d.fsync_delay_ms()));
    }

    /// A flush completed (production: the flush thread's fsync). A failed fsync poisons the
    /// broker; the world crashes it.
    pub fn on_flush_done(&mut self, now_ms: u64, out: &mut Out) {
        let Some(target) = self.flushing.take() else {
            return;
        };
        if let Err(error) = self.log.with_disk(|d| d.fsync_log(target)) {
            out.notes.push(Note::Poisoned {
                reason: error.to_string(),
            });
            return;
        }
        self.log.dispatch();
        match self.role {
            Role::Master => self.refresh(now_ms, out),
            Role::Slave => self.send_ack(out),
        }
        self.request_flush(out);
    }
}
