//! The replicated state: every broker group's members, master, epochs and in-sync set, and
//! the commands that change it. Pure and deterministic: no I/O, no clock, no randomness, so
//! every controller that applies the same Raft log holds the same state.
//!
//! Invariants (checked by the unit tests at the foot of this file):
//! 1. A group's `master_epoch` and `sync_state_set_epoch` never decrease; each rises by
//!    exactly one per applied change (elections change both when they name a master).
//! 2. When a group has a master, the master is a member and in the in-sync set.
//! 3. The in-sync set only holds member ids; broker id 0 is never a member id.
//! 4. A command that fails validation changes nothing (apply re-validates what the leader
//!    checked before proposing, so two racing proposals cannot both apply).

use std::collections::{BTreeMap, BTreeSet};

use ferromq_protocol::controller::{AlterSyncStateSetReply, BrokerMember, ReplicaInfo};
use ferromq_protocol::remoting::response;
use serde::{Deserialize, Serialize};

/// One broker group (`brokerName` within `brokerClusterName`) as the controller holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    /// `brokerClusterName`, fixed at the group's first registration.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// Members by id.
    pub members: BTreeMap<u64, BrokerMember>,
    /// The master's id, `None` while the group has none.
    pub master_id: Option<u64>,
    /// Rises by one at every election.
    pub master_epoch: u64,
    /// The in-sync set, master included.
    pub sync_state_set: BTreeSet<u64>,
    /// Rises by one at every change of the set.
    pub sync_state_set_epoch: u64,
    /// The id the next broker without one gets (1 and up).
    pub next_broker_id: u64,
}

impl GroupRecord {
    fn new(cluster_name: &str, broker_name: &str) -> GroupRecord {
        GroupRecord {
            cluster_name: cluster_name.to_owned(),
            broker_name: broker_name.to_owned(),
            next_broker_id: 1,
            ..GroupRecord::default()
        }
    }

    /// The group's state in the contract's shape.
    pub fn replica_info(&self) -> ReplicaInfo {
        let master = self.master_id.and_then(|id| self.members.get(&id));
        ReplicaInfo {
            cluster_name: self.cluster_name.clone(),
            broker_name: self.broker_name.clone(),
            master_broker_id: self.master_id,
            master_address: master.map(|m| m.broker_address.clone()),
            master_ha_address: master.map(|m| m.ha_address.clone()),
            master_epoch: self.master_epoch,
            sync_state_set: self.sync_state_set.iter().copied().collect(),
            sync_state_set_epoch: self.sync_state_set_epoch,
        }
    }
}

/// A change to the state, proposed by the leader and applied by every controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Command {
    /// A broker joins its group (new id when `broker_id` is `None`).
    RegisterBroker {
        /// `brokerClusterName`.
        cluster_name: String,
        /// `brokerName`.
        broker_name: String,
        /// The broker's id if it has one.
        broker_id: Option<u64>,
        /// Remoting address.
        broker_address: String,
        /// HA address.
        ha_address: String,
        /// `electionPriority`.
        election_priority: u32,
    },
    /// The group's master becomes `new_master` (`None`: no master), if the group is still at
    /// `expected_master_epoch`.
    Elect {
        /// `brokerClusterName`.
        cluster_name: String,
        /// `brokerName`.
        broker_name: String,
        /// The new master.
        new_master: Option<u64>,
        /// The master epoch the leader decided under.
        expected_master_epoch: u64,
    },
    /// The master changes its in-sync set.
    AlterSyncStateSet {
        /// `brokerClusterName`.
        cluster_name: String,
        /// `brokerName`.
        broker_name: String,
        /// The requesting master.
        master_broker_id: u64,
        /// The master epoch it holds.
        master_epoch: u64,
        /// The new set.
        new_sync_state_set: Vec<u64>,
        /// The set epoch it holds.
        sync_state_set_epoch: u64,
    },
    /// Forget members (empty: the whole group).
    CleanBrokerData {
        /// `brokerClusterName`.
        cluster_name: String,
        /// `brokerName`.
        broker_name: String,
        /// Ids to forget; empty forgets the group.
        broker_ids: Vec<u64>,
    },
}

