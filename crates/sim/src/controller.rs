//! The controller, modelled as one linearizable node (openraft is not what the simulation
//! tests): the production replicated state machine (`ControllerState::apply` with the
//! production `Command`s), the production failure detector table (`Liveness`) and the
//! production election functions (`election::needs_election`, `choose_master`, `decide`).
//!
//! What is modelled rather than called: the glue of `Core::scan_groups` / `Core::elect` and
//! of the heartbeat and alter handlers (a dozen lines each: read the group, ask the pure
//! functions, apply the command) — production runs it in async handlers on openraft. A
//! crash keeps the state (it is Raft-replicated) and loses the liveness table; a restart is a
//! new leader (`Liveness::became_leader`), which grants every broker a full timeout.
//!
//! Invariant: every change of the group goes through `ControllerState::apply`, which
//! re-validates it (fenced epochs, members only).

use std::time::Duration;

use ferromq_controller::election::{self, Choice, Decision};
use ferromq_controller::liveness::{Heard, Liveness};
use ferromq_controller::state::{ApplyOutcome, Command, ControllerState, GroupRecord};
use ferromq_controller::ControllerConfig;
use ferromq_protocol::controller::{
    AlterSyncStateSetRequest, ElectMasterRequest, HeartbeatReply, HeartbeatRequest, ReplicaInfo,
};

use crate::clock::{instant, millis};
use crate::msg::Msg;
use crate::swarm::REPLICA_COUNT;
use crate::InjectedBug;

/// `brokerClusterName` of the simulated group.
pub const CLUSTER: &str = "SimCluster";
/// `brokerName` of the simulated group.
pub const BROKER_NAME: &str = "sim-broker";

/// The HA address the controller lists for broker `id` (production `decide` parses it).
pub fn ha_address(id: u64) -> String {
    format!("127.0.0.1:{}", 20_000 + id)
}

/// The controller node.
#[derive(Debug)]
pub struct SimController {
    /// Whether it runs.
    pub up: bool,
    state: ControllerState,
    liveness: Liveness,
    config: ControllerConfig,
    bug: InjectedBug,
}

impl SimController {
    /// A controller with the production default timeouts, the group's replicas registered
    /// (ids 1..=[`REPLICA_COUNT`]).
    pub fn new(now_ms: u64, bug: InjectedBug) -> SimController {
        let config = ControllerConfig::default();
        let mut state = ControllerState::default();
        for id in 1..=REPLICA_COUNT {
            let outcome = state.apply(&Command::RegisterBroker {
                cluster_name: CLUSTER.into(),
                broker_name: BROKER_NAME.into(),
                broker_id: Some(id),
                broker_address: format!("127.0.0.1:{}", 10_000 + id),
                ha_address: ha_address(id),
                election_priority: 0,
            });
            debug_assert!(matches!(outcome, ApplyOutcome::Registered { .. }));
        }
        SimController {
            up: true,
            liveness: Liveness::new(config.heartbeat_timeout, instant(now_ms)),
            state,
            config,
            bug,
        }
    }

    /// The group as the state machine holds it.
    pub fn group(&self) -> &GroupRecord {
        self.state
            .group(BROKER_NAME)
            .expect("the group is registered at construction and never cleaned")
    }

    /// The lease a confirmed heartbeat grants.
    pub fn lease_ms(&self) -> u64 {
        millis(self.config.broker_lease)
    }

    /// The failure detector's period.
    pub fn scan_interval_ms(&self) -> u64 {
        millis(self.config.scan_interval)
    }

