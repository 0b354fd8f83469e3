//! Everything a request processor needs: configuration, store, topics, groups, clients.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::client::NotifyConsumerIdsChangedRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::MessageStore;
use tokio::sync::Notify;

use crate::catalog::groups::GroupManager;
use crate::catalog::topics::TopicManager;
use crate::config::BrokerConfig;
use crate::sessions::registry::ClientRegistry;

/// Counters a test or `brokerStatus` can read.
#[derive(Debug, Default)]
pub struct BrokerCounters {
    /// Negative commits (ali-ons sends -1) ignored.
    pub negative_commits_ignored: AtomicU64,
    /// Commits rejected by the offset rules.
    pub commits_rejected: AtomicU64,
    /// Backward commits of offline groups recorded as resets.
    pub offline_resets: AtomicU64,
    /// Messages stored.
    pub messages_put: AtomicU64,
    /// Messages returned by pulls.
    pub messages_pulled: AtomicU64,
}

/// Shared state of a running broker.
#[derive(Debug)]
pub struct BrokerContext {
    /// Settings.
    pub config: BrokerConfig,
    /// The address clients reach this broker at (`brokerIP1:listenPort`, or
    /// `brokerIP1:brokerAdvertisedPort`): registered with the name servers and the store host
    /// of message ids.
    pub broker_addr: SocketAddr,
    /// The HA address slaves connect to (`brokerIP1:haListenPort`), registered as
    /// `haServerAddr`.
    pub ha_addr: SocketAddr,
    /// The message store.
    pub store: Arc<MessageStore>,
    /// Topic configs.
    pub topics: TopicManager,
    /// Subscription groups.
    pub groups: GroupManager,
    /// Connected clients.
    pub clients: ClientRegistry,
    /// Delay levels, ms.
    pub delay_levels_ms: Vec<u64>,
    /// Wakes the registration task after a topic change.
    pub register_now: Notify,
    /// Counters.
    pub counters: BrokerCounters,
    /// Queue locks of orderly consumers.
    pub locks: crate::sessions::registry::QueueLocks,
    /// Connections to the name servers.
    pub namesrv_client: ferromq_namesrv::NamesrvClient,
    /// Consumers fenced off their queues by a reset until they follow it.
    pub fences: crate::core::fences::ResetFences,
    /// Who each connection is, and how long groups have had no member.
    pub sessions: crate::sessions::identity::Sessions,
    /// Prometheus metrics (shared with tasks that outlive a request borrow).
    pub metrics: Arc<crate::observability::metrics::BrokerMetrics>,
    /// Recent rates for GET_BROKER_RUNTIME_INFO.
    pub stats: crate::observability::broker_stats::BrokerStats,
    /// Settings that may change at run time; read these, not `config`, for their keys.
    pub runtime_config: crate::config::runtime::RuntimeConfig,
    /// The connection limits in force, the partial-frame budget in use and their counters.
    pub connection_limits: Arc<ferromq_protocol::remoting::limits::ConnectionGuard>,
    /// The catalog's records in the log (`crate::replication::catalog_log`).
    pub catalog_log: crate::replication::catalog_log::CatalogLog,
    /// Role, in-sync set and high watermark (`crate::replication`).
    pub replication: Arc<crate::replication::Replication>,
    /// Controller mode: the link to the controller group (`None` otherwise).
    pub controller: Option<Arc<crate::replication::controlled::ControllerLink>>,
    /// The long-poll pulls held now and the limits on holding (`pullHoldMax`,
    /// `pullHoldMaxPerConnection`).
    pub held_pulls: Arc<crate::core::work_limits::HeldPulls>,
    /// Half messages and the checker's table (`crate::core::transactions`).
    pub transactions: crate::core::transactions::Transactions,
    /// Receive / ack consumption state (`crate::core::pop`).
    pub pop: crate::core::pop::Pop,
    /// Pending timer messages (`crate::core::timer`).
    pub timers: crate::core::timer::Timers,
    /// ACL accounts in force (`aclEnable`); `None`: ACL off.
    pub acl: Option<Arc<ferromq_acl::Acl>>,
    /// TLS of the remoting port (`tls.server.mode`).
    pub tls: crate::remoting::tls::ServerTls,
}

impl BrokerContext {
    /// Tells every member of each changed group to rebalance (one-way
    /// NOTIFY_CONSUMER_IDS_CHANGED, as RocketMQ does); a full or closed connection is skipped.
    pub fn notify_ids_changed(&self, groups: &[String]) {
        let now = std::time::Instant::now();
        for group in groups {
            if !self.clients.has_online_consumers(group) {
                self.sessions.group_emptied(group, now);
            }
            let notify_enabled = self
                .groups
                .get(group)
                .is_none_or(|g| g.notify_consumer_ids_changed_enable);
            if !notify_enabled {
                continue;
            }
            let header = NotifyConsumerIdsChangedRequestHeader {
                consumer_group: group.clone(),
            };
            for consumer in self.clients.consumers(group) {
                let mut command = RemotingCommand::request_with_header(
                    request::NOTIFY_CONSUMER_IDS_CHANGED,
                    &header,
                );
                command.set_oneway(true);
                if consumer.channel.tx.try_send(command.into()).is_err() {
                    tracing::debug!(%group, client = %consumer.client_id, "could not notify a consumer of a membership change");
                }
            }
            tracing::info!(%group, members = ?self.clients.consumer_ids(group), "consumer group membership changed");
        }
    }
}
