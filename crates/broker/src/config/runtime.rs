//! The broker settings an operator may change while the broker runs (UPDATE_BROKER_CONFIG,
//! `ferromq admin updateBrokerConfig`), and the text GET_BROKER_CONFIG answers with.
//!
//! Keys that may change at run time, and where each takes effect:
//!
//! | key | values | read by |
//! |---|---|---|
//! | `autoCreateTopicEnable` | `true` / `false` | every send to an unknown topic |
//! | `defaultTopicQueueNums` | 1..=1024 | every topic created on first send |
//! | `brokerSuspendMaxTimeMillis` | 0..=3600000 | every held (long-polling) pull |
//! | `channelExpiredTimeout` | 1000..=86400000 | every scan for silent clients |
//! | `transferMsgByHeap` | `true` / `false` | every remoting pull reply |
//!
//! Every other key is refused with a reason: identity and addresses (`brokerName`,
//! `listenPort`, `namesrvAddr`, ...) are fixed by registration and bound sockets; store
//! settings (`storePathRootDir`, `flushDiskType`, `maxMessageSize`, ...) are read once when
//! the store opens; the rest are read once at startup. Unknown keys are refused as unknown.
//!
//! Changes are **not persisted**: they last until the broker stops. The configuration file
//! (or the command line) stays the single source of truth for a restart, and is never
//! rewritten behind the operator's back (RocketMQ rewrites its config file instead).
//!
//! Invariants:
//! 1. An update is all or nothing: every key and value is checked before any is applied.
//! 2. The data version's counter grows by one per applied update, so a reader can tell that
//!    the configuration changed between two GET_BROKER_CONFIG replies.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::config::BrokerConfig;

