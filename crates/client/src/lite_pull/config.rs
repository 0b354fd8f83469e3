//! What a [`LitePullConsumer`](super::LitePullConsumer) is configured with
//! ([`LitePullConsumerConfig`], [`StartPosition`]) and what it counts ([`LitePullStats`]).

use std::net::SocketAddr;
use std::time::Duration;

/// Where a queue with no stored offset starts (RocketMQ's `ConsumeFromWhere`), used only
/// when the broker positively answered that the group has no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The queue's smallest stored offset.
    First,
    /// The queue's max offset (only messages produced from now on).
    #[default]
    Last,
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// Lite pull consumer settings.
#[derive(Debug, Clone)]
pub struct LitePullConsumerConfig {
    /// Name servers, asked in order.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Consumer group.
    pub group: String,
    /// Start of a queue the group has no offset for.
    pub start_position: StartPosition,
    /// Messages asked for by one pull.
    pub pull_batch: u32,
    /// Most messages buffered per queue (pull-ahead bound).
    pub buffer_per_queue: usize,
    /// Most messages one `poll` returns.
    pub max_poll_messages: usize,
    /// How long the broker may hold a pull on an empty queue (long polling).
    pub pull_hold: Duration,
    /// Bound on every request other than the long-polling part of a pull.
    pub request_timeout: Duration,
    /// Bound on connecting to a server.
    pub connect_timeout: Duration,
    /// A cached route older than this is refreshed before use.
    pub route_max_age: Duration,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Rebalance period in subscribe mode (one also runs at `subscribe`).
    pub rebalance_interval: Duration,
    /// Pause after a failed pull or start-position lookup before the queue retries.
    pub retry_delay: Duration,
    /// Commit every assigned queue's polled position on this interval (`None`: only explicit
    /// commits).
    pub auto_commit_interval: Option<Duration>,
    /// Tag expression of queues given to [`LitePullConsumer::assign`](super::LitePullConsumer::assign).
    pub assign_expression: String,
    /// ACL credentials every request is signed with (`None`: unsigned, for brokers without
    /// ACL).
    pub credentials: Option<ferromq_protocol::remoting::acl::Credentials>,
    /// TLS (`None`: plain TCP) of every connection, name servers and brokers: trusts the CA
    /// file it was built from.
    pub tls: Option<ferromq_protocol::remoting::tls::ClientTls>,
    /// Pull requests carry RocketMQ's compact binary header (serialize type `ROCKETMQ`, what
    /// Java clients send with `rocketmq.serialize.type=ROCKETMQ`) instead of JSON. Every
    /// RocketMQ broker reads both and answers in the request's type, so the pull's reply
    /// header is binary too: this saves the JSON encode and parse of both headers of every
    /// pull on both sides (`PullConsumerConfig::binary_header`).
    pub binary_header: bool,
}

impl Default for LitePullConsumerConfig {
    fn default() -> Self {
        LitePullConsumerConfig {
            namesrv_addrs: Vec::new(),
            group: String::new(),
            start_position: StartPosition::Last,
            pull_batch: 32,
            buffer_per_queue: 1024,
            max_poll_messages: 256,
            pull_hold: Duration::from_millis(500),
            request_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            route_max_age: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(30),
            rebalance_interval: Duration::from_secs(5),
            retry_delay: Duration::from_millis(200),
            auto_commit_interval: None,
            assign_expression: "*".into(),
            credentials: None,
            tls: None,
            binary_header: true,
        }
    }
}

/// Counters of a lite pull consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LitePullStats {
    /// Background auto-commits that succeeded for every queue.
    pub auto_commits_ok: u64,
    /// Background auto-commits where at least one queue failed.
    pub auto_commit_failures: u64,
    /// Commits of a queue leaving the assignment that failed.
    pub release_commit_failures: u64,
    /// Rebalances that could not run (route or consumer list unavailable).
    pub rebalance_failures: u64,
    /// Pulls that failed (each retried after `retry_delay`).
    pub pull_errors: u64,
    /// Start-position lookups that failed (each retried after `retry_delay`).
    pub start_lookup_failures: u64,
    /// OFFSET_ILLEGAL corrections the offset store could not persist (refused or failed).
    pub correction_failures: u64,
    /// Queues moved by a RESET_CONSUMER_CLIENT_OFFSET push.
    pub resets_applied: u64,
}