    /// The dead-after timeout.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.config.heartbeat_timeout
    }

    /// A crash: the liveness table is lost, the replicated state is not.
    pub fn crash(&mut self) {
        self.up = false;
    }

    /// A restart: a new leader, which grants every member a full timeout.
    pub fn restart(&mut self, now_ms: u64) {
        self.up = true;
        self.liveness.became_leader(instant(now_ms));
    }

    /// BROKER_HEARTBEAT: recorded in the liveness table, answered with the group and a lease.
    pub fn on_heartbeat(
        &mut self,
        now_ms: u64,
        request: &HeartbeatRequest,
        sent_at_ms: u64,
    ) -> Msg {
        self.liveness.record(
            &request.broker_name,
            request.broker_id,
            Heard {
                at: instant(now_ms),
                epoch: request.epoch,
                max_offset: request.max_offset,
                confirm_offset: request.confirm_offset,
                election_priority: request.election_priority,
            },
        );
        Msg::HeartbeatReply {
            reply: HeartbeatReply {
                replica_info: self.group().replica_info(),
                lease_millis: self.lease_ms(),
            },
            sent_at_ms,
        }
    }

    /// CONTROLLER_ALTER_SYNC_STATE_SET through the state machine.
    pub fn on_alter(&mut self, request: AlterSyncStateSetRequest) -> Msg {
        let master_epoch = request.master_epoch;
        let outcome = self.state.apply(&Command::AlterSyncStateSet {
            cluster_name: request.cluster_name,
            broker_name: request.broker_name,
            master_broker_id: request.master_broker_id,
            master_epoch: request.master_epoch,
            new_sync_state_set: request.new_sync_state_set,
            sync_state_set_epoch: request.sync_state_set_epoch,
        });
        let outcome = match outcome {
            ApplyOutcome::SyncStateSetAltered { reply } => Ok(reply),
            other => Err(format!("{other:?}")),
        };
        Msg::AlterReply {
            master_epoch,
            outcome,
        }
    }

    /// CONTROLLER_ELECT_MASTER with `renew` (production `Core::elect` with
    /// `ElectionOrigin::Renewal`): `election::decide_renewal`, then the election command.
    pub fn on_renew(&mut self, now_ms: u64, request: &ElectMasterRequest) -> Msg {
        let renewal = request.renew.unwrap_or_default();
        let group = self.group().clone();
        let candidates = self.liveness.candidates(&group, instant(now_ms));
        let decision =
            election::decide_renewal(&group, &candidates, renewal.broker_id, renewal.master_epoch);
        let outcome = match decision {
            Decision::Elect { broker_id, .. } => {
                match self.state.apply(&Command::Elect {
                    cluster_name: group.cluster_name.clone(),
                    broker_name: group.broker_name.clone(),
                    new_master: Some(broker_id),
                    expected_master_epoch: group.master_epoch,
                }) {
                    ApplyOutcome::Elected { replica_info } => Ok(replica_info),
                    other => Err(format!("{other:?}")),
                }
            }
            Decision::ClearMaster => Err("a renewal never clears the master".into()),
            Decision::Refuse { code, remark } => Err(format!("{code}: {remark}")),
        };
        Msg::RenewReply {
            epoch: renewal.master_epoch,
            outcome,
        }
    }

    /// One failure-detector pass (production `Core::scan_groups` then `Core::elect`); the
    /// group's new state when an election applied.
    pub fn scan(&mut self, now_ms: u64) -> Option<ReplicaInfo> {
        let group = self.group().clone();
        let candidates = self.liveness.candidates(&group, instant(now_ms));
        if !election::needs_election(&group, &candidates) {
            return None;
        }
        // The injected bug: every alive member counts as in sync.
        let judged = match self.bug {
            InjectedBug::ElectOutsideInSyncSet => GroupRecord {
                sync_state_set: Default::default(),
                ..group.clone()
            },
            _ => group.clone(),
        };
        let unclean = self.config.enable_elect_unclean_master;
        let choice = election::choose_master(&judged, &candidates, unclean);
        if choice == Choice::NoCandidate && group.master_id.is_none() {
            return None;
        }
        let new_master = match election::decide(&judged, &candidates, None, unclean) {
            Decision::Elect { broker_id, .. } => Some(broker_id),
            Decision::ClearMaster => None,
            Decision::Refuse { .. } => return None,
        };
        let outcome = self.state.apply(&Command::Elect {
            cluster_name: group.cluster_name.clone(),
            broker_name: group.broker_name.clone(),
            new_master,
            expected_master_epoch: group.master_epoch,
        });
        match outcome {
            ApplyOutcome::Elected { replica_info } => Some(replica_info),
            _ => None,
        }
    }

    /// Who is master, for clients (production: the name server's route).
    pub fn route(&self) -> Msg {
        Msg::RouteReply {
            master: self.group().master_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(id: u64, epoch: u64, end: u64) -> HeartbeatRequest {
        HeartbeatRequest {
            cluster_name: CLUSTER.into(),
            broker_name: BROKER_NAME.into(),
            broker_id: id,
            broker_address: String::new(),
            epoch,
            max_offset: end,
            confirm_offset: 0,
            election_priority: 0,
        }
    }

    #[test]
    fn a_dead_master_is_replaced_only_after_the_timeout_and_only_from_the_set() {
        let mut c = SimController::new(0, InjectedBug::None);
        for id in 1..=3 {
            c.on_heartbeat(0, &heartbeat(id, 0, 0), 0);
        }
        let first = c.scan(1).expect("a group without a master elects at once");
        let master = first.master_broker_id.expect("elected");
        assert_eq!(first.sync_state_set, vec![master]);
        let timeout = millis(c.heartbeat_timeout());
        // The others keep heartbeating; the master falls silent.
        let others: Vec<u64> = (1..=3).filter(|id| *id != master).collect();
        for id in &others {
            c.on_heartbeat(timeout, &heartbeat(*id, 1, 0), timeout);
        }
        assert!(c.scan(timeout).is_none(), "within the timeout");
        for id in &others {
            c.on_heartbeat(timeout + 500, &heartbeat(*id, 1, 0), timeout + 500);
        }
        // The set is {master}: nobody else may take over, so the master is cleared.
        let cleared = c.scan(timeout + 502).expect("cleared");
        assert_eq!(cleared.master_broker_id, None);
        assert_eq!(cleared.master_epoch, first.master_epoch + 1);
    }

    #[test]
    fn the_injected_bug_elects_outside_the_set() {
        let mut c = SimController::new(0, InjectedBug::ElectOutsideInSyncSet);
        c.on_heartbeat(0, &heartbeat(1, 0, 0), 0);
        let first = c.scan(1).expect("elected");
        assert_eq!(first.master_broker_id, Some(1));
        c.on_heartbeat(1500, &heartbeat(2, 1, 0), 1500);
        let second = c.scan(1500).expect("re-elected");
        assert_eq!(second.master_broker_id, Some(2), "2 was never in the set");
    }
}
