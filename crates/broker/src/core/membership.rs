//! Group membership and queue locks: who consumes and produces in which group, and which
//! orderly consumer holds which queue.
//!
//! - A heartbeat registers the client in each group it names, creates a consumer group's
//!   subscription config and retry topic (`%RETRY%<group>`, which every consumer subscribes
//!   to) when they do not exist yet, and binds the connection to the client id
//!   ([`super::sessions`]). Membership changes are reported so the group's members rebalance.
//! - A client leaves every group when its connection closes, when it unregisters, or when its
//!   heartbeats stop for longer than `channelExpiredTimeout` (`clients`).
//! - A group's consumer ids are answered sorted (clients allocate queues by index); a group
//!   without consumers is an error, as RocketMQ answers it.
//! - Queue locks (orderly consumption) are granted per (group, queue) to one client at a time
//!   and expire (`clients::QueueLocks`).

use ferromq_protocol::remoting::body::heartbeat::HeartbeatData;
use ferromq_protocol::remoting::body::misc::MessageQueue;

use super::error::{Refusal, RefusalKind};
use crate::catalog::topics::{topic_with_queues, RETRY_PREFIX};
use crate::context::BrokerContext;
use crate::sessions::registry::ClientChannel;

/// Registers a heartbeat from `channel`; returns whether any group's membership changed.
pub fn heartbeat(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    data: &HeartbeatData,
) -> Result<bool, Refusal> {
    for consumer in &data.consumer_data_set {
        ensure_consumer_group(ctx, &consumer.group_name)?;
    }
    if !data.client_id.is_empty() {
        ctx.sessions.bind(channel.id, &data.client_id);
    }
    let changed = ctx.clients.heartbeat(channel, data);
    ctx.notify_ids_changed(&changed);
    Ok(!changed.is_empty())
}

/// The group's subscription config and its retry topic, created when missing. Java admin
/// tools find a group's brokers through the route of `%RETRY%<group>`, so every group that
/// holds offsets (a member heartbeated, or `cloneGroupOffset` wrote them) needs one.
pub fn ensure_consumer_group(ctx: &BrokerContext, group: &str) -> Result<(), Refusal> {
    let retry = ctx
        .groups
        .ensure(group)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?
        .retry_queue_nums
        .max(1) as u32;
    let retry_topic = format!("{RETRY_PREFIX}{group}");
    if ctx.topics.get(&retry_topic).is_none() {
        ctx.topics
            .put_if_absent(topic_with_queues(&retry_topic, retry))
            .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
        ctx.register_now.notify_one();
    }
    Ok(())
}

/// A client leaves its groups (UNREGISTER_CLIENT).
pub fn unregister(
    ctx: &BrokerContext,
    client_id: &str,
    producer_group: Option<&str>,
    consumer_group: Option<&str>,
) {
    let changed = ctx
        .clients
        .unregister(client_id, producer_group, consumer_group);
    ctx.notify_ids_changed(&changed);
}

/// The group's consumer ids, sorted.
pub fn consumer_ids(ctx: &BrokerContext, group: &str) -> Result<Vec<String>, Refusal> {
    let ids = ctx.clients.consumer_ids(group);
    if ids.is_empty() {
        return Err(Refusal::new(
            RefusalKind::Internal,
            format!("no consumer for group {group}"),
        ));
    }
    Ok(ids)
}

/// Locks `queues` for `client_id` in `group`; returns the ones granted.
pub fn lock(
    ctx: &BrokerContext,
    group: &str,
    client_id: &str,
    queues: &[MessageQueue],
) -> Vec<MessageQueue> {
    ctx.locks.lock(group, client_id, queues)
}

/// Releases `client_id`'s locks of `queues` in `group`.
pub fn unlock(ctx: &BrokerContext, group: &str, client_id: &str, queues: &[MessageQueue]) {
    ctx.locks.unlock(group, client_id, queues);
}
