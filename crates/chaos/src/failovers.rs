//! The failover watch: asks the controllers (directly, not through a fault proxy) for every
//! broker group's master every [`WATCH_PERIOD`] and records an [`Op::Failover`] whenever a
//! group's master epoch rises above the highest seen, so the checker can attribute the
//! duplicates a failover causes and count failovers.
//!
//! Invariants:
//! 1. Epochs recorded per group strictly increase (the first answer is the baseline and is
//!    not a failover).
//! 2. Bounded: one controller call per group per period, each bounded by
//!    [`crate::cluster::CONTROLLER_CALL_TIMEOUT`]; the task ends when the watch is dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::controller::client::ControllerClient;

use crate::cluster::replica_info;
use crate::history::Op;
use crate::recorder::Recorder;

/// How often the controllers are asked.
pub const WATCH_PERIOD: Duration = Duration::from_millis(100);

/// The running watch; dropping it stops the task.
pub struct FailoverWatch(tokio::task::JoinHandle<()>);

impl FailoverWatch {
    /// Watches `groups`; `names` maps a registered broker address to its node name.
    pub fn spawn(
        client: Arc<ControllerClient>,
        groups: Vec<String>,
        names: BTreeMap<String, String>,
        recorder: Arc<Recorder>,
    ) -> FailoverWatch {
        FailoverWatch(tokio::spawn(async move {
            let mut epochs: BTreeMap<String, u64> = BTreeMap::new();
            loop {
                for group in &groups {
                    let Ok(info) = replica_info(&client, group).await else {
                        continue;
                    };
                    let Some(address) = info.master_address else {
                        continue;
                    };
                    let seen = epochs.entry(group.clone()).or_insert(info.master_epoch);
                    if info.master_epoch > *seen {
                        *seen = info.master_epoch;
                        recorder.record(Op::Failover {
                            group: group.clone(),
                            master: names.get(&address).cloned().unwrap_or(address),
                            epoch: info.master_epoch,
                        });
                    }
                }
                tokio::time::sleep(WATCH_PERIOD).await;
            }
        }))
    }
}

impl Drop for FailoverWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}