/// What applying a [`Command`] did; maps one to one onto a contract reply or error code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum ApplyOutcome {
    /// A broker is registered under `broker_id`.
    Registered {
        /// Its id.
        broker_id: u64,
        /// Its group now.
        replica_info: ReplicaInfo,
    },
    /// An election applied.
    Elected {
        /// The group now.
        replica_info: ReplicaInfo,
    },
    /// The in-sync set changed.
    SyncStateSetAltered {
        /// The set and epoch now.
        reply: AlterSyncStateSetReply,
    },
    /// Members (or the group) are forgotten.
    Cleaned,
    /// Membership changes and blank entries change nothing here.
    Nothing,
    /// Validation failed; nothing changed.
    Rejected {
        /// A controller response code (2000-2016).
        code: i32,
        /// Why.
        remark: String,
    },
}

/// A validation failure before it becomes an [`ApplyOutcome::Rejected`].
struct Rejection(i32, String);

fn rejected(code: i32, remark: String) -> ApplyOutcome {
    ApplyOutcome::Rejected { code, remark }
}

/// Every group, by `brokerName`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerState {
    /// Groups by broker name.
    pub groups: BTreeMap<String, GroupRecord>,
}

impl ControllerState {
    /// The group named `broker_name`.
    pub fn group(&self, broker_name: &str) -> Option<&GroupRecord> {
        self.groups.get(broker_name)
    }

    /// Applies one command. Deterministic: the outcome depends only on `self` and `command`.
    pub fn apply(&mut self, command: &Command) -> ApplyOutcome {
        match command {
            Command::RegisterBroker {
                cluster_name,
                broker_name,
                broker_id,
                broker_address,
                ha_address,
                election_priority,
            } => {
                let member = BrokerMember {
                    broker_id: broker_id.unwrap_or(0),
                    broker_address: broker_address.clone(),
                    ha_address: ha_address.clone(),
                    election_priority: *election_priority,
                };
                self.register(cluster_name, broker_name, member, broker_id.is_none())
            }
            Command::Elect {
                cluster_name,
                broker_name,
                new_master,
                expected_master_epoch,
            } => self.elect(
                cluster_name,
                broker_name,
                *new_master,
                *expected_master_epoch,
            ),
            Command::AlterSyncStateSet {
                cluster_name,
                broker_name,
                master_broker_id,
                master_epoch,
                new_sync_state_set,
                sync_state_set_epoch,
            } => self.alter_sync_state_set(
                cluster_name,
                broker_name,
                (*master_broker_id, *master_epoch),
                new_sync_state_set,
                *sync_state_set_epoch,
            ),
            Command::CleanBrokerData {
                cluster_name,
                broker_name,
                broker_ids,
            } => self.clean(cluster_name, broker_name, broker_ids),
        }
    }

    /// The group for a request, or the rejection saying why not.
    fn group_mut(
        &mut self,
        cluster_name: &str,
        broker_name: &str,
    ) -> Result<&mut GroupRecord, Rejection> {
        match self.groups.get_mut(broker_name) {
            None => Err(Rejection(
                response::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                format!("broker group {broker_name} is not known to the controller"),
            )),
            Some(group) if group.cluster_name != cluster_name => Err(Rejection(
                response::CONTROLLER_INVALID_REQUEST,
                format!(
                    "broker group {broker_name} belongs to cluster {}, not {cluster_name}",
                    group.cluster_name
                ),
            )),
            Some(group) => Ok(group),
        }
    }

    fn register(
        &mut self,
        cluster_name: &str,
        broker_name: &str,
        mut member: BrokerMember,
        assign_id: bool,
    ) -> ApplyOutcome {
        if cluster_name.is_empty() || broker_name.is_empty() {
            return rejected(
                response::CONTROLLER_INVALID_REQUEST,
                "clusterName and brokerName must not be empty".into(),
            );
        }
        if !assign_id && member.broker_id == 0 {
            return rejected(
                response::CONTROLLER_BROKER_ID_INVALID,
                "broker id 0 is never a controller member id (ids start at 1)".into(),
            );
        }
        let group = self
            .groups
            .entry(broker_name.to_owned())
            .or_insert_with(|| GroupRecord::new(cluster_name, broker_name));
        if group.cluster_name != cluster_name {
            return rejected(
                response::CONTROLLER_INVALID_REQUEST,
                format!(
                    "broker group {broker_name} belongs to cluster {}, not {cluster_name}",
                    group.cluster_name
                ),
            );
        }
        if assign_id {
            member.broker_id = group.next_broker_id;
        }
        let broker_id = member.broker_id;
        group.next_broker_id = group.next_broker_id.max(broker_id + 1);
        group.members.insert(broker_id, member);
        ApplyOutcome::Registered {
            broker_id,
            replica_info: group.replica_info(),
        }
    }

