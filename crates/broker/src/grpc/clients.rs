//! gRPC clients by `x-mq-client-id`: when each was last heard of (Heartbeat, Telemetry), what
//! it is, and how many Telemetry streams it holds open. Bounded: at most
//! [`GRPC_CLIENTS_MAX`] clients (silent ones are dropped first), at most
//! [`TELEMETRY_STREAMS_PER_CLIENT_MAX`] streams per client and [`TELEMETRY_STREAMS_MAX`] in all.
//!
//! These are the gRPC clients' registrations; remoting clients live in
//! `sessions::registry`. Producers need nothing more: no rebalance or lock depends on them.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most gRPC clients tracked at once.
pub const GRPC_CLIENTS_MAX: usize = 10_000;
/// Most Telemetry streams one client may hold open (a client opens one per endpoint).
pub const TELEMETRY_STREAMS_PER_CLIENT_MAX: usize = 8;
/// Most Telemetry streams open at once, all clients together.
pub const TELEMETRY_STREAMS_MAX: usize = 4_096;

/// What the broker knows of one gRPC client.
#[derive(Debug, Clone, Default)]
pub struct ClientEntry {
    /// When it was last heard of.
    pub last_seen: Option<Instant>,
    /// Its `ClientType` (0: not said yet).
    pub client_type: i32,
    /// Its consumer group, if any.
    pub group: Option<String>,
    /// Telemetry streams it holds open.
    pub telemetry_streams: usize,
    /// Its PullMessage calls held now (long polling), bounded by `pullHoldMaxPerConnection`
    /// per client: gRPC calls share connections tonic does not expose.
    pub held_pulls: Arc<AtomicUsize>,
}

/// Why a client was refused a registration or a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`GRPC_CLIENTS_MAX`] reached and no client is silent.
    Clients,
    /// [`TELEMETRY_STREAMS_PER_CLIENT_MAX`] reached for this client.
    StreamsPerClient,
    /// [`TELEMETRY_STREAMS_MAX`] reached.
    Streams,
}

