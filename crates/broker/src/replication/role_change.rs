//! Role changes the controller-mode driver (`controlled`) needs besides
//! [`Replication::promote`] and [`Replication::demote`]: stepping down while the group has
//! no master, and exposing the whole log before a promotion. (A broker never resumes the
//! master role in an epoch it led before a restart: it asks for a new term,
//! `controlled::RoleAction::Renew`.)

use super::{BrokerRole, Replication};

impl Replication {
    /// Stops acting as master while the group has none: a slave following nobody. The
    /// dispatch cap stays where it is (nothing new becomes visible) until a master's
    /// watermark arrives.
    pub fn step_down(&self) {
        self.freeze_bound();
        self.role.send_replace(BrokerRole::Slave);
        self.master_addr.send_replace(None);
        tracing::warn!("stepped down: the controller names no master");
    }

    /// Caps dispatch at what consumers can see now (a broker leaving the master role exposes
    /// nothing new until a master's watermark arrives).
    pub(super) fn freeze_bound(&self) {
        let visible = self.store.stats().dispatched_end;
        let bound = self
            .store
            .replication_bound()
            .map_or(visible, |bound| bound.min(visible));
        self.store.set_replication_bound(Some(bound));
    }

    /// Before a promotion: lets the dispatcher expose this replica's whole log and waits
    /// (at most `bound`) until it has, so the new master answers offset queries with every
    /// commit its log holds (never an older offset, offset pitfall R1) and adopts the newest
    /// catalog record before it publishes its own. The controller elected this broker, so its
    /// log is the group's from here on.
    pub async fn expose_whole_log(&self, bound: std::time::Duration) -> u64 {
        let end = self.store.committed_end();
        self.store.set_replication_bound(Some(end));
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let dispatched = self.store.stats().dispatched_end;
            if dispatched >= end || tokio::time::Instant::now() >= deadline {
                return dispatched;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}