/// Keys refused at run time and why, for the reply's remark.
const FIXED_KEYS: &[(&str, &str)] = &[
    (
        "brokerClusterName",
        "the broker's identity in routes is fixed at registration",
    ),
    (
        "brokerName",
        "the broker's identity in routes is fixed at registration",
    ),
    (
        "brokerId",
        "the broker's identity in routes is fixed at registration",
    ),
    (
        "brokerRole",
        "replication roles change by failover, not by configuration",
    ),
    (
        "brokerIP1",
        "the broker's address in routes and message ids is fixed at startup",
    ),
    ("bindAddress", "the listening socket is bound at startup"),
    (
        "brokerAdvertisedPort",
        "the broker's address in routes and message ids is fixed at startup",
    ),
    ("listenPort", "the listening socket is bound at startup"),
    ("haListenPort", "the HA socket is bound at startup"),
    (
        "haAdvertisedPort",
        "the HA address registered with the controller and name servers is fixed at startup",
    ),
    (
        "haMasterAddress",
        "a slave's master changes by failover or registration, not by configuration",
    ),
    (
        "haSendHeartbeatInterval",
        "the HA connections read it when they open",
    ),
    (
        "haMaxTimeSlaveNotCatchup",
        "the in-sync set reads it at startup",
    ),
    ("minInSyncReplicas", "the in-sync set reads it at startup"),
    (
        "enableControllerMode",
        "a broker joins its controller group at startup",
    ),
    ("controllerAddr", "the controller link is made at startup"),
    (
        "brokerHeartbeatInterval",
        "the controller link reads it at startup",
    ),
    (
        "brokerElectionPriority",
        "the controller link reads it at startup",
    ),
    ("controllerRegisterTimeoutMills", "used once, at startup"),
    (
        "resetWaitAfterPromotionMillis",
        "part of the controller-mode settings fixed at startup",
    ),
    (
        "slaveReadEnable",
        "replication settings are read at startup",
    ),
    (
        "accessMessageInMemoryMaxRatio",
        "replication settings are read at startup",
    ),
    ("metricsPort", "the metrics socket is bound at startup"),
    ("namesrvAddr", "name server connections are made at startup"),
    (
        "registerNameServerPeriod",
        "the registration task reads it at startup",
    ),
    (
        "storePathRootDir",
        "the store's files are opened at startup",
    ),
    ("flushDiskType", "the store reads it when it opens"),
    (
        "mappedFileSizeCommitLog",
        "the store reads it when it opens",
    ),
    ("maxMessageSize", "the store reads it when it opens"),
    ("flushIntervalCommitLog", "the store reads it when it opens"),
    ("commitLogMappedWrites", "the store reads it when it opens"),
    ("commitLogZeroedSpace", "the store reads it when it opens"),
    ("commitLogMappedReads", "the store reads it when it opens"),
    ("commitLogPopulateAhead", "the store reads it when it opens"),
    ("syncFlushTimeout", "the store reads it when it opens"),
    ("fileReservedTime", "the store reads it when it opens"),
    (
        "messageDelayLevel",
        "delay levels are fixed at startup (scheduled messages depend on them)",
    ),
    ("maxReconsumeTimes", "it is read at startup"),
    ("autoCreateSubscriptionGroup", "it is read at startup"),
    ("maxFrameLength", "connections size their frames at startup"),
    ("maxConnections", "the connection limit is set at startup"),
    (
        "serverChannelMaxIdleTimeSeconds",
        "connection limits are set at startup",
    ),
    (
        "frameReadTimeoutMillis",
        "connection limits are set at startup",
    ),
    (
        "partialFrameBudgetBytes",
        "connection limits are set at startup",
    ),
    ("pullHoldMax", "work limits are set at startup"),
    ("pullHoldMaxPerConnection", "work limits are set at startup"),
    (
        "maxInFlightRequestsPerConnection",
        "work limits are set at startup",
    ),
    (
        "transactionTimeOut",
        "the transaction checker's settings are set at startup",
    ),
    (
        "transactionCheckInterval",
        "the transaction checker's settings are set at startup",
    ),
    (
        "transactionCheckMax",
        "the transaction checker's settings are set at startup",
    ),
    (
        "transactionTrackedMax",
        "the transaction checker's settings are set at startup",
    ),
    (
        "timerMaxDelaySec",
        "the timer's settings are set at startup",
    ),
    ("timerTrackedMax", "the timer's settings are set at startup"),
    (
        "metricsBindAddress",
        "the metrics endpoint binds at startup",
    ),
    ("aclEnable", "access control is set up at startup"),
    (
        "aclFile",
        "access control is set up at startup (the file itself reloads when changed)",
    ),
    (
        "aclReloadIntervalMillis",
        "access control is set up at startup",
    ),
    (
        "innerAccessKey",
        "the name-server clients are built at startup",
    ),
    (
        "innerSecretKey",
        "the name-server clients are built at startup",
    ),
    ("tls.server.mode", "the listener's TLS is set up at startup"),
    (
        "tls.server.certPath",
        "the listener's TLS is set up at startup",
    ),
    (
        "tls.server.keyPath",
        "the listener's TLS is set up at startup",
    ),
    ("tls.enable", "the name-server clients are built at startup"),
    (
        "tls.client.trustCertPath",
        "the name-server clients are built at startup",
    ),
];

/// Keys whose values GET_BROKER_CONFIG never shows (it answers with a mask instead).
const SECRET_KEYS: [&str; 1] = ["innerSecretKey"];

/// Why an update was refused; names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigUpdateError {
    /// No such broker key.
    #[error("unknown broker config key {key}")]
    UnknownKey { key: String },
    /// A real key that cannot change while the broker runs.
    #[error(
        "{key} cannot be changed at run time: {reason}; edit the broker configuration and restart"
    )]
    Fixed { key: String, reason: &'static str },
    /// A value the key cannot take.
    #[error("bad value {value:?} for {key}: {message}")]
    BadValue {
        key: String,
        value: String,
        message: String,
    },
    /// The request body is not `key=value` lines.
    #[error("malformed properties line {line:?}: expected key=value")]
    Malformed { line: String },
    /// The request names no key.
    #[error("the update names no key")]
    Empty,
}

