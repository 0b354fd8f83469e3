//! `ferromq admin <command>`: mqadmin's commands, names and flags, against ferromq or RocketMQ
//! servers over the remoting protocol.
//!
//! Conventions (the CLI's, see `main.rs`): human tables on stdout by default; with `--json`
//! exactly one JSON object, on the last stdout line. Any failure (unknown group or topic, a
//! server that cannot be reached, a bad time) returns an error that `main` prints as one
//! `error: ...` line with exit status 1; clap usage errors exit 2. Every network wait is
//! bounded (connect 3 s, request 10 s).
//!
//! Broker addresses come from the name server (`-n`): the topic's route, or the cluster info
//! for group commands; `-b` names one broker instead.

mod broker;
mod client;
mod cluster;
mod controller;
mod damaged;
mod epoch;
mod group;
mod ha;
mod message;
mod progress;
mod sql_schema;
mod time;
mod topic;

use anyhow::Result;
use clap::Subcommand;

/// Flags every admin command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Name server address(es), `host:port[;host:port]`.
    #[arg(short = 'n', long = "namesrvAddr", value_name = "ADDR")]
    pub namesrv: Option<String>,
    /// Print one JSON object (the last stdout line) instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub security: crate::security::SecurityFlags,
}

/// `ferromq admin` subcommands (mqadmin's names).
#[derive(Debug, Subcommand)]
#[command(rename_all = "camelCase")]
pub enum AdminCommand {
    /// Create or update a topic on a broker (-b) or every master of a cluster (-c).
    UpdateTopic(topic::UpdateTopicArgs),
    /// Delete a topic from the brokers of a cluster (or one broker) and the name servers.
    DeleteTopic(topic::DeleteTopicArgs),
    /// List every topic the name server knows.
    TopicList(topic::TopicListArgs),
    /// Print a topic's route.
    TopicRoute(topic::TopicRouteArgs),
    /// Per queue min/max offset and last update time of a topic.
    TopicStatus(topic::TopicStatusArgs),
    /// Create or update a subscription group.
    UpdateSubGroup(group::UpdateSubGroupArgs),
    /// Delete a subscription group.
    DeleteSubGroup(group::DeleteSubGroupArgs),
    /// Per queue broker offset, consumer offset and lag of a group; totals.
    ConsumerProgress(progress::ConsumerProgressArgs),
    /// Reset a group's offsets on a topic to a time (or one queue to an explicit offset).
    ResetOffsetByTime(progress::ResetOffsetArgs),
    /// Reset a group's offsets on a topic to the max offset (skip the backlog).
    SkipAccumulatedMessage(progress::SkipArgs),
    /// Every commit, reset and correction of a group's offsets on a topic (ferromq).
    OffsetHistory(progress::OffsetHistoryArgs),
    /// Brokers of each cluster.
    ClusterList(cluster::ClusterListArgs),
    /// Look a message up by its offset message id.
    QueryMsgById(cluster::QueryMsgByIdArgs),
    /// Replication state of a broker (-b) or of every broker of a cluster (-c): a master's
    /// slaves with their acknowledged offsets and lag, a slave's master and offsets.
    HaStatus(ha::HaStatusArgs),
    /// Epoch entries (epoch, start and end offset) of each broker of a broker group (-b
    /// brokerName) or cluster (-c).
    GetBrokerEpoch(epoch::GetBrokerEpochArgs),
    /// Runtime statistics of a broker (-b) or of every master of a cluster (-c).
    BrokerStatus(broker::BrokerStatusArgs),
    /// Configuration of a broker (-b) or of every master of a cluster (-c).
    GetBrokerConfig(broker::GetBrokerConfigArgs),
    /// Change one run-time key of a broker's configuration (others are refused).
    UpdateBrokerConfig(broker::UpdateBrokerConfigArgs),
    /// Messages of a topic by a word of their KEYS.
    QueryMsgByKey(message::QueryMsgByKeyArgs),
    /// Messages of a topic by unique key (client message id).
    QueryMsgByUniqueKey(message::QueryMsgByUniqueKeyArgs),
    /// The message at a queue offset.
    QueryMsgByOffset(message::QueryMsgByOffsetArgs),
    /// Messages of every queue of a topic in a store-time range.
    PrintMsg(message::PrintMsgArgs),
    /// Connections and subscriptions of an online consumer group.
    ConsumerConnection(group::ConsumerConnectionArgs),
    /// Copy a group's committed offsets on a topic to another group (a reset of it).
    CloneGroupOffset(group::CloneGroupOffsetArgs),
    /// CommitLog ranges a broker keeps but does not serve: damaged ones, undispatchable
    /// records (ferromq).
    QuarantineList(damaged::QuarantineListArgs),
    /// Move a group past one damaged record, recorded as a reset (ferromq).
    SkipDamagedMessage(damaged::SkipDamagedArgs),
    /// The controller group: leader, term, peers, election metrics (-a controller).
    GetControllerMetaData(controller::GetControllerMetaDataArgs),
    /// Broker groups' masters, epochs and in-sync sets as the controller holds them.
    GetSyncStateSet(controller::GetSyncStateSetArgs),
    /// Make a broker (controller id) the master of its group.
    ElectMaster(controller::ElectMasterArgs),
    /// Make the controller forget brokers of a group (or the whole group).
    CleanBrokerMetadata(controller::CleanBrokerMetadataArgs),
    /// Print the SQL that creates the Rust client's PostgreSQL offset table (ferromq).
    #[command(name = "sqlOffsetSchema")]
    SqlOffsetSchema(sql_schema::SqlOffsetSchemaArgs),
}

