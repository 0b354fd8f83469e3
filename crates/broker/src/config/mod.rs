//! Broker configuration. Keys keep RocketMQ's names (`brokerName`, `listenPort`,
//! `namesrvAddr`, `flushDiskType`, ...) so a RocketMQ `broker.conf` translates line by line
//! into TOML. An unknown key or a bad value is an error that names the key. The keys that may
//! change at run time are in [`runtime`].

pub mod runtime;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferromq_protocol::remoting::limits::{self, LimitError, LimitSettings};
use ferromq_store::{FlushDiskType, StoreConfig};
use serde::{Deserialize, Serialize};

use crate::core::work_limits;
pub use crate::replication::settings::{BrokerRole, ReplicationSettings};

/// Largest `maxReconsumeTimes`: each redelivery waits at least the longest delay level, so
/// more would keep a failing message out of the dead-letter queue for years.
pub const MAX_RECONSUME_TIMES_LIMIT: i32 = 10_000;

/// A configuration problem, naming the key or file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The TOML is malformed or names an unknown key.
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// The store settings these keys imply are unusable; the message names the key.
    #[error("{0}")]
    Store(String),
    /// A key has a value ferromq cannot use.
    #[error("config key {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl From<LimitError> for ConfigError {
    /// A connection limit problem names its broker key already.
    fn from(error: LimitError) -> Self {
        ConfigError::Invalid {
            key: error.key,
            message: error.message,
        }
    }
}