impl Limit {
    /// The metric label and a remark for the status.
    pub fn describe(self) -> (&'static str, String) {
        match self {
            Limit::Clients => (
                "clients",
                format!("too many gRPC clients (at most {GRPC_CLIENTS_MAX})"),
            ),
            Limit::StreamsPerClient => (
                "telemetry_per_client",
                format!(
                    "this client already holds {TELEMETRY_STREAMS_PER_CLIENT_MAX} Telemetry \
                     streams, the most one client may open; close one first"
                ),
            ),
            Limit::Streams => (
                "telemetry",
                format!("the broker holds {TELEMETRY_STREAMS_MAX} Telemetry streams, its limit"),
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    clients: HashMap<String, ClientEntry>,
    streams: usize,
    /// Telemetry streams of producers, by client: the topics they publish and the stream's
    /// outbox (for server commands: orphaned-transaction check-backs). One per client (the
    /// latest stream that sent publishing settings), so bounded by [`GRPC_CLIENTS_MAX`].
    publishers: HashMap<String, Publisher>,
}

/// The outbox of a Telemetry stream.
pub type Outbox =
    tokio::sync::mpsc::Sender<Result<ferromq_protocol::grpc::TelemetryCommand, tonic::Status>>;

/// A producer's Telemetry stream. The outbox is held weakly: the stream's own task owns it, and
/// the reply stream must end when that task does (a strong copy here kept it open, and the
/// Java client's `close()` waited for it forever).
#[derive(Debug, Clone)]
struct Publisher {
    topics: Vec<String>,
    outbox: tokio::sync::mpsc::WeakSender<
        Result<ferromq_protocol::grpc::TelemetryCommand, tonic::Status>,
    >,
}

/// The table of gRPC clients.
#[derive(Debug, Default, Clone)]
pub struct GrpcClients {
    table: Arc<Mutex<Table>>,
}

/// Holds one Telemetry stream open; dropping it releases the stream.
#[derive(Debug)]
pub struct StreamGuard {
    table: Arc<Mutex<Table>>,
    client_id: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut table = lock(&self.table);
        table.streams = table.streams.saturating_sub(1);
        if let Some(entry) = table.clients.get_mut(&self.client_id) {
            entry.telemetry_streams = entry.telemetry_streams.saturating_sub(1);
        }
    }
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    // A panic elsewhere while holding the lock leaves counts that are still usable.
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GrpcClients {
    /// Records that `client_id` is alive now, of `client_type` (0: unchanged) in `group`.
    pub fn touch(
        &self,
        client_id: &str,
        client_type: i32,
        group: Option<&str>,
        expiry: Duration,
    ) -> Result<(), Limit> {
        let mut table = lock(&self.table);
        let entry = entry(&mut table, client_id, expiry)?;
        entry.last_seen = Some(Instant::now());
        if client_type != 0 {
            entry.client_type = client_type;
        }
        if let Some(group) = group.filter(|g| !g.is_empty()) {
            entry.group = Some(group.to_string());
        }
        Ok(())
    }

    /// Opens a Telemetry stream for `client_id`, within the limits.
    pub fn open_stream(&self, client_id: &str, expiry: Duration) -> Result<StreamGuard, Limit> {
        let mut table = lock(&self.table);
        if table.streams >= TELEMETRY_STREAMS_MAX {
            return Err(Limit::Streams);
        }
        let entry = entry(&mut table, client_id, expiry)?;
        if entry.telemetry_streams >= TELEMETRY_STREAMS_PER_CLIENT_MAX {
            return Err(Limit::StreamsPerClient);
        }
        entry.telemetry_streams += 1;
        entry.last_seen = Some(Instant::now());
        table.streams += 1;
        Ok(StreamGuard {
            table: self.table.clone(),
            client_id: client_id.to_string(),
        })
    }

    /// The count of `client_id`'s held pulls (registering the client, within the limits).
    pub fn held_pulls(&self, client_id: &str, expiry: Duration) -> Result<Arc<AtomicUsize>, Limit> {
        let mut table = lock(&self.table);
        let entry = entry(&mut table, client_id, expiry)?;
        entry.last_seen = Some(Instant::now());
        Ok(entry.held_pulls.clone())
    }

    /// Drops `client_id`'s registration (NotifyClientTermination); its open streams stay
    /// counted until they close. Returns whether it was known.
    pub fn remove(&self, client_id: &str) -> bool {
        let mut table = lock(&self.table);
        match table.clients.get(client_id).map(|e| e.telemetry_streams) {
            Some(0) => {
                table.publishers.remove(client_id);
                table.clients.remove(client_id).is_some()
            }
            Some(_) => {
                let entry = table.clients.get_mut(client_id).expect("present");
                entry.client_type = 0;
                entry.group = None;
                true
            }
            None => false,
        }
    }

    /// Records that `client_id`'s Telemetry stream (`outbox`) publishes `topics`.
    pub fn publishes(&self, client_id: &str, topics: Vec<String>, outbox: Outbox) {
        let mut table = lock(&self.table);
        if table.clients.contains_key(client_id) {
            let outbox = outbox.downgrade();
            table
                .publishers
                .insert(client_id.to_string(), Publisher { topics, outbox });
        }
    }

    /// The outbox of a connected producer publishing `topic`.
    pub fn publisher_of(&self, topic: &str) -> Option<Outbox> {
        let mut table = lock(&self.table);
        table.publishers.retain(|_, p| p.outbox.strong_count() > 0);
        table
            .publishers
            .values()
            .filter(|p| p.topics.iter().any(|t| t == topic))
            .find_map(|p| p.outbox.upgrade())
    }

    /// Whether `client_id` is alive: it holds a Telemetry stream, or was heard of within
    /// `expiry`.
    pub fn is_alive(&self, client_id: &str, expiry: Duration) -> bool {
        lock(&self.table).clients.get(client_id).is_some_and(|e| {
            e.telemetry_streams > 0 || e.last_seen.is_some_and(|seen| seen.elapsed() < expiry)
        })
    }

    /// What is known of `client_id`.
    pub fn get(&self, client_id: &str) -> Option<ClientEntry> {
        lock(&self.table).clients.get(client_id).cloned()
    }

    /// Telemetry streams open now.
    pub fn streams(&self) -> usize {
        lock(&self.table).streams
    }
}

/// The entry of `client_id`, made room for when the table is full by dropping clients silent
/// for longer than `expiry` that hold no stream.
fn entry<'t>(
    table: &'t mut Table,
    client_id: &str,
    expiry: Duration,
) -> Result<&'t mut ClientEntry, Limit> {
    if !table.clients.contains_key(client_id) && table.clients.len() >= GRPC_CLIENTS_MAX {
        let now = Instant::now();
        table.clients.retain(|_, e| {
            e.telemetry_streams > 0
                || e.last_seen
                    .is_some_and(|seen| now.duration_since(seen) < expiry)
        });
        let Table {
            clients,
            publishers,
            ..
        } = table;
        publishers.retain(|id, _| clients.contains_key(id));
        if table.clients.len() >= GRPC_CLIENTS_MAX {
            return Err(Limit::Clients);
        }
    }
    Ok(table.clients.entry(client_id.to_string()).or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRY: Duration = Duration::from_secs(120);

    #[test]
    fn streams_are_bounded_per_client_and_released_on_drop() {
        let clients = GrpcClients::default();
        let guards: Vec<_> = (0..TELEMETRY_STREAMS_PER_CLIENT_MAX)
            .map(|_| clients.open_stream("c1", EXPIRY).expect("within the limit"))
            .collect();
        assert_eq!(
            clients.open_stream("c1", EXPIRY).unwrap_err(),
            Limit::StreamsPerClient
        );
        let other = clients
            .open_stream("c2", EXPIRY)
            .expect("another client may open");
        assert_eq!(clients.streams(), TELEMETRY_STREAMS_PER_CLIENT_MAX + 1);
        drop(guards);
        drop(other);
        assert_eq!(clients.streams(), 0);
        assert!(clients.open_stream("c1", EXPIRY).is_ok());
    }

    #[test]
    fn touch_records_type_and_group_and_remove_drops_it() {
        let clients = GrpcClients::default();
        clients.touch("c1", 3, Some("G"), EXPIRY).unwrap();
        let entry = clients.get("c1").unwrap();
        assert_eq!((entry.client_type, entry.group.as_deref()), (3, Some("G")));
        assert!(clients.remove("c1"));
        assert!(clients.get("c1").is_none());
        assert!(!clients.remove("c1"));
    }
}
