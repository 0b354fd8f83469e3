//! The registry of connected clients: which connection belongs to which producer and consumer
//! groups, with each consumer's subscriptions.
//!
//! Invariants:
//! 1. A client leaves every group when its connection closes, when it unregisters, or when
//!    its heartbeats stop for longer than the expiry; the membership change is reported to the
//!    caller so the remaining members are told to rebalance (NOTIFY_CONSUMER_IDS_CHANGED).
//! 2. Consumer ids of a group are returned sorted, as clients allocate queues by index.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::body::heartbeat::{
    ConsumeFromWhere, ConsumeType, HeartbeatData, MessageModel, SubscriptionData,
};
use ferromq_protocol::remoting::LanguageCode;
use tokio::sync::mpsc;

/// A client connection the broker can push requests to.
#[derive(Debug, Clone)]
pub struct ClientChannel {
    /// Connection id, unique for the broker's lifetime.
    pub id: u64,
    /// Remote address.
    pub peer: SocketAddr,
    /// Outgoing frames of the connection (its writer task's queue).
    pub tx: mpsc::Sender<crate::remoting::outbound::Outbound>,
    /// The connection is plain TCP, so pull replies may go out with zero copy
    /// (`transferMsgByHeap=false`); false for TLS.
    pub plain_tcp: bool,
    /// Client language from its first request.
    pub language: LanguageCode,
    /// Client version from its first request.
    pub version: i32,
    /// Pulls of this connection held now (long polling), bounded by
    /// `pullHoldMaxPerConnection`.
    pub held_pulls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Requests the broker sent on this connection and waits for (`calls`).
    pub calls: std::sync::Arc<super::calls::PendingCalls>,
}

/// One consumer in a group.
#[derive(Debug, Clone)]
pub struct ConsumerClient {
    /// The client id it reports.
    pub client_id: String,
    /// Its connection.
    pub channel: ClientChannel,
    /// Pull, push or pop.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Start position for queues without an offset.
    pub consume_from_where: ConsumeFromWhere,
    /// Topic subscriptions.
    pub subscriptions: Vec<SubscriptionData>,
    /// Last heartbeat.
    pub last_heartbeat: Instant,
}

#[derive(Debug, Default)]
struct Registry {
    consumers: HashMap<String, BTreeMap<String, ConsumerClient>>,
    producers: HashMap<String, BTreeMap<String, (ClientChannel, Instant)>>,
}

/// Connected producers and consumers by group.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    registry: Mutex<Registry>,
    pulls: Mutex<PullProgress>,
}

/// Seconds of pull counts kept per (group, topic) for the consume rate.
pub const CONSUME_RATE_WINDOW_SECS: u64 = 60;

/// What pulls tell about a group's consumption (for `consumerProgress`): where the latest
/// pull of each queue ended, and how many messages the group pulled per second recently.
///
/// Bounded: one offset per (group, topic, queue) pulled and at most
/// [`CONSUME_RATE_WINDOW_SECS`] buckets per (group, topic).
///
/// Keyed by group, then topic, so a pull finds its entry by the names it carries without
/// building an owned key (two per map made four string allocations per pull).
#[derive(Debug, Default)]
struct PullProgress {
    groups: HashMap<String, HashMap<String, TopicPulls>>,
}

/// One group's pulls of one topic.
#[derive(Debug, Default)]
struct TopicPulls {
    /// Where the latest pull of each queue ended.
    next_offsets: HashMap<u32, u64>,
    /// Messages pulled per second: `(unix second, count)`, oldest first.
    rates: std::collections::VecDeque<(u64, u64)>,
}

impl PullProgress {
    fn get(&self, group: &str, topic: &str) -> Option<&TopicPulls> {
        self.groups.get(group)?.get(topic)
    }

    fn get_or_insert(&mut self, group: &str, topic: &str) -> &mut TopicPulls {
        if !self.groups.contains_key(group) {
            self.groups.insert(group.to_string(), HashMap::new());
        }
        let topics = self.groups.get_mut(group).expect("inserted above");
        if !topics.contains_key(topic) {
            topics.insert(topic.to_string(), TopicPulls::default());
        }
        topics.get_mut(topic).expect("inserted above")
    }
}

impl ClientRegistry {
    /// Records a heartbeat; returns the consumer groups whose membership changed.
    pub fn heartbeat(&self, channel: &ClientChannel, data: &HeartbeatData) -> Vec<String> {
        let now = Instant::now();
        let mut registry = self.registry.lock().expect("clients lock");
        let mut changed = Vec::new();
        for producer in &data.producer_data_set {
            registry
                .producers
                .entry(producer.group_name.clone())
                .or_default()
                .insert(data.client_id.clone(), (channel.clone(), now));
        }
        for consumer in &data.consumer_data_set {
            let members = registry
                .consumers
                .entry(consumer.group_name.clone())
                .or_default();
            let previous = members.insert(
                data.client_id.clone(),
                ConsumerClient {
                    client_id: data.client_id.clone(),
                    channel: channel.clone(),
                    consume_type: consumer.consume_type,
                    message_model: consumer.message_model,
                    consume_from_where: consumer.consume_from_where,
                    subscriptions: consumer.subscription_data_set.clone(),
                    last_heartbeat: now,
                },
            );
            if previous.is_none_or(|p| p.channel.id != channel.id) {
                changed.push(consumer.group_name.clone());
            }
        }
        changed
    }