/// Broker settings, with RocketMQ's names and defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BrokerConfig {
    /// Cluster this broker belongs to.
    pub broker_cluster_name: String,
    /// Broker name (shared by a master and its slaves).
    pub broker_name: String,
    /// 0 for a master.
    pub broker_id: u64,
    /// The IP the broker registers with the name servers and writes into message ids (store
    /// host): clients connect to `brokerIP1:listenPort`, or `brokerIP1:brokerAdvertisedPort`
    /// when that is set. Must be an address clients can reach, not `0.0.0.0`.
    #[serde(rename = "brokerIP1")]
    pub broker_ip1: IpAddr,
    /// Port to listen on (0: any free port).
    pub listen_port: u16,
    /// Port of the RocketMQ 5.x gRPC endpoint (`crate::grpc`, docs/grpc.md): 8081 (the Java
    /// proxy's port) by default; 0: any free port, see `Broker::grpc_addr`; -1: no gRPC
    /// endpoint. Absent while `listenPort` is 0 it is 0 too, so brokers on OS-chosen ports
    /// (tests, embedded brokers) never contend for 8081. ferromq's key, named like the
    /// proxy's `grpcServerPort` in RocketMQ's style.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_listen_port: Option<i32>,
    /// IP the listening sockets (broker and metrics) bind; absent: `brokerIP1`. RocketMQ's
    /// `bindAddress` (there `0.0.0.0` by default; ferromq listens only where it registers
    /// unless told otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_address: Option<IpAddr>,
    /// Port the broker registers and writes into message ids instead of the one it listens
    /// on, for a proxy or port mapping in front of it; absent: the listening port. ferromq's
    /// own key (RocketMQ always registers `brokerIP1:listenPort`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_advertised_port: Option<u16>,
    /// Port the broker registers for its HA listener (with the controller and the name
    /// servers, which is where slaves learn it) instead of the one it listens on, for a proxy
    /// or port mapping in front of it; absent: the HA listening port. ferromq's own key, like
    /// `brokerAdvertisedPort`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_advertised_port: Option<u16>,
    /// Name servers, `host:port;host:port`; empty runs without registration.
    pub namesrv_addr: String,
    /// Data directory.
    pub store_path_root_dir: PathBuf,
    /// `SYNC_FLUSH` or `ASYNC_FLUSH`.
    pub flush_disk_type: String,
    /// `ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE` (see `crate::replication`).
    pub broker_role: String,
    /// Port of the HA (replication) listener of a master; absent: `listenPort + 1` (any free
    /// port when `listenPort` is 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_listen_port: Option<u16>,
    /// A slave's master HA address (`ip:port`); absent: learned from the name servers'
    /// registration replies, as RocketMQ slaves do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_master_address: Option<String>,
    /// How often each side of an HA connection speaks when it has nothing else to say, ms;
    /// a side silent for three intervals is taken for gone.
    pub ha_send_heartbeat_interval: u64,
    /// A slave that has not caught up with the master for this long leaves the in-sync set,
    /// ms.
    pub ha_max_time_slave_not_catchup: u64,
    /// Members of the in-sync set (the master included) a write needs: below it, SYNC_MASTER
    /// answers IN_SYNC_REPLICAS_NOT_ENOUGH and the high watermark stops.
    pub min_in_sync_replicas: u32,
    /// Let consumers read from slaves: a master suggests a slave when a pull reads far
    /// behind the log end (`accessMessageInMemoryMaxRatio`).
    pub slave_read_enable: bool,
    /// Percentage of physical memory a pull may trail the log end by before a master with
    /// `slaveReadEnable` suggests a slave (RocketMQ's key and default).
    pub access_message_in_memory_max_ratio: u32,
    /// Create topics on first send (the `TBW102` convention).
    pub auto_create_topic_enable: bool,
    /// Queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
    /// Create subscription groups on first use.
    pub auto_create_subscription_group: bool,
    /// CommitLog segment size.
    pub mapped_file_size_commit_log: u64,
    /// Largest message body.
    pub max_message_size: usize,
    /// Interval of the async flush, ms.
    pub flush_interval_commit_log: u64,
    /// ASYNC_FLUSH commits copy into a map of the active CommitLog segment (`true`) or use
    /// one `pwrite` each (`false`); a ferromq key (RocketMQ always maps).
    pub commit_log_mapped_writes: bool,
    /// SYNC_FLUSH: a thread keeps the active CommitLog segment written with zeros ahead of
    /// the commits while they are small, so their fsyncs write no block allocation (`true`,
    /// the default), or small commits write into `fallocate`d space (`false`); a ferromq key.
    pub commit_log_zeroed_space: bool,
    /// Pull reads copy records out of a read-only map of each CommitLog segment (`true`) or
    /// read spans with `pread` (`false`); a ferromq key.
    pub commit_log_mapped_reads: bool,
    /// ASYNC_FLUSH mapped writes: a thread populates the map's next window ahead of the
    /// commits (`true`, the default) or the committer populates each window itself
    /// (`false`, the comparison); a ferromq key.
    pub commit_log_populate_ahead: bool,
    /// How long a SYNC_FLUSH send waits for its fsync, ms.
    pub sync_flush_timeout: u64,
    /// CommitLog retention, hours.
    pub file_reserved_time: u64,
    /// Re-registration period with the name servers, ms.
    pub register_name_server_period: u64,
    /// Longest a pull may be held waiting for messages, ms.
    pub broker_suspend_max_time_millis: u64,
    /// How remoting pull replies carry their messages (RocketMQ's key and default). `true`:
    /// each record is read into memory and its CRC verified before it is sent. `false`: a
    /// reply on a plain TCP connection is sent from the CommitLog files with `sendfile(2)`
    /// (zero copy) after checking each record's head and tail only — the body CRC is not
    /// verified, as RocketMQ's zero-copy path does not verify it either. TLS connections,
    /// gRPC and pops always copy. Changeable at run time (`runtime`). See docs/storage.md.
    pub transfer_msg_by_heap: bool,
    /// Most deliveries before the dead-letter queue for the subscription groups this broker
    /// creates itself (their `retryMaxTimes`, RocketMQ's group default 16). A group created
    /// by an admin keeps its own value, and a send-back's `maxReconsumeTimes` header (sent by
    /// clients from V3_4_9) takes precedence over the group's.
    pub max_reconsume_times: i32,
    /// Delay levels of retried and scheduled messages (RocketMQ's `messageDelayLevel`).
    pub message_delay_level: String,
    /// A client silent this long is removed from its groups, ms.
    pub channel_expired_timeout: u64,
    /// Largest frame accepted from a client.
    pub max_frame_length: usize,
    /// Most client connections served at once; a connection past it is closed as soon as it
    /// is accepted. Capped below the open-file limit (`ulimit -n`), so that connections never
    /// take the descriptors the store needs (`ferromq_protocol::remoting::limits`). ferromq's
    /// own key.
    pub max_connections: u32,
    /// A connection with no byte in or out and no request in flight for this long is closed,
    /// seconds (RocketMQ's key and default).
    pub server_channel_max_idle_time_seconds: u64,
    /// Once the first byte of a frame has arrived, the whole frame must arrive within this,
    /// ms; the connection is closed otherwise. ferromq's own key.
    pub frame_read_timeout_millis: u64,
    /// Memory the incomplete frames of all connections may hold together, bytes (at least
    /// `maxFrameLength`); a connection whose frame would pass it is closed. ferromq's own key.
    pub partial_frame_budget_bytes: u64,
    /// Port of the Prometheus metrics endpoint (`GET /metrics` over HTTP on `bindAddress`,
    /// by default `brokerIP1`);
    /// absent: no endpoint; 0: any free port, see `Broker::metrics_addr`. ferromq's own key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
    /// IP the metrics endpoint binds; absent: 127.0.0.1 (loopback), whatever `bindAddress`
    /// says, so metrics are not exposed to the network unless asked for. ferromq's own key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_bind_address: Option<IpAddr>,
    /// Turns ACL on (RocketMQ's key): every request must be signed by an account of
    /// `aclFile` with the permission it needs (`core::authorisation`). Off by default.
    pub acl_enable: bool,
    /// The accounts file, in the shape of RocketMQ's `plain_acl.yml`; required with
    /// `aclEnable`. ferromq's own key (RocketMQ reads `$ROCKETMQ_HOME/conf/plain_acl.yml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl_file: Option<PathBuf>,
    /// How often the accounts file is checked for changes, ms. ferromq's own key.
    pub acl_reload_interval_millis: u64,
    /// Access key the broker signs its own requests to the name servers with (registration),
    /// for name servers with ACL on; absent: unsigned. ferromq's own key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_access_key: Option<String>,
    /// Secret key of `innerAccessKey`. ferromq's own key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_secret_key: Option<String>,
    /// TLS on the remoting port (RocketMQ's `tls.server.mode`): `disabled` (default),
    /// `permissive` (TLS and plain connections both accepted, told apart by the first
    /// byte) or `enforcing` (TLS only).
    #[serde(rename = "tls.server.mode")]
    pub tls_server_mode: String,
    /// PEM certificate chain of the remoting port (RocketMQ's `tls.server.certPath`).
    #[serde(
        rename = "tls.server.certPath",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_server_cert_path: Option<PathBuf>,
    /// PEM private key of the remoting port (RocketMQ's `tls.server.keyPath`; PKCS#8,
    /// PKCS#1 or SEC1, unencrypted).
    #[serde(rename = "tls.server.keyPath", skip_serializing_if = "Option::is_none")]
    pub tls_server_key_path: Option<PathBuf>,
    /// The broker's own connections to the name servers (registration) use TLS (RocketMQ's
    /// `tls.enable`), for name servers whose `tls.server.mode` is enforcing.
    #[serde(rename = "tls.enable")]
    pub tls_enable: bool,
    /// PEM file of the CA (or self-signed certificate) the broker trusts for `tls.enable`
    /// (RocketMQ's `tls.client.trustCertPath`); the name server's certificate must carry the
    /// IP address the broker connects to.
    #[serde(
        rename = "tls.client.trustCertPath",
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_client_trust_cert_path: Option<PathBuf>,
    /// Most long-poll pulls the broker holds at once; a pull that would pass it is answered
    /// SYSTEM_BUSY at once (`work_limits`). ferromq's own key.
    pub pull_hold_max: u32,
    /// Most long-poll pulls one connection may have held at once; past it SYSTEM_BUSY.
    /// ferromq's own key.
    pub pull_hold_max_per_connection: u32,
    /// Most requests one connection may have in flight (read, not yet answered); past it a
    /// request is answered SYSTEM_BUSY at once, never queued. ferromq's own key.
    pub max_in_flight_requests_per_connection: u32,
    /// Controller mode: roles, broker ids and the in-sync set come from the controllers at
    /// `controllerAddr` (automatic failover). `brokerRole` then names the master role taken
    /// when elected.
    pub enable_controller_mode: bool,
    /// Controller addresses, `;`-separated (controller mode).
    pub controller_addr: String,
    /// How often a broker in controller mode heartbeats to the controller leader, ms. Each
    /// confirmed heartbeat renews the master's lease (RocketMQ's default is 1000; ferromq's
    /// 200 keeps failover under 2 s with the controller's default timeout of 1000 ms).
    pub broker_heartbeat_interval: u64,
    /// Election preference among equally up-to-date replicas: lower wins.
    pub broker_election_priority: u32,
    /// How long start-up waits for a first registration with the controllers, ms.
    pub controller_register_timeout_mills: u64,
    /// How long a master refuses offset resets after the controller made it master (a
    /// promotion, or taking its own epoch back after a restart), ms: a reset fences the group's
    /// online consumers, and until they have heartbeated to this broker it does not know them
    /// (RocketMQ clients heartbeat every 30 s). ferromq's own key.
    pub reset_wait_after_promotion_millis: u64,
    /// A half message undecided this long after it was stored is checked back with its
    /// producer, ms (RocketMQ's key and default, 6 s; a message's
    /// `CHECK_IMMUNITY_TIME_IN_SECONDS` overrides it).
    pub transaction_time_out: u64,
    /// How often the transaction checker runs, and the least time between two check-backs
    /// of one half, ms (RocketMQ's key and default, 60 s).
    pub transaction_check_interval: u64,
    /// Check-backs of one half before it is discarded to `TRANS_CHECK_MAX_TIME_TOPIC`
    /// (RocketMQ's key and default, 15).
    pub transaction_check_max: u32,
    /// Most half messages the checker tracks (undecided, or decided above its low
    /// watermark); a half send past it is answered SYSTEM_BUSY. ferromq's own key.
    pub transaction_tracked_max: u32,
    /// Longest delay a timer message may ask for, s (RocketMQ's key and default, 3 days).
    pub timer_max_delay_sec: u64,
    /// Most pending timer messages; a timer send past it is answered SYSTEM_BUSY. ferromq's
    /// own key.
    pub timer_tracked_max: u32,
}

