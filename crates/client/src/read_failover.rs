//! Where a pull goes: the master of the queue's broker group, or, while that master is
//! unreachable, the group's first slave (lowest broker id), as Java's client reads from a
//! slave when the master is down.
//!
//! Invariants:
//! - only pulls consult this table; commits, offset queries and sends always go to the master
//!   (see `route`), so a master outage fails them with a typed error instead of moving them
//!   to a slave;
//! - a master is marked down only by a transport failure (cannot connect, connection closed,
//!   timeout), never by a broker's error code: a master that answers is reachable;
//! - a master marked down is probed again by the first pull after [`MASTER_RETRY`]; any
//!   answer from it clears the mark, so reads return to the master within that bound once it
//!   is back;
//! - a master marked down stops counting as soon as the route names another master for the
//!   group (failover: id 0 at a new address): pulls go to the new master at once, not after
//!   the back-off;
//! - the table only grows with broker group names from routes, and every lock is held for
//!   a map operation only.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long pulls of a broker group stay on its slave after its master failed, before the
/// master is tried again.
pub const MASTER_RETRY: Duration = Duration::from_secs(1);

/// Per broker group: when its master last failed with a transport error, and which master.
#[derive(Debug)]
pub(crate) struct ReadFailover {
    down: Mutex<HashMap<String, (Instant, SocketAddr)>>,
    retry_after: Duration,
}

/// What the table says about one group's master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MasterState {
    /// Not marked down: pull from the master.
    Up,
    /// Marked down longer than the back-off ago: probe the master, fall back to a slave.
    Probe,
    /// Marked down within the back-off: pull from a slave if there is one.
    Down,
}

impl Default for ReadFailover {
    fn default() -> Self {
        Self::new(MASTER_RETRY)
    }
}

impl ReadFailover {
    /// A table whose masters are retried `retry_after` after their last failure.
    pub(crate) fn new(retry_after: Duration) -> Self {
        ReadFailover {
            down: Mutex::new(HashMap::new()),
            retry_after,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, SocketAddr)>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state of `broker_name`'s master now, `master` being the one the newest route names
    /// (`None` when it names none). A mark left by another master is cleared: the group has
    /// a new master (failover), which has not failed.
    pub(crate) fn state(&self, broker_name: &str, master: Option<SocketAddr>) -> MasterState {
        let mut down = self.lock();
        match down.get(broker_name).copied() {
            None => MasterState::Up,
            Some((_, failed)) if master.is_some_and(|m| m != failed) => {
                down.remove(broker_name);
                tracing::info!(broker = broker_name, old_master = %failed, new_master = ?master,
                    "the route names a new master; pulls go to it");
                MasterState::Up
            }
            Some((at, _)) if at.elapsed() >= self.retry_after => MasterState::Probe,
            Some(_) => MasterState::Down,
        }
    }

    /// Records a transport failure of `broker_name`'s master `addr`.
    pub(crate) fn master_failed(&self, broker_name: &str, addr: SocketAddr) {
        let first = self
            .lock()
            .insert(broker_name.to_string(), (Instant::now(), addr))
            .is_none();
        if first {
            tracing::warn!(broker = broker_name, retry_after = ?self.retry_after,
                "master unreachable; pulls go to a slave until it answers again");
        }
    }

    /// Records an answer from `broker_name`'s master.
    pub(crate) fn master_answered(&self, broker_name: &str) {
        if self.lock().remove(broker_name).is_some() {
            tracing::info!(
                broker = broker_name,
                "master reachable again; pulls return to it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_master_is_down_then_probed_then_up_when_it_answers() {
        let m: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let t = ReadFailover::new(Duration::from_millis(50));
        assert_eq!(t.state("a", Some(m)), MasterState::Up);
        t.master_failed("a", m);
        assert_eq!(t.state("a", Some(m)), MasterState::Down);
        assert_eq!(t.state("a", None), MasterState::Down);
        assert_eq!(t.state("b", Some(m)), MasterState::Up);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(t.state("a", Some(m)), MasterState::Probe);
        t.master_failed("a", m);
        assert_eq!(t.state("a", Some(m)), MasterState::Down);
        t.master_answered("a");
        assert_eq!(t.state("a", Some(m)), MasterState::Up);
    }

    #[test]
    fn a_new_master_in_the_route_clears_the_mark_at_once() {
        let old: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let new: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let t = ReadFailover::new(Duration::from_secs(60));
        t.master_failed("a", old);
        assert_eq!(t.state("a", Some(old)), MasterState::Down);
        assert_eq!(t.state("a", Some(new)), MasterState::Up);
        // Cleared for good: the old master coming back in a route is not down either.
        assert_eq!(t.state("a", Some(old)), MasterState::Up);
    }
}
