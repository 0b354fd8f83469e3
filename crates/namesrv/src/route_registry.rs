//! `RouteRegistry`: the name server's in-memory view of brokers and topic routes (RocketMQ's
//! `RouteInfoManager`).
//!
//! Tables, all behind one mutex so every operation sees and leaves a consistent state:
//! - topic → broker group name → [`QueueData`] (the queues a group serves for the topic);
//! - broker group name → [`BrokerData`] (cluster, member addresses by broker id);
//! - cluster name → broker group names;
//! - live brokers, keyed by (cluster, address): last registration time, expiry, data version,
//!   HA address and the connection the registration came on.
//!
//! Invariants:
//! - a broker group is in the broker and cluster tables exactly while it has at least one
//!   member address; when its last member goes (unregistration, expiry or connection close),
//!   its queue data goes with it, and a topic with no queue data left is removed;
//! - only a master (broker id 0), or the acting master of a group without one, writes queue
//!   data; slaves only add their address;
//! - a group has at most one master: a broker registering as master (id 0) of a group whose
//!   live master has another address is refused ([`RegisterBrokerError::SecondMaster`]) and
//!   changes nothing; once that master is gone (unregistered, expired, connection closed) the
//!   new one, e.g. a promoted slave, is accepted;
//! - failover is epoch-fenced: a master registration carrying a master epoch
//!   ([`MASTER_EPOCH_EXT`](ferromq_protocol::remoting::extensions::MASTER_EPOCH_EXT)) higher
//!   than the live master's (a master registered without one counts as epoch 0) replaces that
//!   master at once: its entry and live record are removed in the same step, so a route never
//!   names two masters. An equal or missing epoch is a second master (refused); an epoch below
//!   the highest one accepted for the group is a deposed master
//!   ([`RegisterBrokerError::DeposedMaster`], refused even when no master is live);
//! - one record per address: a broker that re-registers under another id (a promoted slave,
//!   a demoted master) loses its old id entry;
//! - a route is served only for a topic that has queue data on at least one registered group;
//!   anything else is "topic does not exist".
//!
//! Nothing is persisted: brokers re-register every 30 s, which rebuilds the tables after a
//! name server restart, as in RocketMQ.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::body::misc::TopicList;
use ferromq_protocol::remoting::body::route::{
    perm, BrokerData, ClusterInfo, QueueData, TopicRouteData, MASTER_ID,
};
use ferromq_protocol::remoting::body::topic::{DataVersion, RegisterBrokerBody};
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;

/// Identifies one client connection to the name server, so a broker registered over it can be
/// removed when it closes.
pub type ConnectionId = u64;

/// RocketMQ's `BROKER_CHANNEL_EXPIRED_TIME`: a broker silent this long is removed.
pub const DEFAULT_BROKER_EXPIRY: Duration = Duration::from_secs(120);

/// What a broker learns from registering (REGISTER_BROKER reply header).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerResult {
    /// For a slave: the HA address of its group's master, when the master is registered.
    pub ha_server_addr: Option<String>,
    /// For a slave: its group's master address, when the master is registered.
    pub master_addr: Option<String>,
}

/// Why a registration was refused. Nothing in the tables changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterBrokerError {
    /// The group already has a live master at another address: two masters with one broker
    /// name would split the group's writes (and its slaves' replication) between two logs.
    #[error(
        "broker name {broker_name} already has a live master at {live_master} \
         (brokerName, brokerId=0): a second master with the same brokerName is refused \
         (refused address {refused_addr}, cluster {cluster_name})"
    )]
    SecondMaster {
        /// Cluster of the refused registration.
        cluster_name: String,
        /// Broker group.
        broker_name: String,
        /// Address of the registered, live master.
        live_master: String,
        /// Address that asked to register as master.
        refused_addr: String,
    },
    /// A master registration whose epoch is below the group's current master epoch: a master
    /// deposed by failover that still believes it is master. Its writes would fork the group.
    #[error(
        "broker name {broker_name}: master registration from {refused_addr} with master epoch \
         {epoch} refused: the group's master epoch is {current_epoch} (master {}); \
         a deposed master must re-register as a slave (cluster {cluster_name})",
        current_master.as_deref().unwrap_or("not registered")
    )]
    DeposedMaster {
        /// Cluster of the refused registration.
        cluster_name: String,
        /// Broker group.
        broker_name: String,
        /// The epoch the refused registration carried.
        epoch: u64,
        /// The highest master epoch accepted for the group.
        current_epoch: u64,
        /// Address of the live master, when one is registered.
        current_master: Option<String>,
        /// Address that asked to register as master.
        refused_addr: String,
    },
}

/// A broker removed by [`RouteRegistry::scan_expired`] or
/// [`RouteRegistry::connection_closed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedBroker {
    /// Cluster.
    pub cluster_name: String,
    /// Broker group.
    pub broker_name: String,
    /// `ip:port`.
    pub broker_addr: String,
    /// Broker id.
    pub broker_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BrokerAddrKey {
    cluster: String,
    addr: String,
}

#[derive(Debug, Clone)]
struct LiveBroker {
    broker_name: String,
    broker_id: i64,
    last_update: Instant,
    expiry: Duration,
    data_version: DataVersion,
    ha_server_addr: String,
    conn: Option<ConnectionId>,
    /// The master epoch a master registration carried (`None`: none, a classic master).
    master_epoch: Option<u64>,
}

