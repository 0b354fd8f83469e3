//! What a [`Producer`](super::Producer) is configured with: [`ProducerConfig`] and how a
//! send picks its queue ([`QueueSelection`], [`QueueSelector`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;

use crate::compression;
use crate::message::Message;

/// Topic Java producers name as the template of auto-created topics.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Producer group.
    pub group: String,
    /// Instance name in the client id (`<ip>@<instance name>`); `None` for `<pid>#<nanos>`,
    /// which differs between producers of one process.
    pub instance_name: Option<String>,
    /// Bound on one send attempt (connect included).
    pub send_timeout: Duration,
    /// Extra attempts after a retriable failure (RocketMQ's `retryTimesWhenSendFailed`, 2).
    pub retries_max: u32,
    /// Largest body (or encoded batch) accepted (RocketMQ's `maxMessageSize`, 4 MiB).
    pub max_body_bytes: usize,
    /// Bound on connecting to a server.
    pub connect_timeout: Duration,
    /// A cached route older than this is refreshed before use.
    pub route_max_age: Duration,
    /// Interval of the background refresh of the routes in use (Java's
    /// `pollNameServerInterval`, 30 s).
    pub poll_name_server_interval: Duration,
    /// Interval of heartbeats to every known broker (Java's `heartbeatBrokerInterval`, 30 s).
    pub heartbeat_interval: Duration,
    /// Template topic whose brokers auto-create unknown topics (Java's `createTopicKey`).
    pub create_topic_key: String,
    /// Queues the broker creates for a topic auto-created by a send.
    pub default_topic_queue_nums: i32,
    /// Single-message bodies larger than this are zlib-compressed (Java's
    /// `compressMsgBodyOverHowmuch`, 4 KiB). `usize::MAX` disables compression.
    pub compress_over_bytes: usize,
    /// zlib level, 0–9 (Java's `compressLevel`, 5).
    pub compress_level: u32,
    /// Bound on outstanding [`Producer::send_async`](super::Producer::send_async) / [`Producer::send_with_callback`](super::Producer::send_with_callback)
    /// sends (Java's `backPressureForAsyncSendNum`, 10000).
    pub async_sends_max: usize,
    /// Send requests carry RocketMQ's compact binary header (serialize type `ROCKETMQ`, what
    /// Java clients send with `rocketmq.serialize.type=ROCKETMQ`) instead of JSON. Every
    /// RocketMQ broker reads both and answers in the request's type; the binary form saves
    /// the JSON encode and parse of the send header and its reply on both sides. A header the
    /// binary form cannot carry exactly (an empty value) goes as JSON.
    pub binary_header: bool,
    /// ACL credentials every request is signed with (`None`: unsigned, for brokers without
    /// ACL).
    pub credentials: Option<ferromq_protocol::remoting::acl::Credentials>,
    /// TLS (`None`: plain TCP) of every connection, name servers and brokers: trusts the CA
    /// file it was built from.
    pub tls: Option<ferromq_protocol::remoting::tls::ClientTls>,
    /// How long a send (and every other request of the producer) spins for its reply before
    /// its task parks: `Duration::ZERO` (the default) parks at once. Trades CPU for latency
    /// where waking a parked thread is slow (a VM whose idle CPUs halt); pays most on a
    /// current-thread runtime. Capped at
    /// [`REPLY_SPIN_MAX`](ferromq_protocol::remoting::REPLY_SPIN_MAX); see
    /// `ferromq_protocol::remoting::client`.
    pub reply_spin: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            namesrv_addrs: Vec::new(),
            group: "DEFAULT_PRODUCER".into(),
            instance_name: None,
            send_timeout: Duration::from_secs(3),
            retries_max: 2,
            max_body_bytes: 4 * 1024 * 1024,
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            poll_name_server_interval: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            create_topic_key: AUTO_CREATE_TOPIC_KEY.into(),
            default_topic_queue_nums: 4,
            compress_over_bytes: compression::COMPRESS_OVER_BYTES_DEFAULT,
            compress_level: compression::COMPRESS_LEVEL_DEFAULT,
            async_sends_max: 10_000,
            binary_header: true,
            credentials: None,
            tls: None,
            reply_spin: Duration::ZERO,
        }
    }
}

/// Chooses a queue for a message among the topic's writable queues.
pub trait QueueSelector: Send + Sync + std::fmt::Debug {
    /// Index into `queues` (taken modulo its length). `queues` is never empty.
    fn select(&self, queues: &[MessageQueue], message: &Message) -> usize;
}

/// How a send picks its queue.
#[derive(Debug, Clone, Default)]
pub enum QueueSelection {
    /// Round robin over writable queues; a retry moves to a queue on another broker.
    #[default]
    RoundRobin,
    /// `|java_hash(key)| mod queue count`: the same key always lands on the same queue while
    /// the route is unchanged. Retries stay on that queue.
    HashKey(String),
    /// A user selector. Retries stay on the queue it picks.
    Custom(Arc<dyn QueueSelector>),
}
