//! QUERY_TOPIC_CONSUME_BY_WHO (300): the consumer groups of a topic, as Java's `GroupList`
//! body `{"groupList": [...]}`. Java mqadmin asks it before printing a message
//! (`queryMsgById`, `queryMsgByKey`/`UniqueKey`, `queryMsgByOffset`) to show which groups
//! consumed it, and `topicList -c`.
//!
//! A group consumes the topic when a connected member subscribes to it or when it holds a
//! stored offset of it (RocketMQ answers the same union). Retry and dead-letter topics are the
//! group's own and are not listed as consumers of other topics.

use std::collections::BTreeSet;

use ferromq_protocol::remoting::headers::admin::QueryTopicConsumeByWhoRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::{bad_header, success};
use crate::context::BrokerContext;

/// Groups listed in one reply at most (the reply body stays bounded).
const GROUPS_MAX: usize = 10_000;

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<QueryTopicConsumeByWhoRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let topic = header.topic.as_str();
    let mut groups = BTreeSet::new();
    for group in ctx.clients.consumer_groups() {
        if ctx.clients.subscription(&group, topic).is_some() {
            groups.insert(group);
        }
    }
    let offsets = match crate::core::view::offsets(&ctx.store).await {
        Ok(offsets) => offsets,
        Err(error) => return super::code_map::error_reply(command, &error),
    };
    for group in offsets.groups() {
        if groups.len() >= GROUPS_MAX {
            break;
        }
        if offsets
            .group_offsets(&group)
            .iter()
            .any(|(t, _, _)| t == topic)
        {
            groups.insert(group);
        }
    }
    let listed: Vec<&String> = groups.iter().take(GROUPS_MAX).collect();
    let body = json!({ "groupList": listed });
    success(command).with_body(serde_json::to_vec(&body).unwrap_or_default())
}
