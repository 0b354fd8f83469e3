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
//! - broker addresses are masters only (broker id 0): commits and sends never go to a slave
//!   (offset pitfall R3).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::route::{perm, TopicRouteData};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::GetRouteInfoRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use crate::connections::ConnectionPool;
use crate::error::ClientError;

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
        })
    }

    /// The route of `topic`: the cached one if fresh, else a fetched one (falling back to a
    /// stale cached route when no name server answers).
    ///
    /// # Errors
    /// [`ClientError::NoRoute`] when nothing is cached and no name server has a route.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        let cached = self.cached(topic);
        if let Some(route) = &cached {
            if route.fetched_at.elapsed() < self.max_age {
                return Ok(route.clone());
            }
        }
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
            let route = Arc::new(TopicRoute::new(topic, data));
            {
                let mut brokers = self.brokers.write().unwrap_or_else(|e| e.into_inner());
                for b in &route.data.broker_datas {
                    if let Some(master) = b.master_addr().and_then(|a| a.parse().ok()) {
                        brokers.insert(b.broker_name.clone(), master);
                    }
                }
            }
            self.routes
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(topic.to_string(), route.clone());
            tracing::debug!(%topic, namesrv = %addr, write = route.write_queues.len(), read = route.read_queues.len(), "route fetched");
            return Ok(route);
        }
        Err(ClientError::NoRoute {
            topic: topic.to_string(),
            reason: failures.join("; "),
        })
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
