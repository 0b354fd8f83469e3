//! Topic commands: `updateTopic`, `deleteTopic`, `topicList`, `topicRoute`, `topicStatus`.

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::TopicList;
use ferromq_protocol::remoting::body::mq_map::TopicStatsTable;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::{
    CreateTopicRequestHeader, DeleteTopicRequestHeader, GetTopicStatsInfoRequestHeader,
};
use ferromq_protocol::remoting::headers::namesrv::DeleteTopicFromNamesrvRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::client::{check, Admin};
use super::time::format_time;
use super::{print_json, print_table, Common};

/// Flags of `updateTopic`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("where").required(true).args(["broker", "cluster"]))]
pub struct UpdateTopicArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Broker address.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
    /// Cluster: every master of it.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// Readable queues.
    #[arg(short = 'r', long = "readQueueNums", default_value_t = 8)]
    read_queues: i32,
    /// Writable queues.
    #[arg(short = 'w', long = "writeQueueNums", default_value_t = 8)]
    write_queues: i32,
    /// Permission: 2 write, 4 read, 6 both.
    #[arg(short = 'p', long = "perm", default_value_t = 6)]
    perm: i32,
    /// Ordered topic.
    #[arg(short = 'o', long = "order", default_value_t = false, action = clap::ArgAction::Set)]
    order: bool,
}

/// Flags of `deleteTopic`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("where").required(true).args(["broker", "cluster"]))]
pub struct DeleteTopicArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Cluster: every master of it.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
    /// One broker address.
    #[arg(short = 'b', long = "brokerAddr")]
    broker: Option<String>,
}

/// Flags of `topicList`.
#[derive(Debug, clap::Args)]
pub struct TopicListArgs {
    #[command(flatten)]
    common: Common,
}

/// Flags of `topicRoute`.
#[derive(Debug, clap::Args)]
pub struct TopicRouteArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
}

/// Flags of `topicStatus`.
#[derive(Debug, clap::Args)]
pub struct TopicStatusArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Only brokers of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
}

pub async fn update(args: UpdateTopicArgs) -> Result<()> {
    if ![2, 4, 6].contains(&args.perm) {
        bail!(
            "bad perm {}: expected 2 (write), 4 (read) or 6 (both)",
            args.perm
        );
    }
    if args.read_queues <= 0 || args.write_queues <= 0 {
        bail!("queue counts must be positive");
    }
    let admin = Admin::new(&args.common)?;
    let targets = admin
        .targets(args.broker.as_deref(), args.cluster.as_deref())
        .await?;
    let header = CreateTopicRequestHeader {
        order: Some(args.order),
        ..CreateTopicRequestHeader::as_java_sends(
            &args.topic,
            args.read_queues,
            args.write_queues,
            args.perm,
        )
    };
    for broker in &targets {
        admin
            .call_ok(
                &broker.addr,
                RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header),
            )
            .await
            .with_context(|| format!("creating topic {}", args.topic))?;
        if !args.common.json {
            println!("create topic to {} success.", broker.addr);
        }
    }
    let config = json!({
        "topicName": args.topic,
        "readQueueNums": args.read_queues,
        "writeQueueNums": args.write_queues,
        "perm": args.perm,
        "order": args.order,
    });
    if args.common.json {
        print_json(&json!({
            "topic": config,
            "brokers": targets.iter().map(|b| json!({"brokerName": b.name, "addr": b.addr})).collect::<Vec<_>>(),
        }));
    } else {
        println!("{config}");
    }
    Ok(())
}

