//! Consumption progress: `consumerProgress`, `resetOffsetByTime`, `skipAccumulatedMessage`,
//! and ferromq's `offsetHistory`.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::mq_map::{ConsumeStats, OffsetWrapper, ResetOffsetBody};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::extensions::{
    OFFSET_HISTORY, RESET_GENERATION_EXT, RESET_OLD_OFFSETS_EXT,
};
use ferromq_protocol::remoting::headers::offset::{
    GetConsumeStatsRequestHeader, ResetOffsetRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::{json, Value};

use super::client::{check, Admin, BrokerRef};
use super::group::{connections, version_desc};
use super::message::TOOLS_CONSUMER_GROUP;
use super::time::{format_time, format_time_seconds, now_ms, parse_time};
use super::{print_json, print_table, Common};

/// Flags of `consumerProgress`.
#[derive(Debug, clap::Args)]
pub struct ConsumerProgressArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group; without it, one line per group of the brokers.
    #[arg(short = 'g', long = "groupName")]
    group: Option<String>,
    /// Only this topic.
    #[arg(short = 't', long = "topicName")]
    topic: Option<String>,
    /// One broker address instead of every master.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
    /// Only masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
}

/// Flags of `resetOffsetByTime`.
#[derive(Debug, clap::Args)]
pub struct ResetOffsetArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group.
    #[arg(short = 'g', long = "group")]
    group: String,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Time: now, epoch ms, yyyy-MM-dd#HH:mm:ss:SSS (local time) or -1h/-30m/-10s.
    #[arg(
        short = 's',
        long = "timestamp",
        allow_hyphen_values = true,
        required_unless_present = "offset"
    )]
    timestamp: Option<String>,
    /// One queue (with -o: its explicit offset).
    #[arg(short = 'q', long = "queue")]
    queue: Option<i32>,
    /// Explicit offset for the queue given with -q.
    #[arg(short = 'o', long = "offset", requires = "queue")]
    offset: Option<i64>,
    /// One broker address instead of the topic's route.
    #[arg(short = 'b', long = "broker")]
    broker: Option<String>,
    /// Only masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
    /// Accepted for mqadmin compatibility; resets always move offsets both ways.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Set)]
    force: Option<bool>,
}

/// Flags of `skipAccumulatedMessage`.
#[derive(Debug, clap::Args)]
pub struct SkipArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group.
    #[arg(short = 'g', long = "group")]
    group: String,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// One broker address instead of the topic's route.
    #[arg(short = 'b', long = "broker")]
    broker: Option<String>,
    /// Only masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
    /// Accepted for mqadmin compatibility.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Set)]
    force: Option<bool>,
}

/// Flags of `offsetHistory`.
#[derive(Debug, clap::Args)]
pub struct OffsetHistoryArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group.
    #[arg(short = 'g', long = "group")]
    group: String,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Only this queue.
    #[arg(short = 'q', long = "queue")]
    queue: Option<i32>,
    /// Only events at or after this time (same forms as resetOffsetByTime -s).
    #[arg(long = "since", allow_hyphen_values = true)]
    since: Option<String>,
    /// One broker address instead of the topic's route.
    #[arg(short = 'b', long = "broker")]
    broker: Option<String>,
}

