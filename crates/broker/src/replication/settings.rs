//! The replication keys of `broker.toml` (RocketMQ's names), checked together: a combination
//! that cannot work is a start-up error naming the keys, never a broker that quietly does
//! something else.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::{BrokerConfig, ConfigError};

/// Most members an in-sync set can need (the master and its slaves).
pub const MIN_IN_SYNC_REPLICAS_MAX: u32 = 16;

/// A broker's role in its group. It may change at run time (failover); readers take the
/// current one from `Replication::role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    /// Acknowledges after the local flush policy; replicas follow asynchronously.
    AsyncMaster,
    /// Acknowledges only once every in-sync replica holds the write.
    SyncMaster,
    /// Follows a master; refuses every write.
    Slave,
}

impl BrokerRole {
    /// RocketMQ's name of the role.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }

    /// Whether the role accepts writes.
    pub fn is_master(self) -> bool {
        self != BrokerRole::Slave
    }
}

/// The replication settings of one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationSettings {
    /// `brokerRole`.
    pub role: BrokerRole,
    /// `brokerId` (0 for the master).
    pub broker_id: u64,
    /// `haListenPort`, defaulted.
    pub ha_listen_port: u16,
    /// `haMasterAddress`, if given.
    pub master_address: Option<SocketAddr>,
    /// `haSendHeartbeatInterval`.
    pub heartbeat_interval: Duration,
    /// `haMaxTimeSlaveNotCatchup`.
    pub max_lag: Duration,
    /// `minInSyncReplicas`.
    pub min_in_sync_replicas: u32,
    /// `slaveReadEnable`.
    pub slave_read_enable: bool,
    /// `accessMessageInMemoryMaxRatio`, percent.
    pub memory_ratio_percent: u32,
}

