//! The controller protocol: what brokers, admin tools and controller peers say to a ferromq
//! controller (`ferromq controller`), over remoting frames.
//!
//! Request codes are RocketMQ's controller codes (`CONTROLLER_*` 1001–1013, BROKER_HEARTBEAT
//! 904); error replies use RocketMQ's controller response codes (2000–2016) with a remark
//! saying why. Every request and reply carries its data as a JSON body in the types below
//! (camelCase, as RocketMQ's JSON bodies), so ferromq's own peers never depend on
//! header parsing; where RocketMQ tools read a field from a header, the reply also carries it
//! as an ext field of the same name ([`ReplicaInfo::ext_fields`]).
//!
//! Raft traffic between controller peers uses ferromq's own request codes
//! ([`RAFT_APPEND_ENTRIES`], [`RAFT_VOTE`], [`RAFT_INSTALL_SNAPSHOT`]) with openraft's
//! messages serialised as JSON bodies by the controller crate.
//!
//! Semantics (kept by `crates/controller`, relied on by the broker):
//! - Broker ids in controller mode are assigned by the controller, from 1 upwards, and kept
//!   by the broker in its store directory; id 0 is never a member id (a master registers with
//!   the name servers under 0, as in RocketMQ).
//! - `master_epoch` rises by one at every election; `sync_state_set_epoch` at every change of
//!   the in-sync set (elections included).
//! - Only a request naming the current master id and master epoch may change the in-sync set
//!   (`FENCED_MASTER_EPOCH` otherwise); it must also name the current set epoch
//!   (`FENCED_SYNC_STATE_SET_EPOCH` otherwise).
//! - A controller that is not the Raft leader answers `CONTROLLER_NOT_LEADER` with
//!   [`LEADER_ADDRESS_EXT`] naming the leader's address when it knows it.
//! - A heartbeat reply is sent only after the leader confirmed its leadership with a quorum
//!   after the heartbeat arrived (a linearizable read), so a broker's lease, measured from
//!   when it sent the heartbeat, can never outlive a leadership the controller group has
//!   already moved on from.

pub mod client;

use serde::{Deserialize, Serialize};

use crate::remoting::ExtFields;

/// ferromq's request code for openraft's AppendEntries between controller peers.
pub const RAFT_APPEND_ENTRIES: i32 = 61001;
/// ferromq's request code for openraft's Vote between controller peers.
pub const RAFT_VOTE: i32 = 61002;
/// ferromq's request code for openraft's InstallSnapshot between controller peers.
pub const RAFT_INSTALL_SNAPSHOT: i32 = 61003;

/// Ext field of a `CONTROLLER_NOT_LEADER` reply: the leader's remoting address, if known.
pub const LEADER_ADDRESS_EXT: &str = "leaderAddress";

/// One broker group's replication state as the controller holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaInfo {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The master's broker id; `None` while the group has no master.
    pub master_broker_id: Option<u64>,
    /// The master's remoting address.
    pub master_address: Option<String>,
    /// The master's HA (replication) address.
    pub master_ha_address: Option<String>,
    /// The master epoch (0 before the first election).
    pub master_epoch: u64,
    /// Broker ids of the in-sync set (the master included).
    pub sync_state_set: Vec<u64>,
    /// The in-sync set's epoch.
    pub sync_state_set_epoch: u64,
}

impl ReplicaInfo {
    /// The fields RocketMQ tools read from a reply header, as ext fields.
    pub fn ext_fields(&self) -> ExtFields {
        let mut ext = ExtFields::new();
        if let Some(id) = self.master_broker_id {
            ext.insert("masterBrokerId", id.to_string());
        }
        if let Some(addr) = &self.master_address {
            ext.insert("masterAddress", addr.clone());
        }
        ext.insert("masterEpoch", self.master_epoch.to_string());
        ext.insert("syncStateSetEpoch", self.sync_state_set_epoch.to_string());
        ext
    }
}

/// A member of a broker group as the controller knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerMember {
    /// Controller-assigned broker id (1 and up).
    pub broker_id: u64,
    /// Remoting address.
    pub broker_address: String,
    /// HA address.
    pub ha_address: String,
    /// Lower is preferred among equals (`electionPriority`).
    pub election_priority: u32,
}

