//! Name-server route discovery (GET_ROUTEINFO_BY_TOPIC, code 105) with a cache.
//!
//! Invariants:
//! - a route is fetched from the name servers in order; the first SUCCESS reply wins, and the
//!   error of a failed fetch names every name server's failure;
//! - a cached route younger than `max_age` is used as is; an older one is refreshed, and if
//!   no name server answers, the stale route keeps being used (with a warning) so a name
//!   server outage does not stop traffic to brokers that are still up;
//! - queue lists are sorted (broker name, queue id), writable queues come only from queue
//!   data with the WRITE permission whose broker group has a master, readable ones from
//!   queue data with READ permission;
//! - the broker addresses `master_addr`, `known_master` and `known_masters` give are masters
//!   only (broker id 0): commits, offset queries and sends never go to a slave (offset
//!   pitfall R3). Slaves are named only by [`BrokerReplicas`] ([`TopicRoute::replicas`],
//!   [`RouteCache::known_replicas`]), which pulls use to read while a master is unreachable;
//! - a background refresh ([`RouteCache::spawn_refresher`]) replaces a route only with a
//!   fetched one: a failed refresh keeps the last good route and is counted;
//! - a route derived from the auto-create template (`TBW102`) is only ever built for a
//!   producer ([`RouteCache::publish_route`]); consumers never read through one;
//! - failover is followed at once, not at the next timer refresh: a request to a master that
//!   answers NOT_MASTER or whose connection fails calls [`RouteCache::master_failed`], which
//!   fetches the topic's route again (at most once per [`FAILOVER_REFRESH_MIN_INTERVAL`] per
//!   topic, so a dead master under load does not flood the name servers). A route naming
//!   another master (id 0 at a new address) for a group bumps that group's
//!   [`RouteCache::master_generation`], which consumers compare to re-read their committed
//!   offsets from the new master (offset pitfall R1).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::route::{perm, TopicRouteData, MASTER_ID};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::GetRouteInfoRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use crate::connections::ConnectionPool;
use crate::error::ClientError;

/// Least time between two failover-triggered route fetches of one topic
/// ([`RouteCache::master_failed`]): callers within it use the route fetched last.
pub const FAILOVER_REFRESH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// One topic's route as the name server published it, with derived queue lists.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    /// Topic.
    pub topic: String,
    /// The raw route.
    pub data: TopicRouteData,
    /// Writable queues (for producers), sorted.
    pub write_queues: Vec<MessageQueue>,
    /// Readable queues (for consumers), sorted.
    pub read_queues: Vec<MessageQueue>,
    /// When this route was fetched.
    pub fetched_at: Instant,
    /// `Some(template)` when the name server had no route for the topic and this one was
    /// derived from the auto-create template topic's route (`TBW102`): sends go to brokers
    /// that create the topic on first use. `None` for a route the name server published.
    pub template: Option<String>,
}

impl TopicRoute {
    /// Derives the queue lists of `data`.
    pub fn new(topic: &str, data: TopicRouteData) -> Self {
        let mut queue_datas = data.queue_datas.clone();
        queue_datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        let has_master = |name: &str| {
            data.broker_datas
                .iter()
                .any(|b| b.broker_name == name && b.master_addr().is_some())
        };
        let mut write_queues = Vec::new();
        let mut read_queues = Vec::new();
        for q in &queue_datas {
            if q.perm & perm::WRITE != 0 && has_master(&q.broker_name) {
                write_queues.extend((0..q.write_queue_nums.max(0)).map(|id| MessageQueue {
                    topic: topic.to_string(),
                    broker_name: q.broker_name.clone(),
                    queue_id: id,
                }));
            }
            if q.perm & perm::READ != 0 {
                read_queues.extend((0..q.read_queue_nums.max(0)).map(|id| MessageQueue {
                    topic: topic.to_string(),
                    broker_name: q.broker_name.clone(),
                    queue_id: id,
                }));
            }
        }
        TopicRoute {
            topic: topic.to_string(),
            data,
            write_queues,
            read_queues,
            fetched_at: Instant::now(),
            template: None,
        }
    }

