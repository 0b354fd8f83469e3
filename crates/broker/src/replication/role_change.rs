//! Role changes of a broker at run time: promotion to master at an epoch, following another
//! master, stepping down. Called by the controller-mode driver (`controlled`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use super::{BrokerRole, Replication};

impl Replication {
    /// Becomes master of `epoch` in `role` (SYNC_MASTER or ASYNC_MASTER). Returns where the
    /// term starts in the log.
    ///
    /// # Errors
    /// The epoch could not be recorded.
    pub async fn promote(&self, epoch: u64, role: BrokerRole) -> Result<u64, String> {
        let start = self.store().committed_end();
        self.epoch.store(epoch, Ordering::Release);
        self.set_role(role);
        Ok(start)
    }

    /// Follows `master_ha` of `epoch` as a slave.
    pub fn demote(&self, master_ha: SocketAddr, _epoch: u64) {
        self.set_role(BrokerRole::Slave);
        self.master_addr.send_replace(Some(master_ha));
    }

    /// Stops acting as master while the group has none: a slave following nobody.
    pub fn step_down(&self) {
        self.set_role(BrokerRole::Slave);
        self.master_addr.send_replace(None);
    }
}
