//! Group membership: heartbeats, server notifications, rebalance, orderly queue locks and
//! unregistration.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::encode_json;
use ferromq_protocol::remoting::body::heartbeat::{
    ConsumeFromWhere as WireFrom, ConsumeType, ConsumerData, HeartbeatData,
    MessageModel as WireModel, SubscriptionData,
};
use ferromq_protocol::remoting::body::misc::{
    LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::client::UnregisterClientRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::tags::TagExpression;
use tokio::time::Instant;

use super::queue::{self, now_ms, ProcessQueue};
use super::{ConsumeFromWhere, Counters, Inner, MessageModel, QueueEntry};
use crate::error::ClientError;
use crate::rebalance::{allocate_averagely, fetch_consumer_ids};

/// A newly assigned queue with its subscription expression.
type Assigned = (MessageQueue, String);

/// The wire form of one subscription (heartbeats and running info).
pub(super) fn subscription_data(topic: &str, expression: &str) -> SubscriptionData {
    let tags = TagExpression::parse_subscription(expression);
    SubscriptionData {
        topic: topic.to_string(),
        sub_string: TagExpression::subscription_text(expression),
        code_set: tags.tag_codes(),
        tags_set: tags.tags().to_vec(),
        sub_version: now_ms(),
        expression_type: Some("TAG".into()),
        ..SubscriptionData::default()
    }
}

fn check(addr: SocketAddr, reply: RemotingCommand) -> Result<RemotingCommand, ClientError> {
    if reply.code == response::SUCCESS {
        Ok(reply)
    } else {
        Err(ClientError::Broker {
            addr,
            code: reply.code,
            remark: reply.remark.unwrap_or_default(),
        })
    }
}

/// HEART_BEAT to every known master; takes each connection's server requests (once per
/// connection) so NOTIFY_CONSUMER_IDS_CHANGED triggers a rebalance.
pub(super) async fn heartbeat(inner: &Arc<Inner>) -> Result<(), ClientError> {
    let cfg = &inner.config;
    let data = HeartbeatData {
        client_id: inner.pull.client_id().to_string(),
        producer_data_set: Vec::new(),
        consumer_data_set: vec![ConsumerData {
            group_name: cfg.group.clone(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: match cfg.message_model {
                MessageModel::Clustering => WireModel::Clustering,
                MessageModel::Broadcasting => WireModel::Broadcasting,
            },
            consume_from_where: match cfg.consume_from_where {
                ConsumeFromWhere::LastOffset => WireFrom::ConsumeFromLastOffset,
                ConsumeFromWhere::FirstOffset => WireFrom::ConsumeFromFirstOffset,
                ConsumeFromWhere::Timestamp(_) => WireFrom::ConsumeFromTimestamp,
            },
            subscription_data_set: inner
                .subscriptions
                .iter()
                .map(|(t, e)| subscription_data(t, e))
                .collect(),
            unit_mode: false,
        }],
        heartbeat_fingerprint: None,
        without_sub: None,
    };
    let body = bytes::Bytes::from(encode_json(&data));
    // Every master at once: a dead or paused one (its request times out) must not delay the
    // heartbeat that identifies this client to a new master after a failover.
    let mut sends = tokio::task::JoinSet::new();
    for addr in inner.routes.known_masters() {
        sends.spawn(heartbeat_one(inner.clone(), addr, body.clone()));
    }
    let mut first_error = None;
    while let Some(joined) = sends.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                first_error.get_or_insert(ClientError::Config(format!(
                    "heartbeat task failed: {error}"
                )));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// HEART_BEAT of `body` to `addr`; takes the connection's server requests the first time.
async fn heartbeat_one(
    inner: Arc<Inner>,
    addr: SocketAddr,
    body: bytes::Bytes,
) -> Result<(), ClientError> {
    let cfg = &inner.config;
    let inner = &inner;
    let conn = inner.pool.get(addr, cfg.request_timeout).await?;
    if let Some(requests) = conn.take_server_requests() {
        let task = tokio::spawn(serve_server_requests(
            Arc::downgrade(inner),
            conn.clone(),
            requests,
        ));
        let mut tasks = inner.server_tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
    let cmd = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(body.clone());
    let reply = inner.pool.invoke(addr, cmd, cfg.request_timeout).await?;
    check(addr, reply).map(|_| ())
}

/// Answers the requests a broker sends on one connection: running info, consumer-ids-changed
/// notifications (a rebalance), offset reset pushes; anything else is refused
/// REQUEST_CODE_NOT_SUPPORTED. Ends when the connection closes or the consumer is dropped.
async fn serve_server_requests(
    weak: std::sync::Weak<Inner>,
    conn: Arc<RemotingClient>,
    mut requests: tokio::sync::mpsc::Receiver<RemotingCommand>,
) {
    while let Some(cmd) = requests.recv().await {
        let Some(inner) = weak.upgrade() else { return };
        if cmd.code == request::GET_CONSUMER_RUNNING_INFO {
            let reply = super::running_info::reply(&inner, &cmd);
            if let Err(error) = conn.reply(reply).await {
                tracing::debug!(%error, "running info reply failed");
            }
            continue;
        }
        let handled = match cmd.code {
            request::NOTIFY_CONSUMER_IDS_CHANGED => {
                tracing::debug!("consumer ids changed; rebalancing");
                inner.rebalance_now.notify_one();
                true
            }
            request::RESET_CONSUMER_CLIENT_OFFSET => apply_reset(&inner, &cmd),
            _ => false,
        };
        if !cmd.is_oneway() {
            let code = if handled {
                response::SUCCESS
            } else {
                response::REQUEST_CODE_NOT_SUPPORTED
            };
            let _ = conn.reply(cmd.reply(code, None)).await;
        }
    }
}

/// RESET_CONSUMER_CLIENT_OFFSET: moves every assigned queue the push names to its reset
/// offset ([`ProcessQueue::reset_to`]). False when the push is malformed.
fn apply_reset(inner: &Inner, cmd: &RemotingCommand) -> bool {
    let reset = match crate::reset_push::parse(cmd) {
        Ok(reset) => reset,
        Err(error) => {
            tracing::warn!(%error, "malformed offset reset push ignored");
            return false;
        }
    };
    if reset.group != inner.config.group {
        tracing::warn!(group = %reset.group, "offset reset for another group ignored");
        return true;
    }
    let queues = inner.queues();
    for (queue, offset) in &reset.offsets {
        if let Some(entry) = queues.get(queue) {
            tracing::info!(?queue, offset, "offset reset by the broker; following it");
            entry.pq.reset_to(*offset, inner.offsets.as_ref());
            Counters::add(&inner.counters.resets_applied, 1);
        }
    }
    true
}

pub(super) async fn heartbeat_loop(inner: Arc<Inner>) {
    loop {
        if inner
            .sleep_or_stop(
                inner
                    .config
                    .heartbeat_interval
                    .max(Duration::from_millis(10)),
            )
            .await
        {
            return;
        }
        if let Err(error) = heartbeat(&inner).await {
            tracing::warn!(%error, "push consumer heartbeat failed");
        }
    }
}

pub(super) async fn rebalance_loop(inner: Arc<Inner>) {
    let period = inner
        .config
        .rebalance_interval
        .max(Duration::from_millis(10));
    loop {
        let mut stop = inner.stop.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = inner.rebalance_now.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if inner.is_stopped() {
            return;
        }
        rebalance(&inner).await;
    }
}

/// The group's consumer ids, sorted and without duplicates, from the first broker of
/// `topic` (by name) that answers.
async fn consumer_ids(inner: &Inner, topic: &str) -> Result<Vec<String>, ClientError> {
    let route = inner.routes.route(topic).await?;
    let mut brokers: Vec<&str> = route
        .data
        .broker_datas
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    brokers.sort();
    let mut ids = fetch_consumer_ids(
        &inner.pool,
        &inner.routes,
        &inner.config.group,
        topic,
        brokers,
        inner.config.request_timeout,
    )
    .await
    .map_err(|last_error| {
        last_error.unwrap_or_else(|| ClientError::NoBrokerAddress {
            broker_name: format!("(none for topic {topic})"),
        })
    })?;
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// Recomputes this member's queues and starts or drops queue tasks accordingly.
pub(super) async fn rebalance(inner: &Arc<Inner>) {
    let _serial = inner.rebalance_serial.lock().await;
    if inner.is_stopped() {
        return;
    }
    Counters::add(&inner.counters.rebalances, 1);
    let me = inner.pull.client_id().to_string();
    let mut wanted: BTreeMap<MessageQueue, String> = BTreeMap::new();
    let mut settled_topics = BTreeSet::new();
    for (topic, expression) in &inner.subscriptions {
        let mut queues = match inner.routes.route(topic).await {
            Ok(_) => match inner.routes.read_queues(topic).await {
                Ok(queues) => queues,
                Err(error) => {
                    tracing::debug!(%topic, %error, "no readable queues; keeping current ones");
                    continue;
                }
            },
            Err(error) => {
                tracing::debug!(%topic, %error, "no route; keeping current queues");
                continue;
            }
        };
        queues.sort();
        let mine = if inner.clustering() {
            match consumer_ids(inner, topic).await {
                Ok(ids) if ids.contains(&me) => allocate_averagely(&queues, &ids, &me),
                Ok(_) => {
                    tracing::debug!(%topic, "this client is not in the consumer list yet");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%topic, %error, "consumer list unavailable; keeping current queues");
                    continue;
                }
            }
        } else {
            queues
        };
        settled_topics.insert(topic.clone());
        for q in mine {
            wanted.insert(q, expression.clone());
        }
    }
    let (removed, added): (Vec<(MessageQueue, QueueEntry)>, Vec<Assigned>) = {
        let mut current = inner.queues();
        let gone: Vec<MessageQueue> = current
            .keys()
            .filter(|q| settled_topics.contains(&q.topic) && !wanted.contains_key(*q))
            .cloned()
            .collect();
        let removed = gone
            .into_iter()
            .filter_map(|q| current.remove(&q).map(|e| (q, e)))
            .collect();
        let added = wanted
            .into_iter()
            .filter(|(q, _)| !current.contains_key(q))
            .collect();
        (removed, added)
    };
    if !removed.is_empty() {
        remove_queues(inner, removed).await;
    }
    if !added.is_empty() {
        let mut started = Vec::new();
        for (q, expression) in added {
            let pq = Arc::new(ProcessQueue::new(q.clone(), expression));
            started.push(pq.clone());
            let task = tokio::spawn(queue::run(inner.clone(), pq.clone()));
            inner.queues().insert(q, QueueEntry { pq, task });
        }
        if inner.orderly_locks() {
            lock_queues(inner, &started).await;
        }
        tracing::debug!(count = started.len(), "queues added");
    }
}

/// Stops the queues, persists their offsets, forgets them, and (orderly) unlocks them.
async fn remove_queues(inner: &Arc<Inner>, removed: Vec<(MessageQueue, QueueEntry)>) {
    for (_, entry) in &removed {
        entry.pq.stop();
    }
    if inner.listener.is_orderly() {
        // Let the running message finish so the next owner starts after its commit.
        let deadline = Instant::now() + inner.config.shutdown_timeout;
        for (_, entry) in &removed {
            while !entry.task.is_finished() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let mut unlock = Vec::new();
    for (q, entry) in removed {
        entry.task.abort();
        entry.pq.drop_results();
        if let Err(error) = inner.offsets.persist(&q).await {
            tracing::warn!(queue = ?q, %error, "persisting a removed queue's offset failed");
        }
        inner.offsets.remove(&q);
        unlock.push(q);
    }
    if inner.orderly_locks() {
        for (broker, error) in unlock_queues(inner, &unlock).await {
            tracing::warn!(%broker, %error, "unlocking removed queues failed");
        }
    }
}

pub(super) async fn lock_loop(inner: Arc<Inner>) {
    loop {
        if inner
            .sleep_or_stop(
                inner
                    .config
                    .lock_renew_interval
                    .max(Duration::from_millis(10)),
            )
            .await
        {
            return;
        }
        // Serialized with rebalances: a renewal in flight must not re-lock a queue that a
        // rebalance just removed and unlocked (its next owner would wait for the lock to
        // expire on the broker).
        let _serial = inner.rebalance_serial.lock().await;
        if inner.is_stopped() {
            return;
        }
        let pqs: Vec<Arc<ProcessQueue>> = inner.queues().values().map(|e| e.pq.clone()).collect();
        lock_queues(&inner, &pqs).await;
    }
}

/// LOCK_BATCH_MQ for `pqs`, per broker; granted queues are trusted for `lock_max_live`,
/// refused or unanswered ones are not consumed until a later renewal succeeds.
async fn lock_queues(inner: &Inner, pqs: &[Arc<ProcessQueue>]) {
    let mut by_broker: BTreeMap<String, Vec<&Arc<ProcessQueue>>> = BTreeMap::new();
    for pq in pqs {
        by_broker
            .entry(pq.queue.broker_name.clone())
            .or_default()
            .push(pq);
    }
    for (broker, pqs) in by_broker {
        let asked = Instant::now();
        let result = async {
            let topic = &pqs[0].queue.topic;
            let addr = inner.routes.master_addr(topic, &broker).await?;
            let body = LockBatchRequestBody {
                consumer_group: inner.config.group.clone(),
                client_id: inner.pull.client_id().to_string(),
                only_this_broker: true,
                mq_set: pqs.iter().map(|p| p.queue.clone()).collect(),
            };
            let cmd = RemotingCommand::new_request(request::LOCK_BATCH_MQ, Default::default())
                .with_body(encode_json(&body));
            let reply = check(
                addr,
                inner
                    .pool
                    .invoke(addr, cmd, inner.config.request_timeout)
                    .await?,
            )?;
            let granted: LockBatchResponseBody = ClientError::decode_body(addr, &reply)?;
            Ok::<_, ClientError>(granted.lock_ok_mq_set)
        }
        .await;
        match result {
            Ok(granted) => {
                let granted: BTreeSet<MessageQueue> = granted.into_iter().collect();
                for pq in pqs {
                    pq.set_locked_until(
                        granted
                            .contains(&pq.queue)
                            .then(|| asked + inner.config.lock_max_live),
                    );
                }
            }
            Err(error) => {
                // Keep the current deadlines: a lock stays trusted until it runs out.
                tracing::warn!(%broker, %error, "locking queues failed");
            }
        }
    }
}

async fn unlock_queues(inner: &Inner, queues: &[MessageQueue]) -> Vec<(String, ClientError)> {
    let mut by_broker: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
    for q in queues {
        by_broker
            .entry(q.broker_name.clone())
            .or_default()
            .push(q.clone());
    }
    let mut failures = Vec::new();
    for (broker, queues) in by_broker {
        let result = async {
            let addr = inner.routes.master_addr(&queues[0].topic, &broker).await?;
            let body = LockBatchRequestBody {
                consumer_group: inner.config.group.clone(),
                client_id: inner.pull.client_id().to_string(),
                only_this_broker: true,
                mq_set: queues,
            };
            let cmd = RemotingCommand::new_request(request::UNLOCK_BATCH_MQ, Default::default())
                .with_body(encode_json(&body));
            check(
                addr,
                inner
                    .pool
                    .invoke(addr, cmd, inner.config.request_timeout)
                    .await?,
            )
            .map(|_| ())
        }
        .await;
        if let Err(error) = result {
            failures.push((broker, error));
        }
    }
    failures
}

/// Shutdown's unlock of every queue this member held.
pub(super) async fn unlock(inner: &Inner, queues: &[MessageQueue]) -> Vec<(String, ClientError)> {
    unlock_queues(inner, queues).await
}

/// UNREGISTER_CLIENT to every known master.
pub(super) async fn unregister(inner: &Inner) -> Vec<(SocketAddr, ClientError)> {
    let mut failures = Vec::new();
    for addr in inner.routes.known_masters() {
        let header = UnregisterClientRequestHeader {
            client_id: inner.pull.client_id().to_string(),
            producer_group: None,
            consumer_group: Some(inner.config.group.clone()),
        };
        let cmd = RemotingCommand::request_with_header(request::UNREGISTER_CLIENT, &header);
        let result = inner
            .pool
            .invoke(addr, cmd, inner.config.request_timeout)
            .await
            .and_then(|r| check(addr, r));
        if let Err(error) = result {
            failures.push((addr, error));
        }
    }
    failures
}
