//! OFFSET_HISTORY (ferromq's own request code, [`crate::codes::OFFSET_HISTORY`]): every
//! commit, reset and correction of (group, topic[, queue]) still in the log, oldest first —
//! the answer to "why did my offset move?".
//!
//! Ext fields: `group`, `topic` (required), `queueId` (optional), `since` (optional, store
//! time in ms; older events are left out). Reply body: a JSON array of
//! `{"time","queueId","offset","kind","clientId","accessKey","generation","physOffset"}`;
//! `generation` is null for a commit that carried none, `accessKey` (the ACL account the
//! request that moved the offset was granted to) is null with ACL off and in records written
//! before access keys were recorded.

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::{ExtFieldsExt, RemotingCommand};
use ferromq_store::OffsetEvent;

use super::{bad_header, success};
use crate::context::BrokerContext;

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let ext = &command.ext_fields;
    let parsed = (|| {
        Ok::<_, ferromq_protocol::remoting::HeaderError>((
            ext.get_str("group")?.to_string(),
            ext.get_str("topic")?.to_string(),
            ext.opt::<i32>("queueId")?,
            ext.opt::<i64>("since")?,
        ))
    })();
    let (group, topic, queue_id, since) = match parsed {
        Ok(fields) => fields,
        Err(error) => return bad_header(command, error),
    };
    let queue_id = match queue_id {
        Some(q) if q >= 0 => Some(q as u32),
        Some(q) => {
            return command.reply(
                response::INVALID_PARAMETER,
                Some(format!("queueId {q} is negative")),
            )
        }
        None => None,
    };
    if ctx.topics.get(&topic).is_none() {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {topic} does not exist")),
        );
    }
    let store = ctx.store.clone();
    let (g, t) = (group.clone(), topic.clone());
    // Reading the log is blocking I/O; keep it off the async workers.
    let events =
        match tokio::task::spawn_blocking(move || store.offset_history(&g, &t, queue_id)).await {
            Ok(Ok(events)) => events,
            Ok(Err(error)) => {
                return command.reply(
                    response::SYSTEM_ERROR,
                    Some(format!("cannot read the offset history: {error}")),
                )
            }
            Err(join) => {
                return command.reply(
                    response::SYSTEM_ERROR,
                    Some(format!("offset history task failed: {join}")),
                )
            }
        };
    if events.is_empty()
        && ctx.groups.get(&group).is_none()
        && !ctx.clients.has_online_consumers(&group)
    {
        return command.reply(
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            Some(format!("subscription group {group} does not exist")),
        );
    }
    let list: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| since.is_none_or(|s| e.timestamp_ms >= s))
        .map(event_json)
        .collect();
    success(command).with_body(serde_json::to_vec(&list).unwrap_or_default())
}

fn event_json(event: &OffsetEvent) -> serde_json::Value {
    serde_json::json!({
        "time": event.timestamp_ms,
        "queueId": event.queue_id,
        "offset": event.offset,
        "kind": event.kind.as_str(),
        "clientId": event.client_id,
        "accessKey": event.access_key,
        "generation": event.generation,
        "physOffset": event.phys_offset,
    })
}