/// CONTROLLER_REGISTER_BROKER (1003): a broker in controller mode joins its group. A broker
/// without an id (`broker_id: None`) gets the next free one; a broker with one keeps it
/// (its address may have changed). Reply: [`RegisterBrokerReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBrokerRequest {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The id kept in the broker's store directory, if it has one.
    pub broker_id: Option<u64>,
    /// Remoting address.
    pub broker_address: String,
    /// HA address.
    pub ha_address: String,
    /// `electionPriority` (lower is preferred).
    pub election_priority: u32,
    /// The newest epoch in the broker's epoch file.
    pub epoch: u64,
    /// The broker's log end.
    pub max_offset: u64,
}

/// Reply to [`RegisterBrokerRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBrokerReply {
    /// The broker's id (assigned now or kept).
    pub broker_id: u64,
    /// Its group's state.
    pub replica_info: ReplicaInfo,
}

/// BROKER_HEARTBEAT (904) to the controller leader: the broker is alive (its lease), and
/// where its log stands (election order). Reply: [`HeartbeatReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatRequest {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The broker's id.
    pub broker_id: u64,
    /// Remoting address.
    pub broker_address: String,
    /// The newest epoch in the broker's epoch file.
    pub epoch: u64,
    /// The broker's log end.
    pub max_offset: u64,
    /// The broker's dispatched (consumer-visible) end.
    pub confirm_offset: u64,
    /// `electionPriority`.
    pub election_priority: u32,
}

/// Reply to [`HeartbeatRequest`]: the group's state now (a broker reconciles its role with
/// it) and how long the broker may act on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatReply {
    /// The group's state.
    pub replica_info: ReplicaInfo,
    /// The lease, from when the broker sent the heartbeat: a master whose last confirmed
    /// heartbeat was sent longer ago stops acknowledging writes. Always shorter than the time
    /// after which the controller declares a silent broker dead.
    pub lease_millis: u64,
}

/// CONTROLLER_ALTER_SYNC_STATE_SET (1001): the master asks to change its in-sync set. The
/// master may not shrink its set on its own: it keeps waiting for a member until this
/// request succeeded. Reply: [`AlterSyncStateSetReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlterSyncStateSetRequest {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The requesting master's id.
    pub master_broker_id: u64,
    /// The master epoch it holds.
    pub master_epoch: u64,
    /// The new set (must contain the master).
    pub new_sync_state_set: Vec<u64>,
    /// The set epoch the master holds now.
    pub sync_state_set_epoch: u64,
}

/// Reply to [`AlterSyncStateSetRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlterSyncStateSetReply {
    /// The set now.
    pub sync_state_set: Vec<u64>,
    /// Its epoch now.
    pub sync_state_set_epoch: u64,
}

/// CONTROLLER_ELECT_MASTER (1002): an admin (`electMaster`) or the controller itself elects
/// a master. With `broker_id`, that broker must be alive and (unless unclean election is
/// enabled) in the in-sync set. Reply: [`ReplicaInfo`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElectMasterRequest {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// A designated broker, or `None` for the election order.
    pub broker_id: Option<u64>,
    /// Set by a broker the controller still names master of the epoch its own log ends
    /// with, after a restart: that term is over (the broker's unreplicated tail and its
    /// replicas' logs may differ), so the controller elects afresh among the in-sync members
    /// in the election order, the restarted broker included, always at a new epoch.
    /// `broker_id` is then `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew: Option<TermRenewal>,
}

/// A restarted master's request to end its term (see [`ElectMasterRequest::renew`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TermRenewal {
    /// The restarted broker, which the controller names master.
    pub broker_id: u64,
    /// The epoch it was named master of: a renewal of an older epoch is refused.
    pub master_epoch: u64,
}

/// CONTROLLER_GET_REPLICA_INFO (1004): one group's state. Reply: [`ReplicaInfo`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetReplicaInfoRequest {
    /// `brokerName`.
    pub broker_name: String,
}