    /// The route a producer uses for `topic` when the name server has none: the brokers of
    /// `template`'s route (those that allow automatic topic creation), each with
    /// `min(queue_nums, template's read queue count)` queues for reading and writing, as
    /// Java's `MQClientInstance.updateTopicRouteInfoFromNameServer(topic, true, producer)`
    /// derives it. The broker creates the topic on the first send that names `template`.
    pub fn derived_from_template(topic: &str, template: &TopicRoute, queue_nums: i32) -> Self {
        let mut data = template.data.clone();
        for q in &mut data.queue_datas {
            let nums = queue_nums.max(1).min(q.read_queue_nums);
            q.read_queue_nums = nums;
            q.write_queue_nums = nums;
        }
        TopicRoute {
            template: Some(template.topic.clone()),
            ..TopicRoute::new(topic, data)
        }
    }

    /// The master address of `broker_name` in this route, if any parses as a socket address.
    pub fn master_addr(&self, broker_name: &str) -> Option<SocketAddr> {
        self.data
            .broker_datas
            .iter()
            .find(|b| b.broker_name == broker_name)
            .and_then(|b| b.master_addr())
            .and_then(|a| a.parse().ok())
    }

    /// The master and slaves of `broker_name` in this route (addresses that do not parse as
    /// socket addresses are left out), or `None` when the route does not name the group.
    pub fn replicas(&self, broker_name: &str) -> Option<BrokerReplicas> {
        self.data
            .broker_datas
            .iter()
            .find(|b| b.broker_name == broker_name)
            .map(BrokerReplicas::from_data)
    }
}

/// The members of one broker group as a route names them: its master and its slaves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerReplicas {
    /// Broker group name.
    pub broker_name: String,
    /// The master (broker id 0), when the route names one.
    pub master: Option<SocketAddr>,
    /// The slaves (broker id != 0) as `(broker id, address)`, lowest id first. Read-only
    /// members: never a target for commits or sends.
    pub slaves: Vec<(i64, SocketAddr)>,
}

impl BrokerReplicas {
    /// The slave a read goes to when the master is unreachable: the lowest broker id.
    pub fn first_slave(&self) -> Option<(i64, SocketAddr)> {
        self.slaves.first().copied()
    }

    fn from_data(b: &ferromq_protocol::remoting::body::route::BrokerData) -> Self {
        let mut slaves: Vec<(i64, SocketAddr)> = b
            .broker_addrs
            .iter()
            .filter(|(id, _)| **id != MASTER_ID)
            .filter_map(|(id, a)| a.parse().ok().map(|a| (*id, a)))
            .collect();
        slaves.sort_by_key(|(id, _)| *id);
        BrokerReplicas {
            broker_name: b.broker_name.clone(),
            master: b.master_addr().and_then(|a| a.parse().ok()),
            slaves,
        }
    }
}

/// Cached topic routes fetched from a list of name servers.
#[derive(Debug)]
pub struct RouteCache {
    namesrvs: Vec<SocketAddr>,
    pool: Arc<ConnectionPool>,
    timeout: Duration,
    max_age: Duration,
    routes: RwLock<HashMap<String, Arc<TopicRoute>>>,
    /// Master address per broker name, from every route seen (newest wins).
    brokers: RwLock<HashMap<String, SocketAddr>>,
    /// Master and slaves per broker name, from the newest route naming the group.
    replicas: RwLock<HashMap<String, BrokerReplicas>>,
    refreshes_ok: AtomicU64,
    refresh_failures: AtomicU64,
    /// One on-use fetch at a time per topic: concurrent sends that find no fresh route wait
    /// for the first one's fetch instead of each asking the name server.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When each topic's route was last fetched because a master failed (rate limit of
    /// [`RouteCache::master_failed`]); one entry per topic in use.
    failover_fetched: Mutex<HashMap<String, Instant>>,
    /// Per broker group: how many times a route named a new master (another address at id 0).
    master_generations: RwLock<HashMap<String, u64>>,
    failover_refreshes: AtomicU64,
}

