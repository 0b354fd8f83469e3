//! Controller settings, under RocketMQ's key names.
//!
//! | key | field | default |
//! |---|---|---|
//! | `controllerDLegerGroup` | `group` | `DefaultControllerGroup` |
//! | `controllerDLegerPeers` | `peers` | `n0-127.0.0.1:9878` |
//! | `controllerDLegerSelfId` | `self_id` | `n0` |
//! | `controllerStorePath` | `store_path` | `~/DledgerController` analogue: `./controller-store` |
//! | `enableElectUncleanMaster` | `enable_elect_unclean_master` | false |
//! | `controllerHeartBeatTimeoutMills` | `heartbeat_timeout` | 1000 ms |
//! | `brokerLeaseMillis` | `broker_lease` | 600 ms |
//! | `scanNotActiveBrokerInterval` | `scan_interval` | 100 ms |
//!
//! Invariant checked by [`ControllerConfig::validate`]: the lease is shorter than the
//! heartbeat timeout by at least [`LEASE_MARGIN`], so a master stops acting on its lease
//! before the controller may elect another.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ControllerError;

/// Least gap between `brokerLeaseMillis` and `controllerHeartBeatTimeoutMills`.
pub const LEASE_MARGIN: Duration = Duration::from_millis(200);

/// One controller peer from `controllerDLegerPeers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Raft node id (`n3` → 3).
    pub id: u64,
    /// Remoting address.
    pub addr: SocketAddr,
}

/// Controller settings; see the module table for keys and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `controllerDLegerGroup`.
    pub group: String,
    /// `controllerDLegerPeers`.
    pub peers: Vec<Peer>,
    /// `controllerDLegerSelfId`.
    pub self_id: u64,
    /// Listen address; `None` listens on the own peer address. Port 0 lets the OS choose.
    pub listen: Option<SocketAddr>,
    /// `controllerStorePath`.
    pub store_path: PathBuf,
    /// `enableElectUncleanMaster`.
    pub enable_elect_unclean_master: bool,
    /// `controllerHeartBeatTimeoutMills`.
    pub heartbeat_timeout: Duration,
    /// `brokerLeaseMillis`.
    pub broker_lease: Duration,
    /// `scanNotActiveBrokerInterval`.
    pub scan_interval: Duration,
    /// Raft heartbeat interval between controller peers.
    pub raft_heartbeat_interval: Duration,
    /// Raft election timeout range (min; max is twice it).
    pub raft_election_timeout_min: Duration,
    /// Bound on one Raft RPC to a peer.
    pub raft_rpc_timeout: Duration,
    /// A snapshot is taken after this many applied logs.
    pub snapshot_logs_max: u64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            group: "DefaultControllerGroup".into(),
            peers: vec![Peer {
                id: 0,
                addr: SocketAddr::from(([127, 0, 0, 1], 9878)),
            }],
            self_id: 0,
            listen: None,
            store_path: PathBuf::from("controller-store"),
            enable_elect_unclean_master: false,
            heartbeat_timeout: Duration::from_millis(1000),
            broker_lease: Duration::from_millis(600),
            scan_interval: Duration::from_millis(100),
            raft_heartbeat_interval: Duration::from_millis(50),
            raft_election_timeout_min: Duration::from_millis(300),
            raft_rpc_timeout: Duration::from_millis(500),
            snapshot_logs_max: 1000,
        }
    }
}

/// Parses a node id: `n0`, `n12` (or a bare number).
pub fn parse_node_id(text: &str) -> Result<u64, ControllerError> {
    let digits = text.trim().trim_start_matches(['n', 'N']);
    digits.parse::<u64>().map_err(|e| {
        ControllerError::Config(format!(
            "node id {text:?} is not `n<number>` (controllerDLegerSelfId / controllerDLegerPeers): {e}"
        ))
    })
}