/// RocketMQ's `DataVersion` of the configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfigVersion {
    /// Applied updates since startup.
    pub counter: i64,
    /// Time of the last update (or of startup), ms since the epoch.
    pub timestamp_ms: i64,
}

/// The run-time changeable settings (see the module docs for the list).
#[derive(Debug)]
pub struct RuntimeConfig {
    auto_create_topic_enable: AtomicBool,
    default_topic_queue_nums: AtomicU32,
    broker_suspend_max_time_millis: AtomicU64,
    channel_expired_timeout: AtomicU64,
    transfer_msg_by_heap: AtomicBool,
    /// Serialises updates and holds the data version.
    version: Mutex<ConfigVersion>,
}

/// One checked change, ready to apply.
#[derive(Debug, Clone, Copy)]
enum Change {
    AutoCreateTopicEnable(bool),
    DefaultTopicQueueNums(u32),
    BrokerSuspendMaxTimeMillis(u64),
    ChannelExpiredTimeout(u64),
    TransferMsgByHeap(bool),
}

impl RuntimeConfig {
    /// The startup values of `config`.
    pub fn new(config: &BrokerConfig) -> RuntimeConfig {
        RuntimeConfig {
            auto_create_topic_enable: AtomicBool::new(config.auto_create_topic_enable),
            default_topic_queue_nums: AtomicU32::new(config.default_topic_queue_nums),
            broker_suspend_max_time_millis: AtomicU64::new(config.broker_suspend_max_time_millis),
            channel_expired_timeout: AtomicU64::new(config.channel_expired_timeout),
            transfer_msg_by_heap: AtomicBool::new(config.transfer_msg_by_heap),
            version: Mutex::new(ConfigVersion {
                counter: 0,
                timestamp_ms: now_ms(),
            }),
        }
    }

    /// `autoCreateTopicEnable` now.
    pub fn auto_create_topic_enable(&self) -> bool {
        self.auto_create_topic_enable.load(Ordering::Relaxed)
    }

    /// `defaultTopicQueueNums` now.
    pub fn default_topic_queue_nums(&self) -> u32 {
        self.default_topic_queue_nums.load(Ordering::Relaxed)
    }

    /// `brokerSuspendMaxTimeMillis` now.
    pub fn broker_suspend_max_time_millis(&self) -> u64 {
        self.broker_suspend_max_time_millis.load(Ordering::Relaxed)
    }

    /// `channelExpiredTimeout` now, ms.
    pub fn channel_expired_timeout(&self) -> u64 {
        self.channel_expired_timeout.load(Ordering::Relaxed)
    }

    /// `transferMsgByHeap` now: `false` lets remoting pull replies go out with zero copy.
    pub fn transfer_msg_by_heap(&self) -> bool {
        self.transfer_msg_by_heap.load(Ordering::Relaxed)
    }

    /// The data version.
    pub fn version(&self) -> ConfigVersion {
        *self.version.lock().expect("config version lock")
    }

    /// Applies every `key=value` line of a properties text (UPDATE_BROKER_CONFIG's body), or
    /// none of them; returns the applied `(key, value)` pairs in key order.
    ///
    /// # Errors
    /// The text is malformed or empty, or a key is unknown, fixed, or given a bad value;
    /// nothing changed.
    pub fn update_from_properties(
        &self,
        text: &str,
    ) -> Result<Vec<(String, String)>, ConfigUpdateError> {
        let updates = parse_properties(text)?;
        if updates.is_empty() {
            return Err(ConfigUpdateError::Empty);
        }
        let changes: Vec<Change> = updates
            .iter()
            .map(|(key, value)| check(key, value))
            .collect::<Result<_, _>>()?;
        let mut version = self.version.lock().expect("config version lock");
        for change in changes {
            match change {
                Change::AutoCreateTopicEnable(v) => {
                    self.auto_create_topic_enable.store(v, Ordering::Relaxed)
                }
                Change::DefaultTopicQueueNums(v) => {
                    self.default_topic_queue_nums.store(v, Ordering::Relaxed)
                }
                Change::BrokerSuspendMaxTimeMillis(v) => self
                    .broker_suspend_max_time_millis
                    .store(v, Ordering::Relaxed),
                Change::ChannelExpiredTimeout(v) => {
                    self.channel_expired_timeout.store(v, Ordering::Relaxed)
                }
                Change::TransferMsgByHeap(v) => {
                    self.transfer_msg_by_heap.store(v, Ordering::Relaxed)
                }
            }
        }
        version.counter += 1;
        version.timestamp_ms = now_ms();
        Ok(updates.into_iter().collect())
    }

