//! Subscription group commands: `updateSubGroup`, `deleteSubGroup`.

use anyhow::{bail, Result};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::DeleteSubscriptionGroupRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::client::{check, Admin};
use super::{print_json, Common};

/// Flags of `updateSubGroup`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("where").required(true).args(["broker", "cluster"]))]
pub struct UpdateSubGroupArgs {
    #[command(flatten)]
    common: Common,
    /// Group.
    #[arg(short = 'g', long = "groupName")]
    group: String,
    /// Broker address.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
    /// Cluster: every master of it.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// Consumption enabled.
    #[arg(short = 's', long = "consumeEnable", default_value_t = true, action = clap::ArgAction::Set)]
    consume_enable: bool,
    /// Broadcast consumption enabled.
    #[arg(short = 'd', long = "consumeBroadcastEnable", default_value_t = false, action = clap::ArgAction::Set)]
    broadcast: bool,
    /// Retry queues.
    #[arg(short = 'q', long = "retryQueueNums", default_value_t = 1)]
    retry_queues: i32,
    /// Deliveries before a message goes to the DLQ.
    #[arg(short = 'r', long = "retryMaxTimes", default_value_t = 16)]
    retry_max_times: i32,
    /// Tell members to rebalance when membership changes.
    #[arg(short = 'a', long = "notifyConsumerIdsChanged", default_value_t = true, action = clap::ArgAction::Set)]
    notify: bool,
}

/// Flags of `deleteSubGroup`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("where").required(true).args(["broker", "cluster"]))]
pub struct DeleteSubGroupArgs {
    #[command(flatten)]
    common: Common,
    /// Group.
    #[arg(short = 'g', long = "groupName")]
    group: String,
    /// Broker address.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
    /// Cluster: every master of it.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// Also delete the group's offsets.
    #[arg(short = 'r', long = "removeOffset", default_value_t = false, action = clap::ArgAction::Set)]
    remove_offset: bool,
}

pub async fn update(args: UpdateSubGroupArgs) -> Result<()> {
    if args.retry_queues < 0 || args.retry_max_times < 0 {
        bail!("retry queue count and retry max times must not be negative");
    }
    let admin = Admin::new(&args.common);
    let targets = admin
        .targets(args.broker.as_deref(), args.cluster.as_deref())
        .await?;
    let config = json!({
        "groupName": args.group,
        "consumeEnable": args.consume_enable,
        "consumeFromMinEnable": true,
        "consumeBroadcastEnable": args.broadcast,
        "consumeMessageOrderly": false,
        "retryQueueNums": args.retry_queues,
        "retryMaxTimes": args.retry_max_times,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": args.notify,
    });
    let body = serde_json::to_vec(&config)?;
    for broker in &targets {
        admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(
                    request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                    Default::default(),
                )
                .with_body(body.clone()),
            )
            .await?;
        if !args.common.json {
            println!("create subscription group to {} success.", broker.addr);
        }
    }
    if args.common.json {
        print_json(&json!({
            "group": config,
            "brokers": targets.iter().map(|b| json!({"brokerName": b.name, "addr": b.addr})).collect::<Vec<_>>(),
        }));
    } else {
        println!("{config}");
    }
    Ok(())
}

pub async fn delete(args: DeleteSubGroupArgs) -> Result<()> {
    let admin = Admin::new(&args.common);
    let targets = admin
        .targets(args.broker.as_deref(), args.cluster.as_deref())
        .await?;
    let header = DeleteSubscriptionGroupRequestHeader {
        group_name: args.group.clone(),
        clean_offset: Some(args.remove_offset),
    };
    let mut deleted = Vec::new();
    for broker in &targets {
        let reply = admin
            .call(
                &broker.addr,
                RemotingCommand::request_with_header(request::DELETE_SUBSCRIPTIONGROUP, &header),
            )
            .await?;
        if reply.code == response::SUBSCRIPTION_GROUP_NOT_EXIST {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))?;
        deleted.push(broker.clone());
    }
    if deleted.is_empty() {
        bail!(
            "subscription group {} does not exist on any target broker",
            args.group
        );
    }
    if args.common.json {
        print_json(&json!({
            "group": args.group,
            "deletedFrom": deleted.iter().map(|b| json!({"brokerName": b.name, "addr": b.addr})).collect::<Vec<_>>(),
        }));
    } else {
        for broker in &deleted {
            println!(
                "delete subscription group [{}] from broker {} success.",
                args.group, broker.addr
            );
        }
    }
    Ok(())
}
