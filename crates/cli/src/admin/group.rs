//! Subscription group commands: `updateSubGroup`, `deleteSubGroup`, `consumerConnection`,
//! `cloneGroupOffset`.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::{
    DeleteSubscriptionGroupRequestHeader, GetConsumerConnectionListRequestHeader,
};
use ferromq_protocol::remoting::headers::offset::CloneGroupOffsetRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::{json, Value};

use super::client::{check, Admin, BrokerRef};
use super::{print_json, print_table, Common};

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
    let admin = Admin::new(&args.common)?;
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
    let admin = Admin::new(&args.common)?;
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

/// Flags of `consumerConnection`.
#[derive(Debug, clap::Args)]
pub struct ConsumerConnectionArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group.
    #[arg(short = 'g', long = "consumerGroup")]
    group: String,
    /// One broker address instead of every master.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
}

/// Flags of `cloneGroupOffset`.
#[derive(Debug, clap::Args)]
pub struct CloneGroupOffsetArgs {
    #[command(flatten)]
    common: Common,
    /// Group to copy from.
    #[arg(short = 's', long = "srcGroup")]
    source: String,
    /// Group to copy to.
    #[arg(short = 'd', long = "destGroup")]
    destination: String,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Copy even if the online source group does not subscribe to the topic.
    #[arg(short = 'o', long = "offline", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    offline: bool,
}

/// Java's `ConsumerConnection`, merged over the brokers that know the group online.
#[derive(Debug, Default)]
pub struct GroupConnections {
    /// Connections by client id: (client address, language, version).
    pub connections: BTreeMap<String, (String, String, i64)>,
    /// Topic -> subscription expression.
    pub subscriptions: BTreeMap<String, String>,
    /// `CONSUME_PASSIVELY` (push), `CONSUME_ACTIVELY` (pull), `CONSUME_POP`.
    pub consume_type: String,
    /// `CLUSTERING` or `BROADCASTING`.
    pub message_model: String,
    /// Where members without an offset start.
    pub consume_from_where: String,
}

/// The group's connections on `brokers`; `Ok(None)` when no broker has it online.
pub async fn connections(
    admin: &Admin,
    brokers: &[BrokerRef],
    group: &str,
) -> Result<Option<GroupConnections>> {
    let header = GetConsumerConnectionListRequestHeader {
        consumer_group: group.to_string(),
    };
    let mut merged: Option<GroupConnections> = None;
    for broker in brokers {
        let reply = admin
            .call(
                &broker.addr,
                RemotingCommand::request_with_header(
                    request::GET_CONSUMER_CONNECTION_LIST,
                    &header,
                ),
            )
            .await?;
        if reply.code == response::CONSUMER_NOT_ONLINE {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))?;
        let body: Value = serde_json::from_slice(reply.body.as_deref().unwrap_or_default())
            .context("bad consumer connection reply")?;
        let into = merged.get_or_insert_with(GroupConnections::default);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        for connection in body["connectionSet"].as_array().into_iter().flatten() {
            into.connections.insert(
                text(&connection["clientId"]),
                (
                    text(&connection["clientAddr"]),
                    text(&connection["language"]),
                    connection["version"].as_i64().unwrap_or(0),
                ),
            );
        }
        if let Some(table) = body["subscriptionTable"].as_object() {
            for (topic, data) in table {
                into.subscriptions
                    .insert(topic.clone(), text(&data["subString"]));
            }
        }
        into.consume_type = text(&body["consumeType"]);
        into.message_model = text(&body["messageModel"]);
        into.consume_from_where = text(&body["consumeFromWhere"]);
    }
    Ok(merged)
}

/// Ordinal of `MQVersion.Version.V4_0_0_SNAPSHOT`; from there on Java's enum is regular:
/// `Vx_y_z_SNAPSHOT, Vx_y_z` for each z, y and x in 0..=9.
const V4_0_0_SNAPSHOT: i64 = 212;

/// mqadmin's name of a client version ordinal (`V5_3_3`); the irregular 3.x ordinals and
/// unknown ones print as `V3(<ordinal>)` / the number.
pub fn version_desc(version: i64) -> String {
    if (0..V4_0_0_SNAPSHOT).contains(&version) {
        return format!("V3({version})");
    }
    let offset = version - V4_0_0_SNAPSHOT;
    if !(0..600).contains(&offset) {
        return version.to_string();
    }
    let (major, minor, patch) = (4 + offset / 200, offset % 200 / 20, offset % 20 / 2);
    let snapshot = if offset % 2 == 0 { "_SNAPSHOT" } else { "" };
    format!("V{major}_{minor}_{patch}{snapshot}")
}

