//! State for the replicated-cluster rules, kept per queue and updated in O(1) (amortised) per
//! event: the K5 watermark floor, the K4 acknowledgement-order window, and failovers with
//! their K6 duplicate bounds.

use std::collections::HashMap;

use super::report::FloorSource;
use super::scan::QueueIndex;

/// A running maximum that can be read as it stood at the observer's reference point.
///
/// Every raise is stamped with its *epoch*: the number of `Observe` events recorded before
/// it. An observation that had `k` observations before it may only count raises of epochs
/// below `k` (recorded before the previous observation, so certainly before this one's reads
/// were sent): [`Floor::at`] answers that without keeping every raise.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Floor {
    /// The epoch of the latest raise.
    epoch: u64,
    /// The maximum over raises of epochs below `epoch`.
    before: (u64, FloorSource),
    /// The maximum over all raises.
    latest: (u64, FloorSource),
}

impl Floor {
    /// Raises the floor to `value` (if higher) in `epoch` (never below an earlier raise's).
    pub fn raise(&mut self, epoch: u64, value: u64, source: FloorSource) {
        if epoch > self.epoch {
            self.before = self.latest;
            self.epoch = epoch;
        }
        if value > self.latest.0 {
            self.latest = (value, source);
        }
    }

    /// The maximum over raises of epochs below `epoch` (`epoch` ≥ every raise's epoch).
    pub fn at(&self, epoch: u64) -> (u64, FloorSource) {
        if self.epoch < epoch {
            self.latest
        } else {
            self.before
        }
    }

    /// The maximum over all raises.
    pub fn latest(&self) -> u64 {
        self.latest.0
    }
}

/// K5 watermark state of one queue.
#[derive(Debug, Default)]
pub(super) struct Watermark {
    /// What the max offset must reach: delivered offsets + 1, acknowledged commits and
    /// baselines, since the last master-log kill (async mode; the whole run in sync mode).
    pub floor: Floor,
    /// The master-log kill `floor` started after (async mode).
    pub kill_seen: Option<usize>,
    /// Async mode: the floor from before the kill(s), lowered to each excused observation.
    pub before_kill: u64,
}

impl Watermark {
    /// Starts a new floor when a master-log kill (`kill`, async mode only) was recorded since
    /// the floor started: what consumers saw before it may have been lost with the master.
    pub fn settle_kill(&mut self, kill: Option<usize>) {
        if kill != self.kill_seen {
            self.before_kill = self.before_kill.max(self.floor.latest());
            self.floor = Floor::default();
            self.kill_seen = kill;
        }
    }
}

/// K4 acknowledgement order for one queue: the `CommitOk`s recorded since the last event that
/// excuses a lower commit, as (acknowledgement time, highest offset so far) in history order.
#[derive(Debug, Default)]
pub(super) struct AckOrder {
    /// Event index at which the window started (after the last excuse).
    since: usize,
    /// Acknowledgement times are made non-decreasing (a time below an earlier one is raised to
    /// it, which can only hide a violation, never invent one), offsets are a running maximum.
    acks: Vec<(u64, u64)>,
}

impl AckOrder {
    /// Empties the window when `excuse` (the index of the latest excusing event) is after its
    /// start; `index` is the current event.
    pub fn settle(&mut self, excuse: Option<usize>, index: usize) {
        if excuse.is_some_and(|excuse| excuse > self.since) {
            self.acks.clear();
            self.since = index;
        }
    }

    /// The highest offset acknowledged strictly before `sent_ms`, within the window.
    pub fn highest_before(&self, sent_ms: u64) -> Option<u64> {
        let count = self.acks.partition_point(|(at, _)| *at < sent_ms);
        count.checked_sub(1).map(|last| self.acks[last].1)
    }

    /// Adds a `CommitOk` of `offset` acknowledged at `at_ms`.
    pub fn push(&mut self, at_ms: u64, offset: u64) {
        match self.acks.last_mut() {
            Some((last_at, last_max)) if at_ms <= *last_at => *last_max = (*last_max).max(offset),
            Some((_, last_max)) => {
                let max = (*last_max).max(offset);
                self.acks.push((at_ms, max));
            }
            None => self.acks.push((at_ms, offset)),
        }
    }
}

/// One `Failover` and the duplicates attributed to it.
#[derive(Debug)]
pub(super) struct FailoverState {
    pub group: String,
    pub master: String,
    pub epoch: u64,
    pub at_ms: u64,
    /// Per queue of the group at the failover: (highest delivered offset, last committed).
    pub snapshot: HashMap<QueueIndex, (Option<u64>, Option<u64>)>,
    /// Duplicates attributed to this failover per queue.
    pub duplicates: HashMap<QueueIndex, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_reads_the_maximum_before_the_reference() {
        let mut floor = Floor::default();
        assert_eq!(floor.at(0).0, 0);
        floor.raise(0, 3, FloorSource::Delivered);
        // Still in epoch 0: an observation with no observation before it counts nothing.
        assert_eq!(floor.at(0).0, 0);
        assert_eq!(floor.at(1), (3, FloorSource::Delivered));
        floor.raise(1, 7, FloorSource::Committed);
        assert_eq!(floor.at(1), (3, FloorSource::Delivered));
        assert_eq!(floor.at(2), (7, FloorSource::Committed));
        floor.raise(3, 5, FloorSource::Delivered);
        assert_eq!(floor.at(3), (7, FloorSource::Committed));
        assert_eq!(floor.latest(), 7);
    }

    #[test]
    fn ack_order_window_answers_by_time_and_empties_on_excuses() {
        let mut order = AckOrder::default();
        order.push(10, 4);
        order.push(10, 6);
        order.push(12, 5);
        order.push(11, 9);
        assert_eq!(order.highest_before(10), None);
        assert_eq!(order.highest_before(11), Some(6));
        // The ack recorded at 11 after one at 12 counts from 12 on.
        assert_eq!(order.highest_before(13), Some(9));
        order.settle(Some(0), 5);
        assert_eq!(order.highest_before(13), Some(9));
        order.settle(Some(7), 8);
        assert_eq!(order.highest_before(13), None);
    }
}
