//! `quarantineList` and `skipDamagedMessage` (ferromq): the CommitLog ranges a broker keeps
//! but does not serve, and the explicit, recorded act of moving a group past one damaged
//! record (a pull stops at it with MESSAGE_DAMAGED until then).

use anyhow::{Context, Result};
use ferromq_protocol::remoting::extensions::{
    QUARANTINE_LIST, RESET_GENERATION_EXT, SKIP_DAMAGED_MESSAGE,
};
use ferromq_protocol::remoting::{ExtFields, RemotingCommand};
use serde_json::{json, Value};

use super::client::Admin;
use super::{print_json, print_table, Common};

/// Flags of `quarantineList`.
#[derive(Debug, clap::Args)]
pub struct QuarantineListArgs {
    #[command(flatten)]
    common: Common,
    /// One broker address (default: every master the name server knows).
    #[arg(short = 'b', long = "broker")]
    broker: Option<String>,
    /// Only the masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
}

/// Flags of `skipDamagedMessage`.
#[derive(Debug, clap::Args)]
pub struct SkipDamagedArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group to move.
    #[arg(short = 'g', long = "group")]
    group: String,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Queue id.
    #[arg(short = 'q', long = "queue")]
    queue: u32,
    /// Queue offset of the damaged record (the one MESSAGE_DAMAGED named).
    #[arg(short = 'o', long = "offset")]
    offset: u64,
    /// The broker holding the queue (default: the topic's route; with several masters,
    /// name one).
    #[arg(short = 'b', long = "broker")]
    broker: Option<String>,
}

pub async fn quarantine_list(args: QuarantineListArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let brokers = match &args.broker {
        Some(addr) => vec![admin.named(addr).await],
        None => admin.masters(args.cluster.as_deref()).await?,
    };
    let mut out = Vec::new();
    for broker in &brokers {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(QUARANTINE_LIST, ExtFields::new()),
            )
            .await?;
        let mut body: Value = serde_json::from_slice(reply.body.as_deref().unwrap_or_default())
            .context("bad quarantine list reply")?;
        body["brokerName"] = json!(broker.name);
        body["brokerAddr"] = json!(broker.addr);
        out.push(body);
    }
    if args.common.json {
        print_json(&json!({ "brokers": out }));
        return Ok(());
    }
    let mut rows = Vec::new();
    for broker in &out {
        for range in broker["ranges"].as_array().into_iter().flatten() {
            rows.push(vec![
                broker["brokerName"].as_str().unwrap_or("-").to_string(),
                range["physOffset"].to_string(),
                range["len"].to_string(),
                range["kind"].as_str().unwrap_or("-").to_string(),
                range["reason"].as_str().unwrap_or("-").to_string(),
            ]);
        }
    }
    print_table(
        &["Broker Name", "CommitLog Offset", "Bytes", "Kind", "Reason"],
        &rows,
    );
    for broker in &out {
        println!(
            "{}: {} quarantined ({} not listed)",
            broker["brokerName"].as_str().unwrap_or("-"),
            broker["total"],
            broker["notListed"]
        );
    }
    Ok(())
}

pub async fn skip_damaged(args: SkipDamagedArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let broker = match &args.broker {
        Some(addr) => admin.named(addr).await,
        None => {
            let mut masters = admin.topic_masters(&args.topic, None).await?;
            if masters.len() != 1 {
                anyhow::bail!(
                    "topic {} is on {} brokers; name the one holding queue {} with -b",
                    args.topic,
                    masters.len(),
                    args.queue
                );
            }
            masters.remove(0)
        }
    };
    let mut ext = ExtFields::new();
    ext.insert("group", args.group.clone());
    ext.insert("topic", args.topic.clone());
    ext.insert("queueId", args.queue.to_string());
    ext.insert("queueOffset", args.offset.to_string());
    let reply = admin
        .call_ok(
            &broker.addr,
            RemotingCommand::new_request(SKIP_DAMAGED_MESSAGE, ext),
        )
        .await?;
    let generation = reply
        .ext_fields
        .get(RESET_GENERATION_EXT)
        .cloned()
        .unwrap_or_default();
    let phys_offset = reply
        .ext_fields
        .get("physOffset")
        .cloned()
        .unwrap_or_default();
    if args.common.json {
        print_json(&json!({
            "brokerName": broker.name,
            "group": args.group,
            "topic": args.topic,
            "queueId": args.queue,
            "damagedOffset": args.offset,
            "damagedPhysOffset": phys_offset.parse::<u64>().ok(),
            "newOffset": args.offset + 1,
            "generation": generation.parse::<u64>().ok(),
        }));
    } else {
        println!(
            "{}: group {} moved past the damaged record at {}/{} offset {} (CommitLog offset \
             {phys_offset}) to {}; reset generation {generation}",
            broker.name,
            args.group,
            args.topic,
            args.queue,
            args.offset,
            args.offset + 1
        );
    }
    Ok(())
}
