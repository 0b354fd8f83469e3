//! Cluster and message commands: `clusterList` (each broker with its id and role: MASTER for
//! broker id 0, SLAVE otherwise), `queryMsgById`.

use anyhow::{Context, Result};
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::client::ViewMessageRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{MessageId, RecordView};
use serde_json::json;

use super::client::Admin;
use super::ha::role_of;
use super::message::Shown;
use super::{print_json, print_table, Common};

/// Flags of `clusterList`.
#[derive(Debug, clap::Args)]
pub struct ClusterListArgs {
    #[command(flatten)]
    common: Common,
    /// Only this cluster.
    #[arg(short = 'c', long = "clusterName")]
    cluster: Option<String>,
}

/// Flags of `queryMsgById`.
#[derive(Debug, clap::Args)]
pub struct QueryMsgByIdArgs {
    #[command(flatten)]
    common: Common,
    /// Offset message id (store host + CommitLog offset, hex).
    #[arg(short = 'i', long = "msgId")]
    msg_id: String,
    /// Topic (sent along, as 5.x clients do).
    #[arg(short = 't', long = "topic")]
    topic: Option<String>,
}

/// Every broker (cluster, broker name, broker id, address) the name server's cluster info
/// lists, of `cluster` only when given.
pub(super) fn members(
    info: &ferromq_protocol::remoting::body::route::ClusterInfo,
    cluster: Option<&str>,
) -> Vec<(String, String, i64, String)> {
    let mut out = Vec::new();
    for (name_of_cluster, names) in &info.cluster_addr_table {
        if cluster.is_some_and(|c| c != name_of_cluster) {
            continue;
        }
        for name in names {
            let Some(data) = info.broker_addr_table.get(name) else {
                continue;
            };
            for (id, addr) in &data.broker_addrs {
                out.push((name_of_cluster.clone(), name.clone(), *id, addr.clone()));
            }
        }
    }
    out
}

pub async fn list(args: ClusterListArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let info = admin.cluster_info().await?;
    let rows = members(&info, args.cluster.as_deref());
    if let Some(cluster) = &args.cluster {
        if rows.is_empty() {
            anyhow::bail!("cluster {cluster} does not exist on the name server");
        }
    }
    if args.common.json {
        print_json(&json!({
            "brokers": rows.iter().map(|(c, n, id, addr)| json!({
                "cluster": c, "brokerName": n, "brokerId": id, "addr": addr,
                "role": role_of(*id),
            })).collect::<Vec<_>>(),
        }));
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|(c, n, id, addr)| {
                vec![
                    c.clone(),
                    n.clone(),
                    id.to_string(),
                    role_of(*id).to_string(),
                    addr.clone(),
                ]
            })
            .collect();
        print_table(
            &["Cluster Name", "Broker Name", "BID", "Role", "Addr"],
            &table,
        );
    }
    Ok(())
}

pub async fn query_by_id(args: QueryMsgByIdArgs) -> Result<()> {
    let id = MessageId::decode(args.msg_id.trim())
        .with_context(|| format!("bad message id {:?}", args.msg_id))?;
    let admin = Admin::new(&args.common)?;
    let addr = id.store_host.to_string();
    let header = ViewMessageRequestHeader {
        offset: id.phys_offset as i64,
        topic: args.topic.clone(),
    };
    let reply = admin
        .call_ok(
            &addr,
            RemotingCommand::request_with_header(request::VIEW_MESSAGE_BY_ID, &header),
        )
        .await
        .with_context(|| format!("looking up message {}", args.msg_id))?;
    let bytes = reply.body.as_deref().unwrap_or_default();
    let view = RecordView::parse(bytes).context("the broker returned a malformed message")?;
    let broker = admin.named(&addr).await;
    let shown = Shown::from_view(&view, &broker.name);
    // A transaction's half message: the broker adds its state.
    let transaction = reply
        .ext_fields
        .get(ferromq_protocol::remoting::extensions::TRANSACTION_STATE_EXT);
    if args.common.json {
        let mut message = shown.to_json(true);
        // The id asked for, as mqadmin shows it (the unique key is among `properties`).
        message["msgId"] = json!(args.msg_id.trim());
        if let Some(state) = transaction {
            message["transaction"] = json!({"halfMessage": true, "state": state});
        }
        print_json(&message);
    } else {
        shown.print_detail();
        if let Some(state) = transaction {
            println!("{:<20}half message (prepared), {state}", "Transaction:");
        }
    }
    Ok(())
}