/// `grpcListenPort` value that turns the gRPC endpoint off.
pub const GRPC_DISABLED: i32 = -1;

/// `grpcListenPort` when absent (and `listenPort` is not 0): the Java proxy's gRPC port.
pub const GRPC_LISTEN_PORT_DEFAULT: u16 = 8081;

impl BrokerConfig {
    /// The port the gRPC endpoint listens on (0: any free port), or `None` when it is off
    /// (`grpcListenPort = -1`). See [`BrokerConfig::grpc_listen_port`].
    pub fn grpc_port(&self) -> Option<u16> {
        match self.grpc_listen_port {
            None if self.listen_port == 0 => Some(0),
            None => Some(GRPC_LISTEN_PORT_DEFAULT),
            Some(port) => u16::try_from(port).ok(),
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            broker_ip1: IpAddr::V4(Ipv4Addr::LOCALHOST),
            listen_port: 10911,
            grpc_listen_port: None,
            bind_address: None,
            broker_advertised_port: None,
            ha_advertised_port: None,
            namesrv_addr: String::new(),
            store_path_root_dir: PathBuf::from("./data"),
            flush_disk_type: "ASYNC_FLUSH".into(),
            broker_role: "ASYNC_MASTER".into(),
            ha_listen_port: None,
            ha_master_address: None,
            ha_send_heartbeat_interval: 5_000,
            ha_max_time_slave_not_catchup: 15_000,
            min_in_sync_replicas: 1,
            slave_read_enable: false,
            access_message_in_memory_max_ratio: 40,
            auto_create_topic_enable: true,
            default_topic_queue_nums: 8,
            auto_create_subscription_group: true,
            mapped_file_size_commit_log: 1 << 30,
            max_message_size: 4 * 1024 * 1024,
            flush_interval_commit_log: 500,
            commit_log_mapped_writes: true,
            commit_log_zeroed_space: true,
            commit_log_mapped_reads: true,
            commit_log_populate_ahead: true,
            sync_flush_timeout: 5_000,
            file_reserved_time: 72,
            register_name_server_period: 30_000,
            broker_suspend_max_time_millis: 15_000,
            transfer_msg_by_heap: true,
            max_reconsume_times: 16,
            message_delay_level: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
                .into(),
            channel_expired_timeout: 120_000,
            max_frame_length: 16 * 1024 * 1024,
            max_connections: limits::DEFAULT_MAX_CONNECTIONS,
            server_channel_max_idle_time_seconds: limits::DEFAULT_IDLE_TIMEOUT.as_secs(),
            frame_read_timeout_millis: limits::DEFAULT_FRAME_READ_TIMEOUT.as_millis() as u64,
            partial_frame_budget_bytes: limits::DEFAULT_PARTIAL_FRAME_BUDGET,
            metrics_port: None,
            metrics_bind_address: None,
            acl_enable: false,
            acl_file: None,
            acl_reload_interval_millis: ferromq_acl::RELOAD_INTERVAL_DEFAULT.as_millis() as u64,
            inner_access_key: None,
            inner_secret_key: None,
            tls_server_mode: "disabled".into(),
            tls_server_cert_path: None,
            tls_server_key_path: None,
            tls_enable: false,
            tls_client_trust_cert_path: None,
            pull_hold_max: work_limits::DEFAULT_PULL_HOLD_MAX,
            pull_hold_max_per_connection: work_limits::DEFAULT_PULL_HOLD_MAX_PER_CONNECTION,
            max_in_flight_requests_per_connection:
                work_limits::DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
            enable_controller_mode: false,
            controller_addr: String::new(),
            broker_heartbeat_interval: 200,
            broker_election_priority: i32::MAX as u32,
            controller_register_timeout_mills: 30_000,
            reset_wait_after_promotion_millis: 30_000,
            transaction_time_out: 6_000,
            transaction_check_interval: 60_000,
            transaction_check_max: 15,
            transaction_tracked_max: 100_000,
            timer_max_delay_sec: 259_200,
            timer_tracked_max: 1_000_000,
        }
    }
}