/// Reply to CONTROLLER_GET_METADATA_INFO (1005): the controller group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerMetadata {
    /// `controllerDLegerGroup`.
    pub group: String,
    /// The Raft leader's node id, if known.
    pub controller_leader_id: Option<u64>,
    /// The Raft leader's address, if known.
    pub controller_leader_address: Option<String>,
    /// Whether the answering node is the leader.
    pub is_leader: bool,
    /// Every peer (`n0-127.0.0.1:9878` style ids and addresses).
    pub peers: Vec<ControllerPeer>,
    /// The answering node's id.
    pub self_id: u64,
    /// The current Raft term.
    pub term: u64,
    /// The answering node's Raft role and election counters (ferromq addition; absent from
    /// controllers that do not report them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ControllerMetrics>,
}

/// What a controller node reports about its Raft role and the elections it ran as leader
/// (counters are per node and start at zero when the process starts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerMetrics {
    /// Raft role: `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub raft_state: String,
    /// Last applied Raft log index.
    pub last_applied_index: Option<u64>,
    /// Times this node became leader.
    pub leader_terms_won: u64,
    /// Elections applied that named a master in the in-sync set (or the first master).
    pub elections_clean: u64,
    /// Elections applied that named a master outside the in-sync set.
    pub elections_unclean: u64,
    /// Elections applied that left a group without a master (its master died, no
    /// candidate).
    pub elections_no_master: u64,
    /// Failure-detector scans that found a group needing a master and no candidate.
    pub elections_no_candidate: u64,
    /// Elections refused at apply because the group's epoch had moved on.
    pub elections_fenced: u64,
    /// Elections that could not be proposed (leadership lost, storage error).
    pub elections_failed: u64,
    /// Milliseconds from detecting a dead or missing master to the applied election, last.
    pub election_millis_last: Option<u64>,
    /// The same, largest seen.
    pub election_millis_max: u64,
}

/// One controller peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerPeer {
    /// Node id.
    pub id: u64,
    /// Remoting address.
    pub address: String,
}

/// CONTROLLER_GET_SYNC_STATE_DATA (1006): groups' states and members. Reply:
/// [`SyncStateData`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetSyncStateDataRequest {
    /// Broker names; empty means every group.
    pub broker_names: Vec<String>,
}

/// Reply to [`GetSyncStateDataRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncStateData {
    /// One entry per group asked for that exists.
    pub groups: Vec<GroupState>,
}

/// One group's state and members with their liveness as the leader sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupState {
    /// The group's replication state.
    pub replica_info: ReplicaInfo,
    /// Its members.
    pub members: Vec<MemberState>,
}

/// A member and what its last heartbeat said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberState {
    /// The member.
    pub member: BrokerMember,
    /// Whether the leader heard from it within the heartbeat timeout.
    pub alive: bool,
    /// Milliseconds since its last heartbeat reached the leader, if one did.
    pub last_heartbeat_ago_millis: Option<u64>,
    /// Newest epoch it reported.
    pub epoch: u64,
    /// Log end it reported.
    pub max_offset: u64,
    /// Confirm offset it reported.
    pub confirm_offset: u64,
}

/// CLEAN_BROKER_DATA (1011): forget members of a group (mqadmin `cleanBrokerMetadata`).
/// Ids empty: the whole group. A live member is removed only with `clean_living_broker`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanBrokerDataRequest {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// Ids to remove (empty: all).
    pub broker_ids: Vec<u64>,
    /// Remove members the leader still hears from.
    pub clean_living_broker: bool,
}

/// NOTIFY_BROKER_ROLE_CHANGED (1008), controller → broker, one-way and best effort: the
/// group's state changed (heartbeat replies carry the same, so a lost notice only delays).
pub type RoleChangedNotice = ReplicaInfo;

/// GET_BROKER_EPOCH_CACHE (1007), to a broker: its epoch entries. Reply:
/// [`BrokerEpochCache`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerEpochCache {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// The broker's id.
    pub broker_id: u64,
    /// Epoch entries, oldest first; `end_offset` is the next entry's start, or the log end.
    /// Written as `epochList` (RocketMQ's `EpochEntryCache`, read by `mqadmin
    /// getBrokerEpoch`); `epochs` is read too.
    #[serde(rename = "epochList", alias = "epochs")]
    pub epochs: Vec<EpochEntryInfo>,
    /// The broker's log end.
    pub max_offset: u64,
}