pub async fn delete(args: DeleteTopicArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let targets = admin
        .targets(args.broker.as_deref(), args.cluster.as_deref())
        .await?;
    let header = DeleteTopicRequestHeader {
        topic: args.topic.clone(),
    };
    let mut deleted = Vec::new();
    for broker in &targets {
        let reply = admin
            .call(
                &broker.addr,
                RemotingCommand::request_with_header(request::DELETE_TOPIC_IN_BROKER, &header),
            )
            .await?;
        if reply.code == response::TOPIC_NOT_EXIST {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))?;
        deleted.push(broker.clone());
    }
    if deleted.is_empty() {
        bail!("topic {} does not exist on any target broker", args.topic);
    }
    let namesrv_header = DeleteTopicFromNamesrvRequestHeader {
        topic: args.topic.clone(),
        cluster_name: args.cluster.clone(),
    };
    for addr in admin.namesrv_addrs() {
        let reply = admin
            .call(
                addr,
                RemotingCommand::request_with_header(
                    request::DELETE_TOPIC_IN_NAMESRV,
                    &namesrv_header,
                ),
            )
            .await?;
        check(&reply, &format!("name server {addr}"))?;
    }
    if args.common.json {
        print_json(&json!({
            "topic": args.topic,
            "deletedFrom": deleted.iter().map(|b| json!({"brokerName": b.name, "addr": b.addr})).collect::<Vec<_>>(),
            "nameServers": admin.namesrv_addrs(),
        }));
    } else {
        for broker in &deleted {
            println!(
                "delete topic [{}] from broker {} success.",
                args.topic, broker.addr
            );
        }
        for addr in admin.namesrv_addrs() {
            println!(
                "delete topic [{}] from name server {addr} success.",
                args.topic
            );
        }
    }
    Ok(())
}

pub async fn list(args: TopicListArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let reply = admin
        .namesrv_call(RemotingCommand::new_request(
            request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            Default::default(),
        ))
        .await?;
    check(&reply, "name server")?;
    let topics: TopicList =
        decode_json(reply.body.as_deref().unwrap_or_default()).context("bad topic list")?;
    if args.common.json {
        print_json(&json!({ "topics": topics.topic_list }));
    } else {
        for topic in &topics.topic_list {
            println!("{topic}");
        }
    }
    Ok(())
}

pub async fn route(args: TopicRouteArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let route = admin.route(&args.topic).await?;
    let value = serde_json::to_value(&route)?;
    if args.common.json {
        print_json(&value);
    } else {
        println!("{}", serde_json::to_string_pretty(&value)?);
    }
    Ok(())
}

pub async fn status(args: TopicStatusArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let masters = admin
        .topic_masters(&args.topic, args.cluster.as_deref())
        .await?;
    let header = GetTopicStatsInfoRequestHeader {
        topic: args.topic.clone(),
    };
    let mut queues = Vec::new();
    let mut tps = 0.0;
    for broker in &masters {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::request_with_header(request::GET_TOPIC_STATS_INFO, &header),
            )
            .await?;
        let table: TopicStatsTable =
            decode_json(reply.body.as_deref().unwrap_or_default()).context("bad topic stats")?;
        tps += table.topic_put_tps;
        for (mq, offsets) in table.offset_table.0 {
            queues.push((mq, offsets));
        }
    }
    queues.sort_by(|a, b| (&a.0.broker_name, a.0.queue_id).cmp(&(&b.0.broker_name, b.0.queue_id)));
    if args.common.json {
        print_json(&json!({
            "topic": args.topic,
            "queues": queues.iter().map(|(mq, o)| json!({
                "brokerName": mq.broker_name,
                "queueId": mq.queue_id,
                "minOffset": o.min_offset,
                "maxOffset": o.max_offset,
                "lastUpdateTimestamp": o.last_update_timestamp,
            })).collect::<Vec<_>>(),
            "topicPutTps": tps,
        }));
    } else {
        let rows: Vec<Vec<String>> = queues
            .iter()
            .map(|(mq, o)| {
                vec![
                    mq.broker_name.clone(),
                    mq.queue_id.to_string(),
                    o.min_offset.to_string(),
                    o.max_offset.to_string(),
                    format_time(o.last_update_timestamp),
                ]
            })
            .collect();
        print_table(
            &[
                "Broker Name",
                "QID",
                "Min Offset",
                "Max Offset",
                "Last Updated",
            ],
            &rows,
        );
    }
    Ok(())
}
