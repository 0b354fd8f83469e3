//! The controller commands of mqadmin: `getControllerMetaData` (1005), `getSyncStateSet`
//! (1006), `electMaster` (1002) and `cleanBrokerMetadata` (1011), against a controller
//! group given by `-a` (`addr[;addr]`; calls follow the Raft leader through NOT_LEADER
//! redirects).
//!
//! A controller that answers an error code fails the command (exit 1) with a line naming the
//! controller, the code, its name and the controller's remark.

use std::time::Duration;

use anyhow::{Context, Result};
use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{
    CleanBrokerDataRequest, ControllerMetadata, ElectMasterRequest, GetSyncStateDataRequest,
    ReplicaInfo, SyncStateData,
};
use ferromq_protocol::remoting::codes::request;

use super::{print_json, print_table};

/// Bound on one controller call, redirects included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags every controller command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerCommon {
    /// Controller address(es), `host:port[;host:port]`.
    #[arg(short = 'a', long = "controllerAddress", value_name = "ADDR")]
    address: String,
    /// Print one JSON object (the last stdout line) instead of text.
    #[arg(long)]
    json: bool,
}

impl ControllerCommon {
    fn client(&self) -> Result<ControllerClient> {
        let addrs = ControllerClient::parse_addrs(&self.address).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!addrs.is_empty(), "-a names no controller address");
        Ok(ControllerClient::new(addrs))
    }
}

/// Flags of `getControllerMetaData`.
#[derive(Debug, clap::Args)]
pub struct GetControllerMetaDataArgs {
    #[command(flatten)]
    common: ControllerCommon,
}

/// Flags of `getSyncStateSet`.
#[derive(Debug, clap::Args)]
pub struct GetSyncStateSetArgs {
    #[command(flatten)]
    common: ControllerCommon,
    /// Only the groups of this cluster.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// Only this broker group.
    #[arg(short = 'b', long = "brokerName")]
    broker_name: Option<String>,
    /// Print again every this many seconds, until interrupted.
    #[arg(short = 'i', long = "interval", value_name = "SECONDS")]
    interval: Option<u64>,
}

/// Flags of `electMaster`.
#[derive(Debug, clap::Args)]
pub struct ElectMasterArgs {
    #[command(flatten)]
    common: ControllerCommon,
    /// The group's cluster.
    #[arg(short = 'c', long = "clusterName")]
    cluster: String,
    /// The broker group (mqadmin's `-bn`).
    #[arg(long = "brokerName")]
    broker_name: String,
    /// The controller-assigned id of the broker to make master.
    #[arg(short = 'b', long = "brokerId")]
    broker_id: u64,
}

/// Flags of `cleanBrokerMetadata`.
#[derive(Debug, clap::Args)]
pub struct CleanBrokerMetadataArgs {
    #[command(flatten)]
    common: ControllerCommon,
    /// The group's cluster.
    #[arg(short = 'c', long = "clusterName")]
    cluster: String,
    /// The broker group (mqadmin's `-bn`).
    #[arg(long = "brokerName")]
    broker_name: String,
    /// Controller ids to forget, `;`-separated; absent: the whole group.
    #[arg(short = 'b', long = "brokerControllerIdsToClean")]
    ids: Option<String>,
    /// Also remove brokers the controller still hears from.
    #[arg(short = 'l', long = "cleanLivingBroker")]
    clean_living: bool,
}

pub async fn metadata(args: GetControllerMetaDataArgs) -> Result<()> {
    let client = args.common.client()?;
    let metadata: ControllerMetadata = client
        .call(
            request::CONTROLLER_GET_METADATA_INFO,
            &serde_json::json!({}),
            CALL_TIMEOUT,
        )
        .await?;
    if args.common.json {
        print_json(&serde_json::to_value(&metadata)?);
        return Ok(());
    }
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!("ControllerGroup: {}", metadata.group);
    println!(
        "ControllerLeaderId: {}",
        or_none(metadata.controller_leader_id.map(|id| format!("n{id}")))
    );
    println!(
        "ControllerLeaderAddress: {}",
        or_none(metadata.controller_leader_address.clone())
    );
    println!("Term: {}", metadata.term);
    println!(
        "SelfId: n{} (leader: {})",
        metadata.self_id, metadata.is_leader
    );
    for peer in &metadata.peers {
        println!("#Peer: n{}:{}", peer.id, peer.address);
    }
    if let Some(m) = &metadata.metrics {
        println!(
            "Elections: clean {} unclean {} noMaster {} noCandidate {} fenced {} failed {}; last {} ms, max {} ms",
            m.elections_clean,
            m.elections_unclean,
            m.elections_no_master,
            m.elections_no_candidate,
            m.elections_fenced,
            m.elections_failed,
            or_none(m.election_millis_last.map(|v| v.to_string())),
            m.election_millis_max
        );
    }
    Ok(())
}