impl BrokerConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let config: BrokerConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: describe_toml_error(&text, &e),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The controller-mode settings (`None` unless `enableControllerMode`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the keys of a value or combination that cannot work.
    pub fn controller_mode_settings(
        &self,
    ) -> Result<Option<crate::replication::controlled::ControllerModeSettings>, ConfigError> {
        if !self.enable_controller_mode {
            return Ok(None);
        }
        let invalid = |key: &'static str, message: String| ConfigError::Invalid { key, message };
        let controllers = ferromq_protocol::controller::client::ControllerClient::parse_addrs(
            &self.controller_addr,
        )
        .map_err(|e| invalid("controllerAddr", e))?;
        if controllers.is_empty() {
            return Err(invalid(
                "controllerAddr, enableControllerMode",
                "controller mode needs at least one controller address".into(),
            ));
        }
        let master_role = match self.broker_role.as_str() {
            "SYNC_MASTER" => BrokerRole::SyncMaster,
            "ASYNC_MASTER" => BrokerRole::AsyncMaster,
            other => {
                return Err(invalid(
                    "brokerRole, enableControllerMode",
                    format!(
                        "{other:?}: in controller mode the controller chooses who is master; \
                         brokerRole names the master role taken when elected (SYNC_MASTER or \
                         ASYNC_MASTER)"
                    ),
                ))
            }
        };
        if self.ha_master_address.is_some() {
            return Err(invalid(
                "haMasterAddress, enableControllerMode",
                "in controller mode the controller names the master to follow".into(),
            ));
        }
        if !(20..=10_000).contains(&self.broker_heartbeat_interval) {
            return Err(invalid(
                "brokerHeartbeatInterval",
                "must be between 20 and 10000 ms".into(),
            ));
        }
        Ok(Some(
            crate::replication::controlled::ControllerModeSettings {
                controllers,
                heartbeat_interval: Duration::from_millis(self.broker_heartbeat_interval),
                election_priority: self.broker_election_priority,
                master_role,
                register_timeout: Duration::from_millis(self.controller_register_timeout_mills),
                reset_wait_after_promotion: Duration::from_millis(
                    self.reset_wait_after_promotion_millis,
                ),
            },
        ))
    }

    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.controller_mode_settings()?;
        self.validate_security()?;
        let invalid = |key, message: &str| {
            Err(ConfigError::Invalid {
                key,
                message: message.into(),
            })
        };
        if self.broker_name.is_empty() {
            return invalid("brokerName", "must not be empty");
        }
        if self.broker_ip1.is_unspecified() {
            return invalid(
                "brokerIP1",
                "an unspecified address (0.0.0.0 or ::) cannot be registered for clients; \
                 to listen on every interface set bindAddress instead",
            );
        }
        if self.broker_advertised_port == Some(0) {
            return invalid(
                "brokerAdvertisedPort",
                "must be between 1 and 65535 (leave it out to register listenPort)",
            );
        }
        if self.ha_advertised_port == Some(0) {
            return invalid(
                "haAdvertisedPort",
                "must be between 1 and 65535 (leave it out to register the HA listening port)",
            );
        }
        if let Some(port) = self.grpc_listen_port {
            if !(GRPC_DISABLED..=i32::from(u16::MAX)).contains(&port) {
                return invalid(
                    "grpcListenPort",
                    "must be -1 (no gRPC endpoint), 0 (any free port) or a port up to 65535",
                );
            }
        }
        self.flush_type()?;
        self.replication_settings()?;
        if self.max_message_size == 0 || self.max_message_size > ferromq_protocol::BODY_SIZE_LIMIT {
            return invalid(
                "maxMessageSize",
                &format!(
                    "must be between 1 and {} bytes",
                    ferromq_protocol::BODY_SIZE_LIMIT
                ),
            );
        }
        if !(0..=MAX_RECONSUME_TIMES_LIMIT).contains(&self.max_reconsume_times) {
            return invalid(
                "maxReconsumeTimes",
                &format!("must be between 0 and {MAX_RECONSUME_TIMES_LIMIT}"),
            );
        }
        if self.default_topic_queue_nums == 0 || self.default_topic_queue_nums > 1024 {
            return invalid("defaultTopicQueueNums", "must be between 1 and 1024");
        }
        self.namesrv_addrs()?;
        self.delay_levels_ms()?;
        self.connection_limits().validate()?;
        self.validate_work_limits()?;
        self.validate_transactions()
    }

    /// The transaction keys: a zero interval would spin the checker, a zero bound refuse every
    /// half message, and huge ones hold unbounded memory.
    /// ACL and TLS keys: a combination that cannot work is an error naming the keys.
    fn validate_security(&self) -> Result<(), ConfigError> {
        if self.acl_enable && self.acl_file.is_none() {
            return Err(ConfigError::Invalid {
                key: "aclEnable, aclFile",
                message: "ACL is on but no accounts file is given".into(),
            });
        }
        if !(10..=3_600_000).contains(&self.acl_reload_interval_millis) {
            return Err(ConfigError::Invalid {
                key: "aclReloadIntervalMillis",
                message: format!(
                    "{} is outside 10..=3600000",
                    self.acl_reload_interval_millis
                ),
            });
        }
        if self.inner_access_key.is_some() != self.inner_secret_key.is_some() {
            return Err(ConfigError::Invalid {
                key: "innerAccessKey, innerSecretKey",
                message: "give both or neither".into(),
            });
        }
        self.tls_mode()?;
        Ok(())
    }

    /// The TLS mode of the remoting port (`tls.server.mode`, with its files).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an unknown mode or a TLS mode without its files.
    pub fn tls_mode(&self) -> Result<crate::remoting::tls::TlsMode, ConfigError> {
        use crate::remoting::tls::TlsMode;
        let mode = match TlsMode::parse(&self.tls_server_mode) {
            Some(TlsMode::Disabled) => return Ok(TlsMode::Disabled),
            Some(mode) => mode,
            None => {
                return Err(ConfigError::Invalid {
                    key: "tls.server.mode",
                    message: format!(
                        "{:?} is not disabled, permissive or enforcing",
                        self.tls_server_mode
                    ),
                })
            }
        };
        if self.tls_server_cert_path.is_none() || self.tls_server_key_path.is_none() {
            return Err(ConfigError::Invalid {
                key: "tls.server.certPath, tls.server.keyPath",
                message: format!(
                    "tls.server.mode = {} needs both files",
                    self.tls_server_mode
                ),
            });
        }
        Ok(mode)
    }

    /// The credentials the broker signs its name server requests with.
    pub fn inner_credentials(&self) -> Option<ferromq_protocol::remoting::acl::Credentials> {
        match (&self.inner_access_key, &self.inner_secret_key) {
            (Some(access), Some(secret)) => Some(
                ferromq_protocol::remoting::acl::Credentials::new(access.clone(), secret.clone()),
            ),
            _ => None,
        }
    }

    fn validate_transactions(&self) -> Result<(), ConfigError> {
        for (key, value, min, max) in [
            (
                "transactionTimeOut",
                self.transaction_time_out,
                0,
                86_400_000,
            ),
            (
                "transactionCheckInterval",
                self.transaction_check_interval,
                10,
                86_400_000,
            ),
            (
                "transactionCheckMax",
                u64::from(self.transaction_check_max),
                1,
                10_000,
            ),
            (
                "transactionTrackedMax",
                u64::from(self.transaction_tracked_max),
                1,
                10_000_000,
            ),
            ("timerMaxDelaySec", self.timer_max_delay_sec, 1, 31_536_000),
            (
                "timerTrackedMax",
                u64::from(self.timer_tracked_max),
                1,
                10_000_000,
            ),
        ] {
            if value < min || value > max {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("must be between {min} and {max}, got {value}"),
                });
            }
        }
        Ok(())
    }

    /// `pullHoldMax`, `pullHoldMaxPerConnection` and `maxInFlightRequestsPerConnection`: zero
    /// would refuse all work, more than their bound would let clients hold gigabytes.
    fn validate_work_limits(&self) -> Result<(), ConfigError> {
        for (key, value, max) in [
            (
                "pullHoldMax",
                self.pull_hold_max,
                work_limits::PULL_HOLD_MAX_LIMIT,
            ),
            (
                "pullHoldMaxPerConnection",
                self.pull_hold_max_per_connection,
                work_limits::PER_CONNECTION_LIMIT,
            ),
            (
                "maxInFlightRequestsPerConnection",
                self.max_in_flight_requests_per_connection,
                work_limits::PER_CONNECTION_LIMIT,
            ),
        ] {
            if value == 0 || value > max {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("must be between 1 and {max}, got {value}"),
                });
            }
        }
        Ok(())
    }

    /// The connection limits these settings imply (`maxConnections`,
    /// `serverChannelMaxIdleTimeSeconds`, `frameReadTimeoutMillis`, `partialFrameBudgetBytes`,
    /// `maxFrameLength`).
    pub fn connection_limits(&self) -> LimitSettings {
        LimitSettings {
            max_connections: self.max_connections,
            idle_timeout: Duration::from_secs(self.server_channel_max_idle_time_seconds),
            frame_read_timeout: Duration::from_millis(self.frame_read_timeout_millis),
            partial_frame_budget_bytes: self.partial_frame_budget_bytes,
            max_frame_length: self.max_frame_length,
        }
    }

    /// The IP the listening sockets bind: `bindAddress`, else `brokerIP1`.
    pub fn bind_ip(&self) -> IpAddr {
        self.bind_address.unwrap_or(self.broker_ip1)
    }

    /// The address the broker registers and writes into message ids (RocketMQ's
    /// `getBrokerAddr` and `storeHost`), given the port it really listens on (`listenPort`,
    /// or the one the OS chose for `listenPort = 0`).
    pub fn advertised_addr(&self, listening_port: u16) -> SocketAddr {
        let port = self.broker_advertised_port.unwrap_or(listening_port);
        SocketAddr::new(self.broker_ip1, port)
    }

    /// The HA address the broker registers, given the port its HA listener really has.
    pub fn advertised_ha_addr(&self, listening_port: u16) -> SocketAddr {
        let port = self.ha_advertised_port.unwrap_or(listening_port);
        SocketAddr::new(self.broker_ip1, port)
    }

    /// The replication keys, checked together: `brokerRole`, `brokerId`, `haListenPort`,
    /// `haMasterAddress`, `haSendHeartbeatInterval`, `haMaxTimeSlaveNotCatchup`,
    /// `minInSyncReplicas`, `slaveReadEnable`.
    pub fn replication_settings(&self) -> Result<ReplicationSettings, ConfigError> {
        ReplicationSettings::from_config(self)
    }

    /// `flushDiskType` as the store's enum.
    pub fn flush_type(&self) -> Result<FlushDiskType, ConfigError> {
        match self.flush_disk_type.as_str() {
            "SYNC_FLUSH" => Ok(FlushDiskType::SyncFlush),
            "ASYNC_FLUSH" => Ok(FlushDiskType::AsyncFlush),
            _ => Err(ConfigError::Invalid {
                key: "flushDiskType",
                message: "expected SYNC_FLUSH or ASYNC_FLUSH".into(),
            }),
        }
    }

    /// Name server addresses.
    pub fn namesrv_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        self.namesrv_addr
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.parse().map_err(|_| ConfigError::Invalid {
                    key: "namesrvAddr",
                    message: format!("{a:?} is not an ip:port address"),
                })
            })
            .collect()
    }

    /// Delay levels in ms, level 1 first.
    pub fn delay_levels_ms(&self) -> Result<Vec<u64>, ConfigError> {
        self.message_delay_level
            .split_whitespace()
            .map(|level| {
                let (number, unit) = level.split_at(level.len().saturating_sub(1));
                let factor = match unit {
                    "s" => 1_000,
                    "m" => 60_000,
                    "h" => 3_600_000,
                    "d" => 86_400_000,
                    _ => 0,
                };
                match (number.parse::<u64>(), factor) {
                    (Ok(n), f) if f > 0 => Ok(n * f),
                    _ => Err(ConfigError::Invalid {
                        key: "messageDelayLevel",
                        message: format!("{level:?} is not a number followed by s, m, h or d"),
                    }),
                }
            })
            .collect()
    }

    /// The store configuration these settings imply.
    pub fn store_config(&self) -> Result<StoreConfig, ConfigError> {
        let mut store = StoreConfig::new(&self.store_path_root_dir);
        store.flush_disk_type = self.flush_type()?;
        store.segment_size_bytes = self.mapped_file_size_commit_log;
        store.max_message_size_bytes = self.max_message_size;
        store.flush_interval_ms = self.flush_interval_commit_log.max(1);
        store.mapped_writes = self.commit_log_mapped_writes;
        store.zeroed_space = self.commit_log_zeroed_space;
        store.mapped_reads = self.commit_log_mapped_reads;
        store.populate_ahead = self.commit_log_populate_ahead;
        store.sync_flush_timeout_ms = self.sync_flush_timeout.max(1);
        store.retention_max_age_ms = Some(self.file_reserved_time.saturating_mul(3_600_000));
        store.store_host = self.advertised_addr(self.listen_port);
        store
            .validate()
            .map_err(|e| ConfigError::Store(e.to_string()))?;
        Ok(store)
    }
}

