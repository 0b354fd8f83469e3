//! CLONE_GROUP_OFFSET (314): copy a source group's committed offsets on a topic (or on every
//! topic it has offsets for) to a destination group.
//!
//! - The copy is a **reset of the destination group**: one reset record per topic through
//!   [`reset::apply`], so it is durable before the reply, starts a new generation of
//!   (destGroup, topic), and fences the destination's online consumers exactly as
//!   `resetOffsetByTime` does; a running destination consumer cannot undo it (invariant 3).
//! - Only queues the source group has an offset for are copied; the destination's other
//!   queues keep theirs (Java replaces the whole queue map; ferromq never erases progress it
//!   was not asked to move).
//! - Without `offline=true`, a topic is skipped when the source group is online but none of
//!   its members subscribes to it (Java's rule).
//! - The reply is SUCCESS (Java's admin reads nothing else) plus ferromq's ext fields for
//!   `ferromq admin cloneGroupOffset`: `cloned` = `topic/queueId:old>new,...` (`old` is `-1`
//!   when the destination had no offset), `skipped` = topics left out by the rule above, and
//!   `generation` (the highest one established).
//! - An internal source or destination group (`%SCHEDULE%`), or an explicit reserved topic, is
//!   refused with NO_PERMISSION (`access`); when every topic of the source is cloned, reserved
//!   topics are left out and listed in `skipped`.

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::CloneGroupOffsetRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::offsets::OffsetEntry;

use super::access::{self, Request};
use super::reset::{self, ResetPlan};
use super::{bad_header, success};
use crate::context::BrokerContext;

/// Client id recorded on the reset records a clone writes.
const CLONE_CLIENT_ID: &str = "admin-clone";

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<CloneGroupOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let (source, destination) = (header.src_group.as_str(), header.dest_group.as_str());
    if source.is_empty() || destination.is_empty() || source == destination {
        return command.reply(
            response::INVALID_PARAMETER,
            Some("srcGroup and destGroup must be two different, non-empty groups".into()),
        );
    }
    for group in [source, destination] {
        if let Err(refusal) = access::client_group(ctx, group, Request::Clone) {
            return refusal.reply(command);
        }
    }
    let source_offsets = match ctx.store.offset_view().await {
        Ok(view) => view.group_offsets(source),
        Err(error) => return command.reply(response::SYSTEM_BUSY, Some(error.to_string())),
    };
    let source_known = !source_offsets.is_empty()
        || ctx.groups.get(source).is_some()
        || ctx.clients.has_online_consumers(source);
    if !source_known {
        return command.reply(
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            Some(format!("subscription group {source} does not exist")),
        );
    }
    let mut topics: Vec<String> = match header.topic.as_deref().map(str::trim) {
        Some(topic) if !topic.is_empty() => {
            if let Err(refusal) = access::client_topic(ctx, topic, Request::Clone) {
                return refusal.reply(command);
            }
            if ctx.topics.get(topic).is_none() {
                return command.reply(
                    response::TOPIC_NOT_EXIST,
                    Some(format!("topic {topic} does not exist")),
                );
            }
            vec![topic.to_string()]
        }
        _ => source_offsets.iter().map(|(t, _, _)| t.clone()).collect(),
    };
    topics.sort();
    topics.dedup();
    // The destination becomes a known group, as a commit would make it.
    if let Err(error) = ctx.groups.ensure(destination) {
        return command.reply(response::INVALID_PARAMETER, Some(error.to_string()));
    }
    let offline = header.offline.unwrap_or(false);
    let mut cloned = Vec::new();
    let mut skipped = Vec::new();
    let mut generation = 0;
    for topic in &topics {
        if ctx.topics.get(topic).is_none() {
            continue;
        }
        if ferromq_protocol::names::is_reserved_topic(topic) {
            tracing::info!(%source, %topic, "clone skipped: the topic is reserved for the broker");
            skipped.push(topic.clone());
            continue;
        }
        if !offline
            && ctx.clients.has_online_consumers(source)
            && ctx.clients.subscription(source, topic).is_none()
        {
            tracing::info!(%source, %topic, "clone skipped: the online source group does not subscribe to the topic");
            skipped.push(topic.clone());
            continue;
        }
        let entries: Vec<OffsetEntry> = source_offsets
            .iter()
            .filter(|(t, _, _)| t == topic)
            .map(|(_, queue_id, stored)| OffsetEntry {
                topic: topic.clone(),
                queue_id: *queue_id,
                offset: stored.offset,
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let plan = ResetPlan {
            group: destination,
            topic,
            entries: entries.clone(),
            client_id: CLONE_CLIENT_ID,
            cause: format!("admin clone of group {source}'s offsets"),
            timestamp: 0,
            cpp_request: false,
        };
        let done = match reset::apply(ctx, plan).await {
            Ok(done) => done,
            Err((code, remark)) => {
                return command.reply(code, Some(format!("cloning topic {topic}: {remark}")))
            }
        };
        generation = generation.max(done.generation);
        for entry in &entries {
            let old = done
                .old
                .get(&entry.queue_id)
                .copied()
                .flatten()
                .map_or(-1, |o| o as i64);
            cloned.push(format!("{topic}/{}:{old}>{}", entry.queue_id, entry.offset));
        }
    }
    let mut reply = success(command);
    reply.ext_fields.insert("cloned".into(), cloned.join(","));
    reply.ext_fields.insert("skipped".into(), skipped.join(","));
    reply
        .ext_fields
        .insert("generation".into(), generation.to_string());
    reply
}