/// One epoch of a broker's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochEntryInfo {
    /// The master epoch.
    pub epoch: u64,
    /// First CommitLog offset written under it.
    pub start_offset: u64,
    /// Where it ends.
    pub end_offset: u64,
}

impl ControllerMetadata {
    /// The fields RocketMQ's `GetMetaDataResponseHeader` carries, as ext fields (Java
    /// `mqadmin getControllerMetaData` reads them from the reply header): `group`,
    /// `controllerLeaderId`, `controllerLeaderAddress`, `isLeader` and `peers` as
    /// `n<id>-<address>` joined by `;`.
    pub fn ext_fields(&self) -> ExtFields {
        let mut ext = ExtFields::new();
        ext.insert("group", self.group.clone());
        if let Some(id) = self.controller_leader_id {
            ext.insert("controllerLeaderId", format!("n{id}"));
        }
        if let Some(addr) = &self.controller_leader_address {
            ext.insert("controllerLeaderAddress", addr.clone());
        }
        ext.insert("isLeader", self.is_leader.to_string());
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|p| format!("n{}-{}", p.id, p.address))
            .collect();
        ext.insert("peers", peers.join(";"));
        ext
    }
}

/// RocketMQ's `BrokerReplicasInfo`: the reply to a CONTROLLER_GET_SYNC_STATE_DATA (1006) sent
/// in Java's form (a JSON array of broker names as the body), which `mqadmin
/// getSyncStateSet` reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaBrokerReplicasInfo {
    /// Per broker name.
    pub replicas_info_table: std::collections::BTreeMap<String, JavaReplicasInfo>,
}

/// One group in [`JavaBrokerReplicasInfo`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaReplicasInfo {
    /// The master's id; absent without a master.
    pub master_broker_id: Option<u64>,
    /// The master's address; absent without a master.
    pub master_address: Option<String>,
    /// The master epoch.
    pub master_epoch: u64,
    /// The in-sync set's epoch.
    pub sync_state_set_epoch: u64,
    /// Members in the in-sync set.
    pub in_sync_replicas: Vec<JavaReplicaIdentity>,
    /// Members outside it.
    pub not_in_sync_replicas: Vec<JavaReplicaIdentity>,
}

/// One member in [`JavaReplicasInfo`] (`ReplicaIdentity`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaReplicaIdentity {
    /// `brokerName`.
    pub broker_name: String,
    /// Broker id.
    pub broker_id: u64,
    /// Remoting address.
    pub broker_address: String,
    /// Whether the controller leader hears its heartbeats (`alive` in 5.0-5.1).
    pub alive: bool,
    /// The same (`online` in later 5.x releases).
    pub online: bool,
}

impl JavaBrokerReplicasInfo {
    /// Java's form of `data`.
    pub fn from_sync_state_data(data: &SyncStateData) -> JavaBrokerReplicasInfo {
        let mut out = JavaBrokerReplicasInfo::default();
        for group in &data.groups {
            let info = &group.replica_info;
            let mut entry = JavaReplicasInfo {
                master_broker_id: info.master_broker_id,
                master_address: info.master_address.clone(),
                master_epoch: info.master_epoch,
                sync_state_set_epoch: info.sync_state_set_epoch,
                ..JavaReplicasInfo::default()
            };
            for member in &group.members {
                let identity = JavaReplicaIdentity {
                    broker_name: info.broker_name.clone(),
                    broker_id: member.member.broker_id,
                    broker_address: member.member.broker_address.clone(),
                    alive: member.alive,
                    online: member.alive,
                };
                if info.sync_state_set.contains(&member.member.broker_id) {
                    entry.in_sync_replicas.push(identity);
                } else {
                    entry.not_in_sync_replicas.push(identity);
                }
            }
            out.replicas_info_table
                .insert(info.broker_name.clone(), entry);
        }
        out
    }
}
