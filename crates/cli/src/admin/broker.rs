//! Broker commands: `brokerStatus` (GET_BROKER_RUNTIME_INFO, 28), `getBrokerConfig`
//! (GET_BROKER_CONFIG, 26) and `updateBrokerConfig` (UPDATE_BROKER_CONFIG, 25).
//!
//! Each takes `-b brokerAddr` (one broker) or `-c clusterName` (every master of the cluster,
//! found through the name server `-n`); with neither, every master the name server knows.
//! Human output follows mqadmin: `brokerStatus` prints `key : value` lines (prefixed by the
//! broker address when several brokers answer), `getBrokerConfig` prints a
//! `============addr============` banner and `key = value` lines. `--json` prints one object.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::KvTable;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::{json, Value};

use super::client::{Admin, BrokerRef};
use super::{print_json, Common};

/// Which brokers a command talks to.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerTarget {
    /// One broker, `ip:port`.
    #[arg(short = 'b', long = "brokerAddr", conflicts_with = "cluster")]
    broker: Option<String>,
    /// Every master of this cluster (through the name server).
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
}

/// Flags of `brokerStatus`.
#[derive(Debug, clap::Args)]
pub struct BrokerStatusArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    target: BrokerTarget,
}

/// Flags of `getBrokerConfig`.
#[derive(Debug, clap::Args)]
pub struct GetBrokerConfigArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    target: BrokerTarget,
}

/// Flags of `updateBrokerConfig`.
#[derive(Debug, clap::Args)]
pub struct UpdateBrokerConfigArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    target: BrokerTarget,
    /// Config key (RocketMQ's name, e.g. autoCreateTopicEnable).
    #[arg(short = 'k', long = "key")]
    key: String,
    /// New value.
    #[arg(short = 'v', long = "value")]
    value: String,
}

async fn targets(admin: &Admin, target: &BrokerTarget) -> Result<Vec<BrokerRef>> {
    admin
        .targets(target.broker.as_deref(), target.cluster.as_deref())
        .await
}

pub async fn status(args: BrokerStatusArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let brokers = targets(&admin, &args.target).await?;
    let mut tables = Vec::new();
    for broker in &brokers {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(request::GET_BROKER_RUNTIME_INFO, Default::default()),
            )
            .await
            .with_context(|| format!("reading the runtime info of broker {}", broker.addr))?;
        let table: KvTable = decode_json(reply.body.as_deref().unwrap_or_default())
            .with_context(|| format!("broker {} sent a malformed runtime table", broker.addr))?;
        tables.push((broker, table.table));
    }
    if args.common.json {
        print_json(&json!({
            "brokers": tables.iter().map(|(broker, table)| json!({
                "brokerName": broker.name,
                "addr": broker.addr,
                "table": table,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let several = tables.len() > 1;
    for (broker, table) in &tables {
        for (key, value) in table {
            if several {
                println!("{:<24}{key:<32}: {value}", broker.addr);
            } else {
                println!("{key:<32}: {value}");
            }
        }
    }
    Ok(())
}

pub async fn get_config(args: GetBrokerConfigArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let brokers = targets(&admin, &args.target).await?;
    let mut configs = Vec::new();
    for broker in &brokers {
        let reply = admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(request::GET_BROKER_CONFIG, Default::default()),
            )
            .await
            .with_context(|| format!("reading the config of broker {}", broker.addr))?;
        let text = std::str::from_utf8(reply.body.as_deref().unwrap_or_default())
            .with_context(|| format!("broker {} sent a config that is not UTF-8", broker.addr))?;
        let version: Value = reply
            .ext_fields
            .get("version")
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or(Value::Null);
        configs.push((broker, parse_properties(text), version));
    }
    if args.common.json {
        print_json(&json!({
            "brokers": configs.iter().map(|(broker, config, version)| json!({
                "brokerName": broker.name,
                "addr": broker.addr,
                "version": version,
                "config": config,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    for (broker, config, _) in &configs {
        println!("============{}============", broker.addr);
        for (key, value) in config {
            println!("{key:<50}=  {value}");
        }
    }
    Ok(())
}

pub async fn update_config(args: UpdateBrokerConfigArgs) -> Result<()> {
    let (key, value) = (args.key.trim(), args.value.trim());
    if key.is_empty() || key.contains(['=', '\n']) || value.contains('\n') {
        bail!("bad key or value: -k takes one config key, -v one line");
    }
    let admin = Admin::new(&args.common)?;
    let brokers = targets(&admin, &args.target).await?;
    let body = format!("{key}={value}\n");
    let mut updated = Vec::new();
    for broker in &brokers {
        admin
            .call_ok(
                &broker.addr,
                RemotingCommand::new_request(request::UPDATE_BROKER_CONFIG, Default::default())
                    .with_body(body.clone()),
            )
            .await
            .with_context(|| format!("updating {key} on broker {}", broker.addr))?;
        updated.push(broker);
        if !args.common.json {
            println!("update broker config success, {}", broker.addr);
        }
    }
    if args.common.json {
        print_json(&json!({
            "key": key,
            "value": value,
            "updated": updated.iter().map(|b| json!({"brokerName": b.name, "addr": b.addr}))
                .collect::<Vec<_>>(),
        }));
    }
    Ok(())
}

/// `key=value` lines (Java `Properties` text as brokers send it); comments and blank lines
/// skipped, lines without `=` kept with an empty value.
fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .map(|line| match line.split_once('=') {
            Some((key, value)) => (key.trim().to_string(), value.trim().to_string()),
            None => (line.to_string(), String::new()),
        })
        .collect()
}