impl ReplicationSettings {
    /// Reads and checks the keys.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key (or keys) of a value or combination that
    /// cannot work.
    pub fn from_config(config: &BrokerConfig) -> Result<ReplicationSettings, ConfigError> {
        let invalid = |key: &'static str, message: String| ConfigError::Invalid { key, message };
        let role = match config.broker_role.as_str() {
            "ASYNC_MASTER" => BrokerRole::AsyncMaster,
            "SYNC_MASTER" => BrokerRole::SyncMaster,
            "SLAVE" => BrokerRole::Slave,
            other => {
                return Err(invalid(
                    "brokerRole",
                    format!("{other:?}: expected ASYNC_MASTER, SYNC_MASTER or SLAVE"),
                ))
            }
        };
        match (role, config.broker_id) {
            (BrokerRole::Slave, 0) => {
                return Err(invalid(
                    "brokerRole, brokerId",
                    "a SLAVE needs a brokerId above 0 (0 is the master's id)".into(),
                ))
            }
            (BrokerRole::AsyncMaster | BrokerRole::SyncMaster, id) if id != 0 => {
                return Err(invalid(
                    "brokerRole, brokerId",
                    format!("a master ({}) has brokerId 0, not {id}", role.as_str()),
                ))
            }
            _ => {}
        }
        let master_address = match &config.ha_master_address {
            Some(text) if role != BrokerRole::Slave => {
                return Err(invalid(
                    "haMasterAddress, brokerRole",
                    format!("{text:?} is set, but only a SLAVE follows a master"),
                ))
            }
            Some(text) => Some(text.trim().parse().map_err(|_| {
                invalid(
                    "haMasterAddress",
                    format!("{text:?} is not an ip:port address"),
                )
            })?),
            None => None,
        };
        let heartbeat_interval = Duration::from_millis(config.ha_send_heartbeat_interval);
        let max_lag = Duration::from_millis(config.ha_max_time_slave_not_catchup);
        if !(10..=60_000).contains(&config.ha_send_heartbeat_interval) {
            return Err(invalid(
                "haSendHeartbeatInterval",
                "must be between 10 and 60000 ms".into(),
            ));
        }
        if max_lag <= heartbeat_interval || config.ha_max_time_slave_not_catchup > 3_600_000 {
            return Err(invalid(
                "haMaxTimeSlaveNotCatchup, haSendHeartbeatInterval",
                format!(
                    "haMaxTimeSlaveNotCatchup ({} ms) must exceed haSendHeartbeatInterval \
                     ({} ms) and be at most an hour, or every slave would drop out between \
                     two heartbeats",
                    config.ha_max_time_slave_not_catchup, config.ha_send_heartbeat_interval
                ),
            ));
        }
        if !(1..=MIN_IN_SYNC_REPLICAS_MAX).contains(&config.min_in_sync_replicas) {
            return Err(invalid(
                "minInSyncReplicas",
                format!("must be between 1 and {MIN_IN_SYNC_REPLICAS_MAX} (the master counts)"),
            ));
        }
        if !(1..=100).contains(&config.access_message_in_memory_max_ratio) {
            return Err(invalid(
                "accessMessageInMemoryMaxRatio",
                "must be a percentage between 1 and 100".into(),
            ));
        }
        let ha_listen_port = match config.ha_listen_port {
            Some(port) => port,
            None if config.listen_port == 0 => 0,
            None => config.listen_port.checked_add(1).ok_or_else(|| {
                invalid(
                    "haListenPort",
                    "listenPort is 65535, so listenPort + 1 does not exist: set haListenPort"
                        .into(),
                )
            })?,
        };
        if ha_listen_port != 0 && ha_listen_port == config.listen_port {
            return Err(invalid(
                "haListenPort, listenPort",
                format!("both are {ha_listen_port}"),
            ));
        }
        Ok(ReplicationSettings {
            role,
            broker_id: config.broker_id,
            ha_listen_port,
            master_address,
            heartbeat_interval,
            max_lag,
            min_in_sync_replicas: config.min_in_sync_replicas,
            slave_read_enable: config.slave_read_enable,
            memory_ratio_percent: config.access_message_in_memory_max_ratio,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<ReplicationSettings, ConfigError> {
        let config: BrokerConfig = toml::from_str(toml_text).expect("toml");
        config.validate()?;
        config.replication_settings()
    }

    fn key_of(error: ConfigError) -> &'static str {
        match error {
            ConfigError::Invalid { key, .. } => key,
            other => panic!("not a key error: {other}"),
        }
    }

    #[test]
    fn rocketmq_replication_keys_parse_with_their_defaults() {
        let master = parse("brokerRole = \"SYNC_MASTER\"\nlistenPort = 10911\n").unwrap();
        assert_eq!(master.role, BrokerRole::SyncMaster);
        assert_eq!(master.ha_listen_port, 10912);
        assert_eq!(master.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(master.max_lag, Duration::from_secs(15));
        assert_eq!(master.min_in_sync_replicas, 1);
        assert!(!master.slave_read_enable);
        let slave = parse(
            "brokerRole = \"SLAVE\"\nbrokerId = 2\nhaMasterAddress = \"127.0.0.1:10912\"\n\
             haSendHeartbeatInterval = 200\nhaMaxTimeSlaveNotCatchup = 2000\n\
             minInSyncReplicas = 2\nslaveReadEnable = true\nhaListenPort = 0\n",
        )
        .unwrap();
        assert_eq!(slave.role, BrokerRole::Slave);
        assert_eq!(slave.broker_id, 2);
        assert_eq!(
            slave.master_address,
            Some("127.0.0.1:10912".parse().unwrap())
        );
        assert_eq!(slave.max_lag, Duration::from_secs(2));
        assert!(slave.slave_read_enable);
    }

    #[test]
    fn inconsistent_combinations_name_their_keys() {
        for (text, key) in [
            ("brokerRole = \"SLAVE\"\n", "brokerRole, brokerId"),
            (
                "brokerRole = \"SYNC_MASTER\"\nbrokerId = 1\n",
                "brokerRole, brokerId",
            ),
            ("brokerRole = \"MASTER\"\n", "brokerRole"),
            (
                "haMasterAddress = \"127.0.0.1:1\"\n",
                "haMasterAddress, brokerRole",
            ),
            (
                "brokerRole = \"SLAVE\"\nbrokerId = 1\nhaMasterAddress = \"nowhere\"\n",
                "haMasterAddress",
            ),
            ("minInSyncReplicas = 0\n", "minInSyncReplicas"),
            (
                "haSendHeartbeatInterval = 1000\nhaMaxTimeSlaveNotCatchup = 1000\n",
                "haMaxTimeSlaveNotCatchup, haSendHeartbeatInterval",
            ),
            ("haSendHeartbeatInterval = 0\n", "haSendHeartbeatInterval"),
            ("listenPort = 65535\n", "haListenPort"),
            (
                "listenPort = 7000\nhaListenPort = 7000\n",
                "haListenPort, listenPort",
            ),
        ] {
            assert_eq!(key_of(parse(text).unwrap_err()), key, "{text}");
        }
    }
}