    /// Removes a client from the named groups (UNREGISTER_CLIENT); returns changed consumer
    /// groups.
    pub fn unregister(
        &self,
        client_id: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> Vec<String> {
        let mut registry = self.registry.lock().expect("clients lock");
        if let Some(group) = producer_group {
            if let Some(members) = registry.producers.get_mut(group) {
                members.remove(client_id);
            }
        }
        let mut changed = Vec::new();
        if let Some(group) = consumer_group {
            if let Some(members) = registry.consumers.get_mut(group) {
                if members.remove(client_id).is_some() {
                    changed.push(group.to_string());
                }
            }
        }
        changed
    }

    /// Removes every client of a closed connection; returns changed consumer groups.
    pub fn channel_closed(&self, channel_id: u64) -> Vec<String> {
        self.remove_where(
            |client| client.channel.id == channel_id,
            |(channel, _)| channel.id == channel_id,
        )
    }

    /// Removes clients silent for longer than `timeout`; returns changed consumer groups.
    pub fn expire(&self, timeout: Duration) -> Vec<String> {
        let now = Instant::now();
        self.remove_where(
            |client| now.duration_since(client.last_heartbeat) > timeout,
            |(_, last)| now.duration_since(*last) > timeout,
        )
    }

    fn remove_where(
        &self,
        consumer_gone: impl Fn(&ConsumerClient) -> bool,
        producer_gone: impl Fn(&(ClientChannel, Instant)) -> bool,
    ) -> Vec<String> {
        let mut registry = self.registry.lock().expect("clients lock");
        let mut changed = Vec::new();
        for (group, members) in registry.consumers.iter_mut() {
            let before = members.len();
            members.retain(|_, client| !consumer_gone(client));
            if members.len() != before {
                changed.push(group.clone());
            }
        }
        registry.consumers.retain(|_, members| !members.is_empty());
        for members in registry.producers.values_mut() {
            members.retain(|_, entry| !producer_gone(entry));
        }
        registry.producers.retain(|_, members| !members.is_empty());
        changed
    }

    /// The connection of the producer of `group` that heartbeated last (the one a transaction
    /// check-back goes to), with its client id; `None` when no producer of the group is
    /// connected.
    pub fn producer_channel(&self, group: &str) -> Option<(String, ClientChannel)> {
        let registry = self.registry.lock().expect("clients lock");
        registry
            .producers
            .get(group)?
            .iter()
            .max_by_key(|(_, (_, last))| *last)
            .map(|(client_id, (channel, _))| (client_id.clone(), channel.clone()))
    }

    /// Sorted client ids of a consumer group.
    pub fn consumer_ids(&self, group: &str) -> Vec<String> {
        let registry = self.registry.lock().expect("clients lock");
        registry
            .consumers
            .get(group)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The consumers of a group.
    pub fn consumers(&self, group: &str) -> Vec<ConsumerClient> {
        let registry = self.registry.lock().expect("clients lock");
        registry
            .consumers
            .get(group)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `client_id` is a registered consumer of `group` now.
    pub fn is_consumer_of(&self, group: &str, client_id: &str) -> bool {
        self.registry
            .lock()
            .expect("clients lock")
            .consumers
            .get(group)
            .is_some_and(|members| members.contains_key(client_id))
    }

    /// Whether any consumer of the group is connected.
    pub fn has_online_consumers(&self, group: &str) -> bool {
        let registry = self.registry.lock().expect("clients lock");
        registry.consumers.get(group).is_some_and(|m| !m.is_empty())
    }

    /// The subscription of `group` to `topic`, from any member.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        let registry = self.registry.lock().expect("clients lock");
        registry
            .consumers
            .get(group)?
            .values()
            .flat_map(|c| c.subscriptions.iter())
            .find(|s| s.topic == topic)
            .cloned()
    }

    /// Records a pull of (group, topic, queue) that returned `message_count` messages and
    /// ended at `next_offset` (the offset the consumer pulls next).
    pub fn record_pull(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        next_offset: u64,
        message_count: usize,
    ) {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut pulls = self.pulls.lock().expect("pulls lock");
        let pulls = pulls.get_or_insert(group, topic);
        pulls.next_offsets.insert(queue_id, next_offset);
        if message_count == 0 {
            return;
        }
        let buckets = &mut pulls.rates;
        match buckets.back_mut() {
            Some((at, count)) if *at == second => *count += message_count as u64,
            _ => buckets.push_back((second, message_count as u64)),
        }
        while buckets
            .front()
            .is_some_and(|(at, _)| *at + CONSUME_RATE_WINDOW_SECS <= second)
        {
            buckets.pop_front();
        }
    }

    /// Forgets where the group's pulls of `topic` ended (after a reset: those positions
    /// belong to the old generation), so in-flight counts restart from the next pull.
    pub fn forget_pulls(&self, group: &str, topic: &str) {
        let mut pulls = self.pulls.lock().expect("pulls lock");
        if let Some(pulls) = pulls.groups.get_mut(group).and_then(|t| t.get_mut(topic)) {
            pulls.next_offsets.clear();
        }
    }

    /// Where the latest pull of (group, topic, queue) ended; `None` if none was seen since
    /// the broker started.
    pub fn pulled_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        let pulls = self.pulls.lock().expect("pulls lock");
        pulls
            .get(group, topic)?
            .next_offsets
            .get(&queue_id)
            .copied()
    }

    /// Messages of `topic` the group pulled per second, averaged over the last
    /// [`CONSUME_RATE_WINDOW_SECS`] seconds.
    pub fn consume_tps(&self, group: &str, topic: &str) -> f64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let pulls = self.pulls.lock().expect("pulls lock");
        let total: u64 = pulls.get(group, topic).map_or(0, |pulls| {
            pulls
                .rates
                .iter()
                .filter(|(at, _)| *at + CONSUME_RATE_WINDOW_SECS > now)
                .map(|(_, count)| count)
                .sum()
        });
        total as f64 / CONSUME_RATE_WINDOW_SECS as f64
    }