/// Counters of a [`RouteCache`]'s background refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteStats {
    /// Routes fetched successfully by [`RouteCache::refresh_all`].
    pub refreshes_ok: u64,
    /// Routes [`RouteCache::refresh_all`] could not fetch; the last good route was kept.
    pub refresh_failures: u64,
    /// Route fetches [`RouteCache::master_failed`] made.
    pub failover_fetches: u64,
}

impl RouteCache {
    /// A cache asking `namesrvs` (in order) with `timeout` per request; routes older than
    /// `max_age` are refreshed on use.
    ///
    /// # Errors
    /// [`ClientError::Config`] when `namesrvs` is empty.
    pub fn new(
        namesrvs: Vec<SocketAddr>,
        pool: Arc<ConnectionPool>,
        timeout: Duration,
        max_age: Duration,
    ) -> Result<Self, ClientError> {
        if namesrvs.is_empty() {
            return Err(ClientError::Config("no name server address".into()));
        }
        Ok(RouteCache {
            namesrvs,
            pool,
            timeout,
            max_age,
            routes: RwLock::new(HashMap::new()),
            brokers: RwLock::new(HashMap::new()),
            replicas: RwLock::new(HashMap::new()),
            refreshes_ok: AtomicU64::new(0),
            refresh_failures: AtomicU64::new(0),
            fetching: Mutex::new(HashMap::new()),
            failover_fetched: Mutex::new(HashMap::new()),
            master_generations: RwLock::new(HashMap::new()),
            failover_refreshes: AtomicU64::new(0),
        })
    }