/// Parses `controllerDLegerPeers`: `n0-127.0.0.1:9878;n1-127.0.0.1:9868`.
pub fn parse_peers(text: &str) -> Result<Vec<Peer>, ControllerError> {
    let mut peers = Vec::new();
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item.split_once('-').ok_or_else(|| {
            ControllerError::Config(format!(
                "controllerDLegerPeers entry {item:?} is not `n<id>-<host:port>`"
            ))
        })?;
        let addr = addr.trim().parse::<SocketAddr>().map_err(|e| {
            ControllerError::Config(format!(
                "controllerDLegerPeers entry {item:?}: address: {e}"
            ))
        })?;
        peers.push(Peer {
            id: parse_node_id(id)?,
            addr,
        });
    }
    Ok(peers)
}

/// Formats peers back as `controllerDLegerPeers`.
pub fn format_peers(peers: &[Peer]) -> String {
    peers
        .iter()
        .map(|p| format!("n{}-{}", p.id, p.addr))
        .collect::<Vec<_>>()
        .join(";")
}

impl ControllerConfig {
    /// The own peer entry.
    pub fn self_peer(&self) -> Option<Peer> {
        self.peers.iter().copied().find(|p| p.id == self.self_id)
    }

    /// Checks the settings; the error names the keys at fault.
    pub fn validate(&self) -> Result<(), ControllerError> {
        let fail = |why: String| Err(ControllerError::Config(why));
        if self.peers.is_empty() || self.peers.len().is_multiple_of(2) {
            return fail(format!(
                "controllerDLegerPeers must list an odd number of peers, got {}",
                self.peers.len()
            ));
        }
        let mut ids: Vec<u64> = self.peers.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.peers.len() {
            return fail("controllerDLegerPeers lists a node id twice".into());
        }
        if self.self_peer().is_none() {
            return fail(format!(
                "controllerDLegerSelfId n{} is not in controllerDLegerPeers {}",
                self.self_id,
                format_peers(&self.peers)
            ));
        }
        if self.broker_lease + LEASE_MARGIN > self.heartbeat_timeout {
            return fail(format!(
                "brokerLeaseMillis ({} ms) must be at most controllerHeartBeatTimeoutMills ({} ms) \
                 minus {} ms, so a master's lease ends before the controller may elect another",
                self.broker_lease.as_millis(),
                self.heartbeat_timeout.as_millis(),
                LEASE_MARGIN.as_millis()
            ));
        }
        if self.scan_interval.is_zero() || self.scan_interval > self.heartbeat_timeout {
            return fail(format!(
                "scanNotActiveBrokerInterval ({} ms) must be positive and at most \
                 controllerHeartBeatTimeoutMills ({} ms)",
                self.scan_interval.as_millis(),
                self.heartbeat_timeout.as_millis()
            ));
        }
        if self.snapshot_logs_max == 0 {
            return fail("the snapshot interval (logs) must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_in_rocketmq_form() {
        let peers = parse_peers("n0-127.0.0.1:9878;n1-127.0.0.1:9868; n2-127.0.0.1:9858").unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[2].id, 2);
        assert_eq!(peers[1].addr.port(), 9868);
        assert_eq!(
            format_peers(&peers),
            "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"
        );
        assert!(parse_peers("x0:1").is_err());
        assert!(parse_peers("n0-nowhere").is_err());
    }

    #[test]
    fn a_lease_too_close_to_the_timeout_is_refused_naming_both_keys() {
        let config = ControllerConfig {
            broker_lease: Duration::from_millis(900),
            ..ControllerConfig::default()
        };
        let text = config.validate().unwrap_err().to_string();
        assert!(text.contains("brokerLeaseMillis"), "{text}");
        assert!(text.contains("controllerHeartBeatTimeoutMills"), "{text}");
        assert!(ControllerConfig::default().validate().is_ok());
    }

    #[test]
    fn even_peer_counts_and_unknown_self_ids_are_refused() {
        let mut config = ControllerConfig {
            peers: parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2").unwrap(),
            ..ControllerConfig::default()
        };
        assert!(config.validate().is_err());
        config.peers = parse_peers("n1-127.0.0.1:2").unwrap();
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("controllerDLegerSelfId"));
    }
}
