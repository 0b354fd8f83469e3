//! Group membership as the push consumer sees it, for the pull consumers of the same group:
//! the broker's consumer list (GET_CONSUMER_LIST_BY_GROUP) and RocketMQ's average allocation
//! over the sorted queues and sorted client ids. Pull and push members compute the same
//! split, so each queue has one owner once membership settles.

use std::sync::Arc;

use ferromq_client::push::allocate_averagely;
use ferromq_client::{ClientError, ConnectionPool, MessageQueue, RouteCache};
use ferromq_protocol::remoting::body::misc::ConsumerListBody;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::client::GetConsumerListByGroupRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::REQUEST_TIMEOUT;

/// The sorted, deduplicated client ids of `group`'s live consumers, asked from the broker
/// that masters the first queue of `queues`.
///
/// # Errors
/// Route, transport or decode errors, or the broker's failure code.
pub async fn consumer_ids(
    pool: &ConnectionPool,
    routes: &Arc<RouteCache>,
    queues: &[MessageQueue],
    group: &str,
) -> Result<Vec<String>, ClientError> {
    let Some(first) = queues.first() else {
        return Ok(Vec::new());
    };
    let addr = routes.master_addr(&first.topic, &first.broker_name).await?;
    let header = GetConsumerListByGroupRequestHeader {
        consumer_group: group.to_string(),
    };
    let cmd = RemotingCommand::request_with_header(request::GET_CONSUMER_LIST_BY_GROUP, &header);
    let reply = pool.invoke_success(addr, cmd, REQUEST_TIMEOUT).await?;
    let body: ConsumerListBody = ClientError::decode_body(addr, &reply)?;
    let mut ids = body.consumer_id_list;
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// The queues `me` owns: average allocation of the sorted `queues` over the sorted `ids`.
pub fn allocation(queues: &[MessageQueue], ids: &[String], me: &str) -> Vec<MessageQueue> {
    let mut queues = queues.to_vec();
    queues.sort();
    allocate_averagely(&queues, ids, &me.to_string())
}