    /// The route of `topic`: the cached one if fresh, else a fetched one (falling back to a
    /// stale cached route when no name server answers).
    ///
    /// # Errors
    /// [`ClientError::NoRoute`] when nothing is cached and no name server has a route.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        if let Some(route) = self.fresh(topic) {
            return Ok(route);
        }
        let gate = self
            .fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(topic.to_string())
            .or_default()
            .clone();
        // Bounded: the holder's fetch is bounded by the name server timeouts.
        let _turn = gate.lock().await;
        // The caller ahead of us may have fetched it.
        if let Some(route) = self.fresh(topic) {
            return Ok(route);
        }
        let cached = self.cached(topic);
        match self.refresh(topic).await {
            Ok(route) => Ok(route),
            Err(error) => match cached {
                Some(stale) => {
                    tracing::warn!(%topic, %error, age = ?stale.fetched_at.elapsed(), "route refresh failed; using the cached route");
                    Ok(stale)
                }
                None => Err(error),
            },
        }
    }

    /// The cached route of `topic` if it is younger than `max_age`.
    fn fresh(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        self.cached(topic)
            .filter(|route| route.fetched_at.elapsed() < self.max_age)
    }

    /// The cached route of `topic`, whatever its age.
    pub fn cached(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .cloned()
    }

    /// Fetches the route of `topic` now and caches it.
    ///
    /// # Errors
    /// [`ClientError::NoRoute`] naming each name server's failure or answer.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        let mut failures = Vec::new();
        for &addr in &self.namesrvs {
            let header = GetRouteInfoRequestHeader {
                topic: topic.to_string(),
                accept_standard_json_only: Some(true),
            };
            let cmd =
                RemotingCommand::request_with_header(request::GET_ROUTEINFO_BY_TOPIC, &header);
            let reply = match self.pool.invoke(addr, cmd, self.timeout).await {
                Ok(reply) => reply,
                Err(error) => {
                    failures.push(format!("{addr}: {error}"));
                    continue;
                }
            };
            if reply.code != response::SUCCESS {
                failures.push(format!(
                    "{addr}: code {} {}",
                    reply.code,
                    reply.remark.unwrap_or_default()
                ));
                continue;
            }
            let data: TopicRouteData = match decode_json(reply.body.as_deref().unwrap_or_default())
            {
                Ok(data) => data,
                Err(error) => {
                    failures.push(format!("{addr}: {error}"));
                    continue;
                }
            };
            let route = self.store(TopicRoute::new(topic, data));
            tracing::debug!(%topic, namesrv = %addr, write = route.write_queues.len(), read = route.read_queues.len(), "route fetched");
            return Ok(route);
        }
        Err(ClientError::NoRoute {
            topic: topic.to_string(),
            reason: failures.join("; "),
        })
    }

    /// Caches `route` and learns its brokers' master addresses.
    fn store(&self, route: TopicRoute) -> Arc<TopicRoute> {
        let route = Arc::new(route);
        {
            let mut brokers = self.brokers.write().unwrap_or_else(|e| e.into_inner());
            for b in &route.data.broker_datas {
                if let Some(master) = b.master_addr().and_then(|a| a.parse().ok()) {
                    let old = brokers.insert(b.broker_name.clone(), master);
                    if old.is_some_and(|old| old != master) {
                        let mut generations = self
                            .master_generations
                            .write()
                            .unwrap_or_else(|e| e.into_inner());
                        let generation = generations.entry(b.broker_name.clone()).or_insert(0);
                        *generation += 1;
                        tracing::info!(broker = %b.broker_name, old_master = ?old, new_master = %master,
                            generation = *generation, "a route names a new master for the broker group");
                    }
                }
            }
            let mut replicas = self.replicas.write().unwrap_or_else(|e| e.into_inner());
            for b in &route.data.broker_datas {
                replicas.insert(b.broker_name.clone(), BrokerReplicas::from_data(b));
            }
        }
        self.routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(route.topic.clone(), route.clone());
        route
    }

    /// The route a producer sends `topic` through: [`RouteCache::route`] when the name
    /// server has one; otherwise a route derived from `template`'s
    /// ([`TopicRoute::derived_from_template`], with `queue_nums` queues per broker), which is
    /// cached until the topic's own route appears.
    ///
    /// # Errors
    /// [`ClientError::NoRoute`] naming both failures when neither `topic` nor `template` has
    /// a route (the topic does not exist and no broker allows automatic creation, or no name
    /// server answers).
    pub async fn publish_route(
        &self,
        topic: &str,
        template: &str,
        queue_nums: i32,
    ) -> Result<Arc<TopicRoute>, ClientError> {
        let error = match self.route(topic).await {
            Ok(route) => return Ok(route),
            Err(error @ ClientError::NoRoute { .. }) => error,
            Err(error) => return Err(error),
        };
        let template_route = match self.route(template).await {
            Ok(route) => route,
            Err(template_error) => {
                return Err(ClientError::NoRoute {
                    topic: topic.to_string(),
                    reason: format!(
                        "{error}; and no broker allows automatic topic creation ({template_error}): create the topic first"
                    ),
                })
            }
        };
        let route = TopicRoute::derived_from_template(topic, &template_route, queue_nums);
        tracing::info!(%topic, %template, queues = route.write_queues.len(), "no route for the topic; sending through the auto-create template's brokers");
        Ok(self.store(route))
    }

    /// Fetches every cached topic's route again. A topic whose fetch fails keeps its last
    /// good route; the failure is logged and counted ([`RouteStats::refresh_failures`]). A
    /// derived route ([`TopicRoute::template`]) is replaced as soon as the name server has
    /// the topic's own route.
    pub async fn refresh_all(&self) {
        let topics: Vec<(String, bool)> = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|r| (r.topic.clone(), r.template.is_some()))
            .collect();
        for (topic, derived) in topics {
            match self.refresh(&topic).await {
                Ok(_) => {
                    self.refreshes_ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    self.refresh_failures.fetch_add(1, Ordering::Relaxed);
                    if derived {
                        tracing::debug!(%topic, %error, "topic not yet published; keeping the route derived from its template");
                    } else {
                        tracing::warn!(%topic, %error, "route refresh failed; keeping the last good route");
                    }
                }
            }
        }
    }

    /// Starts a task that calls [`RouteCache::refresh_all`] every `interval` (Java's
    /// `pollNameServerInterval`, 30 s) until the cache is dropped or the handle aborted.
    /// Must be called within a tokio runtime.
    pub fn spawn_refresher(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let period = interval.max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(cache) = weak.upgrade() else { return };
                cache.refresh_all().await;
            }
        })
    }

    /// Counters of background refreshes.
    pub fn stats(&self) -> RouteStats {
        RouteStats {
            refreshes_ok: self.refreshes_ok.load(Ordering::Relaxed),
            refresh_failures: self.refresh_failures.load(Ordering::Relaxed),
            failover_fetches: self.failover_refreshes.load(Ordering::Relaxed),
        }
    }

    /// Reacts to a request to `failed`, the master of `broker_name` for `topic`, that failed
    /// in a way that says the master may have changed (NOT_MASTER, or its connection failed;
    /// see [`ClientError::signals_master_change`]): fetches the topic's route at once, unless
    /// one was fetched for this reason within [`FAILOVER_REFRESH_MIN_INTERVAL`]. Returns the
    /// group's master in the newest cached route when it is another address than `failed`
    /// (the new master to retry on), `None` when there is none yet.
    ///
    /// A failed fetch is logged and counted, never an error of its own: the caller's error
    /// is the one that matters, and the stale route stays in use.
    pub async fn master_failed(
        &self,
        topic: &str,
        broker_name: &str,
        failed: SocketAddr,
    ) -> Option<SocketAddr> {
        self.fetch_after_failure(topic, broker_name, failed, false)
            .await
    }

    /// [`RouteCache::master_failed`] without the rate limit: fetches the route now. For a
    /// read served by a slave while its master is down, whose data must not be used if the
    /// group got a new master meanwhile (the slave may be that master, answering at a
    /// position the consumer must re-read from the committed offset, R1). One fetch per such
    /// read, only while a master is down.
    pub async fn confirm_master(
        &self,
        topic: &str,
        broker_name: &str,
        failed: SocketAddr,
    ) -> Option<SocketAddr> {
        self.fetch_after_failure(topic, broker_name, failed, true)
            .await
    }

    async fn fetch_after_failure(
        &self,
        topic: &str,
        broker_name: &str,
        failed: SocketAddr,
        force: bool,
    ) -> Option<SocketAddr> {
        let due = force || {
            let mut fetched = self
                .failover_fetched
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match fetched.get(topic) {
                Some(at) if at.elapsed() < FAILOVER_REFRESH_MIN_INTERVAL => false,
                _ => {
                    fetched.insert(topic.to_string(), Instant::now());
                    true
                }
            }
        };
        if due {
            self.failover_refreshes.fetch_add(1, Ordering::Relaxed);
            match self.refresh(topic).await {
                Ok(_) => {
                    tracing::debug!(%topic, broker = broker_name, %failed, "route fetched after a master failure")
                }
                Err(error) => {
                    self.refresh_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%topic, broker = broker_name, %failed, %error,
                        "route fetch after a master failure failed; keeping the cached route");
                }
            }
        }
        self.cached(topic)
            .and_then(|route| route.master_addr(broker_name))
            .filter(|master| *master != failed)
    }

    /// How many times a route named a new master for `broker_name` (another address at
    /// broker id 0) since this cache was created; 0 when it never changed. A consumer that
    /// saw another value when it took its positions re-reads them from the new master.
    pub fn master_generation(&self, broker_name: &str) -> u64 {
        self.master_generations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(broker_name)
            .copied()
            .unwrap_or(0)
    }

    /// Route fetches [`RouteCache::master_failed`] made (rate limited).
    pub fn failover_refreshes(&self) -> u64 {
        self.failover_refreshes.load(Ordering::Relaxed)
    }

    /// Marks the route of `topic` as due for refresh (e.g. after a send failure).
    pub fn invalidate(&self, topic: &str) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(route) = routes.get(topic) {
            let mut stale = TopicRoute::clone(route);
            stale.fetched_at = Instant::now()
                .checked_sub(self.max_age)
                .unwrap_or(stale.fetched_at);
            routes.insert(topic.to_string(), Arc::new(stale));
        }
    }

    /// The master address of `broker_name` from any route seen so far; when unknown, the
    /// route of `topic` is fetched first.
    ///
    /// # Errors
    /// [`ClientError::NoBrokerAddress`] when no route names a master for the broker, or the
    /// route fetch error.
    pub async fn master_addr(
        &self,
        topic: &str,
        broker_name: &str,
    ) -> Result<SocketAddr, ClientError> {
        if let Some(addr) = self.known_master(broker_name) {
            return Ok(addr);
        }
        self.route(topic).await?;
        self.known_master(broker_name)
            .ok_or_else(|| ClientError::NoBrokerAddress {
                broker_name: broker_name.to_string(),
            })
    }

    /// The master address of `broker_name` already known, without asking a name server.
    pub fn known_master(&self, broker_name: &str) -> Option<SocketAddr> {
        self.brokers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(broker_name)
            .copied()
    }

    /// The master and slaves of `broker_name` from the newest route that named the group,
    /// without asking a name server. Its `master` is `None` when that route had no master
    /// (e.g. the name server already removed a dead one); [`RouteCache::known_master`] still
    /// gives the last master seen.
    pub fn known_replicas(&self, broker_name: &str) -> Option<BrokerReplicas> {
        self.replicas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(broker_name)
            .cloned()
    }

    /// Every master address known.
    pub fn known_masters(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = self
            .brokers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Writable queues of `topic`.
    ///
    /// # Errors
    /// The route fetch error, or [`ClientError::NoQueue`] when no queue is writable.
    pub async fn write_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, ClientError> {
        let route = self.route(topic).await?;
        if route.write_queues.is_empty() {
            return Err(ClientError::NoQueue {
                topic: topic.to_string(),
                kind: "writable",
            });
        }
        Ok(route.write_queues.clone())
    }

    /// Readable queues of `topic`.
    ///
    /// # Errors
    /// The route fetch error, or [`ClientError::NoQueue`] when no queue is readable.
    pub async fn read_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, ClientError> {
        let route = self.route(topic).await?;
        if route.read_queues.is_empty() {
            return Err(ClientError::NoQueue {
                topic: topic.to_string(),
                kind: "readable",
            });
        }
        Ok(route.read_queues.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::remoting::body::route::{BrokerData, QueueData};

    fn route(addrs: &[(i64, &str)]) -> TopicRoute {
        let data = TopicRouteData {
            queue_datas: vec![QueueData {
                broker_name: "a".into(),
                read_queue_nums: 2,
                write_queue_nums: 2,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "C".into(),
                broker_name: "a".into(),
                broker_addrs: addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
                ..BrokerData::default()
            }],
            ..TopicRouteData::default()
        };
        TopicRoute::new("T", data)
    }

    #[test]
    fn replicas_name_master_and_slaves_lowest_id_first() {
        let r = route(&[
            (2, "127.0.0.1:3"),
            (0, "127.0.0.1:1"),
            (1, "127.0.0.1:2"),
            (3, "not an address"),
        ]);
        let replicas = r.replicas("a").unwrap();
        assert_eq!(replicas.master, Some("127.0.0.1:1".parse().unwrap()));
        assert_eq!(
            replicas.slaves,
            vec![
                (1, "127.0.0.1:2".parse().unwrap()),
                (2, "127.0.0.1:3".parse().unwrap())
            ]
        );
        assert_eq!(replicas.first_slave().map(|(id, _)| id), Some(1));
        assert!(r.replicas("b").is_none());
        // The master address stays the master's.
        assert_eq!(r.master_addr("a"), Some("127.0.0.1:1".parse().unwrap()));

        // A route without master: slaves are known, readable queues stay, writable ones go.
        let r = route(&[(1, "127.0.0.1:2")]);
        let replicas = r.replicas("a").unwrap();
        assert_eq!(replicas.master, None);
        assert_eq!(replicas.slaves.len(), 1);
        assert_eq!(r.master_addr("a"), None);
        assert!(r.write_queues.is_empty());
        assert_eq!(r.read_queues.len(), 2);
    }

    #[test]
    fn cache_keeps_the_last_master_and_the_newest_replicas() {
        let pool = Arc::new(ConnectionPool::new(Default::default()));
        let cache = RouteCache::new(
            vec!["127.0.0.1:9".parse().unwrap()],
            pool,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        cache.store(route(&[(0, "127.0.0.1:1"), (1, "127.0.0.1:2")]));
        assert_eq!(
            cache.known_master("a"),
            Some("127.0.0.1:1".parse().unwrap())
        );
        // The name server dropped the master: the slave stays readable, the master known.
        cache.store(route(&[(1, "127.0.0.1:2")]));
        let replicas = cache.known_replicas("a").unwrap();
        assert_eq!(replicas.master, None);
        assert_eq!(
            replicas.first_slave(),
            Some((1, "127.0.0.1:2".parse().unwrap()))
        );
        assert_eq!(
            cache.known_master("a"),
            Some("127.0.0.1:1".parse().unwrap())
        );
        assert_eq!(cache.known_masters(), vec!["127.0.0.1:1".parse().unwrap()]);
    }

    #[test]
    fn a_new_master_in_a_route_bumps_the_group_generation_once() {
        let pool = Arc::new(ConnectionPool::new(Default::default()));
        let cache = RouteCache::new(
            vec!["127.0.0.1:9".parse().unwrap()],
            pool,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        cache.store(route(&[(0, "127.0.0.1:1"), (1, "127.0.0.1:2")]));
        assert_eq!(cache.master_generation("a"), 0);
        // The master goes: no master is not a new master.
        cache.store(route(&[(1, "127.0.0.1:2")]));
        assert_eq!(cache.master_generation("a"), 0);
        // The slave is promoted: a new master.
        cache.store(route(&[(0, "127.0.0.1:2")]));
        assert_eq!(cache.master_generation("a"), 1);
        assert_eq!(
            cache.known_master("a"),
            Some("127.0.0.1:2".parse().unwrap())
        );
        // The same route again changes nothing.
        cache.store(route(&[(0, "127.0.0.1:2")]));
        assert_eq!(cache.master_generation("a"), 1);
        assert_eq!(cache.master_generation("b"), 0);
    }

    #[tokio::test]
    async fn failover_fetches_are_rate_limited_per_topic() {
        // A name server address nothing listens on: every fetch fails fast.
        let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let pool = Arc::new(ConnectionPool::new(Default::default()));
        let cache = RouteCache::new(
            vec![nowhere],
            pool,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        cache.store(route(&[(0, "127.0.0.1:1")]));
        let failed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        // The route still names the failed master: no new one.
        assert_eq!(cache.master_failed("T", "a", failed).await, None);
        assert_eq!(cache.master_failed("T", "a", failed).await, None);
        assert_eq!(cache.master_failed("T", "a", failed).await, None);
        assert_eq!(cache.failover_refreshes(), 1);
        // Another topic has its own budget; the forced check ignores the limit.
        cache.master_failed("U", "a", failed).await;
        assert_eq!(cache.failover_refreshes(), 2);
        cache.confirm_master("T", "a", failed).await;
        assert_eq!(cache.failover_refreshes(), 3);
        tokio::time::sleep(FAILOVER_REFRESH_MIN_INTERVAL).await;
        cache.master_failed("T", "a", failed).await;
        assert_eq!(cache.failover_refreshes(), 4);
        // A failed fetch keeps the cached route.
        assert_eq!(
            cache.cached("T").and_then(|r| r.master_addr("a")),
            Some(failed)
        );
    }
}