pub async fn consumer_connection(args: ConsumerConnectionArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let brokers = admin.targets(args.broker.as_deref(), None).await?;
    let Some(found) = connections(&admin, &brokers, &args.group).await? else {
        bail!(
            "consumer group {} is not online (CONSUMER_NOT_ONLINE): no connected consumer",
            args.group
        );
    };
    if args.common.json {
        print_json(&json!({
            "group": args.group,
            "connectionSet": found.connections.iter().map(|(id, (addr, language, version))| json!({
                "clientId": id,
                "clientAddr": addr,
                "language": language,
                "version": version,
                "versionDesc": version_desc(*version),
            })).collect::<Vec<_>>(),
            "subscriptionTable": found.subscriptions.iter().map(|(topic, expression)| json!({
                "topic": topic,
                "subString": expression,
            })).collect::<Vec<_>>(),
            "consumeType": found.consume_type,
            "messageModel": found.message_model,
            "consumeFromWhere": found.consume_from_where,
        }));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = found
        .connections
        .iter()
        .map(|(id, (addr, language, version))| {
            vec![
                id.clone(),
                addr.clone(),
                language.clone(),
                version_desc(*version),
            ]
        })
        .collect();
    print_table(&["ClientId", "ClientAddr", "Language", "Version"], &rows);
    println!();
    println!("Below is subscription:");
    let rows: Vec<Vec<String>> = found
        .subscriptions
        .iter()
        .map(|(topic, expression)| vec![topic.clone(), expression.clone()])
        .collect();
    print_table(&["Topic", "SubExpression"], &rows);
    println!();
    println!("ConsumeType: {}", found.consume_type);
    println!("MessageModel: {}", found.message_model);
    println!("ConsumeFromWhere: {}", found.consume_from_where);
    Ok(())
}

/// One queue a clone moved.
struct Cloned {
    broker: String,
    topic: String,
    queue_id: i64,
    old: Option<i64>,
    new: i64,
}

pub async fn clone_offsets(args: CloneGroupOffsetArgs) -> Result<()> {
    if args.source == args.destination {
        bail!(
            "source and destination group are the same ({})",
            args.source
        );
    }
    let admin = Admin::new(&args.common)?;
    let brokers = admin.topic_masters(&args.topic, None).await?;
    let header = CloneGroupOffsetRequestHeader {
        src_group: args.source.clone(),
        dest_group: args.destination.clone(),
        topic: Some(args.topic.clone()),
        offline: Some(args.offline),
    };
    let mut cloned = Vec::new();
    let mut skipped = false;
    let mut generations = BTreeMap::new();
    let mut known = false;
    for broker in &brokers {
        let reply = admin
            .call(
                &broker.addr,
                RemotingCommand::request_with_header(request::CLONE_GROUP_OFFSET, &header),
            )
            .await?;
        if reply.code == response::SUBSCRIPTION_GROUP_NOT_EXIST {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))
            .with_context(|| format!("cloning group {}'s offsets", args.source))?;
        known = true;
        for item in reply
            .ext_fields
            .get("cloned")
            .map(|v| v.as_str())
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
        {
            cloned.push(parse_cloned(item, &broker.name)?);
        }
        if let Some(generation) = reply
            .ext_fields
            .get(ferromq_protocol::remoting::extensions::RESET_GENERATION_EXT)
        {
            generations.insert(broker.name.clone(), generation.clone());
        }
        skipped |= reply
            .ext_fields
            .get("skipped")
            .is_some_and(|s| s.split(',').any(|t| t == args.topic));
    }
    if !known {
        bail!("consumer group {} does not exist", args.source);
    }
    if cloned.is_empty() && skipped {
        bail!(
            "consumer group {} is online but does not subscribe to topic {}: nothing copied \
             (pass -o true to copy its offsets anyway)",
            args.source,
            args.topic
        );
    }
    if cloned.is_empty() {
        bail!(
            "consumer group {} has no committed offset on topic {} to copy",
            args.source,
            args.topic
        );
    }
    cloned
        .sort_by(|a, b| (&a.broker, &a.topic, a.queue_id).cmp(&(&b.broker, &b.topic, b.queue_id)));
    if args.common.json {
        print_json(&json!({
            "srcGroup": args.source,
            "destGroup": args.destination,
            "topic": args.topic,
            "queues": cloned.iter().map(|c| json!({
                "brokerName": c.broker,
                "topic": c.topic,
                "queueId": c.queue_id,
                "oldOffset": c.old,
                "newOffset": c.new,
            })).collect::<Vec<_>>(),
            "generation": generations.values().filter_map(|g| g.parse::<u64>().ok()).max(),
        }));
    } else {
        let rows: Vec<Vec<String>> = cloned
            .iter()
            .map(|c| {
                vec![
                    c.broker.clone(),
                    c.topic.clone(),
                    c.queue_id.to_string(),
                    c.old.map_or("-".into(), |o| o.to_string()),
                    c.new.to_string(),
                ]
            })
            .collect();
        print_table(
            &["brokerName", "topic", "queueId", "oldOffset", "newOffset"],
            &rows,
        );
        println!(
            "clone consumer offset from group {} to group {} success.",
            args.source, args.destination
        );
        for (broker, generation) in &generations {
            println!(
                "reset generation of {} on {broker}: {generation}",
                args.destination
            );
        }
    }
    Ok(())
}

/// `topic/queueId:old>new` from the broker's `cloned` ext field.
fn parse_cloned(item: &str, broker: &str) -> Result<Cloned> {
    let bad = || anyhow::anyhow!("bad clone reply item {item:?} from broker {broker}");
    let (topic, rest) = item.rsplit_once('/').ok_or_else(bad)?;
    let (queue, offsets) = rest.split_once(':').ok_or_else(bad)?;
    let (old, new) = offsets.split_once('>').ok_or_else(bad)?;
    let old: i64 = old.parse().map_err(|_| bad())?;
    Ok(Cloned {
        broker: broker.to_string(),
        topic: topic.to_string(),
        queue_id: queue.parse().map_err(|_| bad())?,
        old: (old >= 0).then_some(old),
        new: new.parse().map_err(|_| bad())?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_names_match_java_ordinals() {
        assert_eq!(super::version_desc(273), "V4_3_0");
        assert_eq!(super::version_desc(401), "V4_9_4");
        assert_eq!(super::version_desc(413), "V5_0_0");
        assert_eq!(super::version_desc(479), "V5_3_3");
        assert_eq!(super::version_desc(478), "V5_3_3_SNAPSHOT");
        assert_eq!(super::version_desc(63), "V3(63)");
    }
}
