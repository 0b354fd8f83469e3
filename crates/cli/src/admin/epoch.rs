//! `getBrokerEpoch` (GET_BROKER_EPOCH_CACHE, 1007): the epoch entries of each broker of a
//! broker group — which master term wrote which part of its CommitLog — as mqadmin's
//! `getBrokerEpoch` prints them: one row per entry,
//! `#ClusterName #BrokerName #BrokerAddr #BrokerId #Epoch #StartOffset #EndOffset`.
//!
//! `-b brokerName` asks every member (masters and slaves) of that broker group, `-c
//! clusterName` every member of the cluster's groups (neither: every cluster), all found
//! through the name server. A broker that answers an error code, sends an unreadable body or
//! cannot be reached is shown with the error and makes the command fail (exit 1) after every
//! broker was asked. A broker without entries (a log written before epochs) shows one row of
//! epoch 0 covering its whole log.

use anyhow::{bail, Result};
use ferromq_protocol::controller::BrokerEpochCache;
use ferromq_protocol::remoting::codes::request;
use serde_json::json;

use super::client::Admin;
use super::{print_json, print_table, Common};

/// Flags of `getBrokerEpoch`.
#[derive(Debug, clap::Args)]
pub struct GetBrokerEpochArgs {
    #[command(flatten)]
    common: Common,
    /// Every broker of this cluster.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// Every broker (master and slaves) of this broker group.
    #[arg(short = 'b', long = "brokerName")]
    broker_name: Option<String>,
    /// Print again every this many seconds, until interrupted.
    #[arg(short = 'i', long = "interval", value_name = "SECONDS")]
    interval: Option<u64>,
}

/// One broker asked: (cluster, broker name, broker id, address).
type Member = (String, String, i64, String);

/// Asks one broker; the error text names the broker and what went wrong.
async fn ask(admin: &Admin, addr: &str) -> Result<BrokerEpochCache, String> {
    admin
        .ask_json(addr, request::GET_BROKER_EPOCH_CACHE, "epoch cache")
        .await
}

/// The rows of one broker's answer: its entries, or epoch 0 over its log when it has none.
fn rows(member: &Member, cache: &BrokerEpochCache) -> Vec<Vec<String>> {
    let (cluster, name, id, addr) = member;
    let row = |epoch: u64, start: u64, end: u64| {
        vec![
            cluster.clone(),
            name.clone(),
            addr.clone(),
            id.to_string(),
            epoch.to_string(),
            start.to_string(),
            end.to_string(),
        ]
    };
    if cache.epochs.is_empty() {
        return vec![row(0, 0, cache.max_offset)];
    }
    cache
        .epochs
        .iter()
        .map(|e| row(e.epoch, e.start_offset, e.end_offset))
        .collect()
}

pub async fn get(args: GetBrokerEpochArgs) -> Result<()> {
    super::every(args.interval, || get_once(&args)).await
}

async fn get_once(args: &GetBrokerEpochArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let info = admin.cluster_info().await?;
    let mut members: Vec<Member> = super::cluster::members(&info, args.cluster.as_deref())
        .into_iter()
        .filter(|(_, name, _, _)| args.broker_name.as_ref().is_none_or(|b| b == name))
        .collect();
    if members.is_empty() {
        match (&args.cluster, &args.broker_name) {
            (_, Some(name)) => bail!("broker group {name} has no broker on the name server"),
            (Some(cluster), None) => bail!("cluster {cluster} has no broker on the name server"),
            (None, None) => bail!("the name server knows no broker"),
        }
    }
    members.sort();
    let mut answers = Vec::with_capacity(members.len());
    for member in members {
        let answer = ask(&admin, &member.3).await;
        answers.push((member, answer));
    }
    if args.common.json {
        print_json(&json!({
            "brokers": answers.iter().map(|((cluster, name, id, addr), answer)| {
                let mut entry = json!({
                    "clusterName": cluster,
                    "brokerName": name,
                    "brokerId": id,
                    "brokerAddr": addr,
                });
                match answer {
                    Ok(cache) => {
                        entry["maxOffset"] = json!(cache.max_offset);
                        entry["epochs"] = json!(cache.epochs);
                    }
                    Err(error) => entry["error"] = json!(error),
                }
                entry
            }).collect::<Vec<_>>(),
        }));
    } else {
        let mut table = Vec::new();
        for (member, answer) in &answers {
            match answer {
                Ok(cache) => table.extend(rows(member, cache)),
                Err(error) => eprintln!("{error}"),
            }
        }
        print_table(
            &[
                "ClusterName",
                "BrokerName",
                "BrokerAddr",
                "BrokerId",
                "Epoch",
                "StartOffset",
                "EndOffset",
            ],
            &table,
        );
    }
    let failed: Vec<&String> = answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().err())
        .collect();
    if let Some(first) = failed.first() {
        bail!(
            "{} of {} brokers did not report their epochs; first: {first}",
            failed.len(),
            answers.len()
        );
    }
    Ok(())
}