pub async fn consumer_progress(args: ConsumerProgressArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let Some(group) = args.group.clone() else {
        return all_groups_progress(&admin, &args).await;
    };
    let brokers = match (&args.broker, &args.topic) {
        (Some(addr), _) => vec![admin.named(addr).await],
        (None, Some(topic)) => admin.topic_masters(topic, args.cluster.as_deref()).await?,
        (None, None) => admin.targets(None, args.cluster.as_deref()).await?,
    };
    let Some((tps, mut rows)) =
        consume_stats(&admin, &brokers, &group, args.topic.as_deref()).await?
    else {
        bail!("consumer group {group} does not exist");
    };
    rows.sort_by(|a, b| {
        (&a.0.topic, &a.0.broker_name, a.0.queue_id).cmp(&(
            &b.0.topic,
            &b.0.broker_name,
            b.0.queue_id,
        ))
    });
    let lag = |o: &OffsetWrapper| (o.broker_offset - o.consumer_offset.max(0)).max(0);
    let inflight = |o: &OffsetWrapper| (o.pull_offset - o.consumer_offset.max(0)).max(0);
    let total_lag: i64 = rows.iter().map(|(_, o)| lag(o)).sum();
    let total_inflight: i64 = rows.iter().map(|(_, o)| inflight(o)).sum();
    if args.common.json {
        print_json(&json!({
            "group": group,
            "queues": rows.iter().map(|(mq, o)| json!({
                "topic": mq.topic,
                "brokerName": mq.broker_name,
                "queueId": mq.queue_id,
                "brokerOffset": o.broker_offset,
                "consumerOffset": o.consumer_offset.max(0),
                "pullOffset": o.pull_offset.max(o.consumer_offset.max(0)),
                "lag": lag(o),
                "diff": lag(o),
                "inflight": inflight(o),
                "lastTimestamp": o.last_timestamp,
                "lastTime": format_time_seconds(o.last_timestamp),
            })).collect::<Vec<_>>(),
            "consumeTps": tps,
            "totalLag": total_lag,
            "diffTotal": total_lag,
            "totalInflight": total_inflight,
        }));
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|(mq, o)| {
                vec![
                    mq.topic.clone(),
                    mq.broker_name.clone(),
                    mq.queue_id.to_string(),
                    o.broker_offset.to_string(),
                    o.consumer_offset.max(0).to_string(),
                    lag(o).to_string(),
                    inflight(o).to_string(),
                    format_time_seconds(o.last_timestamp),
                ]
            })
            .collect();
        print_table(
            &[
                "Topic",
                "Broker Name",
                "QID",
                "Broker Offset",
                "Consumer Offset",
                "Diff",
                "Inflight",
                "LastTime",
            ],
            &table,
        );
        println!();
        println!("Consume TPS: {tps:.2}");
        println!("Consume Diff Total: {total_lag}");
        println!("Consume Inflight Total: {total_inflight}");
    }
    Ok(())
}

/// GET_CONSUME_STATS (208) of `group` from every broker, merged; `Ok(None)` when no broker
/// knows the group.
async fn consume_stats(
    admin: &Admin,
    brokers: &[BrokerRef],
    group: &str,
    topic: Option<&str>,
) -> Result<Option<(f64, Vec<(MessageQueue, OffsetWrapper)>)>> {
    let header = GetConsumeStatsRequestHeader {
        consumer_group: group.to_string(),
        topic: topic.map(str::to_string),
        topic_list: None,
    };
    let mut rows = Vec::new();
    let mut tps = 0.0;
    let mut known = false;
    for broker in brokers {
        let reply = admin
            .call(
                &broker.addr,
                RemotingCommand::request_with_header(request::GET_CONSUME_STATS, &header),
            )
            .await?;
        if reply.code == response::SUBSCRIPTION_GROUP_NOT_EXIST {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))?;
        known = true;
        let stats: ConsumeStats =
            decode_json(reply.body.as_deref().unwrap_or_default()).context("bad consume stats")?;
        tps += stats.consume_tps;
        rows.extend(stats.offset_table.0);
    }
    Ok(known.then_some((tps, rows)))
}

