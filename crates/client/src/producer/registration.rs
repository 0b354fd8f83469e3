//! A producer's registration with its brokers: HEART_BEAT (34) naming its group, and
//! UNREGISTER_CLIENT (35) when it closes.
//!
//! Brokers list a group's producers from heartbeats (Java needs them for transaction
//! check-backs and `producerConnection`); a registration lapses when the connection closes or
//! heartbeats stop. So a producer heartbeats a broker the first time it sends to it, then
//! every broker it knows on an interval, and unregisters from each on `close`.
//!
//! Invariants: a heartbeat or unregister failure is returned to the caller of the explicit
//! calls (`Producer::heartbeat`, `Producer::close`); the background task, which has no
//! caller, logs and counts it. Every request is bounded by the producer's send timeout.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use ferromq_protocol::remoting::body::encode_json;
use ferromq_protocol::remoting::body::heartbeat::{HeartbeatData, ProducerData};
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::client::UnregisterClientRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use crate::connections::ConnectionPool;
use crate::error::ClientError;

/// The brokers a producer registered with, and its heartbeat counters.
#[derive(Debug, Default)]
pub(super) struct Registration {
    /// Brokers sent at least one heartbeat (successful or not); they are unregistered from
    /// on close.
    brokers: Mutex<BTreeSet<SocketAddr>>,
    pub(super) heartbeats_ok: AtomicU64,
    pub(super) heartbeat_failures: AtomicU64,
}

impl Registration {
    /// True the first time `addr` is seen: the caller then heartbeats it.
    pub(super) fn first_contact(&self, addr: SocketAddr) -> bool {
        self.lock().insert(addr)
    }

    /// Every broker seen so far.
    pub(super) fn brokers(&self) -> Vec<SocketAddr> {
        self.lock().iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<SocketAddr>> {
        // Every operation under this lock is one insert or one copy.
        self.brokers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the outcome of one heartbeat.
    pub(super) fn count(&self, outcome: &Result<(), ClientError>) {
        match outcome {
            Ok(()) => self.heartbeats_ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.heartbeat_failures.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// The HEART_BEAT body naming `group` as a producer group of `client_id`.
pub(super) fn heartbeat_body(client_id: &str, group: &str) -> Bytes {
    let data = HeartbeatData {
        client_id: client_id.to_string(),
        producer_data_set: vec![ProducerData {
            group_name: group.to_string(),
        }],
        consumer_data_set: Vec::new(),
        heartbeat_fingerprint: None,
        without_sub: None,
    };
    Bytes::from(encode_json(&data))
}

/// Sends one heartbeat with `body` to `addr`.
///
/// # Errors
/// Transport failures, or [`ClientError::Broker`] when the broker does not answer SUCCESS.
pub(super) async fn heartbeat(
    pool: &ConnectionPool,
    addr: SocketAddr,
    body: Bytes,
    timeout: Duration,
) -> Result<(), ClientError> {
    let cmd = RemotingCommand::new_request(request::HEART_BEAT, Default::default()).with_body(body);
    pool.invoke_success(addr, cmd, timeout).await.map(|_| ())
}

/// Tells `addr` that `client_id` leaves producer group `group`.
///
/// # Errors
/// Transport failures, or [`ClientError::Broker`] when the broker does not answer SUCCESS.
pub(super) async fn unregister(
    pool: &ConnectionPool,
    addr: SocketAddr,
    client_id: &str,
    group: &str,
    timeout: Duration,
) -> Result<(), ClientError> {
    let header = UnregisterClientRequestHeader {
        client_id: client_id.to_string(),
        producer_group: Some(group.to_string()),
        consumer_group: None,
    };
    let cmd = RemotingCommand::request_with_header(request::UNREGISTER_CLIENT, &header);
    pool.invoke_success(addr, cmd, timeout).await.map(|_| ())
}
