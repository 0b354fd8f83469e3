//! A master's lease from the controller (controller mode).
//!
//! A master in controller mode may acknowledge a write only while it holds a lease: the
//! controller leader confirmed (with a Raft quorum, after the heartbeat arrived) that the
//! broker was a member of its group at the time of a heartbeat, and granted `lease_millis`
//! from when the broker SENT that heartbeat. The controller declares a silent broker dead only
//! after `controllerHeartBeatTimeoutMills`, which it keeps longer than the lease, so by the
//! time a new master can be elected every lease of the old one has run out: an isolated
//! master stops acknowledging before anyone else starts (offset pitfall R6, issue item 2).
//!
//! Pure: the clock is an argument, so the simulation drives this code.

use std::time::{Duration, Instant};

/// The lease state of one broker.
#[derive(Debug, Clone, Default)]
pub struct Lease {
    /// When the lease runs out (`None`: never granted).
    valid_until: Option<Instant>,
    /// How many times the lease ran out while it was needed (counted by the caller's checks).
    expirations_seen: u64,
}

impl Lease {
    /// A heartbeat sent at `sent_at` was confirmed with a lease of `lease`. Only ever extends:
    /// a late reply to an older heartbeat never shortens the lease a newer one granted.
    pub fn renew(&mut self, sent_at: Instant, lease: Duration) {
        let until = sent_at + lease;
        if self.valid_until.is_none_or(|current| current < until) {
            self.valid_until = Some(until);
        }
    }

    /// Whether the lease holds at `now`.
    pub fn valid(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }

    /// How long the lease still holds at `now` (zero when it does not).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.valid_until
            .map(|until| until.saturating_duration_since(now))
            .unwrap_or(Duration::ZERO)
    }

    /// Drops the lease (a role change: a new term starts with a new lease).
    pub fn revoke(&mut self) {
        self.valid_until = None;
    }

    /// Notes that a check found the lease expired; returns the count so far.
    pub fn note_expired(&mut self) -> u64 {
        self.expirations_seen += 1;
        self.expirations_seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_the_heartbeat_send_time_and_only_extends() {
        let t0 = Instant::now();
        let mut lease = Lease::default();
        assert!(!lease.valid(t0), "never granted");
        lease.renew(t0, Duration::from_millis(600));
        assert!(lease.valid(t0 + Duration::from_millis(599)));
        assert!(!lease.valid(t0 + Duration::from_millis(600)));
        // A late reply to an older heartbeat does not shorten it.
        lease.renew(t0 + Duration::from_millis(200), Duration::from_millis(600));
        lease.renew(t0, Duration::from_millis(600));
        assert!(lease.valid(t0 + Duration::from_millis(799)));
        assert_eq!(
            lease.remaining(t0 + Duration::from_millis(700)),
            Duration::from_millis(100)
        );
        lease.revoke();
        assert!(!lease.valid(t0 + Duration::from_millis(1)));
        assert_eq!(lease.remaining(t0), Duration::ZERO);
    }
}