    fn elect(
        &mut self,
        cluster_name: &str,
        broker_name: &str,
        new_master: Option<u64>,
        expected_master_epoch: u64,
    ) -> ApplyOutcome {
        let group = match self.group_mut(cluster_name, broker_name) {
            Ok(group) => group,
            Err(Rejection(code, remark)) => return rejected(code, remark),
        };
        if group.master_epoch != expected_master_epoch {
            return rejected(
                response::CONTROLLER_FENCED_MASTER_EPOCH,
                format!(
                    "election decided at master epoch {expected_master_epoch}, group is at {}",
                    group.master_epoch
                ),
            );
        }
        match new_master {
            Some(id) if !group.members.contains_key(&id) => rejected(
                response::CONTROLLER_ELECT_MASTER_FAILED,
                format!("broker {id} is not a member of {broker_name}"),
            ),
            Some(id) => {
                group.master_id = Some(id);
                group.master_epoch += 1;
                group.sync_state_set = BTreeSet::from([id]);
                group.sync_state_set_epoch += 1;
                ApplyOutcome::Elected {
                    replica_info: group.replica_info(),
                }
            }
            None => {
                // The set is kept: its members stay the clean candidates when they return.
                group.master_id = None;
                group.master_epoch += 1;
                ApplyOutcome::Elected {
                    replica_info: group.replica_info(),
                }
            }
        }
    }

    fn alter_sync_state_set(
        &mut self,
        cluster_name: &str,
        broker_name: &str,
        (master_broker_id, master_epoch): (u64, u64),
        new_sync_state_set: &[u64],
        sync_state_set_epoch: u64,
    ) -> ApplyOutcome {
        let group = match self.group_mut(cluster_name, broker_name) {
            Ok(group) => group,
            Err(Rejection(code, remark)) => return rejected(code, remark),
        };
        if group.master_id != Some(master_broker_id) || group.master_epoch != master_epoch {
            return rejected(
                response::CONTROLLER_FENCED_MASTER_EPOCH,
                format!(
                    "request from master {master_broker_id} at epoch {master_epoch}; \
                     the group's master is {:?} at epoch {}",
                    group.master_id, group.master_epoch
                ),
            );
        }
        if group.sync_state_set_epoch != sync_state_set_epoch {
            return rejected(
                response::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                format!(
                    "request at sync state set epoch {sync_state_set_epoch}; the group is at {}",
                    group.sync_state_set_epoch
                ),
            );
        }
        let new_set: BTreeSet<u64> = new_sync_state_set.iter().copied().collect();
        if !new_set.contains(&master_broker_id) {
            return rejected(
                response::CONTROLLER_INVALID_REPLICAS,
                format!("the new set {new_sync_state_set:?} lacks the master {master_broker_id}"),
            );
        }
        if let Some(stranger) = new_set.iter().find(|id| !group.members.contains_key(id)) {
            return rejected(
                response::CONTROLLER_INVALID_REPLICAS,
                format!("broker {stranger} in the new set is not a registered member"),
            );
        }
        group.sync_state_set = new_set;
        group.sync_state_set_epoch += 1;
        ApplyOutcome::SyncStateSetAltered {
            reply: AlterSyncStateSetReply {
                sync_state_set: group.sync_state_set.iter().copied().collect(),
                sync_state_set_epoch: group.sync_state_set_epoch,
            },
        }
    }

    fn clean(&mut self, cluster_name: &str, broker_name: &str, broker_ids: &[u64]) -> ApplyOutcome {
        let group = match self.group_mut(cluster_name, broker_name) {
            Ok(group) => group,
            Err(Rejection(code, remark)) => return rejected(code, remark),
        };
        if broker_ids.is_empty() {
            self.groups.remove(broker_name);
            return ApplyOutcome::Cleaned;
        }
        if let Some(unknown) = broker_ids.iter().find(|id| !group.members.contains_key(id)) {
            return rejected(
                response::CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                format!("broker {unknown} is not a member of {broker_name}"),
            );
        }
        for id in broker_ids {
            group.members.remove(id);
            if group.sync_state_set.remove(id) {
                group.sync_state_set_epoch += 1;
            }
            if group.master_id == Some(*id) {
                // Removing the master is a change of master: brokers holding the old epoch
                // are fenced from then on.
                group.master_id = None;
                group.master_epoch += 1;
            }
        }
        ApplyOutcome::Cleaned
    }
}

#[cfg(test)]
mod tests;
