//! What `haStatus` (GET_BROKER_HA_STATUS, 907) and the metrics show of replication.

use std::sync::atomic::Ordering;
use std::time::Instant;

use ferromq_protocol::remoting::body::ha_runtime::{
    HaClientRuntimeInfo, HaConnectionRuntimeInfo, HaRuntimeInfo,
};

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
    /// The last master epoch of the store (0: none).
    pub epoch: u64,
    /// Entries of the store's epoch file.
    pub epoch_entries: usize,
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
        let epochs = self.store.epochs();
        HaRuntime {
            epoch: ferromq_store::epoch::last_epoch(&epochs),
            epoch_entries: epochs.len(),
            role,
            broker_id: self.broker_id(),
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

/// The GET_BROKER_HA_STATUS reply body: RocketMQ's HARuntimeInfo, plus ferromq's fields
/// (watermark, minInSyncReplicas, brokerRole, brokerId, lagTimeMs, bytesStreamed).
pub fn ha_runtime_info(runtime: &HaRuntime, now: Instant) -> HaRuntimeInfo {
    let epoch_ms = |at: Option<Instant>| {
        at.map_or(0, |at| {
            let ago = now.saturating_duration_since(at);
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            wall.saturating_sub(ago).as_millis() as i64
        })
    };
    let ha_connection_info = runtime
        .slaves
        .iter()
        .map(|s| HaConnectionRuntimeInfo {
            addr: s.addr.clone(),
            broker_id: Some(s.broker_id as i64),
            slave_ack_offset: s.acked as i64,
            diff: s.lag_bytes as i64,
            lag_time_ms: Some(s.lag_time_ms as i64),
            in_sync: s.in_sync,
            transferred_byte_in_second: 0,
            transfer_from_where: 0,
            bytes_streamed: Some(s.bytes_streamed as i64),
        })
        .collect();
    let ha_client_runtime_info = match &runtime.follower {
        Some(f) => HaClientRuntimeInfo {
            master_addr: f.master_addr.map(|a| a.to_string()).unwrap_or_default(),
            broker_id: Some(runtime.broker_id as i64),
            transferred_byte_in_second: 0,
            max_offset: runtime.log_end as i64,
            watermark: Some(f.watermark as i64),
            last_read_timestamp: epoch_ms(f.last_read),
            last_write_timestamp: epoch_ms(f.last_write),
            master_flush_offset: f.master_end as i64,
            is_activated: f.connected,
            refusal: f.refusal.clone(),
        },
        None => HaClientRuntimeInfo::default(),
    };
    HaRuntimeInfo {
        master: runtime.role.is_master(),
        master_commit_log_max_offset: runtime.log_end as i64,
        in_sync_slave_nums: runtime.in_sync_members.saturating_sub(1) as i32,
        watermark: Some(runtime.watermark as i64),
        min_in_sync_replicas: Some(runtime.min_in_sync_replicas as i32),
        broker_role: Some(runtime.role.as_str().to_string()),
        master_epoch: Some(runtime.epoch as i64),
        epoch_entries: Some(runtime.epoch_entries as i32),
        ha_connection_info,
        ha_client_runtime_info,
    }
}
