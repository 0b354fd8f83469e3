//! Election counters and timings of one controller node (reported through
//! CONTROLLER_GET_METADATA_INFO as [`ControllerMetrics`]).

use std::collections::HashMap;
use std::time::Instant;

use ferromq_protocol::controller::ControllerMetrics;

/// Counters plus the detection time of each group waiting for a master.
#[derive(Debug, Default)]
pub struct ElectionMetrics {
    /// The counters, as reported.
    pub counters: ControllerMetrics,
    /// When the failure detector first saw each group without a live master.
    detected_at: HashMap<String, Instant>,
}

impl ElectionMetrics {
    /// The failure detector saw `broker_name` without a live master at `now` (keeps the first
    /// time of an episode).
    pub fn detected(&mut self, broker_name: &str, now: Instant) -> bool {
        let new = !self.detected_at.contains_key(broker_name);
        self.detected_at
            .entry(broker_name.to_owned())
            .or_insert(now);
        new
    }

    /// An election naming a master applied at `now`; ends the group's episode.
    pub fn elected(&mut self, broker_name: &str, unclean: bool, now: Instant) {
        if unclean {
            self.counters.elections_unclean += 1;
        } else {
            self.counters.elections_clean += 1;
        }
        if let Some(since) = self.detected_at.remove(broker_name) {
            let millis =
                u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX);
            self.counters.election_millis_last = Some(millis);
            self.counters.election_millis_max = self.counters.election_millis_max.max(millis);
        }
    }

    /// A new leader term: detection times of an older term mean nothing now.
    pub fn became_leader(&mut self) {
        self.counters.leader_terms_won += 1;
        self.detected_at.clear();
    }
}
