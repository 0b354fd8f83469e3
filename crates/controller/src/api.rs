//! Request handlers: the controller API (904, 1001-1006, 1011-1013) and the Raft RPCs
//! (61001-61003). Every handler decodes its JSON body itself; a body that does not decode
//! is answered CONTROLLER_INVALID_REQUEST, never a panic.
//!
//! Which node answers: Raft RPCs and CONTROLLER_GET_METADATA_INFO are answered by every
//! node; writes are answered by the leader (a follower's proposal fails with NOT_LEADER);
//! reads of the state and heartbeats are answered after a linearizable read, so a deposed
//! leader answers NOT_LEADER instead of stale state or a lease it cannot back.

use std::sync::Arc;
use std::time::Instant;

use ferromq_protocol::controller::{
    AlterSyncStateSetRequest, CleanBrokerDataRequest, ElectMasterRequest, GetReplicaInfoRequest,
    GetSyncStateDataRequest, GroupState, HeartbeatReply, HeartbeatRequest, JavaBrokerReplicasInfo,
    MemberState, RegisterBrokerReply, RegisterBrokerRequest, SyncStateData, LEADER_ADDRESS_EXT,
    RAFT_APPEND_ENTRIES, RAFT_INSTALL_SNAPSHOT, RAFT_VOTE,
};
use ferromq_protocol::remoting::{request, response, RemotingCommand};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::core::{Core, ElectionOrigin, Refusal};
use crate::liveness::Heard;
use crate::state::{ApplyOutcome, Command, GroupRecord};

/// A handler's answer: a JSON body (with optional ext fields) or a refusal.
type Answer = Result<(Vec<u8>, ferromq_protocol::remoting::ExtFields), Refusal>;

fn decode<T: DeserializeOwned>(command: &RemotingCommand) -> Result<T, Refusal> {
    let body = command.body.as_deref().unwrap_or(b"");
    serde_json::from_slice(body).map_err(|e| {
        Refusal::new(
            response::CONTROLLER_INVALID_REQUEST,
            format!(
                "request {} body is not valid JSON for it: {e}",
                command.code
            ),
        )
    })
}

fn json<T: Serialize>(value: &T) -> Answer {
    json_with(value, Default::default())
}

fn json_with<T: Serialize>(value: &T, ext: ferromq_protocol::remoting::ExtFields) -> Answer {
    serde_json::to_vec(value)
        .map(|body| (body, ext))
        .map_err(|e| {
            Refusal::new(
                response::SYSTEM_ERROR,
                format!("reply cannot be encoded: {e}"),
            )
        })
}

/// Answers one request.
pub async fn handle(core: &Arc<Core>, command: &RemotingCommand) -> RemotingCommand {
    let answer = dispatch(core, command).await;
    match answer {
        Ok((body, ext)) => {
            let mut reply = command.reply(response::SUCCESS, None).with_body(body);
            reply.ext_fields.extend(ext);
            reply
        }
        Err(refusal) => {
            let mut reply = command.reply(refusal.code, Some(refusal.remark));
            if let Some(address) = refusal.leader_address {
                reply.ext_fields.insert(LEADER_ADDRESS_EXT, address);
            }
            reply
        }
    }
}

async fn dispatch(core: &Arc<Core>, command: &RemotingCommand) -> Answer {
    match command.code {
        RAFT_APPEND_ENTRIES => json(&core.raft.append_entries(decode(command)?).await),
        RAFT_VOTE => json(&core.raft.vote(decode(command)?).await),
        RAFT_INSTALL_SNAPSHOT => json(&core.raft.install_snapshot(decode(command)?).await),
        request::BROKER_HEARTBEAT => heartbeat(core, decode(command)?).await,
        request::CONTROLLER_REGISTER_BROKER => register(core, decode(command)?).await,
        request::CONTROLLER_ALTER_SYNC_STATE_SET => {
            alter_sync_state_set(core, decode(command)?).await
        }
        request::CONTROLLER_ELECT_MASTER => elect_master(core, decode(command)?).await,
        request::CONTROLLER_GET_REPLICA_INFO => replica_info(core, decode(command)?).await,
        request::CONTROLLER_GET_METADATA_INFO => {
            let metadata = core.metadata();
            json_with(&metadata, metadata.ext_fields())
        }
        request::CONTROLLER_GET_SYNC_STATE_DATA if java_broker_names(command).is_some() => {
            let names = java_broker_names(command).unwrap_or_default();
            let request = GetSyncStateDataRequest {
                broker_names: names,
            };
            let data = sync_state(core, &request).await?;
            json(&JavaBrokerReplicasInfo::from_sync_state_data(&data))
        }
        request::CONTROLLER_GET_SYNC_STATE_DATA => sync_state_data(core, decode(command)?).await,
        request::CLEAN_BROKER_DATA => clean_broker_data(core, decode(command)?).await,
        request::CONTROLLER_GET_NEXT_BROKER_ID | request::CONTROLLER_APPLY_BROKER_ID => {
            Err(Refusal::new(
                response::REQUEST_CODE_NOT_SUPPORTED,
                "ferromq's controller assigns broker ids at CONTROLLER_REGISTER_BROKER (1003); \
             the two-step id protocol (1012/1013) is not served",
            ))
        }
        code => Err(Refusal::new(
            response::REQUEST_CODE_NOT_SUPPORTED,
            format!("request code {code} is not served by the ferromq controller"),
        )),
    }
}

