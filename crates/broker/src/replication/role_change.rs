//! Role changes the controller-mode driver (`controlled`) needs besides
//! [`Replication::promote`] and [`Replication::demote`]: taking the master role back in the
//! epoch this broker already leads (a restart the controller did not notice), and stepping
//! down while the group has no master.

use super::{BrokerRole, Replication, RoleChangeError};

impl Replication {
    /// Acts as master again in the epoch its epoch file already ends with: the controller
    /// still names this broker master of that epoch (it restarted within the controller's
    /// heartbeat timeout), so no new epoch begins and the log continues as it is.
    ///
    /// # Errors
    /// `flavor` is not a master role.
    pub fn resume_master(&self, flavor: BrokerRole) -> Result<u64, RoleChangeError> {
        if !flavor.is_master() {
            return Err(RoleChangeError::NotAMasterRole(flavor.as_str()));
        }
        self.master_addr.send_replace(None);
        self.role.send_replace(flavor);
        self.note_master_since();
        self.apply_bound();
        let epoch = self.epoch();
        tracing::warn!(
            epoch,
            role = flavor.as_str(),
            "master again in its own epoch"
        );
        Ok(self.store.committed_end())
    }

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
