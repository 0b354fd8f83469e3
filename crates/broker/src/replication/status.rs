//! What `haStatus` (GET_BROKER_HA_STATUS, 907) and the metrics show of replication.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{BrokerRole, Replication};

/// One slave as its master reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlaveRuntime {
    /// The HA connection's peer address.
    pub addr: String,
    /// Its broker id.
    pub broker_id: u64,
    /// The end it acknowledged.
    pub acked: u64,
    /// Bytes the master holds beyond it.
    pub lag_bytes: u64,
    /// How long since it last caught up, ms.
    pub lag_time_ms: u64,
    /// Whether it is in the in-sync set.
    pub in_sync: bool,
    /// Whether its HA connection is open.
    pub connected: bool,
    /// Log bytes streamed to it.
    pub bytes_streamed: u64,
}

/// A broker's replication state.
#[derive(Debug, Clone)]
pub struct HaRuntime {
    /// The role now.
    pub role: BrokerRole,
    /// `brokerId`.
    pub broker_id: u64,
    /// The committed log end.
    pub log_end: u64,
    /// The high watermark (a master's own; a slave's from its master).
    pub watermark: u64,
    /// In-sync members, the master included (masters).
    pub in_sync_members: usize,
    /// `minInSyncReplicas`.
    pub min_in_sync_replicas: u32,
    /// The slaves (masters).
    pub slaves: Vec<SlaveRuntime>,
    /// A slave's view of its master.
    pub follower: Option<super::FollowerStatus>,
}

impl Replication {
    /// The replication state now.
    pub fn runtime(&self) -> HaRuntime {
        let now = Instant::now();
        let log_end = self.store.committed_end();
        let role = self.role();
        let (members, statuses) = {
            let set = self.lock();
            (set.members(), set.status(now))
        };
        let slaves = statuses
            .into_iter()
            .map(|s| SlaveRuntime {
                lag_bytes: log_end.saturating_sub(s.acked),
                lag_time_ms: s.behind_for.as_millis() as u64,
                bytes_streamed: self.streamed_to(s.id),
                addr: s.addr,
                broker_id: s.id,
                acked: s.acked,
                in_sync: s.in_sync,
                connected: s.connected,
            })
            .collect();
        let follower = (!role.is_master()).then(|| self.follower().clone());
        let watermark = match &follower {
            Some(status) => status.watermark,
            None => self.watermark(),
        };
        HaRuntime {
            role,
            broker_id: self.settings.broker_id,
            log_end,
            watermark,
            in_sync_members: members,
            min_in_sync_replicas: self.settings.min_in_sync_replicas,
            slaves,
            follower,
        }
    }

    /// Bytes streamed to all slaves and received from the master, for metrics.
    pub fn bytes_moved(&self) -> (u64, u64) {
        (
            self.counters.bytes_streamed.load(Ordering::Relaxed),
            self.counters.bytes_received.load(Ordering::Relaxed),
        )
    }
}

/// The GET_BROKER_HA_STATUS reply body: RocketMQ's HARuntimeInfo field names, plus
/// ferromq's (`watermark`, `minInSyncReplicas`, `brokerRole`, `brokerId`, `lagTimeMs`,
/// `bytesStreamed`, `connected`).
pub fn ha_runtime_json(runtime: &HaRuntime, now: Instant) -> serde_json::Value {
    let connections: Vec<serde_json::Value> = runtime
        .slaves
        .iter()
        .map(|s| {
            serde_json::json!({
                "addr": s.addr,
                "brokerId": s.broker_id,
                "slaveAckOffset": s.acked,
                "diff": s.lag_bytes,
                "lagTimeMs": s.lag_time_ms,
                "inSync": s.in_sync,
                "connected": s.connected,
                "transferredByteInSecond": 0,
                "transferFromWhere": 0,
                "bytesStreamed": s.bytes_streamed,
            })
        })
        .collect();
    let ago = |at: Option<Instant>| {
        at.map_or(0, |at| now.saturating_duration_since(at).as_millis() as u64)
    };
    let client = match &runtime.follower {
        Some(f) => serde_json::json!({
            "masterAddr": f.master_addr.map(|a| a.to_string()).unwrap_or_default(),
            "transferredByteInSecond": 0,
            "maxOffset": runtime.log_end,
            "lastReadTimestamp": ago(f.last_read),
            "lastWriteTimestamp": ago(f.last_write),
            "masterFlushOffset": f.master_end,
            "isActivated": f.connected,
            "watermark": f.watermark,
            "brokerId": runtime.broker_id,
            "refusal": f.refusal,
        }),
        None => serde_json::json!({
            "masterAddr": "", "transferredByteInSecond": 0, "maxOffset": 0,
            "lastReadTimestamp": 0, "lastWriteTimestamp": 0, "masterFlushOffset": 0,
            "isActivated": false,
        }),
    };
    serde_json::json!({
        "master": runtime.role.is_master(),
        "masterCommitLogMaxOffset": runtime.log_end,
        "inSyncSlaveNums": runtime.in_sync_members.saturating_sub(1),
        "watermark": runtime.watermark,
        "minInSyncReplicas": runtime.min_in_sync_replicas,
        "brokerRole": runtime.role.as_str(),
        "brokerId": runtime.broker_id,
        "haConnectionInfo": connections,
        "haClientRuntimeInfo": client,
    })
}