    /// Consumer groups with members.
    pub fn consumer_groups(&self) -> Vec<String> {
        let registry = self.registry.lock().expect("clients lock");
        let mut groups: Vec<String> = registry.consumers.keys().cloned().collect();
        groups.sort();
        groups
    }
}

/// How long a queue lock lives without renewal (RocketMQ's `rebalanceLockMaxLiveTime`).
pub const QUEUE_LOCK_LIFETIME: Duration = Duration::from_secs(60);

/// Locks on (group, queue) held by orderly consumers, so one queue is consumed by one client
/// at a time. A lock not renewed within [`QUEUE_LOCK_LIFETIME`] is free again.
#[derive(Debug, Default)]
pub struct QueueLocks {
    locks: Mutex<
        HashMap<(String, ferromq_protocol::remoting::body::misc::MessageQueue), (String, Instant)>,
    >,
}

impl QueueLocks {
    /// Locks (or renews) each queue for `client_id` unless another live client holds it;
    /// returns the queues now held by `client_id`.
    pub fn lock(
        &self,
        group: &str,
        client_id: &str,
        queues: &[ferromq_protocol::remoting::body::misc::MessageQueue],
    ) -> Vec<ferromq_protocol::remoting::body::misc::MessageQueue> {
        let now = Instant::now();
        let mut locks = self.locks.lock().expect("locks lock");
        let mut granted = Vec::new();
        for queue in queues {
            let key = (group.to_string(), queue.clone());
            let free = match locks.get(&key) {
                Some((holder, at)) => {
                    holder == client_id || now.duration_since(*at) > QUEUE_LOCK_LIFETIME
                }
                None => true,
            };
            if free {
                locks.insert(key, (client_id.to_string(), now));
                granted.push(queue.clone());
            }
        }
        granted
    }

    /// Releases the queues `client_id` holds.
    pub fn unlock(
        &self,
        group: &str,
        client_id: &str,
        queues: &[ferromq_protocol::remoting::body::misc::MessageQueue],
    ) {
        let mut locks = self.locks.lock().expect("locks lock");
        for queue in queues {
            let key = (group.to_string(), queue.clone());
            if locks
                .get(&key)
                .is_some_and(|(holder, _)| holder == client_id)
            {
                locks.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_progress_tracks_the_latest_pull_and_the_recent_rate() {
        let clients = ClientRegistry::default();
        assert_eq!(clients.pulled_offset("g", "t", 0), None);
        assert_eq!(clients.consume_tps("g", "t"), 0.0);
        clients.record_pull("g", "t", 0, 32, 32);
        clients.record_pull("g", "t", 0, 60, 28);
        clients.record_pull("g", "t", 1, 5, 0);
        clients.record_pull("other", "t", 0, 7, 7);
        clients.record_pull("g", "u", 0, 9, 9);
        assert_eq!(clients.pulled_offset("g", "t", 0), Some(60));
        assert_eq!(clients.pulled_offset("g", "u", 1), None);
        assert_eq!(clients.pulled_offset("g", "t", 1), Some(5));
        let expected = 60.0 / CONSUME_RATE_WINDOW_SECS as f64;
        assert!((clients.consume_tps("g", "t") - expected).abs() < 1e-9);
        // A reset forgets the group's positions on the topic, and only those.
        clients.forget_pulls("g", "t");
        assert_eq!(clients.pulled_offset("g", "t", 0), None);
        assert_eq!(clients.pulled_offset("g", "t", 1), None);
        assert_eq!(clients.pulled_offset("other", "t", 0), Some(7));
        assert_eq!(clients.pulled_offset("g", "u", 0), Some(9));
        assert!(
            (clients.consume_tps("g", "t") - expected).abs() < 1e-9,
            "rates stay"
        );
    }
}
