//! The assignment: replacing the set of consumed queues (committing those that leave) and,
//! in subscribe mode, rebalancing by average allocation over the group's consumer ids.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio::sync::Notify;

use super::fetch::spawn_fetch;
use super::state::{bump, QueueState, Shared};
use crate::error::ClientError;
use crate::rebalance::{allocate_averagely, fetch_consumer_ids};

/// Replaces the assignment with `wanted`; with `only_topics`, queues of other topics are
/// left alone (subscribe mode rebalances per subscribed topic).
pub(super) async fn apply_assignment(
    shared: &Arc<Shared>,
    wanted: BTreeMap<MessageQueue, String>,
    only_topics: Option<&BTreeSet<String>>,
) {
    let mut released = Vec::new();
    {
        let mut state = shared.lock();
        let gone: Vec<MessageQueue> = state
            .queues
            .keys()
            .filter(|q| only_topics.is_none_or(|t| t.contains(&q.topic)))
            .filter(|q| !wanted.contains_key(*q))
            .cloned()
            .collect();
        for queue in gone {
            if let Some(mut q) = state.queues.remove(&queue) {
                if let Some(task) = q.task.take() {
                    task.abort();
                }
                released.push((queue, q.consumed));
            }
        }
        for (queue, expression) in wanted {
            if state.queues.contains_key(&queue) {
                continue;
            }
            let epoch = shared.next_epoch();
            let master_generation = shared.pull.routes().master_generation(&queue.broker_name);
            let task = spawn_fetch(shared, queue.clone(), epoch);
            state.queues.insert(
                queue,
                QueueState {
                    expression,
                    buffer: VecDeque::new(),
                    fetch_offset: None,
                    consumed: None,
                    epoch,
                    master_generation,
                    owner_generation: None,
                    pending_reset: None,
                    paused: false,
                    wake: Arc::new(Notify::new()),
                    task: Some(task),
                },
            );
        }
    }
    let store = shared.pull.offset_store();
    for (queue, consumed) in released {
        // Transactional consumption: only committed transactions move the store, never
        // a polled position (the batch in flight may still roll back).
        if let Some(offset) = consumed.filter(|_| !shared.is_transactional()) {
            store.update(&queue, offset);
            if let Err(error) = store.persist(&queue).await {
                bump(&shared.counters.release_commit_failures);
                tracing::warn!(?queue, %error, "commit of a released queue failed");
            }
        }
        store.remove(&queue);
    }
}

/// One rebalance of every subscribed topic (average allocation).
pub(super) async fn rebalance(shared: &Arc<Shared>) -> Result<(), ClientError> {
    let result = rebalance_inner(shared).await;
    if result.is_err() {
        bump(&shared.counters.rebalance_failures);
    }
    result
}

/// One rebalance of every subscribed topic; the first failure ends it (the current
/// assignment stays).
pub(super) async fn rebalance_inner(shared: &Arc<Shared>) -> Result<(), ClientError> {
    let subscriptions = shared.lock().subscriptions.clone();
    let mut wanted = BTreeMap::new();
    let mut topics = BTreeSet::new();
    for (topic, expression) in &subscriptions {
        let mut queues = shared.pull.fetch_queues(topic).await?;
        queues.sort();
        // Keep the broker's view of this member fresh before asking for the member list.
        shared.pull.heartbeat().await?;
        let mut members = consumer_list(shared, &queues).await?;
        members.sort();
        let mine = allocate_averagely(&queues, &members, shared.pull.client_id());
        wanted.extend(mine.into_iter().map(|q| (q, expression.clone())));
        topics.insert(topic.clone());
    }
    apply_assignment(shared, wanted, Some(&topics)).await;
    Ok(())
}

/// The group's live consumer ids, from the first broker of `queues` that answers.
pub(super) async fn consumer_list(
    shared: &Shared,
    queues: &[MessageQueue],
) -> Result<Vec<String>, ClientError> {
    let topic = queues.first().map(|q| q.topic.clone()).unwrap_or_default();
    let brokers: BTreeSet<&str> = queues.iter().map(|q| q.broker_name.as_str()).collect();
    fetch_consumer_ids(
        &shared.pool,
        shared.pull.routes(),
        &shared.config.group,
        &topic,
        brokers,
        shared.config.request_timeout,
    )
    .await
    .map_err(|last_error| {
        last_error.unwrap_or(ClientError::NoQueue {
            topic,
            kind: "readable",
        })
    })
}