/// serde's message, prefixed with the key of the line it points at when the message does not
/// already name it (type errors say "expected u16" without the key).
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().to_string();
    let Some(span) = error.span() else {
        return message;
    };
    let line_start = text[..span.start.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line.split('=').next().unwrap_or("").trim();
    if key.is_empty() || message.contains(key) {
        message
    } else {
        format!("key {key}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocketmq_keys_parse_and_unknown_keys_are_named() {
        let config: BrokerConfig = toml::from_str(
            "brokerName = \"b1\"\nlistenPort = 10921\nflushDiskType = \"SYNC_FLUSH\"\nnamesrvAddr = \"127.0.0.1:9876\"\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.listen_port, 10921);
        assert_eq!(config.flush_type().unwrap(), FlushDiskType::SyncFlush);
        let error = toml::from_str::<BrokerConfig>("brokerNam = \"x\"").unwrap_err();
        assert!(error.message().contains("brokerNam"), "{}", error.message());
    }

    #[test]
    fn max_reconsume_times_is_bounded() {
        assert_eq!(BrokerConfig::default().max_reconsume_times, 16);
        for bad in [-1, MAX_RECONSUME_TIMES_LIMIT + 1] {
            let config = BrokerConfig {
                max_reconsume_times: bad,
                ..BrokerConfig::default()
            };
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("maxReconsumeTimes"), "{bad}: {error}");
        }
        for good in [0, MAX_RECONSUME_TIMES_LIMIT] {
            let config = BrokerConfig {
                max_reconsume_times: good,
                ..BrokerConfig::default()
            };
            config.validate().unwrap();
        }
    }

    #[test]
    fn transfer_msg_by_heap_defaults_to_copying_and_refuses_a_non_boolean() {
        assert!(BrokerConfig::default().transfer_msg_by_heap);
        let config: BrokerConfig = toml::from_str("transferMsgByHeap = false\n").unwrap();
        assert!(!config.transfer_msg_by_heap);
        let text = "transferMsgByHeap = \"no\"\n";
        let error = toml::from_str::<BrokerConfig>(text).unwrap_err();
        let message = describe_toml_error(text, &error);
        assert!(message.contains("transferMsgByHeap"), "{message}");
    }

    #[test]
    fn zero_max_message_size_is_refused_naming_the_key() {
        let config: BrokerConfig = toml::from_str("maxMessageSize = 0\n").unwrap();
        let error = config.validate().unwrap_err();
        assert!(error.to_string().contains("maxMessageSize"), "{error}");
        let config: BrokerConfig = toml::from_str("maxMessageSize = 1\n").unwrap();
        config.validate().unwrap();
    }

    #[test]
    fn grpc_port_defaults_to_8081_follows_listen_port_0_and_minus_one_turns_it_off() {
        assert_eq!(BrokerConfig::default().grpc_port(), Some(8081));
        let ephemeral = BrokerConfig {
            listen_port: 0,
            ..BrokerConfig::default()
        };
        assert_eq!(ephemeral.grpc_port(), Some(0));
        let config: BrokerConfig = toml::from_str("grpcListenPort = -1\n").unwrap();
        config.validate().unwrap();
        assert_eq!(config.grpc_port(), None);
        let config: BrokerConfig = toml::from_str("grpcListenPort = 18081\n").unwrap();
        assert_eq!(config.grpc_port(), Some(18081));
        let bad: BrokerConfig = toml::from_str("grpcListenPort = 70000\n").unwrap();
        let error = bad.validate().unwrap_err().to_string();
        assert!(error.contains("grpcListenPort"), "{error}");
    }

    #[test]
    fn metrics_port_is_off_unless_given() {
        assert_eq!(BrokerConfig::default().metrics_port, None);
        let config: BrokerConfig = toml::from_str("metricsPort = 0\n").unwrap();
        assert_eq!(config.metrics_port, Some(0));
        let error = toml::from_str::<BrokerConfig>("metricsPort = 70000\n").unwrap_err();
        assert!(
            error.message().contains("u16") || error.message().contains("range"),
            "{}",
            error.message()
        );
    }

    #[test]
    fn advertised_address_keys_parse_and_bad_values_name_their_key() {
        let config: BrokerConfig = toml::from_str(
            "brokerIP1 = \"127.0.0.2\"\nbindAddress = \"127.0.0.1\"\nbrokerAdvertisedPort = 20911\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.bind_ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            config.advertised_addr(10911),
            "127.0.0.2:20911".parse().unwrap()
        );
        assert_eq!(
            config.store_config().unwrap().store_host,
            "127.0.0.2:20911".parse().unwrap()
        );
        // Without the ferromq keys: RocketMQ's brokerIP1:listenPort, bound on brokerIP1.
        let config: BrokerConfig = toml::from_str("brokerIP1 = \"127.0.0.3\"\n").unwrap();
        assert_eq!(config.bind_ip(), "127.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(
            config.advertised_addr(10999),
            "127.0.0.3:10999".parse().unwrap()
        );
        assert_eq!(
            config.advertised_ha_addr(11000),
            "127.0.0.3:11000".parse().unwrap()
        );
        let config: BrokerConfig =
            toml::from_str("brokerIP1 = \"127.0.0.3\"\nhaAdvertisedPort = 21000\n").unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.advertised_ha_addr(11000),
            "127.0.0.3:21000".parse().unwrap()
        );
        let config: BrokerConfig = toml::from_str("haAdvertisedPort = 0\n").unwrap();
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("haAdvertisedPort"), "{message}");

        for (text, key) in [
            ("brokerIP1 = \"not-an-ip\"\n", "brokerIP1"),
            ("bindAddress = \"localhost:1\"\n", "bindAddress"),
            ("brokerAdvertisedPort = 70000\n", "brokerAdvertisedPort"),
            ("brokerAdvertisedPort = \"x\"\n", "brokerAdvertisedPort"),
        ] {
            let error = toml::from_str::<BrokerConfig>(text).unwrap_err();
            let message = describe_toml_error(text, &error);
            assert!(message.contains(key), "{text:?}: {message}");
        }
        for (config, key) in [
            (
                BrokerConfig {
                    broker_ip1: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    ..BrokerConfig::default()
                },
                "brokerIP1",
            ),
            (
                BrokerConfig {
                    broker_advertised_port: Some(0),
                    ..BrokerConfig::default()
                },
                "brokerAdvertisedPort",
            ),
        ] {
            let message = config.validate().unwrap_err().to_string();
            assert!(message.contains(key), "{message}");
        }
    }

    #[test]
    fn advertised_address_keys_are_read_from_a_file_and_bad_ones_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.toml");
        std::fs::write(
            &path,
            "brokerIP1 = \"127.0.0.2\"\nbrokerAdvertisedPort = 0\n",
        )
        .unwrap();
        let message = BrokerConfig::from_file(&path).unwrap_err().to_string();
        assert!(message.contains("brokerAdvertisedPort"), "{message}");
        std::fs::write(&path, "brokerIP1 = \"127.0.0.2:10911\"\n").unwrap();
        let message = BrokerConfig::from_file(&path).unwrap_err().to_string();
        assert!(message.contains("brokerIP1"), "{message}");
    }

    #[test]
    fn connection_limit_keys_parse_and_zero_or_absurd_values_name_their_key() {
        let config: BrokerConfig = toml::from_str(
            "maxConnections = 50\nserverChannelMaxIdleTimeSeconds = 5\n\
             frameReadTimeoutMillis = 700\npartialFrameBudgetBytes = 33554432\n",
        )
        .unwrap();
        config.validate().unwrap();
        let limits = config.connection_limits();
        assert_eq!(limits.max_connections, 50);
        assert_eq!(limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(limits.frame_read_timeout, Duration::from_millis(700));
        assert_eq!(limits.partial_frame_budget_bytes, 32 << 20);
        let defaults = BrokerConfig::default();
        assert_eq!(defaults.server_channel_max_idle_time_seconds, 120);
        assert_eq!(defaults.connection_limits(), LimitSettings::default());
        for (text, key) in [
            ("maxConnections = 0\n", "maxConnections"),
            ("maxConnections = 100000000\n", "maxConnections"),
            (
                "serverChannelMaxIdleTimeSeconds = 0\n",
                "serverChannelMaxIdleTimeSeconds",
            ),
            (
                "serverChannelMaxIdleTimeSeconds = 99999999\n",
                "serverChannelMaxIdleTimeSeconds",
            ),
            ("frameReadTimeoutMillis = 0\n", "frameReadTimeoutMillis"),
            (
                "frameReadTimeoutMillis = 86400000\n",
                "frameReadTimeoutMillis",
            ),
            ("partialFrameBudgetBytes = 0\n", "partialFrameBudgetBytes"),
            (
                "partialFrameBudgetBytes = 1000\n",
                "partialFrameBudgetBytes",
            ),
        ] {
            let config: BrokerConfig = toml::from_str(text).unwrap();
            let message = config.validate().unwrap_err().to_string();
            assert!(message.contains(key), "{text:?}: {message}");
        }
    }

    #[test]
    fn work_limit_keys_parse_and_zero_or_absurd_values_name_their_key() {
        let config: BrokerConfig = toml::from_str(
            "pullHoldMax = 10\npullHoldMaxPerConnection = 5\nmaxInFlightRequestsPerConnection = 7\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(
            (
                config.pull_hold_max,
                config.pull_hold_max_per_connection,
                config.max_in_flight_requests_per_connection
            ),
            (10, 5, 7)
        );
        for (text, key) in [
            ("pullHoldMax = 0\n", "pullHoldMax"),
            ("pullHoldMax = 100000000\n", "pullHoldMax"),
            ("pullHoldMaxPerConnection = 0\n", "pullHoldMaxPerConnection"),
            (
                "pullHoldMaxPerConnection = 1000000\n",
                "pullHoldMaxPerConnection",
            ),
            (
                "maxInFlightRequestsPerConnection = 0\n",
                "maxInFlightRequestsPerConnection",
            ),
            (
                "maxInFlightRequestsPerConnection = 1000000\n",
                "maxInFlightRequestsPerConnection",
            ),
        ] {
            let config: BrokerConfig = toml::from_str(text).unwrap();
            let message = config.validate().unwrap_err().to_string();
            assert!(message.contains(key), "{text:?}: {message}");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let config = BrokerConfig {
            flush_disk_type: "FAST".into(),
            ..BrokerConfig::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("flushDiskType"));
        let config = BrokerConfig {
            namesrv_addr: "nowhere".into(),
            ..BrokerConfig::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("namesrvAddr"));
        let config = BrokerConfig {
            message_delay_level: "1s 5x".into(),
            ..BrokerConfig::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("messageDelayLevel"));
        assert_eq!(
            BrokerConfig::default().delay_levels_ms().unwrap()[..3],
            [1_000, 5_000, 10_000]
        );
    }
}