    /// Every key of `config` with its current value, one `key=value` line each in key order
    /// (GET_BROKER_CONFIG's body, Java `Properties` text): the startup values, with the run-time
    /// keys at their current values. An absent optional key is left out.
    pub fn properties(&self, config: &BrokerConfig) -> String {
        let mut table: BTreeMap<String, String> = match serde_json::to_value(config) {
            Ok(serde_json::Value::Object(map)) => map
                .into_iter()
                .map(|(key, value)| {
                    let text = match value {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, text)
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        for key in SECRET_KEYS {
            if let Some(value) = table.get_mut(key) {
                *value = "******".to_string();
            }
        }
        let live = [
            (
                "autoCreateTopicEnable",
                self.auto_create_topic_enable().to_string(),
            ),
            (
                "defaultTopicQueueNums",
                self.default_topic_queue_nums().to_string(),
            ),
            (
                "brokerSuspendMaxTimeMillis",
                self.broker_suspend_max_time_millis().to_string(),
            ),
            (
                "channelExpiredTimeout",
                self.channel_expired_timeout().to_string(),
            ),
            ("transferMsgByHeap", self.transfer_msg_by_heap().to_string()),
        ];
        for (key, value) in live {
            table.insert(key.to_string(), value);
        }
        table
            .into_iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }
}

/// Reads Java `Properties`-style text as written by `MixAll.properties2String`: one
/// `key=value` per line; blank lines and `#`/`!` comments skipped; a later duplicate wins.
fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigUpdateError> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(ConfigUpdateError::Malformed {
                line: trimmed.to_string(),
            });
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(ConfigUpdateError::Malformed {
                line: trimmed.to_string(),
            });
        }
        out.insert(key.to_string(), value.trim().to_string());
    }
    Ok(out)
}

fn check(key: &str, value: &str) -> Result<Change, ConfigUpdateError> {
    let bad = |message: &str| ConfigUpdateError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        message: message.to_string(),
    };
    let number = |min: u64, max: u64| -> Result<u64, ConfigUpdateError> {
        match value.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(bad(&format!("expected a whole number from {min} to {max}"))),
        }
    };
    match key {
        "autoCreateTopicEnable" => match value {
            "true" => Ok(Change::AutoCreateTopicEnable(true)),
            "false" => Ok(Change::AutoCreateTopicEnable(false)),
            _ => Err(bad("expected true or false")),
        },
        "defaultTopicQueueNums" => Ok(Change::DefaultTopicQueueNums(number(1, 1024)? as u32)),
        "brokerSuspendMaxTimeMillis" => {
            Ok(Change::BrokerSuspendMaxTimeMillis(number(0, 3_600_000)?))
        }
        "channelExpiredTimeout" => Ok(Change::ChannelExpiredTimeout(number(1_000, 86_400_000)?)),
        "transferMsgByHeap" => match value {
            "true" => Ok(Change::TransferMsgByHeap(true)),
            "false" => Ok(Change::TransferMsgByHeap(false)),
            _ => Err(bad("expected true or false")),
        },
        _ => match FIXED_KEYS.iter().find(|(fixed, _)| *fixed == key) {
            Some((_, reason)) => Err(ConfigUpdateError::Fixed {
                key: key.to_string(),
                reason,
            }),
            None => Err(ConfigUpdateError::UnknownKey {
                key: key.to_string(),
            }),
        },
    }
}