#[derive(Debug, Default)]
struct Tables {
    topic_queues: BTreeMap<String, BTreeMap<String, QueueData>>,
    brokers: BTreeMap<String, BrokerData>,
    clusters: BTreeMap<String, BTreeSet<String>>,
    live: HashMap<BrokerAddrKey, LiveBroker>,
    /// Highest master epoch accepted per broker group. Kept when the group goes (a deposed
    /// master coming back alone is still refused); grows only with broker group names.
    master_epochs: HashMap<String, u64>,
}

/// The route tables of a name server. Thread-safe; share it behind an `Arc`.
#[derive(Debug)]
pub struct RouteRegistry {
    tables: Mutex<Tables>,
    default_expiry: Duration,
}

impl Default for RouteRegistry {
    fn default() -> Self {
        Self::new(DEFAULT_BROKER_EXPIRY)
    }
}

impl RouteRegistry {
    /// An empty registry; brokers that do not say otherwise (`heartbeatTimeoutMillis`) expire
    /// after `default_expiry` without a registration.
    pub fn new(default_expiry: Duration) -> Self {
        RouteRegistry {
            tables: Mutex::new(Tables::default()),
            default_expiry,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        // Every mutation below completes without panicking points between related updates
        // (no indexing, no unwrap), so a poisoned lock still guards consistent tables.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers (or refreshes) a broker and, for a master, its topics.
    ///
    /// Queue data is rewritten only when the body's data version differs from the one last
    /// registered from this address, or on the broker's first registration, as RocketMQ does.
    /// Topics the broker no longer lists are kept (RocketMQ's default
    /// `deleteTopicWithBrokerRegistration=false`); DELETE_TOPIC_IN_NAMESRV removes them.
    ///
    /// A master registering for a group whose live master has another address is refused
    /// (see [`RegisterBrokerError::SecondMaster`]); a master whose last registration is older
    /// than its expiry counts as gone even before [`RouteRegistry::scan_expired`] removes it.
    pub fn register_broker(
        &self,
        header: &RegisterBrokerRequestHeader,
        body: &RegisterBrokerBody,
        conn: Option<ConnectionId>,
    ) -> Result<RegisterBrokerResult, RegisterBrokerError> {
        self.register_broker_at(header, None, body, conn, Instant::now())
    }

    /// [`RouteRegistry::register_broker`] for a registration that carries a master epoch
    /// (controller mode): a master with a higher epoch than the live master replaces it, one
    /// with a lower epoch than the group's is refused
    /// ([`RegisterBrokerError::DeposedMaster`]). The epoch of a slave registration is ignored.
    pub fn register_broker_with_epoch(
        &self,
        header: &RegisterBrokerRequestHeader,
        master_epoch: Option<u64>,
        body: &RegisterBrokerBody,
        conn: Option<ConnectionId>,
    ) -> Result<RegisterBrokerResult, RegisterBrokerError> {
        self.register_broker_at(header, master_epoch, body, conn, Instant::now())
    }

    fn register_broker_at(
        &self,
        header: &RegisterBrokerRequestHeader,
        master_epoch: Option<u64>,
        body: &RegisterBrokerBody,
        conn: Option<ConnectionId>,
        now: Instant,
    ) -> Result<RegisterBrokerResult, RegisterBrokerError> {
        let mut t = self.lock();
        let cluster = header.cluster_name.clone();
        let name = header.broker_name.clone();
        let addr = header.broker_addr.clone();
        let id = header.broker_id;
        let acting = header.enable_acting_master.unwrap_or(false);
        let master_epoch = master_epoch.filter(|_| id == MASTER_ID);

        if id == MASTER_ID {
            fence_master(&mut t, &cluster, &name, &addr, master_epoch, now)?;
            if let Some(epoch) = master_epoch {
                let highest = t.master_epochs.entry(name.clone()).or_insert(epoch);
                *highest = (*highest).max(epoch);
            }
        }

        t.clusters
            .entry(cluster.clone())
            .or_default()
            .insert(name.clone());
        let broker = t.brokers.entry(name.clone()).or_insert_with(|| BrokerData {
            cluster: cluster.clone(),
            broker_name: name.clone(),
            ..BrokerData::default()
        });
        broker.cluster = cluster.clone();
        broker.enable_acting_master = acting;
        // A slave promoted to master (or the reverse) re-registers the same address under a
        // new id: drop the old entry first, as RocketMQ does.
        broker.broker_addrs.retain(|k, a| *a != addr || *k == id);
        let old = broker.broker_addrs.insert(id, addr.clone());
        let first = old.as_deref() != Some(addr.as_str());
        let is_master = id == MASTER_ID;
        let is_prime_slave = !is_master
            && acting
            && !broker.broker_addrs.contains_key(&MASTER_ID)
            && broker.broker_addrs.keys().next() == Some(&id);

        let key = BrokerAddrKey {
            cluster: cluster.clone(),
            addr: addr.clone(),
        };
        let version = &body.topic_config_serialize_wrapper.data_version;
        let changed = t
            .live
            .get(&key)
            .is_none_or(|live| live.data_version != *version);
        if (is_master || is_prime_slave) && (changed || first) {
            for config in body
                .topic_config_serialize_wrapper
                .topic_config_table
                .values()
            {
                let queue = QueueData {
                    broker_name: name.clone(),
                    read_queue_nums: config.read_queue_nums,
                    write_queue_nums: config.write_queue_nums,
                    perm: config.perm,
                    topic_sys_flag: config.topic_sys_flag,
                };
                let queues = t.topic_queues.entry(config.topic_name.clone()).or_default();
                if queues.get(&name) != Some(&queue) {
                    tracing::info!(topic = %config.topic_name, broker = %name,
                        read = queue.read_queue_nums, write = queue.write_queue_nums,
                        perm = queue.perm, "topic queue data updated");
                    queues.insert(name.clone(), queue);
                }
            }
        }

        let expiry = header
            .heartbeat_timeout_millis
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms.unsigned_abs()))
            .unwrap_or(self.default_expiry);
        let previous = t.live.insert(
            key,
            LiveBroker {
                broker_name: name.clone(),
                broker_id: id,
                last_update: now,
                expiry,
                data_version: version.clone(),
                ha_server_addr: header.ha_server_addr.clone(),
                conn,
                master_epoch,
            },
        );
        if previous.is_none() {
            tracing::info!(cluster = %cluster, broker = %name, id, addr = %addr,
                "new broker registered");
        }

        let mut result = RegisterBrokerResult::default();
        if !is_master {
            let master = t
                .brokers
                .get(&name)
                .and_then(|b| b.master_addr())
                .map(str::to_owned);
            if let Some(master) = master {
                let master_key = BrokerAddrKey {
                    cluster,
                    addr: master.clone(),
                };
                if let Some(live) = t.live.get(&master_key) {
                    result.ha_server_addr = Some(live.ha_server_addr.clone());
                    result.master_addr = Some(master);
                }
            }
        }
        Ok(result)
    }

