//! `haStatus` (GET_BROKER_HA_STATUS, 907): each broker's replication state, as mqadmin's
//! `haStatus` prints it.
//!
//! `-b brokerAddr` asks one broker; `-c clusterName` (or neither: every cluster) asks every
//! member of the cluster's broker groups found through the name server, masters and slaves.
//! For a master it shows each slave's address, broker id, acknowledged offset, lag in bytes
//! and time, and whether it is in sync; for a slave its master's address, its max offset and
//! the watermark it knows. A broker that answers an error code, sends an unreadable body or
//! cannot be reached is shown with the error and makes the command fail (exit 1) after every
//! broker was asked: none is silently skipped.

use anyhow::{bail, Result};
use ferromq_protocol::remoting::body::ha_runtime::HaRuntimeInfo;
use ferromq_protocol::remoting::body::route::MASTER_ID;
use ferromq_protocol::remoting::codes::request;
use serde_json::json;

use super::client::Admin;
use super::{print_json, print_table, Common};

/// Flags of `haStatus`.
#[derive(Debug, clap::Args)]
pub struct HaStatusArgs {
    #[command(flatten)]
    common: Common,
    /// One broker, `ip:port`.
    #[arg(short = 'b', long = "brokerAddr", conflicts_with = "cluster")]
    broker: Option<String>,
    /// Every broker (masters and slaves) of this cluster, through the name server.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
}

/// One broker asked: what the name server says of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Member {
    cluster: Option<String>,
    name: String,
    id: Option<i64>,
    addr: String,
}

/// `MASTER` for broker id 0, else `SLAVE` (mqadmin's `clusterList` wording).
pub fn role_of(id: i64) -> &'static str {
    if id == MASTER_ID {
        "MASTER"
    } else {
        "SLAVE"
    }
}

/// The brokers to ask, in cluster, name, id order.
async fn members(admin: &Admin, args: &HaStatusArgs) -> Result<Vec<Member>> {
    if let Some(addr) = &args.broker {
        let mut member = Member {
            cluster: None,
            name: addr.clone(),
            id: None,
            addr: addr.clone(),
        };
        if !admin.namesrv_addrs().is_empty() {
            if let Ok(info) = admin.cluster_info().await {
                for data in info.broker_addr_table.values() {
                    if let Some((id, _)) = data.broker_addrs.iter().find(|(_, a)| *a == addr) {
                        member.cluster = Some(data.cluster.clone());
                        member.name = data.broker_name.clone();
                        member.id = Some(*id);
                    }
                }
            }
        }
        return Ok(vec![member]);
    }
    let info = admin.cluster_info().await?;
    let mut out: Vec<Member> = super::cluster::members(&info, args.cluster.as_deref())
        .into_iter()
        .map(|(cluster, name, id, addr)| Member {
            cluster: Some(cluster),
            name,
            id: Some(id),
            addr,
        })
        .collect();
    if out.is_empty() {
        match &args.cluster {
            Some(cluster) => bail!("cluster {cluster} has no broker on the name server"),
            None => bail!("the name server knows no broker"),
        }
    }
    out.sort();
    Ok(out)
}

/// Asks one broker; the error text names the broker and what went wrong.
async fn ask(admin: &Admin, addr: &str) -> Result<HaRuntimeInfo, String> {
    admin
        .ask_json(addr, request::GET_BROKER_HA_STATUS, "HA status")
        .await
}

pub async fn status(args: HaStatusArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let members = members(&admin, &args).await?;
    let mut answers = Vec::with_capacity(members.len());
    for member in members {
        let answer = ask(&admin, &member.addr).await;
        answers.push((member, answer));
    }
    if args.common.json {
        print_json(&json!({
            "brokers": answers.iter().map(|(m, answer)| {
                let mut entry = json!({
                    "cluster": m.cluster,
                    "brokerName": m.name,
                    "brokerId": m.id,
                    "addr": m.addr,
                    "role": role(m, answer.as_ref().ok()),
                });
                match answer {
                    Ok(info) => entry["haStatus"] = json!(info),
                    Err(error) => entry["error"] = json!(error),
                }
                entry
            }).collect::<Vec<_>>(),
        }));
    } else {
        for (i, (member, answer)) in answers.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print_broker(member, answer);
        }
    }
    let failed: Vec<&String> = answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().err())
        .collect();
    if let Some(first) = failed.first() {
        bail!(
            "{} of {} brokers did not report their HA status; first: {first}",
            failed.len(),
            answers.len()
        );
    }
    Ok(())
}

/// The role shown: the broker's own answer when it gave one, else its broker id's.
fn role(member: &Member, info: Option<&HaRuntimeInfo>) -> &'static str {
    match (info, member.id) {
        (Some(info), _) => {
            if info.master {
                "MASTER"
            } else {
                "SLAVE"
            }
        }
        (None, Some(id)) => role_of(id),
        (None, None) => "UNKNOWN",
    }
}

fn print_broker(member: &Member, answer: &Result<HaRuntimeInfo, String>) {
    let id = member
        .id
        .map_or_else(|| "?".to_string(), |id| id.to_string());
    let info = answer.as_ref().ok();
    let mut title = format!(
        "============ {} {} (brokerId {id}, {}",
        member.name,
        member.addr,
        role(member, info)
    );
    if let Some(broker_role) = info.and_then(|i| i.broker_role.as_deref()) {
        title.push_str(&format!(", {broker_role}"));
    }
    title.push_str(") ============");
    println!("{title}");
    let info = match answer {
        Ok(info) => info,
        Err(error) => {
            println!("error: {error}");
            return;
        }
    };
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    if info.master {
        println!(
            "masterCommitLogMaxOffset: {}  inSyncSlaveNums: {}  watermark: {}  minInSyncReplicas: {}",
            info.master_commit_log_max_offset,
            info.in_sync_slave_nums,
            opt(info.watermark),
            opt(info.min_in_sync_replicas.map(i64::from)),
        );
        let rows: Vec<Vec<String>> = info
            .ha_connection_info
            .iter()
            .map(|c| {
                vec![
                    c.addr.clone(),
                    opt(c.broker_id),
                    c.slave_ack_offset.to_string(),
                    c.diff.to_string(),
                    opt(c.lag_time_ms),
                    if c.in_sync { "true" } else { "false" }.to_string(),
                ]
            })
            .collect();
        if rows.is_empty() {
            println!("no slave connected");
        } else {
            print_table(
                &[
                    "Slave Addr",
                    "BrokerId",
                    "Ack Offset",
                    "Lag Bytes",
                    "Lag Time(ms)",
                    "In Sync",
                ],
                &rows,
            );
        }
    } else {
        let c = &info.ha_client_runtime_info;
        let master = if c.master_addr.is_empty() {
            "-".to_string()
        } else {
            c.master_addr.clone()
        };
        print_table(
            &["Master Addr", "Max Offset", "Watermark", "Activated"],
            &[vec![
                master,
                c.max_offset.to_string(),
                opt(c.watermark),
                if c.is_activated { "true" } else { "false" }.to_string(),
            ]],
        );
    }
}