/// Runs one admin command.
pub fn run(command: AdminCommand) -> Result<()> {
    if let AdminCommand::SqlOffsetSchema(args) = command {
        return sql_schema::print(args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match command {
            AdminCommand::UpdateTopic(args) => topic::update(args).await,
            AdminCommand::DeleteTopic(args) => topic::delete(args).await,
            AdminCommand::TopicList(args) => topic::list(args).await,
            AdminCommand::TopicRoute(args) => topic::route(args).await,
            AdminCommand::TopicStatus(args) => topic::status(args).await,
            AdminCommand::UpdateSubGroup(args) => group::update(args).await,
            AdminCommand::DeleteSubGroup(args) => group::delete(args).await,
            AdminCommand::ConsumerProgress(args) => progress::consumer_progress(args).await,
            AdminCommand::ResetOffsetByTime(args) => progress::reset_by_time(args).await,
            AdminCommand::SkipAccumulatedMessage(args) => progress::skip(args).await,
            AdminCommand::OffsetHistory(args) => progress::history(args).await,
            AdminCommand::ClusterList(args) => cluster::list(args).await,
            AdminCommand::QueryMsgById(args) => cluster::query_by_id(args).await,
            AdminCommand::HaStatus(args) => ha::status(args).await,
            AdminCommand::GetBrokerEpoch(args) => epoch::get(args).await,
            AdminCommand::BrokerStatus(args) => broker::status(args).await,
            AdminCommand::GetBrokerConfig(args) => broker::get_config(args).await,
            AdminCommand::UpdateBrokerConfig(args) => broker::update_config(args).await,
            AdminCommand::QueryMsgByKey(args) => message::by_key(args).await,
            AdminCommand::QueryMsgByUniqueKey(args) => message::by_unique_key(args).await,
            AdminCommand::QueryMsgByOffset(args) => message::by_offset(args).await,
            AdminCommand::PrintMsg(args) => message::print(args).await,
            AdminCommand::ConsumerConnection(args) => group::consumer_connection(args).await,
            AdminCommand::CloneGroupOffset(args) => group::clone_offsets(args).await,
            AdminCommand::QuarantineList(args) => damaged::quarantine_list(args).await,
            AdminCommand::SkipDamagedMessage(args) => damaged::skip_damaged(args).await,
            AdminCommand::GetControllerMetaData(args) => controller::metadata(args).await,
            AdminCommand::GetSyncStateSet(args) => controller::sync_state_set(args).await,
            AdminCommand::ElectMaster(args) => controller::elect_master(args).await,
            AdminCommand::CleanBrokerMetadata(args) => {
                controller::clean_broker_metadata(args).await
            }
            AdminCommand::SqlOffsetSchema(args) => sql_schema::print(args),
        }
    })
}

/// Prints a table: a header row of `#`-prefixed names, then left-aligned padded rows.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len() + 1).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.len());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.iter().map(|h| format!("#{h}")).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Prints the one JSON object of `--json`.
pub fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// mqadmin's `-i intervalSec`: runs `once` now and then again every `interval` seconds until
/// the process is interrupted (Ctrl-C); without it, once. An error ends the loop.
pub async fn every<F, Fut>(interval: Option<u64>, mut once: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let Some(seconds) = interval else {
        return once().await;
    };
    if seconds == 0 {
        anyhow::bail!("-i intervalSec must be at least 1");
    }
    loop {
        once().await?;
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    }
}