    /// Removes one broker (UNREGISTER_BROKER). Returns whether it was registered.
    pub fn unregister_broker(
        &self,
        cluster_name: &str,
        broker_addr: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> bool {
        let mut t = self.lock();
        remove_broker(&mut t, cluster_name, broker_addr, broker_name, broker_id)
    }

    /// The route of `topic`, or `None` when no registered broker serves it.
    pub fn topic_route(&self, topic: &str) -> Option<TopicRouteData> {
        let t = self.lock();
        let queues = t.topic_queues.get(topic)?;
        let broker_datas: Vec<BrokerData> = queues
            .keys()
            .filter_map(|name| t.brokers.get(name))
            .filter(|b| !b.broker_addrs.is_empty())
            .cloned()
            .collect();
        if queues.is_empty() || broker_datas.is_empty() {
            return None;
        }
        Some(TopicRouteData {
            queue_datas: queues.values().cloned().collect(),
            broker_datas,
            ..TopicRouteData::default()
        })
    }

    /// All broker groups and clusters (GET_BROKER_CLUSTER_INFO).
    pub fn cluster_info(&self) -> ClusterInfo {
        let t = self.lock();
        ClusterInfo {
            broker_addr_table: t.brokers.clone(),
            cluster_addr_table: t.clusters.clone(),
        }
    }

    /// Every topic with queue data (GET_ALL_TOPIC_LIST_FROM_NAMESERVER).
    pub fn all_topics(&self) -> TopicList {
        let t = self.lock();
        TopicList {
            topic_list: t.topic_queues.keys().cloned().collect(),
            broker_addr: None,
        }
    }

    /// Topics served by at least one broker group of `cluster` (GET_TOPICS_BY_CLUSTER).
    pub fn topics_by_cluster(&self, cluster: &str) -> TopicList {
        let t = self.lock();
        let names = t.clusters.get(cluster);
        let topic_list = t
            .topic_queues
            .iter()
            .filter(|(_, queues)| {
                names.is_some_and(|names| queues.keys().any(|b| names.contains(b)))
            })
            .map(|(topic, _)| topic.clone())
            .collect();
        TopicList {
            topic_list,
            broker_addr: None,
        }
    }

    /// Cluster and broker group names, which RocketMQ treats as system topics, with the
    /// address of one broker (GET_SYSTEM_TOPIC_LIST_FROM_NS).
    pub fn system_topics(&self) -> TopicList {
        let t = self.lock();
        let mut topic_list: BTreeSet<String> = t.clusters.keys().cloned().collect();
        topic_list.extend(t.clusters.values().flatten().cloned());
        let broker_addr = t
            .brokers
            .values()
            .find_map(|b| b.broker_addrs.values().next().cloned());
        TopicList {
            topic_list,
            broker_addr,
        }
    }

    /// Removes `topic`, from every broker group or only from those of `cluster`
    /// (DELETE_TOPIC_IN_NAMESRV). Returns whether anything was removed.
    pub fn delete_topic(&self, topic: &str, cluster: Option<&str>) -> bool {
        let mut t = self.lock();
        let Tables {
            topic_queues,
            clusters,
            ..
        } = &mut *t;
        let removed = match cluster {
            None => topic_queues.remove(topic).is_some(),
            Some(cluster) => {
                let Some(queues) = topic_queues.get_mut(topic) else {
                    return false;
                };
                let before = queues.len();
                if let Some(names) = clusters.get(cluster) {
                    queues.retain(|b, _| !names.contains(b));
                }
                let removed = queues.len() != before;
                if queues.is_empty() {
                    topic_queues.remove(topic);
                }
                removed
            }
        };
        if removed {
            tracing::info!(topic, cluster, "topic deleted from name server");
        }
        removed
    }

    /// Adds queue data for `topic` on broker groups that are registered
    /// (REGISTER_TOPIC_IN_NAMESRV); queue data for unknown groups is ignored. Returns how many
    /// entries were stored.
    pub fn register_topic(&self, topic: &str, queue_datas: &[QueueData]) -> usize {
        let mut t = self.lock();
        let known: Vec<QueueData> = queue_datas
            .iter()
            .filter(|q| t.brokers.contains_key(&q.broker_name))
            .cloned()
            .collect();
        if known.is_empty() {
            return 0;
        }
        let queues = t.topic_queues.entry(topic.to_owned()).or_default();
        for q in &known {
            queues.insert(q.broker_name.clone(), q.clone());
        }
        known.len()
    }

    /// Clears the write permission of every queue of `broker_name`
    /// (WIPE_WRITE_PERM_OF_BROKER). Returns how many topics changed.
    pub fn wipe_write_perm(&self, broker_name: &str) -> i32 {
        self.update_perm(broker_name, |p| p & !perm::WRITE)
    }

    /// Sets the write permission of every queue of `broker_name` (ADD_WRITE_PERM_OF_BROKER).
    /// Returns how many topics changed.
    pub fn add_write_perm(&self, broker_name: &str) -> i32 {
        self.update_perm(broker_name, |p| p | perm::WRITE)
    }

    fn update_perm(&self, broker_name: &str, f: impl Fn(i32) -> i32) -> i32 {
        let mut t = self.lock();
        let mut count = 0i32;
        for queues in t.topic_queues.values_mut() {
            if let Some(q) = queues.get_mut(broker_name) {
                q.perm = f(q.perm);
                count = count.saturating_add(1);
            }
        }
        count
    }

    /// Compares a broker's data version with the one last registered (QUERY_DATA_VERSION).
    /// Returns `(changed, registered version)`; when unchanged, the broker's registration is
    /// refreshed, as RocketMQ does, since the query proves it is alive.
    pub fn query_data_version(
        &self,
        cluster_name: &str,
        broker_addr: &str,
        version: &DataVersion,
    ) -> (bool, Option<DataVersion>) {
        let mut t = self.lock();
        let key = BrokerAddrKey {
            cluster: cluster_name.to_owned(),
            addr: broker_addr.to_owned(),
        };
        match t.live.get_mut(&key) {
            None => (true, None),
            Some(live) => {
                let changed = live.data_version != *version;
                if !changed {
                    live.last_update = Instant::now();
                }
                (changed, Some(live.data_version.clone()))
            }
        }
    }

    /// Removes every broker whose last registration is older than its expiry, with its
    /// routes. Returns the removed brokers.
    pub fn scan_expired(&self, now: Instant) -> Vec<RemovedBroker> {
        let mut t = self.lock();
        let expired: Vec<(BrokerAddrKey, LiveBroker)> = t
            .live
            .iter()
            .filter(|(_, live)| now.saturating_duration_since(live.last_update) > live.expiry)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut removed = Vec::with_capacity(expired.len());
        for (key, live) in expired {
            tracing::warn!(cluster = %key.cluster, broker = %live.broker_name,
                addr = %key.addr, expiry = ?live.expiry,
                "broker expired: no registration within its expiry; removing");
            remove_broker(
                &mut t,
                &key.cluster,
                &key.addr,
                &live.broker_name,
                live.broker_id,
            );
            removed.push(RemovedBroker {
                cluster_name: key.cluster,
                broker_name: live.broker_name,
                broker_addr: key.addr,
                broker_id: live.broker_id,
            });
        }
        removed
    }

    /// Removes the brokers whose latest registration came over connection `conn`, which has
    /// closed (RocketMQ's `onChannelDestroy`). Returns the removed brokers.
    pub fn connection_closed(&self, conn: ConnectionId) -> Vec<RemovedBroker> {
        let mut t = self.lock();
        let gone: Vec<(BrokerAddrKey, LiveBroker)> = t
            .live
            .iter()
            .filter(|(_, live)| live.conn == Some(conn))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut removed = Vec::with_capacity(gone.len());
        for (key, live) in gone {
            tracing::info!(cluster = %key.cluster, broker = %live.broker_name,
                addr = %key.addr, "broker connection closed; removing broker");
            remove_broker(
                &mut t,
                &key.cluster,
                &key.addr,
                &live.broker_name,
                live.broker_id,
            );
            removed.push(RemovedBroker {
                cluster_name: key.cluster,
                broker_name: live.broker_name,
                broker_addr: key.addr,
                broker_id: live.broker_id,
            });
        }
        removed
    }

    /// Number of live broker registrations (one per broker address).
    pub fn live_broker_count(&self) -> usize {
        self.lock().live.len()
    }
}

/// The live master of a group at another address than the registering one.
struct LiveMaster {
    cluster: String,
    addr: String,
    epoch: Option<u64>,
}

/// `broker_name`'s master when it is not `addr` and the master is live: its registration is
/// in the live table and not older than its expiry.
fn live_master_elsewhere(
    t: &Tables,
    broker_name: &str,
    addr: &str,
    now: Instant,
) -> Option<LiveMaster> {
    let master = t.brokers.get(broker_name)?.master_addr()?;
    if master == addr {
        return None;
    }
    t.live
        .iter()
        .find(|(key, live)| {
            key.addr == master
                && live.broker_name == broker_name
                && live.broker_id == MASTER_ID
                && now.saturating_duration_since(live.last_update) <= live.expiry
        })
        .map(|(key, live)| LiveMaster {
            cluster: key.cluster.clone(),
            addr: key.addr.clone(),
            epoch: live.master_epoch,
        })
}

/// Judges a master registration (broker id 0) of `addr` for group `name` with `epoch`:
/// refuses a deposed master (epoch below the group's highest) and a second master (a live
/// master elsewhere with an equal or higher epoch, or no epoch given); removes the live
/// master elsewhere when `epoch` is higher than its own (epoch-fenced failover). Changes
/// nothing when it refuses.
fn fence_master(
    t: &mut Tables,
    cluster: &str,
    name: &str,
    addr: &str,
    epoch: Option<u64>,
    now: Instant,
) -> Result<(), RegisterBrokerError> {
    let live = live_master_elsewhere(t, name, addr, now);
    let highest = t.master_epochs.get(name).copied();
    if let (Some(epoch), Some(current_epoch)) = (epoch, highest) {
        if epoch < current_epoch {
            tracing::warn!(
                cluster,
                broker = name,
                addr,
                epoch,
                current_epoch,
                "master registration with a stale master epoch refused (deposed master)"
            );
            return Err(RegisterBrokerError::DeposedMaster {
                cluster_name: cluster.to_owned(),
                broker_name: name.to_owned(),
                epoch,
                current_epoch,
                current_master: live.map(|m| m.addr),
                refused_addr: addr.to_owned(),
            });
        }
    }
    let Some(live) = live else {
        return Ok(());
    };
    let live_epoch = live.epoch.unwrap_or(0);
    match epoch {
        Some(epoch) if epoch > live_epoch => {
            tracing::info!(cluster, broker = name, new_master = addr, epoch,
                old_master = %live.addr, old_epoch = live_epoch,
                "master replaced by a registration with a higher master epoch (failover)");
            remove_broker(t, &live.cluster, &live.addr, name, MASTER_ID);
            Ok(())
        }
        Some(epoch) if epoch < live_epoch => {
            tracing::warn!(
                cluster,
                broker = name,
                addr,
                epoch,
                current_epoch = live_epoch,
                "master registration with a stale master epoch refused (deposed master)"
            );
            Err(RegisterBrokerError::DeposedMaster {
                cluster_name: cluster.to_owned(),
                broker_name: name.to_owned(),
                epoch,
                current_epoch: live_epoch,
                current_master: Some(live.addr),
                refused_addr: addr.to_owned(),
            })
        }
        _ => {
            tracing::warn!(cluster, broker = name, addr, live_master = %live.addr,
                ?epoch, live_epoch, "second master for a broker name refused");
            Err(RegisterBrokerError::SecondMaster {
                cluster_name: cluster.to_owned(),
                broker_name: name.to_owned(),
                live_master: live.addr,
                refused_addr: addr.to_owned(),
            })
        }
    }
}

/// Removes one broker address and, if its group has no member left, the group, its cluster
/// membership and its queue data. Returns whether the broker was known.
fn remove_broker(
    t: &mut Tables,
    cluster: &str,
    addr: &str,
    broker_name: &str,
    broker_id: i64,
) -> bool {
    let key = BrokerAddrKey {
        cluster: cluster.to_owned(),
        addr: addr.to_owned(),
    };
    let was_live = t.live.remove(&key).is_some();
    let Some(broker) = t.brokers.get_mut(broker_name) else {
        return was_live;
    };
    let before = broker.broker_addrs.len();
    // By address, not id: a broker that changed id keeps one entry only (see registration).
    broker.broker_addrs.retain(|_, a| a != addr);
    let was_member = broker.broker_addrs.len() != before;
    if was_member {
        tracing::info!(
            cluster,
            broker = broker_name,
            broker_id,
            addr,
            "broker address removed"
        );
    }
    if broker.broker_addrs.is_empty() {
        t.brokers.remove(broker_name);
        if let Some(names) = t.clusters.get_mut(cluster) {
            names.remove(broker_name);
            if names.is_empty() {
                t.clusters.remove(cluster);
            }
        }
        t.topic_queues.retain(|topic, queues| {
            if queues.remove(broker_name).is_some() {
                tracing::info!(
                    topic,
                    broker = broker_name,
                    "queue data removed with broker"
                );
            }
            !queues.is_empty()
        });
        tracing::info!(
            cluster,
            broker = broker_name,
            "broker group removed: no member left"
        );
    }
    was_live || was_member
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::remoting::body::topic::{TopicConfig, TopicConfigSerializeWrapper};

    fn header(name: &str, addr: &str, id: i64) -> RegisterBrokerRequestHeader {
        RegisterBrokerRequestHeader {
            broker_name: name.into(),
            broker_addr: addr.into(),
            cluster_name: "C".into(),
            ha_server_addr: format!("{addr}-ha"),
            broker_id: id,
            ..Default::default()
        }
    }

    fn body(topics: &[(&str, i32)], counter: i64) -> RegisterBrokerBody {
        let mut wrapper = TopicConfigSerializeWrapper::default();
        for (name, queues) in topics {
            let mut tc = TopicConfig::new(*name);
            tc.read_queue_nums = *queues;
            tc.write_queue_nums = *queues;
            wrapper.topic_config_table.insert(name.to_string(), tc);
        }
        wrapper.data_version.counter = counter;
        RegisterBrokerBody {
            topic_config_serialize_wrapper: wrapper,
            filter_server_list: vec![],
        }
    }

    #[test]
    fn master_and_slave_share_a_group_and_slave_learns_master() {
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        let res = r
            .register_broker(&header("a", "s:1", 1), &body(&[("X", 8)], 1), Some(2))
            .unwrap();
        assert_eq!(res.master_addr.as_deref(), Some("m:1"));
        assert_eq!(res.ha_server_addr.as_deref(), Some("m:1-ha"));
        // The slave's topics are not routes.
        assert!(r.topic_route("X").is_none());
        let route = r.topic_route("T").unwrap();
        assert_eq!(route.broker_datas.len(), 1);
        assert_eq!(route.broker_datas[0].broker_addrs.len(), 2);

        // Master goes: the group and its queues stay for the slave.
        assert!(r.unregister_broker("C", "m:1", "a", 0));
        let route = r.topic_route("T").unwrap();
        assert_eq!(route.broker_datas[0].master_addr(), None);
        // Slave connection closes: the group and its routes go.
        let removed = r.connection_closed(2);
        assert_eq!(removed.len(), 1);
        assert!(r.topic_route("T").is_none());
        assert!(r.cluster_info().cluster_addr_table.is_empty());
        assert_eq!(r.live_broker_count(), 0);
    }

    #[test]
    fn queue_data_updates_only_on_new_data_version() {
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), None)
            .unwrap();
        // Same version, different content: ignored (the broker did not bump its version).
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 8)], 1), None)
            .unwrap();
        assert_eq!(
            r.topic_route("T").unwrap().queue_datas[0].read_queue_nums,
            4
        );
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 8)], 2), None)
            .unwrap();
        assert_eq!(
            r.topic_route("T").unwrap().queue_datas[0].read_queue_nums,
            8
        );
    }

    #[test]
    fn expiry_uses_header_timeout_or_default() {
        let r = RouteRegistry::new(Duration::from_secs(10));
        let t0 = Instant::now();
        r.register_broker_at(
            &header("a", "m:1", 0),
            None,
            &body(&[("T", 4)], 1),
            None,
            t0,
        )
        .unwrap();
        let mut h = header("b", "m:2", 0);
        h.heartbeat_timeout_millis = Some(1000);
        r.register_broker_at(&h, None, &body(&[("U", 4)], 1), None, t0)
            .unwrap();
        assert!(r.scan_expired(t0 + Duration::from_millis(900)).is_empty());
        let removed = r.scan_expired(t0 + Duration::from_secs(2));
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].broker_name, "b");
        assert!(r.topic_route("U").is_none());
        assert!(r.topic_route("T").is_some());
        assert_eq!(r.scan_expired(t0 + Duration::from_secs(11)).len(), 1);
        assert!(r.all_topics().topic_list.is_empty());
    }

    #[test]
    fn delete_topic_and_write_perm() {
        let r = RouteRegistry::default();
        r.register_broker(
            &header("a", "m:1", 0),
            &body(&[("T", 4), ("U", 4)], 1),
            None,
        )
        .unwrap();
        let mut hb = header("b", "m:2", 0);
        hb.cluster_name = "D".into();
        r.register_broker(&hb, &body(&[("T", 4)], 1), None).unwrap();
        assert_eq!(r.topics_by_cluster("D").topic_list.len(), 1);
        assert_eq!(r.wipe_write_perm("a"), 2);
        assert_eq!(r.topic_route("U").unwrap().queue_datas[0].perm, perm::READ);
        assert_eq!(r.add_write_perm("a"), 2);
        assert_eq!(r.topic_route("U").unwrap().queue_datas[0].perm, 6);
        assert!(r.delete_topic("T", Some("D")));
        assert_eq!(r.topic_route("T").unwrap().broker_datas.len(), 1);
        assert!(r.delete_topic("T", None));
        assert!(r.topic_route("T").is_none());
        assert!(!r.delete_topic("T", None));
        let sys = r.system_topics();
        assert!(sys.topic_list.contains("C") && sys.topic_list.contains("b"));
        assert!(sys.broker_addr.is_some());
    }

    #[test]
    fn query_data_version_reports_changes() {
        let r = RouteRegistry::default();
        let v1 = body(&[], 1).topic_config_serialize_wrapper.data_version;
        assert_eq!(r.query_data_version("C", "m:1", &v1), (true, None));
        r.register_broker(&header("a", "m:1", 0), &body(&[], 1), None)
            .unwrap();
        assert_eq!(
            r.query_data_version("C", "m:1", &v1),
            (false, Some(v1.clone()))
        );
        let v2 = DataVersion {
            counter: 2,
            ..v1.clone()
        };
        assert_eq!(r.query_data_version("C", "m:1", &v2), (true, Some(v1)));
    }

    #[test]
    fn second_master_with_another_address_is_refused_and_changes_nothing() {
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        let err = r
            .register_broker(&header("a", "m:2", 0), &body(&[("U", 8)], 1), Some(2))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("broker name a already has a live master at m:1")
                && text.contains("brokerId=0")
                && text.contains("m:2"),
            "{text}"
        );
        assert_eq!(
            err,
            RegisterBrokerError::SecondMaster {
                cluster_name: "C".into(),
                broker_name: "a".into(),
                live_master: "m:1".into(),
                refused_addr: "m:2".into(),
            }
        );
        // Nothing changed: one master, no new topic, one live broker.
        let route = r.topic_route("T").unwrap();
        assert_eq!(route.broker_datas[0].master_addr(), Some("m:1"));
        assert_eq!(route.broker_datas[0].broker_addrs.len(), 1);
        assert!(r.topic_route("U").is_none());
        assert_eq!(r.live_broker_count(), 1);
        // The live master re-registering from its own address is accepted.
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 2), Some(1))
            .unwrap();
        // So is a slave of the group, which learns the first master.
        let res = r
            .register_broker(&header("a", "s:1", 1), &body(&[], 1), Some(3))
            .unwrap();
        assert_eq!(res.master_addr.as_deref(), Some("m:1"));
    }

    #[test]
    fn new_master_is_accepted_once_the_old_one_is_gone() {
        // Unregistered.
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        assert!(r.unregister_broker("C", "m:1", "a", 0));
        r.register_broker(&header("a", "m:2", 0), &body(&[("T", 4)], 1), Some(2))
            .unwrap();
        assert_eq!(
            r.topic_route("T").unwrap().broker_datas[0].master_addr(),
            Some("m:2")
        );
        // The old master coming back as master is now the second one.
        assert!(r
            .register_broker(&header("a", "m:1", 0), &body(&[], 1), Some(3))
            .is_err());

        // Connection closed.
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        assert_eq!(r.connection_closed(1).len(), 1);
        r.register_broker(&header("a", "m:2", 0), &body(&[("T", 4)], 1), Some(2))
            .unwrap();

        // Expired, even before the scan removed it.
        let r = RouteRegistry::new(Duration::from_secs(10));
        let t0 = Instant::now();
        r.register_broker_at(
            &header("a", "m:1", 0),
            None,
            &body(&[("T", 4)], 1),
            None,
            t0,
        )
        .unwrap();
        assert!(r
            .register_broker_at(
                &header("a", "m:2", 0),
                None,
                &body(&[], 1),
                None,
                t0 + Duration::from_secs(5)
            )
            .is_err());
        r.register_broker_at(
            &header("a", "m:2", 0),
            None,
            &body(&[], 1),
            None,
            t0 + Duration::from_secs(11),
        )
        .unwrap();
        assert_eq!(
            r.topic_route("T").unwrap().broker_datas[0].master_addr(),
            Some("m:2")
        );
        // The scan removes the stale old master without touching the new one.
        let removed = r.scan_expired(t0 + Duration::from_secs(12));
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].broker_addr, "m:1");
        assert_eq!(
            r.topic_route("T").unwrap().broker_datas[0].master_addr(),
            Some("m:2")
        );
    }

    #[test]
    fn slave_promoted_to_master_is_accepted_once_the_master_is_gone() {
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        r.register_broker(&header("a", "s:1", 1), &body(&[], 1), Some(2))
            .unwrap();
        // Promotion while the master is live is a second master.
        assert!(r
            .register_broker(&header("a", "s:1", 0), &body(&[("T", 4)], 2), Some(2))
            .is_err());
        let route = r.topic_route("T").unwrap();
        assert_eq!(
            route.broker_datas[0]
                .broker_addrs
                .get(&1)
                .map(|v| v.as_str()),
            Some("s:1")
        );
        assert_eq!(r.connection_closed(1).len(), 1);
        r.register_broker(&header("a", "s:1", 0), &body(&[("T", 4)], 2), Some(2))
            .unwrap();
        let route = r.topic_route("T").unwrap();
        assert_eq!(route.broker_datas[0].master_addr(), Some("s:1"));
        // Its old slave entry is gone: one address, id 0.
        assert_eq!(route.broker_datas[0].broker_addrs.len(), 1);
    }

    fn master_ids(r: &RouteRegistry, topic: &str) -> BTreeMap<i64, String> {
        r.topic_route(topic).unwrap().broker_datas[0]
            .broker_addrs
            .clone()
    }

    #[test]
    fn a_master_with_a_higher_epoch_replaces_the_live_master_at_once() {
        let r = RouteRegistry::default();
        r.register_broker_with_epoch(
            &header("a", "m:1", 0),
            Some(1),
            &body(&[("T", 4)], 1),
            Some(1),
        )
        .unwrap();
        r.register_broker(&header("a", "s:1", 1), &body(&[], 1), Some(2))
            .unwrap();
        // The promoted slave registers as master with epoch 2 while m:1 is still live.
        r.register_broker_with_epoch(
            &header("a", "s:1", 0),
            Some(2),
            &body(&[("T", 4)], 2),
            Some(2),
        )
        .unwrap();
        let addrs = master_ids(&r, "T");
        assert_eq!(addrs.len(), 1, "{addrs:?}");
        assert_eq!(addrs.get(&0).map(|v| v.as_str()), Some("s:1"));
        assert_eq!(r.live_broker_count(), 1);
        let info = r.cluster_info();
        assert_eq!(info.broker_addr_table["a"].master_addr(), Some("s:1"));
        // The old master's connection closing later removes nothing of the new master's.
        assert!(r.connection_closed(1).is_empty());
        assert_eq!(master_ids(&r, "T").get(&0).map(|v| v.as_str()), Some("s:1"));

        // A classic master (no epoch) is replaced by any epoch above 0.
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        r.register_broker_with_epoch(
            &header("a", "m:2", 0),
            Some(1),
            &body(&[("T", 4)], 1),
            Some(2),
        )
        .unwrap();
        assert_eq!(master_ids(&r, "T").get(&0).map(|v| v.as_str()), Some("m:2"));
        assert_eq!(master_ids(&r, "T").len(), 1);
    }

    #[test]
    fn equal_lower_or_missing_epochs_do_not_replace_a_live_master() {
        let r = RouteRegistry::default();
        r.register_broker_with_epoch(
            &header("a", "m:1", 0),
            Some(2),
            &body(&[("T", 4)], 1),
            Some(1),
        )
        .unwrap();
        let equal = r
            .register_broker_with_epoch(&header("a", "m:2", 0), Some(2), &body(&[], 1), Some(2))
            .unwrap_err();
        assert!(
            matches!(equal, RegisterBrokerError::SecondMaster { .. }),
            "{equal}"
        );
        let missing = r
            .register_broker(&header("a", "m:2", 0), &body(&[], 1), Some(2))
            .unwrap_err();
        assert!(
            matches!(missing, RegisterBrokerError::SecondMaster { .. }),
            "{missing}"
        );
        let lower = r
            .register_broker_with_epoch(&header("a", "m:2", 0), Some(1), &body(&[], 1), Some(2))
            .unwrap_err();
        let text = lower.to_string();
        assert!(
            text.contains("master epoch 1 refused")
                && text.contains("master epoch is 2")
                && text.contains("m:1")
                && text.contains("m:2"),
            "{text}"
        );
        // Nothing changed.
        let addrs = master_ids(&r, "T");
        assert_eq!(addrs.len(), 1);
        assert_eq!(addrs.get(&0).map(|v| v.as_str()), Some("m:1"));
        assert_eq!(r.live_broker_count(), 1);
    }

    #[test]
    fn a_deposed_master_is_refused_as_master_and_accepted_as_slave() {
        let r = RouteRegistry::default();
        r.register_broker_with_epoch(
            &header("a", "m:1", 0),
            Some(1),
            &body(&[("T", 4)], 1),
            Some(1),
        )
        .unwrap();
        r.register_broker(&header("a", "s:1", 1), &body(&[], 1), Some(2))
            .unwrap();
        r.register_broker_with_epoch(
            &header("a", "s:1", 0),
            Some(2),
            &body(&[("T", 4)], 2),
            Some(2),
        )
        .unwrap();
        // The old master, still believing it is master, is refused naming both epochs.
        let err = r
            .register_broker_with_epoch(
                &header("a", "m:1", 0),
                Some(1),
                &body(&[("T", 4)], 1),
                Some(1),
            )
            .unwrap_err();
        assert_eq!(
            err,
            RegisterBrokerError::DeposedMaster {
                cluster_name: "C".into(),
                broker_name: "a".into(),
                epoch: 1,
                current_epoch: 2,
                current_master: Some("s:1".into()),
                refused_addr: "m:1".into(),
            }
        );
        // Demoted, it registers as a slave under its own id and learns the new master.
        let res = r
            .register_broker(&header("a", "m:1", 2), &body(&[], 1), Some(1))
            .unwrap();
        assert_eq!(res.master_addr.as_deref(), Some("s:1"));
        let addrs = master_ids(&r, "T");
        assert_eq!(addrs.get(&0).map(|v| v.as_str()), Some("s:1"));
        assert_eq!(addrs.get(&2).map(|v| v.as_str()), Some("m:1"));
        assert_eq!(addrs.len(), 2);
        // With the new master gone, the deposed one still cannot come back as master.
        assert_eq!(r.connection_closed(2).len(), 1);
        let err = r
            .register_broker_with_epoch(&header("a", "m:1", 0), Some(1), &body(&[], 1), Some(1))
            .unwrap_err();
        assert!(
            matches!(
                err,
                RegisterBrokerError::DeposedMaster {
                    current_master: None,
                    ..
                }
            ),
            "{err}"
        );
        // A higher epoch (a new election) is accepted.
        r.register_broker_with_epoch(&header("a", "m:1", 0), Some(3), &body(&[], 1), Some(1))
            .unwrap();
        assert_eq!(master_ids(&r, "T").get(&0).map(|v| v.as_str()), Some("m:1"));
        assert_eq!(master_ids(&r, "T").len(), 1);
    }

    #[test]
    fn re_registering_under_another_id_removes_the_old_id_entry() {
        let r = RouteRegistry::default();
        r.register_broker(&header("a", "m:1", 0), &body(&[("T", 4)], 1), Some(1))
            .unwrap();
        r.register_broker(&header("a", "s:1", 1), &body(&[], 1), Some(2))
            .unwrap();
        // The master demotes itself first: it leaves id 0 and the route has no master.
        r.register_broker(&header("a", "m:1", 3), &body(&[], 1), Some(1))
            .unwrap();
        let addrs = master_ids(&r, "T");
        assert_eq!(addrs.get(&0), None, "{addrs:?}");
        assert_eq!(addrs.get(&3).map(|v| v.as_str()), Some("m:1"));
        assert_eq!(addrs.len(), 2);
        assert_eq!(r.live_broker_count(), 2);
        // So the promoted slave needs no epoch.
        r.register_broker(&header("a", "s:1", 0), &body(&[("T", 4)], 2), Some(2))
            .unwrap();
        let addrs = master_ids(&r, "T");
        assert_eq!(addrs.get(&0).map(|v| v.as_str()), Some("s:1"));
        assert_eq!(addrs.get(&1), None);
        assert_eq!(addrs.len(), 2);
        assert!(r.topic_route("T").unwrap().queue_datas.len() == 1);
    }
}