/// `consumerProgress` without `-g`: one line per subscription group of the brokers
/// (`#Group #Count #Version #Type #Model #TPS #Diff Total`, as mqadmin prints).
async fn all_groups_progress(admin: &Admin, args: &ConsumerProgressArgs) -> Result<()> {
    let brokers = match (&args.broker, &args.topic) {
        (Some(addr), _) => vec![admin.named(addr).await],
        (None, Some(topic)) => admin.topic_masters(topic, args.cluster.as_deref()).await?,
        (None, None) => admin.targets(None, args.cluster.as_deref()).await?,
    };
    let mut groups = std::collections::BTreeSet::new();
    for broker in &brokers {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(
                    request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                    Default::default(),
                ),
            )
            .await?;
        let body: Value = serde_json::from_slice(reply.body.as_deref().unwrap_or_default())
            .context("bad subscription group list")?;
        if let Some(table) = body["subscriptionGroupTable"].as_object() {
            groups.extend(table.keys().cloned());
        }
    }
    groups.remove(TOOLS_CONSUMER_GROUP);
    let mut lines = Vec::new();
    for group in &groups {
        // All of the group's topics, then only `-t`'s: a group that never consumed the topic
        // is not listed with the topic's whole backlog as its lag.
        let Some((tps, mut rows)) = consume_stats(admin, &brokers, group, None).await? else {
            continue;
        };
        if let Some(topic) = &args.topic {
            rows.retain(|(mq, _)| &mq.topic == topic);
            if rows.is_empty() {
                continue;
            }
        }
        let diff: i64 = rows
            .iter()
            .map(|(_, o)| (o.broker_offset - o.consumer_offset.max(0)).max(0))
            .sum();
        let online = connections(admin, &brokers, group).await?;
        lines.push((group.clone(), online, tps, diff));
    }
    if args.common.json {
        print_json(&json!({
            "groups": lines.iter().map(|(group, online, tps, diff)| {
                let (count, version, consume_type, model) = match online {
                    Some(c) => (
                        c.connections.len(),
                        c.connections.values().map(|(_, _, v)| *v).max(),
                        Some(c.consume_type.clone()),
                        Some(c.message_model.clone()),
                    ),
                    None => (0, None, None, None),
                };
                json!({
                    "group": group,
                    "count": count,
                    "version": version,
                    "versionDesc": version.map_or("OFFLINE".to_string(), version_desc),
                    "consumeType": consume_type,
                    "messageModel": model,
                    "consumeTps": tps,
                    "diffTotal": diff,
                })
            }).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|(group, online, tps, diff)| {
            let (count, version, consume_type, model) = match online {
                Some(c) => (
                    c.connections.len().to_string(),
                    c.connections
                        .values()
                        .map(|(_, _, v)| *v)
                        .max()
                        .map_or("OFFLINE".into(), version_desc),
                    match c.consume_type.as_str() {
                        "CONSUME_ACTIVELY" => "PULL".to_string(),
                        "CONSUME_POP" => "POP".to_string(),
                        _ => "PUSH".to_string(),
                    },
                    c.message_model.clone(),
                ),
                None => ("0".into(), "OFFLINE".into(), "-".into(), "-".into()),
            };
            vec![
                group.clone(),
                count,
                version,
                consume_type,
                model,
                format!("{tps:.2}"),
                diff.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "Group",
            "Count",
            "Version",
            "Type",
            "Model",
            "TPS",
            "Diff Total",
        ],
        &rows,
    );
    Ok(())
}

pub async fn reset_by_time(args: ResetOffsetArgs) -> Result<()> {
    let timestamp = match &args.timestamp {
        Some(text) => parse_time(text, now_ms())?,
        None => -1,
    };
    if args.queue.is_some_and(|q| q < 0) {
        bail!(
            "bad queue id {}: must not be negative",
            args.queue.unwrap_or_default()
        );
    }
    if args.offset.is_some_and(|o| o < 0) {
        bail!(
            "bad offset {}: must not be negative",
            args.offset.unwrap_or_default()
        );
    }
    let _ = args.force;
    reset(
        &args.common,
        &args.group,
        &args.topic,
        timestamp,
        args.queue,
        args.offset,
        args.broker.as_deref(),
        args.cluster.as_deref(),
    )
    .await
}

pub async fn skip(args: SkipArgs) -> Result<()> {
    let _ = args.force;
    reset(
        &args.common,
        &args.group,
        &args.topic,
        -1,
        None,
        None,
        args.broker.as_deref(),
        args.cluster.as_deref(),
    )
    .await
}

struct QueueReset {
    broker: String,
    queue_id: i32,
    old: Option<i64>,
    new: i64,
}

#[allow(clippy::too_many_arguments)]
async fn reset(
    common: &Common,
    group: &str,
    topic: &str,
    timestamp: i64,
    queue: Option<i32>,
    offset: Option<i64>,
    broker: Option<&str>,
    cluster: Option<&str>,
) -> Result<()> {
    let admin = Admin::new(common)?;
    let brokers: Vec<BrokerRef> = match broker {
        Some(addr) => vec![admin.named(addr).await],
        None => admin.topic_masters(topic, cluster).await?,
    };
    if queue.is_some() && brokers.len() > 1 {
        bail!("topic {topic} is served by several brokers: name one with -b to reset one queue");
    }
    let header = ResetOffsetRequestHeader {
        group: group.to_string(),
        topic: topic.to_string(),
        queue_id: Some(queue.unwrap_or(-1)),
        offset: Some(offset.unwrap_or(-1)),
        timestamp,
        is_force: true,
    };
    let mut queues = Vec::new();
    let mut generations = BTreeMap::new();
    for target in &brokers {
        let reply = admin
            .call_ok(
                &target.addr,
                RemotingCommand::request_with_header(
                    request::INVOKE_BROKER_TO_RESET_OFFSET,
                    &header,
                ),
            )
            .await
            .with_context(|| format!("resetting group {group} on topic {topic}"))?;
        let body: ResetOffsetBody =
            decode_json(reply.body.as_deref().unwrap_or_default()).context("bad reset reply")?;
        let old: BTreeMap<i32, i64> = reply
            .ext_fields
            .get(RESET_OLD_OFFSETS_EXT)
            .map(|text| {
                text.split(',')
                    .filter_map(|pair| pair.split_once(':'))
                    .filter_map(|(q, o)| Some((q.parse().ok()?, o.parse().ok()?)))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(generation) = reply.ext_fields.get(RESET_GENERATION_EXT) {
            generations.insert(target.name.clone(), generation.clone());
        }
        for (mq, new) in body.offset_table.0 {
            queues.push(QueueReset {
                broker: mq.broker_name.clone(),
                queue_id: mq.queue_id,
                old: old.get(&mq.queue_id).copied().filter(|o| *o >= 0),
                new,
            });
        }
    }
    queues.sort_by(|a, b| (&a.broker, a.queue_id).cmp(&(&b.broker, b.queue_id)));
    if common.json {
        print_json(&json!({
            "group": group,
            "topic": topic,
            "timestamp": timestamp,
            "queues": queues.iter().map(|q| json!({
                "brokerName": q.broker,
                "queueId": q.queue_id,
                "oldOffset": q.old,
                "newOffset": q.new,
            })).collect::<Vec<_>>(),
            "generation": generations.values().filter_map(|g| g.parse::<u64>().ok()).max(),
        }));
    } else {
        let rows: Vec<Vec<String>> = queues
            .iter()
            .map(|q| {
                vec![
                    q.broker.clone(),
                    q.queue_id.to_string(),
                    q.old.map_or("-".into(), |o| o.to_string()),
                    q.new.to_string(),
                ]
            })
            .collect();
        print_table(&["brokerName", "queueId", "oldOffset", "newOffset"], &rows);
        for (broker, generation) in &generations {
            println!("reset generation on {broker}: {generation}");
        }
    }
    Ok(())
}

pub async fn history(args: OffsetHistoryArgs) -> Result<()> {
    let since = match &args.since {
        Some(text) => Some(parse_time(text, now_ms())?),
        None => None,
    };
    let admin = Admin::new(&args.common)?;
    let brokers = match &args.broker {
        Some(addr) => vec![admin.named(addr).await],
        None => admin.topic_masters(&args.topic, None).await?,
    };
    let mut ext = ferromq_protocol::remoting::ExtFields::new();
    ext.insert("group", args.group.clone());
    ext.insert("topic", args.topic.clone());
    if let Some(queue) = args.queue {
        ext.insert("queueId", queue.to_string());
    }
    if let Some(since) = since {
        ext.insert("since", since.to_string());
    }
    let mut events: Vec<Value> = Vec::new();
    for broker in &brokers {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(OFFSET_HISTORY, ext.clone()),
            )
            .await?;
        let list: Vec<Value> = serde_json::from_slice(reply.body.as_deref().unwrap_or_default())
            .context("bad offset history reply")?;
        for mut event in list {
            event["brokerName"] = json!(broker.name);
            events.push(event);
        }
    }
    events.sort_by_key(|e| (e["time"].as_i64(), e["physOffset"].as_u64()));
    if args.common.json {
        print_json(&json!({
            "group": args.group,
            "topic": args.topic,
            "events": events,
        }));
    } else {
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                let text = |key: &str| match &e[key] {
                    Value::String(s) => s.clone(),
                    Value::Null => "-".into(),
                    other => other.to_string(),
                };
                vec![
                    format_time(e["time"].as_i64().unwrap_or(0)),
                    text("brokerName"),
                    text("queueId"),
                    text("offset"),
                    text("kind"),
                    text("generation"),
                    text("clientId"),
                    text("accessKey"),
                ]
            })
            .collect();
        print_table(
            &[
                "Time",
                "Broker Name",
                "QID",
                "Offset",
                "Kind",
                "Generation",
                "Client",
                "Access Key",
            ],
            &rows,
        );
    }
    Ok(())
}
