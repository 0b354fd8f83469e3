//! GET_CONSUMER_CONNECTION_LIST (203): the connections and subscriptions of a consumer group,
//! from the client registry.
//!
//! The body is Java's `ConsumerConnection` JSON: `connectionSet` (`clientId`, `clientAddr`,
//! `language`, `version`), `subscriptionTable` (topic -> `SubscriptionData`), and the
//! group's `consumeType`, `messageModel` and `consumeFromWhere` (taken from the member with
//! the latest heartbeat, as Java keeps the last one it heard). A group without a connected
//! member is CONSUMER_NOT_ONLINE (206) with a remark naming it, as in RocketMQ.

use std::collections::BTreeMap;

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::admin::GetConsumerConnectionListRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::{bad_header, success};
use crate::context::BrokerContext;

pub(super) fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<GetConsumerConnectionListRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let group = header.consumer_group.as_str();
    let mut members = ctx.clients.consumers(group);
    if members.is_empty() {
        return command.reply(
            response::CONSUMER_NOT_ONLINE,
            Some(format!("the consumer group [{group}] is not online")),
        );
    }
    members.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    let connections: Vec<serde_json::Value> = members
        .iter()
        .map(|member| {
            json!({
                "clientId": member.client_id,
                "clientAddr": member.channel.peer.to_string(),
                "language": member.channel.language.name(),
                "version": member.channel.version,
            })
        })
        .collect();
    let mut subscriptions = BTreeMap::new();
    for member in &members {
        for subscription in &member.subscriptions {
            subscriptions
                .entry(subscription.topic.clone())
                .or_insert_with(|| subscription.clone());
        }
    }
    let latest = members
        .iter()
        .max_by_key(|member| member.last_heartbeat)
        .expect("members is not empty");
    let body = json!({
        "connectionSet": connections,
        "subscriptionTable": subscriptions,
        "consumeType": latest.consume_type,
        "messageModel": latest.message_model,
        "consumeFromWhere": latest.consume_from_where,
    });
    success(command).with_body(serde_json::to_vec(&body).unwrap_or_default())
}
