//! Client sessions: who a request comes from, by **client id** — stable across reconnects for
//! every real RocketMQ client (`ip@instance`) — with the connection only as its transport.
//!
//! - A connection is bound to the client id of its heartbeats; a request on a connection that
//!   never sent one is from an unidentified caller (`client_id == None`).
//! - The core keys fences and "is this a registered consumer" by client id, so a reconnect
//!   changes nothing but the transport.
//! - For the offline-reset rule (`offsets`) the sessions remember when each group last lost
//!   its last member, and when the broker started: a group is "offline" only after it has had
//!   no member for a whole channel-expiry period of this broker's life.
//!
//! Bounds: one binding per open connection (dropped when it closes); at most
//! [`GROUPS_TRACKED_MAX`] groups' emptying times (the oldest forgotten first, which only
//! makes the offline rule more conservative: a forgotten group counts from its new emptying).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::authorisation::Principal;

/// Most groups whose last-member-left time is remembered.
pub const GROUPS_TRACKED_MAX: usize = 65_536;

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The transport's connection id (for logs and held-pull accounting).
    pub connection: u64,
    /// The client id the connection identified with, if it did.
    pub client_id: Option<String>,
    /// With ACL on: the access key this request was granted to (per request, not per
    /// connection: each request is signed on its own). Recorded on the offset records the
    /// request writes, so the log says which account moved an offset.
    pub access_key: Option<String>,
}

impl Caller {
    /// The same caller, acting for the account `principal` (the core's ACL decision on the
    /// request it sent).
    pub fn granted(mut self, principal: &Principal) -> Caller {
        self.access_key = principal.access_key.clone();
        self
    }

    /// The client id, or a stand-in naming the connection (for records and logs).
    pub fn label(&self) -> String {
        match &self.client_id {
            Some(id) => id.clone(),
            None => format!("unidentified-connection-{}", self.connection),
        }
    }
}

/// The sessions of a running broker.
#[derive(Debug)]
pub struct Sessions {
    started: Instant,
    bound: Mutex<HashMap<u64, String>>,
    emptied: Mutex<HashMap<String, Instant>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(Instant::now())
    }
}

impl Sessions {
    /// Sessions of a broker started at `started`.
    pub fn new(started: Instant) -> Sessions {
        Sessions {
            started,
            bound: Mutex::new(HashMap::new()),
            emptied: Mutex::new(HashMap::new()),
        }
    }

    /// The connection identified as `client_id` (a heartbeat).
    pub fn bind(&self, connection: u64, client_id: &str) {
        let mut bound = self.bound.lock().expect("sessions lock");
        if bound.get(&connection).map(|v| v.as_str()) != Some(client_id) {
            bound.insert(connection, client_id.to_string());
        }
    }

    /// Who is calling on `connection`.
    pub fn caller(&self, connection: u64) -> Caller {
        Caller {
            connection,
            client_id: self
                .bound
                .lock()
                .expect("sessions lock")
                .get(&connection)
                .cloned(),
            access_key: None,
        }
    }

    /// The connection closed: its binding goes (the client's fences stay).
    pub fn connection_closed(&self, connection: u64) {
        self.bound
            .lock()
            .expect("sessions lock")
            .remove(&connection);
    }

    /// `group` has no member any more (at `now`).
    pub fn group_emptied(&self, group: &str, now: Instant) {
        let mut emptied = self.emptied.lock().expect("sessions lock");
        if emptied.len() >= GROUPS_TRACKED_MAX && !emptied.contains_key(group) {
            if let Some(oldest) = emptied
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(g, _)| g.clone())
            {
                emptied.remove(&oldest);
            }
        }
        emptied.insert(group.to_string(), now);
    }

    /// How long a group without members has had none, as far as this broker knows: since it
    /// lost its last member, or since the broker started (before that, it cannot know).
    pub fn memberless_for(&self, group: &str, now: Instant) -> Duration {
        let since = self
            .emptied
            .lock()
            .expect("sessions lock")
            .get(group)
            .copied()
            .map_or(self.started, |at| at.max(self.started));
        now.saturating_duration_since(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_its_clients_until_it_closes() {
        let sessions = Sessions::default();
        assert_eq!(sessions.caller(1).client_id, None);
        sessions.bind(1, "10.0.0.1@a");
        assert_eq!(sessions.caller(1).client_id.as_deref(), Some("10.0.0.1@a"));
        sessions.bind(2, "10.0.0.1@a");
        sessions.connection_closed(1);
        assert_eq!(sessions.caller(1).client_id, None);
        assert_eq!(sessions.caller(2).client_id.as_deref(), Some("10.0.0.1@a"));
    }

    #[test]
    fn a_group_is_memberless_since_the_later_of_start_and_its_last_member_leaving() {
        let start = Instant::now();
        let sessions = Sessions::new(start);
        let later = start + Duration::from_secs(100);
        assert_eq!(
            sessions.memberless_for("G", later),
            Duration::from_secs(100)
        );
        sessions.group_emptied("G", start + Duration::from_secs(90));
        assert_eq!(sessions.memberless_for("G", later), Duration::from_secs(10));
        assert_eq!(
            sessions.memberless_for("H", later),
            Duration::from_secs(100)
        );
    }
}