fn now_ms() -> i64 {
    ferromq_store::Clock::now_ms(&ferromq_store::SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_apply_all_or_nothing_and_show_in_the_properties() {
        let config = BrokerConfig::default();
        let runtime = RuntimeConfig::new(&config);
        assert!(runtime.auto_create_topic_enable());
        let applied = runtime
            .update_from_properties("autoCreateTopicEnable=false\ndefaultTopicQueueNums=3\n")
            .unwrap();
        assert_eq!(applied.len(), 2);
        assert!(!runtime.auto_create_topic_enable());
        assert_eq!(runtime.default_topic_queue_nums(), 3);
        assert_eq!(runtime.version().counter, 1);
        let text = runtime.properties(&config);
        assert!(text.contains("autoCreateTopicEnable=false\n"), "{text}");
        assert!(text.contains("defaultTopicQueueNums=3\n"), "{text}");
        assert!(text.contains("brokerName=broker-a\n"), "{text}");
        assert!(text.contains("brokerIP1=127.0.0.1\n"), "{text}");

        // One bad key refuses the whole update.
        let error = runtime
            .update_from_properties("defaultTopicQueueNums=5\nlistenPort=1\n")
            .unwrap_err();
        assert!(matches!(error, ConfigUpdateError::Fixed { ref key, .. } if key == "listenPort"));
        assert!(error.to_string().contains("listenPort"), "{error}");
        assert_eq!(runtime.default_topic_queue_nums(), 3, "nothing applied");
        assert_eq!(runtime.version().counter, 1);
    }

    #[test]
    fn every_config_key_is_either_live_or_refused_with_a_reason() {
        let config = BrokerConfig {
            metrics_port: Some(0),
            metrics_bind_address: Some("127.0.0.1".parse().unwrap()),
            acl_file: Some("plain_acl.yml".into()),
            inner_access_key: Some("RocketMQ".into()),
            inner_secret_key: Some("12345678".into()),
            tls_server_cert_path: Some("cert.pem".into()),
            tls_server_key_path: Some("key.pem".into()),
            tls_client_trust_cert_path: Some("ca.pem".into()),
            ..BrokerConfig::default()
        };
        let text = RuntimeConfig::new(&config).properties(&config);
        assert!(text.contains("innerSecretKey=******\n"), "{text}");
        assert!(!text.contains("12345678"), "a secret shown: {text}");
        let Ok(serde_json::Value::Object(keys)) = serde_json::to_value(&config) else {
            panic!("the config serialises to an object");
        };
        assert!(keys.len() > 20, "{keys:?}");
        for key in keys.keys() {
            let verdict = check(key, "not a value of any key");
            assert!(
                !matches!(verdict, Err(ConfigUpdateError::UnknownKey { .. })),
                "{key} is neither a run-time key nor listed as fixed"
            );
        }
    }

    #[test]
    fn bad_updates_name_their_key() {
        let runtime = RuntimeConfig::new(&BrokerConfig::default());
        let cases = [
            ("nosuchKey=1", "nosuchKey"),
            ("defaultTopicQueueNums=0", "defaultTopicQueueNums"),
            ("autoCreateTopicEnable=yes", "autoCreateTopicEnable"),
            ("transferMsgByHeap=0", "transferMsgByHeap"),
            ("storePathRootDir=/tmp", "storePathRootDir"),
            ("just text", "just text"),
        ];
        for (text, named) in cases {
            let error = runtime.update_from_properties(text).unwrap_err();
            assert!(error.to_string().contains(named), "{text}: {error}");
        }
        assert_eq!(
            runtime.update_from_properties("# only a comment\n"),
            Err(ConfigUpdateError::Empty)
        );
    }
}
