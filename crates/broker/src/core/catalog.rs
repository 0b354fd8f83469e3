//! Changes of the broker's catalog by administrators: topics and subscription groups.
//!
//! - A topic or group name that breaks RocketMQ's rules, a reserved topic and an internal group
//!   are refused (`access`); a deletion may name a reserved-free topic or group stored before
//!   names were checked, so it stays deletable.
//! - A topic has 1 to [`TOPIC_QUEUES_MAX`] read and write queues; its permission keeps only
//!   the read, write and inherit bits.
//! - Every change of topics is registered with the name servers at once.
//! - Only a master changes its catalog; a slave refuses every change (`NotMaster`), and
//!   takes its master's catalog from the replicated log. A change is acknowledged once the
//!   catalog record carrying it is ([`published`], `replication::catalog_log`).

use super::access::{self, Request};
use super::error::{Refusal, RefusalKind};
use crate::catalog::groups::SubscriptionGroupConfig;
use crate::catalog::topics::{topic_with_queues, PERM_INHERIT, PERM_READ, PERM_WRITE};
use crate::context::BrokerContext;

/// Most read or write queues a topic may have.
pub const TOPIC_QUEUES_MAX: i32 = 1024;

/// An administrator's topic definition (UPDATE_AND_CREATE_TOPIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Topic name.
    pub name: String,
    /// Read queues.
    pub read_queue_nums: i32,
    /// Write queues.
    pub write_queue_nums: i32,
    /// Permission bits.
    pub perm: i32,
    /// Orderly topic.
    pub order: bool,
    /// System flag.
    pub topic_sys_flag: i32,
}

/// Creates or updates a topic.
pub fn upsert_topic(ctx: &BrokerContext, spec: &TopicSpec) -> Result<(), Refusal> {
    master_only(ctx, "topic change")?;
    access::client_topic(ctx, &spec.name, Request::UpdateTopic)?;
    let in_range = |n: i32| (1..=TOPIC_QUEUES_MAX).contains(&n);
    if !in_range(spec.read_queue_nums) || !in_range(spec.write_queue_nums) {
        return Err(Refusal::new(
            RefusalKind::InvalidArgument,
            format!("queue counts must be between 1 and {TOPIC_QUEUES_MAX}"),
        ));
    }
    let mut config = topic_with_queues(&spec.name, 1);
    config.read_queue_nums = spec.read_queue_nums;
    config.write_queue_nums = spec.write_queue_nums;
    config.perm = spec.perm & (PERM_READ | PERM_WRITE | PERM_INHERIT);
    config.order = spec.order;
    config.topic_sys_flag = spec.topic_sys_flag;
    ctx.topics
        .upsert(config)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?;
    ctx.register_now.notify_one();
    Ok(())
}

/// Deletes a topic.
pub fn delete_topic(ctx: &BrokerContext, topic: &str) -> Result<(), Refusal> {
    master_only(ctx, "topic deletion")?;
    access::reserved_topic(ctx, topic, Request::DeleteTopic)?;
    match ctx.topics.delete(topic) {
        Ok(true) => {
            ctx.register_now.notify_one();
            Ok(())
        }
        Ok(false) => Err(Refusal::new(
            RefusalKind::TopicMissing,
            format!("topic {topic} does not exist"),
        )),
        Err(error) => Err(Refusal::new(RefusalKind::Internal, error.to_string())),
    }
}

/// Creates or updates a subscription group.
pub fn upsert_group(ctx: &BrokerContext, config: SubscriptionGroupConfig) -> Result<(), Refusal> {
    master_only(ctx, "group change")?;
    access::client_group(ctx, &config.group_name, Request::UpdateGroup)?;
    ctx.groups
        .upsert(config)
        .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))
}

/// Deletes a subscription group.
pub fn delete_group(ctx: &BrokerContext, group: &str) -> Result<(), Refusal> {
    master_only(ctx, "group deletion")?;
    access::internal_group(ctx, group, Request::DeleteGroup)?;
    match ctx.groups.delete(group) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Refusal::new(
            RefusalKind::GroupMissing,
            format!("group {group} does not exist"),
        )),
        Err(error) => Err(Refusal::new(RefusalKind::Internal, error.to_string())),
    }
}

/// Refuses a catalog change on a broker that is not master.
fn master_only(ctx: &BrokerContext, what: &'static str) -> Result<(), Refusal> {
    ctx.replication
        .check_writable(what)
        .map_err(|error| Refusal::new(RefusalKind::NotMaster, error.to_string()))
}

/// Resolves once the catalog as it is now is in the log, acknowledged like any write (so
/// slaves follow it); at once when the newest catalog record already holds it.
///
/// # Errors
/// The catalog record was not acknowledged.
pub async fn published(ctx: &BrokerContext) -> Result<(), super::error::WriteError> {
    crate::replication::catalog_log::publish(ctx).await
}