pub async fn sync_state_set(args: GetSyncStateSetArgs) -> Result<()> {
    super::every(args.interval, || sync_state_set_once(&args)).await
}

async fn sync_state_set_once(args: &GetSyncStateSetArgs) -> Result<()> {
    let client = args.common.client()?;
    let request_body = GetSyncStateDataRequest {
        broker_names: args.broker_name.clone().into_iter().collect(),
    };
    let mut data: SyncStateData = client
        .call(
            request::CONTROLLER_GET_SYNC_STATE_DATA,
            &request_body,
            CALL_TIMEOUT,
        )
        .await?;
    if let Some(cluster) = &args.cluster {
        data.groups
            .retain(|g| &g.replica_info.cluster_name == cluster);
    }
    if let Some(name) = &args.broker_name {
        anyhow::ensure!(
            !data.groups.is_empty(),
            "the controller knows no broker group {name}"
        );
    }
    if args.common.json {
        print_json(&serde_json::to_value(&data)?);
        return Ok(());
    }
    let mut rows = Vec::new();
    for group in &data.groups {
        let info = &group.replica_info;
        for member in &group.members {
            let id = member.member.broker_id;
            rows.push(vec![
                info.cluster_name.clone(),
                info.broker_name.clone(),
                id.to_string(),
                member.member.broker_address.clone(),
                if info.master_broker_id == Some(id) {
                    "MASTER"
                } else {
                    "SLAVE"
                }
                .into(),
                info.sync_state_set.contains(&id).to_string(),
                member.alive.to_string(),
                info.master_epoch.to_string(),
                info.sync_state_set_epoch.to_string(),
                member.max_offset.to_string(),
            ]);
        }
    }
    print_table(
        &[
            "Cluster",
            "BrokerName",
            "BrokerId",
            "Addr",
            "Role",
            "InSync",
            "Alive",
            "MasterEpoch",
            "SyncStateSetEpoch",
            "MaxOffset",
        ],
        &rows,
    );
    Ok(())
}

pub async fn elect_master(args: ElectMasterArgs) -> Result<()> {
    let client = args.common.client()?;
    let info: ReplicaInfo = client
        .call(
            request::CONTROLLER_ELECT_MASTER,
            &ElectMasterRequest {
                cluster_name: args.cluster.clone(),
                broker_name: args.broker_name.clone(),
                broker_id: Some(args.broker_id),
                renew: None,
            },
            CALL_TIMEOUT,
        )
        .await?;
    if args.common.json {
        print_json(&serde_json::to_value(&info)?);
        return Ok(());
    }
    println!(
        "elected: {} master {} ({}) masterEpoch {} syncStateSet {:?} syncStateSetEpoch {}",
        info.broker_name,
        info.master_broker_id
            .map_or("-".into(), |id| id.to_string()),
        info.master_address.as_deref().unwrap_or("-"),
        info.master_epoch,
        info.sync_state_set,
        info.sync_state_set_epoch
    );
    Ok(())
}

pub async fn clean_broker_metadata(args: CleanBrokerMetadataArgs) -> Result<()> {
    let client = args.common.client()?;
    let broker_ids = match &args.ids {
        None => Vec::new(),
        Some(text) => text
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>().with_context(|| format!("broker id {s:?}")))
            .collect::<Result<Vec<u64>>>()?,
    };
    let _: serde_json::Value = client
        .call(
            request::CLEAN_BROKER_DATA,
            &CleanBrokerDataRequest {
                cluster_name: args.cluster.clone(),
                broker_name: args.broker_name.clone(),
                broker_ids: broker_ids.clone(),
                clean_living_broker: args.clean_living,
            },
            CALL_TIMEOUT,
        )
        .await?;
    if args.common.json {
        print_json(&serde_json::json!({
            "brokerName": args.broker_name,
            "cleanedBrokerIds": broker_ids,
        }));
    } else if broker_ids.is_empty() {
        println!("cleaned broker group {}", args.broker_name);
    } else {
        println!("cleaned brokers {broker_ids:?} of {}", args.broker_name);
    }
    Ok(())
}
