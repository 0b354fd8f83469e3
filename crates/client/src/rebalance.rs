//! Clustering rebalance, shared by the push and lite pull consumers: which queues this member
//! consumes ([`allocate_averagely`], RocketMQ's `AllocateMessageQueueAveragely`) and who the
//! members are (`fetch_consumer_ids`, GET_CONSUMER_LIST_BY_GROUP).
//!
//! Every member computes its own share from the same sorted queue and member lists, so the
//! shares partition the queues without any coordination: each queue goes to exactly one
//! member when all members see the same lists. While they disagree (a member joined and not
//! every one has heard yet) a queue may briefly have two consumers or none; the consumers
//! rebalance again on NOTIFY_CONSUMER_IDS_CHANGED and periodically.

use std::time::Duration;

use ferromq_protocol::remoting::body::misc::ConsumerListBody;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::client::GetConsumerListByGroupRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use crate::connections::ConnectionPool;
use crate::error::ClientError;
use crate::route::RouteCache;

/// The slice of `queues` (sorted by the caller) that member `me` of the sorted `members`
/// consumes: consecutive blocks of `len / n` queues, the first `len % n` members taking one
/// more (RocketMQ's `AllocateMessageQueueAveragely`). Empty when `me` is not a member, and
/// for the members past the queue count when there are more members than queues.
pub fn allocate_averagely<T: Clone, M: PartialEq<Me>, Me: ?Sized>(
    queues: &[T],
    members: &[M],
    me: &Me,
) -> Vec<T> {
    let Some(index) = members.iter().position(|m| m == me) else {
        return Vec::new();
    };
    let (len, n) = (queues.len(), members.len());
    if len == 0 {
        return Vec::new();
    }
    let rest = len % n;
    let size = if len <= n {
        1
    } else if rest > 0 && index < rest {
        len / n + 1
    } else {
        len / n
    };
    let start = if rest > 0 && index < rest {
        index * size
    } else {
        index * size + rest
    };
    if start >= len {
        return Vec::new();
    }
    queues[start..(start + size).min(len)].to_vec()
}

/// The consumer ids of `group` (GET_CONSUMER_LIST_BY_GROUP), as the first of `brokers` (broker
/// names of `topic`, tried in order) that answers reports them, unsorted and as sent.
///
/// # Errors
/// `Err(Some(error))`: no broker answered, with the last failure (no master address, a
/// transport error, a refusal, or an undecodable first answer, which ends the search);
/// `Err(None)`: `brokers` was empty. Callers name the second case in their own terms.
pub(crate) async fn fetch_consumer_ids<'a>(
    pool: &ConnectionPool,
    routes: &RouteCache,
    group: &str,
    topic: &str,
    brokers: impl IntoIterator<Item = &'a str>,
    timeout: Duration,
) -> Result<Vec<String>, Option<ClientError>> {
    let mut last_error = None;
    for broker in brokers {
        let addr = match routes.master_addr(topic, broker).await {
            Ok(addr) => addr,
            Err(error) => {
                last_error = Some(error);
                continue;
            }
        };
        let header = GetConsumerListByGroupRequestHeader {
            consumer_group: group.to_string(),
        };
        let cmd =
            RemotingCommand::request_with_header(request::GET_CONSUMER_LIST_BY_GROUP, &header);
        let reply = match pool.invoke(addr, cmd, timeout).await {
            Ok(reply) if reply.code == response::SUCCESS => reply,
            Ok(reply) => {
                last_error = Some(ClientError::Broker {
                    addr,
                    code: reply.code,
                    remark: reply.remark.unwrap_or_default(),
                });
                continue;
            }
            Err(error) => {
                last_error = Some(error);
                continue;
            }
        };
        let body: ConsumerListBody = ClientError::decode_body(addr, &reply).map_err(Some)?;
        return Ok(body.consumer_id_list);
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each member's share, in member order.
    fn shares(queues: usize, members: usize) -> Vec<Vec<usize>> {
        let q: Vec<usize> = (0..queues).collect();
        let m: Vec<usize> = (0..members).collect();
        m.iter().map(|me| allocate_averagely(&q, &m, me)).collect()
    }

    #[test]
    fn rocketmq_examples() {
        // AllocateMessageQueueAveragely: 8 queues among 3 consumers is 3, 3, 2.
        assert_eq!(shares(8, 3), [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        // 10 among 4 is 3, 3, 2, 2; an even split is even.
        assert_eq!(
            shares(10, 4),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7], vec![8, 9]]
        );
        assert_eq!(shares(4, 2), [vec![0, 1], vec![2, 3]]);
        // More consumers than queues: one queue each, the rest idle.
        assert_eq!(shares(2, 3), [vec![0], vec![1], vec![]]);
        // One consumer takes everything; no queue, nothing.
        assert_eq!(shares(5, 1), [vec![0, 1, 2, 3, 4]]);
        assert_eq!(shares(0, 2), [Vec::<usize>::new(), vec![]]);
    }

    #[test]
    fn every_queue_exactly_once() {
        for queues in 0..12usize {
            for members in 1..6usize {
                let mut all: Vec<usize> = shares(queues, members).concat();
                all.sort_unstable();
                assert_eq!(all, (0..queues).collect::<Vec<_>>(), "{queues}/{members}");
                let sizes: Vec<usize> = shares(queues, members).iter().map(Vec::len).collect();
                let (min, max) = (sizes.iter().min(), sizes.iter().max());
                assert!(
                    max.unwrap() - min.unwrap() <= 1,
                    "{queues}/{members}: {sizes:?}"
                );
            }
        }
    }

    #[test]
    fn a_stranger_gets_nothing_and_names_compare_by_value() {
        assert!(allocate_averagely(&[1, 2], &["a"], &"z").is_empty());
        let members = vec!["a".to_string(), "b".to_string()];
        assert_eq!(
            allocate_averagely(&[1, 2, 3, 4, 5], &members, "a"),
            [1, 2, 3]
        );
        assert_eq!(allocate_averagely(&[1, 2, 3, 4, 5], &members, "b"), [4, 5]);
        assert_eq!(
            allocate_averagely(&[1, 2, 3], &members, &"b".to_string()),
            [3]
        );
    }
}