fn registered_member(
    core: &Core,
    broker_name: &str,
    broker_id: u64,
) -> Result<GroupRecord, Refusal> {
    match core.group(broker_name) {
        Some(group) if group.members.contains_key(&broker_id) => Ok(group),
        _ => Err(Refusal::new(
            response::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            format!("broker {broker_id} of {broker_name} is not registered; register first (1003)"),
        )),
    }
}

async fn heartbeat(core: &Arc<Core>, request: HeartbeatRequest) -> Answer {
    let arrived = Instant::now();
    if !core.is_leader() {
        return Err(core.not_leader("heartbeats go to the leader"));
    }
    // The reply, and so the broker's lease, must not outlive this leadership: confirm it
    // with a quorum after the heartbeat arrived.
    core.ensure_leader().await?;
    let group = registered_member(core, &request.broker_name, request.broker_id)?;
    core.liveness.lock().expect("liveness lock").record(
        &request.broker_name,
        request.broker_id,
        Heard {
            at: arrived,
            epoch: request.epoch,
            max_offset: request.max_offset,
            confirm_offset: request.confirm_offset,
            election_priority: request.election_priority,
        },
    );
    let replica_info = group.replica_info();
    let ext = replica_info.ext_fields();
    json_with(
        &HeartbeatReply {
            replica_info,
            lease_millis: u64::try_from(core.config.broker_lease.as_millis()).unwrap_or(u64::MAX),
        },
        ext,
    )
}

async fn register(core: &Arc<Core>, request: RegisterBrokerRequest) -> Answer {
    let arrived = Instant::now();
    let outcome = core
        .propose(Command::RegisterBroker {
            cluster_name: request.cluster_name.clone(),
            broker_name: request.broker_name.clone(),
            broker_id: request.broker_id,
            broker_address: request.broker_address.clone(),
            ha_address: request.ha_address.clone(),
            election_priority: request.election_priority,
        })
        .await?;
    let (broker_id, mut replica_info) = match outcome {
        ApplyOutcome::Registered {
            broker_id,
            replica_info,
        } => (broker_id, replica_info),
        other => return Err(unexpected(other)),
    };
    core.liveness.lock().expect("liveness lock").record(
        &request.broker_name,
        broker_id,
        Heard {
            at: arrived,
            epoch: request.epoch,
            max_offset: request.max_offset,
            confirm_offset: 0,
            election_priority: request.election_priority,
        },
    );
    if replica_info.master_broker_id.is_none() {
        match core
            .elect(&request.broker_name, None, ElectionOrigin::Registration)
            .await
        {
            Ok(info) => replica_info = info,
            Err(refusal) => {
                tracing::info!(broker_name = %request.broker_name, broker_id, remark = %refusal.remark,
                    "no master elected at registration");
                if let Some(group) = core.group(&request.broker_name) {
                    replica_info = group.replica_info();
                }
            }
        }
    }
    let mut ext = replica_info.ext_fields();
    ext.insert("brokerId", broker_id.to_string());
    json_with(
        &RegisterBrokerReply {
            broker_id,
            replica_info,
        },
        ext,
    )
}

fn unexpected(outcome: ApplyOutcome) -> Refusal {
    match outcome {
        ApplyOutcome::Rejected { code, remark } => Refusal::new(code, remark),
        other => Refusal::new(
            response::CONTROLLER_JRAFT_INTERNAL_ERROR,
            format!("command applied as {other:?}"),
        ),
    }
}

async fn alter_sync_state_set(core: &Arc<Core>, request: AlterSyncStateSetRequest) -> Answer {
    let outcome = core
        .propose(Command::AlterSyncStateSet {
            cluster_name: request.cluster_name,
            broker_name: request.broker_name,
            master_broker_id: request.master_broker_id,
            master_epoch: request.master_epoch,
            new_sync_state_set: request.new_sync_state_set,
            sync_state_set_epoch: request.sync_state_set_epoch,
        })
        .await?;
    match outcome {
        ApplyOutcome::SyncStateSetAltered { reply } => json(&reply),
        other => Err(unexpected(other)),
    }
}

