//! What the leader last heard from each broker (BROKER_HEARTBEAT, 904). Kept in memory on
//! the leader only, never in the Raft log: liveness is a fact about the leader's clock.
//!
//! Invariant: a member counts as heard no earlier than when this node became leader (the
//! grace period), so a new leader never declares a master dead before it had a full timeout
//! to hear from it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::election::Candidate;
use crate::state::GroupRecord;

/// One member's last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// When it reached the leader.
    pub at: Instant,
    /// Newest epoch reported.
    pub epoch: u64,
    /// Log end reported.
    pub max_offset: u64,
    /// Confirm offset reported.
    pub confirm_offset: u64,
    /// `electionPriority` reported.
    pub election_priority: u32,
}

/// Heartbeats by (broker name, broker id).
#[derive(Debug)]
pub struct Liveness {
    heard: HashMap<(String, u64), Heard>,
    /// When this node last became leader; every member counts as heard then.
    grace_from: Instant,
    timeout: Duration,
}

impl Liveness {
    /// An empty table with the given dead-after timeout.
    pub fn new(timeout: Duration, now: Instant) -> Liveness {
        Liveness {
            heard: HashMap::new(),
            grace_from: now,
            timeout,
        }
    }

    /// This node just became leader: forget what an older term heard and grant every
    /// member a full timeout from `now`.
    pub fn became_leader(&mut self, now: Instant) {
        self.heard.clear();
        self.grace_from = now;
    }

    /// Records a heartbeat (or a registration, which proves the broker alive too).
    pub fn record(&mut self, broker_name: &str, broker_id: u64, heard: Heard) {
        self.heard
            .insert((broker_name.to_owned(), broker_id), heard);
    }

    /// The last heartbeat of a member, if one reached this leader.
    pub fn get(&self, broker_name: &str, broker_id: u64) -> Option<&Heard> {
        self.heard.get(&(broker_name.to_owned(), broker_id))
    }

    /// When the member last counted as heard (heartbeat or grace start).
    fn last_heard(&self, broker_name: &str, broker_id: u64) -> Instant {
        match self.get(broker_name, broker_id) {
            Some(heard) => heard.at.max(self.grace_from),
            None => self.grace_from,
        }
    }

    /// Whether the member was heard within the timeout before `now`.
    pub fn is_alive(&self, broker_name: &str, broker_id: u64, now: Instant) -> bool {
        now.saturating_duration_since(self.last_heard(broker_name, broker_id)) <= self.timeout
    }

    /// One election candidate per member of `group`.
    pub fn candidates(&self, group: &GroupRecord, now: Instant) -> Vec<Candidate> {
        group
            .members
            .values()
            .map(|member| {
                let heard = self.get(&group.broker_name, member.broker_id);
                Candidate {
                    broker_id: member.broker_id,
                    alive: self.is_alive(&group.broker_name, member.broker_id, now),
                    epoch: heard.map_or(0, |h| h.epoch),
                    max_offset: heard.map_or(0, |h| h.max_offset),
                    election_priority: heard
                        .map_or(member.election_priority, |h| h.election_priority),
                }
            })
            .collect()
    }

    /// Forgets members no longer in the state (cleaned).
    pub fn forget(&mut self, broker_name: &str, broker_id: u64) {
        self.heard.remove(&(broker_name.to_owned(), broker_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_leader_grants_every_member_a_full_timeout() {
        let start = Instant::now();
        let timeout = Duration::from_millis(1000);
        let mut table = Liveness::new(timeout, start);
        let heard = Heard {
            at: start,
            epoch: 1,
            max_offset: 0,
            confirm_offset: 0,
            election_priority: 0,
        };
        table.record("b", 1, heard);
        assert!(table.is_alive("b", 1, start + timeout));
        assert!(!table.is_alive("b", 1, start + timeout + Duration::from_millis(1)));
        assert!(!table.is_alive("b", 2, start + timeout * 2));
        let leader_at = start + timeout * 5;
        table.became_leader(leader_at);
        assert!(table.is_alive("b", 2, leader_at + timeout));
        assert!(!table.is_alive("b", 2, leader_at + timeout * 2));
    }
}