async fn elect_master(core: &Arc<Core>, request: ElectMasterRequest) -> Answer {
    core.ensure_leader().await?;
    match core.group(&request.broker_name) {
        Some(group)
            if group.cluster_name == request.cluster_name || request.cluster_name.is_empty() => {}
        Some(group) => {
            return Err(Refusal::new(
                response::CONTROLLER_INVALID_REQUEST,
                format!(
                    "broker group {} belongs to cluster {}, not {}",
                    request.broker_name, group.cluster_name, request.cluster_name
                ),
            ))
        }
        None => {
            return Err(Refusal::new(
                response::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                format!(
                    "broker group {} is not known to the controller",
                    request.broker_name
                ),
            ))
        }
    }
    let origin = match request.renew {
        Some(renewal) => ElectionOrigin::Renewal(renewal),
        None => ElectionOrigin::Admin,
    };
    let info = core
        .elect(&request.broker_name, request.broker_id, origin)
        .await?;
    let ext = info.ext_fields();
    json_with(&info, ext)
}

/// The group named `broker_name`, or CONTROLLER_BROKER_METADATA_NOT_EXIST.
fn known_group(core: &Core, broker_name: &str) -> Result<GroupRecord, Refusal> {
    core.group(broker_name).ok_or_else(|| {
        Refusal::new(
            response::CONTROLLER_BROKER_METADATA_NOT_EXIST,
            format!("broker group {broker_name} is not known to the controller"),
        )
    })
}

async fn replica_info(core: &Arc<Core>, request: GetReplicaInfoRequest) -> Answer {
    core.ensure_leader().await?;
    let group = known_group(core, &request.broker_name)?;
    let info = group.replica_info();
    let ext = info.ext_fields();
    json_with(&info, ext)
}

/// The broker names of a CONTROLLER_GET_SYNC_STATE_DATA in Java's form (`mqadmin
/// getSyncStateSet` sends a JSON array of names as the body); `None` for ferromq's form.
fn java_broker_names(command: &RemotingCommand) -> Option<Vec<String>> {
    let body = command.body.as_deref()?;
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'[') {
        return None;
    }
    serde_json::from_slice(body).ok()
}

async fn sync_state_data(core: &Arc<Core>, request: GetSyncStateDataRequest) -> Answer {
    json(&sync_state(core, &request).await?)
}

/// The groups `request` names (all when it names none) with their members' liveness.
async fn sync_state(
    core: &Arc<Core>,
    request: &GetSyncStateDataRequest,
) -> Result<SyncStateData, Refusal> {
    core.ensure_leader().await?;
    let groups: Vec<GroupRecord> = {
        let applied = core.state_machine.read();
        applied
            .state
            .groups
            .values()
            .filter(|g| {
                request.broker_names.is_empty() || request.broker_names.contains(&g.broker_name)
            })
            .cloned()
            .collect()
    };
    let now = Instant::now();
    let liveness = core.liveness.lock().expect("liveness lock");
    let groups = groups
        .iter()
        .map(|group| GroupState {
            replica_info: group.replica_info(),
            members: group
                .members
                .values()
                .map(|member| {
                    let heard = liveness.get(&group.broker_name, member.broker_id);
                    MemberState {
                        member: member.clone(),
                        alive: liveness.is_alive(&group.broker_name, member.broker_id, now),
                        last_heartbeat_ago_millis: heard.map(|h| {
                            u64::try_from(now.saturating_duration_since(h.at).as_millis())
                                .unwrap_or(u64::MAX)
                        }),
                        epoch: heard.map_or(0, |h| h.epoch),
                        max_offset: heard.map_or(0, |h| h.max_offset),
                        confirm_offset: heard.map_or(0, |h| h.confirm_offset),
                    }
                })
                .collect(),
        })
        .collect();
    drop(liveness);
    Ok(SyncStateData { groups })
}

async fn clean_broker_data(core: &Arc<Core>, request: CleanBrokerDataRequest) -> Answer {
    core.ensure_leader().await?;
    let group = known_group(core, &request.broker_name)?;
    let targets: Vec<u64> = if request.broker_ids.is_empty() {
        group.members.keys().copied().collect()
    } else {
        request.broker_ids.clone()
    };
    if !request.clean_living_broker {
        let now = Instant::now();
        let liveness = core.liveness.lock().expect("liveness lock");
        let living: Vec<u64> = targets
            .iter()
            .copied()
            .filter(|id| {
                group.members.contains_key(id) && liveness.is_alive(&group.broker_name, *id, now)
            })
            .collect();
        if !living.is_empty() {
            return Err(Refusal::new(
                response::CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                format!(
                    "brokers {living:?} of {} are alive; pass cleanLivingBroker (-l) to remove them",
                    request.broker_name
                ),
            ));
        }
    }
    let outcome = core
        .propose(Command::CleanBrokerData {
            cluster_name: request.cluster_name,
            broker_name: request.broker_name.clone(),
            broker_ids: request.broker_ids,
        })
        .await?;
    match outcome {
        ApplyOutcome::Cleaned => {
            let mut liveness = core.liveness.lock().expect("liveness lock");
            for id in targets {
                liveness.forget(&request.broker_name, id);
            }
            json(&serde_json::json!({}))
        }
        other => Err(unexpected(other)),
    }
}
